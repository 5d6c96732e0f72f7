// End to end on the shared stories260K checkpoint: golden greedy output, and speculative == plain, with and
// without a verify cost model; and the cost measurement itself.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "llama2_generate.hpp"
#include "llama2_model.hpp"
#include "llama2_tokenizer.hpp"
#include "llama2_test_support.hpp"

namespace ngramspec::llama2 {
namespace {

using test::models_dir;

// llama2.c's run.c at temperature 0 from BOS alone produced these 256 ids; so must we, in plain
// passes and in verify passes of every width.
TEST(Llama2Decode, GreedyReproducesTheGoldenStory) {
  NGRAMSPEC_REQUIRE_MODELS();
  const std::vector<Token> golden = test::read_ids(models_dir() / "stories260K_greedy256.ids");
  ASSERT_EQ(golden.size(), 256u);
  Transformer model = Transformer::load(models_dir() / "stories260K.bin");
  const std::vector<Token> prompt = {kBos};
  const Generation plain = generate(model, prompt, 256, 4, false);
  EXPECT_EQ(plain.result.tokens, golden);
  EXPECT_EQ(plain.result.stats.decode_passes, 255u);
  for (const std::size_t k : {1u, 4u, 8u}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    const Generation spec = generate(model, prompt, 256, k, true);
    EXPECT_EQ(spec.result.tokens, golden);
    // The story repeats itself, so some drafts must have been accepted, else this proves little.
    EXPECT_GT(spec.result.stats.accepted, 0u);
    EXPECT_LT(spec.result.stats.decode_passes, 255u);
  }
}

TEST(Llama2Decode, GoldenStoryDecodesToPublishedText) {
  NGRAMSPEC_REQUIRE_MODELS();
  const Tokenizer tokenizer(models_dir() / "tok512.bin", 512);
  const std::vector<Token> golden = test::read_ids(models_dir() / "stories260K_greedy256.ids");
  const std::string text = tokenizer.decode(golden);
  EXPECT_EQ(text.rfind("Once upon a time, there was a little girl named Lily. She loved to play outside in the park.", 0),
            0u)
      << text;
  EXPECT_NE(text.find("Her mom said, \"Don't worry, Lily. We can help you."), std::string::npos) << text;
}

class Llama2SpecEqualsPlain : public ::testing::TestWithParam<std::size_t> {};

// For every prompt and draft width, speculative output is token for token the plain output.
TEST_P(Llama2SpecEqualsPlain, OnTwentyPrompts) {
  NGRAMSPEC_REQUIRE_MODELS();
  const std::size_t k = GetParam();
  static const char* const kPrompts[] = {
      "Once upon a time",
      "Lily and Tom went to the park",
      "The cat sat on the mat. The cat sat on the",
      "One day, a little boy named Tim",
      "She said, \"I want to play with the ball.\"",
      "There was a big red ball",
      "The sun was shining and the birds were singing.",
      "Ben had a toy car. He liked his toy car very much.",
      "Mom said, \"Be careful!\"",
      "The dog ran and ran and ran",
      "A little bird lived in a tree",
      "Sam was sad because",
      "They played all day. They were happy. They played all day.",
      "Once upon a time, there was a little girl named Lily. She loved to",
      "The end.",
      "Tom and Sue were friends",
      "It was a cold winter day",
      "\"Look!\" said Anna.",
      "x",
      "",
  };
  Transformer model = Transformer::load(models_dir() / "stories260K.bin", 16);
  const Tokenizer tokenizer(models_dir() / "tok512.bin", model.vocab_size());
  std::size_t accepted = 0;
  std::size_t rejected = 0;
  for (const char* text : kPrompts) {
    SCOPED_TRACE(std::string("prompt \"") + text + "\", k = " + std::to_string(k));
    const std::vector<Token> prompt = tokenizer.encode(text);
    const Generation plain = generate(model, prompt, 40, k, false);
    const Generation spec = generate(model, prompt, 40, k, true);
    EXPECT_EQ(spec.result.tokens, plain.result.tokens);
    EXPECT_EQ(spec.result.stop_reason, plain.result.stop_reason);
    accepted += spec.result.stats.accepted;
    rejected += spec.result.stats.rejected();
  }
  // Both verdicts must occur, or the comparison above would not exercise rollback and acceptance.
  EXPECT_GT(accepted, 0u);
  EXPECT_GT(rejected, 0u);
}

INSTANTIATE_TEST_SUITE_P(DraftWidths, Llama2SpecEqualsPlain, ::testing::Values(1u, 2u, 4u, 8u),
                         [](const auto& info) { return std::to_string(info.param) + "_drafts"; });

// Sampling through SamplingModel: with position-keyed randomness the same seed gives the same
// story with and without speculation, and different seeds give different stories.
TEST(Llama2Decode, SampledSpeculativeEqualsSampledPlainForEachSeed) {
  NGRAMSPEC_REQUIRE_MODELS();
  Transformer model = Transformer::load(models_dir() / "stories260K.bin");
  const std::vector<Token> prompt = {kBos};
  std::vector<std::vector<Token>> stories;
  std::size_t accepted = 0;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    SamplingOptions sampling;
    sampling.temperature = 0.8f;
    sampling.top_p = 0.95f;
    sampling.seed = seed;
    SCOPED_TRACE("seed = " + std::to_string(seed));
    const Generation plain = generate(model, prompt, 96, 4, false, sampling);
    const Generation spec = generate(model, prompt, 96, 4, true, sampling);
    EXPECT_EQ(spec.result.tokens, plain.result.tokens);
    EXPECT_EQ(spec.result.stop_reason, plain.result.stop_reason);
    accepted += spec.result.stats.accepted;
    stories.push_back(plain.result.tokens);
  }
  EXPECT_GT(accepted, 0u) << "no draft was ever accepted, so the comparison proves little";
  EXPECT_NE(stories.front(), stories.back());
}

// Self-speculation: drafts from the model's first L layers (a ModelDrafter over Transformer::early_exit), greedy
// and sampled, for every L and several draft widths, with and without a cost model, give plain decoding's tokens.
// With every layer the draft is the model: every greedy draft is accepted.
TEST(Llama2Decode, SelfDraftedEqualsPlainForEveryLayerCount) {
  NGRAMSPEC_REQUIRE_MODELS();
  Transformer model = Transformer::load(models_dir() / "stories260K.bin", 17);
  const Tokenizer tokenizer(models_dir() / "tok512.bin", 512);
  const std::vector<std::string> texts = {"Once upon a time", ""};
  std::size_t accepted = 0;
  for (std::size_t layers = 1; layers <= model.config().n_layers; ++layers) {
    Transformer draft = Transformer::early_exit(model, layers);
    for (const std::size_t k : {1u, 6u}) {
      for (const float temperature : {0.0f, 1.0f}) {
        SamplingOptions sampling;
        sampling.temperature = temperature;
        sampling.seed = layers * 100 + k;
        const std::optional<VerifyCost> cost =
            k == 6 ? std::optional<VerifyCost>(VerifyCost::knee(3)) : std::optional<VerifyCost>();
        ModelDrafter<Transformer> drafter = make_self_drafter(model, draft, k, sampling, cost);
        for (const std::string& text : texts) {
          SCOPED_TRACE("L = " + std::to_string(layers) + ", k = " + std::to_string(k) +
                       ", T = " + std::to_string(temperature) + ", prompt '" + text + "'");
          const std::vector<Token> prompt = tokenizer.encode(text);
          const Generation plain = generate(model, prompt, 48, k, false, sampling);
          const Generation spec = generate_with_draft(model, prompt, 48, k, drafter, sampling, cost);
          ASSERT_EQ(spec.result.tokens, plain.result.tokens);
          EXPECT_EQ(spec.result.stop_reason, plain.result.stop_reason);
          accepted += spec.result.stats.accepted;
          if (layers == model.config().n_layers && temperature == 0.0f) {
            EXPECT_EQ(spec.result.stats.accepted, spec.result.stats.drafted);
            if (!cost) {
              EXPECT_GT(spec.result.stats.drafted, 0u);
            }
          }
        }
      }
    }
  }
  EXPECT_GT(accepted, 0u);
}

TEST(Llama2Cost, TokenCountsAreOneMoreThanPowersOfTwoUpToKPlusOne) {
  using Counts = std::vector<std::size_t>;
  EXPECT_EQ(cost_token_counts(16, 64), (Counts{1, 2, 3, 5, 9, 17}));
  EXPECT_EQ(cost_token_counts(4, 64), (Counts{1, 2, 3, 5}));
  EXPECT_EQ(cost_token_counts(6, 64), (Counts{1, 2, 3, 5, 7}));
  EXPECT_EQ(cost_token_counts(1, 64), (Counts{1, 2}));
  EXPECT_EQ(cost_token_counts(16, 8), (Counts{1, 2, 3, 5, 8}));  // capped by max_batch or seq_len
  EXPECT_EQ(cost_token_counts(16, 1), (Counts{1}));
}

// The measured curve is a table over those widths, normalized to a one-token pass, that parses back from its
// spec; the model is left empty and still decodes as before.
TEST(Llama2Cost, MeasuresATableAndLeavesTheModelEmpty) {
  const Config config{32, 64, 2, 4, 2, 64, 48, true};
  Transformer model = Transformer::random(config, 7, 17);
  const std::vector<Token> prompt = {1, 5, 9};
  const Generation before = generate(model, prompt, 20, 4, false);
  const VerifyCost cost = measure_pass_cost(model, 16, {}, 3, midway_context(prompt.size(), 20));
  EXPECT_EQ(model.length(), 0u);
  ASSERT_EQ(cost.points().size(), 6u);
  EXPECT_EQ(cost.points()[0].tokens, 1u);
  EXPECT_DOUBLE_EQ(cost.points()[0].cost, 1.0);
  EXPECT_EQ(cost.points()[5].tokens, 17u);
  for (std::size_t i = 1; i < cost.points().size(); ++i) EXPECT_GE(cost.points()[i].cost, cost.points()[i - 1].cost);
  EXPECT_EQ(VerifyCost::parse(cost.spec()).spec(), cost.spec());
  EXPECT_EQ(generate(model, prompt, 20, 4, false).result.tokens, before.result.tokens);

  // Sampled: timed through the sampler; a context past seq_len is pulled back so the widest pass fits.
  SamplingOptions sampling;
  sampling.temperature = 0.8f;
  sampling.seed = 3;
  const VerifyCost sampled = measure_pass_cost(model, 16, sampling, 2, 1000);
  EXPECT_EQ(sampled.points().back().tokens, 17u);
  EXPECT_EQ(model.length(), 0u);
}

// With a cost model the drafts are sized per pass; output is still plain decoding's, greedy and sampled, under
// the measured curve, a flat one (knee: long drafts) and a steep one (knee:1: no drafts at all).
TEST(Llama2Decode, CostAwareSpeculationEqualsPlain) {
  NGRAMSPEC_REQUIRE_MODELS();
  Transformer model = Transformer::load(models_dir() / "stories260K.bin");
  const Tokenizer tokenizer(models_dir() / "tok512.bin", model.vocab_size());
  SamplingOptions sampled;
  sampled.temperature = 0.8f;
  sampled.top_p = 0.95f;
  sampled.seed = 7;
  std::size_t flat_accepted = 0;
  for (const SamplingOptions& sampling : {SamplingOptions{}, sampled}) {
    const VerifyCost measured = measure_pass_cost(model, 16, sampling, 3);
    for (const char* text : {"Once upon a time", "Lily wanted to", "The little dog"}) {
      SCOPED_TRACE(std::string("prompt \"") + text + "\", temperature " + std::to_string(sampling.temperature));
      const std::vector<Token> prompt = tokenizer.encode(text);
      const Generation plain = generate(model, prompt, 96, 16, false, sampling);
      for (const VerifyCost& cost : {measured, VerifyCost::knee(64), VerifyCost::knee(1)}) {
        SCOPED_TRACE("cost " + cost.spec());
        const Generation spec = generate(model, prompt, 96, 16, true, sampling, cost);
        EXPECT_EQ(spec.result.tokens, plain.result.tokens);
        EXPECT_EQ(spec.result.stop_reason, plain.result.stop_reason);
        if (cost.spec() == "knee:1") {
          EXPECT_EQ(spec.result.stats.drafted, 0u);  // no draft can pay
        }
        if (cost.spec() == "knee:64") flat_accepted += spec.result.stats.accepted;
      }
    }
  }
  EXPECT_GT(flat_accepted, 0u) << "a flat cost never had a draft accepted, so the comparison proves little";
}

TEST(Llama2Decode, RejectsAPromptLongerThanSeqLen) {
  NGRAMSPEC_REQUIRE_MODELS();
  Transformer model = Transformer::load(models_dir() / "stories260K.bin");
  const std::vector<Token> prompt(model.config().seq_len + 1, 300);
  try {
    (void)generate(model, prompt, 8, 4, true);
    FAIL() << "a prompt of seq_len + 1 tokens was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("longer than the model's seq_len"), std::string::npos) << e.what();
  }
  // Exactly seq_len fits, and generation stops at the context limit with nothing to add.
  const std::vector<Token> full(model.config().seq_len, 300);
  const Generation run = generate(model, full, 8, 4, true);
  EXPECT_EQ(run.result.stop_reason, StopReason::max_context);
}

}  // namespace
}  // namespace ngramspec::llama2
