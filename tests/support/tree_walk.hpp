#pragma once

// An engine's verification of one sequence's tree pass for the tests: from the root, each entry's
// children verified in index order with TokenSampler::verify, down the accepted path.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ngramspec/draft_distribution.hpp"
#include "ngramspec/draft_tree.hpp"
#include "ngramspec/token.hpp"
#include "ngramspec/token_sampler.hpp"

namespace ngramspec::test {

/// Walks the tree of `nodes` (parents tree-local, kTreeRoot for the root's children): at entry e
/// (0: the root, j + 1: node j), depth d, the token is sampler.verify(row_of(e), position + d,
/// its children, q), child j naming entry entry_of(j) of q; writes it to model_tokens[e] and goes
/// on to the child that carries it, if any. Entries off the path are left as they are.
template <class RowOf, class EntryOf>
void walk_tree(TokenSampler& sampler, std::span<const Token> nodes, std::span<const std::int32_t> parents,
               std::uint64_t position, RowOf&& row_of, EntryOf&& entry_of, const DraftDistributions& q,
               std::span<Token> model_tokens) {
  std::size_t e = 0;
  for (std::size_t depth = 0;; ++depth) {
    std::vector<TokenSampler::Draft> children;
    std::vector<std::size_t> child_entries;
    for (std::size_t j = 0; j < nodes.size(); ++j) {
      if (static_cast<std::size_t>(parents[j] + 1) != e) continue;
      children.push_back({nodes[j], entry_of(j)});
      child_entries.push_back(j + 1);
    }
    const Token token = sampler.verify(row_of(e), position + depth, children, q);
    model_tokens[e] = token;
    std::size_t c = 0;
    while (c < children.size() && children[c].token != token) ++c;
    if (c == children.size()) return;
    e = child_entries[c];
  }
}

}  // namespace ngramspec::test
