#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "ngramspec/argument_error.hpp"
#include "ngramspec/detail/number_text.hpp"

namespace ngramspec {

/// How a sampling model verifies drafts (docs/SAMPLING.md). Both keep the model's
/// distribution exactly; at temperature 0 both are greedy decoding.
enum class SamplingMode : std::uint8_t {
  /// Each token is the one plain decoding draws at its position for the seed (position-keyed
  /// randomness), so the output is the same text as plain decoding for a seed, whatever was
  /// drafted; a draft x is accepted with probability p(x).
  exact,
  /// Speculative sampling (Leviathan et al. 2023; Chen et al. 2023) and, for trees, its
  /// multi-draft form (SpecInfer, Miao et al. 2024): a draft x drawn from q is accepted with
  /// probability min(1, p(x) / q(x)), else a token is drawn from the residual max(0, p - q).
  /// Higher acceptance when drafts are drawn from a q near p (DraftDistributions); the text
  /// depends on what was drafted, so it differs from plain decoding's for the same seed.
  rejection,
};

/// How SamplingModel and TokenSampler choose a token from a row of logits.
///
/// temperature 0 is greedy (argmax, ties to the lowest id) and ignores the filters. Otherwise
/// the logits are divided by the temperature, softmaxed, and filtered in this order: top-k,
/// top-p, min-p (the order of Hugging Face transformers' sampling warpers); then one token is
/// drawn from what is left, renormalized. Every filter keeps at least the most likely token.
/// The neutral value of each filter switches it off: top_k 0, top_p 1, min_p 0.
struct SamplingOptions {
  float temperature = 0.0f;  ///< 0 = greedy; otherwise > 0 and finite
  std::size_t top_k = 0;     ///< keep the k most likely tokens; 0 = off (so is k >= vocabulary)
  float top_p = 1.0f;        ///< keep the fewest most likely tokens whose mass reaches top_p; in (0, 1], 1 = off
  float min_p = 0.0f;        ///< keep tokens with probability >= min_p * the top one's; in [0, 1), 0 = off
  std::uint64_t seed = 0;    ///< the draw at position p depends only on (seed, p); see position_uniform
  SamplingMode mode = SamplingMode::exact;  ///< how drafts are verified (SamplingModel)
};

/// Throws std::invalid_argument naming the field and its value if `options` is invalid:
/// temperature negative, infinite or NaN; top_p outside (0, 1] or NaN; min_p outside [0, 1) or NaN.
inline void validate(const SamplingOptions& options) {
  const auto fail = [](const char* field, float value, const char* rule) {
    throw ArgumentError("ngramspec", std::string("SamplingOptions::") + field + " = " + detail::number_text(value) +
                                         " is invalid; it must be " + rule);
  };
  if (!std::isfinite(options.temperature) || options.temperature < 0.0f) {
    fail("temperature", options.temperature, "finite and >= 0 (0 = greedy)");
  }
  if (!(options.top_p > 0.0f && options.top_p <= 1.0f)) fail("top_p", options.top_p, "in (0, 1] (1 = off)");
  if (!(options.min_p >= 0.0f && options.min_p < 1.0f)) fail("min_p", options.min_p, "in [0, 1) (0 = off)");
  if (options.mode != SamplingMode::exact && options.mode != SamplingMode::rejection) {
    throw ArgumentError("ngramspec",
                        "SamplingOptions::mode = " + std::to_string(static_cast<int>(options.mode)) +
                            " is invalid; it must be SamplingMode::exact (0) or SamplingMode::rejection (1)");
  }
}

}  // namespace ngramspec
