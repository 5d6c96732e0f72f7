#pragma once

#include <cstdint>

namespace ngramspec {

/// A token id as the model's vocabulary numbers it.
using Token = std::uint32_t;

}  // namespace ngramspec
