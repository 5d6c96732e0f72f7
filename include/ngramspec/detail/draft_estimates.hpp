#pragma once

#include <algorithm>
#include <cstddef>
#include <span>

#include "ngramspec/drafter.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec::detail {

/// Acceptance estimates for a drafter that gives none: the sequence's own rate of accepting a
/// draft once every draft before it was accepted, over about its last kMemory passes, with
/// one hit and one miss of prior (so a new sequence starts at 1/2).
class AcceptanceRate {
 public:
  static constexpr double kMemory = 32;

  /// One verify pass sent `drafted` drafts and `accepted` of them were accepted.
  void record(std::size_t drafted, std::size_t accepted) noexcept {
    if (drafted == 0) return;
    const double trials = static_cast<double>(accepted + (accepted < drafted ? 1 : 0));
    hits_ = hits_ * kDecay + static_cast<double>(accepted);
    trials_ = trials_ * kDecay + trials;
  }
  /// The chance that a draft is accepted given that the drafts before it were.
  [[nodiscard]] double rate() const noexcept { return (hits_ + 1) / (trials_ + 2); }
  /// probabilities[j] = rate()^(j + 1).
  void fill(std::span<float> probabilities) const noexcept {
    const double r = rate();
    double chance = 1;
    for (float& p : probabilities) p = static_cast<float>(chance *= r);
  }
  void reset() noexcept { hits_ = trials_ = 0; }

 private:
  static constexpr double kDecay = 1 - 1 / kMemory;
  double hits_ = 0;
  double trials_ = 0;
};

/// The drafter's drafts for the room in `out` and, in `probabilities` (as large as out), the
/// chance that drafts 0..j are all accepted: the drafter's own estimates, or `rate`'s. A count
/// the drafter claims beyond the room is clamped, never trusted.
template <Drafter D>
[[nodiscard]] std::size_t draft_with_estimates(const D& drafter, std::span<Token> out, std::span<float> probabilities,
                                               const AcceptanceRate& rate) {
  if (out.empty()) return 0;
  if constexpr (EstimatingDrafter<D>) {
    return std::min<std::size_t>(drafter.predict(out, probabilities.first(out.size())), out.size());
  } else {
    const std::size_t made = std::min<std::size_t>(drafter.predict(out), out.size());
    rate.fill(probabilities.first(made));
    return made;
  }
}

}  // namespace ngramspec::detail
