// ngramspec-replay: mean accepted length and drafter cost of drafters replayed through
// SpeculativeDecoder on recorded greedy generations and on synthetic streams.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "drafter_registry.hpp"
#include "heap_tracking.hpp"
#include "replay_options.hpp"
#include "replay_runner.hpp"
#include "token_streams.hpp"

namespace {

using namespace ngramspec;
using namespace ngramspec::replay;

constexpr const char* kUsage = R"(usage: ngramspec-replay [options]
Replays recorded or synthetic token streams through SpeculativeDecoder with each drafter and
reports, per drafter, k and category: samples; passes (target passes after the prompt, the
prefill pass that yields the first token counting as one); generated tokens; AL, the mean
accepted length (generated / passes; plain decoding = 1.00); acceptance rate (accepted /
drafted); rejected drafts per decode pass; drafter ns per generated token (all its updates,
the prompt's included, and predicts); peak drafter heap. Every replay checks that the output
equals the recording token for token.

inputs (at least one):
  --streams FILE       records: id TAB category TAB prompt ids TAB output ids
  --synthetic SPEC     periodic:P[:noise] | random | mixture:P   (repeatable)
  --length N           output tokens per synthetic stream (default 2048)
  --samples N          streams per synthetic spec (default 4)
  --seed N             seed of the synthetic streams (default 1)
  --limit N            replay only the first N records of each --streams file
drafters:
  --drafter NAME       repeatable; default ngram. Drafters:
)" "%s" R"(
  --k LIST             most drafts per pass, comma-separated (default 4)
  --window W           default window of ngram drafters (default 512)
  --min-order N        default shortest n-gram of ngram drafters (default 2)
  --max-order N        default longest n-gram of ngram drafters (default 4)
output:
  --json               one JSON object instead of the table
  --timing-repeats N   best of N timed runs of each drafter's calls (default 3)
checks:
  --expect-al X        exit 3 unless the overall mean accepted length of every drafter and k
                       is within --tolerance of X (a regression check for one configuration)
  --tolerance T        default 0.005
)";

struct Totals {
  std::size_t samples = 0;
  std::size_t generated = 0;
  std::size_t passes = 0;
  std::size_t drafted = 0;
  std::size_t accepted = 0;
  double drafter_ns = 0;
  std::size_t peak_bytes = 0;

  void add(const RecordResult& r) {
    ++samples;
    generated += r.generated;
    passes += r.passes;
    drafted += r.drafted;
    accepted += r.accepted;
    drafter_ns += r.drafter_ns;
    peak_bytes = std::max(peak_bytes, r.drafter_peak_bytes);
  }
  [[nodiscard]] double mean_accepted_length() const { return passes ? double(generated) / double(passes) : 0.0; }
  [[nodiscard]] double acceptance_rate() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
  // Decode passes carry drafts; the prefill pass does not.
  [[nodiscard]] double rejected_per_pass() const {
    return passes > samples ? double(drafted - accepted) / double(passes - samples) : 0.0;
  }
  [[nodiscard]] double ns_per_token() const { return generated ? drafter_ns / double(generated) : 0.0; }
};

struct Row {
  std::string drafter;
  std::size_t k;
  std::string category;
  Totals totals;
};

void print_table(const std::vector<Row>& rows) {
  std::printf("%-28s %4s %-22s %7s %8s %9s %6s %7s %9s %9s %10s\n", "drafter", "k", "category", "samples", "passes",
              "generated", "AL", "accept", "rej/pass", "ns/token", "peak KiB");
  std::string last;
  for (const Row& row : rows) {
    const std::string group = row.drafter + "/" + std::to_string(row.k);
    if (!last.empty() && group != last) std::printf("\n");
    last = group;
    const Totals& t = row.totals;
    std::printf("%-28s %4zu %-22s %7zu %8zu %9zu %6.3f %7.3f %9.3f %9.1f %10.1f\n", row.drafter.c_str(), row.k,
                row.category.c_str(), t.samples, t.passes, t.generated, t.mean_accepted_length(), t.acceptance_rate(),
                t.rejected_per_pass(), t.ns_per_token(), double(t.peak_bytes) / 1024.0);
  }
}

std::string json_escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

void print_json(const std::vector<Row>& rows) {
  std::printf("{\"results\": [");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    const Totals& t = row.totals;
    std::printf(
        "%s\n  {\"drafter\": \"%s\", \"k\": %zu, \"category\": \"%s\", \"samples\": %zu, \"passes\": %zu, "
        "\"decode_passes\": %zu, \"generated\": %zu, \"drafted\": %zu, \"accepted\": %zu, \"mean_accepted_length\": %.6f, "
        "\"acceptance_rate\": %.6f, \"rejected_per_pass\": %.6f, \"drafter_ns_per_token\": %.3f, "
        "\"drafter_peak_bytes\": %zu}",
        i ? "," : "", json_escape(row.drafter).c_str(), row.k, json_escape(row.category).c_str(), t.samples, t.passes,
        t.passes - t.samples, t.generated, t.drafted, t.accepted, t.mean_accepted_length(), t.acceptance_rate(),
        t.rejected_per_pass(), t.ns_per_token(), t.peak_bytes);
  }
  std::printf("\n]}\n");
}

int run(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  const ReplayOptions options = parse_replay_options(args);
  if (options.help) {
    std::printf(kUsage, drafter_names_help().c_str());
    return 0;
  }
  std::vector<TokenStream> streams;
  for (const std::string& file : options.stream_files) {
    std::vector<TokenStream> read = read_streams(file);
    if (options.limit != 0 && read.size() > options.limit) read.resize(options.limit);
    for (TokenStream& s : read) streams.push_back(std::move(s));
  }
  for (const std::string& text : options.synthetic_specs) {
    SyntheticSpec spec = parse_synthetic(text);
    spec.output_length = options.length;
    spec.samples = options.samples;
    spec.seed = options.seed;
    for (TokenStream& s : make_synthetic(spec)) streams.push_back(std::move(s));
  }

  std::vector<DrafterEntry> drafters;
  for (const std::string& name : options.drafter_names) drafters.push_back(make_drafter(name, options.defaults));

  std::vector<std::string> categories;
  for (const TokenStream& s : streams) {
    if (std::find(categories.begin(), categories.end(), s.category) == categories.end()) {
      categories.push_back(s.category);
    }
  }

  const HeapMeter meter{live_heap_bytes, peak_heap_bytes, reset_peak_heap_bytes};
  std::vector<Row> rows;
  for (const DrafterEntry& drafter : drafters) {
    for (const std::size_t k : options.ks) {
      std::map<std::string, Totals> by_category;
      Totals overall;
      for (const TokenStream& s : streams) {
        const RecordResult r = drafter.run(s, k, static_cast<int>(options.timing_repeats), meter);
        by_category[s.category].add(r);
        overall.add(r);
      }
      for (const std::string& category : categories) {
        rows.push_back(Row{drafter.name, k, category, by_category[category]});
      }
      if (categories.size() > 1) rows.push_back(Row{drafter.name, k, "overall", overall});
    }
  }
  if (options.json) print_json(rows);
  else print_table(rows);
  if (options.expect_al >= 0) {
    for (const Row& row : rows) {
      if (row.category != "overall" && categories.size() > 1) continue;
      const double al = row.totals.mean_accepted_length();
      if (al < options.expect_al - options.tolerance || al > options.expect_al + options.tolerance) {
        std::fprintf(stderr, "ngramspec-replay: %s at k = %zu: mean accepted length %.4f, expected %.4f +- %.4f\n",
                     row.drafter.c_str(), row.k, al, options.expect_al, options.tolerance);
        return 3;
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "ngramspec-replay: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ngramspec-replay: error: %s\n", e.what());
    return 1;
  }
}
