#pragma once

#include <cstddef>
#include <vector>

#include "ngramspec/decode_options.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec {

/// Counters of one generation, as engines report them.
struct DecodeStats {
  std::size_t prefill_passes = 0;  ///< forward calls spent on the prompt (chunks of max_batch)
  std::size_t decode_passes = 0;   ///< verify passes after the prefill
  std::size_t drafted = 0;         ///< draft tokens sent to the model for verification
  std::size_t accepted = 0;        ///< draft tokens that the model confirmed and that were emitted
  std::size_t generated = 0;       ///< tokens emitted
  std::vector<std::size_t> drafted_at;   ///< [i]: passes that verified a draft at position i
  std::vector<std::size_t> accepted_at;  ///< [i]: passes whose draft at position i was accepted

  /// Generated tokens per target pass after the prompt, the prefill pass that yields the
  /// first token counting as one (Spec-Bench's mean accepted tokens: plain decoding = 1.00).
  /// 0 when nothing was generated.
  [[nodiscard]] double mean_accepted_length() const noexcept {
    return generated == 0 ? 0.0
                          : static_cast<double>(generated) / static_cast<double>(decode_passes + 1);
  }
  /// Accepted / drafted; 0 when nothing was drafted.
  [[nodiscard]] double acceptance_rate() const noexcept {
    return drafted == 0 ? 0.0 : static_cast<double>(accepted) / static_cast<double>(drafted);
  }
  /// Draft tokens the model verified but that were not emitted.
  [[nodiscard]] std::size_t rejected() const noexcept { return drafted - accepted; }
};

/// What generate() returns.
struct DecodeResult {
  std::vector<Token> tokens;  ///< the new tokens only, without the prompt
  DecodeStats stats;
  StopReason stop_reason = StopReason::max_new_tokens;
};

}  // namespace ngramspec
