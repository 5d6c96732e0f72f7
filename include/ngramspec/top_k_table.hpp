#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ngramspec/allocation_error.hpp"
#include "ngramspec/argument_error.hpp"
#include "ngramspec/detail/number_text.hpp"
#include "ngramspec/detail/physical_memory.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec {

/// The model's own predictions, recycled: for each token, the k tokens the model ranked
/// highest after it the last time it verified that token (Luo et al., "Turning Trash into
/// Treasure: Accelerating Inference of Large Language Models with Token Recycling", 2024,
/// keep such an adjacency table; TreeDrafter draws on it where the text has nothing).
///
/// A verify pass computes the model's scores at every token it carries, accepted or not; the
/// decoders hand the top k of each row to record(), which overwrites that token's row. What
/// followed a token in the model's eyes a moment ago is a strong guess of what follows it
/// now, even where the text never repeated.
///
/// A table made with probabilities (TopKTable(vocab, k, true)) also keeps, per row, the
/// probability of each token under the model's sampling distribution (record_distribution(),
/// which SamplingModel calls with the rows it samples from): drafters that draw their drafts
/// from it can then say what they drew from (DraftDistributions), so that rejection sampling
/// accepts them in proportion to how near that distribution is to the model's now. Such a row
/// is a blend of the distributions recorded after its token, each new one weighing
/// 1 - history_weight(): what follows a token varies with the context before it, and a draw
/// from the average of its recent contexts is accepted more often than a draw from the last one
/// alone (docs/BENCHMARKS.md#sampling measures it).
///
/// Memory is fixed at construction: vocab_size × k tokens (32,000 × 8 is 1 MiB), as many floats
/// with probabilities, plus a byte a row, bytes_for(vocab_size, k[, true]). record() and lookups never allocate. One table per sequence
/// (the TreeDrafter's own), or one shared by the sequences of a batch, which then learn from
/// each other (and keep what they learnt across requests; reset_drafter does not clear a
/// shared table). A vocabulary is at most kMaxVocabSize tokens (a table of at most 2 GiB), and
/// a table larger than the machine's memory is refused before anything is allocated, as a
/// SharedCorpus is.
///
/// Thread safety: none inside; a table shared by several sequences must be used from one
/// thread at a time (BatchSpeculator's step is).
class TopKTable {
 public:
  /// Most tokens a row keeps.
  static constexpr std::size_t kMaxK = 32;
  /// Largest vocabulary: 2^24 tokens, 64 times the largest vocabularies in use; a table of
  /// kMaxVocabSize × kMaxK tokens takes 2 GiB.
  static constexpr std::size_t kMaxVocabSize = std::size_t{1} << 24;
  /// What a row's earlier distributions keep when a new one is recorded (history_weight()).
  static constexpr float kDefaultHistoryWeight = 0.6f;
  /// What the overall row's earlier distributions keep when any row is recorded: every recorded
  /// row blends into it, several a pass, so it keeps more of its past than a token's row does.
  static constexpr float kOverallHistoryWeight = 0.9f;

  /// Bytes a table of `vocab_size` rows of `k` tokens holds: the rows and a byte a row (exact
  /// for vocab_size <= kMaxVocabSize and k <= kMaxK, where nothing overflows).
  [[nodiscard]] static constexpr std::size_t bytes_for(std::size_t vocab_size, std::size_t k,
                                                      bool probabilities = false) noexcept {
    return vocab_size * (k * (sizeof(Token) + (probabilities ? sizeof(float) : 0)) + 1);
  }

  /// Throws std::invalid_argument naming the value when `vocab_size` is above kMaxVocabSize:
  /// the one rule of every table's vocabulary, checked before anything is sized by it.
  static void check_vocab_size(std::size_t vocab_size) {
    if (vocab_size > kMaxVocabSize) {
      throw ArgumentError("ngramspec",
                          "TopKTable: vocab_size = " + std::to_string(vocab_size) +
                              " is out of range: it must be 1 .. kMaxVocabSize = " + std::to_string(kMaxVocabSize));
    }
  }

  /// A table for token ids 0 .. vocab_size - 1, `k` tokens a row, and with `probabilities`
  /// their probabilities too, blended by `history_weight` (set_history_weight()). Throws
  /// std::invalid_argument naming the value for a vocabulary of 0 or above kMaxVocabSize, k
  /// outside 1 .. kMaxK, a history weight outside [0, 1), or a table larger than the machine's
  /// physical memory; AllocationError (a std::bad_alloc) when its memory cannot be allocated.
  TopKTable(std::size_t vocab_size, std::size_t k, bool probabilities = false,
            float history_weight = kDefaultHistoryWeight)
      : vocab_(vocab_size), k_(k) {
    set_history_weight(history_weight);
    if (vocab_size == 0) throw ArgumentError("ngramspec", "TopKTable: the vocabulary size is 0");
    if (k == 0 || k > kMaxK) {
      throw ArgumentError("ngramspec",
                          "TopKTable: k = " + std::to_string(k) + "; it must be 1 .. " + std::to_string(kMaxK));
    }
    check_vocab_size(vocab_size);
    const std::size_t bytes = bytes_for(vocab_size, k, probabilities);
    const std::size_t machine = detail::physical_memory_bytes();
    if (machine != 0 && bytes > machine) {
      throw ArgumentError("ngramspec", "TopKTable: vocab_size = " + std::to_string(vocab_size) +
                                           " x k = " + std::to_string(k) + " takes " + std::to_string(bytes) +
                                           " bytes, more than this machine's memory (" + std::to_string(machine) +
                                           " bytes)");
    }
    detail::allocating("a TopKTable (its rows)", bytes, [&] {
      rows_.assign(vocab_size * k, 0);
      filled_.assign(vocab_size, 0);
      if (probabilities) probabilities_.assign(vocab_size * k, 0.0f);
    });
  }

  /// Records a pass: `top[i * k() .. (i + 1) * k())`, best first, the model's top tokens after
  /// tokens[i]; each overwrites tokens[i]'s row. Throws std::invalid_argument, recording
  /// nothing, when top.size() != tokens.size() * k() or a token is outside the vocabulary.
  void record(std::span<const Token> tokens, std::span<const Token> top) {
    if (top.size() != tokens.size() * k_) {
      throw ArgumentError("ngramspec", "TopKTable::record: " + std::to_string(top.size()) + " top-k tokens for " +
                                           std::to_string(tokens.size()) + " tokens; it needs " +
                                           std::to_string(tokens.size()) + " × k = " + std::to_string(k_) + " each");
    }
    for (std::size_t i = 0; i < top.size(); ++i) check(top[i], "a top-k token");
    for (const Token token : tokens) check(token, "a token");
    record_unchecked(tokens, top);
  }

  /// record() without its checks, for callers whose tokens come from the model itself.
  void record_unchecked(std::span<const Token> tokens, std::span<const Token> top) noexcept {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::copy_n(top.data() + i * k_, k_, rows_.data() + static_cast<std::size_t>(tokens[i]) * k_);
      filled_[tokens[i]] = static_cast<std::uint8_t>(k_);  // k tokens, no probabilities
    }
  }

  /// Records one row with probabilities: the model's most likely tokens after `token`, best
  /// first, and their probabilities under its sampling distribution (1 .. k() of each; fewer
  /// when fewer tokens survive its filters). A row recorded before with probabilities becomes
  /// history_weight() × itself + (1 - history_weight()) × the new one, token by token, of which
  /// the k() most probable are kept, best first (ties to the lower id); otherwise the new one
  /// replaces it. Either way it also blends into overall_row(). Throws std::invalid_argument
  /// naming the value, recording nothing, for a table without probabilities, sizes that differ
  /// or lie outside 1 .. k(), a token outside the vocabulary, or a probability outside [0, 1].
  void record_distribution(Token token, std::span<const Token> top, std::span<const float> probabilities) {
    if (probabilities_.empty()) {
      throw ArgumentError("ngramspec",
                          "TopKTable::record_distribution: the table keeps no probabilities "
                          "(make it with TopKTable(vocab_size, k, true))");
    }
    if (top.size() != probabilities.size() || top.empty() || top.size() > k_) {
      throw ArgumentError("ngramspec", "TopKTable::record_distribution: " + std::to_string(top.size()) +
                                           " tokens and " + std::to_string(probabilities.size()) +
                                           " probabilities; it needs as many of each, 1 .. k = " + std::to_string(k_));
    }
    check(token, "a token");
    for (const Token t : top) check(t, "a top-k token");
    for (const float p : probabilities) {
      if (!(p >= 0.0f && p <= 1.0f)) {
        throw ArgumentError("ngramspec", "TopKTable::record_distribution: a probability of " + detail::number_text(p) +
                                             "; probabilities are in [0, 1]");
      }
    }
    const std::size_t at = static_cast<std::size_t>(token) * k_;
    if (overall_count_ == 0) {
      std::copy(top.begin(), top.end(), overall_tokens_.begin());
      std::copy(probabilities.begin(), probabilities.end(), overall_probabilities_.begin());
      overall_count_ = static_cast<std::uint8_t>(top.size());
    } else {
      overall_count_ = static_cast<std::uint8_t>(blend(overall_tokens_.data(), overall_probabilities_.data(),
                                                       overall_count_, kOverallHistoryWeight, top, probabilities));
    }
    if (history_weight_ > 0.0f && (filled_[token] & kWithProbabilities) != 0) {
      const std::size_t kept = blend(rows_.data() + at, probabilities_.data() + at,
                                     static_cast<std::size_t>(filled_[token] & kCountMask), history_weight_, top,
                                     probabilities);
      filled_[token] = static_cast<std::uint8_t>(kept | kWithProbabilities);
      return;
    }
    std::copy(top.begin(), top.end(), rows_.begin() + static_cast<std::ptrdiff_t>(at));
    std::copy(probabilities.begin(), probabilities.end(), probabilities_.begin() + static_cast<std::ptrdiff_t>(at));
    filled_[token] = static_cast<std::uint8_t>(top.size() | kWithProbabilities);
  }

  /// The overall row: every distribution record_distribution() recorded, whatever token it
  /// followed, blended as a token's row is but keeping kOverallHistoryWeight of its past each
  /// time; best first, at most k() tokens; empty until a distribution is recorded (clear() empties
  /// it). It is what the model tends to say next anywhere of late: a drafter that draws where a
  /// token has no row yet (one not seen before in a fresh request) draws from it rather than
  /// drafting nothing (docs/BENCHMARKS.md#sampling measures it). Rows recorded
  /// without probabilities (record()) do not enter it.
  [[nodiscard]] std::span<const Token> overall_row() const noexcept { return {overall_tokens_.data(), overall_count_}; }
  /// The probabilities of overall_row()'s tokens.
  [[nodiscard]] std::span<const float> overall_row_probabilities() const noexcept {
    return {overall_probabilities_.data(), overall_count_};
  }

  /// What a row's earlier distributions weigh when a new one is recorded: 0 keeps the last one
  /// alone; 0.6 (kDefaultHistoryWeight) by default. Throws std::invalid_argument naming the
  /// value, changing nothing, outside [0, 1) (1 would never learn).
  void set_history_weight(float weight) {
    if (!(weight >= 0.0f && weight < 1.0f)) {
      throw ArgumentError("ngramspec", "TopKTable: history_weight = " + detail::number_text(weight) +
                                           "; it must be in [0, 1)");
    }
    history_weight_ = weight;
  }
  [[nodiscard]] float history_weight() const noexcept { return history_weight_; }

  /// The recorded top tokens after `token`, best first; empty when never recorded (or when
  /// the token is outside the vocabulary).
  [[nodiscard]] std::span<const Token> row(Token token) const noexcept {
    if (token >= vocab_ || filled_[token] == 0) return {};
    return {rows_.data() + static_cast<std::size_t>(token) * k_, static_cast<std::size_t>(filled_[token] & kCountMask)};
  }

  /// The probabilities of row(token)'s tokens when they were recorded with them
  /// (record_distribution()); empty otherwise.
  [[nodiscard]] std::span<const float> row_probabilities(Token token) const noexcept {
    if (token >= vocab_ || (filled_[token] & kWithProbabilities) == 0) return {};
    return {probabilities_.data() + static_cast<std::size_t>(token) * k_,
            static_cast<std::size_t>(filled_[token] & kCountMask)};
  }

  /// Whether the table keeps probabilities (made with them).
  [[nodiscard]] bool has_probabilities() const noexcept { return !probabilities_.empty(); }

  /// Forgets every row; keeps the memory.
  void clear() noexcept {
    std::fill(filled_.begin(), filled_.end(), std::uint8_t{0});
    overall_count_ = 0;
  }

  [[nodiscard]] std::size_t k() const noexcept { return k_; }
  [[nodiscard]] std::size_t vocab_size() const noexcept { return vocab_; }
  /// Bytes held; fixed at construction.
  [[nodiscard]] std::size_t memory_bytes() const noexcept {
    return rows_.size() * sizeof(Token) + probabilities_.size() * sizeof(float) + filled_.size() + sizeof(*this);
  }

 private:
  // A row (`tokens`, `mass`: its first `old_count` entries) blended with a new distribution, each
  // old entry keeping `keep` of its mass; returns the entries kept (at most k_). Both lists are at
  // most kMaxK long, so the union fits on the stack and the merge allocates nothing.
  std::size_t blend(Token* row_tokens, float* row_mass, std::size_t old_count, float keep, std::span<const Token> top,
                    std::span<const float> probabilities) const noexcept {
    std::array<Token, 2 * kMaxK> tokens;
    std::array<float, 2 * kMaxK> mass;
    std::size_t n = 0;
    for (std::size_t j = 0; j < old_count; ++j) {
      tokens[n] = row_tokens[j];
      mass[n++] = keep * row_mass[j];
    }
    for (std::size_t i = 0; i < top.size(); ++i) {
      const float added = (1.0f - keep) * probabilities[i];
      std::size_t j = 0;
      while (j < old_count && tokens[j] != top[i]) ++j;
      if (j < old_count) {
        mass[j] += added;
      } else {
        tokens[n] = top[i];
        mass[n++] = added;
      }
    }
    std::array<std::uint8_t, 2 * kMaxK> order;
    for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::uint8_t>(i);
    const std::size_t kept = std::min(n, k_);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(kept),
                      order.begin() + static_cast<std::ptrdiff_t>(n), [&](std::uint8_t a, std::uint8_t b) {
                        return mass[a] != mass[b] ? mass[a] > mass[b] : tokens[a] < tokens[b];
                      });
    for (std::size_t i = 0; i < kept; ++i) {
      row_tokens[i] = tokens[order[i]];
      row_mass[i] = std::min(1.0f, mass[order[i]]);
    }
    return kept;
  }

  void check(Token token, const char* what) const {
    if (token >= vocab_) {
      throw ArgumentError("ngramspec", std::string("TopKTable::record: ") + what + " " + std::to_string(token) +
                                           " is outside the vocabulary of " + std::to_string(vocab_));
    }
  }

  // filled_[t]: the row's token count (0: never recorded), and whether it has probabilities.
  static constexpr std::uint8_t kWithProbabilities = 0x80;
  static constexpr std::uint8_t kCountMask = 0x7f;

  std::size_t vocab_;
  std::size_t k_;
  float history_weight_ = kDefaultHistoryWeight;
  std::vector<Token> rows_;
  std::vector<float> probabilities_;  // with probabilities: one per row token
  std::vector<std::uint8_t> filled_;
  std::array<Token, kMaxK> overall_tokens_{};
  std::array<float, kMaxK> overall_probabilities_{};
  std::uint8_t overall_count_ = 0;
};

}  // namespace ngramspec
