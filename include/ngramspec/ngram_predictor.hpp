#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ngramspec/detail/index_table.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec {

/// Configuration of an NGramPredictor; validated once, by the constructor.
struct NGramConfig {
  std::size_t min_order = 2;    ///< shortest n-gram, counting the predicted token (2 = bigram)
  std::size_t max_order = 4;    ///< longest n-gram (4 = three tokens of context)
  std::size_t draft_count = 4;  ///< most tokens one predict() proposes
  std::size_t window = 512;     ///< sliding window of recent tokens whose n-grams are counted
};

/// Drafts the next tokens of a stream from n-gram counts over its most recent tokens.
///
/// For every order n in [min_order, max_order] it counts, over the n-grams that lie wholly
/// inside the last `window` tokens, how often each (n-1)-token context was followed by each
/// token. Contexts are keyed by the 64-bit FNV-1a hash of their tokens in order (two distinct
/// contexts sharing a 64-bit hash are treated as one). predict() chains: at each step the
/// longest context that was seen wins, its most frequent continuation is proposed (ties go to
/// the continuation seen most recently), and the proposal extends the context of the next step.
///
/// Cost: update() is O(max_order²) hashing plus O(1) expected table work per order (a rare
/// rescan of one context's continuations when its best one leaves the window); predict() is
/// O(draft_count · orders) hash probes. Neither allocates: every table is sized by the window
/// at construction, so memory is fixed (memory_bytes()) however long the stream.
///
/// Thread safety: none inside. Use one predictor per sequence; concurrent const calls
/// (predict, config, size) are safe while no thread updates or resets.
class NGramPredictor {
 public:
  /// Longest n-gram order the tables support.
  static constexpr std::size_t kMaxSupportedOrder = 8;
  /// Largest window accepted; pool indices are 32-bit and memory grows linearly with it.
  static constexpr std::size_t kMaxWindow = std::size_t{1} << 24;

  /// Throws std::invalid_argument naming the field and its value when `config` is invalid.
  explicit NGramPredictor(NGramConfig config = {});

  /// Observes one token, appended to the stream.
  void update(Token token) noexcept;
  /// Observes several tokens in order (a prompt, or the tokens one verify pass accepted).
  void update(std::span<const Token> tokens) noexcept;

  /// Writes up to min(out.size(), draft_count) drafted tokens to `out`; returns how many.
  [[nodiscard]] std::size_t predict(std::span<Token> out) const noexcept;

  /// Forgets every observed token; the tables keep their memory.
  void reset() noexcept;

  [[nodiscard]] const NGramConfig& config() const noexcept { return config_; }
  /// Tokens observed since construction or the last reset().
  [[nodiscard]] std::uint64_t tokens_seen() const noexcept { return seen_; }
  /// Live table entries (distinct contexts plus distinct continuations, over all orders).
  [[nodiscard]] std::size_t size() const noexcept;
  /// Bound on size(): 2 · (max_order - min_order + 1) · window.
  [[nodiscard]] std::size_t max_size() const noexcept;
  /// Bytes of memory the predictor holds; fixed at construction.
  [[nodiscard]] std::size_t memory_bytes() const noexcept;

 private:
  static constexpr std::uint32_t kNone = detail::IndexTable::kAbsent;

  struct Continuation {
    std::uint64_t last_seen = 0;  // stream position of its most recent occurrence
    Token token = 0;
    std::uint32_t count = 0;
    std::uint32_t context = kNone;
    std::uint32_t prev = kNone;
    std::uint32_t next = kNone;  // also links the free list
  };
  struct Context {
    std::uint32_t head = kNone;  // first continuation; also links the free list
    std::uint32_t best = kNone;  // most frequent continuation, most recent on ties
    std::uint32_t total = 0;     // occurrences of this context in the window
  };
  // The tables of one order.
  struct OrderTables {
    detail::IndexTable context_index;       // context hash -> Context
    detail::IndexTable continuation_index;  // n-gram hash -> Continuation
    std::vector<Context> contexts;
    std::vector<Continuation> continuations;
    std::uint32_t free_context = kNone;
    std::uint32_t free_continuation = kNone;
  };

  void add(OrderTables& tables, std::uint64_t context_key, Token token, std::uint64_t position) noexcept;
  void remove(OrderTables& tables, std::uint64_t context_key, Token token) noexcept;
  static void rescan_best(OrderTables& tables, Context& context) noexcept;
  static bool better(const Continuation& a, const Continuation& b) noexcept;
  [[nodiscard]] std::size_t slot_back(std::size_t distance) const noexcept;

  NGramConfig config_;
  std::size_t orders_ = 0;               // max_order - min_order + 1
  std::vector<Token> ring_;              // the window's tokens
  std::vector<std::uint64_t> ring_keys_;  // per slot and order: context hash of the n-gram ending there
  std::vector<OrderTables> tables_;      // index 0 = min_order
  std::size_t head_ = 0;                 // ring slot of the next token
  std::uint64_t seen_ = 0;
};

}  // namespace ngramspec
