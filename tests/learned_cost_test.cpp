#include "ngramspec/learned_cost.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ngramspec/batch_config.hpp"
#include "ngramspec/draft_planner.hpp"
#include "ngramspec/verify_cost.hpp"
#include "support/allocation_counter.hpp"
#include "support/thrown_message.hpp"

namespace ngramspec {
namespace {

using test::invalid_argument_message;

// What passes of a simulated engine really cost: a curve over the pass's tokens, a price for a
// pass whose token count differs from the one before (in one-token passes), and log-normal noise.
struct Truth {
  VerifyCost curve = VerifyCost::flat();
  double shape = 0;
  double noise = 0;
  // Noiseless: what the policies are judged by.
  [[nodiscard]] double price(std::size_t rows, std::size_t drafts, std::size_t previous) const {
    return curve.pass(rows, drafts) + (previous != 0 && previous != rows + drafts ? shape : 0.0);
  }
};

// A pass's candidate drafts: every sequence's chain, merged best first (what the batch
// planner sizes jointly), each sequence's acceptance drawn per pass.
std::vector<float> candidates(std::mt19937_64& rng, std::size_t rows, std::size_t per_row) {
  std::vector<float> p;
  std::uniform_real_distribution<double> rate(0.2, 0.95);
  for (std::size_t r = 0; r < rows; ++r) {
    const double a = rate(rng);
    double q = 1;
    for (std::size_t j = 0; j < per_row; ++j) p.push_back(static_cast<float>(q *= a));
  }
  std::sort(p.begin(), p.end(), [](float x, float y) { return x > y; });
  return p;
}

// How many of the best-first candidates a planner under `cost` sends, and their expected tokens.
std::size_t plan(const VerifyCost& cost, std::size_t rows, std::vector<float> p) {
  return DraftPlanner::plan_one(&cost, rows, static_cast<double>(rows), 0, p);
}
double expected(std::size_t rows, const std::vector<float>& p, std::size_t n) {
  double e = static_cast<double>(rows);
  for (std::size_t j = 0; j < n; ++j) e += p[j];
  return e;
}

struct Outcome {
  double learned_rate = 0;  // expected tokens per unit of true cost, after the warm-up
  double told_rate = 0;     // the planner told the true curve
  double plain_rate = 0;
  double exploration_seconds = 0;
  double seconds = 0;
  double most_pass = 0;
};

// Serves `passes` passes of `rows` sequences with a learner (from `prior`) and, on the same
// candidates, a planner told the truth; rates are counted from pass `warm_up` on.
Outcome serve(const Truth& truth, std::size_t rows, std::size_t passes, std::size_t warm_up, std::uint64_t seed,
              std::optional<VerifyCost> prior = std::nullopt, const Truth* after = nullptr, std::size_t drift = 0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  LearnedCost learned(prior);
  Outcome o;
  double learned_tokens = 0, learned_cost = 0, told_tokens = 0, told_cost = 0;
  std::size_t previous = 0, told_previous = 0;
  for (std::size_t pass = 0; pass < passes; ++pass) {
    const Truth& t = after != nullptr && pass >= drift ? *after : truth;
    const std::vector<float> p = candidates(rng, rows, 16);
    const std::size_t n = plan(learned.curve(rows), rows, p);
    const double price = t.price(rows, n, previous);
    const double observed = price * std::exp(t.noise * normal(rng));
    learned.observe(rows, rows + n, observed);
    o.most_pass = std::max(o.most_pass, observed);
    previous = rows + n;
    const std::size_t told_n = plan(t.curve, rows, p);
    const double told_price = t.price(rows, told_n, told_previous);
    told_previous = rows + told_n;
    if (pass < warm_up) continue;
    learned_tokens += expected(rows, p, n);
    learned_cost += price;
    told_tokens += expected(rows, p, told_n);
    told_cost += told_price;
    o.plain_rate += static_cast<double>(rows) / t.curve.pass(rows, 0);
  }
  o.learned_rate = learned_tokens / learned_cost;
  o.told_rate = told_tokens / told_cost;
  o.plain_rate /= static_cast<double>(passes - warm_up);
  o.exploration_seconds = learned.exploration_seconds();
  o.seconds = learned.seconds();
  return o;
}

VerifyCost random_curve(std::mt19937_64& rng) {
  switch (std::uniform_int_distribution<int>(0, 2)(rng)) {
    case 0:  // a GPU-like knee
      return VerifyCost::knee(std::uniform_int_distribution<std::size_t>(16, 512)(rng));
    case 1: {  // a CPU-like curve, steep from the start
      const double slope = std::uniform_real_distribution<double>(0.1, 0.6)(rng);
      std::vector<VerifyCost::Point> pts;
      for (std::size_t t = 1; t <= 1024; t *= 2) pts.push_back({t, 1 + slope * static_cast<double>(t - 1)});
      return VerifyCost::table(pts);
    }
    default: {  // a staircase: one more step every `tile` tokens
      const std::size_t tile = std::uniform_int_distribution<std::size_t>(8, 64)(rng);
      const double step = std::uniform_real_distribution<double>(0.2, 1.0)(rng);
      std::vector<VerifyCost::Point> pts{{1, 1.0}, {tile, 1.0}};
      for (std::size_t s = 1; s < 24; ++s) {
        pts.push_back({s * tile + 1, 1 + step * static_cast<double>(s)});
        pts.push_back({(s + 1) * tile, 1 + step * static_cast<double>(s)});
      }
      return VerifyCost::table(pts);
    }
  }
}

TEST(LearnedCost, RefusesBadPassesNamingTheValueAndLearnsNothingFromThem) {
  LearnedCost learned;
  EXPECT_NE(invalid_argument_message([&] { learned.observe(0, 4, 1.0); }).find("rows = 0"), std::string::npos);
  EXPECT_NE(invalid_argument_message([&] { learned.observe(4, 3, 1.0); }).find("tokens = 3 is below rows = 4"),
            std::string::npos);
  for (const double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    EXPECT_NE(invalid_argument_message([&] { learned.observe(1, 1, bad); }).find("seconds = "), std::string::npos)
        << bad;
  }
  EXPECT_EQ(learned.passes(), 0u);
  EXPECT_EQ(learned.seconds(), 0.0);
  learned.observe(1, 1, 1e-3);  // still usable
  EXPECT_EQ(learned.passes(), 1u);
}

TEST(LearnedCost, RefusesABadConfigurationNamingTheField) {
  EXPECT_NE(invalid_argument_message([] { LearnedCost(std::nullopt, {.exploration = -0.1}); }).find("exploration"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([] { LearnedCost(std::nullopt, {.exploration = std::nan("")}); })
                .find("exploration"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([] { LearnedCost(std::nullopt, {.plain_every = 1}); }).find("plain_every = 1"),
            std::string::npos);
}

TEST(LearnedCost, ABatchConfigsLearningSettingsAreCheckedEvenWhenItDoesNotLearn) {
  BatchConfig config;
  config.learning.plain_every = 1;
  EXPECT_NE(invalid_argument_message([&] { validate(config); }).find("plain_every = 1"), std::string::npos);
  config.learn_cost = true;
  EXPECT_NE(invalid_argument_message([&] { validate(config); }).find("plain_every = 1"), std::string::npos);
  EXPECT_NO_THROW(validate(BatchConfig{}));
}

TEST(LearnedCost, TheFirstPassOfABatchSizeIsPlainThenDraftsFollowTheCurve) {
  LearnedCost learned(VerifyCost::knee(64));
  // Nothing known of 4 sequences yet: no draft pays.
  EXPECT_EQ(plan(learned.curve(4), 4, std::vector<float>(32, 0.99f)), 0u);
  learned.observe(4, 4, 1e-3);
  // The plain pass known, the prior (flat to 64 tokens) sends drafts at once.
  EXPECT_GT(plan(learned.curve(4), 4, std::vector<float>(32, 0.99f)), 16u);
  EXPECT_TRUE(learned.estimate(4).prior_trusted);
  EXPECT_NEAR(learned.estimate(4).plain_seconds, 1e-3, 1e-9);
}

TEST(LearnedCost, AWrongPriorIsRetiredByThePassThatContradictsIt) {
  LearnedCost learned(VerifyCost::knee(256));  // says 16 drafts cost nothing
  learned.observe(1, 1, 1.0);
  learned.observe(1, 17, 9.0);  // they cost eight plain passes more
  EXPECT_FALSE(learned.estimate(1).prior_trusted);
  EXPECT_NE(learned.describe().find("prior retired"), std::string::npos);
}

TEST(LearnedCost, CurveAndObserveAllocateNothing) {
  LearnedCost learned(VerifyCost::knee(32));
  std::mt19937_64 rng(3);
  learned.observe(8, 8, 1e-3);
  test::AllocationCounter counter;
  for (int pass = 0; pass < 2000; ++pass) {
    const std::size_t rows = 1 + rng() % 64;
    const VerifyCost& curve = learned.curve(rows);
    const std::size_t d = rng() % (4 * rows);
    learned.observe(rows, rows + d, curve.pass(rows, d) * 1e-3);
  }
  EXPECT_EQ(counter.count(), 0u);
}

// The property the planner relies on: over random engines (knees, steep curves, staircases,
// with and without noise, batches 1 to 64), after a warm-up of 1500 passes the learned policy
// earns at least 90 % of the tokens per unit of cost of a planner told the true curve, and never
// less than plain decoding beyond exploration's bound.
TEST(LearnedCost, LearnsRandomEnginesToNearTheToldPlanner) {
  std::mt19937_64 rng(38);
  for (int trial = 0; trial < 24; ++trial) {
    Truth truth;
    truth.curve = random_curve(rng);
    truth.noise = trial % 2 == 0 ? 0.0 : 0.2;
    const std::size_t rows = std::array<std::size_t, 6>{1, 2, 4, 8, 32, 64}[static_cast<std::size_t>(trial) % 6];
    const Outcome o = serve(truth, rows, 4000, 1500, rng());
    SCOPED_TRACE("trial " + std::to_string(trial) + ", " + truth.curve.spec() + ", rows " + std::to_string(rows) +
                 ", noise " + std::to_string(truth.noise));
    EXPECT_GE(o.learned_rate, 0.90 * o.told_rate);
    EXPECT_GE(o.learned_rate, 0.98 * o.plain_rate);
    // The bound: exploration loses at most its fraction of the time served, plus one pass.
    EXPECT_LE(o.exploration_seconds, 0.005 * o.seconds + o.most_pass);
  }
}

// With a price for changing the pass's shape the learner prices the change apart, and so never
// loses to plain decoding (a planner told only the curve does: every change of draft count pays).
TEST(LearnedCost, LearnsTheShapeChangeAndStaysAbovePlain) {
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 8; ++trial) {
    Truth truth;
    truth.curve = random_curve(rng);
    truth.shape = std::uniform_real_distribution<double>(0.5, 4.0)(rng);
    truth.noise = trial % 2 == 0 ? 0.0 : 0.2;
    const std::size_t rows = trial < 4 ? 1 : 8;
    const Outcome o = serve(truth, rows, 4000, 1500, rng());
    SCOPED_TRACE("trial " + std::to_string(trial) + ", " + truth.curve.spec() + ", shape " +
                 std::to_string(truth.shape));
    EXPECT_GE(o.learned_rate, 0.97 * o.plain_rate);
  }
}

TEST(LearnedCost, MeasuresTheShapeChangeFromPlainPasses) {
  LearnedCost learned;
  std::size_t previous = 0;
  for (int pass = 0; pass < 400; ++pass) {
    const std::size_t tokens = pass % 3 == 0 ? 1 : 1 + static_cast<std::size_t>(pass % 2);
    learned.observe(1, tokens, 1.0 + (previous != 0 && previous != tokens ? 0.5 : 0.0) + 0.1 * (tokens - 1));
    previous = tokens;
  }
  EXPECT_NEAR(learned.estimate(1).shape_change, 0.5, 0.1);
}

// A drift (a GPU knee becoming a CPU-like steep curve: another process takes the machine) is
// followed: 1000 passes after it the learned policy is again near the planner told the new curve.
TEST(LearnedCost, FollowsADrift) {
  std::mt19937_64 rng(5);
  for (const std::size_t rows : {1u, 8u}) {
    Truth before{VerifyCost::knee(256)};
    Truth after{VerifyCost::table(std::vector<VerifyCost::Point>{{1, 1}, {2, 1.3}, {64, 20}, {1024, 308}})};
    const Outcome o = serve(before, rows, 4000, 3000, rng(), std::nullopt, &after, 2000);
    SCOPED_TRACE("rows " + std::to_string(rows));
    EXPECT_GE(o.learned_rate, 0.9 * o.told_rate);
    EXPECT_GE(o.learned_rate, 0.98 * o.plain_rate);
  }
}

TEST(LearnedCost, WithoutExplorationAndWithoutAPriorItNeverDrafts) {
  LearnedCost learned(std::nullopt, {.exploration = 0});
  for (int pass = 0; pass < 100; ++pass) {
    EXPECT_EQ(plan(learned.curve(2), 2, std::vector<float>(32, 0.99f)), 0u);
    learned.observe(2, 2, 1.0);
  }
  EXPECT_EQ(learned.exploring_passes(), 0u);
}

}  // namespace
}  // namespace ngramspec
