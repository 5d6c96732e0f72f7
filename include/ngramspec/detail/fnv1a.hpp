#pragma once

#include <cstdint>
#include <span>

#include "ngramspec/token.hpp"

namespace ngramspec::detail {

inline constexpr std::uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ULL;
inline constexpr std::uint64_t kFnvPrime = 0x100000001b3ULL;

/// Feeds one token to a 64-bit FNV-1a state, as its four little-endian bytes.
[[nodiscard]] constexpr std::uint64_t fnv1a_step(std::uint64_t hash, Token token) noexcept {
  hash = (hash ^ (token & 0xffU)) * kFnvPrime;
  hash = (hash ^ ((token >> 8) & 0xffU)) * kFnvPrime;
  hash = (hash ^ ((token >> 16) & 0xffU)) * kFnvPrime;
  return (hash ^ (token >> 24)) * kFnvPrime;
}

/// 64-bit FNV-1a over the tokens in order. Order matters: (a, b) and (b, a) hash apart,
/// unlike the XOR-combined hashes some n-gram caches use.
[[nodiscard]] constexpr std::uint64_t fnv1a(std::span<const Token> tokens) noexcept {
  std::uint64_t hash = kFnvOffsetBasis;
  for (const Token token : tokens) hash = fnv1a_step(hash, token);
  return hash;
}

}  // namespace ngramspec::detail
