// What the decode loop itself costs per generated token, drafter included, with a model
// that costs nothing: the overhead an engine pays on top of its forward passes.

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "ngramspec/ngramspec.hpp"

namespace {

using namespace ngramspec;

// A free greedy model. Periodic: the token after t is successor[t], a cycle of `period`
// tokens. Random: the token after position p is a hash of p, so nothing repeats.
class FreeModel {
 public:
  FreeModel(bool periodic, std::size_t period) : periodic_(periodic), successor_(period) {
    std::iota(successor_.begin(), successor_.end(), Token{1});
    successor_.back() = 0;
  }
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) noexcept {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (periodic_) {
        next[i] = successor_[tokens[i] % successor_.size()];
      } else {
        std::uint64_t h = (pos + i + 1) * 0x9e3779b97f4a7c15ULL;
        next[i] = static_cast<Token>((h >> 40) % 32000);
      }
    }
  }
  void rollback(std::size_t) noexcept {}
  [[nodiscard]] std::size_t max_batch() const noexcept { return 64; }

 private:
  bool periodic_;
  std::vector<Token> successor_;
};

// Args: periodic (1) or random (0), speculate (1/0), k.
void BM_Generate(benchmark::State& state) {
  const bool periodic = state.range(0) != 0;
  FreeModel model(periodic, 100);
  const NGramConfig config{
      .min_order = 2, .max_order = 4, .max_drafts = static_cast<std::size_t>(state.range(2)), .window = 512};
  SpeculativeDecoder decoder(model, NGramPredictor(config));
  std::vector<Token> prompt(200);
  std::iota(prompt.begin(), prompt.end(), Token{0});
  for (Token& t : prompt) t %= 100;
  DecodeOptions options;
  options.max_new_tokens = 4096;
  options.speculate = state.range(1) != 0;
  std::size_t tokens = 0;
  double passes = 0;
  for (auto _ : state) {
    const DecodeResult result = decoder.generate(prompt, options);
    tokens += result.tokens.size();
    passes += static_cast<double>(result.stats.decode_passes + 1);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(tokens));
  state.counters["ns/token"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate |
                                                                                  benchmark::Counter::kInvert);
  state.counters["tokens/pass"] = benchmark::Counter(static_cast<double>(tokens) / passes);
  state.SetLabel(std::string(periodic ? "periodic" : "random") + (options.speculate ? ", speculative" : ", plain"));
}

BENCHMARK(BM_Generate)
    ->ArgNames({"periodic", "speculate", "k"})
    ->Args({1, 1, 4})
    ->Args({1, 1, 8})
    ->Args({1, 0, 4})
    ->Args({0, 1, 4})
    ->Args({0, 0, 4})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
