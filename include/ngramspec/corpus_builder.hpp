#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <span>
#include <vector>

#include "ngramspec/corpus_file.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec {

class MappedCorpus;

/// What CorpusBuilder::write wrote.
struct CorpusFileSummary {
  std::uint64_t tokens = 0;      ///< tokens held (after the byte cap)
  std::uint64_t records = 0;     ///< records held (the oldest may be cut by the cap)
  std::uint64_t dropped_tokens = 0;  ///< tokens added but left out: the oldest, beyond the cap
  std::uint64_t file_bytes = 0;
};

/// Builds a corpus file from records: token sequences a user supplies (a code base's or
/// documentation's tokens, earlier outputs), shards to merge (add(const MappedCorpus&)), or a
/// live SharedCorpus (SharedCorpus::save).
///
/// What a file holds is defined by its records alone. write() orders them by stamp (records
/// with equal stamps by their tokens), drops a record equal to the one before it (same stamp,
/// same tokens), and keeps the most recent tokens that fit the byte cap; the oldest record
/// kept may be cut to its end. So a merge's result depends only on the set of records in its
/// inputs: not on the order of the shards, nor on how records were grouped into shards, and a
/// record present in two shards (a shard merged twice) is kept once. Shards disjoint in time
/// merge into their concatenation in time order; overlapping ones interleave by stamp. The
/// same records give the same bytes. A record cut by a cap is another record than the whole
/// one (same stamp, fewer tokens): merging a capped file with its uncapped source keeps both.
///
/// The byte cap bounds the file: the tokens kept are the most that fit even if no n-gram
/// repeated (52 bytes per token and 16 per record, worst case); text that repeats comes out
/// smaller. write() needs memory of about 26 bytes per token held (a copy of the tokens and the
/// largest table) beyond what add() copied.
class CorpusBuilder {
 public:
  /// No cap: up to 2^32 - 1 tokens (positions in the file are 32-bit).
  static constexpr std::uint64_t kNoCap = std::numeric_limits<std::uint64_t>::max();
  /// Worst-case file bytes per token held: the token and three tables of at most two 8-byte
  /// slots per token, and a start bit.
  static constexpr std::uint64_t kMaxBytesPerToken = 4 + 3 * 2 * 8;
  /// File bytes per record held.
  static constexpr std::uint64_t kBytesPerRecord = 16;

  /// Reports work done: the phase ("order", "count", "ngrams1".."ngrams3", "write"), and how
  /// far it is in that phase as done out of total: at the start of each phase and about every
  /// four million tokens within one.
  using Progress = std::function<void(const char* phase, std::uint64_t done, std::uint64_t total)>;

  /// A builder whose files hold at most `max_file_bytes` bytes and record `vocabulary` (the
  /// model's: its size and tokenizer fingerprint; {} unknown). Throws std::invalid_argument
  /// naming the value when max_file_bytes is below min_file_bytes().
  explicit CorpusBuilder(std::uint64_t max_file_bytes = kNoCap, CorpusVocabulary vocabulary = {});

  /// Adds a record (copies the tokens). An empty record is ignored. Throws
  /// std::invalid_argument naming the token and its index, adding nothing, when a token is not
  /// below a known vocabulary's size.
  void add(std::span<const Token> tokens, std::int64_t stamp);
  /// Adds every record of a file (a shard to merge), stamps kept. Throws CorpusFileError naming
  /// the file and both values, adding nothing, when its vocabulary disagrees with the builder's
  /// (MappedCorpus::check_vocabulary), CorpusFileError naming the record and the value when its
  /// records are not what verify() accepts (MappedCorpus::verify_records; the checksums are the
  /// caller's to check), and std::invalid_argument naming the file, the token and
  /// its position when a token is not below the builder's known vocabulary size.
  void add(const MappedCorpus& file);

  /// Writes the file: to a temporary file beside `path`, flushed, then renamed over it, so a
  /// reader never maps a half-written file and a mapping of the old one stays valid. Throws
  /// CorpusFileError when the disk fails. The builder keeps its records and may write again.
  CorpusFileSummary write(const std::filesystem::path& path, const Progress& progress = {}) const;

  /// Tokens and records added so far.
  [[nodiscard]] std::uint64_t tokens() const noexcept { return tokens_.size(); }
  [[nodiscard]] std::uint64_t records() const noexcept { return records_.size(); }
  [[nodiscard]] std::uint64_t max_file_bytes() const noexcept { return max_file_bytes_; }
  /// The vocabulary the files record.
  [[nodiscard]] const CorpusVocabulary& vocabulary() const noexcept { return vocabulary_; }
  /// Forgets every record.
  void clear() noexcept;

  /// The smallest cap accepted: room for the header, the sections' alignment and one token.
  [[nodiscard]] static std::uint64_t min_file_bytes() noexcept;
  /// Most tokens a file of `max_file_bytes` holds, at `records` records.
  [[nodiscard]] static std::uint64_t tokens_that_fit(std::uint64_t max_file_bytes, std::uint64_t records) noexcept;

 private:
  struct Added {
    std::uint64_t first = 0;  // into tokens_
    std::uint64_t size = 0;
    std::int64_t stamp = 0;
  };
  std::uint64_t max_file_bytes_;
  CorpusVocabulary vocabulary_;
  std::vector<Token> tokens_;
  std::vector<Added> records_;
};

}  // namespace ngramspec
