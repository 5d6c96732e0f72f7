#pragma once

#include <cstddef>
#include <cstdint>

namespace ngramspec {

namespace detail {

// SplitMix64's finalizer: a bijection of 64-bit values with full avalanche.
[[nodiscard]] constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace detail

/// 64 random bits for absolute position `position` of a sequence sampled with `seed`: a
/// counter-based generator, a pure function of (seed, position) with no state. For a fixed
/// seed it is a bijection of the position, so no two positions of one sequence share bits.
[[nodiscard]] constexpr std::uint64_t position_bits(std::uint64_t seed, std::uint64_t position) noexcept {
  // Distinct odd constants keep (seed, position) and (position, seed) apart.
  const std::uint64_t key = detail::mix64(seed * 0x9e3779b97f4a7c15ULL + 0xd1b54a32d192ed03ULL);
  return detail::mix64(key ^ detail::mix64(position * 0xa0761d6478bd642fULL + 0x8bb84b93962eacc9ULL));
}

/// The uniform draw in [0, 1) that chooses the token at absolute `position` (the prompt's
/// first token is position 0): the top 53 bits of position_bits, so every value is exact.
/// Because it depends on nothing else, what was drafted or rolled back cannot change it.
[[nodiscard]] constexpr double position_uniform(std::uint64_t seed, std::uint64_t position) noexcept {
  return static_cast<double>(position_bits(seed, position) >> 11) * 0x1.0p-53;
}

/// Further independent draws at one position, numbered by `stream` (stream 0 is
/// position_uniform(seed, position) itself): rejection sampling draws one per draft it tests
/// and one for the token it resamples, and a drafter that samples its drafts draws from
/// streams of its own, so that no draw decides two things.
[[nodiscard]] constexpr double position_uniform(std::uint64_t seed, std::uint64_t position,
                                                std::uint64_t stream) noexcept {
  if (stream == 0) return position_uniform(seed, position);
  const std::uint64_t bits = detail::mix64(position_bits(seed, position) ^ detail::mix64(stream * 0xe7037ed1a0b428dbULL));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

}  // namespace ngramspec
