#pragma once

// One sequence of an Engine as ngramspec's LogitsModel: what a ModelDrafter drafts with when the
// draft model is a llama.cpp model (a second llama_context beside the target's).

#include <algorithm>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <ngramspec/batch_speculator.hpp>
#include <ngramspec/best_of_drafter.hpp>
#include <ngramspec/logits_model.hpp>
#include <ngramspec/model_drafter.hpp>
#include <ngramspec/token.hpp>

#include "llama_engine.hpp"

namespace ngramspec::llama_cpp {

/// Sequence `sequence` of `engine` as a LogitsModel: forward() decodes the tokens in one pass of
/// their own, with logits for every one, and copies the rows out; rollback() cuts the sequence's
/// KV cache (llama_memory_seq_rm). A forward at position 0 first drops whatever the sequence
/// held, so drafters that take turns with the same engine (ngramspec's and llama.cpp's, in
/// --compare) each start a sequence from an empty cache. The engine must outlive it, and its
/// other sequences may serve other such models (each pass carries one sequence's tokens only).
///
/// Errors: what the engine throws (std::runtime_error naming the position or llama_decode's
/// status), and std::invalid_argument naming the sizes when `logits` is not tokens x vocab_size().
/// Thread safety: none; the engine's calls are not safe to overlap.
class EngineLogitsModel {
 public:
  EngineLogitsModel(Engine& engine, std::size_t sequence) : engine_(&engine), sequence_(sequence) {
    if (sequence >= engine.sequences()) {
      throw std::invalid_argument("EngineLogitsModel: sequence " + std::to_string(sequence) + " is beyond the engine's " +
                                  std::to_string(engine.sequences()));
    }
  }

  /// Decodes `tokens` at positions pos .. pos + n - 1 (the sequence holds pos tokens) and writes
  /// the row after each to `logits`.
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<float> logits) {
    const std::size_t vocab = engine_->vocab_size();
    if (logits.size() != tokens.size() * vocab) {
      throw std::invalid_argument("EngineLogitsModel::forward: " + std::to_string(logits.size()) + " logits for " +
                                  std::to_string(tokens.size()) + " tokens of a vocabulary of " + std::to_string(vocab));
    }
    if (pos == 0) engine_->clear_sequence(sequence_);
    engine_->clear_pass();
    const std::size_t first = engine_->add(sequence_, pos, tokens, true);
    engine_->decode();
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const std::span<const float> row = engine_->logits(first + i);
      std::copy(row.begin(), row.end(), logits.begin() + static_cast<std::ptrdiff_t>(i * vocab));
    }
  }
  /// Keeps the sequence's first `pos` tokens.
  void rollback(std::size_t pos) { engine_->truncate(sequence_, pos); }
  [[nodiscard]] std::size_t max_batch() const noexcept { return engine_->max_pass_tokens(); }
  [[nodiscard]] std::size_t vocab_size() const noexcept { return engine_->vocab_size(); }

 private:
  Engine* engine_;
  std::size_t sequence_;
};

static_assert(LogitsModel<EngineLogitsModel>);

/// ngramspec drafting with one draft model for every sequence of a BatchSpeculator: a
/// ModelDrafter per slot, each over a sequence of the draft engine of its own (slot i, sequence
/// i; the engine needs batch.max_sequences of them). The engine must outlive it.
struct DraftModelSpeculator {
  using Drafter = ModelDrafter<EngineLogitsModel>;
  /// Throws what the drafters and BatchSpeculator throw (std::invalid_argument naming the value).
  DraftModelSpeculator(Engine& draft, const BatchConfig& batch, const ModelDraftConfig& drafter) {
    models.reserve(batch.max_sequences);  // the drafters hold pointers into it
    for (std::size_t s = 0; s < batch.max_sequences; ++s) models.emplace_back(draft, s);
    std::size_t next = 0;
    speculator = std::make_unique<BatchSpeculator<Drafter>>(
        batch, [&] { return Drafter(models[next++], draft.vocab_size(), drafter); });
  }
  std::vector<EngineLogitsModel> models;
  std::unique_ptr<BatchSpeculator<Drafter>> speculator;
};

/// ngramspec drafting with the better of the text and a draft model each pass, for every sequence
/// of a BatchSpeculator: per slot a MatchDrafter, a ModelDrafter over a sequence of the draft
/// engine of its own (slot i, sequence i), and the BestOfDrafter over both, priced by the batch's
/// verify cost and `best`'s draft costs. The engine must outlive it.
struct BestOfSpeculator {
  using Drafter = BestOfDrafter<MatchDrafter, ModelDrafter<EngineLogitsModel>>;
  /// Throws what the drafters and BatchSpeculator throw (std::invalid_argument naming the value).
  BestOfSpeculator(Engine& draft, const BatchConfig& batch, const MatchConfig& text, const ModelDraftConfig& model,
                   const BestOfConfig& best) {
    // The BestOfDrafters borrow these: their addresses may not move.
    models.reserve(batch.max_sequences);
    texts.reserve(batch.max_sequences);
    drafters.reserve(batch.max_sequences);
    for (std::size_t s = 0; s < batch.max_sequences; ++s) {
      models.emplace_back(draft, s);
      texts.emplace_back(text);
      drafters.emplace_back(models.back(), draft.vocab_size(), model);
    }
    std::size_t next = 0;
    speculator = std::make_unique<BatchSpeculator<Drafter>>(batch, [&] {
      const std::size_t i = next++;
      return Drafter(texts[i], drafters[i], batch.cost, best);
    });
  }
  std::vector<EngineLogitsModel> models;
  std::vector<MatchDrafter> texts;
  std::vector<ModelDrafter<EngineLogitsModel>> drafters;
  std::unique_ptr<BatchSpeculator<Drafter>> speculator;
};

}  // namespace ngramspec::llama_cpp
