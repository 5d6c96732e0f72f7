#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ngramspec/argument_error.hpp"

namespace ngramspec {

/// What one verify pass costs as a function of the tokens in it: every sequence's last token
/// and drafts (and any prefill the engine runs in the same pass), summed over the batch.
///
/// Only ratios matter: a draft length is chosen by expected tokens per unit of cost, so
/// seconds, milliseconds and "a one-token pass = 1" all choose alike. Every cost is stored
/// normalized, so that a one-token pass costs 1: the same curve at any scale, tiny or huge,
/// plans identical drafts. A cost more than
/// kMaxCost times the one-token pass's is refused, so that no cost the planner forms overflows.
///
/// Three forms, all piecewise linear and non-decreasing:
/// - flat: every pass costs the same whatever it carries (a table of one point).
/// - knee(N): flat up to N tokens, then linear through the origin (a pass of 2N tokens costs
///   twice one of N). The shape of a pass that is memory-bound until its arithmetic catches up
///   with streaming the weights, as a GPU serving a large model is up to a few hundred tokens
///   a pass (docs/BENCHMARKS.md#serving-and-verify-cost measures such curves).
/// - table(points): measured points, linear between them and beyond the last point with the
///   slope of the last two (flat before the first). What an engine times at start-up;
///   measure_verify_cost() below does the timing.
///
/// parse() reads the same forms from text: "flat", "knee:N", "table:1=1,2=1.25,3=1.71"; the
/// C ABI (ngramspec_batch_config::cost), the Python package and the tools all read them there.
class VerifyCost {
 public:
  /// Largest cost of a pass, as a multiple of the one-token pass's.
  static constexpr double kMaxCost = 1e200;

  /// One measured point: a pass of `tokens` tokens costs `cost`.
  struct Point {
    std::size_t tokens = 0;
    double cost = 0;
  };

  /// Every pass costs 1 (spec "flat").
  [[nodiscard]] static VerifyCost flat();
  /// Flat at `base` up to `flat_tokens` tokens, then base · tokens / flat_tokens (stored
  /// normalized: base only sets the unit).
  /// Throws std::invalid_argument naming the value when flat_tokens is 0 or base is not
  /// finite and positive.
  [[nodiscard]] static VerifyCost knee(std::size_t flat_tokens, double base = 1.0);
  /// Linear interpolation of `points`, which must have strictly increasing token counts (at
  /// least 1), finite positive costs that never decrease, none more than kMaxCost times the
  /// first, and at least one point. Throws std::invalid_argument naming the point and the
  /// value otherwise.
  [[nodiscard]] static VerifyCost table(std::span<const Point> points);
  /// "flat", "knee:N" or "table:T=C,T=C,...". Throws std::invalid_argument naming the spec and
  /// what is wrong with it.
  [[nodiscard]] static VerifyCost parse(std::string_view spec);

  /// The cost of a pass of `tokens` tokens relative to a one-token pass (0 costs what 1 does).
  [[nodiscard]] double operator()(std::size_t tokens) const noexcept;
  /// The cost of a pass of `base_tokens` tokens (the sequences' last tokens and any prefill)
  /// that carries `drafts` drafts more, as the planner prices it: (*this)(base_tokens + drafts)
  /// from the table's first point N on. A table whose first point is N > 1 tokens was measured
  /// on passes of N or more (an engine serving N sequences) and says nothing of fewer: there a
  /// plain pass is priced at (*this)(N) · base_tokens / N, the least it could cost (a pass that
  /// pays for every token), and drafts add what they add over N, (*this)(N + drafts) -
  /// (*this)(N), a fixed step included (an engine that rebuilds its graph for a new pass shape
  /// pays it at any batch size). Whatever the truth below N, flat or proportional, a draft the
  /// planner sends there pays: it is held to at least the bar the truth sets (docs/ALGORITHM.md,
  /// "A table measured on N sequences"). The replay prices its passes the same way. Flat and
  /// knee curves start at 1 token, and a base of 0 costs what 1 does: unchanged. A base + drafts
  /// past SIZE_MAX is priced on the curve's tail beyond it, never as the small pass a wrapped
  /// count would be.
  [[nodiscard]] double pass(std::size_t base_tokens, std::size_t drafts) const noexcept {
    const std::size_t first = points_.front().tokens;
    if (base_tokens >= first || base_tokens == 0) return of_sum(base_tokens, drafts);
    const double plain = points_.front().cost * static_cast<double>(base_tokens) / static_cast<double>(first);
    // What the drafts add is taken first, so that it is never below 0 by a rounding.
    return drafts == 0 ? plain : plain + (of_sum(first, drafts) - points_.front().cost);
  }
  /// The cost of one more token after `tokens`: (*this)(tokens + 1) - (*this)(tokens).
  [[nodiscard]] double marginal(std::size_t tokens) const noexcept { return of_sum(tokens, 1) - (*this)(tokens); }

  /// The points, normalized (the first costs 1); a knee has two, (1, 1) and (N, 1), and a
  /// tail slope of 1 / N.
  [[nodiscard]] std::span<const Point> points() const noexcept { return points_; }
  /// Cost per token beyond the last point.
  [[nodiscard]] double tail_slope() const noexcept { return tail_slope_; }
  /// The spec that parse() reads back into an equal cost: "flat", "knee:N" or "table:..." with
  /// the costs as given.
  [[nodiscard]] const std::string& spec() const noexcept { return spec_; }

  /// The same curve, whose spec() shows the normalized costs (the points are normalized
  /// already).
  [[nodiscard]] VerifyCost normalized() const;

 private:
  // LearnedCost rewrites its curve in place before every pass: no allocation, no validation of
  // what it builds from its own fit.
  friend class LearnedCost;
  VerifyCost() = default;
  /// The cost of a + b tokens, also where the sum is past SIZE_MAX: there the tail goes on at its
  /// slope. A sum that wrapped would price the largest passes as the smallest, and make drafts on
  /// a huge base look free.
  [[nodiscard]] double of_sum(std::size_t a, std::size_t b) const noexcept {
    constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
    if (b <= kMax - a) return (*this)(a + b);
    return (*this)(kMax) + tail_slope_ * static_cast<double>(b - (kMax - a));
  }
  std::vector<Point> points_;
  double tail_slope_ = 0;
  std::string spec_;
};

/// The pass times a measurement keeps, from `seconds[i]`, the timings of its i-th pass size (one
/// a round, sizes in increasing order): the median of each (the upper one of an even count),
/// raised to the one before it (noise: a pass never costs less for carrying more) and to
/// 1e-12 s (a pass too fast for the clock still costs something). measure_verify_cost keeps
/// these, and so does an engine that times its passes its own way (ngramspec-llama's, between
/// plain passes). Throws std::invalid_argument naming the size that has no timing.
[[nodiscard]] inline std::vector<double> median_pass_seconds(std::vector<std::vector<double>> seconds) {
  std::vector<double> kept;
  kept.reserve(seconds.size());
  double floor = 0;
  for (std::size_t i = 0; i < seconds.size(); ++i) {
    std::vector<double>& times = seconds[i];
    if (times.empty()) {
      throw ArgumentError("ngramspec::median_pass_seconds",
                          "seconds[" + std::to_string(i) + "] is empty: every pass size needs a timing");
    }
    std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
    floor = std::max({floor, times[times.size() / 2], 1e-12});
    kept.push_back(floor);
  }
  return kept;
}

/// Times `run_pass(n)`, one verify pass of n tokens through the engine's own forward, for each
/// n in `token_counts`, and returns the measured curve as a VerifyCost::table, normalized so
/// that the smallest count costs 1.
///
/// Each count is run `repeats` times after one warm-up run, and its median time is kept;
/// counts run interleaved (one round over every count, `repeats` rounds) so that a slow spell
/// of a shared machine spreads over all of them instead of bending one. A measured time
/// below the one before it (noise) is raised to it: a pass never costs less for carrying more.
/// `run_pass` must leave the engine as it found it (roll its cache back). Throws
/// std::invalid_argument when token_counts is empty, not strictly increasing, or contains 0,
/// or when repeats is 0; exceptions from run_pass propagate.
template <class RunPass>
[[nodiscard]] VerifyCost measure_verify_cost(RunPass&& run_pass, std::span<const std::size_t> token_counts,
                                             std::size_t repeats = 7) {
  using Clock = std::chrono::steady_clock;
  if (token_counts.empty()) throw ArgumentError("ngramspec::measure_verify_cost", "no token counts to time");
  if (repeats == 0) throw ArgumentError("ngramspec::measure_verify_cost", "repeats = 0; it must be at least 1");
  for (std::size_t i = 0; i < token_counts.size(); ++i) {
    if (token_counts[i] == 0 || (i > 0 && token_counts[i] <= token_counts[i - 1])) {
      throw ArgumentError("ngramspec::measure_verify_cost",
                          "token_counts[" + std::to_string(i) + "] = " + std::to_string(token_counts[i]) +
                              " is invalid: counts must be at least 1 and strictly increasing");
    }
  }
  for (const std::size_t n : token_counts) run_pass(n);  // warm-up: caches, lazy allocations
  std::vector<std::vector<double>> seconds(token_counts.size());
  for (std::size_t round = 0; round < repeats; ++round) {
    for (std::size_t i = 0; i < token_counts.size(); ++i) {
      const auto start = Clock::now();
      run_pass(token_counts[i]);
      seconds[i].push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
  }
  const std::vector<double> kept = median_pass_seconds(std::move(seconds));
  std::vector<VerifyCost::Point> points;
  for (std::size_t i = 0; i < token_counts.size(); ++i) points.push_back({token_counts[i], kept[i]});
  return VerifyCost::table(points).normalized();
}

}  // namespace ngramspec
