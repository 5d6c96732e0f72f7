#pragma once

// The 5-token target of the C ABI's chi-square tests: logits that depend on the last token alone,
// its sampling distribution under a temperature and top-k, and the exact distribution of the
// first two tokens after a sequence that ends in token 0.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <vector>

#include "ngramspec/token.hpp"

namespace ngramspec::test {

/// The target's vocabulary.
inline constexpr std::size_t kTargetVocab = 5;

/// The target's logit of `t` after token `last`: log weights 2 .. 6, no row uniform.
[[nodiscard]] inline float target_logit(Token last, Token t) {
  return static_cast<float>(std::log(2.0 + static_cast<double>((3 * last + 2 * t + t * t * (last + 2)) % 5)));
}

/// The target's sampling distribution after `last` under options `o` (anything with a temperature
/// and a top_k: SamplingOptions, ngramspec_sampling_options): its weights at the temperature, the
/// top_k most likely kept (ties to the lower id), renormalized. (The tests use no other filter.)
template <class Options>
[[nodiscard]] std::array<double, kTargetVocab> target_distribution(Token last, const Options& o) {
  std::array<double, kTargetVocab> w{};
  for (Token t = 0; t < kTargetVocab; ++t) {
    w[t] = std::exp(static_cast<double>(target_logit(last, t)) / static_cast<double>(o.temperature));
  }
  std::array<Token, kTargetVocab> order{};
  for (Token t = 0; t < kTargetVocab; ++t) order[t] = t;
  std::stable_sort(order.begin(), order.end(), [&](Token a, Token b) { return w[a] > w[b]; });
  if (o.top_k != 0) {
    for (std::size_t i = o.top_k; i < kTargetVocab; ++i) w[order[i]] = 0.0;
  }
  double total = 0.0;
  for (const double x : w) total += x;
  for (double& x : w) x /= total;
  return w;
}

/// The probability of each pair (a, b), at a * kTargetVocab + b, of first two tokens after token 0.
template <class Options>
[[nodiscard]] std::vector<double> first_two_probabilities(const Options& options) {
  std::vector<double> p(kTargetVocab * kTargetVocab);
  const std::array<double, kTargetVocab> first = target_distribution(0, options);
  for (Token a = 0; a < kTargetVocab; ++a) {
    const std::array<double, kTargetVocab> second = target_distribution(a, options);
    for (Token b = 0; b < kTargetVocab; ++b) p[a * kTargetVocab + b] = first[a] * second[b];
  }
  return p;
}

}  // namespace ngramspec::test
