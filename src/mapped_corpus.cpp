#include "ngramspec/mapped_corpus.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "ngramspec/detail/fnv1a.hpp"
#include "ngramspec/detail/suffix_match.hpp"

namespace ngramspec {
namespace format = detail::corpus_format;

namespace {

// What a moved-from or failed MappedCorpus points at: an empty corpus.
const format::Header kEmptyHeader{};

std::string hex(std::uint64_t value) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text = "0x";
  for (int shift = 60; shift >= 0; shift -= 4) text += kDigits[(value >> shift) & 0xfU];
  return text;
}

std::uint32_t byte_swapped(std::uint32_t value) {
  return ((value & 0xffU) << 24) | ((value & 0xff00U) << 8) | ((value >> 8) & 0xff00U) | (value >> 24);
}

// The structural checks of the header, in the order a reader would want them reported: what
// the file is before what it holds. O(1): only the header's bytes are read. Returns the header
// as checked (a version 1 header's later fields zero).
format::Header check_header(const std::filesystem::path& path, const std::byte* base, std::uint64_t bytes) {
  const auto fail = [&](const std::string& section, const std::string& problem) {
    throw CorpusFileError(path, section, problem);
  };
  if (bytes < format::kMagic.size() ||
      std::memcmp(base, format::kMagic.data(), format::kMagic.size()) != 0) {
    fail("header", bytes < format::kMagic.size()
                       ? "truncated: " + std::to_string(bytes) + " bytes, not even the 8-byte magic"
                       : "not a corpus file: it does not start with the magic 'NGSPCORP'");
  }
  if (bytes < format::kHeaderBytesV1) {
    fail("header", "truncated: " + std::to_string(bytes) + " bytes, shorter than the " +
                       std::to_string(format::kHeaderBytesV1) + "-byte header of the oldest format version");
  }
  // A version 1 header is the first 320 bytes of this one: the fields it lacks stay zero.
  format::Header h;
  std::memcpy(&h, base, static_cast<std::size_t>(std::min<std::uint64_t>(bytes, sizeof(h))));
  if (h.version == format::kFirstVersion) {
    // What was copied past its checksum is the sections' bytes, not fields of its header.
    std::memset(reinterpret_cast<std::byte*>(&h) + format::checksum_offset(format::kFirstVersion), 0,
                sizeof(h) - format::checksum_offset(format::kFirstVersion));
  }
  // A file of the other byte order is named before its checksum is, which it fails (the lanes
  // are read in this machine's order). Otherwise the checksum comes first: a field is believed
  // only once the bytes are known to be those written, so a flipped bit reads as corruption,
  // not as a byte-order mark or a format version that no writer wrote. The version field says
  // where the checksum is; one flipped to the other version's finds no checksum there.
  if (h.byte_order == byte_swapped(format::kByteOrderMark)) {
    fail("header", "written on a machine of the other byte order (" +
                       std::string(std::endian::native == std::endian::little ? "big" : "little") +
                       "-endian); rebuild it on this one");
  }
  const bool known_version = h.version == format::kFirstVersion || h.version == format::kVersion;
  const std::string versions_read = "this build of ngramspec reads versions " + std::to_string(format::kFirstVersion) +
                                    " to " + std::to_string(format::kVersion);
  const std::size_t header_bytes = format::header_bytes(h.version);
  if (bytes < header_bytes) {
    fail("header", "truncated: " + std::to_string(bytes) + " bytes, shorter than the " +
                       std::to_string(header_bytes) + "-byte header" +
                       (known_version ? " of format version " + std::to_string(h.version)
                                      : " (its version field reads " + std::to_string(h.version) + "; " +
                                            versions_read + ")"));
  }
  const std::size_t checksum_at = format::checksum_offset(h.version);
  std::uint64_t stored = 0;
  std::memcpy(&stored, base + checksum_at, sizeof(stored));
  const std::uint64_t expected = format::checksum(std::span<const std::byte>(base, checksum_at));
  if (stored != expected) {
    // A later format may lay its header out otherwise: then the version field, unchecked, says so.
    fail("header", "checksum mismatch: stored " + hex(stored) + ", computed " + hex(expected) +
                       (known_version ? std::string(" (the header is corrupted)")
                                      : " (the header is corrupted, or of a format version this build does not read: its "
                                        "version field reads " +
                                            std::to_string(h.version) + ", " + versions_read + ")"));
  }
  if (h.byte_order != format::kByteOrderMark) {
    fail("header", "byte-order mark " + hex(h.byte_order) + " is not " + hex(format::kByteOrderMark));
  }
  if (!known_version) fail("header", "format version " + std::to_string(h.version) + ": " + versions_read);
  if (h.header_bytes != header_bytes) {
    fail("header", "header_bytes = " + std::to_string(h.header_bytes) + ", expected " + std::to_string(header_bytes) +
                       " for format version " + std::to_string(h.version));
  }
  if (h.token_bytes != format::kTokenBytes) {
    fail("header", "token width " + std::to_string(h.token_bytes) + " bytes: this build reads 4-byte tokens");
  }
  if (h.max_order != format::kMaxOrder) fail("header", "max_order = " + std::to_string(h.max_order) + ", expected 3");
  if (h.section_count != format::kSections) {
    fail("header", "section_count = " + std::to_string(h.section_count) + ", expected 6");
  }
  if (h.file_bytes != bytes) {
    fail("", h.file_bytes > bytes ? "truncated: " + std::to_string(bytes) + " bytes, the header says " +
                                        std::to_string(h.file_bytes)
                                  : std::to_string(bytes) + " bytes, the header says " + std::to_string(h.file_bytes) +
                                        " (trailing bytes)");
  }
  if (h.tokens > format::kMaxTokens) fail("header", "tokens = " + std::to_string(h.tokens) + " exceeds 2^32 - 1");
  if (h.records > h.tokens || ((h.records == 0) != (h.tokens == 0))) {
    fail("header", "records = " + std::to_string(h.records) + " with tokens = " + std::to_string(h.tokens));
  }
  if (h.first_stamp > h.last_stamp) {
    fail("header", "first_stamp " + std::to_string(h.first_stamp) + " is after last_stamp " + std::to_string(h.last_stamp));
  }
  if (h.vocab_size > (std::uint64_t{1} << 32)) {
    fail("header", "vocab_size = " + std::to_string(h.vocab_size) + " exceeds 2^32 (tokens are 32-bit)");
  }
  std::uint64_t previous_end = header_bytes;
  for (std::size_t i = 0; i < format::kSections; ++i) {
    const format::SectionEntry& s = h.sections[i];
    const std::string name(format::section_name(i));
    if (s.id != i + 1) fail(name, "id " + std::to_string(s.id) + ", expected " + std::to_string(i + 1));
    if (s.offset % format::kSectionAlign != 0 || s.offset < previous_end || s.offset > bytes ||
        s.bytes > bytes - s.offset) {
      fail(name, "offset " + std::to_string(s.offset) + " and size " + std::to_string(s.bytes) +
                     " do not lie in order inside the file's " + std::to_string(bytes) + " bytes");
    }
    previous_end = s.offset + s.bytes;
    std::uint64_t want = 0;
    switch (i) {
      case 0: want = h.tokens * 4; break;
      case 1: want = (h.tokens + 63) / 64 * 8; break;
      case 2: want = h.records * 16; break;
      default:
        if (s.bytes % 8 != 0 || s.bytes / 8 < 8 || s.count > s.bytes / 16 || s.max_probe >= s.bytes / 8) {
          fail(name, std::to_string(s.bytes) + " bytes of slots for " + std::to_string(s.count) +
                         " n-grams with probe runs up to " + std::to_string(s.max_probe) +
                         ": expected at least 8 slots, two per n-gram, and runs shorter than the table");
        }
        if ((h.tokens == 0) != (s.count == 0) && i == 3) {
          fail(name, std::to_string(s.count) + " n-grams for " + std::to_string(h.tokens) + " tokens");
        }
        continue;
    }
    if (s.bytes != want) {
      fail(name, std::to_string(s.bytes) + " bytes, expected " + std::to_string(want) + " for " +
                     std::to_string(i == 2 ? h.records : h.tokens) + (i == 2 ? " records" : " tokens"));
    }
    if (s.count != (i == 1 ? (h.tokens + 63) / 64 : i == 2 ? h.records : h.tokens)) {
      fail(name, "count " + std::to_string(s.count) + " does not match the header");
    }
  }
  return h;
}

}  // namespace

MappedCorpus::MappedCorpus(const std::filesystem::path& path) : path_(path), header_(&kEmptyHeader) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw CorpusFileError(path, "", std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    throw CorpusFileError(path, "", std::string("cannot stat: ") + std::strerror(error));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw CorpusFileError(path, "", "it is a directory");
  }
  const auto bytes = static_cast<std::uint64_t>(st.st_size);
  if (bytes == 0) {
    ::close(fd);
    throw CorpusFileError(path, "header", "the file is empty");
  }
  void* const mapped = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  const int error = errno;
  ::close(fd);  // the mapping keeps the file
  if (mapped == MAP_FAILED) throw CorpusFileError(path, "", std::string("cannot map: ") + std::strerror(error));
  base_ = static_cast<const std::byte*>(mapped);
  bytes_ = bytes;
  try {
    const format::Header checked = check_header(path, base_, bytes_);
    version_ = checked.version;
    vocabulary_ = CorpusVocabulary{checked.vocab_size, checked.tokenizer_fingerprint};
  } catch (...) {
    release();
    throw;
  }
  header_ = reinterpret_cast<const format::Header*>(base_);
  const auto section = [&](std::size_t i) { return base_ + header_->sections[i].offset; };
  tokens_ = std::span(reinterpret_cast<const Token*>(section(0)), static_cast<std::size_t>(header_->tokens));
  starts_ = reinterpret_cast<const std::uint64_t*>(section(1));
  records_ = std::span(reinterpret_cast<const format::RecordEntry*>(section(2)),
                       static_cast<std::size_t>(header_->records));
  for (std::size_t order = 1; order <= format::kMaxOrder; ++order) {
    const format::SectionEntry& s = header_->sections[2 + order];
    tables_[order - 1] = Table{reinterpret_cast<const Slot*>(section(2 + order)), s.bytes / sizeof(Slot), s.max_probe};
  }
  // Lookups land anywhere in the tables: read-ahead would only fetch pages nobody asked for.
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t from = header_->sections[3].offset / page * page;
  ::madvise(const_cast<std::byte*>(base_ + from), static_cast<std::size_t>(bytes_ - from), MADV_RANDOM);
}

MappedCorpus::~MappedCorpus() { release(); }

MappedCorpus::MappedCorpus(MappedCorpus&& other) noexcept
    : path_(std::move(other.path_)),
      base_(std::exchange(other.base_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      header_(std::exchange(other.header_, &kEmptyHeader)),
      tokens_(std::exchange(other.tokens_, {})),
      starts_(std::exchange(other.starts_, nullptr)),
      records_(std::exchange(other.records_, {})),
      tables_(std::exchange(other.tables_, {})),
      version_(std::exchange(other.version_, 0)),
      vocabulary_(std::exchange(other.vocabulary_, {})) {}

MappedCorpus& MappedCorpus::operator=(MappedCorpus&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    header_ = std::exchange(other.header_, &kEmptyHeader);
    tokens_ = std::exchange(other.tokens_, {});
    starts_ = std::exchange(other.starts_, nullptr);
    records_ = std::exchange(other.records_, {});
    tables_ = std::exchange(other.tables_, {});
    version_ = std::exchange(other.version_, 0);
    vocabulary_ = std::exchange(other.vocabulary_, {});
  }
  return *this;
}

void MappedCorpus::release() noexcept {
  if (base_ != nullptr) ::munmap(const_cast<std::byte*>(base_), static_cast<std::size_t>(bytes_));
  base_ = nullptr;
  bytes_ = 0;
  header_ = &kEmptyHeader;
  tokens_ = {};
  starts_ = nullptr;
  records_ = {};
  tables_ = {};
  version_ = 0;
  vocabulary_ = {};
}

void MappedCorpus::check_vocabulary(const CorpusVocabulary& model) const {
  if (model.size != 0 && vocabulary_.size != 0 && model.size != vocabulary_.size) {
    throw CorpusFileError(path_, "header",
                          "its tokens come from a vocabulary of " + std::to_string(vocabulary_.size) +
                              " tokens, the model's has " + std::to_string(model.size) +
                              ": the file was built for another tokenizer");
  }
  if (model.tokenizer_fingerprint != 0 && vocabulary_.tokenizer_fingerprint != 0 &&
      model.tokenizer_fingerprint != vocabulary_.tokenizer_fingerprint) {
    throw CorpusFileError(path_, "header",
                          "tokenizer fingerprint " + hex(vocabulary_.tokenizer_fingerprint) + ", the model's is " +
                              hex(model.tokenizer_fingerprint) + ": the file was built for another tokenizer");
  }
}

std::uint64_t MappedCorpus::ngrams(std::size_t order) const noexcept {
  return order >= 1 && order <= format::kMaxOrder ? header_->sections[2 + order].count : 0;
}

std::uint32_t MappedCorpus::lookup(std::size_t order, std::uint64_t key) const noexcept {
  const Table& table = tables_[order - 1];
  if (table.count == 0) return 0;
  const std::uint32_t print = format::fingerprint(key);
  std::uint64_t i = format::home(key, table.count);
  // Every stored key lies within max_probe slots of its home, so the lookup stops there even
  // in a table that a corruption filled.
  for (std::uint32_t probe = 0; probe <= table.max_probe; ++probe) {
    const Slot slot = table.slots[i];
    if (slot.end == 0) return 0;
    if (slot.print == print) return slot.end;
    i = i + 1 == table.count ? 0 : i + 1;
  }
  return 0;
}

struct MappedCorpus::Index {
  const MappedCorpus& corpus;
  [[nodiscard]] std::uint64_t end_of(std::size_t order, std::uint64_t key) const noexcept {
    return corpus.lookup(order, key);
  }
  [[nodiscard]] Token at(std::uint64_t position) const noexcept { return corpus.tokens_[position]; }
  [[nodiscard]] bool starts_record(std::uint64_t position) const noexcept { return corpus.starts_record(position); }
  [[nodiscard]] static std::uint64_t oldest() noexcept { return 0; }
  // Ends read from the tables are checked against this, so a corrupted entry is a miss.
  [[nodiscard]] std::uint64_t written() const noexcept { return corpus.tokens_.size(); }
};

CorpusMatch MappedCorpus::find(std::span<const Token> context) const noexcept { return find(context, 0); }

CorpusMatch MappedCorpus::find(std::span<const Token> context, std::uint64_t hint) const noexcept {
  if (context.empty() || tokens_.empty()) return {};
  return detail::longest_suffix_match(Index{*this}, context, detail::suffix_hashes(context), hint);
}

std::size_t MappedCorpus::copy(const CorpusMatch& match, std::span<Token> out) const noexcept {
  return detail::copy_after(Index{*this}, match, out);
}

CorpusDraft MappedCorpus::draft(std::span<const Token> context, std::span<Token> out) const noexcept {
  return draft(context, out, 0);
}

CorpusDraft MappedCorpus::draft(std::span<const Token> context, std::span<Token> out, std::uint64_t hint) const noexcept {
  CorpusDraft found;
  if (out.empty()) return found;
  const CorpusMatch match = find(context, hint);
  found.match_length = match.length;
  found.end = match.end;
  found.count = copy(match, out);
  return found;
}

CorpusRecord MappedCorpus::record(std::size_t index) const {
  if (index >= records_.size()) {
    throw std::out_of_range("ngramspec::MappedCorpus::record: index " + std::to_string(index) + " is out of range: " +
                            std::to_string(records_.size()) + " records in '" + path_.string() + "'");
  }
  const std::uint64_t held = tokens_.size();
  const std::uint64_t first = std::min(records_[index].first, held);
  const std::uint64_t last = index + 1 < records_.size() ? std::clamp(records_[index + 1].first, first, held) : held;
  return CorpusRecord{tokens_.subspan(static_cast<std::size_t>(first), static_cast<std::size_t>(last - first)),
                      records_[index].stamp};
}

std::size_t MappedCorpus::first_record_kept(std::size_t capacity_tokens) const {
  // Newest first: a record that does not fit whole is the last one kept.
  std::size_t first = records();
  std::size_t room = capacity_tokens;
  while (first > 0 && room > 0) {
    const std::size_t size = record(first - 1).tokens.size();
    --first;
    if (size >= room) break;
    room -= size;
  }
  return first;
}

void MappedCorpus::verify_checksums() const {
  if (base_ == nullptr) throw CorpusFileError(path_, "", "nothing is mapped (a moved-from MappedCorpus)");
  for (std::size_t i = 0; i < format::kSections; ++i) {
    const format::SectionEntry& s = header_->sections[i];
    const std::uint64_t computed = format::checksum(std::span<const std::byte>(base_ + s.offset, s.bytes));
    if (computed != s.checksum) {
      throw CorpusFileError(path_, std::string(format::section_name(i)),
                            "checksum mismatch: stored " + hex(s.checksum) + ", computed " + hex(computed) +
                                " (the section is corrupted)");
    }
  }
}

void MappedCorpus::verify_records() const {
  if (base_ == nullptr) throw CorpusFileError(path_, "", "nothing is mapped (a moved-from MappedCorpus)");
  const auto fail = [&](std::size_t section, const std::string& problem) {
    throw CorpusFileError(path_, std::string(format::section_name(section)), problem);
  };
  const std::uint64_t held = tokens_.size();
  // Records: the first at 0, in order, each starting where a start bit is, and no other bits.
  std::uint64_t starts_seen = 0;
  for (std::uint64_t w = 0; w < (held + 63) / 64; ++w) {
    std::uint64_t word = starts_[w];
    if (w == held / 64 && held % 64 != 0 && (word >> (held % 64)) != 0) fail(1, "start bits set beyond the last token");
    starts_seen += static_cast<std::uint64_t>(std::popcount(word));
  }
  if (starts_seen != records_.size()) {
    fail(1, std::to_string(starts_seen) + " start bits for " + std::to_string(records_.size()) + " records");
  }
  for (std::size_t r = 0; r < records_.size(); ++r) {
    const format::RecordEntry& e = records_[r];
    if ((r == 0 && e.first != 0) || (r > 0 && e.first <= records_[r - 1].first) || e.first >= held ||
        !starts_record(e.first)) {
      fail(2, "record " + std::to_string(r) + " starts at token " + std::to_string(e.first) +
                  ", not at a start bit after the previous record's start");
    }
    if (r > 0 && e.stamp < records_[r - 1].stamp) {
      fail(2, "record " + std::to_string(r) + " has stamp " + std::to_string(e.stamp) + ", before the previous " +
                  std::to_string(records_[r - 1].stamp));
    }
  }
  if (!records_.empty() &&
      (records_.front().stamp != header_->first_stamp || records_.back().stamp != header_->last_stamp)) {
    fail(2, "the first and last stamps do not match the header's");
  }
}

void MappedCorpus::verify_tokens(std::size_t from) const {
  if (vocabulary_.size == 0) return;
  for (std::size_t p = from; p < tokens_.size(); ++p) {
    if (tokens_[p] >= vocabulary_.size) {
      throw CorpusFileError(path_, std::string(format::section_name(0)),
                            "token " + std::to_string(tokens_[p]) + " at position " + std::to_string(p) +
                                " is outside the file's vocabulary of " + std::to_string(vocabulary_.size) + " tokens");
    }
  }
}

void MappedCorpus::verify() const {
  verify_checksums();
  const auto fail = [&](std::size_t section, const std::string& problem) {
    throw CorpusFileError(path_, std::string(format::section_name(section)), problem);
  };
  const std::uint64_t held = tokens_.size();
  verify_tokens(0);
  verify_records();
  // Tables: every slot names the latest occurrence of an n-gram whose hash it fingerprints and
  // whose home is within max_probe; each n-gram's latest occurrence is stored.
  for (std::size_t order = 1; order <= format::kMaxOrder; ++order) {
    const Table& table = tables_[order - 1];
    const std::size_t section = 2 + order;
    const auto whole = [&](std::uint64_t end) {
      if (end < order || end > held) return false;
      for (std::uint64_t p = end - order + 1; p < end; ++p) {
        if (starts_record(p)) return false;
      }
      return true;
    };
    const auto hash_at = [&](std::uint64_t end) {
      return detail::ngram_hash([&](std::uint64_t p) { return tokens_[p]; }, end, order);
    };
    std::uint64_t stored = 0;
    for (std::uint64_t i = 0; i < table.count; ++i) {
      const Slot slot = table.slots[i];
      if (slot.end == 0) continue;
      ++stored;
      if (!whole(slot.end)) {
        fail(section, "slot " + std::to_string(i) + " ends at " + std::to_string(slot.end) +
                          ", not after an n-gram of " + std::to_string(order) + " inside one record");
      }
      const std::uint64_t key = hash_at(slot.end);
      const std::uint64_t home = format::home(key, table.count);
      if (format::fingerprint(key) != slot.print || ((i + table.count - home) % table.count) > table.max_probe) {
        fail(section, "slot " + std::to_string(i) + " does not hold the n-gram ending at " + std::to_string(slot.end) +
                          " where a lookup finds it");
      }
      // Each n-gram once: a second slot of the same n-gram further along its probe run (an
      // earlier end left behind) passes every check above and the lookups below.
      for (std::uint64_t k = home; k != i; k = k + 1 == table.count ? 0 : k + 1) {
        const Slot other = table.slots[k];
        if (other.end == 0 || other.print != slot.print || !whole(other.end)) continue;
        bool same = true;
        for (std::size_t back = 1; back <= order && same; ++back) {
          same = tokens_[other.end - back] == tokens_[slot.end - back];
        }
        if (same) {
          fail(section, "slot " + std::to_string(i) + " holds the n-gram ending at " + std::to_string(slot.end) +
                            " again: slot " + std::to_string(k) + " holds it ending at " + std::to_string(other.end));
        }
      }
    }
    if (stored != header_->sections[section].count) {
      fail(section, std::to_string(stored) + " n-grams stored, the header says " +
                        std::to_string(header_->sections[section].count));
    }
    // Each n-gram's most recent end is what a lookup returns (a fingerprint shared within a
    // probe run excepted, which drafting treats as a miss).
    for (std::uint64_t end = 1; end <= held; ++end) {
      if (!whole(end)) continue;
      const std::uint64_t key = hash_at(end);
      const std::uint32_t found = lookup(order, key);
      const auto same_ngram = [&](std::uint64_t other) {
        if (!whole(other)) return false;
        for (std::size_t back = 1; back <= order; ++back) {
          if (tokens_[other - back] != tokens_[end - back]) return false;
        }
        return true;
      };
      if (found == 0 || (found < end && same_ngram(found))) {
        fail(section, "the n-gram ending at token " + std::to_string(end) + " is " +
                          (found == 0 ? "missing" : "stored with an earlier end " + std::to_string(found)));
      }
    }
  }
}

}  // namespace ngramspec
