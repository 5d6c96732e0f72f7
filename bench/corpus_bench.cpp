// Corpus files: what drafting from a mapped file costs beside drafting from a live SharedCorpus
// holding the same records, what mapping a file costs in time and private memory, and how fast
// files are built and merged, beside plain disk writes.
//
// Drafting. The records: the outputs of the first half of the recorded Spec-Bench streams
// (../shared/data/specbench/streams.tsv, in file order), held by a 64 MiB SharedCorpus (`live`),
// by the smallest SharedCorpus that holds them (`live-fit`: tables of a few MiB, where the 64 MiB
// corpus's outgrow the last-level cache) and, saved by the first to a file, by a MappedCorpus
// (`mapped`, whose tables are sized by the records: under 1 MiB each here). The queries: the
// second half's records, prompt then output.
// Without the shared data folder, synthetic records stand in (the label says which): prompts and
// outputs of fresh random runs and copies of earlier ones, so that later records repeat earlier.
//   BM_CorpusDraft/live|live-fit|mapped  the corpus's draft() of up to 4 tokens; the context is
//                                        the last 16 tokens before each output token of every
//                                        query. per_draft: CPU time per call; drafts/call and
//                                        matched (share of calls that matched) say what was found.
//                                        The corpora are first checked to draft alike on every
//                                        context; the benchmarks fail when they do not.
//   BM_MatchDrafterObserve/none|live|live-fit|mapped
//                                        a MatchDrafter (MatchConfig defaults) with no corpus, the
//                                        live one or the file, fed every query token by token,
//                                        predict() of up to 4 drafts after each token, as a decoder
//                                        does. per_token: time per observed token (update and
//                                        predict; the reset() between queries, O(cap), is left out:
//                                        manual time, the thread's CPU time around each query's
//                                        tokens less the clock's own, so the Time column is that
//                                        too). drafts/token is the same over every corpus when
//                                        they draft alike; unmatched is the share of tokens after
//                                        which the drafter's own match is empty, where it asks the
//                                        corpus.
// One iteration is one pass over every query, so the variants do the same work whatever their
// iteration counts. The target: a drafter over a mapped corpus within 10 % of one over a live
// corpus, per observed token and per draft.
//
// Files. Synthetic records of 200 to 2000 tokens over a 32000-token vocabulary: runs of 8 to 64
// tokens, half fresh random tokens, half copies of an earlier run. Files are built once per
// process in a temporary folder (removed at exit) and reused by repetitions; sizes in bytes are
// reached from a 1M-token file's bytes per token.
//   BM_MapCorpus/<MiB>                   MappedCorpus construction and destruction of a file of
//                                        about 64 MiB. file_bytes; private_kib_added,
//                                        rss_kib_added and anon_kib_added: what one mapping
//                                        (nothing read beyond what the constructor reads) adds to
//                                        /proc/self/smaps_rollup's Private_Clean + Private_Dirty +
//                                        Anonymous, Rss and Anonymous. A page of the file mapped
//                                        by this process alone counts as Private_Clean though it is
//                                        the page cache's (the kernel maps the pages around the
//                                        header's with it); anon_kib_added is the heap's part.
//   BM_VerifyChecksums/<MiB>,            verify_checksums() and verify() of that file, in the page
//   BM_VerifyCorpus/<MiB>                cache: file_MB, MB of file checked per second.
//   BM_BuildCorpus/<tokens>              CorpusBuilder::write of 1M and 8M tokens of records (the
//                                        records added beforehand), to a file flushed to disk (with
//                                        the variable below, /<MiB>: the tokens of a file that size).
//                                        tokens (per second), file_MB (MB per second written),
//                                        bytes/token, and where the time goes: <phase>_ns, ns per
//                                        token of each phase the builder reports progress in
//                                        ("order", ..., "ngrams3", "write"), a phase running from
//                                        its first report to the next one's, and flush_ns, what
//                                        follows write's last report (fdatasync, rename).
//   BM_BuildCorpusRealText               the same over the recorded streams' outputs, repeated (each
//                                        copy a new record) up to 4M tokens.
//   BM_MergeCorpus/2x<MiB>               two shard files of about 64 MiB each, disjoint in time,
//                                        mapped, added to a CorpusBuilder and written: in_MB and
//                                        out_MB per second (the shards' bytes, the merged file's).
//   BM_DiskWrite                         the merged file's bytes written to a new file with write()
//                                        of 16 MiB blocks, fdatasync and rename, as the builder
//                                        writes: MB per second, the disk's bound on a merge.
// Build, merge and disk writes are timed in wall-clock time (they wait for the disk).
//
// NGRAMSPEC_CORPUS_BENCH_BYTES=N (bytes) sets the mapped file to N bytes, the shards to N/2 each
// and the build to the tokens of an N-byte file, for the large figures:
//   NGRAMSPEC_CORPUS_BENCH_BYTES=1073741824 build/.../bench/corpus_bench --benchmark_filter='Map|Verify|Build|Merge|Disk'

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "bench_main.hpp"
#include "ngramspec/corpus_builder.hpp"
#include "ngramspec/mapped_corpus.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "replay/token_streams.hpp"

namespace {

using namespace ngramspec;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kDrafts = 4;
constexpr std::size_t kContextTokens = MatchDrafter::kCorpusContext;
constexpr std::size_t kLiveCorpusBytes = std::size_t{64} << 20;
constexpr std::uint64_t kDefaultFileBytes = std::uint64_t{64} << 20;
constexpr std::array<std::uint64_t, 2> kDefaultBuildTokens = {1'000'000, 8'000'000};
constexpr std::uint64_t kRealTextTokens = 4'000'000;
constexpr std::uint64_t kScaleTokens = 1'000'000;  // the file whose bytes per token sizes the others
constexpr Token kVocab = 32000;
constexpr std::size_t kMinRecord = 200;
constexpr std::size_t kMaxRecord = 2000;
constexpr std::size_t kWriteBlock = std::size_t{16} << 20;

// Sizes, from NGRAMSPEC_CORPUS_BENCH_BYTES when set.
struct Sizes {
  std::uint64_t map_bytes = kDefaultFileBytes;
  std::uint64_t shard_bytes = kDefaultFileBytes;
  std::optional<std::uint64_t> build_bytes;  // unset: kDefaultBuildTokens
};
Sizes& sizes() {
  static Sizes configured;
  return configured;
}

std::string mib(std::uint64_t bytes) {
  return bytes % (std::uint64_t{1} << 20) == 0 ? std::to_string(bytes >> 20) + "MiB" : std::to_string(bytes) + "B";
}
std::string count_name(std::uint64_t n) {
  return n % 1'000'000 == 0 ? std::to_string(n / 1'000'000) + "M" : std::to_string(n);
}

// A fresh folder under the system's temporary one for this process's files, removed at exit.
class Workspace {
 public:
  static const Workspace& get() {
    static const Workspace workspace;
    return workspace;
  }
  ~Workspace() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  [[nodiscard]] fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  Workspace() : path_(fs::temp_directory_path() / ("ngramspec-corpus-bench-" + std::to_string(::getpid()))) {
    fs::create_directories(path_);
  }
  fs::path path_;
};

// splitmix64: fast, and the same records on every machine.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [low, high], up to a negligible modulo bias.
  std::uint64_t between(std::uint64_t low, std::uint64_t high) noexcept { return low + next() % (high - low + 1); }

 private:
  std::uint64_t state_;
};

// Records laid end to end: record i is tokens[bounds[i], bounds[i + 1]).
struct Records {
  std::vector<Token> tokens;
  std::vector<std::size_t> bounds{0};
  [[nodiscard]] std::size_t size() const noexcept { return bounds.size() - 1; }
  [[nodiscard]] std::span<const Token> operator[](std::size_t i) const noexcept {
    return std::span<const Token>(tokens).subspan(bounds[i], bounds[i + 1] - bounds[i]);
  }
};

// `total` tokens in records of min_record to max_record tokens (the last may be shorter): runs of
// 8 to 64 tokens, each either fresh random tokens or a copy of a run anywhere earlier in the text.
Records synthetic_records(std::uint64_t total, std::uint64_t seed, std::size_t min_record = kMinRecord,
                          std::size_t max_record = kMaxRecord) {
  Rng rng(seed);
  Records records;
  records.tokens.reserve(total);
  std::vector<Token>& text = records.tokens;
  while (text.size() < total) {
    const std::size_t end = static_cast<std::size_t>(std::min<std::uint64_t>(total, text.size() + rng.between(min_record, max_record)));
    while (text.size() < end) {
      const std::size_t have = text.size();
      const std::size_t run = std::min<std::size_t>(static_cast<std::size_t>(rng.between(8, 64)), end - have);
      if (have >= 64 && rng.next() % 2 == 0) {
        const std::size_t from = static_cast<std::size_t>(rng.between(0, have - run));
        for (std::size_t i = 0; i < run; ++i) text.push_back(text[from + i]);
      } else {
        for (std::size_t i = 0; i < run; ++i) text.push_back(static_cast<Token>(rng.between(0, kVocab - 1)));
      }
    }
    records.bounds.push_back(text.size());
  }
  return records;
}

void add_records(CorpusBuilder& builder, const Records& records, std::int64_t first_stamp) {
  for (std::size_t i = 0; i < records.size(); ++i) builder.add(records[i], first_stamp + static_cast<std::int64_t>(i));
}

// Bytes of a synthetic file: a part that does not grow with the tokens (the header, and the
// 1-gram table, bounded by the vocabulary) and bytes per token, measured on a 1M-token file.
struct FileScale {
  double fixed_bytes = 0;
  double bytes_per_token = 0;
};
const FileScale& file_scale() {
  static const FileScale scale = [] {
    const fs::path path = Workspace::get() / "scale.corpus";
    {
      CorpusBuilder builder;
      add_records(builder, synthetic_records(kScaleTokens, 7), 1);
      static_cast<void>(builder.write(path));
    }
    const MappedCorpus file(path);
    FileScale measured;
    measured.fixed_bytes = 2.0 * 8.0 * static_cast<double>(file.ngrams(1)) + 1024.0;
    measured.bytes_per_token =
        (static_cast<double>(file.file_bytes()) - measured.fixed_bytes) / static_cast<double>(file.size());
    std::error_code ignored;
    fs::remove(path, ignored);
    return measured;
  }();
  return scale;
}

std::uint64_t tokens_for_bytes(std::uint64_t bytes) {
  const FileScale& scale = file_scale();
  const double room = std::max(0.0, static_cast<double>(bytes) - scale.fixed_bytes);
  return std::max<std::uint64_t>(kMaxRecord, static_cast<std::uint64_t>(room / scale.bytes_per_token));
}

// A synthetic file of about `bytes`, built on first use and kept for the process.
const fs::path& synthetic_file(const std::string& name, std::uint64_t bytes, std::uint64_t seed,
                               std::int64_t first_stamp) {
  static std::map<std::string, fs::path> built;
  if (const auto found = built.find(name); found != built.end()) return found->second;
  const fs::path path = Workspace::get() / (name + ".corpus");
  {
    CorpusBuilder builder;
    add_records(builder, synthetic_records(tokens_for_bytes(bytes), seed), first_stamp);
    static_cast<void>(builder.write(path));
  }
  return built.emplace(name, path).first->second;
}

std::optional<std::vector<replay::TokenStream>> recorded_streams() {
#ifdef NGRAMSPEC_SHARED_DIR
  const fs::path path = fs::path(NGRAMSPEC_SHARED_DIR) / "data/specbench/streams.tsv";
  if (fs::exists(path)) return replay::read_streams(path.string());
#endif
  return std::nullopt;
}

std::string recorded_streams_path() {
#ifdef NGRAMSPEC_SHARED_DIR
  return (fs::path(NGRAMSPEC_SHARED_DIR) / "data/specbench/streams.tsv").string();
#else
  return "data/specbench/streams.tsv (no shared data folder configured)";
#endif
}

// ---------------------------------------------------------------------------------------------
// Drafting: the same records live and mapped, the same queries.

struct DraftData {
  std::string error;  // set when the setup failed
  std::string label;
  std::unique_ptr<SharedCorpus> live;      // 64 MiB
  std::unique_ptr<SharedCorpus> live_fit;  // the smallest that holds every record
  std::unique_ptr<MappedCorpus> file;
  std::vector<std::vector<Token>> queries;        // prompt, then output
  std::vector<std::span<const Token>> contexts;   // the last 16 tokens before each output token
  std::uint64_t query_tokens = 0;
  double unmatched = 0;    // share of query tokens after which a drafter's own match is empty
  std::size_t differ = 0;  // contexts on which the two corpora draft differently
};

DraftData load_draft_data() {
  DraftData data;
  try {
    std::vector<std::vector<Token>> records;                       // the corpus's
    std::vector<std::pair<std::vector<Token>, std::size_t>> queries;  // tokens, prompt length
    std::string source;
    if (const auto streams = recorded_streams(); streams && streams->size() >= 2) {
      const std::size_t half = streams->size() / 2;
      for (std::size_t i = 0; i < streams->size(); ++i) {
        const replay::TokenStream& s = (*streams)[i];
        if (i < half) {
          records.push_back(s.output);
        } else {
          std::vector<Token> query = s.prompt;
          query.insert(query.end(), s.output.begin(), s.output.end());
          queries.emplace_back(std::move(query), s.prompt.size());
        }
      }
      source = "specbench";
    } else {
      // 560 prompt-output pairs of 50 to 550 tokens each, from one text of fresh runs and copies.
      const Records text = synthetic_records(560 * 2 * 300, 3, 50, 550);
      const std::size_t pairs = text.size() / 2;
      for (std::size_t i = 0; i < pairs; ++i) {
        const auto prompt = text[2 * i];
        const auto output = text[2 * i + 1];
        if (i < pairs / 2) {
          records.emplace_back(output.begin(), output.end());
        } else {
          std::vector<Token> query(prompt.begin(), prompt.end());
          query.insert(query.end(), output.begin(), output.end());
          queries.emplace_back(std::move(query), prompt.size());
        }
      }
      source = "synthetic (no " + recorded_streams_path() + ")";
    }

    std::uint64_t corpus_tokens = 0;
    for (const std::vector<Token>& record : records) corpus_tokens += record.size();
    const std::size_t fit = std::max(SharedCorpus::kMinTokens, std::bit_ceil(static_cast<std::size_t>(corpus_tokens)));
    data.live = std::make_unique<SharedCorpus>(kLiveCorpusBytes);
    data.live_fit = std::make_unique<SharedCorpus>(SharedCorpus::bytes_for(fit));
    for (SharedCorpus* live : {data.live.get(), data.live_fit.get()}) {
      std::int64_t stamp = 0;
      for (const std::vector<Token>& record : records) live->append(record, ++stamp);
      if (live->size() != corpus_tokens) throw std::runtime_error("a live corpus cannot hold every record");
    }
    const fs::path path = Workspace::get() / "live.corpus";
    data.live->save(path);
    data.file = std::make_unique<MappedCorpus>(path);
    if (data.file->size() != corpus_tokens) throw std::runtime_error("the saved corpus lost tokens");

    for (auto& query : queries) {
      data.query_tokens += query.first.size();
      data.queries.push_back(std::move(query.first));
    }
    for (std::size_t q = 0; q < data.queries.size(); ++q) {
      const std::span<const Token> query = data.queries[q];
      for (std::size_t at = queries[q].second; at < query.size(); ++at) {
        const std::size_t n = std::min(at, kContextTokens);
        data.contexts.push_back(query.subspan(at - n, n));
      }
    }

    // How often a MatchDrafter asks a corpus: after the tokens that leave its own match empty.
    std::uint64_t unmatched = 0;
    MatchDrafter own;
    for (const std::vector<Token>& query : data.queries) {
      own.reset();
      for (const Token token : query) {
        own.update(token);
        unmatched += own.match_length() == 0 ? 1 : 0;
      }
    }
    data.unmatched = static_cast<double>(unmatched) / static_cast<double>(data.query_tokens);

    std::array<Token, kDrafts> a{};
    std::array<Token, kDrafts> b{};
    std::array<Token, kDrafts> c{};
    const auto same = [](const CorpusDraft& x, const std::array<Token, kDrafts>& xs, const CorpusDraft& y,
                         const std::array<Token, kDrafts>& ys) {
      return x.count == y.count && x.match_length == y.match_length && !x.busy && !y.busy &&
             std::equal(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(x.count), ys.begin());
    };
    for (const std::span<const Token> context : data.contexts) {
      const CorpusDraft x = data.live->draft(context, a);
      const CorpusDraft y = data.file->draft(context, b);
      const CorpusDraft z = data.live_fit->draft(context, c);
      if (!same(x, a, y, b) || !same(x, a, z, c)) ++data.differ;
    }
    data.label = source + ": corpus " + std::to_string(records.size()) + " records, " + std::to_string(corpus_tokens) +
                 " tokens; " + std::to_string(data.queries.size()) + " queries, " +
                 std::to_string(data.query_tokens) + " tokens";
  } catch (const std::exception& e) {
    data.error = e.what();
  }
  return data;
}

const DraftData& draft_data() {
  static const DraftData loaded = load_draft_data();
  return loaded;
}

// The data, or false with the benchmark failed.
bool draft_data_ready(benchmark::State& state) {
  const DraftData& data = draft_data();
  if (!data.error.empty()) {
    state.SkipWithError(data.error.c_str());
    return false;
  }
  if (data.differ != 0) {
    const std::string message = "the live and mapped corpora draft differently on " + std::to_string(data.differ) +
                                " of " + std::to_string(data.contexts.size()) + " contexts";
    state.SkipWithError(message.c_str());
    return false;
  }
  return true;
}

template <class Corpus>
void corpus_draft(benchmark::State& state, const Corpus& corpus) {
  const DraftData& data = draft_data();
  std::array<Token, kDrafts> out{};
  std::uint64_t calls = 0;
  std::uint64_t drafted = 0;
  std::uint64_t matched = 0;
  for (auto _ : state) {
    for (const std::span<const Token> context : data.contexts) {
      const CorpusDraft draft = corpus.draft(context, out);
      drafted += draft.count;
      matched += draft.match_length > 0 ? 1 : 0;
      benchmark::DoNotOptimize(out.data());
    }
    calls += data.contexts.size();
  }
  const auto n = static_cast<double>(calls);
  state.counters["per_draft"] = benchmark::Counter(n, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["drafts/call"] = benchmark::Counter(static_cast<double>(drafted) / n);
  state.counters["matched"] = benchmark::Counter(static_cast<double>(matched) / n);
  state.SetItemsProcessed(static_cast<std::int64_t>(calls));
  state.SetLabel(data.label + "; " + std::to_string(data.contexts.size()) + " contexts");
}

// CPU time of this thread: steadier than the wall clock on a busy machine.
std::chrono::nanoseconds thread_cpu_time() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return std::chrono::seconds(now.tv_sec) + std::chrono::nanoseconds(now.tv_nsec);
}

// What two back-to-back readings of thread_cpu_time() measure of their own cost (it is a system
// call, about a microsecond in some virtual machines): the least of many, taken off each span.
std::chrono::nanoseconds thread_cpu_time_overhead() {
  static const std::chrono::nanoseconds overhead = [] {
    std::chrono::nanoseconds least = std::chrono::nanoseconds::max();
    for (int i = 0; i < 1000; ++i) {
      const std::chrono::nanoseconds start = thread_cpu_time();
      least = std::min(least, thread_cpu_time() - start);
    }
    return least;
  }();
  return overhead;
}

void observe(benchmark::State& state, const SharedCorpus* live, const MappedCorpus* file) {
  const DraftData& data = draft_data();
  MatchDrafter drafter(MatchConfig{}, live, file);
  std::array<Token, kDrafts> out{};
  std::uint64_t tokens = 0;
  std::uint64_t drafted = 0;
  const std::chrono::nanoseconds overhead = thread_cpu_time_overhead();
  for (auto _ : state) {
    std::chrono::nanoseconds timed{};
    for (const std::vector<Token>& query : data.queries) {
      drafter.reset();
      const std::chrono::nanoseconds start = thread_cpu_time();
      for (const Token token : query) {
        drafter.update(token);
        drafted += drafter.predict(out);
      }
      timed += thread_cpu_time() - start - overhead;
      benchmark::DoNotOptimize(out.data());
    }
    tokens += data.query_tokens;
    state.SetIterationTime(std::chrono::duration<double>(timed).count());
  }
  const auto n = static_cast<double>(tokens);
  state.counters["per_token"] = benchmark::Counter(n, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["drafts/token"] = benchmark::Counter(static_cast<double>(drafted) / n);
  state.counters["unmatched"] = benchmark::Counter(data.unmatched);
  state.SetItemsProcessed(static_cast<std::int64_t>(tokens));
  state.SetLabel(data.label + "; k=" + std::to_string(kDrafts));
}

// ---------------------------------------------------------------------------------------------
// Mapping.

struct Memory {
  std::uint64_t rss_kib = 0;
  std::uint64_t private_kib = 0;  // Private_Clean + Private_Dirty + Anonymous
  std::uint64_t anonymous_kib = 0;
};

std::optional<Memory> read_memory() {
  std::ifstream in("/proc/self/smaps_rollup");
  if (!in) return std::nullopt;
  Memory memory;
  bool found = false;
  std::string line;
  while (std::getline(in, line)) {
    const auto kib = [&](std::string_view key) -> std::optional<std::uint64_t> {
      if (line.compare(0, key.size(), key) != 0) return std::nullopt;
      return std::strtoull(line.c_str() + key.size(), nullptr, 10);
    };
    if (const auto rss = kib("Rss:")) {
      memory.rss_kib = *rss;
      found = true;
    }
    for (const std::string_view key : {"Private_Clean:", "Private_Dirty:", "Anonymous:"}) {
      if (const auto value = kib(key)) memory.private_kib += *value;
    }
    if (const auto anonymous = kib("Anonymous:")) memory.anonymous_kib = *anonymous;
  }
  if (!found) return std::nullopt;
  return memory;
}

void map_corpus(benchmark::State& state, std::uint64_t bytes) {
  fs::path path;
  std::optional<Memory> before;
  std::optional<Memory> after;
  std::uint64_t file_bytes = 0;
  std::uint64_t tokens = 0;
  try {
    path = synthetic_file("map-" + std::to_string(bytes), bytes, 31, 1);
    // One mapping, read as a server would map it: nothing beyond what the constructor reads.
    before = read_memory();
    {
      const MappedCorpus file(path);
      after = read_memory();
      file_bytes = file.file_bytes();
      tokens = file.size();
    }
    for (auto _ : state) {
      const MappedCorpus file(path);
      benchmark::DoNotOptimize(file.size());
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  state.counters["file_bytes"] = benchmark::Counter(static_cast<double>(file_bytes));
  std::string label = "synthetic, " + std::to_string(tokens) + " tokens";
  if (before && after) {
    state.counters["private_kib_added"] = benchmark::Counter(static_cast<double>(after->private_kib) -
                                                             static_cast<double>(before->private_kib));
    state.counters["rss_kib_added"] =
        benchmark::Counter(static_cast<double>(after->rss_kib) - static_cast<double>(before->rss_kib));
    state.counters["anon_kib_added"] =
        benchmark::Counter(static_cast<double>(after->anonymous_kib) - static_cast<double>(before->anonymous_kib));
  } else {
    label += "; no /proc/self/smaps_rollup: memory not measured";
  }
  state.SetLabel(label);
}

// verify_checksums() (every byte read once) or verify() (the checksums, then every n-gram looked
// up) of the file BM_MapCorpus maps, the file in the page cache: MB of file checked per second.
void verify_corpus(benchmark::State& state, std::uint64_t bytes, bool full) {
  std::uint64_t file_bytes = 0;
  try {
    const MappedCorpus file(synthetic_file("map-" + std::to_string(bytes), bytes, 31, 1));
    file_bytes = file.file_bytes();
    for (auto _ : state) {
      if (full) {
        file.verify();
      } else {
        file.verify_checksums();
      }
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  state.counters["file_MB"] = benchmark::Counter(static_cast<double>(file_bytes) * 1e-6 *
                                                     static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}

// ---------------------------------------------------------------------------------------------
// Building.

// Where a build's time goes, from CorpusBuilder's progress reports: a phase runs from its first
// report (each reports as it starts) to the next phase's first, the last one to its own last
// report, and "flush" is what follows (the fdatasync and rename). Phases are named as reported.
class PhaseClock {
 public:
  void start() {
    seen_.clear();
    begin_ = Clock::now();
  }
  [[nodiscard]] CorpusBuilder::Progress progress() {
    return [this](const char* phase, std::uint64_t, std::uint64_t) {
      const Clock::time_point now = Clock::now();
      if (seen_.empty() || seen_.back().name != phase) seen_.push_back(Seen{phase, now, now});
      seen_.back().last = now;
    };
  }
  void finish() {
    const Clock::time_point end = Clock::now();
    Clock::time_point previous = begin_;
    for (std::size_t i = 0; i < seen_.size(); ++i) {
      // Work before the first report counts to the first phase.
      const Clock::time_point until = i + 1 < seen_.size() ? seen_[i + 1].first : seen_[i].last;
      add(seen_[i].name, until - previous);
      previous = until;
    }
    add("flush", end - previous);
  }
  // Nanoseconds per token of each phase, over `builds` builds of `tokens` tokens.
  void report(benchmark::State& state, double builds, double tokens) const {
    for (const auto& [name, spent] : spent_) {
      const double ns = std::chrono::duration<double, std::nano>(spent).count();
      state.counters[name + "_ns"] = benchmark::Counter(ns / (builds * tokens));
    }
  }

 private:
  struct Seen {
    std::string name;
    Clock::time_point first;
    Clock::time_point last;
  };
  void add(const std::string& name, Clock::duration spent) {
    for (auto& [known, total] : spent_) {
      if (known == name) {
        total += spent;
        return;
      }
    }
    spent_.emplace_back(name, spent);
  }
  Clock::time_point begin_{};
  std::vector<Seen> seen_;
  std::vector<std::pair<std::string, Clock::duration>> spent_;  // in the order first seen
};

void time_builds(benchmark::State& state, const CorpusBuilder& builder, const std::string& label) {
  const fs::path path = Workspace::get() / "build.corpus";
  PhaseClock phases;
  CorpusFileSummary summary;
  try {
    for (auto _ : state) {
      phases.start();
      summary = builder.write(path, phases.progress());
      phases.finish();
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  std::error_code ignored;
  fs::remove(path, ignored);
  const auto builds = static_cast<double>(state.iterations());
  const auto tokens = static_cast<double>(summary.tokens);
  state.counters["tokens"] = benchmark::Counter(builds * tokens, benchmark::Counter::kIsRate);
  state.counters["file_MB"] =
      benchmark::Counter(builds * static_cast<double>(summary.file_bytes) / 1e6, benchmark::Counter::kIsRate);
  state.counters["bytes/token"] = benchmark::Counter(static_cast<double>(summary.file_bytes) / tokens);
  phases.report(state, builds, tokens);
  state.SetLabel(label + ", " + std::to_string(summary.tokens) + " tokens in " + std::to_string(summary.records) +
                 " records");
}

// The builder of one input, kept while consecutive runs ask for the same one.
const CorpusBuilder& cached_builder(const std::string& key, const std::function<void(CorpusBuilder&)>& fill) {
  static std::string cached_key;
  static std::unique_ptr<CorpusBuilder> cached;
  if (cached == nullptr || cached_key != key) {
    cached.reset();  // first, so that two large inputs never coexist
    cached = std::make_unique<CorpusBuilder>();
    fill(*cached);
    cached_key = key;
  }
  return *cached;
}

void build_corpus(benchmark::State& state, std::uint64_t tokens) {
  const CorpusBuilder* builder = nullptr;
  try {
    builder = &cached_builder("synthetic-" + std::to_string(tokens), [tokens](CorpusBuilder& b) {
      add_records(b, synthetic_records(tokens, 41), 1);
    });
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  time_builds(state, *builder, "synthetic");
}

void build_corpus_real_text(benchmark::State& state) {
  const CorpusBuilder* builder = nullptr;
  std::string label;
  try {
    const auto streams = recorded_streams();
    if (!streams) {
      const std::string message = "skipped: no recorded streams at " + recorded_streams_path();
      state.SkipWithError(message.c_str());
      return;
    }
    std::size_t copies = 0;
    builder = &cached_builder("specbench-outputs", [&](CorpusBuilder& b) {
      std::int64_t stamp = 0;
      while (b.tokens() < kRealTextTokens) {
        for (const replay::TokenStream& s : *streams) b.add(s.output, ++stamp);
        ++copies;
      }
    });
    label = "specbench outputs";
    if (copies != 0) label += " x" + std::to_string(copies);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  time_builds(state, *builder, label);
}

// ---------------------------------------------------------------------------------------------
// Merging, and the disk's speed.

struct Shards {
  fs::path a;
  fs::path b;
  std::uint64_t bytes = 0;  // both together
};

const Shards& shards() {
  static const Shards built = [] {
    const std::uint64_t bytes = sizes().shard_bytes;
    Shards s;
    // Disjoint in time: every stamp of b is after every stamp of a.
    s.a = synthetic_file("shard-a-" + std::to_string(bytes), bytes, 51, 1);
    s.b = synthetic_file("shard-b-" + std::to_string(bytes), bytes, 52, std::int64_t{1} << 40);
    s.bytes = fs::file_size(s.a) + fs::file_size(s.b);
    return s;
  }();
  return built;
}

CorpusFileSummary merge(const Shards& inputs, const fs::path& out) {
  const MappedCorpus a(inputs.a);
  const MappedCorpus b(inputs.b);
  CorpusBuilder builder;
  builder.add(a);
  builder.add(b);
  return builder.write(out);
}

std::optional<std::uint64_t>& merged_bytes() {
  static std::optional<std::uint64_t> bytes;
  return bytes;
}

void merge_corpus(benchmark::State& state) {
  const fs::path out = Workspace::get() / "merged.corpus";
  CorpusFileSummary summary;
  std::uint64_t in_bytes = 0;
  try {
    const Shards& inputs = shards();
    in_bytes = inputs.bytes;
    for (auto _ : state) summary = merge(inputs, out);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  std::error_code ignored;
  fs::remove(out, ignored);
  merged_bytes() = summary.file_bytes;
  const auto merges = static_cast<double>(state.iterations());
  state.counters["in_MB"] = benchmark::Counter(merges * static_cast<double>(in_bytes) / 1e6, benchmark::Counter::kIsRate);
  state.counters["out_MB"] =
      benchmark::Counter(merges * static_cast<double>(summary.file_bytes) / 1e6, benchmark::Counter::kIsRate);
  state.SetLabel("synthetic, " + std::to_string(summary.tokens) + " tokens, " + std::to_string(in_bytes) + " B in, " +
                 std::to_string(summary.file_bytes) + " B out");
}

// Writes `bytes` of `block` repeated to a new file beside `target`, flushes it and renames it
// over `target`, as CorpusBuilder::write does.
void write_file(const fs::path& target, std::span<const char> block, std::uint64_t bytes) {
  fs::path temporary = target;
  temporary += ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot create " + temporary.string());
  const auto fail = [&](const char* what) {
    const int error = errno;
    ::close(fd);
    throw std::system_error(error, std::generic_category(), std::string(what) + " " + temporary.string());
  };
  while (bytes > 0) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(bytes, block.size()));
    const ssize_t wrote = ::write(fd, block.data(), n);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      fail("cannot write");
    }
    bytes -= static_cast<std::uint64_t>(wrote);
  }
  if (::fdatasync(fd) != 0) fail("cannot flush");
  if (::close(fd) != 0) throw std::system_error(errno, std::generic_category(), "cannot close " + temporary.string());
  if (::rename(temporary.c_str(), target.c_str()) != 0) {
    throw std::system_error(errno, std::generic_category(), "cannot rename " + temporary.string());
  }
}

void disk_write(benchmark::State& state) {
  const fs::path path = Workspace::get() / "disk.bin";
  std::uint64_t bytes = 0;
  try {
    if (!merged_bytes()) {  // BM_MergeCorpus did not run: merge once, untimed, for the size
      const fs::path out = Workspace::get() / "merged.corpus";
      merged_bytes() = merge(shards(), out).file_bytes;
      fs::remove(out);
    }
    bytes = *merged_bytes();
    std::vector<char> block(kWriteBlock);
    Rng rng(61);
    for (std::size_t i = 0; i + 8 <= block.size(); i += 8) {
      const std::uint64_t word = rng.next();
      std::memcpy(block.data() + i, &word, 8);
    }
    for (auto _ : state) write_file(path, block, bytes);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  std::error_code ignored;
  fs::remove(path, ignored);
  state.counters["MB"] = benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(bytes) / 1e6,
                                            benchmark::Counter::kIsRate);
  state.SetLabel(std::to_string(bytes) + " B (the merged file's size), write() of 16 MiB blocks, fdatasync");
}

// ---------------------------------------------------------------------------------------------

void register_all() {
  benchmark::RegisterBenchmark("BM_CorpusDraft/live", [](benchmark::State& state) {
    if (draft_data_ready(state)) corpus_draft(state, *draft_data().live);
  })->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_CorpusDraft/live-fit", [](benchmark::State& state) {
    if (draft_data_ready(state)) corpus_draft(state, *draft_data().live_fit);
  })->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_CorpusDraft/mapped", [](benchmark::State& state) {
    if (draft_data_ready(state)) corpus_draft(state, *draft_data().file);
  })->Unit(benchmark::kMillisecond);

  benchmark::RegisterBenchmark("BM_MatchDrafterObserve/none", [](benchmark::State& state) {
    if (draft_data_ready(state)) observe(state, nullptr, nullptr);
  })->UseManualTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_MatchDrafterObserve/live", [](benchmark::State& state) {
    if (draft_data_ready(state)) observe(state, draft_data().live.get(), nullptr);
  })->UseManualTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_MatchDrafterObserve/live-fit", [](benchmark::State& state) {
    if (draft_data_ready(state)) observe(state, draft_data().live_fit.get(), nullptr);
  })->UseManualTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_MatchDrafterObserve/mapped", [](benchmark::State& state) {
    if (draft_data_ready(state)) observe(state, nullptr, draft_data().file.get());
  })->UseManualTime()->Unit(benchmark::kMillisecond);

  const std::uint64_t map_bytes = sizes().map_bytes;
  benchmark::RegisterBenchmark(("BM_MapCorpus/" + mib(map_bytes)).c_str(),
                               [map_bytes](benchmark::State& state) { map_corpus(state, map_bytes); })
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);

  benchmark::RegisterBenchmark(("BM_VerifyChecksums/" + mib(map_bytes)).c_str(),
                               [map_bytes](benchmark::State& state) { verify_corpus(state, map_bytes, false); })
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark(("BM_VerifyCorpus/" + mib(map_bytes)).c_str(),
                               [map_bytes](benchmark::State& state) { verify_corpus(state, map_bytes, true); })
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);

  std::vector<std::uint64_t> build_tokens(kDefaultBuildTokens.begin(), kDefaultBuildTokens.end());
  if (sizes().build_bytes) build_tokens = {0};  // sized from the file scale when it runs
  for (const std::uint64_t tokens : build_tokens) {
    const std::string name = tokens != 0 ? count_name(tokens) : mib(*sizes().build_bytes);
    benchmark::RegisterBenchmark(("BM_BuildCorpus/" + name).c_str(), [tokens](benchmark::State& state) {
      std::uint64_t n = tokens;
      if (n == 0) {
        try {
          n = tokens_for_bytes(*sizes().build_bytes);
        } catch (const std::exception& e) {
          state.SkipWithError(e.what());
          return;
        }
      }
      build_corpus(state, n);
    })->UseRealTime()->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("BM_BuildCorpusRealText", build_corpus_real_text)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);

  benchmark::RegisterBenchmark(("BM_MergeCorpus/2x" + mib(sizes().shard_bytes)).c_str(), merge_corpus)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_DiskWrite", disk_write)->UseRealTime()->Unit(benchmark::kMillisecond);
}

// NGRAMSPEC_CORPUS_BENCH_BYTES: a positive number of bytes, or unset.
bool configure_sizes() {
  const char* text = std::getenv("NGRAMSPEC_CORPUS_BENCH_BYTES");
  if (text == nullptr || *text == '\0') return true;
  char* end = nullptr;
  errno = 0;
  const unsigned long long bytes = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || bytes < (std::uint64_t{1} << 20) || text[0] == '-') {
    std::fprintf(stderr, "NGRAMSPEC_CORPUS_BENCH_BYTES='%s' is invalid: must be a number of bytes, at least 1048576\n",
                 text);
    return false;
  }
  sizes().map_bytes = bytes;
  sizes().shard_bytes = bytes / 2;
  sizes().build_bytes = bytes;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  return ngramspec::bench::run_benchmarks(argc, argv, [] {
    if (!configure_sizes()) return false;
    register_all();
    return true;
  });
}
