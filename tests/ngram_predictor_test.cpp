#include "ngramspec/ngram_predictor.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/allocation_counter.hpp"
#include "support/reference_ngram.hpp"

namespace ngramspec {
namespace {

using test::ReferenceNGram;

// Never a token of any stream below, so a write past the returned count shows.
constexpr Token kSentinel = 0xdeadbeefU;

NGramConfig make_config(std::size_t min_order, std::size_t max_order, std::size_t max_drafts, std::size_t window) {
  NGramConfig config;
  config.min_order = min_order;
  config.max_order = max_order;
  config.max_drafts = max_drafts;
  config.window = window;
  return config;
}

std::string config_string(const NGramConfig& config) {
  std::ostringstream text;
  text << "{min_order " << config.min_order << ", max_order " << config.max_order << ", max_drafts "
       << config.max_drafts << ", window " << config.window << "}";
  return text.str();
}

std::string tokens_string(std::span<const Token> tokens) {
  std::ostringstream text;
  text << "[";
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    text << (i == 0 ? "" : " ");
    if (tokens[i] == kSentinel) {
      text << "_";  // an unwritten output slot
    } else {
      text << tokens[i];
    }
  }
  text << "]";
  return text.str();
}

template <class Predictor>
std::vector<Token> drafts(const Predictor& predictor, std::size_t out_size) {
  std::vector<Token> out(out_size, kSentinel);
  out.resize(predictor.predict(out));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Hand-traced behaviour

TEST(NGramPredictor, WorkedExampleDraftsTheRestOfTheSentence) {
  // the=1 cat=2 sat=3 on=4 mat=5 .=6
  const std::vector<Token> stream{1, 2, 3, 4, 1, 5, 6, 1, 2, 3};
  NGramPredictor predictor;
  predictor.update(stream);
  EXPECT_EQ(drafts(predictor, 4), (std::vector<Token>{4, 1, 5, 6}));  // on the mat .
  // By default the room given is the only limit.
  EXPECT_EQ(drafts(predictor, 8), (std::vector<Token>{4, 1, 5, 6, 1, 2, 3, 4}));

  // A longer draft keeps walking the repeated sentence.
  NGramPredictor longer(make_config(2, 4, 10, 512));
  longer.update(stream);
  EXPECT_EQ(drafts(longer, 10), (std::vector<Token>{4, 1, 5, 6, 1, 2, 3, 4, 1, 5}));
}

TEST(NGramPredictor, MostFrequentContinuationWins) {
  NGramPredictor predictor(make_config(2, 2, 1, 64));
  // After 1: 2 twice, 3 once and more recently.
  predictor.update(std::vector<Token>{1, 2, 1, 2, 1, 3, 1});
  EXPECT_EQ(drafts(predictor, 1), (std::vector<Token>{2}));
}

TEST(NGramPredictor, TiesGoToTheMostRecentContinuation) {
  NGramPredictor a(make_config(2, 2, 1, 64));
  a.update(std::vector<Token>{1, 2, 1, 3, 1});
  EXPECT_EQ(drafts(a, 1), (std::vector<Token>{3}));

  NGramPredictor b(make_config(2, 2, 1, 64));
  b.update(std::vector<Token>{1, 3, 1, 2, 1});
  EXPECT_EQ(drafts(b, 1), (std::vector<Token>{2}));

  // A tie reached by counting up (2 catches up with 3) also goes to the latest.
  NGramPredictor c(make_config(2, 2, 1, 64));
  c.update(std::vector<Token>{1, 3, 1, 3, 1, 2, 1, 2, 1});
  EXPECT_EQ(drafts(c, 1), (std::vector<Token>{2}));
}

TEST(NGramPredictor, LongestSeenContextWins) {
  // The bigram context (1) prefers 3 (a tie, more recent); the trigram context (5, 1) saw only 2.
  const std::vector<Token> stream{5, 1, 2, 7, 1, 3, 5, 1};
  NGramPredictor bigrams(make_config(2, 2, 1, 64));
  bigrams.update(stream);
  EXPECT_EQ(drafts(bigrams, 1), (std::vector<Token>{3}));

  NGramPredictor trigrams(make_config(2, 3, 1, 64));
  trigrams.update(stream);
  EXPECT_EQ(drafts(trigrams, 1), (std::vector<Token>{2}));
}

TEST(NGramPredictor, FallsBackToShorterContextsAndChains) {
  // (8, 1) was never seen, so the first draft comes from the bigram (1) -> 2; each draft then
  // extends the context, and (1, 2) -> 8 and (2, 8) -> 1 are trigram hits.
  NGramPredictor predictor(make_config(2, 3, 4, 64));
  predictor.update(std::vector<Token>{9, 1, 2, 8, 1});
  EXPECT_EQ(drafts(predictor, 4), (std::vector<Token>{2, 8, 1, 2}));
}

TEST(NGramPredictor, StopsWhenNoContextMatches) {
  NGramPredictor predictor(make_config(2, 4, 4, 64));
  predictor.update(std::vector<Token>{1, 2, 3});
  std::array<Token, 4> out{kSentinel, kSentinel, kSentinel, kSentinel};
  EXPECT_EQ(predictor.predict(out), 0U);  // 3 has never been followed by anything
  EXPECT_EQ(out, (std::array<Token, 4>{kSentinel, kSentinel, kSentinel, kSentinel}));
}

TEST(NGramPredictor, CountsOnlyNGramsWhollyInsideTheWindow) {
  // Over all seven tokens 1 -> 2 twice beats 1 -> 3; a window of six drops the first (1, 2),
  // leaving a tie that the more recent 3 wins.
  const std::vector<Token> stream{1, 2, 1, 2, 1, 3, 1};
  NGramPredictor whole(make_config(2, 2, 1, 7));
  whole.update(stream);
  EXPECT_EQ(drafts(whole, 1), (std::vector<Token>{2}));

  NGramPredictor windowed(make_config(2, 2, 1, 6));
  windowed.update(stream);
  EXPECT_EQ(drafts(windowed, 1), (std::vector<Token>{3}));
}

TEST(NGramPredictor, SizeIsZeroWhenEmptyAndBoundedByWhatTheWindowHolds) {
  NGramPredictor predictor(make_config(2, 3, 4, 16));
  EXPECT_EQ(predictor.size(), 0U);
  EXPECT_EQ(predictor.max_size(), 2U * 2U * 16U);
  predictor.update(std::vector<Token>{1, 2, 1, 2});
  // Bigrams: contexts {1, 2}, continuations {12, 21}; trigrams: contexts {12, 21}, {121, 212}.
  // The predictor may record fewer, but it holds something and nothing more.
  EXPECT_GT(predictor.size(), 0U);
  EXPECT_LE(predictor.size(), 8U);
  predictor.reset();
  EXPECT_EQ(predictor.size(), 0U);
  EXPECT_EQ(predictor.tokens_seen(), 0U);
}

// ---------------------------------------------------------------------------------------------
// Edge cases

TEST(NGramPredictor, EmptyPredictorDraftsNothing) {
  for (const NGramConfig& config :
       {make_config(2, 2, 1, 2), make_config(2, 4, 4, 512), make_config(4, 8, 10, 8), make_config(8, 8, 3, 8)}) {
    SCOPED_TRACE(config_string(config));
    NGramPredictor predictor(config);
    std::vector<Token> out(16, kSentinel);
    EXPECT_EQ(predictor.predict(out), 0U);
    EXPECT_EQ(out, std::vector<Token>(16, kSentinel));
    EXPECT_EQ(predictor.size(), 0U);
    EXPECT_EQ(predictor.tokens_seen(), 0U);
  }
}

TEST(NGramPredictor, EmptyOutputSpanDraftsNothing) {
  NGramPredictor predictor(make_config(2, 4, 4, 64));
  predictor.update(std::vector<Token>{1, 2, 1, 2, 1});
  EXPECT_EQ(predictor.predict(std::span<Token>{}), 0U);
  std::array<Token, 1> one{kSentinel};
  EXPECT_EQ(predictor.predict(std::span<Token>(one).first(0)), 0U);
  EXPECT_EQ(one[0], kSentinel);
}

TEST(NGramPredictor, WritesAtMostMaxDraftsTokens) {
  NGramPredictor predictor(make_config(2, 3, 3, 64));
  predictor.update(std::vector<Token>{1, 2, 3, 1, 2, 3, 1});
  std::vector<Token> out(8, kSentinel);
  ASSERT_EQ(predictor.predict(out), 3U);
  EXPECT_EQ(out, (std::vector<Token>{2, 3, 1, kSentinel, kSentinel, kSentinel, kSentinel, kSentinel}));
  // And at most out.size().
  std::vector<Token> two(2, kSentinel);
  ASSERT_EQ(predictor.predict(two), 2U);
  EXPECT_EQ(two, (std::vector<Token>{2, 3}));
}

TEST(NGramPredictor, StreamShorterThanTheLongestContext) {
  // Two tokens: only a bigram exists; the 4-gram context cannot even be formed yet.
  NGramPredictor predictor(make_config(2, 4, 4, 64));
  predictor.update(std::vector<Token>{7, 7});
  EXPECT_EQ(drafts(predictor, 4), (std::vector<Token>{7, 7, 7, 7}));

  // min_order 3 needs two tokens of context and at least one trigram.
  NGramPredictor trigrams(make_config(3, 4, 4, 64));
  trigrams.update(Token{7});
  EXPECT_EQ(drafts(trigrams, 4), std::vector<Token>{});
  trigrams.update(Token{7});
  EXPECT_EQ(drafts(trigrams, 4), std::vector<Token>{});
  trigrams.update(Token{7});
  EXPECT_EQ(drafts(trigrams, 4), (std::vector<Token>{7, 7, 7, 7}));
}

TEST(NGramPredictor, WindowEqualToMaxOrderMatchesReference) {
  for (std::uint64_t seed = 0; seed < 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const std::size_t max_order = 2 + rng() % 7;
    const NGramConfig config = make_config(2 + rng() % (max_order - 1), max_order, 1 + rng() % 10, max_order);
    SCOPED_TRACE(config_string(config));
    NGramPredictor predictor(config);
    ReferenceNGram reference(config);
    for (int i = 0; i < 200; ++i) {
      const auto token = static_cast<Token>(rng() % 3);
      predictor.update(token);
      reference.update(token);
      ASSERT_EQ(drafts(predictor, 12), drafts(reference, 12)) << "after " << tokens_string(reference.history());
      ASSERT_LE(predictor.size(), reference.distinct_entries());
    }
  }
}

TEST(NGramPredictor, PredictDoesNotChangeThePredictor) {
  std::mt19937_64 rng(7);
  const NGramConfig config = make_config(2, 4, 6, 24);
  NGramPredictor predicted(config);
  NGramPredictor untouched(config);
  for (int i = 0; i < 500; ++i) {
    const auto token = static_cast<Token>(rng() % 4);
    predicted.update(token);
    untouched.update(token);
    const std::vector<Token> first = drafts(predicted, 6);
    for (std::size_t out_size = 0; out_size < 9; ++out_size) (void)drafts(predicted, out_size);
    ASSERT_EQ(drafts(predicted, 6), first);
    ASSERT_EQ(drafts(untouched, 6), first);
    ASSERT_EQ(predicted.size(), untouched.size());
    ASSERT_EQ(predicted.tokens_seen(), untouched.tokens_seen());
  }
}

TEST(NGramPredictor, ResetThenReuseEqualsAFreshPredictor) {
  std::mt19937_64 rng(11);
  for (const NGramConfig& config : {make_config(2, 4, 4, 16), make_config(3, 8, 10, 9), make_config(2, 2, 1, 2)}) {
    SCOPED_TRACE(config_string(config));
    NGramPredictor reused(config);
    const std::size_t memory = reused.memory_bytes();
    for (int i = 0; i < 300; ++i) reused.update(static_cast<Token>(rng() % 5));
    reused.reset();
    EXPECT_EQ(reused.size(), 0U);
    EXPECT_EQ(reused.tokens_seen(), 0U);
    EXPECT_EQ(drafts(reused, 10), std::vector<Token>{});
    EXPECT_EQ(reused.memory_bytes(), memory);

    NGramPredictor fresh(config);
    for (int i = 0; i < 300; ++i) {
      const auto token = static_cast<Token>(rng() % 5);
      reused.update(token);
      fresh.update(token);
      ASSERT_EQ(drafts(reused, 10), drafts(fresh, 10)) << "step " << i;
      ASSERT_EQ(reused.size(), fresh.size());
      ASSERT_EQ(reused.tokens_seen(), fresh.tokens_seen());
    }
  }
}

// Each predictor runs beside the reference for its drafts and beside a predictor fed the same
// tokens from scratch (never copied) for its size.
struct Shadowed {
  NGramPredictor predictor;
  ReferenceNGram reference;
  NGramPredictor fresh;

  void update(Token token) {
    predictor.update(token);
    reference.update(token);
    fresh.update(token);
  }
  void reset() {
    predictor.reset();
    reference.reset();
    fresh.reset();
  }
  void expect_consistent(const char* name, int step) const {
    SCOPED_TRACE(std::string(name) + " step " + std::to_string(step));
    const std::size_t out_size = predictor.config().max_drafts;
    EXPECT_EQ(drafts(predictor, out_size), drafts(reference, out_size));
    EXPECT_EQ(predictor.size(), fresh.size());
    EXPECT_EQ(predictor.tokens_seen(), reference.tokens_seen());
  }
};

TEST(NGramPredictor, CopiesAreIndependent) {
  std::mt19937_64 rng(13);
  const NGramConfig config = make_config(2, 4, 5, 20);
  Shadowed original{NGramPredictor(config), ReferenceNGram(config), NGramPredictor(config)};
  for (int i = 0; i < 50; ++i) original.update(static_cast<Token>(rng() % 4));

  Shadowed copy{original.predictor, original.reference, NGramPredictor(config)};
  Shadowed assigned{NGramPredictor(make_config(3, 3, 1, 3)), original.reference, NGramPredictor(config)};
  assigned.predictor = original.predictor;
  for (const Token token : original.reference.history()) {
    copy.fresh.update(token);
    assigned.fresh.update(token);
  }
  EXPECT_EQ(assigned.predictor.config().min_order, config.min_order);
  EXPECT_EQ(assigned.predictor.config().window, config.window);

  // Three different continuations, then a reset of the copy: none may leak into the others.
  for (int i = 0; i < 200; ++i) {
    original.update(static_cast<Token>(rng() % 4));
    copy.update(static_cast<Token>(4 + rng() % 3));
    assigned.update(static_cast<Token>(rng() % 2));
    if (i == 120) copy.reset();
    original.expect_consistent("original", i);
    copy.expect_consistent("copy", i);
    assigned.expect_consistent("assigned", i);
    if (HasFailure()) return;
  }
}

TEST(NGramPredictor, SpanUpdateEqualsTokenByTokenUpdate) {
  std::mt19937_64 rng(17);
  const NGramConfig config = make_config(2, 5, 8, 32);
  NGramPredictor by_span(config);
  NGramPredictor by_token(config);
  for (int round = 0; round < 100; ++round) {
    std::vector<Token> chunk(rng() % 40);
    for (Token& token : chunk) token = static_cast<Token>(rng() % 6);
    by_span.update(chunk);
    for (const Token token : chunk) by_token.update(token);
    ASSERT_EQ(drafts(by_span, 8), drafts(by_token, 8)) << "round " << round;
    ASSERT_EQ(by_span.size(), by_token.size());
    ASSERT_EQ(by_span.tokens_seen(), by_token.tokens_seen());
  }
}

TEST(NGramPredictor, LargeTokenIdsAreOrdinaryTokens) {
  // Ids that use all four bytes, including the largest one.
  const Token big = 0xffffffffU;
  const Token other = 0x01000000U;
  NGramPredictor predictor(make_config(2, 3, 4, 32));
  predictor.update(std::vector<Token>{big, other, 0, big, other, 0, big});
  EXPECT_EQ(drafts(predictor, 4), (std::vector<Token>{other, 0, big, other}));
}

// ---------------------------------------------------------------------------------------------
// Configuration

void expect_rejected(const NGramConfig& config, const std::string& field, std::size_t value) {
  SCOPED_TRACE(config_string(config));
  try {
    NGramPredictor predictor(config);
    ADD_FAILURE() << "accepted an invalid config";
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(field), std::string::npos) << message;
    // The value must appear as a whole number, not as part of a longer one.
    const std::string digits = std::to_string(value);
    bool found = false;
    for (std::size_t at = message.find(digits); at != std::string::npos; at = message.find(digits, at + 1)) {
      const bool starts = at == 0 || std::isdigit(static_cast<unsigned char>(message[at - 1])) == 0;
      const std::size_t end = at + digits.size();
      const bool ends = end == message.size() || std::isdigit(static_cast<unsigned char>(message[end])) == 0;
      found = found || (starts && ends);
    }
    EXPECT_TRUE(found) << "value " << digits << " missing from: " << message;
  }
}

TEST(NGramPredictor, RejectsInvalidConfigNamingFieldAndValue) {
  expect_rejected(make_config(1, 4, 4, 512), "min_order", 1);
  expect_rejected(make_config(0, 4, 4, 512), "min_order", 0);
  expect_rejected(make_config(3, 2, 4, 512), "max_order", 2);
  expect_rejected(make_config(5, 4, 4, 512), "max_order", 4);
  expect_rejected(make_config(2, NGramPredictor::kMaxSupportedOrder + 1, 4, 512), "max_order",
                  NGramPredictor::kMaxSupportedOrder + 1);
  expect_rejected(make_config(2, 4, 0, 512), "max_drafts", 0);
  expect_rejected(make_config(2, 4, 4, 3), "window", 3);
  expect_rejected(make_config(2, 8, 4, 7), "window", 7);
  expect_rejected(make_config(2, 4, 4, 0), "window", 0);
  expect_rejected(make_config(2, 4, 4, NGramPredictor::kMaxWindow + 1), "window", NGramPredictor::kMaxWindow + 1);
}

TEST(NGramPredictor, AcceptsBoundaryConfigs) {
  for (const NGramConfig& config :
       {make_config(2, 2, 1, 2),
        make_config(2, NGramPredictor::kMaxSupportedOrder, 1, NGramPredictor::kMaxSupportedOrder),
        make_config(8, 8, 1000, 8), NGramConfig{}}) {
    SCOPED_TRACE(config_string(config));
    EXPECT_NO_THROW({
      NGramPredictor predictor(config);
      EXPECT_EQ(predictor.config().min_order, config.min_order);
      EXPECT_EQ(predictor.config().max_order, config.max_order);
      EXPECT_EQ(predictor.config().max_drafts, config.max_drafts);
      EXPECT_EQ(predictor.config().window, config.window);
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Fixed memory

enum class StreamKind { kRandom, kPeriodic, kQuoting };

const char* stream_name(StreamKind kind) {
  switch (kind) {
    case StreamKind::kRandom:
      return "random";
    case StreamKind::kPeriodic:
      return "periodic";
    case StreamKind::kQuoting:
      return "quoting";
  }
  return "?";
}

// Token streams of the shapes a predictor meets: noise, text that repeats with a period (with
// the odd typo), and text that quotes stretches of its own past.
class StreamSource {
 public:
  StreamSource(StreamKind kind, std::size_t vocabulary, std::size_t period, std::uint64_t seed)
      : kind_(kind), vocabulary_(vocabulary), rng_(seed) {
    pattern_.resize(period);
    for (Token& token : pattern_) token = random_token();
  }

  Token next() {
    Token token = 0;
    switch (kind_) {
      case StreamKind::kRandom:
        token = random_token();
        break;
      case StreamKind::kPeriodic:
        token = rng_() % 50 == 0 ? random_token() : pattern_[produced_ % pattern_.size()];
        break;
      case StreamKind::kQuoting:
        if (quote_left_ == 0 && past_.size() > 4 && rng_() % 8 == 0) {
          quote_from_ = rng_() % (past_.size() - 1);
          quote_left_ = 1 + rng_() % 24;
        }
        if (quote_left_ > 0 && quote_from_ < past_.size()) {
          token = past_[quote_from_++];
          --quote_left_;
        } else {
          quote_left_ = 0;
          token = random_token();
        }
        break;
    }
    ++produced_;
    if (kind_ == StreamKind::kQuoting) past_.push_back(token);
    return token;
  }

 private:
  Token random_token() { return static_cast<Token>(rng_() % vocabulary_); }

  StreamKind kind_;
  std::size_t vocabulary_;
  std::mt19937_64 rng_;
  std::vector<Token> pattern_;
  std::vector<Token> past_;  // quoting only
  std::size_t produced_ = 0;
  std::size_t quote_from_ = 0;
  std::size_t quote_left_ = 0;
};

TEST(NGramPredictor, SizeAndMemoryStayBoundedOverLongStreams) {
  for (const std::size_t window : {std::size_t{8}, std::size_t{64}, std::size_t{500}}) {
    for (const auto [min_order, max_order] :
         {std::array<std::size_t, 2>{2, 4}, std::array<std::size_t, 2>{2, 8}, std::array<std::size_t, 2>{3, 3}}) {
      for (const StreamKind kind : {StreamKind::kRandom, StreamKind::kPeriodic, StreamKind::kQuoting}) {
        const NGramConfig config = make_config(min_order, max_order, 4, window);
        SCOPED_TRACE(config_string(config) + " " + stream_name(kind));
        StreamSource source(kind, kind == StreamKind::kRandom ? 100000 : 50, 1 + window / 3, window * 31 + max_order);
        NGramPredictor predictor(config);
        const std::size_t memory = predictor.memory_bytes();
        std::size_t peak = 0;
        for (std::size_t i = 0; i < 100 * window; ++i) {
          predictor.update(source.next());
          peak = std::max(peak, predictor.size());
          if (predictor.size() > predictor.max_size() || predictor.memory_bytes() != memory) {
            FAIL() << "token " << i << ": size " << predictor.size() << " max_size " << predictor.max_size()
                   << " memory " << predictor.memory_bytes() << " (was " << memory << ")";
          }
        }
        EXPECT_EQ(predictor.max_size(), 2 * (max_order - min_order + 1) * window);
        EXPECT_EQ(predictor.tokens_seen(), 100 * window);
        if (kind == StreamKind::kRandom) {
          // Nearly every token opens a new shortest context: a window of them must show in
          // size(), or the bound above says nothing.
          EXPECT_GE(peak, window / 2);
        }
      }
    }
  }
}

TEST(NGramPredictor, LargeWindowOverALongRandomStreamStaysBounded) {
  const NGramConfig config = make_config(2, 4, 8, 4096);
  NGramPredictor predictor(config);
  const std::size_t memory = predictor.memory_bytes();
  std::mt19937_64 rng(4096);
  std::vector<Token> chunk(4096);
  std::size_t peak = 0;
  for (int round = 0; round < 100; ++round) {
    for (Token& token : chunk) token = static_cast<Token>(rng() % 32000);
    predictor.update(chunk);
    peak = std::max(peak, predictor.size());
    ASSERT_LE(predictor.size(), predictor.max_size()) << "round " << round;
    ASSERT_EQ(predictor.memory_bytes(), memory) << "round " << round;
  }
  EXPECT_EQ(predictor.tokens_seen(), 409600U);
  EXPECT_GE(peak, config.window / 2);  // the tables were far from empty
}

// ---------------------------------------------------------------------------------------------
// No allocation once warm

TEST(NGramPredictor, UpdatePredictAndResetDoNotAllocate) {
  for (const NGramConfig& config : {make_config(2, 4, 8, 64), make_config(2, 8, 10, 8), make_config(3, 3, 1, 3)}) {
    SCOPED_TRACE(config_string(config));
    NGramPredictor predictor(config);
    std::mt19937_64 rng(config.window);
    std::vector<Token> chunk(3 * config.window);
    for (Token& token : chunk) token = static_cast<Token>(rng() % 5);
    std::array<Token, 16> out{};
    std::size_t drafted = 0;
    std::size_t allocations = 0;
    {
      const test::AllocationCounter counter;
      for (int round = 0; round < 20; ++round) {
        for (std::size_t i = 0; i < 10 * config.window; ++i) {
          predictor.update(static_cast<Token>(rng() % 5));
          drafted += predictor.predict(out);
        }
        predictor.update(chunk);
        drafted += predictor.predict(out);
        if (round % 5 == 4) predictor.reset();
      }
      allocations = counter.count();
    }
    EXPECT_EQ(allocations, 0U);
    EXPECT_GT(drafted, 0U);  // the loop did real work
  }
}

// ---------------------------------------------------------------------------------------------
// The predictor agrees with the naive reference on random scripts

struct Op {
  enum class Kind { kToken, kSpan, kPredict, kReset };
  Kind kind = Kind::kToken;
  std::vector<Token> tokens;  // kToken: exactly one; kSpan: any number
  std::size_t out_size = 0;   // kPredict
};

struct Script {
  NGramConfig config;
  std::vector<Op> ops;
};

std::string script_string(const Script& script) {
  std::ostringstream text;
  text << "config " << config_string(script.config) << "; ops:";
  for (const Op& op : script.ops) {
    switch (op.kind) {
      case Op::Kind::kToken:
        text << " u" << op.tokens[0];
        break;
      case Op::Kind::kSpan:
        text << " s" << tokens_string(op.tokens);
        break;
      case Op::Kind::kPredict:
        text << " p" << op.out_size;
        break;
      case Op::Kind::kReset:
        text << " reset";
        break;
    }
  }
  return text.str();
}

// Runs the script on both predictors; describes the first disagreement, if any.
std::optional<std::string> first_mismatch(const Script& script) {
  NGramPredictor predictor(script.config);
  ReferenceNGram reference(script.config);
  const std::size_t memory = predictor.memory_bytes();
  for (std::size_t i = 0; i < script.ops.size(); ++i) {
    const Op& op = script.ops[i];
    std::ostringstream problem;
    switch (op.kind) {
      case Op::Kind::kToken:
        predictor.update(op.tokens[0]);
        reference.update(op.tokens[0]);
        break;
      case Op::Kind::kSpan:
        predictor.update(op.tokens);
        reference.update(op.tokens);
        break;
      case Op::Kind::kReset:
        predictor.reset();
        reference.reset();
        break;
      case Op::Kind::kPredict: {
        // Two spare slots past the span catch writes beyond it.
        std::vector<Token> got(op.out_size + 2, kSentinel);
        std::vector<Token> want(op.out_size + 2, kSentinel);
        const std::size_t got_count = predictor.predict(std::span<Token>(got).first(op.out_size));
        const std::size_t want_count = reference.predict(std::span<Token>(want).first(op.out_size));
        if (got_count != want_count || got != want) {
          problem << "predict(out.size() = " << op.out_size << ") returned " << got_count << " "
                  << tokens_string(std::span<const Token>(got).first(std::min(got_count, got.size()))) << ", expected "
                  << want_count << " " << tokens_string(std::span<const Token>(want).first(want_count)) << " (buffers "
                  << tokens_string(got) << " vs " << tokens_string(want) << ")";
          break;
        }
        break;
      }
    }
    // Entries never freed when their n-grams leave the window push size() past what the
    // window holds. Recounting is the slow part of the reference, so only now and then.
    const bool recount = i + 1 == script.ops.size() || (op.kind == Op::Kind::kPredict && i % 3 == 0);
    if (recount && problem.str().empty() && predictor.size() > reference.distinct_entries()) {
      problem << "size() " << predictor.size() << " exceeds the window's " << reference.distinct_entries()
              << " distinct contexts and n-grams";
    }
    if (predictor.tokens_seen() != reference.tokens_seen()) {
      problem << " tokens_seen() " << predictor.tokens_seen() << ", expected " << reference.tokens_seen();
    }
    if (predictor.size() > predictor.max_size()) problem << " size() " << predictor.size() << " > max_size()";
    if (predictor.memory_bytes() != memory) problem << " memory_bytes() changed";
    if (!problem.str().empty()) {
      const std::vector<Token>& history = reference.history();
      const std::size_t shown = std::min<std::size_t>(history.size(), script.config.window + 8);
      return "op " + std::to_string(i) + ": " + problem.str() + "; last " + std::to_string(shown) +
             " tokens since reset " + tokens_string(std::span<const Token>(history).last(shown));
    }
  }
  return std::nullopt;
}

// Greedily drops ops, span tokens, output slots and window until the mismatch would vanish.
Script minimize(Script script) {
  for (bool progress = true; progress;) {
    progress = false;
    const auto keep_if_failing = [&](const Script& candidate) {
      if (!first_mismatch(candidate)) return false;
      script = candidate;
      progress = true;
      return true;
    };
    for (std::size_t i = script.ops.size(); i-- > 0;) {
      Script candidate = script;
      candidate.ops.erase(candidate.ops.begin() + static_cast<std::ptrdiff_t>(i));
      keep_if_failing(candidate);
    }
    for (std::size_t i = 0; i < script.ops.size(); ++i) {
      if (script.ops[i].kind != Op::Kind::kSpan) continue;
      for (std::size_t j = script.ops[i].tokens.size(); j-- > 0;) {
        Script candidate = script;
        std::vector<Token>& tokens = candidate.ops[i].tokens;
        tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(j));
        keep_if_failing(candidate);
      }
    }
    for (std::size_t i = 0; i < script.ops.size(); ++i) {
      while (script.ops[i].kind == Op::Kind::kPredict && script.ops[i].out_size > 0) {
        Script candidate = script;
        --candidate.ops[i].out_size;
        if (!keep_if_failing(candidate)) break;
      }
    }
    while (script.config.window > script.config.max_order) {
      Script candidate = script;
      --candidate.config.window;
      if (!keep_if_failing(candidate)) break;
    }
    while (script.config.max_drafts > 1) {
      Script candidate = script;
      --candidate.config.max_drafts;
      if (!keep_if_failing(candidate)) break;
    }
  }
  return script;
}

Script random_script(std::uint64_t seed, StreamKind kind) {
  std::mt19937_64 rng(seed);
  const auto pick = [&rng](std::size_t low, std::size_t high) { return low + rng() % (high - low + 1); };
  Script script;
  NGramConfig& config = script.config;
  config.min_order = pick(2, 4);
  config.max_order = pick(config.min_order, 8);
  // The smallest window is the sharpest edge; give it a fair share.
  config.window = rng() % 8 == 0 ? config.max_order : pick(config.max_order, 64);
  config.max_drafts = pick(1, 10);
  // Small vocabularies make contexts repeat and continuations tie.
  const std::size_t vocabulary = pick(2, 20);
  StreamSource source(kind, vocabulary, pick(1, 2 * config.window), seed ^ 0x9e3779b97f4a7c15ULL);

  const std::size_t op_count = pick(50, 300);
  for (std::size_t i = 0; i < op_count; ++i) {
    const std::size_t roll = rng() % 100;
    Op op;
    if (roll < 50) {
      op.kind = Op::Kind::kToken;
      op.tokens.push_back(source.next());
    } else if (roll < 62) {
      op.kind = Op::Kind::kSpan;
      op.tokens.resize(pick(0, config.window + 8));
      for (Token& token : op.tokens) token = source.next();
    } else if (roll < 98) {
      op.kind = Op::Kind::kPredict;
      op.out_size = pick(0, 12);
    } else {
      op.kind = Op::Kind::kReset;
    }
    script.ops.push_back(std::move(op));
  }
  return script;
}

void expect_agreement(StreamKind kind, std::uint64_t first_seed, std::uint64_t seeds) {
  for (std::uint64_t seed = first_seed; seed < first_seed + seeds; ++seed) {
    const Script script = random_script(seed, kind);
    if (const std::optional<std::string> mismatch = first_mismatch(script)) {
      const Script smallest = minimize(script);
      ADD_FAILURE() << stream_name(kind) << " seed " << seed << ": " << *mismatch
                    << "\nminimized script: " << script_string(smallest)
                    << "\nminimized mismatch: " << first_mismatch(smallest).value_or("(none)");
      return;
    }
  }
}

TEST(NGramPredictorProperty, AgreesWithReferenceOnRandomStreams) { expect_agreement(StreamKind::kRandom, 1000, 200); }

TEST(NGramPredictorProperty, AgreesWithReferenceOnPeriodicStreams) {
  expect_agreement(StreamKind::kPeriodic, 2000, 150);
}

TEST(NGramPredictorProperty, AgreesWithReferenceOnQuotingStreams) { expect_agreement(StreamKind::kQuoting, 3000, 150); }


// predict(out, probabilities) drafts exactly what predict(out) drafts, with chances that
// never rise along the drafts: the product of count / (total + 1).
TEST(NGramPredictorProperty, EstimatesComeWithTheSameDraftsAndAreChances) {
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 30; ++trial) {
    NGramPredictor predictor(NGramConfig{.min_order = 2, .max_order = 2 + rng() % 4, .window = 16 + rng() % 300});
    const Token vocab = static_cast<Token>(2 + rng() % 20);
    for (int i = 0; i < 800; ++i) {
      predictor.update(static_cast<Token>(i % 7 == 0 ? rng() % vocab : i % vocab));
      const std::size_t room = rng() % 12;
      std::vector<Token> plain(room), with(room);
      std::vector<float> probabilities(room);
      std::vector<DraftEvidence> evidence(room);
      const std::size_t n = predictor.predict(plain);
      ASSERT_EQ(predictor.predict(with, probabilities), n);
      ASSERT_EQ(plain, with);
      ASSERT_EQ(predictor.predict(with, evidence), n);
      double chance = 1;
      for (std::size_t j = 0; j < n; ++j) {
        chance *= static_cast<double>(evidence[j].count) / (evidence[j].total + 1.0);
        ASSERT_NEAR(probabilities[j], chance, 1e-6);
        ASSERT_GT(probabilities[j], 0.0f);
        ASSERT_LT(probabilities[j], 1.0f);
      }
    }
  }
}

}  // namespace
}  // namespace ngramspec
