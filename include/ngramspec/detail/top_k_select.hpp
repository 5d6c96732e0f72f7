#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <string>

#include "ngramspec/token.hpp"

namespace ngramspec::detail {

/// Writes to `out` the out.size() highest-scoring token ids of `scores`, best first, ties to
/// the lower id (out.size() <= scores.size()). An insertion into a sorted run of out.size():
/// O(V · k) at worst, about O(V) on real logits, where few scores beat the k-th best.
inline void top_k_select(std::span<const float> scores, std::span<Token> out) noexcept {
  const std::size_t k = out.size();
  if (k == 0) return;
  std::size_t filled = 0;
  for (std::size_t t = 0; t < scores.size(); ++t) {
    const float s = scores[t];
    // A later id never beats an equal score: it goes after it.
    if (filled == k && !(s > scores[out[k - 1]])) continue;
    std::size_t j = filled < k ? filled++ : k - 1;
    while (j > 0 && s > scores[out[j - 1]]) {
      out[j] = out[j - 1];
      --j;
    }
    out[j] = static_cast<Token>(t);
  }
}

/// Where a run of top-k rows lists a token twice: top[later] repeats top[earlier], in one row.
struct RepeatedTopToken {
  std::size_t earlier;
  std::size_t later;
};

/// The first token that a row of `top` (rows of k tokens) lists twice, reading each row up to
/// `width` tokens (fewer than k where the rest cannot be told apart: past a vocabulary of fewer
/// than k tokens, or past a row's first probability 0 in `probabilities`, when given). A row is
/// the model's k best tokens: a token twice would come back as twin siblings in the trees
/// drafted from it and twice in a drawn node's q. Rows are at most TopKTable::kMaxK tokens, so a
/// pairwise scan.
[[nodiscard]] inline std::optional<RepeatedTopToken> first_repeated_top_token(
    std::span<const Token> top, std::size_t k, std::size_t width, std::span<const float> probabilities = {}) noexcept {
  for (std::size_t row = 0; row < top.size(); row += k) {
    std::size_t end = std::min(k, width);
    if (!probabilities.empty()) {
      const std::span<const float> p = probabilities.subspan(row, k);
      end = std::min(end, static_cast<std::size_t>(std::find(p.begin(), p.end(), 0.0f) - p.begin()));
    }
    for (std::size_t j = 1; j < end; ++j) {
      for (std::size_t i = 0; i < j; ++i) {
        if (top[row + i] == top[row + j]) return RepeatedTopToken{row + i, row + j};
      }
    }
  }
  return std::nullopt;
}

/// What a refusal of `repeat` says, its indices offset by `first` (where `top` starts in the
/// caller's span).
[[nodiscard]] inline std::string repeated_top_token_text(std::span<const Token> top, RepeatedTopToken repeat,
                                                         std::size_t first, std::size_t k) {
  const std::string token = std::to_string(top[repeat.later]);
  return "top[" + std::to_string(first + repeat.later) + "] = " + token + " is invalid: token " + token +
         " is also top[" + std::to_string(first + repeat.earlier) + "], in the same row (entry " +
         std::to_string((first + repeat.later) / k) + "); a row lists " + std::to_string(k) + " distinct tokens";
}

}  // namespace ngramspec::detail
