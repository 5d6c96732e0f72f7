#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ngramspec/token.hpp"

namespace ngramspec::replay {

/// One recorded generation: what the model was given and what it answered.
struct TokenStream {
  std::string id;
  std::string category;
  std::vector<Token> prompt;
  std::vector<Token> output;
};

/// `text` as a message shows it: printable ASCII as is, a backslash doubled, any other byte as
/// \xNN (so a NUL or a control character neither cuts the message short nor garbles the
/// terminal); longer than `max_bytes`, its first `max_bytes` bytes and "...".
[[nodiscard]] std::string escape_for_message(std::string_view text, std::size_t max_bytes = 40);

/// Parses the streams TSV format (one record per line: id, category, prompt ids, output ids,
/// TAB-separated; ids space-separated). Throws std::runtime_error naming the source, the line
/// and what is wrong. Empty lines are skipped.
[[nodiscard]] std::vector<TokenStream> parse_streams(std::istream& in, std::string_view source_name);
/// Reads a streams TSV file; throws std::runtime_error when it cannot be opened (a directory
/// included), cannot be parsed or holds no record ("FILE: no records").
[[nodiscard]] std::vector<TokenStream> read_streams(const std::string& path);

/// A slice of records in file order: [begin, end) of `count`, each bound a record index or a
/// percentage of the count (rounded down); an empty bound is the start or the end.
struct RecordRange {
  std::string begin;  ///< "" (0), "N" or "P%"
  std::string end;    ///< "" (count), "N" or "P%"
  /// The indices [first, last) of `count` records. Throws std::invalid_argument when begin > end
  /// or when the range selects no record (first == last): a selection that replays or builds
  /// nothing is a mistake, whichever tool it is given to.
  [[nodiscard]] std::pair<std::size_t, std::size_t> resolve(std::size_t count) const;
  [[nodiscard]] bool all() const noexcept { return begin.empty() && end.empty(); }
};
/// Parses "START:END" ("0:100", ":50%", "50%:", "10:20%"); throws std::invalid_argument naming
/// `option` and the text when it is malformed (each bound: digits, or digits then % up to 100).
[[nodiscard]] RecordRange parse_record_range(std::string_view option, std::string_view text);
/// The records of `streams` that `range` names.
[[nodiscard]] std::vector<TokenStream> slice_records(std::vector<TokenStream> streams, const RecordRange& range);

/// Parameters of a synthetic stream set.
struct SyntheticSpec {
  std::string kind;             ///< "periodic", "random" or "mixture"
  std::size_t period = 0;       ///< periodic / mixture: the repeated unit's length
  double noise = 0.0;           ///< periodic: probability that a token is replaced by a random one
  std::size_t output_length = 2048;
  std::size_t samples = 4;
  std::uint64_t seed = 1;
  std::size_t vocab = 32000;
};

/// Parses "periodic:P[:noise]", "random" or "mixture:P"; throws std::invalid_argument.
[[nodiscard]] SyntheticSpec parse_synthetic(std::string_view text);

/// Builds the streams of a synthetic spec. Periodic streams repeat a random unit of `period`
/// tokens, the prompt holding the first two periods so the output is measured after them;
/// random streams draw uniformly from the vocabulary (prompt of 64 tokens); mixtures alternate
/// fresh random runs with copies of earlier runs of `period` tokens.
[[nodiscard]] std::vector<TokenStream> make_synthetic(const SyntheticSpec& spec);

}  // namespace ngramspec::replay
