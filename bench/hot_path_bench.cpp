// The per-token hot path of the two drafters on real text: what NGramPredictor and MatchDrafter
// cost for each token a decode loop feeds them, and for the drafts it asks for after each, at
// contexts of 1k to 128k tokens.
//
// Streams (the label names the stream and the context):
//   specbench   every record of the recorded Spec-Bench streams
//               (../shared/data/specbench/streams.tsv), prompt then output, joined end to end
//               in file order (291,768 tokens)
//   long        only the records whose prompt and output have at least 1,024 tokens, joined the
//               same way (about 87k tokens: long summarization, rag and mt_bench records, text
//               that copies its prompt)
// Without the shared data folder, one synthetic stream instead (synthetic-mixture: runs of 48
// tokens, fresh and copied from anywhere earlier in turn), and a line on stderr says why.
// A stream is measured at a context L only when it has the L tokens and the walk after them.
//
// Drafters:
//   ngram   NGramPredictor with the default NGramConfig (orders 2-4, window 512)
//   match   MatchDrafter with the default MatchConfig (the gate at 0.03) but a cap that indexes
//           every token of the longest context and of the walk after it (kMatchCap)
//
// Per drafter, stream and context L (the drafter has observed the stream's first L tokens):
//   update/<drafter>/<stream>/ctx:L       ns per update(token), observing tokens L .. L + span
//                                         in turn, span = max(L/8, 2048), then going back to the
//                                         state after L tokens (outside the timing)
//   step/<drafter>/<stream>/ctx:L/k:4     ns per decode step on the same walk: update(token),
//                                         then predict() with room for 4 drafts (the decode
//                                         loop's pattern when one token is accepted per step)
// One iteration is one token or step, so the Time and CPU columns are the figures (CPU is the
// steadier one on a shared machine). drafts/call (step) says how much each predict() proposed,
// so that a drafter cannot look cheap by drafting nothing. One predict() costs step - update of
// the same drafter, stream and context, read from the same run: predict alone from a state that
// moves cannot be timed apart from the update that moves it.
//
// Each state is built once and kept while consecutive benchmarks ask for it. Going back to it
// copies the drafter, which for MatchDrafter costs O(cap) however short the context (about a
// millisecond), so its short-context rows take several times --benchmark_min_time of wall-clock
// time; the span of at least 2048 tokens keeps that within seconds a row.
//
// Instruction counts: run as
//   hot_path_bench --walk <ngram|match> <stream> <L> <tokens> [--predict K]
// it prepares the drafter after the stream's first L tokens, then calls update(token) for the
// next <tokens> tokens (with --predict K, predict() with room for K after each), prints
// "walked N tokens" and exits; no benchmark runs. Under
//   valgrind --tool=callgrind --collect-atstart=no --toggle-collect='<function>'
// the counts are exactly the instructions spent inside that function (and what it calls) over
// the walk: the costs of the preparation are zeroed before the walk starts when the binary is
// built with valgrind's headers. bench/instructions_per_token.py runs every walk and tabulates.
//
//   build/release/bench/hot_path_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "bench_main.hpp"
#include "ngramspec/detail/parse_number.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/ngram_predictor.hpp"
#include "replay/token_streams.hpp"
#include "stream_walk.hpp"

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define NGRAMSPEC_CALLGRIND_ZERO_STATS() CALLGRIND_ZERO_STATS
constexpr bool kZeroesPreparation = true;
#else
#define NGRAMSPEC_CALLGRIND_ZERO_STATS() ((void)0)
constexpr bool kZeroesPreparation = false;
#endif

namespace {

using namespace ngramspec;
using bench::StreamWalk;

constexpr std::array<std::size_t, 4> kContexts = {1024, 8192, 65536, 131072};
constexpr std::size_t kDrafts = 4;
// Records of at least this many tokens (prompt and output) make up the `long` stream.
constexpr std::size_t kLongRecordTokens = 1024;
// Tokens observed after the context before going back to the state after it: L/8, or this
// many when more, so that short contexts still average over a stretch of text.
constexpr std::size_t kMinSpan = 2048;
constexpr std::size_t span_after(std::size_t context) { return std::max(context / 8, kMinSpan); }
// MatchDrafter's cap, as an engine serving contexts of up to 128k tokens would set it: 160k
// indexes every token of the longest context (128k) and of the walk after it (16k), so no row
// times the cheaper path of a full index. The tables are sized by the cap, so every context pays
// the cache misses of tables sized for 128k, as it does in such an engine.
constexpr std::size_t kMatchCap = 163840;
static_assert(kMatchCap >= kContexts.back() + span_after(kContexts.back()));

struct NamedStream {
  std::string name;
  std::vector<Token> tokens;
  // Whether the context and the walk after it fit in the stream.
  [[nodiscard]] bool fits(std::size_t context) const noexcept {
    return tokens.size() >= context + span_after(context);
  }
};

void append_record(std::vector<Token>& joined, const replay::TokenStream& record) {
  joined.insert(joined.end(), record.prompt.begin(), record.prompt.end());
  joined.insert(joined.end(), record.output.begin(), record.output.end());
}

std::vector<NamedStream> load_streams() {
  std::string missing = "NGRAMSPEC_SHARED_DIR is not defined";
#ifdef NGRAMSPEC_SHARED_DIR
  const std::filesystem::path path = std::filesystem::path(NGRAMSPEC_SHARED_DIR) / "data/specbench/streams.tsv";
  if (std::filesystem::exists(path)) {
    NamedStream all{"specbench", {}};
    NamedStream long_records{"long", {}};
    for (const replay::TokenStream& record : replay::read_streams(path.string())) {
      append_record(all.tokens, record);
      if (record.prompt.size() + record.output.size() >= kLongRecordTokens) append_record(long_records.tokens, record);
    }
    std::vector<NamedStream> loaded;
    loaded.push_back(std::move(all));
    loaded.push_back(std::move(long_records));
    return loaded;
  }
  missing = path.string() + " is missing";
#endif
  std::fprintf(stderr, "hot_path_bench: %s; measuring the synthetic stream synthetic-mixture (mixture:48) instead\n",
               missing.c_str());
  // Runs of 48 tokens, fresh and copied from anywhere earlier in turn, over a 32k vocabulary;
  // long enough for the longest context and the walk after it.
  replay::SyntheticSpec spec = replay::parse_synthetic("mixture:48");
  spec.output_length = kContexts.back() + span_after(kContexts.back());
  spec.samples = 1;
  std::vector<NamedStream> loaded(1);
  loaded.front().name = "synthetic-mixture";
  append_record(loaded.front().tokens, replay::make_synthetic(spec).front());
  return loaded;
}

// Loaded once, before anything is registered; never changed after, so references stay valid.
const std::vector<NamedStream>& streams() {
  static const std::vector<NamedStream> loaded = load_streams();
  return loaded;
}

NGramPredictor make_ngram() { return NGramPredictor(NGramConfig{}); }
MatchDrafter make_match() { return MatchDrafter(MatchConfig{.index_capacity = kMatchCap}); }

// The drafter after the first `context` tokens of `stream`, built once per key and kept while
// consecutive benchmarks ask for it, so the library's repeated runs of one benchmark (its
// iteration-count search) and the update and step benchmarks of one state do not rebuild it.
template <class D, class Make>
const D& prepared(const std::string& key, const Make& make, const NamedStream& stream, std::size_t context) {
  static std::string cached_key;
  static std::unique_ptr<D> cached;
  if (cached == nullptr || cached_key != key) {
    cached.reset();  // first, so two large drafters never coexist
    cached = std::make_unique<D>(make());
    cached->update(std::span<const Token>(stream.tokens).first(context));
    cached_key = key;
  }
  return *cached;
}


template <class D, class Make>
void register_drafter(const std::string& drafter, Make make) {
  for (const NamedStream& stream : streams()) {
    for (const std::size_t context : kContexts) {
      if (!stream.fits(context)) continue;
      const std::string row = drafter + "/" + stream.name + "/ctx:" + std::to_string(context);
      const std::string label = stream.name + " ctx=" + std::to_string(context);
      const std::size_t span = span_after(context);
      const NamedStream* text = &stream;

      benchmark::RegisterBenchmark(("update/" + row).c_str(), [=](benchmark::State& state) {
        StreamWalk<D> walk(prepared<D>(row, make, *text, context), text->tokens, context, span);
        for (auto _ : state) walk.observe_next(state);
        benchmark::DoNotOptimize(walk.drafter());
        state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
        state.SetLabel(label + " ns/token");
      });

      const std::string step_name = "step/" + row + "/k:" + std::to_string(kDrafts);
      benchmark::RegisterBenchmark(step_name.c_str(), [=](benchmark::State& state) {
        StreamWalk<D> walk(prepared<D>(row, make, *text, context), text->tokens, context, span);
        std::array<Token, kDrafts> out{};
        std::size_t drafted = 0;
        for (auto _ : state) {
          walk.observe_next(state);
          drafted += walk.drafter().predict(out);
          benchmark::DoNotOptimize(out.data());
          benchmark::ClobberMemory();
        }
        state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
        state.counters["drafts/call"] =
            benchmark::Counter(static_cast<double>(drafted), benchmark::Counter::kAvgIterations);
        state.SetLabel(label + " ns/step");
      });
    }
  }
}

void register_all() {
  register_drafter<NGramPredictor>("ngram", make_ngram);
  register_drafter<MatchDrafter>("match", make_match);
}

// --walk: the drafter after `context` tokens, then `tokens` updates (each followed by a predict()
// with room for `drafts` when drafts > 0). The preparation's costs are zeroed before the walk.
template <class D, class Make>
int walk(const Make& make, const NamedStream& stream, std::size_t context, std::size_t tokens, std::size_t drafts) {
  D drafter = make();
  drafter.update(std::span<const Token>(stream.tokens).first(context));
  std::vector<Token> out(drafts);
  std::size_t drafted = 0;
  NGRAMSPEC_CALLGRIND_ZERO_STATS();
  for (std::size_t pos = context; pos < context + tokens; ++pos) {
    drafter.update(stream.tokens[pos]);
    if (drafts > 0) drafted += drafter.predict(out);
  }
  benchmark::DoNotOptimize(drafted);
  std::printf("walked %zu tokens\n", tokens);
  // Without valgrind's headers the preparation cannot be zeroed, and its updates would be counted.
  if (!kZeroesPreparation) std::printf("preparation not zeroed: built without <valgrind/callgrind.h>\n");
  if (drafts > 0) std::printf("drafted %zu tokens in %zu calls of room %zu\n", drafted, tokens, drafts);
  return 0;
}

bool parse_count(std::string_view text, std::size_t& value) {
  const ngramspec::detail::ParsedNumber<std::size_t> count = ngramspec::detail::parse_whole<std::size_t>(text);
  value = count.value;
  return count.ok();
}

constexpr const char* kWalkUsage =
    "usage: hot_path_bench --walk <ngram|match> <stream> <context> <tokens> [--predict K]\n";

int run_walk(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);  // args[0] is --walk
  std::size_t context = 0;
  std::size_t tokens = 0;
  std::size_t drafts = 0;
  const bool shape_ok = args.size() == 5 || (args.size() == 7 && args[5] == "--predict");
  if (!shape_ok || !parse_count(args[3], context) || !parse_count(args[4], tokens) ||
      (args.size() == 7 && (!parse_count(args[6], drafts) || drafts == 0))) {
    std::fputs(kWalkUsage, stderr);
    return 2;
  }
  const std::string_view drafter = args[1];
  const auto found = std::find_if(streams().begin(), streams().end(),
                                  [&](const NamedStream& stream) { return stream.name == args[2]; });
  if (found == streams().end()) {
    std::fprintf(stderr, "hot_path_bench: no stream '%.*s'; the streams are:", static_cast<int>(args[2].size()),
                 args[2].data());
    for (const NamedStream& stream : streams()) std::fprintf(stderr, " %s", stream.name.c_str());
    std::fputc('\n', stderr);
    return 2;
  }
  if (context + tokens > found->tokens.size()) {
    std::fprintf(stderr, "hot_path_bench: stream %s has %zu tokens, fewer than %zu + %zu\n", found->name.c_str(),
                 found->tokens.size(), context, tokens);
    return 2;
  }
  if (drafter == "ngram") return walk<NGramPredictor>(make_ngram, *found, context, tokens, drafts);
  if (drafter == "match") return walk<MatchDrafter>(make_match, *found, context, tokens, drafts);
  std::fprintf(stderr, "hot_path_bench: no drafter '%.*s'; use ngram or match\n", static_cast<int>(drafter.size()),
               drafter.data());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "--walk") return run_walk(argc, argv);
  return ngramspec::bench::run_benchmarks(argc, argv, [] {
    register_all();
    return true;
  });
}
