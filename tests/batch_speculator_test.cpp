#include "ngramspec/batch_speculator.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ngramspec/speculative_decoder.hpp"
#include "ngramspec/top_k_table.hpp"
#include "ngramspec/tree_drafter.hpp"
#include "support/allocation_counter.hpp"
#include "support/thrown_message.hpp"
#include "support/mock_models.hpp"
#include "support/serving_pass.hpp"
#include "support/test_drafters.hpp"

namespace ngramspec::test {
namespace {

using ::testing::HasSubstr;


/// An estimating drafter whose estimates are garbage (NaN, negative, above 1, increasing):
/// they may cost passes but never change the output.
class HostileEstimator {
 public:
  explicit HostileEstimator(std::uint64_t seed) : inner_(NGramConfig{.min_order = 2, .max_order = 3, .window = 64}), rng_(seed) {}
  void update(Token token) { inner_.update(token); }
  void update(std::span<const Token> tokens) { inner_.update(tokens); }
  void reset() { inner_.reset(); }
  [[nodiscard]] std::size_t predict(std::span<Token> out) const { return inner_.predict(out); }
  [[nodiscard]] std::size_t predict(std::span<Token> out, std::span<float> probabilities) const {
    const std::size_t n = inner_.predict(out.first(std::min(out.size(), probabilities.size())));
    static constexpr float kGarbage[] = {std::numeric_limits<float>::quiet_NaN(), -1.0f, 5.0f, 0.0f, 1.0f,
                                         std::numeric_limits<float>::infinity(), 0.3f};
    for (std::size_t j = 0; j < n; ++j) probabilities[j] = kGarbage[rng_() % std::size(kGarbage)];
    return n;
  }

 private:
  NGramPredictor inner_;
  mutable std::mt19937_64 rng_;
};
static_assert(EstimatingDrafter<HostileEstimator>);
static_assert(EstimatingDrafter<MatchDrafter>);
static_assert(EstimatingDrafter<NGramPredictor>);
static_assert(!EstimatingDrafter<AnyDrafter>);

/// One of the cost curves the property tests vary over, or none.
std::optional<VerifyCost> random_cost(std::mt19937_64& rng) {
  switch (rng() % 7) {
    case 0: return std::nullopt;
    case 1: return VerifyCost::knee(1);
    case 2: return VerifyCost::knee(8);
    case 3: return VerifyCost::knee(256);
    case 4: return VerifyCost::parse("table:1=1,2=1.25,3=1.71,5=2.77,9=5.06");
    case 5: return VerifyCost::parse("table:4=1,16=1.1,64=3");
    default: {
      std::vector<VerifyCost::Point> points;
      double cost = 0.5 + static_cast<double>(rng() % 100) / 50;
      for (std::size_t tokens = 1 + rng() % 3; tokens < 600; tokens += 1 + rng() % 90) {
        points.push_back({tokens, cost});
        cost += static_cast<double>(rng() % 100) / 100;
      }
      return VerifyCost::table(points);
    }
  }
}

/// A drafter for a pool slot: any of the test drafters, hostile ones included. Pooled drafters
/// serve many sequences in turn, so none knows its sequence's rule.
AnyDrafter random_pool_drafter(std::mt19937_64& rng, const SharedCorpus* corpus) {
  const std::uint64_t seed = rng();
  switch (seed % 8) {
    case 0: return AnyDrafter(NGramPredictor(NGramConfig{.min_order = 2, .max_order = 4, .window = 64}));
    case 1: return AnyDrafter(SilentDrafter{});
    case 2: return AnyDrafter(WrongDrafter{});
    case 3: return AnyDrafter(RandomDrafter(seed, 8, 1 + seed % 9));
    case 4: return AnyDrafter(LiarDrafter<NGramPredictor>(NGramPredictor(NGramConfig{.window = 32}), 9));
    case 5:
      return AnyDrafter(LiarDrafter<NGramPredictor>(NGramPredictor(NGramConfig{.window = 16}),
                                                    std::numeric_limits<std::size_t>::max()));
    default:
      return AnyDrafter(
          MatchDrafter(MatchConfig{.index_capacity = 64, .count_window = 32, .min_confidence = 0}, corpus));
  }
}

/// One running sequence of a serving run and the model that answers for it.
struct Lane {
  DecodeCase c;
  SequenceId id = 0;
  GreedyModel model{NextTokenRule{}, GreedyModel::kUnlimitedBatch};
  GreedyReference reference;
  std::vector<Token> output;
};

/// What a serving run checked, for the caller's expectations.
struct ServingRun {
  std::size_t passes = 0;
  std::size_t finished = 0;
  std::size_t drafted = 0;
};

/// Serves `total` random sequences (random_decode_case) through one BatchSpeculator with a
/// pool of `pool`, as an engine would: sequences join when a slot is free and leave when
/// finished (or cancelled at random); each pass takes a random subset of the running
/// sequences, sometimes verifies only part of their drafts, and checks every finished
/// sequence's output against plain greedy decoding, every model's contract, and the pass
/// budget.
template <class D, class MakeDrafter>
void serve_into(ServingRun& run, std::uint64_t seed, std::size_t pool, std::size_t total,
                const std::optional<VerifyCost>& cost, std::size_t max_pass_tokens, MakeDrafter make,
                SharedCorpus* corpus) {
  SCOPED_TRACE("serving seed " + std::to_string(seed) + ", pool " + std::to_string(pool) + ", cost " +
               (cost ? cost->spec() : std::string("none")) + ", max_pass_tokens " + std::to_string(max_pass_tokens));
  std::mt19937_64 rng(scramble(seed));
  BatchConfig config;
  config.max_sequences = pool;
  config.max_pass_tokens = max_pass_tokens;
  config.max_record_tokens = 16 + rng() % 64;
  config.cost = cost;
  // A third of the runs learn the cost, from passes whose times the engine reports (a step of
  // a made-up price) or leaves to the clock: what is learned never changes an output.
  config.learn_cost = scramble(seed + 17) % 3 == 0;
  const bool report = scramble(seed + 19) % 2 == 0;
  SCOPED_TRACE(config.learn_cost ? (report ? "learning, times reported" : "learning, times by the clock") : "");
  BatchSpeculator<D> spec(config, make, corpus);

  std::vector<std::unique_ptr<Lane>> lanes;
  std::size_t started = 0;
  std::vector<SequenceId> ids;
  std::vector<Lane*> batch;
  std::vector<Token> drafts;
  std::vector<std::size_t> offsets;
  std::vector<Token> model_tokens;
  std::vector<std::size_t> model_offsets;
  std::vector<StepOutcome> steps;
  const auto retire = [&](std::size_t index, bool cancel) {
    Lane& lane = *lanes[index];
    EXPECT_THAT(lane.model.violations(), ::testing::IsEmpty()) << lane.c.describe();
    if (cancel) {
      spec.cancel(lane.id);
    } else {
      spec.finish(lane.id);
      ++run.finished;
    }
    EXPECT_FALSE(spec.contains(lane.id));
    lanes.erase(lanes.begin() + static_cast<std::ptrdiff_t>(index));
  };

  for (std::size_t iteration = 0; started < total || !lanes.empty(); ++iteration) {
    if (iteration > 100000) {
      ADD_FAILURE() << "serving did not end";
      return;
    }
    // Admit while there is room (now and then a slot is left empty for a pass).
    while (lanes.size() < pool && started < total && (lanes.empty() || rng() % 4 != 0)) {
      auto lane = std::make_unique<Lane>();
      lane->c = random_decode_case(seed * 100003 + started);
      lane->c.options.max_drafts = std::min<std::size_t>(lane->c.options.max_drafts, 24);
      lane->id = scramble(seed + started) | 1;  // ids are the engine's own: any 64-bit value
      lane->model = GreedyModel(lane->c.rule.rule, GreedyModel::kUnlimitedBatch);
      lane->model.set_max_positions(kv_positions(lane->c.options));
      lane->reference = plain_greedy(lane->c.rule.rule, lane->c.prompt, lane->c.options);
      ++started;
      spec.begin(lane->id, lane->c.prompt, lane->c.options);
      if (spec.state(lane->id).finished) {  // max_new_tokens 0, or no room in max_context
        EXPECT_TRUE(lane->reference.tokens.empty()) << lane->c.describe();
        spec.finish(lane->id);
        continue;
      }
      lanes.push_back(std::move(lane));
    }
    if (lanes.empty()) continue;

    pick_pass(lanes, rng, batch, ids);

    std::size_t room = 0;
    for (const Lane* lane : batch) room += lane->c.options.max_drafts;
    if (rng() % 5 == 0) room = rng() % (room + 1);  // a drafts buffer smaller than asked for
    drafts.assign(room, 0);
    offsets.assign(ids.size() + 1, 0);
    const std::size_t total_drafts = spec.propose(ids, drafts, offsets);
    ASSERT_EQ(offsets.back(), total_drafts);
    ASSERT_LE(total_drafts, room);

    std::size_t pass_tokens = 0;
    model_tokens.clear();
    model_offsets.assign(1, 0);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      Lane& lane = *batch[i];
      ASSERT_LE(offsets[i], offsets[i + 1]);
      const std::size_t n = offsets[i + 1] - offsets[i];
      const SequenceState& state = spec.state(lane.id);
      ASSERT_LE(n, lane.c.options.max_drafts);
      std::vector<Token> next;
      if (state.generated == 0) {
        ASSERT_EQ(n, 0U) << "a sequence drafts before its prefill";
        next.resize(lane.c.prompt.size());
        lane.model.forward(0, lane.c.prompt, next);
        model_tokens.push_back(next.back());
        pass_tokens += lane.c.prompt.size();
      } else {
        // Now and then the engine verifies only the first drafts.
        const std::size_t verified = rng() % 10 == 0 ? static_cast<std::size_t>(rng() % (n + 1)) : n;
        std::vector<Token> fed{lane.output.back()};
        fed.insert(fed.end(), drafts.begin() + static_cast<std::ptrdiff_t>(offsets[i]),
                   drafts.begin() + static_cast<std::ptrdiff_t>(offsets[i] + verified));
        next.resize(fed.size());
        lane.model.forward(state.cache_length(), fed, next);
        model_tokens.insert(model_tokens.end(), next.begin(), next.end());
        pass_tokens += 1 + n;
        run.drafted += verified;
      }
      model_offsets.push_back(model_tokens.size());
    }
    if (max_pass_tokens != 0 && total_drafts > 0) {
      ASSERT_LE(pass_tokens, max_pass_tokens);
    }
    // A pass that pays in full for every token drafts nothing, unless a prefill in it has
    // brought its rate below one token per token.
    const bool prefilling = std::any_of(batch.begin(), batch.end(),
                                        [&](const Lane* lane) { return spec.state(lane->id).generated == 0; });
    if (cost && cost->spec() == "knee:1" && !prefilling && !config.learn_cost) {
      ASSERT_EQ(total_drafts, 0U) << "a pass that pays for every token in full drafted";
    }
    ++run.passes;

    steps.assign(ids.size(), StepOutcome{});
    if (config.learn_cost && report) spec.report_pass_seconds(1e-4 * (1.0 + static_cast<double>(total_drafts % 7)));
    spec.accept(ids, model_tokens, model_offsets, steps);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      Lane& lane = *batch[i];
      const StepOutcome& step = steps[i];
      ASSERT_GE(step.emitted, 1U);
      lane.output.insert(lane.output.end(), model_tokens.begin() + static_cast<std::ptrdiff_t>(model_offsets[i]),
                         model_tokens.begin() + static_cast<std::ptrdiff_t>(model_offsets[i] + step.emitted));
      if (step.discarded != 0) lane.model.rollback(step.rollback_to);
      ASSERT_EQ(lane.model.length(), lane.c.prompt.size() + lane.output.size() - 1) << lane.c.describe();
      ASSERT_TRUE(std::equal(lane.output.begin(), lane.output.end(), lane.reference.tokens.begin(),
                             lane.reference.tokens.begin() +
                                 static_cast<std::ptrdiff_t>(std::min(lane.output.size(), lane.reference.tokens.size()))))
          << lane.c.describe();
      if (step.finished) {
        EXPECT_EQ(lane.output, lane.reference.tokens) << lane.c.describe();
        EXPECT_EQ(step.stop_reason, lane.reference.stop_reason) << lane.c.describe();
      } else {
        EXPECT_LT(lane.output.size(), lane.reference.tokens.size()) << lane.c.describe();
      }
    }
    for (std::size_t i = lanes.size(); i-- > 0;) {
      if (spec.state(lanes[i]->id).finished) {
        retire(i, rng() % 5 == 0);
      } else if (rng() % 60 == 0) {
        retire(i, true);  // the client went away
      }
    }
  }
  EXPECT_EQ(spec.size(), 0U);
}

template <class D, class MakeDrafter>
ServingRun serve(std::uint64_t seed, std::size_t pool, std::size_t total, const std::optional<VerifyCost>& cost,
                 std::size_t max_pass_tokens, MakeDrafter make, SharedCorpus* corpus) {
  ServingRun run;
  serve_into<D>(run, seed, pool, total, cost, max_pass_tokens, std::move(make), corpus);
  return run;
}

// The central invariant, for a whole batch: every sequence's output is plain greedy decoding,
// whatever the drafters (hostile ones included), the cost curve, the token budget, the pool
// size, and the order in which sequences join, leave and are stepped.
TEST(BatchSpeculatorProperty, EveryOutputIsPlainGreedyDecodingWhateverTheDraftersAndCost) {
  constexpr std::size_t kPools[] = {1, 2, 3, 7, 16, 64};
  std::size_t finished = 0;
  std::size_t drafted = 0;
  for (std::uint64_t seed = 1; seed <= 36; ++seed) {
    std::mt19937_64 rng(seed);
    const std::size_t pool = kPools[seed % std::size(kPools)];
    const std::optional<VerifyCost> cost = random_cost(rng);
    const std::size_t budget = rng() % 3 == 0 ? 2 + rng() % (8 * pool) : 0;
    SharedCorpus corpus(SharedCorpus::min_bytes());
    SharedCorpus* shared = seed % 2 == 0 ? &corpus : nullptr;
    std::mt19937_64 pool_rng(seed ^ 0xabcdef);
    const ServingRun run = serve<AnyDrafter>(
        seed, pool, pool * 3 + 4, cost, budget, [&] { return random_pool_drafter(pool_rng, shared); }, shared);
    finished += run.finished;
    drafted += run.drafted;
  }
  EXPECT_GT(finished, 300U);
  EXPECT_GT(drafted, 1000U) << "the runs must speculate for the invariant to say anything";
}

TEST(BatchSpeculatorProperty, FiveHundredTwelveSequencesAtOnce) {
  for (std::uint64_t seed = 100; seed < 102; ++seed) {
    std::mt19937_64 rng(seed);
    const std::optional<VerifyCost> cost = seed == 100 ? std::optional(VerifyCost::knee(256)) : std::nullopt;
    const ServingRun run = serve<NGramPredictor>(
        seed, 512, 700, cost, 0, [] { return NGramPredictor(NGramConfig{.window = 32}); }, nullptr);
    EXPECT_GT(run.finished, 300U);
  }
}

TEST(BatchSpeculatorProperty, MatchDraftersWithTheirOwnEstimatesAndACorpus) {
  for (std::uint64_t seed = 200; seed < 212; ++seed) {
    std::mt19937_64 rng(seed);
    const std::optional<VerifyCost> cost = random_cost(rng);
    SharedCorpus corpus(SharedCorpus::bytes_for(1024));
    const MatchConfig config{.index_capacity = 256, .count_window = 64, .min_confidence = seed % 3 == 0 ? 0.1 : 0.0};
    serve<MatchDrafter>(
        seed, 1 + seed % 9, 30, cost, 0, [&] { return MatchDrafter(config, &corpus); }, &corpus);
    EXPECT_GT(corpus.records(), 0U);
  }
}

TEST(BatchSpeculatorProperty, GarbageEstimatesNeverChangeTheOutput) {
  for (std::uint64_t seed = 300; seed < 310; ++seed) {
    std::mt19937_64 rng(seed);
    serve<HostileEstimator>(
        seed, 1 + seed % 12, 30, random_cost(rng), 0, [&rng] { return HostileEstimator(rng()); }, nullptr);
  }
}

// Without a cost, one sequence through the speculator drafts exactly what it drafts through
// SpeculativeDecoder: the same passes.
TEST(BatchSpeculator, OneSequenceWithoutCostMatchesTheDecoder) {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    DecodeCase c = random_decode_case(seed);
    c.options.max_drafts = std::min<std::size_t>(c.options.max_drafts, 64);
    if (c.options.max_new_tokens == 0) continue;
    SCOPED_TRACE(c.describe());
    const MatchConfig config{.index_capacity = 512};
    GreedyModel model(c.rule.rule, GreedyModel::kUnlimitedBatch);
    SpeculativeDecoder decoder(model, MatchDrafter(config));
    const DecodeResult expected = decoder.generate(c.prompt, c.options);

    BatchSpeculator<> spec(BatchConfig{.max_sequences = 1}, config);
    GreedyModel lane(c.rule.rule, GreedyModel::kUnlimitedBatch);
    spec.begin(7, c.prompt, c.options);
    std::vector<Token> output;
    std::size_t passes = 0;
    const SequenceId id = 7;
    while (!spec.state(id).finished) {
      std::vector<Token> drafts(c.options.max_drafts);
      std::vector<std::size_t> offsets(2);
      const std::size_t n = spec.propose(std::span(&id, 1), drafts, offsets);
      std::vector<Token> fed;
      if (output.empty()) {
        fed = c.prompt;
      } else {
        fed = {output.back()};
        fed.insert(fed.end(), drafts.begin(), drafts.begin() + static_cast<std::ptrdiff_t>(n));
        ++passes;
      }
      std::vector<Token> next(fed.size());
      lane.forward(output.empty() ? 0 : spec.state(id).cache_length(), fed, next);
      if (output.empty()) next = {next.back()};
      const std::vector<std::size_t> model_offsets{0, next.size()};
      StepOutcome step;
      spec.accept(std::span(&id, 1), next, model_offsets, std::span(&step, 1));
      output.insert(output.end(), next.begin(), next.begin() + static_cast<std::ptrdiff_t>(step.emitted));
      if (step.discarded) lane.rollback(step.rollback_to);
    }
    EXPECT_EQ(output, expected.tokens);
    EXPECT_EQ(passes, expected.stats.decode_passes);
    EXPECT_EQ(spec.stats().accepted, expected.stats.accepted);
  }
}

// A periodic stream: every sequence's drafts are right. A flat cost sends them all; a pass
// that pays in full for every token (knee:1) sends none; the CPU curve of the llama2 example
// sends drafts only to sequences whose estimates make them pay.
TEST(BatchSpeculator, TheCostDecidesHowManyDraftsAPassCarries) {
  const auto drafted_with = [](std::optional<VerifyCost> cost, std::size_t sequences) {
    BatchSpeculator<> spec(BatchConfig{.max_sequences = sequences, .cost = std::move(cost)},
                           MatchConfig{.index_capacity = 256, .count_window = 64, .min_confidence = 0});
    std::vector<SequenceId> ids;
    std::vector<Token> prompt;
    for (Token t = 0; t < 64; ++t) prompt.push_back(t % 8);
    DecodeOptions options;
    options.max_drafts = 8;
    for (SequenceId id = 0; id < sequences; ++id) {
      spec.begin(id, prompt, options);
      ids.push_back(id);
    }
    // The prefill step: each sequence's token after its prompt is 0.
    std::vector<Token> model_tokens(sequences, 0);
    std::vector<std::size_t> offsets(sequences + 1);
    for (std::size_t i = 0; i <= sequences; ++i) offsets[i] = i;
    std::vector<StepOutcome> steps(sequences);
    spec.accept(ids, model_tokens, offsets, steps);
    std::vector<Token> drafts(8 * sequences);
    std::vector<std::size_t> draft_offsets(sequences + 1);
    return spec.propose(ids, drafts, draft_offsets);
  };
  EXPECT_EQ(drafted_with(std::nullopt, 4), 32U);
  EXPECT_EQ(drafted_with(VerifyCost::knee(256), 4), 32U);
  EXPECT_EQ(drafted_with(VerifyCost::knee(1), 4), 0U);
  // At 36 tokens the knee is reached: 4 last tokens leave room for 32 drafts for free, and
  // beyond it each draft costs 1/36 of a pass, worth it for drafts almost surely accepted.
  EXPECT_GE(drafted_with(VerifyCost::knee(36), 4), 32U);
  EXPECT_EQ(drafted_with(VerifyCost::knee(20), 4), 16U);
  const std::size_t cpu = drafted_with(VerifyCost::parse("table:1=1,2=1.25,3=1.71,5=2.77,9=5.06"), 1);
  EXPECT_GE(cpu, 1U);
  EXPECT_LT(cpu, 8U);
}

// use_cost() plans the next passes against the caller's cost, pass by pass, and nullptr goes back
// to the configuration's: the same state drafts everything under a flat pass and nothing under one
// that pays in full for every token.
TEST(BatchSpeculator, UseCostPlansTheNextPassesAgainstTheCallersCost) {
  BatchSpeculator<> spec(BatchConfig{.max_sequences = 2, .cost = VerifyCost::knee(256)},
                         MatchConfig{.index_capacity = 256, .count_window = 64});
  std::vector<Token> prompt;
  for (Token t = 0; t < 64; ++t) prompt.push_back(t % 8);
  DecodeOptions options;
  options.max_drafts = 8;
  const std::vector<SequenceId> ids{0, 1};
  for (const SequenceId id : ids) spec.begin(id, prompt, options);
  std::vector<StepOutcome> steps(2);
  spec.accept(ids, std::vector<Token>{0, 0}, std::vector<std::size_t>{0, 1, 2}, steps);
  std::vector<Token> drafts(16);
  std::vector<std::size_t> offsets(3);
  const VerifyCost every_token_pays = VerifyCost::knee(1);
  const auto propose_and_reject = [&] {
    const std::size_t sent = spec.propose(ids, drafts, offsets);
    // The model disagrees with every draft: each sequence emits one token, 0, and rolls back.
    std::vector<Token> model;
    std::vector<std::size_t> model_offsets{0};
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::size_t fed = offsets[i + 1] - offsets[i] + 1;
      for (std::size_t j = 0; j < fed; ++j) model.push_back(drafts.empty() || j >= fed - 1 ? 0 : drafts[offsets[i] + j] + 1);
      model_offsets.push_back(model.size());
    }
    spec.accept(ids, model, model_offsets, steps);
    return sent;
  };
  EXPECT_EQ(spec.active_cost(), &*spec.config().cost);
  EXPECT_GT(propose_and_reject(), 0U);
  spec.use_cost(&every_token_pays);
  EXPECT_EQ(spec.active_cost(), &every_token_pays);
  EXPECT_EQ(propose_and_reject(), 0U);
  EXPECT_EQ(propose_and_reject(), 0U);
  spec.use_cost(nullptr);
  EXPECT_EQ(spec.active_cost(), &*spec.config().cost);
  EXPECT_GT(propose_and_reject(), 0U);
}

TEST(BatchSpeculator, TheTokenBudgetCapsThePass) {
  BatchSpeculator<> spec(BatchConfig{.max_sequences = 3, .max_pass_tokens = 10},
                         MatchConfig{.index_capacity = 64, .count_window = 32, .min_confidence = 0});
  const std::vector<SequenceId> ids{10, 20, 30};
  DecodeOptions options;
  options.max_drafts = 8;
  for (const SequenceId id : ids) spec.begin(id, {1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2}, options);
  std::vector<StepOutcome> steps(3);
  spec.accept(ids, std::vector<Token>{3, 3, 3}, std::vector<std::size_t>{0, 1, 2, 3}, steps);
  std::vector<Token> drafts(24);
  std::vector<std::size_t> offsets(4);
  EXPECT_EQ(spec.propose(ids, drafts, offsets), 7U);  // 3 last tokens + 7 drafts = 10
  EXPECT_EQ(spec.propose(ids, drafts, offsets, 8), 0U);  // 8 more tokens of prefill leave no room
}

// extra_tokens is the engine's number: one near SIZE_MAX must not wrap the pass's token count
// into "no budget" and let the drafts run past the drafts buffer.
TEST(BatchSpeculator, HugeExtraTokensNeverLetTheDraftsOverflowTheirBuffer) {
  BatchSpeculator<> spec(BatchConfig{.max_sequences = 1},
                         MatchConfig{.index_capacity = 64, .count_window = 32, .min_confidence = 0});
  const std::vector<SequenceId> ids{5};
  DecodeOptions options;
  options.max_drafts = 8;
  spec.begin(5, {1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2}, options);
  std::vector<StepOutcome> steps(1);
  spec.accept(ids, std::vector<Token>{3}, std::vector<std::size_t>{0, 1}, steps);
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  constexpr Token kSentinel = 0xDEADBEEF;
  std::vector<std::size_t> offsets(2);
  for (const std::size_t extra : {std::size_t{0}, kMax - 3, kMax - 2, kMax - 1, kMax}) {
    SCOPED_TRACE("extra_tokens " + std::to_string(extra));
    std::vector<Token> buffer(10, kSentinel);
    const std::size_t n = spec.propose(ids, std::span<Token>(buffer).first(2), offsets, extra);
    EXPECT_LE(n, 2U);
    EXPECT_EQ(offsets[1], n);
    EXPECT_TRUE(std::all_of(buffer.begin() + 2, buffer.end(), [](Token t) { return t == kSentinel; }));
  }
}

TEST(BatchSpeculator, FinishAppendsTheOutputToTheCorpusAndCancelDoesNot) {
  SharedCorpus corpus(SharedCorpus::min_bytes());
  BatchSpeculator<> spec(BatchConfig{.max_sequences = 2, .max_record_tokens = 3}, MatchConfig{.index_capacity = 64},
                         &corpus);
  const std::vector<SequenceId> ids{1, 2};
  spec.begin(1, {5, 6});
  spec.begin(2, {7, 8});
  std::vector<StepOutcome> steps(2);
  spec.accept(ids, std::vector<Token>{40, 50}, std::vector<std::size_t>{0, 1, 2}, steps);
  std::vector<Token> drafts(8);
  std::vector<std::size_t> offsets(3);
  const std::size_t n = spec.propose(ids, drafts, offsets);
  std::vector<Token> model_tokens;
  std::vector<std::size_t> model_offsets{0};
  for (std::size_t i = 0; i < 2; ++i) {  // every draft rejected, and the model says 41, 42 ...
    for (std::size_t j = offsets[i]; j <= offsets[i + 1]; ++j) model_tokens.push_back(static_cast<Token>(41 + 1000 * i + j - offsets[i]));
    model_offsets.push_back(model_tokens.size());
  }
  (void)n;
  spec.accept(ids, model_tokens, model_offsets, steps);
  spec.finish(1);
  spec.cancel(2);
  EXPECT_EQ(corpus.records(), 1U);
  EXPECT_EQ(corpus.size(), 2U);  // 40 and 41
  EXPECT_EQ(spec.stats().finished, 1U);
  EXPECT_EQ(spec.stats().cancelled, 1U);
  EXPECT_EQ(spec.size(), 0U);
  // Both slots are free again and the ids may be reused.
  spec.begin(2, {1});
  spec.begin(1, {1});
  EXPECT_EQ(spec.size(), 2U);
}

TEST(BatchSpeculator, BadCallsNameWhatIsWrongAndChangeNothing) {
  BatchSpeculator<> spec(BatchConfig{.max_sequences = 2}, MatchConfig{.index_capacity = 64});
  spec.begin(1, {1, 2, 3, 1, 2, 3});
  EXPECT_THAT(invalid_argument_message([&] { spec.begin(1, {4}); }), HasSubstr("sequence 1 is already running"));
  EXPECT_THAT(invalid_argument_message([&] { spec.begin(2, std::span<const Token>{}); }), HasSubstr("prompt is empty"));
  spec.begin(2, {9, 9});
  EXPECT_THAT(invalid_argument_message([&] { spec.begin(3, {4}); }), HasSubstr("all 2 sequences"));
  EXPECT_THAT(invalid_argument_message([&] { spec.finish(3); }), HasSubstr("sequence 3 is not running"));

  std::vector<Token> drafts(8);
  std::vector<std::size_t> offsets(3);
  std::vector<StepOutcome> steps(2);
  const std::vector<SequenceId> both{1, 2};
  EXPECT_THAT(invalid_argument_message([&] { spec.propose(both, drafts, std::span(offsets).first(2)); }),
              HasSubstr("offsets has 2 elements; it needs ids.size() + 1 = 3"));
  EXPECT_THAT(invalid_argument_message([&] { spec.propose(std::vector<SequenceId>{1, 1}, drafts, offsets); }),
              HasSubstr("sequence 1 is listed twice"));
  EXPECT_THAT(invalid_argument_message([&] { spec.propose(std::vector<SequenceId>{1, 5}, drafts, offsets); }),
              HasSubstr("sequence 5 is not running"));
  // Prefill: one model token each; two for sequence 1 is one too many.
  EXPECT_THAT(invalid_argument_message([&] {
                spec.accept(both, std::vector<Token>{1, 2, 3}, std::vector<std::size_t>{0, 2, 3}, steps);
              }),
              HasSubstr("sequence 1 has 2 model tokens; it needs 1 to 1"));
  EXPECT_THAT(invalid_argument_message([&] {
                spec.accept(both, std::vector<Token>{1}, std::vector<std::size_t>{0, 1, 1}, steps);
              }),
              HasSubstr("sequence 2 has 0 model tokens"));
  EXPECT_THAT(invalid_argument_message([&] {
                spec.accept(both, std::vector<Token>{1, 2}, std::vector<std::size_t>{0, 1, 5}, steps);
              }),
              HasSubstr("offsets[0] = 0 and offsets[2] = 5 are invalid"));
  EXPECT_THAT(invalid_argument_message([&] {
                spec.accept(both, std::vector<Token>{1, 2}, std::vector<std::size_t>{0, 1, 2}, std::span(steps).first(1));
              }),
              HasSubstr("steps has room for 1 sequences; 2 are stepped"));
  // Nothing changed: the sequences still await their prefill, and a good call goes through.
  EXPECT_EQ(spec.state(1).generated, 0U);
  EXPECT_EQ(spec.state(2).generated, 0U);
  spec.accept(both, std::vector<Token>{1, 2}, std::vector<std::size_t>{0, 1, 2}, steps);
  EXPECT_EQ(spec.state(1).generated, 1U);

  EXPECT_THAT(invalid_argument_message([] { BatchSpeculator<> bad(BatchConfig{.max_sequences = 0}); }),
              HasSubstr("max_sequences = 0 is invalid"));
  // However large: nothing is sized by it before it is checked.
  for (const std::size_t n : {BatchConfig::kMaxSequences + 1, std::size_t{1} << 62, SIZE_MAX}) {
    EXPECT_EQ(invalid_argument_message([n] { BatchSpeculator<> bad(BatchConfig{.max_sequences = n}); }),
              "ngramspec::BatchConfig: max_sequences = " + std::to_string(n) +
                  " is invalid: must be between 1 and 1048576");
  }
  // In range, but a pool larger than the machine's memory (2^20 MatchDrafters of 891 KiB): sized
  // once the first drafter is made, refused before the others are allocated.
  const std::string pool = invalid_argument_message(
      [] { BatchSpeculator<> bad(BatchConfig{.max_sequences = BatchConfig::kMaxSequences}); });
  EXPECT_THAT(pool, HasSubstr("ngramspec::BatchSpeculator: max_sequences = 1048576 drafters of " +
                              std::to_string(MatchDrafter(BatchSpeculator<>::default_drafter({})).memory_bytes()) +
                              " bytes each take "));
  EXPECT_THAT(pool, HasSubstr(" bytes, more than this machine's memory ("));
  EXPECT_THAT(invalid_argument_message([] { BatchSpeculator<> bad(BatchConfig{.max_sequences = 1, .max_pass_tokens = 1}); }),
              HasSubstr("max_pass_tokens = 1 is invalid"));
  DecodeOptions too_many;
  too_many.max_drafts = kMaxDraftsPerPass + 1;
  BatchSpeculator<> one(BatchConfig{.max_sequences = 1}, MatchConfig{.index_capacity = 64});
  EXPECT_THAT(invalid_argument_message([&] { one.begin(1, {1}, too_many); }), HasSubstr("max_drafts = 1025"));
}

// max_record_tokens = SIZE_MAX was std::length_error from vector::reserve: it is refused as
// std::invalid_argument naming the field, the value and the limit.
TEST(BatchSpeculator, ARecordLimitBeyondAnyCorpusIsRefusedNamingIt) {
  SharedCorpus corpus(SharedCorpus::min_bytes());
  for (const std::size_t bad : {SharedCorpus::kMaxTokens + 1, std::numeric_limits<std::size_t>::max()}) {
    EXPECT_THAT(invalid_argument_message([&] {
                  BatchSpeculator<> spec(BatchConfig{.max_sequences = 2, .max_record_tokens = bad}, &corpus);
                }),
                HasSubstr("ngramspec::BatchConfig: max_record_tokens = " + std::to_string(bad) +
                          " is invalid: must be at most SharedCorpus::kMaxTokens = 268435456"));
  }
}

// Model tokens outside the offsets were ignored: offsets start at 0 and end at the count.
TEST(BatchSpeculator, AcceptRefusesModelTokensTheOffsetsLeaveOut) {
  BatchSpeculator<> spec(BatchConfig{.max_sequences = 2}, MatchConfig{.index_capacity = 64});
  spec.begin(1, {1, 2, 3});
  spec.begin(2, {4, 5});
  const std::vector<SequenceId> both{1, 2};
  std::vector<Token> drafts(8);
  std::vector<std::size_t> offsets(3);
  ASSERT_EQ(spec.propose(both, drafts, offsets), 0U);
  std::vector<StepOutcome> steps(2);
  const std::vector<Token> model = {5, 6, 7};
  EXPECT_THAT(invalid_argument_message([&] { spec.accept(both, model, std::vector<std::size_t>{1, 2, 3}, steps); }),
              HasSubstr("offsets[0] = 1 and offsets[2] = 3 are invalid: they must be 0 and the count of model "
                        "tokens, 3"));
  EXPECT_THAT(invalid_argument_message([&] { spec.accept(both, model, std::vector<std::size_t>{0, 1, 2}, steps); }),
              HasSubstr("offsets[0] = 0 and offsets[2] = 2 are invalid"));
  EXPECT_EQ(spec.stats().emitted, 0U);
  spec.accept(both, std::span(model).first(2), std::vector<std::size_t>{0, 1, 2}, steps);
  EXPECT_EQ(spec.stats().emitted, 2U);
}

TEST(BatchSpeculator, AFinishedSequenceIsNotSteppedAgain) {
  BatchSpeculator<> spec(BatchConfig{.max_sequences = 1}, MatchConfig{.index_capacity = 64});
  DecodeOptions options;
  options.max_new_tokens = 1;
  spec.begin(4, {1, 2}, options);
  StepOutcome step;
  const SequenceId id = 4;
  spec.accept(std::span(&id, 1), std::vector<Token>{3}, std::vector<std::size_t>{0, 1}, std::span(&step, 1));
  EXPECT_TRUE(step.finished);
  EXPECT_EQ(step.stop_reason, StopReason::max_new_tokens);
  std::vector<Token> drafts(4);
  std::vector<std::size_t> offsets(2);
  EXPECT_THAT(invalid_argument_message([&] { spec.propose(std::span(&id, 1), drafts, offsets); }),
              HasSubstr("sequence 4 (ids[0]) is finished (max_new_tokens); finish() or cancel() it"));
}

// A drafter that throws in predict() leaves every sequence as it was.
TEST(BatchSpeculator, ADrafterThatThrowsLeavesTheSequencesAsTheyWere) {
  using Throwing = ThrowingDrafter<NGramPredictor>;
  BatchSpeculator<Throwing> spec(BatchConfig{.max_sequences = 1},
                                 [] { return Throwing(NGramPredictor(NGramConfig{.window = 16}), 2); });
  const SequenceId id = 1;
  spec.begin(id, {1, 2, 1, 2});
  StepOutcome step;
  spec.accept(std::span(&id, 1), std::vector<Token>{1}, std::vector<std::size_t>{0, 1}, std::span(&step, 1));
  std::vector<Token> drafts(4);
  std::vector<std::size_t> offsets(2);
  EXPECT_EQ(spec.propose(std::span(&id, 1), drafts, offsets), 4U);
  EXPECT_THROW((void)spec.propose(std::span(&id, 1), drafts, offsets), DrafterFault);
  EXPECT_EQ(spec.state(id).generated, 1U);
  EXPECT_EQ(spec.propose(std::span(&id, 1), drafts, offsets), 4U);
}

// Once warm, a step allocates nothing: propose, accept, and a sequence leaving and joining.
TEST(BatchSpeculator, SteadyStateStepsDoNotAllocate) {
  SharedCorpus corpus(SharedCorpus::bytes_for(4096));
  BatchSpeculator<> spec(BatchConfig{.max_sequences = 8, .cost = VerifyCost::knee(16)},
                         MatchConfig{.index_capacity = 256, .count_window = 64}, &corpus);
  std::vector<SequenceId> ids;
  std::vector<Token> prompt;
  for (Token t = 0; t < 40; ++t) prompt.push_back(t % 5);
  for (SequenceId id = 0; id < 8; ++id) {
    spec.begin(id, prompt);
    ids.push_back(id);
  }
  std::vector<Token> drafts(64);
  std::vector<std::size_t> offsets(9);
  std::vector<Token> model_tokens(8 + 64);
  std::vector<std::size_t> model_offsets(9);
  std::vector<StepOutcome> steps(8);
  std::vector<Token> last(8, 4);
  const auto step = [&] {
    (void)spec.propose(ids, drafts, offsets);
    std::size_t k = 0;
    model_offsets[0] = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const bool prefill = spec.state(ids[i]).generated == 0;
      const std::size_t n = prefill ? 0 : offsets[i + 1] - offsets[i];
      Token t = last[i];
      for (std::size_t j = 0; j <= n; ++j) model_tokens[k++] = t = (t + 1) % 5;  // the model continues the cycle
      model_offsets[i + 1] = k;
    }
    spec.accept(ids, std::span<const Token>(model_tokens).first(k), model_offsets, steps);
    for (std::size_t i = 0; i < ids.size(); ++i) last[i] = model_tokens[model_offsets[i] + steps[i].emitted - 1];
  };
  for (int warm = 0; warm < 3; ++warm) step();
  spec.finish(3);
  spec.begin(3, prompt);
  last[3] = 4;
  step();
  AllocationCounter counter;
  for (int i = 0; i < 20; ++i) step();
  spec.finish(5);
  spec.begin(5, prompt);
  last[5] = 4;
  for (int i = 0; i < 5; ++i) step();
  EXPECT_EQ(counter.count(), 0U);
  EXPECT_GT(spec.stats().accepted, 100U);
}

TEST(BatchSpeculator, MemoryIsFixedByThePoolAndReported) {
  const MatchConfig drafter{.index_capacity = 1024, .count_window = 256};
  BatchSpeculator<> spec(BatchConfig{.max_sequences = 5}, drafter);
  const std::size_t one = MatchDrafter(drafter).memory_bytes();
  EXPECT_GE(spec.memory_bytes(), 5 * one);
  EXPECT_LE(spec.memory_bytes(), 5 * one + 64 * 1024);
  DecodeOptions options;
  options.stop_tokens = {2};
  spec.begin(1, {1, 2, 3}, options);  // the slot's first stop tokens and drafts: its buffers grow once
  spec.cancel(1);
  const std::size_t warm = spec.memory_bytes();
  for (SequenceId id = 0; id < 20; ++id) {
    spec.begin(id % 5, {1, 2, 3}, options);
    if (id % 5 == 4) {
      for (SequenceId done = 0; done < 5; ++done) spec.cancel(done);
    }
  }
  EXPECT_LE(spec.memory_bytes(), warm + 5 * 64);
}


// With a cost the default drafters do not gate: the cost decides what a draft is worth.
TEST(BatchSpeculator, DefaultDraftersGateOnlyWithoutACost) {
  BatchConfig config;
  config.max_sequences = 1;
  BatchSpeculator<> plain(config);
  plain.begin(1, {1, 2});
  EXPECT_EQ(plain.drafter(1).config().min_confidence, MatchConfig{}.min_confidence);
  config.cost = VerifyCost::knee(256);
  BatchSpeculator<> costed(config);
  costed.begin(1, {1, 2});
  EXPECT_EQ(costed.drafter(1).config().min_confidence, 0.0);
  EXPECT_EQ(costed.drafter(1).config().index_capacity, MatchConfig{}.index_capacity);
}

// ---- Trees ---------------------------------------------------------------------------------------

static_assert(TreeDraftingDrafter<TreeDrafter>);

/// What a tree serving run checked, for the caller's expectations.
struct TreeRun {
  std::size_t finished = 0;
  std::size_t nodes = 0;     ///< tree nodes verified
  std::size_t accepted = 0;  ///< drafts accepted
  std::size_t moved = 0;     ///< passes whose kept entries were not a prefix (keep(), not rollback)
  std::size_t context_full = 0;  ///< sequences that ran into their max_context
};

/// The engine of a tree serving test: every sequence gets a GreedyModel of its own (its KV
/// cache), verified by tree passes (forward_tree, then keep or rollback as accept_trees says),
/// with the model's top-k sent now and then when the drafters recycle it.
struct TreeEngine {
  std::vector<Token> tokens;
  std::vector<std::int32_t> parents;
  std::vector<std::size_t> offsets;
  std::vector<Token> model_tokens;
  std::vector<std::size_t> model_offsets;
  std::vector<Token> top;
  std::vector<StepOutcome> steps;
  std::vector<std::size_t> kept;
  // One lane's pass.
  std::vector<Token> fed;
  std::vector<std::int32_t> pass_parents;
  std::vector<Token> next;
  std::vector<Token> rows;
};

/// Serves `total` random sequences (random_decode_case, with trees' own limits) through one
/// BatchSpeculator<TreeDrafter> as an engine would, joining and leaving at random, checking every
/// output against plain greedy decoding and every model's contract (GreedyModel checks that
/// keep() keeps a root path and that a rollback after a tree pass keeps a chain).
void serve_trees(TreeRun& run, std::uint64_t seed, std::size_t pool, std::size_t total,
                 const std::optional<VerifyCost>& cost, std::size_t max_pass_tokens, bool shared_table) {
  SCOPED_TRACE("tree serving seed " + std::to_string(seed) + ", pool " + std::to_string(pool) + ", cost " +
               (cost ? cost->spec() : std::string("none")) + ", max_pass_tokens " + std::to_string(max_pass_tokens) +
               (shared_table ? ", shared table" : ""));
  std::mt19937_64 rng(scramble(seed ^ 0x7472656573ULL));
  constexpr std::size_t kVocab = 96;  // the rules' tokens are below 64, their top-k below 64 + 32
  const std::size_t k = 1 + rng() % 8;
  TopKTable table(kVocab, k);
  TreeConfig tree_config;
  tree_config.chain = MatchConfig{.index_capacity = 256, .count_window = 64, .min_confidence = 0};
  tree_config.max_children = 1 + rng() % 8;
  tree_config.carry_over = rng() % 2 == 0;
  tree_config.top_k = k;
  tree_config.vocab_size = shared_table || rng() % 3 == 0 ? 0 : kVocab;  // own tables, or none
  BatchConfig config;
  config.max_sequences = pool;
  config.max_pass_tokens = max_pass_tokens;
  config.cost = cost;
  BatchSpeculator<TreeDrafter> spec(config, [&] { return TreeDrafter(tree_config, shared_table ? &table : nullptr); });
  const std::size_t top_k = shared_table || tree_config.vocab_size != 0 ? k : 0;
  ASSERT_EQ(spec.top_k(), top_k);

  const TreeRun before = run;
  std::vector<std::unique_ptr<Lane>> lanes;
  std::vector<Lane*> batch;
  std::vector<SequenceId> ids;
  TreeEngine e;
  std::size_t started = 0;
  for (std::size_t iteration = 0; started < total || !lanes.empty(); ++iteration) {
    if (iteration > 100000) {
      ADD_FAILURE() << "serving did not end";
      return;
    }
    while (lanes.size() < pool && started < total && (lanes.empty() || rng() % 4 != 0)) {
      auto lane = std::make_unique<Lane>();
      lane->c = random_decode_case(seed * 7919 + started);
      lane->c.options.max_drafts = rng() % 4 == 0 ? 0 : 1 + rng() % 40;
      lane->id = scramble(seed * 31 + started) | 1;
      lane->model = GreedyModel(lane->c.rule.rule, GreedyModel::kUnlimitedBatch);
      lane->model.set_max_positions(kv_positions(lane->c.options));
      lane->reference = plain_greedy(lane->c.rule.rule, lane->c.prompt, lane->c.options);
      ++started;
      spec.begin(lane->id, lane->c.prompt, lane->c.options);
      if (spec.state(lane->id).finished) {
        EXPECT_TRUE(lane->reference.tokens.empty()) << lane->c.describe();
        spec.finish(lane->id);
        continue;
      }
      lanes.push_back(std::move(lane));
    }
    if (lanes.empty()) continue;
    pick_pass(lanes, rng, batch, ids);

    std::size_t room = 0;
    for (const Lane* lane : batch) room += lane->c.options.max_drafts;
    if (rng() % 5 == 0) room = rng() % (room + 1);
    e.tokens.assign(room, 0);
    e.parents.assign(room, 0);
    e.offsets.assign(ids.size() + 1, 0);
    const std::size_t nodes = spec.propose_trees(ids, e.tokens, e.parents, e.offsets);
    ASSERT_EQ(e.offsets.back(), nodes);
    ASSERT_LE(nodes, room);

    const bool send_top = top_k != 0 && rng() % 4 != 0;
    std::size_t pass_tokens = 0;
    e.model_tokens.clear();
    e.top.clear();
    e.model_offsets.assign(1, 0);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      Lane& lane = *batch[i];
      const std::size_t n = e.offsets[i + 1] - e.offsets[i];
      ASSERT_LE(n, lane.c.options.max_drafts);
      const SequenceState& state = spec.state(lane.id);
      if (state.generated == 0) {
        ASSERT_EQ(n, 0U) << "a sequence drafts before its prefill";
        e.next.resize(lane.c.prompt.size());
        lane.model.forward(0, lane.c.prompt, e.next);
        e.model_tokens.push_back(e.next.back());
        for (std::size_t r = 0; r < top_k; ++r) e.top.push_back(static_cast<Token>(e.next.back() + r));
        pass_tokens += lane.c.prompt.size();
      } else {
        // The whole tree's KV entries fit where the longest chain's do, verified or not.
        if (lane.c.options.max_context != 0) {
          ASSERT_LE(state.cache_length() + 1 + n, kv_positions(lane.c.options)) << lane.c.describe();
        }
        // The tree's parents are tree-local and precede their children; depths fit the limit.
        const std::size_t limit = draft_limit(state, lane.c.options, kMaxDraftsPerPass);
        std::vector<std::size_t> depth(n);
        for (std::size_t j = 0; j < n; ++j) {
          const std::int32_t p = e.parents[e.offsets[i] + j];
          ASSERT_TRUE(p == kTreeRoot || (p >= 0 && static_cast<std::size_t>(p) < j)) << "node " << j << " parent " << p;
          depth[j] = p == kTreeRoot ? 0 : depth[static_cast<std::size_t>(p)] + 1;
          ASSERT_LT(depth[j], limit);
        }
        // Now and then the engine verifies only the first nodes: a prefix is a tree.
        const std::size_t verified = rng() % 10 == 0 ? static_cast<std::size_t>(rng() % (n + 1)) : n;
        e.fed.assign(1, lane.output.back());
        e.pass_parents.assign(1, kTreeRoot);
        for (std::size_t j = 0; j < verified; ++j) {
          e.fed.push_back(e.tokens[e.offsets[i] + j]);
          e.pass_parents.push_back(e.parents[e.offsets[i] + j] + 1);
        }
        e.next.resize(e.fed.size());
        e.rows.resize(send_top ? e.fed.size() * top_k : 0);
        lane.model.forward_tree(state.cache_length(), e.fed, e.pass_parents, e.next, e.rows);
        e.model_tokens.insert(e.model_tokens.end(), e.next.begin(), e.next.end());
        e.top.insert(e.top.end(), e.rows.begin(), e.rows.end());
        pass_tokens += 1 + n;
        run.nodes += verified;
      }
      e.model_offsets.push_back(e.model_tokens.size());
    }
    if (!send_top) e.top.clear();
    if (max_pass_tokens != 0 && nodes > 0) {
      ASSERT_LE(pass_tokens, max_pass_tokens);
    }
    // A pass that pays in full for every token carries no tree, unless a prefill in it has
    // brought its rate below one token per token.
    const bool prefilling = std::any_of(batch.begin(), batch.end(),
                                        [&](const Lane* lane) { return spec.state(lane->id).generated == 0; });
    if (cost && cost->spec() == "knee:1" && !prefilling) {
      ASSERT_EQ(nodes, 0U) << "a pass that pays for every token in full carried a tree";
    }

    e.steps.assign(ids.size(), StepOutcome{});
    e.kept.assign(e.model_tokens.size(), 0);
    spec.accept_trees(ids, e.model_tokens, e.model_offsets, e.top, e.steps, e.kept);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      Lane& lane = *batch[i];
      const StepOutcome& step = e.steps[i];
      ASSERT_GE(step.emitted, 1U);
      const std::size_t at = e.model_offsets[i];
      const std::span<const std::size_t> kept = std::span<const std::size_t>(e.kept).subspan(at, step.emitted);
      const std::size_t pos = lane.model.length() - (e.model_offsets[i + 1] - at);
      for (std::size_t j = 0; j < step.emitted; ++j) lane.output.push_back(e.model_tokens[at + kept[j]]);
      if (lane.output.size() == step.emitted) {
        // The prefill: the model holds the prompt and nothing to drop.
        ASSERT_EQ(step.discarded, 0U);
      } else if (kept_is_prefix(kept)) {
        if (step.discarded != 0) lane.model.rollback(step.rollback_to);
      } else {
        lane.model.keep(pos, kept);
        ++run.moved;
      }
      run.accepted += step.accepted;
      ASSERT_EQ(lane.model.length(), lane.c.prompt.size() + lane.output.size() - 1) << lane.c.describe();
      ASSERT_EQ(step.rollback_to, lane.model.length());
      ASSERT_TRUE(std::equal(lane.output.begin(), lane.output.end(), lane.reference.tokens.begin(),
                             lane.reference.tokens.begin() +
                                 static_cast<std::ptrdiff_t>(std::min(lane.output.size(), lane.reference.tokens.size()))))
          << lane.c.describe();
      if (step.finished) {
        EXPECT_EQ(lane.output, lane.reference.tokens) << lane.c.describe();
        EXPECT_EQ(step.stop_reason, lane.reference.stop_reason) << lane.c.describe();
        if (step.stop_reason == StopReason::max_context) ++run.context_full;
      } else {
        EXPECT_LT(lane.output.size(), lane.reference.tokens.size()) << lane.c.describe();
      }
    }
    for (std::size_t i = lanes.size(); i-- > 0;) {
      const bool done = spec.state(lanes[i]->id).finished;
      if (done || rng() % 60 == 0) {
        EXPECT_THAT(lanes[i]->model.violations(), ::testing::IsEmpty()) << lanes[i]->c.describe();
        if (done && rng() % 5 != 0) {
          spec.finish(lanes[i]->id);
          ++run.finished;
        } else {
          spec.cancel(lanes[i]->id);
        }
        lanes.erase(lanes.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
  }
  EXPECT_EQ(spec.size(), 0U);
  EXPECT_EQ(spec.stats().drafted, run.nodes - before.nodes);
  EXPECT_EQ(spec.stats().accepted, run.accepted - before.accepted);
}

// The central invariant for tree batches: every sequence's output is plain greedy decoding,
// whatever the trees, the cost, the budget, the pool, the top-k table (shared, one per drafter,
// none) and the order in which sequences join, leave and are stepped; and no tree pass asks
// for a KV entry a chain would not (the models hold max_context - 1 positions).
TEST(BatchSpeculatorTrees, EveryOutputIsPlainGreedyDecoding) {
  constexpr std::size_t kPools[] = {1, 2, 3, 7, 16};
  TreeRun run;
  for (std::uint64_t seed = 1; seed <= 100; ++seed) {
    std::mt19937_64 rng(seed);
    const std::size_t pool = kPools[seed % std::size(kPools)];
    const std::optional<VerifyCost> cost = seed % 2 == 0 ? random_cost(rng) : std::nullopt;
    const std::size_t budget = rng() % 3 == 0 ? 2 + rng() % (8 * pool) : 0;
    serve_trees(run, seed, pool, pool * 3 + 4, cost, budget, seed % 3 != 0);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(run.finished, 800U);
  EXPECT_GT(run.nodes, 25000U) << "the runs must speculate for the invariant to say anything";
  EXPECT_GT(run.accepted, 7500U);
  EXPECT_GT(run.moved, 250U) << "paths off the first branch must be kept for keep() to be tested";
  EXPECT_GT(run.context_full, 100U) << "sequences must run into max_context for the bound to be tested";
}

// Without a cost or a budget, one sequence's trees through the speculator are the decoder's:
// the same tree passes, so the same number of passes and drafts.
TEST(BatchSpeculatorTrees, OneSequenceWithoutCostMatchesTheDecoder) {
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    DecodeCase c = random_decode_case(seed);
    c.options.max_drafts = 1 + seed % 24;
    if (c.options.max_new_tokens == 0) continue;
    SCOPED_TRACE(c.describe());
    TreeConfig config;
    config.vocab_size = 96;
    config.top_k = 4;
    GreedyModel model(c.rule.rule, GreedyModel::kUnlimitedBatch);
    SpeculativeDecoder decoder(model, TreeDrafter(config));
    const DecodeResult expected = decoder.generate(c.prompt, c.options);

    BatchSpeculator<TreeDrafter> spec(BatchConfig{.max_sequences = 1}, [&] { return TreeDrafter(config); });
    GreedyModel mine(c.rule.rule, GreedyModel::kUnlimitedBatch);
    const SequenceId id = 9;
    spec.begin(id, c.prompt, c.options);
    if (spec.state(id).finished) continue;  // a prompt that fills max_context
    std::vector<Token> next(c.prompt.size());
    mine.forward(0, c.prompt, next);
    // The decoder's prefill tells its drafter nothing but the token: no top-k row here either.
    StepOutcome step;
    std::vector<std::size_t> kept(1);
    spec.accept_trees(std::span(&id, 1), std::span(&next.back(), 1), std::vector<std::size_t>{0, 1}, {},
                      std::span(&step, 1), kept);
    std::vector<Token> top;
    std::vector<Token> output{next.back()};
    std::vector<Token> tokens(c.options.max_drafts);
    std::vector<std::int32_t> parents(c.options.max_drafts);
    std::vector<std::size_t> offsets(2);
    std::size_t drafted = 0;
    while (!step.finished) {
      const std::size_t n = spec.propose_trees(std::span(&id, 1), tokens, parents, offsets);
      drafted += n;
      std::vector<Token> fed{output.back()};
      std::vector<std::int32_t> pass_parents{kTreeRoot};
      for (std::size_t j = 0; j < n; ++j) {
        fed.push_back(tokens[j]);
        pass_parents.push_back(parents[j] + 1);
      }
      next.resize(n + 1);
      top.resize(4 * (n + 1));
      const std::size_t pos = mine.length();
      mine.forward_tree(pos, fed, pass_parents, next, top);
      kept.resize(n + 1);
      spec.accept_trees(std::span(&id, 1), next, std::vector<std::size_t>{0, n + 1}, top, std::span(&step, 1), kept);
      const std::span<const std::size_t> path = std::span<const std::size_t>(kept).first(step.emitted);
      for (const std::size_t entry : path) output.push_back(next[entry]);
      if (kept_is_prefix(path)) {
        if (step.discarded != 0) mine.rollback(step.rollback_to);
      } else {
        mine.keep(pos, path);
      }
    }
    EXPECT_EQ(output, expected.tokens);
    EXPECT_EQ(drafted, expected.stats.drafted);
    EXPECT_EQ(spec.stats().accepted, expected.stats.accepted);
    EXPECT_EQ(mine.forward_calls(), model.forward_calls());
    EXPECT_TRUE(mine.violations().empty());
  }
}

TEST(BatchSpeculatorTrees, BadCallsNameWhatIsWrongAndChangeNothing) {
  TopKTable table(64, 4);
  BatchSpeculator<TreeDrafter> spec(BatchConfig{.max_sequences = 2}, [&] { return TreeDrafter(TreeConfig{}, &table); });
  EXPECT_EQ(spec.top_k(), 4U);
  DecodeOptions options;
  options.max_drafts = 8;
  spec.begin(1, {1, 2, 3, 1, 2, 3, 1, 2}, options);
  spec.begin(2, {5, 6, 5, 6, 5, 6}, options);
  const std::vector<SequenceId> both{1, 2};
  std::vector<Token> tokens(16);
  std::vector<std::int32_t> parents(16);
  std::vector<std::size_t> offsets(3);
  std::vector<StepOutcome> steps(2);
  std::vector<std::size_t> kept(32);
  EXPECT_THAT(invalid_argument_message([&] { spec.propose_trees(both, tokens, parents, std::span(offsets).first(2)); }),
              HasSubstr("propose_trees: offsets has 2 elements; it needs ids.size() + 1 = 3"));
  EXPECT_THAT(invalid_argument_message([&] { spec.propose_trees(both, tokens, std::span(parents).first(3), offsets); }),
              HasSubstr("propose_trees: parents has 3 elements; it needs tokens.size() = 16"));
  EXPECT_THAT(invalid_argument_message([&] { spec.propose_trees(std::vector<SequenceId>{2, 2}, tokens, parents, offsets); }),
              HasSubstr("sequence 2 is listed twice"));
  // Prefill: no nodes, one model token each.
  ASSERT_EQ(spec.propose_trees(both, tokens, parents, offsets), 0U);
  EXPECT_THAT(invalid_argument_message([&] {
                spec.accept_trees(both, std::vector<Token>{3, 5, 6}, std::vector<std::size_t>{0, 1, 3}, {}, steps, kept);
              }),
              HasSubstr("accept_trees: sequence 2 has 2 model tokens; it needs 1 to 1"));
  EXPECT_THAT(invalid_argument_message([&] {
                spec.accept_trees(both, std::vector<Token>{3, 5}, std::vector<std::size_t>{0, 1, 2}, {}, steps,
                                  std::span(kept).first(1));
              }),
              HasSubstr("accept_trees: kept has room for 1 entries; it needs one per model token, 2"));
  EXPECT_THAT(invalid_argument_message([&] {
                spec.accept_trees(both, std::vector<Token>{3, 5}, std::vector<std::size_t>{0, 1, 2},
                                  std::vector<Token>{1, 2, 3}, steps, kept);
              }),
              HasSubstr("top has 3 tokens; it needs none or top_k() = 4 per model token, 8"));
  EXPECT_THAT(invalid_argument_message([&] {
                spec.accept_trees(both, std::vector<Token>{3, 5}, std::vector<std::size_t>{0, 1, 2},
                                  std::vector<Token>{1, 2, 3, 4, 5, 64, 7, 8}, steps, kept);
              }),
              HasSubstr("sequence 2: top[5] = 64 is outside the top-k table's vocabulary of 64"));
  EXPECT_THAT(invalid_argument_message([&] {
                spec.accept_trees(both, std::vector<Token>{3, 70}, std::vector<std::size_t>{0, 1, 2},
                                  std::vector<Token>{1, 2, 3, 4, 1, 2, 3, 4}, steps, kept);
              }),
              HasSubstr("sequence 2: model_tokens[1] = 70 is outside the top-k table's vocabulary of 64"));
  EXPECT_THAT(invalid_argument_message([&] {
                spec.accept_trees(both, std::vector<Token>{3, 5}, std::vector<std::size_t>{0, 1, 3}, {}, steps, kept);
              }),
              HasSubstr("offsets[0] = 0 and offsets[2] = 3 are invalid"));
  // A row is the model's top_k() best tokens: one listed twice would come back as twin siblings.
  EXPECT_THAT(invalid_argument_message([&] {
                spec.accept_trees(both, std::vector<Token>{3, 5}, std::vector<std::size_t>{0, 1, 2},
                                  std::vector<Token>{1, 2, 3, 4, 9, 8, 7, 8}, steps, kept);
              }),
              HasSubstr("sequence 2: top[7] = 8 is invalid: token 8 is also top[5], in the same row (entry 1); a row "
                        "lists 4 distinct tokens"));
  EXPECT_EQ(spec.state(1).generated, 0U);
  EXPECT_EQ(spec.stats().emitted, 0U);
  spec.accept_trees(both, std::vector<Token>{3, 5}, std::vector<std::size_t>{0, 1, 2},
                    std::vector<Token>{1, 2, 3, 4, 9, 8, 7, 6}, steps, kept);
  EXPECT_EQ(spec.state(1).generated, 1U);
  EXPECT_EQ(kept[0], 0U);
  EXPECT_EQ(kept[1], 0U);

  // A tree pass: model tokens beyond the nodes proposed are refused, naming the count.
  const std::size_t n = spec.propose_trees(both, tokens, parents, offsets);
  ASSERT_GT(n, 0U);
  const std::size_t first = offsets[1];
  std::vector<Token> model(n + 3, 1);
  std::vector<std::size_t> model_offsets{0, first + 2, n + 3};
  EXPECT_THAT(invalid_argument_message([&] {
                spec.accept_trees(both, model, model_offsets, {}, steps, kept);
              }),
              HasSubstr("sequence 1 has " + std::to_string(first + 2) + " model tokens; it needs 1 to " +
                        std::to_string(first + 1)));
  EXPECT_EQ(spec.state(1).generated, 1U);
  // The same pass, right: it goes through.
  model.resize(n + 2);
  spec.accept_trees(both, model, std::vector<std::size_t>{0, first + 1, n + 2}, {}, steps, kept);
  EXPECT_EQ(spec.state(1).generated, 1U + steps[0].emitted);

  // Drafters whose tables disagree on k cannot share a pass's top rows.
  TopKTable other(64, 2);
  std::size_t made = 0;
  EXPECT_THAT(invalid_argument_message([&] {
                BatchSpeculator<TreeDrafter> bad(BatchConfig{.max_sequences = 2},
                                                 [&] { return TreeDrafter(TreeConfig{}, made++ == 0 ? &table : &other); });
              }),
              HasSubstr("drafter 1 recycles a top-k table of k = 2 but drafter 0 one of k = 4"));
  // Without a table, top rows are refused.
  BatchSpeculator<TreeDrafter> plain(BatchConfig{.max_sequences = 1}, [] { return TreeDrafter(); });
  EXPECT_EQ(plain.top_k(), 0U);
  plain.begin(1, {1, 2});
  EXPECT_THAT(invalid_argument_message([&] {
                plain.accept_trees(std::vector<SequenceId>{1}, std::vector<Token>{3}, std::vector<std::size_t>{0, 1},
                                   std::vector<Token>{3}, steps, kept);
              }),
              HasSubstr("top has 1 tokens; it needs none or top_k() = 0 per model token, 0 (the drafters recycle no "
                        "top-k)"));
}

// Once warm, a tree step allocates nothing: propose_trees, accept_trees, and a sequence leaving
// and joining, with a shared table and a cost.
TEST(BatchSpeculatorTrees, SteadyStateStepsDoNotAllocate) {
  TopKTable table(16, 4);
  SharedCorpus corpus(SharedCorpus::bytes_for(4096));
  BatchSpeculator<TreeDrafter> spec(BatchConfig{.max_sequences = 8, .cost = VerifyCost::knee(64)},
                                    [&] { return TreeDrafter(TreeConfig{}, &table); }, &corpus);
  std::vector<SequenceId> ids;
  std::vector<Token> prompt;
  for (Token t = 0; t < 40; ++t) prompt.push_back(t % 5);
  DecodeOptions options;
  options.max_drafts = 12;
  options.max_new_tokens = 100000;
  for (SequenceId id = 0; id < 8; ++id) {
    spec.begin(id, prompt, options);
    ids.push_back(id);
  }
  std::vector<Token> tokens(96);
  std::vector<std::int32_t> parents(96);
  std::vector<std::size_t> offsets(9);
  std::vector<Token> model_tokens(8 + 96);
  std::vector<std::size_t> model_offsets(9);
  std::vector<Token> top(4 * (8 + 96));
  std::vector<StepOutcome> steps(8);
  std::vector<std::size_t> kept(8 + 96);
  std::vector<Token> last(8, 4);
  std::vector<Token> path(64);
  // The model continues the cycle 0 1 2 3 4: its token after an entry is the entry's token + 1,
  // so the node whose token is the root path's next one is accepted.
  const auto step = [&] {
    (void)spec.propose_trees(ids, tokens, parents, offsets);
    std::size_t e = 0;
    model_offsets[0] = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const bool prefill = spec.state(ids[i]).generated == 0;
      const std::size_t n = prefill ? 0 : offsets[i + 1] - offsets[i];
      model_tokens[e] = (last[i] + 1) % 5;
      for (std::size_t j = 0; j < n; ++j) model_tokens[e + 1 + j] = (tokens[offsets[i] + j] + 1) % 5;
      for (std::size_t x = e; x <= e + n; ++x) {
        for (std::size_t r = 0; r < 4; ++r) top[x * 4 + r] = static_cast<Token>((model_tokens[x] + r) % 5);
      }
      e += n + 1;
      model_offsets[i + 1] = e;
    }
    spec.accept_trees(ids, std::span<const Token>(model_tokens).first(e), model_offsets,
                      std::span<const Token>(top).first(4 * e), steps, kept);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      last[i] = model_tokens[model_offsets[i] + kept[model_offsets[i] + steps[i].emitted - 1]];
    }
  };
  for (int warm = 0; warm < 3; ++warm) step();
  spec.finish(3);
  spec.begin(3, prompt, options);
  last[3] = 4;
  step();
  AllocationCounter counter;
  for (int i = 0; i < 20; ++i) step();
  spec.finish(5);
  spec.begin(5, prompt, options);
  last[5] = 4;
  for (int i = 0; i < 5; ++i) step();
  EXPECT_EQ(counter.count(), 0U);
  EXPECT_GT(spec.stats().accepted, 100U);
}

// ---------------------------------------------------------------------------------------------
// Distributions (rejection sampling in the engine): propose()/propose_trees() with q, and
// accept_trees() with the rows' probabilities.

/// A tree engine over TreeDrafters that draw their recycled candidates (their shared table
/// keeps probabilities), with the cycle model of SteadyStateStepsDoNotAllocate: its token after
/// an entry is the entry's token + 1 (mod 5), its top row that token and the three after it,
/// with probabilities `p` (padded with 0 where p has fewer). Every buffer is sized up front.
struct DrawingTreeEngine {
  static constexpr std::size_t kSequences = 8;
  static constexpr std::size_t kNodes = 12;
  static constexpr std::size_t kEntries = kSequences * (kNodes + 1);
  TopKTable table{16, 4, /*probabilities=*/true};
  BatchSpeculator<TreeDrafter> spec{BatchConfig{.max_sequences = kSequences, .cost = VerifyCost::knee(64)}, [this] {
                                      TreeConfig config;
                                      config.draw_recycled = true;
                                      return TreeDrafter(config, &table);
                                    }};
  std::vector<SequenceId> ids;
  std::vector<Token> tokens = std::vector<Token>(kSequences * kNodes);
  std::vector<std::int32_t> parents = std::vector<std::int32_t>(kSequences * kNodes);
  std::vector<std::size_t> offsets = std::vector<std::size_t>(kSequences + 1);
  std::vector<DraftDistributions> q = std::vector<DraftDistributions>(kSequences);
  std::vector<Token> model_tokens = std::vector<Token>(kEntries);
  std::vector<std::size_t> model_offsets = std::vector<std::size_t>(kSequences + 1);
  std::vector<Token> top = std::vector<Token>(4 * kEntries);
  std::vector<float> probabilities = std::vector<float>(4 * kEntries);
  std::vector<StepOutcome> steps = std::vector<StepOutcome>(kSequences);
  std::vector<std::size_t> kept = std::vector<std::size_t>(kEntries);
  std::vector<Token> last;      // each sequence's last token, the root of its next pass
  std::size_t entries = 0;     // of the last pass
  std::size_t drawn_nodes = 0;  // nodes proposed that say what they were drawn from

  DrawingTreeEngine() {
    DecodeOptions options;
    options.max_drafts = kNodes;
    options.max_new_tokens = 100000;
    // A prompt unlike the model's cycle: the text's candidates miss, and the recycled rows count.
    std::vector<Token> prompt;
    for (Token t = 0; t < 40; ++t) prompt.push_back((t * 7 + t / 3) % 5);
    for (SequenceId id = 0; id < kSequences; ++id) {
      spec.begin(id, prompt, options);
      ids.push_back(id);
    }
    last.assign(kSequences, prompt.back());
  }
  /// Proposes and writes the model's answer, rows with probabilities `p`.
  void propose(std::span<const float> p) {
    (void)spec.propose_trees(ids, tokens, parents, offsets, q);
    std::size_t e = 0;
    model_offsets[0] = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::size_t n = offsets[i + 1] - offsets[i];
      EXPECT_EQ(q[i].size(), n);
      for (std::size_t j = 0; j < n; ++j) drawn_nodes += q[i].tokens(j).empty() ? 0 : 1;
      model_tokens[e] = (last[i] + 1) % 5;
      for (std::size_t j = 0; j < n; ++j) model_tokens[e + 1 + j] = (tokens[offsets[i] + j] + 1) % 5;
      for (std::size_t x = e; x <= e + n; ++x) {
        for (std::size_t r = 0; r < 4; ++r) {
          top[x * 4 + r] = static_cast<Token>((model_tokens[x] + r) % 5);
          probabilities[x * 4 + r] = r < p.size() ? p[r] : 0.0f;
        }
      }
      e += n + 1;
      model_offsets[i + 1] = e;
    }
    entries = e;
  }
  void accept() {
    spec.accept_trees(ids, std::span<const Token>(model_tokens).first(entries), model_offsets,
                      std::span<const Token>(top).first(4 * entries),
                      std::span<const float>(probabilities).first(4 * entries), steps, kept);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      last[i] = model_tokens[model_offsets[i] + kept[model_offsets[i] + steps[i].emitted - 1]];
    }
  }
};

// Sequences begun side by side with the same prompt, the same model and a shared seed draw
// their candidates apart (each request keyed by its own stream): were they to draw alike,
// parallel samples of one prompt would not be independent. Every sequence starts in the same
// state and the model answers all alike, so drafters that drew alike would build the same
// trees pass after pass.
TEST(BatchSpeculatorTrees, SequencesBegunSideBySideDrawApart) {
  DrawingTreeEngine engine;
  const std::vector<float> p = {0.4f, 0.3f, 0.2f, 0.1f};
  std::size_t differing = 0;
  std::size_t compared = 0;
  for (int pass = 0; pass < 8; ++pass) {
    engine.propose(p);
    const auto tree = [&](std::size_t i) {
      return std::vector<Token>(engine.tokens.begin() + static_cast<std::ptrdiff_t>(engine.offsets[i]),
                                engine.tokens.begin() + static_cast<std::ptrdiff_t>(engine.offsets[i + 1]));
    };
    for (std::size_t i = 1; i < DrawingTreeEngine::kSequences; ++i) {
      ++compared;
      differing += tree(i) != tree(0) ? 1 : 0;
    }
    engine.accept();
  }
  EXPECT_GT(engine.drawn_nodes, 0U);
  EXPECT_GT(differing, compared / 2) << differing << " of " << compared << " trees differ from sequence 0's";
}

TEST(BatchSpeculatorTrees, DistributionStepsDoNotAllocate) {
  DrawingTreeEngine engine;
  const std::vector<float> p = {0.5f, 0.25f, 0.125f};
  for (int warm = 0; warm < 4; ++warm) {
    engine.propose(p);
    engine.accept();
  }
  AllocationCounter counter;
  for (int i = 0; i < 20; ++i) {
    engine.propose(p);
    engine.accept();
  }
  EXPECT_EQ(counter.count(), 0U);
  EXPECT_GT(engine.spec.stats().accepted, 100U);
  EXPECT_GT(engine.drawn_nodes, 0U);  // the recycled candidates were drawn

  // Chains of MatchDrafters give one-hot entries, one per draft, and allocate nothing either.
  BatchSpeculator<> spec(BatchConfig{.max_sequences = 4}, MatchConfig{.index_capacity = 64, .count_window = 32, .min_confidence = 0});
  std::vector<SequenceId> ids{1, 2, 3, 4};
  std::vector<Token> prompt;
  for (Token t = 0; t < 30; ++t) prompt.push_back(t % 3);
  DecodeOptions options;
  options.max_new_tokens = 100000;
  options.max_drafts = 8;
  for (const SequenceId id : ids) spec.begin(id, prompt, options);
  std::vector<Token> drafts(32);
  std::vector<std::size_t> offsets(5);
  std::vector<DraftDistributions> q(4);
  std::vector<Token> model_tokens(36);
  std::vector<std::size_t> model_offsets(5);
  std::vector<StepOutcome> steps(4);
  std::vector<Token> last(4, 2);
  const auto step = [&] {
    spec.propose(ids, drafts, offsets, q);
    std::size_t e = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(q[i].size(), offsets[i + 1] - offsets[i]);
      EXPECT_FALSE(q[i].any_drawn());
      model_tokens[e++] = (last[i] + 1) % 3;
      for (std::size_t j = offsets[i]; j < offsets[i + 1]; ++j) model_tokens[e++] = (drafts[j] + 1) % 3;
      model_offsets[i + 1] = e;
    }
    spec.accept(ids, std::span<const Token>(model_tokens).first(e), model_offsets, steps);
    for (std::size_t i = 0; i < 4; ++i) last[i] = model_tokens[model_offsets[i] + steps[i].emitted - 1];
  };
  for (int warm = 0; warm < 4; ++warm) step();
  AllocationCounter chain_counter;
  for (int i = 0; i < 20; ++i) step();
  EXPECT_EQ(chain_counter.count(), 0U);
  EXPECT_GT(spec.stats().accepted, 100U);
}

TEST(BatchSpeculatorTrees, AcceptTreesRecordsEveryEntrysRowWithItsProbabilities) {
  // Random rows, some ending in probability 0 (tokens the filters dropped): after each pass the
  // table holds, for every token fed, the row of its last entry in the pass, up to its first 0
  // (each row replaced, not blended: TopKTable's own tests check the blend).
  DrawingTreeEngine engine;
  engine.table.set_history_weight(0.0f);
  std::mt19937_64 rng(7);
  for (int pass = 0; pass < 30; ++pass) {
    std::vector<float> p(1 + rng() % 4);
    for (float& x : p) x = static_cast<float>(1 + rng() % 100) / 400.0f;
    engine.propose(p);
    std::vector<Token> fed;
    for (std::size_t i = 0; i < engine.ids.size(); ++i) {
      fed.push_back(engine.last[i]);
      for (std::size_t j = engine.offsets[i]; j < engine.offsets[i + 1]; ++j) fed.push_back(engine.tokens[j]);
    }
    engine.accept();
    for (std::size_t e = 0; e < fed.size(); ++e) {
      if (std::find(fed.begin() + static_cast<std::ptrdiff_t>(e) + 1, fed.end(), fed[e]) != fed.end()) continue;
      const std::span<const Token> row = engine.table.row(fed[e]);
      const std::span<const float> row_p = engine.table.row_probabilities(fed[e]);
      ASSERT_EQ(row.size(), p.size()) << "pass " << pass << ", entry " << e;
      ASSERT_EQ(row_p.size(), p.size());
      for (std::size_t r = 0; r < p.size(); ++r) {
        EXPECT_EQ(row[r], engine.top[e * 4 + r]);
        EXPECT_EQ(row_p[r], p[r]);
      }
    }
  }
}

// In a vocabulary of fewer than top_k() tokens a row lists each token once and can then only
// repeat: what follows the vocabulary's size is not read for repeats.
TEST(BatchSpeculatorTrees, ARowOverAVocabularySmallerThanKRepeatsOnlyPastIt) {
  TopKTable table(2, 4);
  BatchSpeculator<TreeDrafter> spec(BatchConfig{.max_sequences = 1}, [&] { return TreeDrafter(TreeConfig{}, &table); });
  const SequenceId id = 3;
  spec.begin(id, {0, 1, 0});
  std::vector<StepOutcome> steps(1);
  std::vector<std::size_t> kept(1);
  EXPECT_THAT(invalid_argument_message([&] {
                spec.accept_trees(std::span(&id, 1), std::vector<Token>{1}, std::vector<std::size_t>{0, 1},
                                  std::vector<Token>{0, 0, 1, 1}, steps, kept);
              }),
              HasSubstr("sequence 3: top[1] = 0 is invalid: token 0 is also top[0]"));
  spec.accept_trees(std::span(&id, 1), std::vector<Token>{1}, std::vector<std::size_t>{0, 1},
                    std::vector<Token>{0, 1, 0, 1}, steps, kept);
  EXPECT_EQ(steps[0].emitted, 1U);
}

TEST(BatchSpeculatorTrees, AcceptTreesRefusesBadProbabilitiesChangingNothing) {
  const std::string where = "ngramspec::BatchSpeculator::accept_trees: ";
  DrawingTreeEngine engine;
  const std::vector<float> p = {0.5f, 0.25f};
  engine.propose(p);
  engine.accept();
  engine.propose(p);
  const std::size_t generated = engine.spec.state(0).generated;
  const std::size_t at = 4 * engine.model_offsets[2] + 1;  // sequence 2's first row, second token
  const auto refused = [&] {
    return invalid_argument_message([&] {
      engine.spec.accept_trees(engine.ids, std::span<const Token>(engine.model_tokens).first(engine.entries),
                               engine.model_offsets, std::span<const Token>(engine.top).first(4 * engine.entries),
                               std::span<const float>(engine.probabilities).first(4 * engine.entries), engine.steps,
                               engine.kept);
    });
  };
  for (const float bad : {-0.5f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    engine.probabilities[at] = bad;
    EXPECT_THAT(refused(), HasSubstr(where + "sequence 2: top_probabilities[" + std::to_string(at) + "] = "));
  }
  engine.probabilities[at] = 0.25f;
  engine.probabilities[at - 1] = 0.0f;  // a row's first
  EXPECT_THAT(refused(), HasSubstr("top_probabilities[" + std::to_string(at - 1) + "] = 0 is invalid"));
  engine.probabilities[at - 1] = 0.5f;
  EXPECT_THAT(invalid_argument_message([&] {
                engine.spec.accept_trees(engine.ids, std::span<const Token>(engine.model_tokens).first(engine.entries),
                                         engine.model_offsets,
                                         std::span<const Token>(engine.top).first(4 * engine.entries),
                                         std::span<const float>(engine.probabilities).first(3), engine.steps,
                                         engine.kept);
              }),
              HasSubstr(where + "top_probabilities has 3 elements; it needs top.size() = "));
  // A row lists a token once, as far as it is recorded: to its first probability 0 (here its
  // third token); past it, what the filters dropped may repeat.
  const Token first_token = engine.top[at - 1];
  const Token second_token = engine.top[at];
  engine.top[at] = first_token;
  EXPECT_THAT(refused(), HasSubstr(where + "sequence 2: top[" + std::to_string(at) + "] = " +
                                   std::to_string(first_token) + " is invalid: token " + std::to_string(first_token) +
                                   " is also top[" + std::to_string(at - 1) + "], in the same row (entry " +
                                   std::to_string(engine.model_offsets[2]) + "); a row lists 4 distinct tokens"));
  engine.top[at] = second_token;
  ASSERT_EQ(engine.probabilities[at + 1], 0.0f);
  engine.top[at + 1] = first_token;
  EXPECT_EQ(engine.spec.state(0).generated, generated);
  engine.accept();  // the same pass, now valid, is taken
  EXPECT_GT(engine.spec.state(0).generated, generated);

  // A table without probabilities is refused by name.
  TopKTable plain(16, 4);
  BatchSpeculator<TreeDrafter> spec(BatchConfig{.max_sequences = 1}, [&] { return TreeDrafter(TreeConfig{}, &plain); });
  const SequenceId id = 1;
  spec.begin(id, {1, 2, 3});
  std::vector<StepOutcome> steps(1);
  std::vector<std::size_t> kept(1);
  const std::vector<Token> top = {1, 2, 3, 4};
  const std::vector<float> probabilities = {0.4f, 0.3f, 0.2f, 0.1f};
  EXPECT_THAT(invalid_argument_message([&] {
                spec.accept_trees(std::span(&id, 1), std::vector<Token>{4}, std::vector<std::size_t>{0, 1}, top,
                                  probabilities, steps, kept);
              }),
              HasSubstr(where + "sequence 1: its top-k table keeps no probabilities"));
  EXPECT_EQ(spec.state(id).generated, 0U);
}

TEST(BatchSpeculator, ProposeWithDistributionsNeedsOnePerSequence) {
  BatchSpeculator<> spec(BatchConfig{.max_sequences = 2});
  const std::vector<SequenceId> ids{1, 2};
  spec.begin(1, {1, 2});
  spec.begin(2, {1, 2});
  std::vector<Token> drafts(8);
  std::vector<std::size_t> offsets(3);
  std::vector<DraftDistributions> q(1);
  EXPECT_EQ(invalid_argument_message([&] { spec.propose(ids, drafts, offsets, q); }),
            "ngramspec::BatchSpeculator::propose: q has 1 elements; it needs one per sequence, ids.size() = 2");
  EXPECT_EQ(spec.stats().proposals, 0U);
}

// With BatchConfig::learn_cost every pass proposed is observed once, at accept(), at the time
// the engine reports, and the learned estimate plans the next passes; report_pass_seconds()
// refuses what it cannot use, naming it, and changes nothing.
TEST(BatchSpeculator, ALearnedCostObservesEveryPassAtTheReportedTime) {
  BatchSpeculator<> plain_config(BatchConfig{.max_sequences = 2});
  EXPECT_NE(invalid_argument_message([&] { plain_config.report_pass_seconds(1.0); }).find("learn_cost"),
            std::string::npos);
  EXPECT_EQ(plain_config.learned_cost(), nullptr);

  BatchConfig config{.max_sequences = 2, .cost = VerifyCost::knee(64)};
  config.learn_cost = true;
  BatchSpeculator<> spec(config);
  ASSERT_NE(spec.learned_cost(), nullptr);
  spec.begin(0, {1, 2, 3, 1, 2, 3});
  spec.begin(1, {1, 2, 3, 1, 2, 3});
  EXPECT_EQ(spec.drafter(0).config().min_confidence, 0.0)
      << "a learned cost decides what drafts are worth, as a fixed one does";
  EXPECT_NE(invalid_argument_message([&] { spec.report_pass_seconds(1.0); }).find("no pass proposed"),
            std::string::npos);
  const std::vector<SequenceId> ids{0, 1};
  std::vector<Token> drafts(16);
  std::vector<std::size_t> offsets(3);
  std::vector<StepOutcome> steps(2);
  double reported = 0;
  for (int pass = 0; pass < 20; ++pass) {
    const std::size_t total = spec.propose(ids, drafts, offsets);
    for (const double bad : {0.0, -1.0, std::nan("")}) {
      EXPECT_NE(invalid_argument_message([&] { spec.report_pass_seconds(bad); }).find("seconds = "),
                std::string::npos);
    }
    const double seconds = 1e-3 * (1 + 0.01 * static_cast<double>(total));
    spec.report_pass_seconds(seconds);
    reported += seconds;
    // The model repeats the period: every draft is right.
    std::vector<Token> model_tokens;
    std::vector<std::size_t> model_offsets{0};
    for (std::size_t i = 0; i < 2; ++i) {
      const SequenceState& s = spec.state(ids[i]);
      const std::size_t fed = offsets[i + 1] - offsets[i] + 1;
      for (std::size_t j = 0; j < fed; ++j) {
        model_tokens.push_back(static_cast<Token>((s.prompt_length + s.generated + j) % 3 + 1));
      }
      model_offsets.push_back(model_tokens.size());
    }
    spec.accept(ids, model_tokens, model_offsets, steps);
  }
  EXPECT_EQ(spec.learned_cost()->passes(), 20U);
  EXPECT_NEAR(spec.learned_cost()->seconds(), reported, 1e-12);
  EXPECT_GT(spec.stats().drafted, 0U) << "the prior, flat to 64 tokens, sends the right drafts";
}

}  // namespace
}  // namespace ngramspec::test
