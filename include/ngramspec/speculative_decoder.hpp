#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "ngramspec/decode_options.hpp"
#include "ngramspec/decode_stats.hpp"
#include "ngramspec/decode_step.hpp"
#include "ngramspec/detail/draft_estimates.hpp"
#include "ngramspec/draft_planner.hpp"
#include "ngramspec/drafter.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/target_model.hpp"
#include "ngramspec/token.hpp"
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
/// (docs/BENCHMARKS.md); any Drafter can take its place.
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
    if (max_batch == 0) throw std::invalid_argument("ngramspec: the model's max_batch() is 0; it must take at least 1 token");
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

    // Prefill: the token after the prompt is the first output token.
    for (std::size_t pos = 0; pos < prompt.size();) {
      const std::size_t n = std::min(max_batch, prompt.size() - pos);
      model_->forward(pos, prompt.subspan(pos, n), std::span<Token>(next_).first(n));
      ++result.stats.prefill_passes;
      pos += n;
      if (pos == prompt.size()) next_[0] = next_[n - 1];
    }
    std::size_t drafted = 0;
    StepOutcome outcome = accept_drafts(state, {}, std::span<const Token>(next_).first(1), options);

    for (;;) {
      const std::span<const Token> emitted = std::span<const Token>(next_).first(outcome.emitted);
      record(result.stats, drafted, outcome);
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
      drafted = cost_ ? plan_drafts(active, state, options, max_batch - 1)
                      : propose_drafts(active, state, options, max_batch - 1, std::span<Token>(fed_).subspan(1));
      model_->forward(state.cache_length(), std::span<const Token>(fed_).first(drafted + 1),
                      std::span<Token>(next_).first(drafted + 1));
      ++result.stats.decode_passes;
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

 private:
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
                          std::size_t cap) {
    const std::size_t limit = std::min(fed_.size() - 1, draft_limit(state, options, cap));
    const std::span<float> probabilities = std::span<float>(probabilities_).first(limit);
    const std::size_t made =
        detail::draft_with_estimates(drafter, std::span<Token>(fed_).subspan(1, limit), probabilities, rate_);
    return DraftPlanner::plan_one(&*cost_, 1, 1.0, 0, probabilities.first(made));
  }

  M* model_;
  std::optional<D> owned_;
  D* borrowed_ = nullptr;
  std::optional<VerifyCost> cost_;
  detail::AcceptanceRate rate_;  // for a drafter without estimates
  std::vector<float> probabilities_;
  std::vector<Token> fed_;   // last emitted token followed by the drafts
  std::vector<Token> next_;  // the model's tokens for what was fed
};

}  // namespace ngramspec
