#pragma once

// Decoding of fuzz input bytes into choices, shared by the fuzz targets.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

#include "ngramspec/token.hpp"

namespace ngramspec::test {

/// Reads choices off the fuzzer's bytes, front to back. Once the bytes run out every choice is its
/// lowest value, so any input, even an empty one, decodes to a valid scenario.
class FuzzInput {
 public:
  FuzzInput(const std::uint8_t* data, std::size_t size) noexcept : data_(data, size) {}

  [[nodiscard]] bool empty() const noexcept { return pos_ >= data_.size(); }
  [[nodiscard]] std::size_t remaining() const noexcept { return empty() ? 0 : data_.size() - pos_; }

  /// The next byte, 0 once exhausted.
  [[nodiscard]] std::uint8_t byte() noexcept { return empty() ? 0 : data_[pos_++]; }

  /// A value in [lo, hi] from as many bytes as the range needs.
  [[nodiscard]] std::uint64_t in_range(std::uint64_t lo, std::uint64_t hi) noexcept {
    const std::uint64_t span = hi - lo;
    if (span == 0) return lo;
    std::uint64_t value = 0;
    for (std::uint64_t left = span; left != 0; left >>= 8) value = (value << 8) | byte();
    return span == UINT64_MAX ? value : lo + value % (span + 1);
  }

  [[nodiscard]] bool flag() noexcept { return (byte() & 1) != 0; }

  /// The bytes not read yet (which stay unread).
  [[nodiscard]] std::span<const std::uint8_t> rest() const noexcept {
    return empty() ? std::span<const std::uint8_t>() : data_.subspan(pos_);
  }

 private:
  std::span<const std::uint8_t> data_;
  std::size_t pos_ = 0;
};

/// A few token ids for a script to draw from, as the input chooses: ids counting up from 0,
/// ids counting down from 0xFFFFFFFF (at most `max_small` of either), or up to 32 scattered
/// 32-bit ids, 0xFFFFFFFF first. Few distinct ids make n-grams recur, so matches grow long.
[[nodiscard]] inline std::vector<Token> fuzz_alphabet(FuzzInput& in, std::size_t max_small) {
  const std::size_t mode = in.in_range(0, 2);
  std::vector<Token> alphabet(in.in_range(1, mode == 2 ? 32 : max_small));
  for (std::size_t i = 0; i < alphabet.size(); ++i) {
    switch (mode) {
      case 0: alphabet[i] = static_cast<Token>(i); break;
      case 1: alphabet[i] = Token{0xFFFFFFFFU} - static_cast<Token>(i); break;
      default: alphabet[i] = i == 0 ? Token{0xFFFFFFFFU} : static_cast<Token>(in.in_range(0, 0xFFFFFFFFU));
    }
  }
  return alphabet;
}

/// Ends the run on a broken invariant: prints why, then traps so that libFuzzer (or the corpus
/// replay's ctest) reports a crash with the input that caused it.
[[noreturn]] inline void fuzz_fail(const char* what) noexcept {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::fflush(stderr);
  __builtin_trap();
}

}  // namespace ngramspec::test
