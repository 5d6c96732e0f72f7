// What drafting a tree costs on real text, beside the chain it grows from, and what feeding a
// pass's top-k back costs.
//
// Stream: the recorded Spec-Bench streams (../shared/data/specbench/streams.tsv), each record
// prompt then output, joined end to end in file order; without the shared data folder, the
// synthetic stream mixture:48 instead, and a line on stderr says why. The drafters first
// observe kContext tokens of it; every timed step then observes the next token.
//
// The top-k table is filled as a model would fill it: after each observed token t, the row of
// t gets the kTopK tokens that followed t in the stream from there on (the true next token
// first), a stand-in for the model's top-k that ranks what the text will do. Recordings hold no
// real top-k; the cost of a lookup does not depend on what the row holds.
//
// Benchmarks (one iteration = one token; Time and CPU columns are ns per token):
//   update/tree            TreeDrafter::update(token) alone
//   step/chain/k:N         MatchDrafter: update(token), then predict() of up to N drafts with
//                          their estimates (what a cost-aware chain decoder asks for)
//   step/tree/nodes:N      TreeDrafter: update(token), then predict_tree() of up to N nodes,
//                          depth up to 64: the chain above plus the text's and the table's
//                          alternatives at every node, expanded best-first
//   record/top-k/nodes:N   TopKTable::record of a pass of N + 1 tokens (the root and N nodes),
//                          8 tokens a row: what a decoder does after each pass
//   observe/nodes:N        TreeDrafter::observe_pass of such a pass: the calibration and the
//                          record together
//   step/tree-drawn/nodes:N  step/tree with TreeConfig::draw_recycled: the table's rows carry
//                          probabilities and the recycled candidates are drawn from them, each
//                          node's distribution written out (predict_tree with a
//                          DraftDistributions): what drafting with q adds to drafting a tree
//   sample/row/vocab:V     TokenSampler::choose on one row of V logits at temperature 1: what
//                          a sampling model pays per row
//   record/row/vocab:V     sample/row with the row's 8 most likely tokens and their probabilities
//                          written out (TokenSampler::TopDistribution) and recorded
//                          (TopKTable::record_distribution): what SamplingModel pays per row
//                          to feed draw_recycled; the difference is what recording adds
// Building a tree costs step/tree - update/tree; nodes/call says how many nodes it built.
//
//   build/release/bench/tree_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ngramspec/draft_distribution.hpp"
#include "ngramspec/draft_tree.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/token_sampler.hpp"
#include "ngramspec/top_k_table.hpp"
#include "ngramspec/tree_drafter.hpp"
#include "replay/token_streams.hpp"

namespace ngramspec::bench {
namespace {

constexpr std::size_t kContext = 4096;  // tokens observed before the timed walk
constexpr std::size_t kWalk = 16384;    // tokens the timed walk cycles over
constexpr std::size_t kTopK = 8;
constexpr std::size_t kVocab = 32000;

std::vector<Token> load_stream() {
  std::string missing = "NGRAMSPEC_SHARED_DIR is not defined";
#ifdef NGRAMSPEC_SHARED_DIR
  const std::filesystem::path path = std::filesystem::path(NGRAMSPEC_SHARED_DIR) / "data/specbench/streams.tsv";
  if (std::filesystem::exists(path)) {
    std::vector<Token> joined;
    for (const replay::TokenStream& record : replay::read_streams(path.string())) {
      joined.insert(joined.end(), record.prompt.begin(), record.prompt.end());
      joined.insert(joined.end(), record.output.begin(), record.output.end());
    }
    return joined;
  }
  missing = path.string() + " is missing";
#endif
  std::fprintf(stderr, "tree_bench: %s; measuring the synthetic stream mixture:48 instead\n", missing.c_str());
  replay::SyntheticSpec spec = replay::parse_synthetic("mixture:48");
  spec.output_length = kContext + kWalk + kTopK + 1;
  spec.samples = 1;
  return replay::make_synthetic(spec).front().output;
}

const std::vector<Token>& stream() {
  static const std::vector<Token> tokens = [] {
    std::vector<Token> t = load_stream();
    for (Token& token : t) token %= static_cast<Token>(kVocab);
    return t;
  }();
  return tokens;
}

// The top-k row after stream position `from` as the bench models it: the next distinct tokens of
// the stream (a model's row lists each token once, and observe_pass refuses one that does not).
void top_row(std::size_t from, std::span<Token> row) {
  const std::vector<Token>& s = stream();
  std::size_t n = 0;
  for (std::size_t j = from; j < s.size() && n < row.size(); ++j) {
    if (std::find(row.begin(), row.begin() + static_cast<std::ptrdiff_t>(n), s[j]) ==
        row.begin() + static_cast<std::ptrdiff_t>(n)) {
      row[n++] = s[j];
    }
  }
  for (Token t = 0; n < row.size(); ++t) {  // the stream's end: tokens not listed yet
    if (std::find(row.begin(), row.begin() + static_cast<std::ptrdiff_t>(n), t) ==
        row.begin() + static_cast<std::ptrdiff_t>(n)) {
      row[n++] = t;
    }
  }
}

// Feeds the drafter token `i` of the stream and, as a model pass would, the top-k row after it.
void observe(TreeDrafter& drafter, std::size_t i) {
  const std::vector<Token>& s = stream();
  drafter.update(s[i]);
  static DraftTree none;
  const Token fed[1] = {s[i]};
  const Token next[1] = {s[i + 1]};
  Token top[kTopK];
  top_row(i + 1, top);
  const std::size_t kept[1] = {0};
  drafter.observe_pass(none, fed, next, kept, top);
}

TreeConfig tree_config() {
  TreeConfig config;
  config.vocab_size = kVocab;
  config.top_k = kTopK;
  return config;
}

const TreeDrafter& prepared_tree() {
  static const TreeDrafter prepared = [] {
    TreeDrafter drafter(tree_config());
    for (std::size_t i = 0; i < kContext; ++i) observe(drafter, i);
    return drafter;
  }();
  return prepared;
}

// The same walk for a drafter that draws its recycled candidates: the row after each token gets
// probabilities halving from 0.4 down the ranks.
const TreeDrafter& prepared_drawn_tree() {
  static const TreeDrafter prepared = [] {
    TreeConfig config = tree_config();
    config.draw_recycled = true;
    TreeDrafter drafter(config);
    const std::vector<Token>& s = stream();
    std::array<float, kTopK> probabilities{};
    for (std::size_t r = 0; r < kTopK; ++r) probabilities[r] = 0.4f / static_cast<float>(1U << r);
    for (std::size_t i = 0; i < kContext; ++i) {
      drafter.update(s[i]);
      drafter.top_k_table()->record_distribution(s[i], std::span<const Token>(s).subspan(i + 1, kTopK), probabilities);
    }
    return drafter;
  }();
  return prepared;
}

const MatchDrafter& prepared_chain() {
  static const MatchDrafter prepared = [] {
    MatchDrafter drafter;
    for (std::size_t i = 0; i < kContext; ++i) drafter.update(stream()[i]);
    return drafter;
  }();
  return prepared;
}

// The walk's next position, going back to the prepared state (outside the timing) at its end.
template <class D>
std::size_t next_position(benchmark::State& state, D& drafter, const D& prepared, std::size_t& pos) {
  if (pos == kContext + kWalk) {
    state.PauseTiming();
    drafter = prepared;
    pos = kContext;
    state.ResumeTiming();
  }
  return pos++;
}

void update_tree(benchmark::State& state) {
  TreeDrafter drafter = prepared_tree();
  std::size_t pos = kContext;
  for (auto _ : state) drafter.update(stream()[next_position(state, drafter, prepared_tree(), pos)]);
}

void step_chain(benchmark::State& state) {
  const auto k = static_cast<std::size_t>(state.range(0));
  MatchDrafter drafter = prepared_chain();
  std::vector<Token> out(k);
  std::vector<float> probabilities(k);
  std::size_t pos = kContext;
  std::size_t drafted = 0;
  for (auto _ : state) {
    drafter.update(stream()[next_position(state, drafter, prepared_chain(), pos)]);
    drafted += drafter.predict(out, probabilities);
  }
  state.counters["drafts/call"] = benchmark::Counter(static_cast<double>(drafted), benchmark::Counter::kAvgIterations);
}

void step_tree(benchmark::State& state) {
  const auto nodes = static_cast<std::size_t>(state.range(0));
  TreeDrafter drafter = prepared_tree();
  DraftTree tree(nodes);
  std::size_t pos = kContext;
  std::size_t built = 0;
  for (auto _ : state) {
    drafter.update(stream()[next_position(state, drafter, prepared_tree(), pos)]);
    built += drafter.predict_tree(tree, nodes, 64);
  }
  state.counters["nodes/call"] = benchmark::Counter(static_cast<double>(built), benchmark::Counter::kAvgIterations);
}

void step_drawn_tree(benchmark::State& state) {
  const auto nodes = static_cast<std::size_t>(state.range(0));
  TreeDrafter drafter = prepared_drawn_tree();
  DraftTree tree(nodes);
  DraftDistributions q;
  q.reserve(nodes, kTopK);
  std::size_t pos = kContext;
  std::size_t built = 0;
  for (auto _ : state) {
    drafter.update(stream()[next_position(state, drafter, prepared_drawn_tree(), pos)]);
    built += drafter.predict_tree(tree, nodes, 64, 0.0f, q);
  }
  state.counters["nodes/call"] = benchmark::Counter(static_cast<double>(built), benchmark::Counter::kAvgIterations);
}

// Rows of Gaussian logits (a spread distribution, as at temperature 1).
std::vector<float> logit_rows(std::size_t vocab, std::size_t rows) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(vocab * rows);
  for (float& l : logits) l = normal(rng);
  return logits;
}

void sample_row(benchmark::State& state) {
  const auto vocab = static_cast<std::size_t>(state.range(0));
  const std::vector<float> logits = logit_rows(vocab, 16);
  TokenSampler sampler({.temperature = 1.0f}, vocab);
  std::uint64_t position = 0;
  for (auto _ : state) {
    const std::size_t r = position % 16;
    benchmark::DoNotOptimize(sampler.choose(std::span<const float>(logits).subspan(r * vocab, vocab), position++));
  }
}

void record_row(benchmark::State& state) {
  const auto vocab = static_cast<std::size_t>(state.range(0));
  const std::vector<float> logits = logit_rows(vocab, 16);
  TokenSampler sampler({.temperature = 1.0f}, vocab);
  TopKTable table(vocab, kTopK, true);
  std::array<Token, kTopK> tokens{};
  std::array<float, kTopK> probabilities{};
  TokenSampler::TopDistribution top{tokens, probabilities};
  std::uint64_t position = 0;
  for (auto _ : state) {
    const std::size_t r = position % 16;
    benchmark::DoNotOptimize(sampler.choose(std::span<const float>(logits).subspan(r * vocab, vocab), position, top));
    table.record_distribution(static_cast<Token>(position++ % vocab), std::span<const Token>(tokens).first(top.size),
                              std::span<const float>(probabilities).first(top.size));
    benchmark::ClobberMemory();
  }
}

// A pass of nodes + 1 tokens from the stream and their top-k rows.
struct Pass {
  std::vector<Token> fed;
  std::vector<Token> next;
  std::vector<Token> top;
  explicit Pass(std::size_t nodes) : fed(nodes + 1), next(nodes + 1), top((nodes + 1) * kTopK) {
    const std::vector<Token>& s = stream();
    for (std::size_t i = 0; i <= nodes; ++i) {
      fed[i] = s[kContext + i];
      next[i] = s[kContext + i + 1];
      top_row(kContext + i + 1, std::span<Token>(top).subspan(i * kTopK, kTopK));
    }
  }
};

void record_top_k(benchmark::State& state) {
  const Pass pass(static_cast<std::size_t>(state.range(0)));
  TopKTable table(kVocab, kTopK);
  for (auto _ : state) {
    table.record(pass.fed, pass.top);
    benchmark::ClobberMemory();
  }
}

void observe_pass(benchmark::State& state) {
  const auto nodes = static_cast<std::size_t>(state.range(0));
  TreeDrafter drafter = prepared_tree();
  DraftTree tree(nodes);
  drafter.predict_tree(tree, nodes, 64);
  Pass pass(tree.size());
  const std::size_t kept[1] = {0};
  for (auto _ : state) {
    drafter.observe_pass(tree, pass.fed, pass.next, kept, pass.top);
    benchmark::ClobberMemory();
  }
  state.counters["nodes"] = static_cast<double>(tree.size());
}

BENCHMARK(update_tree)->Name("update/tree");
BENCHMARK(step_chain)->Name("step/chain/k")->Arg(4)->Arg(16)->Arg(64);
BENCHMARK(step_tree)->Name("step/tree/nodes")->Arg(4)->Arg(16)->Arg(64);
BENCHMARK(record_top_k)->Name("record/top-k/nodes")->Arg(0)->Arg(16)->Arg(64);
BENCHMARK(observe_pass)->Name("observe/nodes")->Arg(16)->Arg(64);
BENCHMARK(step_drawn_tree)->Name("step/tree-drawn/nodes")->Arg(4)->Arg(16)->Arg(64);
BENCHMARK(sample_row)->Name("sample/row/vocab")->Arg(512)->Arg(32000);
BENCHMARK(record_row)->Name("record/row/vocab")->Arg(512)->Arg(32000);

}  // namespace
}  // namespace ngramspec::bench

BENCHMARK_MAIN();
