#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "ngramspec/draft_tree.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec {

/// What the decoder needs from a drafter: it observes the sequence (prompt, then every
/// accepted token, in order) and proposes what comes next.
///
/// - `update(token)` / `update(tokens)`: append to the observed sequence.
/// - `predict(out)`: write up to out.size() drafts of the tokens that follow the observed
///   sequence, return how many; const, so proposing never changes the drafter.
/// - `reset()`: forget the sequence.
template <class D>
concept Drafter = requires(D& d, const D& cd, Token token, std::span<const Token> tokens,
                           std::span<Token> out) {
  d.update(token);
  d.update(tokens);
  { cd.predict(out) } -> std::convertible_to<std::size_t>;
  d.reset();
};

/// A drafter that also estimates, for each draft j, the chance that drafts 0..j are all
/// accepted (`predict(out, probabilities)`, non-increasing): what a cost-aware choice of draft
/// length needs. MatchDrafter and NGramPredictor are; for other drafters the decoders estimate
/// from each sequence's own record of accepted drafts.
template <class D>
concept EstimatingDrafter = Drafter<D> && requires(const D& cd, std::span<Token> out, std::span<float> probabilities) {
  { cd.predict(out, probabilities) } -> std::convertible_to<std::size_t>;
};

/// A drafter that also drafts trees (TreeDrafter): `predict_tree(tree, max_drafts, max_depth,
/// min_path_probability)` fills a DraftTree best-first (path probabilities non-increasing, so
/// any prefix is a tree; none below min_path_probability),
/// and `observe_pass(tree, fed, model_tokens, kept, top)` hears how a verified pass went;
/// `top_k_table()` is the table it recycles the model's top-k into (nullptr: none, and the
/// decoders ask the model for no top-k). With a TreeTargetModel, SpeculativeDecoder and
/// BatchSpeculator verify its trees; with a chain model it drafts chains.
template <class D>
concept TreeDraftingDrafter =
    Drafter<D> && requires(D& d, DraftTree& tree, std::size_t count, float least, std::span<const Token> tokens,
                           std::span<const std::size_t> kept) {
      { d.predict_tree(tree, count, count, least) } -> std::convertible_to<std::size_t>;
      d.observe_pass(std::as_const(tree), tokens, tokens, kept, tokens);
      d.top_k_table();
    };

}  // namespace ngramspec
