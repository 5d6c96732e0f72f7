#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "ngramspec/argument_error.hpp"
#include "ngramspec/learned_cost.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "ngramspec/verify_cost.hpp"

namespace ngramspec {

/// A sequence's name in a BatchSpeculator, chosen by the engine (a request id, a slot index).
using SequenceId = std::uint64_t;

/// Configuration of a BatchSpeculator; validated once, by the constructor.
struct BatchConfig {
  /// Most max_sequences: 2^20.
  static constexpr std::size_t kMaxSequences = std::size_t{1} << 20;

  /// Sequences running at once, 1 .. kMaxSequences. The pool holds this many drafters, made at
  /// construction, so memory is fixed (memory_bytes() reports it; docs/BENCHMARKS.md#memory
  /// has what MatchDrafter's defaults take each).
  std::size_t max_sequences = 64;
  /// Most tokens one verify pass carries, the engine's token budget (every sequence's last
  /// token, drafts and any prefill); 0: no limit beyond the drafts buffer given to propose().
  std::size_t max_pass_tokens = 0;
  /// Most output tokens of a sequence kept for the corpus (its first ones), when there is a
  /// corpus: finish() appends them as one record. At most SharedCorpus::kMaxTokens (no corpus
  /// holds more); each sequence of the pool reserves this many at construction.
  std::size_t max_record_tokens = 8192;
  /// What a verify pass costs; propose() then sizes every draft so that the pass's expected
  /// emitted tokens per unit of cost is highest (DraftPlanner). Without it every sequence
  /// sends what its drafter proposes, up to its DecodeOptions::max_drafts.
  std::optional<VerifyCost> cost{};
  /// Learn what a pass costs from the passes served (LearnedCost), starting from `cost` as its
  /// prior when there is one: propose() then plans against the learned estimate for the pass's
  /// sequences, and the drafters do not gate. Each pass is timed from the end of propose() to
  /// accept(), or by the engine (BatchSpeculator::report_pass_seconds()). The recommended
  /// setting: a curve timed at start is only right while the machine stays as it was.
  bool learn_cost = false;
  /// How the learned cost explores and refreshes (LearnedCostConfig); used with learn_cost.
  LearnedCostConfig learning{};
};

/// Running totals of a BatchSpeculator.
struct BatchStats {
  std::uint64_t proposals = 0;  ///< propose() calls
  std::uint64_t drafted = 0;    ///< drafts verified (those the model tokens of accept() covered)
  std::uint64_t accepted = 0;   ///< drafts accepted and emitted
  std::uint64_t emitted = 0;    ///< tokens emitted
  std::uint64_t begun = 0;      ///< sequences begun
  std::uint64_t finished = 0;   ///< sequences finished (finish()), appended to the corpus when there is one
  std::uint64_t cancelled = 0;  ///< sequences cancelled
  /// Draft tokens the drafters dropped for lying outside the model's vocabulary
  /// (MatchConfig::vocab_size): each such token and every one after it in its draft.
  std::uint64_t out_of_vocabulary = 0;
};

/// Throws std::invalid_argument naming the field and its value when `config` is invalid:
/// max_sequences outside 1 .. kMaxSequences, max_record_tokens above SharedCorpus::kMaxTokens,
/// max_pass_tokens 1 (a pass carries each sequence's last token before any draft), or `learning`
/// out of LearnedCostConfig's ranges (checked whether or not learn_cost is set).
inline void validate(const BatchConfig& config) {
  if (config.max_sequences == 0 || config.max_sequences > BatchConfig::kMaxSequences) {
    throw ArgumentError("ngramspec::BatchConfig", "max_sequences = " + std::to_string(config.max_sequences) +
                                                      " is invalid: must be between 1 and " +
                                                      std::to_string(BatchConfig::kMaxSequences));
  }
  if (config.max_record_tokens > SharedCorpus::kMaxTokens) {
    throw ArgumentError("ngramspec::BatchConfig", "max_record_tokens = " + std::to_string(config.max_record_tokens) +
                                                      " is invalid: must be at most SharedCorpus::kMaxTokens = " +
                                                      std::to_string(SharedCorpus::kMaxTokens) +
                                                      ", the most a corpus holds");
  }
  // Checked whether or not the cost is learned: a setting given is never silently ignored.
  LearnedCost::check(config.learning);
  if (config.max_pass_tokens == 1) {
    throw ArgumentError("ngramspec::BatchConfig",
                        "max_pass_tokens = 1 is invalid: must be 0 (no limit) or at least 2, since a pass "
                        "carries each sequence's last token before any draft");
  }
}

}  // namespace ngramspec
