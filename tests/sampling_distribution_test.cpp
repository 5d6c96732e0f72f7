// Speculative sampling preserves the model's distribution, tested statistically without the
// seed trick: a 4-token model with known conditional probabilities, thousands of generations
// with independent seeds, and a chi-square test of the joint distribution of the first three
// generated tokens against the exact probabilities. Plain and speculative decoding must pass;
// a verifier that accepts every draft must fail the same test, which shows the test can see a bias.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ngramspec/ngramspec.hpp"
#include "support/chi_square.hpp"
#include "support/mock_models.hpp"
#include "support/test_drafters.hpp"
#include "support/tree_walk.hpp"

namespace ngramspec::test {
namespace {

constexpr std::size_t kVocab = 4;
constexpr std::size_t kGenerated = 3;                     // tokens whose joint distribution is tested
constexpr std::size_t kCells = kVocab * kVocab * kVocab;  // kVocab ^ kGenerated
constexpr std::size_t kRuns = 20000;                      // generations per test, seeds 0 .. kRuns - 1
constexpr double kSignificance = kChiSquareSignificance;  // support/chi_square.hpp: 0.001
const std::vector<Token> kPrompt = {1, 2};

/// p(t | a, b): the next token's probability after the two tokens a, b. Weights 2 .. 6 make
/// every probability lie in [2/17, 2/5], and every joint cell expects at least 41 of kRuns.
[[nodiscard]] double weight(Token a, Token b, Token t) {
  return 2.0 + static_cast<double>((7 * a + 3 * b + 5 * t + a * t) % 5);
}
[[nodiscard]] double probability(Token a, Token b, Token t) {
  double total = 0.0;
  for (Token u = 0; u < kVocab; ++u) total += weight(a, b, u);
  return weight(a, b, t) / total;
}

/// A LogitsModel with logits log p(t | last two tokens).
class ConditionalModel {
 public:
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<float> logits) {
    history_.resize(pos);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      history_.push_back(tokens[i]);
      // The row after the first token (never sampled from here) pretends a token 0 before it.
      const Token a = history_.size() >= 2 ? history_[history_.size() - 2] : 0;
      const Token b = history_.back();
      for (Token t = 0; t < kVocab; ++t) logits[i * kVocab + t] = static_cast<float>(std::log(probability(a, b, t)));
    }
  }
  void rollback(std::size_t pos) { history_.resize(pos); }
  [[nodiscard]] std::size_t max_batch() const noexcept { return 8; }
  [[nodiscard]] std::size_t vocab_size() const noexcept { return kVocab; }

 private:
  std::vector<Token> history_;
};

/// A sampling TargetModel whose draws are NOT position-keyed: every row consumes the next
/// uniform of one sequential generator, rejected rows included. Speculative and plain
/// decoding then see different draws for the same seed, so only the sample-then-compare rule
/// itself can keep the distribution.
class StreamSamplingModel {
 public:
  explicit StreamSamplingModel(const SamplingOptions& options) : sampler_(options, kVocab), logits_(8 * kVocab) {}
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) {
    model_.forward(pos, tokens, std::span<float>(logits_).first(tokens.size() * kVocab));
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
      next[i] = sampler_.sample(std::span<const float>(logits_).subspan(i * kVocab, kVocab), u);
    }
  }
  void rollback(std::size_t pos) { model_.rollback(pos); }
  [[nodiscard]] std::size_t max_batch() const noexcept { return model_.max_batch(); }
  void set_seed(std::uint64_t seed) { rng_.seed(seed); }

 private:
  ConditionalModel model_;
  TokenSampler sampler_;
  std::vector<float> logits_;
  std::mt19937_64 rng_;
};

static_assert(LogitsModel<ConditionalModel>);
static_assert(TargetModel<StreamSamplingModel>);

/// The conditional distribution after sampling options: p^(1/T) over the top_k most likely
/// tokens (ties to the lower id), renormalized. An independent restatement of the sampler's
/// rule for temperature and top-k, to test the filters' arithmetic too.
struct Conditional {
  float temperature = 1.0f;
  std::size_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  [[nodiscard]] std::array<double, kVocab> operator()(Token a, Token b) const {
    std::array<Token, kVocab> order = {0, 1, 2, 3};
    std::sort(order.begin(), order.end(), [&](Token x, Token y) {
      return weight(a, b, x) != weight(a, b, y) ? weight(a, b, x) > weight(a, b, y) : x < y;
    });
    // Weights relative to the most likely token's, after the temperature.
    std::array<double, kVocab> w{};
    for (Token t = 0; t < kVocab; ++t) {
      w[t] = std::pow(probability(a, b, t) / probability(a, b, order[0]), 1.0 / temperature);
    }
    std::size_t kept = top_k == 0 ? kVocab : std::min(top_k, kVocab);
    if (top_p < 1.0f) {
      double total = 0.0;
      for (std::size_t i = 0; i < kept; ++i) total += w[order[i]];
      double cumulative = 0.0;
      std::size_t keep = 0;
      while (keep < kept && cumulative < top_p * total) cumulative += w[order[keep++]];
      kept = std::max<std::size_t>(keep, 1);
    }
    std::array<double, kVocab> q{};
    double total = 0.0;
    for (std::size_t i = 0; i < kept; ++i) {
      if (w[order[i]] < min_p) continue;
      q[order[i]] = w[order[i]];
      total += q[order[i]];
    }
    for (double& x : q) x /= total;
    return q;
  }
};

/// Exact probability of each joint cell (t1, t2, t3), indexed t1 * 16 + t2 * 4 + t3.
[[nodiscard]] std::array<double, kCells> exact_joint(const Conditional& conditional) {
  std::array<double, kCells> joint{};
  for (Token t1 = 0; t1 < kVocab; ++t1) {
    for (Token t2 = 0; t2 < kVocab; ++t2) {
      for (Token t3 = 0; t3 < kVocab; ++t3) {
        joint[(t1 * kVocab + t2) * kVocab + t3] =
            conditional(kPrompt[0], kPrompt[1])[t1] * conditional(kPrompt[1], t1)[t2] * conditional(t1, t2)[t3];
      }
    }
  }
  return joint;
}

struct ChiSquare {
  double statistic = 0.0;
  double critical = 0.0;
  std::size_t df = 0;
  std::size_t impossible = 0;  ///< generations that fell into a cell of probability 0
};

/// Pearson's chi-square of the observed cell counts against `exact`, over the cells of
/// nonzero probability.
[[nodiscard]] ChiSquare chi_square(const std::array<std::size_t, kCells>& counts,
                                   const std::array<double, kCells>& exact) {
  ChiSquare r;
  std::size_t cells = 0;
  for (std::size_t i = 0; i < kCells; ++i) {
    if (exact[i] == 0.0) {
      r.impossible += counts[i];
      continue;
    }
    const double expected = exact[i] * static_cast<double>(kRuns);
    EXPECT_GE(expected, 5.0) << "cell " << i << ": too few runs for the chi-square approximation";
    const double d = static_cast<double>(counts[i]) - expected;
    r.statistic += d * d / expected;
    ++cells;
  }
  r.df = cells - 1;
  r.critical = chi_square_critical(r.df);
  // Printed for the log, so a drift towards the critical value is visible before it fails.
  std::printf("  chi-square %.2f with %zu df (critical value %.2f)\n", r.statistic, r.df, r.critical);
  return r;
}

[[nodiscard]] std::string describe(const ChiSquare& r) {
  return "chi-square " + std::to_string(r.statistic) + " with " + std::to_string(r.df) + " df, critical value " +
         std::to_string(r.critical) + " at significance " + std::to_string(kSignificance);
}

/// Runs `generate(seed)` for seeds 0 .. kRuns - 1 and counts the first kGenerated tokens.
template <class Generate>
[[nodiscard]] std::array<std::size_t, kCells> count_cells(Generate&& generate) {
  std::array<std::size_t, kCells> counts{};
  for (std::uint64_t seed = 0; seed < kRuns; ++seed) {
    const std::vector<Token> tokens = generate(seed);
    EXPECT_GE(tokens.size(), kGenerated);
    if (tokens.size() < kGenerated) return counts;
    ++counts[(tokens[0] * kVocab + tokens[1]) * kVocab + tokens[2]];
  }
  return counts;
}

/// The most likely next token: drafts that are right about as often as that token's
/// probability (0.25 .. 0.4 here), so passes both accept and reject.
[[nodiscard]] NextTokenRule likely_rule() {
  return [](std::span<const Token> prefix) {
    const Token a = prefix[prefix.size() - 2];
    const Token b = prefix.back();
    Token best = 0;
    for (Token t = 1; t < kVocab; ++t) {
      if (weight(a, b, t) > weight(a, b, best)) best = t;
    }
    return best;
  };
}

// Four tokens, so the first verify pass carries two drafts and the chain's second draft
// decides the third token.
const DecodeOptions kDecode = [] {
  DecodeOptions o;
  o.max_new_tokens = kGenerated + 1;
  return o;
}();

TEST(ChiSquareCritical, WilsonHilfertyMatchesTables) {
  // Upper 0.001 critical values from standard chi-square tables (e.g. the NIST/SEMATECH
  // e-Handbook of Statistical Methods, section 1.3.6.7.4). The approximation lands within
  // 0.6% and slightly above them, so the tests below are a hair more lenient than 0.001.
  const std::pair<std::size_t, double> table[] = {{10, 29.588}, {30, 59.703}, {60, 99.607}, {100, 149.449}};
  for (const auto& [df, value] : table) {
    EXPECT_NEAR(chi_square_critical(df), value, value * 0.006) << df << " df";
    EXPECT_GE(chi_square_critical(df), value) << df << " df";
  }
}

TEST(SamplingDistribution, ExactJointIsADistribution) {
  for (const Conditional c : {Conditional{}, Conditional{0.7f, 3}}) {
    const std::array<double, kCells> joint = exact_joint(c);
    double total = 0.0;
    for (const double p : joint) total += p;
    EXPECT_NEAR(total, 1.0, 1e-12);
  }
}

TEST(SamplingDistribution, PlainSamplingModelMatchesTheModel) {
  ConditionalModel model;
  SamplingModel<ConditionalModel> sampling(model, SamplingOptions{.temperature = 1.0f});
  SpeculativeDecoder decoder(sampling, SilentDrafter{});
  DecodeOptions plain = kDecode;
  plain.speculate = false;
  const ChiSquare r = chi_square(count_cells([&](std::uint64_t seed) {
                                   sampling.set_options(SamplingOptions{.temperature = 1.0f, .seed = seed});
                                   return decoder.generate(kPrompt, plain).tokens;
                                 }),
                                 exact_joint(Conditional{}));
  EXPECT_LT(r.statistic, r.critical) << describe(r);
}

TEST(SamplingDistribution, SpeculativeSamplingModelMatchesTheModel) {
  ConditionalModel model;
  SamplingModel<ConditionalModel> sampling(model, SamplingOptions{.temperature = 1.0f});
  SpeculativeDecoder decoder(sampling, OracleDrafter(likely_rule(), 2));
  DecodeStats total;
  const ChiSquare r = chi_square(count_cells([&](std::uint64_t seed) {
                                   sampling.set_options(SamplingOptions{.temperature = 1.0f, .seed = seed});
                                   DecodeResult result = decoder.generate(kPrompt, kDecode);
                                   total.drafted += result.stats.drafted;
                                   total.accepted += result.stats.accepted;
                                   return result.tokens;
                                 }),
                                 exact_joint(Conditional{}));
  EXPECT_LT(r.statistic, r.critical) << describe(r);
  EXPECT_GT(total.accepted, kRuns / 4);
  EXPECT_GT(total.drafted - total.accepted, kRuns / 4);
}

TEST(SamplingDistribution, SpeculativeWithSequentialDrawsMatchesTheModel) {
  // No seed trick: draws are consumed in order, rejected rows included, so speculative and
  // plain outputs differ for the same seed; both must still follow the model.
  StreamSamplingModel plain_model(SamplingOptions{.temperature = 1.0f});
  StreamSamplingModel spec_model(SamplingOptions{.temperature = 1.0f});
  SpeculativeDecoder plain_decoder(plain_model, SilentDrafter{});
  SpeculativeDecoder spec_decoder(spec_model, OracleDrafter(likely_rule(), 2));
  DecodeOptions plain = kDecode;
  plain.speculate = false;
  std::vector<std::vector<Token>> plain_outputs;
  plain_outputs.reserve(kRuns);
  const ChiSquare rp = chi_square(count_cells([&](std::uint64_t seed) {
                                    plain_model.set_seed(seed);
                                    plain_outputs.push_back(plain_decoder.generate(kPrompt, plain).tokens);
                                    return plain_outputs.back();
                                  }),
                                  exact_joint(Conditional{}));
  EXPECT_LT(rp.statistic, rp.critical) << "plain: " << describe(rp);
  std::size_t differ = 0;
  const ChiSquare rs = chi_square(count_cells([&](std::uint64_t seed) {
                                    spec_model.set_seed(seed);
                                    std::vector<Token> tokens = spec_decoder.generate(kPrompt, kDecode).tokens;
                                    differ += tokens != plain_outputs[seed];
                                    return tokens;
                                  }),
                                  exact_joint(Conditional{}));
  EXPECT_LT(rs.statistic, rs.critical) << "speculative: " << describe(rs);
  EXPECT_GT(differ, kRuns / 10) << "sequential draws should make seeds give different outputs";
}

TEST(SamplingDistribution, FiltersGiveTheFilteredDistributionUnderSpeculation) {
  const SamplingOptions filtered{.temperature = 0.7f, .top_k = 3};
  const std::array<double, kCells> exact = exact_joint(Conditional{filtered.temperature, filtered.top_k});
  StreamSamplingModel stream(filtered);
  SpeculativeDecoder stream_decoder(stream, OracleDrafter(likely_rule(), 2));
  const ChiSquare rs = chi_square(count_cells([&](std::uint64_t seed) {
                                    stream.set_seed(seed);
                                    return stream_decoder.generate(kPrompt, kDecode).tokens;
                                  }),
                                  exact);
  EXPECT_LT(rs.statistic, rs.critical) << "sequential draws: " << describe(rs);
  EXPECT_EQ(rs.impossible, 0U);

  ConditionalModel model;
  SamplingModel<ConditionalModel> sampling(model, filtered);
  SpeculativeDecoder decoder(sampling, OracleDrafter(likely_rule(), 2));
  const ChiSquare rk = chi_square(count_cells([&](std::uint64_t seed) {
                                    SamplingOptions o = filtered;
                                    o.seed = seed;
                                    sampling.set_options(o);
                                    return decoder.generate(kPrompt, kDecode).tokens;
                                  }),
                                  exact);
  EXPECT_LT(rk.statistic, rk.critical) << "position-keyed draws: " << describe(rk);
  EXPECT_EQ(rk.impossible, 0U);
}

/// A deliberately wrong verifier: it emits every draft whatever the model sampled, then the
/// model's token after the last draft. Returns the first kGenerated tokens after the prompt.
template <TargetModel M, Drafter D>
[[nodiscard]] std::vector<Token> generate_accepting_every_draft(M& model, D& drafter) {
  model.rollback(0);
  drafter.reset();
  drafter.update(std::span<const Token>(kPrompt));
  std::vector<Token> next(kPrompt.size());
  model.forward(0, kPrompt, next);
  std::vector<Token> out = {next.back()};
  drafter.update(out.back());
  std::array<Token, 2> drafts{};
  while (out.size() < kGenerated) {
    const std::size_t n = std::min<std::size_t>(drafter.predict(drafts), drafts.size());
    std::vector<Token> fed = {out.back()};
    fed.insert(fed.end(), drafts.begin(), drafts.begin() + static_cast<std::ptrdiff_t>(n));
    next.resize(fed.size());
    model.forward(kPrompt.size() + out.size() - 1, fed, next);
    const std::size_t before = out.size();
    out.insert(out.end(), drafts.begin(), drafts.begin() + static_cast<std::ptrdiff_t>(n));
    out.push_back(next[n]);
    drafter.update(std::span<const Token>(out).subspan(before));
  }
  return out;
}

/// ConditionalModel's logits for trees: row i from the last two tokens of node i's path.
class TreeConditionalModel {
 public:
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<float> logits) {
    history_.resize(pos);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      history_.push_back(tokens[i]);
      fill(history_[history_.size() - (history_.size() >= 2 ? 2 : 1)], history_.back(), history_.size() >= 2,
           logits.subspan(i * kVocab, kVocab));
    }
  }
  void forward_tree(std::size_t pos, std::span<const Token> tokens, std::span<const std::int32_t> parents,
                    std::span<float> logits) {
    history_.resize(pos);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const std::int32_t up = parents[i];
      const bool has_before = up != kTreeRoot || !history_.empty();
      const Token before = up != kTreeRoot ? tokens[static_cast<std::size_t>(up)] : has_before ? history_.back() : 0;
      fill(before, tokens[i], has_before, logits.subspan(i * kVocab, kVocab));
    }
    history_.insert(history_.end(), tokens.begin(), tokens.end());
  }
  void keep(std::size_t pos, std::span<const std::size_t> kept) {
    for (std::size_t j = 0; j < kept.size(); ++j) history_[pos + j] = history_[pos + kept[j]];
    history_.resize(pos + kept.size());
  }
  void rollback(std::size_t pos) { history_.resize(pos); }
  [[nodiscard]] std::size_t max_batch() const noexcept { return 8; }
  [[nodiscard]] std::size_t vocab_size() const noexcept { return kVocab; }

 private:
  // The row after the first token (never sampled from here) pretends a token 0 before it.
  static void fill(Token a, Token b, bool has_a, std::span<float> row) {
    for (Token t = 0; t < kVocab; ++t) row[t] = static_cast<float>(std::log(probability(has_a ? a : 0, b, t)));
  }
  std::vector<Token> history_;
};

/// TreeConditionalModel sampled with one sequential generator, every row of a tree pass
/// consuming a draw (rejected branches included), as StreamSamplingModel does for chains.
class StreamTreeSamplingModel {
 public:
  explicit StreamTreeSamplingModel(const SamplingOptions& options) : sampler_(options, kVocab), logits_(8 * kVocab) {}
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) {
    model_.forward(pos, tokens, std::span<float>(logits_).first(tokens.size() * kVocab));
    draw(tokens.size(), next);
  }
  void forward_tree(std::size_t pos, std::span<const Token> tokens, std::span<const std::int32_t> parents,
                    std::span<Token> next) {
    model_.forward_tree(pos, tokens, parents, std::span<float>(logits_).first(tokens.size() * kVocab));
    draw(tokens.size(), next);
  }
  void keep(std::size_t pos, std::span<const std::size_t> kept) { model_.keep(pos, kept); }
  void rollback(std::size_t pos) { model_.rollback(pos); }
  [[nodiscard]] std::size_t max_batch() const noexcept { return model_.max_batch(); }
  void set_seed(std::uint64_t seed) { rng_.seed(seed); }

 private:
  void draw(std::size_t n, std::span<Token> next) {
    for (std::size_t i = 0; i < n; ++i) {
      const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
      next[i] = sampler_.sample(std::span<const float>(logits_).subspan(i * kVocab, kVocab), u);
    }
  }
  TreeConditionalModel model_;
  TokenSampler sampler_;
  std::vector<float> logits_;
  std::mt19937_64 rng_;
};

/// Drafts a fixed tree from the two last tokens: the two likeliest tokens under the root and,
/// under each, its likeliest successor; right about as often as those tokens' probabilities,
/// so walks stop at every depth and on both branches.
class TwoBranchTreeDrafter : public ObservedSequence {
 public:
  [[nodiscard]] std::size_t predict(std::span<Token>) const noexcept { return 0; }
  std::size_t predict_tree(DraftTree& tree, std::size_t max_nodes, std::size_t max_depth, float = 0.0f) {
    tree.clear();
    if (seen().size() < 2 || max_nodes < 4 || max_depth < 2) return 0;
    const Token a = seen()[seen().size() - 2];
    const Token b = seen().back();
    const auto ranked = [](Token x, Token y) {
      std::array<Token, kVocab> order{0, 1, 2, 3};
      std::stable_sort(order.begin(), order.end(), [&](Token l, Token r) { return weight(x, y, l) > weight(x, y, r); });
      return order;
    };
    const std::array<Token, kVocab> first = ranked(a, b);
    for (std::size_t branch = 0; branch < 2; ++branch) {
      const std::size_t node = tree.add(kTreeRoot, first[branch], 0.3f);
      tree.add(static_cast<std::int32_t>(node), ranked(b, first[branch])[0], 0.3f);
    }
    return tree.size();
  }
  void observe_pass(const DraftTree&, std::span<const Token>, std::span<const Token>, std::span<const std::size_t>,
                    std::span<const Token>) noexcept {}
  [[nodiscard]] const TopKTable* top_k_table() const noexcept { return nullptr; }
};

static_assert(TreeTargetModel<StreamTreeSamplingModel>);
static_assert(TopKTreeModel<SamplingModel<TreeConditionalModel>>);
static_assert(TreeDraftingDrafter<TwoBranchTreeDrafter>);

const DecodeOptions kTreeDecode = [] {
  DecodeOptions o;
  o.max_new_tokens = kGenerated + 1;
  o.max_drafts = 4;
  return o;
}();

TEST(SamplingDistribution, TreeSamplingModelMatchesTheModel) {
  TreeConditionalModel model;
  SamplingModel<TreeConditionalModel> sampling(model, SamplingOptions{.temperature = 1.0f});
  SpeculativeDecoder decoder(sampling, TwoBranchTreeDrafter{});
  DecodeStats total;
  const ChiSquare r = chi_square(count_cells([&](std::uint64_t seed) {
                                   sampling.set_options(SamplingOptions{.temperature = 1.0f, .seed = seed});
                                   DecodeResult result = decoder.generate(kPrompt, kTreeDecode);
                                   total.drafted += result.stats.drafted;
                                   total.accepted += result.stats.accepted;
                                   return result.tokens;
                                 }),
                                 exact_joint(Conditional{}));
  EXPECT_LT(r.statistic, r.critical) << describe(r);
  EXPECT_GT(total.accepted, kRuns / 4);
}

TEST(SamplingDistribution, TreeWithSequentialDrawsMatchesTheModel) {
  // Every row of every tree pass consumes a draw: only walking to the child that equals the
  // sample, and emitting the sample where none does, can keep the distribution.
  StreamTreeSamplingModel stream(SamplingOptions{.temperature = 1.0f});
  SpeculativeDecoder decoder(stream, TwoBranchTreeDrafter{});
  std::size_t walked_into_a_node = 0;
  const ChiSquare r = chi_square(count_cells([&](std::uint64_t seed) {
                                   stream.set_seed(seed);
                                   DecodeResult result = decoder.generate(kPrompt, kTreeDecode);
                                   walked_into_a_node += result.stats.accepted > 0 ? 1 : 0;
                                   return result.tokens;
                                 }),
                                 exact_joint(Conditional{}));
  EXPECT_LT(r.statistic, r.critical) << describe(r);
  EXPECT_GT(walked_into_a_node, kRuns / 4);
}

TEST(SamplingDistribution, AcceptingEveryDraftFailsTheSameTest) {
  ConditionalModel model;
  SamplingModel<ConditionalModel> sampling(model, SamplingOptions{.temperature = 1.0f});
  OracleDrafter drafter(likely_rule(), 2);
  const ChiSquare r = chi_square(count_cells([&](std::uint64_t seed) {
                                   sampling.set_options(SamplingOptions{.temperature = 1.0f, .seed = seed});
                                   return generate_accepting_every_draft(sampling, drafter);
                                 }),
                                 exact_joint(Conditional{}));
  EXPECT_GT(r.statistic, r.critical) << describe(r);

  StreamSamplingModel stream(SamplingOptions{.temperature = 1.0f});
  OracleDrafter stream_drafter(likely_rule(), 2);
  const ChiSquare rs = chi_square(count_cells([&](std::uint64_t seed) {
                                    stream.set_seed(seed);
                                    return generate_accepting_every_draft(stream, stream_drafter);
                                  }),
                                  exact_joint(Conditional{}));
  EXPECT_GT(rs.statistic, rs.critical) << describe(rs);
}


// ---------------------------------------------------------------------------------------------
// Rejection sampling (SamplingMode::rejection): drafts drawn from a distribution q unlike the
// model's, verified against it, must still give the model's distribution, chains and trees,
// with and without the filters; a drafter that lies about q must fail the same test.

/// A draft distribution unlike the model's (weights 1 .. 4 from another formula) over the
/// `support` tokens it rates highest, normalized.
[[nodiscard]] std::array<double, kVocab> draft_q(Token a, Token b, std::size_t support) {
  std::array<double, kVocab> w{};
  for (Token t = 0; t < kVocab; ++t) w[t] = 1.0 + static_cast<double>((3 * a + 5 * b + 7 * t + b * t) % 4);
  std::array<Token, kVocab> order = {0, 1, 2, 3};
  std::stable_sort(order.begin(), order.end(), [&](Token x, Token y) { return w[x] > w[y]; });
  std::array<double, kVocab> q{};
  double total = 0.0;
  for (std::size_t i = 0; i < support; ++i) total += w[order[i]];
  for (std::size_t i = 0; i < support; ++i) q[order[i]] = w[order[i]] / total;
  return q;
}

/// What a drafter draws from after (a, b).
enum class DraftSource : std::uint8_t {
  unlike,  ///< draft_q over all four tokens
  narrow,  ///< draft_q over its two likeliest tokens: the model has mass q has not
  model,   ///< the model's own distribution under the options: every draft should pass
};

/// Draws a token from `q` (zero entries skipped) with `rng`, and pushes that q (or, when
/// `claim_uniform`, a uniform q it was not drawn from).
Token draw_and_push(const std::array<double, kVocab>& q, std::mt19937_64& rng, DraftDistributions& out,
                    bool claim_uniform = false) {
  std::array<Token, kVocab> tokens{};
  std::array<float, kVocab> mass{};
  std::size_t m = 0;
  for (Token t = 0; t < kVocab; ++t) {
    if (q[t] <= 0.0) continue;
    tokens[m] = t;
    mass[m++] = static_cast<float>(q[t]);
  }
  const double total = std::accumulate(mass.begin(), mass.begin() + static_cast<std::ptrdiff_t>(m), 0.0);
  const double target = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
  double cumulative = 0.0;
  Token x = tokens[m - 1];
  for (std::size_t i = 0; i < m; ++i) {
    cumulative += static_cast<double>(mass[i]);
    if (target < cumulative) {
      x = tokens[i];
      break;
    }
  }
  if (claim_uniform) {
    const std::array<Token, kVocab> all = {0, 1, 2, 3};
    const std::array<float, kVocab> flat = {0.25f, 0.25f, 0.25f, 0.25f};
    out.push(all, flat);
  } else {
    out.push(std::span<const Token>(tokens).first(m), std::span<const float>(mass).first(m));
  }
  return x;
}

/// Chains of up to two drafts, each drawn from its source given the two tokens before it, and
/// pushed with what it was drawn from (or, when lying, with a uniform q it was not drawn from).
class DrawingDrafter : public ObservedSequence {
 public:
  DrawingDrafter(DraftSource source, Conditional model, bool lie = false) : source_(source), model_(model), lie_(lie) {}
  void seed(std::uint64_t s) { rng_.seed(s * 0x9e3779b97f4a7c15ULL + 17); }
  [[nodiscard]] std::size_t predict(std::span<Token> out) const {
    std::array<float, 2> probabilities{};
    DraftDistributions q;
    return predict(out, probabilities, q);
  }
  [[nodiscard]] std::size_t predict(std::span<Token> out, std::span<float> probabilities) const {
    DraftDistributions q;
    return predict(out, probabilities, q);
  }
  std::size_t predict(std::span<Token> out, std::span<float> probabilities, DraftDistributions& q) const {
    q.clear();
    const std::size_t n = std::min<std::size_t>({out.size(), probabilities.size(), 2});
    if (seen().size() < 2) return 0;
    Token a = seen()[seen().size() - 2];
    Token b = seen().back();
    for (std::size_t i = 0; i < n; ++i) {
      out[i] = draw_and_push(distribution(a, b), rng_, q, lie_);
      probabilities[i] = 0.5f / static_cast<float>(i + 1);
      a = b;
      b = out[i];
    }
    return n;
  }

 private:
  [[nodiscard]] std::array<double, kVocab> distribution(Token a, Token b) const {
    switch (source_) {
      case DraftSource::unlike:
        return draft_q(a, b, kVocab);
      case DraftSource::narrow:
        return draft_q(a, b, 2);
      case DraftSource::model:
        break;
    }
    return model_(a, b);
  }
  DraftSource source_;
  Conditional model_;
  bool lie_;
  mutable std::mt19937_64 rng_;
};

/// Trees drawn from draft_q: two children of the root drawn without replacement (the second
/// from q without the first, renormalized), and one drawn child under each.
class DrawingTreeDrafter : public ObservedSequence {
 public:
  void seed(std::uint64_t s) { rng_.seed(s * 0xbf58476d1ce4e5b9ULL + 5); }
  [[nodiscard]] std::size_t predict(std::span<Token>) const noexcept { return 0; }
  std::size_t predict_tree(DraftTree& tree, std::size_t max_nodes, std::size_t max_depth, float least = 0.0f) {
    DraftDistributions q;
    return predict_tree(tree, max_nodes, max_depth, least, q);
  }
  std::size_t predict_tree(DraftTree& tree, std::size_t max_nodes, std::size_t max_depth, float,
                           DraftDistributions& q) {
    tree.clear();
    q.clear();
    if (seen().size() < 2 || max_nodes < 4 || max_depth < 2) return 0;
    const Token a = seen()[seen().size() - 2];
    const Token b = seen().back();
    std::array<double, kVocab> root = draft_q(a, b, kVocab);
    for (std::size_t branch = 0; branch < 2; ++branch) {
      const Token x = draw_and_push(root, rng_, q);
      const std::size_t node = tree.add(kTreeRoot, x, 0.3f);
      tree.add(static_cast<std::int32_t>(node), draw_and_push(draft_q(b, x, kVocab), rng_, q), 0.3f);
      // The next sibling is drawn without this one.
      root[x] = 0.0;
      double total = 0.0;
      for (const double p : root) total += p;
      for (double& p : root) p /= total;
    }
    return tree.size();
  }
  void observe_pass(const DraftTree&, std::span<const Token>, std::span<const Token>, std::span<const std::size_t>,
                    std::span<const Token>) noexcept {}
  [[nodiscard]] const TopKTable* top_k_table() const noexcept { return nullptr; }

 private:
  std::mt19937_64 rng_;
};

static_assert(DistributionDrafter<DrawingDrafter>);
static_assert(DistributionTreeDrafter<DrawingTreeDrafter>);
static_assert(DistributionTargetModel<SamplingModel<ConditionalModel>>);
static_assert(DistributionTreeModel<SamplingModel<TreeConditionalModel>>);

[[nodiscard]] SamplingOptions rejection(SamplingOptions o) {
  o.mode = SamplingMode::rejection;
  return o;
}

const SamplingOptions kFilterCases[] = {
    {.temperature = 1.0f},
    {.temperature = 0.7f, .top_k = 3},
    {.temperature = 1.0f, .top_p = 0.75f},
    {.temperature = 1.3f, .min_p = 0.6f},
};

[[nodiscard]] Conditional conditional_of(const SamplingOptions& o) {
  return Conditional{o.temperature, o.top_k, o.top_p, o.min_p};
}

[[nodiscard]] std::string describe(const SamplingOptions& o) {
  return "temperature " + std::to_string(o.temperature) + ", top_k " + std::to_string(o.top_k) + ", top_p " +
         std::to_string(o.top_p) + ", min_p " + std::to_string(o.min_p);
}

/// kRuns requests in the rejection mode with `base` and seeds 0 .. kRuns - 1, `reseed(seed)`
/// seeding the drafter alike; their stats summed into `total`; the chi-square of their first
/// three tokens against the distribution `base` gives.
template <class Decoder, class Sampling, class Reseed>
[[nodiscard]] ChiSquare rejection_runs(Decoder& decoder, Sampling& sampling, const SamplingOptions& base,
                                       const DecodeOptions& options, Reseed&& reseed, DecodeStats& total) {
  return chi_square(count_cells([&](std::uint64_t seed) {
                      SamplingOptions o = rejection(base);
                      o.seed = seed;
                      sampling.set_options(o);
                      reseed(seed);
                      DecodeResult result = decoder.generate(kPrompt, options);
                      total.drafted += result.stats.drafted;
                      total.accepted += result.stats.accepted;
                      return result.tokens;
                    }),
                    exact_joint(conditional_of(base)));
}

TEST(RejectionSampling, DrawnChainsKeepTheModelsDistributionWithEveryFilter) {
  for (const SamplingOptions& base : kFilterCases) {
    for (const DraftSource source : {DraftSource::unlike, DraftSource::narrow}) {
      SCOPED_TRACE(describe(base) + (source == DraftSource::unlike ? ", q unlike p" : ", q narrow"));
      ConditionalModel model;
      SamplingModel<ConditionalModel> sampling(model, rejection(base));
      DrawingDrafter drafter(source, conditional_of(base));
      SpeculativeDecoder decoder(sampling, drafter);
      DecodeStats total;
      const auto reseed = [&](std::uint64_t seed) { drafter.seed(seed); };
      const ChiSquare r = rejection_runs(decoder, sampling, base, kDecode, reseed, total);
      EXPECT_LT(r.statistic, r.critical) << describe(r);
      EXPECT_EQ(r.impossible, 0U);
      // Both outcomes happen often, so the test sees both branches of the rule.
      EXPECT_GT(total.accepted, kRuns / 4);
      EXPECT_GT(total.drafted - total.accepted, kRuns / 4);
    }
  }
}

TEST(RejectionSampling, DrawnTreesKeepTheModelsDistributionWithEveryFilter) {
  for (const SamplingOptions& base : kFilterCases) {
    SCOPED_TRACE(describe(base));
    TreeConditionalModel model;
    SamplingModel<TreeConditionalModel> sampling(model, rejection(base));
    DrawingTreeDrafter drafter;
    SpeculativeDecoder decoder(sampling, drafter);
    DecodeStats total;
    const auto reseed = [&](std::uint64_t seed) { drafter.seed(seed); };
    const ChiSquare r = rejection_runs(decoder, sampling, base, kTreeDecode, reseed, total);
    EXPECT_LT(r.statistic, r.critical) << describe(r);
    EXPECT_EQ(r.impossible, 0U);
    EXPECT_GT(total.accepted, kRuns / 4);
  }
}

TEST(RejectionSampling, ChosenDraftsKeepTheModelsDistribution) {
  // Drafters that say nothing of q: every draft is read as chosen (q one-hot), chains and trees.
  const SamplingOptions base{.temperature = 1.0f};
  ConditionalModel model;
  SamplingModel<ConditionalModel> sampling(model, rejection(base));
  SpeculativeDecoder decoder(sampling, OracleDrafter(likely_rule(), 2));
  DecodeStats total;
  const ChiSquare r = rejection_runs(decoder, sampling, base, kDecode, [](std::uint64_t) {}, total);
  EXPECT_LT(r.statistic, r.critical) << "chains: " << describe(r);

  TreeConditionalModel tree_model;
  SamplingModel<TreeConditionalModel> tree_sampling(tree_model, rejection(base));
  SpeculativeDecoder tree_decoder(tree_sampling, TwoBranchTreeDrafter{});
  const ChiSquare rt = rejection_runs(tree_decoder, tree_sampling, base, kTreeDecode, [](std::uint64_t) {}, total);
  EXPECT_LT(rt.statistic, rt.critical) << "trees: " << describe(rt);
}

TEST(RejectionSampling, ADrafterThatMisstatesItsDistributionFailsTheSameTest) {
  // Drafts drawn from the narrow q but declared uniform: accepted with min(1, 4 p(x)), too often.
  const SamplingOptions base{.temperature = 1.0f};
  ConditionalModel model;
  SamplingModel<ConditionalModel> sampling(model, rejection(base));
  DrawingDrafter drafter(DraftSource::narrow, Conditional{}, /*lie=*/true);
  SpeculativeDecoder decoder(sampling, drafter);
  DecodeStats total;
  const ChiSquare r =
      rejection_runs(decoder, sampling, base, kDecode, [&](std::uint64_t seed) { drafter.seed(seed); }, total);
  EXPECT_GT(r.statistic, r.critical) << describe(r);
}

TEST(RejectionSampling, DraftsDrawnFromTheModelsOwnDistributionAreAccepted) {
  for (const SamplingOptions& base : kFilterCases) {
    SCOPED_TRACE(describe(base));
    ConditionalModel model;
    SamplingModel<ConditionalModel> sampling(model, rejection(base));
    DrawingDrafter drafter(DraftSource::model, conditional_of(base));
    SpeculativeDecoder decoder(sampling, drafter);
    DecodeStats total;
    for (std::uint64_t seed = 0; seed < 500; ++seed) {
      SamplingOptions o = rejection(base);
      o.seed = seed;
      sampling.set_options(o);
      drafter.seed(seed);
      const DecodeResult result = decoder.generate(kPrompt, kDecode);
      total.drafted += result.stats.drafted;
      total.accepted += result.stats.accepted;
    }
    // q = p up to float rounding: p(x) / q(x) rounds below 1 now and then, by parts in 10^7.
    EXPECT_GT(total.drafted, 500U);
    EXPECT_GE(static_cast<double>(total.accepted), 0.999 * static_cast<double>(total.drafted))
        << total.accepted << " of " << total.drafted;

    // The exact mode accepts the same drafts only as often as p(x).
    SamplingModel<ConditionalModel> exact(model, base);
    SpeculativeDecoder exact_decoder(exact, drafter);
    DecodeStats exact_total;
    for (std::uint64_t seed = 0; seed < 500; ++seed) {
      SamplingOptions o = base;
      o.seed = seed;
      exact.set_options(o);
      drafter.seed(seed);
      const DecodeResult result = exact_decoder.generate(kPrompt, kDecode);
      exact_total.drafted += result.stats.drafted;
      exact_total.accepted += result.stats.accepted;
    }
    EXPECT_LT(static_cast<double>(exact_total.accepted), 0.8 * static_cast<double>(exact_total.drafted));
  }
}

/// TreeDrafter drawing its recycled candidates, up to three children a node, with small tables
/// (reset() clears them every request).
[[nodiscard]] TreeConfig recycling_config() {
  TreeConfig config;
  config.draw_recycled = true;
  config.max_children = 3;
  config.successor_slots = 16;
  config.chain.index_capacity = 64;
  config.chain.count_window = 64;
  return config;
}

TEST(RejectionSampling, TreeDrafterDrawingFromTheModelsRecordedDistributionsKeepsIt) {
  // End to end: SamplingModel records its distributions into a shared table, TreeDrafter draws
  // its recycled candidates from it and says so, SpeculativeDecoder hands q through. The
  // drafter learns across requests (a shared table is kept), so most passes carry drawn nodes.
  // The second case has a verify cost, which cuts the drawn trees by their nodes' estimates. The
  // third clears the table every request, so that a node whose token has no row yet draws from
  // the overall row (TopKTable::overall_row()), about every other request's first node.
  for (const int variant : {0, 1, 2}) {
    const bool costed = variant == 1;
    const bool cleared = variant == 2;
    const SamplingOptions& base = costed ? kFilterCases[1] : kFilterCases[0];
    SCOPED_TRACE(describe(base) + (costed ? ", knee:3 cost" : ", no cost") + (cleared ? ", table cleared" : ""));
    TreeConditionalModel model;
    SamplingModel<TreeConditionalModel> sampling(model, rejection(base));
    TopKTable table(kVocab, 4, /*probabilities=*/true);
    sampling.set_distribution_table(&table);
    TreeDrafter drafter(recycling_config(), &table);
    SpeculativeDecoder decoder(sampling, drafter);
    if (costed) decoder.set_verify_cost(VerifyCost::knee(3));
    DecodeOptions options = kTreeDecode;
    options.max_drafts = 6;
    DecodeStats total;
    const auto reseed = [&](std::uint64_t) {
      if (cleared) table.clear();
    };
    const ChiSquare r = rejection_runs(decoder, sampling, base, options, reseed, total);
    EXPECT_LT(r.statistic, r.critical) << describe(r);
    EXPECT_EQ(r.impossible, 0U);
    EXPECT_GT(total.accepted, kRuns / 2);
  }
}

TEST(RejectionSampling, GreedyIsPlainDecodingWhateverIsDrafted) {
  // At temperature 0 both modes are greedy decoding: the same tokens as plain, for drafters
  // that draw (from anything) and for TreeDrafter drawing from the recorded table.
  ConditionalModel model;
  const SamplingOptions greedy = rejection(SamplingOptions{});
  SamplingModel<ConditionalModel> sampling(model, greedy);
  DecodeOptions options;
  options.max_new_tokens = 24;
  DecodeOptions plain = options;
  plain.speculate = false;
  SpeculativeDecoder plain_decoder(sampling, SilentDrafter{});
  for (const DraftSource source : {DraftSource::unlike, DraftSource::narrow, DraftSource::model}) {
    DrawingDrafter drafter(source, Conditional{});
    SpeculativeDecoder decoder(sampling, drafter);
    for (Token a = 0; a < kVocab; ++a) {
      for (Token b = 0; b < kVocab; ++b) {
        drafter.seed(a * kVocab + b);
        const std::vector<Token> prompt = {a, b};
        EXPECT_EQ(decoder.generate(prompt, options).tokens, plain_decoder.generate(prompt, plain).tokens);
      }
    }
  }
  TreeConditionalModel tree_model;
  SamplingModel<TreeConditionalModel> tree_sampling(tree_model, greedy);
  TopKTable table(kVocab, 4, true);
  tree_sampling.set_distribution_table(&table);
  TreeConfig config;
  config.draw_recycled = true;
  config.successor_slots = 16;
  TreeDrafter drafter(config, &table);
  SpeculativeDecoder tree_decoder(tree_sampling, drafter);
  SpeculativeDecoder tree_plain(tree_sampling, SilentDrafter{});
  options.max_drafts = 6;
  for (Token a = 0; a < kVocab; ++a) {
    for (Token b = 0; b < kVocab; ++b) {
      const std::vector<Token> prompt = {a, b, a};
      EXPECT_EQ(tree_decoder.generate(prompt, options).tokens, tree_plain.generate(prompt, plain).tokens);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Rejection sampling through BatchSpeculator: the engine verifies. An engine's loop samples
// several sequences at once, each pass verifying every sequence's drafts row by row with
// TokenSampler::verify against the q that propose() (or propose_trees()) gave; the tokens it
// emits must keep the model's distribution, and at temperature 0 be plain greedy decoding's.

constexpr std::size_t kBatch = 4;  // sequences sampled at once

/// The row of logits after (a, b): log p(t | a, b), which the sampler filters by its options.
[[nodiscard]] std::array<float, kVocab> row_after(Token a, Token b) {
  std::array<float, kVocab> row{};
  for (Token t = 0; t < kVocab; ++t) row[t] = static_cast<float>(std::log(probability(a, b, t)));
  return row;
}

/// One sequence of the engine: its tokens so far and its sampler (its request's seed).
struct EngineSequence {
  SequenceId id = 0;
  std::vector<Token> tokens;
  TokenSampler sampler;
};

/// How the engine hands a draft's q to TokenSampler::verify.
enum class EngineQ : std::uint8_t {
  given,    ///< entry j of the sequence's q, as propose() gave it
  chosen,   ///< every draft as chosen (kChosen): exact for any draft, only less often accepted
  uniform,  ///< every draft as drawn from the uniform distribution: a q it was not drawn from
};

/// The entry of draft (or node) j that the engine hands verify().
[[nodiscard]] std::uint32_t entry_of(EngineQ given, std::size_t j) {
  return given == EngineQ::chosen ? TokenSampler::Draft::kChosen : static_cast<std::uint32_t>(j);
}

/// The DraftDistributions the engine hands verify() for sequence i of the pass.
[[nodiscard]] const DraftDistributions& q_of(EngineQ given, const std::vector<DraftDistributions>& q, std::size_t i) {
  static const DraftDistributions uniform = [] {
    DraftDistributions u;
    const std::array<Token, kVocab> all = {0, 1, 2, 3};
    const std::array<float, kVocab> flat = {0.25f, 0.25f, 0.25f, 0.25f};
    for (std::size_t j = 0; j < kMaxDraftsPerPass; ++j) u.push(all, flat);
    return u;
  }();
  return given == EngineQ::uniform ? uniform : q[i];
}

/// kBatch requests of an engine, seeds first .. first + kBatch - 1, begun in `spec`.
template <class D>
struct EngineBatch {
  EngineBatch(BatchSpeculator<D>& speculator, const SamplingOptions& base, const std::vector<Token>& prompt,
              const DecodeOptions& options, std::uint64_t first)
      : spec(speculator), prompt_size(prompt.size()), outputs(kBatch) {
    for (std::uint64_t s = 0; s < kBatch; ++s) {
      SamplingOptions o = rejection(base);
      o.seed = first + s;
      sequences.push_back({first + s + 1, prompt, TokenSampler(o, kVocab)});
      spec.begin(sequences.back().id, prompt, options);
      running.push_back(s);
    }
  }
  /// The ids of the sequences still running, in the order of running.
  [[nodiscard]] std::vector<SequenceId> ids() const {
    std::vector<SequenceId> out;
    for (const std::size_t r : running) out.push_back(sequences[r].id);
    return out;
  }
  /// Appends to running sequence i its emitted tokens, emitted(i, j) for j < steps[i].emitted,
  /// and finishes the sequences whose step finished them.
  template <class Emitted>
  void step(std::span<const StepOutcome> steps, Emitted&& emitted) {
    std::vector<std::size_t> still;
    for (std::size_t i = 0; i < running.size(); ++i) {
      EngineSequence& s = sequences[running[i]];
      for (std::size_t j = 0; j < steps[i].emitted; ++j) s.tokens.push_back(emitted(i, j));
      if (steps[i].finished) {
        outputs[running[i]].assign(s.tokens.begin() + static_cast<std::ptrdiff_t>(prompt_size), s.tokens.end());
        spec.finish(s.id);
      } else {
        still.push_back(running[i]);
      }
    }
    running = still;
  }

  BatchSpeculator<D>& spec;
  std::size_t prompt_size;
  std::vector<EngineSequence> sequences;
  std::vector<std::size_t> running;  // indices of sequences still running
  std::vector<std::vector<Token>> outputs;
};

/// Chains: kBatch requests at a time, seeds `first` .. first + kBatch - 1, through `spec` in
/// the rejection mode; returns each request's tokens after the prompt. Every pass feeds each
/// sequence's last token and drafts and verifies row j against draft j (of q's entry j) up to
/// the first rejection; the rows after it decide nothing.
template <class D>
[[nodiscard]] std::vector<std::vector<Token>> engine_chains(BatchSpeculator<D>& spec, const SamplingOptions& base,
                                                            const std::vector<Token>& prompt,
                                                            const DecodeOptions& options, std::uint64_t first,
                                                            EngineQ given = EngineQ::given) {
  EngineBatch<D> batch(spec, base, prompt, options, first);
  std::vector<DraftDistributions> q(kBatch);
  std::vector<Token> drafts(kBatch * options.max_drafts);
  while (!batch.running.empty()) {
    const std::vector<SequenceId> ids = batch.ids();
    std::vector<std::size_t> offsets(ids.size() + 1);
    spec.propose(ids, drafts, offsets, q);
    std::vector<Token> model_tokens;
    std::vector<std::size_t> model_offsets{0};
    for (std::size_t i = 0; i < ids.size(); ++i) {
      EngineSequence& s = batch.sequences[batch.running[i]];
      Token a = s.tokens[s.tokens.size() - 2];
      Token b = s.tokens.back();
      for (std::size_t j = 0; offsets[i] + j <= offsets[i + 1]; ++j) {
        const std::array<float, kVocab> row = row_after(a, b);
        const std::size_t position = s.tokens.size() + j;
        std::vector<TokenSampler::Draft> draft;
        if (offsets[i] + j < offsets[i + 1]) draft.push_back({drafts[offsets[i] + j], entry_of(given, j)});
        const Token token = s.sampler.verify(row, position, draft, q_of(given, q, i));
        model_tokens.push_back(token);
        if (draft.empty() || token != draft[0].token) break;
        a = b;
        b = token;
      }
      // The rows after a rejection decide nothing: any token, so that every draft is verified.
      model_tokens.resize(model_offsets.back() + offsets[i + 1] - offsets[i] + 1, 0);
      model_offsets.push_back(model_tokens.size());
    }
    std::vector<StepOutcome> steps(ids.size());
    spec.accept(ids, model_tokens, model_offsets, steps);
    batch.step(steps, [&](std::size_t i, std::size_t j) { return model_tokens[model_offsets[i] + j]; });
  }
  return batch.outputs;
}

/// Trees: as engine_chains, each pass walking every sequence's tree from the root: the row of
/// the entry reached is verified against its children (by index, each with its q entry), and
/// the walk goes on to the child emitted, if any. Every entry gets its row's TopDistribution
/// (top tokens and probabilities, for accept_trees to record) when `record` is set.
template <class D>
[[nodiscard]] std::vector<std::vector<Token>> engine_trees(BatchSpeculator<D>& spec, const SamplingOptions& base,
                                                           const std::vector<Token>& prompt,
                                                           const DecodeOptions& options, std::uint64_t first,
                                                           bool record, EngineQ given = EngineQ::given) {
  EngineBatch<D> batch(spec, base, prompt, options, first);
  const std::size_t k = spec.top_k();
  std::vector<DraftDistributions> q(kBatch);
  std::vector<Token> tokens(kBatch * options.max_drafts);
  std::vector<std::int32_t> parents(tokens.size());
  while (!batch.running.empty()) {
    const std::vector<SequenceId> ids = batch.ids();
    std::vector<std::size_t> offsets(ids.size() + 1);
    spec.propose_trees(ids, tokens, parents, offsets, q);
    std::vector<Token> model_tokens;
    std::vector<std::size_t> model_offsets{0};
    std::vector<Token> top;
    std::vector<float> top_probabilities;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      EngineSequence& s = batch.sequences[batch.running[i]];
      const std::size_t nodes = offsets[i + 1] - offsets[i];
      const std::size_t e0 = model_tokens.size();
      model_tokens.resize(e0 + nodes + 1, 0);  // entries off the walk: never read
      // Entry e's token and the one before it: the root is the last token; node j's, its own.
      const auto token_of = [&](std::size_t e) { return e == 0 ? s.tokens.back() : tokens[offsets[i] + e - 1]; };
      const auto before = [&](std::size_t e) {
        if (e == 0) return s.tokens[s.tokens.size() - 2];
        const std::int32_t up = parents[offsets[i] + e - 1];
        return up == kTreeRoot ? s.tokens.back() : tokens[offsets[i] + static_cast<std::size_t>(up)];
      };
      if (record) {
        for (std::size_t e = 0; e <= nodes; ++e) {
          std::array<Token, kVocab> top_tokens{};
          std::array<float, kVocab> top_p{};
          TokenSampler::TopDistribution d{std::span<Token>(top_tokens).first(k), std::span<float>(top_p).first(k)};
          s.sampler.distribution(row_after(before(e), token_of(e)), s.tokens.size(), d);
          top.insert(top.end(), top_tokens.begin(), top_tokens.begin() + static_cast<std::ptrdiff_t>(k));
          top_probabilities.insert(top_probabilities.end(), top_p.begin(), top_p.begin() + static_cast<std::ptrdiff_t>(k));
        }
      }
      walk_tree(
          s.sampler, std::span<const Token>(tokens).subspan(offsets[i], nodes),
          std::span<const std::int32_t>(parents).subspan(offsets[i], nodes), s.tokens.size(),
          [&](std::size_t e) { return row_after(before(e), token_of(e)); },
          [&](std::size_t j) { return entry_of(given, j); }, q_of(given, q, i),
          std::span<Token>(model_tokens).subspan(e0, nodes + 1));
      model_offsets.push_back(model_tokens.size());
    }
    std::vector<StepOutcome> steps(ids.size());
    std::vector<std::size_t> kept(model_tokens.size());
    if (record) {
      spec.accept_trees(ids, model_tokens, model_offsets, top, top_probabilities, steps, kept);
    } else {
      spec.accept_trees(ids, model_tokens, model_offsets, {}, steps, kept);
    }
    batch.step(steps, [&](std::size_t i, std::size_t j) {
      return model_tokens[model_offsets[i] + kept[model_offsets[i] + j]];
    });
  }
  return batch.outputs;
}

/// kRuns requests, kBatch at a time: run(first) runs seeds first .. first + kBatch - 1 and
/// returns their tokens; the chi-square of the first three against `base`'s distribution.
template <class Run>
[[nodiscard]] ChiSquare batch_rejection_runs(const SamplingOptions& base, Run&& run) {
  std::array<std::size_t, kCells> counts{};
  for (std::uint64_t first = 0; first < kRuns; first += kBatch) {
    for (const std::vector<Token>& tokens : run(first)) {
      EXPECT_GE(tokens.size(), kGenerated);
      if (tokens.size() < kGenerated) return {};
      ++counts[(tokens[0] * kVocab + tokens[1]) * kVocab + tokens[2]];
    }
  }
  return chi_square(counts, exact_joint(conditional_of(base)));
}

TEST(RejectionSampling, BatchSpeculatorChainsKeepTheModelsDistribution) {
  for (const SamplingOptions& base : {kFilterCases[0], kFilterCases[1]}) {
    for (const DraftSource source : {DraftSource::unlike, DraftSource::narrow}) {
      SCOPED_TRACE(describe(base) + (source == DraftSource::unlike ? ", q unlike p" : ", q narrow"));
      BatchSpeculator<DrawingDrafter> spec(BatchConfig{.max_sequences = kBatch}, [&, made = std::uint64_t{0}]() mutable {
        DrawingDrafter drafter(source, conditional_of(base));
        drafter.seed(made++);
        return drafter;
      });
      const ChiSquare r = batch_rejection_runs(
          base, [&](std::uint64_t first) { return engine_chains(spec, base, kPrompt, kDecode, first); });
      EXPECT_LT(r.statistic, r.critical) << describe(r);
      EXPECT_EQ(r.impossible, 0U);
      EXPECT_GT(spec.stats().accepted, kRuns / 4);
      EXPECT_GT(spec.stats().drafted - spec.stats().accepted, kRuns / 4);
    }
  }
}

TEST(RejectionSampling, BatchSpeculatorTreesKeepTheModelsDistribution) {
  // Drawn trees of a drafter of its own, and TreeDrafter drawing its recycled candidates from
  // the distributions the engine records through accept_trees() into their shared table (with
  // a verify cost in the second case, which cuts drawn trees by their nodes' estimates alone).
  for (const SamplingOptions& base : {kFilterCases[0], kFilterCases[1]}) {
    SCOPED_TRACE(describe(base));
    BatchSpeculator<DrawingTreeDrafter> spec(BatchConfig{.max_sequences = kBatch},
                                             [made = std::uint64_t{0}]() mutable {
                                               DrawingTreeDrafter drafter;
                                               drafter.seed(made++);
                                               return drafter;
                                             });
    const ChiSquare r = batch_rejection_runs(
        base, [&](std::uint64_t first) { return engine_trees(spec, base, kPrompt, kTreeDecode, first, false); });
    EXPECT_LT(r.statistic, r.critical) << "drawing tree drafter: " << describe(r);
    EXPECT_EQ(r.impossible, 0U);
    EXPECT_GT(spec.stats().accepted, kRuns / 4);
  }
  for (const bool costed : {false, true}) {
    const SamplingOptions& base = costed ? kFilterCases[1] : kFilterCases[0];
    SCOPED_TRACE(describe(base) + (costed ? ", knee:8 cost" : ", no cost"));
    TopKTable table(kVocab, 4, /*probabilities=*/true);
    const TreeConfig config = recycling_config();
    BatchConfig batch{.max_sequences = kBatch};
    if (costed) batch.cost = VerifyCost::knee(8);
    BatchSpeculator<TreeDrafter> spec(batch, [&] { return TreeDrafter(config, &table); });
    DecodeOptions options = kTreeDecode;
    options.max_drafts = 6;
    const ChiSquare r = batch_rejection_runs(
        base, [&](std::uint64_t first) { return engine_trees(spec, base, kPrompt, options, first, true); });
    EXPECT_LT(r.statistic, r.critical) << "TreeDrafter: " << describe(r);
    EXPECT_EQ(r.impossible, 0U);
    EXPECT_GT(spec.stats().accepted, kRuns / 4);
  }
}

TEST(RejectionSampling, BatchSpeculatorWithAMisstatedQFailsTheSameTest) {
  // The engine declares the drafts drawn from the uniform distribution, which they were not
  // (the narrow q): accepted with min(1, 4 p(x)), too often. Declaring them chosen instead is
  // exact (the exact-match rule holds for any draft), only accepted less often.
  const SamplingOptions base{.temperature = 1.0f};
  for (const EngineQ given : {EngineQ::uniform, EngineQ::chosen}) {
    BatchSpeculator<DrawingDrafter> spec(BatchConfig{.max_sequences = kBatch}, [made = std::uint64_t{0}]() mutable {
      DrawingDrafter drafter(DraftSource::narrow, Conditional{});
      drafter.seed(made++);
      return drafter;
    });
    const ChiSquare r = batch_rejection_runs(
        base, [&](std::uint64_t first) { return engine_chains(spec, base, kPrompt, kDecode, first, given); });
    if (given == EngineQ::uniform) {
      EXPECT_GT(r.statistic, r.critical) << "uniform: " << describe(r);
    } else {
      EXPECT_LT(r.statistic, r.critical) << "chosen: " << describe(r);
    }
  }
}

TEST(RejectionSampling, BatchSpeculatorAtTemperatureZeroIsPlainGreedyDecoding) {
  // Whatever is drafted and drawn, chains and trees: each sequence's tokens are the argmax's.
  const SamplingOptions greedy{};
  DecodeOptions options;
  options.max_new_tokens = 24;
  options.max_drafts = 6;
  const auto plain = [](std::vector<Token> tokens) {
    for (std::size_t n = 0; n < 24; ++n) {
      const std::array<float, kVocab> row = row_after(tokens[tokens.size() - 2], tokens.back());
      tokens.push_back(static_cast<Token>(std::max_element(row.begin(), row.end()) - row.begin()));
    }
    return std::vector<Token>(tokens.end() - 24, tokens.end());
  };
  BatchSpeculator<DrawingDrafter> chains(BatchConfig{.max_sequences = kBatch}, [made = std::uint64_t{0}]() mutable {
    DrawingDrafter drafter(DraftSource::unlike, Conditional{});
    drafter.seed(made++);
    return drafter;
  });
  TopKTable table(kVocab, 4, true);
  TreeConfig config;
  config.draw_recycled = true;
  config.successor_slots = 16;
  BatchSpeculator<TreeDrafter> trees(BatchConfig{.max_sequences = kBatch}, [&] { return TreeDrafter(config, &table); });
  for (Token a = 0; a < kVocab; ++a) {
    for (Token b = 0; b < kVocab; ++b) {
      const std::vector<Token> prompt = {a, b, a};
      for (const std::vector<Token>& tokens : engine_chains(chains, greedy, prompt, options, a * kVocab + b)) {
        EXPECT_EQ(tokens, plain(prompt));
      }
      for (const std::vector<Token>& tokens : engine_trees(trees, greedy, prompt, options, a * kVocab + b, true)) {
        EXPECT_EQ(tokens, plain(prompt));
      }
    }
  }
  EXPECT_GT(chains.stats().accepted, 0U);
  EXPECT_GT(trees.stats().accepted, 0U);
}


/// A draft model for ConditionalModel: logits log draft_q(a, b, 4), a distribution unlike the model's.
class UnlikeDraftModel {
 public:
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<float> logits) {
    history_.resize(pos);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      history_.push_back(tokens[i]);
      const Token a = history_.size() >= 2 ? history_[history_.size() - 2] : 0;
      const std::array<double, kVocab> q = draft_q(a, history_.back(), kVocab);
      for (Token t = 0; t < kVocab; ++t) logits[i * kVocab + t] = static_cast<float>(std::log(q[t]));
    }
  }
  void rollback(std::size_t pos) { history_.resize(pos); }
  [[nodiscard]] std::size_t max_batch() const noexcept { return 8; }
  [[nodiscard]] std::size_t vocab_size() const noexcept { return kVocab; }

 private:
  std::vector<Token> history_;
};

TEST(RejectionSampling, ModelDrafterDrawingKeepsTheModelsDistributionUnderItsGateAndACost) {
  // A draft model drawing from its own distribution, its gate and the decoder's cut stopping
  // chains by estimates known before each draw.
  const SamplingOptions base{.temperature = 1.0f};
  ConditionalModel model;
  SamplingModel<ConditionalModel> sampling(model, rejection(base));
  UnlikeDraftModel draft_model;
  ModelDraftConfig config;
  config.max_drafts = 2;
  config.sampling = {.temperature = 1.0f};
  config.min_probability = 0.35f;
  ModelDrafter<UnlikeDraftModel> drafter(draft_model, kVocab, config);
  SpeculativeDecoder decoder(sampling, drafter);
  decoder.set_verify_cost(VerifyCost::knee(2));
  DecodeStats total;
  // The drafter draws with the request's seed too (its own stream).
  const ChiSquare r = rejection_runs(
      decoder, sampling, base, kDecode,
      [&](std::uint64_t seed) { drafter.set_sampling({.temperature = 1.0f, .seed = seed}); }, total);
  EXPECT_LT(r.statistic, r.critical) << describe(r);
  EXPECT_GT(total.accepted, kRuns / 4);
  EXPECT_GT(total.drafted - total.accepted, kRuns / 10);
}


TEST(RejectionSampling, BestOfTextAndModelKeepsTheModelsDistribution) {
  // Each pass the better of MatchDrafter's chosen drafts and a draft model's drawn ones; the
  // choice looks at the text and at the past, never at what the model would draw.
  const SamplingOptions base{.temperature = 1.0f};
  ConditionalModel model;
  SamplingModel<ConditionalModel> sampling(model, rejection(base));
  UnlikeDraftModel draft_model;
  ModelDrafter<UnlikeDraftModel> model_drafter(draft_model, kVocab,
                                               ModelDraftConfig{.max_drafts = 2, .sampling = {.temperature = 1.0f}});
  MatchDrafter text;
  BestOfDrafter best(text, model_drafter, VerifyCost::knee(2), BestOfConfig{.explore_every = 3});
  SpeculativeDecoder decoder(sampling, best);
  decoder.set_verify_cost(VerifyCost::knee(2));
  DecodeStats total;
  const auto reseed = [&](std::uint64_t seed) { model_drafter.set_sampling({.temperature = 1.0f, .seed = seed}); };
  const ChiSquare r = rejection_runs(decoder, sampling, base, kDecode, reseed, total);
  EXPECT_LT(r.statistic, r.critical) << describe(r);
  using Best = decltype(best);
  EXPECT_GT(best.tally(Best::Source::first).passes, kRuns / 100);  // the text drafts where it has a match
  EXPECT_GT(best.tally(Best::Source::second).passes, kRuns / 20);
}

// A text drafter that always proposes one chosen token (a function of the last two), with a
// fixed estimate: a continuation by the draft model can follow it every pass.
class OneTokenDrafter {
 public:
  void update(Token token) { sequence_.push_back(token); }
  void update(std::span<const Token> tokens) { sequence_.insert(sequence_.end(), tokens.begin(), tokens.end()); }
  void reset() { sequence_.clear(); }
  [[nodiscard]] std::size_t predict(std::span<Token> out) const {
    if (out.empty() || sequence_.size() < 2) return 0;
    out[0] = static_cast<Token>((sequence_.back() * 3 + sequence_[sequence_.size() - 2] + 1) % kVocab);
    return 1;
  }
  [[nodiscard]] std::size_t predict(std::span<Token> out, std::span<float> probabilities) const {
    const std::size_t n = predict(out.first(std::min(out.size(), probabilities.size())));
    if (n == 1) probabilities[0] = 0.6f;
    return n;
  }

 private:
  std::vector<Token> sequence_;
};

TEST(RejectionSampling, TheTextsDraftContinuedByTheModelKeepsTheModelsDistribution) {
  // Each pass a chosen text draft, then the draft model's drawn continuation of it (or the
  // model's own drafts, or the text's alone); the continuation's q is given the text's draft.
  const SamplingOptions base{.temperature = 1.0f};
  ConditionalModel model;
  SamplingModel<ConditionalModel> sampling(model, rejection(base));
  UnlikeDraftModel draft_model;
  ModelDrafter<UnlikeDraftModel> model_drafter(draft_model, kVocab,
                                               ModelDraftConfig{.max_drafts = 2, .sampling = {.temperature = 1.0f}});
  OneTokenDrafter text;
  BestOfDrafter best(text, model_drafter, std::nullopt, BestOfConfig{.explore_every = 2});
  SpeculativeDecoder decoder(sampling, best);
  DecodeStats total;
  const auto reseed = [&](std::uint64_t seed) { model_drafter.set_sampling({.temperature = 1.0f, .seed = seed}); };
  const ChiSquare r = rejection_runs(decoder, sampling, base, kDecode, reseed, total);
  EXPECT_LT(r.statistic, r.critical) << describe(r);
  using Best = decltype(best);
  EXPECT_GT(best.tally(Best::Source::continued).passes, kRuns / 4);
  EXPECT_GT(best.tally(Best::Source::continued).continuation_accepted, kRuns / 20);
}

}  // namespace
}  // namespace ngramspec::test
