// The transformer's kernels: batch invariance, rollback, argmax, the forward contract, checkpoint validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
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
