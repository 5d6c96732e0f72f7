#pragma once

// Deterministic target models for tests and fuzz targets.
//
// Every model here decodes greedily by a rule that is a pure function of the whole token
// prefix, so "the greedy output" of a prompt is well defined and plain_greedy() computes it
// without any decoder. GreedyModel runs such a rule behind the TargetModel interface, checks
// the TargetModel contract on every call and records what it was asked to do, so a test can
// prove both the output and the way the decoder drove the model.
//
// MockTargetModel (GoogleMock) pins exact call sequences. It is the only part that needs
// GoogleMock; a target built without it (a fuzz target) defines NGRAMSPEC_TEST_NO_GMOCK
// before including this header.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ngramspec/decode_options.hpp"
#include "ngramspec/target_model.hpp"
#include "ngramspec/token.hpp"

#ifndef NGRAMSPEC_TEST_NO_GMOCK
#include <gmock/gmock.h>
#endif

namespace ngramspec::test {

/// A greedy model's rule: its token after `prefix` (never empty), a pure function of it.
using NextTokenRule = std::function<Token(std::span<const Token> prefix)>;

/// Mixes a 64-bit value (splitmix64's finalizer); the test rules' hash, kept apart from the
/// library's own hashing so a bug there cannot hide in the models.
[[nodiscard]] constexpr std::uint64_t scramble(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Periodic stream: next = (mul * last + add) mod vocab, so the output cycles through the
/// orbit of the prompt's last token.
struct AffineRule {
  Token vocab = 7;
  Token mul = 3;
  Token add = 1;
  [[nodiscard]] Token operator()(std::span<const Token> prefix) const {
    return static_cast<Token>((std::uint64_t{mul} * prefix.back() + add) % vocab);
  }
};

/// Pseudo-random stream: next = hash(seed, last `context` tokens[, prefix length]) mod vocab.
/// With `with_position` the token also depends on where it stands, so feeding a token at the
/// wrong position changes the output.
struct HashRule {
  Token vocab = 16;
  std::size_t context = 2;
  std::uint64_t seed = 0;
  bool with_position = false;
  [[nodiscard]] Token operator()(std::span<const Token> prefix) const {
    std::uint64_t h = scramble(seed);
    const std::size_t n = std::min(context, prefix.size());
    for (const Token t : prefix.last(n)) h = scramble(h ^ t);
    if (with_position) h = scramble(h ^ (std::uint64_t{prefix.size()} << 32));
    return static_cast<Token>(h % vocab);
  }
};

/// Table-driven stream: next = table[last], `otherwise` for a last token not in the table.
struct TableRule {
  std::map<Token, Token> table;
  Token otherwise = 0;
  [[nodiscard]] Token operator()(std::span<const Token> prefix) const {
    const auto it = table.find(prefix.back());
    return it == table.end() ? otherwise : it->second;
  }
};

/// Copying stream: next = prefix[size - period], so once `period` tokens exist the model
/// repeats them forever (the prompt, when period == prompt length). Shorter prefixes
/// continue with (last + 1) mod vocab.
struct RepeatRule {
  std::size_t period = 4;
  Token vocab = 16;
  [[nodiscard]] Token operator()(std::span<const Token> prefix) const {
    if (prefix.size() >= period) return prefix[prefix.size() - period];
    return static_cast<Token>((std::uint64_t{prefix.back()} + 1) % vocab);
  }
};

/// Copying stream like an induction head: the token that followed the most recent earlier
/// occurrence of the last token; (7 * last + 3) mod vocab when the last token is new.
/// Prompts with repeats are copied, which n-gram drafts predict well.
struct InductionRule {
  Token vocab = 16;
  [[nodiscard]] Token operator()(std::span<const Token> prefix) const {
    const Token last = prefix.back();
    for (std::size_t i = prefix.size() - 1; i-- > 0;) {
      if (prefix[i] == last) return prefix[i + 1];
    }
    return static_cast<Token>((7 * std::uint64_t{last} + 3) % vocab);
  }
};

/// A rule and a short description of it, for test traces.
struct NamedRule {
  std::string name;
  NextTokenRule rule;
  Token vocab = 0;  ///< every token the rule emits is below this
};

/// One of the rules above with random parameters, drawn from `rng`; vocabularies stay below
/// 64 so streams repeat and stop tokens get hit.
inline NamedRule random_rule(std::mt19937_64& rng) {
  const auto pick = [&rng](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  const Token vocab = static_cast<Token>(pick(2, 48));
  switch (pick(0, 5)) {
    case 0: {
      const AffineRule r{vocab, static_cast<Token>(pick(1, 9)), static_cast<Token>(pick(0, 9))};
      return {"affine(vocab=" + std::to_string(r.vocab) + ",mul=" + std::to_string(r.mul) +
                  ",add=" + std::to_string(r.add) + ")",
              r, vocab};
    }
    case 1:
    case 2: {
      const HashRule r{vocab, static_cast<std::size_t>(pick(1, 3)), rng(), pick(0, 2) == 0};
      return {"hash(vocab=" + std::to_string(r.vocab) + ",context=" + std::to_string(r.context) +
                  ",seed=" + std::to_string(r.seed) + (r.with_position ? ",position)" : ")"),
              r, vocab};
    }
    case 3: {
      TableRule r;
      r.otherwise = static_cast<Token>(pick(0, vocab - 1));
      for (Token t = 0; t < vocab; ++t) {
        if (pick(0, 3) != 0) r.table[t] = static_cast<Token>(pick(0, vocab - 1));
      }
      return {"table(vocab=" + std::to_string(vocab) + ",entries=" + std::to_string(r.table.size()) + ")", r, vocab};
    }
    case 4: {
      const RepeatRule r{static_cast<std::size_t>(pick(1, 12)), vocab};
      return {"repeat(period=" + std::to_string(r.period) + ",vocab=" + std::to_string(vocab) + ")", r, vocab};
    }
    default: return {"induction(vocab=" + std::to_string(vocab) + ")", InductionRule{vocab}, vocab};
  }
}

/// Plain greedy decoding by `rule`, no decoder involved: up to `n` tokens after `prompt`,
/// ending early with the first token in `stops` (included).
template <class Rule>
[[nodiscard]] std::vector<Token> plain_greedy(const Rule& rule, std::span<const Token> prompt, std::size_t n,
                                              std::span<const Token> stops = {}) {
  std::vector<Token> sequence(prompt.begin(), prompt.end());
  std::vector<Token> out;
  while (out.size() < n) {
    const Token t = rule(std::span<const Token>(sequence));
    out.push_back(t);
    sequence.push_back(t);
    if (std::find(stops.begin(), stops.end(), t) != stops.end()) break;
  }
  return out;
}

/// What generate() must return for a greedy rule: its tokens and stop reason.
struct GreedyReference {
  std::vector<Token> tokens;
  StopReason stop_reason = StopReason::max_new_tokens;
};

/// The reference result of generating after `prompt` under `options` (the prompt must fit
/// max_context). A stop token ending the output wins over the limit it may also reach, and
/// max_new_tokens wins over max_context when both end it at once.
template <class Rule>
[[nodiscard]] GreedyReference plain_greedy(const Rule& rule, std::span<const Token> prompt,
                                           const DecodeOptions& options) {
  std::size_t n = options.max_new_tokens;
  if (options.max_context != 0) n = std::min(n, options.max_context - prompt.size());
  GreedyReference ref;
  ref.tokens = plain_greedy(rule, prompt, n, options.stop_tokens);
  const auto& stops = options.stop_tokens;
  if (!ref.tokens.empty() && std::find(stops.begin(), stops.end(), ref.tokens.back()) != stops.end()) {
    ref.stop_reason = StopReason::stop_token;
  } else if (ref.tokens.size() == options.max_new_tokens) {
    ref.stop_reason = StopReason::max_new_tokens;
  } else {
    ref.stop_reason = StopReason::max_context;
  }
  return ref;
}

/// What a GreedyModel throws when told to fail.
struct ModelFault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// When an injected forward fault fires.
enum class FaultTiming {
  before_change,  ///< the model throws holding what it held before the call
  after_change,   ///< the model has taken the tokens in (and written `next`) when it throws
};

/// A TargetModel that decodes greedily by a rule and checks its contract.
///
/// It holds the tokens it was fed (its "KV cache") and answers next[i] = rule(held tokens up
/// to and including tokens[i]). Every call is checked against the TargetModel contract:
/// forward at pos == length(), 1 <= tokens.size() <= max_batch(), next.size() ==
/// tokens.size(), rollback(pos) with pos <= length(), and no position written at or past
/// max_positions() (the KV cache's size, when set). A violation is recorded in
/// violations() (the call then proceeds as best it can, so one bug does not hide others);
/// tests assert that list is empty. Faults can be injected into the k-th forward or rollback.
///
/// Once warm (reserve(), or a first generation of the same length) forward and rollback do
/// not allocate, so the model can sit inside allocation-counting tests.
class GreedyModel {
 public:
  /// max_batch() of a model that takes any number of tokens a pass.
  static constexpr std::size_t kUnlimitedBatch = std::numeric_limits<std::size_t>::max();

  explicit GreedyModel(NextTokenRule rule, std::size_t max_batch = 8) : rule_(std::move(rule)), max_batch_(max_batch) {}

  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) {
    ++forward_calls_;
    forwarded_tokens_ += tokens.size();
    if (pos != history_.size()) {
      violation("forward at pos " + std::to_string(pos) + " but the model holds " + std::to_string(history_.size()));
      history_.resize(pos, kPadding);
    }
    if (tokens.empty() || tokens.size() > max_batch_) {
      violation("forward of " + std::to_string(tokens.size()) + " tokens; max_batch() is " +
                std::to_string(max_batch_));
    }
    if (next.size() != tokens.size()) {
      violation("forward with next.size() " + std::to_string(next.size()) + " != tokens.size() " +
                std::to_string(tokens.size()));
    }
    check_positions("forward", pos, tokens.size());
    const bool fault = forward_fault_ != 0 && --forward_fault_ == 0;
    if (fault && forward_fault_timing_ == FaultTiming::before_change) throw ModelFault("injected forward fault");
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      history_.push_back(tokens[i]);
      const Token t = rule_(std::span<const Token>(history_));
      if (i < next.size()) next[i] = t;
    }
    peak_length_ = std::max(peak_length_, history_.size());
    if (fault) throw ModelFault("injected forward fault");
  }

  /// TreeTargetModel: next[i] = rule(held tokens, then the path to tokens[i]); the model then
  /// holds the pass's tokens in pass order, as a real cache would, until keep() or rollback().
  /// The contract is checked as for forward, and parents must form a tree.
  void forward_tree(std::size_t pos, std::span<const Token> tokens, std::span<const std::int32_t> parents,
                    std::span<Token> next) {
    forward_tree(pos, tokens, parents, next, {});
  }
  /// TopKTreeModel: as above, and top[i * K + r] = next[i] + r (K = top.size() / n; modulo the
  /// vocabulary set by set_top_vocabulary()): the rule's token first, then its successors, a
  /// ranking the drafters can learn from.
  void forward_tree(std::size_t pos, std::span<const Token> tokens, std::span<const std::int32_t> parents,
                    std::span<Token> next, std::span<Token> top) {
    ++forward_calls_;
    ++tree_calls_;
    forwarded_tokens_ += tokens.size();
    if (pos != history_.size()) {
      violation("forward_tree at pos " + std::to_string(pos) + " but the model holds " +
                std::to_string(history_.size()));
      history_.resize(pos, kPadding);
    }
    if (tokens.empty() || tokens.size() > max_batch_ || parents.size() != tokens.size() ||
        next.size() != tokens.size() || (!top.empty() && top.size() % tokens.size() != 0)) {
      violation("forward_tree of " + std::to_string(tokens.size()) + " tokens, " + std::to_string(parents.size()) +
                " parents, " + std::to_string(next.size()) + " outputs, " + std::to_string(top.size()) +
                " top-k; max_batch() is " + std::to_string(max_batch_));
      return;
    }
    check_positions("forward_tree", pos, tokens.size());
    const std::size_t k = top.size() / tokens.size();
    path_.assign(history_.begin(), history_.end());
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (parents[i] != kTreeRoot && (parents[i] < 0 || static_cast<std::size_t>(parents[i]) >= i)) {
        violation("forward_tree: token " + std::to_string(i) + " has parent " + std::to_string(parents[i]));
        return;
      }
      // The path root..i, after the held tokens.
      path_.resize(pos);
      std::size_t depth = 0;
      for (std::int32_t at = static_cast<std::int32_t>(i); at != kTreeRoot; at = parents[static_cast<std::size_t>(at)]) {
        ++depth;
      }
      path_.resize(pos + depth);
      std::size_t d = depth;
      for (std::int32_t at = static_cast<std::int32_t>(i); at != kTreeRoot; at = parents[static_cast<std::size_t>(at)]) {
        path_[pos + --d] = tokens[static_cast<std::size_t>(at)];
      }
      next[i] = rule_(std::span<const Token>(path_));
      for (std::size_t r = 0; r < k; ++r) {
        const Token t = static_cast<Token>(next[i] + r);
        top[i * k + r] = top_vocabulary_ == 0 ? t : t % top_vocabulary_;
      }
    }
    history_.insert(history_.end(), tokens.begin(), tokens.end());
    tree_parents_.assign(parents.begin(), parents.end());
    tree_pos_ = pos;
    peak_length_ = std::max(peak_length_, history_.size());
  }

  /// TreeTargetModel: keeps the pass entries `kept`, a root path of the last tree pass at pos.
  void keep(std::size_t pos, std::span<const std::size_t> kept) {
    ++keep_calls_;
    if (pos != tree_pos_ || history_.size() != pos + tree_parents_.size()) {
      violation("keep at pos " + std::to_string(pos) + " not right after a tree pass there");
      return;
    }
    for (std::size_t j = 0; j < kept.size(); ++j) {
      const std::int32_t want = j == 0 ? kTreeRoot : static_cast<std::int32_t>(kept[j - 1]);
      if (kept[j] >= tree_parents_.size() || tree_parents_[kept[j]] != want) {
        violation("keep: entry " + std::to_string(j) + " = " + std::to_string(kept[j]) + " is not on a root path");
        return;
      }
    }
    for (std::size_t j = 0; j < kept.size(); ++j) history_[pos + j] = history_[pos + kept[j]];
    history_.resize(pos + kept.size());
    tree_parents_.clear();
  }

  void rollback(std::size_t pos) {
    ++rollback_calls_;
    if (pos > history_.size()) {
      violation("rollback to " + std::to_string(pos) + " but the model holds " + std::to_string(history_.size()));
    }
    if (rollback_fault_ != 0 && --rollback_fault_ == 0) throw ModelFault("injected rollback fault");
    if (pos == history_.size()) ++noop_rollbacks_;
    // After a tree pass, what a rollback keeps must be a chain from the root.
    for (std::size_t j = 0; j < tree_parents_.size() && tree_pos_ + j < pos; ++j) {
      if (tree_parents_[j] != static_cast<std::int32_t>(j) - 1) {
        violation("rollback to " + std::to_string(pos) + " keeps tree entry " + std::to_string(j) +
                  ", whose parent is " + std::to_string(tree_parents_[j]));
        break;
      }
    }
    tree_parents_.clear();
    history_.resize(std::min(pos, history_.size()));
  }

  [[nodiscard]] std::size_t max_batch() const noexcept { return max_batch_; }

  /// The tokens the model holds, oldest first.
  [[nodiscard]] const std::vector<Token>& history() const noexcept { return history_; }
  [[nodiscard]] std::size_t length() const noexcept { return history_.size(); }
  /// Most tokens held at once since construction or reset_counters().
  [[nodiscard]] std::size_t peak_length() const noexcept { return peak_length_; }
  [[nodiscard]] std::size_t forward_calls() const noexcept { return forward_calls_; }
  /// Tree passes among the forward calls, and keep() calls.
  [[nodiscard]] std::size_t tree_calls() const noexcept { return tree_calls_; }
  [[nodiscard]] std::size_t keep_calls() const noexcept { return keep_calls_; }
  [[nodiscard]] std::size_t rollback_calls() const noexcept { return rollback_calls_; }
  /// Rollbacks that discarded nothing (pos == length()).
  [[nodiscard]] std::size_t noop_rollbacks() const noexcept { return noop_rollbacks_; }
  /// Tokens fed over all forward calls.
  [[nodiscard]] std::size_t forwarded_tokens() const noexcept { return forwarded_tokens_; }
  /// Contract violations seen, one line each; empty when the caller kept the contract.
  [[nodiscard]] const std::vector<std::string>& violations() const noexcept { return violations_; }
  [[nodiscard]] const NextTokenRule& rule() const noexcept { return rule_; }

  void set_max_batch(std::size_t max_batch) noexcept { max_batch_ = max_batch; }
  /// Positions the model holds, as a KV cache of that size would (0, the default: no limit): a
  /// forward or tree pass that writes a position at or past it is a violation.
  void set_max_positions(std::size_t positions) noexcept { max_positions_ = positions; }
  [[nodiscard]] std::size_t max_positions() const noexcept { return max_positions_; }
  /// Keeps the top-k tokens of tree passes below `vocabulary` (0: no bound).
  void set_top_vocabulary(Token vocabulary) noexcept { top_vocabulary_ = vocabulary; }
  /// Room for `tokens` held tokens, so later calls do not allocate.
  void reserve(std::size_t tokens) { history_.reserve(tokens); }
  /// Zeroes the counters and the peak (not the held tokens, nor the violations).
  void reset_counters() noexcept {
    forward_calls_ = rollback_calls_ = noop_rollbacks_ = forwarded_tokens_ = 0;
    peak_length_ = history_.size();
  }
  /// The `k`-th forward call from now (1-based) throws ModelFault; 0 disarms.
  void fail_forward_at(std::size_t k, FaultTiming timing = FaultTiming::before_change) noexcept {
    forward_fault_ = k;
    forward_fault_timing_ = timing;
  }
  /// The `k`-th rollback call from now (1-based) throws ModelFault before discarding
  /// anything; 0 disarms.
  void fail_rollback_at(std::size_t k) noexcept { rollback_fault_ = k; }

 private:
  // Filler for positions a contract-violating forward skipped over.
  static constexpr Token kPadding = std::numeric_limits<Token>::max();

  void violation(std::string what) { violations_.push_back(std::move(what)); }

  // A pass writes positions pos .. pos + count - 1 (a tree pass too: one entry per token).
  void check_positions(const char* call, std::size_t pos, std::size_t count) {
    if (max_positions_ != 0 && pos + count > max_positions_) {
      violation(std::string(call) + " of " + std::to_string(count) + " tokens at pos " + std::to_string(pos) +
                " writes positions up to " + std::to_string(pos + count - 1) + "; the model holds " +
                std::to_string(max_positions_) + " (positions 0 .. " + std::to_string(max_positions_ - 1) + ")");
    }
  }

  NextTokenRule rule_;
  std::size_t max_batch_;
  std::size_t max_positions_ = 0;
  std::vector<Token> history_;
  std::size_t peak_length_ = 0;
  std::size_t forward_calls_ = 0;
  std::size_t rollback_calls_ = 0;
  std::size_t noop_rollbacks_ = 0;
  std::size_t forwarded_tokens_ = 0;
  std::size_t tree_calls_ = 0;
  std::size_t keep_calls_ = 0;
  std::vector<Token> path_;                 // forward_tree's scratch
  std::vector<std::int32_t> tree_parents_;  // the last tree pass's parents, until keep or rollback
  std::size_t tree_pos_ = 0;
  Token top_vocabulary_ = 0;
  std::size_t forward_fault_ = 0;
  FaultTiming forward_fault_timing_ = FaultTiming::before_change;
  std::size_t rollback_fault_ = 0;
  std::vector<std::string> violations_;
};

/// The positions a model must hold for a sequence under `options` (0: no limit), for
/// GreedyModel::set_max_positions: max_context - 1, since a sequence never feeds the last token
/// it may emit, so a chain's passes end below that, and a tree pass, one KV entry per node,
/// must too (tree_node_limit()).
[[nodiscard]] constexpr std::size_t kv_positions(const DecodeOptions& options) noexcept {
  return options.max_context == 0 ? 0 : options.max_context - 1;
}

/// GreedyModel behind AbstractTargetModel, for decoders over a run-time backend.
class VirtualGreedyModel final : public AbstractTargetModel {
 public:
  explicit VirtualGreedyModel(NextTokenRule rule, std::size_t max_batch = 8) : inner_(std::move(rule), max_batch) {}

  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) override {
    inner_.forward(pos, tokens, next);
  }
  void rollback(std::size_t pos) override { inner_.rollback(pos); }
  [[nodiscard]] std::size_t max_batch() const override { return inner_.max_batch(); }

  /// The checked model doing the work, for its counters and history.
  [[nodiscard]] GreedyModel& inner() noexcept { return inner_; }
  [[nodiscard]] const GreedyModel& inner() const noexcept { return inner_; }

 private:
  GreedyModel inner_;
};

static_assert(TargetModel<GreedyModel>);
static_assert(TargetModel<VirtualGreedyModel>);

#ifndef NGRAMSPEC_TEST_NO_GMOCK

/// GoogleMock model for pinning the exact forward / rollback sequence of a scenario.
/// Use StrictMock<MockTargetModel>, match the spans with TokensAre and write the model's
/// tokens with WriteNext.
class MockTargetModel : public AbstractTargetModel {
 public:
  MOCK_METHOD(void, forward, (std::size_t pos, std::span<const Token> tokens, std::span<Token> next), (override));
  MOCK_METHOD(void, rollback, (std::size_t pos), (override));
  MOCK_METHOD(std::size_t, max_batch, (), (const, override));
};

static_assert(TargetModel<MockTargetModel>);

/// Matches a span of tokens (or anything iterable) whose elements, copied into a
/// std::vector<Token>, match `inner`, e.g. TokensAre(ElementsAre(4, 5)).
MATCHER_P(TokensAre, inner, "tokens " + ::testing::DescribeMatcher<std::vector<Token>>(inner, negation)) {
  const std::vector<Token> tokens(arg.begin(), arg.end());
  *result_listener << "whose tokens are " << ::testing::PrintToString(tokens);
  return ::testing::ExplainMatchResult(inner, tokens, result_listener);
}

/// Action for MockTargetModel::forward: writes `tokens` to `next`, which must have their size.
inline auto WriteNext(std::vector<Token> tokens) {
  return [tokens = std::move(tokens)](std::size_t, std::span<const Token>, std::span<Token> next) {
    if (next.size() != tokens.size()) {
      ADD_FAILURE() << "forward's next has " << next.size() << " slots; the scenario answers " << tokens.size()
                    << " tokens";
    }
    std::copy_n(tokens.begin(), std::min(tokens.size(), next.size()), next.begin());
  };
}

#endif  // NGRAMSPEC_TEST_NO_GMOCK

}  // namespace ngramspec::test
