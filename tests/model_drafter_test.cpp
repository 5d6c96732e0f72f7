// ModelDrafter: a LogitsModel drafting autoregressively, its KV cache kept in step with the
// target's. Properties over many random mock models: decoding with it equals plain decoding
// (greedy and sampled), a draft model equal to the target has every greedy draft accepted, q is
// the distribution the drafts follow, the draft model's cache after any passes is the accepted
// sequence fed from scratch, a pass costs one draft forward per drafted token, and the hot
// paths allocate nothing.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ngramspec/ngramspec.hpp"
#include "support/allocation_counter.hpp"
#include "support/mock_models.hpp"
#include "support/rule_logits_model.hpp"
#include "support/thrown_message.hpp"

namespace ngramspec::test {
namespace {

static_assert(LogitsModel<RuleLogitsModel>);
static_assert(Drafter<ModelDrafter<RuleLogitsModel>>);
static_assert(EstimatingDrafter<ModelDrafter<RuleLogitsModel>>);
static_assert(DistributionDrafter<ModelDrafter<RuleLogitsModel>>);
static_assert(DistributionDrafter<ModelDrafter<AbstractLogitsModel>>);

/// What the draft model is, relative to the target's rule.
enum class DraftKind { equal, perturbed, unrelated };

/// A random case: the target's rule, a draft model and the drafter's config.
struct Case {
  NamedRule target;
  NextTokenRule draft_rule;
  DraftKind kind = DraftKind::equal;
  std::size_t vocab = 0;
  std::uint64_t noise_seed = 0;
  float noise = 0;
  float margin = 0;
  std::size_t draft_batch = 1;
  std::size_t target_batch = 2;
  ModelDraftConfig config;
  std::vector<Token> prompt;
  DecodeOptions options;
  std::string describe;
};

/// The target's rule, changed at about a quarter of the prefixes.
[[nodiscard]] NextTokenRule perturbed(NextTokenRule rule, Token vocab, std::uint64_t seed) {
  return [rule = std::move(rule), vocab, seed](std::span<const Token> prefix) {
    const Token t = rule(prefix);
    const std::uint64_t h = scramble(seed ^ scramble(prefix.size() ^ (std::uint64_t{prefix.back()} << 20)));
    return h % 4 == 0 ? static_cast<Token>((t + 1 + h / 4 % (vocab - 1)) % vocab) : t;
  };
}

[[nodiscard]] Case random_case(std::mt19937_64& rng, bool sampled_drafts) {
  const auto pick = [&rng](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  Case c;
  c.target = random_rule(rng);
  c.vocab = c.target.vocab;
  c.kind = static_cast<DraftKind>(pick(0, 2));
  switch (c.kind) {
    case DraftKind::equal: c.draft_rule = c.target.rule; break;
    case DraftKind::perturbed: c.draft_rule = perturbed(c.target.rule, c.target.vocab, rng()); break;
    case DraftKind::unrelated: {
      NamedRule other = random_rule(rng);
      c.draft_rule = [rule = other.rule, vocab = c.vocab](std::span<const Token> prefix) {
        return static_cast<Token>(rule(prefix) % vocab);
      };
      break;
    }
  }
  c.noise_seed = rng();
  c.noise = static_cast<float>(pick(0, 30)) / 10.0f;
  c.margin = 2.0f * c.noise + 0.5f + static_cast<float>(pick(0, 20)) / 10.0f;
  c.draft_batch = pick(1, 9);
  c.target_batch = pick(2, 10);
  c.config.max_drafts = pick(1, 8);
  c.config.support = pick(1, DraftDistributions::kMaxSupport);
  if (sampled_drafts) {
    c.config.sampling.temperature = static_cast<float>(pick(2, 20)) / 10.0f;
    if (pick(0, 2) == 0) c.config.sampling.top_k = pick(1, 10);
    if (pick(0, 2) == 0) c.config.sampling.top_p = static_cast<float>(pick(3, 10)) / 10.0f;
    if (pick(0, 2) == 0) c.config.sampling.min_p = static_cast<float>(pick(1, 5)) / 10.0f;
    c.config.sampling.seed = rng();
  }
  c.prompt.resize(pick(1, 40));
  for (Token& t : c.prompt) t = static_cast<Token>(pick(0, c.vocab - 1));
  c.options.max_new_tokens = pick(1, 80);
  c.options.max_drafts = pick(1, 10);
  if (pick(0, 3) == 0) c.options.stop_tokens = {static_cast<Token>(pick(0, c.vocab - 1))};
  c.describe = c.target.name + " draft=" + std::to_string(static_cast<int>(c.kind)) +
               " noise=" + std::to_string(c.noise) + " margin=" + std::to_string(c.margin) +
               " draft_batch=" + std::to_string(c.draft_batch) + " target_batch=" + std::to_string(c.target_batch) +
               " max_drafts=" + std::to_string(c.config.max_drafts) + " support=" + std::to_string(c.config.support) +
               " T=" + std::to_string(c.config.sampling.temperature) +
               " top_k=" + std::to_string(c.config.sampling.top_k) + " top_p=" +
               std::to_string(c.config.sampling.top_p) + " min_p=" + std::to_string(c.config.sampling.min_p) +
               " prompt=" + std::to_string(c.prompt.size()) + " new=" + std::to_string(c.options.max_new_tokens) +
               " k=" + std::to_string(c.options.max_drafts);
  return c;
}

[[nodiscard]] RuleLogitsModel draft_model(const Case& c) {
  return RuleLogitsModel(c.draft_rule, c.vocab, c.noise_seed, c.noise, c.margin, c.draft_batch);
}

/// A case's greedy target (its rule) and draft model, the drafter over it, and a decoder over both.
struct GreedyDecoding {
  explicit GreedyDecoding(const Case& c)
      : target(c.target.rule, c.target_batch), draft(draft_model(c)), drafter(draft, c.vocab, c.config),
        decoder(target, drafter) {}
  GreedyModel target;
  RuleLogitsModel draft;
  ModelDrafter<RuleLogitsModel> drafter;
  SpeculativeDecoder<GreedyModel, ModelDrafter<RuleLogitsModel>> decoder;
};

/// The distribution q a draft must be drawn from, computed the plain way: softmax under the
/// temperature over every token, sorted most likely first (then lower id), cut by top-k, top-p
/// (over the top-k set's mass), min-p and the support, renormalized. Tokens in that order.
[[nodiscard]] std::vector<std::pair<Token, double>> reference_q(std::span<const float> row,
                                                                const ModelDraftConfig& config) {
  const SamplingOptions& o = config.sampling;
  const double top = *std::max_element(row.begin(), row.end());
  std::vector<std::pair<Token, double>> all;
  for (std::size_t t = 0; t < row.size(); ++t) {
    const double w = std::exp((row[t] - top) * (1.0 / static_cast<double>(o.temperature)));
    if (w > 0.0) all.emplace_back(static_cast<Token>(t), w);
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  if (o.top_k != 0 && o.top_k < all.size()) all.resize(o.top_k);
  if (o.top_p < 1.0f && all.size() > 1) {
    double total = 0.0;
    for (const auto& e : all) total += e.second;
    double cumulative = 0.0;
    std::size_t keep = 0;
    while (keep < all.size() && cumulative < static_cast<double>(o.top_p) * total) cumulative += all[keep++].second;
    all.resize(std::max<std::size_t>(keep, 1));
  }
  if (o.min_p > 0.0f) {
    std::erase_if(all, [&](const auto& e) { return e.second < static_cast<double>(o.min_p); });
  }
  if (all.size() > config.support) all.resize(config.support);
  double total = 0.0;
  for (const auto& e : all) total += e.second;
  for (auto& e : all) e.second /= total;
  return all;
}

// ---------------------------------------------------------------------------------------------
// Construction

TEST(ModelDrafter, InvalidConfigThrowsNamingFieldAndValue) {
  RuleLogitsModel model(AffineRule{}, 7, 0, 1.0f, 3.0f, 4);
  struct Bad {
    ModelDraftConfig config;
    std::string field;
    std::string value;
  };
  const std::vector<Bad> bad = {
      {{.max_drafts = 0}, "max_drafts", "0"},
      {{.max_drafts = kMaxDraftsPerPass + 1}, "max_drafts", std::to_string(kMaxDraftsPerPass + 1)},
      {{.support = 0}, "support", "0"},
      {{.support = DraftDistributions::kMaxSupport + 1}, "support", "33"},
      {{.min_probability = -0.5f}, "min_probability", "-0.5"},
      {{.min_probability = 1.5f}, "min_probability", "1.5"},
      {{.min_probability = std::numeric_limits<float>::quiet_NaN()}, "min_probability", "nan"},
      {{.sampling = {.temperature = -1.0f}}, "temperature", "-1"},
      {{.sampling = {.temperature = 1.0f, .top_p = 0.0f}}, "top_p", "0"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.field);
    const std::string what = message_of<std::invalid_argument>([&] { ModelDrafter d(model, 7, b.config); });
    EXPECT_NE(what.find(b.field), std::string::npos) << what;
    EXPECT_NE(what.find(b.value), std::string::npos) << what;
  }
  ModelDrafter drafter(model, 7);
  EXPECT_THROW(drafter.set_sampling({.temperature = 1.0f, .min_p = 1.0f}), std::invalid_argument);
  EXPECT_EQ(drafter.config().sampling.temperature, 0.0f);
}

TEST(ModelDrafter, ModelThatDoesNotFitThrowsNamingTheValue) {
  RuleLogitsModel model(AffineRule{}, 7, 0, 1.0f, 3.0f, 4);
  std::string what = message_of<std::invalid_argument>([&] { ModelDrafter d(model, 9); });
  EXPECT_NE(what.find("vocab_size() is 7"), std::string::npos) << what;
  EXPECT_NE(what.find("9"), std::string::npos) << what;
  what = message_of<std::invalid_argument>([&] { ModelDrafter d(model, 0); });
  EXPECT_NE(what.find("vocabulary size is 0"), std::string::npos) << what;
  RuleLogitsModel no_batch(AffineRule{}, 7, 0, 1.0f, 3.0f, 0);
  what = message_of<std::invalid_argument>([&] { ModelDrafter d(no_batch, 7); });
  EXPECT_NE(what.find("max_batch() is 0"), std::string::npos) << what;
}

// ---------------------------------------------------------------------------------------------
// Decoding with it

TEST(ModelDrafter, GreedyDecodingEqualsPlainForAnyDraftModel) {
  std::mt19937_64 rng(2901);
  for (int trial = 0; trial < 300; ++trial) {
    const Case c = random_case(rng, trial % 3 == 2);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + c.describe);
    GreedyDecoding d(c);
    if (trial % 4 == 1) d.decoder.set_verify_cost(VerifyCost::knee(1 + trial % 5));
    const GreedyReference ref = plain_greedy(c.target.rule, c.prompt, c.options);
    // Twice: the second generation starts from the first one's drafter and draft model.
    for (int run = 0; run < 2; ++run) {
      const DecodeResult result = d.decoder.generate(c.prompt, c.options);
      ASSERT_EQ(result.tokens, ref.tokens);
      ASSERT_EQ(result.stop_reason, ref.stop_reason);
    }
    EXPECT_TRUE(d.target.violations().empty()) << d.target.violations().front();
    EXPECT_TRUE(d.draft.violations().empty()) << d.draft.violations().front();
  }
}

TEST(ModelDrafter, DraftModelEqualToTheTargetHasEveryGreedyDraftAccepted) {
  std::mt19937_64 rng(2902);
  std::size_t drafted = 0;
  for (int trial = 0; trial < 200; ++trial) {
    Case c = random_case(rng, false);
    c.draft_rule = c.target.rule;
    c.options.stop_tokens.clear();
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + c.describe);
    GreedyDecoding d(c);
    const DecodeResult result = d.decoder.generate(c.prompt, c.options);
    EXPECT_EQ(result.stats.accepted, result.stats.drafted);
    // Every pass but those the limits cut drafts min(max_drafts, room) tokens.
    const std::size_t k = std::min({c.config.max_drafts, c.options.max_drafts, c.target_batch - 1});
    EXPECT_GE(result.stats.drafted + k, result.stats.decode_passes * k);
    drafted += result.stats.drafted;
  }
  EXPECT_GT(drafted, 1000u);
}

TEST(ModelDrafter, SampledDecodingEqualsPlainSampledDecodingPerSeed) {
  std::mt19937_64 rng(2903);
  for (int trial = 0; trial < 150; ++trial) {
    Case c = random_case(rng, trial % 2 == 0);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + c.describe);
    RuleLogitsModel target_logits(c.target.rule, c.vocab, c.noise_seed ^ 1, 1.0f, 1.0f, c.target_batch);
    const SamplingOptions verify{.temperature = 1.0f, .seed = static_cast<std::uint64_t>(trial)};
    SamplingModel target(target_logits, verify);
    RuleLogitsModel draft = draft_model(c);
    ModelDrafter drafter(draft, c.vocab, c.config);
    SpeculativeDecoder decoder(target, drafter);
    DecodeOptions plain = c.options;
    plain.speculate = false;
    const std::vector<Token> expected = decoder.generate(c.prompt, plain).tokens;
    ASSERT_EQ(decoder.generate(c.prompt, c.options).tokens, expected);
    EXPECT_TRUE(draft.violations().empty()) << draft.violations().front();
  }
}

// ---------------------------------------------------------------------------------------------
// q and the draws

TEST(ModelDrafter, EachDraftHasItsQAndQIsTheFilteredDistribution) {
  std::mt19937_64 rng(2904);
  DraftDistributions q;
  std::vector<Token> out(8);
  std::vector<float> probabilities(8);
  std::vector<float> row;
  for (int trial = 0; trial < 300; ++trial) {
    const bool sampled = trial % 4 != 0;
    const Case c = random_case(rng, sampled);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + c.describe);
    RuleLogitsModel draft = draft_model(c);
    ModelDrafter drafter(draft, c.vocab, c.config);
    drafter.update(c.prompt);
    const std::size_t n = drafter.predict(out, probabilities, q);
    ASSERT_EQ(n, c.config.max_drafts);
    ASSERT_EQ(q.size(), n);
    std::vector<Token> prefix = c.prompt;
    row.resize(c.vocab);
    for (std::size_t i = 0; i < n; ++i) {
      if (!sampled) {
        EXPECT_TRUE(q.tokens(i).empty()) << "a greedy draft's q is one-hot";
      } else {
        const std::span<const Token> tokens = q.tokens(i);
        const std::span<const float> p = q.probabilities(i);
        ASSERT_FALSE(tokens.empty());
        ASSERT_LE(tokens.size(), c.config.support);
        EXPECT_EQ(std::set<Token>(tokens.begin(), tokens.end()).size(), tokens.size()) << "distinct tokens";
        const auto at = std::find(tokens.begin(), tokens.end(), out[i]);
        ASSERT_NE(at, tokens.end()) << "the support holds the draft";
        EXPECT_GT(p[static_cast<std::size_t>(at - tokens.begin())], 0.0f);
        EXPECT_NEAR(std::accumulate(p.begin(), p.end(), 0.0), 1.0, 1e-5);
        draft.row(prefix, row);
        const auto expected = reference_q(row, c.config);
        ASSERT_EQ(expected.size(), tokens.size());
        for (std::size_t j = 0; j < tokens.size(); ++j) {
          EXPECT_EQ(tokens[j], expected[j].first) << "support entry " << j;
          EXPECT_NEAR(p[j], expected[j].second, 1e-6) << "support entry " << j;
        }
        // The draw: position_uniform at the draft's absolute position, on the drafter's stream.
        const double u = position_uniform(c.config.sampling.seed, prefix.size(), std::uint64_t{1} << 32);
        double cumulative = 0.0;
        Token drawn = expected.back().first;
        for (const auto& [token, probability] : expected) {
          cumulative += probability;
          if (u < cumulative) {
            drawn = token;
            break;
          }
        }
        EXPECT_EQ(out[i], drawn) << "draft " << i << ", u = " << u;
      }
      EXPECT_LE(probabilities[i], i == 0 ? 1.0f : probabilities[i - 1]) << "estimates never rise";
      EXPECT_GE(probabilities[i], 0.0f);
      prefix.push_back(out[i]);
    }
  }
}

/// Upper quantile of chi-square with `df` degrees of freedom at significance 1e-4 (z = 3.719),
/// by the Wilson-Hilferty approximation.
[[nodiscard]] double chi_square_critical(std::size_t df) {
  const double k = static_cast<double>(df);
  const double c = 2.0 / (9.0 * k);
  return k * std::pow(1.0 - c + 3.719 * std::sqrt(c), 3.0);
}

TEST(ModelDrafter, DrawsFollowQ) {
  // Per configuration, the first two drafts after a fixed context over 20000 seeds: the first
  // against its q, and the second, after the first draft's most frequent value, against its q.
  constexpr std::size_t kRuns = 20000;
  const std::vector<ModelDraftConfig> configs = {
      {.max_drafts = 2, .sampling = {.temperature = 1.0f}, .support = 32},
      {.max_drafts = 2, .sampling = {.temperature = 0.7f}, .support = 5},
      {.max_drafts = 2, .sampling = {.temperature = 1.5f, .top_k = 6}, .support = 32},
      {.max_drafts = 2, .sampling = {.temperature = 1.0f, .top_p = 0.8f}, .support = 16},
      {.max_drafts = 2, .sampling = {.temperature = 1.2f, .min_p = 0.1f}, .support = 8},
  };
  const std::vector<Token> prompt = {3, 1, 4, 1, 5};
  for (const ModelDraftConfig& base : configs) {
    SCOPED_TRACE("T=" + std::to_string(base.sampling.temperature) + " top_k=" + std::to_string(base.sampling.top_k) +
                 " top_p=" + std::to_string(base.sampling.top_p) + " min_p=" + std::to_string(base.sampling.min_p) +
                 " support=" + std::to_string(base.support));
    RuleLogitsModel model(HashRule{.vocab = 12, .context = 2, .seed = 5}, 12, 77, 2.0f, 0.5f, 4);
    ModelDrafter drafter(model, 12, base);
    drafter.update(prompt);
    std::vector<std::size_t> first(12), second(12);
    std::vector<std::vector<std::size_t>> second_after(12, std::vector<std::size_t>(12));
    std::vector<float> q_first(12), estimate(2);
    std::vector<std::vector<float>> q_second(12, std::vector<float>(12));
    DraftDistributions q;
    std::vector<Token> out(2);
    for (std::uint64_t seed = 0; seed < kRuns; ++seed) {
      ModelDraftConfig config = base;
      config.sampling.seed = seed;
      drafter.set_sampling(config.sampling);
      ASSERT_EQ(drafter.predict(out, estimate, q), 2u);
      ++first[out[0]];
      ++second_after[out[0]][out[1]];
      for (std::size_t e = 0; e < 2; ++e) {
        std::vector<float>& into = e == 0 ? q_first : q_second[out[0]];
        std::fill(into.begin(), into.end(), 0.0f);
        for (std::size_t j = 0; j < q.tokens(e).size(); ++j) into[q.tokens(e)[j]] = q.probabilities(e)[j];
      }
    }
    const auto test = [](const std::vector<std::size_t>& counts, const std::vector<float>& p) {
      const double runs = static_cast<double>(std::accumulate(counts.begin(), counts.end(), std::size_t{0}));
      double statistic = 0.0;
      std::size_t cells = 0;
      // Cells expected fewer than 5 times are pooled, so the chi-square approximation holds.
      double pooled_expected = 0.0;
      double pooled_count = 0.0;
      const auto add = [&](double count, double expected) {
        const double d = count - expected;
        statistic += d * d / expected;
        ++cells;
      };
      for (std::size_t t = 0; t < counts.size(); ++t) {
        if (p[t] == 0.0f) {
          EXPECT_EQ(counts[t], 0u) << "token " << t << " is outside q";
          continue;
        }
        const double expected = p[t] * runs;
        if (expected < 5.0) {
          pooled_expected += expected;
          pooled_count += static_cast<double>(counts[t]);
        } else {
          add(static_cast<double>(counts[t]), expected);
        }
      }
      if (pooled_expected >= 5.0) add(pooled_count, pooled_expected);
      std::printf("  chi-square %.2f with %zu cells of %.0f draws\n", statistic, cells, runs);
      if (cells > 1) {
        EXPECT_LT(statistic, chi_square_critical(cells - 1)) << cells << " cells";
      }
    };
    test(first, q_first);
    const std::size_t mode = static_cast<std::size_t>(std::max_element(first.begin(), first.end()) - first.begin());
    test(second_after[mode], q_second[mode]);
  }
}

// ---------------------------------------------------------------------------------------------
// The draft model's cache

TEST(ModelDrafter, DraftModelHoldsTheAcceptedSequenceAfterAnyPasses) {
  // Driven by hand like a decoder, with accepted prefixes, rejections, repeated predicts, single
  // tokens and resets: after every predict the draft model holds the observed sequence and the
  // drafts but the last, and the drafts are those of a fresh drafter fed the sequence at once.
  std::mt19937_64 rng(2905);
  const auto pick = [&rng](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  std::vector<Token> out(8), fresh_out(8);
  std::vector<float> probabilities(8);
  for (int trial = 0; trial < 200; ++trial) {
    const Case c = random_case(rng, trial % 2 == 1);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + c.describe);
    RuleLogitsModel draft = draft_model(c);
    ModelDrafter drafter(draft, c.vocab, c.config);
    std::vector<Token> sequence = c.prompt;
    drafter.update(c.prompt);
    for (int step = 0; step < 40; ++step) {
      const std::size_t room = pick(0, out.size());
      const std::size_t n = drafter.predict(std::span<Token>(out).first(room), probabilities);
      ASSERT_EQ(n, sequence.empty() ? 0 : std::min(room, c.config.max_drafts));
      ASSERT_TRUE(std::equal(drafter.sequence().begin(), drafter.sequence().end(), sequence.begin(), sequence.end()));
      if (n > 0) {
        std::vector<Token> held = sequence;
        held.insert(held.end(), out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n - 1));
        ASSERT_EQ(draft.history(), held);
        RuleLogitsModel fresh_model = draft_model(c);
        ModelDrafter fresh(fresh_model, c.vocab, c.config);
        fresh.update(sequence);
        ASSERT_EQ(fresh.predict(std::span<Token>(fresh_out).first(room)), n);
        ASSERT_TRUE(std::equal(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n), fresh_out.begin()));
      }
      switch (pick(0, 5)) {
        case 0: break;  // predict again
        case 1: {       // a token by itself
          const Token t = static_cast<Token>(pick(0, c.vocab - 1));
          drafter.update(t);
          sequence.push_back(t);
          break;
        }
        case 2:
          if (pick(0, 4) == 0) {
            drafter.reset();
            sequence.clear();
          }
          [[fallthrough]];
        default: {  // a pass: some drafts accepted, then a token of the target's
          const std::size_t accepted = pick(0, n);
          std::vector<Token> emitted(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(accepted));
          emitted.push_back(static_cast<Token>(pick(0, c.vocab - 1)));
          if (sequence.empty()) emitted = c.prompt;
          drafter.update(emitted);
          sequence.insert(sequence.end(), emitted.begin(), emitted.end());
        }
      }
    }
    EXPECT_TRUE(draft.violations().empty()) << draft.violations().front();
  }
}

TEST(ModelDrafter, ContinuationsAreTheDraftsThatFollowTheGivenTokens) {
  // Continuing another drafter's drafts: the draft model then holds the sequence, the given
  // drafts and the continuation but its last draft; the continuation is what a fresh drafter fed
  // the sequence and the given drafts predicts (tokens and q), and q leads with one-hot entries
  // for the given drafts. Passes in between accept random prefixes of given drafts and
  // continuation, so the cache is kept and rolled back as after predict().
  std::mt19937_64 rng(2906);
  const auto pick = [&rng](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  std::vector<Token> out(8), fresh_out(8);
  std::vector<float> probabilities(8), fresh_probabilities(8);
  DraftDistributions q, fresh_q;
  std::size_t continued = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const Case c = random_case(rng, trial % 2 == 1);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + c.describe);
    RuleLogitsModel draft = draft_model(c);
    ModelDrafter drafter(draft, c.vocab, c.config);
    std::vector<Token> sequence = c.prompt;
    drafter.update(c.prompt);
    // What the draft model holds of the sequence, and the drafts after it: a call feeds only what it lacks.
    std::size_t cached = 0;
    std::vector<Token> ahead;
    for (int step = 0; step < 30; ++step) {
      std::vector<Token> given(pick(0, 6));
      for (Token& t : given) t = static_cast<Token>(pick(0, c.vocab - 1));
      const std::size_t room = pick(0, out.size());
      const std::size_t fed_before = draft.forwarded_tokens();
      const std::size_t n = drafter.continue_drafts(given, std::span<Token>(out).first(room), probabilities, &q);
      ASSERT_EQ(n, std::min(room, c.config.max_drafts));
      if (n > 0) {
        ++continued;
        EXPECT_EQ(draft.forwarded_tokens() - fed_before,
                  sequence.size() - std::min(cached, sequence.size() - 1) + given.size() + n - 1);
        cached = sequence.size();
        ahead = given;
        ahead.insert(ahead.end(), out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n - 1));
        std::vector<Token> held = sequence;
        held.insert(held.end(), given.begin(), given.end());
        RuleLogitsModel fresh_model = draft_model(c);
        ModelDrafter fresh(fresh_model, c.vocab, c.config);
        fresh.update(held);
        held.insert(held.end(), out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n - 1));
        ASSERT_EQ(draft.history(), held);
        ASSERT_EQ(q.size(), given.size() + n);
        for (std::size_t i = 0; i < given.size(); ++i) EXPECT_TRUE(q.tokens(i).empty()) << "given draft " << i;
        ASSERT_EQ(fresh.predict(std::span<Token>(fresh_out).first(room), fresh_probabilities, fresh_q), n);
        for (std::size_t i = 0; i < n; ++i) {
          ASSERT_EQ(out[i], fresh_out[i]) << "continuation draft " << i;
          const std::span<const Token> tokens = q.tokens(given.size() + i);
          const std::span<const float> p = q.probabilities(given.size() + i);
          ASSERT_TRUE(std::equal(tokens.begin(), tokens.end(), fresh_q.tokens(i).begin(), fresh_q.tokens(i).end()));
          ASSERT_TRUE(std::equal(p.begin(), p.end(), fresh_q.probabilities(i).begin(), fresh_q.probabilities(i).end()));
        }
      }
      // A pass: a prefix of the given drafts and the continuation accepted, then a token of the target's.
      std::vector<Token> drafts = given;
      drafts.insert(drafts.end(), out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n));
      std::vector<Token> emitted(drafts.begin(), drafts.begin() + static_cast<std::ptrdiff_t>(pick(0, drafts.size())));
      emitted.push_back(static_cast<Token>(pick(0, c.vocab - 1)));
      drafter.update(emitted);
      if (cached == sequence.size()) {
        std::size_t confirmed = 0;
        while (confirmed < ahead.size() && confirmed < emitted.size() && ahead[confirmed] == emitted[confirmed]) {
          ++confirmed;
        }
        cached += confirmed;
      }
      ahead.clear();
      sequence.insert(sequence.end(), emitted.begin(), emitted.end());
    }
    EXPECT_TRUE(draft.violations().empty()) << draft.violations().front();
  }
  EXPECT_GT(continued, 2000U);
}

TEST(ModelDrafter, AContinuationOfRejectedGivenDraftsTeachesTheEstimatesNothing) {
  // The estimates learn from a continuation only when its given drafts were all accepted: a
  // drafter whose continuation followed a rejected given draft estimates as one that never drafted.
  std::mt19937_64 rng(2907);
  std::vector<Token> out(8);
  std::vector<float> a(8), b(8);
  std::size_t compared = 0;
  for (int trial = 0; trial < 100; ++trial) {
    Case c = random_case(rng, false);
    c.config.max_drafts = 4;
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + c.describe);
    RuleLogitsModel model_a = draft_model(c), model_b = draft_model(c);
    ModelDrafter drafter(model_a, c.vocab, c.config), untouched(model_b, c.vocab, c.config);
    drafter.update(c.prompt);
    untouched.update(c.prompt);
    for (int step = 0; step < 20; ++step) {
      const Token given = static_cast<Token>(rng() % c.vocab);
      const std::size_t n = drafter.continue_drafts(std::span<const Token>(&given, 1), out, a);
      ASSERT_EQ(n, 4U);
      // The target's token replaces the given draft: the continuation was never verified.
      std::vector<Token> emitted{static_cast<Token>((given + 1) % c.vocab)};
      emitted.insert(emitted.end(), out.begin(), out.begin() + 2);  // tokens that would match drafts, were they read
      drafter.update(emitted);
      untouched.update(emitted);
    }
    ASSERT_EQ(drafter.predict(out, a), 4U);
    ASSERT_EQ(untouched.predict(out, b), 4U);
    for (std::size_t i = 0; i < 4; ++i) ASSERT_FLOAT_EQ(a[i], b[i]) << "estimate " << i;
    ++compared;
  }
  EXPECT_EQ(compared, 100U);
}

TEST(ModelDrafter, BadGivenDraftsAreRefusedNamingTheValueAndChangeNothing) {
  RuleLogitsModel draft(RepeatRule{4, 16}, 16, 1, 1.0f, 3.0f, 8);
  ModelDrafter drafter(draft, 16, {.max_drafts = 3});
  drafter.update(std::vector<Token>{1, 2, 3, 4, 1, 2});
  std::vector<Token> out(3);
  std::vector<float> probabilities(3);
  const std::vector<Token> bad = {3, 16};
  const std::string message = invalid_argument_message([&] { (void)drafter.continue_drafts(bad, out, probabilities); });
  EXPECT_NE(message.find("given draft 1 is token 16, outside the vocabulary of 16"), std::string::npos) << message;
  const std::vector<Token> many(kMaxDraftsPerPass + 1, 1);
  const std::string too_many =
      invalid_argument_message([&] { (void)drafter.continue_drafts(many, out, probabilities); });
  EXPECT_NE(too_many.find("1025 given drafts are more than kMaxDraftsPerPass = 1024"), std::string::npos) << too_many;
  EXPECT_EQ(draft.forward_calls(), 0U);
  // Still usable: the repeat continues after the given 3.
  const std::vector<Token> given = {3};
  ASSERT_EQ(drafter.continue_drafts(given, out, probabilities), 3U);
  EXPECT_EQ(out, (std::vector<Token>{4, 1, 2}));
}

TEST(ModelDrafter, APassCostsOneDraftForwardPerDraftedToken) {
  // Per pass of k drafts after a pass of k' drafts with a accepted: k forwards of the draft model,
  // k - 1 drafts and the tokens it lacked (the target's, and the last draft when all k' were
  // accepted); the first pass feeds the prompt and its first token too.
  std::mt19937_64 rng(2906);
  for (int trial = 0; trial < 200; ++trial) {
    Case c = random_case(rng, trial % 3 == 0);
    c.options.stop_tokens.clear();
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + c.describe);
    GreedyDecoding d(c);
    const GreedyModel& target = d.target;
    const RuleLogitsModel& draft = d.draft;
    std::size_t pass = 0, target_tokens = 0, draft_calls = 0, draft_tokens = 0;
    std::size_t last_k = 0, last_accepted = 0;
    bool checking = true;
    const std::size_t chunk = std::min(c.draft_batch, ModelDrafter<RuleLogitsModel>::kMaxFeedRows);
    d.decoder.generate(c.prompt, c.options, [&](std::span<const Token> emitted) {
      const std::size_t fed = target.forwarded_tokens() - target_tokens;
      const std::size_t calls = draft.forward_calls() - draft_calls;
      const std::size_t tokens = draft.forwarded_tokens() - draft_tokens;
      target_tokens = target.forwarded_tokens();
      draft_calls = draft.forward_calls();
      draft_tokens = draft.forwarded_tokens();
      if (pass++ == 0 || !checking) return true;  // the prefill
      const std::size_t k = fed - 1;
      if (k == 0) {
        EXPECT_EQ(calls, 0u);
        checking = false;  // the drafter skipped a pass: its catch-up is no longer one pass's
        return true;
      }
      if (pass == 2) {
        const std::size_t lacked = c.prompt.size() + 1;
        EXPECT_EQ(calls, (lacked + chunk - 1) / chunk + k - 1) << "pass " << pass;
        EXPECT_EQ(tokens, lacked + k - 1) << "pass " << pass;
      } else {
        // A draft model that takes one token a forward feeds the two it lacks in two.
        const std::size_t lacked = last_accepted == last_k ? 2 : 1;
        EXPECT_EQ(calls, (lacked + chunk - 1) / chunk + k - 1) << "pass " << pass;
        EXPECT_EQ(tokens, lacked + k - 1) << "pass " << pass;
      }
      last_k = k;
      last_accepted = emitted.size() - 1;
      return true;
    });
    EXPECT_TRUE(draft.violations().empty()) << draft.violations().front();
  }
}

// ---------------------------------------------------------------------------------------------
// Estimates

TEST(ModelDrafter, EstimatesLearnHowOftenTheDraftsAreAccepted) {
  // A draft model equal to the target: the estimates rise to near 1. One that is always wrong
  // (its argmax is the target's token plus 1): they fall to near 0.
  for (const bool right : {true, false}) {
    SCOPED_TRACE(right ? "right" : "wrong");
    const InductionRule rule{.vocab = 24};
    const NextTokenRule draft_rule = [rule, right](std::span<const Token> prefix) {
      return static_cast<Token>((rule(prefix) + (right ? 0 : 1)) % 24);
    };
    RuleLogitsModel draft(draft_rule, 24, 3, 1.0f, 2.5f, 8);
    ModelDrafter drafter(draft, 24, {.max_drafts = 3});
    GreedyModel target(rule, 8);
    SpeculativeDecoder decoder(target, drafter);
    const std::vector<Token> prompt = {1, 2, 3, 4, 5, 6, 7};
    DecodeOptions options;
    options.max_new_tokens = 200;
    std::vector<float> first_estimates;
    std::vector<Token> out(3);
    std::vector<float> probabilities(3);
    decoder.generate(prompt, options, [&](std::span<const Token>) {
      if (drafter.sequence().size() > prompt.size()) {
        EXPECT_EQ(drafter.predict(out, probabilities), 3u);
        first_estimates.push_back(probabilities[0]);
      }
      return true;
    });
    ASSERT_GT(first_estimates.size(), 40u);
    const auto mean = [](auto from, auto to) { return std::accumulate(from, to, 0.0) / static_cast<double>(to - from); };
    const double start = mean(first_estimates.begin(), first_estimates.begin() + 3);
    const double end = mean(first_estimates.end() - 10, first_estimates.end());
    if (right) {
      EXPECT_GT(end, 0.85) << "from " << start;
      EXPECT_GT(end, start);
    } else {
      EXPECT_LT(end, 0.15) << "from " << start;
      EXPECT_LT(end, start);
    }
  }
}

TEST(ModelDrafter, TheGateStopsAtTheFirstDraftBelowItsProbability) {
  // Against the same drafter without a gate: the same drafts up to the first whose running
  // estimate is below min_probability, none from there on, and the draft model holds them all.
  std::mt19937_64 rng(2908);
  std::vector<Token> out(8), open_out(8);
  std::vector<float> probabilities(8), open_probabilities(8);
  DraftDistributions q;
  std::size_t stopped_early = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Case c = random_case(rng, trial % 2 == 0);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + c.describe);
    RuleLogitsModel open_model = draft_model(c);
    ModelDrafter open(open_model, c.vocab, c.config);
    open.update(c.prompt);
    const std::size_t k = open.predict(open_out, open_probabilities);
    c.config.min_probability = static_cast<float>(std::uniform_real_distribution<double>(0.0, 0.6)(rng));
    RuleLogitsModel gated_model = draft_model(c);
    ModelDrafter gated(gated_model, c.vocab, c.config);
    gated.update(c.prompt);
    const std::size_t n = gated.predict(out, probabilities, q);
    std::size_t expected = 0;
    while (expected < k && open_probabilities[expected] >= c.config.min_probability) ++expected;
    ASSERT_EQ(n, expected);
    ASSERT_EQ(q.size(), n);
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(out[i], open_out[i]);
      EXPECT_EQ(probabilities[i], open_probabilities[i]);
    }
    std::vector<Token> held = c.prompt;
    held.insert(held.end(), out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n < k ? n : n - 1));
    EXPECT_EQ(gated_model.history(), held);
    stopped_early += n < k ? 1 : 0;
  }
  EXPECT_GT(stopped_early, 50u);
}

// ---------------------------------------------------------------------------------------------
// Faults and allocations

TEST(ModelDrafter, ModelExceptionsPropagateAndTheDrafterRecovers) {
  std::mt19937_64 rng(2907);
  std::vector<Token> out(8), fresh_out(8);
  for (int trial = 0; trial < 100; ++trial) {
    const Case c = random_case(rng, trial % 2 == 0);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + c.describe);
    RuleLogitsModel draft = draft_model(c);
    {
      // A drafter before it left tokens in the model, which this one does not assume it holds.
      ModelDrafter earlier(draft, c.vocab, c.config);
      earlier.update(std::vector<Token>(1 + trial % 7, 1));
      (void)earlier.predict(out);
    }
    ModelDrafter drafter(draft, c.vocab, c.config);
    std::vector<Token> sequence = c.prompt;
    drafter.update(c.prompt);
    if (trial % 3 == 1) {
      // The first forward fails, having taken the prompt's first tokens in.
      draft.fail_forward_at(1, FaultTiming::after_change);
      EXPECT_THROW((void)drafter.predict(out), ModelFault);
    }
    std::size_t n = drafter.predict(out);
    sequence.insert(sequence.end(), out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n / 2));
    sequence.push_back(0);
    drafter.update(std::span<const Token>(sequence).subspan(c.prompt.size()));
    draft.fail_forward_at(1 + trial % std::max<std::size_t>(n, 1),
                          trial % 4 < 2 ? FaultTiming::before_change : FaultTiming::after_change);
    if (trial % 2 == 0 && n > 1) {
      EXPECT_THROW((void)drafter.predict(out), ModelFault);
    } else {
      try {
        (void)drafter.predict(out);  // the fault may come after the drafts, or not at all
      } catch (const ModelFault&) {
      }
    }
    draft.fail_forward_at(0);
    if (trial % 3 == 0) {
      drafter.reset();
      drafter.update(sequence);
    }
    n = drafter.predict(out);
    RuleLogitsModel fresh_model = draft_model(c);
    ModelDrafter fresh(fresh_model, c.vocab, c.config);
    fresh.update(sequence);
    ASSERT_EQ(fresh.predict(fresh_out), n);
    EXPECT_TRUE(std::equal(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n), fresh_out.begin()));
    std::vector<Token> held = sequence;
    held.insert(held.end(), out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n - 1));
    EXPECT_EQ(draft.history(), held);
    EXPECT_TRUE(draft.violations().empty()) << draft.violations().front();
  }
}

TEST(ModelDrafter, BadLogitsThrowNamingTokenAndPosition) {
  RuleLogitsModel draft(AffineRule{}, 7, 0, 1.0f, 3.0f, 4);
  draft.nan_after(4, 5);
  ModelDrafter drafter(draft, 7, {.max_drafts = 3});
  drafter.update(std::vector<Token>{1, 2, 3});
  std::vector<Token> out(3);
  const std::string what = message_of<std::domain_error>([&] { (void)drafter.predict(out); });
  EXPECT_NE(what.find("token 5"), std::string::npos) << what;
  EXPECT_NE(what.find("position 4"), std::string::npos) << what;
  draft.nan_after(std::numeric_limits<std::size_t>::max(), 0);
  EXPECT_EQ(drafter.predict(out), 3u);
}

TEST(ModelDrafter, UpdateAndPredictAllocateNothingOnceWarm) {
  for (const float temperature : {0.0f, 0.8f}) {
    SCOPED_TRACE("temperature " + std::to_string(temperature));
    RuleLogitsModel draft(InductionRule{.vocab = 40}, 40, 9, 1.5f, 2.0f, 16);
    draft.reserve(4096);
    ModelDrafter drafter(draft, 40, {.max_drafts = 6, .sampling = {.temperature = temperature, .top_p = 0.9f}});
    drafter.reserve(4096);
    DraftDistributions q;
    q.reserve(6);
    std::vector<Token> out(6);
    std::vector<float> probabilities(6);
    std::mt19937_64 rng(7);
    const auto pass = [&] { random_pass(drafter, out, probabilities, q, rng, 40); };
    drafter.update(std::vector<Token>{1, 2, 3, 4});
    for (int i = 0; i < 50; ++i) pass();
    AllocationCounter counter;
    for (int i = 0; i < 200; ++i) pass();
    EXPECT_EQ(counter.count(), 0u);
  }
}

}  // namespace
}  // namespace ngramspec::test
