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
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ngramspec/ngramspec.hpp"
#include "support/mock_models.hpp"
#include "support/test_drafters.hpp"

namespace ngramspec::test {
namespace {

constexpr std::size_t kVocab = 4;
constexpr std::size_t kGenerated = 3;                     // tokens whose joint distribution is tested
constexpr std::size_t kCells = kVocab * kVocab * kVocab;  // kVocab ^ kGenerated
constexpr std::size_t kRuns = 20000;                      // generations per test, seeds 0 .. kRuns - 1
constexpr double kSignificance = 0.001;
constexpr double kZ = 3.090232306167813;  // standard normal quantile at 1 - kSignificance
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
  [[nodiscard]] std::array<double, kVocab> operator()(Token a, Token b) const {
    std::array<Token, kVocab> order = {0, 1, 2, 3};
    std::sort(order.begin(), order.end(), [&](Token x, Token y) {
      return weight(a, b, x) != weight(a, b, y) ? weight(a, b, x) > weight(a, b, y) : x < y;
    });
    const std::size_t kept = top_k == 0 ? kVocab : std::min(top_k, kVocab);
    std::array<double, kVocab> q{};
    double total = 0.0;
    for (std::size_t i = 0; i < kept; ++i) {
      q[order[i]] = std::pow(probability(a, b, order[i]), 1.0 / temperature);
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

/// Upper `kSignificance` quantile of chi-square with `df` degrees of freedom, by the
/// Wilson-Hilferty approximation (checked against table values below).
[[nodiscard]] double chi_square_critical(std::size_t df) {
  const double k = static_cast<double>(df);
  const double c = 2.0 / (9.0 * k);
  return k * std::pow(1.0 - c + kZ * std::sqrt(c), 3.0);
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

}  // namespace
}  // namespace ngramspec::test
