// NGramPredictor cost: update per token and predict per call, on periodic and random
// streams, at the default window and a large one, for 32k and 128k vocabularies.

#include <benchmark/benchmark.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "ngramspec/ngram_predictor.hpp"

namespace {

using ngramspec::NGramConfig;
using ngramspec::NGramPredictor;
using ngramspec::Token;

constexpr std::size_t kStreamLength = std::size_t{1} << 20;

enum Kind : std::int64_t { kPeriodic = 0, kRandom = 1 };

// Periodic streams repeat a random unit of 100 tokens, so every context recurs within the
// window; random streams draw uniformly from the vocabulary, so almost none does.
std::vector<Token> make_stream(std::int64_t kind, std::int64_t vocab) {
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<Token> token(0, static_cast<Token>(vocab - 1));
  std::vector<Token> unit(100);
  for (Token& t : unit) t = token(rng);
  std::vector<Token> stream(kStreamLength);
  for (std::size_t i = 0; i < stream.size(); ++i) stream[i] = kind == kPeriodic ? unit[i % unit.size()] : token(rng);
  return stream;
}

const char* kind_name(std::int64_t kind) { return kind == kPeriodic ? "periodic" : "random"; }

// Args: window, vocabulary, stream kind.
void BM_Update(benchmark::State& state) {
  const auto window = static_cast<std::size_t>(state.range(0));
  const std::vector<Token> stream = make_stream(state.range(2), state.range(1));
  NGramPredictor predictor(NGramConfig{.min_order = 2, .max_order = 4, .max_drafts = 4, .window = window});
  // Warm up past the window so every update also evicts, as in steady state.
  for (std::size_t i = 0; i < 2 * window; ++i) predictor.update(stream[i]);
  std::size_t i = 0;
  for (auto _ : state) {
    predictor.update(stream[i]);
    i = (i + 1) & (kStreamLength - 1);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(kind_name(state.range(2)));
}

// Args: window, vocabulary, stream kind, k. Predicts repeatedly from one warm state.
void BM_Predict(benchmark::State& state) {
  const auto window = static_cast<std::size_t>(state.range(0));
  const auto k = static_cast<std::size_t>(state.range(3));
  const std::vector<Token> stream = make_stream(state.range(2), state.range(1));
  NGramPredictor predictor(NGramConfig{.min_order = 2, .max_order = 4, .max_drafts = k, .window = window});
  for (std::size_t i = 0; i < 4 * window + 3; ++i) predictor.update(stream[i]);
  std::array<Token, 64> out{};
  std::size_t drafted = 0;
  for (auto _ : state) {
    drafted += predictor.predict(std::span<Token>(out).first(k));
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["drafts/call"] = benchmark::Counter(static_cast<double>(drafted) / static_cast<double>(state.iterations()));
  state.SetLabel(kind_name(state.range(2)));
}

// Args: window, vocabulary, stream kind, k. One decode step's drafter work: observe one
// token, then propose k; the state moves every call, as it does while decoding.
void BM_UpdateThenPredict(benchmark::State& state) {
  const auto window = static_cast<std::size_t>(state.range(0));
  const auto k = static_cast<std::size_t>(state.range(3));
  const std::vector<Token> stream = make_stream(state.range(2), state.range(1));
  NGramPredictor predictor(NGramConfig{.min_order = 2, .max_order = 4, .max_drafts = k, .window = window});
  for (std::size_t i = 0; i < 2 * window; ++i) predictor.update(stream[i]);
  std::array<Token, 64> out{};
  std::size_t i = 0;
  for (auto _ : state) {
    predictor.update(stream[i]);
    benchmark::DoNotOptimize(predictor.predict(std::span<Token>(out).first(k)));
    i = (i + 1) & (kStreamLength - 1);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(kind_name(state.range(2)));
}

void update_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"window", "vocab", "kind"});
  for (std::int64_t window : {512, 8192}) {
    for (std::int64_t vocab : {32000, 128000}) {
      for (std::int64_t kind : {kPeriodic, kRandom}) b->Args({window, vocab, kind});
    }
  }
}

void predict_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"window", "vocab", "kind", "k"});
  for (std::int64_t window : {512, 8192}) {
    for (std::int64_t vocab : {32000, 128000}) {
      for (std::int64_t kind : {kPeriodic, kRandom}) {
        for (std::int64_t k : {4, 8}) b->Args({window, vocab, kind, k});
      }
    }
  }
}

BENCHMARK(BM_Update)->Apply(update_args);
BENCHMARK(BM_Predict)->Apply(predict_args);
BENCHMARK(BM_UpdateThenPredict)->Apply(predict_args);

}  // namespace

BENCHMARK_MAIN();
