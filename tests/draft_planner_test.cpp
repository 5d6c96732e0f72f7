#include "ngramspec/draft_planner.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <vector>

namespace ngramspec {
namespace {

// E / C of sending lengths[i] of each sequence's candidates.
double rate(const VerifyCost& cost, std::size_t base_tokens, double base_expected, const std::vector<float>& p,
            const std::vector<std::size_t>& offsets, const std::vector<std::size_t>& lengths) {
  double expected = base_expected;
  std::size_t drafts = 0;
  for (std::size_t i = 0; i + 1 < offsets.size(); ++i) {
    for (std::size_t j = 0; j < lengths[i]; ++j) expected += p[offsets[i] + j];
    drafts += lengths[i];
  }
  return expected / cost.pass(base_tokens, drafts);
}

// The best E / C over every combination of prefix lengths within the budget, by brute force.
double best_rate(const VerifyCost& cost, std::size_t base_tokens, double base_expected, const std::vector<float>& p,
                 const std::vector<std::size_t>& offsets, std::size_t budget) {
  const std::size_t sequences = offsets.size() - 1;
  std::vector<std::size_t> lengths(sequences, 0);
  double best = 0;
  for (;;) {
    std::size_t total = base_tokens;
    for (const std::size_t n : lengths) total += n;
    if (budget == 0 || total <= budget) best = std::max(best, rate(cost, base_tokens, base_expected, p, offsets, lengths));
    std::size_t i = 0;
    while (i < sequences && lengths[i] == offsets[i + 1] - offsets[i]) lengths[i++] = 0;
    if (i == sequences) return best;
    ++lengths[i];
  }
}

VerifyCost random_cost(std::mt19937_64& rng) {
  if (rng() % 2 == 0) return VerifyCost::knee(1 + rng() % 12);
  std::vector<VerifyCost::Point> points;
  double c = 0.2 + static_cast<double>(rng() % 100) / 100;
  for (std::size_t t = 1 + rng() % 3; t < 30; t += 1 + rng() % 6) {
    points.push_back({t, c});
    c += static_cast<double>(rng() % 100) / 60;
  }
  return VerifyCost::table(points);
}

// The plan is within the histogram's resolution of the best plan that brute force finds, for
// random batches, estimates, costs (convex or not) and budgets; it respects the budget; and
// every sequence's drafts are a prefix of its candidates.
TEST(DraftPlannerProperty, NearTheBestRateThatBruteForceFinds) {
  DraftPlanner planner;
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::size_t sequences = 1 + rng() % 4;
    std::vector<std::size_t> offsets{0};
    std::vector<float> p;
    for (std::size_t i = 0; i < sequences; ++i) {
      float chance = 1;
      for (std::size_t j = rng() % 6; j > 0; --j) {
        chance *= static_cast<float>(rng() % 1001) / 1000;
        p.push_back(chance);
      }
      offsets.push_back(p.size());
    }
    const VerifyCost cost = random_cost(rng);
    const std::size_t base = sequences + (rng() % 3 == 0 ? rng() % 10 : 0);
    const std::size_t budget = rng() % 3 == 0 ? base + rng() % 8 : 0;
    const double base_expected = static_cast<double>(sequences);
    std::vector<float> work = p;
    std::vector<std::size_t> lengths(sequences, 99);
    const std::size_t total = planner.plan(&cost, base, base_expected, budget, work, offsets, lengths);
    SCOPED_TRACE("trial " + std::to_string(trial) + " cost " + cost.spec());
    std::size_t sum = 0;
    for (std::size_t i = 0; i < sequences; ++i) {
      ASSERT_LE(lengths[i], offsets[i + 1] - offsets[i]);
      sum += lengths[i];
    }
    ASSERT_EQ(sum, total);
    if (budget != 0) {
      ASSERT_LE(base + total, std::max(budget, base));
    }
    const double best = best_rate(cost, base, base_expected, p, offsets, budget);
    const double got = rate(cost, base, base_expected, p, offsets, lengths);
    // Grouping by 1/1024 can misplace a draft by at most that much expected gain each.
    ASSERT_GE(got, best - static_cast<double>(p.size()) / 1024 / cost(base)) << "best " << best;
  }
}

// A curve measured on passes of N sequences, as an engine that rebuilds its graph for a new pass
// shape has it: a plain pass of N tokens costs 1, any pass with drafts a fixed `jump` more, then
// a little per token. When fewer than N sequences run (the tail of a batch), drafts are priced
// as over N (VerifyCost::pass): the planner never sends a draft whose expected tokens do not pay
// for the jump, whatever the batch, and every plan it makes beats the plain pass under that
// price. Below the first point the table alone is flat, which made such drafts look free.
TEST(DraftPlannerProperty, NeverSendsDraftsThatCannotPayForAPassWithDrafts) {
  DraftPlanner planner;
  std::mt19937_64 rng(11);
  std::size_t plans_below_the_first_point = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const std::size_t measured = 1 + rng() % 16;  // the curve's first point: N sequences
    const double jump = 1.5 + static_cast<double>(rng() % 900) / 100;
    const double slope = static_cast<double>(rng() % 100) / 1000;
    const std::vector<VerifyCost::Point> points{{measured, 1.0},
                                                {measured + 1, 1.0 + jump},
                                                {measured + 64, 1.0 + jump + 63 * slope}};
    const VerifyCost cost = VerifyCost::table(points);
    const std::size_t sequences = 1 + rng() % measured;  // the sequences running now: at most N
    plans_below_the_first_point += sequences < measured ? 1 : 0;
    std::vector<std::size_t> offsets{0};
    std::vector<float> p;
    for (std::size_t i = 0; i < sequences; ++i) {
      float chance = 1;
      for (std::size_t j = rng() % 20; j > 0; --j) p.push_back(chance *= 0.5f + static_cast<float>(rng() % 501) / 1000);
      offsets.push_back(p.size());
    }
    const double base_expected = static_cast<double>(sequences);
    double all = 0;
    for (const float x : p) all += x;
    std::vector<float> work = p;
    std::vector<std::size_t> lengths(sequences, 99);
    const std::size_t total = planner.plan(&cost, sequences, base_expected, 0, work, offsets, lengths);
    SCOPED_TRACE("trial " + std::to_string(trial) + " cost " + cost.spec() + " sequences " + std::to_string(sequences));
    // Even every candidate together cannot pay for the jump: nothing is sent.
    if ((base_expected + all) / (1.0 + jump) < base_expected / 1.0) {
      ASSERT_EQ(total, 0U);
    }
    const double plain = base_expected / cost.pass(sequences, 0);
    ASSERT_GE(rate(cost, sequences, base_expected, p, offsets, lengths), plain * (1 - 1e-9));
    if (total > 0) {
      ASSERT_GT(rate(cost, sequences, base_expected, p, offsets, lengths), plain);
    }
    // One sequence: the same through plan_one.
    if (sequences == 1) {
      std::vector<float> one = p;
      ASSERT_EQ(DraftPlanner::plan_one(&cost, 1, 1.0, 0, one), total);
    }
  }
  EXPECT_GT(plans_below_the_first_point, 1000U);
}

// drafts_can_pay() is exact about certain drafts: when it says no, no estimates make the planner
// send a draft; when it says yes, certain drafts are sent. Random curves (tables that start above 1
// token among them), bases and rooms.
TEST(DraftPlannerProperty, DraftsCanPayIsWhetherCertainDraftsWouldBeSent) {
  DraftPlanner planner;
  std::mt19937_64 rng(5);
  std::size_t yes = 0;
  std::size_t no = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    VerifyCost cost = random_cost(rng);
    if (rng() % 2 == 0) {
      const std::size_t first = 1 + rng() % 12;
      const std::vector<VerifyCost::Point> points{{first, 1.0},
                                                  {first + 1, 1.0 + static_cast<double>(rng() % 400) / 100},
                                                  {first + 2 + rng() % 40, 6.0 + static_cast<double>(rng() % 400) / 100}};
      cost = VerifyCost::table(points);
    }
    const std::size_t sequences = 1 + rng() % 6;
    const std::size_t room = rng() % 40;
    const bool can = DraftPlanner::drafts_can_pay(cost, sequences, static_cast<double>(sequences), room);
    SCOPED_TRACE("trial " + std::to_string(trial) + " cost " + cost.spec() + " sequences " + std::to_string(sequences) +
                 " room " + std::to_string(room));
    // Certain drafts, spread over the sequences.
    std::vector<std::size_t> offsets{0};
    for (std::size_t i = 0; i < sequences; ++i) offsets.push_back(room * (i + 1) / sequences);
    std::vector<float> certain(room, 1.0f);
    std::vector<std::size_t> lengths(sequences);
    const std::size_t sent = planner.plan(&cost, sequences, static_cast<double>(sequences), 0, certain, offsets, lengths);
    ASSERT_EQ(sent > 0, can);
    (can ? yes : no) += 1;
    if (!can) {
      std::vector<float> any(room);
      for (float& x : any) x = static_cast<float>(rng() % 1001) / 1000;
      std::sort(any.begin(), any.end(), std::greater<>());
      ASSERT_EQ(planner.plan(&cost, sequences, static_cast<double>(sequences), 0, any, offsets, lengths), 0U);
    }
  }
  EXPECT_GT(yes, 500U);
  EXPECT_GT(no, 500U);
}

TEST(DraftPlannerProperty, OneSequenceIsExact) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<float> p;
    float chance = 1;
    for (std::size_t j = rng() % 12; j > 0; --j) p.push_back(chance *= static_cast<float>(rng() % 1001) / 1000);
    const VerifyCost cost = random_cost(rng);
    std::vector<float> work = p;
    const std::size_t n = DraftPlanner::plan_one(&cost, 1, 1.0, 0, work);
    const std::vector<std::size_t> offsets{0, p.size()};
    EXPECT_NEAR(rate(cost, 1, 1.0, p, offsets, {n}), best_rate(cost, 1, 1.0, p, offsets, 0), 1e-9);
  }
}

// Beyond a curve's last point a pass costs s·tokens + c, and a batch that emits its last tokens
// (base_expected = base_tokens) gains from k drafts more, relative to the plain pass, less the
// larger its base: so a larger base never makes more drafts pay, up to the largest base a count
// holds. A sum base + drafts that wrapped past SIZE_MAX priced such a pass as a small one.
TEST(DraftPlannerProperty, PastTheLastPointALargerBaseNeverPlansMoreDrafts) {
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  DraftPlanner planner;
  std::mt19937_64 rng(64);
  for (int trial = 0; trial < 3000; ++trial) {
    const VerifyCost cost = random_cost(rng);
    SCOPED_TRACE(cost.spec());
    const std::size_t small = cost.points().back().tokens + rng() % 1000;
    const std::size_t large = rng() % 2 == 0 ? kMax - rng() % 16 : small + rng() % (kMax - small);
    std::vector<std::size_t> offsets{0};
    std::vector<float> p;
    for (std::size_t i = 1 + rng() % 3; i > 0; --i) {
      float chance = 1;
      for (std::size_t j = rng() % 8; j > 0; --j) p.push_back(chance *= static_cast<float>(rng() % 1001) / 1000);
      offsets.push_back(p.size());
    }
    const auto planned = [&](std::size_t base) {
      std::vector<float> work = p;
      std::vector<std::size_t> lengths(offsets.size() - 1);
      return planner.plan(&cost, base, static_cast<double>(base), 0, work, offsets, lengths);
    };
    const auto planned_one = [&](std::size_t base) {
      std::vector<float> work(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(offsets[1]));
      return DraftPlanner::plan_one(&cost, base, static_cast<double>(base), 0, work);
    };
    ASSERT_LE(planned(large), planned(small)) << small << " -> " << large;
    ASSERT_LE(planned_one(large), planned_one(small)) << small << " -> " << large;
    const std::size_t room = 1 + rng() % 64;
    if (DraftPlanner::drafts_can_pay(cost, large, static_cast<double>(large), room)) {
      ASSERT_TRUE(DraftPlanner::drafts_can_pay(cost, small, static_cast<double>(small), room))
          << small << " -> " << large;
    }
  }
}

TEST(DraftPlanner, ABaseOfSizeMaxPlansNoDraftThatCannotPay) {
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  const VerifyCost knee = VerifyCost::knee(1);  // every token costs a pass: only a certain draft pays
  std::vector<float> p(5, 0.9f);
  EXPECT_EQ(DraftPlanner::plan_one(&knee, kMax, static_cast<double>(kMax), 0, p), 0U);
  EXPECT_FALSE(DraftPlanner::drafts_can_pay(knee, kMax, static_cast<double>(kMax), 5));
  DraftPlanner planner;
  std::vector<float> batch(5, 0.9f);
  const std::vector<std::size_t> offsets{0, 2, 5};
  std::vector<std::size_t> lengths(2);
  EXPECT_EQ(planner.plan(&knee, kMax - 1, static_cast<double>(kMax - 1), 0, batch, offsets, lengths), 0U);
}

TEST(DraftPlanner, WithoutACostEverythingIsSentAndABudgetKeepsTheMostProbable) {
  DraftPlanner planner;
  std::vector<float> p = {0.9f, 0.5f, 0.1f, 0.8f, 0.7f, 0.05f};
  const std::vector<std::size_t> offsets = {0, 3, 6};
  std::vector<std::size_t> lengths(2);
  EXPECT_EQ(planner.plan(nullptr, 2, 2, 0, p, offsets, lengths), 6U);
  EXPECT_EQ(planner.plan(nullptr, 2, 2, 5, p, offsets, lengths), 3U);  // 0.9, 0.8, 0.7
  EXPECT_EQ(lengths[0], 1U);
  EXPECT_EQ(lengths[1], 2U);
  EXPECT_EQ(planner.plan(nullptr, 2, 2, 2, p, offsets, lengths), 0U);
}

TEST(DraftPlanner, BadEstimatesAreMadeValidInPlace) {
  std::vector<float> p = {std::numeric_limits<float>::quiet_NaN(), 2.0f, -1.0f, 0.5f};
  const VerifyCost flat = VerifyCost::knee(100);
  (void)DraftPlanner::plan_one(&flat, 1, 1, 0, p);
  EXPECT_EQ(p, (std::vector<float>{0, 0, 0, 0}));
  std::vector<float> q = {2.0f, 0.5f, 0.9f, std::numeric_limits<float>::infinity()};
  (void)DraftPlanner::plan_one(&flat, 1, 1, 0, q);
  EXPECT_EQ(q, (std::vector<float>{1, 0.5f, 0.5f, 0.5f}));
}

// A flat cost sends every candidate that could be accepted; a pass that pays for every token
// in full sends none; between them, the plan sends a draft when its chance beats what it adds
// to the pass's cost at the rate the pass achieves.
TEST(DraftPlanner, TheCostDecides) {
  DraftPlanner planner;
  const std::vector<std::size_t> offsets = {0, 2, 4};
  std::vector<std::size_t> lengths(2);
  std::vector<float> p = {0.9f, 0.6f, 0.3f, 0.01f};
  const VerifyCost flat = VerifyCost::knee(64);
  EXPECT_EQ(planner.plan(&flat, 2, 2, 0, p, offsets, lengths), 4U);
  const VerifyCost linear = VerifyCost::knee(1);
  EXPECT_EQ(planner.plan(&linear, 2, 2, 0, p, offsets, lengths), 0U);
  // Each token beyond 2 costs 1/8 of a two-token pass. 0.9 and 0.6 raise the rate from 2 to
  // 2.9 / 1.125 = 2.58 and 3.5 / 1.25 = 2.8 tokens per unit; 0.3 would lower it to 3.8 / 1.375 =
  // 2.76 (a draft pays only when its chance beats the rate times its cost, 2.8 / 8 = 0.35).
  const VerifyCost steep = VerifyCost::table(std::vector<VerifyCost::Point>{{2, 1}, {10, 2}});
  EXPECT_EQ(planner.plan(&steep, 2, 2, 0, p, offsets, lengths), 2U);
  EXPECT_EQ(lengths[0], 2U);
  EXPECT_EQ(lengths[1], 0U);
}

}  // namespace
}  // namespace ngramspec
