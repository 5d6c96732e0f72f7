#pragma once

#include <cstddef>
#include <span>

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

}  // namespace ngramspec::detail
