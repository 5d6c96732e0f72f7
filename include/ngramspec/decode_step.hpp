#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>

#include "ngramspec/argument_error.hpp"
#include "ngramspec/decode_options.hpp"
#include "ngramspec/detail/max_drafts_check.hpp"
#include "ngramspec/draft_tree.hpp"
#include "ngramspec/drafter.hpp"
#include "ngramspec/token.hpp"

// The per-sequence steps of speculative decoding, for engines that own their batching and
// KV cache. SpeculativeDecoder::generate is these steps driving a single model; an engine
// runs the same steps for each of its sequences around one batched forward:
//
//   state = start_sequence(prompt.size(), options);     // once, then prefill the prompt
//   drafter.update(prompt);                             // when speculating: it drafts from the prompt too
//   outcome = accept_drafts(state, {}, {first_token}, options);  // the prefill's token
//   loop:  n = propose_drafts(drafter, state, options, cap, drafts);
//          model: forward [last emitted token, drafts[0..n)] at state.cache_length()
//          outcome = accept_drafts(state, drafts.first(n), model_tokens, options);
//          if (outcome.discarded) model: rollback(outcome.rollback_to);
//          emit model_tokens[0 .. outcome.emitted); drafter.update(them);  // when speculating
//          advance(state, outcome);  until state.finished
//
// Every step is pure apart from the state it is handed, and none allocates. Thread safety:
// the steps share nothing, so any thread may run them, one at a time per SequenceState.

namespace ngramspec {

/// Where one sequence stands. The engine keeps one per sequence and passes it to the steps.
struct SequenceState {
  std::size_t prompt_length = 0;  ///< tokens of the prompt
  std::size_t generated = 0;      ///< tokens emitted so far
  bool finished = false;          ///< no more tokens may be emitted
  StopReason stop_reason = StopReason::max_new_tokens;  ///< why, once finished

  /// Tokens the model holds between passes once the prompt is prefilled: the prompt and
  /// every emitted token but the last, which the next verify pass feeds first.
  [[nodiscard]] std::size_t cache_length() const noexcept {
    return prompt_length + generated - (generated > 0 ? 1 : 0);
  }
};

/// What one verify pass (or the prefill) decides.
struct StepOutcome {
  std::size_t accepted = 0;     ///< drafts the model confirmed that are emitted
  std::size_t emitted = 0;      ///< tokens to emit: model_tokens[0 .. emitted)
  std::size_t rollback_to = 0;  ///< length to roll the model back to
  std::size_t discarded = 0;    ///< positions the pass wrote beyond rollback_to (0: no rollback)
  bool finished = false;        ///< the sequence is finished after this step
  StopReason stop_reason = StopReason::max_new_tokens;  ///< why, when finished
};

/// Tokens the sequence may still emit under max_new_tokens and max_context.
[[nodiscard]] constexpr std::size_t remaining_tokens(const SequenceState& state,
                                                     const DecodeOptions& options) noexcept {
  if (state.finished) return 0;
  std::size_t left = options.max_new_tokens > state.generated ? options.max_new_tokens - state.generated : 0;
  if (options.max_context != 0) {
    const std::size_t used = state.prompt_length + state.generated;
    left = std::min(left, options.max_context > used ? options.max_context - used : 0);
  }
  return left;
}

/// Starts a sequence of `prompt_length` tokens. Throws std::invalid_argument for an empty
/// prompt, one longer than options.max_context, or options.max_drafts above kMaxDraftsPerPass
/// (the one rule of every decoder and BatchSpeculator). A sequence that may not emit anything
/// (max_new_tokens == 0, or a prompt that fills max_context) starts finished.
[[nodiscard]] inline SequenceState start_sequence(std::size_t prompt_length, const DecodeOptions& options) {
  if (prompt_length == 0) throw ArgumentError("ngramspec", "the prompt is empty; it needs at least one token");
  detail::check_max_drafts("ngramspec", "", "max_drafts", options.max_drafts);
  if (options.max_context != 0 && prompt_length > options.max_context) {
    throw ArgumentError("ngramspec", "the prompt has " + std::to_string(prompt_length) +
                                         " tokens, more than max_context = " + std::to_string(options.max_context));
  }
  SequenceState state;
  state.prompt_length = prompt_length;
  if (options.max_new_tokens == 0) {
    state.finished = true;
    state.stop_reason = StopReason::max_new_tokens;
  } else if (remaining_tokens(state, options) == 0) {
    state.finished = true;
    state.stop_reason = StopReason::max_context;
  }
  return state;
}

/// Most drafts the next verify pass may carry: one fewer than the tokens the sequence may
/// still emit (the model's own token always follows the drafts), options.max_drafts (at most
/// kMaxDraftsPerPass), 0 without speculation, and `cap`, the engine's own limit
/// (max_batch() - 1 for a model that takes max_batch() tokens a pass).
[[nodiscard]] constexpr std::size_t draft_limit(const SequenceState& state, const DecodeOptions& options,
                                                std::size_t cap) noexcept {
  const std::size_t left = remaining_tokens(state, options);
  if (!options.speculate || left == 0) return 0;
  return std::min({left - 1, options.max_drafts, kMaxDraftsPerPass, cap});
}

/// Most nodes the next tree pass may carry; its depth is bounded by draft_limit(), and it is 0
/// where that is. A tree pass writes one KV entry per node whatever the tree's shape (node i at
/// cache_length() + 1 + i, before keep() keeps the accepted path), so its node count stays
/// within the room a chain has under max_context, that of draft_limit()'s longest chain: no
/// pass reaches position max_context - 1. Also within options.max_drafts, kMaxDraftsPerPass and
/// `cap`; max_new_tokens bounds the depth only, since a pass emits one path of the tree.
[[nodiscard]] constexpr std::size_t tree_node_limit(const SequenceState& state, const DecodeOptions& options,
                                                    std::size_t cap) noexcept {
  if (draft_limit(state, options, cap) == 0) return 0;
  const std::size_t nodes = std::min({options.max_drafts, kMaxDraftsPerPass, cap});
  if (options.max_context == 0) return nodes;
  // draft_limit() > 0: at least two more tokens fit in the context, so this does not wrap.
  const std::size_t chain_room = options.max_context - (state.prompt_length + state.generated) - 1;
  return std::min(nodes, chain_room);
}

/// Asks the drafter for the drafts of the next verify pass, into the front of `out`, within
/// draft_limit(state, options, cap) and out.size(). Returns how many it wrote.
template <Drafter D>
[[nodiscard]] std::size_t propose_drafts(const D& drafter, const SequenceState& state, const DecodeOptions& options,
                                         std::size_t cap, std::span<Token> out) {
  const std::size_t limit = std::min(out.size(), draft_limit(state, options, cap));
  if (limit == 0) return 0;
  // A drafter that claims more than it was given space for is clamped, never trusted.
  return std::min<std::size_t>(drafter.predict(out.first(limit)), limit);
}

namespace detail {

/// The outcome of a pass that fed `drafted` drafts (a chain's or a tree's nodes) behind the
/// last emitted token and matched `matched` of them: the matched drafts and the model's token
/// after them, `emitted(j)` the j-th of those, cut after a stop token and at the limits. The
/// model keeps every emitted token but the last; the next pass feeds that one.
template <class Emitted>
[[nodiscard]] StepOutcome cut_pass(const SequenceState& state, const DecodeOptions& options, std::size_t matched,
                                   std::size_t drafted, const Emitted& emitted) {
  StepOutcome outcome;
  const std::size_t left = remaining_tokens(state, options);
  std::size_t emit = std::min(matched + 1, left);
  for (std::size_t j = 0; j < emit; ++j) {
    if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), emitted(j)) != options.stop_tokens.end()) {
      emit = j + 1;
      outcome.finished = true;
      outcome.stop_reason = StopReason::stop_token;
      break;
    }
  }
  if (!outcome.finished && emit == left) {
    outcome.finished = true;
    const bool by_count = options.max_new_tokens - state.generated == left;
    outcome.stop_reason = by_count ? StopReason::max_new_tokens : StopReason::max_context;
  }
  outcome.emitted = emit;
  outcome.accepted = std::min(matched, emit);
  const std::size_t pass_end = state.generated == 0 ? state.prompt_length : state.cache_length() + drafted + 1;
  outcome.rollback_to = state.prompt_length + state.generated + emit - 1;
  outcome.discarded = pass_end - outcome.rollback_to;
  return outcome;
}

}  // namespace detail

/// Decides a verify pass. The pass fed [last emitted token, drafts...] at cache_length();
/// `model_tokens[i]` is the model's token after the i-th fed token, so model_tokens.size()
/// must be drafts.size() + 1. For the prefill, pass no drafts and the model's token after
/// the prompt. Accepts the longest prefix of drafts equal to the model's tokens, adds the
/// model's token that follows it, then cuts the run after a stop token and at the limits.
/// Throws std::invalid_argument when the sizes disagree or the sequence is finished.
[[nodiscard]] inline StepOutcome accept_drafts(const SequenceState& state, std::span<const Token> drafts,
                                               std::span<const Token> model_tokens, const DecodeOptions& options) {
  if (state.finished) throw ArgumentError("ngramspec", "accept_drafts on a finished sequence");
  if (model_tokens.size() != drafts.size() + 1) {
    throw ArgumentError("ngramspec", "accept_drafts needs drafts.size() + 1 model tokens; got " +
                                         std::to_string(model_tokens.size()) + " for " + std::to_string(drafts.size()) +
                                         " drafts");
  }
  if (state.generated == 0 && !drafts.empty()) {
    throw ArgumentError("ngramspec",
                        "accept_drafts: the prefill step takes no drafts; got " + std::to_string(drafts.size()));
  }
  std::size_t matched = 0;
  while (matched < drafts.size() && drafts[matched] == model_tokens[matched]) ++matched;

  return detail::cut_pass(state, options, matched, drafts.size(),
                          [&](std::size_t i) noexcept { return model_tokens[i]; });
}

/// Decides a tree verify pass. The pass fed the last emitted token (pass entry 0, the root)
/// and then the tree's nodes (node i as entry i + 1, under parent entry parents[i] + 1, or 0
/// for kTreeRoot); `model_tokens[e]` is the model's token after pass entry e's path, so
/// model_tokens.size() must be tokens.size() + 1. Walks from the root to the child whose token
/// is the model's token there, as long as one is, and emits the model's tokens along that
/// path (its accepted drafts and the model's token after them), cut after a stop token and at
/// the limits as accept_drafts() cuts a chain.
///
/// Writes to `kept[0 .. outcome.emitted)` the pass entries the model keeps, in order: kept[0]
/// is 0 (the root) and kept[j] the entry of the j-th accepted node, so the emitted tokens are
/// model_tokens[kept[j]], and the model keeps entry kept[j] at position cache_length() + j
/// (TreeTargetModel::keep), which is what rollback_to counts. A chain's kept is 0, 1, ...:
/// there rollback(rollback_to) does the same. `kept` needs room for tokens.size() + 1 entries.
///
/// Throws std::invalid_argument, changing nothing, when the sizes disagree, a parent does not
/// precede its child (validate_tree_parents), `kept` is too small, or the sequence is finished.
[[nodiscard]] inline StepOutcome accept_tree(const SequenceState& state, std::span<const Token> tokens,
                                             std::span<const std::int32_t> parents,
                                             std::span<const Token> model_tokens, const DecodeOptions& options,
                                             std::span<std::size_t> kept) {
  if (state.finished) throw ArgumentError("ngramspec", "accept_tree on a finished sequence");
  if (parents.size() != tokens.size()) {
    throw ArgumentError("ngramspec", "accept_tree: " + std::to_string(parents.size()) + " parents for " +
                                         std::to_string(tokens.size()) + " tree nodes");
  }
  if (model_tokens.size() != tokens.size() + 1) {
    throw ArgumentError("ngramspec", "accept_tree needs tree nodes + 1 model tokens; got " +
                                         std::to_string(model_tokens.size()) + " for " + std::to_string(tokens.size()) +
                                         " nodes");
  }
  if (state.generated == 0 && !tokens.empty()) {
    throw ArgumentError(
        "ngramspec", "accept_tree: the prefill step takes no drafts; got " + std::to_string(tokens.size()) + " nodes");
  }
  validate_tree_parents(parents);
  if (kept.size() < tokens.size() + 1) {
    throw ArgumentError("ngramspec", "accept_tree: `kept` has room for " + std::to_string(kept.size()) +
                                         " entries; a tree of " + std::to_string(tokens.size()) + " nodes needs " +
                                         std::to_string(tokens.size() + 1));
  }

  // The walk: from pass entry `at`, the first later node under it whose token is the model's.
  std::size_t matched = 0;
  std::size_t at = 0;
  kept[0] = 0;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (static_cast<std::size_t>(parents[i] + 1) != at || tokens[i] != model_tokens[at]) continue;
    at = i + 1;
    kept[++matched] = at;
  }

  return detail::cut_pass(state, options, matched, tokens.size(),
                          [&](std::size_t j) noexcept { return model_tokens[kept[j]]; });
}

/// Whether the entries a tree pass keeps are its first ones (kept[j] == j), so that a
/// rollback keeps them without moving anything.
[[nodiscard]] constexpr bool kept_is_prefix(std::span<const std::size_t> kept) noexcept {
  for (std::size_t j = 0; j < kept.size(); ++j) {
    if (kept[j] != j) return false;
  }
  return true;
}

/// Applies a step's outcome to the sequence.
constexpr void advance(SequenceState& state, const StepOutcome& outcome) noexcept {
  state.generated += outcome.emitted;
  if (outcome.finished) {
    state.finished = true;
    state.stop_reason = outcome.stop_reason;
  }
}

}  // namespace ngramspec
