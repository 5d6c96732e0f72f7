#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "ngramspec/match_drafter.hpp"
#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec::test {

/// MatchDrafter's documented semantics without a gate or a corpus, computed naively: O(sequence)
/// scans instead of tables and a pointer, and the copy read from the sequence extended by the
/// drafts written so far. The counts are an NGramPredictor of the same orders and window (the
/// predictor has its own reference). Expects a config that MatchDrafter accepts; it does not check.
class NaiveMatch {
 public:
  explicit NaiveMatch(const MatchConfig& config)
      : config_(config),
        counts_(NGramConfig{.min_order = 2,
                            .max_order = config.count_max_order,
                            .max_drafts = config.max_drafts,
                            .window = config.count_window == 0
                                          ? config.index_capacity
                                          : std::min(config.count_window, config.index_capacity)}) {}

  void update(Token token) {
    const std::size_t indexed_before = std::min(sequence_.size(), config_.index_capacity);
    const bool extends = length_ > 0 && end_ < indexed_before && sequence_[end_] == token;
    sequence_.push_back(token);
    counts_.update(token);
    if (extends) {
      ++length_;
      ++end_;
      return;
    }
    // The most recent earlier end p (p <= N - 1, inside the index) of the last n tokens,
    // longest n of 3, 2, 1 first; then the common suffix measured up to kMaxVerify.
    const std::size_t size = sequence_.size();
    const std::size_t last_end = std::min(size - 1, config_.index_capacity);
    length_ = 0;
    end_ = 0;
    for (std::size_t n = std::min<std::size_t>(3, size); n >= 1; --n) {
      for (std::size_t p = last_end; p >= n; --p) {
        if (common_suffix(p, MatchDrafter::kMaxVerify) >= n) {
          length_ = common_suffix(p, MatchDrafter::kMaxVerify);
          end_ = p;
          return;
        }
      }
    }
  }

  /// Forgets the sequence, as MatchDrafter::reset.
  void reset() {
    sequence_.clear();
    counts_.reset();
    length_ = 0;
    end_ = 0;
  }

  /// What an ungated MatchDrafter without a corpus drafts with `room` slots.
  [[nodiscard]] std::vector<Token> predict(std::size_t room) const {
    const std::size_t n = std::min(room, config_.max_drafts);
    std::vector<Token> out(n);
    if (n == 0 || sequence_.empty()) return {};
    if (length_ == 0 || length_ < config_.copy_min_match) {
      out.resize(counts_.predict(out));
      return out;
    }
    const std::size_t indexed = std::min(sequence_.size(), config_.index_capacity);
    std::vector<Token> extended = sequence_;
    out.clear();
    for (std::size_t from = end_; out.size() < n; ++from) {
      if (from >= indexed && indexed < sequence_.size()) break;  // beyond the cap: no copy past the index
      out.push_back(extended[from]);
      extended.push_back(extended[from]);
    }
    if (out.size() < n) {
      // Cut short by the frozen index: the counts draft instead when they draft more.
      std::vector<Token> counted(n);
      counted.resize(counts_.predict(counted));
      if (counted.size() > out.size()) return counted;
    }
    return out;
  }

  /// Longest L (up to `limit`, and L <= p) with sequence[p - L, p) == the last L tokens.
  [[nodiscard]] std::size_t common_suffix(std::size_t p, std::size_t limit) const {
    std::size_t length = 0;
    while (length < limit && length < p && sequence_[p - 1 - length] == sequence_[sequence_.size() - 1 - length]) {
      ++length;
    }
    return length;
  }
  /// The longest match of the sequence's end at an earlier end inside the index.
  [[nodiscard]] std::size_t longest_match() const {
    std::size_t best = 0;
    if (sequence_.empty()) return 0;
    for (std::size_t p = 1; p <= std::min(sequence_.size() - 1, config_.index_capacity); ++p) {
      best = std::max(best, common_suffix(p, sequence_.size()));
    }
    return best;
  }

  [[nodiscard]] std::size_t length() const noexcept { return length_; }
  [[nodiscard]] std::size_t end() const noexcept { return end_; }
  /// Every token observed since construction or the last reset().
  [[nodiscard]] const std::vector<Token>& sequence() const noexcept { return sequence_; }

 private:
  MatchConfig config_;
  std::vector<Token> sequence_;
  NGramPredictor counts_;
  std::size_t length_ = 0;
  std::size_t end_ = 0;
};

}  // namespace ngramspec::test
