#include "corpus_options.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>
#include <stdexcept>
#include <string>
#include <system_error>

#include "command_line.hpp"
#include "ngramspec/detail/parse_number.hpp"

namespace ngramspec::corpus_tool {
namespace {

constexpr const char* kOverallUsage = R"(usage: ngramspec-corpus COMMAND [options]
Builds, merges, inspects and checks corpus files: the records (token sequences with their
stamps, the times they were written) that MatchDrafter drafts from through MappedCorpus, a
file mapped read-only into any number of server processes.

commands:
  build OUT --from FILE ...   write the corpus file OUT from token files (streams TSV, token
                              id lines or raw 32-bit ids)
  merge OUT SHARD ...         merge corpus files into one
  stats FILE                  what a corpus file holds, and with --queries how well it drafts
  verify FILE ...             check every byte of corpus files: checksums and structure
  help [COMMAND]              this text, or a command's

Run 'ngramspec-corpus COMMAND --help' for a command's options. Exit status: 0 on success, 1
when an input or output fails (a file missing, malformed or corrupted; a disk error; verify
finding a bad file), 2 for a mistake on the command line.
)";

constexpr const char* kBuildUsage = R"(usage: ngramspec-corpus build OUT --from FILE [--from FILE ...] [options]
Reads records (token sequences) from the inputs and writes them to the corpus file OUT. OUT is
written to a temporary file beside it, flushed, then renamed over it: a server mapping the old
file keeps reading it, and no reader ever sees half a file.

inputs:
  --from FILE          an input file (repeatable, each file once); records are taken in the
                       order given
  --format FORMAT      how every input is read (default auto):
                         tsv   the streams TSV: one record per line, id TAB category TAB
                               prompt ids TAB output ids, ids separated by spaces
                         ids   one record per non-empty line: token ids (0 to 4294967295)
                               separated by spaces or tabs
                         u32   raw little-endian 32-bit token ids: the whole file one record
                         auto  by the file's name: .tsv -> tsv, .u32 or .bin -> u32, else ids
  --field FIELD        of each streams TSV row: output (default; what a live corpus collects:
                       earlier requests' outputs), prompt, or both (the prompt, then the
                       output: two records)
  --records START:END  keep only these input records (TSV rows, id lines, u32 files) of all
                       inputs together, in input order: each bound an index or a percentage,
                       either may be empty (e.g. :50%, 50%:, 100:200; default all)
output:
  --max-bytes SIZE     the most bytes OUT may take: bytes, or a number with K, M or G (KiB,
                       MiB, GiB; powers of 1024), e.g. 512M. Over the cap the most recent
                       records stay and the oldest kept may be cut to its end; the cap counts
                       the worst case (52 bytes a token, 16 a record), so text that repeats
                       comes out smaller. Default: no cap (up to 4294967295 tokens).
  --first-stamp N      the stamp of the inputs' first record: the records get N, N + 1, N + 2,
                       ... in input order (counted before --records, so slices of one input
                       built with the same N merge into the whole). Default: the time now in
                       nanoseconds since the Unix epoch, so shards built at different times
                       are disjoint in time. Pass it for a reproducible file: the same inputs
                       and N give the same bytes.
  --vocab-size N       the model's vocabulary size, recorded in OUT (1 to 4294967296): a
                       token not below it is refused, naming it, and a drafter given another
                       vocabulary size refuses OUT. Default: unknown (drafters that know the
                       vocabulary then drop drafts outside it)
  --tokenizer-fingerprint X
                       a number you choose to name the tokenizer (decimal, or hexadecimal
                       with 0x; not 0), recorded in OUT: a drafter given another refuses OUT.
                       Default: unset
  --quiet              no progress lines on stderr (builds that take under a second print none)

Prints one line on stdout: tokens and records held, tokens dropped over --max-bytes, the
file's bytes, and the time taken.
)";

constexpr const char* kMergeUsage = R"(usage: ngramspec-corpus merge OUT SHARD [SHARD ...] [options]
Merges corpus files (shards built by 'ngramspec-corpus build', CorpusBuilder or
SharedCorpus::save) into the corpus file OUT, written as build writes it (a temporary file
renamed over OUT; OUT may be one of the shards).

What a corpus file holds is defined by its records alone, so the merge:
  - depends only on the set of records in the shards: not on the order the shards are given
    in, nor on how the records were grouped into shards; the same records give the same bytes
  - keeps a record present in several shards once (merging a shard twice, or a shard with a
    file it was merged into, changes nothing; but a record that --max-bytes cut to its end is
    another record than the whole one, and a merge without the cap keeps both)
  - concatenates shards disjoint in time in time order; overlapping ones interleave by stamp
  - over --max-bytes keeps the most recent records, the oldest kept perhaps cut to its end

options:
  --max-bytes SIZE     the most bytes OUT may take: bytes, or a number with K, M or G (KiB,
                       MiB, GiB; powers of 1024). Default: no cap (up to 4294967295 tokens)
  --no-verify          skip checking each shard's checksums before merging (by default a
                       corrupted shard fails the merge instead of spreading into OUT); a
                       shard whose records verify refuses fails it either way
  --vocab-size N       the vocabulary size recorded in OUT (1 to 4294967296). Default: the one
                       the shards record; shards that record different ones (or another than
                       this) are refused, naming both, as is a token not below it
  --tokenizer-fingerprint X
                       the tokenizer fingerprint recorded in OUT (decimal, or hexadecimal with
                       0x; not 0). Default: the one the shards record; shards that record
                       different ones (or another than this) are refused, naming both
  --quiet              no progress lines on stderr (merges that take under a second print none)

Prints one line on stdout: tokens and records held, tokens dropped over --max-bytes, the
file's bytes, and the time taken.
)";

constexpr const char* kStatsUsage = R"(usage: ngramspec-corpus stats FILE [--queries STREAMS.tsv [--records START:END]] [--json]
What the corpus file FILE holds: tokens, records, bytes (and per token), the stamps of its
oldest and newest records, its format version and the vocabulary it records (size and
tokenizer fingerprint, or unknown), and for n-grams of 1, 2 and 3 tokens:
  n-grams       distinct n-grams stored in the file's table
  occurrences   n-grams lying inside one record, counted with repeats
  hit rate      the share of occurrences that repeat an earlier one: 1 - n-grams / occurrences

options:
  --queries FILE       a streams TSV: measure how FILE drafts for its records' outputs. At every
                       position of an output after its first token, the output so far (its
                       last 64 tokens; the prompt is left out) is looked up as MatchDrafter
                       looks up a corpus (MappedCorpus::find). Reports the positions, the share
                       matched by at least 1, 2 and 3 tokens, the share with a draft, and the
                       first-draft hit rate: the share of positions whose first drafted token
                       is the output's next one.
  --records START:END  measure only these records of --queries: each bound an index or a
                       percentage, either may be empty (e.g. 50%:; default all)
  --json               one JSON object instead of the table

Every section's checksum is verified first (every byte read once, at memory speed), then the
records as verify checks them: a file damaged since it was written, or whose records verify
refuses, is refused, naming the section, and stats exits 1.
)";

constexpr const char* kVerifyUsage = R"(usage: ngramspec-corpus verify FILE [FILE ...]
Reads every byte of each corpus file: each section's checksum, then the structure (records in
order, start bits, every n-gram table entry where a lookup finds it). Takes about a second per
GiB. Prints 'FILE: ok (N tokens, R records, B bytes; vocab size V, tokenizer fingerprint F)'
for each good file on stdout (V and F 'unknown' and 'unset' when the file records none; a token
not below V is a failure) and what is
wrong with each bad one (the file, its section and the problem) on stderr; exits 0 only when
every file passes, 1 otherwise.
)";

std::string in_quotes(std::string_view text) { return "'" + std::string(text) + "'"; }

std::optional<Command> command_named(std::string_view name) {
  for (const Command c : {Command::build, Command::merge, Command::stats, Command::verify}) {
    if (name == to_string(c)) return c;
  }
  return std::nullopt;
}

[[noreturn]] void unknown_command(std::string_view name) {
  throw std::invalid_argument("unknown command " + in_quotes(name) +
                              ": expected build, merge, stats or verify (see --help)");
}

std::string see_help(Command command) {
  return std::string("(see ngramspec-corpus ") + to_string(command) + " --help)";
}

// Options each command takes (name, whether it takes a value).
struct OptionSpec {
  std::string_view name;
  bool value;
};
constexpr std::array<OptionSpec, 9> kBuildOptions = {{{"--from", true},
                                                      {"--format", true},
                                                      {"--field", true},
                                                      {"--records", true},
                                                      {"--max-bytes", true},
                                                      {"--first-stamp", true},
                                                      {"--vocab-size", true},
                                                      {"--tokenizer-fingerprint", true},
                                                      {"--quiet", false}}};
constexpr std::array<OptionSpec, 5> kMergeOptions = {{{"--max-bytes", true},
                                                      {"--no-verify", false},
                                                      {"--vocab-size", true},
                                                      {"--tokenizer-fingerprint", true},
                                                      {"--quiet", false}}};
constexpr std::array<OptionSpec, 3> kStatsOptions = {{{"--queries", true}, {"--records", true}, {"--json", false}}};

std::span<const OptionSpec> options_of(Command command) {
  switch (command) {
    case Command::build: return kBuildOptions;
    case Command::merge: return kMergeOptions;
    case Command::stats: return kStatsOptions;
    default: return {};
  }
}

InputFormat parse_format(std::string_view text) {
  for (const InputFormat f : {InputFormat::automatic, InputFormat::tsv, InputFormat::ids, InputFormat::u32}) {
    if (text == to_string(f)) return f;
  }
  throw std::invalid_argument("--format: " + in_quotes(text) + " is not a format: expected auto, tsv, ids or u32");
}

TsvField parse_field(std::string_view text) {
  for (const TsvField f : {TsvField::output, TsvField::prompt, TsvField::both}) {
    if (text == to_string(f)) return f;
  }
  throw std::invalid_argument("--field: " + in_quotes(text) + " is not a field: expected output, prompt or both");
}

std::int64_t parse_stamp(std::string_view option, std::string_view text) {
  const ngramspec::detail::ParsedNumber<std::int64_t> stamp = ngramspec::detail::parse_whole<std::int64_t>(text);
  if (stamp.status == ngramspec::detail::NumberStatus::out_of_range) {
    throw std::invalid_argument(std::string(option) + ": " + in_quotes(text) +
                                " is out of range: it must be from -9223372036854775808 to 9223372036854775807");
  }
  if (!stamp.ok()) {
    throw std::invalid_argument(std::string(option) + ": " + in_quotes(text) +
                                " is not a whole number (a stamp, e.g. nanoseconds since the Unix epoch)");
  }
  return stamp.value;
}

// --vocab-size: 1 to 2^32 (tokens are 32-bit, so 2^32 admits every one).
std::uint64_t parse_vocab_size(std::string_view text) {
  const ngramspec::detail::ParsedNumber<std::uint64_t> size = ngramspec::detail::parse_whole<std::uint64_t>(text);
  const std::uint64_t value = size.value;
  if (!size.ok() || value == 0 || value > (std::uint64_t{1} << 32)) {
    throw std::invalid_argument("--vocab-size: " + in_quotes(text) +
                                " is not a vocabulary size: expected a whole number from 1 to 4294967296");
  }
  return value;
}

// --tokenizer-fingerprint: a nonzero 64-bit number, decimal or 0x hexadecimal.
std::uint64_t parse_fingerprint(std::string_view text) {
  const bool hexadecimal = text.starts_with("0x") || text.starts_with("0X");
  const std::string_view digits = hexadecimal ? text.substr(2) : text;
  const ngramspec::detail::ParsedNumber<std::uint64_t> fingerprint = ngramspec::detail::parse_whole<std::uint64_t>(digits, hexadecimal ? 16 : 10);
  const std::uint64_t value = fingerprint.value;
  if (!fingerprint.ok() || value == 0) {
    throw std::invalid_argument("--tokenizer-fingerprint: " + in_quotes(text) +
                                " is not a fingerprint: expected a nonzero whole number below 2^64, decimal or "
                                "hexadecimal with 0x");
  }
  return value;
}

std::uint64_t parse_max_bytes(std::string_view text) {
  const std::uint64_t bytes = parse_byte_size("--max-bytes", text);
  try {
    const CorpusBuilder check(bytes);
  } catch (const std::invalid_argument& e) {
    std::string what = e.what();
    const std::string_view prefix = "ngramspec::CorpusBuilder: ";
    if (what.rfind(prefix, 0) == 0) what.erase(0, prefix.size());
    throw std::invalid_argument("--max-bytes: " + in_quotes(text) + " is too small: " + what);
  }
  return bytes;
}

}  // namespace

const char* to_string(Command command) noexcept {
  switch (command) {
    case Command::build: return "build";
    case Command::merge: return "merge";
    case Command::stats: return "stats";
    case Command::verify: return "verify";
    case Command::none: break;
  }
  return "none";
}

const char* to_string(InputFormat format) noexcept {
  switch (format) {
    case InputFormat::tsv: return "tsv";
    case InputFormat::ids: return "ids";
    case InputFormat::u32: return "u32";
    case InputFormat::automatic: break;
  }
  return "auto";
}

const char* to_string(TsvField field) noexcept {
  switch (field) {
    case TsvField::prompt: return "prompt";
    case TsvField::both: return "both";
    case TsvField::output: break;
  }
  return "output";
}

const char* usage(Command command) noexcept {
  switch (command) {
    case Command::build: return kBuildUsage;
    case Command::merge: return kMergeUsage;
    case Command::stats: return kStatsUsage;
    case Command::verify: return kVerifyUsage;
    case Command::none: break;
  }
  return kOverallUsage;
}

std::uint64_t parse_byte_size(std::string_view option, std::string_view text) {
  const auto malformed = [&] {
    return std::invalid_argument(std::string(option) + ": " + in_quotes(text) +
                                 " is not a size: expected a whole number of bytes, or one followed by K, M or G "
                                 "(or KiB, MiB, GiB; powers of 1024), e.g. 65536, 512M or 2GiB");
  };
  const std::size_t digits = static_cast<std::size_t>(
      std::find_if(text.begin(), text.end(), [](char c) { return c < '0' || c > '9'; }) - text.begin());
  if (digits == 0) throw malformed();
  const std::string_view suffix = text.substr(digits);
  unsigned shift = 0;
  if (suffix.empty()) shift = 0;
  else if (suffix == "K" || suffix == "KiB") shift = 10;
  else if (suffix == "M" || suffix == "MiB") shift = 20;
  else if (suffix == "G" || suffix == "GiB") shift = 30;
  else throw malformed();
  std::uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + digits, value);
  if (ec == std::errc::result_out_of_range || (shift > 0 && value > (std::numeric_limits<std::uint64_t>::max() >> shift))) {
    throw std::invalid_argument(std::string(option) + ": " + in_quotes(text) +
                                " is out of range: it must be at most 18446744073709551615 bytes (2^64 - 1)");
  }
  if (ec != std::errc() || ptr != text.data() + digits) throw malformed();
  return value << shift;
}

InputFormat resolve_format(InputFormat format, std::string_view path) {
  if (format != InputFormat::automatic) return format;
  const auto ends_with = [&](std::string_view suffix) {
    return path.size() >= suffix.size() && path.substr(path.size() - suffix.size()) == suffix;
  };
  if (ends_with(".tsv")) return InputFormat::tsv;
  if (ends_with(".u32") || ends_with(".bin")) return InputFormat::u32;
  return InputFormat::ids;
}

CorpusOptions parse_corpus_options(std::span<const std::string_view> args) {
  CorpusOptions options;
  if (args.empty()) {
    throw std::invalid_argument("no command: expected build, merge, stats or verify (see --help)");
  }
  const std::string_view first = args[0];
  if (first == "--help" || first == "-h") {
    options.help = true;
    return options;
  }
  if (first == "help") {
    options.help = true;
    if (args.size() > 1) {
      const auto command = command_named(args[1]);
      if (!command) unknown_command(args[1]);
      options.command = *command;
    }
    if (args.size() > 2) {
      throw std::invalid_argument("help: unexpected argument " + in_quotes(args[2]) + " (see --help)");
    }
    return options;
  }
  if (first.size() > 1 && first.front() == '-') {
    throw std::invalid_argument("option " + in_quotes(first) +
                                " before the command: expected build, merge, stats or verify first (see --help)");
  }
  const auto command = command_named(first);
  if (!command) unknown_command(first);
  options.command = *command;
  const std::string prefix = std::string(to_string(*command)) + ": ";

  std::vector<std::string_view> positional;
  cli::GivenOptions given;  // every option but --from (repeatable) is given once
  bool records_given = false;
  bool options_ended = false;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (options_ended || arg.size() < 2 || arg.front() != '-') {
      positional.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_ended = true;
      continue;
    }
    if (arg == "--help" || arg == "-h") {
      options.help = true;
      return options;
    }
    const auto specs = options_of(*command);
    const auto spec = std::find_if(specs.begin(), specs.end(), [&](const OptionSpec& s) { return s.name == arg; });
    if (spec == specs.end()) {
      throw std::invalid_argument(prefix + "unknown option " + in_quotes(arg) + " " + see_help(*command));
    }
    if (arg != "--from") given.once(arg, prefix);
    std::string_view value;
    if (spec->value) {
      if (i + 1 >= args.size()) throw std::invalid_argument(prefix + std::string(arg) + " needs a value");
      value = args[++i];
    }
    if (arg == "--from") {
      // The same file twice would hold its records twice.
      cli::refuse_repeated_item(prefix + "--from", options.inputs, value, value);
      options.inputs.emplace_back(value);
    } else if (arg == "--format") {
      options.format = parse_format(value);
    } else if (arg == "--field") {
      options.field = parse_field(value);
    } else if (arg == "--records") {
      options.records = replay::parse_record_range("--records", value);
      records_given = true;
    } else if (arg == "--max-bytes") {
      options.max_bytes = parse_max_bytes(value);
    } else if (arg == "--first-stamp") {
      options.first_stamp = parse_stamp(arg, value);
    } else if (arg == "--quiet") {
      options.quiet = true;
    } else if (arg == "--no-verify") {
      options.verify_shards = false;
    } else if (arg == "--vocab-size") {
      options.vocabulary.size = parse_vocab_size(value);
    } else if (arg == "--tokenizer-fingerprint") {
      options.vocabulary.tokenizer_fingerprint = parse_fingerprint(value);
    } else if (arg == "--queries") {
      options.queries = std::string(value);
      if (options.queries.empty()) throw std::invalid_argument(prefix + "--queries: the file name is empty");
    } else if (arg == "--json") {
      options.json = true;
    }
  }
  for (const std::string_view name : positional) {
    if (name.empty()) throw std::invalid_argument(prefix + "a file name is empty");
  }

  switch (*command) {
    case Command::build:
      if (positional.empty()) {
        throw std::invalid_argument(prefix + "missing the output file: ngramspec-corpus build OUT --from FILE ... " +
                                    see_help(*command));
      }
      if (positional.size() > 1) {
        throw std::invalid_argument(prefix + "unexpected argument " + in_quotes(positional[1]) +
                                    ": give inputs with --from FILE " + see_help(*command));
      }
      options.output = std::string(positional[0]);
      if (options.inputs.empty()) {
        throw std::invalid_argument(prefix + "nothing to build: give one or more --from FILE " + see_help(*command));
      }
      for (const std::string& input : options.inputs) {
        if (input.empty()) throw std::invalid_argument(prefix + "--from: the file name is empty");
      }
      break;
    case Command::merge:
      if (positional.empty()) {
        throw std::invalid_argument(prefix + "missing the output file and the shards: ngramspec-corpus merge OUT "
                                    "SHARD ... " + see_help(*command));
      }
      if (positional.size() == 1) {
        throw std::invalid_argument(prefix + "no shards to merge: give one or more corpus files after OUT " +
                                    see_help(*command));
      }
      options.output = std::string(positional[0]);
      options.inputs.assign(positional.begin() + 1, positional.end());
      break;
    case Command::stats:
      if (positional.empty()) throw std::invalid_argument(prefix + "missing the corpus file " + see_help(*command));
      if (positional.size() > 1) {
        throw std::invalid_argument(prefix + "unexpected argument " + in_quotes(positional[1]) +
                                    ": stats reads one corpus file " + see_help(*command));
      }
      options.inputs.emplace_back(positional[0]);
      if (records_given && options.queries.empty()) {
        throw std::invalid_argument(prefix + "--records selects records of --queries: give --queries STREAMS.tsv");
      }
      break;
    case Command::verify:
      if (positional.empty()) throw std::invalid_argument(prefix + "no files to verify " + see_help(*command));
      options.inputs.assign(positional.begin(), positional.end());
      break;
    case Command::none: break;
  }
  return options;
}

}  // namespace ngramspec::corpus_tool
