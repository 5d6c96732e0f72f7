// Readers drafting from a SharedCorpus while one thread appends and clears. Run under
// ThreadSanitizer by the tsan preset; the checks below hold under any build.
//
// Every record is a function of its number r: record_length(r) tokens, token i encoding
// (r, i). The writer appends records 0, 1, 2, ... in order (each once, across clears), so a
// token occurs at most once in anything the corpus ever held, and a draft after a context
// ending in (r, i) can only be the tokens (r, i + 1), (r, i + 2), ... of that record. Readers
// check every draft against that, and, when the published counters prove that record r was
// wholly held and not cleared while they drafted, that the draft found it.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "ngramspec/mapped_corpus.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "ngramspec/speculative_decoder.hpp"
#include "support/temp_dir.hpp"

namespace ngramspec {
namespace {

constexpr std::size_t kCapacity = 1024;
constexpr std::uint64_t kRecords = 1200;
constexpr std::size_t kReaders = 3;
constexpr std::size_t kMinDraftsPerReader = 2000;
constexpr std::uint32_t kIndexBits = 10;  // record_length() < 2^kIndexBits
// Tokens from here up are never appended.
constexpr Token kForeign = 0xF0000000U;

std::size_t record_length(std::uint64_t r) { return 1 + static_cast<std::size_t>((r * 7919 + r / 3) % 250); }
Token token_of(std::uint64_t r, std::size_t i) { return static_cast<Token>((r << kIndexBits) | i); }
std::uint64_t record_of(Token t) { return t >> kIndexBits; }
std::size_t index_of(Token t) { return t & ((Token{1} << kIndexBits) - 1); }
bool appended_ever(Token t) { return t < kForeign && record_of(t) < kRecords && index_of(t) < record_length(record_of(t)); }

std::vector<Token> record_tokens(std::uint64_t r) {
  std::vector<Token> tokens(record_length(r));
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = token_of(r, i);
  return tokens;
}

// What the writer publishes: records it has finished appending (its next record number) and
// the record number at its most recent clear (records before it are gone). Each is stored
// before the corpus changes that it announces is visible to a reader that loads it after.
struct Progress {
  std::atomic<std::uint64_t> done{0};
  std::atomic<std::uint64_t> cleared_before{0};
  std::atomic<std::size_t> readers_started{0};
  std::atomic<std::uint64_t> drafts{0};  // drafts made by all readers so far
  std::atomic<bool> finished{false};
};

// Drafts the readers make between two writes. An engine appends once per finished request and
// drafts on every step, so drafts far outnumber appends; while a write is pending drafts stand
// aside (CorpusDraft::busy), so back-to-back writes would leave little to check.
constexpr std::uint64_t kDraftsPerWrite = 8;

void write(SharedCorpus& corpus, Progress& progress) {
  // Let every reader get going so that the appends overlap drafting.
  while (progress.readers_started.load() < kReaders) std::this_thread::yield();
  std::mt19937_64 rng(99);
  for (std::uint64_t r = 0; r < kRecords; ++r) {
    if (r != 0 && rng() % 80 == 0) {
      progress.cleared_before.store(r);
      corpus.clear();
    }
    corpus.append(record_tokens(r));
    progress.done.store(r + 1);
    const std::uint64_t target = progress.drafts.load() + kDraftsPerWrite;
    while (progress.drafts.load() < target) std::this_thread::yield();
  }
  progress.finished.store(true);
}

struct ReaderResult {
  std::size_t drafts = 0;
  std::size_t guaranteed = 0;  // drafts that the counters proved must find their record
  std::size_t found = 0;
  std::size_t busy = 0;  // drafts that stood aside for an append or clear
  std::vector<std::string> errors;
};

void read(const SharedCorpus& corpus, Progress& progress, std::uint64_t seed, ReaderResult& result) {
  std::mt19937_64 rng(seed);
  const auto pick = [&rng](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  const auto fail = [&result](const std::string& what) {
    if (result.errors.size() < 10) result.errors.push_back(what);
  };
  std::vector<Token> context;
  std::vector<Token> out(80);
  progress.readers_started.fetch_add(1);
  while (result.drafts < kMinDraftsPerReader || !progress.finished.load()) {
    const std::uint64_t cleared0 = progress.cleared_before.load();
    const std::uint64_t done0 = progress.done.load();
    // Mostly a recent record, sometimes an old (likely evicted or cleared) or a future one.
    std::uint64_t r = 0;
    switch (pick(0, 9)) {
      case 0: r = pick(0, kRecords - 1); break;
      case 1: r = std::min<std::uint64_t>(kRecords - 1, done0 + pick(0, 2)); break;
      default: r = done0 == 0 ? 0 : done0 - 1 - std::min<std::uint64_t>(done0 - 1, pick(0, 4));
    }
    const std::size_t length = record_length(r);
    const std::size_t i = pick(0, length - 1);
    // The context: a tail of (r, i - tail + 1) .. (r, i) after a few tokens that do not
    // continue it (foreign, or from another record).
    const std::size_t tail = std::min<std::size_t>(i + 1, pick(1, 20));
    context.clear();
    for (std::uint64_t k = pick(0, 3); k > 0; --k) {
      context.push_back(pick(0, 1) == 0 ? kForeign + static_cast<Token>(pick(0, 99))
                                        : token_of(r + 1 + pick(0, 5), 0));
    }
    for (std::size_t j = i + 1 - tail; j <= i; ++j) context.push_back(token_of(r, j));
    if (pick(0, 19) == 0) context.back() = kForeign + static_cast<Token>(pick(0, 99));
    const std::size_t room = pick(0, out.size());
    std::fill(out.begin(), out.end(), kForeign);

    const CorpusDraft d = corpus.draft(context, std::span<Token>(out).first(room));
    progress.drafts.fetch_add(1);

    const std::uint64_t done1 = progress.done.load();
    const std::uint64_t cleared1 = progress.cleared_before.load();
    ++result.drafts;
    const std::string where = "record " + std::to_string(r) + " index " + std::to_string(i) + " tail " +
                              std::to_string(tail) + " room " + std::to_string(room) + ": count " +
                              std::to_string(d.count) + " match_length " + std::to_string(d.match_length);
    const Token last = context.back();
    if (d.busy) {
      // Standing aside for a writer: nothing looked up, nothing written.
      ++result.busy;
      if (d.count != 0 || d.match_length != 0) fail("a busy draft reports a match: " + where);
    } else if (d.count > 0 || d.match_length > 0) {
      // Found: the one occurrence of the context's last token, matched backwards no further
      // than the context continues it, and copied forwards to the end of its record.
      if (!appended_ever(last)) {
        fail("a match for a token never appended: " + where);
        continue;
      }
      const std::size_t continued = last == token_of(r, i) ? tail : 1;
      if (d.match_length < 1 || d.match_length > continued) fail("match_length out of range: " + where);
      const std::size_t after = record_length(record_of(last)) - 1 - index_of(last);
      if (d.count != std::min(room, after)) fail("the copy does not run to the record's end: " + where);
      for (std::size_t j = 0; j < std::min(d.count, room); ++j) {
        if (out[j] != last + 1 + j) {
          fail("draft " + std::to_string(j) + " is " + std::to_string(out[j]) + ": " + where);
          break;
        }
      }
      if (room != 0) ++result.found;
    }
    for (std::size_t j = std::min(d.count, room); j < out.size(); ++j) {
      if (out[j] != kForeign) {
        fail("wrote past its count: " + where);
        break;
      }
    }
    // Record r was appended before the draft began (done0 > r), after the last clear then
    // known, no clear took effect meanwhile, and everything appended after it by the end of
    // the draft (at most records r + 1 .. done1, the last possibly in progress) leaves it in
    // the capacity: then it must be found, whole.
    if (!d.busy && last == token_of(r, i) && room != 0 && done0 > r && r >= cleared0 && cleared0 == cleared1) {
      std::size_t newer = record_length(r);
      for (std::uint64_t q = r + 1; q <= done1 && q < kRecords && newer <= kCapacity; ++q) newer += record_length(q);
      if (newer <= kCapacity) {
        ++result.guaranteed;
        if (d.match_length != tail || d.count != std::min(room, length - 1 - i)) {
          fail("record held whole but not found as such (expected match_length " + std::to_string(tail) + "): " +
               where);
        }
      }
    }
    // The observers are consistent with some state too.
    const std::size_t size = corpus.size();
    if (size > corpus.capacity_tokens()) fail("size " + std::to_string(size) + " beyond the capacity");
  }
}

TEST(SharedCorpusConcurrency, ReadersDraftConsistentlyWhileOneThreadAppendsAndClears) {
  SharedCorpus corpus(SharedCorpus::bytes_for(kCapacity));
  ASSERT_EQ(corpus.capacity_tokens(), kCapacity);
  Progress progress;
  std::vector<ReaderResult> results(kReaders);
  std::vector<std::thread> readers;
  for (std::size_t k = 0; k < kReaders; ++k) {
    readers.emplace_back([&, k] { read(corpus, progress, 1000 + k, results[k]); });
  }
  std::thread writer([&] { write(corpus, progress); });
  writer.join();
  for (std::thread& reader : readers) reader.join();

  std::size_t guaranteed = 0;
  std::size_t found = 0;
  std::size_t busy = 0;
  std::size_t drafts = 0;
  for (std::size_t k = 0; k < kReaders; ++k) {
    SCOPED_TRACE("reader " + std::to_string(k));
    for (const std::string& error : results[k].errors) ADD_FAILURE() << error;
    EXPECT_GE(results[k].drafts, kMinDraftsPerReader);
    guaranteed += results[k].guaranteed;
    found += results[k].found;
    busy += results[k].busy;
    drafts += results[k].drafts;
  }
  // Readers stand aside only while a writer is at work, not for the whole run.
  EXPECT_LT(busy, drafts / 2);
  // The checks had something to check: many drafts were proved to find their record.
  EXPECT_GT(guaranteed, kReaders * kMinDraftsPerReader / 10);
  EXPECT_GT(found, guaranteed / 2);
  EXPECT_EQ(corpus.records() + progress.cleared_before.load(), kRecords);
}

TEST(SharedCorpusConcurrency, ObserversRunBesideAppends) {
  // size(), appended() and records() under the shared lock while records are appended:
  // each reading is one state, so appended() and records() never go backwards without a clear.
  SharedCorpus corpus(SharedCorpus::bytes_for(256));
  std::atomic<bool> finished{false};
  std::atomic<std::size_t> started{0};
  constexpr std::uint64_t kAppends = 300;
  std::vector<std::string> errors(kReaders);
  std::vector<std::thread> readers;
  for (std::size_t k = 0; k < kReaders; ++k) {
    readers.emplace_back([&, k] {
      started.fetch_add(1);
      std::uint64_t last_appended = 0;
      std::uint64_t last_records = 0;
      for (std::size_t n = 0; n < 500 || !finished.load(); ++n) {
        const std::uint64_t records = corpus.records();
        const std::uint64_t appended = corpus.appended();
        const std::size_t size = corpus.size();
        if (appended < last_appended || records < last_records || size > corpus.capacity_tokens()) {
          errors[k] = "went backwards or beyond the capacity: appended " + std::to_string(appended) + " records " +
                      std::to_string(records) + " size " + std::to_string(size);
          break;
        }
        last_appended = appended;
        last_records = records;
      }
    });
  }
  while (started.load() < kReaders) std::this_thread::yield();
  for (std::uint64_t r = 0; r < kAppends; ++r) corpus.append(record_tokens(r % kRecords));
  finished.store(true);
  for (std::thread& reader : readers) reader.join();
  for (const std::string& error : errors) EXPECT_EQ(error, "");
  EXPECT_EQ(corpus.records(), kAppends);
}

// A greedy model whose output is the last token plus one, within a small alphabet: the text
// it writes repeats across requests, so the drafters find it in the corpus.
struct CountingModel {
  std::size_t length = 0;
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) {
    for (std::size_t i = 0; i < tokens.size(); ++i) next[i] = (tokens[i] * 7 + 3) % 61;
    length = pos + tokens.size();
  }
  void rollback(std::size_t pos) { length = pos; }
  [[nodiscard]] std::size_t max_batch() const { return 17; }
};

TEST(SharedCorpusConcurrency, DecodersShareOneCorpusAndEachAppendsItsOutputs) {
  // As an engine runs it: each thread decodes its own requests with its own MatchDrafter over
  // one corpus and appends each finished output. Outputs must equal plain decoding, whatever
  // the corpus held at each step (under ThreadSanitizer: and no race).
  SharedCorpus corpus(SharedCorpus::bytes_for(1024));
  constexpr std::size_t kThreads = 3;
  constexpr int kRequests = 40;
  std::vector<std::string> errors(kThreads);
  std::vector<std::size_t> accepted(kThreads, 0);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(700 + t);
      CountingModel model;
      MatchConfig config;
      config.max_drafts = 8;
      SpeculativeDecoder decoder(model, MatchDrafter(config, &corpus));
      for (int r = 0; r < kRequests && errors[t].empty(); ++r) {
        const std::vector<Token> prompt = {static_cast<Token>(rng() % 61), static_cast<Token>(rng() % 61)};
        DecodeOptions options;
        options.max_new_tokens = 64;
        const DecodeResult speculative = decoder.generate(prompt, options);
        options.speculate = false;
        const DecodeResult plain = decoder.generate(prompt, options);
        if (speculative.tokens != plain.tokens) errors[t] = "request " + std::to_string(r) + " departs from plain";
        accepted[t] += speculative.stats.accepted;
        corpus.append(speculative.tokens);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::string& error : errors) EXPECT_EQ(error, "");
  std::size_t total = 0;
  for (const std::size_t a : accepted) total += a;
  EXPECT_GT(total, kThreads * kRequests * 8U);  // the drafts were used, not only checked
  EXPECT_EQ(corpus.records(), kThreads * kRequests);
}

// save() while one thread appends and others draft: every saved file is whole (it verifies) and
// holds a run of consecutive records, in order, each complete but the oldest (which eviction
// may have cut to its end), with stamps increasing.
TEST(SharedCorpusConcurrency, SavesWhileAppendingAndDraftingAreWholeSnapshots) {
  const test::TempDir dir;
  SharedCorpus corpus(SharedCorpus::bytes_for(kCapacity));
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (std::uint64_t r = 0; r < 400; ++r) corpus.append(record_tokens(r), static_cast<std::int64_t>(r + 1));
    stop.store(true);
  });
  std::thread reader([&] {
    std::vector<Token> out(8);
    std::uint64_t r = 0;
    while (!stop.load()) {
      const std::vector<Token> context = {token_of(r % 400, 0)};
      static_cast<void>(corpus.draft(context, out));
      ++r;
    }
  });
  std::vector<std::filesystem::path> saved;
  for (int i = 0; i < 12; ++i) {
    saved.push_back(dir / ("snapshot" + std::to_string(i) + ".ngc"));
    corpus.save(saved.back());
  }
  writer.join();
  reader.join();
  for (const auto& path : saved) {
    const MappedCorpus file(path);
    ASSERT_NO_THROW(file.verify()) << path;
    for (std::size_t i = 0; i < file.records(); ++i) {
      const CorpusRecord record = file.record(i);
      ASSERT_FALSE(record.tokens.empty());
      const std::uint64_t r = record_of(record.tokens.front());
      EXPECT_EQ(record.stamp, static_cast<std::int64_t>(r + 1)) << path << " record " << i;
      if (i > 0) {
        EXPECT_EQ(r, record_of(file.record(i - 1).tokens.front()) + 1) << path << " record " << i;
      }
      const std::vector<Token> whole = record_tokens(r);
      // Complete, or (the oldest) its end.
      ASSERT_TRUE(i == 0 ? std::equal(record.tokens.rbegin(), record.tokens.rend(), whole.rbegin())
                         : std::equal(record.tokens.begin(), record.tokens.end(), whole.begin(), whole.end()))
          << path << " record " << i;
    }
  }
}

}  // namespace
}  // namespace ngramspec
