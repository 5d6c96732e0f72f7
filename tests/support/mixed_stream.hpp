#pragma once

#include <cstddef>
#include <cstdint>
#include <random>

#include "ngramspec/token.hpp"

namespace ngramspec::test {

// A stream that changes character every few thousand tokens: fresh tokens from a large vocabulary
// (every context new), a short cycle (one context, one continuation), and a tiny vocabulary drawn
// at random (few contexts, many continuations each, and their counts rising and falling as the
// window slides).
class MixedStream {
 public:
  explicit MixedStream(std::uint64_t seed) : rng_(seed) {}
  Token next() {
    if (left_ == 0) {
      regime_ = std::uniform_int_distribution<int>(0, 2)(rng_);
      left_ = std::uniform_int_distribution<std::size_t>(500, 8000)(rng_);
      period_ = std::uniform_int_distribution<std::size_t>(2, 40)(rng_);
    }
    --left_;
    ++position_;
    switch (regime_) {
      case 0: return std::uniform_int_distribution<Token>(0, 31999)(rng_);
      case 1: return static_cast<Token>(position_ % period_);
      default: return std::uniform_int_distribution<Token>(0, 5)(rng_);
    }
  }

 private:
  std::mt19937_64 rng_;
  int regime_ = 0;
  std::size_t left_ = 0;
  std::size_t period_ = 2;
  std::size_t position_ = 0;
};

}  // namespace ngramspec::test
