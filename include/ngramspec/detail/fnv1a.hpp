#pragma once

#include <cstdint>
#include <span>

#include "ngramspec/token.hpp"

namespace ngramspec::detail {

inline constexpr std::uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ULL;
inline constexpr std::uint64_t kFnvPrime = 0x100000001b3ULL;

/// Feeds one token to a 64-bit FNV-1a state, as its four little-endian bytes.
[[nodiscard]] constexpr std::uint64_t fnv1a_step(std::uint64_t hash, Token token) noexcept {
  for (int shift = 0; shift < 32; shift += 8) {
    hash ^= (token >> shift) & 0xffU;
    hash *= kFnvPrime;
  }
  return hash;
}

/// 64-bit FNV-1a over the tokens in order. Order matters: (a, b) and (b, a) hash apart,
/// unlike the XOR-combined hashes some n-gram caches use.
[[nodiscard]] constexpr std::uint64_t fnv1a(std::span<const Token> tokens) noexcept {
  std::uint64_t hash = kFnvOffsetBasis;
  for (const Token token : tokens) hash = fnv1a_step(hash, token);
  return hash;
}

/// Spreads a 64-bit key over all bits before it picks a slot: FNV-1a's low bits are weak
/// for keys that differ only in their last byte, and slots are taken from the low bits.
[[nodiscard]] constexpr std::uint64_t mix64(std::uint64_t key) noexcept {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdULL;
  key ^= key >> 33;
  key *= 0xc4ceb9fe1a85ec53ULL;
  key ^= key >> 33;
  return key;
}

}  // namespace ngramspec::detail
