#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>

#include "ngramspec/token.hpp"

namespace ngramspec {

/// One record of a corpus: a request's output (or any token sequence a user supplies) and
/// its stamp, the time it was written (nanoseconds since the Unix epoch by default; any
/// number that orders records in time will do). Files order their records by stamp.
struct CorpusRecord {
  std::span<const Token> tokens;
  std::int64_t stamp = 0;
};

/// The vocabulary a corpus's tokens come from, as a corpus file records it (format version 2)
/// and a drafter knows its model's: its size (every token is below it) and a fingerprint a user
/// chooses to name the tokenizer (any number that tells tokenizers of one size apart: a hash of
/// its vocabulary file, say). 0 in either is unknown; an unknown value matches any.
struct CorpusVocabulary {
  std::uint64_t size = 0;                   ///< tokens in the vocabulary; 0: unknown
  std::uint64_t tokenizer_fingerprint = 0;  ///< the user's name for the tokenizer; 0: unset
  friend bool operator==(const CorpusVocabulary&, const CorpusVocabulary&) = default;
};

/// Whether reading a corpus file checks every section's checksum (every byte) or only its header.
enum class ChecksumCheck {
  verify,  ///< read every byte once and refuse a file whose sections fail their checksums (the default)
  skip,    ///< trust the body's bytes: for files known good (just written by this process, say); the
           ///< header, the records and the tokens kept are checked all the same
           ///< (MappedCorpus::verify_records, verify_tokens)
};

/// A corpus file could not be read or written: it is missing, truncated, corrupted, of
/// another format version, written on a machine of the other byte order, or the disk failed.
/// what() names the file, the section (when one is at fault) and what is wrong.
class CorpusFileError : public std::runtime_error {
 public:
  CorpusFileError(const std::filesystem::path& path, const std::string& section, const std::string& problem)
      : std::runtime_error(describe(path, section, problem)), path_(path), section_(section) {}

  /// The file.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// The part of the file at fault ("header", "tokens", "ngrams3", ...), or "" when the whole
  /// file is (it cannot be opened, or is of the wrong size).
  [[nodiscard]] const std::string& section() const noexcept { return section_; }

 private:
  static std::string describe(const std::filesystem::path& path, const std::string& section,
                              const std::string& problem) {
    return "corpus file '" + path.string() + "'" + (section.empty() ? "" : ", section " + section) + ": " + problem;
  }
  std::filesystem::path path_;
  std::string section_;
};

}  // namespace ngramspec
