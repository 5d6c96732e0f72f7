#include "ngramspec/shared_corpus.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>

#include "ngramspec/allocation_error.hpp"
#include "ngramspec/argument_error.hpp"
#include "ngramspec/corpus_builder.hpp"
#include "ngramspec/detail/fnv1a.hpp"
#include "ngramspec/detail/physical_memory.hpp"
#include "ngramspec/mapped_corpus.hpp"

namespace ngramspec {
namespace {

// The object itself and the rounding of the start bits to whole words come off the top.
constexpr std::size_t kFixedBytes = sizeof(SharedCorpus) + sizeof(std::uint64_t);

std::size_t capacity_for(std::size_t max_bytes) {
  const std::string value = "max_bytes = " + std::to_string(max_bytes);
  if (max_bytes > SharedCorpus::max_bytes()) {
    throw ArgumentError(
        "ngramspec::SharedCorpus",
        value + " is invalid: the largest corpus (kMaxTokens = " + std::to_string(SharedCorpus::kMaxTokens) +
            " tokens) takes max_bytes() = " + std::to_string(SharedCorpus::max_bytes()));
  }
  const std::size_t fits =
      max_bytes > kFixedBytes ? (max_bytes - kFixedBytes) / SharedCorpus::kBytesPerToken : 0;
  if (fits < SharedCorpus::kMinTokens) {
    throw ArgumentError("ngramspec::SharedCorpus",
                        value + " is invalid: must be at least " + std::to_string(SharedCorpus::min_bytes()) + " (" +
                            std::to_string(SharedCorpus::kMinTokens) + " tokens of " +
                            std::to_string(SharedCorpus::kBytesPerToken) + " bytes, and the object)");
  }
  const std::size_t capacity = std::bit_floor(fits);
  // Refused up front: the tables are written as they are made, so a corpus larger than the
  // machine's memory would not fail its allocation but drive the machine out of memory.
  const std::size_t machine = detail::physical_memory_bytes();
  if (machine != 0 && SharedCorpus::bytes_for(capacity) > machine) {
    throw ArgumentError("ngramspec::SharedCorpus",
                        value + " is invalid: its " + std::to_string(capacity) + " tokens take " +
                            std::to_string(SharedCorpus::bytes_for(capacity)) +
                            " bytes, more than this machine's memory (" + std::to_string(machine) + " bytes)");
  }
  return capacity;
}

}  // namespace

// Announces the writer (so that new drafts stand aside), then takes the lock exclusively.
// Writers queue on their own mutex, so the flag is theirs alone while it is up.
class SharedCorpus::WriterTurn {
 public:
  explicit WriterTurn(SharedCorpus& corpus) : corpus_(corpus), queue_(corpus.writers_) {
    corpus_.append_pending_.store(true, std::memory_order_release);
    corpus_.mutex_.lock();
  }
  ~WriterTurn() {
    corpus_.mutex_.unlock();
    corpus_.append_pending_.store(false, std::memory_order_release);
  }
  WriterTurn(const WriterTurn&) = delete;
  WriterTurn& operator=(const WriterTurn&) = delete;

 private:
  SharedCorpus& corpus_;
  std::lock_guard<std::mutex> queue_;
};

SharedCorpus::SharedCorpus(std::size_t max_bytes) try
    : tokens_(capacity_for(max_bytes)),
      starts_((tokens_.size() + 63) / 64),
      stamps_(tokens_.size()),
      mask_(tokens_.size() - 1) {
  // Each token held ends at most one n-gram of each order, so no table holds more than the capacity.
  for (detail::OpenTable<LastEnd>& table : last_) table = detail::OpenTable<LastEnd>(tokens_.size());
} catch (const std::bad_alloc&) {
  // capacity_for() succeeded before anything was allocated, so it succeeds again.
  throw AllocationError("a SharedCorpus (its tokens, stamps and n-gram tables)", bytes_for(capacity_for(max_bytes)));
}

void SharedCorpus::mark_start(std::uint64_t position, bool start) noexcept {
  const std::size_t slot = static_cast<std::size_t>(position) & mask_;
  const std::uint64_t bit = std::uint64_t{1} << (slot % 64);
  starts_[slot / 64] = start ? (starts_[slot / 64] | bit) : (starts_[slot / 64] & ~bit);
}

bool SharedCorpus::whole_ngram(std::uint64_t end, std::size_t order) const noexcept {
  if (end < oldest_ + order || end > written_) return false;
  // Every token after the first must continue the same record.
  for (std::uint64_t p = end - order + 1; p < end; ++p) {
    if (starts_record(p)) return false;
  }
  return true;
}

std::uint64_t SharedCorpus::ngram_hash(std::uint64_t end, std::size_t order) const noexcept {
  return detail::ngram_hash([this](std::uint64_t p) { return at(p); }, end, order);
}

struct SharedCorpus::Index {
  const SharedCorpus& corpus;
  [[nodiscard]] std::uint64_t end_of(std::size_t order, std::uint64_t key) const noexcept {
    const LastEnd* const entry = corpus.last_[order - 1].find(key);
    return entry == nullptr ? 0 : entry->end;
  }
  [[nodiscard]] Token at(std::uint64_t position) const noexcept { return corpus.at(position); }
  [[nodiscard]] bool starts_record(std::uint64_t position) const noexcept { return corpus.starts_record(position); }
  [[nodiscard]] std::uint64_t oldest() const noexcept { return corpus.oldest_; }
  [[nodiscard]] std::uint64_t written() const noexcept { return corpus.written_; }
};

void SharedCorpus::evict_oldest() noexcept {
  // The n-grams that start at the oldest token go with it; an entry names a later end when the
  // n-gram occurred again, and then it stays.
  for (std::size_t order = 1; order <= kMaxOrder; ++order) {
    const std::uint64_t end = oldest_ + order;
    if (!whole_ngram(end, order)) continue;
    LastEnd* const entry = last_[order - 1].find(ngram_hash(end, order));
    if (entry != nullptr && entry->end == end) last_[order - 1].erase(*entry);
  }
  // The oldest record held keeps its stamp when its first token goes.
  if (oldest_ + 1 < written_ && !starts_record(oldest_ + 1)) {
    stamps_[static_cast<std::size_t>(oldest_ + 1) & mask_] = stamps_[static_cast<std::size_t>(oldest_) & mask_];
  }
  mark_start(oldest_, false);
  ++oldest_;
}

void SharedCorpus::append(std::span<const Token> record) {
  const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  append(record, static_cast<std::int64_t>(now.count()));
}

void SharedCorpus::append(std::span<const Token> record, std::int64_t stamp) {
  if (record.empty()) return;
  const WriterTurn turn(*this);
  append_locked(record, stamp);
}

void SharedCorpus::append_locked(std::span<const Token> record, std::int64_t stamp) noexcept {
  if (records_ > 0 && stamp <= last_stamp_) {
    stamp = last_stamp_ == std::numeric_limits<std::int64_t>::max() ? last_stamp_ : last_stamp_ + 1;
  }
  bool first = true;
  for (const Token token : record) {
    if (written_ - oldest_ == tokens_.size()) evict_oldest();
    const std::size_t slot = static_cast<std::size_t>(written_) & mask_;
    tokens_[slot] = token;
    mark_start(written_, first);
    if (first) stamps_[slot] = stamp;
    first = false;
    ++written_;
    for (std::size_t order = 1; order <= kMaxOrder; ++order) {
      if (!whole_ngram(written_, order)) break;
      last_[order - 1].find_or_insert(ngram_hash(written_, order)).end = written_;
    }
  }
  ++records_;
  last_stamp_ = stamp;
}

void SharedCorpus::save(const std::filesystem::path& path) const {
  CorpusBuilder builder;
  {
    const std::shared_lock lock(mutex_);
    for (std::uint64_t first = oldest_; first < written_;) {
      std::uint64_t end = first + 1;
      while (end < written_ && !starts_record(end)) ++end;
      const std::size_t from = static_cast<std::size_t>(first) & mask_;
      const std::size_t size = static_cast<std::size_t>(end - first);
      const std::int64_t stamp = stamps_[from];
      if (from + size <= tokens_.size()) {
        builder.add(std::span<const Token>(tokens_.data() + from, size), stamp);
      } else {  // the record wraps around the ring
        std::vector<Token> record(tokens_.begin() + static_cast<std::ptrdiff_t>(from), tokens_.end());
        record.insert(record.end(), tokens_.begin(), tokens_.begin() + static_cast<std::ptrdiff_t>(size - record.size()));
        builder.add(record, stamp);
      }
      first = end;
    }
  }
  static_cast<void>(builder.write(path));
}

void SharedCorpus::load(const std::filesystem::path& path, ChecksumCheck check) {
  const MappedCorpus file(path);  // a bad file throws here or below, before anything changes
  if (check == ChecksumCheck::verify) file.verify_checksums();
  // Trusted or not: checksums written over a wrong record table hold, and its records would read
  // as other text (clamped into the tokens, overlapping).
  file.verify_records();
  const std::size_t first = file.first_record_kept(tokens_.size());
  // A token outside the file's vocabulary would be drafted to a model that cannot take it.
  if (first < file.records()) {
    file.verify_tokens(static_cast<std::size_t>(file.record(first).tokens.data() - file.tokens().data()));
  }
  const WriterTurn turn(*this);
  clear_locked();
  for (std::size_t r = first; r < file.records(); ++r) {
    const CorpusRecord record = file.record(r);
    const std::span<const Token> tokens =
        record.tokens.size() > tokens_.size() ? record.tokens.last(tokens_.size()) : record.tokens;
    append_locked(tokens, record.stamp);
  }
}

std::size_t SharedCorpus::bytes_for(std::size_t tokens) noexcept { return tokens * kBytesPerToken + kFixedBytes; }

std::size_t SharedCorpus::min_bytes() noexcept { return bytes_for(kMinTokens); }

std::size_t SharedCorpus::max_bytes() noexcept { return bytes_for(kMaxTokens); }

CorpusDraft SharedCorpus::draft(std::span<const Token> context, std::span<Token> out) const noexcept {
  return draft(context, out, 0);
}

CorpusDraft SharedCorpus::draft(std::span<const Token> context, std::span<Token> out,
                                std::uint64_t hint) const noexcept {
  CorpusDraft found;
  if (context.empty() || out.empty()) return found;
  const detail::SuffixHashes hashes = detail::suffix_hashes(context);  // before the lock: it is held briefly

  // Readers never wait for an append: while one is pending or running they find nothing, and
  // the append waits only for the drafts already under way.
  if (append_pending_.load(std::memory_order_acquire)) {
    found.busy = true;
    return found;
  }
  const std::shared_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) {
    found.busy = true;
    return found;
  }
  const Index index{*this};
  const CorpusMatch match = detail::longest_suffix_match(index, context, hashes, hint);
  found.match_length = match.length;
  found.end = match.end;
  found.count = detail::copy_after(index, match, out);
  return found;
}

void SharedCorpus::clear() {
  const WriterTurn turn(*this);
  clear_locked();
}

void SharedCorpus::clear_locked() noexcept {
  for (detail::OpenTable<LastEnd>& table : last_) table.clear();
  std::fill(starts_.begin(), starts_.end(), 0);
  oldest_ = 0;
  written_ = 0;
  records_ = 0;
  last_stamp_ = 0;
}

std::size_t SharedCorpus::size() const {
  const std::shared_lock lock(mutex_);
  return static_cast<std::size_t>(written_ - oldest_);
}

std::uint64_t SharedCorpus::appended() const {
  const std::shared_lock lock(mutex_);
  return written_;
}

std::uint64_t SharedCorpus::records() const {
  const std::shared_lock lock(mutex_);
  return records_;
}

std::int64_t SharedCorpus::last_stamp() const {
  const std::shared_lock lock(mutex_);
  return last_stamp_;
}

std::size_t SharedCorpus::memory_bytes() const noexcept {
  std::size_t bytes = sizeof(*this) + tokens_.capacity() * sizeof(Token) +
                      starts_.capacity() * sizeof(std::uint64_t) + stamps_.capacity() * sizeof(std::int64_t);
  for (const detail::OpenTable<LastEnd>& table : last_) bytes += table.memory_bytes();
  return bytes;
}

}  // namespace ngramspec
