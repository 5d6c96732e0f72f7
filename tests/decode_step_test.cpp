#include "ngramspec/decode_step.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/speculative_decoder.hpp"
#include "support/allocation_counter.hpp"
#include "support/thrown_message.hpp"
#include "support/mock_models.hpp"
#include "support/test_drafters.hpp"

namespace ngramspec::test {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr std::size_t kNoLimit = std::numeric_limits<std::size_t>::max();

DecodeOptions options_with(std::size_t max_new_tokens, std::size_t max_context = 0,
                           std::vector<Token> stop_tokens = {}) {
  DecodeOptions options;
  options.max_new_tokens = max_new_tokens;
  options.max_context = max_context;
  options.stop_tokens = std::move(stop_tokens);
  return options;
}

SequenceState state_with(std::size_t prompt_length, std::size_t generated) {
  SequenceState state;
  state.prompt_length = prompt_length;
  state.generated = generated;
  return state;
}


static_assert(noexcept(remaining_tokens(SequenceState{}, DecodeOptions{})));
static_assert(noexcept(draft_limit(SequenceState{}, DecodeOptions{}, 0)));
static_assert(noexcept(tree_node_limit(SequenceState{}, DecodeOptions{}, 0)));
static_assert(noexcept(advance(std::declval<SequenceState&>(), StepOutcome{})));
static_assert(noexcept(SequenceState{}.cache_length()));

// --- Single steps --------------------------------------------------------------------

TEST(SequenceState, CacheLengthHoldsAllButTheLastEmittedToken) {
  EXPECT_EQ(state_with(5, 0).cache_length(), 5U);
  EXPECT_EQ(state_with(5, 1).cache_length(), 5U);
  EXPECT_EQ(state_with(5, 4).cache_length(), 8U);
}

TEST(RemainingTokens, IsTheTighterOfBothLimits) {
  EXPECT_EQ(remaining_tokens(state_with(3, 0), options_with(10)), 10U);
  EXPECT_EQ(remaining_tokens(state_with(3, 4), options_with(10)), 6U);
  EXPECT_EQ(remaining_tokens(state_with(3, 4), options_with(10, 9)), 2U);
  EXPECT_EQ(remaining_tokens(state_with(3, 4), options_with(2, 100)), 0U);
  EXPECT_EQ(remaining_tokens(state_with(3, 4), options_with(10, 7)), 0U);
  SequenceState finished = state_with(3, 0);
  finished.finished = true;
  EXPECT_EQ(remaining_tokens(finished, options_with(10)), 0U);
}

TEST(StartSequence, RejectsEmptyAndOverlongPrompts) {
  EXPECT_THAT(invalid_argument_message([] { (void)start_sequence(0, options_with(5)); }), HasSubstr("empty"));
  const std::string message = invalid_argument_message([] { (void)start_sequence(9, options_with(5, 8)); });
  EXPECT_THAT(message, HasSubstr("9 tokens"));
  EXPECT_THAT(message, HasSubstr("max_context = 8"));
}

TEST(StartSequence, StartsFinishedWhenNothingMayBeEmitted) {
  const SequenceState open = start_sequence(4, options_with(5, 10));
  EXPECT_FALSE(open.finished);
  EXPECT_EQ(open.prompt_length, 4U);
  EXPECT_EQ(open.generated, 0U);

  const SequenceState no_tokens = start_sequence(4, options_with(0));
  EXPECT_TRUE(no_tokens.finished);
  EXPECT_EQ(no_tokens.stop_reason, StopReason::max_new_tokens);

  const SequenceState full = start_sequence(4, options_with(5, 4));
  EXPECT_TRUE(full.finished);
  EXPECT_EQ(full.stop_reason, StopReason::max_context);

  // Both at once: the request asked for nothing, which names the reason.
  EXPECT_EQ(start_sequence(4, options_with(0, 4)).stop_reason, StopReason::max_new_tokens);
}

TEST(DraftLimit, LeavesRoomForTheModelsOwnToken) {
  DecodeOptions options = options_with(10);
  options.max_drafts = 64;
  EXPECT_EQ(draft_limit(state_with(3, 1), options, kNoLimit), 8U);  // 9 left
  EXPECT_EQ(draft_limit(state_with(3, 9), options, kNoLimit), 0U);  // 1 left
  EXPECT_EQ(draft_limit(state_with(3, 1), options, 5), 5U);
  EXPECT_EQ(draft_limit(state_with(3, 1), options, 0), 0U);
  options.max_drafts = 2;
  EXPECT_EQ(draft_limit(state_with(3, 1), options, kNoLimit), 2U);
  options.max_drafts = 100'000;
  options.max_new_tokens = 100'000;
  EXPECT_EQ(draft_limit(state_with(3, 1), options, kNoLimit), kMaxDraftsPerPass);
  options.speculate = false;
  EXPECT_EQ(draft_limit(state_with(3, 1), options, kNoLimit), 0U);
  options.speculate = true;
  options.max_context = 6;  // 2 left
  EXPECT_EQ(draft_limit(state_with(3, 1), options, kNoLimit), 1U);
  SequenceState finished = state_with(3, 1);
  finished.finished = true;
  EXPECT_EQ(draft_limit(finished, options, kNoLimit), 0U);
}

// A tree pass writes entries cache_length() .. cache_length() + nodes: over random states and
// limits, the node limit keeps them where the longest chain's end, below max_context - 1, is
// exactly that room when the context is what binds, never less than the depth, and otherwise
// the budget (max_drafts, kMaxDraftsPerPass, cap), whatever max_new_tokens leaves.
TEST(TreeNodeLimit, KeepsEveryEntryOfATreePassWhereTheLongestChainEnds) {
  std::mt19937_64 rng(41);
  const auto pick = [&rng](std::size_t lo, std::size_t hi) {
    return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
  };
  std::size_t bound_by_context = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const SequenceState state = state_with(pick(1, 40), pick(1, 60));  // after the prefill, as a pass is
    DecodeOptions options = options_with(pick(0, 120));
    if (pick(0, 2) != 0) options.max_context = state.prompt_length + pick(0, 80);
    options.max_drafts = pick(0, 3) == 0 ? kMaxDraftsPerPass + pick(0, 9) : pick(0, 96);
    options.speculate = pick(0, 9) != 0;
    const std::size_t cap = pick(0, 4) == 0 ? kNoLimit : pick(0, 100);
    if (options.max_context != 0 && state.prompt_length + state.generated > options.max_context) continue;
    const std::size_t nodes = tree_node_limit(state, options, cap);
    const std::size_t depth = draft_limit(state, options, cap);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": nodes " + std::to_string(nodes) + ", depth " +
                 std::to_string(depth));
    if (depth == 0) {
      ASSERT_EQ(nodes, 0U);
      continue;
    }
    ASSERT_GE(nodes, depth);
    const std::size_t budget = std::min({options.max_drafts, kMaxDraftsPerPass, cap});
    if (options.max_context == 0) {
      ASSERT_EQ(nodes, budget);
      continue;
    }
    // The longest chain the context allows, its entries cache_length() .. max_context - 2.
    const std::size_t room = options.max_context - 2 - state.cache_length();
    ASSERT_LE(state.cache_length() + 1 + nodes, options.max_context - 1);
    ASSERT_EQ(nodes, std::min(budget, room));
    bound_by_context += room < budget ? 1 : 0;
  }
  EXPECT_GT(bound_by_context, 1000U);
}

TEST(ProposeDrafts, ClampsLiarsToTheLimitAndTheBuffer) {
  const AffineRule counter{100, 1, 1};
  DecodeOptions options = options_with(50);
  options.max_drafts = 64;
  std::array<Token, 16> out{};
  const SequenceState state = state_with(2, 1);  // draft_limit: 48 (uncapped)
  for (const std::size_t claim : {std::size_t{17}, std::size_t{1000}, kNoLimit}) {
    LiarDrafter<OracleDrafter> liar(OracleDrafter(counter), claim);
    liar.update(std::vector<Token>{1, 2, 3});
    EXPECT_EQ(propose_drafts(liar, state, options, kNoLimit, out), 16U) << "claim " << claim;
    EXPECT_EQ(propose_drafts(liar, state, options, 5, out), 5U) << "claim " << claim;
    EXPECT_EQ(propose_drafts(liar, state, options, kNoLimit, std::span<Token>(out).first(3)), 3U);
  }
  // The drafts are the drafter's, written to the front of out.
  OracleDrafter oracle(counter);
  oracle.update(std::vector<Token>{7});
  ASSERT_EQ(propose_drafts(oracle, state, options, 4, out), 4U);
  EXPECT_THAT(std::span<Token>(out).first(4), ::testing::ElementsAre(8, 9, 10, 11));
  // A drafter that proposes fewer than it may is taken at its word.
  EXPECT_EQ(propose_drafts(OracleDrafter(counter, 2), state, options, kNoLimit, out), 0U)
      << "an oracle that has observed nothing drafts nothing";
  EXPECT_EQ(propose_drafts(ScriptedDrafter({{0, {4, 5}}}), state, options, kNoLimit, out), 2U);
  EXPECT_THAT(std::span<Token>(out).first(2), ::testing::ElementsAre(4, 5));
  // No speculation, no drafts, whatever the drafter would say.
  options.speculate = false;
  LiarDrafter<SilentDrafter> liar(SilentDrafter{}, 9);
  EXPECT_EQ(propose_drafts(liar, state, options, kNoLimit, out), 0U);
}

TEST(AcceptDrafts, PrefillEmitsTheModelsToken) {
  const StepOutcome o = accept_drafts(state_with(4, 0), {}, std::vector<Token>{7}, options_with(10));
  EXPECT_EQ(o.emitted, 1U);
  EXPECT_EQ(o.accepted, 0U);
  EXPECT_EQ(o.rollback_to, 4U);
  EXPECT_EQ(o.discarded, 0U);
  EXPECT_FALSE(o.finished);
}

TEST(AcceptDrafts, AcceptsThreeOfFour) {
  // Prompt 5, 2 emitted: the pass fed 5 tokens at position 6, so the model holds 11.
  const std::vector<Token> drafts = {1, 2, 3, 4};
  const std::vector<Token> model = {1, 2, 3, 9, 8};
  const StepOutcome o = accept_drafts(state_with(5, 2), drafts, model, options_with(20));
  EXPECT_EQ(o.accepted, 3U);
  EXPECT_EQ(o.emitted, 4U);  // 1 2 3 9
  EXPECT_EQ(o.rollback_to, 10U);
  EXPECT_EQ(o.discarded, 1U);
  EXPECT_FALSE(o.finished);
}

TEST(AcceptDrafts, FullAcceptanceDiscardsNothing) {
  const std::vector<Token> drafts = {1, 2, 3};
  const std::vector<Token> model = {1, 2, 3, 4};
  const StepOutcome o = accept_drafts(state_with(5, 2), drafts, model, options_with(20));
  EXPECT_EQ(o.accepted, 3U);
  EXPECT_EQ(o.emitted, 4U);
  EXPECT_EQ(o.rollback_to, 10U);
  EXPECT_EQ(o.discarded, 0U);
}

TEST(AcceptDrafts, FirstDraftRejectedKeepsOnlyTheModelsToken) {
  const std::vector<Token> drafts = {1, 2, 3};
  const std::vector<Token> model = {5, 2, 3, 4};
  const StepOutcome o = accept_drafts(state_with(5, 2), drafts, model, options_with(20));
  EXPECT_EQ(o.accepted, 0U);
  EXPECT_EQ(o.emitted, 1U);
  EXPECT_EQ(o.rollback_to, 7U);
  EXPECT_EQ(o.discarded, 3U);
}

TEST(AcceptDrafts, StopTokenCutsTheAcceptedRun) {
  const std::vector<Token> drafts = {1, 2, 3, 4};
  const std::vector<Token> model = {1, 2, 3, 4, 5};
  const StepOutcome o = accept_drafts(state_with(5, 2), drafts, model, options_with(20, 0, {9, 2}));
  EXPECT_EQ(o.emitted, 2U);
  EXPECT_EQ(o.accepted, 2U);
  EXPECT_TRUE(o.finished);
  EXPECT_EQ(o.stop_reason, StopReason::stop_token);
  EXPECT_EQ(o.rollback_to, 8U);
  EXPECT_EQ(o.discarded, 3U);
  // The model's own token can be the stop token too.
  const StepOutcome own =
      accept_drafts(state_with(5, 2), drafts, std::vector<Token>{1, 9, 3, 4, 5}, options_with(20, 0, {9}));
  EXPECT_EQ(own.emitted, 2U);
  EXPECT_EQ(own.accepted, 1U);
  EXPECT_EQ(own.stop_reason, StopReason::stop_token);
}

TEST(AcceptDrafts, LimitsCutTheAcceptedRun) {
  // More drafts than the sequence may still emit (an engine that ignored draft_limit).
  const std::vector<Token> drafts = {1, 2, 3, 4};
  const std::vector<Token> model = {1, 2, 3, 4, 5};
  const StepOutcome by_count = accept_drafts(state_with(5, 2), drafts, model, options_with(4));
  EXPECT_EQ(by_count.emitted, 2U);
  EXPECT_EQ(by_count.accepted, 2U);
  EXPECT_TRUE(by_count.finished);
  EXPECT_EQ(by_count.stop_reason, StopReason::max_new_tokens);
  EXPECT_EQ(by_count.rollback_to, 8U);
  EXPECT_EQ(by_count.discarded, 3U);

  const StepOutcome by_context = accept_drafts(state_with(5, 2), drafts, model, options_with(50, 10));
  EXPECT_EQ(by_context.emitted, 3U);
  EXPECT_EQ(by_context.stop_reason, StopReason::max_context);
  EXPECT_EQ(by_context.rollback_to, 9U);

  // Both limits end it at once: max_new_tokens names it.
  EXPECT_EQ(accept_drafts(state_with(5, 2), drafts, model, options_with(5, 10)).stop_reason,
            StopReason::max_new_tokens);
  // A stop token on the last allowed token is a stop.
  EXPECT_EQ(accept_drafts(state_with(5, 2), drafts, model, options_with(4, 0, {2})).stop_reason,
            StopReason::stop_token);
}

TEST(AcceptDrafts, RejectsWrongSizesAndFinishedSequences) {
  const std::vector<Token> two = {1, 2};
  const std::vector<Token> four = {1, 2, 3, 4};
  const std::string mismatch =
      invalid_argument_message([&] { (void)accept_drafts(state_with(3, 1), two, four, options_with(10)); });
  EXPECT_THAT(mismatch, HasSubstr("got 4"));
  EXPECT_THAT(mismatch, HasSubstr("2 drafts"));
  EXPECT_THAT(invalid_argument_message([&] { (void)accept_drafts(state_with(3, 1), two, two, options_with(10)); }),
              HasSubstr("drafts.size() + 1"));
  EXPECT_THAT(invalid_argument_message([&] { (void)accept_drafts(state_with(3, 1), {}, {}, options_with(10)); }),
              HasSubstr("got 0"));
  EXPECT_THAT(invalid_argument_message([&] {
                (void)accept_drafts(state_with(3, 0), std::span<const Token>(two).first(1), two, options_with(10));
              }),
              HasSubstr("prefill"));
  SequenceState finished = state_with(3, 2);
  finished.finished = true;
  EXPECT_THAT(invalid_argument_message(
                  [&] { (void)accept_drafts(finished, {}, std::span<const Token>(two).first(1), options_with(10)); }),
              HasSubstr("finished"));
}

TEST(Advance, AppliesTheOutcome) {
  SequenceState state = state_with(5, 2);
  StepOutcome outcome;
  outcome.emitted = 3;
  advance(state, outcome);
  EXPECT_EQ(state.generated, 5U);
  EXPECT_FALSE(state.finished);
  outcome.finished = true;
  outcome.stop_reason = StopReason::stop_token;
  advance(state, outcome);
  EXPECT_EQ(state.generated, 8U);
  EXPECT_TRUE(state.finished);
  EXPECT_EQ(state.stop_reason, StopReason::stop_token);
}

TEST(AcceptDrafts, PropertiesOverRandomPasses) {
  std::mt19937_64 rng(123);
  const auto pick = [&rng](std::size_t lo, std::size_t hi) {
    return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
  };
  for (int round = 0; round < 20'000; ++round) {
    const std::size_t prompt = pick(1, 20);
    const std::size_t generated = pick(0, 3) == 0 ? 0 : pick(1, 30);
    DecodeOptions options = options_with(generated + pick(1, 30));
    if (pick(0, 1) == 0) options.max_context = prompt + generated + pick(1, 30);
    for (std::size_t n = pick(0, 2); n > 0; --n) options.stop_tokens.push_back(static_cast<Token>(pick(0, 5)));
    const SequenceState state = state_with(prompt, generated);
    const std::size_t left = remaining_tokens(state, options);
    // Usually within draft_limit, as a decoder sends; sometimes beyond, as a careless engine might.
    const std::size_t draft_count = generated == 0 ? 0 : pick(0, pick(0, 3) == 0 ? 12 : left - 1);
    std::vector<Token> drafts(draft_count);
    std::vector<Token> model(draft_count + 1);
    for (Token& t : model) t = static_cast<Token>(pick(0, 5));
    const std::size_t agree = pick(0, draft_count);  // drafts agree with the model this far
    for (std::size_t i = 0; i < draft_count; ++i) {
      drafts[i] = i < agree ? model[i] : static_cast<Token>(pick(0, 5));
    }
    SCOPED_TRACE("round " + std::to_string(round));

    const StepOutcome o = accept_drafts(state, drafts, model, options);
    std::size_t matched = 0;
    while (matched < draft_count && drafts[matched] == model[matched]) ++matched;
    std::size_t first_stop = model.size();
    for (std::size_t i = 0; i < model.size(); ++i) {
      if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), model[i]) != options.stop_tokens.end()) {
        first_stop = i;
        break;
      }
    }
    ASSERT_EQ(o.emitted, std::min({matched + 1, left, first_stop + 1}));
    ASSERT_EQ(o.accepted, std::min(matched, o.emitted));
    ASSERT_EQ(o.rollback_to, prompt + generated + o.emitted - 1);
    const std::size_t held = generated == 0 ? prompt : state.cache_length() + draft_count + 1;
    ASSERT_EQ(o.rollback_to + o.discarded, held);
    const bool stopped = first_stop < o.emitted;
    ASSERT_EQ(o.finished, stopped || o.emitted == left);
    if (stopped) {
      ASSERT_EQ(o.stop_reason, StopReason::stop_token);
    } else if (o.finished) {
      ASSERT_EQ(o.stop_reason,
                generated + o.emitted == options.max_new_tokens ? StopReason::max_new_tokens : StopReason::max_context);
    }
    SequenceState next = state;
    advance(next, o);
    ASSERT_EQ(next.cache_length(), o.rollback_to);
  }
}

// --- Engine-style loops over the step API -----------------------------------------------

/// Generates with the step API alone, as decode_step.hpp's header comment lays out, checking
/// each step's bookkeeping against the model; returns what generate() would.
template <Drafter D>
DecodeResult run_steps(GreedyModel& model, D& drafter, std::span<const Token> prompt, const DecodeOptions& options) {
  DecodeResult result;
  SequenceState state = start_sequence(prompt.size(), options);
  model.rollback(0);
  drafter.reset();
  if (state.finished) {
    result.stop_reason = state.stop_reason;
    return result;
  }
  drafter.update(prompt);
  const std::size_t batch = model.max_batch();
  std::vector<Token> drafts(kMaxDraftsPerPass);
  std::vector<Token> fed(kMaxDraftsPerPass + 1);
  std::vector<Token> next(std::max(kMaxDraftsPerPass + 1, prompt.size()));

  for (std::size_t pos = 0; pos < prompt.size();) {
    const std::size_t n = std::min(batch, prompt.size() - pos);
    model.forward(pos, prompt.subspan(pos, n), std::span<Token>(next).first(n));
    ++result.stats.prefill_passes;
    pos += n;
    if (pos == prompt.size()) next[0] = next[n - 1];
  }
  std::size_t drafted = 0;
  StepOutcome outcome = accept_drafts(state, {}, std::span<const Token>(next).first(1), options);
  for (;;) {
    EXPECT_EQ(model.length(), outcome.rollback_to);
    const std::span<const Token> emitted = std::span<const Token>(next).first(outcome.emitted);
    result.tokens.insert(result.tokens.end(), emitted.begin(), emitted.end());
    drafter.update(emitted);
    DecodeStats& s = result.stats;
    s.drafted += drafted;
    s.accepted += outcome.accepted;
    s.generated += outcome.emitted;
    if (s.drafted_at.size() < drafted) {
      s.drafted_at.resize(drafted);
      s.accepted_at.resize(drafted);
    }
    for (std::size_t i = 0; i < drafted; ++i) ++s.drafted_at[i];
    for (std::size_t i = 0; i < outcome.accepted; ++i) ++s.accepted_at[i];
    advance(state, outcome);
    EXPECT_EQ(state.cache_length(), model.length());
    if (state.finished) break;

    const std::size_t limit = draft_limit(state, options, batch - 1);
    drafted = propose_drafts(drafter, state, options, batch - 1, drafts);
    EXPECT_LE(drafted, limit);
    fed[0] = result.tokens.back();
    std::copy_n(drafts.begin(), drafted, fed.begin() + 1);
    model.forward(state.cache_length(), std::span<const Token>(fed).first(drafted + 1),
                  std::span<Token>(next).first(drafted + 1));
    ++result.stats.decode_passes;
    outcome = accept_drafts(state, std::span<const Token>(drafts).first(drafted),
                            std::span<const Token>(next).first(drafted + 1), options);
    EXPECT_EQ(outcome.rollback_to + outcome.discarded, model.length());
    if (outcome.discarded != 0) model.rollback(outcome.rollback_to);
  }
  result.stop_reason = state.stop_reason;
  return result;
}

void expect_same_result(const DecodeResult& steps, const DecodeResult& generated) {
  EXPECT_EQ(steps.tokens, generated.tokens);
  EXPECT_EQ(steps.stop_reason, generated.stop_reason);
  EXPECT_EQ(steps.stats.prefill_passes, generated.stats.prefill_passes);
  EXPECT_EQ(steps.stats.decode_passes, generated.stats.decode_passes);
  EXPECT_EQ(steps.stats.drafted, generated.stats.drafted);
  EXPECT_EQ(steps.stats.accepted, generated.stats.accepted);
  EXPECT_EQ(steps.stats.generated, generated.stats.generated);
  EXPECT_EQ(steps.stats.drafted_at, generated.stats.drafted_at);
  EXPECT_EQ(steps.stats.accepted_at, generated.stats.accepted_at);
}

/// generate() of a case on a fresh model and drafter.
DecodeResult generate_case(const DecodeCase& c) {
  GreedyModel model(c.rule.rule, c.max_batch);
  SpeculativeDecoder decoder(model, make_any_drafter(c));
  DecodeResult result = decoder.generate(c.prompt, c.options);
  EXPECT_THAT(model.violations(), IsEmpty());
  return result;
}

TEST(StepLoop, MatchesGenerateAndPlainGreedyOverRandomCases) {
  for (std::uint64_t seed = 100'000; seed < 100'000 + 500; ++seed) {
    const DecodeCase c = random_decode_case(seed);
    SCOPED_TRACE(c.describe());
    GreedyModel model(c.rule.rule, c.max_batch);
    AnyDrafter drafter = make_any_drafter(c);
    const DecodeResult steps = run_steps(model, drafter, c.prompt, c.options);
    const GreedyReference ref = plain_greedy(c.rule.rule, c.prompt, c.options);
    ASSERT_EQ(steps.tokens, ref.tokens);
    EXPECT_EQ(steps.stop_reason, ref.stop_reason);
    EXPECT_THAT(model.violations(), IsEmpty());
    expect_same_result(steps, generate_case(c));
    if (::testing::Test::HasFailure()) break;
  }
}

/// One sequence of an engine's batch.
struct Lane {
  Lane(DecodeCase the_case, std::size_t round)
      : c(std::move(the_case)), model(c.rule.rule, c.max_batch), drafter(make_any_drafter(c)), joins_at(round) {}

  DecodeCase c;
  GreedyModel model;  // this sequence's slice of the engine's KV cache
  AnyDrafter drafter;
  std::size_t joins_at = 0;  // round in which the engine admits the sequence
  bool started = false;
  SequenceState state;
  StepOutcome outcome;
  std::size_t drafted = 0;
  std::size_t batch_offset = 0;  // where its fed tokens sit in the batch buffers
  DecodeResult result;
};

/// Emits a step's tokens for a lane and applies the outcome.
void finish_step(Lane& lane, std::span<const Token> model_tokens) {
  const std::span<const Token> emitted = model_tokens.first(lane.outcome.emitted);
  lane.result.tokens.insert(lane.result.tokens.end(), emitted.begin(), emitted.end());
  lane.drafter.update(emitted);
  lane.result.stats.drafted += lane.drafted;
  lane.result.stats.accepted += lane.outcome.accepted;
  advance(lane.state, lane.outcome);
  lane.result.stop_reason = lane.state.stop_reason;
}

TEST(StepLoop, SequencesInLockstepEachMatchPlainGreedy) {
  for (std::uint64_t batch_seed = 0; batch_seed < 60; ++batch_seed) {
    std::vector<Lane> lanes;
    const std::size_t lane_count = 1 + batch_seed % 6;
    for (std::size_t i = 0; i < lane_count; ++i) {
      lanes.emplace_back(random_decode_case(200'000 + batch_seed * 16 + i), i % 3);
    }
    SCOPED_TRACE("batch " + std::to_string(batch_seed));

    // One buffer for the whole batch's fed tokens and one for the model's answers, as an
    // engine would lay out a batched forward.
    std::vector<Token> batch_drafts;
    std::vector<Token> batch_fed;
    std::vector<Token> batch_next;
    for (std::size_t round = 0;; ++round) {
      bool active = false;
      batch_fed.clear();
      batch_drafts.clear();
      for (Lane& lane : lanes) {
        if (!lane.started && round >= lane.joins_at) {
          // Admit: start, prefill in chunks, take the prefill's token.
          lane.started = true;
          lane.state = start_sequence(lane.c.prompt.size(), lane.c.options);
          lane.result.stop_reason = lane.state.stop_reason;
          if (lane.state.finished) continue;
          lane.drafter.update(lane.c.prompt);
          std::vector<Token> next(lane.c.prompt.size());
          const std::span<const Token> prompt(lane.c.prompt);
          for (std::size_t pos = 0; pos < prompt.size();) {
            const std::size_t n = std::min(lane.model.max_batch(), prompt.size() - pos);
            lane.model.forward(pos, prompt.subspan(pos, n), std::span<Token>(next).subspan(pos, n));
            pos += n;
          }
          lane.drafted = 0;
          lane.outcome = accept_drafts(lane.state, {}, std::span<const Token>(next).last(1), lane.c.options);
          finish_step(lane, std::span<const Token>(next).last(1));
        }
        if (!lane.started || lane.state.finished) continue;
        active = true;
        // Draft into the batch buffer: the last emitted token, then the drafts.
        const std::size_t cap = lane.model.max_batch() - 1;
        const std::size_t room = draft_limit(lane.state, lane.c.options, cap);
        lane.batch_offset = batch_fed.size();
        batch_drafts.resize(room);
        lane.drafted = propose_drafts(lane.drafter, lane.state, lane.c.options, cap, batch_drafts);
        batch_fed.push_back(lane.result.tokens.back());
        batch_fed.insert(batch_fed.end(), batch_drafts.begin(), batch_drafts.begin() + lane.drafted);
      }
      if (!active) {
        if (std::all_of(lanes.begin(), lanes.end(), [](const Lane& l) { return l.started; })) break;
        continue;
      }
      // The batched forward: every active sequence at its own cache length.
      batch_next.assign(batch_fed.size(), 0);
      for (Lane& lane : lanes) {
        if (!lane.started || lane.state.finished) continue;
        const std::size_t n = lane.drafted + 1;
        lane.model.forward(lane.state.cache_length(), std::span<const Token>(batch_fed).subspan(lane.batch_offset, n),
                           std::span<Token>(batch_next).subspan(lane.batch_offset, n));
      }
      for (Lane& lane : lanes) {
        if (!lane.started || lane.state.finished) continue;
        const std::size_t n = lane.drafted + 1;
        const std::span<const Token> fed = std::span<const Token>(batch_fed).subspan(lane.batch_offset, n);
        const std::span<const Token> answers = std::span<const Token>(batch_next).subspan(lane.batch_offset, n);
        lane.outcome = accept_drafts(lane.state, fed.subspan(1), answers, lane.c.options);
        if (lane.outcome.discarded != 0) lane.model.rollback(lane.outcome.rollback_to);
        finish_step(lane, answers);
      }
    }

    for (const Lane& lane : lanes) {
      SCOPED_TRACE(lane.c.describe());
      const GreedyReference ref = plain_greedy(lane.c.rule.rule, lane.c.prompt, lane.c.options);
      EXPECT_EQ(lane.result.tokens, ref.tokens);
      EXPECT_EQ(lane.result.stop_reason, ref.stop_reason);
      EXPECT_THAT(lane.model.violations(), IsEmpty());
      const DecodeResult generated = generate_case(lane.c);
      EXPECT_EQ(lane.result.stats.drafted, generated.stats.drafted);
      EXPECT_EQ(lane.result.stats.accepted, generated.stats.accepted);
      if (!ref.tokens.empty()) {
        std::vector<Token> cache(lane.c.prompt);
        cache.insert(cache.end(), ref.tokens.begin(), ref.tokens.end() - 1);
        EXPECT_EQ(lane.model.history(), cache);
      }
    }
    if (::testing::Test::HasFailure()) break;
  }
}

// --- Allocations -------------------------------------------------------------------------

TEST(StepAllocations, StepsAllocateNothing) {
  GreedyModel model(InductionRule{16}, 16);  // copies the prompt: n-gram drafts hit often
  model.reserve(1024);
  NGramPredictor drafter;
  const DecodeOptions options = options_with(200, 0, {15});
  std::vector<Token> prompt = {1, 2, 3, 1, 2, 3, 1, 2, 3, 4};
  std::array<Token, kMaxDraftsPerPass> drafts{};
  std::array<Token, kMaxDraftsPerPass + 1> fed{};
  std::array<Token, kMaxDraftsPerPass + 1> next{};
  std::size_t emitted_total = 0;
  std::size_t accepted_total = 0;
  std::size_t stopped_by_token = 0;
  std::size_t allocations = 0;
  {
    const AllocationCounter counter;
    for (Token variant = 0; variant < 50; ++variant) {
      prompt.back() = variant % 6;
      SequenceState state = start_sequence(prompt.size(), options);
      model.rollback(0);
      drafter.reset();
      drafter.update(prompt);
      model.forward(0, prompt, std::span<Token>(next).first(prompt.size()));
      StepOutcome outcome =
          accept_drafts(state, {}, std::span<const Token>(next).subspan(prompt.size() - 1, 1), options);
      Token last = next[prompt.size() - 1];
      for (;;) {
        const std::span<const Token> emitted = state.generated == 0
                                                   ? std::span<const Token>(&last, 1)
                                                   : std::span<const Token>(next).first(outcome.emitted);
        drafter.update(emitted);
        last = emitted.back();
        emitted_total += outcome.emitted;
        accepted_total += outcome.accepted;
        advance(state, outcome);
        if (state.finished) {
          stopped_by_token += state.stop_reason == StopReason::stop_token ? 1 : 0;
          break;
        }
        const std::size_t limit = draft_limit(state, options, model.max_batch() - 1);
        const std::size_t n = propose_drafts(drafter, state, options, model.max_batch() - 1, drafts);
        if (n > limit) break;
        fed[0] = last;
        std::copy_n(drafts.begin(), n, fed.begin() + 1);
        model.forward(state.cache_length(), std::span<const Token>(fed).first(n + 1),
                      std::span<Token>(next).first(n + 1));
        outcome = accept_drafts(state, std::span<const Token>(drafts).first(n),
                                std::span<const Token>(next).first(n + 1), options);
        if (outcome.discarded != 0) model.rollback(outcome.rollback_to);
      }
    }
    allocations = counter.count();
  }
  EXPECT_EQ(allocations, 0U);
  // The loop really ran, speculated, and met its stop token now and then.
  EXPECT_GT(emitted_total, 2000U);
  EXPECT_GT(accepted_total, 1000U);
  EXPECT_GT(stopped_by_token, 0U);
  EXPECT_THAT(model.violations(), IsEmpty());
}

/// Allocations of one generate() of `tokens` tokens on a warmed-up decoder.
template <class Decoder>
std::size_t allocations_of_generate(Decoder& decoder, std::span<const Token> prompt, DecodeOptions options,
                                    std::size_t tokens) {
  options.max_new_tokens = tokens;
  (void)decoder.generate(prompt, options);  // warm: the model's cache and the scratch buffers grow
  const AllocationCounter counter;
  const DecodeResult result = decoder.generate(prompt, options);
  const std::size_t count = counter.count();
  EXPECT_EQ(result.tokens.size(), tokens);
  return count;
}

TEST(DecoderAllocations, OnlyTheOutputVectorGrows) {
  const std::vector<Token> prompt = {3, 1, 4, 1, 5, 9, 2, 6};
  GreedyModel model(RepeatRule{8, 16}, 16);
  SpeculativeDecoder decoder(model);
  for (const bool speculate : {true, false}) {
    SCOPED_TRACE(speculate ? "speculating" : "plain");
    DecodeOptions options;
    options.speculate = speculate;
    const std::size_t small = allocations_of_generate(decoder, prompt, options, 1000);
    const std::size_t large = allocations_of_generate(decoder, prompt, options, 4000);
    // 1000 plain passes would cost at least 1000 allocations if a pass allocated; vector
    // doubling costs about log2(n).
    EXPECT_LT(small, 40U);
    EXPECT_LE(large, small + 4);
  }
  EXPECT_THAT(model.violations(), IsEmpty());
}

}  // namespace
}  // namespace ngramspec::test
