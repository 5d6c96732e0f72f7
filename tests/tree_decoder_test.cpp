// Tree-verified decoding through SpeculativeDecoder: greedy output equals plain decoding
// token for token over many random models, prompts and settings; sampled output equals
// plain sampled decoding with the same seed; the model is driven by its contract.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ngramspec/sampling.hpp"
#include "ngramspec/speculative_decoder.hpp"
#include "ngramspec/tree_drafter.hpp"
#include "ngramspec/verify_cost.hpp"
#include "support/mock_models.hpp"

namespace ngramspec::test {
namespace {

static_assert(TreeTargetModel<GreedyModel> && TopKTreeModel<GreedyModel>);
static_assert(TreeDraftingDrafter<TreeDrafter>);
static_assert(!TreeDraftingDrafter<MatchDrafter>);

std::vector<Token> random_prompt(std::mt19937_64& rng, Token vocab) {
  std::vector<Token> prompt(std::uniform_int_distribution<std::size_t>(1, 40)(rng));
  // Repeats give the drafters something to copy.
  const std::size_t period = std::uniform_int_distribution<std::size_t>(1, 8)(rng);
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    prompt[i] = i >= period && rng() % 4 != 0 ? prompt[i - period] : static_cast<Token>(rng() % vocab);
  }
  return prompt;
}

/// One of the cost models a tree pass is sized by, or none: flat up to a knee, a steep or flat
/// table.
std::optional<VerifyCost> random_tree_cost(std::mt19937_64& rng) {
  switch (rng() % 6) {
    case 0: return VerifyCost::knee(std::uniform_int_distribution<std::size_t>(1, 16)(rng));
    case 1: return VerifyCost::knee(256);
    case 2: return VerifyCost::parse("table:1=1,2=1.25,3=1.71,5=2.77,9=5.06");
    default: return std::nullopt;
  }
}

/// Limits of one request: max_new_tokens, node budget, a stop token now and then, and half the
/// time a max_context 0 to 80 tokens past the prompt, often less room than the budget would fill.
DecodeOptions random_tree_options(std::mt19937_64& rng, Token vocab, std::size_t prompt_size) {
  DecodeOptions options;
  options.max_new_tokens = std::uniform_int_distribution<std::size_t>(0, 120)(rng);
  options.max_drafts = std::uniform_int_distribution<std::size_t>(1, 96)(rng);
  if (rng() % 3 == 0) options.stop_tokens = {static_cast<Token>(rng() % vocab)};
  if (rng() % 2 == 0) options.max_context = prompt_size + std::uniform_int_distribution<std::size_t>(0, 80)(rng);
  return options;
}

// Output equals plain greedy decoding, and no pass writes a KV entry a chain would not: the
// model holds max_context - 1 positions (a sequence never feeds the last token it may emit, so
// a chain's passes end below that), and a tree pass, one entry per node, must fit there too.
// Two requests per decoder, each with limits of its own: the second reuses buffers and what
// carry_over kept from the first.
TEST(TreeDecoding, GreedyOutputEqualsPlainDecodingOnRandomModels) {
  std::mt19937_64 rng(2020);
  std::size_t tree_passes = 0;
  std::size_t kept_moves = 0;
  std::size_t accepted = 0;
  std::size_t context_full = 0;
  for (int trial = 0; trial < 1200; ++trial) {
    const NamedRule named = random_rule(rng);
    const std::size_t max_batch = std::uniform_int_distribution<std::size_t>(1, 80)(rng);
    GreedyModel model(named.rule, max_batch);
    model.set_top_vocabulary(named.vocab);
    TreeConfig config;
    config.vocab_size = rng() % 3 == 0 ? 0 : named.vocab;  // sometimes no recycling
    config.top_k = std::uniform_int_distribution<std::size_t>(1, 8)(rng);
    config.max_children = std::uniform_int_distribution<std::size_t>(1, 8)(rng);
    config.carry_over = rng() % 2 == 0;
    SpeculativeDecoder decoder(model, TreeDrafter(config));
    decoder.set_verify_cost(random_tree_cost(rng));
    const std::vector<Token> prompt = random_prompt(rng, named.vocab);
    for (int request = 0; request < 2; ++request) {
      const DecodeOptions options = random_tree_options(rng, named.vocab, prompt.size());
      model.set_max_positions(kv_positions(options));
      const DecodeResult result = decoder.generate(prompt, options);
      const GreedyReference reference = plain_greedy(named.rule, prompt, options);
      ASSERT_EQ(result.tokens, reference.tokens) << "trial " << trial << " " << named.name;
      ASSERT_EQ(result.stop_reason, reference.stop_reason) << "trial " << trial;
      ASSERT_TRUE(model.violations().empty()) << "trial " << trial << ": " << model.violations().front();
      ASSERT_EQ(result.stats.generated, result.tokens.size());
      accepted += result.stats.accepted;
      if (result.stop_reason == StopReason::max_context && result.tokens.size() > 1) ++context_full;
    }
    tree_passes += model.tree_calls();
    kept_moves += model.keep_calls();
  }
  // The property is only as strong as the passes it saw: trees were verified, paths off the
  // first branch were kept, drafts were accepted, and sequences ran into their context.
  EXPECT_GT(tree_passes, 10000U);
  EXPECT_GT(kept_moves, 500U);
  EXPECT_GT(accepted, 30000U);
  EXPECT_GT(context_full, 300U);
}

// A LogitsTreeModel whose logits are a pure function of the path: pseudo-random scores from
// the last two tokens and the length.
class PathLogitsModel {
 public:
  PathLogitsModel(std::size_t vocab, std::uint64_t seed, std::size_t max_batch)
      : vocab_(vocab), seed_(seed), max_batch_(max_batch) {}

  void forward(std::size_t pos, std::span<const Token> tokens, std::span<float> out) {
    history_.resize(pos);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      history_.push_back(tokens[i]);
      fill(history_, out.subspan(i * vocab_, vocab_));
    }
  }
  // Holds the pass's tokens in pass order afterwards, as a real cache does.
  void forward_tree(std::size_t pos, std::span<const Token> tokens, std::span<const std::int32_t> parents,
                    std::span<float> out) {
    history_.resize(pos);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::vector<Token> path;
      for (std::int32_t at = static_cast<std::int32_t>(i); at != kTreeRoot; at = parents[static_cast<std::size_t>(at)]) {
        path.push_back(tokens[static_cast<std::size_t>(at)]);
      }
      std::vector<Token> prefix = history_;
      prefix.insert(prefix.end(), path.rbegin(), path.rend());
      fill(prefix, out.subspan(i * vocab_, vocab_));
    }
    history_.insert(history_.end(), tokens.begin(), tokens.end());
  }
  void keep(std::size_t pos, std::span<const std::size_t> kept) {
    for (std::size_t j = 0; j < kept.size(); ++j) history_[pos + j] = history_[pos + kept[j]];
    history_.resize(pos + kept.size());
  }
  void rollback(std::size_t pos) { history_.resize(pos); }
  [[nodiscard]] std::size_t max_batch() const noexcept { return max_batch_; }
  [[nodiscard]] std::size_t vocab_size() const noexcept { return vocab_; }

 private:
  void fill(const std::vector<Token>& prefix, std::span<float> out) const {
    std::uint64_t h = scramble(seed_ ^ prefix.size());
    for (std::size_t i = prefix.size() - std::min<std::size_t>(2, prefix.size()); i < prefix.size(); ++i) {
      h = scramble(h ^ prefix[i]);
    }
    for (std::size_t t = 0; t < vocab_; ++t) {
      out[t] = 4.0f * static_cast<float>(static_cast<double>(scramble(h + t) >> 11) * 0x1.0p-53);
    }
  }

  std::size_t vocab_;
  std::uint64_t seed_;
  std::size_t max_batch_;
  std::vector<Token> history_;
};

static_assert(LogitsTreeModel<PathLogitsModel>);
static_assert(TopKTreeModel<SamplingModel<PathLogitsModel>>);

TEST(TreeDecoding, SampledOutputEqualsPlainSampledDecodingWithTheSameSeed) {
  std::mt19937_64 rng(77);
  std::size_t accepted = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const std::size_t vocab = std::uniform_int_distribution<std::size_t>(2, 12)(rng);
    const std::uint64_t seed = rng();
    PathLogitsModel plain_logits(vocab, seed, 1);
    PathLogitsModel tree_logits(vocab, seed, 32);
    SamplingOptions sampling;
    sampling.temperature = std::uniform_real_distribution<float>(0.2f, 1.5f)(rng);
    sampling.seed = rng();
    if (rng() % 2 == 0) sampling.top_k = 3;
    SamplingModel<PathLogitsModel> plain(plain_logits, sampling);
    SamplingModel<PathLogitsModel> tree_sampler(tree_logits, sampling);
    DecodeOptions options;
    options.max_new_tokens = 80;
    options.max_drafts = 24;
    std::vector<Token> prompt = {static_cast<Token>(rng() % vocab), static_cast<Token>(rng() % vocab)};
    DecodeOptions no_speculation = options;
    no_speculation.speculate = false;
    SpeculativeDecoder reference(plain, MatchDrafter());
    const DecodeResult want = reference.generate(prompt, no_speculation);
    TreeConfig config;
    config.vocab_size = vocab;
    config.top_k = std::min<std::size_t>(4, vocab);
    SpeculativeDecoder decoder(tree_sampler, TreeDrafter(config));
    const DecodeResult got = decoder.generate(prompt, options);
    ASSERT_EQ(got.tokens, want.tokens) << "trial " << trial;
    accepted += got.stats.accepted;
  }
  EXPECT_GT(accepted, 100U);
}

}  // namespace
}  // namespace ngramspec::test
