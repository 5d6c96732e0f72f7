// Bounded memory over a long stream: an NGramPredictor's heap is what memory_bytes() reports, fixed
// at construction, and a million tokens of fresh, repetitive and mixed text neither allocate nor
// grow it.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "ngramspec/ngram_predictor.hpp"
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
  std::vector<Token> drafts(c.config.draft_count);  // allocated first: `before` excludes it
  const std::size_t before = heap_in_use();
  NGramPredictor predictor(c.config);
  const std::size_t constructed = heap_in_use() - before;
  const std::size_t reported = predictor.memory_bytes();
  // memory_bytes() counts the object itself (here on the stack) and capacities; the heap adds
  // allocator headers and page rounding, a few KiB at most for a handful of blocks.
  EXPECT_LE(constructed, reported + 64 * 1024);
  EXPECT_GE(constructed, reported / 2) << "the heap measurement does not see the predictor's tables";

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
                      SoakCase{NGramConfig{.min_order = 2, .max_order = 6, .draft_count = 8, .window = 8192}, 300'000},
                      SoakCase{NGramConfig{.min_order = 3, .max_order = 8, .draft_count = 10, .window = 16}, 200'000}),
    [](const ::testing::TestParamInfo<SoakCase>& info) { return case_name(info.param); });

}  // namespace
}  // namespace ngramspec::test
