#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec::test {

/// A deliberately naive NGramPredictor to compare the real one against.
///
/// It shares nothing with the predictor but the rules: it keeps every token it is given,
/// recounts the window's n-grams from scratch on every call and compares contexts by their
/// tokens, not by a hash. It exists to be obviously right, so it is slow: predict() costs
/// O(tokens seen + max_drafts · orders · window · max_order). Expects a config that
/// NGramPredictor accepts; it does not check.
class ReferenceNGram {
 public:
  explicit ReferenceNGram(const NGramConfig& config) : config_(config) {}

  void update(Token token) { history_.push_back(token); }
  void update(std::span<const Token> tokens) { history_.insert(history_.end(), tokens.begin(), tokens.end()); }
  void reset() { history_.clear(); }

  /// Same contract as NGramPredictor::predict.
  [[nodiscard]] std::size_t predict(std::span<Token> out) const {
    const std::size_t limit = std::min(out.size(), config_.max_drafts);
    // The stream as it would read if every draft so far were accepted; the counts stay those
    // of the observed window.
    std::vector<Token> tentative = history_;
    std::size_t made = 0;
    while (made < limit) {
      std::optional<Token> next;
      for (std::size_t n = config_.max_order; n >= config_.min_order && !next; --n) {
        next = best_continuation(tentative, n);
      }
      if (!next) break;
      out[made++] = *next;
      tentative.push_back(*next);
    }
    return made;
  }

  /// Distinct contexts plus distinct n-grams in the window, summed over the orders: the most
  /// table entries a predictor that forgets what left the window can be holding.
  [[nodiscard]] std::size_t distinct_entries() const {
    std::size_t entries = 0;
    for (std::size_t n = config_.min_order; n <= config_.max_order; ++n) {
      std::vector<std::size_t> starts;
      for (std::size_t start = window_begin(); start + n <= history_.size(); ++start) starts.push_back(start);
      entries += distinct(starts, n - 1) + distinct(starts, n);
    }
    return entries;
  }

  [[nodiscard]] const NGramConfig& config() const noexcept { return config_; }
  [[nodiscard]] std::uint64_t tokens_seen() const noexcept { return history_.size(); }
  /// Every token observed since construction or the last reset(), oldest first.
  [[nodiscard]] const std::vector<Token>& history() const noexcept { return history_; }

 private:
  struct Tally {
    std::size_t count = 0;
    std::size_t last = 0;  // stream position of the latest occurrence
  };

  [[nodiscard]] std::size_t window_begin() const {
    return history_.size() > config_.window ? history_.size() - config_.window : 0;
  }

  // How many different token sequences of `length` start at `starts`.
  [[nodiscard]] std::size_t distinct(std::vector<std::size_t> starts, std::size_t length) const {
    const auto at = [this](std::size_t start) { return history_.begin() + static_cast<std::ptrdiff_t>(start); };
    const auto len = static_cast<std::ptrdiff_t>(length);
    std::sort(starts.begin(), starts.end(), [&](std::size_t a, std::size_t b) {
      return std::lexicographical_compare(at(a), at(a) + len, at(b), at(b) + len);
    });
    std::size_t count = 0;
    for (std::size_t i = 0; i < starts.size(); ++i) {
      if (i == 0 || !std::equal(at(starts[i - 1]), at(starts[i - 1]) + len, at(starts[i]))) ++count;
    }
    return count;
  }

  // The most frequent token following the last n - 1 tokens of `tentative` among the n-grams
  // that lie wholly in the window; on a tie, the one whose latest occurrence is latest.
  [[nodiscard]] std::optional<Token> best_continuation(const std::vector<Token>& tentative, std::size_t n) const {
    if (tentative.size() < n - 1) return std::nullopt;
    const auto context = tentative.end() - static_cast<std::ptrdiff_t>(n - 1);
    std::map<Token, Tally> tallies;
    for (std::size_t start = window_begin(); start + n <= history_.size(); ++start) {
      if (!std::equal(context, tentative.end(), history_.begin() + static_cast<std::ptrdiff_t>(start))) continue;
      Tally& tally = tallies[history_[start + n - 1]];
      ++tally.count;
      tally.last = start + n - 1;
    }
    std::optional<Token> best;
    Tally best_tally;
    for (const auto& [token, tally] : tallies) {
      if (!best || tally.count > best_tally.count ||
          (tally.count == best_tally.count && tally.last > best_tally.last)) {
        best = token;
        best_tally = tally;
      }
    }
    return best;
  }

  NGramConfig config_;
  std::vector<Token> history_;
};

}  // namespace ngramspec::test
