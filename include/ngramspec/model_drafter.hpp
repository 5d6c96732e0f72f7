#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ngramspec/argument_error.hpp"
#include "ngramspec/decode_step.hpp"
#include "ngramspec/detail/max_drafts_check.hpp"
#include "ngramspec/detail/number_text.hpp"
#include "ngramspec/draft_distribution.hpp"
#include "ngramspec/drafter.hpp"
#include "ngramspec/logits_model.hpp"
#include "ngramspec/position_random.hpp"
#include "ngramspec/sampling_options.hpp"
#include "ngramspec/token.hpp"
#include "ngramspec/token_sampler.hpp"

namespace ngramspec {

/// Configuration of a ModelDrafter; validated by its constructor (validate()).
struct ModelDraftConfig {
  /// Most drafts one predict() proposes, beyond the room its caller gives: 1 .. kMaxDraftsPerPass.
  std::size_t max_drafts = 4;
  /// How each draft is chosen from the draft model's logits, and the seed of its draws.
  /// temperature 0 (the default): the argmax, ties to the lowest id, its q one-hot. Otherwise
  /// the draft is drawn from the distribution the options give (temperature, then top-k, top-p,
  /// min-p, as TokenSampler filters) restricted to its `support` most likely tokens and
  /// renormalized, and that distribution is its q.
  SamplingOptions sampling{};
  /// Most tokens a drawn draft's distribution keeps: 1 .. DraftDistributions::kMaxSupport.
  /// Default 8.
  std::size_t support = 8;
  /// The gate, in [0, 1]: drafting stops at the first draft whose estimated chance of being
  /// accepted with every draft before it falls below this; that draft is not proposed. 0 (the
  /// default) drafts max_drafts whenever there is room. With a verify cost, the least path
  /// probability a draft needs to pay (DraftPlanner::least_path_probability) spares the draft
  /// model the forwards of drafts the planner would drop.
  float min_probability = 0.0f;
};

/// Throws std::invalid_argument naming the field and its value when `config` is invalid:
/// max_drafts outside 1 .. kMaxDraftsPerPass, support outside 1 .. DraftDistributions::kMaxSupport,
/// min_probability outside [0, 1] or NaN, or invalid sampling options (validate(SamplingOptions)).
inline void validate(const ModelDraftConfig& config) {
  detail::check_max_drafts("ngramspec", "", "ModelDraftConfig::max_drafts", config.max_drafts, 1);
  if (config.support == 0 || config.support > DraftDistributions::kMaxSupport) {
    throw ArgumentError("ngramspec", "ModelDraftConfig::support = " + std::to_string(config.support) +
                                         " is invalid; it must be 1 .. " +
                                         std::to_string(DraftDistributions::kMaxSupport));
  }
  if (!(config.min_probability >= 0.0f && config.min_probability <= 1.0f)) {
    throw ArgumentError("ngramspec", "ModelDraftConfig::min_probability = " +
                                         detail::number_text(config.min_probability) + " is invalid; it must be in [0, 1]");
  }
  validate(config.sampling);
}

/// Drafts with a model: any LogitsModel (a smaller model, or the target's own first layers)
/// proposes up to max_drafts tokens a pass, one after the other, each from the logits after the
/// observed sequence and the drafts before it. A Drafter, an EstimatingDrafter and a
/// DistributionDrafter (`predict(out, probabilities, q)` gives each draft's q).
///
/// Draws: a drawn draft at absolute position p (the observed length plus its index; the
/// prompt's first token is position 0) uses position_uniform(seed, p, kDrawStream), stream
/// 2^32. The verifiers draw from stream 0 (the plain draw) and small streams (rejection
/// sampling's tests and resample), so no draw decides both a draft and its verification, even
/// with the verifier's seed; and the drafts at a position depend only on (seed, position) and
/// the draft model's logits, never on what was drafted or rolled back before. For rejection
/// sampling the drafts must be random across requests as the verifier's draws are: give each
/// request its seed (set_sampling(), the sampler's seed will do: the streams differ). A drafter
/// whose seed stays fixed while the sampler's changes drafts a fixed function of the text,
/// which is chosen, not drawn, and verified as drawn biases the output (the chi-square test
/// RejectionSampling.ModelDrafter... in tests/sampling_distribution_test.cpp reseeds per request).
///
/// The draft model's KV cache follows the observed sequence. predict() feeds what the model
/// lacks of the observed sequence (after a pass: the target's own token, or the last accepted
/// draft and it), then each draft but the last, one token a forward, so the model then holds the
/// observed sequence followed by drafts 0 .. k-2 (all k when the gate, min_probability, stopped
/// drafting after them). update() keeps the drafts the new tokens confirm (the accepted ones)
/// and calls no model: the next predict() rolls back only what was rejected. A pass of k drafts
/// thus costs k forwards of the draft model, k or k + 1 tokens: one per drafted token plus the
/// target's own. The first predict() rolls the model back to 0, whatever it held, and feeds the
/// prompt, in forwards of up to min(max_batch(), kMaxFeedRows) tokens.
///
/// predict() is const in the Drafter concept and changes nothing observable: the observed
/// sequence, and what any later predict() returns, are as before. It does run the draft model
/// (held by pointer), whose cache then holds the drafts; a second predict() without an update
/// between rolls them back and drafts the same tokens again.
///
/// Acceptance estimates (predict(out, probabilities)): the chance that draft j is accepted once
/// drafts 0 .. j-1 were is read from its confidence c_j and the sequence's record: drafts are
/// binned by confidence (kBins bins of equal width), and a bin's estimate is
/// (hits + kPrior * c_j) / (tried + kPrior), where tried counts the drafts of that bin whose
/// predecessors the next update() confirmed and hits those it confirmed too, both over about the
/// bin's last kMemory drafts. So a new sequence starts at c_j itself, and the estimates follow
/// how often drafts of each confidence are accepted, whatever the verifier (greedy, exact-match
/// or rejection sampling). c_j is, for a drawn draft, the largest probability of q_j (known
/// before the draw, so that whether a drawn draft is sent never depends on its own token, which
/// rejection sampling needs) and, for a greedy one, the probability of the argmax under the
/// draft model's softmax at temperature 1. probabilities[j] is the running product (non-increasing).
///
/// Errors: exceptions from the model propagate; the drafter then holds its observed sequence
/// and, since the model's cache is no longer known, the next predict() rolls the model back to
/// 0 and feeds the sequence again (reset() also makes it usable). A NaN or +inf logit, or a row
/// with every logit -inf, throws std::domain_error naming the token and position.
///
/// Memory: scratch for min(max_batch(), kMaxFeedRows) + 2 rows of logits and two vocabulary-
/// sized arrays is allocated at construction; the observed sequence grows with it (reserve()).
/// Once warm, update() and predict() allocate nothing (given a DraftDistributions reserved for
/// max_drafts entries). The model must outlive the drafter and serve it alone (not the target:
/// the draft model's cache is the drafter's), and hold as many positions as the target.
/// Thread safety: none; one drafter per sequence, one thread at a time, const calls included.
template <LogitsModel M>
class ModelDrafter {
 public:
  /// The stream of position_uniform the drafts are drawn from.
  static constexpr std::uint64_t kDrawStream = std::uint64_t{1} << 32;
  /// Most tokens one forward feeds when the model catches up with the observed sequence.
  static constexpr std::size_t kMaxFeedRows = 64;
  /// Confidence bins of the acceptance record.
  static constexpr std::size_t kBins = 8;
  /// The acceptance record's memory, in drafts per bin.
  static constexpr double kMemory = 64;
  /// Weight of a draft's own confidence in its estimate, in drafts.
  static constexpr double kPrior = 2;

  /// Drafts with `model`, which must outlive the drafter. Throws std::invalid_argument naming
  /// the value for an invalid config, a vocab_size of 0 or one Token cannot number, a model whose
  /// vocab_size() differs from `vocab_size` (the target's vocabulary), or whose max_batch() is 0.
  ModelDrafter(M& model, std::size_t vocab_size, const ModelDraftConfig& config = {})
      : model_(&model),
        config_(validated(config)),
        vocab_(checked_vocabulary(vocab_size)),
        sampler_(config_.sampling, vocab_) {
    const std::size_t model_vocab = static_cast<std::size_t>(std::as_const(model).vocab_size());
    if (model_vocab != vocab_) {
      throw ArgumentError("ngramspec", "ModelDrafter: the draft model's vocab_size() is " +
                                           std::to_string(model_vocab) + "; the target's vocabulary has " +
                                           std::to_string(vocab_) + " tokens");
    }
    const std::size_t max_batch = static_cast<std::size_t>(std::as_const(model).max_batch());
    if (max_batch == 0) throw ArgumentError("ngramspec", "ModelDrafter: the draft model's max_batch() is 0");
    feed_rows_ = std::min(max_batch, kMaxFeedRows);
    feed_logits_.resize(feed_rows_ * vocab_);
    row_.resize(vocab_);
    draft_row_.resize(vocab_);
    ahead_.reserve(kMaxDraftsPerPass + config_.max_drafts);  // given drafts, then its own
    drafted_.resize(config_.max_drafts);
    confidence_.resize(config_.max_drafts);
  }

  /// Observes one token, appended to the sequence.
  void update(Token token) { update(std::span<const Token>(&token, 1)); }
  /// Observes several tokens in order; records how the last predict()'s drafts fared and keeps
  /// the model's entries for those the tokens confirm. Calls no model.
  void update(std::span<const Token> tokens) {
    if (tokens.empty()) return;
    observed_.insert(observed_.end(), tokens.begin(), tokens.end());
    const std::size_t before = observed_.size() - tokens.size();
    if (recorded_ != 0 && recorded_at_ == before) record(tokens);
    recorded_ = 0;
    if (cached_ == before) {
      std::size_t confirmed = 0;
      while (confirmed < ahead_.size() && confirmed < tokens.size() && ahead_[confirmed] == tokens[confirmed]) {
        ++confirmed;
      }
      cached_ += confirmed;
    }
    ahead_.clear();
    row_valid_ = false;
  }

  /// Writes up to min(out.size(), max_drafts) drafts to `out`, fewer where the gate
  /// (min_probability) stops; returns how many (0 before any token is observed).
  [[nodiscard]] std::size_t predict(std::span<Token> out) const { return draft(out, {}, nullptr); }
  /// The same drafts (limited also by probabilities.size()), and in probabilities[j] the
  /// estimated chance that drafts 0 .. j are all accepted (see the class comment).
  [[nodiscard]] std::size_t predict(std::span<Token> out, std::span<float> probabilities) const {
    return draft(out.first(std::min(out.size(), probabilities.size())), probabilities, nullptr);
  }
  /// As above, and replaces q's entries with one per draft: one-hot for greedy drafts, else the
  /// distribution the draft was drawn from (config().support tokens at most, most likely first,
  /// probabilities summing to 1). Reserve q for max_drafts entries to keep this allocation-free.
  [[nodiscard]] std::size_t predict(std::span<Token> out, std::span<float> probabilities,
                                    DraftDistributions& q) const {
    return draft(out.first(std::min(out.size(), probabilities.size())), probabilities, &q);
  }

  /// Continues `given` (another drafter's drafts, which follow the observed sequence): writes up
  /// to min(out.size(), max_drafts) drafts that follow the observed sequence and `given`, and in
  /// probabilities[j] the estimated chance that drafts 0 .. j of the continuation are accepted
  /// once every given draft is. The model is fed `given` in one forward (or as few as its
  /// max_batch() allows) and then drafts as predict() does, so a continuation of c drafts costs
  /// the rows of `given` plus c forwards; the next update() keeps the model's entries for what
  /// it confirms of `given` and the continuation, and records the continuation's drafts only
  /// when it confirms every given draft. q (when not null) gets one entry per draft of the pass:
  /// one-hot for each given draft (read as chosen, not drawn), then the continuation's.
  /// Throws std::invalid_argument when `given` holds a token outside the vocabulary or more than
  /// kMaxDraftsPerPass tokens (nothing changes then).
  [[nodiscard]] std::size_t continue_drafts(std::span<const Token> given, std::span<Token> out,
                                            std::span<float> probabilities, DraftDistributions* q = nullptr) const {
    if (given.size() > kMaxDraftsPerPass) {
      throw ArgumentError("ngramspec",
                          "ModelDrafter::continue_drafts: " + std::to_string(given.size()) +
                              " given drafts are more than kMaxDraftsPerPass = " + std::to_string(kMaxDraftsPerPass));
    }
    for (std::size_t i = 0; i < given.size(); ++i) {
      if (given[i] >= vocab_) {
        throw ArgumentError("ngramspec", "ModelDrafter::continue_drafts: given draft " + std::to_string(i) +
                                             " is token " + std::to_string(given[i]) + ", outside the vocabulary of " +
                                             std::to_string(vocab_));
      }
    }
    return draft(out.first(std::min(out.size(), probabilities.size())), probabilities, q, given);
  }

  /// Forgets the sequence and the acceptance record; keeps the memory. The model is rolled back
  /// by the next predict(), not here.
  void reset() noexcept {
    observed_.clear();
    cached_ = 0;
    ahead_.clear();
    row_valid_ = false;
    recorded_ = 0;
    hits_.fill(0.0);
    tried_.fill(0.0);
  }

  /// Room for a sequence of `tokens`, so that update() does not allocate.
  void reserve(std::size_t tokens) { observed_.reserve(tokens); }

  [[nodiscard]] const ModelDraftConfig& config() const noexcept { return config_; }
  /// Replaces the sampling options (a new seed for a new request, say) after validating them.
  void set_sampling(const SamplingOptions& options) {
    sampler_.set_options(options);
    config_.sampling = options;
  }
  /// The observed sequence.
  [[nodiscard]] std::span<const Token> sequence() const noexcept { return observed_; }
  /// Tokens the vocabulary holds (the model's vocab_size()).
  [[nodiscard]] std::size_t vocab_size() const noexcept { return vocab_; }
  /// The draft model.
  [[nodiscard]] M& model() noexcept { return *model_; }
  [[nodiscard]] const M& model() const noexcept { return *model_; }

 private:
  // The chosen token and its confidence (see the class comment).
  struct Choice {
    Token token;
    double confidence;
  };

  // Drafts after the observed sequence followed by `given` (empty for predict()).
  std::size_t draft(std::span<Token> out, std::span<float> probabilities, DraftDistributions* q,
                    std::span<const Token> given = {}) const {
    if (q != nullptr) q->clear();
    recorded_ = 0;
    const std::size_t k = std::min(out.size(), config_.max_drafts);
    if (k == 0 || observed_.empty()) return 0;
    const std::size_t n = observed_.size() + given.size();
    if (q != nullptr) {
      for (std::size_t i = 0; i < given.size(); ++i) q->push_one_hot();
    }
    std::size_t made = 0;
    try {
      catch_up();
      std::span<const float> row = row_;
      if (!given.empty()) {
        feed_given(given);
        row = draft_row_;
      }
      double chance = 1.0;  // that every draft so far is accepted
      for (std::size_t i = 0; i < k; ++i) {
        const Choice choice = choose(row, n + i, q);
        const double estimate = chance * estimate_of(choice.confidence);
        if (estimate < static_cast<double>(config_.min_probability)) {
          if (q != nullptr) q->truncate(given.size() + i);
          break;
        }
        chance = estimate;
        out[i] = choice.token;
        if (!probabilities.empty()) probabilities[i] = static_cast<float>(chance);
        drafted_[i] = choice.token;
        confidence_[i] = choice.confidence;
        made = i + 1;
        if (i + 1 < k) {
          model_->forward(n + i, std::span<const Token>(out.subspan(i, 1)), std::span<float>(draft_row_));
          ahead_.push_back(choice.token);
          ++held_;
          row = draft_row_;
        }
      }
    } catch (...) {
      // The model's cache is unknown now: the next predict() starts it from 0.
      lost_ = true;
      row_valid_ = false;
      ahead_.clear();
      cached_ = 0;
      if (q != nullptr) q->clear();
      throw;
    }
    recorded_ = made;
    recorded_at_ = observed_.size();
    recorded_after_ = given.size();
    return made;
  }

  // After catch_up(): feeds `given`, which then leads ahead_; draft_row_ is the row after it.
  void feed_given(std::span<const Token> given) const {
    const std::size_t n = observed_.size();
    std::size_t rows = 0;
    for (std::size_t i = 0; i < given.size(); i += rows) {
      rows = std::min(feed_rows_, given.size() - i);
      model_->forward(n + i, given.subspan(i, rows), std::span<float>(feed_logits_).first(rows * vocab_));
      ahead_.insert(ahead_.end(), given.begin() + static_cast<std::ptrdiff_t>(i),
                    given.begin() + static_cast<std::ptrdiff_t>(i + rows));
      held_ += rows;
    }
    const auto last = feed_logits_.begin() + static_cast<std::ptrdiff_t>((rows - 1) * vocab_);
    std::copy(last, last + static_cast<std::ptrdiff_t>(vocab_), draft_row_.begin());
  }

  // The chance that a draft of this confidence is accepted once the drafts before it were.
  [[nodiscard]] double estimate_of(double confidence) const noexcept {
    const std::size_t b = bin(confidence);
    return (hits_[b] + kPrior * confidence) / (tried_[b] + kPrior);
  }

  // Brings the model to hold exactly the observed sequence, with row_ the logits after it.
  void catch_up() const {
    const std::size_t n = observed_.size();
    if (lost_) {
      model_->rollback(0);
      held_ = 0;
      cached_ = 0;
      lost_ = false;
    }
    if (row_valid_) {
      // A second predict() after the same update: only the drafts go.
      if (held_ > n) model_->rollback(n);
      held_ = n;
      ahead_.clear();
      return;
    }
    // The last observed token is fed again when the model holds it already (its row is not kept
    // beyond a predict()), so that the row after it is known.
    const std::size_t start = std::min(cached_, n - 1);
    if (held_ > start) model_->rollback(start);
    held_ = start;
    cached_ = start;
    ahead_.clear();
    std::size_t rows = 0;
    for (std::size_t pos = start; pos < n; pos += rows) {
      rows = std::min(feed_rows_, n - pos);
      model_->forward(pos, std::span<const Token>(observed_).subspan(pos, rows),
                      std::span<float>(feed_logits_).first(rows * vocab_));
      held_ = cached_ = pos + rows;
    }
    const auto last = feed_logits_.begin() + static_cast<std::ptrdiff_t>((rows - 1) * vocab_);
    std::copy(last, last + static_cast<std::ptrdiff_t>(vocab_), row_.begin());
    row_valid_ = true;
  }

  static const ModelDraftConfig& validated(const ModelDraftConfig& config) {
    validate(config);
    return config;
  }
  static std::size_t checked_vocabulary(std::size_t vocab) {
    if (vocab == 0) throw ArgumentError("ngramspec", "ModelDrafter: the vocabulary size is 0");
    if (vocab - 1 > std::numeric_limits<Token>::max()) {
      throw ArgumentError(
          "ngramspec", "ModelDrafter: vocabulary size " + std::to_string(vocab) + " exceeds what a Token can number");
    }
    return vocab;
  }

  // The draft at `position` from `row`; pushes its q.
  Choice choose(std::span<const float> row, std::uint64_t position, DraftDistributions* q) const {
    std::size_t best = 0;
    for (std::size_t t = 0; t < vocab_; ++t) {
      const float l = row[t];
      if (std::isnan(l) || l == std::numeric_limits<float>::infinity()) bad_row(l, t, position);
      if (l > row[best]) best = t;
    }
    const double top = row[best];
    if (top == -std::numeric_limits<double>::infinity()) bad_row(row[best], vocab_, position);
    const SamplingOptions& options = config_.sampling;
    if (options.temperature == 0.0f) {
      double total = 0.0;
      for (std::size_t t = 0; t < vocab_; ++t) total += std::exp(static_cast<double>(row[t]) - top);
      if (q != nullptr) q->push_one_hot();
      return {static_cast<Token>(best), 1.0 / total};
    }
    // The sampler's distribution under the options, its `support` most likely tokens,
    // renormalized: q. Drawn by inverse CDF over them, best first.
    TokenSampler::TopDistribution support{std::span<Token>(support_tokens_).first(config_.support),
                                      std::span<float>(support_probabilities_).first(config_.support)};
    sampler_.distribution(row, position, support);
    const std::size_t kept = support.size;
    double total = 0.0;
    for (std::size_t i = 0; i < kept; ++i) total += static_cast<double>(support_probabilities_[i]);
    for (std::size_t i = 0; i < kept; ++i) {
      support_probabilities_[i] = static_cast<float>(static_cast<double>(support_probabilities_[i]) / total);
    }
    const double target = position_uniform(options.seed, position, kDrawStream);
    double cumulative = 0.0;
    std::size_t chosen = kept - 1;  // u rounded up to the total
    for (std::size_t i = 0; i < kept; ++i) {
      cumulative += static_cast<double>(support_probabilities_[i]);
      if (target < cumulative) {
        chosen = i;
        break;
      }
    }
    if (q != nullptr) {
      q->push_unchecked(std::span<const Token>(support_tokens_).first(kept),
                        std::span<const float>(support_probabilities_).first(kept));
    }
    // The confidence is q's largest probability, known before the draw: whether a drawn draft is
    // sent (the gate, the decoders' cut) may not depend on its own token, or rejection sampling
    // would be biased (docs/SAMPLING.md, "What a decoder may cut").
    return {support_tokens_[chosen], static_cast<double>(support_probabilities_[0])};
  }

  // The first update() after a predict(): which of its drafts the tokens confirmed.
  // A continuation's drafts are recorded only when the tokens confirm every given draft first.
  void record(std::span<const Token> tokens) noexcept {
    constexpr double kDecay = 1.0 - 1.0 / kMemory;
    const std::size_t skip = recorded_after_;
    if (tokens.size() <= skip) return;
    for (std::size_t i = 0; i < skip; ++i) {
      if (tokens[i] != ahead_[i]) return;
    }
    tokens = tokens.subspan(skip);
    const std::size_t seen = std::min(recorded_, tokens.size());
    for (std::size_t i = 0; i < seen; ++i) {
      const bool hit = tokens[i] == drafted_[i];
      const std::size_t b = bin(confidence_[i]);
      hits_[b] = hits_[b] * kDecay + (hit ? 1.0 : 0.0);
      tried_[b] = tried_[b] * kDecay + 1.0;
      if (!hit) break;
    }
  }

  [[nodiscard]] static std::size_t bin(double confidence) noexcept {
    return std::min(kBins - 1, static_cast<std::size_t>(confidence * static_cast<double>(kBins)));
  }

  [[noreturn]] void bad_row(float value, std::size_t token, std::uint64_t position) const {
    if (token == vocab_) {
      throw DomainError("ngramspec", "ModelDrafter: every logit of the draft model is -inf at position " +
                                         std::to_string(position) + "; no token can be drafted");
    }
    throw DomainError("ngramspec", "ModelDrafter: the draft model's logit of token " + std::to_string(token) +
                                       " at position " + std::to_string(position) + " is " +
                                       (std::isnan(value) ? std::string("NaN") : std::string("+inf")) +
                                       "; logits must be finite or -inf");
  }

  M* model_;
  ModelDraftConfig config_;
  std::size_t vocab_;
  std::size_t feed_rows_ = 1;
  std::vector<Token> observed_;
  // The model's cache: it holds held_ tokens, observed_[0, cached_) first; when cached_ is the
  // observed length, the drafts in ahead_ follow. lost_: held_ is unknown, before the first
  // predict() (the model may hold another drafter's tokens) and after an exception.
  mutable std::size_t held_ = 0;
  mutable std::size_t cached_ = 0;
  mutable bool lost_ = true;
  mutable std::vector<Token> ahead_;
  mutable bool row_valid_ = false;  // row_ is the row after observed_, which the model holds
  mutable std::vector<float> row_;
  mutable std::vector<float> draft_row_;
  mutable std::vector<float> feed_logits_;  // feed_rows_ x vocab_
  // choose()'s scratch.
  mutable TokenSampler sampler_;  // the drawn drafts' distribution (config_.sampling)
  mutable std::array<Token, DraftDistributions::kMaxSupport> support_tokens_{};
  mutable std::array<float, DraftDistributions::kMaxSupport> support_probabilities_{};
  // The last predict()'s drafts, for the next update()'s record; recorded_ = how many (0: none).
  mutable std::vector<Token> drafted_;
  mutable std::vector<double> confidence_;
  mutable std::size_t recorded_ = 0;
  mutable std::size_t recorded_at_ = 0;
  mutable std::size_t recorded_after_ = 0;  // given drafts the recorded ones continued
  // The acceptance record per confidence bin: decayed hits and trials.
  std::array<double, kBins> hits_{};
  std::array<double, kBins> tried_{};
};

}  // namespace ngramspec
