#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "ngramspec/detail/last_end_table.hpp"
#include "ngramspec/mapped_corpus.hpp"
#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec {

/// Which corpus drafts when the live SharedCorpus and a corpus file (MappedCorpus) both match
/// a sequence's end.
enum class CorpusPreference {
  longer_match,  ///< the one whose match is longer; the live corpus on a tie (it is the more recent)
  live,          ///< the live corpus whenever it drafts; the file otherwise
  file,          ///< the file whenever it matches; the live corpus otherwise
};

/// Configuration of a MatchDrafter; validated once, by the constructor.
///
/// One member per setting, in the order the settings were first given (index_capacity,
/// copy_min_match, max_drafts, count_max_order; a new setting goes last), so that values listed
/// by position keep their meaning: `MatchConfig{8192, 16}` is index_capacity, copy_min_match.
/// index_capacity and max_drafts were first named `cap` and `draft_count`; the former names are
/// no longer members, so code that names them fails to compile instead of meaning something else.
struct MatchConfig {
  /// Most tokens the match index holds: the sequence's first index_capacity tokens are copied
  /// from, later ones only move the match. Its tables are sized by it, so set it to the longest
  /// context served.
  std::size_t index_capacity = 8192;
  std::size_t copy_min_match = 2;   ///< copy after the match when it is at least this long; counts below
  /// Most tokens one predict() proposes, beyond the room its caller gives. Unlimited by default,
  /// so that the caller's limit (DecodeOptions::max_drafts for the decoders) is the one setting.
  std::size_t max_drafts = std::numeric_limits<std::size_t>::max();
  std::size_t count_max_order = 3;  ///< longest n-gram of the counts for short matches: 2..kMaxCountOrder
  /// The counts slide over the last min(count_window, index_capacity) tokens; 0: index_capacity.
  /// Short contexts are local: a window predicts about as well as the whole context
  /// (docs/BENCHMARKS.md#acceptance compares windows).
  std::size_t count_window = 2048;
  /// The gate, in [0, 1): drafting stops before the estimated chance that every draft so far
  /// is accepted falls below it. The default drops many of the rejected drafts for few of the
  /// accepted ones (docs/BENCHMARKS.md#acceptance measures both), and nearly all drafts on text
  /// nothing predicts. 0 drafts max_drafts whenever there is something to draft; raise it when
  /// rejected drafts cost (a verify pass that grows with the batch).
  double min_confidence = 0.03;
  /// Which corpus drafts when both a live corpus and a corpus file match
  /// (docs/BENCHMARKS.md#corpus-files measures the three on recorded streams).
  CorpusPreference corpus_preference = CorpusPreference::longer_match;
  /// Tokens in the model's vocabulary (0: unknown, the default). When known, a draft is cut at
  /// its first token not below it (a corpus file built from another tokenizer, or damaged, can
  /// hold such tokens; nothing after one can be accepted), the tokens cut counted in
  /// out_of_vocabulary_drafts(); and a corpus file that records another vocabulary size is
  /// refused at construction. At most 2^32 (tokens are 32-bit).
  std::uint64_t vocab_size = 0;
  /// A number naming the model's tokenizer (0: unset, the default): a corpus file that records
  /// another (CorpusVocabulary) is refused at construction.
  std::uint64_t tokenizer_fingerprint = 0;
};

/// Drafts by copying what followed an earlier occurrence of the sequence's end, found over
/// the whole context, and by n-gram counts when that match is short; SpeculativeDecoder's
/// default drafter.
///
/// It keeps a match (L, e): the L tokens at the end of the sequence equal the L tokens
/// before position e, an earlier occurrence (e < sequence length). On each observed token t
/// the match extends to (L + 1, e + 1) when the token at e is t; otherwise it re-anchors at
/// the most recent earlier occurrence of the last 3 tokens, else of the last 2, else of the
/// last 1 (L = 0 when the token never occurred), and measures L by comparing backwards, up
/// to kMaxVerify tokens. So L is not always the longest match, but:
/// - the match is genuine: the L tokens before e are the sequence's last L tokens (they are
///   compared, whatever the hashes say);
/// - barring two n-grams of up to 3 tokens whose hashes share their low 32 bits and a probe
///   run of the table (detail::LastEndTable), L >= min(3, longest earlier match), so L < 3
///   exactly when the longest match is shorter than 3 tokens, and then L is the longest.
///
/// predict(): when L >= copy_min_match (and L > 0) the drafts are the tokens from e on; a
/// copy that runs into the end of the sequence continues into the drafts it has just
/// written (so a repeat continues). Otherwise the drafts are those of an NGramPredictor with
/// orders 2 to count_max_order over the last count_window tokens: the most frequent
/// continuation of the longest seen context, chained. Frequency only pays for short matches
/// (a match of one token); after a longer one, what followed its most recent occurrence is
/// the better guess (docs/BENCHMARKS.md#acceptance measures each choice).
///
/// Beyond index_capacity the index keeps the first index_capacity tokens (where a prompt's
/// copyable text is) and stops growing: later tokens still move the match (compared against a
/// ring of the last kMaxVerify tokens) but are never copied from, and a copy stops at the end
/// of the index; when that leaves it shorter than the room, the counts (which slide with the
/// sequence over their own window) draft instead if they draft more.
///
/// Cost: update() is O(1): three FNV steps, shared with the counts (the index and the counts
/// key n-grams by the same hashes), and one comparison when the match extends; else three
/// table probes, each of which also stamps the new end while indexing, and up to
/// 3 · kMaxVerify comparisons; plus NGramPredictor's update over the count window and one
/// first draft to score (a lookup, not a chain; none when the predict() just before drafted
/// from the counts or a corpus, as it keeps its first draft for this). The table slots are
/// prefetched before the gate's scoring and the counts' update, so at long contexts their cache
/// misses overlap that work, and tables of 2 MiB or more (an index_capacity of 131,072 tokens)
/// sit in huge pages where the system has them, so random probes do not also miss the TLB.
/// predict() is O(max_drafts), plus, with a corpus, one lookup there while the match is
/// shorter than kCorpusContext (up to three probes and 2 · kCorpusContext comparisons). The
/// tables are sized by index_capacity, not by the context seen: a capacity far above the
/// contexts an engine serves costs memory and cache misses, so set it to the longest context
/// it serves. Memory is fixed at construction: at most
/// kIndexBytesPerToken per token of index_capacity, plus kCountBytesPerToken per count-window
/// token (and kMaxBytesPerTokenPerOrder more with count_max_order 4), plus under 4 KiB;
/// memory_bytes() reports it. update() and predict() never allocate, nor does reset()
/// (O(index_capacity)).
///
/// With a SharedCorpus, a sequence whose last token it has never seen before (L = 0) drafts
/// from the corpus instead: what followed the most recent occurrence there of its last 3, 2
/// or 1 tokens (and from the counts when the corpus has nothing, or is busy with an
/// append). Text new to a request is where earlier requests help most; once the sequence
/// has its own match, its own context predicts it better, unless the corpus matches at least
/// kLongCorpusMatch tokens and more than the sequence does (a request repeating an earlier
/// answer): then the corpus's copy is drafted, estimated as a copy of that length is. Each
/// lookup also measures where the previous one matched, moved on by the tokens seen since, and
/// keeps to it when it matches longer, so a copy stays on the record it follows where a common
/// phrase recurs in a more recent one. A corpus file mapped read-only
/// (MappedCorpus: text built ahead of time, shared by a fleet's processes) is consulted the
/// same way, alone or beside the live corpus; when both match, config.corpus_preference
/// chooses.
///
/// The gate: each draft gets an estimated acceptance probability from where it came from
/// (a copy of the sequence, of the corpus, or the counts), the match length it continues and,
/// for counts, the share of the context's occurrences behind it; drafting stops before the
/// running product falls below min_confidence. The estimates are acceptance rates measured
/// per class on recorded streams (docs/ALGORITHM.md), scaled per sequence by how its own
/// first drafts have fared against them over about the last 128 tokens (update() checks
/// what predict() would have drafted first against the token that came): a long copied
/// match drafts up to max_drafts (long drafts pay there), a contested short one little or
/// nothing, and text that nothing predicts (random tokens) soon drafts nothing at all. A
/// gated chain of counts stops at 64 drafts.
///
/// Thread safety: none inside; one drafter per sequence. Concurrent const calls are safe
/// while no thread updates or resets. The corpus may be appended to meanwhile (see
/// SharedCorpus).
class MatchDrafter {
 public:
  /// Longest match measured when re-anchoring (and the ring of recent tokens kept for it).
  static constexpr std::size_t kMaxVerify = 64;
  static_assert((kMaxVerify & (kMaxVerify - 1)) == 0, "the ring of recent tokens is indexed by a mask");
  /// Longest suffix looked up when re-anchoring.
  static constexpr std::size_t kAnchorOrder = 3;
  /// Largest index_capacity accepted.
  static constexpr std::size_t kMaxIndexCapacity = NGramPredictor::kMaxWindow;
  /// Former name of kMaxIndexCapacity.
  static constexpr std::size_t kMaxCap = kMaxIndexCapacity;
  /// Longest count_max_order accepted.
  static constexpr std::size_t kMaxCountOrder = 4;
  /// Bytes per token of index_capacity: the token (4 B) and three tables of at most 4 slots of
  /// 8 B (96 B).
  static constexpr std::size_t kIndexBytesPerToken = 100;
  /// Bytes per count-window token of the counts with count_max_order 3: two orders of at most
  /// 4 slots of 48 B and 8 B of links each, and 29 B of ring, flags and hashes.
  static constexpr std::size_t kCountBytesPerToken = 444;
  /// Bound on memory_bytes() per token of index_capacity with count_max_order 3 whatever the
  /// count window (the rest is under 4 KiB).
  static constexpr std::size_t kMaxBytesPerToken = kIndexBytesPerToken + kCountBytesPerToken;
  /// What each further order of the counts adds per count-window token.
  static constexpr std::size_t kMaxBytesPerTokenPerOrder = 208;

  /// Tokens of the sequence's end handed to the corpus to match.
  static constexpr std::size_t kCorpusContext = kMaxVerify;
  /// A corpus match at least this long, and longer than the sequence's own match, is copied
  /// in its stead: from there on a copy of the corpus fares as the sequence's copies do.
  static constexpr std::size_t kLongCorpusMatch = 16;

  /// Throws std::invalid_argument naming the field and its value when `config` is invalid.
  /// `corpus` (the live corpus) and `file` (a corpus file), when given, are consulted by
  /// predict() and must outlive the drafter. Throws CorpusFileError naming the file and both
  /// values when the file records a vocabulary other than config's (MappedCorpus::check_vocabulary).
  explicit MatchDrafter(MatchConfig config = {}, const SharedCorpus* corpus = nullptr,
                        const MappedCorpus* file = nullptr);

  /// Observes one token, appended to the sequence.
  void update(Token token) noexcept;
  /// Observes several tokens in order.
  void update(std::span<const Token> tokens) noexcept;

  /// Writes up to min(out.size(), max_drafts) drafts to `out`; returns how many.
  [[nodiscard]] std::size_t predict(std::span<Token> out) const noexcept;
  /// The same drafts (limited also by probabilities.size()), and for each, in
  /// `probabilities[j]`, the estimated chance that drafts 0..j are all accepted: the running
  /// product of the gate's calibrated estimates, non-increasing, each at least min_confidence.
  /// What a cost-aware choice of draft length weighs (DraftPlanner, BatchSpeculator). A chain
  /// of counts stops at 64 drafts here, as it does under a gate.
  [[nodiscard]] std::size_t predict(std::span<Token> out, std::span<float> probabilities) const noexcept;

  /// Forgets the sequence; keeps the memory.
  void reset() noexcept;
  /// Begins a new sequence of the same workload (the next request of an engine's slot): forgets
  /// the sequence as reset() does but keeps the calibration, how the gate's estimates have fared
  /// over the last ~128 first drafts. That is a property of the text an engine serves more than
  /// of one request: a server asked the same questions again learns over a few requests that its
  /// corpus copies are right, and then sizes them as such from a request's first token.
  void restart() noexcept;

  [[nodiscard]] const MatchConfig& config() const noexcept { return config_; }
  /// The live corpus consulted, or nullptr.
  [[nodiscard]] const SharedCorpus* corpus() const noexcept { return corpus_; }
  /// The corpus file consulted, or nullptr.
  [[nodiscard]] const MappedCorpus* corpus_file() const noexcept { return file_; }
  /// Tokens observed since construction or the last reset().
  [[nodiscard]] std::uint64_t tokens_seen() const noexcept { return seen_; }
  /// Tokens in the match index: min(tokens_seen(), index_capacity).
  [[nodiscard]] std::size_t indexed() const noexcept { return indexed_; }
  /// Length L of the current match (0: none).
  [[nodiscard]] std::size_t match_length() const noexcept { return length_; }
  /// Position e right after the match's earlier occurrence (meaningful when L > 0).
  [[nodiscard]] std::size_t match_end() const noexcept { return end_; }
  /// Bytes of memory the drafter holds; fixed at construction.
  [[nodiscard]] std::size_t memory_bytes() const noexcept;
  /// Draft tokens predict() dropped since construction (reset() keeps the count) because they
  /// were outside config().vocab_size: the first such token of a draft and every one after it.
  [[nodiscard]] std::uint64_t out_of_vocabulary_drafts() const noexcept {
    return dropped_.value.load(std::memory_order_relaxed);
  }

 private:
  // The token `back` places before the newest one (0 = newest); back < min(seen_, kMaxVerify).
  [[nodiscard]] Token recent(std::size_t back) const noexcept {
    return recent_[(static_cast<std::size_t>(seen_) - 1 - back) & (kMaxVerify - 1)];
  }
  // Anchors the match at the longest order whose end in `ends` (indexed by order - 1; 0: none)
  // the tokens confirm.
  void re_anchor(std::span<const std::uint32_t> ends) noexcept;
  [[nodiscard]] std::size_t draft(std::span<Token> out, std::span<float> probabilities) const noexcept;
  // How many of the `made` drafts lie inside the vocabulary before the first that does not;
  // counts the rest as dropped. One compare per draft.
  [[nodiscard]] std::size_t within_vocabulary(std::span<const Token> drafts, std::size_t made) const noexcept;
  [[nodiscard]] std::size_t copy_from_sequence(std::span<Token> out, std::span<float> probabilities) const noexcept;
  [[nodiscard]] std::size_t draft_from_corpus(std::span<Token> out, std::span<float> probabilities) const noexcept;
  // Whether predict() asks the corpus, and whether it drafts what the corpus answered.
  [[nodiscard]] bool consults_corpus() const noexcept;
  [[nodiscard]] bool prefers(const CorpusDraft& draft) const noexcept;
  [[nodiscard]] std::size_t draft_from_counts(std::span<Token> out, std::span<float> probabilities) const noexcept;
  // Most count drafts one gated predict() weighs: their evidence sits on the stack.
  static constexpr std::size_t kMaxGatedCountDrafts = 64;
  using CountEvidence = std::array<DraftEvidence, kMaxGatedCountDrafts>;
  // The counts' drafts, ungated, with their evidence when there is a gate or `estimate`.
  [[nodiscard]] std::size_t count_chain(std::span<Token> out, CountEvidence& evidence, bool estimate) const noexcept;
  [[nodiscard]] std::size_t gate_counts(std::size_t made, const CountEvidence& evidence,
                                        std::span<float> probabilities) const noexcept;
  // `follow`: keep where the live corpus matched, as the next lookup's hint (predict() does).
  [[nodiscard]] CorpusDraft ask_corpus(std::span<Token> out, bool follow = false) const noexcept;
  // Scores predict()'s first draft before `token` against it, for the gate's scale.
  void calibrate(Token token) noexcept;
  // How the sequence's own record scales the gate's estimates (docs/ALGORITHM.md, "The gate"): an
  // estimate e becomes e · hits when hits < 1 (its first drafts hit less than estimated), else
  // 1 - (1 - e) · misses (they missed less).
  struct Calibration {
    double hits = 1;
    double misses = 1;
  };
  [[nodiscard]] Calibration scale() const noexcept;

  MatchConfig config_;
  const SharedCorpus* corpus_ = nullptr;
  const MappedCorpus* file_ = nullptr;
  std::vector<Token> tokens_;                                  // the index: the first index_capacity tokens
  std::array<Token, kMaxVerify> recent_{};                     // ring of the last kMaxVerify tokens
  // [n - 1]: the most recent end (position after it) of each indexed n-gram of n tokens, keyed
  // by the FNV-1a hash of its tokens, as the counts key their contexts.
  std::array<detail::LastEndTable, kAnchorOrder> last_;
  NGramPredictor counts_;
  std::size_t indexed_ = 0;
  std::uint64_t seen_ = 0;
  std::size_t length_ = 0;  // L
  std::size_t end_ = 0;     // e
  // The gate's calibration: decayed sums of first-draft hits, of their estimates and of the
  // first drafts scored.
  double hits_ = 0;
  double expected_ = 0;
  double trials_ = 0;

  // The first draft predict() made from the current state when it came from a corpus or the
  // counts, and its estimate's class, kept for the next update()'s calibration, which would
  // otherwise ask again (a corpus lookup costs more than the rest of an update). Atomic
  // because concurrent const calls may each write it (the same value); update(), beside which
  // no call runs, reads and clears it. 0: nothing kept.
  struct RelaxedAtomic {
    std::atomic<std::uint64_t> value{0};
    RelaxedAtomic() = default;
    RelaxedAtomic(const RelaxedAtomic& other) noexcept : value(other.value.load(std::memory_order_relaxed)) {}
    RelaxedAtomic& operator=(const RelaxedAtomic& other) noexcept {
      value.store(other.value.load(std::memory_order_relaxed), std::memory_order_relaxed);
      return *this;
    }
  };
  // Keeps predict()'s first draft (`drafted` false: it had none) and its estimate's class.
  void remember_first_draft(bool drafted, Token token, std::size_t estimate_class) const noexcept;
  mutable RelaxedAtomic first_draft_;
  // out_of_vocabulary_drafts(): const predict() calls, which may run concurrently, add to it.
  mutable RelaxedAtomic dropped_;
  // Where predict()'s last lookup in the live corpus matched (CorpusDraft::end, 0: nowhere) and
  // tokens_seen() then: the next lookup's hint is that end moved on by the tokens seen since.
  mutable RelaxedAtomic corpus_end_;
  mutable RelaxedAtomic corpus_seen_;
  // The same for the corpus file.
  mutable RelaxedAtomic file_end_;
  mutable RelaxedAtomic file_seen_;
};

}  // namespace ngramspec
