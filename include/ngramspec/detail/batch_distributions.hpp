#pragma once

#include <algorithm>
#include <cstddef>
#include <span>

#include "ngramspec/detail/draft_estimates.hpp"
#include "ngramspec/draft_distribution.hpp"
#include "ngramspec/drafter.hpp"
#include "ngramspec/token.hpp"
#include "ngramspec/top_k_table.hpp"

// What BatchSpeculator's drafts were drawn from, for engines that verify by rejection sampling
// (docs/SAMPLING.md, "Rejection mode"): the drafters' distributions into each sequence's
// DraftDistributions, and the engine's back into the drafters' top-k tables.
namespace ngramspec::detail {

/// draft_with_estimates(), and what each draft was drawn from into q: a DistributionDrafter's
/// own (one per draft: std::logic_error otherwise), else one-hot. Allocates only past the most
/// drafts (or support) q has held.
template <Drafter D>
std::size_t draft_with_distributions(const D& drafter, std::span<Token> out, std::span<float> estimates,
                                     const AcceptanceRate& rate, DraftDistributions& q) {
  if constexpr (DistributionDrafter<D>) {
    q.reserve(out.size(), DraftDistributions::kMaxSupport);
    const std::size_t made = std::min<std::size_t>(drafter.predict(out, estimates, q), out.size());
    q.check_one_per_draft(made);
    q.truncate(made);
    return made;
  } else {
    const std::size_t made = draft_with_estimates(drafter, out, estimates, rate);
    q.reserve(made, 0);
    for (std::size_t j = 0; j < made; ++j) q.push_one_hot();
    return made;
  }
}

/// A tree of `nodes` nodes was built: q holds a DistributionTreeDrafter's entry for each
/// (std::logic_error otherwise), or gets a one-hot entry for each. Returns whether any node was
/// drawn.
template <class D>
bool tree_distributions(std::size_t nodes, DraftDistributions& q) {
  if constexpr (DistributionTreeDrafter<D>) {
    q.check_one_per_draft(nodes);
    q.truncate(nodes);
    return q.any_drawn();
  } else {
    q.reserve(nodes, 0);
    for (std::size_t j = 0; j < nodes; ++j) q.push_one_hot();
    return false;
  }
}

/// Records the rows after a tree pass's entries `fed` (rows[e * k ..) of the table's k tokens,
/// best first) with their `probabilities` into `table`, each row up to its first probability 0
/// (the tokens its filters left). The caller has checked them (check_top_probabilities()).
inline void record_distributions(TopKTable& table, std::span<const Token> fed, std::span<const float> probabilities,
                                 std::span<const Token> rows) {
  const std::size_t k = table.k();
  for (std::size_t e = 0; e < fed.size(); ++e) {
    const std::span<const float> p = probabilities.subspan(e * k, k);
    const auto kept = static_cast<std::size_t>(std::find(p.begin(), p.end(), 0.0f) - p.begin());
    table.record_distribution(fed[e], rows.subspan(e * k, kept), p.first(kept));
  }
}

}  // namespace ngramspec::detail
