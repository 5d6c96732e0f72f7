#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <concepts>
#include <optional>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ngramspec/allocation_error.hpp"
#include "ngramspec/batch_config.hpp"
#include "ngramspec/decode_options.hpp"
#include "ngramspec/decode_step.hpp"
#include "ngramspec/detail/batch_checks.hpp"
#include "ngramspec/detail/batch_distributions.hpp"
#include "ngramspec/detail/draft_estimates.hpp"
#include "ngramspec/detail/max_drafts_check.hpp"
#include "ngramspec/detail/sequence_pool.hpp"
#include "ngramspec/draft_distribution.hpp"
#include "ngramspec/draft_planner.hpp"
#include "ngramspec/draft_tree.hpp"
#include "ngramspec/drafter.hpp"
#include "ngramspec/learned_cost.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "ngramspec/target_model.hpp"
#include "ngramspec/token.hpp"
#include "ngramspec/top_k_table.hpp"
#include "ngramspec/verify_cost.hpp"

namespace ngramspec {

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
      : config_(validated(std::move(config))), corpus_(corpus), pool_(config_.max_sequences) {
    for (std::size_t i = 0; i < config_.max_sequences; ++i) {
      Slot& slot = pool_.add(make());
      if (i == 0) refuse_a_pool_beyond_memory(slot.drafter);
      if (corpus_ != nullptr) {
        detail::allocating("a sequence's record (BatchConfig::max_record_tokens tokens)",
                           config_.max_record_tokens * sizeof(Token),
                           [&] { slot.record.reserve(config_.max_record_tokens); });
      }
    }
    pool_.open();
    if (config_.learn_cost) learned_ = std::make_unique<LearnedCost>(config_.cost, config_.learning);
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
  /// the gate when config has a cost or learns one.
  [[nodiscard]] static MatchConfig default_drafter(const BatchConfig& config) {
    MatchConfig drafter;
    if (config.cost || config.learn_cost) drafter.min_confidence = 0;
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
    Slot& slot = pool_.next_free("ngramspec::BatchSpeculator::begin", id);
    detail::check_max_drafts(
        "ngramspec::BatchSpeculator::begin", [id] { return name(id) + ": "; }, "max_drafts", options.max_drafts);
    const SequenceState state = start_sequence(prompt.size(), options);
    if constexpr (kTrees) {
      // With the slot's first tree of this size, the only allocations of the tree path.
      if (tree_fed_.size() < options.max_drafts + 1) {
        tree_fed_.resize(options.max_drafts + 1);
        tree_emitted_.resize(options.max_drafts + 1);
      }
    }
    slot.start(prompt, options, state);
    // Each request its own draws: pooled drafters share a seed, and sequences decoded side by
    // side would otherwise draw alike (TreeDrafter::set_draw_stream).
    if constexpr (requires { slot.drafter.set_draw_stream(std::uint64_t{}); }) {
      slot.drafter.set_draw_stream(stats_.begun);  // every begin() since construction
    }
    pool_.take(id);
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
    return propose_chains<false>(ids, drafts, offsets, {}, extra_tokens);
  }
  /// propose(), and what each draft was drawn from, for an engine that verifies by rejection
  /// sampling (SamplingMode::rejection; TokenSampler::verify with entry j of q[i] for
  /// drafts[offsets[i] + j]): q[i] gets one entry per draft of ids[i], its drafter's when D is
  /// a DistributionDrafter, else one-hot (chosen). When any draft of the pass was drawn, whether
  /// a draft is sent may not depend on its own token: the pass then sends each sequence's
  /// drafts up to the first whose estimate is below what the cheapest added token costs
  /// (DraftPlanner::least_path_probability; all without a cost), within the drafts buffer and
  /// max_pass_tokens in the order of ids, instead of the planner's best prefixes
  /// (docs/SAMPLING.md, "What a decoder may cut"). Throws as propose() does, and
  /// std::invalid_argument when q has fewer than ids.size() elements; std::logic_error from a
  /// drafter that gives fewer distributions than drafts. q's memory grows only past the most
  /// drafts (or support) an element has held.
  std::size_t propose(std::span<const SequenceId> ids, std::span<Token> drafts, std::span<std::size_t> offsets,
                      std::span<DraftDistributions> q, std::size_t extra_tokens = 0) {
    return propose_chains<true>(ids, drafts, offsets, q, extra_tokens);
  }

  /// Decides the pass for the sequences `ids`: model_tokens[offsets[i] .. offsets[i + 1]) are
  /// the model's tokens after each token fed for ids[i] (its last token and drafts; for a
  /// sequence with no output yet, one token: the one after its prompt); offsets[0] is 0 and
  /// offsets[ids.size()] is model_tokens.size(). Writes each sequence's
  /// step to steps[i]: tokens to emit (the first steps[i].emitted of its model tokens),
  /// drafts accepted, the length to roll its KV cache back to, and whether it finished; and
  /// feeds the emitted tokens to its drafter. Throws std::invalid_argument, changing nothing,
  /// when offsets.size() is not ids.size() + 1 or steps is shorter than ids, offsets do not
  /// start at 0, decrease, or do not end at model_tokens.size(), an id is unknown, finished or
  /// listed twice, or a sequence has no model token or more than one more than the drafts
  /// proposed to it since its last step.
  void accept(std::span<const SequenceId> ids, std::span<const Token> model_tokens,
              std::span<const std::size_t> offsets, std::span<StepOutcome> steps) {
    const char* const where = "ngramspec::BatchSpeculator::accept";
    detail::check_step_arguments(where, ids.size(), model_tokens.size(), offsets, steps.size());
    check_sequences(
        where, ids, model_tokens.size(), offsets, "one more than the drafts",
        [](const Slot& slot) { return slot.pending_count; }, [](const Slot&, std::size_t, std::size_t) {});
    step_sequences(
        model_tokens, offsets, steps,
        [&](Slot& slot, std::size_t, std::span<const Token> answers) {
          const StepOutcome outcome = accept_drafts(
              slot.state, std::span<const Token>(slot.pending).first(answers.size() - 1), answers, slot.options);
          return Decided{outcome, answers.first(outcome.emitted)};
        },
        [](Slot& slot, std::size_t, std::span<const Token>, std::span<const Token> emitted) {
          slot.drafter.update(emitted);
        });
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
    return propose_tree_pass<false>(ids, tokens, parents, offsets, {}, extra_tokens);
  }
  /// propose_trees(), and what each node was drawn from (q[i]: one entry per node of ids[i],
  /// by index; its drafter's when D is a DistributionTreeDrafter, such as TreeDrafter with
  /// TreeConfig::draw_recycled, else one-hot). When any node of the pass was drawn, each tree
  /// is cut by the drafter's least path probability alone, and by the budgets in the order of
  /// ids, never to the planner's best prefix (see propose() with q). Throws as propose_trees()
  /// does, and std::invalid_argument when q has fewer than ids.size() elements.
  std::size_t propose_trees(std::span<const SequenceId> ids, std::span<Token> tokens, std::span<std::int32_t> parents,
                            std::span<std::size_t> offsets, std::span<DraftDistributions> q,
                            std::size_t extra_tokens = 0) {
    return propose_tree_pass<true>(ids, tokens, parents, offsets, q, extra_tokens);
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
  /// model_tokens, `top` of another size (or any with top_k() 0), a token of top or of
  /// model_tokens outside the vocabulary of the sequence's top-k table, or a row of top that
  /// lists a token twice (with top_probabilities, up to the row's first probability 0).
  void accept_trees(std::span<const SequenceId> ids, std::span<const Token> model_tokens,
                    std::span<const std::size_t> offsets, std::span<const Token> top, std::span<StepOutcome> steps,
                    std::span<std::size_t> kept) {
    accept_tree_pass(ids, model_tokens, offsets, top, {}, steps, kept);
  }
  /// accept_trees(), and `top_probabilities`: the probability of each token of `top` under the
  /// distribution the engine sampled that entry's token from (top_probabilities[t] for top[t],
  /// as TokenSampler's TopDistribution gives them; a row with fewer tokens left by the filters
  /// ends in probability 0), recorded into each drafter's top-k table for every entry of its
  /// pass (TopKTable::record_distribution, the row's tokens up to its first probability 0), so
  /// that a drafter drawing its recycled candidates (TreeConfig::draw_recycled) draws them from
  /// the target's p. Throws as accept_trees() does, and std::invalid_argument, changing nothing,
  /// when top_probabilities.size() is not top.size(), a sequence's table keeps no probabilities,
  /// a probability is outside [0, 1], or a row's first probability is 0.
  void accept_trees(std::span<const SequenceId> ids, std::span<const Token> model_tokens,
                    std::span<const std::size_t> offsets, std::span<const Token> top,
                    std::span<const float> top_probabilities, std::span<StepOutcome> steps,
                    std::span<std::size_t> kept) {
    detail::check_same_size("ngramspec::BatchSpeculator::accept_trees", "top_probabilities",
                            top_probabilities.size(), "top.size()", top.size());
    accept_tree_pass(ids, model_tokens, offsets, top, top_probabilities, steps, kept);
  }

  /// Ends sequence `id`, finished or not: appends its output (its first max_record_tokens
  /// tokens) to the corpus when there is one, and returns its drafter to the pool. Throws
  /// std::invalid_argument for an unknown id; exceptions from the corpus's append propagate
  /// with the sequence still running.
  void finish(SequenceId id) {
    Slot& slot = pool_.slot_of("ngramspec::BatchSpeculator::finish", id);
    if (corpus_ != nullptr) corpus_->append(slot.record);
    pool_.release(id);
    ++stats_.finished;
  }

  /// Ends sequence `id` without adding it to the corpus. Throws std::invalid_argument for an
  /// unknown id.
  void cancel(SequenceId id) {
    (void)pool_.slot_of("ngramspec::BatchSpeculator::cancel", id);
    pool_.release(id);
    ++stats_.cancelled;
  }

  /// Whether `id` is running (begun and neither finished nor cancelled).
  [[nodiscard]] bool contains(SequenceId id) const noexcept { return pool_.contains(id); }
  /// Where sequence `id` stands; throws std::invalid_argument for an unknown id.
  [[nodiscard]] const SequenceState& state(SequenceId id) const {
    return const_cast<BatchSpeculator*>(this)->pool_.slot_of("ngramspec::BatchSpeculator::state", id).state;
  }
  /// Sequence `id`'s drafter; throws std::invalid_argument for an unknown id.
  [[nodiscard]] const D& drafter(SequenceId id) const {
    return const_cast<BatchSpeculator*>(this)->pool_.slot_of("ngramspec::BatchSpeculator::drafter", id).drafter;
  }
  /// The same, to set it up for its request after begin() (a drawing drafter's seed, which
  /// rejection sampling needs afresh per request: docs/SAMPLING.md).
  [[nodiscard]] D& drafter(SequenceId id) { return pool_.slot_of("ngramspec::BatchSpeculator::drafter", id).drafter; }
  /// Sequences running.
  [[nodiscard]] std::size_t size() const noexcept { return pool_.size(); }
  [[nodiscard]] const BatchConfig& config() const noexcept { return config_; }
  /// Plans the next passes against `cost` instead of config().cost, until called again; nullptr
  /// returns to config().cost. For an engine whose pass costs depend on the pass before (llama.cpp
  /// keeps its compute graph while the pass shape stays, and rebuilds it when the shape changes:
  /// a pass with drafts after a plain one costs more than one after another like it), set before
  /// each propose(). The cost is the caller's and must outlive its use; nothing is copied or
  /// allocated. Give the configuration a cost too, so that the drafters do not gate.
  void use_cost(const VerifyCost* cost) noexcept { cost_in_use_ = cost; }
  /// The time the engine took to run the pass proposed last (its forward, and whatever else it
  /// counts as the pass's), for the learned cost (BatchConfig::learn_cost): call it between
  /// propose() and accept(). Without it, the pass is timed from the end of propose() to the
  /// start of accept(). Throws std::invalid_argument naming the value when seconds is not finite
  /// and positive, the configuration does not learn its cost, or no pass is waiting for accept().
  void report_pass_seconds(double seconds) {
    const char* const where = "ngramspec::BatchSpeculator::report_pass_seconds";
    if (!learned_) throw ArgumentError(where, "the configuration does not learn its cost (BatchConfig::learn_cost)");
    if (!(std::isfinite(seconds) && seconds > 0)) {
      throw ArgumentError(where, "seconds = " + std::to_string(seconds) + " is invalid: must be finite and positive");
    }
    if (!timed_.open) throw ArgumentError(where, "no pass proposed since the last accept: report between the two");
    timed_.reported = seconds;
  }
  /// The learned cost (BatchConfig::learn_cost), nullptr without one: what it learned
  /// (describe(), estimate()) and what exploring cost.
  [[nodiscard]] const LearnedCost* learned_cost() const noexcept { return learned_.get(); }
  /// The cost the next pass is planned against: use_cost()'s, else config().cost's, else nullptr.
  /// With a learned cost (and no use_cost()), propose() plans against the learned estimate for
  /// the pass's sequences instead (learned_cost()).
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
    std::size_t bytes = sizeof(*this) + pool_.table_bytes() +
                        candidates_.capacity() * sizeof(Token) + probabilities_.capacity() * sizeof(float) +
                        (candidate_offsets_.capacity() + lengths_.capacity()) * sizeof(std::size_t);
    for (const Slot& slot : pool_.slots()) bytes += slot.memory_bytes();
    if (learned_) bytes += sizeof(LearnedCost) + learned_->curve_capacity_bytes();
    return bytes + (tree_fed_.capacity() + tree_emitted_.capacity()) * sizeof(Token);
  }

 private:
  static constexpr bool kTrees = TreeDraftingDrafter<D>;
  using Slot = detail::SequenceSlot<D>;
  // Whether accept_trees() can record the engine's distributions into the drafters' tables.
  static constexpr bool kRecords = requires(D& d) {
    { d.top_k_table() } -> std::same_as<TopKTable*>;
  };
  static BatchConfig validated(BatchConfig config) {
    validate(config);
    return config;
  }
  static std::string name(SequenceId id) { return detail::sequence_name(id); }

  // One pass skeleton for chains and trees. propose() and propose_trees(): open_pass() checks
  // the ids and sets the budget, the caller drafts every sequence's candidates (their path
  // probabilities in probabilities_, sequence i's from candidate_offsets_[i]), and close_pass()
  // plans the pass and has the caller write each sequence's part. accept() and accept_trees():
  // check_sequences() checks every sequence, then step_sequences() steps them.

  // What a pass carries before its drafts, and what is left for them.
  struct PassBudget {
    const VerifyCost* cost = nullptr;  // the pass is planned against it; nullptr: no cost
    std::size_t base_tokens = 0;       // extra tokens, prefills and the other sequences' last tokens
    double base_expected = 0;          // tokens the pass emits without drafts: one per sequence
    std::size_t room = 0;              // the sequences' own limits (`limit`), added up
    std::size_t budget = 0;            // most tokens of the pass: base_tokens + buffer, max_pass_tokens
    std::size_t draft_room = 0;        // drafts that fit: room, the buffer and max_pass_tokens
  };

  // Checks ids (running, unfinished, distinct), finds their slots, and adds up the pass: a
  // sequence with no output yet prefills its prompt; any other feeds its last token and may
  // draft up to limit(slot). `buffer`: the caller's room for drafts. Grows the scratch to fit.
  template <class Limit>
  PassBudget open_pass(const char* where, std::span<const SequenceId> ids, std::size_t extra_tokens,
                       std::size_t buffer, Limit limit) {
    const std::uint64_t stamp = pool_.next_call();
    const VerifyCost* cost = cost_in_use_ == nullptr && learned_ ? &learned_->curve(ids.size()) : active_cost();
    PassBudget pass{.cost = cost, .base_tokens = extra_tokens, .base_expected = static_cast<double>(ids.size())};
    for (std::size_t i = 0; i < ids.size(); ++i) {
      Slot& slot = pool_.claim_for_call(where, ids, i, stamp);
      if (slot.state.generated == 0) {
        pass.base_tokens = saturating_plus(pass.base_tokens, slot.state.prompt_length);
      } else {
        pass.base_tokens = saturating_plus(pass.base_tokens, 1);
        pass.room += limit(std::as_const(slot));
      }
    }
    // The drafts buffer is a budget too: the pass carries at most base_tokens + buffer.
    pass.budget = saturating_plus(pass.base_tokens, buffer);
    pass.draft_room = std::min(pass.room, buffer);
    if (config_.max_pass_tokens != 0) {
      pass.budget = std::min(pass.budget, config_.max_pass_tokens);
      pass.draft_room = std::min(pass.draft_room, config_.max_pass_tokens > pass.base_tokens
                                                      ? config_.max_pass_tokens - pass.base_tokens
                                                      : 0);
    }
    if (probabilities_.size() < pass.room) probabilities_.resize(pass.room);
    if (candidate_offsets_.size() < ids.size() + 1) {
      candidate_offsets_.resize(ids.size() + 1);
      lengths_.resize(ids.size());
    }
    candidate_offsets_[0] = 0;
    return pass;
  }

  // Sizes every sequence's drafts (lengths_) from the `made` candidates: together, by the
  // planner; or, when any was drawn, each up to its first estimate below `least`, within the
  // room left in the order of the call (a stopping rule: docs/SAMPLING.md).
  void plan_pass(const PassBudget& pass, std::size_t made, std::size_t sequences, bool drawn, float least) {
    if (!drawn) {
      planner_.plan(pass.cost, pass.base_tokens, pass.base_expected, pass.budget,
                    std::span<float>(probabilities_).first(made),
                    std::span<const std::size_t>(candidate_offsets_).first(sequences + 1),
                    std::span<std::size_t>(lengths_).first(sequences));
      return;
    }
    std::size_t room = pass.draft_room;
    for (std::size_t i = 0; i < sequences; ++i) {
      const std::size_t first = candidate_offsets_[i];
      const std::size_t most = std::min(candidate_offsets_[i + 1] - first, room);
      std::size_t n = 0;
      while (n < most && probabilities_[first + n] >= least) ++n;
      lengths_[i] = n;
      room -= n;
    }
  }

  // Has write(slot, i, total) put sequence i's part of the planned pass at `total` of the
  // caller's buffers and return its size; fills offsets and returns the pass's drafts.
  // With a learned cost, the pass's clock starts here: what follows until accept is the engine's.
  template <class Write>
  std::size_t close_pass(const PassBudget& pass, std::span<std::size_t> offsets, Write write) {
    std::size_t total = 0;
    offsets[0] = 0;
    for (std::size_t i = 0; i + 1 < offsets.size(); ++i) {
      total += write(pool_.of_call(i), i, total);
      offsets[i + 1] = total;
    }
    ++stats_.proposals;
    if (learned_) {
      timed_.open = true;
      timed_.rows = offsets.size() - 1;
      timed_.tokens = saturating_plus(pass.base_tokens, total);
      timed_.reported = 0;
      timed_.start = std::chrono::steady_clock::now();
    }
    return total;
  }

  // The pass proposed last has been run: the learned cost observes it (once), timed by the
  // engine's report or by the clock since propose.
  void observe_pass() {
    if (!learned_ || !timed_.open) return;
    timed_.open = false;
    double seconds = timed_.reported;
    if (seconds <= 0) {
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - timed_.start).count();
      seconds = std::max(seconds, 1e-9);  // a pass too fast for the clock still costs something
    }
    learned_->observe(std::max<std::size_t>(timed_.rows, 1), std::max(timed_.tokens, timed_.rows), seconds);
  }

  // Checks every sequence of an accept call before any is stepped: running, unfinished,
  // distinct, its offsets, and 1 to proposed(slot) + 1 model tokens (`entries` says what they
  // verify); then more(slot, i, n) checks anything else of sequence i and its n model tokens.
  template <class Proposed, class More>
  void check_sequences(const char* where, std::span<const SequenceId> ids, std::size_t model_tokens,
                       std::span<const std::size_t> offsets, const char* entries, Proposed proposed, More more) {
    const std::uint64_t stamp = pool_.next_call();
    for (std::size_t i = 0; i < ids.size(); ++i) {
      Slot& slot = pool_.claim_for_call(where, ids, i, stamp);
      more(std::as_const(slot), i,
           detail::checked_model_token_count(where, ids[i], offsets, i, model_tokens,
                                             proposed(std::as_const(slot)), entries));
    }
    observe_pass();
  }

  // A sequence's pass decided: its step and the tokens it emits.
  struct Decided {
    StepOutcome outcome;
    std::span<const Token> emitted;
  };

  // Steps every sequence of a checked accept call: decide(slot, i, answers) decides its pass
  // from its model tokens; the step goes to steps[i] and the stats, the emitted tokens to its
  // record, and feed(slot, i, answers, emitted) tells its drafter (when it speculates). An
  // exception from feed() is rethrown once every sequence is stepped.
  template <class Decide, class Feed>
  void step_sequences(std::span<const Token> model_tokens, std::span<const std::size_t> offsets,
                      std::span<StepOutcome> steps, Decide decide, Feed feed) {
    std::exception_ptr drafter_error;
    for (std::size_t i = 0; i + 1 < offsets.size(); ++i) {
      Slot& slot = pool_.of_call(i);
      const std::span<const Token> answers = model_tokens.subspan(offsets[i], offsets[i + 1] - offsets[i]);
      const std::size_t verified = answers.size() - 1;
      const Decided decided = decide(slot, i, answers);
      const StepOutcome& outcome = decided.outcome;
      steps[i] = outcome;
      advance(slot.state, outcome);
      slot.pending_count = 0;
      slot.rate.record(verified, outcome.accepted);
      stats_.drafted += verified;
      stats_.accepted += outcome.accepted;
      stats_.emitted += outcome.emitted;
      if (corpus_ != nullptr) {
        const std::size_t keep = std::min(decided.emitted.size(), config_.max_record_tokens - slot.record.size());
        slot.record.insert(slot.record.end(), decided.emitted.begin(),
                           decided.emitted.begin() + static_cast<std::ptrdiff_t>(keep));
      }
      if (slot.options.speculate) {
        try {
          feed(slot, i, answers, decided.emitted);
        } catch (...) {
          if (!drafter_error) drafter_error = std::current_exception();
        }
      }
      if constexpr (kTrees) {
        slot.trees.last = decided.emitted.back();
        slot.trees.tree.clear();
      }
    }
    if (drafter_error) std::rethrow_exception(drafter_error);
  }

  // propose(), propose_trees() and accept_trees(): the passes, defined in
  // detail/batch_passes.hpp (with q when kWithQ; accept_trees recording top_probabilities when
  // there are any).
  template <bool kWithQ>
  std::size_t propose_chains(std::span<const SequenceId> ids, std::span<Token> drafts, std::span<std::size_t> offsets,
                             std::span<DraftDistributions> q, std::size_t extra_tokens);
  template <bool kWithQ>
  std::size_t propose_tree_pass(std::span<const SequenceId> ids, std::span<Token> tokens,
                                std::span<std::int32_t> parents, std::span<std::size_t> offsets,
                                std::span<DraftDistributions> q, std::size_t extra_tokens);
  void accept_tree_pass(std::span<const SequenceId> ids, std::span<const Token> model_tokens,
                        std::span<const std::size_t> offsets, std::span<const Token> top,
                        std::span<const float> top_probabilities, std::span<StepOutcome> steps,
                        std::span<std::size_t> kept);

  // Token counts add up saturating: extra_tokens is the caller's, and a sum that wrapped would
  // lift the budget that keeps the drafts inside the caller's buffer.
  static std::size_t saturating_plus(std::size_t a, std::size_t b) noexcept {
    return a > std::numeric_limits<std::size_t>::max() - b ? std::numeric_limits<std::size_t>::max() : a + b;
  }
  // The pool's drafters are alike (one make()), their memory fixed at construction: once the
  // first is made, a pool beyond the machine's memory is refused before the rest are allocated.
  void refuse_a_pool_beyond_memory(const D& first) const {
    if constexpr (requires { { first.memory_bytes() } -> std::convertible_to<std::size_t>; }) {
      detail::check_pool_fits_memory(config_.max_sequences, first.memory_bytes());
    }
  }

  // draft(), counting in the stats the drafts it dropped outside the vocabulary (for drafters
  // that count them); returns what it returns.
  template <class Draft>
  std::size_t counting_out_of_vocabulary(const D& drafter, Draft draft) {
    if constexpr (requires {
                    { drafter.out_of_vocabulary_drafts() } noexcept -> std::convertible_to<std::uint64_t>;
                  }) {
      const std::uint64_t dropped = drafter.out_of_vocabulary_drafts();
      const std::size_t made = draft();
      stats_.out_of_vocabulary += drafter.out_of_vocabulary_drafts() - dropped;
      return made;
    } else {
      return draft();
    }
  }
  // The k of every drafter's top-k table (0: none); a pass's top rows share one k.
  [[nodiscard]] std::size_t common_top_k() const {
    const auto k_of = [](const D& drafter) -> std::size_t {
      const TopKTable* table = drafter.top_k_table();
      return table == nullptr ? 0 : table->k();
    };
    const std::span<const Slot> slots = pool_.slots();
    const std::size_t k = k_of(slots.front().drafter);
    for (std::size_t i = 1; i < slots.size(); ++i) detail::check_same_top_k(i, k_of(slots[i].drafter), k);
    return k;
  }

  BatchConfig config_;
  const VerifyCost* cost_in_use_ = nullptr;  // use_cost()'s
  std::unique_ptr<LearnedCost> learned_;  // with BatchConfig::learn_cost (tens of KiB: only then)
  // The pass proposed last, until accept observes it.
  struct TimedPass {
    bool open = false;
    std::size_t rows = 0;
    std::size_t tokens = 0;
    double reported = 0;  // report_pass_seconds()'s; 0: the clock's
    std::chrono::steady_clock::time_point start{};
  } timed_;
  SharedCorpus* corpus_ = nullptr;
  detail::SequencePool<Slot> pool_;
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

#include "ngramspec/detail/batch_passes.hpp"  // the passes, defined out of the class
