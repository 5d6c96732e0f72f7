// ngramspec-corpus: builds corpus files from token files, merges them, reports what they hold
// and how well they draft, and verifies them.

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <exception>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "corpus_inputs.hpp"
#include "corpus_options.hpp"
#include "corpus_stats.hpp"
#include "ngramspec/corpus_builder.hpp"
#include "ngramspec/corpus_file.hpp"
#include "ngramspec/mapped_corpus.hpp"
#include "token_streams.hpp"

namespace {

using namespace ngramspec;
using namespace ngramspec::corpus_tool;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Progress lines on stderr, at most one a second and none in the first second, so a build
// that takes under a second prints nothing.
class ProgressLines {
 public:
  ProgressLines(bool quiet, Clock::time_point start) : quiet_(quiet), start_(start), last_call_(start) {}

  // Work of `phase`: `fraction` done (negative: unknown); `done` of `total` (0: unknown) of
  // `unit` ("" shows neither), done in millions with the rate since the phase began.
  void report(const char* phase, double fraction, double done, double total, const char* unit) {
    const Clock::time_point now = Clock::now();
    if (phase_ != phase) {
      // The previous phase ended at its last report: this one began then.
      phase_ = phase;
      phase_start_ = last_call_;
    }
    last_call_ = now;
    if (quiet_ || now - start_ < std::chrono::seconds(1) ||
        (printed_ && now - last_print_ < std::chrono::seconds(1))) {
      return;
    }
    printed_ = true;
    last_print_ = now;
    std::string line = "ngramspec-corpus: " + phase_;
    char text[128];
    // A phase's first report (the builder reports some phases only as they begin) shows
    // what the phase has to do; later ones how far it is.
    if (done == 0 && fraction <= 0) {
      if (*unit != '\0' && total > 0) {
        std::snprintf(text, sizeof text, " (%.1f M %s)", total / 1e6, unit);
        line += text;
      }
      std::fprintf(stderr, "%s\n", line.c_str());
      return;
    }
    if (fraction >= 0) {
      std::snprintf(text, sizeof text, " %.0f%%", 100.0 * std::min(fraction, 1.0));
      line += text;
    }
    if (*unit != '\0') {
      if (total > 0) std::snprintf(text, sizeof text, " (%.1f M of %.1f M %s", done / 1e6, total / 1e6, unit);
      else std::snprintf(text, sizeof text, " (%.1f M %s", done / 1e6, unit);
      line += text;
      const double elapsed = std::chrono::duration<double>(now - phase_start_).count();
      if (done > 0 && elapsed > 0) {
        std::snprintf(text, sizeof text, ", %.1f M %s/s", done / 1e6 / elapsed, unit);
        line += text;
      }
      line += ')';
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }

  // The builder's phases: order (sorting the records), count and ngrams1 .. ngrams3 (tokens),
  // write (sections).
  CorpusBuilder::Progress builder_progress() {
    return [this](const char* phase, std::uint64_t done, std::uint64_t total) {
      const double fraction = total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
      const std::string_view name = phase;
      if (name == "order") {
        report(phase, -1.0, 0, 0, "");
      } else if (name == "write") {
        report(phase, fraction, 0, 0, "");
      } else {
        report(phase, fraction, static_cast<double>(done), static_cast<double>(total), "tokens");
      }
    };
  }

 private:
  bool quiet_;
  Clock::time_point start_;
  Clock::time_point last_call_;
  Clock::time_point phase_start_{};
  Clock::time_point last_print_{};
  std::string phase_;
  bool printed_ = false;
};

std::uint64_t file_size_or_zero(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? static_cast<std::uint64_t>(st.st_size) : 0;
}

// The summary line of build and merge.
void print_summary(const std::string& path, const CorpusFileSummary& summary, std::uint64_t tokens_in,
                   Clock::time_point start) {
  const double elapsed = seconds_since(start);
  const double per_token =
      summary.tokens == 0 ? 0.0 : static_cast<double>(summary.file_bytes) / static_cast<double>(summary.tokens);
  std::printf("%s: %llu tokens, %llu records, %llu dropped tokens, %llu bytes (%.1f bytes/token) in %.2f s",
              path.c_str(), static_cast<unsigned long long>(summary.tokens),
              static_cast<unsigned long long>(summary.records),
              static_cast<unsigned long long>(summary.dropped_tokens),
              static_cast<unsigned long long>(summary.file_bytes), per_token, elapsed);
  if (elapsed > 0) {
    std::printf(" (%.2f M tokens/s, %.1f MB/s)", static_cast<double>(tokens_in) / 1e6 / elapsed,
                static_cast<double>(summary.file_bytes) / 1e6 / elapsed);
  }
  std::printf("\n");
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec) && !ec;
}

std::int64_t now_nanoseconds() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "0x" and 16 hexadecimal digits, as the library writes fingerprints in its messages.
std::string hex(std::uint64_t value) {
  std::string text = "0x";
  for (int shift = 60; shift >= 0; shift -= 4) text += "0123456789abcdef"[(value >> shift) & 0xfU];
  return text;
}

std::string vocab_size_text(const CorpusVocabulary& v) { return v.size == 0 ? "unknown" : std::to_string(v.size); }
std::string fingerprint_text(const CorpusVocabulary& v) {
  return v.tokenizer_fingerprint == 0 ? "unset" : hex(v.tokenizer_fingerprint);
}

// A library message without the "ngramspec::Class::function: " that names where it was raised.
std::string without_prefix(const std::string& message) {
  const std::size_t colon = message.find(": ");
  return message.starts_with("ngramspec::") && colon != std::string::npos ? message.substr(colon + 2) : message;
}

int run_build(const CorpusOptions& options, Clock::time_point start) {
  for (const std::string& input : options.inputs) {
    if (same_file(input, options.output)) {
      throw std::invalid_argument("build: the output '" + options.output + "' is also an input (--from '" + input +
                                  "'): writing it would replace the input");
    }
  }
  ProgressLines progress(options.quiet, start);
  std::uint64_t total_bytes = 0;
  for (const std::string& input : options.inputs) total_bytes += file_size_or_zero(input);

  RecordPool pool;
  std::uint64_t bytes_before = 0;
  for (const std::string& input : options.inputs) {
    const InputFormat format = resolve_format(options.format, input);
    read_input(input, format, options.field, pool, [&](std::uint64_t bytes) {
      const double done = static_cast<double>(bytes_before + bytes);
      const auto total = static_cast<double>(total_bytes);
      progress.report("read", total_bytes == 0 ? -1.0 : done / total, done, total, "bytes");
    });
    bytes_before += file_size_or_zero(input);
  }

  std::pair<std::size_t, std::size_t> inputs{0, pool.input_records()};
  try {
    inputs = options.records.resolve(pool.input_records());
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("build: --records: ") + e.what());
  }
  // The range selects at least one input record (resolve() refuses one that selects none).
  const auto [first, last] = pool.records_of(inputs.first, inputs.second);

  const std::int64_t first_stamp = options.first_stamp ? *options.first_stamp : now_nanoseconds();
  const auto span = static_cast<std::int64_t>(pool.records() - 1);
  if (first_stamp > std::numeric_limits<std::int64_t>::max() - span) {
    throw std::invalid_argument("build: --first-stamp " + std::to_string(first_stamp) + ": the last of the " +
                                std::to_string(pool.records()) + " records' stamps would exceed 2^63 - 1");
  }
  CorpusBuilder builder(options.max_bytes, options.vocabulary);
  for (std::size_t r = first; r < last; ++r) {
    try {
      builder.add(pool.record(r), first_stamp + static_cast<std::int64_t>(r));
    } catch (const std::invalid_argument& e) {  // a token outside --vocab-size: the input is at fault
      throw std::runtime_error("build: input record " + std::to_string(r) + ": " + without_prefix(e.what()) +
                               " (--vocab-size " + std::to_string(options.vocabulary.size) + ")");
    }
  }
  if (builder.records() == 0) {
    throw std::runtime_error("nothing to build: the records selected hold no tokens");
  }
  pool = RecordPool();  // the builder holds copies

  const CorpusFileSummary summary = builder.write(options.output, progress.builder_progress());
  print_summary(options.output, summary, builder.tokens(), start);
  return 0;
}

// The vocabulary a merge records: each part as given, else as the shards record it. Throws
// std::runtime_error naming both sources when a shard records another.
CorpusVocabulary merged_vocabulary(const CorpusVocabulary& given, const std::vector<std::string>& shards) {
  CorpusVocabulary vocabulary = given;
  std::string size_from = "--vocab-size";
  std::string fingerprint_from = "--tokenizer-fingerprint";
  for (const std::string& shard : shards) {
    const CorpusVocabulary recorded = MappedCorpus(shard).vocabulary();  // a mapping reads only the header
    if (recorded.size != 0 && vocabulary.size == 0) {
      vocabulary.size = recorded.size;
      size_from = "shard '" + shard + "'";
    } else if (recorded.size != 0 && recorded.size != vocabulary.size) {
      throw std::runtime_error("merge: shard '" + shard + "' records a vocabulary of " + std::to_string(recorded.size) +
                               " tokens, " + size_from + " one of " + std::to_string(vocabulary.size) +
                               ": shards of different tokenizers do not merge");
    }
    if (recorded.tokenizer_fingerprint != 0 && vocabulary.tokenizer_fingerprint == 0) {
      vocabulary.tokenizer_fingerprint = recorded.tokenizer_fingerprint;
      fingerprint_from = "shard '" + shard + "'";
    } else if (recorded.tokenizer_fingerprint != 0 &&
               recorded.tokenizer_fingerprint != vocabulary.tokenizer_fingerprint) {
      throw std::runtime_error("merge: shard '" + shard + "' records tokenizer fingerprint " +
                               hex(recorded.tokenizer_fingerprint) + ", " + fingerprint_from + " " +
                               hex(vocabulary.tokenizer_fingerprint) + ": shards of different tokenizers do not merge");
    }
  }
  return vocabulary;
}

int run_merge(const CorpusOptions& options, Clock::time_point start) {
  ProgressLines progress(options.quiet, start);
  std::uint64_t total_bytes = 0;
  for (const std::string& shard : options.inputs) total_bytes += file_size_or_zero(shard);
  CorpusBuilder builder(options.max_bytes, merged_vocabulary(options.vocabulary, options.inputs));
  std::uint64_t bytes_done = 0;
  for (const std::string& shard : options.inputs) {
    const MappedCorpus corpus(shard);
    if (options.verify_shards) corpus.verify_checksums();
    try {
      builder.add(corpus);
    } catch (const std::invalid_argument& e) {  // a token outside the vocabulary: the shard is at fault
      throw std::runtime_error("merge: " + without_prefix(e.what()));
    }
    bytes_done += corpus.file_bytes();
    const double done = static_cast<double>(bytes_done);
    const auto total = static_cast<double>(total_bytes);
    progress.report("read", total_bytes == 0 ? -1.0 : done / total, done, total, "bytes");
  }
  const CorpusFileSummary summary = builder.write(options.output, progress.builder_progress());
  print_summary(options.output, summary, builder.tokens(), start);
  return 0;
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char code[8];
      std::snprintf(code, sizeof code, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += code;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// A stamp, with its UTC date when it reads as nanoseconds since the Unix epoch of a year
// from 2000 to 2199.
std::string stamp_text(std::int64_t stamp) {
  std::string text = std::to_string(stamp);
  constexpr std::int64_t kYear2000 = 946684800LL * 1000000000LL;
  constexpr std::int64_t kYear2200 = 7258118400LL * 1000000000LL;
  if (stamp >= kYear2000 && stamp < kYear2200) {
    const std::time_t seconds = static_cast<std::time_t>(stamp / 1000000000LL);
    std::tm utc{};
    char date[32];
    if (::gmtime_r(&seconds, &utc) != nullptr && std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", &utc) > 0) {
      text += " (";
      text += date;
      text += ')';
    }
  }
  return text;
}

int run_stats(const CorpusOptions& options) {
  const std::string& path = options.inputs.front();
  const MappedCorpus corpus(path);
  // What the statistics describe is what the file held when written: a damaged body is refused,
  // and so are records that verify refuses (the statistics count n-grams within records).
  corpus.verify_checksums();
  corpus.verify_records();
  const CorpusVocabulary& vocabulary = corpus.vocabulary();
  const auto orders = order_stats(corpus);
  const double per_token =
      corpus.size() == 0 ? 0.0 : static_cast<double>(corpus.file_bytes()) / static_cast<double>(corpus.size());

  QueryStats queries;
  std::pair<std::size_t, std::size_t> range{0, 0};
  std::size_t query_count = 0;
  const bool with_queries = !options.queries.empty();
  if (with_queries) {
    std::vector<replay::TokenStream> streams;
    streams = replay::read_streams(options.queries);
    query_count = streams.size();
    try {
      range = options.records.resolve(streams.size());
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("stats: --records: ") + e.what());
    }
    streams = replay::slice_records(std::move(streams), options.records);
    queries = query_stats(corpus, streams);
  }

  if (options.json) {
    std::printf("{\"file\": %s, \"tokens\": %zu, \"records\": %zu, \"file_bytes\": %llu, \"bytes_per_token\": %.3f, "
                "\"format_version\": %u, \"vocab_size\": %llu, \"tokenizer_fingerprint\": %llu, "
                "\"checksums\": \"verified\", \"first_stamp\": %lld, \"last_stamp\": %lld, \"orders\": [",
                json_string(path).c_str(), corpus.size(), corpus.records(),
                static_cast<unsigned long long>(corpus.file_bytes()), per_token,
                static_cast<unsigned>(corpus.format_version()), static_cast<unsigned long long>(vocabulary.size),
                static_cast<unsigned long long>(vocabulary.tokenizer_fingerprint),
                static_cast<long long>(corpus.first_stamp()), static_cast<long long>(corpus.last_stamp()));
    for (std::size_t i = 0; i < orders.size(); ++i) {
      const OrderStats& o = orders[i];
      std::printf("%s{\"order\": %zu, \"ngrams\": %llu, \"occurrences\": %llu, \"hit_rate\": %.6f}", i ? ", " : "",
                  o.order, static_cast<unsigned long long>(o.ngrams), static_cast<unsigned long long>(o.occurrences),
                  o.hit_rate());
    }
    std::printf("]");
    if (with_queries) {
      std::printf(", \"queries\": {\"file\": %s, \"first_record\": %zu, \"last_record\": %zu, \"file_records\": %zu, "
                  "\"records\": %llu, \"positions\": %llu, \"matched_at_least_1\": %.6f, \"matched_at_least_2\": %.6f, "
                  "\"matched_at_least_3\": %.6f, \"drafted\": %.6f, \"first_draft_hit_rate\": %.6f}",
                  json_string(options.queries).c_str(), range.first, range.second, query_count,
                  static_cast<unsigned long long>(queries.records), static_cast<unsigned long long>(queries.positions),
                  queries.share(queries.matched[0]), queries.share(queries.matched[1]),
                  queries.share(queries.matched[2]), queries.share(queries.drafted),
                  queries.share(queries.first_draft_hits));
    }
    std::printf("}\n");
    return 0;
  }

  std::printf("%-22s %s\n", "corpus file", path.c_str());
  std::printf("%-22s %zu\n", "tokens", corpus.size());
  std::printf("%-22s %zu\n", "records", corpus.records());
  std::printf("%-22s %llu (%.1f bytes per token)\n", "file bytes", static_cast<unsigned long long>(corpus.file_bytes()),
              per_token);
  std::printf("%-22s %s\n", "first stamp", stamp_text(corpus.first_stamp()).c_str());
  std::printf("%-22s %s\n", "last stamp", stamp_text(corpus.last_stamp()).c_str());
  std::printf("%-22s %u\n", "format version", static_cast<unsigned>(corpus.format_version()));
  std::printf("%-22s %s\n", "vocab size", vocab_size_text(vocabulary).c_str());
  std::printf("%-22s %s\n", "tokenizer fingerprint", fingerprint_text(vocabulary).c_str());
  std::printf("%-22s %s\n", "checksums", "verified");
  std::printf("\n%-5s %12s %12s %9s\n", "order", "n-grams", "occurrences", "hit rate");
  for (const OrderStats& o : orders) {
    std::printf("%-5zu %12llu %12llu %8.2f%%\n", o.order, static_cast<unsigned long long>(o.ngrams),
                static_cast<unsigned long long>(o.occurrences), 100.0 * o.hit_rate());
  }
  if (with_queries) {
    std::printf("\n%-22s %s, records %zu to %zu of %zu\n", "queries", options.queries.c_str(), range.first,
                range.second, query_count);
    std::printf("%-22s %llu\n", "positions", static_cast<unsigned long long>(queries.positions));
    for (std::size_t n = 1; n <= queries.matched.size(); ++n) {
      const std::string label = "matched >= " + std::to_string(n) + (n == 1 ? " token" : " tokens");
      std::printf("%-22s %6.2f%%\n", label.c_str(), 100.0 * queries.share(queries.matched[n - 1]));
    }
    std::printf("%-22s %6.2f%%\n", "drafted", 100.0 * queries.share(queries.drafted));
    std::printf("%-22s %6.2f%%\n", "first-draft hit rate", 100.0 * queries.share(queries.first_draft_hits));
  }
  return 0;
}

int run_verify(const CorpusOptions& options) {
  bool all_ok = true;
  for (const std::string& path : options.inputs) {
    try {
      const MappedCorpus corpus(path);
      corpus.verify();
      std::printf("%s: ok (%zu tokens, %zu records, %llu bytes; vocab size %s, tokenizer fingerprint %s)\n",
                  path.c_str(), corpus.size(), corpus.records(), static_cast<unsigned long long>(corpus.file_bytes()),
                  vocab_size_text(corpus.vocabulary()).c_str(), fingerprint_text(corpus.vocabulary()).c_str());
      std::fflush(stdout);
    } catch (const std::exception& e) {
      all_ok = false;
      std::fprintf(stderr, "ngramspec-corpus: error: %s\n", e.what());
    }
  }
  return all_ok ? 0 : 1;
}

int run(int argc, char** argv) {
  const Clock::time_point start = Clock::now();
  const std::vector<std::string_view> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  const CorpusOptions options = parse_corpus_options(args);
  if (options.help) {
    std::fputs(usage(options.command), stdout);
    return 0;
  }
  switch (options.command) {
    case Command::build: return run_build(options, start);
    case Command::merge: return run_merge(options, start);
    case Command::stats: return run_stats(options);
    case Command::verify: return run_verify(options);
    case Command::none: break;
  }
  std::fputs(usage(Command::none), stdout);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "ngramspec-corpus: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "ngramspec-corpus: error: %s\n", e.what());
    return 1;
  }
}
