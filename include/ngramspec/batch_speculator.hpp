#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ngramspec/allocation_error.hpp"
#include "ngramspec/decode_options.hpp"
#include "ngramspec/decode_step.hpp"
#include "ngramspec/detail/draft_estimates.hpp"
#include "ngramspec/detail/open_table.hpp"
#include "ngramspec/draft_planner.hpp"
#include "ngramspec/drafter.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "ngramspec/token.hpp"
#include "ngramspec/verify_cost.hpp"

namespace ngramspec {

/// A sequence's name in a BatchSpeculator, chosen by the engine (a request id, a slot index).
using SequenceId = std::uint64_t;

/// Configuration of a BatchSpeculator; validated once, by the constructor.
struct BatchConfig {
  /// Sequences running at once. The pool holds this many drafters, made at construction, so
  /// memory is fixed (memory_bytes() reports it): MatchDrafter's defaults take 891 KiB each.
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
};

/// Speculation for every running sequence of an engine: the one object an engine holds.
///
/// The engine names sequences by ids of its own and drives them in steps around its batched
/// forward:
///
///     spec.begin(id, prompt, options);              // the drafter reads the prompt
///     loop:
///       n = spec.propose(ids, drafts, offsets);     // ids: the sequences of this pass
///       forward, per sequence i: [its last token, drafts[offsets[i] .. offsets[i+1])]
///                (a sequence with no output yet: its prompt, the prefill)
///       spec.accept(ids, model_tokens, model_offsets, steps);
///       per sequence i: emit model_tokens[model_offsets[i] ..][0 .. steps[i].emitted),
///                       roll its KV cache back to steps[i].rollback_to when steps[i].discarded,
///                       and spec.finish(id) once steps[i].finished
///
/// The prefill is a pass of its own, implicit in the calls: for a sequence with no output yet
/// propose() gives no drafts (offsets[i] == offsets[i + 1]) and the engine feeds its whole
/// prompt; accept() then wants exactly one model token for it, the token after the prompt.
/// From then on each pass feeds the sequence's last emitted token first: that token is not in
/// the KV cache yet (the cache holds the prompt and every emitted token but the last, see
/// SequenceState::cache_length()), so a sequence's model tokens are one more than its drafts
/// verified, and steps[i].rollback_to counts the cache without it. docs/MODEL_CONTRACT.md has
/// the whole contract.
///
/// propose() chooses every draft length together (see BatchConfig::cost and DraftPlanner);
/// accept() takes the model's tokens, decides each sequence's step exactly as accept_drafts()
/// does (longest agreeing prefix plus the model's token, cut at stop tokens and limits), and
/// feeds the emitted tokens to the drafters. For a greedy model the emitted tokens are plain
/// greedy decoding's, whatever the drafts. Model tokens for a sequence may cover fewer drafts
/// than were proposed (an engine that trims a pass): the first ones are verified.
///
/// Drafters are pooled: finish() and cancel() return a sequence's drafter, reset, to the pool.
/// Nothing allocates in steady state: begin() reuses a drafter and its buffers (it allocates
/// only to copy more stop tokens, or a larger max_drafts, than the slot held before), and
/// propose() and accept() grow their scratch only past the largest batch seen. Both are
/// O(batch x drafts) (the drafters' own work, plus DraftPlanner's histogram).
///
/// Errors: every call checks all of its arguments before it changes anything, and throws
/// std::invalid_argument naming the id, size or index that is wrong; the speculator stays
/// usable. An exception from a drafter's predict() leaves every sequence as it was; one from
/// a drafter's update() during accept() is rethrown after every sequence of the call has
/// been stepped and `steps` filled (that drafter saw only part of its tokens, which can cost
/// acceptance but never correctness).
///
/// Thread safety: none inside; drive it from one engine thread. The corpus may be shared with
/// other speculators and threads (see SharedCorpus).
template <Drafter D = MatchDrafter>
class BatchSpeculator {
 public:
  /// A pool of config.max_sequences drafters, each made by `make()`; finish() appends to
  /// `corpus` when given (it must outlive the speculator, and the drafters may read it).
  /// Throws std::invalid_argument naming the field and value when config is invalid.
  template <class MakeDrafter>
    requires std::is_invocable_r_v<D, MakeDrafter&>
  BatchSpeculator(BatchConfig config, MakeDrafter make, SharedCorpus* corpus = nullptr)
      : config_(validated(std::move(config))), corpus_(corpus), ids_(config_.max_sequences) {
    slots_.reserve(config_.max_sequences);
    call_slots_.resize(config_.max_sequences);
    free_.reserve(config_.max_sequences);
    for (std::size_t i = 0; i < config_.max_sequences; ++i) {
      slots_.emplace_back(make());
      if (corpus_ != nullptr) {
        detail::allocating("a sequence's record (BatchConfig::max_record_tokens tokens)",
                           config_.max_record_tokens * sizeof(Token),
                           [&] { slots_.back().record.reserve(config_.max_record_tokens); });
      }
    }
    for (std::size_t i = config_.max_sequences; i-- > 0;) free_.push_back(static_cast<std::uint32_t>(i));
  }

  /// A pool of MatchDrafters with their defaults, consulting `corpus` (the live corpus, which
  /// finish() appends to) and `file` (a corpus file mapped read-only) when given; with a cost
  /// in `config` they do not gate (min_confidence 0), since the cost then decides every
  /// draft's worth and the gate would only cut drafts a flat pass carries for free.
  explicit BatchSpeculator(BatchConfig config = {}, SharedCorpus* corpus = nullptr, const MappedCorpus* file = nullptr)
    requires std::same_as<D, MatchDrafter>
      : BatchSpeculator(config, default_drafter(config), corpus, file) {}  // config copied: read twice
  /// A pool of MatchDrafters with `drafter`, consulting `corpus` and `file` when given.
  BatchSpeculator(BatchConfig config, MatchConfig drafter, SharedCorpus* corpus = nullptr,
                  const MappedCorpus* file = nullptr)
    requires std::same_as<D, MatchDrafter>
      : BatchSpeculator(
            std::move(config), [&drafter, corpus, file] { return MatchDrafter(drafter, corpus, file); }, corpus) {}

  /// The drafter configuration BatchSpeculator(config) uses: MatchConfig's defaults, without
  /// the gate when config has a cost.
  [[nodiscard]] static MatchConfig default_drafter(const BatchConfig& config) {
    MatchConfig drafter;
    if (config.cost) drafter.min_confidence = 0;
    return drafter;
  }

  BatchSpeculator(const BatchSpeculator&) = delete;
  BatchSpeculator& operator=(const BatchSpeculator&) = delete;

  /// Starts sequence `id` after `prompt` under `options` (limits, stop tokens, max_drafts, and
  /// speculate: false drafts nothing for it) and feeds the prompt to its drafter. Throws
  /// std::invalid_argument when the id is running, every pooled drafter is taken, the prompt
  /// is empty or longer than options.max_context, or max_drafts exceeds kMaxDraftsPerPass (as
  /// start_sequence() and every decoder do). A
  /// sequence that may emit nothing (max_new_tokens 0) starts finished.
  void begin(SequenceId id, std::span<const Token> prompt, const DecodeOptions& options = {}) {
    if (find(id) != nullptr) {
      throw std::invalid_argument("ngramspec::BatchSpeculator::begin: " + name(id) + " is already running");
    }
    if (free_.empty()) {
      throw std::invalid_argument("ngramspec::BatchSpeculator::begin: " + name(id) + ": all " +
                                  std::to_string(config_.max_sequences) +
                                  " sequences of the pool (BatchConfig::max_sequences) are running");
    }
    if (options.max_drafts > kMaxDraftsPerPass) {
      throw std::invalid_argument("ngramspec::BatchSpeculator::begin: " + name(id) + ": max_drafts = " +
                                  std::to_string(options.max_drafts) + " is more than kMaxDraftsPerPass = " +
                                  std::to_string(kMaxDraftsPerPass));
    }
    const SequenceState state = start_sequence(prompt.size(), options);
    Slot& slot = slots_[free_.back()];
    slot.options.max_new_tokens = options.max_new_tokens;
    slot.options.stop_tokens.assign(options.stop_tokens.begin(), options.stop_tokens.end());
    slot.options.max_context = options.max_context;
    slot.options.speculate = options.speculate;
    slot.options.max_drafts = options.max_drafts;
    if (slot.pending.size() < options.max_drafts) slot.pending.resize(options.max_drafts);
    slot.state = state;
    slot.id = id;
    slot.pending_count = 0;
    slot.stamp = 0;
    slot.rate.reset();
    slot.record.clear();
    slot.drafter.reset();
    if (options.speculate) slot.drafter.update(prompt);
    const std::uint32_t index = free_.back();
    free_.pop_back();
    ids_.find_or_insert(id).slot_plus_one = index + 1;
    ++stats_.begun;
  }
  void begin(SequenceId id, std::initializer_list<Token> prompt, const DecodeOptions& options = {}) {
    begin(id, std::span<const Token>(prompt.begin(), prompt.size()), options);
  }

  /// Drafts for the next verify pass of the sequences `ids`, in that order: sequence ids[i]'s
  /// drafts go to drafts[offsets[i] .. offsets[i + 1]) (offsets[0] = 0); returns their total.
  /// A sequence with no output yet drafts nothing: it is taken to prefill its prompt in this
  /// pass, and its prompt's tokens count in the pass's cost (DraftPlanner). `extra_tokens`:
  /// what else the pass carries (other prefills). The drafts fit in `drafts` (a cap on the total)
  /// and BatchConfig::max_pass_tokens, each within its sequence's max_drafts and remaining
  /// tokens. Throws std::invalid_argument, changing nothing, when offsets.size() is not
  /// ids.size() + 1, or an id is unknown, finished or listed twice.
  std::size_t propose(std::span<const SequenceId> ids, std::span<Token> drafts, std::span<std::size_t> offsets,
                      std::size_t extra_tokens = 0) {
    const char* const where = "ngramspec::BatchSpeculator::propose";
    if (offsets.size() != ids.size() + 1) {
      throw std::invalid_argument(std::string(where) + ": offsets has " + std::to_string(offsets.size()) +
                                  " elements; it needs ids.size() + 1 = " + std::to_string(ids.size() + 1));
    }
    const std::uint64_t stamp = ++calls_;
    std::size_t room = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      Slot& slot = running(where, ids, i, stamp);
      call_slots_[i] = &slot;
      room += slot.state.generated == 0 ? 0 : draft_limit(slot.state, slot.options, kMaxDraftsPerPass);
    }
    if (candidates_.size() < room) {
      candidates_.resize(room);
      probabilities_.resize(room);
    }
    if (candidate_offsets_.size() < ids.size() + 1) {
      candidate_offsets_.resize(ids.size() + 1);
      lengths_.resize(ids.size());
    }

    // Token counts add up saturating: extra_tokens is the caller's, and a sum that wrapped
    // would lift the budget that keeps the drafts inside `drafts`.
    const auto plus = [](std::size_t a, std::size_t b) noexcept {
      return a > std::numeric_limits<std::size_t>::max() - b ? std::numeric_limits<std::size_t>::max() : a + b;
    };
    std::size_t base_tokens = extra_tokens;
    std::size_t made = 0;
    candidate_offsets_[0] = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const Slot& slot = *call_slots_[i];
      if (slot.state.generated == 0) {
        base_tokens = plus(base_tokens, slot.state.prompt_length);
      } else {
        base_tokens = plus(base_tokens, 1);
        const std::size_t limit = draft_limit(slot.state, slot.options, kMaxDraftsPerPass);
        made += detail::draft_with_estimates(slot.drafter, std::span<Token>(candidates_).subspan(made, limit),
                                             std::span<float>(probabilities_).subspan(made, limit), slot.rate);
      }
      candidate_offsets_[i + 1] = made;
    }

    // The drafts buffer is a budget too: the pass carries at most base_tokens + drafts.size().
    std::size_t budget = plus(base_tokens, drafts.size());
    if (config_.max_pass_tokens != 0) budget = std::min(budget, config_.max_pass_tokens);
    const VerifyCost* cost = config_.cost ? &*config_.cost : nullptr;
    planner_.plan(cost, base_tokens, static_cast<double>(ids.size()), budget,
                  std::span<float>(probabilities_).first(made),
                  std::span<const std::size_t>(candidate_offsets_).first(ids.size() + 1),
                  std::span<std::size_t>(lengths_).first(ids.size()));

    std::size_t total = 0;
    offsets[0] = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      Slot& slot = *call_slots_[i];
      const std::size_t n = lengths_[i];
      const Token* from = candidates_.data() + candidate_offsets_[i];
      std::copy(from, from + n, drafts.begin() + static_cast<std::ptrdiff_t>(total));
      std::copy(from, from + n, slot.pending.begin());
      slot.pending_count = n;
      total += n;
      offsets[i + 1] = total;
    }
    ++stats_.proposals;
    return total;
  }

  /// Decides the pass for the sequences `ids`: model_tokens[offsets[i] .. offsets[i + 1]) are
  /// the model's tokens after each token fed for ids[i] (its last token and drafts; for a
  /// sequence with no output yet, one token: the one after its prompt); offsets[0] is 0 and
  /// offsets[ids.size()] is model_tokens.size(). Writes each sequence's
  /// step to steps[i]: tokens to emit (the first steps[i].emitted of its model tokens),
  /// drafts accepted, the length to roll its KV cache back to, and whether it finished; and
  /// feeds the emitted tokens to its drafter. Throws std::invalid_argument, changing nothing,
  /// when offsets.size() is not ids.size() + 1 or steps is shorter than ids, offsets do not
  /// start at 0, decrease, or do not end at model_tokens.size(), an id is unknown, finished or listed twice, or a sequence has
  /// no model token or more than one more than the drafts proposed to it since its last step.
  void accept(std::span<const SequenceId> ids, std::span<const Token> model_tokens,
              std::span<const std::size_t> offsets, std::span<StepOutcome> steps) {
    const char* const where = "ngramspec::BatchSpeculator::accept";
    if (offsets.size() != ids.size() + 1) {
      throw std::invalid_argument(std::string(where) + ": offsets has " + std::to_string(offsets.size()) +
                                  " elements; it needs ids.size() + 1 = " + std::to_string(ids.size() + 1));
    }
    if (steps.size() < ids.size()) {
      throw std::invalid_argument(std::string(where) + ": steps has room for " + std::to_string(steps.size()) +
                                  " sequences; " + std::to_string(ids.size()) + " are stepped");
    }
    // Every model token belongs to one sequence: tokens outside the offsets are a caller's
    // mistake (a count or an offset that is wrong), never silently ignored.
    if (offsets.front() != 0 || offsets.back() != model_tokens.size()) {
      throw std::invalid_argument(std::string(where) + ": offsets[0] = " + std::to_string(offsets.front()) +
                                  " and offsets[" + std::to_string(ids.size()) + "] = " +
                                  std::to_string(offsets.back()) + " are invalid: they must be 0 and the count of " +
                                  "model tokens, " + std::to_string(model_tokens.size()));
    }
    const std::uint64_t stamp = ++calls_;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      Slot& slot = running(where, ids, i, stamp);
      call_slots_[i] = &slot;
      if (offsets[i + 1] < offsets[i] || offsets[i + 1] > model_tokens.size()) {
        throw std::invalid_argument(std::string(where) + ": offsets[" + std::to_string(i + 1) + "] = " +
                                    std::to_string(offsets[i + 1]) + " is invalid: offsets[" + std::to_string(i) +
                                    "] = " + std::to_string(offsets[i]) + " and there are " +
                                    std::to_string(model_tokens.size()) + " model tokens");
      }
      const std::size_t n = offsets[i + 1] - offsets[i];
      if (n == 0 || n > slot.pending_count + 1) {
        throw std::invalid_argument(std::string(where) + ": " + name(ids[i]) + " has " + std::to_string(n) +
                                    " model tokens; it needs 1 to " + std::to_string(slot.pending_count + 1) +
                                    " (one more than the drafts verified of the " +
                                    std::to_string(slot.pending_count) + " proposed)");
      }
    }

    std::exception_ptr drafter_error;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      Slot& slot = *call_slots_[i];
      const std::span<const Token> answers = model_tokens.subspan(offsets[i], offsets[i + 1] - offsets[i]);
      const std::size_t verified = answers.size() - 1;
      const StepOutcome outcome =
          accept_drafts(slot.state, std::span<const Token>(slot.pending).first(verified), answers, slot.options);
      advance(slot.state, outcome);
      slot.pending_count = 0;
      slot.rate.record(verified, outcome.accepted);
      steps[i] = outcome;
      stats_.drafted += verified;
      stats_.accepted += outcome.accepted;
      stats_.emitted += outcome.emitted;
      const std::span<const Token> emitted = answers.first(outcome.emitted);
      if (corpus_ != nullptr) {
        const std::size_t keep = std::min(emitted.size(), config_.max_record_tokens - slot.record.size());
        slot.record.insert(slot.record.end(), emitted.begin(), emitted.begin() + static_cast<std::ptrdiff_t>(keep));
      }
      if (slot.options.speculate) {
        try {
          slot.drafter.update(emitted);
        } catch (...) {
          if (!drafter_error) drafter_error = std::current_exception();
        }
      }
    }
    if (drafter_error) std::rethrow_exception(drafter_error);
  }

  /// Ends sequence `id`, finished or not: appends its output (its first max_record_tokens
  /// tokens) to the corpus when there is one, and returns its drafter to the pool. Throws
  /// std::invalid_argument for an unknown id; exceptions from the corpus's append propagate
  /// with the sequence still running.
  void finish(SequenceId id) {
    Slot& slot = known("ngramspec::BatchSpeculator::finish", id);
    if (corpus_ != nullptr) corpus_->append(slot.record);
    release(id);
    ++stats_.finished;
  }

  /// Ends sequence `id` without adding it to the corpus. Throws std::invalid_argument for an
  /// unknown id.
  void cancel(SequenceId id) {
    known("ngramspec::BatchSpeculator::cancel", id);
    release(id);
    ++stats_.cancelled;
  }

  /// Whether `id` is running (begun and neither finished nor cancelled).
  [[nodiscard]] bool contains(SequenceId id) const noexcept { return find(id) != nullptr; }
  /// Where sequence `id` stands; throws std::invalid_argument for an unknown id.
  [[nodiscard]] const SequenceState& state(SequenceId id) const {
    return const_cast<BatchSpeculator*>(this)->known("ngramspec::BatchSpeculator::state", id).state;
  }
  /// Sequence `id`'s drafter; throws std::invalid_argument for an unknown id.
  [[nodiscard]] const D& drafter(SequenceId id) const {
    return const_cast<BatchSpeculator*>(this)->known("ngramspec::BatchSpeculator::drafter", id).drafter;
  }
  /// Sequences running.
  [[nodiscard]] std::size_t size() const noexcept { return config_.max_sequences - free_.size(); }
  [[nodiscard]] const BatchConfig& config() const noexcept { return config_; }
  [[nodiscard]] const BatchStats& stats() const noexcept { return stats_; }
  /// The corpus finish() appends to, or nullptr.
  [[nodiscard]] SharedCorpus* corpus() const noexcept { return corpus_; }
  /// Bytes the speculator holds: its drafters (when D reports memory_bytes()), records and
  /// scratch. Fixed at construction but for the scratch that grows with the largest batch.
  [[nodiscard]] std::size_t memory_bytes() const noexcept {
    std::size_t bytes = sizeof(*this) + free_.capacity() * sizeof(std::uint32_t) +
                        candidates_.capacity() * sizeof(Token) + probabilities_.capacity() * sizeof(float) +
                        (candidate_offsets_.capacity() + lengths_.capacity()) * sizeof(std::size_t) +
                        2 * config_.max_sequences * sizeof(IdEntry) + call_slots_.capacity() * sizeof(Slot*);
    for (const Slot& slot : slots_) {
      bytes += sizeof(Slot) + slot.record.capacity() * sizeof(Token) + slot.pending.capacity() * sizeof(Token) +
               slot.options.stop_tokens.capacity() * sizeof(Token);
      if constexpr (requires(const D& d) { d.memory_bytes(); }) bytes += slot.drafter.memory_bytes() - sizeof(D);
    }
    return bytes;
  }

 private:
  struct Slot {
    explicit Slot(D d) : drafter(std::move(d)) {}
    D drafter;
    SequenceState state;
    DecodeOptions options;
    SequenceId id = 0;
    std::vector<Token> pending;  // drafts proposed since the last step: the first pending_count
    std::size_t pending_count = 0;
    std::uint64_t stamp = 0;  // the last call that named it, to find an id listed twice
    detail::AcceptanceRate rate;
    std::vector<Token> record;  // output kept for the corpus
  };
  struct IdEntry {
    std::uint64_t key = 0;
    std::uint32_t slot_plus_one = 0;
    [[nodiscard]] bool empty() const noexcept { return slot_plus_one == 0; }
  };

  static BatchConfig validated(BatchConfig config) {
    if (config.max_sequences == 0 || config.max_sequences > kMaxSequences) {
      throw std::invalid_argument("ngramspec::BatchConfig: max_sequences = " + std::to_string(config.max_sequences) +
                                  " is invalid: must be between 1 and " + std::to_string(kMaxSequences));
    }
    if (config.max_record_tokens > SharedCorpus::kMaxTokens) {
      throw std::invalid_argument("ngramspec::BatchConfig: max_record_tokens = " +
                                  std::to_string(config.max_record_tokens) +
                                  " is invalid: must be at most SharedCorpus::kMaxTokens = " +
                                  std::to_string(SharedCorpus::kMaxTokens) + ", the most a corpus holds");
    }
    if (config.max_pass_tokens == 1) {
      throw std::invalid_argument(
          "ngramspec::BatchConfig: max_pass_tokens = 1 is invalid: must be 0 (no limit) or at least 2, since a pass "
          "carries each sequence's last token before any draft");
    }
    return config;
  }
  static constexpr std::size_t kMaxSequences = std::size_t{1} << 20;

  static std::string name(SequenceId id) { return "sequence " + std::to_string(id); }

  [[nodiscard]] const IdEntry* find(SequenceId id) const noexcept { return ids_.find(id); }
  Slot& known(const char* where, SequenceId id) {
    const IdEntry* entry = find(id);
    if (entry == nullptr) throw std::invalid_argument(std::string(where) + ": " + name(id) + " is not running");
    return slots_[entry->slot_plus_one - 1];
  }
  // ids[i], checked: running, not finished, not listed before in this call.
  Slot& running(const char* where, std::span<const SequenceId> ids, std::size_t i, std::uint64_t stamp) {
    Slot& slot = known(where, ids[i]);
    if (slot.state.finished) {
      throw std::invalid_argument(std::string(where) + ": " + name(ids[i]) + " (ids[" + std::to_string(i) +
                                  "]) is finished (" + to_string(slot.state.stop_reason) +
                                  "); finish() or cancel() it");
    }
    if (slot.stamp == stamp) {
      throw std::invalid_argument(std::string(where) + ": " + name(ids[i]) + " is listed twice (ids[" +
                                  std::to_string(i) + "])");
    }
    slot.stamp = stamp;
    return slot;
  }
  void release(SequenceId id) noexcept {
    IdEntry* entry = ids_.find(id);
    const std::uint32_t index = entry->slot_plus_one - 1;
    ids_.erase(*entry);
    free_.push_back(index);
  }

  BatchConfig config_;
  SharedCorpus* corpus_ = nullptr;
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_;  // slots not running, the next to use last
  // The slots of the ids of the call in progress, found once while checking them. A call names
  // distinct running sequences, so at most max_sequences: a longer list fails its check first.
  std::vector<Slot*> call_slots_;
  detail::OpenTable<IdEntry> ids_;
  std::uint64_t calls_ = 0;
  BatchStats stats_;
  DraftPlanner planner_;
  std::vector<Token> candidates_;            // every sequence's candidate drafts, flat
  std::vector<float> probabilities_;         // and their estimates
  std::vector<std::size_t> candidate_offsets_;
  std::vector<std::size_t> lengths_;
};

}  // namespace ngramspec
