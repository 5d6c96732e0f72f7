#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ngramspec/corpus_builder.hpp"
#include "token_streams.hpp"

namespace ngramspec::corpus_tool {

/// The subcommand of ngramspec-corpus.
enum class Command { none, build, merge, stats, verify };

/// How `build` reads an input (--format).
enum class InputFormat {
  automatic,  ///< by the file's name: .tsv -> tsv, .u32 or .bin -> u32, anything else ids
  tsv,        ///< the streams TSV: id TAB category TAB prompt ids TAB output ids
  ids,        ///< one record per non-empty line, decimal token ids separated by spaces or tabs
  u32,        ///< raw little-endian 32-bit token ids, the whole file one record
};

/// Which tokens of a streams TSV row become records (--field).
enum class TsvField {
  output,  ///< the output: what a live corpus collects (earlier requests' outputs)
  prompt,  ///< the prompt
  both,    ///< the prompt, then the output: two records
};

/// The command line of ngramspec-corpus, parsed and checked (see its --help).
struct CorpusOptions {
  Command command = Command::none;  ///< none only with `help` (the overall usage)
  bool help = false;                ///< --help / -h: print the usage (of `command`, if any) and do nothing else
  std::string output;               ///< build, merge: OUT
  /// build: the --from files; merge: the shards; stats: the one FILE; verify: the files. In order.
  std::vector<std::string> inputs;
  InputFormat format = InputFormat::automatic;  ///< build: --format
  TsvField field = TsvField::output;            ///< build: --field
  /// build: the input records kept; stats: the query records measured (--records; all by default).
  replay::RecordRange records;
  std::uint64_t max_bytes = CorpusBuilder::kNoCap;  ///< build, merge: --max-bytes (checked by CorpusBuilder)
  std::optional<std::int64_t> first_stamp;          ///< build: --first-stamp; none = the time now
  bool quiet = false;                               ///< build, merge: --quiet, no progress on stderr
  bool verify_shards = true;                        ///< merge: off with --no-verify
  /// build, merge: --vocab-size and --tokenizer-fingerprint, recorded in OUT (0: unknown / unset;
  /// merge then takes what the shards record).
  CorpusVocabulary vocabulary;
  std::string queries;                              ///< stats: --queries, a streams TSV ("" = none)
  bool json = false;                                ///< stats: --json
};

/// Parses the arguments after the program name. Throws std::invalid_argument naming the
/// problem (and the option and its value, if one is at fault) for a missing or unknown
/// subcommand, an unknown option, a missing or malformed value, an option given twice, or
/// missing or extra file names. Stops at --help / -h, returning what it parsed with `help` set.
[[nodiscard]] CorpusOptions parse_corpus_options(std::span<const std::string_view> args);

/// Parses a byte size: a whole number of bytes, or one followed by K, M or G (or KiB, MiB,
/// GiB), powers of 1024. Throws std::invalid_argument naming `option` and the text when it is
/// malformed or above 2^64 - 1.
[[nodiscard]] std::uint64_t parse_byte_size(std::string_view option, std::string_view text);

/// The format an input of `path` is read in under `format` (automatic: by its name).
[[nodiscard]] InputFormat resolve_format(InputFormat format, std::string_view path);

[[nodiscard]] const char* to_string(Command command) noexcept;
[[nodiscard]] const char* to_string(InputFormat format) noexcept;
[[nodiscard]] const char* to_string(TsvField field) noexcept;

/// The --help text: the overall one for Command::none, else the subcommand's.
[[nodiscard]] const char* usage(Command command) noexcept;

}  // namespace ngramspec::corpus_tool
