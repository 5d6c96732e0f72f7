#include "ngramspec/corpus_builder.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <new>
#include <numeric>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include "ngramspec/argument_error.hpp"
#include "ngramspec/detail/corpus_format.hpp"
#include "ngramspec/detail/fnv1a.hpp"
#include "ngramspec/detail/prefetch.hpp"
#include "ngramspec/detail/suffix_match.hpp"
#include "ngramspec/mapped_corpus.hpp"

namespace ngramspec {
namespace format = detail::corpus_format;

namespace {

constexpr std::uint64_t kProgressEvery = std::uint64_t{1} << 22;  // tokens between progress reports

std::uint64_t align_up(std::uint64_t bytes) { return (bytes + format::kSectionAlign - 1) / format::kSectionAlign * format::kSectionAlign; }

// A HyperLogLog estimate of the distinct keys among those fed: sizes each table before it is
// filled, so that the table is written once, in place, at two slots per n-gram.
class DistinctEstimate {
 public:
  void add(std::uint64_t key) noexcept {
    const std::uint64_t mixed = (key ^ (key >> 31)) * 0xbf58476d1ce4e5b9ULL;
    const std::size_t index = static_cast<std::size_t>(mixed >> (64 - kBits));
    const std::uint64_t rest = (mixed << kBits) | (std::uint64_t{1} << (kBits - 1));
    const auto rank = static_cast<std::uint8_t>(std::countl_zero(rest) + 1);
    registers_[index] = std::max(registers_[index], rank);
  }
  [[nodiscard]] double estimate() const noexcept {
    constexpr double m = static_cast<double>(std::size_t{1} << kBits);
    double sum = 0;
    std::size_t zeros = 0;
    for (const std::uint8_t r : registers_) {
      sum += std::ldexp(1.0, -static_cast<int>(r));
      zeros += r == 0 ? 1 : 0;
    }
    const double raw = 0.7213 / (1 + 1.079 / m) * m * m / sum;
    // Linear counting for small sets, where the raw estimate is biased.
    if (raw <= 2.5 * m && zeros > 0) return m * std::log(m / static_cast<double>(zeros));
    return raw;
  }

 private:
  static constexpr unsigned kBits = 14;
  std::array<std::uint8_t, std::size_t{1} << kBits> registers_{};
};

// The hashes of the n-grams of `order` tokens ending right before each position p + 1, as
// SharedCorpus and MatchDrafter hash a context's suffixes (FNV-1a over the tokens newest
// first); 0 for an n-gram that crosses a record's start (a genuine hash of 0 only loses that
// n-gram from the index).
class NgramKeys {
 public:
  NgramKeys(std::span<const Token> tokens, const std::vector<std::uint64_t>& starts, std::size_t order)
      : tokens_(tokens), starts_(starts), order_(order) {}
  [[nodiscard]] std::size_t size() const noexcept { return tokens_.size(); }
  // Positions are visited in order: the length of the record so far is carried along.
  [[nodiscard]] std::uint64_t next(std::size_t p) noexcept {
    run_ = ((starts_[p / 64] >> (p % 64)) & 1U) != 0 ? 1 : run_ + 1;
    if (run_ < order_) return 0;
    return detail::ngram_hash([this](std::uint64_t at) { return tokens_[at]; }, p + 1, order_);
  }

 private:
  std::span<const Token> tokens_;
  const std::vector<std::uint64_t>& starts_;
  std::size_t order_;
  std::size_t run_ = 0;
};

// Zeroed memory straight from the kernel, in huge pages where it grants them: a table of
// hundreds of megabytes is then written with few page faults and TLB misses.
template <class T>
class ZeroedArray {
 public:
  ZeroedArray() = default;
  explicit ZeroedArray(std::size_t size) : size_(size) {
    if (size == 0) return;
    bytes_ = size * sizeof(T);
    void* memory = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    ::madvise(memory, bytes_, MADV_HUGEPAGE);
#endif
    data_ = static_cast<T*>(memory);
  }
  ~ZeroedArray() {
    if (data_ != nullptr) ::munmap(data_, bytes_);
  }
  ZeroedArray(ZeroedArray&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}
  ZeroedArray& operator=(ZeroedArray&& other) noexcept {
    if (this != &other) {
      if (data_ != nullptr) ::munmap(data_, bytes_);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  ZeroedArray(const ZeroedArray&) = delete;
  ZeroedArray& operator=(const ZeroedArray&) = delete;

  [[nodiscard]] T& operator[](std::size_t i) noexcept { return data_[i]; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::span<const T> span() const noexcept { return {data_, size_}; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t bytes_ = 0;
};

// The table of one order as the file stores it: about two slots per n-gram (at least 8),
// homes scaled to any size, and the longest probe run any key needs.
struct FileTable {
  std::span<const format::Slot> slots;
  std::uint32_t max_probe = 0;
  std::uint64_t count = 0;
};

// Fills the first `slots` slots of `memory` (zeroed) with the latest end of every n-gram of
// `order`. False when the estimate was so far off that the table passed half full (readers
// check that bound).
bool fill_table(std::span<const Token> tokens, const std::vector<std::uint64_t>& starts, std::size_t order,
                std::uint64_t slots, ZeroedArray<format::Slot>& memory, FileTable& table,
                const CorpusBuilder::Progress& progress, const char* phase) {
  table.max_probe = 0;
  table.count = 0;
  format::Slot* const slot = &memory[0];
  const std::uint64_t limit = slots / 2;
  // Keys are hashed kAhead positions before they are stored and their slots prefetched then,
  // so the cache misses of a table far larger than the cache overlap.
  constexpr std::size_t kAhead = 16;
  std::array<std::uint64_t, kAhead> ahead{};
  NgramKeys keys(tokens, starts, order);
  const std::size_t n = tokens.size();
  const auto fetch = [&](std::size_t p) {
    const std::uint64_t key = keys.next(p);
    ahead[p % kAhead] = key;
    if (key != 0) detail::prefetch_to_write(&slot[format::home(key, slots)]);
  };
  for (std::size_t p = 0; p < std::min(kAhead, n); ++p) fetch(p);
  {
    for (std::size_t p = 0; p < n; ++p) {
      if (progress && p % kProgressEvery == 0 && p > 0) progress(phase, p, n);
      const std::uint64_t key = ahead[p % kAhead];
      if (p + kAhead < n) fetch(p + kAhead);
      if (key == 0) continue;
      const std::uint32_t print = format::fingerprint(key);
      const auto end = static_cast<std::uint32_t>(p + 1);
      std::uint64_t i = format::home(key, slots);
      std::uint32_t probe = 0;
      // Positions only increase, so the last store for an n-gram is its latest end. Two
      // n-grams with the same fingerprint in one probe run share a slot, as in MatchDrafter's
      // tables: a lookup then finds the other's end, and the match check makes that a miss.
      while (slot[i].end != 0 && slot[i].print != print) {
        i = i + 1 == slots ? 0 : i + 1;
        ++probe;
      }
      if (slot[i].end == 0) {
        if (++table.count > limit) return false;
        table.max_probe = std::max(table.max_probe, probe);
      }
      slot[i] = format::Slot{print, end};
    }
  }
  return true;
}

// Two slots per n-gram with 10 % to spare for the estimate's error, never more than two per
// occurrence (which bounds the file by CorpusBuilder::kMaxBytesPerToken and cannot fail).
// `memory` is reused from one order to the next (zeroed again only as far as it was used), so
// the kernel maps and zeroes its pages once.
FileTable build_table(std::span<const Token> tokens, const std::vector<std::uint64_t>& starts, std::size_t order,
                      double estimate, std::uint64_t occurrences, ZeroedArray<format::Slot>& memory,
                      std::uint64_t& dirty, const CorpusBuilder::Progress& progress, const char* phase) {
  FileTable table;
  const std::uint64_t most = std::max<std::uint64_t>(8, 2 * occurrences);
  auto slots = std::min(most, static_cast<std::uint64_t>(std::max(8.0, std::ceil(2.2 * estimate) + 64)));
  for (;;) {
    if (memory.size() < slots) {
      memory = ZeroedArray<format::Slot>(static_cast<std::size_t>(slots));
      dirty = 0;
    } else if (dirty > 0) {
      std::memset(static_cast<void*>(&memory[0]), 0, static_cast<std::size_t>(dirty) * sizeof(format::Slot));
    }
    dirty = slots;
    if (fill_table(tokens, starts, order, slots, memory, table, progress, phase)) break;
    if (slots >= most) throw std::logic_error("ngramspec::CorpusBuilder: a table of two slots per n-gram overflowed");
    slots = std::min(most, 2 * slots);
  }
  table.slots = std::span<const format::Slot>(&memory[0], static_cast<std::size_t>(slots));
  return table;
}

// A file descriptor that removes its temporary file unless told it was renamed.
class TemporaryFile {
 public:
  explicit TemporaryFile(const std::filesystem::path& target) : target_(target) {
    static std::atomic<unsigned> counter{0};
    path_ = target;
    path_ += ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) throw CorpusFileError(target, "", std::string("cannot create '") + path_.string() + "': " + std::strerror(errno));
  }
  ~TemporaryFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!renamed_) ::unlink(path_.c_str());
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;

  // Writes `bytes` in full at `offset`, or says why not.
  void write_at(std::uint64_t offset, const void* data, std::size_t bytes) {
    const auto* at = static_cast<const char*>(data);
    while (bytes > 0) {
      const ssize_t wrote = ::pwrite(fd_, at, bytes, static_cast<off_t>(offset));
      if (wrote < 0) {
        if (errno == EINTR) continue;
        throw CorpusFileError(target_, "", std::string("cannot write: ") + std::strerror(errno));
      }
      at += wrote;
      offset += static_cast<std::uint64_t>(wrote);
      bytes -= static_cast<std::size_t>(wrote);
    }
  }
  void commit() {
    if (::fdatasync(fd_) != 0) throw CorpusFileError(target_, "", std::string("cannot flush: ") + std::strerror(errno));
    const int closed = ::close(fd_);
    fd_ = -1;
    if (closed != 0) throw CorpusFileError(target_, "", std::string("cannot close: ") + std::strerror(errno));
    if (::rename(path_.c_str(), target_.c_str()) != 0) {
      throw CorpusFileError(target_, "", std::string("cannot rename '") + path_.string() + "' to it: " + std::strerror(errno));
    }
    renamed_ = true;
  }

 private:
  std::filesystem::path target_;
  std::filesystem::path path_;
  int fd_ = -1;
  bool renamed_ = false;
};

}  // namespace

CorpusBuilder::CorpusBuilder(std::uint64_t max_file_bytes, CorpusVocabulary vocabulary)
    : max_file_bytes_(max_file_bytes), vocabulary_(vocabulary) {
  if (max_file_bytes < min_file_bytes()) {
    throw ArgumentError("ngramspec::CorpusBuilder",
                        "max_file_bytes = " + std::to_string(max_file_bytes) + " is invalid: must be at least " +
                            std::to_string(min_file_bytes()) + " (the header, the sections' alignment and one token)");
  }
}

std::uint64_t CorpusBuilder::min_file_bytes() noexcept {
  std::uint64_t bytes = format::kHeaderBytes;
  while (tokens_that_fit(bytes, 1) == 0) ++bytes;
  return bytes;
}

std::uint64_t CorpusBuilder::tokens_that_fit(std::uint64_t max_file_bytes, std::uint64_t records) noexcept {
  // The header, each section's alignment, the records, then kMaxBytesPerToken per token and a
  // start word per 64 (counted as one byte per 8 tokens, rounded up by the alignment's slack).
  const std::uint64_t fixed = format::kHeaderBytes + format::kSections * format::kSectionAlign + 3 * 8 * 8;
  if (max_file_bytes <= fixed || records > (max_file_bytes - fixed) / kBytesPerRecord) return 0;
  const std::uint64_t room = max_file_bytes - fixed - records * kBytesPerRecord;
  return std::min<std::uint64_t>(room * 8 / (8 * kMaxBytesPerToken + 1), format::kMaxTokens);
}

namespace {

// The first token of `tokens` that is not below `vocab_size` (0: unknown, none), or tokens.size().
std::size_t first_outside(std::span<const Token> tokens, std::uint64_t vocab_size) noexcept {
  if (vocab_size == 0) return tokens.size();
  return static_cast<std::size_t>(
      std::find_if(tokens.begin(), tokens.end(), [vocab_size](Token t) { return t >= vocab_size; }) - tokens.begin());
}

}  // namespace

void CorpusBuilder::add(std::span<const Token> tokens, std::int64_t stamp) {
  if (tokens.empty()) return;
  if (const std::size_t at = first_outside(tokens, vocabulary_.size); at < tokens.size()) {
    throw ArgumentError("ngramspec::CorpusBuilder::add", "token " + std::to_string(tokens[at]) + " at index " +
                                                             std::to_string(at) +
                                                             " of the record is outside the vocabulary of " +
                                                             std::to_string(vocabulary_.size) + " tokens");
  }
  records_.push_back(Added{tokens_.size(), tokens.size(), stamp});
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
}

void CorpusBuilder::add(const MappedCorpus& file) {
  file.check_vocabulary(vocabulary_);
  // A merge writes fresh checksums: records that verify() refuses must not come out under them.
  file.verify_records();
  file.verify_tokens();
  if (const std::size_t at = first_outside(file.tokens(), vocabulary_.size); at < file.size()) {
    throw ArgumentError("ngramspec::CorpusBuilder::add", "corpus file '" + file.path().string() + "': token " +
                                                             std::to_string(file.tokens()[at]) + " at position " +
                                                             std::to_string(at) + " is outside the vocabulary of " +
                                                             std::to_string(vocabulary_.size) + " tokens");
  }
  tokens_.reserve(tokens_.size() + file.size());
  records_.reserve(records_.size() + file.records());
  for (std::size_t i = 0; i < file.records(); ++i) {
    const CorpusRecord record = file.record(i);
    add(record.tokens, record.stamp);
  }
}

void CorpusBuilder::clear() noexcept {
  tokens_.clear();
  records_.clear();
}

CorpusFileSummary CorpusBuilder::write(const std::filesystem::path& path, const Progress& progress) const {
  if (progress) progress("order", 0, records_.size());
  const auto span_of = [&](const Added& r) { return std::span<const Token>(tokens_.data() + r.first, r.size); };
  // Time order; equal stamps by tokens, so that the result depends only on the records.
  std::vector<std::size_t> order(records_.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (records_[a].stamp != records_[b].stamp) return records_[a].stamp < records_[b].stamp;
    const auto x = span_of(records_[a]);
    const auto y = span_of(records_[b]);
    return std::lexicographical_compare(x.begin(), x.end(), y.begin(), y.end());
  });
  const auto same = [&](std::size_t a, std::size_t b) {
    const auto x = span_of(records_[a]);
    const auto y = span_of(records_[b]);
    return records_[a].stamp == records_[b].stamp && std::equal(x.begin(), x.end(), y.begin(), y.end());
  };
  order.erase(std::unique(order.begin(), order.end(), same), order.end());

  // The most recent tokens that fit: whole records from the newest back, then the end of one.
  std::uint64_t kept_tokens = 0;
  std::size_t first_kept = order.size();
  std::uint64_t cut = 0;  // tokens left out at the front of the oldest record kept
  std::uint64_t all_tokens = 0;
  for (const std::size_t r : order) all_tokens += records_[r].size;
  while (first_kept > 0) {
    const Added& r = records_[order[first_kept - 1]];
    const std::uint64_t fit = tokens_that_fit(max_file_bytes_, order.size() - first_kept + 1);
    if (kept_tokens + r.size <= fit) {
      kept_tokens += r.size;
      --first_kept;
      continue;
    }
    if (fit > kept_tokens) {
      cut = r.size - (fit - kept_tokens);
      kept_tokens = fit;
      --first_kept;
    }
    break;
  }
  const std::span<const std::size_t> kept(order.data() + first_kept, order.size() - first_kept);

  // Tokens, start bits and records, oldest first.
  std::vector<Token> tokens;
  tokens.reserve(kept_tokens);
  std::vector<std::uint64_t> starts((kept_tokens + 63) / 64, 0);
  std::vector<format::RecordEntry> records;
  records.reserve(kept.size());
  for (std::size_t i = 0; i < kept.size(); ++i) {
    const Added& r = records_[kept[i]];
    const std::uint64_t skip = i == 0 ? cut : 0;
    const std::uint64_t first = tokens.size();
    starts[first / 64] |= std::uint64_t{1} << (first % 64);
    records.push_back(format::RecordEntry{first, r.stamp});
    const auto t = span_of(r).subspan(skip);
    tokens.insert(tokens.end(), t.begin(), t.end());
  }

  // The header goes last, once every section's checksum is known; each section is written
  // as soon as it is built, so the disk writes back the early sections while the later ones
  // are computed.
  format::Header header;
  header.magic = format::kMagic;
  header.version = format::kVersion;
  header.byte_order = format::kByteOrderMark;
  header.header_bytes = format::kHeaderBytes;
  header.token_bytes = format::kTokenBytes;
  header.max_order = format::kMaxOrder;
  header.section_count = format::kSections;
  header.vocab_size = vocabulary_.size;
  header.tokenizer_fingerprint = vocabulary_.tokenizer_fingerprint;
  header.tokens = tokens.size();
  header.records = records.size();
  if (!records.empty()) {
    header.first_stamp = records.front().stamp;
    header.last_stamp = records.back().stamp;
  }
  TemporaryFile file(path);
  std::uint64_t at = 0;
  const auto put = [&](const void* data, std::uint64_t bytes) {
    file.write_at(at, data, static_cast<std::size_t>(bytes));
    at += bytes;
  };
  static constexpr std::array<char, format::kHeaderBytes> kZeros{};
  put(kZeros.data(), format::kHeaderBytes);  // the header's place
  const auto section = [&](std::size_t i, std::span<const std::byte> body, std::uint64_t count, std::uint32_t max_probe) {
    format::SectionEntry& entry = header.sections[i];
    put(kZeros.data(), align_up(at) - at);
    entry.id = static_cast<std::uint32_t>(i + 1);
    entry.max_probe = max_probe;
    entry.offset = at;
    entry.bytes = body.size();
    entry.checksum = format::checksum(body);
    entry.count = count;
    put(body.data(), body.size());
  };
  section(0, std::as_bytes(std::span(tokens)), tokens.size(), 0);
  section(1, std::as_bytes(std::span(starts)), starts.size(), 0);
  section(2, std::as_bytes(std::span(records)), records.size(), 0);

  // One pass estimates how many distinct n-grams of each order there are, to size the tables.
  if (progress) progress("count", 0, tokens.size());
  std::array<DistinctEstimate, format::kMaxOrder> distinct;
  std::array<std::uint64_t, format::kMaxOrder> occurrences{};
  {
    std::size_t run = 0;
    for (std::size_t p = 0; p < tokens.size(); ++p) {
      if (progress && p % kProgressEvery == 0 && p > 0) progress("count", p, tokens.size());
      run = ((starts[p / 64] >> (p % 64)) & 1U) != 0 ? 1 : run + 1;
      std::uint64_t h = detail::kFnvOffsetBasis;
      for (std::size_t order = 1; order <= std::min<std::size_t>(run, format::kMaxOrder); ++order) {
        h = detail::fnv1a_step(h, tokens[p + 1 - order]);
        distinct[order - 1].add(h);
        ++occurrences[order - 1];
      }
    }
  }
  static constexpr std::array<const char*, format::kMaxOrder> kPhases = {"ngrams1", "ngrams2", "ngrams3"};
  // One allocation for the three tables, sized for the largest, so its pages fault in once.
  ZeroedArray<format::Slot> table_memory;
  {
    double largest = 0;
    for (std::size_t order = 1; order <= format::kMaxOrder; ++order) {
      largest = std::max(largest, std::min(2.0 * static_cast<double>(occurrences[order - 1]),
                                           std::ceil(2.2 * distinct[order - 1].estimate()) + 64));
    }
    table_memory = ZeroedArray<format::Slot>(static_cast<std::size_t>(std::max(8.0, largest)));
  }
  std::uint64_t dirty = 0;
  for (std::size_t order = 1; order <= format::kMaxOrder; ++order) {
    if (progress) progress(kPhases[order - 1], 0, tokens.size());
    const FileTable table = build_table(tokens, starts, order, distinct[order - 1].estimate(), occurrences[order - 1],
                                        table_memory, dirty, progress, kPhases[order - 1]);
    section(2 + order, std::as_bytes(table.slots), table.count, table.max_probe);
  }

  header.file_bytes = at;
  header.header_checksum =
      format::checksum(std::as_bytes(std::span(&header, 1)).first(offsetof(format::Header, header_checksum)));
  if (progress) progress("write", 0, 1);
  file.write_at(0, &header, sizeof(header));
  file.commit();
  if (progress) progress("write", 1, 1);

  CorpusFileSummary summary;
  summary.tokens = header.tokens;
  summary.records = header.records;
  summary.dropped_tokens = all_tokens - kept_tokens;
  summary.file_bytes = header.file_bytes;
  return summary;
}

}  // namespace ngramspec
