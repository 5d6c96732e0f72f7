// BestOfDrafter: each pass, the better of a text drafter and a draft model. Properties over
// random mock models: the output is plain decoding's whichever drafts; the text drafts where
// the text repeats and the model where it does not; a draft model that loses never runs; the
// configuration's mistakes are named.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ngramspec/ngramspec.hpp"
#include "support/allocation_counter.hpp"
#include "support/mock_models.hpp"
#include "support/rule_logits_model.hpp"
#include "support/thrown_message.hpp"

namespace ngramspec::test {
namespace {

using Model = RuleLogitsModel;
using Best = BestOfDrafter<MatchDrafter, ModelDrafter<Model>>;

static_assert(Drafter<Best>);
static_assert(EstimatingDrafter<Best>);
static_assert(DistributionDrafter<Best>);

TEST(BestOfDrafter, GreedyDecodingEqualsPlainWhicheverDrafts) {
  // Also: every drafted and every accepted token is in the tally of the source that proposed it,
  // a continued pass's split between the text's drafts and the model's continuation.
  std::mt19937_64 rng(3001);
  std::uint64_t continued_passes = 0;
  std::uint64_t continuation_accepted = 0;
  const auto pick = [&rng](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 400; ++trial) {
    const NamedRule target = random_rule(rng);
    // The draft model: the target's rule, or another one (noise and margin keep its argmax the rule's).
    const NextTokenRule draft_rule =
        pick(0, 1) == 0 ? target.rule : [other = random_rule(rng).rule, vocab = target.vocab](std::span<const Token> p) {
          return static_cast<Token>(other(p) % vocab);
        };
    Model draft(draft_rule, target.vocab, rng(), 1.0f, 3.0f, pick(1, 8));
    ModelDraftConfig draft_config;
    draft_config.max_drafts = pick(1, 8);
    ModelDrafter<Model> model_drafter(draft, target.vocab, draft_config);
    // A gate that often stops the text's drafts short of the room, which a continuation fills.
    MatchDrafter text(MatchConfig{.min_confidence = static_cast<double>(pick(0, 6)) / 10.0});
    BestOfConfig config;
    config.second_draft_cost = static_cast<double>(pick(0, 10)) / 40.0;  // 0 .. 0.25: cheap enough to be tried
    config.explore_every = pick(0, 4);
    config.continue_first = pick(0, 3) != 0;
    std::optional<VerifyCost> cost;
    if (pick(0, 1) == 0) cost = VerifyCost::knee(pick(1, 6));
    Best best(text, model_drafter, cost, config);
    GreedyModel model(target.rule, pick(2, 10));
    SpeculativeDecoder decoder(model, best);
    if (cost) decoder.set_verify_cost(cost);
    std::vector<Token> prompt(pick(1, 30));
    for (Token& t : prompt) t = static_cast<Token>(pick(0, target.vocab - 1));
    DecodeOptions options;
    options.max_new_tokens = pick(1, 60);
    options.max_drafts = pick(1, 8);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + target.name);
    const GreedyReference ref = plain_greedy(target.rule, prompt, options);
    std::uint64_t drafted = 0;
    std::uint64_t accepted = 0;
    for (int run = 0; run < 2; ++run) {
      const DecodeResult result = decoder.generate(prompt, options);
      ASSERT_EQ(result.tokens, ref.tokens);
      drafted += result.stats.drafted;
      accepted += result.stats.accepted;
    }
    const Best::Tally& a = best.tally(Best::Source::first);
    const Best::Tally& b = best.tally(Best::Source::second);
    const Best::Tally& c = best.tally(Best::Source::continued);
    if (!cost) {
      // Without a cost the decoder sends every draft proposed (with one, its planner may cut them).
      EXPECT_EQ(a.drafted + b.drafted + c.drafted, drafted);
      EXPECT_EQ(a.accepted + b.accepted + c.accepted, accepted);
    }
    EXPECT_LE(c.continuation_drafted, c.drafted);
    EXPECT_LE(c.continuation_accepted, c.continuation_drafted);
    EXPECT_LE(c.continuation_accepted, c.accepted);
    EXPECT_EQ(a.continuation_drafted + b.continuation_drafted, 0U);
    if (!config.continue_first) {
      EXPECT_EQ(c.passes, 0U);
    }
    continued_passes += c.passes;
    continuation_accepted += c.continuation_accepted;
  }
  EXPECT_GT(continued_passes, 100U);
  EXPECT_GT(continuation_accepted, 20U);
}

// Decodes `prompt` greedily with a BestOfDrafter over a text drafter and a draft model of the
// target's rule or of `draft_rule`; returns the tallies.
struct Outcome {
  Best::Tally text;
  Best::Tally model;
  std::size_t draft_forwards = 0;
};
Outcome decode(const NextTokenRule& target_rule, const NextTokenRule& draft_rule, std::size_t vocab,
               std::span<const Token> prompt, BestOfConfig config,
               const std::optional<VerifyCost>& cost = std::nullopt) {
  Model draft(draft_rule, vocab, 7, 1.0f, 3.0f, 8);
  ModelDrafter<Model> model_drafter(draft, vocab, ModelDraftConfig{.max_drafts = 4});
  MatchDrafter text;
  Best best(text, model_drafter, cost, config);
  GreedyModel model(target_rule, 8);
  SpeculativeDecoder decoder(model, best);
  decoder.set_verify_cost(cost);
  DecodeOptions options;
  options.max_new_tokens = 200;
  options.max_drafts = 4;
  static_cast<void>(decoder.generate(prompt, options));
  return {best.tally(Best::Source::first), best.tally(Best::Source::second), draft.forward_calls()};
}

TEST(BestOfDrafter, TheTextDraftsWhereItRepeatsAndTheModelWhereItDoesNot) {
  // A target that repeats its prompt, and a draft model that knows nothing: the text's copies win.
  const std::vector<Token> prompt = {5, 9, 2, 7, 3, 11, 4, 8};
  const Outcome copy = decode(RepeatRule{8, 16}, HashRule{16, 2, 99, false}, 16, prompt, {});
  EXPECT_GT(copy.text.passes, 4 * copy.model.passes) << copy.text.passes << " against " << copy.model.passes;
  EXPECT_GT(copy.text.accepted, copy.model.accepted);

  // A pseudo-random target the text cannot follow, and a draft model that is the target.
  const HashRule random{64, 3, 1234, true};
  const Outcome model = decode(random, random, 64, prompt, {});
  EXPECT_GT(model.model.passes, 4 * model.text.passes) << model.model.passes << " against " << model.text.passes;
  EXPECT_GT(model.model.accepted, 3 * model.model.passes);  // nearly all of 4 drafts a pass
}

TEST(BestOfDrafter, ADraftModelThatLosesNeverRuns) {
  // Drafting with the model costs more than any pass could return, and it is never explored:
  // the text drafts every pass and the draft model is never fed.
  BestOfConfig config;
  config.second_draft_cost = 100.0;
  config.explore_every = 0;
  const std::vector<Token> prompt = {1, 2, 3, 4, 1, 2, 3, 4};
  const Outcome o = decode(RepeatRule{4, 16}, RepeatRule{4, 16}, 16, prompt, config);
  EXPECT_EQ(o.model.passes, 0U);
  EXPECT_EQ(o.draft_forwards, 0U);
  EXPECT_GT(o.text.accepted, 100U);
}

TEST(BestOfDrafter, ADraftModelThatCouldNotWinIsNotEvenTried) {
  // A pass costs a plain pass a token (knee:1), so no draft ever pays: tries of a draft model
  // (explore_every 2, a draft at a tenth of a pass) would spend its passes for nothing, and are
  // skipped. A pass that carries drafts for free (knee:5) keeps trying it, the same draft model
  // that drafts nothing the target says.
  BestOfConfig config;
  config.second_draft_cost = 0.1;
  config.explore_every = 2;
  const std::vector<Token> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  const HashRule target{16, 2, 7, false};
  const HashRule wrong{16, 2, 99, false};
  const Outcome paying_nothing = decode(target, wrong, 16, prompt, config, VerifyCost::knee(1));
  EXPECT_EQ(paying_nothing.model.passes, 0U);
  EXPECT_EQ(paying_nothing.draft_forwards, 0U);
  const Outcome free_drafts = decode(target, wrong, 16, prompt, config, VerifyCost::knee(5));
  EXPECT_GT(free_drafts.model.passes, 0U);
  EXPECT_GT(free_drafts.draft_forwards, 0U);
}

TEST(BestOfDrafter, BadCostsAreRefusedNamingFieldAndValue) {
  Model draft(RepeatRule{4, 16}, 16, 1, 1.0f, 3.0f, 8);
  ModelDrafter<Model> model_drafter(draft, 16);
  MatchDrafter text;
  const std::string negative = invalid_argument_message([&] { Best(text, model_drafter, std::nullopt, {.first_draft_cost = -1}); });
  EXPECT_NE(negative.find("BestOfConfig::first_draft_cost = -1"), std::string::npos) << negative;
  const std::string nan = invalid_argument_message(
      [&] { Best(text, model_drafter, std::nullopt, {.second_draft_cost = std::numeric_limits<double>::quiet_NaN()}); });
  EXPECT_NE(nan.find("BestOfConfig::second_draft_cost = nan"), std::string::npos) << nan;
}

TEST(BestOfDrafter, UpdateAndPredictAllocateNothingOnceWarm) {
  RuleLogitsModel draft(InductionRule{.vocab = 40}, 40, 9, 1.5f, 2.0f, 16);
  draft.reserve(4096);
  ModelDrafter<Model> model_drafter(draft, 40, {.max_drafts = 6, .sampling = {.temperature = 0.8f}});
  model_drafter.reserve(4096);
  MatchDrafter text;
  Best best(text, model_drafter, VerifyCost::knee(4), {.explore_every = 3});
  DraftDistributions q;
  q.reserve(6);
  std::vector<Token> out(6);
  std::vector<float> probabilities(6);
  std::mt19937_64 rng(7);
  const auto pass = [&] { random_pass(best, out, probabilities, q, rng, 40); };
  best.update(std::vector<Token>{1, 2, 3, 4, 1, 2, 3, 4});
  for (int i = 0; i < 50; ++i) pass();
  AllocationCounter counter;
  for (int i = 0; i < 200; ++i) pass();
  EXPECT_EQ(counter.count(), 0u);
  EXPECT_GT(best.tally(Best::Source::second).passes, 0U);
}

}  // namespace
}  // namespace ngramspec::test
