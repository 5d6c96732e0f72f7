#pragma once

#include <concepts>
#include <cstddef>
#include <span>

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

}  // namespace ngramspec
