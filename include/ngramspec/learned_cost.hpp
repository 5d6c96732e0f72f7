#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ngramspec/argument_error.hpp"
#include "ngramspec/verify_cost.hpp"

namespace ngramspec {

/// Settings of a LearnedCost.
struct LearnedCostConfig {
  /// The most exploration may lose, as a fraction of the time served: passes that try a draft
  /// length no pass has measured yet may cost, above what the learner expected of them, at most
  /// this fraction of every second served so far plus one pass (docs/ALGORITHM.md, "A cost
  /// learned from the passes served"). 0: never explore (the learner then knows only the
  /// lengths its prior or its plain passes lead it to). At most 1.
  double exploration = 0.005;
  /// A plain pass (no drafts) at least once in this many passes of a batch size, so that the
  /// time of a plain pass, against which every other pass is priced, follows the machine (a
  /// second process taking a core slows every pass). At least 2.
  std::size_t plain_every = 128;
};

/// What a verify pass costs, learned from the passes an engine serves: each pass is a
/// measurement (its sequences, its tokens, how long it took), and the planner reads the
/// estimate through curve() before the next one. Once trusted, a curve measured at start is
/// a prior, not the truth: a machine that gets busy, a GPU whose large passes cost more than a
/// start-up timing said, a graph rebuilt when the pass shape changes, all show up in the passes
/// served.
///
/// The estimate, per batch size (half-octave buckets of the pass's sequences): the time of a
/// plain pass (its log, tracked with a step that grows while the errors keep one sign, Trigg
/// and Leach's adaptive smoothing, so that a drift is followed fast and noise slowly), and the
/// ratio of a pass with d more tokens to it at 49 points of d (every d to 16, then four per
/// octave to 4096), each tracked the same way with its errors clipped (an outlier moves it a
/// little), fitted non-decreasing in d (pool-adjacent-violators). When the engine pays for a
/// pass whose token count differs from the pass before (llama.cpp rebuilding its graph), plain
/// passes after a change and after one alike measure that price apart, and the curve adds it to
/// every token count but the last pass's and plain's, twice after a plain pass (into the shape of
/// drafts and back).
///
/// What no pass has measured is priced by the prior (the curve given, while passes agree with
/// it within a third of a log unit; the first that does not retires it), else pessimistically:
/// every token beyond the largest measured as dear as the tokens of that pass. Exploration
/// prices lengths up to twice the largest measured (plus one) as if they cost no more than it,
/// while a budget allows: every pass adds LearnedCostConfig::exploration of its time, and every
/// pass that carried more than was measured takes away what it cost above what the curve said.
///
/// Memory is fixed at construction (a few tens of kilobytes); curve() and observe() allocate
/// nothing and take a few hundred nanoseconds. Not thread-safe: one decoder's passes.
class LearnedCost {
 public:
  /// Points of d, the tokens a pass carries beyond one per sequence: every d to 32, then eight
  /// per octave to 4096 (a step of a staircase falls between two points at most an eighth of
  /// an octave apart).
  static constexpr std::size_t kGrid = 89;
  /// Batch-size buckets: 1, 2, 3, 4, 5-6, 7-8, 9-12, ..., 3073-4096, and every larger batch.
  static constexpr std::size_t kBuckets = 24;
  /// A point no pass has refreshed in this many passes of its bucket is taken as unmeasured.
  static constexpr std::uint64_t kStale = 4096;
  /// How many noise widths below its estimate a point measured once is taken at (over the root
  /// of its passes after).
  static constexpr double kOptimism = 2.0;

  /// Learns from `prior` when given (a curve over the tokens of a pass, as measure_verify_cost()
  /// times it at start), else from a pessimistic start. Throws ArgumentError naming the value
  /// when config.exploration is outside [0, 1] or config.plain_every is below 2.
  explicit LearnedCost(std::optional<VerifyCost> prior = std::nullopt, LearnedCostConfig config = {})
      : prior_(std::move(prior)), config_(config), curve_(VerifyCost::flat()) {
    check(config_);
    if (prior_) prior_ = prior_->normalized();
    curve_.points_.reserve(kGrid + 8);
    curve_.spec_ = "learned";
  }

  /// Throws ArgumentError naming the field and value when `config` is invalid (see the constructor).
  static void check(const LearnedCostConfig& config) {
    if (!(config.exploration >= 0 && config.exploration <= 1)) {
      throw ArgumentError("ngramspec::LearnedCostConfig", "exploration = " + std::to_string(config.exploration) +
                                                              " is invalid: must be between 0 and 1");
    }
    if (config.plain_every < 2) {
      throw ArgumentError("ngramspec::LearnedCostConfig", "plain_every = " + std::to_string(config.plain_every) +
                                                              " is invalid: must be at least 2");
    }
  }

  /// The cost to plan the next pass of `rows` sequences against (rows 0 is taken as 1). The
  /// reference stays valid until the next call of curve(); nothing is allocated.
  [[nodiscard]] const VerifyCost& curve(std::size_t rows) noexcept {
    rows = std::max<std::size_t>(rows, 1);
    Bucket& b = buckets_[bucket_of(rows)];
    planned_rows_ = rows;
    planned_exploring_ = false;
    if (b.level_weight + b.changed_weight == 0 || b.since_same_plain >= config_.plain_every) {
      force_plain(rows);
      return curve_;
    }
    fit(b, rows);
    return curve_;
  }

  /// One pass served: `rows` sequences, `tokens` tokens in all (at least one per sequence), in
  /// `seconds`. Throws ArgumentError naming the value, learning nothing, when rows is 0, tokens is
  /// below rows or seconds is not finite and positive.
  void observe(std::size_t rows, std::size_t tokens, double seconds) {
    if (rows == 0) throw ArgumentError("ngramspec::LearnedCost::observe", "rows = 0: a pass serves a sequence at least");
    if (tokens < rows) {
      throw ArgumentError("ngramspec::LearnedCost::observe", "tokens = " + std::to_string(tokens) +
                                                                 " is below rows = " + std::to_string(rows) +
                                                                 ": a pass carries a token of each sequence");
    }
    if (!(std::isfinite(seconds) && seconds > 0)) {
      throw ArgumentError("ngramspec::LearnedCost::observe",
                          "seconds = " + std::to_string(seconds) + " is invalid: must be finite and positive");
    }
    Bucket& b = buckets_[bucket_of(rows)];
    const std::size_t d = tokens - rows;
    const bool changed = b.passes > 0 && tokens != b.last_tokens;
    const double x = std::log(seconds);
    ++passes_;
    seconds_ += seconds;
    ++b.passes;
    budget_ += config_.exploration * seconds;
    if (d == 0) {
      plain_seconds_ += seconds;
      ++plain_passes_;
      if (changed) {
        b.changed.update(x, b.changed_weight);
        ++b.since_same_plain;
      } else {
        b.level.update(x, b.level_weight);
        b.since_same_plain = 0;
      }
    } else {
      ++b.since_same_plain;
      const double level = b.level_of();
      if (b.level_weight + b.changed_weight > 0) {
        double ratio = seconds / std::exp(level);
        if (changed) ratio -= b.penalty();
        learn_ratio(b, rows, d, std::log(std::max(ratio, 1e-3)));
      }
      if (planned_exploring_ && rows == planned_rows_) {
        // What the planner was told this pass costs, against what it cost.
        const double expected = std::exp(level) * planned_scale_ * curve_.pass(rows, d);
        const double loss = seconds - expected;
        budget_ -= loss;
        exploration_seconds_ += loss;
        ++exploring_passes_;
      }
    }
    budget_ = std::min(budget_, 16.0 * seconds_ / static_cast<double>(passes_));
    b.last_tokens = tokens;
    planned_exploring_ = false;
  }

  /// Bytes held beyond sizeof(LearnedCost): the curve's points and the prior's.
  [[nodiscard]] std::size_t curve_capacity_bytes() const noexcept {
    std::size_t bytes = curve_.points_.capacity() * sizeof(VerifyCost::Point) + curve_.spec_.capacity();
    if (prior_) bytes += prior_->points().size() * sizeof(VerifyCost::Point) + prior_->spec().capacity();
    return bytes;
  }
  /// Passes observed, and their seconds.
  [[nodiscard]] std::uint64_t passes() const noexcept { return passes_; }
  [[nodiscard]] double seconds() const noexcept { return seconds_; }
  /// Plain passes observed (no drafts), and their seconds.
  [[nodiscard]] std::uint64_t plain_passes() const noexcept { return plain_passes_; }
  [[nodiscard]] double plain_seconds() const noexcept { return plain_seconds_; }
  /// Passes that carried more than was measured, and what they cost above what the curve said
  /// of them (negative: less). At most exploration × seconds() plus one pass (the bound).
  [[nodiscard]] std::uint64_t exploring_passes() const noexcept { return exploring_passes_; }
  [[nodiscard]] double exploration_seconds() const noexcept { return exploration_seconds_; }
  /// The prior, normalized, when there is one.
  [[nodiscard]] const std::optional<VerifyCost>& prior() const noexcept { return prior_; }
  [[nodiscard]] const LearnedCostConfig& config() const noexcept { return config_; }
  /// The estimate at `rows` sequences, as curve() plans with it (without the next pass's shape
  /// and exploration): the time of a plain pass, in seconds (0 before any), the price of a pass
  /// whose shape changed, as a fraction of a plain pass, and the largest measured d.
  struct Estimate {
    double plain_seconds = 0;
    double shape_change = 0;
    std::size_t measured_to = 0;
    bool prior_trusted = false;
  };
  [[nodiscard]] Estimate estimate(std::size_t rows) const noexcept {
    const Bucket& b = buckets_[bucket_of(std::max<std::size_t>(rows, 1))];
    Estimate e;
    if (b.level_weight + b.changed_weight > 0) e.plain_seconds = std::exp(b.level_of());
    e.shape_change = b.penalty();
    for (std::size_t i = 1; i < kGrid; ++i) {
      if (b.measured(i)) e.measured_to = grid()[i];
    }
    e.prior_trusted = prior_.has_value() && b.prior_trusted;
    return e;
  }
  /// One line per batch size served: plain-pass time, shape price, measured ratios.
  [[nodiscard]] std::string describe() const {
    std::string out;
    char line[256];
    for (std::size_t k = 0; k < kBuckets; ++k) {
      const Bucket& b = buckets_[k];
      if (b.passes == 0) continue;
      std::snprintf(line, sizeof line, "%zu sequences: %llu passes, plain %.4g ms, shape change +%.3g, %s;",
                    bucket_low(k), static_cast<unsigned long long>(b.passes),
                    b.level_weight + b.changed_weight > 0 ? 1e3 * std::exp(b.level_of()) : 0.0, b.penalty(),
                    !prior_ ? "no prior" : b.prior_trusted ? "prior trusted" : "prior retired");
      out += line;
      for (std::size_t i = 1; i < kGrid; ++i) {
        if (!b.measured(i)) continue;
        std::snprintf(line, sizeof line, " +%zu: %.3g", grid()[i], std::exp(b.cells[i].ratio.value));
        out += line;
      }
      out += '\n';
    }
    return out;
  }

 private:
  // A tracked log value: its estimate, and the smoothed error and absolute error of Trigg and
  // Leach's tracking signal, whose size sets the step.
  struct Tracked {
    double value = 0;
    double error = 0;
    double abs_error = 0;
    // `noise`: what the passes' noise is known to be elsewhere (the first updates' clip).
    void update(double x, double& weight, double w = 1.0, double noise = 0) noexcept {
      if (weight <= 0) {
        value = x;
        weight = w;
        return;
      }
      double e = x - value;
      // An outlier moves the estimate a little; the first few passes are averaged as they come.
      if (weight >= 3) {
        const double spread = std::max({0.1, 3 * abs_error, 3 * noise});
        e = std::clamp(e, -spread, spread);
      }
      error = 0.9 * error + 0.1 * e;
      abs_error = 0.9 * abs_error + 0.1 * std::abs(e);
      const double signal = abs_error > 0 ? error / abs_error : 0;
      weight += w;
      const double step = std::max(w / weight, std::min(0.5, 0.03 + 0.47 * signal * signal));
      value += std::min(1.0, step * w) * e;
    }
  };
  struct Cell {
    Tracked ratio;  // log of the pass's time over a plain pass's
    double weight = 0;
    std::uint64_t last = 0;  // the bucket's pass count at its last update
  };
  struct Bucket {
    Tracked level;    // log seconds of a plain pass after one of the same tokens
    Tracked changed;  // log seconds of a plain pass after one of other tokens
    double level_weight = 0;
    double changed_weight = 0;
    std::uint64_t passes = 0;
    std::uint64_t since_same_plain = 0;
    std::size_t last_tokens = 0;
    bool prior_trusted = true;
    double spread = 0;  // smoothed absolute error of the ratios' updates: the passes' noise
    std::array<Cell, kGrid> cells{};
    [[nodiscard]] double level_of() const noexcept {
      return level_weight > 0 ? level.value : changed.value;
    }
    // A changed shape's price over a plain pass, once both kinds of plain pass are known well
    // enough; 0 below 3 % (noise, not a price).
    [[nodiscard]] double penalty() const noexcept {
      if (level_weight < 8 || changed_weight < 8) return 0;
      const double p = std::exp(changed.value - level.value) - 1;
      return p < 0.03 ? 0 : p;
    }
    // A point is measured after three passes (one pass can be an outlier nothing would
    // revisit), while fresh; until then it is explored.
    [[nodiscard]] bool fresh(std::size_t i) const noexcept { return cells[i].weight > 0 && passes - cells[i].last < kStale; }
    [[nodiscard]] bool measured(std::size_t i) const noexcept { return cells[i].weight >= 3 && fresh(i); }
    // The passes' noise, in log units: of the ratios' updates, else of plain passes.
    [[nodiscard]] double noise() const noexcept { return std::max(spread, 1.25 * level.abs_error); }
  };

  static constexpr std::array<std::size_t, kGrid> make_grid() {
    std::array<std::size_t, kGrid> g{};
    for (std::size_t i = 0; i <= 32; ++i) g[i] = i;
    // Eight per octave from 32: 32 * 2^(j/8), rounded, to 4096.
    constexpr std::array<std::size_t, 8> step{32, 35, 38, 42, 45, 49, 54, 59};
    for (std::size_t j = 1; j + 32 < kGrid; ++j) g[32 + j] = step[j % 8] << (j / 8);
    return g;
  }
  static const std::array<std::size_t, kGrid>& grid() noexcept {
    static constexpr std::array<std::size_t, kGrid> g = make_grid();
    return g;
  }
  // The grid interval [i, i + 1] holding d (d past the grid: the last point).
  static std::size_t interval(std::size_t d) noexcept {
    const auto& g = grid();
    if (d >= g.back()) return kGrid - 1;
    return static_cast<std::size_t>(std::upper_bound(g.begin(), g.end(), d) - g.begin()) - 1;
  }
  static std::size_t bucket_of(std::size_t rows) noexcept {
    if (rows <= 4) return rows - 1;
    // Half octaves: 5-6, 7-8, 9-12, 13-16, ...
    const std::size_t octave = static_cast<std::size_t>(std::bit_width(rows - 1)) - 1;  // rows-1 in [2^o, 2^(o+1))
    const std::size_t half = ((rows - 1) >> (octave - 1)) & 1;
    return std::min(kBuckets - 1, 4 + 2 * (octave - 2) + half);
  }
  static std::size_t bucket_low(std::size_t k) noexcept {
    if (k < 4) return k + 1;
    const std::size_t octave = (k - 4) / 2 + 2;
    const std::size_t half = (k - 4) % 2;
    return (std::size_t{1} << octave) + half * (std::size_t{1} << (octave - 1)) + 1;
  }

  // The prior's ratio of a pass of rows + d tokens to a plain one, in logs.
  [[nodiscard]] double prior_ratio(std::size_t rows, std::size_t d) const noexcept {
    return std::log(prior_->pass(rows, d) / prior_->pass(rows, 0));
  }

  void learn_ratio(Bucket& b, std::size_t rows, std::size_t d, double x) noexcept {
    const auto& g = grid();
    const std::size_t i = interval(d);
    // A pass between two points teaches both, each by its nearness.
    double wi = 1, wj = 0;
    if (i + 1 < kGrid && d > g[i]) {
      wj = static_cast<double>(d - g[i]) / static_cast<double>(g[i + 1] - g[i]);
      wi = 1 - wj;
    }
    if (prior_ && b.prior_trusted) {
      const std::size_t near = wj > wi ? i + 1 : i;
      if (!b.measured(near) && std::abs(x - prior_ratio(rows, d)) > 0.3) b.prior_trusted = false;
    }
    // Where a point has no measurement, start it where the pass says.
    for (const auto& [k, w] : {std::pair{i, wi}, std::pair{i + 1, wj}}) {
      if (w < 0.05 || k >= kGrid || k == 0) continue;
      Cell& c = b.cells[k];
      if (!b.fresh(k)) c.weight = 0;
      if (c.weight > 0) b.spread = 0.95 * b.spread + 0.05 * w * std::abs(x - c.ratio.value);
      c.ratio.update(x, c.weight, w, b.noise());
            c.last = b.passes;
    }
  }

  // A curve that sends no draft: the bucket's plain time is not known yet.
  void force_plain(std::size_t rows) noexcept {
    auto& p = curve_.points_;
    p.clear();
    p.push_back({rows, 1.0});
    p.push_back({rows + 1, 1e6});
    curve_.tail_slope_ = 1e6;
  }

  // Fits the bucket's ratios at `rows` sequences into curve_.
  void fit(Bucket& b, std::size_t rows) noexcept {
    const auto& g = grid();
    const bool use_prior = prior_.has_value() && b.prior_trusted;
    // Optimism (exploring unmeasured points, a lower bound on measured ones) while the budget
    // lasts: every pass planned so is charged what it cost above what it was told.
    const bool optimistic = !use_prior && config_.exploration > 0 && budget_ > 0;
    // Pool-adjacent violators over the measured points (and the prior's where unmeasured),
    // from plain (0, weight large) up: blocks of (value, weight, last index).
    std::size_t n = 0;
    block_value_[0] = 0;
    block_weight_[0] = 1e9;
    block_end_[0] = 0;
    n = 1;
    std::size_t top = 0;
    for (std::size_t i = 1; i < kGrid; ++i) {
      double v = 0, w = 0;
      if (b.measured(i)) {
        // Optimism under noise: a point measured a few times is taken at a lower bound of what
        // it may cost (its noise over the root of its passes), so it is used, and so measured,
        // until the bound tightens; on a noiseless machine this is the estimate itself.
        const Cell& c = b.cells[i];
        v = c.ratio.value - (optimistic ? kOptimism * b.noise() / std::sqrt(c.weight) : 0.0);
        w = std::min(c.weight, 8.0);
        top = i;
      } else if (use_prior) {
        v = prior_ratio(rows, g[i]);
        w = 0.5;
      } else {
        continue;
      }
      block_value_[n] = v;
      block_weight_[n] = w;
      block_end_[n] = i;
      ++n;
      while (n > 1 && block_value_[n - 2] > block_value_[n - 1]) {
        const double wsum = block_weight_[n - 2] + block_weight_[n - 1];
        block_value_[n - 2] = (block_value_[n - 2] * block_weight_[n - 2] + block_value_[n - 1] * block_weight_[n - 1]) / wsum;
        block_weight_[n - 2] = wsum;
        block_end_[n - 2] = block_end_[n - 1];
        --n;
      }
    }
    // Expand the blocks to points.
    std::array<double, kGrid> fitted{};
    std::array<bool, kGrid> present{};
    {
      std::size_t start = 0;
      for (std::size_t k = 0; k < n; ++k) {
        for (std::size_t i = start; i <= block_end_[k]; ++i) fitted[i] = block_value_[k];
        start = block_end_[k] + 1;
      }
      present[0] = true;
      for (std::size_t i = 1; i < kGrid; ++i) present[i] = b.measured(i) || use_prior;
    }
    const double penalty = b.penalty();
    const std::size_t last = b.last_tokens;
    auto& p = curve_.points_;
    p.clear();
    // A change of shape is paid twice by a run of passes with drafts between plain ones: into it and
    // back. A pass with drafts after a plain one is priced with both (the way back is as certain as
    // the way in), so a plain pass after one with drafts owes nothing more; another shape of drafts
    // after one with drafts pays its own way in.
    const bool after_plain = last <= rows;
    const auto add = [&](std::size_t tokens, double ratio) {
      const double change = tokens == rows || tokens == last ? 0.0 : after_plain ? 2 * penalty : penalty;
      p.push_back({tokens, ratio + change});
    };
    // Exploring (no trusted prior, budget left): every unmeasured point up to the frontier,
    // twice the largest measured d plus one, is priced as the measured point below it (a step
    // up to the next measured point at the last moment), so that the planner tries it; the
    // budget pays for what that optimism costs. Otherwise unmeasured points are left out
    // (linear between measured ones) and the tail is pessimistic.
    const bool explore = optimistic && top + 1 < kGrid;
    std::size_t frontier = top;
    if (explore) {
      frontier = top + 1;
      while (frontier + 1 < kGrid && g[frontier + 1] <= 2 * g[top] + 1) ++frontier;
    }
    std::size_t last_index = 0;
    double below = 1;
    for (std::size_t i = 0; i < kGrid; ++i) {
      if (present[i]) {
        below = std::exp(fitted[i]);
        add(rows + g[i], below);
        last_index = i;
      } else if (explore && i <= frontier) {
        add(rows + g[i], below);
        last_index = i;
      }
    }
    double tail = 0;
    if (use_prior) {
      tail = prior_->tail_slope() / prior_->pass(rows, 0);
    } else {
      // Pessimistic: every token past the last point as dear as that pass's.
      tail = below / static_cast<double>(rows + g[last_index]);
    }
    planned_exploring_ = optimistic;
    // The last pass's shape costs no change: a dip at its token count (between points, its
    // neighbours carry the change).
    if (penalty > 0 && last > rows) place_dip(rows, last, penalty, tail);
    // Normalized: a plain pass costs 1.
    const double first = p.front().cost;
    planned_scale_ = first;
    for (auto& point : p) point.cost /= first;
    curve_.tail_slope_ = tail / first;
    // Guard the planner against a curve that would price drafts below a plain pass.
    for (std::size_t i = 1; i < p.size(); ++i) p[i].cost = std::max(p[i].cost, 1e-9);
  }

  // Inserts points at last - 1, last and last + 1 (those that are not points already): the
  // curve there with the shape change, without it at `last`.
  void place_dip(std::size_t rows, std::size_t last, double penalty, double tail) noexcept {
    auto& p = curve_.points_;
    const auto value_at = [&](std::size_t tokens) {
      // p holds shaped values (penalty added but at `last`), linear between, tail beyond.
      if (tokens >= p.back().tokens) return p.back().cost + tail * static_cast<double>(tokens - p.back().tokens);
      const auto it = std::upper_bound(p.begin(), p.end(), tokens,
                                       [](std::size_t t, const VerifyCost::Point& q) { return t < q.tokens; });
      const auto& hi = *it;
      const auto& lo = *(it - 1);
      const double f = static_cast<double>(tokens - lo.tokens) / static_cast<double>(hi.tokens - lo.tokens);
      return lo.cost + f * (hi.cost - lo.cost);
    };
    const double before = value_at(last - 1);
    const double after = value_at(last + 1);
    const double at = value_at(last);
    const bool at_is_point = std::any_of(p.begin(), p.end(), [&](const auto& q) { return q.tokens == last; });
    const double dip = at_is_point ? at : at - penalty;
    const auto put = [&](std::size_t tokens, double cost) {
      auto it = std::lower_bound(p.begin(), p.end(), tokens,
                                 [](const VerifyCost::Point& q, std::size_t t) { return q.tokens < t; });
      if (it != p.end() && it->tokens == tokens) {
        it->cost = cost;
      } else if (p.size() < p.capacity()) {
        p.insert(it, {tokens, cost});
      }
    };
    if (last - 1 > rows) put(last - 1, before);
    put(last, dip);
    put(last + 1, after);
  }


  std::optional<VerifyCost> prior_;
  LearnedCostConfig config_;
  VerifyCost curve_;
  std::array<Bucket, kBuckets> buckets_{};
  std::array<double, kGrid> block_value_{};
  std::array<double, kGrid> block_weight_{};
  std::array<std::size_t, kGrid> block_end_{};
  double budget_ = 0;
  std::uint64_t passes_ = 0;
  std::uint64_t plain_passes_ = 0;
  std::uint64_t exploring_passes_ = 0;
  double seconds_ = 0;
  double plain_seconds_ = 0;
  double exploration_seconds_ = 0;
  // The last curve() planned: its rows, whether it explored, the largest measured d, its
  // ratio and the frontier.
  std::size_t planned_rows_ = 1;
  bool planned_exploring_ = false;
  double planned_scale_ = 1;  // curve_'s plain pass before normalizing, over a plain pass after one alike
};

}  // namespace ngramspec
