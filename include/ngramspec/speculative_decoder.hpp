#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "ngramspec/argument_error.hpp"
#include "ngramspec/decode_options.hpp"
#include "ngramspec/decode_stats.hpp"
#include "ngramspec/decode_step.hpp"
#include "ngramspec/detail/draft_estimates.hpp"
#include "ngramspec/draft_distribution.hpp"
#include "ngramspec/draft_planner.hpp"
#include "ngramspec/draft_tree.hpp"
#include "ngramspec/drafter.hpp"
#include "ngramspec/learned_cost.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/target_model.hpp"
#include "ngramspec/token.hpp"
#include "ngramspec/top_k_table.hpp"
#include "ngramspec/verify_cost.hpp"

namespace ngramspec {

/// Greedy draft / verify / accept / rollback loop over one model.
///
/// generate() starts fresh (model rolled back to 0, drafter reset), prefills the prompt in
/// chunks of at most max_batch() tokens, then repeats: draft, verify the last token and the
/// drafts in one forward, keep the longest matching prefix plus the model's own next token,
/// roll the model back to exactly what was kept, and feed that to the drafter (with
/// DecodeOptions::speculate false the drafter is only reset: it is neither fed nor asked). For a model
/// that decodes greedily the output equals plain greedy decoding token for token, whatever
/// the drafter proposes; each pass emits at least one token, so it never takes more passes.
///
/// With a verify cost (set_verify_cost()), each pass sends the number of drafts, up to
/// DecodeOptions::max_drafts, that makes its expected emitted tokens per unit of cost highest,
/// weighing the drafter's acceptance estimates (EstimatingDrafter; for other drafters the
/// sequence's own acceptance record) against what the longer pass costs (DraftPlanner). On a
/// pass whose cost grows with every token (a small model on a CPU) that drafts only what is
/// likely to be accepted; on a flat one, everything the drafter offers. Without one, every
/// pass sends what the drafter proposes within max_drafts.
///
/// The decoder holds a reference to the model, which must outlive it. The drafter is the
/// decoder's own when it is constructed with a temporary or none (SpeculativeDecoder
/// decoder(model, MatchDrafter(config))), and the caller's when constructed with a named one
/// (SpeculativeDecoder decoder(model, drafter)): then it is borrowed, never copied, what it
/// learns is visible in the caller's object, and it must outlive the decoder. Exceptions from
/// the model, the drafter or the callback propagate; the decoder stays usable, and the next
/// generate() starts fresh. Scratch buffers are kept between calls, so after the first call
/// a pass allocates only when the output vector grows.
///
/// The default drafter is MatchDrafter with its defaults: whole-context copies and local
/// n-gram counts, the best acceptance of the drafters here on recorded LLM output
/// (docs/BENCHMARKS.md#acceptance); any Drafter can take its place.
///
/// Trees: when the drafter drafts them (TreeDraftingDrafter: TreeDrafter) and the model
/// verifies them (TreeTargetModel), each pass verifies a tree of up to max_drafts nodes instead
/// of a chain (docs/MODEL_CONTRACT.md, "Tree passes"), fewer as the context fills, since every
/// node takes a KV entry (tree_node_limit()): the decoder feeds the last emitted token
/// and the tree with its parents, accepts the longest root path the model agrees with
/// (accept_tree), keeps that path's entries (keep(), or rollback() when they are the first
/// ones), and hands the pass back to the drafter (observe_pass, with the model's top-k when it
/// is a TopKTreeModel and the drafter recycles them). With a verify cost the tree is cut to its
/// best prefix, and building stops at the first node that could not pay. A tree that comes out
/// a chain goes through the model's plain forward().
///
/// Drafts with distributions: when the drafter says what its drafts were drawn from
/// (DistributionDrafter, DistributionTreeDrafter) and the model verifies against it
/// (DistributionTargetModel, DistributionTreeModel: SamplingModel), each pass hands the model
/// the drafts' DraftDistributions, which rejection sampling (SamplingMode::rejection) needs.
/// When a draft was drawn, whether it is sent may not depend on its own token, or the
/// verification would be biased: such passes are cut at the first draft whose estimate is below
/// what the cheapest added token costs (DraftPlanner::least_path_probability, known before the
/// draft is drawn) instead of by the best prefix, whose choice looks at the drafts after it.
///
/// Thread safety: one decoder drives one model from one thread at a time.
template <TargetModel M, Drafter D = MatchDrafter>
class SpeculativeDecoder {
 public:
  /// Drafts with a default-constructed drafter of its own.
  explicit SpeculativeDecoder(M& model) : model_(&model), owned_(std::in_place) {}
  /// Drafts with `drafter`, borrowed: it must outlive the decoder.
  SpeculativeDecoder(M& model, D& drafter) : model_(&model), borrowed_(&drafter) {}
  /// Drafts with `drafter`, moved into the decoder.
  SpeculativeDecoder(M& model, D&& drafter) : model_(&model), owned_(std::move(drafter)) {}

  /// As generate(span, options); `decoder.generate({1, 2, 3})`.
  DecodeResult generate(std::initializer_list<Token> prompt, const DecodeOptions& options = {}) {
    return generate(std::span<const Token>(prompt.begin(), prompt.size()), options);
  }

  /// Generates after `prompt`; see the class comment. Throws std::invalid_argument for an
  /// empty prompt, a prompt longer than options.max_context, or a model whose max_batch() is 0.
  DecodeResult generate(std::span<const Token> prompt, const DecodeOptions& options = {}) {
    return generate(prompt, options, [](std::span<const Token>) { return true; });
  }

  /// As above, and hands every run of emitted tokens to `on_tokens` as soon as it is
  /// decided: `bool on_tokens(std::span<const Token> chunk)`; false stops generation
  /// (StopReason::callback) after that chunk. When that chunk ends generation anyway (a stop
  /// token, a limit), that reason is reported instead.
  template <class OnTokens>
  DecodeResult generate(std::span<const Token> prompt, const DecodeOptions& options, OnTokens&& on_tokens) {
    static_assert(std::is_invocable_r_v<bool, OnTokens&, std::span<const Token>>,
                  "ngramspec: the token callback must be callable as bool(std::span<const ngramspec::Token>)");
    const std::size_t max_batch = static_cast<std::size_t>(std::as_const(*model_).max_batch());
    if (max_batch == 0) throw ArgumentError("ngramspec", "the model's max_batch() is 0; it must take at least 1 token");
    SequenceState state = start_sequence(prompt.size(), options);
    D& active = drafter();

    DecodeResult result;
    model_->rollback(0);
    active.reset();
    rate_.reset();
    if (state.finished) {
      result.stop_reason = state.stop_reason;
      return result;
    }
    // Plain decoding drafts nothing, so it skips the drafter's work too.
    const bool speculate = options.speculate;
    if (speculate) active.update(prompt);

    const std::size_t draft_room = draft_limit(state, options, max_batch - 1);
    fed_.resize(draft_room + 1);
    probabilities_.resize(draft_room);
    next_.resize(std::max(draft_room + 1, std::min(max_batch, prompt.size())));
    result.stats.drafted_at.assign(draft_room, 0);
    result.stats.accepted_at.assign(draft_room, 0);
    if constexpr (kTrees) prepare_trees(active, options, max_batch, result.stats);

    // Prefill: the token after the prompt is the first output token.
    for (std::size_t pos = 0; pos < prompt.size();) {
      const std::size_t n = std::min(max_batch, prompt.size() - pos);
      model_->forward(pos, prompt.subspan(pos, n), std::span<Token>(next_).first(n));
      ++result.stats.prefill_passes;
      pos += n;
      if (pos == prompt.size()) next_[0] = next_[n - 1];
    }
    if constexpr (kChainDistributions || kTreeDistributions) {
      const std::size_t room = std::max(draft_room, tree_.capacity());
      q_.reserve(room, DraftDistributions::kMaxSupport);
      least_ = cost_ ? DraftPlanner::least_path_probability(*cost_, 1, 1.0, room) : 0.0f;
    }
    std::size_t drafted = 0;
    StepOutcome outcome = accept_drafts(state, {}, std::span<const Token>(next_).first(1), options);
    std::span<const Token> emitted_from = next_;  // where the pass's emitted tokens are

    for (;;) {
      const std::span<const Token> emitted = emitted_from.first(outcome.emitted);
      if constexpr (kTrees) {
        record_tree(result.stats, drafted, outcome);
      } else {
        record(result.stats, drafted, outcome);
      }
      advance(state, outcome);
      if (speculate) active.update(emitted);
      result.tokens.insert(result.tokens.end(), emitted.begin(), emitted.end());
      if (!on_tokens(emitted) && !state.finished) {
        state.finished = true;
        state.stop_reason = StopReason::callback;
      }
      if (state.finished) break;

      // The drafts go straight behind the last emitted token, which the pass feeds first.
      fed_[0] = result.tokens.back();
      ++result.stats.decode_passes;
      if constexpr (kTrees) {
        drafted = tree_pass(active, state, options, max_batch, outcome);
        emitted_from = emitted_;
        continue;
      }
      if constexpr (kChainDistributions) {
        drafted = drawn_chain(active, state, options, max_batch - 1);
        model_->forward(state.cache_length(), std::span<const Token>(fed_).first(drafted + 1),
                        std::span<Token>(next_).first(drafted + 1), std::as_const(q_));
      } else if (learned_ != nullptr) {
        // Planned against the learned estimate, and the forward timed for it.
        drafted = plan_drafts(active, state, options, max_batch - 1, learned_->curve(1));
        const auto start = std::chrono::steady_clock::now();
        model_->forward(state.cache_length(), std::span<const Token>(fed_).first(drafted + 1),
                        std::span<Token>(next_).first(drafted + 1));
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        learned_->observe(1, drafted + 1, std::max(seconds, 1e-9));
      } else {
        drafted = cost_ ? plan_drafts(active, state, options, max_batch - 1, *cost_)
                        : propose_drafts(active, state, options, max_batch - 1, std::span<Token>(fed_).subspan(1));
        model_->forward(state.cache_length(), std::span<const Token>(fed_).first(drafted + 1),
                        std::span<Token>(next_).first(drafted + 1));
      }
      outcome = accept_drafts(state, std::span<const Token>(fed_).subspan(1, drafted),
                              std::span<const Token>(next_).first(drafted + 1), options);
      if (outcome.discarded != 0) model_->rollback(outcome.rollback_to);
      rate_.record(drafted, outcome.accepted);
    }

    trim_histograms(result.stats);
    result.stop_reason = state.stop_reason;
    return result;
  }

  /// The drafter, for configuring or inspecting it between generations.
  [[nodiscard]] D& drafter() noexcept { return borrowed_ ? *borrowed_ : *owned_; }
  [[nodiscard]] const D& drafter() const noexcept { return borrowed_ ? *borrowed_ : *owned_; }
  /// Whether the drafter is the caller's (constructed with a named drafter) rather than the decoder's own.
  [[nodiscard]] bool borrows_drafter() const noexcept { return borrowed_ != nullptr; }
  /// The model this decoder drives.
  [[nodiscard]] M& model() noexcept { return *model_; }

  /// Sizes drafts by what a pass costs from the next generate() on; std::nullopt: drafts
  /// what the drafter proposes (the default).
  void set_verify_cost(std::optional<VerifyCost> cost) { cost_ = std::move(cost); }
  [[nodiscard]] const std::optional<VerifyCost>& verify_cost() const noexcept { return cost_; }
  /// Learns what a pass costs from this decoder's own passes: each greedy chain pass is planned
  /// against learned->curve(1) (instead of the verify cost) and the model's forward is timed
  /// into learned->observe(). The learner is the caller's, kept across generate() calls (what
  /// it learned is the point) and must outlive its use; nullptr stops learning. Tree passes and
  /// drawn drafts plan with the verify cost as before (set it too: it is their curve, and the
  /// learner's prior is the caller's choice). Not thread-safe, like the decoder.
  void set_learned_cost(LearnedCost* learned) noexcept { learned_ = learned; }
  [[nodiscard]] LearnedCost* learned_cost() const noexcept { return learned_; }

 private:
  // Trees when the drafter drafts them and the model verifies them; chains otherwise.
  static constexpr bool kTrees = TreeDraftingDrafter<D> && TreeTargetModel<M>;
  // Drafts with the distributions they were drawn from, when both sides speak of them.
  static constexpr bool kChainDistributions = DistributionDrafter<D> && DistributionTargetModel<M>;
  static constexpr bool kTreeDistributions = DistributionTreeDrafter<D> && DistributionTreeModel<M>;
  // A model that gives its top-k beside verifying against distributions (SamplingModel).
  static constexpr bool kTopKWithDistributions =
      requires(M& m, std::span<const Token> t, std::span<const std::int32_t> p, std::span<Token> x,
               const DraftDistributions& q) { m.forward_tree(0, t, p, x, x, q); };

  // The drafts a pass of drawn drafts sends: those before the first whose estimate is below
  // least_ (a stopping rule: each draft's estimate is known before it is drawn).
  [[nodiscard]] std::size_t drawn_cut(std::span<const float> probabilities) const noexcept {
    std::size_t n = 0;
    while (n < probabilities.size() && probabilities[n] >= least_) ++n;
    return n;
  }

  // Sizes the tree buffers: a tree pass carries up to min(max_drafts, max_batch - 1) nodes, fewer
  // as the context fills (tree_node_limit: every node takes a KV entry); its depth is bounded by
  // the tokens the sequence may still emit (draft_limit).
  void prepare_trees(const D& drafter, const DecodeOptions& options, std::size_t max_batch, DecodeStats& stats) {
    const std::size_t nodes = std::min({options.max_drafts, max_batch - 1, kMaxDraftsPerPass});
    tree_.reserve(nodes);
    fed_.resize(nodes + 1);
    next_.resize(std::max(next_.size(), nodes + 1));
    parents_.resize(nodes + 1);
    kept_.resize(nodes + 1);
    emitted_.resize(nodes + 1);
    probabilities_.resize(nodes);
    const TopKTable* table = drafter.top_k_table();
    top_k_ = table != nullptr && TopKTreeModel<M> ? table->k() : 0;
    top_.resize(top_k_ * (nodes + 1));
    min_node_probability_ = cost_ ? DraftPlanner::least_path_probability(*cost_, 1, 1.0, nodes) : 0.0f;
    stats.drafted_at.assign(std::max(stats.drafted_at.size(), nodes), 0);
    stats.accepted_at.assign(stats.drafted_at.size(), 0);
  }

  // One tree pass: drafts a tree (cut by the cost when there is one), verifies it, keeps the
  // accepted path's entries, and writes the emitted tokens to emitted_. Returns the nodes sent.
  std::size_t tree_pass(D& drafter, const SequenceState& state, const DecodeOptions& options, std::size_t max_batch,
                        StepOutcome& outcome) {
    const std::size_t depth = draft_limit(state, options, max_batch - 1);
    // The tree's capacity may be a larger earlier generation's: the limit is this pass's.
    const std::size_t most = tree_node_limit(state, options, max_batch - 1);
    std::size_t nodes = 0;
    tree_.clear();
    if (depth > 0) {
      // A drafter that claims or builds more than it was allowed is clamped, never trusted.
      std::size_t claimed = 0;
      if constexpr (kTreeDistributions) {
        claimed = drafter.predict_tree(tree_, most, depth, min_node_probability_, q_);
      } else {
        claimed = drafter.predict_tree(tree_, most, depth, min_node_probability_);
      }
      nodes = std::min({claimed, most, tree_.size()});
      tree_.truncate(nodes);
      // Drawn nodes are cut by min_node_probability_ alone, which the drafter applied while
      // building (see the class comment).
      bool drawn = false;
      if constexpr (kTreeDistributions) drawn = q_.any_drawn();
      if (cost_ && nodes > 0 && !drawn) {
        const std::span<const float> path = tree_.path_probabilities();
        std::copy(path.begin(), path.end(), probabilities_.begin());
        nodes = DraftPlanner::plan_one(&*cost_, 1, 1.0, 0, std::span<float>(probabilities_).first(nodes));
        tree_.truncate(nodes);
      }
    }
    if constexpr (kTreeDistributions) q_.truncate(nodes);
    const std::span<const Token> tokens = tree_.tokens();
    const std::span<const std::int32_t> parents = tree_.parents();
    parents_[0] = kTreeRoot;
    for (std::size_t i = 0; i < nodes; ++i) {
      fed_[i + 1] = tokens[i];
      parents_[i + 1] = parents[i] + 1;  // kTreeRoot (-1) becomes the root's entry, 0
    }
    const std::size_t pos = state.cache_length();
    const std::span<const Token> fed = std::span<const Token>(fed_).first(nodes + 1);
    const std::span<Token> next = std::span<Token>(next_).first(nodes + 1);
    // The model's top-k only where a recycled candidate could clear the cost's bar: on a pass
    // that charges nearly a pass per token (a small model on a CPU) no top-k node ever would, and
    // ranking every row would be pure overhead.
    bool want_top = top_k_ != 0 && min_node_probability_ < top_k_ceiling(drafter);
    if constexpr (kTreeDistributions && !kTopKWithDistributions) want_top = false;
    const std::span<Token> top = std::span<Token>(top_).first(want_top ? top_k_ * (nodes + 1) : 0);
    const std::span<const std::int32_t> pass_parents = std::span<const std::int32_t>(parents_).first(nodes + 1);
    bool chain_shaped = true;
    for (std::size_t i = 0; i < nodes && chain_shaped; ++i) chain_shaped = parents[i] + 1 == static_cast<std::int32_t>(i);
    if constexpr (kTreeDistributions) {
      const DraftDistributions& q = q_;
      if constexpr (kTopKWithDistributions) {
        if (want_top) {
          model_->forward_tree(pos, fed, pass_parents, next, top, q);
        } else if (chain_shaped) {
          chain_forward(pos, fed, next);
        } else {
          model_->forward_tree(pos, fed, pass_parents, next, q);
        }
      } else if (chain_shaped) {
        chain_forward(pos, fed, next);
      } else {
        model_->forward_tree(pos, fed, pass_parents, next, q);
      }
    } else if constexpr (TopKTreeModel<M>) {
      if (want_top) {
        model_->forward_tree(pos, fed, pass_parents, next, top);
      } else if (chain_shaped) {
        model_->forward(pos, fed, next);  // a chain: the model's plain pass
      } else {
        model_->forward_tree(pos, fed, pass_parents, next);
      }
    } else {
      if (chain_shaped) {
        model_->forward(pos, fed, next);
      } else {
        model_->forward_tree(pos, fed, pass_parents, next);
      }
    }
    outcome = accept_tree(state, tokens, parents, next, options, kept_);
    const std::span<const std::size_t> kept = std::span<const std::size_t>(kept_).first(outcome.emitted);
    drafter.observe_pass(tree_, fed, next, kept, top);
    if (kept_is_prefix(kept)) {
      if (outcome.discarded != 0) model_->rollback(outcome.rollback_to);
    } else {
      model_->keep(pos, kept);
    }
    for (std::size_t j = 0; j < outcome.emitted; ++j) emitted_[j] = next_[kept[j]];
    return nodes;
  }

  // A chain-shaped tree pass with its drafts' distributions, read as chosen by a model that
  // does not take them on chains (still exact, less often accepted).
  void chain_forward(std::size_t pos, std::span<const Token> fed, std::span<Token> next) {
    if constexpr (DistributionTargetModel<M>) {
      model_->forward(pos, fed, next, std::as_const(q_));
    } else {
      model_->forward(pos, fed, next);
    }
  }

  // The best estimate a recycled top-k candidate can get from this drafter (1 when it does not say).
  [[nodiscard]] static float top_k_ceiling(const D& drafter) noexcept {
    if constexpr (requires { { drafter.top_k_ceiling() } -> std::convertible_to<float>; }) {
      return drafter.top_k_ceiling();
    } else {
      return 1.0f;
    }
  }

  void record_tree(DecodeStats& stats, std::size_t drafted, const StepOutcome& outcome) const noexcept {
    stats.drafted += drafted;
    stats.accepted += outcome.accepted;
    stats.generated += outcome.emitted;
    if (drafted == 0) return;
    for (const std::uint32_t depth : tree_.depths()) ++stats.drafted_at[depth];
    for (std::size_t i = 0; i < outcome.accepted; ++i) ++stats.accepted_at[i];
  }

  static void record(DecodeStats& stats, std::size_t drafted, const StepOutcome& outcome) noexcept {
    stats.drafted += drafted;
    stats.accepted += outcome.accepted;
    stats.generated += outcome.emitted;
    for (std::size_t i = 0; i < drafted; ++i) ++stats.drafted_at[i];
    for (std::size_t i = 0; i < outcome.accepted; ++i) ++stats.accepted_at[i];
  }

  static void trim_histograms(DecodeStats& stats) noexcept {
    std::size_t used = stats.drafted_at.size();
    while (used > 0 && stats.drafted_at[used - 1] == 0) --used;
    stats.drafted_at.resize(used);
    stats.accepted_at.resize(used);
  }

  // The drafts of the next pass, into fed_[1..], as many as the cost makes worth sending.
  std::size_t plan_drafts(const D& drafter, const SequenceState& state, const DecodeOptions& options,
                          std::size_t cap, const VerifyCost& cost) {
    const std::size_t limit = std::min(fed_.size() - 1, draft_limit(state, options, cap));
    const std::span<float> probabilities = std::span<float>(probabilities_).first(limit);
    const std::size_t made =
        detail::draft_with_estimates(drafter, std::span<Token>(fed_).subspan(1, limit), probabilities, rate_);
    return DraftPlanner::plan_one(&cost, 1, 1.0, 0, probabilities.first(made));
  }

  // The drafts of the next chain pass with their distributions, into fed_[1..] and q_: as
  // many as the cost makes worth sending (a stopping rule when any was drawn).
  std::size_t drawn_chain(const D& drafter, const SequenceState& state, const DecodeOptions& options,
                          std::size_t cap) {
    const std::size_t limit = std::min(fed_.size() - 1, draft_limit(state, options, cap));
    q_.clear();
    if (limit == 0) return 0;
    const std::span<float> probabilities = std::span<float>(probabilities_).first(limit);
    std::size_t made =
        std::min<std::size_t>(drafter.predict(std::span<Token>(fed_).subspan(1, limit), probabilities, q_), limit);
    q_.check_one_per_draft(made);
    if (cost_ && made > 0) {
      made = q_.any_drawn() ? drawn_cut(probabilities.first(made))
                         : DraftPlanner::plan_one(&*cost_, 1, 1.0, 0, probabilities.first(made));
    }
    q_.truncate(made);
    return made;
  }

  M* model_;
  std::optional<D> owned_;
  D* borrowed_ = nullptr;
  std::optional<VerifyCost> cost_;
  LearnedCost* learned_ = nullptr;  // set_learned_cost()'s
  detail::AcceptanceRate rate_;  // for a drafter without estimates
  std::vector<float> probabilities_;
  std::vector<Token> fed_;   // last emitted token followed by the drafts
  std::vector<Token> next_;  // the model's tokens for what was fed
  // Tree passes only.
  DraftTree tree_;
  std::vector<std::int32_t> parents_;  // the pass's parents: the root, then the nodes
  std::vector<std::size_t> kept_;      // the pass entries kept
  std::vector<Token> emitted_;         // the tokens a tree pass emitted
  std::vector<Token> top_;             // the model's top-k after each fed token
  std::size_t top_k_ = 0;
  float min_node_probability_ = 0.0f;  // no node below it pays for itself under the cost
  // Drafts with distributions only.
  DraftDistributions q_;  // what each draft of the pass was drawn from
  float least_ = 0.0f;    // the least estimate a drawn draft is sent with (0: no cost, all)
};

}  // namespace ngramspec
