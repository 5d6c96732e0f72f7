#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>

#include "ngramspec/decode_options.hpp"
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

/// Most drafts one verify pass may carry: DecodeOptions::max_drafts above it is refused
/// (start_sequence(), and so every decoder and BatchSpeculator::begin).
inline constexpr std::size_t kMaxDraftsPerPass = 1024;

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
  if (prompt_length == 0) throw std::invalid_argument("ngramspec: the prompt is empty; it needs at least one token");
  if (options.max_drafts > kMaxDraftsPerPass) {
    throw std::invalid_argument("ngramspec: max_drafts = " + std::to_string(options.max_drafts) +
                                " is more than kMaxDraftsPerPass = " + std::to_string(kMaxDraftsPerPass));
  }
  if (options.max_context != 0 && prompt_length > options.max_context) {
    throw std::invalid_argument("ngramspec: the prompt has " + std::to_string(prompt_length) +
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

/// Decides a verify pass. The pass fed [last emitted token, drafts...] at cache_length();
/// `model_tokens[i]` is the model's token after the i-th fed token, so model_tokens.size()
/// must be drafts.size() + 1. For the prefill, pass no drafts and the model's token after
/// the prompt. Accepts the longest prefix of drafts equal to the model's tokens, adds the
/// model's token that follows it, then cuts the run after a stop token and at the limits.
/// Throws std::invalid_argument when the sizes disagree or the sequence is finished.
[[nodiscard]] inline StepOutcome accept_drafts(const SequenceState& state, std::span<const Token> drafts,
                                               std::span<const Token> model_tokens, const DecodeOptions& options) {
  if (state.finished) throw std::invalid_argument("ngramspec: accept_drafts on a finished sequence");
  if (model_tokens.size() != drafts.size() + 1) {
    throw std::invalid_argument("ngramspec: accept_drafts needs drafts.size() + 1 model tokens; got " +
                                std::to_string(model_tokens.size()) + " for " + std::to_string(drafts.size()) +
                                " drafts");
  }
  if (state.generated == 0 && !drafts.empty()) {
    throw std::invalid_argument("ngramspec: accept_drafts: the prefill step takes no drafts; got " +
                                std::to_string(drafts.size()));
  }
  std::size_t matched = 0;
  while (matched < drafts.size() && drafts[matched] == model_tokens[matched]) ++matched;

  StepOutcome outcome;
  const std::size_t left = remaining_tokens(state, options);
  std::size_t emit = std::min(matched + 1, left);
  for (std::size_t i = 0; i < emit; ++i) {
    if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), model_tokens[i]) !=
        options.stop_tokens.end()) {
      emit = i + 1;
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
  // The model keeps every emitted token but the last; the next pass feeds that one.
  const std::size_t pass_end = state.generated == 0 ? state.prompt_length : state.cache_length() + drafts.size() + 1;
  outcome.rollback_to = state.prompt_length + state.generated + emit - 1;
  outcome.discarded = pass_end - outcome.rollback_to;
  return outcome;
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
