#pragma once

// Pearson's chi-square test of observed counts against exact probabilities, for the tests that
// hold a sampler to the distribution it must keep.

#include <cmath>
#include <cstddef>
#include <span>
#include <string>

namespace ngramspec::test {

/// The tests' significance: a correct sampler fails one run in a thousand.
inline constexpr double kChiSquareSignificance = 0.001;

/// Upper kChiSquareSignificance quantile of chi-square with `df` degrees of freedom, by the
/// Wilson-Hilferty approximation.
[[nodiscard]] inline double chi_square_critical(std::size_t df) {
  constexpr double kZ = 3.090232306167813;  // standard normal quantile at 1 - kChiSquareSignificance
  const double k = static_cast<double>(df);
  const double c = 2.0 / (9.0 * k);
  return k * std::pow(1.0 - c + kZ * std::sqrt(c), 3.0);
}

/// A chi-square test's outcome.
struct ChiSquareTest {
  double statistic = 0.0;
  double critical = 0.0;
  std::size_t df = 0;
  std::size_t impossible = 0;  ///< observations in cells of probability 0
  double least_expected = 0.0;  ///< the smallest expected count of a possible cell (>= 5 for the approximation)

  /// Whether the counts are consistent with the probabilities: nothing impossible, statistic below critical.
  [[nodiscard]] bool passes() const noexcept { return impossible == 0 && statistic < critical; }
  [[nodiscard]] std::string describe() const {
    return "chi-square " + std::to_string(statistic) + " with " + std::to_string(df) + " df (critical value " +
           std::to_string(critical) + "), " + std::to_string(impossible) + " impossible observations, least expected " +
           std::to_string(least_expected);
  }
};

/// Pearson's chi-square of `counts` (of `runs` observations) against `probabilities`, cell by cell,
/// over the cells of nonzero probability.
[[nodiscard]] inline ChiSquareTest chi_square_test(std::span<const std::size_t> counts,
                                                   std::span<const double> probabilities, std::size_t runs) {
  ChiSquareTest r;
  std::size_t cells = 0;
  r.least_expected = static_cast<double>(runs);
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (probabilities[i] == 0.0) {
      r.impossible += counts[i];
      continue;
    }
    const double expected = probabilities[i] * static_cast<double>(runs);
    if (expected < r.least_expected) r.least_expected = expected;
    const double d = static_cast<double>(counts[i]) - expected;
    r.statistic += d * d / expected;
    ++cells;
  }
  r.df = cells - 1;
  r.critical = chi_square_critical(r.df);
  return r;
}

}  // namespace ngramspec::test
