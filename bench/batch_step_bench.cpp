// What one whole batched decode step of speculation costs on the engine's thread: for every
// sequence of the batch, take the model's answer to its last drafts, feed what was accepted to
// its drafter, and propose its next drafts. BatchSpeculator (MatchDrafter per sequence, with and
// without a verify cost) against the vLLM-style prompt-lookup scan over the same batch.
//
// Every sequence is begun with a 4096-token prompt, so contexts are 4k tokens and grow from there
// (by at most kDrafts + 1 tokens a step). The text: the recorded Spec-Bench streams
// (../shared/data/specbench/streams.tsv, records' prompt and output tokens concatenated in file
// order, each sequence starting at a different record) when the shared data folder is there, else
// synthetic mixtures of fresh text and copies (one seed per sequence); the label says which.
//
// The model is a mock that answers as a greedy model whose output is the sequence's own stream:
// after a sequence's last token and its drafts it "predicts" the stream's next tokens, so a draft
// is accepted exactly when it equals the stream, and the emitted tokens are always the stream's.
// Writing that answer is part of the timed step, for both sides alike.
//
// Benchmarks (one iteration = one step of the whole batch):
//   step/BatchSpeculator/batch:B         propose() + accept() of the batch; MatchDrafter defaults,
//                                        DecodeOptions::max_drafts = 4, no cost model (every
//                                        sequence sends what its drafter's gate proposes)
//   step/BatchSpeculator+knee:256/...    the same with BatchConfig::cost = knee:256 (the planner
//                                        sizes every draft of the pass together)
//   step/vllm-scan(1-4)/batch:B          one baselines::PromptLookupDrafter(vllm_ngram(1, 4, 4))
//                                        per sequence, updated with its accepted tokens and asked
//                                        for 4 drafts in the same loop (vLLM v1's n-gram proposer,
//                                        which rescans the context for every proposal)
// Counters: per_step (CPU time per step of the batch; the Time column is its wall-clock time),
// per_seq (CPU time per sequence per step), drafts/seq (drafts proposed per sequence-step) and
// emitted/seq (tokens emitted per sequence-step, the mean accepted length), so that no side
// looks cheap by drafting nothing. Each benchmark runs a fixed number of steps (steps_for(batch))
// from freshly begun sequences, the setup (begin, 4096 tokens into every drafter) outside the
// timing; with repetitions every repetition starts afresh.
//
// With knee:256 the planner fills each pass up to 256 tokens: at batch 64 every candidate fits
// (more drafts than the gate alone sends), at batch 256 the sequences' last tokens fill the knee
// and no draft can pay, so none is sent (drafts/seq 0) and the step is the drafters' updates,
// their candidates and the plan.
//
//   build/.../bench/batch_step_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bench_main.hpp"
#include "baselines/prompt_lookup.hpp"
#include "ngramspec/batch_speculator.hpp"
#include "ngramspec/verify_cost.hpp"
#include "replay/token_streams.hpp"

namespace {

using namespace ngramspec;

constexpr std::size_t kPromptTokens = 4096;
constexpr std::size_t kDrafts = 4;
constexpr std::array<std::size_t, 3> kBatches = {1, 64, 256};
// Steps run per benchmark, by batch: enough for a steady figure, few enough that contexts stay
// near 4k tokens (at most kDrafts + 1 more a step) and the vLLM scan at batch 256 takes seconds.
constexpr std::size_t steps_for(std::size_t batch) { return batch == 1 ? 1024 : batch <= 64 ? 512 : 256; }

struct Streams {
  std::vector<std::vector<Token>> sequences;  // each: its prompt, then the tokens the mock model answers
  std::string source;
};

// One stream per sequence of the largest batch, each long enough for its prompt and every step.
Streams load_streams() {
  const std::size_t sequences = kBatches.back();
  const std::size_t length = kPromptTokens + (kDrafts + 1) * std::max(steps_for(1), steps_for(kBatches.back())) + 1;
  Streams streams;
#ifdef NGRAMSPEC_SHARED_DIR
  const std::filesystem::path path = std::filesystem::path(NGRAMSPEC_SHARED_DIR) / "data/specbench/streams.tsv";
  if (std::filesystem::exists(path)) {
    const std::vector<replay::TokenStream> records = replay::read_streams(path.string());
    for (std::size_t i = 0; i < sequences; ++i) {
      std::vector<Token> tokens;
      // Sequence i starts at record i * 7 (mod the records): different text for each, cycling on.
      for (std::size_t r = i * 7; tokens.size() < length; ++r) {
        const replay::TokenStream& record = records[r % records.size()];
        tokens.insert(tokens.end(), record.prompt.begin(), record.prompt.end());
        tokens.insert(tokens.end(), record.output.begin(), record.output.end());
      }
      streams.sequences.push_back(std::move(tokens));
    }
    streams.source = "specbench";
    return streams;
  }
#endif
  for (std::size_t i = 0; i < sequences; ++i) {
    // Runs of 48 tokens, fresh and copied from anywhere earlier in turn, over a 32k vocabulary.
    replay::SyntheticSpec spec = replay::parse_synthetic("mixture:48");
    spec.output_length = length;
    spec.samples = 1;
    spec.seed = i + 1;
    const replay::TokenStream synthetic = replay::make_synthetic(spec).front();
    std::vector<Token> tokens = synthetic.prompt;
    tokens.insert(tokens.end(), synthetic.output.begin(), synthetic.output.end());
    streams.sequences.push_back(std::move(tokens));
  }
  streams.source = "synthetic-mixture";
  return streams;
}

const Streams& streams() {
  static const Streams loaded = load_streams();
  return loaded;
}

std::span<const Token> prompt_of(std::size_t sequence) {
  return std::span<const Token>(streams().sequences[sequence]).first(kPromptTokens);
}

// Per step and per sequence-step figures, and the label.
void report(benchmark::State& state, std::size_t batch, std::size_t drafted, std::size_t emitted,
            const std::string& what) {
  const double steps = static_cast<double>(state.iterations());
  const double sequence_steps = steps * static_cast<double>(batch);
  // Inverted rates: CPU seconds per step and per sequence-step (printed with their SI prefix: 105us).
  state.counters["per_step"] = benchmark::Counter(steps, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["per_seq"] =
      benchmark::Counter(sequence_steps, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["drafts/seq"] = benchmark::Counter(static_cast<double>(drafted) / sequence_steps);
  state.counters["emitted/seq"] = benchmark::Counter(static_cast<double>(emitted) / sequence_steps);
  state.SetItemsProcessed(static_cast<std::int64_t>(sequence_steps));
  state.SetLabel(streams().source + " 4k ctx, k=" + std::to_string(kDrafts) + ", " + what);
}

void batch_speculator_step(benchmark::State& state, std::size_t batch, std::optional<VerifyCost> cost) {
  BatchConfig config;
  config.max_sequences = batch;
  config.cost = cost;
  const std::string what = cost ? "cost " + cost->spec() : "no cost model";
  BatchSpeculator<> spec(config);
  DecodeOptions options;
  options.max_new_tokens = std::size_t{1} << 30;  // no sequence finishes within the benchmark
  options.max_drafts = kDrafts;

  std::vector<SequenceId> ids(batch);
  std::vector<std::size_t> length(batch);  // tokens each sequence holds: its prompt and emitted tokens
  for (std::size_t i = 0; i < batch; ++i) {
    ids[i] = 1000 + i;
    spec.begin(ids[i], prompt_of(i), options);
    length[i] = kPromptTokens;
  }
  std::vector<Token> drafts(batch * kDrafts);
  std::vector<std::size_t> offsets(batch + 1);
  std::vector<Token> answers(batch * (kDrafts + 1));
  std::vector<std::size_t> answer_offsets(batch + 1);
  std::vector<StepOutcome> steps(batch);
  // The first pass prefills every prompt: no drafts, one model token each.
  (void)spec.propose(ids, drafts, offsets);

  std::size_t drafted = 0;
  std::size_t emitted = 0;
  for (auto _ : state) {
    // The mock model's answer to the pass just proposed: each sequence's stream from its end on.
    answer_offsets[0] = 0;
    for (std::size_t i = 0; i < batch; ++i) {
      const std::size_t n = offsets[i + 1] - offsets[i] + 1;
      const Token* from = streams().sequences[i].data() + length[i];
      std::copy(from, from + n, answers.begin() + static_cast<std::ptrdiff_t>(answer_offsets[i]));
      answer_offsets[i + 1] = answer_offsets[i] + n;
    }
    spec.accept(ids, std::span<const Token>(answers).first(answer_offsets[batch]), answer_offsets, steps);
    for (std::size_t i = 0; i < batch; ++i) {
      length[i] += steps[i].emitted;
      emitted += steps[i].emitted;
    }
    drafted += spec.propose(ids, drafts, offsets);
    benchmark::DoNotOptimize(drafts.data());
    benchmark::ClobberMemory();
  }
  report(state, batch, drafted, emitted, what);
}

void vllm_scan_step(benchmark::State& state, std::size_t batch) {
  std::vector<baselines::PromptLookupDrafter> drafters;
  drafters.reserve(batch);
  std::vector<std::size_t> length(batch);
  for (std::size_t i = 0; i < batch; ++i) {
    drafters.emplace_back(baselines::vllm_ngram(1, 4, kDrafts));
    drafters.back().update(prompt_of(i));
    length[i] = kPromptTokens;
  }
  std::vector<Token> drafts(batch * kDrafts);
  std::vector<std::size_t> counts(batch, 0);  // the prefill pass drafted nothing

  std::size_t drafted = 0;
  std::size_t emitted = 0;
  for (auto _ : state) {
    for (std::size_t i = 0; i < batch; ++i) {
      // Verify the sequence's drafts against the mock model's answer (its stream), emit the
      // accepted ones and the model's next token, feed them to the drafter, and draft again.
      const std::span<const Token> stream = streams().sequences[i];
      const std::span<Token> mine = std::span<Token>(drafts).subspan(i * kDrafts, kDrafts);
      std::size_t accepted = 0;
      while (accepted < counts[i] && mine[accepted] == stream[length[i] + accepted]) ++accepted;
      const std::size_t n = accepted + 1;
      drafters[i].update(stream.subspan(length[i], n));
      length[i] += n;
      emitted += n;
      counts[i] = drafters[i].predict(mine);
      drafted += counts[i];
    }
    benchmark::DoNotOptimize(drafts.data());
    benchmark::ClobberMemory();
  }
  report(state, batch, drafted, emitted, "vLLM ngram proposer, min_n 1, max_n 4");
}

void register_all() {
  for (const std::size_t batch : kBatches) {
    const std::string suffix = "/batch:" + std::to_string(batch);
    const auto steps = static_cast<benchmark::IterationCount>(steps_for(batch));
    benchmark::RegisterBenchmark(("step/BatchSpeculator" + suffix).c_str(),
                                 [batch](benchmark::State& state) { batch_speculator_step(state, batch, std::nullopt); })
        ->Iterations(steps)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("step/BatchSpeculator+knee:256" + suffix).c_str(),
                                 [batch](benchmark::State& state) {
                                   batch_speculator_step(state, batch, VerifyCost::knee(256));
                                 })
        ->Iterations(steps)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("step/vllm-scan(1-4)" + suffix).c_str(),
                                 [batch](benchmark::State& state) { vllm_scan_step(state, batch); })
        ->Iterations(steps)
        ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return ngramspec::bench::run_benchmarks(argc, argv, [] {
    register_all();
    return true;
  });
}
