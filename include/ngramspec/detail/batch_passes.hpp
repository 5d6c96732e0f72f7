#pragma once

// BatchSpeculator's passes, defined out of the class so that its header reads as its interface
// and one skeleton (open_pass, plan_pass, close_pass; check_sequences, step_sequences): the
// chains' propose(), and the trees' propose_trees() and accept_trees(). batch_speculator.hpp
// includes this at its end; included alone, this includes that header first.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "ngramspec/batch_speculator.hpp"

namespace ngramspec {

// propose(), with q when kWithQ.
template <Drafter D>
template <bool kWithQ>
std::size_t BatchSpeculator<D>::propose_chains(std::span<const SequenceId> ids, std::span<Token> drafts,
                                              std::span<std::size_t> offsets, std::span<DraftDistributions> q,
                                              std::size_t extra_tokens) {
  const char* const where = "ngramspec::BatchSpeculator::propose";
  detail::check_offsets_size(where, offsets.size(), ids.size());
  if constexpr (kWithQ) detail::check_distributions_size(where, q.size(), ids.size());
  const PassBudget pass = open_pass(where, ids, extra_tokens, drafts.size(), [](const Slot& slot) {
    return draft_limit(slot.state, slot.options, kMaxDraftsPerPass);
  });
  // Where the cost says that not even certain drafts could pay, nothing is drafted: the drafters
  // still observe every token (accept()), and the pass costs no drafting work.
  const bool draft = pass.cost == nullptr || DraftPlanner::drafts_can_pay(*pass.cost, pass.base_tokens,
                                                                          pass.base_expected, pass.draft_room);
  if (candidates_.size() < pass.room) candidates_.resize(pass.room);
  std::size_t made = 0;
  bool drawn = false;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const Slot& slot = pool_.of_call(i);
    if constexpr (kWithQ) q[i].clear();
    if (slot.state.generated != 0) {
      const std::size_t limit = draft ? draft_limit(slot.state, slot.options, kMaxDraftsPerPass) : 0;
      const std::span<Token> out = std::span<Token>(candidates_).subspan(made, limit);
      const std::span<float> estimates = std::span<float>(probabilities_).subspan(made, limit);
      made += counting_out_of_vocabulary(slot.drafter, [&] {
        if constexpr (kWithQ) {
          return detail::draft_with_distributions(slot.drafter, out, estimates, slot.rate, q[i]);
        } else {
          return detail::draft_with_estimates(slot.drafter, out, estimates, slot.rate);
        }
      });
      if constexpr (kWithQ) drawn = drawn || q[i].any_drawn();
    }
    candidate_offsets_[i + 1] = made;
  }
  const float least = drawn && pass.cost != nullptr
                          ? DraftPlanner::least_path_probability(*pass.cost, pass.base_tokens, pass.base_expected,
                                                                 pass.draft_room)
                          : 0.0f;
  plan_pass(pass, made, ids.size(), drawn, least);
  return close_pass(pass, offsets, [&](Slot& slot, std::size_t i, std::size_t total) {
    const std::size_t n = lengths_[i];
    const Token* from = candidates_.data() + candidate_offsets_[i];
    std::copy(from, from + n, drafts.begin() + static_cast<std::ptrdiff_t>(total));
    std::copy(from, from + n, slot.pending.begin());
    slot.pending_count = n;
    if constexpr (kTrees) slot.trees.tree.clear();
    if constexpr (kWithQ) q[i].truncate(n);
    return n;
  });
}

// propose_trees(), with q when kWithQ.
template <Drafter D>
template <bool kWithQ>
std::size_t BatchSpeculator<D>::propose_tree_pass(std::span<const SequenceId> ids, std::span<Token> tokens,
                                                 std::span<std::int32_t> parents, std::span<std::size_t> offsets,
                                                 std::span<DraftDistributions> q, std::size_t extra_tokens) {
  static_assert(kTrees,
                "ngramspec::BatchSpeculator::propose_trees needs a drafter that drafts trees (TreeDraftingDrafter): "
                "use BatchSpeculator<TreeDrafter>, or propose() for chains");
  const char* const where = "ngramspec::BatchSpeculator::propose_trees";
  detail::check_offsets_size(where, offsets.size(), ids.size());
  detail::check_same_size(where, "parents", parents.size(), "tokens.size()", tokens.size());
  if constexpr (kWithQ) detail::check_distributions_size(where, q.size(), ids.size());
  const PassBudget pass = open_pass(where, ids, extra_tokens, tokens.size(), [](const Slot& slot) {
    return tree_node_limit(slot.state, slot.options, kMaxDraftsPerPass);
  });
  const float least = pass.cost == nullptr ? 0.0f
                                           : DraftPlanner::least_path_probability(*pass.cost, pass.base_tokens,
                                                                                  pass.base_expected, pass.draft_room);
  std::size_t made = 0;
  bool drawn = false;
  try {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      Slot& slot = pool_.of_call(i);
      DraftTree& tree = slot.trees.tree;
      tree.clear();
      slot.pending_count = 0;
      if constexpr (kWithQ) q[i].clear();
      const std::size_t depth =
          slot.state.generated == 0 ? 0 : draft_limit(slot.state, slot.options, kMaxDraftsPerPass);
      if (depth > 0) {
        // A drafter that claims or builds more than it was allowed is clamped, never trusted.
        const std::size_t most = tree_node_limit(slot.state, slot.options, kMaxDraftsPerPass);
        const std::size_t claimed = counting_out_of_vocabulary(slot.drafter, [&] {
          if constexpr (kWithQ && DistributionTreeDrafter<D>) {
            q[i].reserve(most, DraftDistributions::kMaxSupport);
            return slot.drafter.predict_tree(tree, most, depth, least, q[i]);
          } else {
            return slot.drafter.predict_tree(tree, most, depth, least);
          }
        });
        tree.truncate(std::min(claimed, most));
        if constexpr (kWithQ) drawn = detail::tree_distributions<D>(tree.size(), q[i]) || drawn;
        const std::span<const float> path = tree.path_probabilities();
        std::copy(path.begin(), path.end(), probabilities_.begin() + static_cast<std::ptrdiff_t>(made));
        made += path.size();
      }
      candidate_offsets_[i + 1] = made;
    }
  } catch (...) {
    for (std::size_t i = 0; i < ids.size(); ++i) pool_.of_call(i).trees.tree.clear();
    throw;
  }
  // Drawn nodes are cut by `least` alone, which the drafters applied while building.
  plan_pass(pass, made, ids.size(), drawn, least);
  // Each sequence keeps the first lengths_[i] nodes of its best-first tree: a tree.
  return close_pass(pass, offsets, [&](Slot& slot, std::size_t i, std::size_t total) {
    DraftTree& tree = slot.trees.tree;
    tree.truncate(lengths_[i]);
    if constexpr (kWithQ) q[i].truncate(lengths_[i]);
    const std::span<const Token> nodes = tree.tokens();
    const std::span<const std::int32_t> ups = tree.parents();
    std::copy(nodes.begin(), nodes.end(), tokens.begin() + static_cast<std::ptrdiff_t>(total));
    std::copy(ups.begin(), ups.end(), parents.begin() + static_cast<std::ptrdiff_t>(total));
    return nodes.size();
  });
}

// accept_trees(), recording top_probabilities when there are any.
template <Drafter D>
void BatchSpeculator<D>::accept_tree_pass(std::span<const SequenceId> ids, std::span<const Token> model_tokens,
                                          std::span<const std::size_t> offsets, std::span<const Token> top,
                                          std::span<const float> top_probabilities, std::span<StepOutcome> steps,
                                          std::span<std::size_t> kept) {
  static_assert(kTrees,
                "ngramspec::BatchSpeculator::accept_trees needs a drafter that drafts trees (TreeDraftingDrafter): "
                "use BatchSpeculator<TreeDrafter>, or accept() for chains");
  const char* const where = "ngramspec::BatchSpeculator::accept_trees";
  detail::check_step_arguments(where, ids.size(), model_tokens.size(), offsets, steps.size());
  detail::check_tree_step_arguments(where, model_tokens.size(), kept.size(), top.size(), top_k_);
  check_sequences(
      where, ids, model_tokens.size(), offsets, "the root, then one per node",
      [](const Slot& slot) { return slot.trees.tree.size(); },
      [&](const Slot& slot, std::size_t i, std::size_t n) {
        if (top.empty()) return;
        const std::size_t vocab = slot.drafter.top_k_table()->vocab_size();
        detail::check_in_vocabulary(where, ids[i], "model_tokens", model_tokens.subspan(offsets[i], n),
                                    offsets[i], vocab);
        detail::check_in_vocabulary(where, ids[i], "top", top.subspan(offsets[i] * top_k_, n * top_k_),
                                    offsets[i] * top_k_, vocab);
        const std::span<const float> probabilities =
            top_probabilities.empty() ? top_probabilities : top_probabilities.subspan(offsets[i] * top_k_, n * top_k_);
        if (!probabilities.empty()) {
          detail::check_top_probabilities(where, ids[i], kRecords && slot.drafter.top_k_table()->has_probabilities(),
                                          probabilities, offsets[i] * top_k_, top_k_);
        }
        detail::check_distinct_rows(where, ids[i], top.subspan(offsets[i] * top_k_, n * top_k_), probabilities,
                                    offsets[i] * top_k_, top_k_, vocab);
      });
  step_sequences(
      model_tokens, offsets, steps,
      [&](Slot& slot, std::size_t i, std::span<const Token> answers) {
        DraftTree& tree = slot.trees.tree;
        tree.truncate(answers.size() - 1);  // a prefix of a best-first tree is a tree
        const std::span<std::size_t> entries = kept.subspan(offsets[i], answers.size());
        const StepOutcome outcome =
            accept_tree(slot.state, tree.tokens(), tree.parents(), answers, slot.options, entries);
        const std::span<Token> emitted = std::span<Token>(tree_emitted_).first(outcome.emitted);
        for (std::size_t j = 0; j < outcome.emitted; ++j) emitted[j] = answers[entries[j]];
        return Decided{outcome, emitted};
      },
      [&](Slot& slot, std::size_t i, std::span<const Token> answers, std::span<const Token> emitted) {
        const DraftTree& tree = slot.trees.tree;
        const std::size_t n = answers.size();
        const std::span<Token> fed = std::span<Token>(tree_fed_).first(n);
        fed[0] = slot.trees.last;
        std::copy(tree.tokens().begin(), tree.tokens().end(), fed.begin() + 1);
        const std::span<const Token> rows = top.empty() ? top : top.subspan(offsets[i] * top_k_, n * top_k_);
        slot.drafter.observe_pass(tree, std::span<const Token>(fed), answers,
                                  std::span<const std::size_t>(kept).subspan(offsets[i], emitted.size()), rows);
        if constexpr (kRecords) {
          if (!top_probabilities.empty()) {
            detail::record_distributions(*slot.drafter.top_k_table(), fed,
                                         top_probabilities.subspan(offsets[i] * top_k_, n * top_k_), rows);
          }
        }
        slot.drafter.update(emitted);
      });
}

}  // namespace ngramspec
