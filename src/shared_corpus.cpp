#include "ngramspec/shared_corpus.hpp"

#include <algorithm>
#include <bit>
#include <mutex>
#include <stdexcept>
#include <string>

#include "ngramspec/detail/fnv1a.hpp"

namespace ngramspec {
namespace {

// The object itself and the rounding of the start bits to whole words come off the top.
constexpr std::size_t kFixedBytes = sizeof(SharedCorpus) + sizeof(std::uint64_t);

std::size_t capacity_for(std::size_t max_bytes) {
  const std::size_t fits = max_bytes > kFixedBytes
                               ? std::min((max_bytes - kFixedBytes) / SharedCorpus::kBytesPerToken, SharedCorpus::kMaxTokens)
                               : 0;
  if (fits < SharedCorpus::kMinTokens) {
    throw std::invalid_argument("ngramspec::SharedCorpus: max_bytes = " + std::to_string(max_bytes) +
                                " is invalid: must be at least " + std::to_string(SharedCorpus::min_bytes()) +
                                " (" + std::to_string(SharedCorpus::kMinTokens) + " tokens of " +
                                std::to_string(SharedCorpus::kBytesPerToken) + " bytes, and the object)");
  }
  return std::bit_floor(fits);
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

SharedCorpus::SharedCorpus(std::size_t max_bytes)
    : tokens_(capacity_for(max_bytes)), starts_((tokens_.size() + 63) / 64), mask_(tokens_.size() - 1) {
  // Each token held ends at most one n-gram of each order, so no table holds more than the capacity.
  for (detail::OpenTable<LastEnd>& table : last_) table = detail::OpenTable<LastEnd>(tokens_.size());
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
  // Newest first, as draft() hashes the context's suffixes in one pass.
  std::uint64_t hash = detail::kFnvOffsetBasis;
  for (std::size_t back = 1; back <= order; ++back) hash = detail::fnv1a_step(hash, at(end - back));
  return hash;
}

void SharedCorpus::evict_oldest() noexcept {
  // The n-grams that start at the oldest token go with it; an entry names a later end when the
  // n-gram occurred again, and then it stays.
  for (std::size_t order = 1; order <= kMaxOrder; ++order) {
    const std::uint64_t end = oldest_ + order;
    if (!whole_ngram(end, order)) continue;
    LastEnd* const entry = last_[order - 1].find(ngram_hash(end, order));
    if (entry != nullptr && entry->end == end) last_[order - 1].erase(*entry);
  }
  mark_start(oldest_, false);
  ++oldest_;
}

void SharedCorpus::append(std::span<const Token> record) {
  if (record.empty()) return;
  const WriterTurn turn(*this);
  bool first = true;
  for (const Token token : record) {
    if (written_ - oldest_ == tokens_.size()) evict_oldest();
    tokens_[static_cast<std::size_t>(written_) & mask_] = token;
    mark_start(written_, first);
    first = false;
    ++written_;
    for (std::size_t order = 1; order <= kMaxOrder; ++order) {
      if (!whole_ngram(written_, order)) break;
      last_[order - 1].find_or_insert(ngram_hash(written_, order)).end = written_;
    }
  }
  ++records_;
}

std::size_t SharedCorpus::bytes_for(std::size_t tokens) noexcept { return tokens * kBytesPerToken + kFixedBytes; }

std::size_t SharedCorpus::min_bytes() noexcept { return bytes_for(kMinTokens); }

CorpusDraft SharedCorpus::draft(std::span<const Token> context, std::span<Token> out) const noexcept {
  CorpusDraft found;
  if (context.empty() || out.empty()) return found;
  if (context.size() > kMaxVerify) context = context.last(kMaxVerify);
  const std::size_t orders = std::min(kMaxOrder, context.size());
  std::array<std::uint64_t, kMaxOrder> hashes{};
  std::uint64_t hash = detail::kFnvOffsetBasis;
  for (std::size_t n = 1; n <= orders; ++n) hashes[n - 1] = hash = detail::fnv1a_step(hash, context[context.size() - n]);

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
  for (std::size_t n = orders; n >= 1; --n) {
    const LastEnd* const entry = last_[n - 1].find(hashes[n - 1]);
    if (entry == nullptr) continue;
    const std::uint64_t end = entry->end;
    // Backwards from the end, within the occurrence's record and what the corpus holds.
    std::size_t length = 0;
    while (length < context.size() && end - length > oldest_ && (length == 0 || !starts_record(end - length)) &&
           at(end - 1 - length) == context[context.size() - 1 - length]) {
      ++length;
    }
    if (length < n) continue;  // a hash collision: try a shorter suffix
    found.match_length = length;
    // Forwards, up to the end of that record.
    while (found.count < out.size()) {
      const std::uint64_t from = end + found.count;
      if (from >= written_ || starts_record(from)) break;
      out[found.count++] = at(from);
    }
    return found;
  }
  return found;
}

void SharedCorpus::clear() {
  const WriterTurn turn(*this);
  for (detail::OpenTable<LastEnd>& table : last_) table.clear();
  std::fill(starts_.begin(), starts_.end(), 0);
  oldest_ = 0;
  written_ = 0;
  records_ = 0;
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

std::size_t SharedCorpus::memory_bytes() const noexcept {
  std::size_t bytes = sizeof(*this) + tokens_.capacity() * sizeof(Token) + starts_.capacity() * sizeof(std::uint64_t);
  for (const detail::OpenTable<LastEnd>& table : last_) bytes += table.memory_bytes();
  return bytes;
}

}  // namespace ngramspec
