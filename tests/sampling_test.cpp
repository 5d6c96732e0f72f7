// SamplingModel, TokenSampler, SamplingOptions and position_uniform: option validation, the
// filters, position-keyed randomness, and the seed identity of speculative sampling: for the
// same seed, speculative decoding emits plain decoding's tokens whatever was drafted.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ngramspec/detail/physical_memory.hpp"
#include "ngramspec/ngramspec.hpp"
#include "support/allocation_counter.hpp"
#include "support/mock_models.hpp"
#include "support/test_drafters.hpp"

namespace ngramspec::test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// Parameters of a logits function of the prefix: pseudo-random logits in [-scale, scale]
/// from a hash of (seed, last `context` tokens[, prefix length], token), some masked to -inf.
struct HashLogits {
  std::size_t vocab = 8;
  std::size_t context = 2;
  std::uint64_t seed = 0;
  float scale = 3.0f;
  bool with_position = false;
  unsigned masked_per_mille = 0;  ///< chance of a token's logit being -inf (never every token's)

  void operator()(std::span<const Token> prefix, std::span<float> out) const {
    std::uint64_t h = scramble(seed);
    for (const Token t : prefix.last(std::min(context, prefix.size()))) h = scramble(h ^ t);
    if (with_position) h = scramble(h ^ (std::uint64_t{prefix.size()} << 32));
    const std::size_t survivor = h % vocab;
    for (std::size_t t = 0; t < vocab; ++t) {
      const std::uint64_t ht = scramble(h ^ (t * 0x9e3779b97f4a7c15ULL));
      out[t] = scale * static_cast<float>(static_cast<double>(ht >> 11) * 0x1.0p-53 * 2.0 - 1.0);
      if (t != survivor && scramble(ht) % 1000 < masked_per_mille) out[t] = -kInf;
    }
  }
  [[nodiscard]] std::string describe() const {
    return "logits(vocab=" + std::to_string(vocab) + ",context=" + std::to_string(context) +
           ",seed=" + std::to_string(seed) + ",scale=" + std::to_string(scale) + (with_position ? ",position" : "") +
           ",masked=" + std::to_string(masked_per_mille) + "/1000)";
  }
};

/// A LogitsModel whose logits are a pure function of the prefix; it holds the tokens it was
/// fed and records every breach of the LogitsModel contract.
class PrefixLogitsModel {
 public:
  PrefixLogitsModel(HashLogits logits, std::size_t max_batch) : logits_(logits), max_batch_(max_batch) {}

  void forward(std::size_t pos, std::span<const Token> tokens, std::span<float> out) {
    if (pos != history_.size()) violations_.push_back("forward at " + std::to_string(pos));
    if (tokens.empty() || tokens.size() > max_batch_)
      violations_.push_back("forward of " + std::to_string(tokens.size()));
    if (out.size() != tokens.size() * logits_.vocab) violations_.push_back("logits of " + std::to_string(out.size()));
    history_.resize(pos);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      history_.push_back(tokens[i]);
      logits_(std::span<const Token>(history_), out.subspan(i * logits_.vocab, logits_.vocab));
    }
  }
  void rollback(std::size_t pos) {
    if (pos > history_.size()) violations_.push_back("rollback to " + std::to_string(pos));
    history_.resize(std::min(pos, history_.size()));
  }
  [[nodiscard]] std::size_t max_batch() const noexcept { return max_batch_; }
  [[nodiscard]] std::size_t vocab_size() const noexcept { return logits_.vocab; }

  void reserve(std::size_t n) { history_.reserve(n); }
  [[nodiscard]] const std::vector<Token>& history() const noexcept { return history_; }
  [[nodiscard]] const std::vector<std::string>& violations() const noexcept { return violations_; }

 private:
  HashLogits logits_;
  std::size_t max_batch_;
  std::vector<Token> history_;
  std::vector<std::string> violations_;
};

/// The same model behind AbstractLogitsModel.
class VirtualPrefixLogitsModel final : public AbstractLogitsModel {
 public:
  VirtualPrefixLogitsModel(HashLogits logits, std::size_t max_batch) : inner_(logits, max_batch) {}
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<float> out) override {
    inner_.forward(pos, tokens, out);
  }
  void rollback(std::size_t pos) override { inner_.rollback(pos); }
  [[nodiscard]] std::size_t max_batch() const override { return inner_.max_batch(); }
  [[nodiscard]] std::size_t vocab_size() const override { return inner_.vocab_size(); }

 private:
  PrefixLogitsModel inner_;
};

static_assert(LogitsModel<PrefixLogitsModel>);
static_assert(LogitsModel<VirtualPrefixLogitsModel>);
static_assert(TargetModel<SamplingModel<PrefixLogitsModel>>);
static_assert(!LogitsModel<GreedyModel>, "a token-returning model is not a LogitsModel");
static_assert(!TargetModel<PrefixLogitsModel>, "a logits model is not a TargetModel without the adapter");

/// The token sampling chooses at position prefix.size() after `prefix`, computed without any
/// model or decoder: what plain sampled decoding must emit there.
[[nodiscard]] NextTokenRule sampled_rule(const HashLogits& logits, const SamplingOptions& options) {
  auto sampler = std::make_shared<TokenSampler>(options, logits.vocab);
  auto row = std::make_shared<std::vector<float>>(logits.vocab);
  return [logits, sampler, row](std::span<const Token> prefix) {
    logits(prefix, *row);
    return sampler->choose(*row, prefix.size());
  };
}

[[nodiscard]] DecodeOptions with_max_new_tokens(std::size_t n) {
  DecodeOptions o;
  o.max_new_tokens = n;
  return o;
}

/// The most likely token after the prefix.
[[nodiscard]] NextTokenRule argmax_rule(const HashLogits& logits) { return sampled_rule(logits, SamplingOptions{}); }

// ---------------------------------------------------------------------------------------------
// SamplingOptions

TEST(SamplingOptions, DefaultsAndNeutralBoundsAreValid) {
  EXPECT_NO_THROW(validate(SamplingOptions{}));
  EXPECT_NO_THROW(validate(SamplingOptions{.temperature = 0.7f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f}));
  EXPECT_NO_THROW(validate(SamplingOptions{.temperature = 1e-30f, .top_k = 1, .top_p = 1e-30f, .min_p = 0.999f}));
  EXPECT_NO_THROW(validate(SamplingOptions{.temperature = 1e30f, .top_k = std::numeric_limits<std::size_t>::max()}));
}

TEST(SamplingOptions, InvalidValuesThrowNamingFieldAndValue) {
  struct Bad {
    SamplingOptions options;
    std::string field;
    std::string value;
  };
  const std::vector<Bad> bad = {
      {{.temperature = -0.5f}, "temperature", "-0.5"},
      {{.temperature = -kInf}, "temperature", "-inf"},
      {{.temperature = kInf}, "temperature", "inf"},
      {{.temperature = kNaN}, "temperature", "nan"},
      {{.temperature = 1.0f, .top_p = 0.0f}, "top_p", "0"},
      {{.temperature = 1.0f, .top_p = -0.25f}, "top_p", "-0.25"},
      {{.temperature = 1.0f, .top_p = 1.5f}, "top_p", "1.5"},
      {{.temperature = 1.0f, .top_p = kNaN}, "top_p", "nan"},
      {{.temperature = 1.0f, .min_p = 1.0f}, "min_p", "1"},
      {{.temperature = 1.0f, .min_p = -0.125f}, "min_p", "-0.125"},
      {{.temperature = 1.0f, .min_p = kNaN}, "min_p", "nan"},
      // Checked even when greedy, so a request is rejected whatever its temperature.
      {{.temperature = 0.0f, .top_p = 2.0f}, "top_p", "2"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.field + " = " + b.value);
    try {
      validate(b.options);
      ADD_FAILURE() << "no exception";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("SamplingOptions::" + b.field + " = " + b.value + " is invalid"), std::string::npos) << what;
    }
  }
}

// A value refused for lying just past a bound is printed so that it shows why: the number in the
// message reads back as exactly the value refused (six decimals printed top_p = 1.0000001 as 1.000000).
TEST(SamplingOptions, RefusedValuesPrintInFull) {
  std::mt19937_64 rng(37);
  for (int trial = 0; trial < 2000; ++trial) {
    // A few float steps past a bound, or anywhere out of range.
    const int steps = static_cast<int>(rng() % 4) + 1;
    const auto past = [&](float bound, float direction) {
      float value = bound;
      for (int i = 0; i < steps; ++i) value = std::nextafter(value, direction);
      return value;
    };
    const float wide = std::ldexp(static_cast<float>(rng() % 1000 + 1), static_cast<int>(rng() % 40) - 20);
    SamplingOptions options{.temperature = 1.0f};
    std::string field;
    float value = 0.0f;
    switch (rng() % 6) {
      case 0: field = "temperature", value = options.temperature = past(0.0f, -1.0f); break;
      case 1: field = "temperature", value = options.temperature = -wide; break;
      case 2: field = "top_p", value = options.top_p = past(1.0f, 2.0f); break;
      case 3: field = "top_p", value = options.top_p = past(0.0f, -1.0f); break;
      case 4: field = "min_p", value = options.min_p = past(1.0f, 2.0f); break;
      default: field = "min_p", value = options.min_p = 1.0f + wide; break;
    }
    SCOPED_TRACE(field);
    try {
      validate(options);
      ADD_FAILURE() << field << " = " << value << " was taken";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      const std::string prefix = "SamplingOptions::" + field + " = ";
      const std::size_t at = what.find(prefix);
      ASSERT_NE(at, std::string::npos) << what;
      const std::string text = what.substr(at + prefix.size(), what.find(' ', at + prefix.size()) - at - prefix.size());
      EXPECT_EQ(std::strtof(text.c_str(), nullptr), value) << what;
    }
  }
}

TEST(SamplingOptions, ConstructorsAndSetOptionsValidate) {
  PrefixLogitsModel model(HashLogits{}, 4);
  EXPECT_THROW(TokenSampler(SamplingOptions{.temperature = -1.0f}, 8), std::invalid_argument);
  EXPECT_THROW(SamplingModel<PrefixLogitsModel>(model, SamplingOptions{.top_p = 0.0f}), std::invalid_argument);
  SamplingModel<PrefixLogitsModel> sampling(model, SamplingOptions{.temperature = 0.5f, .seed = 9});
  EXPECT_THROW(sampling.set_options(SamplingOptions{.min_p = 1.0f}), std::invalid_argument);
  EXPECT_EQ(sampling.options().temperature, 0.5f);  // unchanged by the rejected options
  EXPECT_EQ(sampling.options().seed, 9U);
  sampling.set_options(SamplingOptions{.temperature = 2.0f, .seed = 10});
  EXPECT_EQ(sampling.options().seed, 10U);
}

TEST(SamplingModel, RejectsUnusableModelsAndCalls) {
  PrefixLogitsModel no_batch(HashLogits{}, 0);
  EXPECT_THROW(SamplingModel<PrefixLogitsModel>(no_batch, {}), std::invalid_argument);
  PrefixLogitsModel no_vocab(HashLogits{.vocab = 0}, 4);
  EXPECT_THROW(SamplingModel<PrefixLogitsModel>(no_vocab, {}), std::invalid_argument);
  PrefixLogitsModel huge(HashLogits{.vocab = 8}, std::numeric_limits<std::size_t>::max() / 2);
  EXPECT_THROW(SamplingModel<PrefixLogitsModel>(huge, {}), std::invalid_argument);

  PrefixLogitsModel model(HashLogits{}, 3);
  SamplingModel<PrefixLogitsModel> sampling(model, {});
  EXPECT_EQ(sampling.max_batch(), 3U);
  EXPECT_EQ(sampling.vocab_size(), 8U);
  const std::vector<Token> four = {1, 2, 3, 4};
  std::vector<Token> next(4);
  EXPECT_THROW(sampling.forward(0, four, next), std::invalid_argument);  // more than max_batch
  EXPECT_THROW(sampling.forward(0, std::span<const Token>(four).first(2), std::span<Token>(next).first(1)),
               std::invalid_argument);
  EXPECT_THROW(sampling.forward(0, {}, {}), std::invalid_argument);
  EXPECT_TRUE(model.history().empty());  // the model was never called
}

// ---------------------------------------------------------------------------------------------
// position_uniform

TEST(PositionUniform, GoldenValues) {
  // Pinned: changing the generator changes every seeded output, so it must be a decision.
  // The values were computed independently from the definition in position_random.hpp.
  EXPECT_EQ(position_bits(0, 0), 0x39d67e1da346a3c2ULL);
  EXPECT_EQ(position_bits(0, 1), 0x32bf38fd19c3ddb2ULL);
  EXPECT_EQ(position_bits(1, 0), 0x403e4127c1e1c1f5ULL);
  EXPECT_EQ(position_bits(42, 1000), 0x63657ee6ccfb3d3eULL);
  EXPECT_EQ(position_bits(0xffffffffffffffffULL, 0xffffffffffffffffULL), 0xcfac03e79388d791ULL);
  EXPECT_EQ(position_uniform(0, 0), 0.2259291479452039);
  EXPECT_EQ(position_uniform(42, 1000), 0.38826745161803167);
  EXPECT_EQ(position_uniform(0xffffffffffffffffULL, 0xffffffffffffffffULL), 0.8112184944507448);
  static_assert(position_uniform(7, 3) == position_uniform(7, 3), "usable in constant expressions");
}

TEST(PositionUniform, RangeDistinctnessAndUniformity) {
  // 65536 draws over 256 seeds x 256 positions into 16 buckets: chi-square with 15 degrees
  // of freedom below 37.70, its 0.001 critical value (standard tables).
  std::vector<std::size_t> buckets(16, 0);
  std::set<std::uint64_t> seen;
  for (std::uint64_t seed = 0; seed < 256; ++seed) {
    for (std::uint64_t pos = 0; pos < 256; ++pos) {
      const double u = position_uniform(seed, pos);
      ASSERT_GE(u, 0.0);
      ASSERT_LT(u, 1.0);
      ++buckets[static_cast<std::size_t>(u * 16.0)];
      seen.insert(position_bits(seed, pos));
    }
  }
  EXPECT_EQ(seen.size(), 65536U) << "(seed, position) pairs share bits";
  double chi2 = 0.0;
  for (const std::size_t b : buckets)
    chi2 += (static_cast<double>(b) - 4096.0) * (static_cast<double>(b) - 4096.0) / 4096.0;
  EXPECT_LT(chi2, 37.70);
  // Neighbouring seeds and positions are not correlated: the lowest bit of consecutive draws
  // agrees about half the time.
  std::size_t agree = 0;
  for (std::uint64_t i = 0; i < 10000; ++i) agree += (position_bits(i, 5) & 1) == (position_bits(i + 1, 5) & 1);
  EXPECT_NEAR(static_cast<double>(agree), 5000.0, 250.0);
}

// ---------------------------------------------------------------------------------------------
// TokenSampler: the filters and the draw

[[nodiscard]] std::vector<float> log_probs(std::initializer_list<double> p) {
  std::vector<float> out;
  for (const double x : p) out.push_back(static_cast<float>(std::log(x)));
  return out;
}

/// The tokens the sampler can return for `logits`, over a fine grid of draws.
[[nodiscard]] std::set<Token> support(TokenSampler& sampler, std::span<const float> logits) {
  std::set<Token> s;
  for (int i = 0; i < 1000; ++i) s.insert(sampler.sample(logits, (i + 0.5) / 1000.0));
  return s;
}

TEST(TokenSampler, TemperatureZeroIsArgmaxTiesToLowestIdAndIgnoresSeedAndFilters) {
  const std::vector<float> logits = {0.5f, 2.0f, -kInf, 2.0f, 1.0f};
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    TokenSampler sampler(SamplingOptions{.temperature = 0.0f, .top_k = 3, .top_p = 0.5f, .seed = seed}, 5);
    EXPECT_EQ(sampler.choose(logits, seed * 3), 1U);
    EXPECT_EQ(sampler.sample(logits, 0.999), 1U);
  }
  TokenSampler sampler({}, 3);
  EXPECT_EQ(sampler.sample(std::vector<float>{-kInf, -kInf, -5.0f}, 0.0), 2U);
  EXPECT_EQ(sampler.sample(std::vector<float>{-1e30f, -3e38f, -1e31f}, 0.0), 0U);
}

// Every positive temperature a float holds samples, down to the smallest: it is not greedy (the
// Python package refuses a smaller one, which the float would make 0, instead of going greedy).
TEST(TokenSampler, TheSmallestPositiveTemperatureSamplesAmongTiedMaxima) {
  TokenSampler sampler(SamplingOptions{.temperature = std::numeric_limits<float>::denorm_min()}, 4);
  const std::vector<float> logits = {3.0f, 3.0f, 0.0f, 3.0f};
  EXPECT_EQ(sampler.sample(logits, 0.1), 0U);
  EXPECT_EQ(sampler.sample(logits, 0.5), 1U);
  EXPECT_EQ(sampler.sample(logits, 0.9), 3U);
}

TEST(TokenSampler, InverseCdfInAscendingIdOrder) {
  TokenSampler sampler(SamplingOptions{.temperature = 1.0f}, 3);
  const std::vector<float> logits = log_probs({0.25, 0.25, 0.5});
  EXPECT_EQ(sampler.sample(logits, 0.0), 0U);
  EXPECT_EQ(sampler.sample(logits, 0.2499), 0U);
  EXPECT_EQ(sampler.sample(logits, 0.2501), 1U);
  EXPECT_EQ(sampler.sample(logits, 0.4999), 1U);
  EXPECT_EQ(sampler.sample(logits, 0.5001), 2U);
  EXPECT_EQ(sampler.sample(logits, std::nextafter(1.0, 0.0)), 2U);
  // Masked tokens are never drawn, even at the edges of the range.
  const std::vector<float> masked = {-kInf, 0.0f, -kInf, 0.0f, -kInf};
  TokenSampler five(SamplingOptions{.temperature = 1.0f}, 5);
  EXPECT_EQ(five.sample(masked, 0.0), 1U);
  EXPECT_EQ(five.sample(masked, 0.4999), 1U);
  EXPECT_EQ(five.sample(masked, 0.5001), 3U);
  EXPECT_EQ(five.sample(masked, std::nextafter(1.0, 0.0)), 3U);
}

TEST(TokenSampler, TemperatureScalesLogits) {
  // logits {0, 1} at temperature 2: p(0) = 1 / (1 + e^0.5) = 0.3775.
  TokenSampler sampler(SamplingOptions{.temperature = 2.0f}, 2);
  const std::vector<float> logits = {0.0f, 1.0f};
  EXPECT_EQ(sampler.sample(logits, 0.3770), 0U);
  EXPECT_EQ(sampler.sample(logits, 0.3780), 1U);
  // At temperature 0.5, p(0) = 1 / (1 + e^2) = 0.1192.
  sampler.set_options(SamplingOptions{.temperature = 0.5f});
  EXPECT_EQ(sampler.sample(logits, 0.1190), 0U);
  EXPECT_EQ(sampler.sample(logits, 0.1194), 1U);
}

TEST(TokenSampler, TopKKeepsTheKMostLikelyRenormalized) {
  // Tokens 1 and 3 are the two most likely; renormalized p(1) = 1 / (1 + e^-1) = 0.7311.
  TokenSampler sampler(SamplingOptions{.temperature = 1.0f, .top_k = 2}, 5);
  const std::vector<float> logits = {1.0f, 5.0f, 3.0f, 4.0f, 2.0f};
  EXPECT_EQ(support(sampler, logits), (std::set<Token>{1, 3}));
  EXPECT_EQ(sampler.sample(logits, 0.7300), 1U);
  EXPECT_EQ(sampler.sample(logits, 0.7320), 3U);
  // Ties at the cut go to the lower id; k >= vocabulary is off.
  const std::vector<float> tied = {1.0f, 2.0f, 2.0f, 2.0f, 0.0f};
  EXPECT_EQ(support(sampler, tied), (std::set<Token>{1, 2}));
  sampler.set_options(SamplingOptions{.temperature = 1.0f, .top_k = 5});
  EXPECT_EQ(support(sampler, logits).size(), 5U);
  sampler.set_options(SamplingOptions{.temperature = 1.0f, .top_k = 500});
  EXPECT_EQ(support(sampler, logits).size(), 5U);
}

TEST(TokenSampler, TopPKeepsTheSmallestSetReachingTheMass) {
  TokenSampler sampler(SamplingOptions{.temperature = 1.0f, .top_p = 0.6f}, 4);
  const std::vector<float> logits = log_probs({0.1, 0.4, 0.3, 0.2});
  EXPECT_EQ(support(sampler, logits), (std::set<Token>{1, 2}));  // 0.4 + 0.3 >= 0.6
  sampler.set_options(SamplingOptions{.temperature = 1.0f, .top_p = 0.35f});
  EXPECT_EQ(support(sampler, logits), (std::set<Token>{1}));
  sampler.set_options(SamplingOptions{.temperature = 1.0f, .top_p = 0.75f});
  EXPECT_EQ(support(sampler, logits), (std::set<Token>{1, 2, 3}));
  // Renormalized over {1, 2}: p(1) = 4/7 = 0.5714.
  sampler.set_options(SamplingOptions{.temperature = 1.0f, .top_p = 0.6f});
  EXPECT_EQ(sampler.sample(logits, 0.5700), 1U);
  EXPECT_EQ(sampler.sample(logits, 0.5730), 2U);
}

TEST(TokenSampler, MinPKeepsTokensWithinAFactorOfTheMostLikely) {
  TokenSampler sampler(SamplingOptions{.temperature = 1.0f, .min_p = 0.2f}, 4);
  const std::vector<float> logits = log_probs({0.5, 0.3, 0.15, 0.05});  // threshold 0.2 * 0.5 = 0.1
  EXPECT_EQ(support(sampler, logits), (std::set<Token>{0, 1, 2}));
  sampler.set_options(SamplingOptions{.temperature = 1.0f, .min_p = 0.5f});  // threshold 0.25
  EXPECT_EQ(support(sampler, logits), (std::set<Token>{0, 1}));
  sampler.set_options(SamplingOptions{.temperature = 1.0f, .min_p = 0.99f});
  EXPECT_EQ(support(sampler, logits), (std::set<Token>{0}));
  // min-p applies after temperature: at temperature 3 the tokens are closer, all pass 0.2.
  sampler.set_options(SamplingOptions{.temperature = 3.0f, .min_p = 0.2f});
  EXPECT_EQ(support(sampler, logits), (std::set<Token>{0, 1, 2, 3}));
}

TEST(TokenSampler, TopKAppliesBeforeTopP) {
  // top-k 2 leaves {0.4, 0.3} -> {0.571, 0.429}, so top-p 0.5 keeps token 0 alone; top-p
  // first would keep {0, 1}.
  TokenSampler sampler(SamplingOptions{.temperature = 1.0f, .top_k = 2, .top_p = 0.5f}, 4);
  EXPECT_EQ(support(sampler, log_probs({0.4, 0.3, 0.2, 0.1})), (std::set<Token>{0}));
}

TEST(TokenSampler, TopPAppliesBeforeMinP) {
  // top-p 0.8 keeps {0.4, 0.35, 0.15} (0.75 < 0.8 before the third), and min-p 0.3 keeps
  // everything >= 0.12 of them. min-p first would renormalize to {0.44, 0.39, 0.17}, and top-p
  // would then stop after two tokens.
  TokenSampler sampler(SamplingOptions{.temperature = 1.0f, .top_p = 0.8f, .min_p = 0.3f}, 4);
  EXPECT_EQ(support(sampler, log_probs({0.4, 0.35, 0.15, 0.1})), (std::set<Token>{0, 1, 2}));
}

TEST(TokenSampler, TopKOneTinyTopPAndMinPNearOneAreArgmax) {
  std::mt19937_64 rng(1234);
  for (int c = 0; c < 300; ++c) {
    const HashLogits hl{.vocab = 2 + rng() % 40,
                        .context = 1,
                        .seed = rng(),
                        .scale = 0.5f + static_cast<float>(rng() % 8),
                        .masked_per_mille = static_cast<unsigned>(rng() % 500)};
    SCOPED_TRACE(hl.describe());
    std::vector<float> logits(hl.vocab);
    const std::vector<Token> prefix = {static_cast<Token>(rng() % hl.vocab)};
    hl(prefix, logits);
    // Make a tie for the top now and then: argmax must still go to the lower id.
    if (c % 3 == 0) logits[hl.vocab - 1] = *std::max_element(logits.begin(), logits.end());
    TokenSampler greedy({}, hl.vocab);
    const Token argmax = greedy.sample(logits, 0.0);
    const float temperature = 0.1f + static_cast<float>(rng() % 30) / 10.0f;
    for (const SamplingOptions o : {SamplingOptions{.temperature = temperature, .top_k = 1},
                                    SamplingOptions{.temperature = temperature, .top_p = 1e-6f},
                                    SamplingOptions{.temperature = temperature, .min_p = 0.999999f}}) {
      TokenSampler sampler(o, hl.vocab);
      for (std::uint64_t pos = 0; pos < 20; ++pos) {
        const Token t = sampler.choose(logits, pos);
        if (o.min_p > 0.0f && logits[hl.vocab - 1] == logits[argmax] && hl.vocab - 1 != argmax) {
          // min-p keeps every token tied with the top.
          EXPECT_TRUE(t == argmax || t == hl.vocab - 1);
        } else {
          EXPECT_EQ(t, argmax) << "top_k=" << o.top_k << " top_p=" << o.top_p << " min_p=" << o.min_p;
        }
      }
    }
  }
}

TEST(TokenSampler, ChooseUsesThePositionsDraw) {
  TokenSampler sampler(SamplingOptions{.temperature = 1.3f, .top_k = 6, .seed = 77}, 10);
  std::vector<float> logits(10);
  HashLogits{.vocab = 10}(std::vector<Token>{3}, logits);
  for (std::uint64_t pos = 0; pos < 200; ++pos) {
    EXPECT_EQ(sampler.choose(logits, pos), sampler.sample(logits, position_uniform(77, pos)));
  }
}

// The largest vocabulary a Token numbers, 2^32, takes 48 GiB of scratch: on a machine with less memory it is
// refused before anything is allocated (a sampler that tried would drive the machine out of memory as its
// scratch is written), naming the vocabulary and the memory.
TEST(TokenSampler, AVocabularyBeyondTheMachinesMemoryIsRefusedBeforeAllocating) {
  if (sizeof(std::size_t) < 8) GTEST_SKIP() << "2^32 tokens: a 64-bit size_t";
  const std::size_t vocab = std::size_t{1} << 32;
  const std::size_t machine = detail::physical_memory_bytes();
  if (machine == 0 || machine / 12 >= vocab) GTEST_SKIP() << "this machine has the memory for 2^32 tokens' scratch";
  try {
    const TokenSampler sampler(SamplingOptions{}, vocab);
    FAIL() << "a sampler of 2^32 tokens was made";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "ngramspec: TokenSampler: vocab_size = 4294967296 takes 51539607552 bytes of "
                                     "scratch (12 per token), more than this machine's memory (" +
                                         std::to_string(machine) + " bytes)");
  }
}

TEST(TokenSampler, NonFiniteLogitsThrowNamingTokenAndPosition) {
  for (const float temperature : {0.0f, 1.0f}) {
    SCOPED_TRACE("temperature " + std::to_string(temperature));
    TokenSampler sampler(SamplingOptions{.temperature = temperature}, 4);
    const auto message = [&](std::vector<float> logits) -> std::string {
      try {
        (void)sampler.choose(logits, 7);
      } catch (const std::domain_error& e) {
        return e.what();
      }
      return "no exception";
    };
    std::string m = message({0.0f, 1.0f, kNaN, 2.0f});
    EXPECT_NE(m.find("token 2"), std::string::npos) << m;
    EXPECT_NE(m.find("position 7"), std::string::npos) << m;
    EXPECT_NE(m.find("NaN"), std::string::npos) << m;
    m = message({kInf, 1.0f, 0.0f, 2.0f});
    EXPECT_NE(m.find("token 0"), std::string::npos) << m;
    EXPECT_NE(m.find("+inf"), std::string::npos) << m;
    m = message({-kInf, -kInf, -kInf, -kInf});
    EXPECT_NE(m.find("every logit is -inf at position 7"), std::string::npos) << m;
    EXPECT_THROW((void)sampler.sample(std::vector<float>{0.0f, 1.0f, 2.0f}, 0.5), std::invalid_argument);  // row size
  }
}

TEST(SamplingModel, ForwardNamesThePositionOfABadRow) {
  // Logits with a NaN for token 1 of every row: forward at pos 5 fails on its first row, the
  // token at position 6.
  struct NaNModel {
    void forward(std::size_t, std::span<const Token>, std::span<float> logits) {
      for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = i % 3 == 1 ? kNaN : 0.0f;
    }
    void rollback(std::size_t) {}
    [[nodiscard]] std::size_t max_batch() const { return 4; }
    [[nodiscard]] std::size_t vocab_size() const { return 3; }
  } model;
  SamplingModel<NaNModel> sampling(model, SamplingOptions{.temperature = 1.0f});
  const std::vector<Token> tokens = {0, 1};
  std::vector<Token> next(2);
  try {
    sampling.forward(5, tokens, next);
    ADD_FAILURE() << "no exception";
  } catch (const std::domain_error& e) {
    EXPECT_NE(std::string(e.what()).find("token 1 at position 6"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// SamplingModel

TEST(SamplingModel, RowIChoosesThePositionAfterTokenI) {
  const HashLogits hl{.vocab = 12, .context = 2, .seed = 5, .scale = 2.0f, .with_position = true};
  const SamplingOptions options{.temperature = 1.0f, .top_p = 0.95f, .seed = 31};
  PrefixLogitsModel model(hl, 8);
  SamplingModel<PrefixLogitsModel> sampling(model, options);
  const NextTokenRule expected = sampled_rule(hl, options);
  const std::vector<Token> tokens = {3, 1, 4, 1, 5, 9, 2, 6};
  std::vector<Token> next(8);
  sampling.forward(0, std::span<const Token>(tokens).first(3), std::span<Token>(next).first(3));
  sampling.forward(3, std::span<const Token>(tokens).subspan(3), std::span<Token>(next).subspan(3));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(next[i], expected(std::span<const Token>(tokens).first(i + 1))) << "row " << i;
  }
  // rollback reaches the model; a re-fed position draws the same as before.
  sampling.rollback(2);
  EXPECT_EQ(model.history().size(), 2U);
  std::vector<Token> again(1);
  sampling.forward(2, std::span<const Token>(tokens).subspan(2, 1), again);
  EXPECT_EQ(again[0], next[2]);
  EXPECT_TRUE(model.violations().empty());
}

TEST(SamplingModel, ForwardAndRollbackAllocateNothing) {
  const HashLogits hl{.vocab = 64, .context = 3, .seed = 8, .scale = 4.0f, .masked_per_mille = 100};
  PrefixLogitsModel model(hl, 6);
  model.reserve(1024);
  for (const SamplingOptions& o : {SamplingOptions{}, SamplingOptions{.temperature = 0.8f, .seed = 1},
                                   SamplingOptions{.temperature = 0.8f, .top_k = 5, .seed = 2},
                                   SamplingOptions{.temperature = 1.2f, .top_p = 0.9f, .seed = 3},
                                   SamplingOptions{.temperature = 0.6f, .top_k = 20, .top_p = 0.8f, .min_p = 0.05f}}) {
    SamplingModel<PrefixLogitsModel> sampling(model, o);
    std::vector<Token> tokens = {1, 2, 3, 4, 5, 6};
    std::vector<Token> next(6);
    sampling.rollback(0);
    AllocationCounter counter;
    std::size_t pos = 0;
    for (int step = 0; step < 100; ++step) {
      const std::size_t n = 1 + static_cast<std::size_t>(step) % 6;
      sampling.forward(pos, std::span<const Token>(tokens).first(n), std::span<Token>(next).first(n));
      pos += n;
      if (step % 3 == 0) {
        pos -= n / 2;
        sampling.rollback(pos);
      }
      tokens[0] = next[n - 1];
    }
    sampling.set_options(SamplingOptions{.temperature = 0.5f, .seed = 99});
    EXPECT_EQ(counter.count(), 0U);
  }
}

TEST(SamplingModel, DrivesSpeculativeDecoderOverARunTimeBackend) {
  const HashLogits hl{.vocab = 6, .context = 1, .seed = 3, .scale = 1.0f};
  const SamplingOptions options{.temperature = 0.9f, .seed = 2024};
  const std::vector<Token> prompt = {1, 2, 3, 1, 2, 3};
  DecodeOptions decode;
  decode.max_new_tokens = 64;
  const GreedyReference ref = plain_greedy(sampled_rule(hl, options), prompt, decode);

  VirtualPrefixLogitsModel backend(hl, 5);
  SamplingModel<AbstractLogitsModel> sampling(backend, options);
  SpeculativeDecoder decoder(sampling, OracleDrafter(sampled_rule(hl, options), 4, 200, 1));
  const DecodeResult result = decoder.generate(prompt, decode);
  EXPECT_EQ(result.tokens, ref.tokens);
  EXPECT_GT(result.stats.accepted, 0U);
  EXPECT_LT(result.stats.decode_passes + 1, result.stats.generated);
}

// ---------------------------------------------------------------------------------------------
// Seed identity: speculative sampling emits plain sampling's tokens for the same seed.

struct SamplingCase {
  std::uint64_t seed = 0;
  HashLogits logits;
  SamplingOptions sampling;
  std::size_t max_batch = 1;
  std::vector<Token> prompt;
  DecodeOptions options;

  [[nodiscard]] std::string describe() const {
    std::string s = "case " + std::to_string(seed) + ": " + logits.describe() +
                    " temperature=" + std::to_string(sampling.temperature) +
                    " top_k=" + std::to_string(sampling.top_k) + " top_p=" + std::to_string(sampling.top_p) +
                    " min_p=" + std::to_string(sampling.min_p) + " seed=" + std::to_string(sampling.seed) +
                    " max_batch=" + std::to_string(max_batch) +
                    " max_new_tokens=" + std::to_string(options.max_new_tokens) +
                    " max_context=" + std::to_string(options.max_context) +
                    " stops=" + std::to_string(options.stop_tokens.size()) + " prompt={";
    for (const Token t : prompt) s += std::to_string(t) + " ";
    return s + "}";
  }
};

[[nodiscard]] SamplingCase random_sampling_case(std::uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ULL + 17);
  const auto pick = [&rng](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  SamplingCase c;
  c.seed = seed;
  c.logits = HashLogits{.vocab = static_cast<std::size_t>(pick(2, 24)),
                        .context = static_cast<std::size_t>(pick(1, 3)),
                        .seed = rng(),
                        .scale = static_cast<float>(pick(1, 16)) / 2.0f,
                        .with_position = pick(0, 2) == 0,
                        .masked_per_mille = static_cast<unsigned>(pick(0, 1) == 0 ? 0 : pick(1, 600))};
  const float temperatures[] = {0.0f, 0.25f, 0.7f, 1.0f, 1.0f, 1.5f, 3.0f};
  const std::size_t top_ks[] = {0, 0, 1, 2, 5, 100};
  const float top_ps[] = {1.0f, 1.0f, 0.95f, 0.7f, 0.3f, 1e-4f};
  const float min_ps[] = {0.0f, 0.0f, 0.05f, 0.3f};
  c.sampling = SamplingOptions{.temperature = temperatures[pick(0, 6)],
                               .top_k = top_ks[pick(0, 5)],
                               .top_p = top_ps[pick(0, 5)],
                               .min_p = min_ps[pick(0, 3)],
                               .seed = rng()};
  c.max_batch = static_cast<std::size_t>(pick(1, 9));
  c.prompt.resize(static_cast<std::size_t>(pick(1, 20)));
  // Repeating prompts now and then, so the n-gram drafter has something to propose.
  const std::size_t period = static_cast<std::size_t>(pick(1, 6));
  for (std::size_t i = 0; i < c.prompt.size(); ++i) {
    c.prompt[i] =
        i >= period && pick(0, 1) == 0 ? c.prompt[i - period] : static_cast<Token>(pick(0, c.logits.vocab - 1));
  }
  c.options.max_new_tokens = static_cast<std::size_t>(pick(1, 48));
  if (pick(0, 3) == 0) c.options.max_context = c.prompt.size() + static_cast<std::size_t>(pick(0, 40));
  for (std::uint64_t k = pick(0, 2); k > 0; --k)
    c.options.stop_tokens.push_back(static_cast<Token>(pick(0, c.logits.vocab - 1)));
  c.options.max_drafts = static_cast<std::size_t>(pick(1, 8));
  return c;
}

TEST(SamplingSeedIdentity, SpeculativeEqualsPlainForTheSameSeed) {
  std::size_t drafted = 0;
  std::size_t accepted = 0;
  std::size_t exact_oracle_saved_passes = 0;
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const SamplingCase c = random_sampling_case(seed);
    SCOPED_TRACE(c.describe());
    // Plain decoding must be the decoder-free reference, and speculation must match it.
    const NextTokenRule reference_rule = sampled_rule(c.logits, c.sampling);
    const GreedyReference ref = plain_greedy(reference_rule, c.prompt, c.options);

    PrefixLogitsModel plain_model(c.logits, c.max_batch);
    SamplingModel<PrefixLogitsModel> plain_sampling(plain_model, c.sampling);
    DecodeOptions plain_options = c.options;
    plain_options.speculate = false;
    const DecodeResult plain = SpeculativeDecoder(plain_sampling).generate(c.prompt, plain_options);
    ASSERT_EQ(plain.tokens, ref.tokens);
    ASSERT_EQ(plain.stop_reason, ref.stop_reason);

    const auto check = [&](const char* name, auto drafter) {
      SCOPED_TRACE(name);
      PrefixLogitsModel model(c.logits, c.max_batch);
      SamplingModel<PrefixLogitsModel> sampling(model, c.sampling);
      SpeculativeDecoder decoder(sampling, std::move(drafter));
      const DecodeResult result = decoder.generate(c.prompt, c.options);
      EXPECT_EQ(result.tokens, plain.tokens);
      EXPECT_EQ(result.stop_reason, plain.stop_reason);
      EXPECT_TRUE(model.violations().empty()) << model.violations().front();
      drafted += result.stats.drafted;
      accepted += result.stats.accepted;
      return result;
    };
    check("ngram", NGramPredictor());
    check("ngram(2-3, 8 drafts)", NGramPredictor(NGramConfig{.min_order = 2, .max_order = 3, .max_drafts = 8}));
    check("argmax oracle", OracleDrafter(argmax_rule(c.logits)));
    check("random", RandomDrafter(seed, static_cast<Token>(c.logits.vocab), 1 + seed % 7));
    // Knows the seed, so it proposes exactly what will be sampled, except ~15% of the time.
    check("noisy exact oracle", OracleDrafter(reference_rule, 8, 150, seed));
    const DecodeResult exact = check("exact oracle", OracleDrafter(reference_rule));
    exact_oracle_saved_passes += exact.stats.generated - (exact.stats.decode_passes + 1);
  }
  // The property is not vacuous: drafts were both accepted and rejected, and a drafter that
  // knows the draws saves passes.
  EXPECT_GT(accepted, 1000U);
  EXPECT_GT(drafted - accepted, 1000U);
  EXPECT_GT(exact_oracle_saved_passes, 1000U);
}

TEST(SamplingSeedIdentity, OneModelServesManyRequestsWithTheirOwnSeeds) {
  // One adapter, one decoder, seeds changed with set_options between generations: each
  // result equals a fresh plain decode with that seed, and different seeds give different outputs.
  const HashLogits hl{.vocab = 16, .context = 2, .seed = 11, .scale = 1.5f};
  PrefixLogitsModel model(hl, 8);
  SamplingModel sampling(model, {.temperature = 1.0f});  // as docs/SAMPLING.md writes it
  SpeculativeDecoder decoder(sampling);
  const std::vector<Token> prompt = {4, 5, 6, 4, 5, 6, 4, 5};
  std::set<std::vector<Token>> outputs;
  for (std::uint64_t seed = 0; seed < 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const SamplingOptions options{.temperature = 1.0f, .top_p = 0.9f, .seed = seed};
    sampling.set_options(options);
    const DecodeResult result = decoder.generate(prompt, with_max_new_tokens(24));
    EXPECT_EQ(result.tokens, plain_greedy(sampled_rule(hl, options), prompt, 24));
    outputs.insert(result.tokens);
  }
  EXPECT_GT(outputs.size(), 35U);
}

/// An engine's loop over the step API that samples its own logits with a TokenSampler at
/// position cache_length() + i + 1, as docs/SAMPLING.md describes, and samples only the
/// prefill's last row. Returns the emitted tokens.
[[nodiscard]] std::vector<Token> engine_loop(const SamplingCase& c, NGramPredictor& drafter) {
  PrefixLogitsModel model(c.logits, c.max_batch);
  TokenSampler sampler(c.sampling, c.logits.vocab);
  std::vector<float> logits(c.max_batch * c.logits.vocab);
  std::vector<Token> drafts(c.max_batch);
  std::vector<Token> fed(c.max_batch);
  std::vector<Token> model_tokens(c.max_batch);
  std::vector<Token> out;
  const std::size_t vocab = c.logits.vocab;

  SequenceState state = start_sequence(c.prompt.size(), c.options);
  if (state.finished) return out;
  drafter.reset();
  drafter.update(std::span<const Token>(c.prompt));
  std::size_t last_row = 0;
  for (std::size_t pos = 0; pos < c.prompt.size(); pos += c.max_batch) {
    const std::size_t n = std::min(c.max_batch, c.prompt.size() - pos);
    model.forward(pos, std::span<const Token>(c.prompt).subspan(pos, n), std::span<float>(logits).first(n * vocab));
    last_row = n - 1;
  }
  model_tokens[0] = sampler.choose(std::span<const float>(logits).subspan(last_row * vocab, vocab), c.prompt.size());
  StepOutcome outcome = accept_drafts(state, {}, std::span<const Token>(model_tokens).first(1), c.options);
  for (;;) {
    const std::span<const Token> emitted = std::span<const Token>(model_tokens).first(outcome.emitted);
    out.insert(out.end(), emitted.begin(), emitted.end());
    drafter.update(emitted);
    advance(state, outcome);
    if (state.finished) break;
    const std::size_t n = propose_drafts(drafter, state, c.options, c.max_batch - 1, drafts);
    fed[0] = out.back();
    std::copy_n(drafts.begin(), n, fed.begin() + 1);
    const std::size_t at = state.cache_length();
    model.forward(at, std::span<const Token>(fed).first(n + 1), std::span<float>(logits).first((n + 1) * vocab));
    for (std::size_t i = 0; i <= n; ++i) {
      model_tokens[i] = sampler.choose(std::span<const float>(logits).subspan(i * vocab, vocab), at + i + 1);
    }
    outcome = accept_drafts(state, std::span<const Token>(drafts).first(n),
                            std::span<const Token>(model_tokens).first(n + 1), c.options);
    if (outcome.discarded != 0) model.rollback(outcome.rollback_to);
  }
  EXPECT_TRUE(model.violations().empty());
  return out;
}

TEST(SamplingSeedIdentity, StepApiEngineSamplingItsOwnLogitsMatchesTheDecoder) {
  std::size_t accepted = 0;
  for (std::uint64_t seed = 1000; seed < 1150; ++seed) {
    const SamplingCase c = random_sampling_case(seed);
    SCOPED_TRACE(c.describe());
    PrefixLogitsModel model(c.logits, c.max_batch);
    SamplingModel<PrefixLogitsModel> sampling(model, c.sampling);
    const DecodeResult expected = SpeculativeDecoder(sampling).generate(c.prompt, c.options);
    NGramPredictor drafter;
    EXPECT_EQ(engine_loop(c, drafter), expected.tokens);
    accepted += expected.stats.accepted;
  }
  EXPECT_GT(accepted, 100U);
}

}  // namespace
}  // namespace ngramspec::test
