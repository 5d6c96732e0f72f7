#include "ngramspec/mapped_corpus.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ngramspec/corpus_builder.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "support/allocation_counter.hpp"
#include "support/reference_corpus.hpp"
#include "support/temp_dir.hpp"

namespace ngramspec {
namespace {

using ::testing::HasSubstr;
using test::draft;
using test::Drafted;
using test::random_tokens;
using test::TempDir;

// Contexts that hit the corpus (its own n-grams, extended by random tokens) and miss it.
std::vector<std::vector<Token>> probe_contexts(std::mt19937_64& rng, std::span<const Token> held, Token vocab,
                                               std::size_t count) {
  std::vector<std::vector<Token>> contexts;
  for (std::size_t i = 0; i < count; ++i) {
    std::vector<Token> context = random_tokens(rng, rng() % 6, vocab);
    if (!held.empty() && rng() % 4 != 0) {
      const std::size_t end = 1 + rng() % held.size();
      const std::size_t length = std::min<std::size_t>(end, 1 + rng() % 80);
      context.insert(context.end(), held.begin() + static_cast<std::ptrdiff_t>(end - length),
                     held.begin() + static_cast<std::ptrdiff_t>(end));
    }
    contexts.push_back(std::move(context));
  }
  return contexts;
}

// ---------------------------------------------------------------------------------------------
// A saved live corpus drafts exactly as the live one, mapped or loaded

TEST(MappedCorpus, SavedLiveCorpusDraftsAsTheLiveOneOverManyRandomCorpora) {
  TempDir dir;
  std::mt19937_64 rng(20261123);
  for (int trial = 0; trial < 60; ++trial) {
    const Token vocab = static_cast<Token>(2 + rng() % 40);
    const std::size_t capacity = std::size_t{256} << (rng() % 3);
    SharedCorpus live(SharedCorpus::bytes_for(capacity));
    const std::size_t records = rng() % 60;
    for (std::size_t r = 0; r < records; ++r) live.append(random_tokens(rng, rng() % 40, vocab));
    const auto path = dir / ("trial" + std::to_string(trial) + ".ngc");
    live.save(path);

    const MappedCorpus mapped(path);
    ASSERT_NO_THROW(mapped.verify());
    EXPECT_EQ(mapped.size(), live.size());
    SharedCorpus loaded(SharedCorpus::bytes_for(capacity));
    loaded.load(path);
    EXPECT_EQ(loaded.size(), live.size());
    EXPECT_EQ(loaded.last_stamp(), live.last_stamp());

    for (const auto& context : probe_contexts(rng, mapped.tokens(), vocab, 200)) {
      const std::size_t room = rng() % 20;
      const Drafted expected = draft(live, context, room);
      ASSERT_EQ(draft(mapped, context, room), expected) << "trial " << trial;
      ASSERT_EQ(draft(loaded, context, room), expected) << "trial " << trial;
    }
  }
}

TEST(MappedCorpus, RecordsAndStampsRoundTrip) {
  TempDir dir;
  SharedCorpus live(SharedCorpus::bytes_for(256));
  live.append(std::vector<Token>{1, 2, 3}, 100);
  live.append(std::vector<Token>{4, 5}, 50);  // raised to 101: stamps only increase
  live.append(std::vector<Token>{6}, 200);
  EXPECT_EQ(live.last_stamp(), 200);
  live.save(dir / "c.ngc");
  const MappedCorpus mapped(dir / "c.ngc");
  ASSERT_EQ(mapped.records(), 3U);
  EXPECT_EQ(mapped.first_stamp(), 100);
  EXPECT_EQ(mapped.last_stamp(), 200);
  EXPECT_EQ(std::vector<Token>(mapped.record(0).tokens.begin(), mapped.record(0).tokens.end()),
            (std::vector<Token>{1, 2, 3}));
  EXPECT_EQ(mapped.record(1).stamp, 101);
  EXPECT_EQ(std::vector<Token>(mapped.record(2).tokens.begin(), mapped.record(2).tokens.end()), std::vector<Token>{6});
  EXPECT_THAT([&] { static_cast<void>(mapped.record(3)); },
              ::testing::ThrowsMessage<std::out_of_range>(HasSubstr("index 3 is out of range: 3 records")));
  EXPECT_EQ(mapped.ngrams(1), 6U);
  EXPECT_EQ(mapped.ngrams(2), 3U);  // 1 2, 2 3, 4 5
  EXPECT_EQ(mapped.ngrams(3), 1U);
}

// The records a corpus of C tokens keeps of a file: the newest whose sizes sum below C, and the
// one before them (cut by the corpus to its end), or all of them when they sum below C.
TEST(MappedCorpus, FirstRecordKeptIsWhereTheNewestRecordsFillTheCapacityOverManyRandomFiles) {
  TempDir dir;
  std::mt19937_64 rng(30);
  for (int trial = 0; trial < 50; ++trial) {
    CorpusBuilder builder;
    std::vector<std::size_t> sizes(1 + rng() % 12);
    for (std::size_t r = 0; r < sizes.size(); ++r) {
      sizes[r] = 1 + rng() % 20;
      builder.add(random_tokens(rng, sizes[r], 50), static_cast<std::int64_t>(r));
    }
    static_cast<void>(builder.write(dir / "f.ngc"));
    const MappedCorpus file(dir / "f.ngc");
    for (std::size_t capacity = 0; capacity <= 260; capacity += 1 + rng() % 7) {
      const std::size_t first = file.first_record_kept(capacity);
      std::size_t after_first = 0;  // tokens of the records after `first`
      for (std::size_t r = first + 1; r < sizes.size(); ++r) after_first += sizes[r];
      if (capacity == 0) {
        EXPECT_EQ(first, sizes.size()) << "trial " << trial;
      } else {
        ASSERT_LT(first, sizes.size()) << "trial " << trial << ", capacity " << capacity;
        EXPECT_LT(after_first, capacity) << "trial " << trial << ", capacity " << capacity;
        if (first > 0) {
          EXPECT_GE(after_first + sizes[first], capacity) << "trial " << trial << ", capacity " << capacity;
        }
      }
    }
  }
}

TEST(MappedCorpus, AnEmptyCorpusSavesAndMapsToAnEmptyFile) {
  TempDir dir;
  const SharedCorpus live(SharedCorpus::min_bytes());
  live.save(dir / "empty.ngc");
  const MappedCorpus mapped(dir / "empty.ngc");
  EXPECT_EQ(mapped.size(), 0U);
  EXPECT_EQ(mapped.records(), 0U);
  EXPECT_EQ(mapped.first_record_kept(256), 0U);
  EXPECT_NO_THROW(mapped.verify());
  const std::vector<Token> context = {1, 2, 3};
  EXPECT_EQ(draft(mapped, context, 4), Drafted{});
}

TEST(MappedCorpus, DraftingAllocatesNothing) {
  TempDir dir;
  CorpusBuilder builder;
  std::mt19937_64 rng(5);
  for (int r = 0; r < 50; ++r) builder.add(random_tokens(rng, 100, 20), r);
  static_cast<void>(builder.write(dir / "c.ngc"));
  const MappedCorpus mapped(dir / "c.ngc");
  const auto contexts = probe_contexts(rng, mapped.tokens(), 20, 100);
  std::vector<Token> out(16);
  const test::AllocationCounter allocations;
  for (const auto& context : contexts) static_cast<void>(mapped.draft(context, out));
  EXPECT_EQ(allocations.count(), 0U);
}

TEST(MappedCorpus, MovingKeepsTheMappingAndEmptiesTheSource) {
  TempDir dir;
  CorpusBuilder builder;
  builder.add(std::vector<Token>{7, 8, 9, 10}, 1);
  static_cast<void>(builder.write(dir / "c.ngc"));
  MappedCorpus first(dir / "c.ngc");
  MappedCorpus second(std::move(first));
  EXPECT_EQ(second.size(), 4U);
  EXPECT_EQ(first.size(), 0U);  // NOLINT(bugprone-use-after-move): documented as empty
  const std::vector<Token> context = {8};
  EXPECT_EQ(draft(second, context, 4).tokens, (std::vector<Token>{9, 10}));
  EXPECT_EQ(draft(first, context, 4), Drafted{});
  first = std::move(second);
  EXPECT_EQ(first.size(), 4U);
}

TEST(MappedCorpus, VerifyChecksumsNamesTheCorruptedSection) {
  TempDir dir;
  CorpusBuilder builder;
  builder.add(std::vector<Token>{1, 2, 3, 4, 5, 6}, 1);
  static_cast<void>(builder.write(dir / "c.ngc"));
  EXPECT_NO_THROW(MappedCorpus(dir / "c.ngc").verify_checksums());
  {  // the third token's low byte: the tokens section, past the 384-byte header and its alignment
    std::fstream file(dir / "c.ngc", std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(384 + 8);
    file.put('\x7f');
  }
  const MappedCorpus mapped(dir / "c.ngc");  // the header still checks out
  try {
    mapped.verify_checksums();
    FAIL() << "a corrupted section passed";
  } catch (const CorpusFileError& e) {
    EXPECT_EQ(e.section(), "tokens");
    EXPECT_THAT(e.what(), HasSubstr("checksum mismatch"));
  }
}

// ---------------------------------------------------------------------------------------------
// CorpusBuilder: what a file holds is defined by its records alone

struct TestRecord {
  std::vector<Token> tokens;
  std::int64_t stamp;
};

std::filesystem::path build(const TempDir& dir, const std::string& name, const std::vector<TestRecord>& records,
                            std::uint64_t cap = CorpusBuilder::kNoCap) {
  CorpusBuilder builder(cap);
  for (const TestRecord& r : records) builder.add(r.tokens, r.stamp);
  static_cast<void>(builder.write(dir / name));
  return dir / name;
}

std::filesystem::path merge(const TempDir& dir, const std::string& name, const std::vector<std::filesystem::path>& shards,
                            std::uint64_t cap = CorpusBuilder::kNoCap) {
  CorpusBuilder builder(cap);
  for (const auto& shard : shards) builder.add(MappedCorpus(shard));
  static_cast<void>(builder.write(dir / name));
  return dir / name;
}

TEST(CorpusMerge, ResultDependsOnlyOnTheSetOfRecordsOverManyRandomShardings) {
  TempDir dir;
  std::mt19937_64 rng(77);
  for (int trial = 0; trial < 25; ++trial) {
    // Records with stamps that overlap across shards and sometimes tie.
    std::vector<TestRecord> records;
    const std::size_t count = 1 + rng() % 30;
    for (std::size_t r = 0; r < count; ++r) {
      records.push_back({random_tokens(rng, 1 + rng() % 30, 8), static_cast<std::int64_t>(rng() % 20)});
    }
    const auto whole = build(dir, "whole.ngc", records);
    // The same records dealt at random into 1 to 4 shards, merged in a random order, some
    // records given twice.
    const std::size_t shards = 1 + rng() % 4;
    std::vector<std::vector<TestRecord>> dealt(shards);
    for (const TestRecord& r : records) {
      dealt[rng() % shards].push_back(r);
      if (rng() % 5 == 0) dealt[rng() % shards].push_back(r);
    }
    std::vector<std::filesystem::path> paths;
    for (std::size_t s = 0; s < shards; ++s) paths.push_back(build(dir, "shard" + std::to_string(s) + ".ngc", dealt[s]));
    std::shuffle(paths.begin(), paths.end(), rng);
    const auto merged = merge(dir, "merged.ngc", paths);
    ASSERT_EQ(test::read_file(merged), test::read_file(whole)) << "trial " << trial;
    EXPECT_NO_THROW(MappedCorpus(merged).verify());
    // Idempotent: merging the result with one of its shards changes nothing.
    const auto again = merge(dir, "again.ngc", {merged, paths.front()});
    ASSERT_EQ(test::read_file(again), test::read_file(whole)) << "trial " << trial;
  }
}

TEST(CorpusMerge, ShardsDisjointInTimeConcatenateInTimeOrder) {
  TempDir dir;
  const auto later = build(dir, "later.ngc", {{{5, 6, 7}, 30}, {{8, 9}, 40}});
  const auto earlier = build(dir, "earlier.ngc", {{{1, 2}, 10}, {{3, 4}, 20}});
  const MappedCorpus merged(merge(dir, "m.ngc", {later, earlier}));
  EXPECT_EQ(std::vector<Token>(merged.tokens().begin(), merged.tokens().end()),
            (std::vector<Token>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  ASSERT_EQ(merged.records(), 4U);
  EXPECT_EQ(merged.record(2).stamp, 30);
  EXPECT_EQ(merged.first_stamp(), 10);
  EXPECT_EQ(merged.last_stamp(), 40);
}

TEST(CorpusMerge, OverTheCapTheMostRecentTokensStayAndTheFileFits) {
  TempDir dir;
  std::mt19937_64 rng(3);
  std::vector<TestRecord> records;
  std::vector<Token> all;
  for (int r = 0; r < 40; ++r) {
    records.push_back({random_tokens(rng, 50, 1000), r});
    all.insert(all.end(), records.back().tokens.begin(), records.back().tokens.end());
  }
  const std::uint64_t cap = 40000;
  CorpusBuilder builder(cap);
  for (const TestRecord& r : records) builder.add(r.tokens, r.stamp);
  const CorpusFileSummary summary = builder.write(dir / "capped.ngc");
  EXPECT_LE(summary.file_bytes, cap);
  EXPECT_GT(summary.dropped_tokens, 0U);
  EXPECT_EQ(summary.tokens + summary.dropped_tokens, all.size());
  const MappedCorpus mapped(dir / "capped.ngc");
  EXPECT_EQ(mapped.file_bytes(), summary.file_bytes);
  EXPECT_NO_THROW(mapped.verify());
  // The file holds exactly the last tokens; its oldest record is the end of a longer one.
  EXPECT_TRUE(std::equal(mapped.tokens().begin(), mapped.tokens().end(), all.end() - static_cast<std::ptrdiff_t>(mapped.size())));
  EXPECT_EQ(mapped.last_stamp(), 39);
}

TEST(CorpusBuilder, AByteCapTooSmallForOneTokenIsNamed) {
  EXPECT_THAT([] { CorpusBuilder builder(100); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("max_file_bytes = 100 is invalid")));
}

// ---------------------------------------------------------------------------------------------
// MatchDrafter with a corpus file, alone and beside the live corpus

TEST(MatchDrafterWithCorpusFile, DraftsFromTheFileWhenTheSequenceHasNoMatch) {
  TempDir dir;
  const auto path = build(dir, "c.ngc", {{{100, 101, 102, 103, 104}, 1}});
  const MappedCorpus file(path);
  MatchDrafter drafter(MatchConfig{.min_confidence = 0}, nullptr, &file);
  drafter.update(std::vector<Token>{7, 100, 101});
  std::vector<Token> out(4);
  ASSERT_EQ(drafter.predict(out), 3U);
  EXPECT_EQ(out, (std::vector<Token>{102, 103, 104, 0}));
}

TEST(MatchDrafterWithCorpusFile, PreferenceDecidesWhenBothMatch) {
  TempDir dir;
  // The file matches the last two tokens (5 6 -> 50 51), the live corpus the last three (4 5 6 -> 60 61).
  const auto path = build(dir, "c.ngc", {{{9, 5, 6, 50, 51}, 1}});
  const MappedCorpus file(path);
  SharedCorpus live(SharedCorpus::min_bytes());
  live.append(std::vector<Token>{4, 5, 6, 60, 61});
  const auto drafts = [&](CorpusPreference preference, const std::vector<Token>& sequence) {
    MatchDrafter drafter(MatchConfig{.min_confidence = 0, .corpus_preference = preference}, &live, &file);
    drafter.update(sequence);
    std::vector<Token> out(2);
    out.resize(drafter.predict(out));
    return out;
  };
  const std::vector<Token> live_longer = {4, 5, 6};
  EXPECT_EQ(drafts(CorpusPreference::longer_match, live_longer), (std::vector<Token>{60, 61}));
  EXPECT_EQ(drafts(CorpusPreference::live, live_longer), (std::vector<Token>{60, 61}));
  EXPECT_EQ(drafts(CorpusPreference::file, live_longer), (std::vector<Token>{50, 51}));
  const std::vector<Token> file_longer = {9, 5, 6};
  EXPECT_EQ(drafts(CorpusPreference::longer_match, file_longer), (std::vector<Token>{50, 51}));
  EXPECT_EQ(drafts(CorpusPreference::live, file_longer), (std::vector<Token>{60, 61}));
  const std::vector<Token> tie = {5, 6};  // both match two tokens: the live corpus, the more recent
  EXPECT_EQ(drafts(CorpusPreference::longer_match, tie), (std::vector<Token>{60, 61}));
}

TEST(MatchDrafterWithCorpusFile, AnInvalidPreferenceIsNamed) {
  EXPECT_THAT([] { MatchDrafter drafter(MatchConfig{.corpus_preference = static_cast<CorpusPreference>(7)}); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("corpus_preference = 7 is invalid")));
}

}  // namespace
}  // namespace ngramspec
