#include "ngramspec/verify_cost.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

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
  const VerifyCost one = VerifyCost::knee(1, 3.0);
  EXPECT_DOUBLE_EQ(one(1), 3);
  EXPECT_DOUBLE_EQ(one(5), 15);
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
  EXPECT_DOUBLE_EQ(flat(1), 2);
  EXPECT_DOUBLE_EQ(flat(1000), 2);
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

TEST(VerifyCost, BadCurvesNameWhatIsWrong) {
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::knee(0); }), HasSubstr("flat_tokens = 0 is invalid"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::knee(4, -1); }), HasSubstr("base = -1 is invalid"));
  const std::vector<VerifyCost::Point> decreasing = {{1, 2}, {2, 1}};
  EXPECT_THAT(invalid_argument_message([&] { (void)VerifyCost::table(decreasing); }),
              HasSubstr("point 1 (2 tokens, cost 1) is invalid: a pass never costs less"));
  const std::vector<VerifyCost::Point> unordered = {{4, 1}, {4, 2}};
  EXPECT_THAT(invalid_argument_message([&] { (void)VerifyCost::table(unordered); }),
              HasSubstr("tokens must increase"));
  const std::vector<VerifyCost::Point> zero = {{0, 1}};
  EXPECT_THAT(invalid_argument_message([&] { (void)VerifyCost::table(zero); }), HasSubstr("tokens must be at least 1"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::table({}); }), HasSubstr("no points"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::parse("knee"); }), HasSubstr("'knee' is not a cost"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::parse("knee:x"); }), HasSubstr("'x' is not a whole number"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::parse("knee:0"); }), HasSubstr("at least 1 token"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::parse("table:"); }), HasSubstr("no points"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::parse("table:1=1,"); }), HasSubstr("ends with a comma"));
  EXPECT_THAT(invalid_argument_message([] { (void)VerifyCost::parse("table:1=nan"); }),
              HasSubstr("cost 'nan' is not a finite number"));
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

}  // namespace
}  // namespace ngramspec
