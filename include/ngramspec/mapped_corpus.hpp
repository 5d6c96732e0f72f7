#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

#include "ngramspec/corpus_draft.hpp"
#include "ngramspec/corpus_file.hpp"
#include "ngramspec/detail/corpus_format.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec {

/// A corpus file (written by CorpusBuilder, SharedCorpus::save or `ngramspec-corpus`) mapped
/// read-only into memory: a static corpus built ahead of time from what requests will quote
/// (a code base, documentation, earlier outputs), which MatchDrafter consults beside, or
/// instead of, the live SharedCorpus.
///
/// Mapping reads the header (384 bytes; 320 in a version 1 file) and checks the file's
/// structure (sizes, section bounds, format version, byte order), nothing more: it takes microseconds whatever the file's size
/// and adds nothing to the process's private memory. The pages are the page cache's, so any
/// number of processes mapping one file share one copy, and a server starts without a build
/// step. The sections' checksums are checked by verify_checksums() (every byte, at memory
/// speed; SharedCorpus::load and `ngramspec-corpus stats` run it) and verify(); a file that
/// passes the structural checks but was corrupted since it was written can make drafts wrong
/// (the engine's verify pass rejects them; a drafter that knows the vocabulary drops tokens
/// outside it), never read out of bounds or loop: every position read from the file is
/// bounds-checked and every probe bounded.
///
/// The header records the vocabulary the tokens come from (vocabulary(); format version 2): a
/// drafter given the model's refuses a file of another (check_vocabulary()). Version 1 files
/// map too, their vocabulary unknown.
///
/// draft() finds what SharedCorpus::draft finds in a live corpus holding the same records:
/// the most recent occurrence of the longest of the context's last 3, 2 or 1 tokens, the
/// match measured backwards (up to kMaxVerify tokens, within a record) and what followed it
/// copied up to the end of that record. It never allocates or locks; at most three probes,
/// kMaxVerify comparisons and one copy.
///
/// Thread safety: immutable once mapped; any number of threads may call anything const. Move
/// only; moving keeps the mapping (drafters hold a pointer to the MappedCorpus object, which
/// must outlive them). The file may be replaced on disk meanwhile (writers rename a new file
/// over the old, so the mapping keeps the old contents); truncating it in place would make
/// reads of the lost pages fault, as for any mapped file. POSIX (mmap) only.
class MappedCorpus {
 public:
  /// Longest match measured by draft(), as SharedCorpus.
  static constexpr std::size_t kMaxVerify = detail::kCorpusMaxVerify;

  /// Maps `path`. Throws CorpusFileError naming the file, the section and the problem when it
  /// cannot be opened or is not a well-formed corpus file of this format version.
  explicit MappedCorpus(const std::filesystem::path& path);
  ~MappedCorpus();
  MappedCorpus(MappedCorpus&& other) noexcept;
  MappedCorpus& operator=(MappedCorpus&& other) noexcept;
  MappedCorpus(const MappedCorpus&) = delete;
  MappedCorpus& operator=(const MappedCorpus&) = delete;

  /// As SharedCorpus::draft: writes to `out` what followed the most recent occurrence of the
  /// last 3 (else 2, else 1) tokens of `context`, the match measured backwards up to kMaxVerify
  /// tokens (only the context's last kMaxVerify tokens are read).
  /// busy is always false.
  [[nodiscard]] CorpusDraft draft(std::span<const Token> context, std::span<Token> out) const noexcept;
  /// As SharedCorpus::draft with a hint: the match ending at `hint` (0: none) drafts when longer.
  [[nodiscard]] CorpusDraft draft(std::span<const Token> context, std::span<Token> out, std::uint64_t hint) const noexcept;
  /// draft() in two steps: the match alone ...
  [[nodiscard]] CorpusMatch find(std::span<const Token> context) const noexcept;
  /// ... (with a hint, as draft()) ...
  [[nodiscard]] CorpusMatch find(std::span<const Token> context, std::uint64_t hint) const noexcept;
  /// ... and the tokens that follow it, up to the end of its record or out.size().
  [[nodiscard]] std::size_t copy(const CorpusMatch& match, std::span<Token> out) const noexcept;

  /// Reads every byte: each section's checksum, then the structure (every token inside a
  /// recorded vocabulary, the records as verify_records() checks them, every table entry
  /// pointing at its n-gram's latest occurrence, probe runs within the recorded bound). Throws
  /// CorpusFileError naming the section and what is wrong. Looks every n-gram up, so it takes seconds per GiB
  /// (docs/BENCHMARKS.md#corpus-files measures it).
  void verify() const;
  /// The checksums alone: every byte read once, at memory speed (what a merge checks in its
  /// inputs). Throws CorpusFileError naming the section whose checksum does not match.
  void verify_checksums() const;
  /// The records alone, as verify() checks them: the first at token 0, each starting at a start
  /// bit after the previous one's start and inside the tokens held, as many start bits as
  /// records and none past the last token, stamps that never decrease, the first and last the
  /// header's. Throws CorpusFileError naming the section ("starts" or "records"), the record and
  /// the value. Reads the starts and records sections only: O(records + tokens / 64). Checksums
  /// cannot tell a record table written wrong (or forged under fresh checksums) from a good one,
  /// so whatever reads records out of a file checks them here, trusted or not:
  /// SharedCorpus::load and CorpusBuilder::add (a merge) take no file whose records verify()
  /// refuses.
  void verify_records() const;
  /// The tokens from position `from` on, as verify() checks them: each below the vocabulary size
  /// the file records (nothing to check when it records none). Throws CorpusFileError naming the
  /// "tokens" section, the token and its position. O(tokens read); checksums written over a
  /// token outside the vocabulary hold, so whatever copies tokens out of a file checks the ones
  /// it copies: SharedCorpus::load (the records it keeps) and CorpusBuilder::add (every token).
  void verify_tokens(std::size_t from = 0) const;

  /// Tokens held.
  [[nodiscard]] std::size_t size() const noexcept { return static_cast<std::size_t>(header_->tokens); }
  /// Records held (the oldest may be the end of a longer one, cut by a byte cap).
  [[nodiscard]] std::size_t records() const noexcept { return static_cast<std::size_t>(header_->records); }
  /// Record `index` (oldest first): its tokens (a view into the mapping) and stamp. Throws
  /// std::out_of_range naming the index. On a corrupted file the view stays inside the
  /// tokens held.
  [[nodiscard]] CorpusRecord record(std::size_t index) const;
  /// The oldest record that a corpus of `capacity_tokens` keeps of this file (SharedCorpus::load):
  /// the most recent records that fit, the oldest of them possibly longer than the room left
  /// (the corpus keeps its end). records() when capacity_tokens is 0 or there is no record.
  [[nodiscard]] std::size_t first_record_kept(std::size_t capacity_tokens) const;
  /// Every token held, oldest first.
  [[nodiscard]] std::span<const Token> tokens() const noexcept { return tokens_; }
  /// Stamps of the oldest and the newest record (0 when empty).
  [[nodiscard]] std::int64_t first_stamp() const noexcept { return header_->first_stamp; }
  [[nodiscard]] std::int64_t last_stamp() const noexcept { return header_->last_stamp; }
  /// The vocabulary the file records (a version 1 file's is unknown: {0, 0}).
  [[nodiscard]] const CorpusVocabulary& vocabulary() const noexcept { return vocabulary_; }
  /// The file's format version (docs/CORPUS_FORMAT.md): 1 or 2.
  [[nodiscard]] std::uint32_t format_version() const noexcept { return version_; }
  /// Throws CorpusFileError naming the file and both values when `model` (a drafter's vocabulary)
  /// and the file's vocabulary() disagree: both sizes known and different, or both fingerprints
  /// set and different. An unknown value on either side agrees with anything.
  void check_vocabulary(const CorpusVocabulary& model) const;
  /// N-grams of `order` tokens (1 to 3) in the file's tables.
  [[nodiscard]] std::uint64_t ngrams(std::size_t order) const noexcept;
  /// The file's size.
  [[nodiscard]] std::uint64_t file_bytes() const noexcept { return bytes_; }
  /// The file mapped.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  using Slot = detail::corpus_format::Slot;
  struct Table {
    const Slot* slots = nullptr;
    std::uint64_t count = 0;
    std::uint32_t max_probe = 0;
  };
  [[nodiscard]] std::uint32_t lookup(std::size_t order, std::uint64_t key) const noexcept;
  [[nodiscard]] bool starts_record(std::uint64_t position) const noexcept {
    return ((starts_[position / 64] >> (position % 64)) & 1U) != 0;
  }
  void release() noexcept;
  struct Index;  // what detail::longest_suffix_match reads

  std::filesystem::path path_;
  const std::byte* base_ = nullptr;
  std::uint64_t bytes_ = 0;
  const detail::corpus_format::Header* header_ = nullptr;
  std::span<const Token> tokens_;
  const std::uint64_t* starts_ = nullptr;
  std::span<const detail::corpus_format::RecordEntry> records_;
  std::array<Table, detail::corpus_format::kMaxOrder> tables_{};
  std::uint32_t version_ = 0;
  CorpusVocabulary vocabulary_;
};

}  // namespace ngramspec
