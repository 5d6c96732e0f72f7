#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <ngramspec/ngramspec.hpp>

#include "llama2_model.hpp"
#include "llama2_tokenizer.hpp"

namespace ngramspec::llama2 {

static_assert(TargetModel<Transformer> && LogitsModel<Transformer>);
static_assert(TreeTargetModel<Transformer> && TopKTreeModel<Transformer> && LogitsTreeModel<Transformer>);

/// One generation and what it cost.
struct Generation {
  DecodeResult result;   ///< tokens, pass counts, why it stopped
  double seconds = 0.0;  ///< wall-clock time of the whole generation, prefill included
};

namespace detail {

// One timed generation through SpeculativeDecoder with `drafter` (borrowed), greedy or through a SamplingModel:
// the checks and options generate() and generate_tree() share. `width` is the most drafts (or tree nodes) a pass
// carries, named `width_name` in the error.
template <class D>
Generation timed_generation(Transformer& model, std::span<const Token> prompt, std::size_t steps, std::size_t width,
                            const char* width_name, bool speculate, D& drafter, const SamplingOptions& sampling,
                            const std::optional<VerifyCost>& cost, LearnedCost* learned = nullptr) {
  if (prompt.size() > model.config().seq_len) {
    throw std::invalid_argument("llama2: the prompt is " + std::to_string(prompt.size()) +
                                " tokens, longer than the model's seq_len of " +
                                std::to_string(model.config().seq_len));
  }
  if (width == 0 || width + 1 > model.max_batch()) {
    throw std::invalid_argument(std::string("llama2: ") + width_name + " must be between 1 and " +
                                std::to_string(model.max_batch() - 1));
  }
  DecodeOptions options;
  options.max_new_tokens = steps;
  options.stop_tokens = {kBos};
  options.max_context = model.config().seq_len;
  options.speculate = speculate;
  options.max_drafts = width;
  const auto run = [&](auto& target) {
    SpeculativeDecoder decoder(target, drafter);
    decoder.set_verify_cost(cost);
    decoder.set_learned_cost(learned);
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
  // A tree drafter that draws its recycled candidates draws them from the distributions the sampler records.
  if constexpr (std::is_same_v<D, TreeDrafter>) {
    if (drafter.config().draw_recycled && speculate) sampler.set_distribution_table(drafter.top_k_table());
  }
  return run(sampler);
}

}  // namespace detail

/// The MatchDrafter generate() drafts with for `model`: its tables sized by the context the model holds.
[[nodiscard]] inline MatchDrafter make_text_drafter(const Transformer& model) {
  MatchConfig config;
  config.index_capacity =
      std::clamp<std::size_t>(model.config().seq_len, MatchDrafter::kMaxCountOrder, MatchDrafter::kMaxIndexCapacity);
  return MatchDrafter(config);
}

/// Generation of up to `steps` tokens after `prompt` through SpeculativeDecoder with the library's default
/// drafter, MatchDrafter (plain one-token passes when `speculate` is false): greedy at temperature 0, otherwise
/// sampled through a SamplingModel with `sampling` (same seed, same tokens, speculating or not).
///
/// Draft length: at most `k` drafts a pass (DecodeOptions::max_drafts). With `cost`, the curve of what a pass
/// costs against its tokens (measure_pass_cost() times it), each pass sends the number of drafts up to k that
/// makes its expected tokens per unit of cost highest, from MatchDrafter's acceptance estimates
/// (SpeculativeDecoder::set_verify_cost); without, what MatchDrafter's gate proposes up to k. With `learned`
/// (the caller's, kept across calls), greedy passes are planned against what it has learned of this model's
/// passes instead, each forward timed into it (SpeculativeDecoder::set_learned_cost); `cost` is its prior's
/// curve and still sizes what it does not plan.
///
/// Stops on BOS, as llama2.c's run.c does, and at the model's seq_len. Throws std::invalid_argument when the
/// prompt does not fit in seq_len, k + 1 exceeds the model's max_batch(), or the sampling options are invalid.
inline Generation generate(Transformer& model, std::span<const Token> prompt, std::size_t steps, std::size_t k,
                           bool speculate, const SamplingOptions& sampling = {},
                           const std::optional<VerifyCost>& cost = std::nullopt, LearnedCost* learned = nullptr) {
  MatchDrafter drafter = make_text_drafter(model);
  return detail::timed_generation(model, prompt, steps, k, "k", speculate, drafter, sampling, cost,
                                  speculate ? learned : nullptr);
}

/// Tree-verified generation: as generate(), but each pass verifies a tree of up to `nodes` drafts from `drafter`
/// (borrowed, so that what it keeps across requests with TreeConfig::carry_over survives the call), with the
/// model's top-k after every node fed back to it; with `cost`, each pass keeps the best prefix of the tree for
/// what the pass costs. The output is plain decoding's, greedy or sampled. Throws std::invalid_argument as
/// generate() does, with nodes in place of k.
inline Generation generate_tree(Transformer& model, std::span<const Token> prompt, std::size_t steps,
                                std::size_t nodes, TreeDrafter& drafter, const SamplingOptions& sampling = {},
                                const std::optional<VerifyCost>& cost = std::nullopt) {
  return detail::timed_generation(model, prompt, steps, nodes, "tree nodes", true, drafter, sampling, cost);
}

/// Self-speculative generation: as generate(), with `drafter` (borrowed) drafting from a draft model, such as
/// Transformer::early_exit of `model` (see make_self_drafter()), up to `k` drafts a pass. Greedy at temperature 0,
/// otherwise sampled through a SamplingModel with `sampling`; the output is plain decoding's either way. Throws
/// std::invalid_argument as generate() does.
inline Generation generate_with_draft(Transformer& model, std::span<const Token> prompt, std::size_t steps,
                                      std::size_t k, ModelDrafter<Transformer>& drafter,
                                      const SamplingOptions& sampling = {},
                                      const std::optional<VerifyCost>& cost = std::nullopt) {
  return detail::timed_generation(model, prompt, steps, k, "k", true, drafter, sampling, cost);
}

/// As generate_with_draft(), each pass drafted by whichever of `drafter`'s two drafters promises more tokens per
/// unit of cost (BestOfDrafter: the text beside the self-draft, say).
template <class First, class Second>
inline Generation generate_best_of(Transformer& model, std::span<const Token> prompt, std::size_t steps,
                                   std::size_t k, BestOfDrafter<First, Second>& drafter,
                                   const SamplingOptions& sampling = {},
                                   const std::optional<VerifyCost>& cost = std::nullopt) {
  return detail::timed_generation(model, prompt, steps, k, "k", true, drafter, sampling, cost);
}

/// The ModelDrafter ngramspec-generate drafts with over `draft` (an early exit of `model`, which must outlive
/// it): up to `k` drafts a pass, chosen under the target's own sampling options (greedy at temperature 0; else
/// drawn from the draft's distribution under the same temperature and filters, which is the q a rejection
/// verifier needs), and, with a cost, only drafts whose estimated chance of acceptance reaches the least a draft
/// needs to pay under it (DraftPlanner::least_path_probability), so that the draft model does not run for drafts
/// the planner would drop.
[[nodiscard]] inline ModelDrafter<Transformer> make_self_drafter(const Transformer& model, Transformer& draft,
                                                                 std::size_t k, const SamplingOptions& sampling,
                                                                 const std::optional<VerifyCost>& cost) {
  ModelDraftConfig config;
  config.max_drafts = k;
  config.sampling = sampling;
  // Above 1 where a draft costs more than a pass emits: then no draft pays, which a gate of 1 says too.
  if (cost) config.min_probability = std::min(1.0f, DraftPlanner::least_path_probability(*cost, 1, 1.0, k));
  return ModelDrafter<Transformer>(draft, model.vocab_size(), config);
}

/// The TreeDrafter ngramspec-generate drafts trees with for `model`: MatchDrafter's spine sized by the model's
/// context, a top-k table of `recycle` tokens per row over its vocabulary (0: none, text-only trees),
/// TreeConfig's carry_over and enrich_counts, at most `width` children a node (max_children), and for sampling in
/// rejection mode (`sampling`) its recycled candidates drawn from the model's recorded distributions
/// (draw_recycled, seeded apart from the sampler).
[[nodiscard]] inline TreeDrafter make_tree_drafter(const Transformer& model, std::size_t recycle, bool carry_over,
                                                   bool enrich_counts = false, std::size_t width = 8,
                                                   const SamplingOptions& sampling = {}) {
  TreeConfig config;
  config.max_children = width;
  config.draw_recycled =
      recycle != 0 && sampling.temperature > 0.0f && sampling.mode == SamplingMode::rejection;
  config.draw_seed = sampling.seed ^ 0x5bd1e9955bd1e995ULL;
  config.chain.index_capacity =
      std::clamp<std::size_t>(model.config().seq_len, MatchDrafter::kMaxCountOrder, MatchDrafter::kMaxIndexCapacity);
  config.vocab_size = recycle == 0 ? 0 : model.vocab_size();
  config.top_k = recycle == 0 ? config.top_k : recycle;
  config.carry_over = carry_over;
  config.enrich_counts = enrich_counts;
  return TreeDrafter(config);
}

/// The position in the middle of a generation of up to `steps` tokens after a prompt of `prompt_tokens`, where
/// measure_pass_cost() times the passes.
[[nodiscard]] constexpr std::size_t midway_context(std::size_t prompt_tokens, std::size_t steps) noexcept {
  return prompt_tokens + steps / 2;
}

/// The pass widths measure_pass_cost() times for drafts up to `k`: 1, 2, 3, 5, 9, 17, ... (one more than a
/// power of two) below k + 1, then k + 1 itself, all at most `largest` (and at least the one-token pass).
[[nodiscard]] inline std::vector<std::size_t> cost_token_counts(std::size_t k, std::size_t largest) {
  const std::size_t top = std::max<std::size_t>(1, std::min(k + 1, largest));
  std::vector<std::size_t> counts = {1};
  for (std::size_t n = 2; n < top; n = 2 * n - 1) counts.push_back(n);
  if (counts.back() != top) counts.push_back(top);
  return counts;
}

/// What a verify pass of this model costs against its width, timed here: one pass of each width of
/// cost_token_counts(k, ...) at position `context` (after a prefill of fixed pseudo-random tokens), through the
/// target generate() decodes with under `sampling` (the argmax of every row when greedy, SamplingModel's sample
/// of every row otherwise, since that work grows with the pass too), interleaved over `repeats` rounds after a
/// warm-up; the median of each width, normalized so that a one-token pass costs 1 (ngramspec's
/// measure_verify_cost). A pass's attention grows with its position, so time it where generation spends its
/// time: midway_context() gives the middle of a generation. Widths are capped by the model's max_batch() and
/// seq_len, and the context so that the widest pass fits. Leaves the model empty (rolled back to 0). On
/// stories260K it takes about 30 ms at k = 16.
[[nodiscard]] inline VerifyCost measure_pass_cost(Transformer& model, std::size_t k,
                                                  const SamplingOptions& sampling = {}, std::size_t repeats = 21,
                                                  std::size_t context = 64) {
  const std::size_t seq_len = model.config().seq_len;
  const std::size_t top = std::min({k + 1, model.max_batch(), seq_len});
  context = std::min(context, seq_len - top);
  const std::vector<std::size_t> counts = cost_token_counts(k, top);
  std::vector<Token> tokens(context + counts.back());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<Token>((i * 7919 + 13) % model.vocab_size());
  }
  std::vector<Token> next(tokens.size());
  const auto time_on = [&](auto& target) {
    target.rollback(0);
    for (std::size_t pos = 0; pos < context;) {
      const std::size_t n = std::min(model.max_batch(), context - pos);
      target.forward(pos, std::span<const Token>(tokens).subspan(pos, n), std::span<Token>(next).first(n));
      pos += n;
    }
    const auto pass = [&](std::size_t n) {
      target.forward(context, std::span<const Token>(tokens).subspan(context, n), std::span<Token>(next).first(n));
      target.rollback(context);
    };
    VerifyCost cost = measure_verify_cost(pass, counts, repeats);
    target.rollback(0);
    return cost;
  };
  if (sampling.temperature == 0.0f) return time_on(model);
  SamplingModel<Transformer> sampler(model, sampling);
  return time_on(sampler);
}

}  // namespace ngramspec::llama2
