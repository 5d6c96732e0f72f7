#pragma once

// What the decoding fuzzers share: a greedy model's rule chosen by the input, and a script of
// the input's bytes that the test drafters read in a loop.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "fuzz_input.hpp"
#include "support/mock_models.hpp"

namespace ngramspec::test {

/// A greedy rule over `vocab` tokens as the input chooses: a table, a hash of the last 1-3
/// tokens (with or without the position), a copy of the token `period` back, or induction.
[[nodiscard]] inline NextTokenRule fuzz_rule(FuzzInput& in, Token vocab) {
  switch (in.byte() % 4) {
    case 0: {
      TableRule r;
      r.otherwise = static_cast<Token>(in.byte() % vocab);
      for (Token t = 0; t < vocab; ++t) {
        const std::uint8_t b = in.byte();
        if ((b & 1) != 0) r.table[t] = static_cast<Token>((b >> 1) % vocab);
      }
      return r;
    }
    case 1: return HashRule{vocab, static_cast<std::size_t>(in.in_range(1, 3)), in.in_range(0, UINT64_MAX), in.flag()};
    case 2: return RepeatRule{static_cast<std::size_t>(in.in_range(1, 12)), vocab};
    default: return InductionRule{vocab};
  }
}

/// The input's remaining bytes, read in a loop (a drafter's script: it never runs out).
class ByteScript {
 public:
  explicit ByteScript(std::vector<std::uint8_t> bytes) : bytes_(std::move(bytes)) {}
  [[nodiscard]] bool empty() const noexcept { return bytes_.empty(); }
  /// The next byte, from the start again after the last (the script must not be empty).
  std::uint8_t next() const noexcept {
    const std::uint8_t b = bytes_[cursor_];
    cursor_ = (cursor_ + 1) % bytes_.size();
    return b;
  }

 private:
  std::vector<std::uint8_t> bytes_;
  mutable std::size_t cursor_ = 0;
};

}  // namespace ngramspec::test
