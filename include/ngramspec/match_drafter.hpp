#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ngramspec/detail/open_table.hpp"
#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec {

/// Configuration of a MatchDrafter; validated once, by the constructor.
struct MatchConfig {
  std::size_t cap = 8192;           ///< most tokens the match index holds (the first `cap` of the sequence)
  std::size_t copy_min_match = 3;   ///< copy after the match when it is at least this long; counts below
  std::size_t draft_count = 4;      ///< most tokens one predict() proposes
  std::size_t count_max_order = 3;  ///< longest n-gram of the counts for short matches: 2..kMaxCountOrder
};

/// Drafts by copying what followed an earlier occurrence of the sequence's end, found over
/// the whole context, and by n-gram counts when that match is short.
///
/// It keeps a match (L, e): the L tokens at the end of the sequence equal the L tokens
/// before position e, an earlier occurrence (e < sequence length). On each observed token t
/// the match extends to (L + 1, e + 1) when the token at e is t; otherwise it re-anchors at
/// the most recent earlier occurrence of the last 3 tokens, else of the last 2, else of the
/// last 1 (L = 0 when the token never occurred), and measures L by comparing backwards, up
/// to kMaxVerify tokens. So L is not always the longest match, but (barring two n-grams
/// of up to 3 tokens sharing a 64-bit hash):
/// - the match is genuine: the L tokens before e are the sequence's last L tokens;
/// - L >= min(3, longest earlier match), so L < 3 exactly when the longest match is
///   shorter than 3 tokens, and then L is the longest match.
///
/// predict(): when L >= copy_min_match (and L > 0) the drafts are the tokens from e on; a
/// copy that runs into the end of the sequence continues into the drafts it has just
/// written (so a repeat continues). Otherwise the drafts are those of an NGramPredictor with
/// orders 2 to count_max_order over the last `cap` tokens: the most frequent continuation
/// of the longest seen context, chained. Frequency only pays for short matches; after a
/// longer one, what followed its most recent occurrence is the better guess.
///
/// Beyond the cap the index keeps the first `cap` tokens (where a prompt's copyable text
/// is) and stops growing: later tokens still move the match (compared against a ring of
/// the last kMaxVerify tokens) but are never copied from, and a copy stops at the end of
/// the index. The counts slide over the last `cap` tokens.
///
/// Cost: update() is O(1): one comparison when the match extends; else three FNV steps,
/// up to three table probes and up to 3 · kMaxVerify comparisons; then three table
/// stores while indexing, plus NGramPredictor's update. predict() is O(draft_count).
/// Memory is fixed at construction: at most kMaxBytesPerToken bytes per cap token (plus
/// kMaxBytesPerTokenPerOrder with count_max_order 4) and a constant; memory_bytes() reports
/// it. update() and predict() never allocate, nor does reset() (O(cap)).
///
/// Thread safety: none inside; one drafter per sequence. Concurrent const calls are safe
/// while no thread updates or resets.
class MatchDrafter {
 public:
  /// Longest match measured when re-anchoring (and the ring of recent tokens kept for it).
  static constexpr std::size_t kMaxVerify = 64;
  static_assert((kMaxVerify & (kMaxVerify - 1)) == 0, "the ring of recent tokens is indexed by a mask");
  /// Longest suffix looked up when re-anchoring.
  static constexpr std::size_t kAnchorOrder = 3;
  /// Largest cap accepted.
  static constexpr std::size_t kMaxCap = NGramPredictor::kMaxWindow;
  /// Longest count_max_order accepted.
  static constexpr std::size_t kMaxCountOrder = 4;
  /// Bound on memory_bytes() per cap token with count_max_order 3 (the rest is under 4 KiB):
  /// the index (4 B) and three tables of at most 4 slots of 16 B (192 B), plus the counts
  /// (two orders of at most 4 slots of 48 B and 8 B of links each, and 29 B of ring, flags and hashes).
  static constexpr std::size_t kMaxBytesPerToken = 640;
  /// What each further order of the counts adds to that bound.
  static constexpr std::size_t kMaxBytesPerTokenPerOrder = 208;

  /// Throws std::invalid_argument naming the field and its value when `config` is invalid.
  explicit MatchDrafter(MatchConfig config = {});

  /// Observes one token, appended to the sequence.
  void update(Token token) noexcept;
  /// Observes several tokens in order.
  void update(std::span<const Token> tokens) noexcept;

  /// Writes up to min(out.size(), draft_count) drafts to `out`; returns how many.
  [[nodiscard]] std::size_t predict(std::span<Token> out) const noexcept;

  /// Forgets the sequence; keeps the memory.
  void reset() noexcept;

  [[nodiscard]] const MatchConfig& config() const noexcept { return config_; }
  /// Tokens observed since construction or the last reset().
  [[nodiscard]] std::uint64_t tokens_seen() const noexcept { return seen_; }
  /// Tokens in the match index: min(tokens_seen(), cap).
  [[nodiscard]] std::size_t indexed() const noexcept { return indexed_; }
  /// Length L of the current match (0: none).
  [[nodiscard]] std::size_t match_length() const noexcept { return length_; }
  /// Position e right after the match's earlier occurrence (meaningful when L > 0).
  [[nodiscard]] std::size_t match_end() const noexcept { return end_; }
  /// Bytes of memory the drafter holds; fixed at construction.
  [[nodiscard]] std::size_t memory_bytes() const noexcept;

 private:
  // Most recent end (position after it) of an indexed n-gram, keyed by the FNV-1a hash of its
  // tokens read newest first.
  struct LastEnd {
    std::uint64_t key = 0;
    std::uint32_t end = 0;  // >= 1 for a stored n-gram
    [[nodiscard]] bool empty() const noexcept { return end == 0; }
  };

  // The token `back` places before the newest one (0 = newest); back < min(seen_, kMaxVerify).
  [[nodiscard]] Token recent(std::size_t back) const noexcept {
    return recent_[(static_cast<std::size_t>(seen_) - 1 - back) & (kMaxVerify - 1)];
  }
  void re_anchor(std::span<const std::uint64_t> hashes) noexcept;

  MatchConfig config_;
  std::vector<Token> tokens_;                                  // the index: the first `cap` tokens
  std::array<Token, kMaxVerify> recent_{};                     // ring of the last kMaxVerify tokens
  std::array<detail::OpenTable<LastEnd>, kAnchorOrder> last_;  // [n - 1]: n-gram hash -> latest end
  NGramPredictor counts_;
  std::size_t indexed_ = 0;
  std::uint64_t seen_ = 0;
  std::size_t length_ = 0;  // L
  std::size_t end_ = 0;     // e
};

}  // namespace ngramspec
