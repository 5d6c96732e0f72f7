// Soak: 10^7 tokens through an NGramPredictor and a MatchDrafter (update + predict per token), and
// through SpeculativeDecoder::generate over a model that costs nothing (drafting with each, and with
// a MatchDrafter that consults a SharedCorpus fed every generation's output), printing resident
// memory (VmRSS, and its peak VmHWM, from /proc/self/status) and the live heap (this program replaces
// operator new / delete to count it: replay/heap_tracking.cpp) every 10^6 tokens, to show memory flat once the first
// generation has sized everything. A summary table closes, one row per run.
//
// Usage: soak_bench [--tokens N]   (default 10000000)

#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <optional>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "ngramspec/match_drafter.hpp"
#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "ngramspec/speculative_decoder.hpp"
#include "replay/heap_tracking.hpp"
#include "support/mixed_stream.hpp"

namespace ngramspec {
namespace {

// A kB figure from /proc/self/status ("VmRSS", "VmHWM"); 0 where there is no procfs. Read with
// stdio and a stack buffer, so that measuring does not touch the counted heap.
std::size_t status_kib(std::string_view field) {
  std::FILE* file = std::fopen("/proc/self/status", "r");
  if (file == nullptr) return 0;
  std::size_t kib = 0;
  char line[256];
  while (std::fgets(line, sizeof line, file) != nullptr) {
    const std::string_view text(line);
    if (text.size() > field.size() && text.compare(0, field.size(), field) == 0 && text[field.size()] == ':') {
      kib = std::strtoull(line + field.size() + 1, nullptr, 10);
      break;
    }
  }
  std::fclose(file);
  return kib;
}

// Sets VmHWM back to the current VmRSS (Linux 4.0 on), so that each run's peak is its own; false
// where that is not possible, and the peak is then the process's so far.
bool reset_peak_rss() {
  std::FILE* file = std::fopen("/proc/self/clear_refs", "w");
  if (file == nullptr) return false;
  const bool written = std::fputs("5", file) >= 0;
  return std::fclose(file) == 0 && written;
}

struct Sample {
  std::uint64_t tokens = 0;
  std::size_t rss_kib = 0;
  std::size_t hwm_kib = 0;
  std::size_t live_heap = 0;
  std::size_t peak_heap = 0;
  std::size_t allocations = 0;
};

Sample sample(std::uint64_t tokens) {
  Sample s;
  s.tokens = tokens;
  s.live_heap = replay::live_heap_bytes();
  s.peak_heap = replay::peak_heap_bytes();
  s.allocations = replay::heap_allocations();
  s.rss_kib = status_kib("VmRSS");  // read after the heap figures: reading allocates
  s.hwm_kib = status_kib("VmHWM");
  return s;
}

// One row of the closing summary: static storage, so that keeping it does not move the heap figures.
struct Summary {
  const char* run = nullptr;
  Sample warm;  // the first sample after the start
  Sample last;
};
constexpr std::size_t kMaxRuns = 8;
Summary g_summaries[kMaxRuns];
std::size_t g_runs = 0;
bool g_peak_rss_per_run = true;

// Starts a run: what earlier runs freed goes back to the system (where the allocator can), and the
// peaks restart, so that each run's figures are its own plus the program's few KiB.
void start_run() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
  replay::reset_peak_heap_bytes();
  if (!reset_peak_rss()) g_peak_rss_per_run = false;
}

// `value` with thousands separators, into `out` (no heap).
const char* grouped(long long value, char (&out)[32], bool sign = false) {
  char digits[24];
  const unsigned long long magnitude =
      value < 0 ? 0ULL - static_cast<unsigned long long>(value) : static_cast<unsigned long long>(value);
  const int n = std::snprintf(digits, sizeof digits, "%llu", magnitude);
  std::size_t at = 0;
  if (value < 0) {
    out[at++] = '-';
  } else if (sign) {
    out[at++] = '+';
  }
  for (int i = 0; i < n; ++i) {
    if (i > 0 && (n - i) % 3 == 0) out[at++] = ',';
    out[at++] = digits[i];
  }
  out[at] = '\0';
  return out;
}

void print_table(const char* run, const char* title, const std::vector<Sample>& samples, double seconds) {
  std::printf("\n%s (%.1f s)\n", title, seconds);
  std::printf("%12s %10s %10s %14s %14s %12s\n", "tokens", "RSS KiB", "peak KiB", "live heap B", "peak heap B",
              "allocations");
  for (const Sample& s : samples) {
    std::printf("%12llu %10zu %10zu %14zu %14zu %12zu\n", static_cast<unsigned long long>(s.tokens), s.rss_kib,
                s.hwm_kib, s.live_heap, s.peak_heap, s.allocations);
  }
  if (samples.size() >= 3) {
    // samples[1] is the first after warm-up; everything later must match it.
    const Sample& warm = samples[1];
    const Sample& last = samples.back();
    std::printf(
        "after warm-up (%llu tokens) to the end: live heap %+lld B, "
        "peak heap %+lld B, RSS %+lld KiB, "
        "allocations %+lld\n",
        static_cast<unsigned long long>(warm.tokens),
        static_cast<long long>(last.live_heap) - static_cast<long long>(warm.live_heap),
        static_cast<long long>(last.peak_heap) - static_cast<long long>(warm.peak_heap),
        static_cast<long long>(last.rss_kib) - static_cast<long long>(warm.rss_kib),
        static_cast<long long>(last.allocations) - static_cast<long long>(warm.allocations));
    if (g_runs < kMaxRuns) g_summaries[g_runs++] = Summary{run, warm, last};
  }
}

// The runs side by side, as docs/BENCHMARKS.md tables them (Markdown).
void print_summary(std::uint64_t every) {
  char a[32];
  char b[32];
  char c[32];
  char d[32];
  char e[32];
  char f[32];
  char g[32];
  std::printf("\nSummary (peak RSS and peak heap %s; the last column from the first sample, %s tokens, or the\n"
              "generation that crosses it, to the end)\n\n",
              g_peak_rss_per_run ? "per run" : "per run for the heap, since the start for RSS",
              grouped(static_cast<long long>(every), a));
  std::printf("| run | RSS at the end | peak RSS | live heap at the end | peak heap | from %s tokens to the end |\n",
              grouped(static_cast<long long>(every), a));
  std::printf("|---|---:|---:|---:|---:|---|\n");
  for (std::size_t i = 0; i < g_runs; ++i) {
    const Summary& s = g_summaries[i];
    const auto delta = [](std::size_t to, std::size_t from) {
      return static_cast<long long>(to) - static_cast<long long>(from);
    };
    std::printf("| %s | %s KiB | %s KiB | %s B | %s B | heap %s B, RSS %s KiB, %s allocations |\n", s.run,
                grouped(static_cast<long long>(s.last.rss_kib), a), grouped(static_cast<long long>(s.last.hwm_kib), b),
                grouped(static_cast<long long>(s.last.live_heap), c),
                grouped(static_cast<long long>(s.last.peak_heap), d),
                grouped(delta(s.last.live_heap, s.warm.live_heap), e, true),
                grouped(delta(s.last.rss_kib, s.warm.rss_kib), f, true),
                grouped(delta(s.last.allocations, s.warm.allocations), g));
  }
}

// A greedy model that costs nothing and holds nothing but its length: next = an affine map of the
// token modulo 251 (a cycle of at most 250 tokens, which the default 512-token window learns after
// one lap), except at every 61st position, where it is a hash of the position over a 32000-token
// vocabulary (a miss now and then, and fresh n-grams).
struct FreeModel {
  std::size_t length = 0;
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const std::uint64_t at = pos + i;
      next[i] = at % 61 == 0 ? static_cast<Token>((at * 0x9E3779B97F4A7C15ULL) % 32000)
                             : static_cast<Token>((std::uint64_t{tokens[i]} * 5 + 3) % 251);
    }
    length = pos + tokens.size();
  }
  void rollback(std::size_t pos) { length = pos; }
  [[nodiscard]] std::size_t max_batch() const { return 16; }
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Room for every sample up front, so that recording them does not move the heap figures.
std::vector<Sample> make_samples(std::uint64_t total, std::uint64_t every) {
  std::vector<Sample> samples;
  samples.reserve(total / every + 2);
  start_run();
  samples.push_back(sample(0));
  return samples;
}

// update + predict per token of the mixed stream, through a drafter `make()` builds after the
// first sample (so the run's heap includes it).
template <class Make>
void soak_drafter(const char* run, const char* title, std::uint64_t total, std::uint64_t every, Make make) {
  std::vector<Sample> samples = make_samples(total, every);
  const auto start = std::chrono::steady_clock::now();
  auto drafter = make();
  test::MixedStream stream(42);
  Token drafts[16];
  std::uint64_t drafted = 0;
  for (std::uint64_t i = 1; i <= total; ++i) {
    drafter.update(stream.next());
    drafted += drafter.predict(drafts);
    if (i % every == 0) samples.push_back(sample(i));
  }
  const double seconds = seconds_since(start);
  std::printf("\n%s: memory_bytes() = %zu B, %llu drafts proposed", run, drafter.memory_bytes(),
              static_cast<unsigned long long>(drafted));
  print_table(run, title, samples, seconds);
}

// Repeated generations of max_new_tokens over the free model, drafting with what `make(corpus)`
// builds; with corpus_bytes > 0, a SharedCorpus of that cap receives each generation's output.
template <class Make>
void soak_decoder(const char* run, std::uint64_t total, std::uint64_t every, std::size_t corpus_bytes, Make make) {
  std::vector<Sample> samples = make_samples(total, every);
  const auto start = std::chrono::steady_clock::now();
  FreeModel model;
  std::optional<SharedCorpus> corpus;
  if (corpus_bytes != 0) corpus.emplace(corpus_bytes);
  SpeculativeDecoder decoder(model, make(corpus ? &*corpus : nullptr));
  DecodeOptions options;
  options.max_new_tokens = 4096;
  std::vector<Token> prompt(16);
  std::uint64_t generated = 0;
  std::uint64_t passes = 0;
  std::uint64_t next_sample = every;
  std::uint64_t generations = 0;
  std::uint64_t first_eviction = 0;  // the generation whose output first evicted, 1-based (0: none)
  for (; generated < total; ++generations) {
    for (std::size_t i = 0; i < prompt.size(); ++i) {
      prompt[i] = static_cast<Token>((generations * 7919 + i * 104729) % 32000);
    }
    {
      const DecodeResult result = decoder.generate(prompt, options);
      generated += result.stats.generated;
      passes += result.stats.decode_passes + result.stats.prefill_passes;
      if (corpus) {
        corpus->append(result.tokens);
        if (first_eviction == 0 && corpus->appended() > corpus->capacity_tokens()) first_eviction = generations + 1;
      }
    }
    // Sampled once the result is gone: what stays is the decoder's, the drafter's and the corpus's own.
    if (generated >= next_sample) {
      samples.push_back(sample(generated));
      next_sample += every;
    }
  }
  const double seconds = seconds_since(start);
  std::printf("\n%s over a free model: %llu generations of up to %zu tokens, %.2f tokens per pass; drafter "
              "memory_bytes() = %zu B",
              run, static_cast<unsigned long long>(generations), options.max_new_tokens,
              static_cast<double>(generated) / static_cast<double>(passes), decoder.drafter().memory_bytes());
  if (corpus) {
    std::printf("; corpus memory_bytes() = %zu B (cap %zu B), %zu of %zu tokens held, evicting from generation %llu on",
                corpus->memory_bytes(), corpus_bytes, corpus->size(), corpus->capacity_tokens(),
                static_cast<unsigned long long>(first_eviction));
  }
  char title[256];
  std::snprintf(title, sizeof title,
                "%s: generate, repeated (the sample follows the generation that crosses each mark)", run);
  print_table(run, title, samples, seconds);
}

}  // namespace
}  // namespace ngramspec

int main(int argc, char** argv) {
  std::uint64_t total = 10'000'000;
  if (argc == 3 && std::string_view(argv[1]) == "--tokens") {
    const std::string_view word(argv[2]);
    const auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), total);
    if (ec != std::errc() || ptr != word.data() + word.size() || total == 0) argc = 0;
  }
  if (argc != 1 && argc != 3) {
    std::fprintf(stderr, "usage: %s [--tokens N]   (default 10000000)\n", argv[0]);
    return 2;
  }
  const std::uint64_t every = total >= 10 ? total / 10 : 1;
  std::printf("soak: %llu tokens; samples every %llu tokens\n", static_cast<unsigned long long>(total),
              static_cast<unsigned long long>(every));
  using ngramspec::MatchConfig;
  using ngramspec::MatchDrafter;
  using ngramspec::NGramPredictor;
  using ngramspec::SharedCorpus;
  ngramspec::soak_drafter("`NGramPredictor`", "NGramPredictor defaults: update + predict per token", total, every,
                          [] { return NGramPredictor(); });
  // The defaults' cap (8192) is already far below the stream; a larger one freezes an index that
  // no longer fits the cache.
  ngramspec::soak_drafter("`MatchDrafter`", "MatchDrafter defaults: update + predict per token", total, every,
                          [] { return MatchDrafter(); });
  ngramspec::soak_drafter("`MatchDrafter` cap 65,536", "MatchDrafter cap 65536: update + predict per token", total,
                          every, [] { return MatchDrafter(MatchConfig{.index_capacity = 65536}); });
  ngramspec::soak_decoder("`SpeculativeDecoder` + `NGramPredictor`", total, every, 0,
                          [](const SharedCorpus*) { return NGramPredictor(); });
  ngramspec::soak_decoder("`SpeculativeDecoder` + `MatchDrafter` (the default)", total, every, 0,
                          [](const SharedCorpus*) { return MatchDrafter(); });
  ngramspec::soak_decoder("`SpeculativeDecoder` + `MatchDrafter` + 16 MiB `SharedCorpus`", total, every,
                          std::size_t{16} << 20,
                          [](const SharedCorpus* corpus) { return MatchDrafter(MatchConfig{}, corpus); });
  ngramspec::print_summary(every);
  return 0;
}
