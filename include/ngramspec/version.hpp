#pragma once

namespace ngramspec {

/// Library version; the CMake package version agrees with it.
inline constexpr int kVersionMajor = 0;
inline constexpr int kVersionMinor = 1;
inline constexpr int kVersionPatch = 0;

}  // namespace ngramspec
