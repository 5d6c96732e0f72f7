#include "ngramspec/verify_cost.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "ngramspec/draft_planner.hpp"
#include "support/thrown_message.hpp"

namespace ngramspec {
namespace {

using ::testing::HasSubstr;
using test::invalid_argument_message;


TEST(VerifyCost, AKneeIsFlatThenLinearThroughTheOrigin) {
  const VerifyCost cost = VerifyCost::knee(256);
  EXPECT_DOUBLE_EQ(cost(0), 1);
  EXPECT_DOUBLE_EQ(cost(1), 1);
  EXPECT_DOUBLE_EQ(cost(256), 1);
  EXPECT_DOUBLE_EQ(cost(512), 2);
  EXPECT_DOUBLE_EQ(cost(384), 1.5);
  EXPECT_DOUBLE_EQ(cost.marginal(255), 0);
  EXPECT_DOUBLE_EQ(cost.marginal(256), 1.0 / 256);
  EXPECT_EQ(cost.spec(), "knee:256");
  // The base sets only the unit: costs are stored relative to a one-token pass.
  const VerifyCost one = VerifyCost::knee(1, 3.0);
  EXPECT_DOUBLE_EQ(one(1), 1);
  EXPECT_DOUBLE_EQ(one(5), 5);
  EXPECT_EQ(one.spec(), "knee:1 (base 3)");
}

TEST(VerifyCost, ATableInterpolatesAndExtendsItsLastSlope) {
  const VerifyCost cost = VerifyCost::parse("table:1=1,2=1.25,3=1.71,5=2.77,9=5.06");
  EXPECT_DOUBLE_EQ(cost(1), 1);
  EXPECT_DOUBLE_EQ(cost(2), 1.25);
  EXPECT_DOUBLE_EQ(cost(4), (1.71 + 2.77) / 2);
  EXPECT_DOUBLE_EQ(cost(9), 5.06);
  EXPECT_NEAR(cost(13), 5.06 + 4 * (5.06 - 2.77) / 4, 1e-12);
  EXPECT_DOUBLE_EQ(cost(0), 1);
  EXPECT_EQ(cost.spec(), "table:1=1,2=1.25,3=1.71,5=2.77,9=5.06");
  const VerifyCost flat = VerifyCost::parse("table:4=2");
  EXPECT_DOUBLE_EQ(flat(1), 1);
  EXPECT_DOUBLE_EQ(flat(1000), 1);
  EXPECT_EQ(flat.spec(), "table:4=2");
}

// A table measured from N tokens says nothing of fewer: a plain pass of b < N tokens is priced at
// b / N of one of N, the least it could cost, and drafts add what they add over N, the step after
// the first point included. At and above N, and for flat and knee curves, the table's own cost.
TEST(VerifyCost, APassBelowTheFirstPointIsProportionalAndItsDraftsCostWhatTheyAddOverIt) {
  const VerifyCost cost = VerifyCost::parse("table:8=1,9=5,16=6");
  EXPECT_DOUBLE_EQ(cost.pass(2, 0), 0.25);
  EXPECT_DOUBLE_EQ(cost.pass(2, 1), 0.25 + 4);
  EXPECT_DOUBLE_EQ(cost.pass(2, 8), 0.25 + 5);
  EXPECT_DOUBLE_EQ(cost.pass(8, 0), 1);
  EXPECT_DOUBLE_EQ(cost.pass(8, 1), 5);
  EXPECT_DOUBLE_EQ(cost.pass(9, 7), 6);
  EXPECT_DOUBLE_EQ(cost.pass(10, 0), cost(10));
  const VerifyCost knee = VerifyCost::knee(4);
  for (std::size_t base = 1; base < 10; ++base) {
    for (std::size_t drafts = 0; drafts < 10; ++drafts) EXPECT_DOUBLE_EQ(knee.pass(base, drafts), knee(base + drafts));
  }
}

// One grammar: "flat" is a form of parse() (the tools, the C ABI and Python read it there).
TEST(VerifyCost, FlatCostsOneWhateverThePassCarries) {
  for (const VerifyCost& flat : {VerifyCost::parse("flat"), VerifyCost::flat()}) {
    EXPECT_EQ(flat.spec(), "flat");
    EXPECT_EQ(flat.points().size(), 1U);
    for (const std::size_t n : {0, 1, 2, 100, 1 << 20}) EXPECT_DOUBLE_EQ(flat(n), 1) << n;
    EXPECT_EQ(VerifyCost::parse(flat.spec()).spec(), "flat");
    EXPECT_EQ(flat.normalized().spec(), "flat");
  }
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::parse("flat:2"); }), HasSubstr("unknown form 'flat'"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::parse("bogus"); }),
              HasSubstr("(expected flat, knee:N or table:"));
}

// Costs whose sums could overflow made every rate NaN downstream: they are normalized (so a
// huge flat curve is the flat curve) and a ratio above kMaxCost is refused naming the point.
TEST(VerifyCost, CostsAreNormalizedAndRatiosThatCouldOverflowAreRefused) {
  const VerifyCost huge = VerifyCost::parse("table:1=1e308,2=1e308");
  EXPECT_DOUBLE_EQ(huge(1), 1);
  EXPECT_DOUBLE_EQ(huge(2), 1);
  EXPECT_DOUBLE_EQ(huge(std::numeric_limits<std::size_t>::max()), 1);
  EXPECT_EQ(huge.spec(), "table:1=1e+308,2=1e+308");
  const VerifyCost tiny = VerifyCost::parse("table:1=1e-308,2=1e-308,4=2e-308");
  EXPECT_DOUBLE_EQ(tiny(2), 1);
  EXPECT_DOUBLE_EQ(tiny(4), 2);
  EXPECT_DOUBLE_EQ(tiny.marginal(4), 0.5);
  EXPECT_TRUE(std::isfinite(tiny(std::numeric_limits<std::size_t>::max())));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::parse("table:1=1,2=1.79e308"); }),
              HasSubstr("point 1 (2 tokens, cost 1.79e+308) is invalid: it costs 1.79e+308 times point 0, more "
                        "than kMaxCost = 1e+200"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::parse("table:1=1e-300,2=1e-50"); }),
              HasSubstr("more than kMaxCost"));
  // At the limit every cost the planner forms stays finite, up to any token count.
  const VerifyCost steep = VerifyCost::parse("table:1=1,2=1e200");
  for (const std::size_t n : {std::size_t{3}, std::size_t{1} << 40, std::numeric_limits<std::size_t>::max() - 1}) {
    EXPECT_TRUE(std::isfinite(steep(n))) << n;
    EXPECT_TRUE(std::isfinite(steep.marginal(n))) << n;
  }
}

// Only ratios matter: a curve scaled by any factor that keeps it finite (subnormal and huge
// costs included) plans exactly the drafts of the curve itself.
TEST(VerifyCostProperty, ScalingEveryCostPlansIdenticalDrafts) {
  std::mt19937_64 rng(2024);
  std::uniform_real_distribution<double> unit(0, 1);
  DraftPlanner planner;
  DraftPlanner scaled_planner;
  for (int round = 0; round < 400; ++round) {
    std::vector<VerifyCost::Point> points;
    std::size_t tokens = 1 + rng() % 4;
    double cost = 0.5 + 4 * unit(rng);
    for (std::size_t i = 0, n = 1 + rng() % 5; i < n; ++i) {
      points.push_back({tokens, cost});
      tokens += 1 + rng() % 40;
      if (rng() % 3 != 0) cost *= 1 + 2 * unit(rng);  // some flat pieces
    }
    const double exponent = -300 + 600 * unit(rng);
    const double factor = std::pow(10.0, exponent);
    std::vector<VerifyCost::Point> scaled = points;
    for (VerifyCost::Point& p : scaled) p.cost *= factor;
    if (!std::isfinite(scaled.back().cost) || scaled.front().cost < std::numeric_limits<double>::min()) continue;
    const VerifyCost a = VerifyCost::table(points);
    const VerifyCost b = VerifyCost::table(scaled);

    const std::size_t sequences = 1 + rng() % 6;
    std::vector<float> probabilities;
    std::vector<std::size_t> offsets = {0};
    for (std::size_t i = 0; i < sequences; ++i) {
      float p = 1;
      for (std::size_t j = 0, n = rng() % 9; j < n; ++j) {
        p *= static_cast<float>(unit(rng));
        probabilities.push_back(p);
      }
      offsets.push_back(probabilities.size());
    }
    std::vector<float> copy = probabilities;
    std::vector<std::size_t> lengths(sequences), scaled_lengths(sequences);
    const std::size_t base_tokens = sequences + rng() % 20;
    const std::size_t budget = rng() % 2 == 0 ? 0 : base_tokens + rng() % 30;
    const std::size_t planned = planner.plan(&a, base_tokens, static_cast<double>(sequences), budget, probabilities,
                                             offsets, lengths);
    const std::size_t scaled_planned = scaled_planner.plan(&b, base_tokens, static_cast<double>(sequences), budget,
                                                           copy, offsets, scaled_lengths);
    ASSERT_EQ(planned, scaled_planned) << a.spec() << " scaled by 1e" << exponent;
    ASSERT_EQ(lengths, scaled_lengths) << a.spec() << " scaled by 1e" << exponent;
  }
  // The cases of the report: a flat curve of tiny costs plans as the flat curve of ones.
  for (const char* spec : {"table:1=1e-308,2=1e-308", "table:1=1e308,2=1e308", "flat"}) {
    const VerifyCost tiny = VerifyCost::parse(spec);
    const VerifyCost ones = VerifyCost::parse("table:1=1,2=1");
    std::vector<float> p = {0.9F, 0.5F, 0.2F, 0.05F, 0.01F};
    std::vector<float> q = p;
    const std::vector<std::size_t> offsets = {0, 5};
    std::vector<std::size_t> x(1), y(1);
    EXPECT_EQ(planner.plan(&tiny, 1, 1, 0, p, offsets, x), planner.plan(&ones, 1, 1, 0, q, offsets, y)) << spec;
    EXPECT_EQ(x, y) << spec;
  }
}

// Every cost is non-decreasing in tokens, and its spec reads back into the same curve.
TEST(VerifyCost, SpecsRoundTripAndCostsNeverDecrease) {
  for (const char* spec : {"knee:1", "knee:7", "knee:300", "table:1=1", "table:1=0.5,8=0.5,9=4,100=40",
                           "table:3=1e-3,5=2e-3"}) {
    SCOPED_TRACE(spec);
    const VerifyCost cost = VerifyCost::parse(spec);
    const VerifyCost again = VerifyCost::parse(cost.spec());
    double previous = 0;
    for (std::size_t n = 0; n < 1200; ++n) {
      EXPECT_DOUBLE_EQ(cost(n), again(n));
      EXPECT_GE(cost(n), previous);
      previous = cost(n);
    }
    EXPECT_NEAR(cost.normalized()(1), 1, 1e-12);
    EXPECT_NEAR(cost.normalized()(700) / cost.normalized()(3), cost(700) / cost(3), 1e-9);
  }
}

constexpr std::size_t kMaxCount = std::numeric_limits<std::size_t>::max();

// A random curve of every form: flat, knees short and as long as a count can be, steep tables,
// and staircases (a flat run, then a step), their points anywhere up to SIZE_MAX.
VerifyCost random_wide_cost(std::mt19937_64& rng) {
  switch (rng() % 5) {
    case 0:
      return VerifyCost::flat();
    case 1:
      return VerifyCost::knee(1 + rng() % 64);
    case 2:
      return VerifyCost::knee(rng() % 2 == 0 ? kMaxCount - rng() % 64 : 1 + rng() % (kMaxCount / 2));
    default: {
      const bool stairs = rng() % 5 == 4;
      std::vector<VerifyCost::Point> points;
      std::size_t t = 1 + rng() % 8;
      double c = 0.5 + static_cast<double>(rng() % 100) / 50;
      for (std::size_t i = 1 + rng() % 5; i > 0; --i) {
        points.push_back({t, c});
        if (stairs) {
          points.push_back({t + 1, c *= 1 + static_cast<double>(rng() % 8)});
          ++t;
        }
        const std::size_t room = kMaxCount - t;
        if (room < 2) break;
        t += 1 + (rng() % 3 == 0 ? rng() % (room / 2) : rng() % std::min<std::size_t>(room - 1, 40));
        c += static_cast<double>(rng() % 100) / 10;
      }
      return VerifyCost::table(points);
    }
  }
}

std::size_t random_count(std::mt19937_64& rng) {
  switch (rng() % 4) {
    case 0:
      return rng() % 64;
    case 1:
      return kMaxCount - rng() % 64;
    case 2:
      return kMaxCount / 2 - 32 + rng() % 64;
    default:
      return rng();
  }
}

// What cost.pass(base, drafts) is by its definition, in long double so that no sum wraps: the
// curve goes on past SIZE_MAX tokens with its tail slope.
long double reference_pass(const VerifyCost& cost, std::size_t base, std::size_t drafts) {
  const auto of_sum = [&](std::size_t a, std::size_t b) -> long double {
    if (b <= kMaxCount - a) return cost(a + b);
    const VerifyCost::Point last = cost.points().back();
    return last.cost + static_cast<long double>(cost.tail_slope()) *
                           (static_cast<long double>(a) + static_cast<long double>(b) -
                            static_cast<long double>(last.tokens));
  };
  const VerifyCost::Point first = cost.points().front();
  if (base >= first.tokens || base == 0) return of_sum(base, drafts);
  const long double plain =
      first.cost * static_cast<long double>(base) / static_cast<long double>(first.tokens);
  return drafts == 0 ? plain : plain + of_sum(first.tokens, drafts) - first.cost;
}

// For random curves and counts up to SIZE_MAX, a pass never costs less for carrying more tokens,
// more drafts or a larger base, never less than the plain pass, and costs what its definition
// says even where base + drafts is past SIZE_MAX.
TEST(VerifyCostProperty, PassesOfAnyCountNeverCostLessForMoreTokensAndNeverWrap) {
  std::mt19937_64 rng(37);
  for (int trial = 0; trial < 20000; ++trial) {
    const VerifyCost cost = random_wide_cost(rng);
    SCOPED_TRACE(cost.spec());
    // A base of 0 is priced as a pass of its drafts alone (VerifyCost::pass), not as a base below
    // a table's first point: the monotonicity in the base starts at 1.
    const std::size_t base = std::max<std::size_t>(1, random_count(rng));
    const std::size_t drafts = random_count(rng);
    const std::size_t more_base = base + std::min(random_count(rng), kMaxCount - base);
    const std::size_t more_drafts = drafts + std::min(random_count(rng), kMaxCount - drafts);
    const double c = cost.pass(base, drafts);
    ASSERT_TRUE(std::isfinite(c)) << base << " + " << drafts;
    ASSERT_GE(c, cost.pass(base, 0)) << base << " + " << drafts;
    ASSERT_GE(cost.pass(base, more_drafts), c) << base << " + " << drafts << " -> " << more_drafts;
    ASSERT_GE(cost.pass(more_base, drafts), c) << base << " -> " << more_base << " + " << drafts;
    ASSERT_GE(cost.pass(more_base, more_drafts), c) << base << " + " << drafts;
    const long double expected = reference_pass(cost, base, drafts);
    ASSERT_NEAR(c, static_cast<double>(expected), 1e-9 * std::max(1.0L, expected)) << base << " + " << drafts;
    ASSERT_GE(cost.marginal(base), 0) << base;
  }
}

TEST(VerifyCost, APassPastSizeMaxTokensCostsMoreThanThePlainPass) {
  const VerifyCost knee = VerifyCost::parse("knee:1");
  // A double cannot tell 2^64 tokens from 2^64 + 2; what matters is that such a pass is not
  // priced as a pass of 1 token.
  EXPECT_GE(knee.pass(kMaxCount, 2), knee.pass(kMaxCount, 0));
  EXPECT_GT(knee.pass(kMaxCount, 2), 1e19);
  EXPECT_GE(knee.marginal(kMaxCount), 0);
  const VerifyCost table = VerifyCost::parse("table:5=3,10=6");
  EXPECT_GT(table.pass(3, kMaxCount), 0.19 * 1.8e19);  // normalized: 0.2 a token
  EXPECT_GE(table.pass(3, kMaxCount), table.pass(3, kMaxCount - 1));
}

TEST(VerifyCost, BadCurvesNameWhatIsWrong) {
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::knee(0); }), HasSubstr("flat_tokens = 0 is invalid"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::knee(4, -1); }), HasSubstr("base = -1 is invalid"));
  const std::vector<VerifyCost::Point> decreasing = {{1, 2}, {2, 1}};
  EXPECT_THAT(invalid_argument_message([&] { (void)VerifyCost::table(decreasing); }),
              HasSubstr("point 1 (2 tokens, cost 1) is invalid: a pass never costs less"));
  // Costs that differ past the sixth digit are named in full, so the message shows why ("costs 1 ... costs 1" did not).
  const std::vector<VerifyCost::Point> barely = {{1, 1.0}, {2, 1.0000001}, {3, 1.00000005}};
  EXPECT_THAT(invalid_argument_message([&] { (void)VerifyCost::table(barely); }),
              HasSubstr("point 2 (3 tokens, cost 1.00000005) is invalid: a pass never costs less for carrying more tokens "
                        "(point 1 costs 1.0000001)"));
  const std::vector<VerifyCost::Point> unordered = {{4, 1}, {4, 2}};
  EXPECT_THAT(invalid_argument_message([&] { (void)VerifyCost::table(unordered); }),
              HasSubstr("tokens must increase"));
  const std::vector<VerifyCost::Point> zero = {{0, 1}};
  EXPECT_THAT(invalid_argument_message([&] { (void)VerifyCost::table(zero); }), HasSubstr("tokens must be at least 1"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::table({}); }), HasSubstr("no points"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::parse("knee"); }), HasSubstr("'knee' is not a cost"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::parse("knee:x"); }), HasSubstr("'x' is not a whole number"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::parse("knee:0"); }), HasSubstr("at least 1 token"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::parse("knee:18446744073709551616"); }),
              HasSubstr("knee '18446744073709551616' is more than 18446744073709551615"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::parse("table:"); }), HasSubstr("no points"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::parse("table:1=1,"); }), HasSubstr("ends with a comma"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::parse("table:1=nan"); }),
              HasSubstr("cost 'nan' is not a finite number"));
  // Costs are read as every number of the project is (detail::parse_real): decimal, finite, the
  // whole text.
  for (const char* cost : {"0x1p1", "0X2", "inf", "-inf", "infinity", "+2", " 2", "2 ", "2f"}) {
    const std::string spec = std::string("table:1=1,2=") + cost;
    EXPECT_THAT(invalid_argument_message([&] { (void)VerifyCost::parse(spec); }),
                HasSubstr("cost '" + std::string(cost) + "' is not"))
        << spec;
  }
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::parse("table:1=1,2=1e999"); }),
              HasSubstr("cost '1e999' is out of the range of a double"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::parse("table:1"); }),
              HasSubstr("point '1' is not TOKENS=COST"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::parse("roofline:3"); }),
              HasSubstr("unknown form 'roofline'"));
}

TEST(MeasureVerifyCost, TimesEveryCountAndNormalizes) {
  std::vector<std::size_t> calls;
  const std::vector<std::size_t> counts = {1, 2, 5, 9};
  volatile double sink = 0;
  const VerifyCost cost = measure_verify_cost(
      [&](std::size_t n) {
        calls.push_back(n);
        for (std::size_t i = 0; i < n * 2000; ++i) sink = sink + 1.0;
      },
      counts, 3);
  EXPECT_EQ(calls.size(), 4U * (1 + 3));  // a warm-up round, then 3 rounds
  EXPECT_EQ(cost.points().size(), 4U);
  EXPECT_DOUBLE_EQ(cost(1), 1);
  for (std::size_t i = 1; i < cost.points().size(); ++i) EXPECT_GE(cost.points()[i].cost, cost.points()[i - 1].cost);
  const std::vector<std::size_t> bad = {2, 2};
  EXPECT_THAT(invalid_argument_message([&] { (void)measure_verify_cost([](std::size_t) {}, bad); }),
              HasSubstr("token_counts[1] = 2 is invalid"));
  EXPECT_THAT(invalid_argument_message([&] { (void)measure_verify_cost([](std::size_t) {}, counts, 0); }),
              HasSubstr("repeats = 0"));
}

// Over many random timings: each kept time is the largest median so far (of its own size and
// every smaller one), never below 1e-12 s, whatever order the timings come in.
TEST(MedianPassSeconds, KeepsEachMedianRaisedToThoseBeforeOverManyRandomTimings) {
  std::mt19937_64 rng(30);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::vector<double>> seconds(1 + rng() % 6);
    for (std::vector<double>& times : seconds) {
      times.resize(1 + rng() % 8);
      // Some timings negative or zero: what subtracting a plain pass from noise leaves.
      for (double& t : times) t = std::uniform_real_distribution<double>(-1e-3, 1e-2)(rng);
    }
    const std::vector<double> kept = median_pass_seconds(seconds);
    ASSERT_EQ(kept.size(), seconds.size());
    double floor = 1e-12;
    for (std::size_t i = 0; i < seconds.size(); ++i) {
      std::vector<double> sorted = seconds[i];
      std::sort(sorted.begin(), sorted.end());
      floor = std::max(floor, sorted[sorted.size() / 2]);
      EXPECT_EQ(kept[i], floor) << "trial " << trial << ", size " << i;
    }
  }
  EXPECT_TRUE(median_pass_seconds({}).empty());
  EXPECT_THAT(invalid_argument_message([] { (void)median_pass_seconds({{1.0}, {}}); }),
              HasSubstr("seconds[1] is empty"));
}

}  // namespace
}  // namespace ngramspec
