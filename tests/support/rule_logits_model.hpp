#pragma once

// RuleLogitsModel: a LogitsModel over a greedy rule, with noise, contract checks, call counts
// and injected faults, for the tests of drafters that run a model (ModelDrafter, BestOfDrafter).

#include <cstddef>
#include <cstdint>
#include <random>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ngramspec/draft_distribution.hpp"
#include "ngramspec/token.hpp"
#include "support/mock_models.hpp"

namespace ngramspec::test {

/// A LogitsModel built on a greedy rule: pseudo-random logits in [-noise, noise] from a hash of
/// (seed, the last 3 tokens, the prefix length, token), and `margin` more on the rule's token,
/// so its argmax is the rule's token whenever margin > 2 * noise. It holds the tokens it was
/// fed, records every breach of the LogitsModel contract and counts its calls; the k-th forward
/// can be made to throw, and one logit can be made NaN.
class RuleLogitsModel {
 public:
  RuleLogitsModel(NextTokenRule rule, std::size_t vocab, std::uint64_t seed, float noise, float margin,
                  std::size_t max_batch)
      : rule_(std::move(rule)), vocab_(vocab), seed_(seed), noise_(noise), margin_(margin), max_batch_(max_batch) {}

  void forward(std::size_t pos, std::span<const Token> tokens, std::span<float> logits) {
    ++forward_calls_;
    forwarded_tokens_ += tokens.size();
    if (pos != history_.size()) violations_.push_back("forward at " + std::to_string(pos));
    if (tokens.empty() || tokens.size() > max_batch_) {
      violations_.push_back("forward of " + std::to_string(tokens.size()));
    }
    if (logits.size() != tokens.size() * vocab_) violations_.push_back("logits of " + std::to_string(logits.size()));
    const bool fault = fault_ != 0 && --fault_ == 0;
    if (fault && fault_timing_ == FaultTiming::before_change) throw ModelFault("injected forward fault");
    history_.resize(std::min(pos, history_.size()));
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      history_.push_back(tokens[i]);
      row(history_, logits.subspan(i * vocab_, vocab_));
    }
    if (fault) throw ModelFault("injected forward fault");
  }
  void rollback(std::size_t pos) {
    ++rollback_calls_;
    if (pos > history_.size()) violations_.push_back("rollback to " + std::to_string(pos));
    history_.resize(std::min(pos, history_.size()));
  }
  [[nodiscard]] std::size_t max_batch() const noexcept { return max_batch_; }
  [[nodiscard]] std::size_t vocab_size() const noexcept { return vocab_; }

  /// The logits after `prefix`, computed without the model's state.
  void row(std::span<const Token> prefix, std::span<float> out) const {
    std::uint64_t h = scramble(seed_ ^ (std::uint64_t{prefix.size()} << 32));
    for (const Token t : prefix.last(std::min<std::size_t>(3, prefix.size()))) h = scramble(h ^ t);
    for (std::size_t t = 0; t < vocab_; ++t) {
      const std::uint64_t ht = scramble(h ^ (t * 0x9e3779b97f4a7c15ULL));
      out[t] = noise_ * static_cast<float>(static_cast<double>(ht >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    }
    out[rule_(prefix) % vocab_] += margin_;
    if (nan_at_ == prefix.size()) out[nan_token_] = std::numeric_limits<float>::quiet_NaN();
  }

  void reserve(std::size_t n) { history_.reserve(n); }
  /// The `k`-th forward from now (1-based) throws ModelFault, before or after taking its tokens in; 0 disarms.
  void fail_forward_at(std::size_t k, FaultTiming timing = FaultTiming::before_change) noexcept {
    fault_ = k;
    fault_timing_ = timing;
  }
  /// The row after a prefix of `length` tokens has a NaN logit for `token`.
  void nan_after(std::size_t length, Token token) noexcept {
    nan_at_ = length;
    nan_token_ = token;
  }
  [[nodiscard]] const std::vector<Token>& history() const noexcept { return history_; }
  [[nodiscard]] const std::vector<std::string>& violations() const noexcept { return violations_; }
  [[nodiscard]] std::size_t forward_calls() const noexcept { return forward_calls_; }
  [[nodiscard]] std::size_t forwarded_tokens() const noexcept { return forwarded_tokens_; }
  [[nodiscard]] std::size_t rollback_calls() const noexcept { return rollback_calls_; }

 private:
  NextTokenRule rule_;
  std::size_t vocab_;
  std::uint64_t seed_;
  float noise_;
  float margin_;
  std::size_t max_batch_;
  std::vector<Token> history_;
  std::vector<std::string> violations_;
  std::size_t forward_calls_ = 0;
  std::size_t forwarded_tokens_ = 0;
  std::size_t rollback_calls_ = 0;
  std::size_t fault_ = 0;
  FaultTiming fault_timing_ = FaultTiming::before_change;
  std::size_t nan_at_ = std::numeric_limits<std::size_t>::max();
  Token nan_token_ = 0;
};

/// random_pass()'s buffer, reserved once so that passes allocate nothing.
inline std::vector<Token>& random_pass_tokens() {
  static std::vector<Token> tokens = [] {
    std::vector<Token> t;
    t.reserve(1025);
    return t;
  }();
  return tokens;
}

/// One pass of a DistributionDrafter driven without a decoder: it drafts up to out.size() tokens
/// with their distributions, a random prefix of them is accepted and a random token of the
/// `vocab` follows, and the drafter observes those (what a decoder would feed it).
template <class D>
void random_pass(D& drafter, std::span<Token> out, std::span<float> probabilities, DraftDistributions& q,
                 std::mt19937_64& rng, Token vocab) {
  const std::size_t n = drafter.predict(out, probabilities, q);
  const std::size_t accepted = rng() % (n + 1);
  std::vector<Token>& emitted = random_pass_tokens();
  emitted.assign(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(accepted));
  emitted.push_back(static_cast<Token>(rng() % vocab));
  drafter.update(std::span<const Token>(emitted));
}

}  // namespace ngramspec::test
