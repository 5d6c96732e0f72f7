// Bounded memory over a long stream: an NGramPredictor's and a MatchDrafter's heap is what
// memory_bytes() reports, fixed at construction, and a million tokens of fresh, repetitive and mixed
// text neither allocate nor grow it; a SharedCorpus fed a million tokens of records keeps the heap
// it took at construction, within its byte cap, evicting the oldest tokens.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ngramspec/match_drafter.hpp"
#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "support/allocation_counter.hpp"
#include "support/mixed_stream.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define NGRAMSPEC_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NGRAMSPEC_TEST_ASAN 1
#endif
#endif

#ifdef NGRAMSPEC_TEST_ASAN
// From the sanitizer runtime (GCC does not ship the header that declares it).
extern "C" std::size_t __sanitizer_get_current_allocated_bytes();
#else
#include <malloc.h>
#endif

namespace ngramspec::test {
namespace {

// Bytes the process's heap has handed out and not taken back (ASan's allocator under ASan, glibc's
// arenas and mmapped blocks otherwise).
std::size_t heap_in_use() {
#ifdef NGRAMSPEC_TEST_ASAN
  return __sanitizer_get_current_allocated_bytes();
#else
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
#endif
}

// The heap an object took at construction against what its memory_bytes() reports. That counts
// the object itself (here on the stack) and capacities; the heap adds allocator headers and page
// rounding, a few KiB at most for a handful of blocks.
void expect_heap_matches_memory_bytes(std::size_t constructed, std::size_t reported, const char* what) {
  EXPECT_LE(constructed, reported + 64 * 1024);
  EXPECT_GE(constructed, reported / 2) << "the heap measurement does not see the " << what << "'s tables";
}


struct SoakCase {
  NGramConfig config;
  std::size_t tokens = 0;
};

std::string case_name(const SoakCase& c) {
  return "orders" + std::to_string(c.config.min_order) + "to" + std::to_string(c.config.max_order) + "_window" +
         std::to_string(c.config.window) + "_tokens" + std::to_string(c.tokens);
}

// Names the case in gtest's output and the ctest names gtest_discover_tests derives from it.
void PrintTo(const SoakCase& c, std::ostream* os) { *os << case_name(c); }

class PredictorMemorySoak : public ::testing::TestWithParam<SoakCase> {};

TEST_P(PredictorMemorySoak, HeapIsMemoryBytesAndNeverGrows) {
  const SoakCase& c = GetParam();
  SCOPED_TRACE("orders " + std::to_string(c.config.min_order) + ".." + std::to_string(c.config.max_order) +
               ", window " + std::to_string(c.config.window) + ", " + std::to_string(c.tokens) + " tokens");
  // Room for the drafts a decoder would ask for (the default max_drafts is unlimited).
  std::vector<Token> drafts(std::min<std::size_t>(c.config.max_drafts, 16));  // allocated first: `before` excludes it
  const std::size_t before = heap_in_use();
  NGramPredictor predictor(c.config);
  const std::size_t constructed = heap_in_use() - before;
  const std::size_t reported = predictor.memory_bytes();
  expect_heap_matches_memory_bytes(constructed, reported, "predictor");

  MixedStream stream(c.config.window * 31 + c.config.max_order);
  const std::size_t warm_up = 4 * c.config.window;
  std::size_t heap_after_warm_up = 0;
  std::size_t largest_size = 0;
  std::size_t allocations = 0;
  {
    const AllocationCounter counter;
    for (std::size_t i = 1; i <= c.tokens; ++i) {
      predictor.update(stream.next());
      if (i % 3 == 0) (void)predictor.predict(drafts);
      if (i == warm_up) heap_after_warm_up = heap_in_use();
      if (i % 64 == 0) largest_size = std::max(largest_size, predictor.size());
      if (i > warm_up && i % 100'000 == 0) {
        ASSERT_EQ(heap_in_use(), heap_after_warm_up) << "after " << i << " tokens";
        ASSERT_LE(predictor.size(), predictor.max_size()) << "after " << i << " tokens";
      }
    }
    allocations = counter.count();
  }
  EXPECT_EQ(allocations, 0U);
  EXPECT_EQ(heap_in_use(), heap_after_warm_up);
  EXPECT_EQ(heap_after_warm_up - before, constructed);
  EXPECT_EQ(predictor.memory_bytes(), reported);
  EXPECT_EQ(predictor.tokens_seen(), c.tokens);
  // The stream must have filled the tables for the test to mean anything (max_size() is a bound
  // that only text with many continuations per context approaches at every order).
  EXPECT_GE(largest_size, predictor.max_size() / 8);
}

INSTANTIATE_TEST_SUITE_P(
    Configs, PredictorMemorySoak,
    ::testing::Values(SoakCase{NGramConfig{}, 1'000'000},
                      SoakCase{NGramConfig{.min_order = 2, .max_order = 6, .max_drafts = 8, .window = 8192}, 300'000},
                      SoakCase{NGramConfig{.min_order = 3, .max_order = 8, .max_drafts = 10, .window = 16}, 200'000}),
    [](const ::testing::TestParamInfo<SoakCase>& info) { return case_name(info.param); });


struct MatchSoakCase {
  const char* name = "";
  MatchConfig config;
  std::size_t tokens = 0;
};

void PrintTo(const MatchSoakCase& c, std::ostream* os) { *os << c.name; }

class MatchDrafterMemorySoak : public ::testing::TestWithParam<MatchSoakCase> {};

TEST_P(MatchDrafterMemorySoak, HeapIsMemoryBytesAndNeverGrows) {
  const MatchSoakCase& c = GetParam();
  SCOPED_TRACE(std::string(c.name) + ": index_capacity " + std::to_string(c.config.index_capacity) + ", count window " +
               std::to_string(c.config.count_window) + ", " + std::to_string(c.tokens) + " tokens");
  // Room for the drafts a decoder would ask for (the default max_drafts is unlimited).
  std::vector<Token> drafts(std::min<std::size_t>(c.config.max_drafts, 16));  // allocated first: `before` excludes it
  const std::size_t before = heap_in_use();
  MatchDrafter drafter(c.config);
  const std::size_t constructed = heap_in_use() - before;
  const std::size_t reported = drafter.memory_bytes();
  expect_heap_matches_memory_bytes(constructed, reported, "drafter");

  // The index keeps the first index_capacity tokens, so they open with laps of an ascending cycle, which the
  // stream's cycles (0, 1, ..., p - 1) match later: copies from the frozen index keep happening.
  const std::size_t opening = c.config.index_capacity / 2;
  MixedStream stream(c.config.index_capacity * 17 + drafts.size());
  std::size_t drafted = 0;
  std::size_t longest_match_past_cap = 0;
  std::size_t allocations = 0;
  {
    const AllocationCounter counter;
    for (std::size_t i = 1; i <= c.tokens; ++i) {
      drafter.update(i <= opening ? static_cast<Token>(i % 64) : stream.next());
      if (i % 3 == 0) drafted += drafter.predict(drafts);
      if (i > c.config.index_capacity) {
        longest_match_past_cap = std::max(longest_match_past_cap, drafter.match_length());
      }
      if (i % 100'000 == 0) {
        // From construction on, not only after a warm-up: the index and the counts are sized up front.
        ASSERT_EQ(heap_in_use(), before + constructed) << "after " << i << " tokens";
        ASSERT_EQ(drafter.indexed(), std::min(i, c.config.index_capacity)) << "after " << i << " tokens";
      }
    }
    allocations = counter.count();
  }
  EXPECT_EQ(allocations, 0U);
  EXPECT_EQ(heap_in_use(), before + constructed);
  EXPECT_EQ(drafter.memory_bytes(), reported);
  EXPECT_EQ(drafter.tokens_seen(), c.tokens);
  // The stream must run far past the cap (the frozen index) and make the drafter copy and draft.
  EXPECT_GE(c.tokens, 8 * c.config.index_capacity);
  EXPECT_GE(longest_match_past_cap, 16U);
  EXPECT_GE(drafted, c.tokens / 10);
}

INSTANTIATE_TEST_SUITE_P(
    Configs, MatchDrafterMemorySoak,
    ::testing::Values(MatchSoakCase{"defaults", MatchConfig{}, 1'000'000},
                      MatchSoakCase{"cap1024", MatchConfig{.index_capacity = 1024}, 1'000'000},
                      MatchSoakCase{"cap4096_order4_window0_ungated",
                                    MatchConfig{.index_capacity = 4096,
                                                .max_drafts = 12,
                                                .count_max_order = 4,
                                                .count_window = 0,
                                                .min_confidence = 0},
                                    200'000}),
    [](const ::testing::TestParamInfo<MatchSoakCase>& info) { return std::string(info.param.name); });

struct CorpusSoakCase {
  const char* name = "";
  std::size_t max_bytes = 0;
  std::size_t longest_record = 0;
  std::size_t tokens = 0;
};

void PrintTo(const CorpusSoakCase& c, std::ostream* os) { *os << c.name; }

class SharedCorpusMemorySoak : public ::testing::TestWithParam<CorpusSoakCase> {};

// Fills `record` with a mix of runs: fresh tokens from a large vocabulary, slices of a few phrases
// that recur across records, and a tiny vocabulary drawn at random.
void fill_record(std::span<Token> record, const std::vector<std::vector<Token>>& phrases, std::mt19937_64& rng) {
  for (std::size_t at = 0; at < record.size();) {
    const std::size_t run = std::min(record.size() - at, std::uniform_int_distribution<std::size_t>(1, 300)(rng));
    const int kind = std::uniform_int_distribution<int>(0, 2)(rng);
    if (kind == 1) {
      const std::size_t pick = std::uniform_int_distribution<std::size_t>(0, phrases.size() - 1)(rng);
      const std::vector<Token>& phrase = phrases[pick];
      const std::size_t from = std::uniform_int_distribution<std::size_t>(0, phrase.size() - 1)(rng);
      for (std::size_t i = 0; i < run; ++i) record[at + i] = phrase[(from + i) % phrase.size()];
    } else {
      const Token top = kind == 0 ? 31999 : 5;
      for (std::size_t i = 0; i < run; ++i) record[at + i] = std::uniform_int_distribution<Token>(0, top)(rng);
    }
    at += run;
  }
}

TEST_P(SharedCorpusMemorySoak, HeapIsFixedAndWithinTheCap) {
  const CorpusSoakCase& c = GetParam();
  SCOPED_TRACE(std::string(c.name) + ": cap " + std::to_string(c.max_bytes) + " B, records up to " +
               std::to_string(c.longest_record) + " tokens, " + std::to_string(c.tokens) + " tokens");
  std::mt19937_64 rng(c.max_bytes * 31 + c.longest_record);
  std::vector<std::vector<Token>> phrases(8);
  for (std::vector<Token>& phrase : phrases) {
    phrase.resize(std::uniform_int_distribution<std::size_t>(20, 400)(rng));
    for (Token& token : phrase) token = std::uniform_int_distribution<Token>(0, 31999)(rng);
  }
  // Allocated first: `before` excludes them.
  std::vector<Token> record(c.longest_record);
  std::vector<Token> drafts(16);
  const std::size_t before = heap_in_use();
  SharedCorpus corpus(c.max_bytes);
  const std::size_t constructed = heap_in_use() - before;
  const std::size_t reported = corpus.memory_bytes();
  EXPECT_LE(reported, c.max_bytes);
  expect_heap_matches_memory_bytes(constructed, reported, "corpus");

  std::uint64_t appended = 0;
  std::uint64_t records = 0;
  std::uint64_t next_check = 100'000;
  std::size_t matched = 0;
  std::size_t allocations = 0;
  {
    const AllocationCounter counter;
    while (appended < c.tokens) {
      // Now and then an empty record, which must change nothing.
      const std::size_t length = std::uniform_int_distribution<std::size_t>(0, c.longest_record)(rng);
      const std::span<Token> written = std::span<Token>(record).first(length);
      fill_record(written, phrases, rng);
      corpus.append(written);
      appended += length;
      if (length != 0) ++records;
      ASSERT_LE(corpus.size(), corpus.capacity_tokens()) << "after " << appended << " tokens";
      ASSERT_EQ(corpus.size(), std::min<std::uint64_t>(appended, corpus.capacity_tokens()))
          << "after " << appended << " tokens";
      // Look something up in what is held: a recent record's end, whose phrases recur.
      if (length >= 8) {
        const CorpusDraft found = corpus.draft(written.last(8), drafts);
        if (found.match_length != 0) ++matched;
      }
      if (appended >= next_check) {
        ASSERT_EQ(heap_in_use(), before + constructed) << "after " << appended << " tokens";
        next_check += 100'000;
      }
    }
    allocations = counter.count();
  }
  EXPECT_EQ(allocations, 0U);
  EXPECT_EQ(heap_in_use(), before + constructed);
  EXPECT_EQ(corpus.memory_bytes(), reported);
  EXPECT_LE(corpus.memory_bytes(), c.max_bytes);
  EXPECT_EQ(corpus.appended(), appended);
  EXPECT_EQ(corpus.records(), records);
  // The corpus must have filled and then evicted for most of the run, and found matches.
  EXPECT_GE(appended, 10 * corpus.capacity_tokens());
  EXPECT_EQ(corpus.size(), corpus.capacity_tokens());
  EXPECT_GE(matched, records / 4);
}

INSTANTIATE_TEST_SUITE_P(
    Caps, SharedCorpusMemorySoak,
    ::testing::Values(
        // Not a power of two's worth of bytes: the capacity rounds down, memory stays below the cap.
        CorpusSoakCase{"cap1MB", 1'000'000, 3000, 1'000'000},
        // Exactly the bytes of 4096 tokens: memory reaches the cap and stays there.
        CorpusSoakCase{"cap_exact4096", SharedCorpus::bytes_for(4096), 2000, 1'000'000},
        // The smallest corpus, with records longer than all of it: one append evicts its own start.
        CorpusSoakCase{"cap_min_long_records", SharedCorpus::min_bytes(), 1000, 300'000}),
    [](const ::testing::TestParamInfo<CorpusSoakCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ngramspec::test
