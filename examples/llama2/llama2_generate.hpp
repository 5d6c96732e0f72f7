#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>

#include <ngramspec/ngramspec.hpp>

#include "llama2_model.hpp"
#include "llama2_tokenizer.hpp"

namespace ngramspec::llama2 {

static_assert(TargetModel<Transformer> && LogitsModel<Transformer>);

/// One generation and what it cost.
struct Generation {
  DecodeResult result;   ///< tokens, pass counts, why it stopped
  double seconds = 0.0;  ///< wall-clock time of the whole generation, prefill included
};

/// Generation of up to `steps` tokens after `prompt` through SpeculativeDecoder, drafting up to `k` tokens a
/// pass with an NGramPredictor (plain one-token passes when `speculate` is false): greedy at temperature 0,
/// otherwise sampled through a SamplingModel with `sampling` (same seed, same tokens, speculating or not).
/// Stops on BOS, as llama2.c's run.c does, and at the model's seq_len. Throws std::invalid_argument when the
/// prompt does not fit in seq_len, k + 1 exceeds the model's max_batch(), or the sampling options are invalid.
inline Generation generate(Transformer& model, std::span<const Token> prompt, std::size_t steps, std::size_t k,
                           bool speculate, const SamplingOptions& sampling = {}) {
  if (prompt.size() > model.config().seq_len) {
    throw std::invalid_argument("llama2: the prompt is " + std::to_string(prompt.size()) +
                                " tokens, longer than the model's seq_len of " +
                                std::to_string(model.config().seq_len));
  }
  if (k == 0 || k + 1 > model.max_batch()) {
    throw std::invalid_argument("llama2: k must be between 1 and " + std::to_string(model.max_batch() - 1));
  }
  DecodeOptions options;
  options.max_new_tokens = steps;
  options.stop_tokens = {kBos};
  options.max_context = model.config().seq_len;
  options.speculate = speculate;
  options.max_drafts = k;
  NGramConfig drafter;
  drafter.draft_count = k;
  const auto run = [&](auto& target) {
    SpeculativeDecoder decoder(target, NGramPredictor(drafter));
    Generation out;
    const auto start = std::chrono::steady_clock::now();
    out.result = decoder.generate(prompt, options);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
  };
  if (sampling.temperature == 0.0f) {
    validate(sampling);
    return run(model);
  }
  SamplingModel<Transformer> sampler(model, sampling);
  return run(sampler);
}

}  // namespace ngramspec::llama2
