#pragma once

// What a llama.cpp verify pass costs, measured through the engine itself: the curve
// BatchSpeculator sizes drafts against, and the tables ngramspec-llama --curve prints.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <span>
#include <vector>

#include <ngramspec/verify_cost.hpp>

#include "llama_engine.hpp"

namespace ngramspec::llama_cpp {

/// Fills the first `sequences` sequences with `context` tokens each, then times passes through
/// `run(pass_tokens)` that add `pass_tokens` tokens spread evenly over those sequences (one more
/// to the first ones when it does not divide) after that context, with logits for every token,
/// and cut them again. Leaves every sequence empty.
class PassTimer {
 public:
  PassTimer(Engine& engine, std::size_t sequences, std::size_t most_tokens_per_sequence)
      : engine_(&engine), sequences_(sequences) {
    const std::size_t room = engine.context() > most_tokens_per_sequence + 1 ? engine.context() - most_tokens_per_sequence - 1 : 0;
    context_ = std::min<std::size_t>(256, room);
    std::vector<Token> filler(context_);
    // Any tokens do for timing; keep them inside the vocabulary.
    for (std::size_t i = 0; i < filler.size(); ++i) filler[i] = static_cast<Token>((i * 7 + 3) % engine.vocab_size());
    tokens_.assign(most_tokens_per_sequence, static_cast<Token>(1 % engine.vocab_size()));
    for (std::size_t s = 0; s < sequences_; ++s) {
      engine.clear_sequence(s);
      if (context_ == 0) continue;
      engine.clear_pass();
      engine.add(s, 0, filler, false);
      engine.decode();
    }
  }
  ~PassTimer() {
    for (std::size_t s = 0; s < sequences_; ++s) engine_->clear_sequence(s);
  }
  PassTimer(const PassTimer&) = delete;
  PassTimer& operator=(const PassTimer&) = delete;

  /// One pass of `pass_tokens` tokens over the sequences, then cut back.
  void operator()(std::size_t pass_tokens) {
    engine_->clear_pass();
    for (std::size_t s = 0; s < sequences_; ++s) {
      const std::size_t n = pass_tokens / sequences_ + (s < pass_tokens % sequences_ ? 1 : 0);
      if (n != 0) engine_->add(s, context_, std::span<const Token>(tokens_).first(n), true);
    }
    engine_->decode();
    for (std::size_t s = 0; s < sequences_; ++s) engine_->truncate(s, context_);
  }
  /// Tokens each sequence holds before a timed pass.
  [[nodiscard]] std::size_t context() const noexcept { return context_; }

 private:
  Engine* engine_;
  std::size_t sequences_;
  std::size_t context_ = 0;
  std::vector<Token> tokens_;
};

/// Pass sizes worth timing up to `most` tokens: every one up to 8, then steps of about a fifth.
inline std::vector<std::size_t> cost_points(std::size_t most) {
  std::vector<std::size_t> points;
  for (std::size_t n = 1; n <= most; n = n < 8 ? n + 1 : std::max(n + 1, n * 5 / 4)) points.push_back(n);
  if (points.empty() || points.back() != most) points.push_back(most);
  return points;
}

/// The verify-cost curve of passes of up to sequences x (max_drafts + 1) tokens over
/// `sequences` sequences, normalized so that one token costs 1.
inline VerifyCost measure_pass_cost(Engine& engine, std::size_t sequences, std::size_t max_drafts,
                                    std::size_t repeats = 5) {
  PassTimer timer(engine, sequences, max_drafts + 1);
  const std::vector<std::size_t> points = cost_points(sequences * (max_drafts + 1));
  return measure_verify_cost(timer, points, repeats);
}

}  // namespace ngramspec::llama_cpp
