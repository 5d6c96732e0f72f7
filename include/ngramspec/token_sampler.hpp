#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ngramspec/position_random.hpp"
#include "ngramspec/sampling_options.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec {

/// Chooses one token from a row of logits under SamplingOptions; SamplingModel's per-row step,
/// public for engines that sample their own batched logits (with the step API, say).
///
/// choose(logits, position) draws with position_uniform(options.seed, position), so the token
/// depends only on the row and (seed, position). With temperature > 0: weights
/// exp((logit - max) / temperature) in double, then top-k, top-p, min-p (SamplingOptions), then
/// inverse-CDF sampling over the kept tokens in ascending id order. Temperature 0 is argmax,
/// ties to the lowest id.
///
/// A logit of -infinity is a masked token (probability 0). A NaN or +infinity logit, or a row
/// with every token masked, throws std::domain_error naming the token (and the position).
///
/// Scratch for a vocabulary of `vocab_size` tokens is allocated at construction; choose() and
/// sample() allocate nothing unless they throw. Cost per row: O(V) plus O(V log V) with top-p,
/// O(V + k log k) with top-k alone.
///
/// Thread safety: none inside (the scratch is per sampler); one sampler per thread.
class TokenSampler {
 public:
  /// Validates `options` (std::invalid_argument, see validate()) and sizes the scratch;
  /// std::invalid_argument for a vocabulary of 0 tokens or one that Token cannot number.
  TokenSampler(const SamplingOptions& options, std::size_t vocab_size) : options_(options), vocab_(vocab_size) {
    validate(options_);
    if (vocab_ == 0) throw std::invalid_argument("ngramspec: TokenSampler: the vocabulary size is 0");
    if (vocab_ - 1 > std::numeric_limits<Token>::max()) {
      throw std::invalid_argument("ngramspec: TokenSampler: vocabulary size " + std::to_string(vocab_) +
                                  " exceeds what a Token can number");
    }
    weights_.resize(vocab_);
    kept_.resize(vocab_);
  }

  /// The token at absolute `position`, chosen from `logits` (vocab_size() floats) with the
  /// draw position_uniform(options().seed, position).
  [[nodiscard]] Token choose(std::span<const float> logits, std::uint64_t position) {
    return pick(logits, position_uniform(options_.seed, position), &position);
  }

  /// The token chosen from `logits` with the uniform draw `u` in [0, 1) (ignored at
  /// temperature 0): for callers with their own source of randomness.
  [[nodiscard]] Token sample(std::span<const float> logits, double u) { return pick(logits, u, nullptr); }

  [[nodiscard]] const SamplingOptions& options() const noexcept { return options_; }
  /// Replaces the options (a new seed for a new request, say) after validating them; no allocation.
  void set_options(const SamplingOptions& options) {
    validate(options);
    options_ = options;
  }
  [[nodiscard]] std::size_t vocab_size() const noexcept { return vocab_; }

 private:
  Token pick(std::span<const float> logits, double u, const std::uint64_t* position) {
    if (logits.size() != vocab_) {
      throw std::invalid_argument("ngramspec: TokenSampler: a row of " + std::to_string(logits.size()) +
                                  " logits for a vocabulary of " + std::to_string(vocab_));
    }
    // Argmax first: it is the greedy answer and the max-subtraction for the softmax.
    std::size_t best = 0;
    for (std::size_t t = 0; t < vocab_; ++t) {
      const float l = logits[t];
      if (std::isnan(l) || l == std::numeric_limits<float>::infinity()) bad_row(l, t, position);
      if (l > logits[best]) best = t;
    }
    const float top = logits[best];
    if (top == -std::numeric_limits<float>::infinity()) bad_row(top, vocab_, position);
    if (options_.temperature == 0.0f) return static_cast<Token>(best);

    const double inv_t = 1.0 / static_cast<double>(options_.temperature);
    std::size_t n = 0;  // kept_[0 .. n) are the candidates, ascending ids so far
    for (std::size_t t = 0; t < vocab_; ++t) {
      const double w = std::exp((static_cast<double>(logits[t]) - static_cast<double>(top)) * inv_t);
      weights_[t] = w;
      if (w > 0.0) kept_[n++] = static_cast<Token>(t);
    }
    // The strict total order "more likely first, then lower id" makes every filter's choice of
    // tokens deterministic when weights tie.
    const auto likelier = [this](Token a, Token b) {
      return weights_[a] != weights_[b] ? weights_[a] > weights_[b] : a < b;
    };
    bool sorted_by_id = true;
    if (options_.top_k != 0 && options_.top_k < n) {
      std::nth_element(kept_.begin(), kept_.begin() + static_cast<std::ptrdiff_t>(options_.top_k - 1),
                       kept_.begin() + static_cast<std::ptrdiff_t>(n), likelier);
      n = options_.top_k;
      sorted_by_id = false;
    }
    if (options_.top_p < 1.0f && n > 1) {
      std::sort(kept_.begin(), kept_.begin() + static_cast<std::ptrdiff_t>(n), likelier);
      sorted_by_id = false;
      double total = 0.0;
      for (std::size_t i = 0; i < n; ++i) total += weights_[kept_[i]];
      const double mass = static_cast<double>(options_.top_p) * total;
      double cumulative = 0.0;
      std::size_t keep = 0;
      while (keep < n && cumulative < mass) cumulative += weights_[kept_[keep++]];
      n = std::max<std::size_t>(keep, 1);
    }
    if (options_.min_p > 0.0f) {
      // The argmax has weight exp(0) = 1 and survives every filter, so the threshold is min_p.
      const double threshold = static_cast<double>(options_.min_p);
      std::size_t keep = 0;
      for (std::size_t i = 0; i < n; ++i) {
        if (weights_[kept_[i]] >= threshold) kept_[keep++] = kept_[i];
      }
      n = keep;
    }
    if (!sorted_by_id) std::sort(kept_.begin(), kept_.begin() + static_cast<std::ptrdiff_t>(n));

    double total = 0.0;
    for (std::size_t i = 0; i < n; ++i) total += weights_[kept_[i]];
    const double target = u * total;
    double cumulative = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      cumulative += weights_[kept_[i]];
      if (target < cumulative) return kept_[i];
    }
    return kept_[n - 1];  // u * total rounded up to the total
  }

  [[noreturn]] void bad_row(float value, std::size_t token, const std::uint64_t* position) const {
    std::string where = position != nullptr ? " at position " + std::to_string(*position) : std::string();
    if (token == vocab_) {
      throw std::domain_error("ngramspec: every logit is -inf" + where + "; no token can be chosen");
    }
    throw std::domain_error("ngramspec: logit of token " + std::to_string(token) + where + " is " +
                            (std::isnan(value) ? std::string("NaN") : std::string("+inf")) +
                            "; logits must be finite or -inf");
  }

  SamplingOptions options_;
  std::size_t vocab_;
  std::vector<double> weights_;  // exp((logit - max) / temperature) per token
  std::vector<Token> kept_;      // candidate token ids
};

}  // namespace ngramspec
