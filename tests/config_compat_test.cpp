// The public configurations keep what an initializer written against the first release that had
// them means: each one's positional and designated forms, as that release's members gave them,
// land every value on the member of the same meaning today, and the library takes them. And a
// positional form with every member of today's layout set to a distinct value lands each value
// where it belongs, so a member inserted before others (rather than appended) breaks the build.
//
// Values listed by position follow the order of the members, so a setting's place is part of the
// API: a rename may not leave the former name behind as a member beside the new one (as
// NGramConfig::draft_count and MatchConfig::cap and draft_count once were, which the positional
// forms below then landed on), and a new setting goes after the others. The checks are
// static_asserts where the configuration is a literal type, so a broken layout fails to compile.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "ngramspec/ngramspec.hpp"
#include "support/mock_models.hpp"
#include "support/rule_logits_model.hpp"

namespace ngramspec::test {
namespace {

// ---- Former names: no longer members, so code naming them fails to compile --------------------

template <class T>
concept HasDraftCount = requires(T config) { config.draft_count; };
template <class T>
concept HasCap = requires(T config) { config.cap; };

static_assert(!HasDraftCount<NGramConfig>, "draft_count is the former name of NGramConfig::max_drafts");
static_assert(!HasDraftCount<MatchConfig>, "draft_count is the former name of MatchConfig::max_drafts");
static_assert(!HasCap<MatchConfig>, "cap is the former name of MatchConfig::index_capacity");

// ---- NGramConfig: first given as {min_order, max_order, draft_count, window} (f87ea0c) --------

// The first release's benchmarks wrote NGramConfig{2, 4, k, window}.
constexpr NGramConfig kNGramFirstPositional{2, 4, 4, 512};
static_assert(kNGramFirstPositional.min_order == 2 && kNGramFirstPositional.max_order == 4);
static_assert(kNGramFirstPositional.max_drafts == 4 && kNGramFirstPositional.window == 512);

constexpr NGramConfig kNGramFirstShort{3, 5, 8};  // the window left at its default
static_assert(kNGramFirstShort.min_order == 3 && kNGramFirstShort.max_order == 5);
static_assert(kNGramFirstShort.max_drafts == 8 && kNGramFirstShort.window == NGramConfig{}.window);

// The first release wrote .draft_count = 16; the member is max_drafts now (draft_count names none).
constexpr NGramConfig kNGramFirstDesignated{.min_order = 3, .max_order = 8, .max_drafts = 16, .window = 64};
static_assert(kNGramFirstDesignated.min_order == 3 && kNGramFirstDesignated.max_order == 8);
static_assert(kNGramFirstDesignated.max_drafts == 16 && kNGramFirstDesignated.window == 64);

// Today's layout, every member distinct.
constexpr NGramConfig kNGramEvery{3, 5, 7, 64};
static_assert(kNGramEvery.min_order == 3 && kNGramEvery.max_order == 5 && kNGramEvery.max_drafts == 7 &&
              kNGramEvery.window == 64);

// ---- MatchConfig: first given as {cap, copy_min_match, draft_count, count_max_order} (801034c) ----

// index_capacity 8192 and copy_min_match 16, as the first release read it (cap, copy_min_match).
constexpr MatchConfig kMatchFirstShort{8192, 16};
static_assert(kMatchFirstShort.index_capacity == 8192 && kMatchFirstShort.copy_min_match == 16);
static_assert(kMatchFirstShort.max_drafts == MatchConfig{}.max_drafts);

constexpr MatchConfig kMatchFirstPositional{4096, 3, 4, 2};
static_assert(kMatchFirstPositional.index_capacity == 4096 && kMatchFirstPositional.copy_min_match == 3);
static_assert(kMatchFirstPositional.max_drafts == 4 && kMatchFirstPositional.count_max_order == 2);

// The first release wrote .cap and .draft_count (MatchConfig{.cap = 64} in its tests); the members
// are index_capacity and max_drafts now (the former names name none).
constexpr MatchConfig kMatchFirstCapOnly{.index_capacity = 64};
static_assert(kMatchFirstCapOnly.index_capacity == 64 &&
              kMatchFirstCapOnly.copy_min_match == MatchConfig{}.copy_min_match);
constexpr MatchConfig kMatchFirstDesignated{
    .index_capacity = 4096, .copy_min_match = 3, .max_drafts = 4, .count_max_order = 2};
static_assert(kMatchFirstDesignated.index_capacity == 4096 && kMatchFirstDesignated.copy_min_match == 3);
static_assert(kMatchFirstDesignated.max_drafts == 4 && kMatchFirstDesignated.count_max_order == 2);

constexpr MatchConfig kMatchEvery{100, 5, 7, 4, 64, 0.25, CorpusPreference::file, 50000, 99};
static_assert(kMatchEvery.index_capacity == 100 && kMatchEvery.copy_min_match == 5 && kMatchEvery.max_drafts == 7 &&
              kMatchEvery.count_max_order == 4 && kMatchEvery.count_window == 64 &&
              kMatchEvery.min_confidence == 0.25 && kMatchEvery.corpus_preference == CorpusPreference::file &&
              kMatchEvery.vocab_size == 50000 && kMatchEvery.tokenizer_fingerprint == 99);

// ---- TreeConfig: first given as {chain, successor_slots, vocab_size, top_k, max_children,
// carry_over} (186a0af) ---------------------------------------------------------------------------

constexpr TreeConfig kTreeFirstPositional{MatchConfig{}, 1024, 300, 6, 5, true};
static_assert(kTreeFirstPositional.chain.index_capacity == MatchConfig{}.index_capacity);
static_assert(kTreeFirstPositional.successor_slots == 1024 && kTreeFirstPositional.vocab_size == 300 &&
              kTreeFirstPositional.top_k == 6 && kTreeFirstPositional.max_children == 5 &&
              kTreeFirstPositional.carry_over);

constexpr TreeConfig kTreeFirstDesignated{.chain = {.index_capacity = 512},
                                          .successor_slots = 1024,
                                          .vocab_size = 300,
                                          .top_k = 6,
                                          .max_children = 5,
                                          .carry_over = true};
static_assert(kTreeFirstDesignated.chain.index_capacity == 512 && kTreeFirstDesignated.successor_slots == 1024 &&
              kTreeFirstDesignated.vocab_size == 300 && kTreeFirstDesignated.top_k == 6 &&
              kTreeFirstDesignated.max_children == 5 && kTreeFirstDesignated.carry_over);

constexpr TreeConfig kTreeEvery{kMatchEvery, 2048, 50000, 7, 3, true, false, true, 77, 0.5f};
static_assert(kTreeEvery.chain.index_capacity == 100 && kTreeEvery.chain.tokenizer_fingerprint == 99 &&
              kTreeEvery.successor_slots == 2048 && kTreeEvery.vocab_size == 50000 && kTreeEvery.top_k == 7 &&
              kTreeEvery.max_children == 3 && kTreeEvery.carry_over && !kTreeEvery.enrich_counts &&
              kTreeEvery.draw_recycled && kTreeEvery.draw_seed == 77 && kTreeEvery.recycled_history == 0.5f);

// ---- SamplingOptions: first given as {temperature, top_k, top_p, min_p, seed} (b6f6568) -------

constexpr SamplingOptions kSamplingFirstPositional{0.7f, 40, 0.9f, 0.05f, 1234};
static_assert(kSamplingFirstPositional.temperature == 0.7f && kSamplingFirstPositional.top_k == 40 &&
              kSamplingFirstPositional.top_p == 0.9f && kSamplingFirstPositional.min_p == 0.05f &&
              kSamplingFirstPositional.seed == 1234 && kSamplingFirstPositional.mode == SamplingMode::exact);

constexpr SamplingOptions kSamplingFirstDesignated{
    .temperature = 0.7f, .top_k = 40, .top_p = 0.9f, .min_p = 0.05f, .seed = 1234};
static_assert(kSamplingFirstDesignated.temperature == 0.7f && kSamplingFirstDesignated.top_k == 40 &&
              kSamplingFirstDesignated.top_p == 0.9f && kSamplingFirstDesignated.min_p == 0.05f &&
              kSamplingFirstDesignated.seed == 1234);

constexpr SamplingOptions kSamplingEvery{0.8f, 30, 0.95f, 0.1f, 4321, SamplingMode::rejection};
static_assert(kSamplingEvery.temperature == 0.8f && kSamplingEvery.top_k == 30 && kSamplingEvery.top_p == 0.95f &&
              kSamplingEvery.min_p == 0.1f && kSamplingEvery.seed == 4321 &&
              kSamplingEvery.mode == SamplingMode::rejection);

// ---- ModelDraftConfig: first given as {max_drafts, sampling, support} (eb475ae) ----------------

constexpr ModelDraftConfig kModelFirstPositional{6, kSamplingFirstPositional, 5};
static_assert(kModelFirstPositional.max_drafts == 6 && kModelFirstPositional.sampling.seed == 1234 &&
              kModelFirstPositional.support == 5);

constexpr ModelDraftConfig kModelFirstDesignated{.max_drafts = 6, .sampling = {.temperature = 0.7f}, .support = 5};
static_assert(kModelFirstDesignated.max_drafts == 6 && kModelFirstDesignated.sampling.temperature == 0.7f &&
              kModelFirstDesignated.support == 5);

constexpr ModelDraftConfig kModelEvery{7, kSamplingEvery, 3, 0.125f};
static_assert(kModelEvery.max_drafts == 7 && kModelEvery.sampling.seed == 4321 && kModelEvery.support == 3 &&
              kModelEvery.min_probability == 0.125f);

// ---- BestOfConfig: first given as {first_draft_cost, second_draft_cost, explore_every} (628615a) --

constexpr BestOfConfig kBestFirstPositional{0.25, 0.5, 7};
static_assert(kBestFirstPositional.first_draft_cost == 0.25 && kBestFirstPositional.second_draft_cost == 0.5 &&
              kBestFirstPositional.explore_every == 7);

constexpr BestOfConfig kBestFirstDesignated{.first_draft_cost = 0.25, .second_draft_cost = 0.5, .explore_every = 7};
static_assert(kBestFirstDesignated.first_draft_cost == 0.25 && kBestFirstDesignated.second_draft_cost == 0.5 &&
              kBestFirstDesignated.explore_every == 7);

constexpr BestOfConfig kBestEvery{0.125, 0.75, 9, false};
static_assert(kBestEvery.first_draft_cost == 0.125 && kBestEvery.second_draft_cost == 0.75 &&
              kBestEvery.explore_every == 9 && !kBestEvery.continue_first);

// ---- CorpusVocabulary: first given as {size, tokenizer_fingerprint} (d010b0b) -----------------

constexpr CorpusVocabulary kVocabularyFirstPositional{32000, 77};
static_assert(kVocabularyFirstPositional.size == 32000 && kVocabularyFirstPositional.tokenizer_fingerprint == 77);
constexpr CorpusVocabulary kVocabularyFirstDesignated{.size = 32000, .tokenizer_fingerprint = 77};
static_assert(kVocabularyFirstDesignated == kVocabularyFirstPositional);

// ---- CorpusRecord: first given as {tokens, stamp} (86a8a3f) -----------------------------------

constexpr Token kRecordTokens[] = {5, 6, 7};
constexpr CorpusRecord kRecordFirstPositional{kRecordTokens, 42};
static_assert(kRecordFirstPositional.tokens.data() == kRecordTokens && kRecordFirstPositional.tokens.size() == 3 &&
              kRecordFirstPositional.stamp == 42);
constexpr CorpusRecord kRecordFirstDesignated{.tokens = kRecordTokens, .stamp = 42};
static_assert(kRecordFirstDesignated.tokens.size() == 3 && kRecordFirstDesignated.stamp == 42);

// ---- DecodeOptions and BatchConfig hold a vector and an optional VerifyCost: checked at run time --

// DecodeOptions: first given as {max_new_tokens, stop_tokens, max_context, speculate, max_drafts} (f87ea0c).
TEST(ConfigCompat, DecodeOptionsKeepsTheFirstReleasesLayout) {
  const DecodeOptions first_positional{50, {2, 3}, 400, false, 9};
  const DecodeOptions first_designated{
      .max_new_tokens = 50, .stop_tokens = {2, 3}, .max_context = 400, .speculate = false, .max_drafts = 9};
  for (const DecodeOptions& options : {first_positional, first_designated}) {
    EXPECT_EQ(options.max_new_tokens, 50U);
    EXPECT_EQ(options.stop_tokens, (std::vector<Token>{2, 3}));
    EXPECT_EQ(options.max_context, 400U);
    EXPECT_FALSE(options.speculate);
    EXPECT_EQ(options.max_drafts, 9U);
    // The library takes it: a sequence starts under it.
    EXPECT_FALSE(start_sequence(4, options).finished);
  }
}

// BatchConfig: first given as {max_sequences, max_pass_tokens, max_record_tokens, cost} (64cf472).
TEST(ConfigCompat, BatchConfigKeepsTheFirstReleasesLayout) {
  const BatchConfig first_positional{3, 100, 256, VerifyCost::knee(4)};
  const BatchConfig first_designated{
      .max_sequences = 3, .max_pass_tokens = 100, .max_record_tokens = 256, .cost = VerifyCost::knee(4)};
  for (const BatchConfig& config : {first_positional, first_designated}) {
    EXPECT_EQ(config.max_sequences, 3U);
    EXPECT_EQ(config.max_pass_tokens, 100U);
    EXPECT_EQ(config.max_record_tokens, 256U);
    ASSERT_TRUE(config.cost.has_value());
    EXPECT_EQ(config.cost->spec(), VerifyCost::knee(4).spec());
    BatchSpeculator<> speculator(config, kMatchFirstShort);
    EXPECT_EQ(speculator.config().max_sequences, 3U);
  }
  // As the first release's llama.cpp integration wrote it.
  const BatchConfig integration{1, 0, 8192, std::nullopt};
  EXPECT_EQ(integration.max_sequences, 1U);
  EXPECT_EQ(integration.max_pass_tokens, 0U);
  EXPECT_EQ(integration.max_record_tokens, 8192U);
  EXPECT_FALSE(integration.cost.has_value());
  EXPECT_EQ(BatchSpeculator<MatchDrafter>(integration).config().max_record_tokens, 8192U);
}

// ---- The library takes each first release's form, reading back the meaning it was given ------

TEST(ConfigCompat, DraftersTakeTheFirstReleasesConfigs) {
  for (const NGramConfig& config : {kNGramFirstPositional, kNGramFirstShort, kNGramFirstDesignated, kNGramEvery}) {
    const NGramPredictor predictor(config);
    EXPECT_EQ(predictor.config().min_order, config.min_order);
    EXPECT_EQ(predictor.config().max_order, config.max_order);
    EXPECT_EQ(predictor.config().max_drafts, config.max_drafts);
    EXPECT_EQ(predictor.config().window, config.window);
  }
  for (const MatchConfig& config :
       {kMatchFirstShort, kMatchFirstPositional, kMatchFirstDesignated, kMatchFirstCapOnly, kMatchEvery}) {
    const MatchDrafter drafter(config);
    EXPECT_EQ(drafter.config().index_capacity, config.index_capacity);
    EXPECT_EQ(drafter.config().copy_min_match, config.copy_min_match);
    EXPECT_EQ(drafter.config().max_drafts, config.max_drafts);
    EXPECT_EQ(drafter.config().count_max_order, config.count_max_order);
  }
  for (const TreeConfig& config : {kTreeFirstPositional, kTreeFirstDesignated, kTreeEvery}) {
    const TreeDrafter drafter(config);
    EXPECT_EQ(drafter.config().successor_slots, config.successor_slots);
    EXPECT_EQ(drafter.config().max_children, config.max_children);
  }
  for (const SamplingOptions& options : {kSamplingFirstPositional, kSamplingFirstDesignated, kSamplingEvery}) {
    const TokenSampler sampler(options, 64);
    EXPECT_EQ(sampler.options().top_k, options.top_k);
  }
  RuleLogitsModel draft(RepeatRule{4, 16}, 16, 1, 1.0f, 3.0f, 8);
  for (const ModelDraftConfig& config : {kModelFirstPositional, kModelFirstDesignated, kModelEvery}) {
    const ModelDrafter<RuleLogitsModel> drafter(draft, 16, config);
    EXPECT_EQ(drafter.config().support, config.support);
  }
  ModelDrafter<RuleLogitsModel> second(draft, 16);
  MatchDrafter first;
  for (const BestOfConfig& config : {kBestFirstPositional, kBestFirstDesignated, kBestEvery}) {
    const BestOfDrafter<MatchDrafter, ModelDrafter<RuleLogitsModel>> best(first, second, std::nullopt, config);
    EXPECT_EQ(best.config().explore_every, config.explore_every);
  }
  EXPECT_EQ(CorpusBuilder(CorpusBuilder::kNoCap, kVocabularyFirstPositional).vocabulary(), kVocabularyFirstPositional);
}

}  // namespace
}  // namespace ngramspec::test
