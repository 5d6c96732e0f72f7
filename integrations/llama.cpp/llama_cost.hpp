#pragma once

// What a llama.cpp verify pass costs, measured through the engine itself: the curve
// BatchSpeculator sizes drafts against, and the tables ngramspec-llama --curve prints.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ngramspec/verify_cost.hpp>

#include "llama_engine.hpp"

namespace ngramspec::llama_cpp {

/// Runs passes through the engine as the decoding loops do, to time them: `sequences` sequences
/// hold `context` tokens each, then plain() appends one token to each (a plain decoding pass)
/// and drafted(n) carries n tokens spread evenly over them (one more to the first ones when it
/// does not divide), keeps the first of each and cuts the rest from the cache, as a pass whose
/// drafts were all rejected does. Positions advance as in decoding; the sequences start over
/// (untimed) before they run out of context. Leaves every sequence empty.
///
/// Timing passes this way matters: llama.cpp reuses the previous pass's compute graph when a
/// pass has the same shape and nothing was cut from the cache, so plain decoding's passes cost
/// less than one timed on its own, and a pass that drafts costs its own tokens plus the rebuild
/// of the next plain pass.
class PassTimer {
 public:
  /// Timed passes start at position `at` of each sequence (what attention reads matters: a pass
  /// at position 256 of stories260K costs five times one at 16); at most what the context leaves.
  PassTimer(Engine& engine, std::size_t sequences, std::size_t most_tokens_per_sequence, std::size_t at)
      : engine_(&engine), sequences_(sequences), most_(most_tokens_per_sequence) {
    if (engine.context() < most_ + 64) {
      throw std::runtime_error("timing passes of " + std::to_string(most_) + " tokens per sequence needs a context of " +
                               std::to_string(most_ + 64) + " tokens or more (--ctx); it is " +
                               std::to_string(engine.context()));
    }
    context_ = std::min(at, engine.context() - most_ - 64);
    filler_.resize(std::max(context_, most_));
    // Any tokens do for timing; keep them inside the vocabulary.
    for (std::size_t i = 0; i < filler_.size(); ++i) filler_[i] = static_cast<Token>((i * 7 + 3) % engine.vocab_size());
    positions_.assign(sequences_, 0);
    restart();
  }
  ~PassTimer() {
    for (std::size_t s = 0; s < sequences_; ++s) engine_->clear_sequence(s);
  }
  PassTimer(const PassTimer&) = delete;
  PassTimer& operator=(const PassTimer&) = delete;

  /// One token for every sequence, kept.
  void plain() {
    make_room();
    engine_->clear_pass();
    for (std::size_t s = 0; s < sequences_; ++s) engine_->add(s, positions_[s], std::span<const Token>(filler_).first(1), true);
    engine_->decode();
    for (std::size_t s = 0; s < sequences_; ++s) ++positions_[s];
  }
  /// `pass_tokens` tokens over the sequences; the first of each kept, the rest cut.
  void drafted(std::size_t pass_tokens) {
    make_room();
    engine_->clear_pass();
    for (std::size_t s = 0; s < sequences_; ++s) {
      const std::size_t n = pass_tokens / sequences_ + (s < pass_tokens % sequences_ ? 1 : 0);
      if (n != 0) engine_->add(s, positions_[s], std::span<const Token>(filler_).first(n), true);
    }
    engine_->decode();
    for (std::size_t s = 0; s < sequences_; ++s) {
      const std::size_t n = pass_tokens / sequences_ + (s < pass_tokens % sequences_ ? 1 : 0);
      if (n == 0) continue;
      if (n > 1) engine_->truncate(s, positions_[s] + 1);
      ++positions_[s];
    }
  }

 private:
  void restart() {
    for (std::size_t s = 0; s < sequences_; ++s) {
      engine_->clear_sequence(s);
      positions_[s] = 0;
      if (context_ == 0) continue;
      engine_->clear_pass();
      engine_->add(s, 0, std::span<const Token>(filler_).first(context_), false);
      engine_->decode();
      positions_[s] = context_;
    }
  }
  void make_room() {
    for (const std::size_t p : positions_) {
      if (p + most_ + 1 > engine_->context()) {
        restart();
        return;
      }
    }
  }

  Engine* engine_;
  std::size_t sequences_;
  std::size_t most_;
  std::size_t context_ = 0;
  std::vector<Token> filler_;
  std::vector<std::size_t> positions_;
};

/// Pass sizes worth timing up to `most` tokens: every one up to 8, then steps of about a fifth.
inline std::vector<std::size_t> cost_points(std::size_t most) {
  std::vector<std::size_t> points;
  for (std::size_t n = 1; n <= most; n = n < 8 ? n + 1 : std::max(n + 1, n * 5 / 4)) points.push_back(n);
  if (points.empty() || points.back() != most) points.push_back(most);
  return points;
}

/// What passes of `points` tokens over `sequences` sequences cost, in seconds, median of
/// `repeats` rounds: the first point must be `sequences` (a plain pass, timed among plain
/// passes); every larger one is timed as itself and the plain pass after it, less a plain pass
/// (see PassTimer). A pass never costs less for carrying more: noise below the point before is
/// raised to it.
inline std::vector<double> time_passes(Engine& engine, std::size_t sequences, std::span<const std::size_t> points,
                                       std::size_t at, std::size_t repeats) {
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); };
  PassTimer timer(engine, sequences, (points.back() + sequences - 1) / sequences, at);
  std::vector<std::vector<double>> seconds(points.size());  // [0]: plain passes; [i]: pairs less a plain pass
  for (std::size_t i = 0; i < 2 * repeats + 3; ++i) {
    const auto start = Clock::now();
    timer.plain();
    if (i >= 3) seconds[0].push_back(since(start));
  }
  const double one = median_pass_seconds({seconds[0]}).front();
  for (std::size_t round = 0; round <= repeats; ++round) {  // the first round warms up
    for (std::size_t i = 1; i < points.size(); ++i) {
      timer.plain();
      const auto start = Clock::now();
      timer.drafted(points[i]);
      timer.plain();
      if (round > 0) seconds[i].push_back(since(start) - one);
    }
  }
  return median_pass_seconds(std::move(seconds));
}

/// What a pass of `pass_tokens` tokens over `sequences` sequences costs, in seconds, median of
/// `repeats`, when the pass before it had the same shape (a run of passes that each carry drafts,
/// as a long copy sends them): llama.cpp then reuses its graph, which time_passes() (a pass with
/// drafts between plain ones, the graph rebuilt for it and for the plain pass after it) never
/// sees. Its drafts are cut as in time_passes().
inline double time_same_shape_passes(Engine& engine, std::size_t sequences, std::size_t pass_tokens, std::size_t at,
                                     std::size_t repeats) {
  using Clock = std::chrono::steady_clock;
  PassTimer timer(engine, sequences, (pass_tokens + sequences - 1) / sequences, at);
  std::vector<double> seconds;
  for (std::size_t i = 0; i < repeats + 2; ++i) {
    const auto start = Clock::now();
    timer.drafted(pass_tokens);
    if (i >= 2) seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return median_pass_seconds({std::move(seconds)}).front();
}

/// What one sequence's passes cost when every pass with drafts has the same shape, 1 + drafts
/// tokens (FixedPassShape, llama_decoding.hpp): a plain pass among plain ones, a pass of that
/// shape among its like (llama.cpp keeps its graph), and the rebuilds that switching between
/// the two costs, once into the shape and once out of it. The two curves, normalized to the
/// plain pass: `entry` prices a pass with drafts after a plain one at the shape's cost plus both
/// rebuilds (the way back is as certain as the way in), `streak` after one with drafts at the
/// shape's cost alone; both are flat from 2 tokens to the shape (padding makes every pass with
/// drafts that big, so the planner may as well fill it).
struct FixedShapeCosts {
  double plain_seconds = 0;
  double shape_seconds = 0;    ///< a pass of the shape after one like it
  double rebuild_seconds = 0;  ///< one rebuild: half of what a pass of the shape between plain ones adds
  VerifyCost entry = VerifyCost::flat();
  VerifyCost streak = VerifyCost::flat();
};

inline FixedShapeCosts measure_fixed_shape_costs(Engine& engine, std::size_t drafts, std::size_t at,
                                                 std::size_t repeats = 5) {
  FixedShapeCosts c;
  const std::vector<std::size_t> points{1, drafts + 1};
  const std::vector<double> between = time_passes(engine, 1, points, at, repeats);
  c.plain_seconds = between[0];
  c.shape_seconds = std::max(time_same_shape_passes(engine, 1, drafts + 1, at, repeats), c.plain_seconds);
  c.rebuild_seconds = std::max(0.0, (between[1] - c.shape_seconds) / 2);
  const double entry = (c.shape_seconds + 2 * c.rebuild_seconds) / c.plain_seconds;
  const double streak = c.shape_seconds / c.plain_seconds;
  const std::vector<VerifyCost::Point> entry_points{{1, 1.0}, {2, entry}, {drafts + 1, entry}};
  const std::vector<VerifyCost::Point> streak_points{{1, 1.0}, {2, streak}, {drafts + 1, streak}};
  c.entry = VerifyCost::table(std::span(entry_points).first(drafts > 1 ? 3 : 2));
  c.streak = VerifyCost::table(std::span(streak_points).first(drafts > 1 ? 3 : 2));
  return c;
}

/// The verify-cost curve of passes of up to sequences x (max_drafts + 1) tokens over
/// `sequences` sequences at position `at`, normalized so that a plain pass (one token per
/// sequence) costs 1.
inline VerifyCost measure_pass_cost(Engine& engine, std::size_t sequences, std::size_t max_drafts, std::size_t at,
                                    std::size_t repeats = 5) {
  std::vector<std::size_t> points = cost_points(sequences * (max_drafts + 1));
  points.erase(points.begin(), std::lower_bound(points.begin(), points.end(), sequences));
  if (points.empty() || points.front() != sequences) points.insert(points.begin(), sequences);
  // The first pass with a draft is timed too: what any pass with drafts costs beyond a plain one
  // (llama.cpp rebuilds its graph for a new shape; on a GPU it re-captures) is a step there,
  // which interpolating from a point further on would spread over the drafts after it.
  if (points.size() > 1 && points[1] != sequences + 1) points.insert(points.begin() + 1, sequences + 1);
  const std::vector<double> seconds = time_passes(engine, sequences, points, at, repeats);
  std::vector<VerifyCost::Point> table;
  for (std::size_t i = 0; i < points.size(); ++i) table.push_back({points[i], seconds[i]});
  return VerifyCost::table(table).normalized();
}

}  // namespace ngramspec::llama_cpp
