// The transformer's kernels: batch invariance, rollback, argmax, the forward contract, tree passes and keep,
// checkpoint validation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <ngramspec/target_model.hpp>

#include "llama2_model.hpp"
#include <ngramspec/logits_model.hpp>
#include "llama2_test_support.hpp"

namespace ngramspec::llama2 {
namespace {

static_assert(TargetModel<Transformer> && LogitsModel<Transformer>);
static_assert(TreeTargetModel<Transformer> && TopKTreeModel<Transformer> && LogitsTreeModel<Transformer>);

// Small shapes that exercise grouped-query attention, both classifier layouts and widths that are not
// multiples of the kernels' block of eight.
std::vector<Config> small_configs() {
  std::vector<Config> configs;
  configs.push_back(Config{40, 60, 2, 4, 2, 97, 48, true});
  configs.push_back(Config{32, 88, 3, 4, 4, 130, 40, false});
  configs.push_back(Config{36, 20, 1, 6, 1, 53, 64, true});
  return configs;
}

std::vector<Token> random_tokens(std::mt19937& rng, std::size_t count, std::size_t vocab) {
  std::uniform_int_distribution<Token> dist(0, static_cast<Token>(vocab - 1));
  std::vector<Token> tokens(count);
  for (Token& t : tokens) t = dist(rng);
  return tokens;
}

// Logits of `tokens` fed from position `pos` in chunks whose sizes `rng` picks (1..max_batch), or one at a
// time when rng is null.
std::vector<float> chunked_logits(Transformer& model, std::size_t pos, const std::vector<Token>& tokens,
                                  std::mt19937* rng) {
  const std::size_t vocab = model.vocab_size();
  std::vector<float> logits(tokens.size() * vocab);
  for (std::size_t i = 0; i < tokens.size();) {
    std::size_t n = 1;
    if (rng != nullptr) n = std::uniform_int_distribution<std::size_t>(1, model.max_batch())(*rng);
    n = std::min(n, tokens.size() - i);
    model.forward_logits(pos + i, std::span<const Token>(tokens).subspan(i, n),
                         std::span<float>(logits).subspan(i * vocab, n * vocab));
    i += n;
  }
  return logits;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The logits at a position must not depend on how the positions were grouped into passes: bitwise, so a
// verify pass can never flip a near-tie that a one-token pass would resolve the other way.
TEST(Llama2Model, LogitsAreBitwiseBatchInvariant) {
  for (const Config& config : small_configs()) {
    for (std::uint32_t seed = 1; seed <= 4; ++seed) {
      SCOPED_TRACE("dim " + std::to_string(config.dim) + ", seed " + std::to_string(seed));
      std::mt19937 rng(seed);
      Transformer model = Transformer::random(config, seed, 9);
      const std::vector<Token> tokens = random_tokens(rng, config.seq_len, config.vocab_size);
      const std::vector<float> single = chunked_logits(model, 0, tokens, nullptr);
      for (int split = 0; split < 3; ++split) {
        model.rollback(0);
        const std::vector<float> chunked = chunked_logits(model, 0, tokens, &rng);
        EXPECT_TRUE(bitwise_equal(single, chunked)) << "split " << split;
      }
    }
  }
}

TEST(Llama2Model, SharedCheckpointIsBitwiseBatchInvariantAcrossRollback) {
  NGRAMSPEC_REQUIRE_MODELS();
  const std::vector<Token> golden = test::read_ids(test::models_dir() / "stories260K_greedy256.ids");
  std::vector<Token> tokens = {1};
  tokens.insert(tokens.end(), golden.begin(), golden.begin() + 63);
  Transformer model = Transformer::load(test::models_dir() / "stories260K.bin", 17);
  const std::vector<float> single = chunked_logits(model, 0, tokens, nullptr);
  std::mt19937 rng(7);
  model.rollback(0);
  EXPECT_TRUE(bitwise_equal(single, chunked_logits(model, 0, tokens, &rng)));

  // Roll back into the middle, continue differently, and compare with a model that never saw the tail.
  const std::vector<Token> other = {403, 407, 261, 378, 1, 300, 259};
  model.rollback(20);
  const std::vector<float> resumed = chunked_logits(model, 20, other, &rng);
  Transformer fresh = Transformer::load(test::models_dir() / "stories260K.bin", 17);
  (void)chunked_logits(fresh, 0, std::vector<Token>(tokens.begin(), tokens.begin() + 20), nullptr);
  EXPECT_TRUE(bitwise_equal(resumed, chunked_logits(fresh, 20, other, nullptr)));
}

// The early exit after every layer is the model itself, bitwise, however the positions are chunked.
TEST(Llama2Model, EarlyExitAfterEveryLayerIsBitwiseTheModel) {
  for (const Config& config : small_configs()) {
    for (std::uint32_t seed = 1; seed <= 3; ++seed) {
      SCOPED_TRACE("dim " + std::to_string(config.dim) + ", seed " + std::to_string(seed));
      std::mt19937 rng(seed);
      Transformer model = Transformer::random(config, seed, 9);
      Transformer exit = Transformer::early_exit(model, config.n_layers, 5);
      EXPECT_EQ(exit.config().n_layers, config.n_layers);
      EXPECT_EQ(exit.max_batch(), 5u);
      const std::vector<Token> tokens = random_tokens(rng, config.seq_len, config.vocab_size);
      EXPECT_TRUE(bitwise_equal(chunked_logits(model, 0, tokens, nullptr), chunked_logits(exit, 0, tokens, &rng)));
    }
  }
}

// An early exit after fewer layers is another model (its own logits), the same whichever model it is cut from
// (the base, or a longer exit of it), and it outlives the model whose weights it shares.
TEST(Llama2Model, EarlyExitsShareTheWeightsAndNest) {
  const Config config{40, 60, 3, 4, 2, 97, 48, true};
  std::mt19937 rng(5);
  const std::vector<Token> tokens = random_tokens(rng, 32, config.vocab_size);
  std::optional<Transformer> model(Transformer::random(config, 21, 8));
  Transformer one = Transformer::early_exit(*model, 1);
  Transformer two = Transformer::early_exit(*model, 2);
  Transformer one_of_two = Transformer::early_exit(two, 1);
  EXPECT_EQ(one.config().n_layers, 1u);
  const std::vector<float> full = chunked_logits(*model, 0, tokens, &rng);
  const std::vector<float> first = chunked_logits(one, 0, tokens, &rng);
  EXPECT_FALSE(bitwise_equal(full, first));
  EXPECT_FALSE(bitwise_equal(chunked_logits(two, 0, tokens, &rng), first));
  EXPECT_TRUE(bitwise_equal(chunked_logits(one_of_two, 0, tokens, &rng), first));
  model.reset();
  one.rollback(0);
  EXPECT_TRUE(bitwise_equal(chunked_logits(one, 0, tokens, &rng), first));
}

TEST(Llama2Model, EarlyExitRefusesALayerCountOutsideTheModel) {
  const Config config{40, 60, 2, 4, 2, 97, 48, true};
  const Transformer model = Transformer::random(config, 1, 8);
  for (const std::size_t layers : {std::size_t{0}, std::size_t{3}, std::size_t{100}}) {
    try {
      (void)Transformer::early_exit(model, layers);
      ADD_FAILURE() << layers << " layers accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("after " + std::to_string(layers) + " layers"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("1 to 2"));
    }
  }
  EXPECT_THROW((void)Transformer::early_exit(model, 1, 0), std::invalid_argument);
}

// After a chunk is fed and rolled back, the next forward sees only what was kept: its logits are bitwise those
// of a model that never saw the discarded chunk.
TEST(Llama2Model, RollbackRestoresAFreshComputation) {
  for (const Config& config : small_configs()) {
    for (std::uint32_t seed = 1; seed <= 6; ++seed) {
      SCOPED_TRACE("dim " + std::to_string(config.dim) + ", seed " + std::to_string(seed));
      std::mt19937 rng(seed);
      const std::size_t keep = std::uniform_int_distribution<std::size_t>(1, config.seq_len / 2)(rng);
      const std::vector<Token> prefix = random_tokens(rng, keep, config.vocab_size);
      const std::vector<Token> discarded = random_tokens(rng, 1 + seed % 8, config.vocab_size);
      const std::vector<Token> after = random_tokens(rng, 1 + seed % 5, config.vocab_size);

      Transformer used = Transformer::random(config, seed, 8);
      (void)chunked_logits(used, 0, prefix, &rng);
      // Discard part of the prefix's tail too, then feed it again, as a rejected draft run would.
      const std::size_t back = std::uniform_int_distribution<std::size_t>(0, keep - 1)(rng);
      used.rollback(back);
      EXPECT_EQ(used.length(), back);
      (void)chunked_logits(used, back, std::vector<Token>(prefix.begin() + static_cast<std::ptrdiff_t>(back), prefix.end()), &rng);
      (void)chunked_logits(used, keep, discarded, &rng);
      used.rollback(keep);
      const std::vector<float> got = chunked_logits(used, keep, after, &rng);

      Transformer fresh = Transformer::random(config, seed, 8);
      (void)chunked_logits(fresh, 0, prefix, nullptr);
      const std::vector<float> expected = chunked_logits(fresh, keep, after, nullptr);
      EXPECT_TRUE(bitwise_equal(got, expected));
      EXPECT_EQ(used.length(), keep + after.size());
    }
  }
}

TEST(Llama2Model, ForwardReturnsTheArgmaxOfEachRow) {
  const Config config = small_configs()[1];
  Transformer a = Transformer::random(config, 3, 8);
  Transformer b = Transformer::random(config, 3, 8);
  const std::vector<Token> tokens = {5, 17, 99, 3, 0, 129};
  std::vector<float> logits(tokens.size() * config.vocab_size);
  std::vector<Token> next(tokens.size());
  a.forward_logits(0, tokens, logits);
  b.forward(0, tokens, next);
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    const std::span<const float> row = std::span<const float>(logits).subspan(t * config.vocab_size, config.vocab_size);
    for (const float v : row) EXPECT_LE(v, row[next[t]]);
    for (std::size_t i = 0; i < next[t]; ++i) EXPECT_LT(row[i], row[next[t]]) << "an earlier id ties the argmax";
  }
}

TEST(Llama2Model, ArgmaxBreaksTiesTowardTheLowestId) {
  EXPECT_EQ(argmax(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}), 1u);
  EXPECT_EQ(argmax(std::vector<float>{-1.0f, -1.0f}), 0u);
  EXPECT_EQ(argmax(std::vector<float>{0.0f, 0.5f, 0.25f, 0.5f}), 1u);
}

TEST(Llama2Model, RandomWeightsAreDeterministicAndSeeded) {
  const Config config = small_configs()[0];
  const std::vector<Token> tokens = {1, 2, 3, 4};
  std::vector<float> a(tokens.size() * config.vocab_size), b(a.size()), c(a.size());
  Transformer::random(config, 11).forward_logits(0, tokens, a);
  Transformer::random(config, 11).forward_logits(0, tokens, b);
  Transformer::random(config, 12).forward_logits(0, tokens, c);
  EXPECT_TRUE(bitwise_equal(a, b));
  EXPECT_FALSE(bitwise_equal(a, c));
}

TEST(Llama2Model, ForwardEnforcesItsContract) {
  const Config config = small_configs()[0];
  Transformer model = Transformer::random(config, 1, 4);
  std::vector<Token> next(5);
  const std::vector<Token> five = {1, 2, 3, 4, 5};
  EXPECT_THROW(model.forward(1, std::span<const Token>(five).first(1), std::span<Token>(next).first(1)),
               std::invalid_argument);  // the cache holds 0 tokens
  EXPECT_THROW(model.forward(0, five, next), std::invalid_argument);  // more than max_batch
  EXPECT_THROW(model.forward(0, {}, std::span<Token>()), std::invalid_argument);
  const std::vector<Token> outside = {static_cast<Token>(config.vocab_size)};
  EXPECT_THROW(model.forward(0, outside, std::span<Token>(next).first(1)), std::invalid_argument);
  EXPECT_EQ(model.length(), 0u);
  model.forward(0, std::span<const Token>(five).first(2), std::span<Token>(next).first(2));
  EXPECT_EQ(model.length(), 2u);
  EXPECT_THROW(model.rollback(3), std::invalid_argument);
  model.rollback(0);
  // Fill the cache to seq_len; one more position does not fit.
  std::vector<Token> one = {7};
  for (std::size_t p = 0; p < config.seq_len; ++p) model.forward(p, one, std::span<Token>(next).first(1));
  EXPECT_THROW(model.forward(config.seq_len, one, std::span<Token>(next).first(1)), std::invalid_argument);
}

// A random tree of n tokens' parents. Half the trees draw each parent uniformly from the root and the earlier
// tokens (bushy, shallow); the other half mostly hang each token from the one before (deep paths).
std::vector<std::int32_t> random_parents(std::mt19937& rng, std::size_t n) {
  const bool deep = std::bernoulli_distribution(0.5)(rng);
  std::vector<std::int32_t> parents(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (deep && i > 0 && std::bernoulli_distribution(0.75)(rng)) {
      parents[i] = static_cast<std::int32_t>(i - 1);
    } else {
      parents[i] = std::uniform_int_distribution<std::int32_t>(kTreeRoot, static_cast<std::int32_t>(i) - 1)(rng);
    }
  }
  return parents;
}

// The pass indices of the path from the root to `node`, root first.
std::vector<std::size_t> root_path(const std::vector<std::int32_t>& parents, std::size_t node) {
  std::vector<std::size_t> path;
  for (std::int32_t i = static_cast<std::int32_t>(node); i != kTreeRoot; i = parents[static_cast<std::size_t>(i)]) {
    path.push_back(static_cast<std::size_t>(i));
  }
  std::reverse(path.begin(), path.end());
  return path;
}

std::vector<Token> tokens_at(const std::vector<Token>& tokens, const std::vector<std::size_t>& indices) {
  std::vector<Token> out;
  for (const std::size_t i : indices) out.push_back(tokens[i]);
  return out;
}

std::vector<float> row(const std::vector<float>& logits, std::size_t i, std::size_t vocab) {
  return std::vector<float>(logits.begin() + static_cast<std::ptrdiff_t>(i * vocab),
                            logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * vocab));
}

// `model` rolled back to `pos`, then `path` and `after` fed as chains; the logits of `after`.
std::vector<float> chain_then(Transformer& model, std::size_t pos, const std::vector<Token>& path,
                              const std::vector<Token>& after) {
  model.rollback(pos);
  (void)chunked_logits(model, pos, path, nullptr);
  return chunked_logits(model, pos + path.size(), after, nullptr);
}

// The central property of tree passes: every row is bitwise the row of its root path fed as a chain after the
// same cache, and after keep() of a root path the model continues bitwise as if that path had been fed as a
// chain. Several rounds of tree pass, keep and continuation run on one model, so later trees sit on a cache
// that earlier keeps rearranged.
TEST(Llama2Model, TreeRowsAreBitwiseTheirPathsFedAsAChain) {
  constexpr std::size_t kMaxBatch = 12;
  for (const Config& config : small_configs()) {
    for (std::uint32_t seed = 1; seed <= 8; ++seed) {
      SCOPED_TRACE("dim " + std::to_string(config.dim) + ", seed " + std::to_string(seed));
      std::mt19937 rng(seed * 7919);
      const std::size_t vocab = config.vocab_size;
      Transformer model = Transformer::random(config, seed, kMaxBatch);
      Transformer chain = Transformer::random(config, seed, kMaxBatch);
      const std::size_t prefix_len = std::uniform_int_distribution<std::size_t>(0, 8)(rng);
      const std::vector<Token> prefix = random_tokens(rng, prefix_len, vocab);
      (void)chunked_logits(model, 0, prefix, &rng);
      (void)chunked_logits(chain, 0, prefix, nullptr);
      std::size_t pos = prefix_len;
      for (int round = 0; round < 3 && pos + kMaxBatch + 3 <= config.seq_len; ++round) {
        SCOPED_TRACE("round " + std::to_string(round) + " at " + std::to_string(pos));
        const std::size_t n = std::uniform_int_distribution<std::size_t>(1, kMaxBatch)(rng);
        const std::vector<Token> tokens = random_tokens(rng, n, vocab);
        const std::vector<std::int32_t> parents = random_parents(rng, n);
        std::vector<float> logits(n * vocab);
        model.forward_tree_logits(pos, tokens, parents, logits);
        EXPECT_EQ(model.length(), pos + n);
        for (std::size_t i = 0; i < n; ++i) {
          const std::vector<Token> path = tokens_at(tokens, root_path(parents, i));
          chain.rollback(pos);
          const std::vector<float> expected = chunked_logits(chain, pos, path, nullptr);
          EXPECT_TRUE(bitwise_equal(row(logits, i, vocab), row(expected, path.size() - 1, vocab))) << "node " << i;
        }
        // Keep the path to a random node, or nothing now and then (rollback(pos)).
        std::vector<std::size_t> kept;
        if (std::uniform_int_distribution<int>(0, 5)(rng) != 0) {
          kept = root_path(parents, std::uniform_int_distribution<std::size_t>(0, n - 1)(rng));
        }
        model.keep(pos, kept);
        EXPECT_EQ(model.length(), pos + kept.size());
        const std::vector<Token> path = tokens_at(tokens, kept);
        const std::vector<Token> after = random_tokens(rng, 1 + round, vocab);
        const std::vector<float> got = chunked_logits(model, pos + kept.size(), after, &rng);
        EXPECT_TRUE(bitwise_equal(got, chain_then(chain, pos, path, after))) << "after keeping " << kept.size();
        pos += kept.size() + after.size();
      }
    }
  }
}

// A chain fed as a tree (parents -1, 0, 1, ...) gives forward_logits' rows, and keeping all of it leaves the
// cache forward_logits would.
TEST(Llama2Model, AChainTreeIsAChainPass) {
  const Config config = small_configs()[0];
  Transformer tree = Transformer::random(config, 5, 8);
  Transformer chain = Transformer::random(config, 5, 8);
  const std::vector<Token> tokens = {4, 8, 15, 16, 23, 42, 0, 96};
  const std::vector<std::int32_t> parents = {-1, 0, 1, 2, 3, 4, 5, 6};
  const std::vector<std::size_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<float> a(tokens.size() * config.vocab_size), b(a.size());
  tree.forward_tree_logits(0, tokens, parents, a);
  chain.forward_logits(0, tokens, b);
  EXPECT_TRUE(bitwise_equal(a, b));
  tree.keep(0, all);
  const std::vector<Token> after = {7, 7};
  EXPECT_TRUE(bitwise_equal(chunked_logits(tree, 8, after, nullptr), chunked_logits(chain, 8, after, nullptr)));
}

// The ids sorted by logit, highest first, the lower id first among equals.
std::vector<Token> sorted_ids(const std::vector<float>& values) {
  std::vector<Token> ids(values.size());
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<Token>(i);
  std::stable_sort(ids.begin(), ids.end(), [&](Token a, Token b) { return values[a] > values[b]; });
  return ids;
}

TEST(Llama2Model, TreeTopKRowsAreTheSortedLogits) {
  for (const Config& config : small_configs()) {
    for (std::uint32_t seed = 1; seed <= 4; ++seed) {
      SCOPED_TRACE("dim " + std::to_string(config.dim) + ", seed " + std::to_string(seed));
      std::mt19937 rng(seed);
      const std::size_t vocab = config.vocab_size;
      Transformer a = Transformer::random(config, seed, 10);
      Transformer b = Transformer::random(config, seed, 10);
      Transformer c = Transformer::random(config, seed, 10);
      const std::vector<Token> prefix = random_tokens(rng, 5, vocab);
      for (Transformer* m : {&a, &b, &c}) (void)chunked_logits(*m, 0, prefix, nullptr);
      const std::size_t n = std::uniform_int_distribution<std::size_t>(1, 10)(rng);
      const std::vector<Token> tokens = random_tokens(rng, n, vocab);
      const std::vector<std::int32_t> parents = random_parents(rng, n);
      // K from 1 to the whole vocabulary.
      const std::size_t k = seed == 4 ? vocab : std::uniform_int_distribution<std::size_t>(1, 9)(rng);
      std::vector<float> logits(n * vocab);
      std::vector<Token> next(n), top(n * k), next_only(n);
      a.forward_tree_logits(5, tokens, parents, logits);
      b.forward_tree(5, tokens, parents, next, top);
      c.forward_tree(5, tokens, parents, next_only);
      EXPECT_EQ(b.length(), 5 + n);
      for (std::size_t i = 0; i < n; ++i) {
        const std::vector<Token> best = sorted_ids(row(logits, i, vocab));
        EXPECT_EQ(std::vector<Token>(top.begin() + static_cast<std::ptrdiff_t>(i * k),
                                     top.begin() + static_cast<std::ptrdiff_t>((i + 1) * k)),
                  std::vector<Token>(best.begin(), best.begin() + static_cast<std::ptrdiff_t>(k)))
            << "row " << i;
        EXPECT_EQ(next[i], top[i * k]) << "row " << i;
        EXPECT_EQ(next_only[i], argmax(row(logits, i, vocab))) << "row " << i;
      }
    }
  }
}

TEST(Llama2Model, TopKBreaksTiesTowardTheLowerId) {
  const std::vector<float> values = {1.0f, 3.0f, 3.0f, 2.0f, 3.0f, -INFINITY, 2.0f};
  const auto top = [&](std::size_t k) {
    std::vector<Token> out(k);
    top_k(values, out);
    return out;
  };
  EXPECT_EQ(top(1), (std::vector<Token>{1}));
  EXPECT_EQ(top(3), (std::vector<Token>{1, 2, 4}));
  EXPECT_EQ(top(5), (std::vector<Token>{1, 2, 4, 3, 6}));
  EXPECT_EQ(top(7), (std::vector<Token>{1, 2, 4, 3, 6, 0, 5}));
  EXPECT_EQ(top(0), std::vector<Token>{});
}

// The invalid_argument message of `f`, or "(no error)".
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

// Every bad tree pass is refused with a message naming the culprit, and leaves the model as it was: the same
// length, and the same logits from the next pass.
TEST(Llama2Model, TreePassRefusesBadInputChangingNothing) {
  using ::testing::HasSubstr;
  const Config config = small_configs()[0];
  const std::size_t vocab = config.vocab_size;
  Transformer model = Transformer::random(config, 9, 4);
  Transformer reference = Transformer::random(config, 9, 4);
  const std::vector<Token> prefix = {3, 1, 4, 1, 5};
  (void)chunked_logits(model, 0, prefix, nullptr);
  (void)chunked_logits(reference, 0, prefix, nullptr);
  const std::vector<Token> probe = {9, 2, 6};
  const std::vector<float> expected = chunked_logits(reference, 5, probe, nullptr);
  const auto unchanged = [&] {
    EXPECT_EQ(model.length(), 5u);
    EXPECT_TRUE(bitwise_equal(chunked_logits(model, 5, probe, nullptr), expected));
    model.rollback(5);
  };

  const std::vector<Token> tokens = {7, 8, 9};
  std::vector<float> logits(3 * vocab);
  std::vector<Token> next(3), top(6);
  const auto tree = [&](std::vector<std::int32_t> parents) {
    return error_of([&] { model.forward_tree_logits(5, tokens, parents, logits); });
  };
  EXPECT_THAT(tree({-1, 0, 2}), HasSubstr("parents[2] = 2 must be -1 (the cached sequence) or an index below 2"));
  unchanged();
  EXPECT_THAT(tree({-1, 5, 0}), HasSubstr("parents[1] = 5 must be"));
  unchanged();
  EXPECT_THAT(tree({-1, -2, 0}), HasSubstr("parents[1] = -2 must be"));
  unchanged();
  EXPECT_THAT(tree({0, -1, -1}), HasSubstr("parents[0] = 0 must be"));
  unchanged();
  EXPECT_THAT(tree({-1, 0}), HasSubstr("a tree pass of 3 tokens got 2 parents"));
  unchanged();
  const std::vector<std::int32_t> parents = {-1, 0, 0};
  EXPECT_THAT(error_of([&] { model.forward_tree_logits(4, tokens, parents, logits); }),
              HasSubstr("forward at position 4 but the cache holds 5"));
  unchanged();
  EXPECT_THAT(error_of([&] { model.forward_tree_logits(5, tokens, parents, std::span<float>(logits).first(vocab)); }),
              HasSubstr("logits hold 97 floats; they must hold n * vocab_size = 3 * 97"));
  unchanged();
  const std::vector<Token> outside = {7, 97, 9};
  EXPECT_THAT(error_of([&] { model.forward_tree_logits(5, outside, parents, logits); }),
              HasSubstr("token 97 is outside the vocabulary of 97"));
  unchanged();
  const std::vector<Token> five = {1, 2, 3, 4, 5};
  const std::vector<std::int32_t> five_parents = {-1, 0, 1, 2, 3};
  std::vector<float> five_logits(5 * vocab);
  EXPECT_THAT(error_of([&] { model.forward_tree_logits(5, five, five_parents, five_logits); }),
              HasSubstr("forward of 5 tokens; it takes 1 to 4"));
  unchanged();
  EXPECT_THAT(error_of([&] { model.forward_tree(5, tokens, parents, std::span<Token>(next).first(2)); }),
              HasSubstr("next has 2 slots for 3 tokens"));
  unchanged();
  EXPECT_THAT(error_of([&] { model.forward_tree(5, tokens, parents, next, std::span<Token>(top).first(5)); }),
              HasSubstr("top holds 5 ids for 3 tokens"));
  unchanged();
  EXPECT_THAT(error_of([&] { model.forward_tree(5, tokens, parents, next, std::span<Token>()); }),
              HasSubstr("top holds 0 ids for 3 tokens"));
  unchanged();
  std::vector<Token> too_many(3 * (vocab + 1));
  EXPECT_THAT(error_of([&] { model.forward_tree(5, tokens, parents, next, too_many); }),
              HasSubstr("top holds 294 ids for 3 tokens; it must hold K per token, 1 <= K <= vocab_size = 97"));
  unchanged();

  // rollback() after a tree pass discards it, as after a chain pass.
  model.forward_tree(5, tokens, parents, next, top);
  EXPECT_EQ(model.length(), 8u);
  model.rollback(5);
  unchanged();
}

// keep() accepts only a root path of the tree pass just made, names what is wrong otherwise, and a refused
// keep leaves the pass to keep from.
TEST(Llama2Model, KeepRefusesAnythingButARootPathOfTheLastTreePass) {
  using ::testing::HasSubstr;
  const Config config = small_configs()[1];
  const std::size_t vocab = config.vocab_size;
  Transformer model = Transformer::random(config, 4, 6);
  Transformer reference = Transformer::random(config, 4, 6);
  const std::vector<Token> prefix = {10, 20, 30, 40, 50};
  (void)chunked_logits(model, 0, prefix, nullptr);
  (void)chunked_logits(reference, 0, prefix, nullptr);
  const std::vector<Token> tokens = {1, 2, 3, 4, 5};
  const std::vector<std::int32_t> parents = {-1, 0, -1, 1, 2};
  std::vector<float> logits(tokens.size() * vocab);
  const auto keep = [&](std::size_t pos, std::vector<std::size_t> kept) {
    return error_of([&] { model.keep(pos, kept); });
  };

  EXPECT_THAT(keep(5, {0}), HasSubstr("keep at position 5 but the last call was not a tree pass"));
  model.forward_tree_logits(5, tokens, parents, logits);
  EXPECT_THAT(keep(4, {0}), HasSubstr("keep at position 4 but the last tree pass was at 5"));
  EXPECT_THAT(keep(5, {1}), HasSubstr("kept[0] = 1 has parent 0, not -1 (the root): kept is not a root path"));
  EXPECT_THAT(keep(5, {0, 2}), HasSubstr("kept[1] = 2 has parent -1, not kept[0] = 0"));
  EXPECT_THAT(keep(5, {0, 1, 4}), HasSubstr("kept[2] = 4 has parent 2, not kept[1] = 1"));
  EXPECT_THAT(keep(5, {0, 7}), HasSubstr("kept[1] = 7 is not an entry of the tree pass of 5"));
  EXPECT_THAT(keep(5, {0, 1, 3, 4, 4, 4}), HasSubstr("keep of 6 entries from a tree pass of 5"));
  EXPECT_EQ(model.length(), 10u);

  // The pass is still there to keep from: 0 -> 1 -> 3.
  model.keep(5, std::vector<std::size_t>{0, 1, 3});
  EXPECT_EQ(model.length(), 8u);
  const std::vector<Token> after = {60, 70};
  EXPECT_TRUE(bitwise_equal(chunked_logits(model, 8, after, nullptr), chain_then(reference, 5, {1, 2, 4}, after)));

  // Once kept, or after any other pass or a rollback, there is no tree pass to keep from.
  model.rollback(5);
  model.forward_tree_logits(5, tokens, parents, logits);
  model.keep(5, std::vector<std::size_t>{2});
  EXPECT_THAT(keep(5, {2}), HasSubstr("not a tree pass"));
  model.rollback(5);
  model.forward_tree_logits(5, tokens, parents, logits);
  model.rollback(10);
  EXPECT_THAT(keep(5, {0}), HasSubstr("not a tree pass"));
  model.rollback(5);
  model.forward_tree_logits(5, tokens, parents, logits);
  (void)chunked_logits(model, 10, {1}, nullptr);
  EXPECT_THAT(keep(5, {0}), HasSubstr("not a tree pass"));
  EXPECT_EQ(model.length(), 11u);
}

// On the real checkpoint too: a branching tree's rows are bitwise its paths fed as chains.
TEST(Llama2SharedCheckpoint, TreeRowsAreBitwiseTheirPathsFedAsAChain) {
  NGRAMSPEC_REQUIRE_MODELS();
  const std::vector<Token> golden = test::read_ids(test::models_dir() / "stories260K_greedy256.ids");
  std::vector<Token> prefix = {1};
  prefix.insert(prefix.end(), golden.begin(), golden.begin() + 30);
  Transformer model = Transformer::load(test::models_dir() / "stories260K.bin", 16);
  Transformer chain = Transformer::load(test::models_dir() / "stories260K.bin", 16);
  (void)chunked_logits(model, 0, prefix, nullptr);
  (void)chunked_logits(chain, 0, prefix, nullptr);
  const std::size_t pos = prefix.size();
  // The golden continuation and three alternatives branching off it.
  const std::vector<Token> tokens = {golden[30], golden[31], golden[32], golden[33], 403, 407, 261, golden[32]};
  const std::vector<std::int32_t> parents = {-1, 0, 1, 2, -1, 0, 4, 6};
  const std::size_t vocab = model.vocab_size();
  std::vector<float> logits(tokens.size() * vocab);
  model.forward_tree_logits(pos, tokens, parents, logits);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::vector<Token> path = tokens_at(tokens, root_path(parents, i));
    chain.rollback(pos);
    const std::vector<float> expected = chunked_logits(chain, pos, path, nullptr);
    EXPECT_TRUE(bitwise_equal(row(logits, i, vocab), row(expected, path.size() - 1, vocab))) << "node " << i;
  }
}

TEST(Llama2Model, RejectsInconsistentShapes) {
  Config c = small_configs()[0];
  c.n_heads = 3;  // 40 is not a multiple of 3
  EXPECT_THROW(validate(c), std::invalid_argument);
  c = small_configs()[0];
  c.n_kv_heads = 3;  // 4 query heads cannot share 3 kv heads
  EXPECT_THROW(validate(c), std::invalid_argument);
  c = small_configs()[0];
  c.n_heads = 8;  // head_size 5 is odd
  EXPECT_THROW(validate(c), std::invalid_argument);
  c = small_configs()[0];
  c.seq_len = 0;
  EXPECT_THROW(validate(c), std::invalid_argument);
  EXPECT_NO_THROW(validate(small_configs()[0]));
}

// Checkpoint files written here, independent of the shared models.
class Llama2Checkpoint : public ::testing::Test {
 protected:
  std::filesystem::path path(const std::string& name) const {
    return std::filesystem::path(::testing::TempDir()) / ("llama2_" + name);
  }
  // The header of `c` (vocab_size negated for a separate classifier), then `floats` floats: float i = f(i).
  template <class F>
  static void write(const std::filesystem::path& file, const Config& c, std::uint64_t floats, F f) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    const std::int32_t vocab = static_cast<std::int32_t>(c.vocab_size);
    const std::int32_t header[7] = {static_cast<std::int32_t>(c.dim),     static_cast<std::int32_t>(c.hidden_dim),
                                    static_cast<std::int32_t>(c.n_layers), static_cast<std::int32_t>(c.n_heads),
                                    static_cast<std::int32_t>(c.n_kv_heads), c.shared_classifier ? vocab : -vocab,
                                    static_cast<std::int32_t>(c.seq_len)};
    out.write(reinterpret_cast<const char*>(header), sizeof header);
    for (std::uint64_t i = 0; i < floats; ++i) {
      const float v = f(i);
      out.write(reinterpret_cast<const char*>(&v), sizeof v);
    }
  }
  static void write(const std::filesystem::path& file, const Config& c, std::uint64_t floats) {
    write(file, c, floats, [](std::uint64_t i) { return static_cast<float>(i % 13) * 0.01f; });
  }
  static std::string load_error(const std::filesystem::path& file) {
    try {
      (void)Transformer::load(file);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "(loaded)";
  }
};

TEST_F(Llama2Checkpoint, LoadsAWellFormedFile) {
  const Config c = small_configs()[0];
  write(path("ok.bin"), c, c.file_floats());
  const Transformer model = Transformer::load(path("ok.bin"));
  EXPECT_EQ(model.config().dim, c.dim);
  EXPECT_EQ(model.config().n_kv_heads, c.n_kv_heads);
  EXPECT_EQ(model.vocab_size(), c.vocab_size);
  EXPECT_TRUE(model.config().shared_classifier);
}

// A negative vocab_size means a separate classifier after the RoPE tables: when it holds a copy of the token
// embedding the logits match the shared layout bitwise, and when it does not they differ.
TEST_F(Llama2Checkpoint, ReadsASeparateClassifier) {
  Config shared = small_configs()[0];
  Config separate = shared;
  separate.shared_classifier = false;
  const std::uint64_t n = shared.file_floats();
  const std::uint64_t embedding = std::uint64_t{shared.vocab_size} * shared.dim;
  const auto base = [](std::uint64_t i) { return static_cast<float>((i * 7919) % 101) * 0.002f - 0.1f; };
  write(path("shared.bin"), shared, n, base);
  // The classifier, after the n floats of the shared layout, copies the embedding (the first floats).
  write(path("copy.bin"), separate, n + embedding, [&](std::uint64_t i) { return base(i < n ? i : i - n); });
  write(path("other.bin"), separate, n + embedding, [&](std::uint64_t i) { return i < n ? base(i) : 0.05f; });

  const std::vector<Token> tokens = {3, 1, 4, 1, 5};
  const auto logits = [&](const char* name) {
    Transformer model = Transformer::load(path(name));
    std::vector<float> out(tokens.size() * model.vocab_size());
    model.forward_logits(0, tokens, out);
    return out;
  };
  const std::vector<float> a = logits("shared.bin");
  EXPECT_TRUE(bitwise_equal(a, logits("copy.bin")));
  EXPECT_FALSE(bitwise_equal(a, logits("other.bin")));
}

TEST_F(Llama2Checkpoint, RejectsMissingTruncatedAndInconsistentFiles) {
  EXPECT_NE(load_error(path("does-not-exist.bin")).find("cannot open checkpoint"), std::string::npos);

  const Config c = small_configs()[0];
  write(path("short.bin"), c, c.file_floats() - 1);
  EXPECT_NE(load_error(path("short.bin")).find("the file is truncated"), std::string::npos) << load_error(path("short.bin"));
  write(path("long.bin"), c, c.file_floats() + 1);
  EXPECT_NE(load_error(path("long.bin")).find("trailing data"), std::string::npos);

  {
    std::ofstream out(path("header.bin"), std::ios::binary | std::ios::trunc);
    out.write("abc", 3);
  }
  EXPECT_NE(load_error(path("header.bin")).find("shorter than the 28-byte header"), std::string::npos);

  Config bad = c;
  bad.n_heads = 3;
  write(path("heads.bin"), bad, 100);
  EXPECT_NE(load_error(path("heads.bin")).find("multiple of n_heads"), std::string::npos) << load_error(path("heads.bin"));
  bad = c;
  bad.n_layers = 0;
  write(path("layers.bin"), bad, 100);
  EXPECT_NE(load_error(path("layers.bin")).find("invalid header"), std::string::npos) << load_error(path("layers.bin"));
}

// A header whose KV cache (n_layers * seq_len * kv_dim) would be enormous is refused from the header
// alone, before anything is allocated: the file's size cannot bound that product.
TEST_F(Llama2Checkpoint, RejectsAHeaderWhoseKvCacheWouldBeEnormous) {
  Config huge = small_configs()[0];
  huge.dim = 2;
  huge.hidden_dim = 1;
  huge.n_heads = 1;
  huge.n_kv_heads = 1;
  huge.vocab_size = 1;
  huge.n_layers = 65536;
  huge.seq_len = 1048576;
  write(path("kv.bin"), huge, 0);
  const std::string error = load_error(path("kv.bin"));
  EXPECT_NE(error.find("needs a KV cache"), std::string::npos) << error;
}

// Every header check names the field it rejects, by its llama2.c name, and the value read.
TEST_F(Llama2Checkpoint, HeaderErrorsNameTheFieldAndItsValue) {
  const Config c = small_configs()[0];
  const std::int32_t good[7] = {static_cast<std::int32_t>(c.dim),        static_cast<std::int32_t>(c.hidden_dim),
                                static_cast<std::int32_t>(c.n_layers),   static_cast<std::int32_t>(c.n_heads),
                                static_cast<std::int32_t>(c.n_kv_heads), static_cast<std::int32_t>(c.vocab_size),
                                static_cast<std::int32_t>(c.seq_len)};
  const char* const names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (int field = 0; field < 7; ++field) {
    for (const std::int32_t value : {0, -3, 1 << 21}) {
      if (field == 5 && value == -3) continue;  // a negative vocab_size is a separate classifier
      std::int32_t header[7];
      std::copy(std::begin(good), std::end(good), header);
      header[field] = value;
      {
        std::ofstream out(path("field.bin"), std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(header), sizeof header);
      }
      const std::string error = load_error(path("field.bin"));
      const std::string named = std::string(names[field]) + " = " + std::to_string(value) + " ";
      EXPECT_NE(error.find(named), std::string::npos) << "want '" << named << "' in: " << error;
      EXPECT_EQ(error.find("field "), std::string::npos) << error;
    }
  }
}

TEST(Llama2Model, ShapeErrorsNameTheFieldsAndValues) {
  const auto error = [](const Config& c) {
    try {
      validate(c);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(valid)");
  };
  Config c = small_configs()[0];
  c.n_heads = 3;
  EXPECT_NE(error(c).find("dim = 40 must be a multiple of n_heads = 3"), std::string::npos) << error(c);
  c = small_configs()[0];
  c.n_kv_heads = 3;
  EXPECT_NE(error(c).find("n_heads = 4 must be a multiple of n_kv_heads = 3"), std::string::npos) << error(c);
  c = small_configs()[0];
  c.n_heads = 8;
  EXPECT_NE(error(c).find("head_size = dim / n_heads = 40 / 8 = 5 must be even"), std::string::npos) << error(c);
  c = small_configs()[0];
  c.seq_len = 0;
  EXPECT_NE(error(c).find("seq_len = 0 is not between 1 and 1048576"), std::string::npos) << error(c);
  c = small_configs()[0];
  c.hidden_dim = 2000000;
  EXPECT_NE(error(c).find("hidden_dim = 2000000 is not between 1 and 1048576"), std::string::npos) << error(c);
}

TEST(Llama2SharedCheckpoint, HeaderMatchesItsReadme) {
  NGRAMSPEC_REQUIRE_MODELS();
  const Transformer model = Transformer::load(test::models_dir() / "stories260K.bin");
  const Config& c = model.config();
  EXPECT_EQ(c.dim, 64u);
  EXPECT_EQ(c.hidden_dim, 172u);
  EXPECT_EQ(c.n_layers, 5u);
  EXPECT_EQ(c.n_heads, 8u);
  EXPECT_EQ(c.n_kv_heads, 4u);
  EXPECT_EQ(c.vocab_size, 512u);
  EXPECT_EQ(c.seq_len, 512u);
  EXPECT_TRUE(c.shared_classifier);
}

}  // namespace
}  // namespace ngramspec::llama2
