#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "ngramspec/detail/fnv1a.hpp"
#include "ngramspec/detail/open_table.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec {

/// Configuration of an NGramPredictor; validated once, by the constructor.
///
/// One member per setting, in the order the settings were first given (a new setting goes last),
/// so that values listed by position keep their meaning: `NGramConfig{2, 4, 4, 512}` is
/// min_order, max_order, max_drafts, window. max_drafts was first named `draft_count`; the former
/// name is no longer a member, so code that names it fails to compile instead of meaning
/// something else.
struct NGramConfig {
  std::size_t min_order = 2;    ///< shortest n-gram, counting the predicted token (2 = bigram)
  std::size_t max_order = 4;    ///< longest n-gram (4 = three tokens of context)
  /// Most tokens one predict() proposes, beyond the room its caller gives. Unlimited by default,
  /// so that the caller's limit (DecodeOptions::max_drafts for the decoders) is the one setting.
  std::size_t max_drafts = std::numeric_limits<std::size_t>::max();
  std::size_t window = 512;     ///< sliding window of recent tokens whose n-grams are counted
};

/// How strongly the counts backed one draft: its context's recorded occurrences in the window
/// and how many of them the drafted token followed.
/// An aggregate without initializers, so that arrays of them cost nothing to declare on a hot
/// path; value-initialize (`DraftEvidence{}`) for zeros.
struct DraftEvidence {
  std::uint32_t count;  ///< occurrences followed by the drafted token
  std::uint32_t total;  ///< occurrences of the context followed by any token
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
/// Cost: update() extends the kept hashes of the stream's last 1..max_order tokens by one
/// token each and does O(1) expected table work per order it records (see below); when a
/// context's winning continuation leaves the window and might have lost its lead, the
/// context's occurrences in the window are walked to find the new winner (O(occurrences),
/// only then: a bound on the runner-up's count rules most such cases out). predict() is
/// O(max_drafts · orders) probes. Neither allocates: every table is sized by the window at
/// construction, so memory is fixed (memory_bytes()) however long the stream.
///
/// Two economies keep repetitive and fresh text cheap without changing any prediction. An
/// occurrence of a context is recorded at order n + 1 only while its (n-1)-token suffix, the
/// context of order n, has had two different continuations (its earlier occurrences are
/// recorded when the second appears): while the shorter context has one continuation, every
/// longer context that extends it predicts that same token, so the shorter one can answer
/// for them. And a context whose occurrences all share one continuation keeps no per-n-gram
/// counts; they start when a second continuation appears.
///
/// Thread safety: none inside. Use one predictor per sequence; concurrent const calls
/// (predict, config, size) are safe while no thread updates or resets.
class NGramPredictor {
 public:
  /// Longest n-gram order the tables support.
  static constexpr std::size_t kMaxSupportedOrder = 8;
  /// Largest window accepted; memory grows linearly with the window.
  static constexpr std::size_t kMaxWindow = std::size_t{1} << 24;

  /// Throws std::invalid_argument naming the field and its value when `config` is invalid.
  explicit NGramPredictor(NGramConfig config = {});

  /// Observes one token, appended to the stream.
  void update(Token token) noexcept;
  /// Observes several tokens in order (a prompt, or the tokens one verify pass accepted).
  void update(std::span<const Token> tokens) noexcept;

  /// Writes up to min(out.size(), max_drafts) drafted tokens to `out`; returns how many.
  [[nodiscard]] std::size_t predict(std::span<Token> out) const noexcept;
  /// The same drafts, and for each the counts behind it in `evidence` (which must have at
  /// least as many elements as out; the drafts are limited by the shorter of the two).
  [[nodiscard]] std::size_t predict(std::span<Token> out, std::span<DraftEvidence> evidence) const noexcept;
  /// The same drafts (limited by probabilities.size()), and for each, in `probabilities[j]`,
  /// the estimated chance that drafts 0..j are all accepted: the product over drafts 0..j of
  /// count / (total + 1) from their evidence. Non-increasing.
  [[nodiscard]] std::size_t predict(std::span<Token> out, std::span<float> probabilities) const noexcept;

  /// Forgets every observed token; the tables keep their memory.
  void reset() noexcept;

  [[nodiscard]] const NGramConfig& config() const noexcept { return config_; }
  /// Tokens observed since construction or the last reset().
  [[nodiscard]] std::uint64_t tokens_seen() const noexcept { return seen_; }
  /// Table entries in use over all orders: recorded contexts, plus counted continuations of
  /// contexts that have more than one. Never above max_size().
  [[nodiscard]] std::size_t size() const noexcept;
  /// Bound on size(): 2 · (max_order - min_order + 1) · window.
  [[nodiscard]] std::size_t max_size() const noexcept;
  /// Bytes of memory the predictor holds; fixed at construction.
  [[nodiscard]] std::size_t memory_bytes() const noexcept;

 private:
  // MatchDrafter shares the suffix hashes (its match index is keyed by the same n-gram hashes)
  // and asks for the first draft alone, on every token, for its gate's calibration.
  friend class MatchDrafter;

  // Occurrences in the window of one n-gram, keyed by the hash of its n tokens.
  struct NGramCount {
    std::uint64_t key = 0;
    std::uint32_t count = 0;
    std::uint32_t last = 0;  // low 32 bits of the stream position of its latest occurrence
    [[nodiscard]] bool empty() const noexcept { return count == 0; }
  };
  // Recorded occurrences of one context and its winning continuation, keyed by the
  // context's hash. While every occurrence has the same continuation (best_count == 0) the
  // context has no entries in the n-gram table: its one continuation's count is `total`.
  struct ContextStats {
    std::uint64_t key = 0;
    std::uint32_t total = 0;       // recorded occurrences followed by a token in the window
    Token best = 0;                // most frequent continuation, most recent on ties
    std::uint32_t best_count = 0;  // its count; 0 while it is the only continuation
    std::uint32_t runner_up = 0;   // at least the count of every other continuation
    std::uint32_t last = 0;        // low 32 bits of the position of the latest occurrence's end
    [[nodiscard]] bool empty() const noexcept { return total == 0; }
  };
  struct OrderTables {
    detail::OpenTable<NGramCount> ngrams;
    detail::OpenTable<ContextStats> contexts;
  };
  // suffix[j] = FNV-1a of the last j tokens; suffix[0] is the offset basis.
  using SuffixHashes = std::array<std::uint64_t, kMaxSupportedOrder + 1>;

  // next[j] = FNV-1a of the last j tokens once `token` is appended: it extends the current
  // suffix_[j - 1] by it. Written for 1 <= j <= max_order.
  void next_suffix(Token token, SuffixHashes& next) const noexcept {
    // The default orders and MatchDrafter's unrolled: the steps are independent, so they overlap.
    switch (config_.max_order) {
      case 4: next[4] = detail::fnv1a_step(suffix_[3], token); [[fallthrough]];
      case 3:
        next[3] = detail::fnv1a_step(suffix_[2], token);
        next[2] = detail::fnv1a_step(suffix_[1], token);
        next[1] = detail::fnv1a_step(suffix_[0], token);
        return;
      default:
        for (std::size_t j = config_.max_order; j >= 1; --j) next[j] = detail::fnv1a_step(suffix_[j - 1], token);
    }
  }
  // update(token) given next_suffix(token)'s hashes (those above max_order are not read).
  void update(Token token, const SuffixHashes& next) noexcept;
  // The context whose continuation predict() drafts after the suffix `suffix` (of which the
  // last `have` tokens are known), or nullptr. The longest context seen answers; shortest first
  // is the same search made cheaper: a context never seen has no longer context seen either,
  // and one with a single continuation speaks for all its longer contexts (they are recorded
  // only once it has had two). So climb while the context has had two continuations and a
  // longer one was seen.
  [[nodiscard]] const ContextStats* answering_context(const SuffixHashes& suffix, std::size_t have) const noexcept {
    const std::size_t min_order = config_.min_order;
    const ContextStats* found = nullptr;
    for (std::size_t n = min_order; n <= have + 1; ++n) {
      const ContextStats* const context = tables_[n - min_order].contexts.find(suffix[n - 1]);
      if (context == nullptr) break;
      found = context;
      if (context->best_count == 0) break;
    }
    return found;
  }
  // What predict() would draft first and the evidence behind it, without extending the hashes
  // for a second draft.
  [[nodiscard]] bool first_draft(Token& token, DraftEvidence& evidence) const noexcept {
    const ContextStats* const found =
        answering_context(suffix_, static_cast<std::size_t>(std::min<std::uint64_t>(seen_, config_.max_order - 1)));
    if (found == nullptr) return false;
    token = found->best;
    evidence = DraftEvidence{found->best_count == 0 ? found->total : found->best_count, found->total};
    return true;
  }

  // The chain of drafts; on_draft(j, count, total) hears the evidence behind draft j.
  template <class OnDraft>
  [[nodiscard]] std::size_t predict_chain(std::span<Token> out, const OnDraft& on_draft) const noexcept;
  // Orders known at compile time (kMinOrder, kMaxOrder), or 0: config_'s.
  template <std::size_t kMinOrder, std::size_t kMaxOrder>
  void update_orders(Token token, const SuffixHashes& next) noexcept;
  template <std::size_t kMinOrder = 0, std::size_t kMaxOrder = 0>
  void record(std::size_t order, std::size_t end_slot, std::uint32_t end_position) noexcept;
  void record_all(std::size_t order, std::uint32_t newest_end, std::uint32_t count) noexcept;
  [[nodiscard]] bool in_window(std::size_t order, std::uint32_t end_position) const noexcept {
    // During update() of the token at seen_, after the n-grams starting at seen_ - window
    // left: an n-gram counts if it starts at or after max(0, seen_ - window + 1).
    const std::uint64_t age = static_cast<std::uint32_t>(static_cast<std::uint32_t>(seen_) - end_position);
    return age + order <= config_.window && age + order - 1 <= seen_;
  }
  static void copy_hashes(std::uint64_t* to, const std::uint64_t* from, std::size_t count) noexcept;
  template <std::size_t kMinOrder = 0>
  void remove(std::size_t order, std::size_t end_slot) noexcept;
  void rescan_best(std::size_t order, ContextStats& context) noexcept;
  [[nodiscard]] std::size_t slot_of(std::uint32_t position) const noexcept {
    const std::size_t back = static_cast<std::uint32_t>(static_cast<std::uint32_t>(seen_) - position);
    return head_ >= back ? head_ - back : head_ + config_.window - back;
  }
  // A set of orders by index (n - min_order), one bit each. An enum rather than std::uint8_t:
  // a store through a character type may alias any object, so every such store would make the
  // compiler reload the members the hot loops keep in registers.
  enum class OrderSet : std::uint8_t {};
  [[nodiscard]] static bool contains(OrderSet set, std::size_t index) noexcept {
    return ((static_cast<unsigned>(set) >> index) & 1U) != 0;
  }
  [[nodiscard]] static OrderSet with(OrderSet set, std::size_t index) noexcept {
    return static_cast<OrderSet>(static_cast<unsigned>(set) | (1U << index));
  }
  [[nodiscard]] static OrderSet without(OrderSet set, std::size_t index) noexcept {
    return static_cast<OrderSet>(static_cast<unsigned>(set) & ~(1U << index));
  }
  [[nodiscard]] std::uint64_t& hash_at(std::size_t length, std::size_t slot) noexcept {
    return hashes_[slot * hash_stride_ + (length - (config_.min_order - 1))];
  }
  [[nodiscard]] std::size_t wrap(std::size_t slot) const noexcept {
    return slot >= config_.window ? slot - config_.window : slot;
  }

  NGramConfig config_;
  std::vector<Token> tokens_;          // the window, a ring indexed by slot
  std::vector<OrderSet> recorded_;     // per slot: the orders whose n-gram ending there is counted
  std::vector<std::uint32_t> previous_;  // per slot and order: end of the previous counted occurrence
                                         // of the same context (a chain, newest to oldest)
  std::vector<std::uint32_t> scratch_;   // per order, room for a window of positions (record_all)
  std::size_t hash_stride_ = 0;        // suffix lengths kept per slot: max_order - min_order + 2
  std::vector<std::uint64_t> hashes_;  // per slot and suffix length j in [min_order - 1, max_order]:
                                       // the hash of the j tokens that end at that slot
  std::vector<OrderTables> tables_;    // index 0 = min_order
  SuffixHashes suffix_{};              // suffix hashes after the newest token
  std::size_t head_ = 0;               // slot of the next token
  std::uint64_t seen_ = 0;
};

}  // namespace ngramspec
