#pragma once

#include <cstddef>
#include <vector>

#include "ngramspec/token.hpp"

namespace ngramspec {

/// Why generation ended.
enum class StopReason {
  max_new_tokens,  ///< DecodeOptions::max_new_tokens tokens were generated
  stop_token,      ///< a stop token was generated (and is the last output token)
  max_context,     ///< prompt + output reached DecodeOptions::max_context
  callback,        ///< the token callback returned false
};

/// Name of a stop reason, for logs.
[[nodiscard]] constexpr const char* to_string(StopReason reason) noexcept {
  switch (reason) {
    case StopReason::max_new_tokens: return "max_new_tokens";
    case StopReason::stop_token: return "stop_token";
    case StopReason::max_context: return "max_context";
    case StopReason::callback: return "callback";
  }
  return "unknown";
}

/// Most drafts one verify pass may carry: DecodeOptions::max_drafts above it is refused
/// (start_sequence(), and so every decoder and BatchSpeculator::begin).
inline constexpr std::size_t kMaxDraftsPerPass = 1024;

/// Options of one generation.
struct DecodeOptions {
  std::size_t max_new_tokens = 128;  ///< most tokens generated after the prompt
  std::vector<Token> stop_tokens;    ///< generation ends with the stop token emitted
  std::size_t max_context = 0;       ///< most tokens (prompt + output) the model holds; 0 = no limit
  bool speculate = true;             ///< false = plain one-token-per-pass decode through the same loop
  /// Most drafts verified in one pass: the one setting of draft length (the drafters ngramspec
  /// ships draft as many as this allows). With a verify cost the decoders choose up to it;
  /// without, the drafter's own gate does (MatchDrafter's). 4 is a safe default when nothing
  /// says what a longer pass costs; with a cost, 16 lets long copies run. At most
  /// kMaxDraftsPerPass (1024): more is refused with std::invalid_argument. For tree passes it is
  /// the node budget of a pass (a tree's depth is bounded by the tokens left, and its nodes, each
  /// a KV entry, by the room a chain has under max_context: tree_node_limit()).
  std::size_t max_drafts = 4;
};

}  // namespace ngramspec
