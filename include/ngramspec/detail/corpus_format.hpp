#pragma once

// The on-disk layout of a corpus file (docs/CORPUS_FORMAT.md), shared by the writer
// (CorpusBuilder), the reader (MappedCorpus) and the tools. Every field is little-endian
// as written by a little-endian machine; the byte-order field lets a reader on another
// machine say so instead of misreading.

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace ngramspec::detail::corpus_format {

inline constexpr std::array<char, 8> kMagic = {'N', 'G', 'S', 'P', 'C', 'O', 'R', 'P'};
// Version 2 adds the vocabulary (Header::vocab_size, tokenizer_fingerprint) to the header;
// readers read both, a version 1 file's vocabulary being unknown (0). Writers write version 2.
inline constexpr std::uint32_t kVersion = 2;
inline constexpr std::uint32_t kFirstVersion = 1;
inline constexpr std::uint32_t kByteOrderMark = 0x01020304U;
inline constexpr std::uint32_t kTokenBytes = 4;
inline constexpr std::uint32_t kMaxOrder = 3;
inline constexpr std::size_t kHeaderBytes = 384;     // version 2
inline constexpr std::size_t kHeaderBytesV1 = 320;   // version 1: the fields up to the sections, then its checksum
inline constexpr std::size_t kSectionAlign = 64;
// Positions are stored in 32 bits.
inline constexpr std::uint64_t kMaxTokens = 0xffffffffULL;

enum class SectionId : std::uint32_t {
  tokens = 1,   // u32 per token, oldest first
  starts = 2,   // u64 words: bit p % 64 of word p / 64 is set when a record starts at token p
  records = 3,  // RecordEntry per record, in file order
  ngrams1 = 4,  // Slot tables: the latest end of each n-gram of 1, 2 and 3 tokens
  ngrams2 = 5,
  ngrams3 = 6,
};
inline constexpr std::size_t kSections = 6;

[[nodiscard]] constexpr std::string_view section_name(std::size_t index) noexcept {
  constexpr std::array<std::string_view, kSections> names = {"tokens", "starts", "records",
                                                             "ngrams1", "ngrams2", "ngrams3"};
  return index < kSections ? names[index] : std::string_view("unknown");
}

struct RecordEntry {
  std::uint64_t first = 0;  // position of its first token
  std::int64_t stamp = 0;
};
static_assert(sizeof(RecordEntry) == 16);

// A table slot: the n-gram hash's low 32 bits as a fingerprint and the position after the
// n-gram's most recent occurrence (0: empty), as MatchDrafter's LastEndTable.
struct Slot {
  std::uint32_t print = 0;
  std::uint32_t end = 0;
};
static_assert(sizeof(Slot) == 8);

struct SectionEntry {
  std::uint32_t id = 0;
  std::uint32_t max_probe = 0;  // tables: the longest probe run any stored key needs (slots past home)
  std::uint64_t offset = 0;     // from the start of the file, a multiple of kSectionAlign
  std::uint64_t bytes = 0;
  std::uint64_t checksum = 0;   // checksum() of the section's bytes
  std::uint64_t count = 0;      // tokens, start words, records, or n-grams stored in a table
};
static_assert(sizeof(SectionEntry) == 40);

struct Header {
  std::array<char, 8> magic{};
  std::uint32_t version = 0;
  std::uint32_t byte_order = 0;
  std::uint32_t header_bytes = 0;
  std::uint32_t token_bytes = 0;
  std::uint32_t max_order = 0;
  std::uint32_t section_count = 0;
  std::uint64_t tokens = 0;
  std::uint64_t records = 0;
  std::int64_t first_stamp = 0;  // stamp of the oldest record (0 when empty)
  std::int64_t last_stamp = 0;   // stamp of the newest record
  std::uint64_t file_bytes = 0;
  std::array<SectionEntry, kSections> sections{};
  // Version 2 from here (a version 1 header holds its checksum at offset 312, where vocab_size is).
  std::uint64_t vocab_size = 0;             // tokens of the model's vocabulary; 0: unknown
  std::uint64_t tokenizer_fingerprint = 0;  // a number the user chose to name the tokenizer; 0: unset
  std::array<std::uint64_t, 6> reserved{};  // zero
  std::uint64_t header_checksum = 0;        // checksum() of every byte before it
};
static_assert(sizeof(Header) == kHeaderBytes);
static_assert(offsetof(Header, sections) == 72);
static_assert(offsetof(Header, vocab_size) == kHeaderBytesV1 - 8);
// Where each version keeps its header's checksum: after every other byte of its header.
[[nodiscard]] constexpr std::size_t checksum_offset(std::uint32_t version) noexcept {
  return version == kFirstVersion ? kHeaderBytesV1 - 8 : offsetof(Header, header_checksum);
}
[[nodiscard]] constexpr std::size_t header_bytes(std::uint32_t version) noexcept {
  return version == kFirstVersion ? kHeaderBytesV1 : kHeaderBytes;
}

// The slot where a lookup of `key` starts in a table of `slots` slots: the top bits of the
// key times the golden-ratio constant, scaled to the table (any size, not only powers of two).
[[nodiscard]] constexpr std::uint64_t home(std::uint64_t key, std::uint64_t slots) noexcept {
  __extension__ using Wide = unsigned __int128;
  const Wide mixed = static_cast<Wide>(key * 0x9e3779b97f4a7c15ULL) * slots;
  return static_cast<std::uint64_t>(mixed >> 64);
}
[[nodiscard]] constexpr std::uint32_t fingerprint(std::uint64_t key) noexcept { return static_cast<std::uint32_t>(key); }

// The 64-bit checksum of a section: four lanes over 32-byte blocks (zero-padded at the end),
// each lane h = rotl((h ^ word) * P, 31), folded with the length and finished with a
// murmur-style avalanche. Fast enough to check a GiB in a fraction of a second; a checksum
// against corruption, not a cryptographic hash.
[[nodiscard]] inline std::uint64_t checksum(std::span<const std::byte> bytes) noexcept {
  constexpr std::uint64_t kPrime = 0x9e3779b185ebca87ULL;
  std::array<std::uint64_t, 4> lane = {0x243f6a8885a308d3ULL, 0x13198a2e03707344ULL, 0xa4093822299f31d0ULL,
                                       0x082efa98ec4e6c89ULL};
  const auto mix = [](std::uint64_t h, std::uint64_t word) { return std::rotl((h ^ word) * kPrime, 31); };
  const std::size_t whole = bytes.size() / 32 * 32;
  for (std::size_t at = 0; at < whole; at += 32) {
    for (std::size_t i = 0; i < 4; ++i) {
      std::uint64_t word = 0;
      std::memcpy(&word, bytes.data() + at + 8 * i, 8);
      lane[i] = mix(lane[i], word);
    }
  }
  if (whole < bytes.size()) {
    std::array<std::byte, 32> tail{};
    std::memcpy(tail.data(), bytes.data() + whole, bytes.size() - whole);
    for (std::size_t i = 0; i < 4; ++i) {
      std::uint64_t word = 0;
      std::memcpy(&word, tail.data() + 8 * i, 8);
      lane[i] = mix(lane[i], word);
    }
  }
  std::uint64_t h = lane[0] ^ std::rotl(lane[1], 16) ^ std::rotl(lane[2], 32) ^ std::rotl(lane[3], 48) ^
                    static_cast<std::uint64_t>(bytes.size());
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

}  // namespace ngramspec::detail::corpus_format
