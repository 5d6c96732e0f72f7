#pragma once

// A drafter observing a stretch of a token stream one token at a time, for the benchmarks
// that time update(): it goes back to its prepared state (a copy, outside the timing) after
// every `span` tokens, so every timed update observes one of tokens context .. context + span.

#include <benchmark/benchmark.h>

#include <cstddef>
#include <vector>

#include "ngramspec/token.hpp"

namespace ngramspec::bench {

template <class D>
class StreamWalk {
 public:
  StreamWalk(const D& start, const std::vector<Token>& tokens, std::size_t context, std::size_t span)
      : start_(start), drafter_(start), tokens_(tokens), context_(context), span_(span), pos_(context) {}

  [[nodiscard]] D& drafter() noexcept { return drafter_; }
  void observe_next(benchmark::State& state) {
    if (pos_ == context_ + span_) {
      state.PauseTiming();
      drafter_ = start_;
      pos_ = context_;
      state.ResumeTiming();
    }
    drafter_.update(tokens_[pos_++]);
  }

 private:
  const D& start_;
  D drafter_;
  const std::vector<Token>& tokens_;
  std::size_t context_;
  std::size_t span_;
  std::size_t pos_;
};

}  // namespace ngramspec::bench
