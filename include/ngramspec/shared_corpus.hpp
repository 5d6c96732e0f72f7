#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <vector>

#include "ngramspec/corpus_draft.hpp"
#include "ngramspec/corpus_file.hpp"
#include "ngramspec/detail/open_table.hpp"
#include "ngramspec/detail/suffix_match.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec {

/// Earlier requests' outputs, kept for every sequence's drafter to copy from: later requests
/// repeat what earlier ones wrote (names, code, phrasing), which their own context has not
/// shown yet.
///
/// The corpus holds the most recent tokens of the records appended to it, up to a capacity
/// fixed by a byte cap at construction; appending beyond it evicts the oldest tokens, so
/// memory never grows. Each 1-, 2- and 3-token n-gram inside a record is indexed by its most
/// recent end. draft(context) finds the most recent occurrence of the longest of the
/// context's last 3, 2 or 1 tokens, measures the match backwards (up to kMaxVerify tokens,
/// never across a record's start) and copies what followed it, up to the end of that record.
/// Matches are checked token by token, so a hash collision never yields a false match.
///
/// Each record carries a stamp, the time it was appended (see CorpusRecord). save() writes
/// the records held to a corpus file that MappedCorpus maps read-only into any number of
/// processes and load() reads back; drafts from either equal the live corpus's.
///
/// Cost: append() is O(1) per token (three FNV passes of up to 3 tokens, three table stores,
/// and as much again to evict); draft() is at most three probes, kMaxVerify comparisons and
/// one copy, whatever the corpus holds. Neither allocates.
///
/// Thread safety: draft() and the const observers may run on any number of threads while
/// other threads append or clear. A reader-writer lock keeps every append whole to readers,
/// and draft() never waits for it: while an append is pending or running, draft() finds
/// nothing and says so (CorpusDraft::busy), and new drafts stand aside so the append waits
/// only for those already under way (a few hundred nanoseconds each). Appends come once per
/// finished request, so a draft rarely misses. Appends and clears take turns. Drafters
/// consult the corpus through a const pointer; it must outlive them.
class SharedCorpus {
 public:
  /// Longest n-gram indexed (and looked up first).
  static constexpr std::size_t kMaxOrder = detail::kCorpusMaxOrder;
  /// Longest match measured by draft().
  static constexpr std::size_t kMaxVerify = detail::kCorpusMaxVerify;
  /// Memory per token of capacity: the token, a record-start bit rounded up, a stamp slot, and
  /// three tables of two 16-byte slots per token.
  static constexpr std::size_t kBytesPerToken = 4 + 1 + 8 + kMaxOrder * 2 * 16;
  /// Smallest capacity, in tokens.
  static constexpr std::size_t kMinTokens = 256;
  /// Largest capacity, in tokens: 2^28 (about 27 GB of corpus).
  static constexpr std::size_t kMaxTokens = std::size_t{1} << 28;

  /// A corpus of at most `max_bytes` of memory: capacity_tokens() is the largest power of two
  /// whose kBytesPerToken each fit beside the object itself. Throws std::invalid_argument
  /// naming the value and the limit when that is below kMinTokens (max_bytes < min_bytes()),
  /// when max_bytes is above max_bytes(), or when the corpus would take more than the machine's
  /// physical memory; AllocationError (a std::bad_alloc) when its memory cannot be allocated.
  explicit SharedCorpus(std::size_t max_bytes);
  /// The byte cap that holds `tokens` tokens (a power of two) exactly.
  [[nodiscard]] static std::size_t bytes_for(std::size_t tokens) noexcept;
  /// The smallest byte cap accepted: bytes_for(kMinTokens).
  [[nodiscard]] static std::size_t min_bytes() noexcept;
  /// The largest byte cap accepted: bytes_for(kMaxTokens).
  [[nodiscard]] static std::size_t max_bytes() noexcept;

  SharedCorpus(const SharedCorpus&) = delete;
  SharedCorpus& operator=(const SharedCorpus&) = delete;

  /// Appends one record (typically a finished request's output), evicting the oldest
  /// tokens beyond the capacity. An empty record changes nothing. Copies the tokens. Its
  /// stamp is the time now (nanoseconds since the Unix epoch, system clock).
  void append(std::span<const Token> record);
  /// The same with a stamp of the caller's. Stamps only increase: one not above the last
  /// record's is raised to one more than it, so the corpus's order is its stamps' order.
  void append(std::span<const Token> record, std::int64_t stamp);

  /// Writes the records held, with their stamps, to a corpus file at `path` (replacing it
  /// atomically: see CorpusBuilder::write). Appends wait while the records are copied; drafts
  /// go on. Throws CorpusFileError when the disk fails.
  void save(const std::filesystem::path& path) const;
  /// Replaces what the corpus holds with the records of the corpus file at `path` (the most
  /// recent that fit the capacity), stamps kept. Throws CorpusFileError naming the file, the
  /// section and the problem when it cannot be read; the corpus is then unchanged. By default
  /// every section's checksum is verified first (every byte read once, at memory speed), so a
  /// file damaged since it was written is refused, naming the section, and a later save() can
  /// never write its damage out under fresh checksums; ChecksumCheck::skip trusts the body's
  /// bytes (a file this process just wrote) and skips the checksums. Either way the records are
  /// checked against the start bits and the header (MappedCorpus::verify_records, O(records +
  /// tokens / 64)), so no load takes records that verify() refuses, however their checksums read;
  /// and the tokens of the records kept against the vocabulary the file records
  /// (MappedCorpus::verify_tokens), so no token a model cannot take is ever drafted from it.
  void load(const std::filesystem::path& path, ChecksumCheck check = ChecksumCheck::verify);

  /// Writes to `out` up to out.size() tokens that followed the most recent occurrence in the
  /// corpus of the last 3 tokens of `context` (else its last 2, else its last 1; the context is
  /// the sequence's last tokens, oldest first; only the last kMaxVerify are read), and says how
  /// long the match is: how far that occurrence matches the context backwards within its record,
  /// up to kMaxVerify tokens.
  /// Looks nothing up when context or out is empty, or while an append or clear runs.
  [[nodiscard]] CorpusDraft draft(std::span<const Token> context, std::span<Token> out) const noexcept;
  /// As draft(context, out), and also measures the match that ends at `hint` (a position after a
  /// match, as an earlier draft's CorpusDraft::end, advanced by the tokens observed since; 0: none),
  /// which is drafted from when it is longer. A stale hint costs nothing but its measure: every
  /// match is compared token by token.
  [[nodiscard]] CorpusDraft draft(std::span<const Token> context, std::span<Token> out,
                                  std::uint64_t hint) const noexcept;

  /// Forgets every record; keeps the memory.
  void clear();

  /// Most tokens held: a power of two.
  [[nodiscard]] std::size_t capacity_tokens() const noexcept { return tokens_.size(); }
  /// Tokens held now (the most recent of those appended).
  [[nodiscard]] std::size_t size() const;
  /// Tokens appended since construction or the last clear().
  [[nodiscard]] std::uint64_t appended() const;
  /// Records appended since construction or the last clear().
  [[nodiscard]] std::uint64_t records() const;
  /// Stamp of the last record appended (0 when none).
  [[nodiscard]] std::int64_t last_stamp() const;
  /// Bytes of memory the corpus holds; fixed at construction, at most the byte cap.
  [[nodiscard]] std::size_t memory_bytes() const noexcept;

 private:
  // Most recent end (absolute position after it) of an n-gram, keyed by the FNV-1a hash of
  // its tokens read newest first.
  struct LastEnd {
    std::uint64_t key = 0;
    std::uint64_t end = 0;  // >= 1 for a stored n-gram
    [[nodiscard]] bool empty() const noexcept { return end == 0; }
  };

  [[nodiscard]] Token at(std::uint64_t position) const noexcept {
    return tokens_[static_cast<std::size_t>(position) & mask_];
  }
  [[nodiscard]] bool starts_record(std::uint64_t position) const noexcept {
    const std::size_t slot = static_cast<std::size_t>(position) & mask_;
    return ((starts_[slot / 64] >> (slot % 64)) & 1U) != 0;
  }
  void mark_start(std::uint64_t position, bool start) noexcept;
  // Tokens of the n-gram of `order` tokens that ends right before `end`, all in one record.
  [[nodiscard]] bool whole_ngram(std::uint64_t end, std::size_t order) const noexcept;
  [[nodiscard]] std::uint64_t ngram_hash(std::uint64_t end, std::size_t order) const noexcept;
  void evict_oldest() noexcept;
  void append_locked(std::span<const Token> record, std::int64_t stamp) noexcept;
  struct Index;  // what detail::longest_suffix_match reads
  void clear_locked() noexcept;
  class WriterTurn;

  mutable std::shared_mutex mutex_;
  std::mutex writers_;                     // appends and clears take turns on it
  std::atomic<bool> append_pending_{false};  // a writer wants mutex_: drafts stand aside
  std::vector<Token> tokens_;           // a ring of capacity_tokens() slots, by absolute position
  std::vector<std::uint64_t> starts_;   // per slot, one bit: a record starts there
  std::vector<std::int64_t> stamps_;    // per slot where a record starts (or the oldest token held): its stamp
  std::size_t mask_ = 0;
  std::array<detail::OpenTable<LastEnd>, kMaxOrder> last_;  // [n - 1]: n-gram hash -> latest end
  std::uint64_t oldest_ = 0;   // absolute position of the oldest token held
  std::uint64_t written_ = 0;  // absolute position of the next token
  std::uint64_t records_ = 0;
  std::int64_t last_stamp_ = 0;
};

}  // namespace ngramspec
