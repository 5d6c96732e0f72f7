// Models and drafters that break the contract (docs/MODEL_CONTRACT.md, "A model that breaks the
// contract"): what the decoder checks, it checks; what it cannot see, it passes on unchanged, and
// neither generate() nor the step API loses memory safety, determinism or its limits.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ngramspec/decode_step.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/sampling.hpp"
#include "ngramspec/speculative_decoder.hpp"
#include "ngramspec/token_sampler.hpp"
#include "support/mock_models.hpp"
#include "support/test_drafters.hpp"

namespace ngramspec::test {
namespace {

constexpr std::uint64_t kSeeds = 200;
constexpr std::size_t kUnlimited = std::numeric_limits<std::size_t>::max();

std::size_t pick(std::mt19937_64& rng, std::size_t lo, std::size_t hi) {
  return static_cast<std::size_t>(std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng));
}

// --- the hostile model --------------------------------------------------------------------------

/// Its token for fed position i of a forward: (held tokens up to and including tokens[i], i,
/// tokens.size(), forward calls so far). A rule of the prefix alone is a well-behaved model.
using HostileRule =
    std::function<Token(std::span<const Token> prefix, std::size_t index, std::size_t fed, std::size_t call)>;

/// A TargetModel that may break the contract in the ways the decoder cannot see, and checks
/// the parts the decoder must keep: forward at pos == length(), 1 <= n <= the max_batch() it
/// last reported, next.size() == n, rollback to at most length(). Breaches the caller makes
/// are recorded in violations().
class HostileModel {
 public:
  explicit HostileModel(HostileRule rule, std::size_t max_batch) : rule_(std::move(rule)), batches_{max_batch} {}

  /// max_batch() answers these in turn, one per call, the last one for ever.
  void set_max_batch_sequence(std::vector<std::size_t> batches) {
    batches_ = std::move(batches);
    batch_reads_ = 0;
  }
  /// Slots forward writes: written(call, n) of the n it was given; the rest stay untouched.
  void set_short_writes(std::function<std::size_t(std::size_t call, std::size_t n)> written) {
    written_ = std::move(written);
  }

  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) {
    if (pos != held_.size()) fail("forward at " + std::to_string(pos) + " holding " + std::to_string(held_.size()));
    if (tokens.empty() || tokens.size() > current_batch_) {
      fail("forward of " + std::to_string(tokens.size()) + " tokens; max_batch() said " +
           std::to_string(current_batch_));
    }
    if (next.size() != tokens.size()) fail("next.size() != tokens.size()");
    held_.resize(std::min(pos, held_.size()));
    const std::size_t n = std::min(tokens.size(), next.size());
    const std::size_t write = written_ ? std::min(written_(calls_, n), n) : n;
    last_written_.clear();
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      held_.push_back(tokens[i]);
      const Token t = rule_(std::span<const Token>(held_), i, tokens.size(), calls_);
      if (i < write) {
        next[i] = t;
        last_written_.push_back(t);
      }
    }
    ++calls_;
    fed_ += tokens.size();
  }

  void rollback(std::size_t pos) {
    if (pos > held_.size()) fail("rollback to " + std::to_string(pos) + " holding " + std::to_string(held_.size()));
    held_.resize(std::min(pos, held_.size()));
  }

  [[nodiscard]] std::size_t max_batch() const {
    current_batch_ = batches_[std::min(batch_reads_, batches_.size() - 1)];
    ++batch_reads_;
    return current_batch_;
  }

  [[nodiscard]] std::size_t length() const noexcept { return held_.size(); }
  [[nodiscard]] std::size_t forward_calls() const noexcept { return calls_; }
  [[nodiscard]] std::size_t fed_tokens() const noexcept { return fed_; }
  [[nodiscard]] std::size_t batch_reads() const noexcept { return batch_reads_; }
  /// What the last forward wrote, in slot order (its first `written` slots).
  [[nodiscard]] const std::vector<Token>& last_written() const noexcept { return last_written_; }
  [[nodiscard]] const std::vector<std::string>& violations() const noexcept { return violations_; }

 private:
  void fail(std::string what) { violations_.push_back(std::move(what)); }

  HostileRule rule_;
  std::vector<std::size_t> batches_;
  mutable std::size_t batch_reads_ = 0;
  mutable std::size_t current_batch_ = 0;
  std::function<std::size_t(std::size_t, std::size_t)> written_;
  std::vector<Token> held_;
  std::vector<Token> last_written_;
  std::size_t calls_ = 0;
  std::size_t fed_ = 0;
  std::vector<std::string> violations_;
};

static_assert(TargetModel<HostileModel>);

// --- scenarios ------------------------------------------------------------------------------------

enum class DrafterChoice { ngram, match };

/// A random scenario over a palette of token ids from the whole 32-bit range: a rule of the
/// prefix, a prompt, options, max_batch and one of the two shipped drafters.
struct Scenario {
  std::uint64_t seed = 0;
  std::vector<Token> palette;  ///< the ids the model emits: extremes and random 32-bit values
  NamedRule base;              ///< the rule over palette indices
  std::vector<Token> prompt;
  DecodeOptions options;
  std::size_t max_batch = 1;
  DrafterChoice drafter = DrafterChoice::ngram;
  NGramConfig ngram;
  MatchConfig match;

  [[nodiscard]] std::string describe() const {
    return "seed=" + std::to_string(seed) + " rule=" + base.name + " max_batch=" +
           (max_batch == kUnlimited ? std::string("unlimited") : std::to_string(max_batch)) + " prompt=" +
           std::to_string(prompt.size()) + " max_new_tokens=" + std::to_string(options.max_new_tokens) +
           " max_context=" + std::to_string(options.max_context) + " stops=" +
           std::to_string(options.stop_tokens.size()) + " speculate=" + std::to_string(options.speculate) +
           " max_drafts=" + std::to_string(options.max_drafts) +
           " drafter=" + (drafter == DrafterChoice::ngram ? "ngram" : "match");
  }

  /// The rule in palette ids: the base rule applied to the prefix's palette indices. An id
  /// outside the palette (a short-writing model feeds back whatever its slots held) stands for
  /// index id mod vocab, so the base rule only ever sees its own vocabulary.
  [[nodiscard]] NextTokenRule rule() const {
    return [palette = palette, base = base.rule](std::span<const Token> prefix) {
      std::vector<Token> indices(prefix.size());
      for (std::size_t i = 0; i < prefix.size(); ++i) {
        const auto at = std::find(palette.begin(), palette.end(), prefix[i]);
        indices[i] = static_cast<Token>(at != palette.end() ? static_cast<std::size_t>(at - palette.begin())
                                                            : prefix[i] % palette.size());
      }
      return palette.at(base(std::span<const Token>(indices)));
    };
  }

  [[nodiscard]] AnyDrafter make_drafter() const {
    return drafter == DrafterChoice::ngram ? AnyDrafter(NGramPredictor(ngram)) : AnyDrafter(MatchDrafter(match));
  }
};

Scenario random_scenario(std::uint64_t seed) {
  std::mt19937_64 rng(scramble(seed ^ 0x6d6f64656cULL));
  Scenario s;
  s.seed = seed;
  s.base = random_rule(rng);
  // Extremes first, then random ids; all distinct.
  std::vector<Token> ids = {0xFFFFFFFFU, 0x80000000U, 0xFFFFFFFEU, 0x7FFFFFFFU, 0U, kForeignToken};
  while (ids.size() < s.base.vocab) {
    const auto t = static_cast<Token>(rng());
    if (std::find(ids.begin(), ids.end(), t) == ids.end()) ids.push_back(t);
  }
  std::shuffle(ids.begin(), ids.end(), rng);
  s.palette.assign(ids.begin(), ids.begin() + s.base.vocab);

  std::vector<Token> motif(pick(rng, 1, 6));
  for (Token& t : motif) t = s.palette[pick(rng, 0, s.palette.size() - 1)];
  const std::size_t length = pick(rng, 1, 30);
  for (std::size_t i = 0; i < length; ++i) {
    s.prompt.push_back(pick(rng, 0, 7) == 0 ? s.palette[pick(rng, 0, s.palette.size() - 1)] : motif[i % motif.size()]);
  }
  s.options.max_new_tokens = pick(rng, 0, 9) == 0 ? pick(rng, 0, 1) : pick(rng, 2, 80);
  if (pick(rng, 0, 2) == 0) s.options.stop_tokens.push_back(s.palette[pick(rng, 0, s.palette.size() - 1)]);
  if (pick(rng, 0, 2) == 0) s.options.max_context = s.prompt.size() + pick(rng, 0, 90);
  s.options.speculate = pick(rng, 0, 7) != 0;
  static constexpr std::size_t kMaxDrafts[] = {64, 64, 1, 3, kMaxDraftsPerPass};
  s.options.max_drafts = kMaxDrafts[pick(rng, 0, std::size(kMaxDrafts) - 1)];
  static constexpr std::size_t kBatches[] = {1, 2, 3, 5, 8, 17, kUnlimited};
  s.max_batch = kBatches[pick(rng, 0, std::size(kBatches) - 1)];
  s.drafter = pick(rng, 0, 1) == 0 ? DrafterChoice::ngram : DrafterChoice::match;
  const std::vector<NGramConfig> configs = ngram_configs();
  s.ngram = configs[pick(rng, 0, configs.size() - 1)];
  // Small caps keep the per-generation reset (O(cap)) cheap; the tiny ones overflow the index.
  s.match.index_capacity = pick(rng, 1, 3) == 1 ? pick(rng, MatchDrafter::kMaxCountOrder, 12) : 256;
  s.match.copy_min_match = pick(rng, 1, 4);
  s.match.max_drafts = pick(rng, 1, 12);
  s.match.count_max_order = pick(rng, 2, 4);
  return s;
}

/// A rule that sees only the prefix: a model that keeps the contract apart from its ids.
HostileRule prefix_only(NextTokenRule rule) {
  return [rule = std::move(rule)](std::span<const Token> prefix, std::size_t, std::size_t, std::size_t) {
    return rule(prefix);
  };
}

// --- what every run must satisfy -------------------------------------------------------------------

/// The limits and the stats' arithmetic, which hold whatever the model answers.
void expect_limits_and_stats(const Scenario& s, const DecodeResult& r) {
  const DecodeOptions& o = s.options;
  EXPECT_LE(r.tokens.size(), o.max_new_tokens);
  if (o.max_context != 0) {
    EXPECT_LE(s.prompt.size() + r.tokens.size(), o.max_context);
  }
  switch (r.stop_reason) {
    case StopReason::max_new_tokens: EXPECT_EQ(r.tokens.size(), o.max_new_tokens); break;
    case StopReason::max_context: EXPECT_EQ(s.prompt.size() + r.tokens.size(), o.max_context); break;
    case StopReason::stop_token:
      ASSERT_FALSE(r.tokens.empty());
      EXPECT_NE(std::find(o.stop_tokens.begin(), o.stop_tokens.end(), r.tokens.back()), o.stop_tokens.end());
      break;
    case StopReason::callback: ADD_FAILURE() << "no callback stops these runs"; break;
  }
  // A stop token only ever ends the output.
  for (std::size_t i = 0; i + 1 < r.tokens.size(); ++i) {
    EXPECT_EQ(std::find(o.stop_tokens.begin(), o.stop_tokens.end(), r.tokens[i]), o.stop_tokens.end()) << i;
  }
  const DecodeStats& st = r.stats;
  EXPECT_EQ(st.generated, r.tokens.size());
  EXPECT_LE(st.accepted, st.drafted);
  EXPECT_EQ(std::accumulate(st.drafted_at.begin(), st.drafted_at.end(), std::size_t{0}), st.drafted);
  EXPECT_EQ(std::accumulate(st.accepted_at.begin(), st.accepted_at.end(), std::size_t{0}), st.accepted);
  ASSERT_EQ(st.drafted_at.size(), st.accepted_at.size());
  for (std::size_t i = 0; i < st.drafted_at.size(); ++i) {
    EXPECT_LE(st.accepted_at[i], st.drafted_at[i]) << i;
    if (i > 0) {
      EXPECT_LE(st.drafted_at[i], st.drafted_at[i - 1]) << i;
    }
  }
  if (st.generated > 0) {
    // Each pass emits its accepted drafts and the model's token; only the last may be cut short.
    EXPECT_GE(st.generated, st.accepted + st.decode_passes);
    EXPECT_LE(st.generated, st.accepted + st.decode_passes + 1);
    const std::size_t chunk = s.max_batch == kUnlimited ? s.prompt.size() : s.max_batch;
    EXPECT_EQ(st.prefill_passes, (s.prompt.size() + chunk - 1) / chunk);
  }
  if (!o.speculate) {
    EXPECT_EQ(st.drafted, 0U);
  }
}

/// The model's side: it was driven within the contract and ends holding the prompt and every
/// token but the last.
void expect_model_driven_right(const Scenario& s, const HostileModel& model, const DecodeResult& r) {
  EXPECT_TRUE(model.violations().empty()) << model.violations().front();
  EXPECT_EQ(model.length(), r.tokens.empty() ? 0 : s.prompt.size() + r.tokens.size() - 1);
  if (!r.tokens.empty()) {
    EXPECT_EQ(model.forward_calls(), r.stats.prefill_passes + r.stats.decode_passes);
    EXPECT_EQ(model.fed_tokens(), s.prompt.size() + r.stats.decode_passes + r.stats.drafted);
  }
}

/// generate() with a callback that checks, chunk by chunk, that the emitted tokens are the
/// ones the last forward wrote (when `check_written`) and that the model holds prompt +
/// emitted − 1 tokens.
template <class D>
DecodeResult generate_checked(SpeculativeDecoder<HostileModel, D>& decoder, const Scenario& s, bool check_written) {
  std::size_t emitted = 0;
  return decoder.generate(s.prompt, s.options, [&](std::span<const Token> chunk) {
    const HostileModel& model = decoder.model();
    const std::vector<Token>& written = model.last_written();
    if (check_written) {
      if (emitted == 0) {
        // The prefill's last forward: its last slot is the first output token.
        EXPECT_EQ(chunk.size(), 1U);
        EXPECT_TRUE(!written.empty() && chunk[0] == written.back());
      } else {
        EXPECT_LE(chunk.size(), written.size());
        EXPECT_TRUE(std::equal(chunk.begin(), chunk.end(), written.begin())) << "after " << emitted << " tokens";
      }
    }
    emitted += chunk.size();
    EXPECT_EQ(model.length(), s.prompt.size() + emitted - 1);
    return true;
  });
}

/// The same generation through the step API, as an engine runs it with cap = max_batch() − 1.
/// `next` is the engine's buffer for the model's tokens, kept across passes. Also checks that
/// each step keeps within the room it gave the drafter and rolls back only within what the
/// pass wrote.
template <class D>
DecodeResult run_steps(HostileModel& model, D& drafter, const Scenario& s, std::vector<Token>& next) {
  const DecodeOptions& o = s.options;
  DecodeResult result;
  SequenceState state = start_sequence(s.prompt.size(), o);
  model.rollback(0);
  drafter.reset();
  if (state.finished) {
    result.stop_reason = state.stop_reason;
    return result;
  }
  const std::size_t max_batch = model.max_batch();
  if (o.speculate) drafter.update(std::span<const Token>(s.prompt));
  const std::span<const Token> prompt(s.prompt);
  Token first = 0;
  for (std::size_t pos = 0; pos < prompt.size();) {
    const std::size_t n = std::min(max_batch, prompt.size() - pos);
    if (next.size() < n) next.resize(n);
    model.forward(pos, prompt.subspan(pos, n), std::span<Token>(next).first(n));
    ++result.stats.prefill_passes;
    pos += n;
    first = next[n - 1];
  }
  StepOutcome outcome = accept_drafts(state, {}, std::span<const Token>(&first, 1), o);
  std::vector<Token> fed;
  std::span<const Token> emitted(&first, 1);
  for (;;) {
    result.stats.accepted += outcome.accepted;
    result.tokens.insert(result.tokens.end(), emitted.begin(), emitted.begin() + outcome.emitted);
    if (o.speculate) drafter.update(emitted.first(outcome.emitted));
    advance(state, outcome);
    EXPECT_EQ(model.length(), state.cache_length());
    if (state.finished) break;

    const std::size_t room = draft_limit(state, o, max_batch - 1);
    fed.assign(room + 1, 0);
    fed[0] = result.tokens.back();
    const std::size_t n = propose_drafts(drafter, state, o, max_batch - 1, std::span<Token>(fed).subspan(1));
    EXPECT_LE(n, room);
    if (next.size() < n + 1) next.resize(n + 1);
    const std::size_t pass_start = state.cache_length();
    model.forward(pass_start, std::span<const Token>(fed).first(n + 1), std::span<Token>(next).first(n + 1));
    ++result.stats.decode_passes;
    result.stats.drafted += n;
    outcome = accept_drafts(state, std::span<const Token>(fed).subspan(1, n),
                            std::span<const Token>(next).first(n + 1), o);
    EXPECT_GE(outcome.emitted, 1U);
    EXPECT_LE(outcome.emitted, n + 1);
    EXPECT_GE(outcome.rollback_to, pass_start);
    EXPECT_EQ(outcome.rollback_to + outcome.discarded, pass_start + n + 1);
    if (outcome.discarded != 0) model.rollback(outcome.rollback_to);
    emitted = std::span<const Token>(next).first(n + 1);
  }
  result.stats.generated = result.tokens.size();
  result.stop_reason = state.stop_reason;
  return result;
}

// --- token ids outside any vocabulary ------------------------------------------------------------

TEST(ModelContractTest, IdsOutsideAnyVocabularyAreEmittedAsWrittenByGenerate) {
  for (std::uint64_t seed = 0; seed < kSeeds; ++seed) {
    const Scenario s = random_scenario(seed);
    SCOPED_TRACE(s.describe());
    const GreedyReference ref = plain_greedy(s.rule(), s.prompt, s.options);
    HostileModel model(prefix_only(s.rule()), s.max_batch);
    SpeculativeDecoder<HostileModel, AnyDrafter> decoder(model, s.make_drafter());
    const DecodeResult r = generate_checked(decoder, s, true);
    EXPECT_EQ(r.tokens, ref.tokens);
    EXPECT_EQ(r.stop_reason, ref.stop_reason);
    expect_limits_and_stats(s, r);
    expect_model_driven_right(s, model, r);

    // Plain decoding of the same model through the decoder gives the same tokens.
    DecodeOptions plain = s.options;
    plain.speculate = false;
    HostileModel plain_model(prefix_only(s.rule()), s.max_batch);
    SpeculativeDecoder<HostileModel, AnyDrafter> plain_decoder(plain_model, s.make_drafter());
    const DecodeResult p = plain_decoder.generate(s.prompt, plain);
    EXPECT_EQ(p.tokens, r.tokens);
    EXPECT_EQ(p.stats.drafted, 0U);
  }
}

TEST(ModelContractTest, IdsOutsideAnyVocabularyAreEmittedAsWrittenByTheStepApi) {
  for (std::uint64_t seed = 0; seed < kSeeds; ++seed) {
    const Scenario s = random_scenario(seed);
    SCOPED_TRACE(s.describe());
    HostileModel model(prefix_only(s.rule()), s.max_batch);
    SpeculativeDecoder<HostileModel, AnyDrafter> decoder(model, s.make_drafter());
    const DecodeResult expected = decoder.generate(s.prompt, s.options);

    HostileModel step_model(prefix_only(s.rule()), s.max_batch);
    AnyDrafter drafter = s.make_drafter();
    std::vector<Token> next;
    const DecodeResult r = run_steps(step_model, drafter, s, next);
    EXPECT_EQ(r.tokens, plain_greedy(s.rule(), s.prompt, s.options).tokens);
    EXPECT_EQ(r.tokens, expected.tokens);
    EXPECT_EQ(r.stop_reason, expected.stop_reason);
    EXPECT_EQ(r.stats.decode_passes, expected.stats.decode_passes);
    EXPECT_EQ(r.stats.drafted, expected.stats.drafted);
    EXPECT_EQ(r.stats.accepted, expected.stats.accepted);
    EXPECT_TRUE(step_model.violations().empty()) << step_model.violations().front();
  }
}

/// A repeating stream of extreme ids: once the drafters have seen it twice they predict it, so
/// their tables hold these ids like any others.
template <class D>
void expect_drafter_learns_extreme_cycle(D drafter, std::size_t draft_count) {
  for (std::uint64_t seed = 0; seed < 100; ++seed) {
    SCOPED_TRACE("seed=" + std::to_string(seed));
    std::mt19937_64 rng(scramble(seed));
    std::vector<Token> cycle = {0xFFFFFFFFU, 0x80000000U, 0xFFFFFFFEU, 0x7FFFFFFFU, 0U};
    while (cycle.size() < 5 + pick(rng, 0, 6)) {
      const auto t = static_cast<Token>(rng());
      if (std::find(cycle.begin(), cycle.end(), t) == cycle.end()) cycle.push_back(t);
    }
    std::shuffle(cycle.begin(), cycle.end(), rng);
    drafter.reset();
    const std::size_t seen = 2 * cycle.size() + pick(rng, 0, cycle.size() - 1);
    for (std::size_t i = 0; i < seen; ++i) drafter.update(cycle[i % cycle.size()]);
    std::vector<Token> out(draft_count + 3, 0x12345678U);
    const std::size_t n = drafter.predict(std::span<Token>(out).first(draft_count));
    ASSERT_EQ(n, draft_count);
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(out[i], cycle[(seen + i) % cycle.size()]) << i;
    for (std::size_t i = n; i < out.size(); ++i) EXPECT_EQ(out[i], 0x12345678U) << "wrote past its room at " << i;
  }
}

TEST(ModelContractTest, NGramPredictorTakesEveryThirtyTwoBitId) {
  expect_drafter_learns_extreme_cycle(NGramPredictor(NGramConfig{.min_order = 2, .max_order = 4, .max_drafts = 6}),
                                      6);
}

TEST(ModelContractTest, MatchDrafterTakesEveryThirtyTwoBitId) {
  MatchConfig config;
  config.max_drafts = 6;
  expect_drafter_learns_extreme_cycle(MatchDrafter(config), 6);
}

// --- a model that writes fewer outputs than asked ---------------------------------------------------

/// The slots a short-writing model fills: a function of the call and the size only, so the
/// model is the same on every run.
std::function<std::size_t(std::size_t, std::size_t)> short_writes(std::uint64_t seed) {
  return [seed](std::size_t call, std::size_t n) {
    const std::uint64_t h = scramble(seed ^ (std::uint64_t{call} << 20) ^ n);
    switch (h % 4) {
      case 0: return std::size_t{0};                          // writes nothing
      case 1: return n - 1;                                   // all but the last
      case 2: return static_cast<std::size_t>((h >> 8) % n);  // a random prefix
      default: return n;                                      // all of them
    }
  };
}

TEST(ModelContractTest, ShortWritingModelStaysWithinLimitsAndDeterministicInGenerate) {
  for (std::uint64_t seed = 0; seed < kSeeds; ++seed) {
    const Scenario s = random_scenario(seed);
    SCOPED_TRACE(s.describe());
    const auto run = [&s](bool twice) {
      HostileModel model(prefix_only(s.rule()), s.max_batch);
      model.set_short_writes(short_writes(s.seed));
      SpeculativeDecoder<HostileModel, AnyDrafter> decoder(model, s.make_drafter());
      DecodeResult r = generate_checked(decoder, s, false);
      expect_limits_and_stats(s, r);
      expect_model_driven_right(s, model, r);
      if (twice) {
        // A second generation on the same decoder keeps every limit too (its scratch now
        // holds the first generation's tokens, which a short write leaves in place).
        HostileModel& m = decoder.model();
        const DecodeResult again = generate_checked(decoder, s, false);
        expect_limits_and_stats(s, again);
        EXPECT_TRUE(m.violations().empty());
      }
      return r;
    };
    const DecodeResult first = run(true);
    const DecodeResult second = run(false);
    EXPECT_EQ(first.tokens, second.tokens);
    EXPECT_EQ(first.stop_reason, second.stop_reason);
    EXPECT_EQ(first.stats.decode_passes, second.stats.decode_passes);
    EXPECT_EQ(first.stats.drafted, second.stats.drafted);
  }
}

TEST(ModelContractTest, ShortWritingModelStaysWithinLimitsAndDeterministicInTheStepApi) {
  for (std::uint64_t seed = 0; seed < kSeeds; ++seed) {
    const Scenario s = random_scenario(seed);
    SCOPED_TRACE(s.describe());
    const auto run = [&s] {
      HostileModel model(prefix_only(s.rule()), s.max_batch);
      model.set_short_writes(short_writes(s.seed));
      AnyDrafter drafter = s.make_drafter();
      std::vector<Token> next(4, 0xDEADBEEFU);
      DecodeResult r = run_steps(model, drafter, s, next);
      EXPECT_TRUE(model.violations().empty()) << model.violations().front();
      EXPECT_EQ(model.length(), r.tokens.empty() ? 0 : s.prompt.size() + r.tokens.size() - 1);
      EXPECT_LE(r.tokens.size(), s.options.max_new_tokens);
      if (s.options.max_context != 0) {
        EXPECT_LE(s.prompt.size() + r.tokens.size(), s.options.max_context);
      }
      return r;
    };
    const DecodeResult first = run();
    const DecodeResult second = run();
    EXPECT_EQ(first.tokens, second.tokens);
    EXPECT_EQ(first.stop_reason, second.stop_reason);
  }
}

// --- max_batch() --------------------------------------------------------------------------------

TEST(ModelContractTest, MaxBatchZeroIsAnErrorNamingTheValue) {
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    const Scenario s = random_scenario(seed);
    SCOPED_TRACE(s.describe());
    HostileModel model(prefix_only(s.rule()), 0);
    SpeculativeDecoder<HostileModel, AnyDrafter> decoder(model, s.make_drafter());
    try {
      (void)decoder.generate(s.prompt, s.options);
      ADD_FAILURE() << "max_batch() == 0 was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("max_batch() is 0"), std::string::npos) << e.what();
    }
    EXPECT_EQ(model.forward_calls(), 0U);
    // The decoder stays usable once the model takes tokens again.
    model.set_max_batch_sequence({s.max_batch});
    const DecodeResult r = decoder.generate(s.prompt, s.options);
    EXPECT_EQ(r.tokens, plain_greedy(s.rule(), s.prompt, s.options).tokens);
    EXPECT_TRUE(model.violations().empty()) << model.violations().front();
  }
}

TEST(ModelContractTest, ChangingMaxBatchIsNeverExceeded) {
  for (std::uint64_t seed = 0; seed < kSeeds; ++seed) {
    const Scenario s = random_scenario(seed);
    SCOPED_TRACE(s.describe());
    std::mt19937_64 rng(scramble(seed + 17));
    std::vector<std::size_t> batches(8);
    for (std::size_t& b : batches) b = pick(rng, 0, 5) == 0 ? kUnlimited : pick(rng, 1, 9);
    HostileModel model(prefix_only(s.rule()), 1);
    model.set_max_batch_sequence(batches);
    SpeculativeDecoder<HostileModel, AnyDrafter> decoder(model, s.make_drafter());
    const std::vector<Token> expected = plain_greedy(s.rule(), s.prompt, s.options).tokens;
    // Each generation reads max_batch() once and keeps within that answer: the model checks
    // every forward against the value it last reported.
    for (std::size_t g = 0; g < 4; ++g) {
      SCOPED_TRACE("generation " + std::to_string(g));
      const std::size_t reads = model.batch_reads();
      const DecodeResult r = decoder.generate(s.prompt, s.options);
      EXPECT_EQ(model.batch_reads(), reads + 1);
      EXPECT_EQ(r.tokens, expected);
      EXPECT_TRUE(model.violations().empty()) << model.violations().front();
    }
    // The step API: the engine reads max_batch() before each step and passes cap = it − 1.
    HostileModel step_model(prefix_only(s.rule()), 1);
    step_model.set_max_batch_sequence(batches);
    AnyDrafter drafter = s.make_drafter();
    SequenceState state = start_sequence(s.prompt.size(), s.options);
    drafter.reset();
    drafter.update(std::span<const Token>(s.prompt));
    std::vector<Token> out;
    std::vector<Token> fed;
    std::vector<Token> next(1);
    if (!state.finished) {
      for (std::size_t pos = 0; pos < s.prompt.size();) {
        const std::size_t n = std::min(step_model.max_batch(), s.prompt.size() - pos);
        next.resize(std::max(next.size(), n));
        step_model.forward(pos, std::span<const Token>(s.prompt).subspan(pos, n), std::span<Token>(next).first(n));
        pos += n;
        if (pos == s.prompt.size()) next[0] = next[n - 1];
      }
      StepOutcome outcome = accept_drafts(state, {}, std::span<const Token>(next).first(1), s.options);
      for (;;) {
        out.insert(out.end(), next.begin(), next.begin() + static_cast<std::ptrdiff_t>(outcome.emitted));
        if (s.options.speculate) drafter.update(std::span<const Token>(next).first(outcome.emitted));
        advance(state, outcome);
        if (state.finished) break;
        const std::size_t cap = std::min(step_model.max_batch(), std::size_t{64}) - 1;
        fed.assign(cap + 1, 0);
        fed[0] = out.back();
        const std::size_t n = propose_drafts(drafter, state, s.options, cap, std::span<Token>(fed).subspan(1));
        next.resize(std::max(next.size(), n + 1));
        step_model.forward(state.cache_length(), std::span<const Token>(fed).first(n + 1),
                           std::span<Token>(next).first(n + 1));
        outcome = accept_drafts(state, std::span<const Token>(fed).subspan(1, n),
                                std::span<const Token>(next).first(n + 1), s.options);
        if (outcome.discarded != 0) step_model.rollback(outcome.rollback_to);
      }
    }
    EXPECT_EQ(out, expected);
    EXPECT_TRUE(step_model.violations().empty()) << step_model.violations().front();
  }
}

// --- a drafter that claims more drafts than it had room for --------------------------------------

/// Claims one more than its room, or everything.
template <class D>
class Overclaiming {
 public:
  Overclaiming(D inner, bool everything) : inner_(std::move(inner)), everything_(everything) {}
  void update(Token token) { inner_.update(token); }
  void update(std::span<const Token> tokens) { inner_.update(tokens); }
  void reset() { inner_.reset(); }
  [[nodiscard]] std::size_t predict(std::span<Token> out) const {
    (void)inner_.predict(out);
    return everything_ ? std::numeric_limits<std::size_t>::max() : out.size() + 1;
  }

 private:
  D inner_;
  bool everything_;
};

TEST(ModelContractTest, OverclaimingDrafterIsClamped) {
  for (std::uint64_t seed = 0; seed < kSeeds; ++seed) {
    const Scenario s = random_scenario(seed);
    SCOPED_TRACE(s.describe());
    const bool everything = seed % 2 == 0;
    const GreedyReference ref = plain_greedy(s.rule(), s.prompt, s.options);
    HostileModel model(prefix_only(s.rule()), s.max_batch);
    SpeculativeDecoder<HostileModel, Overclaiming<AnyDrafter>> decoder(
        model, Overclaiming<AnyDrafter>(s.make_drafter(), everything));
    const DecodeResult r = generate_checked(decoder, s, true);
    EXPECT_EQ(r.tokens, ref.tokens);
    EXPECT_EQ(r.stop_reason, ref.stop_reason);
    expect_limits_and_stats(s, r);
    expect_model_driven_right(s, model, r);
    if (s.max_batch != kUnlimited) {
      EXPECT_LE(r.stats.drafted, r.stats.decode_passes * (s.max_batch - 1));
    }

    HostileModel step_model(prefix_only(s.rule()), s.max_batch);
    Overclaiming<AnyDrafter> drafter(s.make_drafter(), everything);
    std::vector<Token> next;
    const DecodeResult steps = run_steps(step_model, drafter, s, next);
    // Only the tokens: a clamped count takes whatever the room held beyond what the drafter
    // wrote, which is the caller's scratch and differs between the two loops.
    EXPECT_EQ(steps.tokens, ref.tokens);
    EXPECT_TRUE(step_model.violations().empty()) << step_model.violations().front();
  }
}

// --- a model whose answers depend on how it was fed ------------------------------------------------

/// Batch-variant: the token depends on the prefix and, now and then, on the slot, the batch
/// size and how many forwards came before (state that rollback does not discard).
HostileRule batch_variant(const Scenario& s) {
  return [rule = s.rule(), palette = s.palette, seed = s.seed](std::span<const Token> prefix, std::size_t index,
                                                                std::size_t fed, std::size_t call) {
    const std::uint64_t h = scramble(seed ^ (std::uint64_t{index} << 8) ^ (std::uint64_t{fed} << 24) ^
                                     (std::uint64_t{call} << 40) ^ prefix.size());
    if (h % 3 != 0) return rule(prefix);
    return palette[(h >> 8) % palette.size()];
  };
}

TEST(ModelContractTest, BatchVariantModelGetsOnlyItsOwnTokensAndTheLimits) {
  for (std::uint64_t seed = 0; seed < kSeeds; ++seed) {
    const Scenario s = random_scenario(seed);
    SCOPED_TRACE(s.describe());
    HostileModel model(batch_variant(s), s.max_batch);
    SpeculativeDecoder<HostileModel, AnyDrafter> decoder(model, s.make_drafter());
    // generate_checked compares every emitted chunk with what the last forward wrote and the
    // model's length with prompt + emitted − 1 after every pass.
    const DecodeResult r = generate_checked(decoder, s, true);
    expect_limits_and_stats(s, r);
    expect_model_driven_right(s, model, r);

    // The step API drives the model through the same calls, so it gets the same answers.
    HostileModel step_model(batch_variant(s), s.max_batch);
    AnyDrafter drafter = s.make_drafter();
    std::vector<Token> next;
    const DecodeResult steps = run_steps(step_model, drafter, s, next);
    EXPECT_EQ(steps.tokens, r.tokens);
    EXPECT_EQ(steps.stop_reason, r.stop_reason);
    EXPECT_EQ(steps.stats.decode_passes, r.stats.decode_passes);
    EXPECT_TRUE(step_model.violations().empty()) << step_model.violations().front();
  }
}

// --- SamplingModel ---------------------------------------------------------------------------------

/// A LogitsModel with seeded logits that records the tokens it was fed; `poison` puts a NaN
/// or +inf at one (row, token) of its next forward.
class RecordingLogitsModel {
 public:
  RecordingLogitsModel(std::size_t vocab, std::size_t max_batch, std::uint64_t seed)
      : vocab_(vocab), max_batch_(max_batch), seed_(seed) {}
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<float> logits) {
    fed_.insert(fed_.end(), tokens.begin(), tokens.end());
    for (std::size_t i = 0; i < logits.size(); ++i) {
      logits[i] = static_cast<float>(scramble(seed_ ^ (pos << 16) ^ i) % 1000) / 100.0f;
    }
    if (poison_row_ < tokens.size()) logits[poison_row_ * vocab_ + poison_token_] = poison_value_;
    poison_row_ = kNone;
  }
  void rollback(std::size_t) {}
  [[nodiscard]] std::size_t max_batch() const { return max_batch_; }
  [[nodiscard]] std::size_t vocab_size() const { return vocab_; }
  void poison(std::size_t row, std::size_t token, float value) {
    poison_row_ = row;
    poison_token_ = token;
    poison_value_ = value;
  }
  [[nodiscard]] const std::vector<Token>& fed() const noexcept { return fed_; }

 private:
  static constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
  std::size_t vocab_;
  std::size_t max_batch_;
  std::uint64_t seed_;
  std::size_t poison_row_ = kNone;
  std::size_t poison_token_ = 0;
  float poison_value_ = 0;
  std::vector<Token> fed_;
};

TEST(ModelContractTest, SamplingModelRejectsForwardsOfTheWrongShape) {
  RecordingLogitsModel logits(7, 4, 1);
  SamplingModel<RecordingLogitsModel> model(logits, SamplingOptions{.temperature = 0.7f});
  std::vector<Token> tokens(5, 1);
  std::vector<Token> next(5);
  const auto forward = [&](std::size_t n, std::size_t m) {
    model.forward(0, std::span<const Token>(tokens).first(n), std::span<Token>(next).first(m));
  };
  EXPECT_THROW(forward(0, 0), std::invalid_argument);
  EXPECT_THROW(forward(2, 3), std::invalid_argument);
  EXPECT_THROW(forward(3, 2), std::invalid_argument);
  EXPECT_THROW(forward(5, 5), std::invalid_argument);  // more than max_batch() = 4
  try {
    forward(5, 5);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("max_batch() = 4"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(logits.fed().empty()) << "a rejected forward reached the model";
  EXPECT_NO_THROW(forward(4, 4));

  RecordingLogitsModel no_vocab(0, 4, 1);
  EXPECT_THROW(SamplingModel<RecordingLogitsModel>(no_vocab, SamplingOptions{}), std::invalid_argument);
  RecordingLogitsModel no_batch(7, 0, 1);
  EXPECT_THROW(SamplingModel<RecordingLogitsModel>(no_batch, SamplingOptions{}), std::invalid_argument);
}

TEST(ModelContractTest, SamplingModelNamesABadLogitsTokenAndPosition) {
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    std::mt19937_64 rng(scramble(seed));
    const std::size_t vocab = pick(rng, 1, 50);
    const std::size_t batch = pick(rng, 1, 6);
    RecordingLogitsModel logits(vocab, batch, seed);
    SamplingModel<RecordingLogitsModel> model(
        logits, SamplingOptions{.temperature = pick(rng, 0, 1) == 0 ? 0.0f : 0.9f, .seed = seed});
    const std::size_t n = pick(rng, 1, batch);
    const std::size_t pos = pick(rng, 0, 1000);
    const std::size_t row = pick(rng, 0, n - 1);
    const std::size_t token = pick(rng, 0, vocab - 1);
    const bool nan = pick(rng, 0, 1) == 0;
    SCOPED_TRACE("seed=" + std::to_string(seed) + " vocab=" + std::to_string(vocab) + " row=" + std::to_string(row) +
                 " token=" + std::to_string(token));
    logits.poison(row, token, nan ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity());
    std::vector<Token> tokens(n, 0);
    std::vector<Token> next(n);
    try {
      model.forward(pos, tokens, next);
      ADD_FAILURE() << "a " << (nan ? "NaN" : "+inf") << " logit was accepted";
    } catch (const std::domain_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("token " + std::to_string(token) + " "), std::string::npos) << what;
      EXPECT_NE(what.find("position " + std::to_string(pos + row + 1)), std::string::npos) << what;
      EXPECT_NE(what.find(nan ? "NaN" : "+inf"), std::string::npos) << what;
    }
  }
}

TEST(ModelContractTest, TokenSamplerRejectsARowOfTheWrongSize) {
  for (std::size_t vocab = 1; vocab < 40; vocab += 3) {
    TokenSampler sampler(SamplingOptions{}, vocab);
    for (const std::size_t size : {std::size_t{0}, vocab - 1, vocab + 1, 2 * vocab}) {
      if (size == vocab) continue;
      const std::vector<float> row(size, 1.0f);
      try {
        (void)sampler.choose(row, 3);
        ADD_FAILURE() << "a row of " << size << " logits for a vocabulary of " << vocab << " was accepted";
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("a row of " + std::to_string(size) + " logits"), std::string::npos)
            << e.what();
      }
    }
  }
}

// SamplingModel's own comment promises nothing about the ids it is fed: it hands them to the
// wrapped model unchanged. What it emits is always an id of the vocabulary, whatever it was fed.
TEST(ModelContractTest, SamplingModelPassesFedIdsOnAndEmitsOnlyVocabularyIds) {
  for (std::uint64_t seed = 0; seed < 100; ++seed) {
    std::mt19937_64 rng(scramble(seed));
    const std::size_t vocab = pick(rng, 1, 40);
    const std::size_t batch = pick(rng, 1, 6);
    RecordingLogitsModel logits(vocab, batch, seed);
    SamplingModel<RecordingLogitsModel> model(logits, SamplingOptions{.temperature = 1.0f, .seed = seed});
    std::vector<Token> tokens(pick(rng, 1, batch));
    for (Token& t : tokens) t = pick(rng, 0, 1) == 0 ? 0xFFFFFFFFU : static_cast<Token>(rng());
    std::vector<Token> next(tokens.size(), 0xFFFFFFFFU);
    model.forward(0, tokens, next);
    EXPECT_EQ(logits.fed(), tokens) << "seed=" << seed;
    for (const Token t : next) EXPECT_LT(t, vocab) << "seed=" << seed;
  }
}

}  // namespace
}  // namespace ngramspec::test
