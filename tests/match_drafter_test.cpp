#include "ngramspec/match_drafter.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "ngramspec/draft_planner.hpp"
#include "ngramspec/drafter.hpp"
#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "ngramspec/speculative_decoder.hpp"
#include "ngramspec/verify_cost.hpp"
#include "support/allocation_counter.hpp"
#include "support/mock_models.hpp"
#include "support/reference_match.hpp"
#include "support/test_drafters.hpp"
#include "support/thrown_message.hpp"
#include "support/token_text.hpp"

namespace ngramspec {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using test::NaiveMatch;
using test::tokens_string;

static_assert(Drafter<MatchDrafter>);

MatchConfig make_config(std::size_t index_capacity, std::size_t copy_min_match, std::size_t max_drafts,
                        std::size_t count_max_order = 3) {
  MatchConfig config;
  config.min_confidence = 0;  // ungated: what the naive reference below describes
  config.index_capacity = index_capacity;
  config.copy_min_match = copy_min_match;
  config.max_drafts = max_drafts;
  config.count_max_order = count_max_order;
  return config;
}

MatchConfig with_gate(MatchConfig config, double min_confidence) {
  config.min_confidence = min_confidence;
  return config;
}

std::string config_string(const MatchConfig& config) {
  return "{index_capacity " + std::to_string(config.index_capacity) + ", copy_min_match " +
         std::to_string(config.copy_min_match) + ", max_drafts " + std::to_string(config.max_drafts) +
         ", count_max_order " +
         std::to_string(config.count_max_order) + ", min_confidence " + std::to_string(config.min_confidence) + "}";
}

std::vector<Token> drafts(const MatchDrafter& drafter, std::size_t room) {
  std::vector<Token> out(room);
  out.resize(drafter.predict(out));
  return out;
}

MatchDrafter observed(const MatchConfig& config, const std::vector<Token>& tokens) {
  MatchDrafter drafter(config);
  drafter.update(tokens);
  return drafter;
}

// A random stream: uniform over a small vocabulary, or a motif repeated with noise and
// occasional jumps, so that matches of every length (past kMaxVerify too) occur.
std::vector<Token> random_stream(std::mt19937_64& rng, std::size_t length) {
  const auto pick = [&rng](std::size_t lo, std::size_t hi) {
    return static_cast<std::size_t>(std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng));
  };
  const Token vocab = static_cast<Token>(pick(2, 12));
  std::vector<Token> stream;
  if (pick(0, 2) == 0) {
    for (std::size_t i = 0; i < length; ++i) stream.push_back(static_cast<Token>(pick(0, vocab - 1)));
    return stream;
  }
  std::vector<Token> motif(pick(1, 90));
  for (Token& t : motif) t = static_cast<Token>(pick(0, 1000));
  std::size_t at = 0;
  const std::size_t noise = pick(0, 20);
  for (std::size_t i = 0; i < length; ++i) {
    if (pick(0, 99) < noise) {
      stream.push_back(static_cast<Token>(pick(0, vocab - 1)));
      if (pick(0, 3) == 0) at = pick(0, motif.size() - 1);
    } else {
      stream.push_back(motif[at]);
      at = (at + 1) % motif.size();
    }
  }
  return stream;
}

// ---------------------------------------------------------------------------------------------
// Configuration

TEST(MatchDrafterConfig, InvalidFieldsAreNamedWithTheirValue) {
  const auto message = [](const MatchConfig& config) {
    try {
      MatchDrafter drafter(config);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_THAT(message(make_config(3, 3, 4)), HasSubstr("index_capacity = 3"));
  EXPECT_THAT(message(make_config(0, 3, 4)), HasSubstr("index_capacity = 0"));
  EXPECT_THAT(message(make_config(MatchDrafter::kMaxIndexCapacity + 1, 3, 4)),
              HasSubstr("index_capacity = " + std::to_string(MatchDrafter::kMaxIndexCapacity + 1)));
  EXPECT_THAT(message(make_config(16, 0, 4)), HasSubstr("copy_min_match = 0"));
  EXPECT_THAT(message(make_config(16, 3, 0)), HasSubstr("max_drafts = 0"));
  EXPECT_THAT(message(make_config(16, 3, 4, 1)), HasSubstr("count_max_order = 1"));
  EXPECT_THAT(message(make_config(16, 3, 4, MatchDrafter::kMaxCountOrder + 1)),
              HasSubstr("count_max_order = " + std::to_string(MatchDrafter::kMaxCountOrder + 1)));
  EXPECT_EQ(message(make_config(4, 1, 1, 2)), "no exception");
  EXPECT_EQ(message(make_config(4, 1, 1, MatchDrafter::kMaxCountOrder)), "no exception");
  EXPECT_EQ(message(MatchConfig{}), "no exception");
}

TEST(MatchDrafterConfig, InvalidMinConfidenceIsNamedWithItsValue) {
  const auto message = [](double min_confidence) {
    try {
      MatchDrafter drafter(with_gate(MatchConfig{}, min_confidence));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  // The value in full, so that it shows why: it reads back as the value refused (six decimals printed -1e-9 as
  // -0.000000 and 1 + 1e-12 as 1.000000).
  for (const double bad : {-0.25, -1e-9, 1.0, 1.0 + 1e-12, 1.5, std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    SCOPED_TRACE(bad);
    const std::string text = message(bad);
    const std::string prefix = "min_confidence = ";
    const std::size_t at = text.find(prefix);
    ASSERT_NE(at, std::string::npos) << text;
    const std::size_t end = text.find(" is invalid", at);
    ASSERT_NE(end, std::string::npos) << text;
    const std::string value = text.substr(at + prefix.size(), end - at - prefix.size());
    if (std::isnan(bad)) {
      EXPECT_EQ(value, "nan") << text;
    } else {
      EXPECT_EQ(std::strtod(value.c_str(), nullptr), bad) << text;
    }
  }
  for (const double good : {0.0, 1e-9, 0.1, 0.5, 0.999}) EXPECT_EQ(message(good), "no exception") << good;
  // The default is gated, without a corpus; the naive reference describes the ungated drafter.
  EXPECT_GT(MatchConfig{}.min_confidence, 0.0);
  EXPECT_EQ(MatchDrafter().corpus(), nullptr);
}

TEST(MatchDrafterConfig, MemoryIsBoundedPerCapToken) {
  for (const std::size_t order : {2, 3, 4}) {
    const std::size_t per_token =
        MatchDrafter::kMaxBytesPerToken + (order > 3 ? (order - 3) * MatchDrafter::kMaxBytesPerTokenPerOrder : 0);
    for (const std::size_t cap : {4, 5, 100, 1024, 1025, 4097, 16385}) {
      SCOPED_TRACE("cap " + std::to_string(cap) + " count_max_order " + std::to_string(order));
      const MatchDrafter drafter(make_config(cap, 3, 4, order));
      EXPECT_LE(drafter.memory_bytes(), per_token * cap + 4096);
      EXPECT_GE(drafter.memory_bytes(), 4 * cap);  // at least the token array
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Hand-traced cases

TEST(MatchDrafter, NothingObservedNothingDrafted) {
  const MatchDrafter drafter;
  EXPECT_THAT(drafts(drafter, 8), IsEmpty());
  EXPECT_EQ(drafter.match_length(), 0U);
}

TEST(MatchDrafter, MatchExtendsTokenByTokenAndIsCopied) {
  MatchDrafter drafter(make_config(64, 3, 4));
  drafter.update(std::vector<Token>{1, 2, 3, 9});
  EXPECT_EQ(drafter.match_length(), 0U);  // 9 is new
  drafter.update(1);                      // anchors at the 1 at position 0
  EXPECT_EQ(drafter.match_length(), 1U);
  EXPECT_EQ(drafter.match_end(), 1U);
  drafter.update(2);
  EXPECT_EQ(drafter.match_length(), 2U);
  EXPECT_EQ(drafter.match_end(), 2U);
  drafter.update(3);
  EXPECT_EQ(drafter.match_length(), 3U);
  EXPECT_EQ(drafter.match_end(), 3U);
  // "1 2 3" was followed by 9, then by the repeat that is the end of the sequence.
  EXPECT_THAT(drafts(drafter, 8), ElementsAre(9, 1, 2, 3));
  EXPECT_THAT(drafts(drafter, 2), ElementsAre(9, 1));
}

TEST(MatchDrafter, MismatchReAnchorsAtTheMostRecentOccurrence) {
  // 1 2 5 1 2 6 7 1 2: after the last 2, "7 1 2" is new and "1 2" last ended at 5.
  const MatchDrafter drafter = observed(make_config(64, 2, 4), {1, 2, 5, 1, 2, 6, 7, 1, 2});
  EXPECT_EQ(drafter.match_length(), 2U);
  EXPECT_EQ(drafter.match_end(), 5U);
  EXPECT_THAT(drafts(drafter, 4), ElementsAre(6, 7, 1, 2));
}

TEST(MatchDrafter, ShortMatchDraftsTheMostFrequentContinuationLongOneCopies) {
  // "1 2" was followed by 5, 5 and (most recently) 6; the match is "1 2" ending at 8.
  const std::vector<Token> stream = {1, 2, 5, 1, 2, 5, 1, 2, 6, 8, 1, 2};
  const MatchDrafter copying = observed(make_config(64, 2, 4), stream);
  EXPECT_EQ(copying.match_length(), 2U);
  EXPECT_EQ(copying.match_end(), 8U);
  EXPECT_THAT(drafts(copying, 4), ElementsAre(6, 8, 1, 2));
  const MatchDrafter counting = observed(make_config(64, 3, 4), stream);
  EXPECT_EQ(counting.match_length(), 2U);
  EXPECT_THAT(drafts(counting, 4), ElementsAre(5, 1, 2, 5));
}

TEST(MatchDrafter, CopyRunsIntoItsOwnDrafts) {
  // After 1 2 3 1 2 3 the match is "1 2 3" ending at 3: the copy reads 1 2 3 from the
  // sequence and then the drafts it has just written.
  const MatchDrafter drafter = observed(make_config(64, 3, 7), {1, 2, 3, 1, 2, 3});
  EXPECT_EQ(drafter.match_length(), 3U);
  EXPECT_EQ(drafter.match_end(), 3U);
  EXPECT_THAT(drafts(drafter, 16), ElementsAre(1, 2, 3, 1, 2, 3, 1));
  // A period of one: the copy source is the draft just produced.
  const MatchDrafter repeat = observed(make_config(64, 3, 5), {4, 4, 4, 4});
  EXPECT_EQ(repeat.match_length(), 3U);
  EXPECT_EQ(repeat.match_end(), 3U);
  EXPECT_THAT(drafts(repeat, 8), ElementsAre(4, 4, 4, 4, 4));
}

TEST(MatchDrafter, ReAnchoringMeasuresAtMostMaxVerifyTokens) {
  // B c B d B c: at the last c the match at "B d" breaks and re-anchors at the first "B c",
  // whose true length is |B| + 1 = 101; the backward check stops at kMaxVerify.
  std::vector<Token> block(100);
  for (std::size_t i = 0; i < block.size(); ++i) block[i] = static_cast<Token>(1000 + i);
  std::vector<Token> stream = block;
  stream.push_back(7);
  stream.insert(stream.end(), block.begin(), block.end());
  stream.push_back(8);
  stream.insert(stream.end(), block.begin(), block.end());
  stream.push_back(7);
  MatchDrafter drafter = observed(make_config(1024, 3, 4), stream);
  EXPECT_EQ(drafter.match_length(), MatchDrafter::kMaxVerify);
  EXPECT_EQ(drafter.match_end(), 101U);
  EXPECT_THAT(drafts(drafter, 4), ElementsAre(1000, 1001, 1002, 1003));
  drafter.update(1000);  // extension is not bounded
  EXPECT_EQ(drafter.match_length(), MatchDrafter::kMaxVerify + 1);
}

TEST(MatchDrafter, ResetForgetsTheSequence) {
  const std::vector<Token> stream = {1, 2, 5, 1, 2, 5, 1, 2, 6, 8, 1, 2, 6};
  MatchDrafter drafter = observed(make_config(64, 3, 4), {9, 9, 9, 9, 3, 4, 9, 9, 9});
  EXPECT_THAT(drafts(drafter, 4), Not(IsEmpty()));
  drafter.reset();
  EXPECT_EQ(drafter.tokens_seen(), 0U);
  EXPECT_EQ(drafter.indexed(), 0U);
  EXPECT_EQ(drafter.match_length(), 0U);
  EXPECT_THAT(drafts(drafter, 4), IsEmpty());
  drafter.update(stream);
  const MatchDrafter fresh = observed(make_config(64, 3, 4), stream);
  EXPECT_EQ(drafter.match_length(), fresh.match_length());
  EXPECT_EQ(drafter.match_end(), fresh.match_end());
  EXPECT_EQ(drafts(drafter, 4), drafts(fresh, 4));
}

TEST(MatchDrafter, BeyondTheCapTheIndexFreezesAndCopiesStopAtItsEnd) {
  // cap 4: the index holds 1 2 3 4.
  MatchDrafter drafter = observed(make_config(4, 3, 4), {1, 2, 3, 4, 1, 2, 3});
  EXPECT_EQ(drafter.indexed(), 4U);
  EXPECT_EQ(drafter.tokens_seen(), 7U);
  EXPECT_EQ(drafter.match_length(), 3U);
  EXPECT_EQ(drafter.match_end(), 3U);
  EXPECT_THAT(drafts(drafter, 4), ElementsAre(4));  // the copy stops at the end of the index
  drafter.update(std::vector<Token>{9, 1, 2, 3});
  // "1 2 3 9" (tokens 4..7) is past the cap: only the first occurrence can be copied.
  EXPECT_EQ(drafter.match_end(), 3U);
  EXPECT_THAT(drafts(drafter, 4), ElementsAre(4));
  drafter.update(4);  // extends to the end of the index
  EXPECT_EQ(drafter.match_length(), 4U);
  EXPECT_EQ(drafter.match_end(), 4U);
  drafter.update(1);  // nothing after the index to extend into: re-anchors at the 1 at 0
  EXPECT_EQ(drafter.match_length(), 1U);
  EXPECT_EQ(drafter.match_end(), 1U);
  EXPECT_EQ(drafter.indexed(), 4U);
}

TEST(MatchDrafter, BeyondTheCapARepeatTheIndexCannotCopyIsDraftedByTheCounts) {
  // The index ends with "162 163", which then repeats: the match anchors at the end of the
  // frozen index, where the copy has nothing left, and the sliding counts draft the whole room.
  MatchConfig config = make_config(64, 2, 8);
  std::vector<Token> stream;
  for (Token t = 0; t < 64; ++t) stream.push_back(100 + t);
  for (int i = 0; i < 200; ++i) stream.push_back(i % 2 == 0 ? 162 : 163);
  for (const double gate : {0.0, 0.03}) {
    config.min_confidence = gate;
    const MatchDrafter drafter = observed(config, stream);
    ASSERT_EQ(drafter.indexed(), 64U);
    ASSERT_EQ(drafter.match_end(), 64U);  // the copy would start past the index
    EXPECT_THAT(drafts(drafter, 8), ElementsAre(162, 163, 162, 163, 162, 163, 162, 163)) << "gate " << gate;
  }
}

// ---------------------------------------------------------------------------------------------
// Properties

TEST(MatchDrafterProperty, AgreesWithTheNaiveDefinitionAfterEveryToken) {
  static constexpr std::size_t kCaps[] = {4, 5, 17, 60, 1000};
  static constexpr std::size_t kCopyMins[] = {1, 2, 3, 3, 4, 7};
  static constexpr std::size_t kDraftCounts[] = {1, 4, 9};
  for (std::uint64_t seed = 0; seed < 120; ++seed) {
    std::mt19937_64 rng(seed);
    const MatchConfig config = make_config(kCaps[rng() % std::size(kCaps)], kCopyMins[rng() % std::size(kCopyMins)],
                                           kDraftCounts[rng() % std::size(kDraftCounts)], 2 + rng() % 3);
    const std::vector<Token> stream = random_stream(rng, 1 + rng() % 260);
    SCOPED_TRACE("seed " + std::to_string(seed) + " config " + config_string(config) + " stream " +
                 tokens_string(stream));
    MatchDrafter drafter(config);
    NaiveMatch naive(config);
    for (std::size_t i = 0; i < stream.size(); ++i) {
      // Sometimes a span, to cover update(span) too.
      const std::size_t run = std::min<std::size_t>(stream.size() - i, rng() % 4 == 0 ? 1 + rng() % 5 : 1);
      const std::span<const Token> piece(stream.data() + i, run);
      if (run == 1) {
        drafter.update(piece[0]);
      } else {
        drafter.update(piece);
      }
      for (const Token t : piece) naive.update(t);
      i += run - 1;
      SCOPED_TRACE("after " + std::to_string(i + 1) + " tokens");
      ASSERT_EQ(drafter.match_length(), naive.length());
      if (naive.length() > 0) {
        ASSERT_EQ(drafter.match_end(), naive.end());
      }
      const std::size_t room = rng() % 12;
      ASSERT_EQ(drafts(drafter, room), naive.predict(room)) << "room " << room;
    }
  }
}

TEST(MatchDrafterProperty, LongSpansObserveAsTokenByTokenWithEstimatesAndACorpus) {
  // update(span) hashes ahead of the tokens it observes; nothing of that may show: the match,
  // the drafts and the gate's calibrated estimates equal those of one update per token, with
  // and without a corpus, at every count order and on both sides of the cap.
  for (std::uint64_t seed = 0; seed < 60; ++seed) {
    std::mt19937_64 rng(seed);
    MatchConfig config = make_config(rng() % 3 == 0 ? 4 + rng() % 100 : 4096, 1 + rng() % 3, 8, 2 + rng() % 3);
    config.min_confidence = rng() % 2 == 0 ? 0.0 : 0.03;
    const std::vector<Token> stream = random_stream(rng, 1 + rng() % 600);
    SharedCorpus corpus(std::size_t{1} << 20);
    corpus.append(random_stream(rng, 200));
    const bool with_corpus = rng() % 2 == 0;
    SCOPED_TRACE("seed " + std::to_string(seed) + " config " + config_string(config) + (with_corpus ? " corpus" : ""));
    MatchDrafter by_span(config, with_corpus ? &corpus : nullptr);
    MatchDrafter by_token(config, with_corpus ? &corpus : nullptr);
    for (std::size_t i = 0; i < stream.size();) {
      const std::size_t run = std::min<std::size_t>(stream.size() - i, 1 + rng() % 200);
      const std::span<const Token> piece(stream.data() + i, run);
      by_span.update(piece);
      for (const Token t : piece) by_token.update(t);
      i += run;
      SCOPED_TRACE("after " + std::to_string(i) + " tokens");
      ASSERT_EQ(by_span.match_length(), by_token.match_length());
      ASSERT_EQ(by_span.match_end(), by_token.match_end());
      std::array<Token, 8> span_out{};
      std::array<Token, 8> token_out{};
      std::array<float, 8> span_chances{};
      std::array<float, 8> token_chances{};
      const std::size_t made = by_span.predict(span_out, span_chances);
      ASSERT_EQ(made, by_token.predict(token_out, token_chances));
      for (std::size_t j = 0; j < made; ++j) {
        ASSERT_EQ(span_out[j], token_out[j]) << "draft " << j;
        ASSERT_EQ(span_chances[j], token_chances[j]) << "draft " << j;
      }
    }
  }
}

TEST(MatchDrafterProperty, PredictingBetweenUpdatesChangesNothing) {
  // predict() keeps its first draft for the next update's calibration; the calibration must
  // come out as if update() had looked it up itself, whatever room, path (corpus, counts,
  // copy, a copy cut by the cap) or estimates the calls in between asked for.
  for (std::uint64_t seed = 0; seed < 60; ++seed) {
    std::mt19937_64 rng(seed);
    MatchConfig config = make_config(rng() % 3 == 0 ? 4 + rng() % 60 : 4096, 1 + rng() % 3, 1 + rng() % 8, 2 + rng() % 3);
    config.min_confidence = rng() % 4 == 0 ? 0.0 : 0.03;
    const std::vector<Token> stream = random_stream(rng, 1 + rng() % 400);
    SharedCorpus corpus(std::size_t{1} << 20);
    corpus.append(random_stream(rng, 200));
    const bool with_corpus = rng() % 2 == 0;
    SCOPED_TRACE("seed " + std::to_string(seed) + " config " + config_string(config) + (with_corpus ? " corpus" : ""));
    MatchDrafter asked(config, with_corpus ? &corpus : nullptr);    // asked after every token
    MatchDrafter quiet(config, with_corpus ? &corpus : nullptr);    // asked only at the checks
    for (std::size_t i = 0; i < stream.size(); ++i) {
      asked.update(stream[i]);
      quiet.update(stream[i]);
      std::array<Token, 12> out{};
      std::array<float, 12> chances{};
      const std::size_t room = rng() % 13;
      if (rng() % 2 == 0) {
        static_cast<void>(asked.predict(std::span<Token>(out).first(room)));
      } else {
        static_cast<void>(asked.predict(std::span<Token>(out).first(room), std::span<float>(chances).first(room)));
      }
      if (i % 7 != 6 && i + 1 != stream.size()) continue;
      SCOPED_TRACE("after " + std::to_string(i + 1) + " tokens");
      std::array<Token, 8> asked_out{};
      std::array<Token, 8> quiet_out{};
      std::array<float, 8> asked_chances{};
      std::array<float, 8> quiet_chances{};
      const std::size_t made = asked.predict(asked_out, asked_chances);
      ASSERT_EQ(made, quiet.predict(quiet_out, quiet_chances));
      for (std::size_t j = 0; j < made; ++j) {
        ASSERT_EQ(asked_out[j], quiet_out[j]) << "draft " << j;
        ASSERT_EQ(asked_chances[j], quiet_chances[j]) << "draft " << j;
      }
    }
  }
}

TEST(MatchDrafterProperty, MatchIsGenuineAndExactWhenShort) {
  for (std::uint64_t seed = 1000; seed < 1100; ++seed) {
    std::mt19937_64 rng(seed);
    const MatchConfig config = make_config(rng() % 3 == 0 ? 4 + rng() % 40 : 4096, 3, 4);
    const std::vector<Token> stream = random_stream(rng, 1 + rng() % 300);
    SCOPED_TRACE("seed " + std::to_string(seed) + " config " + config_string(config));
    MatchDrafter drafter(config);
    NaiveMatch naive(config);  // only for its sequence and longest_match()
    for (std::size_t i = 0; i < stream.size(); ++i) {
      drafter.update(stream[i]);
      naive.update(stream[i]);
      const std::vector<Token>& s = naive.sequence();
      const std::size_t length = drafter.match_length();
      const std::size_t end = drafter.match_end();
      const std::size_t longest = naive.longest_match();
      SCOPED_TRACE("after " + std::to_string(i + 1) + " tokens: L " + std::to_string(length) + " e " +
                   std::to_string(end) + " longest " + std::to_string(longest));
      // Genuine: an earlier occurrence inside the index, whose tokens are the sequence's end.
      if (length > 0) {
        ASSERT_LT(end, s.size());
        ASSERT_LE(end, drafter.indexed());
        ASSERT_LE(length, end);
        for (std::size_t j = 0; j < length; ++j) ASSERT_EQ(s[end - 1 - j], s[s.size() - 1 - j]) << "j " << j;
      }
      ASSERT_LE(length, longest);
      ASSERT_GE(length, std::min<std::size_t>(longest, MatchDrafter::kAnchorOrder));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Through the decoder

TEST(MatchDrafterProperty, GreedyIdentityThroughTheDecoder) {
  for (std::uint64_t seed = 0; seed < 400; ++seed) {
    test::DecodeCase c = test::random_decode_case(seed);
    c.options.speculate = true;
    std::mt19937_64 rng(seed);
    const MatchConfig config =
        make_config(rng() % 2 == 0 ? 4 + rng() % 30 : 4096, 1 + rng() % 4, 1 + rng() % 12, 2 + rng() % 3);
    SCOPED_TRACE(c.describe() + " match " + config_string(config));
    test::GreedyModel model(c.rule.rule, c.max_batch);
    SpeculativeDecoder decoder(model, MatchDrafter(config));
    const test::GreedyReference ref = test::plain_greedy(c.rule.rule, c.prompt, c.options);
    const DecodeResult result = decoder.generate(c.prompt, c.options);
    ASSERT_EQ(result.tokens, ref.tokens);
    EXPECT_EQ(result.stop_reason, ref.stop_reason);
    EXPECT_THAT(model.violations(), IsEmpty());
    const DecodeResult again = decoder.generate(c.prompt, c.options);  // starts fresh
    ASSERT_EQ(again.tokens, ref.tokens);
  }
}

TEST(MatchDrafter, CopyingARepeatTakesFewerPassesThanPlainDecoding) {
  // A 40-token cycle in the prompt, continued by the model: after one lap the match copies.
  test::GreedyModel model(test::RepeatRule{40, 1000}, 64);
  std::vector<Token> prompt;
  for (Token t = 0; t < 80; ++t) prompt.push_back((t % 40 * 37 + 11) % 1000);
  DecodeOptions options;
  options.max_new_tokens = 200;
  options.max_drafts = 8;
  SpeculativeDecoder decoder(model, MatchDrafter(make_config(4096, 3, 8)));
  const DecodeResult result = decoder.generate(prompt, options);
  EXPECT_EQ(result.tokens, test::plain_greedy(test::RepeatRule{40, 1000}, prompt, 200));
  EXPECT_LE(result.stats.decode_passes, 200U / 9 + 2);
}

// ---------------------------------------------------------------------------------------------
// The gate and the corpus

// The byte cap of a corpus of `tokens` capacity.
std::size_t corpus_bytes(std::size_t tokens) { return SharedCorpus::bytes_for(tokens); }

// Records for a corpus: random ones over `vocab`, and pieces of `related` (perhaps with a
// changed token), so that a stream built like `related` finds long matches in it.
void fill_corpus(SharedCorpus& corpus, std::mt19937_64& rng, Token vocab, std::span<const Token> related,
                 std::size_t records) {
  for (std::size_t k = 0; k < records; ++k) {
    std::vector<Token> record;
    if (!related.empty() && rng() % 2 == 0) {
      const std::size_t from = rng() % related.size();
      const std::size_t n = 1 + rng() % std::min<std::size_t>(related.size() - from, 80);
      record.assign(related.begin() + static_cast<std::ptrdiff_t>(from),
                    related.begin() + static_cast<std::ptrdiff_t>(from + n));
      if (rng() % 3 == 0) record[rng() % n] = static_cast<Token>(rng() % vocab);
    } else {
      record.resize(rng() % 40);
      for (Token& t : record) t = static_cast<Token>(rng() % vocab);
    }
    corpus.append(record);
  }
}

TEST(MatchDrafterProperty, WithACorpusAnEmptyMatchOrAShorterOneThanALongCorpusMatchDraftsFromIt) {
  static constexpr std::size_t kCaps[] = {4, 17, 60, 1000};
  std::size_t from_corpus = 0;
  std::size_t differed = 0;
  std::size_t over_own_match = 0;
  for (std::uint64_t seed = 3000; seed < 3080; ++seed) {
    std::mt19937_64 rng(seed);
    const MatchConfig config = make_config(kCaps[rng() % std::size(kCaps)], 1 + rng() % 4, 1 + rng() % 12,
                                           2 + rng() % 3);
    const std::vector<Token> stream = random_stream(rng, 1 + rng() % 260);
    SharedCorpus corpus(corpus_bytes(256 << (rng() % 3)));
    fill_corpus(corpus, rng, 16, stream, rng() % 40);
    const bool grows = rng() % 2 == 0;  // append pieces of the stream while it runs
    SCOPED_TRACE("seed " + std::to_string(seed) + " config " + config_string(config) + " stream " +
                 tokens_string(stream) + (grows ? " growing" : ""));
    MatchDrafter with(config, &corpus);
    MatchDrafter without(config);
    ASSERT_EQ(with.corpus(), &corpus);
    // Where the last lookup matched and the tokens seen then: each lookup is hinted with it.
    std::uint64_t hint_end = 0;
    std::size_t hint_seen = 0;
    for (std::size_t i = 0; i < stream.size(); ++i) {
      with.update(stream[i]);
      without.update(stream[i]);
      if (grows && rng() % 16 == 0) corpus.append(std::span<const Token>(stream).first(i + 1).last(1 + rng() % (i + 1)));
      SCOPED_TRACE("after " + std::to_string(i + 1) + " tokens");
      const std::size_t own = with.match_length();
      ASSERT_EQ(own, without.match_length());
      const std::size_t room = rng() % 14;
      const std::size_t n = std::min(room, config.max_drafts);
      // As without the corpus, unless the corpus drafts: when the match is empty, or shorter
      // than a corpus match of kLongCorpusMatch tokens or more.
      std::vector<Token> expected = drafts(without, room);
      bool corpus_drafts_it = false;
      if (own < MatchDrafter::kCorpusContext && n > 0) {
        const std::span<const Token> seen = std::span<const Token>(stream).first(i + 1);
        std::vector<Token> out(n);
        const std::uint64_t hint = hint_end == 0 ? 0 : hint_end + (i + 1 - hint_seen);
        const CorpusDraft found = corpus.draft(seen.last(std::min(seen.size(), MatchDrafter::kCorpusContext)), out, hint);
        hint_end = found.end;
        hint_seen = i + 1;
        const bool longer = found.match_length >= MatchDrafter::kLongCorpusMatch && found.match_length > own;
        if (found.count > 0 && (own == 0 || longer)) {
          expected.assign(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(found.count));
          corpus_drafts_it = true;
          if (own > 0) ++over_own_match;
        }
      }
      const std::vector<Token> got = drafts(with, room);
      ASSERT_EQ(got, expected) << "room " << room;
      if (corpus_drafts_it) {
        from_corpus += got.size();
        if (got != drafts(without, room)) ++differed;
      }
    }
  }
  EXPECT_GT(from_corpus, 100U);  // the corpus drafted, not only missed
  EXPECT_GT(differed, 20U);
  EXPECT_GT(over_own_match, 20U);  // and in place of a match of the sequence's own
}

TEST(MatchDrafter, ALongCorpusMatchIsEstimatedAsALongCopy) {
  // An earlier answer repeated word for word: what follows a 40-token match of it is as likely
  // as a 40-token copy of the sequence's own text, far above the short matches' estimates. The
  // record joins the corpus after the drafter observed the sequence, so no first draft has
  // moved the calibration and the estimates are the measured ones.
  std::mt19937_64 rng(7);
  std::vector<Token> sequence(40);
  for (Token& t : sequence) t = static_cast<Token>(rng() % 32000);
  std::vector<Token> answer(100);
  for (Token& t : answer) t = static_cast<Token>(rng() % 32000);
  const auto estimates = [&](std::size_t match) {
    SharedCorpus corpus(corpus_bytes(1024));
    MatchDrafter drafter(make_config(4096, 2, 64), &corpus);
    drafter.update(sequence);
    std::vector<Token> record(sequence.end() - static_cast<std::ptrdiff_t>(match), sequence.end());
    record.insert(record.end(), answer.begin(), answer.end());
    corpus.append(record);
    std::vector<Token> out(64);
    std::vector<float> chances(64);
    const std::size_t n = drafter.predict(out, chances);
    EXPECT_EQ(n, 64U) << "match " << match;
    EXPECT_TRUE(std::equal(out.begin(), out.end(), answer.begin())) << "match " << match;
    chances.resize(n);
    return chances;
  };
  const std::vector<float> long_match = estimates(40);
  const std::vector<float> short_match = estimates(8);
  ASSERT_EQ(long_match.size(), 64U);
  ASSERT_EQ(short_match.size(), 64U);
  EXPECT_NEAR(long_match[0], 0.956, 1e-3);  // the 32-47 bucket
  EXPECT_NEAR(short_match[0], 0.578, 1e-3);  // the 7-9 bucket
  // The running product stays high over a long draft, so a planner sends it: 0.55 after 32
  // drafts, where one rate of 0.812 for every match past 15 tokens gave 0.001.
  EXPECT_GT(long_match[31], 0.5F);
  EXPECT_LT(short_match[31], 0.05F);
}

TEST(MatchDrafter, ALookupFollowsTheRecordItMatchedThroughAMoreRecentShortMatch) {
  // The request repeats record A. Record B, appended after it, holds 3 tokens of A and then
  // other text, so the most recent occurrence of those 3 tokens is B's. A drafter that drafted
  // from A stays on A (its last match, moved on by the tokens seen, is measured and is longer);
  // one that looks up afresh finds B's 3-token match.
  std::mt19937_64 rng(11);
  std::vector<Token> a(120);
  for (Token& t : a) t = static_cast<Token>(1000 + rng() % 30000);
  std::vector<Token> b = {1, 2, 3};
  b.insert(b.end(), a.begin() + 50, a.begin() + 53);
  for (Token t = 4; t < 20; ++t) b.push_back(t);
  SharedCorpus corpus(corpus_bytes(1024));
  corpus.append(a);
  corpus.append(b);
  MatchDrafter following(make_config(4096, 2, 8), &corpus);
  MatchDrafter fresh(make_config(4096, 2, 8), &corpus);
  following.update(std::span<const Token>(a).first(50));
  EXPECT_EQ(drafts(following, 8), std::vector<Token>(a.begin() + 50, a.begin() + 58));
  following.update(std::span<const Token>(a).subspan(50, 3));
  fresh.update(std::span<const Token>(a).first(53));
  EXPECT_EQ(drafts(following, 8), std::vector<Token>(a.begin() + 53, a.begin() + 61));
  EXPECT_EQ(drafts(fresh, 8), std::vector<Token>(b.begin() + 6, b.begin() + 14));
  // restart() and reset() forget where it matched, with the sequence.
  following.restart();
  following.update(std::span<const Token>(a).subspan(50, 3));
  EXPECT_EQ(drafts(following, 8), std::vector<Token>(b.begin() + 6, b.begin() + 14));
}

TEST(MatchDrafter, RestartForgetsTheSequenceAndKeepsTheCalibration) {
  // Random text teaches the calibration that drafts fail; a restarted drafter drafts the next
  // sequence as a fresh one does, but estimates it lower; a reset one estimates it as fresh.
  std::mt19937_64 rng(5);
  std::vector<Token> noise(2000);
  for (Token& t : noise) t = static_cast<Token>(rng() % 6);
  const std::vector<Token> next = {7, 8, 9, 10, 11, 7, 8, 9, 10, 11, 7, 8, 9};
  const MatchConfig config = make_config(4096, 2, 4);
  MatchDrafter restarted = observed(config, noise);
  MatchDrafter reset = observed(config, noise);
  restarted.restart();
  reset.reset();
  EXPECT_EQ(restarted.tokens_seen(), 0U);
  EXPECT_EQ(restarted.match_length(), 0U);
  restarted.update(next);
  reset.update(next);
  const MatchDrafter fresh = observed(config, next);
  EXPECT_EQ(drafts(restarted, 4), drafts(fresh, 4));
  const auto chances = [](const MatchDrafter& drafter) {
    std::vector<Token> out(4);
    std::vector<float> p(4);
    p.resize(drafter.predict(out, p));
    return p;
  };
  ASSERT_FALSE(chances(fresh).empty());
  EXPECT_EQ(chances(reset), chances(fresh));
  EXPECT_LT(chances(restarted)[0], chances(fresh)[0]);
}

TEST(MatchDrafterProperty, AHigherGateDraftsAPrefixOfALowerOne) {
  static constexpr std::size_t kCaps[] = {4, 17, 60, 1000};
  static constexpr double kGates[] = {0, 0.02, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99};
  std::size_t cut = 0;         // drafts a gate held back that the next lower one made
  std::size_t gated_made = 0;  // drafts made with a positive gate
  for (std::uint64_t seed = 4000; seed < 4080; ++seed) {
    std::mt19937_64 rng(seed);
    const MatchConfig config = make_config(kCaps[rng() % std::size(kCaps)], 1 + rng() % 4, 1 + rng() % 16,
                                           2 + rng() % 3);
    const std::vector<Token> stream = random_stream(rng, 1 + rng() % 300);
    const bool use_corpus = rng() % 2 == 0;
    SharedCorpus corpus(corpus_bytes(256));
    fill_corpus(corpus, rng, 16, stream, 30);
    SCOPED_TRACE("seed " + std::to_string(seed) + " config " + config_string(config) +
                 (use_corpus ? " with corpus" : "") + " stream " + tokens_string(stream));
    std::vector<MatchDrafter> drafters;
    for (const double gate : kGates) drafters.emplace_back(with_gate(config, gate), use_corpus ? &corpus : nullptr);
    NaiveMatch naive(config);
    for (std::size_t i = 0; i < stream.size(); ++i) {
      for (MatchDrafter& drafter : drafters) drafter.update(stream[i]);
      naive.update(stream[i]);
      SCOPED_TRACE("after " + std::to_string(i + 1) + " tokens");
      const std::size_t room = 1 + rng() % 16;
      std::vector<Token> lower = drafts(drafters[0], room);
      // Gate 0 is the ungated drafter: the naive reference, or with a corpus as checked above.
      if (!use_corpus) {
        ASSERT_EQ(lower, naive.predict(room));
      }
      for (std::size_t g = 1; g < drafters.size(); ++g) {
        const std::vector<Token> higher = drafts(drafters[g], room);
        ASSERT_LE(higher.size(), lower.size()) << "gate " << kGates[g];
        ASSERT_TRUE(std::equal(higher.begin(), higher.end(), lower.begin()))
            << "gate " << kGates[g] << ": " << tokens_string(higher) << " vs " << tokens_string(lower);
        cut += lower.size() - higher.size();
        gated_made += higher.size();
        lower = higher;
      }
    }
  }
  // The gates both drafted and held back.
  EXPECT_GT(cut, 1000U);
  EXPECT_GT(gated_made, 1000U);
}

TEST(MatchDrafter, CalibrationClosesTheGateOnRandomTokens) {
  // A random stream over a large vocabulary: a short match's count draft now and then, and
  // it is (almost) always wrong. The per-sequence calibration learns that.
  std::mt19937_64 rng(31);
  std::vector<Token> stream(3000);
  for (Token& t : stream) t = static_cast<Token>(rng() % 32000);
  MatchDrafter gated(with_gate(make_config(4096, 3, 8), 0.1));
  MatchDrafter ungated(make_config(4096, 3, 8));
  std::size_t gated_drafts = 0;
  std::size_t ungated_drafts = 0;
  std::size_t calls = 0;
  std::vector<Token> out(8);
  for (std::size_t i = 0; i < stream.size(); ++i) {
    gated.update(stream[i]);
    ungated.update(stream[i]);
    if (i < 200) continue;
    ++calls;
    gated_drafts += gated.predict(out);
    ungated_drafts += ungated.predict(out);
  }
  SCOPED_TRACE("predict calls " + std::to_string(calls) + ", ungated drafts " + std::to_string(ungated_drafts));
  EXPECT_LE(gated_drafts * 100, calls);
  EXPECT_GT(ungated_drafts * 100, 5 * calls);  // without the gate there is something to close
}

// A corpus the greedy-identity cases below share, and their configs.
MatchConfig random_match_config(std::mt19937_64& rng) {
  static constexpr double kGates[] = {0, 0, 0.05, 0.2, 0.5, 0.9};
  return with_gate(make_config(rng() % 2 == 0 ? 4 + rng() % 30 : 4096, 1 + rng() % 4, 1 + rng() % 12, 2 + rng() % 3),
                   kGates[rng() % std::size(kGates)]);
}

TEST(MatchDrafterProperty, GreedyIdentityThroughTheDecoderWithACorpusAndAGate) {
  std::size_t accepted = 0;
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    test::DecodeCase c = test::random_decode_case(seed);
    c.options.speculate = true;
    std::mt19937_64 rng(seed + 77);
    const MatchConfig config = random_match_config(rng);
    // Related records are the rule's own continuations of other prompts, so the corpus's
    // drafts are often right; random ones over its vocabulary are mostly wrong.
    SharedCorpus corpus(corpus_bytes(256 << (rng() % 3)));
    const bool related = rng() % 3 != 0;
    for (std::size_t k = 0; k < 30; ++k) {
      std::vector<Token> prompt(1 + rng() % 6);
      for (Token& t : prompt) t = static_cast<Token>(rng() % c.rule.vocab);
      std::vector<Token> record =
          related ? test::plain_greedy(c.rule.rule, prompt, rng() % 60) : std::vector<Token>(rng() % 60);
      if (!related) {
        for (Token& t : record) t = static_cast<Token>(rng() % c.rule.vocab);
      }
      prompt.insert(prompt.end(), record.begin(), record.end());
      corpus.append(prompt);
    }
    SCOPED_TRACE(c.describe() + " match " + config_string(config) + (related ? " related" : " random") +
                 " corpus of " + std::to_string(corpus.size()) + " tokens");
    test::GreedyModel model(c.rule.rule, c.max_batch);
    SpeculativeDecoder decoder(model, MatchDrafter(config, &corpus));
    const test::GreedyReference ref = test::plain_greedy(c.rule.rule, c.prompt, c.options);
    const DecodeResult result = decoder.generate(c.prompt, c.options);
    ASSERT_EQ(result.tokens, ref.tokens);
    EXPECT_EQ(result.stop_reason, ref.stop_reason);
    EXPECT_THAT(model.violations(), IsEmpty());
    accepted += result.stats.accepted;
    // Earlier outputs join the corpus between requests, as an engine would add them.
    corpus.append(result.tokens);
    const DecodeResult again = decoder.generate(c.prompt, c.options);
    ASSERT_EQ(again.tokens, ref.tokens);
    EXPECT_THAT(model.violations(), IsEmpty());
  }
  EXPECT_GT(accepted, 1000U);  // drafts were made and accepted, so verification was exercised
}

// ---------------------------------------------------------------------------------------------
// No allocation after construction

TEST(MatchDrafter, UpdatePredictAndResetDoNotAllocate) {
  std::mt19937_64 rng(8);
  const std::vector<Token> stream = random_stream(rng, 3000);
  SharedCorpus corpus(corpus_bytes(1024));
  fill_corpus(corpus, rng, 12, stream, 200);
  const std::array<const SharedCorpus*, 2> corpora = {nullptr, &corpus};
  for (const SharedCorpus* consulted : corpora) {
    for (const double gate : {0.0, 0.05, 0.4}) {
      for (const MatchConfig& config : {make_config(4, 3, 4, 4), make_config(64, 3, 8), make_config(4096, 2, 16, 2),
                                        make_config(4096, 3, 16, 4), make_config(64, 1, 64, 2)}) {
        SCOPED_TRACE(config_string(with_gate(config, gate)) + (consulted != nullptr ? " with a corpus" : ""));
        MatchDrafter drafter(with_gate(config, gate), consulted);
        std::vector<Token> out(64);
        std::size_t drafted = 0;
        std::size_t allocations = 0;
        {
          const test::AllocationCounter counter;
          for (int round = 0; round < 2; ++round) {
            for (std::size_t i = 0; i < stream.size(); i += 5) {
              drafter.update(std::span<const Token>(stream).subspan(i, std::min<std::size_t>(5, stream.size() - i)));
              drafter.update(stream[i]);
              drafted += drafter.predict(out);
            }
            drafter.reset();
          }
          allocations = counter.count();
        }
        EXPECT_EQ(allocations, 0U);
        // The loop exercised drafting, not only empty predictions (a high gate may draft nothing here).
        if (gate == 0.0) {
          EXPECT_GT(drafted, 0U);
        }
      }
    }
  }
}


// predict(out, probabilities) drafts exactly what predict(out) drafts, and each estimate is a
// chance: in (0, 1], never rising along the drafts, and at least the gate's bar.
TEST(MatchDrafterProperty, EstimatesComeWithTheSameDraftsAndAreChances) {
  std::mt19937_64 rng(99);
  SharedCorpus corpus(SharedCorpus::bytes_for(1024));
  for (int trial = 0; trial < 60; ++trial) {
    const std::vector<Token> stream = random_stream(rng, 600);
    corpus.append(std::span<const Token>(stream).first(50));
    MatchConfig config{.index_capacity = 64 + rng() % 512, .copy_min_match = 1 + rng() % 3};
    config.min_confidence = trial % 3 == 0 ? 0.0 : 0.01 * static_cast<double>(rng() % 40);
    MatchDrafter drafter(config, trial % 2 == 0 ? &corpus : nullptr);
    for (std::size_t i = 0; i < stream.size(); ++i) {
      drafter.update(stream[i]);
      const std::size_t room = rng() % 20;
      std::vector<Token> plain(room), with(room);
      std::vector<float> probabilities(room, -1.0f);
      const std::size_t n = drafter.predict(plain);
      ASSERT_EQ(drafter.predict(with, probabilities), n);
      ASSERT_EQ(plain, with);
      for (std::size_t j = 0; j < n; ++j) {
        ASSERT_GT(probabilities[j], 0.0f);
        ASSERT_LE(probabilities[j], 1.0f);
        ASSERT_GE(probabilities[j], static_cast<float>(config.min_confidence) * (1 - 1e-6f));
        if (j > 0) {
          ASSERT_LE(probabilities[j], probabilities[j - 1]);
        }
      }
    }
  }
}

// The estimates follow the evidence: a long repeat is nearly certain, text nothing predicts
// soon estimates low (the calibration runs with or without a gate).
// Synthetic text whose repeats are known: segments of fresh random tokens alternate with copies of
// an earlier stretch, whose lengths follow a discrete Pareto law of exponent 1.8 (a copy that has
// run l tokens goes on with chance about 1 - 1.8 / l, the shape measured on recorded LLM output:
// docs/ALGORITHM.md, "Long copies"). The estimates see it: the chance they give a copy's next
// draft rises with the length of the match it continues, as the truth does, so that under a pass
// with a large fixed cost (a GPU engine that re-captures its graph for a new shape) the planner
// sends long copies where the text repeats and nothing where it does not, and decoding this way
// never costs more than plain decoding.
std::vector<Token> pareto_copies(std::mt19937_64& rng, std::size_t length) {
  // A reservoir of fresh text first; then fresh segments and copies of the reservoir alternate, so
  // that a copy is preceded by tokens never seen before and its match is what it has copied.
  constexpr std::size_t kReservoir = 4096;
  std::vector<Token> text;
  Token fresh = 1;
  while (text.size() < kReservoir) text.push_back(fresh++);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  while (text.size() < length) {
    for (std::size_t n = 4 + rng() % 12; n > 0; --n) text.push_back(fresh++);
    // P(copy >= l + 1 | copy >= l) = (l / (l + 1))^1.8: P(copy > l) = l^-1.8 for l >= 1, at most 512.
    const auto copy = static_cast<std::size_t>(std::min(512.0, std::pow(1.0 - uniform(rng), -1.0 / 1.8)));
    const std::size_t from = rng() % (kReservoir - 512);
    for (std::size_t j = 0; j < copy; ++j) text.push_back(text[from + j]);
  }
  text.resize(length);
  return text;
}

TEST(MatchDrafterProperty, LongCopiesAreEstimatedByTheLengthOfTheirMatch) {
  // A pass with drafts costs a fixed 8.6 plain passes, then little per token (the shape of a tiny
  // model's passes on a GPU that re-captures its graph for a new pass shape).
  const VerifyCost step = VerifyCost::parse("table:1=1,2=8.6,17=9.9,65=11.5");
  constexpr std::size_t kPrompt = 4096;
  std::mt19937_64 rng(2027);
  std::array<double, 2> sum_short{};  // [0]: 1 - the estimated chance of a copy's next draft at continued length 16..23; [1]: count
  std::array<double, 2> sum_long{};   // the same at 64 or more
  double cost = 0;
  double plain = 0;
  std::size_t long_sends = 0;
  for (int trial = 0; trial < 30; ++trial) {
    const std::vector<Token> text = pareto_copies(rng, 16384);
    MatchDrafter drafter;
    drafter.update(std::span(text).first(kPrompt));  // the reservoir, as a prompt
    std::array<Token, 64> out{};
    std::array<float, 64> p{};
    for (std::size_t pos = kPrompt; pos < text.size();) {
      const std::size_t room = std::min<std::size_t>(out.size(), text.size() - pos - 1);
      const std::size_t made = room == 0 ? 0 : drafter.predict(std::span(out).first(room), std::span(p).first(room));
      const std::size_t match = drafter.match_length();
      for (std::size_t j = 0; j < made; ++j) {
        const double miss = 1 - static_cast<double>(p[j]) / (j == 0 ? 1.0 : static_cast<double>(p[j - 1]));
        std::array<double, 2>& sum = match + j >= 64 ? sum_long : sum_short;
        if ((match + j >= 16 && match + j < 24) || match + j >= 64) {
          sum[0] += miss;
          sum[1] += 1;
        }
      }
      const std::size_t sent = DraftPlanner::plan_one(&step, 1, 1.0, 0, std::span(p).first(made));
      SCOPED_TRACE("trial " + std::to_string(trial) + " position " + std::to_string(pos) + " match " +
                   std::to_string(match));
      if (match == 0) {
        ASSERT_EQ(sent, 0U) << "drafts sent where the text does not repeat";
      }
      if (match >= 64 && room >= 48) {
        ASSERT_GE(sent, 48U) << "a long copy not sent";
      }
      long_sends += sent >= 48 ? 1 : 0;
      // The model's token is the text's next; the drafts that follow the text are accepted.
      std::size_t accepted = 0;
      while (accepted < sent && out[accepted] == text[pos + accepted]) ++accepted;
      cost += step.pass(1, sent);
      plain += static_cast<double>(accepted + 1);
      drafter.update(std::span(text).subspan(pos, accepted + 1));
      pos += accepted + 1;
    }
  }
  ASSERT_GT(sum_short[1], 1000);
  ASSERT_GT(sum_long[1], 1000);
  EXPECT_GT(long_sends, 100U);
  // The truth, 1 - (l / (l + 1))^1.8: 0.07 to 0.11 at l = 16..23, under 0.028 past 64.
  const double short_miss = sum_short[0] / sum_short[1];
  const double long_miss = sum_long[0] / sum_long[1];
  EXPECT_GT(short_miss, 0.06);
  EXPECT_LT(long_miss, 0.03);
  EXPECT_GT(short_miss, 3 * long_miss);
  // Where a draft cannot gain much, planning by the estimates costs no more than plain decoding.
  EXPECT_LE(cost, plain * 1.005);
}

TEST(MatchDrafter, EstimatesAreHighOnRepeatsAndLowOnNoise) {
  MatchDrafter drafter(MatchConfig{.index_capacity = 4096, .min_confidence = 0});
  std::vector<Token> out(4);
  std::vector<float> probabilities(4);
  for (int lap = 0; lap < 20; ++lap) {
    for (Token t = 0; t < 50; ++t) drafter.update(1000 + t);
  }
  ASSERT_EQ(drafter.predict(out, probabilities), 4U);
  EXPECT_GT(probabilities[3], 0.8f);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 2000; ++i) drafter.update(static_cast<Token>(rng() % 64));
  const std::size_t n = drafter.predict(out, probabilities);
  if (n > 0) {
    EXPECT_LT(probabilities[0], 0.2f);
  }
}

}  // namespace
}  // namespace ngramspec
