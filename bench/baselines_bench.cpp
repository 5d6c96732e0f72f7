// What each drafter costs as the context grows: NGramPredictor and MatchDrafter against the
// prompt-lookup drafters that rescan the whole context on every proposal and llama.cpp's
// unbounded n-gram cache, at contexts of 1k to 128k tokens.
//
// Per drafter and context length L (the drafter has observed L tokens of one long stream):
//   update/...        ns per observed token, observing tokens L .. L + L/8 in turn
//   predict/.../k:K   ns per predict() of K drafts from one fixed state: the first at or after
//                     L tokens (within L/8) from which the drafter proposes all K, so that a
//                     drafter is not timed on the trivial path of finding no context. One state
//                     is representative for the O(context) scans and flatters the rest, hence:
//   step/.../k:K      ns per decode step: observe the next token, then predict K drafts, so the
//                     state moves every call as it does while decoding (worst case of one
//                     accepted token per step); tokens L .. L + L/8, then back to L.
// One iteration is one token, call or step, so the Time and CPU columns are the figures (CPU
// is the steadier one on a shared machine).
// drafts/call says how much each call proposed, so a drafter cannot look cheap by drafting
// nothing. The label names the stream: the recorded Spec-Bench streams concatenated in file
// order when the shared data folder is there, else a synthetic mixture of fresh text and copies.
//
// MatchDrafter runs with a cap that indexes all of the longest context and the tokens after
// it, so its index never stops growing within a benchmark: `match` with the other settings at
// their defaults (the gate at 0.03), `match+corpus` with a 64 MiB SharedCorpus holding a later
// part of the stream (records of 256 tokens, none of the measured tokens), which it drafts from
// when its own match is empty, and `match-nogate` with min_confidence 0 (no gate, and so none
// of the calibration the gate does on every update).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bench_main.hpp"
#include "baselines/ngram_cache.hpp"
#include "baselines/prompt_lookup.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "replay/token_streams.hpp"
#include "stream_walk.hpp"

namespace {

using namespace ngramspec;
using bench::StreamWalk;

constexpr std::array<std::size_t, 4> kContexts = {1024, 8192, 65536, 131072};
constexpr std::array<std::size_t, 2> kDrafts = {4, 8};
// Each figure is measured for this long; the whole run stays near a minute.
constexpr double kMinSeconds = 0.1;
// Update and step of a drafter whose copy costs O(cap) however short the context (MatchDrafter)
// observe this many tokens instead, or the span when longer: going back to the state at L
// every L/8 tokens would otherwise take seconds per figure at short contexts.
constexpr std::size_t kFixedTokens = 16384;
enum class Length { kMinTime, kFixedTokens };

struct Stream {
  std::vector<Token> tokens;
  std::string source;
};

// At least this many tokens: the longest context and the tokens observed after it.
constexpr std::size_t kStreamTokens = kContexts.back() + kContexts.back() / 8 + 1;
// Then this many for the shared corpus, so that it holds none of the measured tokens.
constexpr std::size_t kCorpusTokens = 128 * 1024;
constexpr std::size_t kCorpusRecordTokens = 256;
constexpr std::size_t kCorpusBytes = std::size_t{64} << 20;
// MatchDrafter's cap: every token a benchmark observes is indexed.
constexpr std::size_t kMatchCap = 160 * 1024;
static_assert(kMatchCap >= kStreamTokens);

Stream load_stream() {
  Stream stream;
#ifdef NGRAMSPEC_SHARED_DIR
  const std::filesystem::path path = std::filesystem::path(NGRAMSPEC_SHARED_DIR) / "data/specbench/streams.tsv";
  if (std::filesystem::exists(path)) {
    for (const replay::TokenStream& record : replay::read_streams(path.string())) {
      stream.tokens.insert(stream.tokens.end(), record.prompt.begin(), record.prompt.end());
      stream.tokens.insert(stream.tokens.end(), record.output.begin(), record.output.end());
    }
    stream.source = "specbench";
  }
#endif
  if (stream.tokens.size() < kStreamTokens + kCorpusTokens) {
    // Runs of 48 tokens, fresh and copied from anywhere earlier in turn, over a 32k vocabulary.
    replay::SyntheticSpec spec = replay::parse_synthetic("mixture:48");
    spec.output_length = kStreamTokens + kCorpusTokens;
    spec.samples = 1;
    const replay::TokenStream synthetic = replay::make_synthetic(spec).front();
    stream.tokens = synthetic.prompt;
    stream.tokens.insert(stream.tokens.end(), synthetic.output.begin(), synthetic.output.end());
    stream.source = "synthetic-mixture";
  }
  return stream;
}

const Stream& stream() {
  static const Stream loaded = load_stream();
  return loaded;
}

// Earlier requests' outputs for match+corpus: the kCorpusTokens after the measured ones, in records.
const SharedCorpus& shared_corpus() {
  static const std::unique_ptr<SharedCorpus> corpus = [] {
    auto filled = std::make_unique<SharedCorpus>(kCorpusBytes);
    const std::span<const Token> tokens = std::span<const Token>(stream().tokens).subspan(kStreamTokens, kCorpusTokens);
    for (std::size_t at = 0; at < tokens.size(); at += kCorpusRecordTokens) {
      filled->append(tokens.subspan(at, std::min(kCorpusRecordTokens, tokens.size() - at)));
    }
    return filled;
  }();
  return *corpus;
}

// The drafter after the first `context` tokens, or with `until_full` after the first tokens from
// `context` on (within context / 8) that leave it proposing all k drafts. Built once per key
// and kept while consecutive benchmarks ask for it, so repeated runs of one benchmark (the
// library's iteration-count search) do not rebuild it.
template <class D, class Make>
const D& prepared(const std::string& key, const Make& make, std::size_t k, std::size_t context,
                  bool until_full = false) {
  static std::string cached_key;
  static std::unique_ptr<D> cached;
  if (cached == nullptr || cached_key != key) {
    cached.reset();  // first, so two large drafters never coexist
    const std::vector<Token>& tokens = stream().tokens;
    cached = std::make_unique<D>(make(k));
    cached->update(std::span<const Token>(tokens).first(context));
    std::array<Token, 16> out{};
    for (std::size_t pos = context; until_full && pos < context + context / 8; ++pos) {
      if (cached->predict(std::span<Token>(out).first(k)) == k) break;
      cached->update(tokens[pos]);
    }
    cached_key = key;
  }
  return *cached;
}

std::string label(std::size_t context) { return stream().source + " ctx=" + std::to_string(context); }

// Items are calls; the counter is the drafts each call made on average.
void report_drafts(benchmark::State& state, std::size_t drafted, const std::string& text) {
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  state.counters["drafts/call"] = benchmark::Counter(static_cast<double>(drafted), benchmark::Counter::kAvgIterations);
  state.SetLabel(text);
}

// Measured for kMinSeconds, or over max(kFixedTokens, span) tokens.
void set_length(benchmark::internal::Benchmark* benchmark, Length length, std::size_t span) {
  if (length == Length::kFixedTokens) {
    benchmark->Iterations(static_cast<benchmark::IterationCount>(std::max(kFixedTokens, span)));
  } else {
    benchmark->MinTime(kMinSeconds);
  }
}


template <class D, class Make>
void register_drafter(const std::string& name, Make make, Length length = Length::kMinTime) {
  for (const std::size_t context : kContexts) {
    const std::string ctx = "/ctx:" + std::to_string(context);
    const std::size_t span = context / 8;  // tokens observed before going back to the state at `context`

    auto* update = benchmark::RegisterBenchmark(("update/" + name + ctx).c_str(), [=](benchmark::State& state) {
      StreamWalk<D> walk(prepared<D>(name + ctx + "/4", make, 4, context), stream().tokens, context, span);
      for (auto _ : state) walk.observe_next(state);
      benchmark::DoNotOptimize(walk.drafter());
      state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
      state.SetLabel(label(context) + " ns/token");
    });
    set_length(update, length, span);

    for (const std::size_t k : kDrafts) {
      const std::string suffix = ctx + "/k:" + std::to_string(k);
      benchmark::RegisterBenchmark(("predict/" + name + suffix).c_str(), [=](benchmark::State& state) {
        const D& drafter = prepared<D>(name + suffix + "/full", make, k, context, true);
        std::array<Token, 16> out{};
        std::size_t drafted = 0;
        for (auto _ : state) {
          drafted += drafter.predict(std::span<Token>(out).first(k));
          benchmark::DoNotOptimize(out.data());
          benchmark::ClobberMemory();
        }
        report_drafts(state, drafted, label(context) + " ns/call");
      })->MinTime(kMinSeconds);
    }

    for (const std::size_t k : kDrafts) {
      const std::string suffix = ctx + "/k:" + std::to_string(k);
      auto* step = benchmark::RegisterBenchmark(("step/" + name + suffix).c_str(), [=](benchmark::State& state) {
        StreamWalk<D> walk(prepared<D>(name + ctx + "/" + std::to_string(k), make, k, context), stream().tokens, context,
                           span);
        std::array<Token, 16> out{};
        std::size_t drafted = 0;
        for (auto _ : state) {
          walk.observe_next(state);
          drafted += walk.drafter().predict(std::span<Token>(out).first(k));
          benchmark::DoNotOptimize(out.data());
          benchmark::ClobberMemory();
        }
        report_drafts(state, drafted, label(context) + " ns/step");
      });
      set_length(step, length, span);
    }
  }
}

void register_all() {
  for (const std::size_t window : {std::size_t{512}, std::size_t{8192}}) {
    register_drafter<NGramPredictor>("ngram(w=" + std::to_string(window) + ")", [window](std::size_t k) {
      return NGramPredictor(NGramConfig{.min_order = 2, .max_order = 4, .max_drafts = k, .window = window});
    });
  }
  register_drafter<MatchDrafter>(
      "match", [](std::size_t k) { return MatchDrafter(MatchConfig{.index_capacity = kMatchCap, .max_drafts = k}); },
      Length::kFixedTokens);
  register_drafter<MatchDrafter>(
      "match+corpus",
      [](std::size_t k) {
        return MatchDrafter(MatchConfig{.index_capacity = kMatchCap, .max_drafts = k}, &shared_corpus());
      },
      Length::kFixedTokens);
  register_drafter<MatchDrafter>(
      "match-nogate",
      [](std::size_t k) {
        return MatchDrafter(MatchConfig{.index_capacity = kMatchCap, .max_drafts = k, .min_confidence = 0});
      },
      Length::kFixedTokens);
  register_drafter<baselines::PromptLookupDrafter>("prompt-lookup(vllm,1-4)", [](std::size_t k) {
    return baselines::PromptLookupDrafter(baselines::vllm_ngram(1, 4, k));
  });
  register_drafter<baselines::PromptLookupDrafter>("pld-specbench", [](std::size_t k) {
    baselines::PromptLookupConfig config = baselines::spec_bench_pld();
    config.max_drafts = k;  // as the replay tool runs it: k drafts a pass
    return baselines::PromptLookupDrafter(config);
  });
  register_drafter<baselines::NGramCacheDrafter>("ngram-cache(llama.cpp)", [](std::size_t k) {
    return baselines::NGramCacheDrafter(baselines::llama_cpp_lookup(k));
  });
}

}  // namespace

int main(int argc, char** argv) {
  return ngramspec::bench::run_benchmarks(argc, argv, [] {
    register_all();
    return true;
  });
}
