// End to end on the shared stories260K checkpoint: golden greedy output, and speculative == plain.
#include <gtest/gtest.h>

#include <cstdint>
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
