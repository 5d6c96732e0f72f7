#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "corpus_options.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec::corpus_tool {

/// Records read from `build`'s inputs, in input order, their tokens in one pool. Input
/// records (a TSV row, an id line, a u32 file) give one record each, a TSV row under
/// --field both two; --records slices input records, so a row's prompt and output stay
/// together.
class RecordPool {
 public:
  /// Appends tokens to the record being read (copied).
  void append(std::span<const Token> tokens);
  /// Ends the record being read (an empty one is kept, so the records' indices, and thus
  /// their stamps, do not depend on what they hold).
  void end_record();
  /// Ends the current input record: the records ended since the last call form one.
  void end_input_record();

  /// Records and input records held.
  [[nodiscard]] std::size_t records() const noexcept { return ends_.size(); }
  [[nodiscard]] std::size_t input_records() const noexcept { return input_ends_.size(); }
  [[nodiscard]] std::uint64_t tokens() const noexcept { return tokens_.size(); }
  /// Record `index`'s tokens.
  [[nodiscard]] std::span<const Token> record(std::size_t index) const noexcept;
  /// The records [first, last) of the input records [first_input, last_input).
  [[nodiscard]] std::pair<std::size_t, std::size_t> records_of(std::size_t first_input,
                                                               std::size_t last_input) const noexcept;

 private:
  std::vector<Token> tokens_;
  std::vector<std::uint64_t> ends_;        // record i: tokens_[ends_[i - 1], ends_[i])
  std::vector<std::size_t> input_ends_;    // input record j: records [input_ends_[j - 1], input_ends_[j])
};

/// Reports reading: bytes of the current file read so far (each call for the same file
/// gives a larger count).
using ReadProgress = std::function<void(std::uint64_t bytes)>;

/// Reads a file of token id lines (InputFormat::ids): one record per line that holds a token
/// id, ids (decimal, 0 to 4294967295) separated by spaces or tabs; a line ending in CR LF is
/// read as one ending in LF, and lines of only spaces and tabs are skipped. Throws
/// std::runtime_error naming `source`, the line and the bad text.
void parse_id_lines(std::istream& in, std::string_view source, RecordPool& pool);

/// Reads the input `path` in `format` (not automatic) into `pool`: each of its input records
/// ended. Throws std::runtime_error naming the file (and the line, for text) when it cannot be
/// read, is malformed, is a u32 file whose size is not a multiple of 4, or holds no record.
void read_input(const std::string& path, InputFormat format, TsvField field, RecordPool& pool,
                const ReadProgress& progress = {});

}  // namespace ngramspec::corpus_tool
