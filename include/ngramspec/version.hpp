#pragma once

namespace ngramspec {

/// Library version; the CMake package version and the C ABI's NGRAMSPEC_VERSION_* (ngramspec.h) agree
/// with it.
inline constexpr int kVersionMajor = 0;
inline constexpr int kVersionMinor = 3;
inline constexpr int kVersionPatch = 0;

}  // namespace ngramspec
