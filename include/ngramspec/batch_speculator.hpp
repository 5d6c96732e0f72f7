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
#include "ngramspec/detail/physical_memory.hpp"
#include "ngramspec/draft_planner.hpp"
#include "ngramspec/draft_tree.hpp"
#include "ngramspec/drafter.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "ngramspec/target_model.hpp"
#include "ngramspec/token.hpp"
#include "ngramspec/top_k_table.hpp"
#include "ngramspec/verify_cost.hpp"

namespace ngramspec {

/// A sequence's name in a BatchSpeculator, chosen by the engine (a request id, a slot index).
using SequenceId = std::uint64_t;

/// Configuration of a BatchSpeculator; validated once, by the constructor.
struct BatchConfig {
  /// Most max_sequences: 2^20.
  static constexpr std::size_t kMaxSequences = std::size_t{1} << 20;

  /// Sequences running at once, 1 .. kMaxSequences. The pool holds this many drafters, made at
  /// construction, so memory is fixed (memory_bytes() reports it): MatchDrafter's defaults take
  /// 891 KiB each.
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
  /// Draft tokens the drafters dropped for lying outside the model's vocabulary
  /// (MatchConfig::vocab_size): each such token and every one after it in its draft.
  std::uint64_t out_of_vocabulary = 0;
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
/// Trees. With a drafter that drafts trees (TreeDraftingDrafter: BatchSpeculator<TreeDrafter>)
/// and a model that verifies them (TreeTargetModel), the engine runs the same loop with tree
/// passes:
///
///     spec.begin(id, prompt, options);
///     loop:
///       n = spec.propose_trees(ids, tokens, parents, offsets);
///       forward, per sequence i: a tree pass at its cache length: entry 0 its last token (the
///                root), entry 1 + j its node j, tokens[offsets[i] + j], under entry
///                parents[offsets[i] + j] + 1 (0, the root, for kTreeRoot)
///                (a sequence with no output yet: its prompt, the prefill)
///                and, when top_k() > 0, the model's top_k() tokens after every entry into top
///       spec.accept_trees(ids, model_tokens, model_offsets, top, steps, kept);
///       per sequence i, e = model_offsets[i]:
///                       emit model_tokens[e + kept[e + j]] for j < steps[i].emitted,
///                       keep its pass entries kept[e .. e + steps[i].emitted) at cache length + j
///                       (TreeTargetModel::keep; when they are 0, 1, ... (kept_is_prefix), roll
///                       back to steps[i].rollback_to instead when steps[i].discarded),
///                       and spec.finish(id) once steps[i].finished
///
/// Each sequence's tree holds at most its max_drafts nodes, fewer as its context fills (every
/// node takes a KV entry, so a tree has no more nodes than the longest chain there:
/// tree_node_limit()), none deeper than the tokens it may still emit allow (draft_limit()).
/// Trees are best-first, so any prefix of one is a tree and
/// the planner sizes them as it sizes chains (BatchConfig::cost; building stops below the path
/// probability no node under the cost pays for). accept_trees() decides each sequence with
/// accept_tree(), tells its drafter how the pass went (observe_pass(), with the top-k rows that
/// a TopKTable recycles) and feeds it the emitted tokens. As with chains, model tokens may
/// cover only the first nodes of a tree (an engine that trims a pass): that prefix is verified.
/// The drafters may share one TopKTable (made by the engine, outliving the speculator); every
/// drafter's table must have the same k, top_k().
///
/// Thread safety: none inside; drive it from one engine thread. The corpus may be shared with
/// other speculators and threads (see SharedCorpus), a TopKTable only with drafters driven from
/// the same thread.
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
      if (i == 0) refuse_a_pool_beyond_memory(slots_.front().drafter);
      if (corpus_ != nullptr) {
        detail::allocating("a sequence's record (BatchConfig::max_record_tokens tokens)",
                           config_.max_record_tokens * sizeof(Token),
                           [&] { slots_.back().record.reserve(config_.max_record_tokens); });
      }
    }
    for (std::size_t i = config_.max_sequences; i-- > 0;) free_.push_back(static_cast<std::uint32_t>(i));
    if constexpr (kTrees) top_k_ = common_top_k();
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
    if constexpr (kTrees) {
      // The only allocations of the tree path: a slot's first tree of this size, and scratch.
      slot.trees.tree.reserve(options.max_drafts);
      if (tree_fed_.size() < options.max_drafts + 1) {
        tree_fed_.resize(options.max_drafts + 1);
        tree_emitted_.resize(options.max_drafts + 1);
      }
      slot.trees.tree.clear();
      slot.trees.last = prompt.back();
    }
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
    std::size_t pass_base = extra_tokens;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      Slot& slot = running(where, ids, i, stamp);
      call_slots_[i] = &slot;
      room += slot.state.generated == 0 ? 0 : draft_limit(slot.state, slot.options, kMaxDraftsPerPass);
      pass_base = saturating_plus(pass_base, slot.state.generated == 0 ? slot.state.prompt_length : 1);
    }
    // Where the cost says that not even certain drafts could pay, nothing is drafted: the drafters
    // still observe every token (accept()), and the pass costs no drafting work.
    const VerifyCost* cost = active_cost();
    std::size_t pass_room = std::min(room, drafts.size());
    if (config_.max_pass_tokens != 0) {
      pass_room = std::min(pass_room, config_.max_pass_tokens > pass_base ? config_.max_pass_tokens - pass_base : 0);
    }
    const bool draft = cost == nullptr ||
                       DraftPlanner::drafts_can_pay(*cost, pass_base, static_cast<double>(ids.size()), pass_room);
    if (candidates_.size() < room) {
      candidates_.resize(room);
      probabilities_.resize(room);
    }
    if (candidate_offsets_.size() < ids.size() + 1) {
      candidate_offsets_.resize(ids.size() + 1);
      lengths_.resize(ids.size());
    }

    const auto plus = saturating_plus;
    std::size_t base_tokens = extra_tokens;
    std::size_t made = 0;
    candidate_offsets_[0] = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const Slot& slot = *call_slots_[i];
      if (slot.state.generated == 0) {
        base_tokens = plus(base_tokens, slot.state.prompt_length);
      } else {
        base_tokens = plus(base_tokens, 1);
        const std::size_t limit = draft ? draft_limit(slot.state, slot.options, kMaxDraftsPerPass) : 0;
        const std::uint64_t dropped = out_of_vocabulary(slot.drafter);
        made += detail::draft_with_estimates(slot.drafter, std::span<Token>(candidates_).subspan(made, limit),
                                             std::span<float>(probabilities_).subspan(made, limit), slot.rate);
        stats_.out_of_vocabulary += out_of_vocabulary(slot.drafter) - dropped;
      }
      candidate_offsets_[i + 1] = made;
    }

    // The drafts buffer is a budget too: the pass carries at most base_tokens + drafts.size().
    std::size_t budget = plus(base_tokens, drafts.size());
    if (config_.max_pass_tokens != 0) budget = std::min(budget, config_.max_pass_tokens);
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
      if constexpr (kTrees) slot.trees.tree.clear();
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
    check_step_arguments(where, ids, model_tokens, offsets, steps);
    const std::uint64_t stamp = ++calls_;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      Slot& slot = running(where, ids, i, stamp);
      call_slots_[i] = &slot;
      check_offset(where, offsets, i, model_tokens.size());
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
      steps[i] = outcome;
      settle(slot, verified, outcome);
      const std::span<const Token> emitted = answers.first(outcome.emitted);
      if constexpr (kTrees) {
        slot.trees.tree.clear();
        slot.trees.last = emitted.back();
      }
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

  /// Trees for the next verify pass of the sequences `ids`, in that order (the drafter must
  /// draft trees: BatchSpeculator<TreeDrafter>): sequence ids[i]'s nodes go to
  /// tokens[offsets[i] .. offsets[i + 1]) and their parents, tree-local (kTreeRoot for a child
  /// of the root, else the index of the parent node within the sequence's range, which comes
  /// before it), to the same range of `parents`; offsets[0] = 0; returns the total. Each tree
  /// is best-first, holds at most tree_node_limit() nodes (the sequence's max_drafts, fewer as
  /// its max_context fills, so that no node's KV entry reaches it), and none of its paths is
  /// longer than draft_limit(); a sequence with no output yet gets none (its prefill, whose
  /// prompt counts in the pass's cost). `extra_tokens`, the budgets and the cost work as in
  /// propose(), counting nodes as drafts. Throws std::invalid_argument, changing nothing, when
  /// offsets.size() is not ids.size() + 1, parents.size() is not tokens.size(), or an id is
  /// unknown, finished or listed twice. A drafter's exception propagates and leaves the
  /// sequences of the call with no tree pending (as after a call that drafted nothing).
  std::size_t propose_trees(std::span<const SequenceId> ids, std::span<Token> tokens, std::span<std::int32_t> parents,
                            std::span<std::size_t> offsets, std::size_t extra_tokens = 0) {
    static_assert(kTrees,
                  "ngramspec::BatchSpeculator::propose_trees needs a drafter that drafts trees (TreeDraftingDrafter): "
                  "use BatchSpeculator<TreeDrafter>, or propose() for chains");
    const char* const where = "ngramspec::BatchSpeculator::propose_trees";
    if (offsets.size() != ids.size() + 1) {
      throw std::invalid_argument(std::string(where) + ": offsets has " + std::to_string(offsets.size()) +
                                  " elements; it needs ids.size() + 1 = " + std::to_string(ids.size() + 1));
    }
    if (parents.size() != tokens.size()) {
      throw std::invalid_argument(std::string(where) + ": parents has " + std::to_string(parents.size()) +
                                  " elements; it needs tokens.size() = " + std::to_string(tokens.size()));
    }
    const std::uint64_t stamp = ++calls_;
    std::size_t room = 0;
    std::size_t base_tokens = extra_tokens;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      Slot& slot = running(where, ids, i, stamp);
      call_slots_[i] = &slot;
      if (slot.state.generated == 0) {
        base_tokens = saturating_plus(base_tokens, slot.state.prompt_length);
      } else {
        base_tokens = saturating_plus(base_tokens, 1);
        room += tree_node_limit(slot.state, slot.options, kMaxDraftsPerPass);
      }
    }
    if (probabilities_.size() < room) probabilities_.resize(room);
    if (candidate_offsets_.size() < ids.size() + 1) {
      candidate_offsets_.resize(ids.size() + 1);
      lengths_.resize(ids.size());
    }
    std::size_t budget = saturating_plus(base_tokens, tokens.size());
    if (config_.max_pass_tokens != 0) budget = std::min(budget, config_.max_pass_tokens);
    const VerifyCost* cost = active_cost();
    const double base_expected = static_cast<double>(ids.size());
    const float least = cost != nullptr ? DraftPlanner::least_path_probability(*cost, base_tokens, base_expected,
                                                                 std::min(room, budget > base_tokens ? budget - base_tokens : 0))
                                        : 0.0f;

    std::size_t made = 0;
    candidate_offsets_[0] = 0;
    try {
      for (std::size_t i = 0; i < ids.size(); ++i) {
        Slot& slot = *call_slots_[i];
        DraftTree& tree = slot.trees.tree;
        tree.clear();
        slot.pending_count = 0;
        const std::size_t depth =
            slot.state.generated == 0 ? 0 : draft_limit(slot.state, slot.options, kMaxDraftsPerPass);
        if (depth > 0) {
          // A drafter that claims or builds more than it was allowed is clamped, never trusted.
          const std::size_t most = tree_node_limit(slot.state, slot.options, kMaxDraftsPerPass);
          const std::uint64_t dropped = out_of_vocabulary(slot.drafter);
          const std::size_t claimed = slot.drafter.predict_tree(tree, most, depth, least);
          stats_.out_of_vocabulary += out_of_vocabulary(slot.drafter) - dropped;
          tree.truncate(std::min(claimed, most));
          const std::span<const float> path = tree.path_probabilities();
          std::copy(path.begin(), path.end(), probabilities_.begin() + static_cast<std::ptrdiff_t>(made));
          made += path.size();
        }
        candidate_offsets_[i + 1] = made;
      }
    } catch (...) {
      for (std::size_t i = 0; i < ids.size(); ++i) call_slots_[i]->trees.tree.clear();
      throw;
    }

    planner_.plan(cost, base_tokens, base_expected, budget, std::span<float>(probabilities_).first(made),
                  std::span<const std::size_t>(candidate_offsets_).first(ids.size() + 1),
                  std::span<std::size_t>(lengths_).first(ids.size()));

    // Each sequence keeps the first lengths_[i] nodes of its best-first tree: a tree.
    std::size_t total = 0;
    offsets[0] = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      DraftTree& tree = call_slots_[i]->trees.tree;
      tree.truncate(lengths_[i]);
      const std::span<const Token> nodes = tree.tokens();
      const std::span<const std::int32_t> ups = tree.parents();
      std::copy(nodes.begin(), nodes.end(), tokens.begin() + static_cast<std::ptrdiff_t>(total));
      std::copy(ups.begin(), ups.end(), parents.begin() + static_cast<std::ptrdiff_t>(total));
      total += nodes.size();
      offsets[i + 1] = total;
    }
    ++stats_.proposals;
    return total;
  }

  /// Decides the tree pass of the sequences `ids` (see the class comment): model_tokens[
  /// offsets[i] .. offsets[i + 1]) are the model's tokens after each entry fed for ids[i], the
  /// root then its nodes as propose_trees() wrote them (the first k + 1 entries verify the
  /// tree's first k nodes; for a sequence with no output yet, one token: the one after its
  /// prompt); offsets[0] is 0 and offsets[ids.size()] is model_tokens.size(). `top`: empty, or
  /// the model's top_k() tokens after every entry, best first, top[e * top_k() ..) for
  /// model_tokens[e] (so top.size() = model_tokens.size() × top_k()), which the drafters
  /// recycle. Writes each sequence's step to steps[i] (as accept() does) and the pass entries
  /// it keeps to kept[offsets[i] ..][0 .. steps[i].emitted) (accept_tree()'s `kept`: the
  /// emitted tokens are model_tokens[offsets[i] + kept[offsets[i] + j]], and entry
  /// kept[offsets[i] + j] goes to position cache length + j); the rest of kept[offsets[i] ..
  /// offsets[i + 1]) may be overwritten. Tells each drafter how its pass went and feeds it the
  /// emitted tokens. Throws std::invalid_argument, changing nothing, for what accept() refuses,
  /// a sequence with more model tokens than one plus its tree's nodes, `kept` shorter than
  /// model_tokens, `top` of another size (or any with top_k() 0), or a token of top or of
  /// model_tokens outside the vocabulary of the sequence's top-k table.
  void accept_trees(std::span<const SequenceId> ids, std::span<const Token> model_tokens,
                    std::span<const std::size_t> offsets, std::span<const Token> top, std::span<StepOutcome> steps,
                    std::span<std::size_t> kept) {
    static_assert(kTrees,
                  "ngramspec::BatchSpeculator::accept_trees needs a drafter that drafts trees (TreeDraftingDrafter): "
                  "use BatchSpeculator<TreeDrafter>, or accept() for chains");
    const char* const where = "ngramspec::BatchSpeculator::accept_trees";
    check_step_arguments(where, ids, model_tokens, offsets, steps);
    if (kept.size() < model_tokens.size()) {
      throw std::invalid_argument(std::string(where) + ": kept has room for " + std::to_string(kept.size()) +
                                  " entries; it needs one per model token, " + std::to_string(model_tokens.size()));
    }
    if (!top.empty() && top.size() != model_tokens.size() * top_k_) {
      throw std::invalid_argument(std::string(where) + ": top has " + std::to_string(top.size()) +
                                  " tokens; it needs none or top_k() = " + std::to_string(top_k_) +
                                  " per model token, " + std::to_string(model_tokens.size() * top_k_) +
                                  (top_k_ == 0 ? " (the drafters recycle no top-k)" : ""));
    }
    const std::uint64_t stamp = ++calls_;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      Slot& slot = running(where, ids, i, stamp);
      call_slots_[i] = &slot;
      check_offset(where, offsets, i, model_tokens.size());
      const std::size_t n = offsets[i + 1] - offsets[i];
      const std::size_t nodes = slot.trees.tree.size();
      if (n == 0 || n > nodes + 1) {
        throw std::invalid_argument(std::string(where) + ": " + name(ids[i]) + " has " + std::to_string(n) +
                                    " model tokens; it needs 1 to " + std::to_string(nodes + 1) +
                                    " (the root, then one per node verified of the " + std::to_string(nodes) +
                                    " proposed)");
      }
      if (!top.empty()) {
        // The drafters record top rows without checks: every token must have a row.
        const std::size_t vocab = slot.drafter.top_k_table()->vocab_size();
        for (std::size_t e = offsets[i]; e < offsets[i + 1]; ++e) {
          if (model_tokens[e] >= vocab) {
            throw std::invalid_argument(std::string(where) + ": " + name(ids[i]) + ": model_tokens[" +
                                        std::to_string(e) + "] = " + std::to_string(model_tokens[e]) +
                                        " is outside the top-k table's vocabulary of " + std::to_string(vocab));
          }
        }
        for (std::size_t t = offsets[i] * top_k_; t < offsets[i + 1] * top_k_; ++t) {
          if (top[t] >= vocab) {
            throw std::invalid_argument(std::string(where) + ": " + name(ids[i]) + ": top[" + std::to_string(t) +
                                        "] = " + std::to_string(top[t]) +
                                        " is outside the top-k table's vocabulary of " + std::to_string(vocab));
          }
        }
      }
    }

    std::exception_ptr drafter_error;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      Slot& slot = *call_slots_[i];
      DraftTree& tree = slot.trees.tree;
      const std::size_t n = offsets[i + 1] - offsets[i];
      const std::span<const Token> answers = model_tokens.subspan(offsets[i], n);
      const std::size_t verified = n - 1;
      tree.truncate(verified);  // a prefix of a best-first tree is a tree
      const std::span<std::size_t> entries = kept.subspan(offsets[i], n);
      const StepOutcome outcome = accept_tree(slot.state, tree.tokens(), tree.parents(), answers, slot.options, entries);
      steps[i] = outcome;
      settle(slot, verified, outcome);
      const std::span<Token> emitted = std::span<Token>(tree_emitted_).first(outcome.emitted);
      for (std::size_t j = 0; j < outcome.emitted; ++j) emitted[j] = answers[entries[j]];
      if (corpus_ != nullptr) {
        const std::size_t keep = std::min(emitted.size(), config_.max_record_tokens - slot.record.size());
        slot.record.insert(slot.record.end(), emitted.begin(), emitted.begin() + static_cast<std::ptrdiff_t>(keep));
      }
      if (slot.options.speculate) {
        const std::span<Token> fed = std::span<Token>(tree_fed_).first(n);
        fed[0] = slot.trees.last;
        std::copy(tree.tokens().begin(), tree.tokens().end(), fed.begin() + 1);
        const std::span<const Token> rows = top.empty() ? top : top.subspan(offsets[i] * top_k_, n * top_k_);
        try {
          slot.drafter.observe_pass(std::as_const(tree), std::span<const Token>(fed), answers,
                                    std::span<const std::size_t>(entries).first(outcome.emitted), rows);
          slot.drafter.update(std::span<const Token>(emitted));
        } catch (...) {
          if (!drafter_error) drafter_error = std::current_exception();
        }
      }
      slot.trees.last = emitted.back();
      tree.clear();
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
  /// Plans the next passes against `cost` instead of config().cost, until called again; nullptr
  /// returns to config().cost. For an engine whose pass costs depend on the pass before (llama.cpp
  /// keeps its compute graph while the pass shape stays, and rebuilds it when the shape changes:
  /// a pass with drafts after a plain one costs more than one after another like it), set before
  /// each propose(). The cost is the caller's and must outlive its use; nothing is copied or
  /// allocated. Give the configuration a cost too, so that the drafters do not gate.
  void use_cost(const VerifyCost* cost) noexcept { cost_in_use_ = cost; }
  /// The cost the next pass is planned against: use_cost()'s, else config().cost's, else nullptr.
  [[nodiscard]] const VerifyCost* active_cost() const noexcept {
    return cost_in_use_ != nullptr ? cost_in_use_ : config_.cost ? &*config_.cost : nullptr;
  }
  [[nodiscard]] const BatchStats& stats() const noexcept { return stats_; }
  /// Top tokens per pass entry that accept_trees() takes: the k of the drafters' top-k tables
  /// (0: they recycle none, or they draft no trees).
  [[nodiscard]] std::size_t top_k() const noexcept { return top_k_; }
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
      if constexpr (kTrees) bytes += slot.trees.tree.capacity() * kTreeNodeBytes;
    }
    return bytes + (tree_fed_.capacity() + tree_emitted_.capacity()) * sizeof(Token);
  }

 private:
  static constexpr bool kTrees = TreeDraftingDrafter<D>;
  // What a DraftTree holds per node: token, parent, two estimates, depth, source class.
  static constexpr std::size_t kTreeNodeBytes =
      sizeof(Token) + sizeof(std::int32_t) + 2 * sizeof(float) + sizeof(std::uint32_t) + 1;
  // A tree drafter's slot also holds the tree proposed since the last step and the token its
  // next pass feeds first (the root), which observe_pass() is told.
  struct TreeState {
    DraftTree tree;
    Token last = 0;
  };
  struct NoTrees {};
  using TreeSlot = std::conditional_t<kTrees, TreeState, NoTrees>;

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
    [[no_unique_address]] TreeSlot trees;
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
  static constexpr std::size_t kMaxSequences = BatchConfig::kMaxSequences;

  static std::string name(SequenceId id) { return "sequence " + std::to_string(id); }

  // A sequence's pass is decided (`verified` drafts or nodes checked): step it, and count it.
  void settle(Slot& slot, std::size_t verified, const StepOutcome& outcome) noexcept {
    advance(slot.state, outcome);
    slot.pending_count = 0;
    slot.rate.record(verified, outcome.accepted);
    stats_.drafted += verified;
    stats_.accepted += outcome.accepted;
    stats_.emitted += outcome.emitted;
  }

  // Token counts add up saturating: extra_tokens is the caller's, and a sum that wrapped would
  // lift the budget that keeps the drafts inside the caller's buffer.
  static std::size_t saturating_plus(std::size_t a, std::size_t b) noexcept {
    return a > std::numeric_limits<std::size_t>::max() - b ? std::numeric_limits<std::size_t>::max() : a + b;
  }

  // accept() and accept_trees(): the checks of the sizes that need no sequence.
  static void check_step_arguments(const char* where, std::span<const SequenceId> ids,
                                   std::span<const Token> model_tokens, std::span<const std::size_t> offsets,
                                   std::span<const StepOutcome> steps) {
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
  }
  // offsets[i + 1], checked against offsets[i] and the count of model tokens.
  static void check_offset(const char* where, std::span<const std::size_t> offsets, std::size_t i,
                           std::size_t model_tokens) {
    if (offsets[i + 1] < offsets[i] || offsets[i + 1] > model_tokens) {
      throw std::invalid_argument(std::string(where) + ": offsets[" + std::to_string(i + 1) + "] = " +
                                  std::to_string(offsets[i + 1]) + " is invalid: offsets[" + std::to_string(i) +
                                  "] = " + std::to_string(offsets[i]) + " and there are " +
                                  std::to_string(model_tokens) + " model tokens");
    }
  }

  // The pool's drafters are alike (one make()), their memory fixed at construction: once the
  // first is made, the whole pool is sized before the rest are allocated, and a pool larger than
  // the machine's memory (the corpus's and the top-k table's rule) is refused naming it, whatever
  // the drafter (a MatchDrafter's 891 KiB x 2^20 sequences, or tree drafters' own top-k tables).
  void refuse_a_pool_beyond_memory(const D& first) const {
    if constexpr (requires { { first.memory_bytes() } -> std::convertible_to<std::size_t>; }) {
      const std::size_t each = first.memory_bytes();
      const std::size_t machine = detail::physical_memory_bytes();
      const std::size_t n = config_.max_sequences;
      if (machine != 0 && each != 0 && n > machine / each) {
        const std::string total = n > std::numeric_limits<std::size_t>::max() / each ? "more than 2^64"
                                                                                      : std::to_string(n * each);
        throw std::invalid_argument("ngramspec::BatchSpeculator: max_sequences = " + std::to_string(n) +
                                    " drafters of " + std::to_string(each) + " bytes each take " + total +
                                    " bytes, more than this machine's memory (" + std::to_string(machine) +
                                    " bytes)");
      }
    }
  }

  // The drafter's count of drafts dropped outside the vocabulary (0 for drafters that keep none).
  static std::uint64_t out_of_vocabulary(const D& drafter) noexcept {
    if constexpr (requires {
                    { drafter.out_of_vocabulary_drafts() } noexcept -> std::convertible_to<std::uint64_t>;
                  }) {
      return drafter.out_of_vocabulary_drafts();
    } else {
      return 0;
    }
  }
  // The k of every drafter's top-k table (0: none); a pass's top rows share one k.
  [[nodiscard]] std::size_t common_top_k() const {
    const auto k_of = [](const D& drafter) -> std::size_t {
      const TopKTable* table = drafter.top_k_table();
      return table == nullptr ? 0 : table->k();
    };
    const std::size_t k = k_of(slots_.front().drafter);
    for (std::size_t i = 1; i < slots_.size(); ++i) {
      if (k_of(slots_[i].drafter) != k) {
        throw std::invalid_argument("ngramspec::BatchSpeculator: drafter " + std::to_string(i) +
                                    " recycles a top-k table of k = " + std::to_string(k_of(slots_[i].drafter)) +
                                    " but drafter 0 one of k = " + std::to_string(k) +
                                    " (0: none); every drafter of a batch needs the same k");
      }
    }
    return k;
  }

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
  const VerifyCost* cost_in_use_ = nullptr;  // use_cost()'s
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
  // Tree passes only.
  std::size_t top_k_ = 0;           // the k of the drafters' top-k tables
  std::vector<Token> tree_fed_;      // accept_trees: a pass's entries, the root then the nodes
  std::vector<Token> tree_emitted_;  // accept_trees: the tokens it emitted
};

}  // namespace ngramspec
