// Soak: 10^7 tokens through an NGramPredictor and through SpeculativeDecoder::generate over a model
// that costs nothing, printing resident memory (VmRSS, and its peak VmHWM, from /proc/self/status)
// and the live heap (this program replaces operator new / delete to count it) every 10^6 tokens, to
// show memory flat once the first generation has sized everything.
//
// Usage: soak_bench [--tokens N]   (default 10000000)

#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/speculative_decoder.hpp"
#include "support/mixed_stream.hpp"

// Heap accounting: each block carries its size in a 16-byte header (16 keeps the alignment operator
// new promises), so delete can subtract it. Single-threaded, like the program.
namespace {
constexpr std::size_t kHeader = 16;
std::size_t g_live_bytes = 0;
std::size_t g_peak_bytes = 0;
std::size_t g_allocations = 0;

void* counted_alloc(std::size_t size) noexcept {
  auto* block = static_cast<unsigned char*>(std::malloc(size + kHeader));
  if (block == nullptr) return nullptr;
  std::memcpy(block, &size, sizeof size);
  g_live_bytes += size;
  ++g_allocations;
  if (g_live_bytes > g_peak_bytes) g_peak_bytes = g_live_bytes;
  return block + kHeader;
}

void counted_free(void* p) noexcept {
  if (p == nullptr) return;
  auto* block = static_cast<unsigned char*>(p) - kHeader;
  std::size_t size = 0;
  std::memcpy(&size, block, sizeof size);
  g_live_bytes -= size;
  std::free(block);
}

void* counted_alloc_or_throw(std::size_t size) {
  if (void* p = counted_alloc(size)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t size) { return counted_alloc_or_throw(size); }
void* operator new[](std::size_t size) { return counted_alloc_or_throw(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return counted_alloc(size); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return counted_alloc(size); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }

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
  s.live_heap = g_live_bytes;
  s.peak_heap = g_peak_bytes;
  s.allocations = g_allocations;
  s.rss_kib = status_kib("VmRSS");  // read after the heap figures: reading allocates
  s.hwm_kib = status_kib("VmHWM");
  return s;
}

void print_table(const char* title, const std::vector<Sample>& samples, double seconds) {
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
  samples.push_back(sample(0));
  return samples;
}

void soak_predictor(std::uint64_t total, std::uint64_t every) {
  std::vector<Sample> samples = make_samples(total, every);
  const auto start = std::chrono::steady_clock::now();
  NGramPredictor predictor;  // the defaults
  test::MixedStream stream(42);
  Token drafts[16];
  std::size_t drafted = 0;
  for (std::uint64_t i = 1; i <= total; ++i) {
    predictor.update(stream.next());
    drafted += predictor.predict(drafts);
    if (i % every == 0) samples.push_back(sample(i));
  }
  const double seconds = seconds_since(start);
  std::printf("\nNGramPredictor defaults: memory_bytes() = %zu B, %zu drafts proposed", predictor.memory_bytes(),
              drafted);
  print_table("NGramPredictor: update + predict per token", samples, seconds);
}

void soak_decoder(std::uint64_t total, std::uint64_t every) {
  std::vector<Sample> samples = make_samples(total, every);
  const auto start = std::chrono::steady_clock::now();
  FreeModel model;
  SpeculativeDecoder decoder(model);
  DecodeOptions options;
  options.max_new_tokens = 4096;
  std::vector<Token> prompt(16);
  std::uint64_t generated = 0;
  std::uint64_t passes = 0;
  std::uint64_t next_sample = every;
  for (std::uint64_t g = 0; generated < total; ++g) {
    for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<Token>((g * 7919 + i * 104729) % 32000);
    {
      const DecodeResult result = decoder.generate(prompt, options);
      generated += result.stats.generated;
      passes += result.stats.decode_passes + result.stats.prefill_passes;
    }
    // Sampled once the result is gone: what stays is the decoder's and the drafter's own.
    if (generated >= next_sample) {
      samples.push_back(sample(generated));
      next_sample += every;
    }
  }
  const double seconds = seconds_since(start);
  std::printf(
      "\nSpeculativeDecoder over a free model: %llu generations of %zu tokens, "
      "%.2f tokens per pass",
      static_cast<unsigned long long>(generated / options.max_new_tokens), options.max_new_tokens,
      static_cast<double>(generated) / static_cast<double>(passes));
  print_table(
      "SpeculativeDecoder::generate, repeated (the sample follows the "
      "generation that crosses each mark)",
      samples, seconds);
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
  ngramspec::soak_predictor(total, every);
  ngramspec::soak_decoder(total, every);
  return 0;
}
