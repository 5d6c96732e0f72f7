#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "ngramspec/verify_cost.hpp"

namespace ngramspec {

/// Chooses how many of its candidate drafts each sequence of a verify pass carries, so that
/// the pass's expected emitted tokens per unit of its cost is highest.
///
/// Sequence i offers candidate drafts with probabilities P[i][0] >= P[i][1] >= ..., P[i][j]
/// the estimated chance that its drafts 0..j are all accepted. Sending the first n_i of them
/// makes it emit 1 + P[i][0] + ... + P[i][n_i - 1] tokens on average (each pass emits the
/// accepted drafts and the model's own token). For the whole pass:
///
///     E(n) = base_expected + sum_i sum_{j < n_i} P[i][j],   C(n) = cost.pass(base_tokens, sum_i n_i)
///
/// and the plan maximizes E / C, the pass's throughput (the goodput of Liu et al., "Optimizing
/// Speculative Decoding for Serving Large Language Models Using Goodput", 2024, who choose
/// lengths the same way). Because each sequence's P is non-increasing, for any total m the
/// best E is the sum of the m largest P over the batch, taken as prefixes of each sequence's
/// list; so the plan is a threshold on P, and only its total m is to be chosen. The planner
/// histograms the candidates by P into kBuckets buckets, walks them from the most probable
/// down, and evaluates E / C after each bucket and at every point where the cost curve
/// bends; the best total wins (ties go to fewer drafts), and the last bucket is cut in
/// sequence order. Cost: O(candidates + kBuckets + cost points), no sorting, no allocation.
/// Grouping P to 1/kBuckets can misplace a draft whose P is within 0.001 of another's: a
/// change in E of at most 0.001 per draft.
///
/// Without a cost (nullptr) every candidate is sent (the drafters' own gates have decided);
/// under a token budget the most probable are sent first. A budget caps the pass's tokens in
/// both cases. The pass is the caller's: what it carries besides these sequences' drafts
/// (their last tokens, prefills) is base_tokens, and what it emits without them is
/// base_expected. A prefill in the pass counts as the pass's work like any other: a pass
/// that a long prompt has made expensive per token asks less of a draft.
class DraftPlanner {
 public:
  /// Resolution of the probabilities: P is grouped into buckets of width 1 / kBuckets.
  static constexpr std::size_t kBuckets = 1024;

  /// Sets lengths[i] (i < offsets.size() - 1) to the drafts sequence i sends, from its
  /// candidates probabilities[offsets[i] .. offsets[i + 1]); returns their sum. Probabilities
  /// are first made valid in place: NaN and negatives become 0, values above 1 become 1, and
  /// each is lowered to the one before it, so a drafter's bad estimate can cost throughput but
  /// never correctness. token_budget 0: no budget. Preconditions: offsets non-decreasing, its
  /// last element at most probabilities.size(), lengths.size() >= offsets.size() - 1.
  std::size_t plan(const VerifyCost* cost, std::size_t base_tokens, double base_expected, std::size_t token_budget,
                   std::span<float> probabilities, std::span<const std::size_t> offsets,
                   std::span<std::size_t> lengths) noexcept {
    const std::size_t sequences = offsets.empty() ? 0 : offsets.size() - 1;
    if (sequences == 1) {
      lengths[0] = plan_one(cost, base_tokens, base_expected, token_budget,
                            probabilities.subspan(offsets[0], offsets[1] - offsets[0]));
      return lengths[0];
    }
    std::size_t candidates = 0;
    std::size_t low = kBuckets;  // the buckets in use: [low, high]
    std::size_t high = 0;
    for (std::size_t i = 0; i < sequences; ++i) {
      float previous = 1.0f;
      for (std::size_t k = offsets[i]; k < offsets[i + 1]; ++k) {
        float p = probabilities[k];
        p = std::isnan(p) ? 0.0f : std::clamp(p, 0.0f, previous);
        probabilities[k] = previous = p;
        const std::size_t b = bucket(p);
        ++counts_[b];
        sums_[b] += p;
        low = std::min(low, b);
        high = std::max(high, b);
      }
      candidates += offsets[i + 1] - offsets[i];
    }
    std::size_t room = candidates;
    if (token_budget != 0) room = std::min(room, token_budget > base_tokens ? token_budget - base_tokens : 0);

    // The threshold: every candidate in a bucket above `cut_bucket`, and `cut_taken` of those
    // in it, in sequence order.
    std::size_t cut_bucket = kBuckets;
    std::size_t cut_taken = 0;
    if (cost == nullptr) {
      std::size_t m = 0;
      for (std::size_t b = high + 1; b-- > low && m < room;) {
        if (counts_[b] == 0) continue;
        cut_bucket = b;
        cut_taken = std::min<std::size_t>(counts_[b], room - m);
        m += cut_taken;
      }
    } else {
      const std::span<const VerifyCost::Point> points = cost->points();
      // Drafts are priced over this base (VerifyCost::pass): the curve bends at its points less it.
      const std::size_t draft_base = std::max(base_tokens, points.front().tokens);
      std::size_t next_point = 0;  // first cost point beyond the tokens planned so far
      std::size_t m = 0;
      double expected = base_expected;
      double best = base_expected / cost->pass(base_tokens, 0);
      const auto consider = [&](double e, std::size_t total, std::size_t b, std::size_t taken) {
        const double rate = e / cost->pass(base_tokens, total);
        if (rate > best * (1 + 1e-12)) {
          best = rate;
          cut_bucket = b;
          cut_taken = taken;
        }
      };
      for (std::size_t b = high + 1; b-- > low && m < room;) {
        if (counts_[b] == 0) continue;
        const std::size_t take = std::min<std::size_t>(counts_[b], room - m);
        const double mean = sums_[b] / counts_[b];
        // Where the cost bends inside this bucket the best total may lie between its ends.
        while (next_point < points.size() && points[next_point].tokens <= draft_base + m) ++next_point;
        for (std::size_t q = next_point; q < points.size() && points[q].tokens < draft_base + m + take; ++q) {
          const std::size_t part = points[q].tokens - draft_base - m;
          consider(expected + mean * static_cast<double>(part), m + part, b, part);
        }
        expected += take == counts_[b] ? sums_[b] : mean * static_cast<double>(take);
        m += take;
        consider(expected, m, b, take);
      }
    }

    std::size_t total = 0;
    for (std::size_t i = 0; i < sequences; ++i) {
      std::size_t n = 0;
      const std::size_t end = offsets[i + 1] - offsets[i];
      const float* p = probabilities.data() + offsets[i];
      while (n < end && cut_bucket < kBuckets && bucket(p[n]) > cut_bucket) ++n;
      while (n < end && cut_taken > 0 && bucket(p[n]) == cut_bucket) {
        ++n;
        --cut_taken;
      }
      lengths[i] = n;
      total += n;
    }
    // Leave the histogram empty for the next plan: only the buckets used need clearing.
    if (low <= high) {
      std::fill(counts_.begin() + static_cast<std::ptrdiff_t>(low), counts_.begin() + static_cast<std::ptrdiff_t>(high + 1), 0U);
      std::fill(sums_.begin() + static_cast<std::ptrdiff_t>(low), sums_.begin() + static_cast<std::ptrdiff_t>(high + 1), 0.0);
    }
    return total;
  }

  /// The plan for a pass of one sequence, exactly (its candidates are already in order): how
  /// many of its candidates to send. Makes `probabilities` valid in place as plan() does.
  [[nodiscard]] static std::size_t plan_one(const VerifyCost* cost, std::size_t base_tokens, double base_expected,
                                            std::size_t token_budget, std::span<float> probabilities) noexcept {
    std::size_t room = probabilities.size();
    if (token_budget != 0) room = std::min(room, token_budget > base_tokens ? token_budget - base_tokens : 0);
    float previous = 1.0f;
    for (std::size_t j = 0; j < room; ++j) {
      const float p = probabilities[j];
      probabilities[j] = previous = std::isnan(p) ? 0.0f : std::clamp(p, 0.0f, previous);
    }
    if (cost == nullptr) return room;
    std::size_t best_n = 0;
    double expected = base_expected;
    double best = expected / cost->pass(base_tokens, 0);
    for (std::size_t j = 0; j < room; ++j) {
      expected += probabilities[j];
      const double rate = expected / cost->pass(base_tokens, j + 1);
      if (rate > best * (1 + 1e-12)) {
        best = rate;
        best_n = j + 1;
      }
    }
    return best_n;
  }

  /// Whether any drafts could pay in a pass that carries base_tokens and emits base_expected
  /// without them, with up to `room` drafts more: whether some m in 1..room makes
  /// (base_expected + m) / cost.pass(base_tokens, m), every draft certain, beat the plain pass.
  /// When not, no estimate can make the planner send one, and drafting can be skipped. Between
  /// the curve's bends that rate is monotone in m, so only the bends and the ends are tried:
  /// O(points).
  [[nodiscard]] static bool drafts_can_pay(const VerifyCost& cost, std::size_t base_tokens, double base_expected,
                                           std::size_t room) noexcept {
    if (room == 0) return false;
    const double plain = base_expected / cost.pass(base_tokens, 0);
    const auto pays = [&](std::size_t m) {
      return (base_expected + static_cast<double>(m)) / cost.pass(base_tokens, m) > plain * (1 + 1e-12);
    };
    if (pays(1) || pays(room)) return true;
    const std::span<const VerifyCost::Point> points = cost.points();
    const std::size_t draft_base = std::max(base_tokens, points.front().tokens);
    for (const VerifyCost::Point& point : points) {
      if (point.tokens > draft_base && point.tokens - draft_base < room && pays(point.tokens - draft_base)) return true;
    }
    return false;
  }

  /// The least path probability a draft (a tree node, or a chain's draft) needs to belong in
  /// the best plan of a pass that carries base_tokens and emits base_expected without its
  /// drafts, with up to `room` drafts more: drafting can stop at the first candidate below it.
  /// The plan's rate E / C is at least base_expected / cost(base_tokens); dropping the plan's
  /// last draft, of path probability p and marginal cost d, raises it whenever p < d × that
  /// rate, and d is at least the least marginal cost within the room (docs/ALGORITHM.md,
  /// "Trees"). 0 on a flat stretch of the curve, near 1 where every token costs a pass.
  [[nodiscard]] static float least_path_probability(const VerifyCost& cost, std::size_t base_tokens,
                                                    double base_expected, std::size_t room) noexcept {
    if (room == 0 || base_tokens == 0) return 0.0f;
    double least = std::numeric_limits<double>::infinity();
    double previous = cost.pass(base_tokens, 0);
    const double rate = base_expected / previous;
    for (std::size_t n = 0; n < room; ++n) {
      const double next = cost.pass(base_tokens, n + 1);
      least = std::min(least, next - previous);
      previous = next;
    }
    return static_cast<float>(std::max(0.0, least * rate));
  }

 private:
  [[nodiscard]] static std::size_t bucket(float p) noexcept {
    return std::min(kBuckets - 1, static_cast<std::size_t>(p * static_cast<float>(kBuckets)));
  }

  std::array<std::uint32_t, kBuckets> counts_{};
  std::array<double, kBuckets> sums_{};
};

}  // namespace ngramspec
