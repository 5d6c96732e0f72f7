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

#include "ngramspec/allocation_error.hpp"
#include "ngramspec/argument_error.hpp"
#include "ngramspec/detail/physical_memory.hpp"
#include "ngramspec/draft_distribution.hpp"
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
  /// std::invalid_argument for a vocabulary of 0 tokens, one that Token cannot number, or one whose
  /// scratch (kScratchBytesPerToken per token) is larger than the machine's physical memory;
  /// AllocationError (a std::bad_alloc) when the scratch cannot be allocated.
  TokenSampler(const SamplingOptions& options, std::size_t vocab_size) : options_(options), vocab_(vocab_size) {
    validate(options_);
    if (vocab_ == 0) throw ArgumentError("ngramspec", "TokenSampler: the vocabulary size is 0");
    if (vocab_ - 1 > std::numeric_limits<Token>::max()) {
      throw ArgumentError(
          "ngramspec", "TokenSampler: vocabulary size " + std::to_string(vocab_) + " exceeds what a Token can number");
    }
    // Its scratch is written as it is made: one beyond the machine's memory would drive it out of
    // memory rather than fail, so it is refused first (detail::physical_memory_bytes()).
    const std::uint64_t bytes = std::uint64_t{vocab_} * kScratchBytesPerToken;  // vocab_ <= 2^32: no wrap
    const std::size_t machine = detail::physical_memory_bytes();
    if (machine != 0 && vocab_ > machine / kScratchBytesPerToken) {
      throw ArgumentError("ngramspec", "TokenSampler: vocab_size = " + std::to_string(vocab_) + " takes " +
                                           std::to_string(bytes) + " bytes of scratch (" +
                                           std::to_string(kScratchBytesPerToken) +
                                           " per token), more than this machine's memory (" +
                                           std::to_string(machine) + " bytes)");
    }
    detail::allocating("a TokenSampler's scratch", static_cast<std::size_t>(bytes), [&] {
      weights_.resize(vocab_);
      kept_.resize(vocab_);
    });
  }

  /// The bytes of scratch a sampler keeps per vocabulary token.
  static constexpr std::size_t kScratchBytesPerToken = sizeof(double) + sizeof(Token);

  /// The token at absolute `position`, chosen from `logits` (vocab_size() floats) with the
  /// draw position_uniform(options().seed, position).
  [[nodiscard]] Token choose(std::span<const float> logits, std::uint64_t position) {
    return pick(logits, position_uniform(options_.seed, position), &position);
  }

  /// The token chosen from `logits` with the uniform draw `u` in [0, 1) (ignored at
  /// temperature 0): for callers with their own source of randomness.
  [[nodiscard]] Token sample(std::span<const float> logits, double u) { return pick(logits, u, nullptr); }

  /// One draft that follows a row, for verify(): its token and the entry of a
  /// DraftDistributions it was drawn from (kChosen: chosen, not drawn; q one-hot on it).
  struct Draft {
    static constexpr std::uint32_t kChosen = 0xffffffffu;
    Token token;
    std::uint32_t entry;
  };

  /// Rejection sampling at absolute `position` (SamplingMode::rejection; docs/SAMPLING.md): the
  /// token that follows a row whose candidates are `drafts`, in the order they were drawn (a
  /// chain's one draft, or a tree node's children by index), each from its entry of `q`.
  /// With p the row's distribution under the options: draft j is accepted, and returned, with
  /// probability min(1, p_j(x_j) / q_j(x_j)), where p_1 = p and each rejection replaces p_j by
  /// its residual max(0, p_j - q_j), renormalized; when every draft is rejected the token is
  /// drawn from the last residual with the draw position_uniform(seed, position), the one
  /// choose() uses, so a row without drafts gives choose()'s token. Draft j's test uses stream
  /// 1 + j of position_uniform. Whatever q is, the token returned is distributed as p (given
  /// the drafts were drawn from their q); at temperature 0 it is the argmax. Throws as choose()
  /// does, and std::invalid_argument when a draft's entry is not in q (naming it).
  [[nodiscard]] Token verify(std::span<const float> logits, std::uint64_t position, std::span<const Draft> drafts,
                             const DraftDistributions& q) {
    return verify_row(logits, position, drafts, q, nullptr);
  }

  /// Where choose() and verify() can also write the row's most likely tokens and their
  /// probabilities under the options (of the whole distribution, so they sum to at most 1),
  /// from the same pass over the row: what a TopKTable keeps for drafters that draw from it
  /// (SamplingModel::set_distribution_table). Best first, ties to the lower id; fewer than
  /// tokens.size() when fewer tokens survive the filters; at temperature 0 the argmax with
  /// probability 1.
  struct TopDistribution {
    std::span<Token> tokens;         ///< room for the tokens
    std::span<float> probabilities;  ///< as many floats as tokens
    std::size_t size = 0;            ///< how many were written
  };

  /// choose(), and the row's TopDistribution into `top`. Throws std::invalid_argument when
  /// top's spans differ in size, and as choose() does.
  [[nodiscard]] Token choose(std::span<const float> logits, std::uint64_t position, TopDistribution& top) {
    check_top(top);
    return pick(logits, position_uniform(options_.seed, position), &position, &top);
  }

  /// The row's TopDistribution alone, no token chosen: for drafters that draw from the
  /// distribution the options give (ModelDrafter). Throws as choose(logits, position, top) does.
  void distribution(std::span<const float> logits, std::uint64_t position, TopDistribution& top) {
    check_top(top);
    const std::size_t n = filter(logits, &position);
    write_top(n, options_.temperature == 0.0f ? 0.0 : kept_total(n), top);
  }

  /// verify(), and the row's TopDistribution into `top`.
  [[nodiscard]] Token verify(std::span<const float> logits, std::uint64_t position, std::span<const Draft> drafts,
                             const DraftDistributions& q, TopDistribution& top) {
    check_top(top);
    return verify_row(logits, position, drafts, q, &top);
  }

  [[nodiscard]] const SamplingOptions& options() const noexcept { return options_; }
  /// Replaces the options (a new seed for a new request, say) after validating them; no allocation.
  void set_options(const SamplingOptions& options) {
    validate(options);
    options_ = options;
  }
  [[nodiscard]] std::size_t vocab_size() const noexcept { return vocab_; }

 private:
  Token verify_row(std::span<const float> logits, std::uint64_t position, std::span<const Draft> drafts,
                   const DraftDistributions& q, TopDistribution* top) {
    const std::size_t n = filter(logits, &position);
    if (options_.temperature == 0.0f) {
      if (top != nullptr) write_top(n, 0.0, *top);
      return kept_[0];
    }
    double total = keep_only(n);
    if (top != nullptr) write_top(n, total, *top);
    for (std::size_t j = 0; j < drafts.size(); ++j) {
      const Draft& d = drafts[j];
      if (d.entry != Draft::kChosen && d.entry >= q.size()) {
        throw ArgumentError("ngramspec", "TokenSampler::verify: draft " + std::to_string(d.token) +
                                             " names distribution " + std::to_string(d.entry) + " of " +
                                             std::to_string(q.size()));
      }
      const double p = d.token < vocab_ ? weights_[d.token] : 0.0;
      const std::span<const Token> support = d.entry == Draft::kChosen ? std::span<const Token>() : q.tokens(d.entry);
      const std::span<const float> mass = d.entry == Draft::kChosen ? std::span<const float>() : q.probabilities(d.entry);
      double q_total = 0.0;
      double q_token = 0.0;
      for (std::size_t s = 0; s < support.size(); ++s) {
        q_total += mass[s];
        if (support[s] == d.token) q_token += mass[s];
      }
      // q(x) as a share of the support; one-hot when chosen. A token its own q gives no mass was
      // not drawn from it: read it as chosen.
      const bool chosen = support.empty() || q_token <= 0.0;
      const double qx = chosen ? 1.0 : q_token / q_total;
      // Accept when u < p(x) / q(x), p(x) = weights_[x] / total.
      if (position_uniform(options_.seed, position, 1 + j) * qx * total < p) return d.token;
      // The residual max(0, p - q): only the support's weights fall.
      if (chosen) {
        if (d.token < vocab_) {
          total -= weights_[d.token];
          weights_[d.token] = 0.0;
        }
      } else {
        // Each support token falls by q(t) of the old total (a token listed twice falls by its
        // summed mass, since max(0, max(0, w - a) - b) = max(0, w - a - b)).
        const double before = total;
        for (std::size_t s = 0; s < support.size(); ++s) {
          const Token t = support[s];
          if (t >= vocab_) continue;
          const double lowered = std::max(0.0, weights_[t] - static_cast<double>(mass[s]) / q_total * before);
          total -= weights_[t] - lowered;
          weights_[t] = lowered;
        }
        // What is left is a difference of near-equal sums when q covers p: below a billionth of
        // the row it is rounding, and the draft was certain to pass.
        if (total <= before * 1e-9) total = 0.0;
      }
      if (!(total > 0.0)) return d.token;  // p = q to rounding: the draft was certain to pass
    }
    return draw(n, total, position_uniform(options_.seed, position));
  }

  void check_top(const TopDistribution& top) const {
    if (top.tokens.size() != top.probabilities.size()) {
      throw ArgumentError("ngramspec", "TokenSampler: a TopDistribution of " + std::to_string(top.tokens.size()) +
                                           " tokens and " + std::to_string(top.probabilities.size()) +
                                           " probabilities");
    }
  }

  // The best min(n, room) of kept_[0 .. n), whose weights sum to `total`, into `top`, leaving
  // kept_ as it is (ascending ids).
  void write_top(std::size_t n, double total, TopDistribution& top) const {
    top.size = 0;
    if (top.tokens.empty()) return;
    if (options_.temperature == 0.0f) {
      top.tokens[0] = kept_[0];
      top.probabilities[0] = 1.0f;
      top.size = 1;
      return;
    }
    const auto likelier = [this](Token a, Token b) {
      return weights_[a] != weights_[b] ? weights_[a] > weights_[b] : a < b;
    };
    const auto end = std::partial_sort_copy(kept_.begin(), kept_.begin() + static_cast<std::ptrdiff_t>(n),
                                            top.tokens.begin(), top.tokens.end(), likelier);
    top.size = static_cast<std::size_t>(end - top.tokens.begin());
    for (std::size_t i = 0; i < top.size; ++i) {
      top.probabilities[i] = static_cast<float>(weights_[top.tokens[i]] / total);
    }
  }

  Token pick(std::span<const float> logits, double u, const std::uint64_t* position,
             TopDistribution* top = nullptr) {
    const std::size_t n = filter(logits, position);
    if (options_.temperature == 0.0f) {
      if (top != nullptr) write_top(n, 0.0, *top);
      return kept_[0];
    }
    const double total = kept_total(n);
    if (top != nullptr) write_top(n, total, *top);
    return draw(n, total, u);
  }

  // The weights of kept_[0 .. n) summed.
  [[nodiscard]] double kept_total(std::size_t n) const noexcept {
    double total = 0.0;
    for (std::size_t i = 0; i < n; ++i) total += weights_[kept_[i]];
    return total;
  }

  // Inverse-CDF draw over kept_[0 .. n) in ascending id order, weights_ summing to `total`.
  Token draw(std::size_t n, double total, double u) const noexcept {
    const double target = u * total;
    double cumulative = 0.0;
    std::size_t last = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double w = weights_[kept_[i]];
      if (w <= 0.0) continue;
      last = i;
      cumulative += w;
      if (target < cumulative) return kept_[i];
    }
    return kept_[last];  // u * total rounded up to the total
  }

  // Zeroes the weights of the tokens the filters dropped, so that weights_ is p over the whole
  // vocabulary (unnormalized); returns the total. kept_[0 .. n) is in ascending id order.
  double keep_only(std::size_t n) noexcept {
    double total = 0.0;
    std::size_t next = 0;
    for (std::size_t t = 0; t < vocab_; ++t) {
      if (next < n && kept_[next] == t) {
        total += weights_[t];
        ++next;
      } else {
        weights_[t] = 0.0;
      }
    }
    return total;
  }

  // The filters: weights_[t] = exp((logit - max) / temperature) and kept_[0 .. n) the tokens
  // the options keep, ascending ids; returns n. At temperature 0, n = 1 and kept_[0] the argmax.
  std::size_t filter(std::span<const float> logits, const std::uint64_t* position) {
    if (logits.size() != vocab_) {
      throw ArgumentError("ngramspec", "TokenSampler: a row of " + std::to_string(logits.size()) +
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
    if (options_.temperature == 0.0f) {
      kept_[0] = static_cast<Token>(best);
      return 1;
    }

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
    return n;
  }

  [[noreturn]] void bad_row(float value, std::size_t token, const std::uint64_t* position) const {
    std::string where = position != nullptr ? " at position " + std::to_string(*position) : std::string();
    if (token == vocab_) {
      throw DomainError("ngramspec", "every logit is -inf" + where + "; no token can be chosen");
    }
    throw DomainError("ngramspec", "logit of token " + std::to_string(token) + where + " is " +
                                       (std::isnan(value) ? std::string("NaN") : std::string("+inf")) +
                                       "; logits must be finite or -inf");
  }

  SamplingOptions options_;
  std::size_t vocab_;
  std::vector<double> weights_;  // exp((logit - max) / temperature) per token
  std::vector<Token> kept_;      // candidate token ids
};

}  // namespace ngramspec
