#include "ngramspec/shared_corpus.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/allocation_counter.hpp"
#include "support/reference_corpus.hpp"
#include "support/token_text.hpp"

namespace ngramspec {
namespace {

using ::testing::HasSubstr;
using test::draft;
using test::Drafted;
using test::random_tokens;
using test::NaiveCorpus;
using test::tokens_string;

constexpr std::size_t kMaxVerify = SharedCorpus::kMaxVerify;
// The byte cap that yields exactly `tokens` of capacity (a power of two).
std::size_t bytes_for(std::size_t tokens) { return SharedCorpus::bytes_for(tokens); }

// ---------------------------------------------------------------------------------------------
// Construction

TEST(SharedCorpusConfig, InvalidByteCapIsNamedWithItsValue) {
  const auto message = [](std::size_t max_bytes) {
    try {
      const SharedCorpus corpus(max_bytes);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  const std::size_t smallest = SharedCorpus::min_bytes();
  EXPECT_EQ(smallest, bytes_for(SharedCorpus::kMinTokens));
  for (const std::size_t bad : {std::size_t{0}, std::size_t{1}, SharedCorpus::kBytesPerToken, smallest - 1}) {
    EXPECT_THAT(message(bad), HasSubstr("max_bytes = " + std::to_string(bad))) << bad;
  }
  EXPECT_EQ(message(smallest), "no exception");
  // Above the largest corpus: refused naming the value and the limit, not capped and allocated.
  EXPECT_EQ(SharedCorpus::max_bytes(), bytes_for(SharedCorpus::kMaxTokens));
  for (const std::size_t bad : {SharedCorpus::max_bytes() + 1, std::numeric_limits<std::size_t>::max()}) {
    EXPECT_THAT(message(bad), HasSubstr("max_bytes = " + std::to_string(bad) + " is invalid: the largest corpus " +
                                        "(kMaxTokens = 268435456 tokens) takes max_bytes() = " +
                                        std::to_string(SharedCorpus::max_bytes())))
        << bad;
  }
}

TEST(SharedCorpusConfig, CapacityIsAPowerOfTwoWithinTheByteCap) {
  std::mt19937_64 rng(5);
  std::vector<std::size_t> caps = {bytes_for(256), bytes_for(256) + 1, bytes_for(512) - 1, bytes_for(512),
                                   bytes_for(1000), 1'000'000, 4'000'000};
  for (int i = 0; i < 20; ++i) caps.push_back(bytes_for(256) + rng() % 3'000'000);
  for (const std::size_t max_bytes : caps) {
    SCOPED_TRACE("max_bytes " + std::to_string(max_bytes));
    const SharedCorpus corpus(max_bytes);
    const std::size_t capacity = corpus.capacity_tokens();
    EXPECT_TRUE(std::has_single_bit(capacity)) << capacity;
    EXPECT_GE(capacity, SharedCorpus::kMinTokens);
    EXPECT_LE(SharedCorpus::bytes_for(capacity), max_bytes);
    // The largest such power of two: twice as many would not fit.
    EXPECT_GT(SharedCorpus::bytes_for(2 * capacity), max_bytes);
    EXPECT_LE(corpus.memory_bytes(), max_bytes);
    EXPECT_EQ(corpus.size(), 0U);
    EXPECT_EQ(corpus.appended(), 0U);
    EXPECT_EQ(corpus.records(), 0U);
  }
}

// ---------------------------------------------------------------------------------------------
// Hand-traced cases

TEST(SharedCorpus, DraftsWhatFollowedTheMostRecentOccurrenceUpToTheRecordEnd) {
  SharedCorpus corpus(bytes_for(256));
  corpus.append(std::vector<Token>{1, 2, 3, 4, 5});
  corpus.append(std::vector<Token>{9, 2, 3, 7, 8});
  // "2 3" last ended in the second record; "1 2 3" only in the first.
  EXPECT_EQ(draft(corpus, std::vector<Token>{6, 2, 3}, 8), (Drafted{2, 2, {7, 8}}));
  EXPECT_EQ(draft(corpus, std::vector<Token>{1, 2, 3}, 8), (Drafted{2, 3, {4, 5}}));
  EXPECT_EQ(draft(corpus, std::vector<Token>{1, 2, 3}, 1), (Drafted{1, 3, {4}}));
  // The end of a record is followed by nothing; the next record is not its continuation.
  EXPECT_EQ(draft(corpus, std::vector<Token>{4, 5}, 8), (Drafted{0, 2, {}}));
  // "5 9" spans two records: only "9" matches.
  EXPECT_EQ(draft(corpus, std::vector<Token>{5, 9}, 8), (Drafted{4, 1, {2, 3, 7, 8}}));
  EXPECT_EQ(draft(corpus, std::vector<Token>{42}, 8), (Drafted{}));
}

TEST(SharedCorpus, EmptyRecordContextOrOutChangeNothing) {
  SharedCorpus corpus(bytes_for(256));
  corpus.append(std::vector<Token>{1, 2, 3, 4});
  corpus.append(std::span<const Token>());
  EXPECT_EQ(corpus.records(), 1U);
  EXPECT_EQ(corpus.appended(), 4U);
  EXPECT_EQ(corpus.size(), 4U);
  // An empty record between two records does not join them, nor does it end the first.
  corpus.append(std::vector<Token>{5});
  EXPECT_EQ(draft(corpus, std::vector<Token>{3}, 8), (Drafted{1, 1, {4}}));
  EXPECT_EQ(draft(corpus, std::vector<Token>{}, 8), (Drafted{}));
  std::vector<Token> none;
  const CorpusDraft empty_out = corpus.draft(std::vector<Token>{1, 2}, none);
  EXPECT_EQ(empty_out.count, 0U);
}

TEST(SharedCorpus, ARecordLongerThanTheCapacityKeepsItsEnd) {
  SharedCorpus corpus(bytes_for(256));
  const std::size_t capacity = corpus.capacity_tokens();
  std::vector<Token> record(3 * capacity + 17);
  for (std::size_t i = 0; i < record.size(); ++i) record[i] = static_cast<Token>(i);
  corpus.append(record);
  EXPECT_EQ(corpus.size(), capacity);
  EXPECT_EQ(corpus.appended(), record.size());
  EXPECT_EQ(corpus.records(), 1U);
  const std::size_t oldest = record.size() - capacity;
  // Evicted tokens are never matched.
  EXPECT_EQ(draft(corpus, std::vector<Token>{static_cast<Token>(oldest - 1)}, 4), (Drafted{}));
  // The oldest held token matches alone: nothing before it is held.
  EXPECT_EQ(draft(corpus, std::vector<Token>{static_cast<Token>(oldest - 1), static_cast<Token>(oldest)}, 2),
            (Drafted{2, 1, {static_cast<Token>(oldest + 1), static_cast<Token>(oldest + 2)}}));
  const std::vector<Token> context(record.end() - 10, record.end() - 3);
  EXPECT_EQ(draft(corpus, context, 8), (Drafted{3, 7, std::vector<Token>(record.end() - 3, record.end())}));
}

TEST(SharedCorpus, ContextBeyondMaxVerifyIsReadOnlyInItsLastTokens) {
  SharedCorpus corpus(bytes_for(512));
  std::vector<Token> record(300);
  for (std::size_t i = 0; i < record.size(); ++i) record[i] = static_cast<Token>(1000 + i);
  corpus.append(record);
  const std::vector<Token> context(record.begin(), record.begin() + 200);
  EXPECT_EQ(draft(corpus, context, 3), (Drafted{3, kMaxVerify, {1200, 1201, 1202}}));
  // A mismatch before the last kMaxVerify tokens is not seen.
  std::vector<Token> altered = context;
  altered[context.size() - kMaxVerify - 1] = 7;
  altered[0] = 8;
  EXPECT_EQ(draft(corpus, altered, 3), draft(corpus, context, 3));
  // One inside them is.
  altered[context.size() - kMaxVerify] = 7;
  EXPECT_EQ(draft(corpus, altered, 3), (Drafted{3, kMaxVerify - 1, {1200, 1201, 1202}}));
}

TEST(SharedCorpus, ClearForgetsEverythingAndKeepsTheMemory) {
  SharedCorpus corpus(bytes_for(256));
  const std::size_t memory = corpus.memory_bytes();
  std::mt19937_64 rng(3);
  for (int i = 0; i < 40; ++i) corpus.append(random_tokens(rng, 1 + rng() % 30, 5));
  EXPECT_GT(draft(corpus, std::vector<Token>{1, 2}, 4).match_length, 0U);
  corpus.clear();
  EXPECT_EQ(corpus.size(), 0U);
  EXPECT_EQ(corpus.appended(), 0U);
  EXPECT_EQ(corpus.records(), 0U);
  EXPECT_EQ(corpus.memory_bytes(), memory);
  for (Token t = 0; t < 5; ++t) EXPECT_EQ(draft(corpus, std::vector<Token>{t}, 4), (Drafted{})) << t;
  corpus.append(std::vector<Token>{1, 2});
  EXPECT_EQ(draft(corpus, std::vector<Token>{1}, 4), (Drafted{1, 1, {2}}));
}

// ---------------------------------------------------------------------------------------------
// Properties

// One random script of appends, drafts and clears against NaiveCorpus. Small vocabularies
// make every n-gram recur; small capacities make eviction constant.
void check_script(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto pick = [&rng](std::size_t lo, std::size_t hi) {
    return static_cast<std::size_t>(std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng));
  };
  const std::size_t capacity = pick(0, 3) == 0 ? 512 : 256;
  const Token vocab = static_cast<Token>(pick(0, 4) == 0 ? pick(20, 300) : pick(1, 6));
  const std::size_t operations = pick(100, 400);
  SCOPED_TRACE("seed " + std::to_string(seed) + " capacity " + std::to_string(capacity) + " vocab " +
               std::to_string(vocab));
  SharedCorpus corpus(bytes_for(capacity));
  ASSERT_EQ(corpus.capacity_tokens(), capacity);
  NaiveCorpus naive(capacity);
  std::vector<Token> last_record;
  std::uint64_t last_end = 0;  // where a draft last matched
  for (std::size_t op = 0; op < operations; ++op) {
    const std::size_t kind = pick(0, 99);
    if (kind < 2) {
      corpus.clear();
      naive.clear();  // last_end stays: a stale hint must be harmless
    } else if (kind < 40) {
      std::size_t length = 0;
      switch (pick(0, 9)) {
        case 0: length = 0; break;
        case 1: length = pick(capacity / 2, 2 * capacity + 5); break;
        case 2: case 3: length = pick(1, 3); break;
        default: length = pick(1, 60);
      }
      std::vector<Token> record = random_tokens(rng, length, vocab);
      // Now and then a piece of the previous record, so long matches occur.
      if (!last_record.empty() && pick(0, 2) == 0) {
        const std::size_t from = pick(0, last_record.size() - 1);
        const std::size_t n = pick(1, last_record.size() - from);
        record.insert(record.begin() + static_cast<std::ptrdiff_t>(pick(0, record.size())),
                      last_record.begin() + static_cast<std::ptrdiff_t>(from),
                      last_record.begin() + static_cast<std::ptrdiff_t>(from + n));
      }
      SCOPED_TRACE("op " + std::to_string(op) + " append " + tokens_string(record));
      corpus.append(record);
      naive.append(record);
      if (!record.empty()) last_record = record;
    } else {
      std::vector<Token> context;
      const std::size_t length = pick(0, 6) == 0 ? pick(0, 150) : pick(0, 8);
      if (!last_record.empty() && pick(0, 1) == 0) {
        // The start of a piece of a recent record, perhaps after random tokens.
        context = random_tokens(rng, pick(0, 3), vocab);
        const std::size_t from = pick(0, last_record.size() - 1);
        const std::size_t n = std::min(length, last_record.size() - from);
        context.insert(context.end(), last_record.begin() + static_cast<std::ptrdiff_t>(from),
                       last_record.begin() + static_cast<std::ptrdiff_t>(from + n));
      } else {
        context = random_tokens(rng, length, vocab + (pick(0, 9) == 0 ? 3 : 0));
      }
      const std::size_t room = pick(0, 5) == 0 ? pick(0, 2 * capacity) : pick(0, 12);
      SCOPED_TRACE("op " + std::to_string(op) + " draft context " + tokens_string(context) + " room " +
                   std::to_string(room));
      // Half the lookups hinted: nowhere, anywhere (held or not), or where the last one matched
      // moved on by a few tokens (the way MatchDrafter follows a match).
      std::uint64_t hint = 0;
      switch (pick(0, 5)) {
        case 0: hint = pick(0, naive.appended() + 3); break;
        case 1: case 2: hint = last_end == 0 ? 0 : last_end + pick(0, 2); break;
        default: break;
      }
      const Drafted expected = naive.draft(context, room, hint);
      const Drafted got = draft(corpus, context, room, hint);
      ASSERT_EQ(got, expected) << "hint " << hint;
      ASSERT_EQ(got.end, expected.end) << "hint " << hint;
      if (hint == 0) {
        ASSERT_EQ(draft(corpus, context, room), expected);
      }
      if (got.end != 0) last_end = got.end;
    }
    ASSERT_EQ(corpus.size(), naive.size()) << "op " << op;
    ASSERT_EQ(corpus.appended(), naive.appended()) << "op " << op;
    ASSERT_EQ(corpus.records(), naive.records()) << "op " << op;
  }
}

TEST(SharedCorpusProperty, AgreesWithTheNaiveDefinition) {
  for (std::uint64_t seed = 0; seed < 150; ++seed) {
    check_script(seed);
    if (::testing::Test::HasFailure()) break;  // one script's trace is enough to debug
  }
}

// ---------------------------------------------------------------------------------------------
// Fixed memory

TEST(SharedCorpus, AppendAndDraftDoNotAllocate) {
  SharedCorpus corpus(bytes_for(256));
  std::mt19937_64 rng(11);
  std::vector<std::vector<Token>> records;
  for (int i = 0; i < 200; ++i) records.push_back(random_tokens(rng, rng() % 90, 1 + rng() % 8));
  std::vector<Token> out(32);
  std::size_t drafted = 0;
  std::size_t allocations = 0;
  {
    const test::AllocationCounter counter;
    for (const std::vector<Token>& record : records) {
      corpus.append(record);
      for (std::size_t length = 0; length <= record.size() && length < 100; length += 7) {
        drafted += corpus.draft(std::span<const Token>(record).first(length), out).count;
      }
    }
    corpus.clear();
    allocations = counter.count();
  }
  EXPECT_EQ(allocations, 0U);
  EXPECT_GT(drafted, 0U);  // the loop drafted, not only missed
}

TEST(SharedCorpus, MemoryStaysFixedOverAMillionDistinctNGrams) {
  // Nearly every n-gram is new: if evicted n-grams stayed in the tables, they would fill up
  // (and the next insertion would never find a free slot).
  SharedCorpus corpus(bytes_for(256));
  const std::size_t memory = corpus.memory_bytes();
  std::mt19937_64 rng(17);
  std::vector<Token> record;
  record.reserve(40);
  std::uint64_t appended = 0;
  std::size_t allocations = 0;
  std::vector<Token> out(8);
  {
    const test::AllocationCounter counter;
    while (appended < 1'000'000) {
      record.clear();
      const std::size_t length = 1 + rng() % 40;
      for (std::size_t i = 0; i < length; ++i) record.push_back(static_cast<Token>(rng() % 4'000'000'000U));
      corpus.append(record);
      appended += length;
      // The newest record is held whole and found.
      const CorpusDraft found = corpus.draft(std::span<const Token>(record).first(1), out);
      if (found.match_length != 1 || found.count != std::min<std::size_t>(length - 1, out.size())) {
        ADD_FAILURE() << "after " << appended << " tokens: match_length " << found.match_length << " count "
                      << found.count;
        break;
      }
    }
    allocations = counter.count();
  }
  EXPECT_EQ(allocations, 0U);
  EXPECT_EQ(corpus.memory_bytes(), memory);
  EXPECT_EQ(corpus.size(), corpus.capacity_tokens());
  EXPECT_EQ(corpus.appended(), appended);
}

}  // namespace
}  // namespace ngramspec
