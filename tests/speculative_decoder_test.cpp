#include "ngramspec/speculative_decoder.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "support/mock_models.hpp"
#include "support/test_drafters.hpp"

namespace ngramspec::test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::InSequence;
using ::testing::IsEmpty;
using ::testing::ReturnPointee;
using ::testing::SizeIs;
using ::testing::StrictMock;

constexpr std::size_t kPropertyCases = 700;

/// prompt followed by tokens[0 .. tokens.size() - drop).
std::vector<Token> joined(std::span<const Token> prompt, std::span<const Token> tokens, std::size_t drop = 0) {
  std::vector<Token> all(prompt.begin(), prompt.end());
  all.insert(all.end(), tokens.begin(), tokens.end() - static_cast<std::ptrdiff_t>(std::min(drop, tokens.size())));
  return all;
}

/// What the model must hold after a generation that emitted `tokens`: the prompt and all
/// but the last token; nothing when the generation never started.
std::vector<Token> expected_cache(std::span<const Token> prompt, std::span<const Token> tokens) {
  return tokens.empty() ? std::vector<Token>{} : joined(prompt, tokens, 1);
}

std::size_t ceil_div(std::size_t a, std::size_t b) { return a / b + (a % b != 0 ? 1 : 0); }

/// Most drafts one pass of the case may carry, before the remaining-token limit.
std::size_t draft_cap(const DecodeCase& c) {
  if (!c.options.speculate) return 0;
  return std::min({c.max_batch - 1, c.options.max_drafts, kMaxDraftsPerPass});
}

/// The DecodeStats identities every generation keeps.
void expect_stats_consistent(const DecodeCase& c, const DecodeResult& result) {
  const DecodeStats& s = result.stats;
  EXPECT_EQ(s.generated, result.tokens.size());
  EXPECT_LE(s.accepted, s.drafted);
  ASSERT_EQ(s.drafted_at.size(), s.accepted_at.size());
  EXPECT_EQ(s.drafted, std::accumulate(s.drafted_at.begin(), s.drafted_at.end(), std::size_t{0}));
  EXPECT_EQ(s.accepted, std::accumulate(s.accepted_at.begin(), s.accepted_at.end(), std::size_t{0}));
  for (std::size_t i = 0; i < s.drafted_at.size(); ++i) {
    EXPECT_LE(s.accepted_at[i], s.drafted_at[i]) << "position " << i;
    // A pass that drafted (accepted) position i+1 drafted (accepted) position i too.
    if (i > 0) {
      EXPECT_LE(s.drafted_at[i], s.drafted_at[i - 1]) << "position " << i;
    }
    if (i > 0) {
      EXPECT_LE(s.accepted_at[i], s.accepted_at[i - 1]) << "position " << i;
    }
  }
  if (!s.drafted_at.empty()) {
    EXPECT_NE(s.drafted_at.back(), 0U) << "histogram not trimmed";
  }
  EXPECT_LE(s.drafted_at.size(), draft_cap(c));
  EXPECT_EQ(s.rejected(), s.drafted - s.accepted);

  if (s.generated == 0) {
    EXPECT_EQ(s.prefill_passes, 0U);
    EXPECT_EQ(s.decode_passes, 0U);
    EXPECT_EQ(s.drafted, 0U);
    EXPECT_EQ(s.mean_accepted_length(), 0.0);
    return;
  }
  EXPECT_EQ(s.prefill_passes, ceil_div(c.prompt.size(), c.max_batch));
  // Never more passes than plain decoding: every pass emits at least one token.
  EXPECT_LE(s.decode_passes + 1, s.generated);
  // Every pass emits its accepted drafts plus the model's own token, except that a pass cut
  // by a stop token or a limit inside its accepted run emits only accepted tokens.
  EXPECT_LE(s.generated, s.decode_passes + 1 + s.accepted);
  EXPECT_GE(s.generated + 1, s.decode_passes + 1 + s.accepted);
  if (s.drafted == 0) {
    EXPECT_EQ(s.decode_passes + 1, s.generated);
    EXPECT_EQ(s.mean_accepted_length(), 1.0);
  }
  EXPECT_DOUBLE_EQ(s.mean_accepted_length(),
                   static_cast<double>(s.generated) / static_cast<double>(s.decode_passes + 1));
}

/// Runs one random case through generate() and checks everything the decoder promises.
template <Drafter D>
void check_generate_case(const DecodeCase& c, D drafter) {
  GreedyModel model(c.rule.rule, c.max_batch);
  SpeculativeDecoder decoder(model, RecordingDrafter<D>(std::move(drafter)));
  const GreedyReference ref = plain_greedy(c.rule.rule, c.prompt, c.options);

  std::vector<Token> streamed;
  std::size_t bad_cache_chunks = 0;
  const DecodeResult result = decoder.generate(c.prompt, c.options, [&](std::span<const Token> chunk) {
    EXPECT_FALSE(chunk.empty()) << "empty chunk";
    streamed.insert(streamed.end(), chunk.begin(), chunk.end());
    // Between passes the model holds the prompt and every emitted token but the last.
    if (model.history() != joined(c.prompt, streamed, 1)) ++bad_cache_chunks;
    return true;
  });

  ASSERT_EQ(result.tokens, ref.tokens);
  EXPECT_EQ(result.stop_reason, ref.stop_reason)
      << to_string(result.stop_reason) << " vs " << to_string(ref.stop_reason);
  EXPECT_EQ(streamed, result.tokens);
  EXPECT_EQ(bad_cache_chunks, 0U);
  expect_stats_consistent(c, result);

  EXPECT_THAT(model.violations(), IsEmpty());
  EXPECT_EQ(model.history(), expected_cache(c.prompt, result.tokens));
  if (c.options.max_context != 0) {
    EXPECT_LE(c.prompt.size() + result.tokens.size(), c.options.max_context);
    EXPECT_LE(model.peak_length(), c.options.max_context);
  }
  EXPECT_EQ(model.forward_calls(), result.stats.prefill_passes + result.stats.decode_passes);
  // Only the initial rollback(0) of a fresh model may discard nothing.
  EXPECT_LE(model.noop_rollbacks(), 1U);

  const auto& recorder = decoder.drafter();
  EXPECT_EQ(recorder.resets(), 1U);
  // A speculating decoder shows its drafter the prompt and every emitted token, in order.
  if (!result.tokens.empty() && c.options.speculate) {
    EXPECT_EQ(recorder.seen(), joined(c.prompt, result.tokens));
  }
  EXPECT_LE(recorder.max_offered(), draft_cap(c));
  if (c.drafter == DrafterKind::wrong) {
    EXPECT_EQ(result.stats.accepted, 0U);
  }
  if (c.drafter == DrafterKind::silent || !c.options.speculate) {
    EXPECT_EQ(result.stats.drafted, 0U);
  }
  if (c.drafter == DrafterKind::oracle && !result.tokens.empty()) {
    // A perfect drafter makes every pass but the last carry the most drafts allowed.
    EXPECT_EQ(result.stats.decode_passes, ceil_div(result.tokens.size() - 1, draft_cap(c) + 1));
    if (result.stop_reason != StopReason::stop_token) {
      EXPECT_EQ(result.stats.rejected(), 0U);
    }
  }

  // The same decoder again: starts fresh, whatever the first run left behind.
  const DecodeResult again = decoder.generate(c.prompt, c.options);
  EXPECT_EQ(again.tokens, ref.tokens);
  EXPECT_EQ(again.stop_reason, ref.stop_reason);
  EXPECT_EQ(model.history(), expected_cache(c.prompt, again.tokens));
  EXPECT_THAT(model.violations(), IsEmpty());
}

TEST(SpeculativeDecoderProperty, GreedyIdentityOverRandomCases) {
  for (std::uint64_t seed = 0; seed < kPropertyCases; ++seed) {
    const DecodeCase c = random_decode_case(seed);
    SCOPED_TRACE(c.describe());
    with_drafter(c, [&c](auto drafter) { check_generate_case(c, std::move(drafter)); });
    if (::testing::Test::HasFailure()) break;  // one case's trace is enough to debug
  }
}

TEST(SpeculativeDecoderProperty, SpeculationOffMatchesSpeculationOn) {
  for (std::uint64_t seed = 10'000; seed < 10'000 + 150; ++seed) {
    DecodeCase c = random_decode_case(seed);
    c.options.speculate = true;
    c.drafter = DrafterKind::ngram;
    SCOPED_TRACE(c.describe());
    GreedyModel model(c.rule.rule, c.max_batch);
    SpeculativeDecoder decoder(model, NGramPredictor(c.ngram));
    const DecodeResult on = decoder.generate(c.prompt, c.options);
    DecodeOptions off_options = c.options;
    off_options.speculate = false;
    const DecodeResult off = decoder.generate(c.prompt, off_options);
    ASSERT_EQ(on.tokens, off.tokens);
    EXPECT_EQ(on.stop_reason, off.stop_reason);
    EXPECT_EQ(off.stats.drafted, 0U);
    EXPECT_LE(on.stats.decode_passes, off.stats.decode_passes);
    EXPECT_EQ(on.stats.prefill_passes, off.stats.prefill_passes);
    EXPECT_THAT(model.violations(), IsEmpty());
  }
}

TEST(SpeculativeDecoderProperty, OneDecoderServesManyPrompts) {
  // Prompts, options and limits change from call to call on one decoder and one model.
  GreedyModel model(InductionRule{12}, 5);
  SpeculativeDecoder decoder(model);
  for (std::uint64_t seed = 20'000; seed < 20'000 + 120; ++seed) {
    DecodeCase c = random_decode_case(seed);
    c.rule = {"induction(vocab=12)", InductionRule{12}, 12};
    c.max_batch = 5;
    for (Token& t : c.prompt) t %= 12;
    for (Token& t : c.options.stop_tokens) t %= 12;
    SCOPED_TRACE(c.describe());
    const DecodeResult result = decoder.generate(c.prompt, c.options);
    const GreedyReference ref = plain_greedy(c.rule.rule, c.prompt, c.options);
    ASSERT_EQ(result.tokens, ref.tokens);
    EXPECT_EQ(result.stop_reason, ref.stop_reason);
    EXPECT_EQ(model.history(), expected_cache(c.prompt, result.tokens));
    EXPECT_THAT(model.violations(), IsEmpty());
  }
}

TEST(SpeculativeDecoder, RepetitiveTextTakesFewerPasses) {
  // A model that copies its prompt is what n-gram drafts are for: many drafts accepted.
  GreedyModel model(RepeatRule{6, 32}, 16);
  SpeculativeDecoder decoder(model);
  const std::vector<Token> prompt = {3, 1, 4, 1, 5, 9, 3, 1, 4, 1, 5, 9};
  DecodeOptions options;
  options.max_new_tokens = 60;
  const DecodeResult result = decoder.generate(prompt, options);
  EXPECT_EQ(result.tokens, plain_greedy(RepeatRule{6, 32}, prompt, 60));
  EXPECT_GT(result.stats.mean_accepted_length(), 3.0);
  EXPECT_GT(result.stats.acceptance_rate(), 0.9);
}

// max_drafts above kMaxDraftsPerPass was taken (and quietly capped) by the decoder while
// BatchSpeculator::begin refused it: one rule, refused everywhere, naming the value.
TEST(SpeculativeDecoder, MaxDraftsAboveTheLimitIsRefusedAsTheBatchRefusesIt) {
  GreedyModel model(RepeatRule{6, 32}, 16);
  SpeculativeDecoder decoder(model);
  const std::vector<Token> prompt = {3, 1, 4, 1, 5, 9};
  for (const std::size_t bad : {kMaxDraftsPerPass + 1, std::numeric_limits<std::size_t>::max()}) {
    DecodeOptions options;
    options.max_drafts = bad;
    try {
      (void)decoder.generate(prompt, options);
      ADD_FAILURE() << "max_drafts = " << bad << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr("max_drafts = " + std::to_string(bad) + " is more than kMaxDraftsPerPass = 1024"));
    }
  }
  DecodeOptions options;
  options.max_drafts = kMaxDraftsPerPass;
  options.max_new_tokens = 20;
  EXPECT_EQ(decoder.generate(prompt, options).tokens, plain_greedy(RepeatRule{6, 32}, prompt, 20));
}

// --- Limits and stop tokens inside an accepted run --------------------------------------

// AffineRule{100, 1, 1} counts up: after t comes t + 1.
const AffineRule kCounter{100, 1, 1};

TEST(SpeculativeDecoder, StopTokenInsideAcceptedRunEndsOutputThere) {
  GreedyModel model(kCounter, 32);
  SpeculativeDecoder decoder(model, OracleDrafter(kCounter));
  const std::vector<Token> prompt = {10, 11};
  DecodeOptions options;
  options.max_new_tokens = 40;
  options.max_drafts = 64;
  options.stop_tokens = {50, 16};  // 16 lies inside the oracle's first verify pass
  std::vector<std::vector<Token>> chunks;
  const DecodeResult result = decoder.generate(prompt, options, [&](std::span<const Token> chunk) {
    chunks.emplace_back(chunk.begin(), chunk.end());
    return true;
  });
  EXPECT_EQ(result.tokens, (std::vector<Token>{12, 13, 14, 15, 16}));
  EXPECT_EQ(result.stop_reason, StopReason::stop_token);
  EXPECT_THAT(chunks, ElementsAre(ElementsAre(12), ElementsAre(13, 14, 15, 16)));
  // The pass verified 12 + 31 drafts; the model keeps the prompt and 12..15 only.
  EXPECT_EQ(model.history(), (std::vector<Token>{10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(result.stats.decode_passes, 1U);
  EXPECT_EQ(result.stats.drafted, 31U);
  EXPECT_EQ(result.stats.accepted, 4U);  // 13, 14, 15 and the stop token were all drafts
  EXPECT_THAT(model.violations(), IsEmpty());
}

TEST(SpeculativeDecoder, FirstTokenCanBeTheStopToken) {
  GreedyModel model(kCounter, 4);
  SpeculativeDecoder decoder(model, OracleDrafter(kCounter));
  const std::vector<Token> prompt = {1, 2, 3, 4, 5, 6};
  DecodeOptions options;
  options.stop_tokens = {7};
  const DecodeResult result = decoder.generate(prompt, options);
  EXPECT_EQ(result.tokens, (std::vector<Token>{7}));
  EXPECT_EQ(result.stop_reason, StopReason::stop_token);
  EXPECT_EQ(result.stats.prefill_passes, 2U);
  EXPECT_EQ(result.stats.decode_passes, 0U);
  EXPECT_EQ(model.history(), prompt);
}

TEST(SpeculativeDecoder, StopTokenInThePromptDoesNotStop) {
  GreedyModel model(kCounter, 8);
  SpeculativeDecoder decoder(model);
  const std::vector<Token> prompt = {9, 5, 9};
  DecodeOptions options;
  options.max_new_tokens = 3;
  options.stop_tokens = {9};
  const DecodeResult result = decoder.generate(prompt, options);
  EXPECT_EQ(result.tokens, (std::vector<Token>{10, 11, 12}));
  EXPECT_EQ(result.stop_reason, StopReason::max_new_tokens);
}

TEST(SpeculativeDecoder, MaxNewTokensShortensTheLastPassesDrafts) {
  GreedyModel model(kCounter, 64);
  SpeculativeDecoder decoder(model, OracleDrafter(kCounter));
  const std::vector<Token> prompt = {0};
  DecodeOptions options;
  options.max_new_tokens = 7;
  options.max_drafts = 4;
  const DecodeResult result = decoder.generate(prompt, options);
  EXPECT_EQ(result.tokens, (std::vector<Token>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(result.stop_reason, StopReason::max_new_tokens);
  // Prefill emits 1; the first pass 4 drafts + 1; the last may emit only 1 more, so it
  // carries no drafts and nothing is rolled back.
  EXPECT_EQ(result.stats.decode_passes, 2U);
  EXPECT_EQ(result.stats.drafted_at, (std::vector<std::size_t>{1, 1, 1, 1}));
  EXPECT_EQ(result.stats.rejected(), 0U);
  EXPECT_EQ(model.history(), (std::vector<Token>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(model.peak_length(), 7U);
}

TEST(SpeculativeDecoder, MaxContextCutsOutputAndBoundsTheModel) {
  GreedyModel model(kCounter, 64);
  SpeculativeDecoder decoder(model, OracleDrafter(kCounter));
  const std::vector<Token> prompt = {0, 1, 2};
  DecodeOptions options;
  options.max_new_tokens = 100;
  options.max_context = 10;
  options.max_drafts = 64;
  const DecodeResult result = decoder.generate(prompt, options);
  EXPECT_EQ(result.tokens, (std::vector<Token>{3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(result.stop_reason, StopReason::max_context);
  EXPECT_EQ(model.history(), (std::vector<Token>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_LE(model.peak_length(), 10U);
  EXPECT_EQ(result.stats.decode_passes, 1U);
}

TEST(SpeculativeDecoder, PromptFillingMaxContextGeneratesNothing) {
  GreedyModel model(kCounter, 8);
  SpeculativeDecoder decoder(model);
  const std::vector<Token> prompt = {1, 2, 3};
  DecodeOptions options;
  options.max_context = 3;
  std::size_t chunks = 0;
  const DecodeResult result = decoder.generate(prompt, options, [&](std::span<const Token>) {
    ++chunks;
    return true;
  });
  EXPECT_THAT(result.tokens, IsEmpty());
  EXPECT_EQ(result.stop_reason, StopReason::max_context);
  EXPECT_EQ(chunks, 0U);
  EXPECT_EQ(model.forward_calls(), 0U);

  options.max_new_tokens = 0;
  EXPECT_EQ(decoder.generate(prompt, options).stop_reason, StopReason::max_new_tokens);
}

// --- The token callback --------------------------------------------------------------

TEST(SpeculativeDecoder, CallbackReturningFalseStopsAfterThatChunk) {
  for (std::uint64_t seed = 30'000; seed < 30'000 + 80; ++seed) {
    const DecodeCase c = random_decode_case(seed);
    SCOPED_TRACE(c.describe());
    std::vector<std::vector<Token>> chunks;
    with_drafter(c, [&](auto drafter) {
      GreedyModel model(c.rule.rule, c.max_batch);
      SpeculativeDecoder decoder(model, std::move(drafter));
      (void)decoder.generate(c.prompt, c.options, [&](std::span<const Token> chunk) {
        chunks.emplace_back(chunk.begin(), chunk.end());
        return true;
      });
    });
    for (std::size_t stop_at = 1; stop_at <= chunks.size(); ++stop_at) {
      SCOPED_TRACE("callback returns false on chunk " + std::to_string(stop_at));
      with_drafter(c, [&](auto drafter) {
        GreedyModel model(c.rule.rule, c.max_batch);
        SpeculativeDecoder decoder(model, std::move(drafter));
        std::size_t calls = 0;
        const DecodeResult result =
            decoder.generate(c.prompt, c.options, [&](std::span<const Token>) { return ++calls < stop_at; });
        std::vector<Token> expected;
        for (std::size_t i = 0; i < stop_at; ++i) expected.insert(expected.end(), chunks[i].begin(), chunks[i].end());
        EXPECT_EQ(calls, stop_at);
        ASSERT_EQ(result.tokens, expected);
        // A chunk that ends generation anyway keeps its own reason.
        if (stop_at < chunks.size()) {
          EXPECT_EQ(result.stop_reason, StopReason::callback);
        }
        if (stop_at == chunks.size()) {
          EXPECT_EQ(result.stop_reason, plain_greedy(c.rule.rule, c.prompt, c.options).stop_reason);
        }
        EXPECT_EQ(result.stats.generated, expected.size());
        EXPECT_EQ(model.history(), expected_cache(c.prompt, result.tokens));
        EXPECT_THAT(model.violations(), IsEmpty());
      });
    }
    if (::testing::Test::HasFailure()) break;
  }
}

// --- Errors and exceptions -----------------------------------------------------------

TEST(SpeculativeDecoderErrors, InvalidArgumentsNameTheProblemAndLeaveTheModelAlone) {
  GreedyModel model(kCounter, 8);
  SpeculativeDecoder decoder(model);
  const auto expect_invalid = [&](std::span<const Token> prompt, const DecodeOptions& options,
                                  std::vector<std::string> parts) {
    const std::size_t forwards = model.forward_calls();
    const std::size_t rollbacks = model.rollback_calls();
    try {
      (void)decoder.generate(prompt, options);
      ADD_FAILURE() << "no exception";
    } catch (const std::invalid_argument& e) {
      for (const std::string& part : parts) EXPECT_THAT(e.what(), HasSubstr(part));
    }
    EXPECT_EQ(model.forward_calls(), forwards);
    EXPECT_EQ(model.rollback_calls(), rollbacks);
  };
  expect_invalid({}, {}, {"empty"});
  const std::vector<Token> five = {1, 2, 3, 4, 5};
  DecodeOptions tight;
  tight.max_context = 3;
  expect_invalid(five, tight, {"5 tokens", "max_context = 3"});
  model.set_max_batch(0);
  expect_invalid(five, {}, {"max_batch() is 0"});

  // The decoder still works afterwards.
  model.set_max_batch(2);
  DecodeOptions options;
  options.max_new_tokens = 4;
  EXPECT_EQ(decoder.generate(five, options).tokens, (std::vector<Token>{6, 7, 8, 9}));
  EXPECT_THAT(model.violations(), IsEmpty());
}

/// A case with a long enough output to fail at many points.
DecodeCase fault_case(std::uint64_t seed) {
  DecodeCase c = random_decode_case(seed);
  c.options.max_new_tokens = 30 + seed % 40;
  c.options.max_context = 0;
  c.options.speculate = true;
  c.options.stop_tokens.clear();
  return c;
}

/// Makes the case draft: speculation needs room for a draft in a pass.
void ensure_drafts(DecodeCase& c) {
  c.options.speculate = true;
  if (c.max_batch == 1) c.max_batch = 4;
  if (c.options.max_drafts == 0) c.options.max_drafts = 3;
}

TEST(SpeculativeDecoderErrors, ModelForwardFaultPropagatesAndNextGenerateIsExact) {
  for (std::uint64_t seed = 40'000; seed < 40'000 + 12; ++seed) {
    const DecodeCase c = fault_case(seed);
    SCOPED_TRACE(c.describe());
    const GreedyReference ref = plain_greedy(c.rule.rule, c.prompt, c.options);
    with_drafter(c, [&](auto drafter) {
      GreedyModel model(c.rule.rule, c.max_batch);
      SpeculativeDecoder decoder(model, std::move(drafter));
      (void)decoder.generate(c.prompt, c.options);
      const std::size_t calls = model.forward_calls();
      for (const FaultTiming timing : {FaultTiming::before_change, FaultTiming::after_change}) {
        for (std::size_t k = 1; k <= calls; ++k) {
          SCOPED_TRACE("forward call " + std::to_string(k) + " of " + std::to_string(calls) + " throws" +
                       (timing == FaultTiming::after_change ? " after changing the model" : ""));
          model.fail_forward_at(k, timing);
          EXPECT_THROW((void)decoder.generate(c.prompt, c.options), ModelFault);
          const DecodeResult result = decoder.generate(c.prompt, c.options);
          ASSERT_EQ(result.tokens, ref.tokens);
          EXPECT_EQ(result.stop_reason, ref.stop_reason);
          EXPECT_EQ(model.history(), expected_cache(c.prompt, result.tokens));
        }
      }
      model.fail_forward_at(calls + 1);
      EXPECT_EQ(decoder.generate(c.prompt, c.options).tokens, ref.tokens) << "a fault past the last call fired";
      model.fail_forward_at(0);
      EXPECT_THAT(model.violations(), IsEmpty());
    });
  }
}

TEST(SpeculativeDecoderErrors, ModelRollbackFaultPropagatesAndNextGenerateIsExact) {
  std::size_t faults_tested = 0;
  for (std::uint64_t seed = 50'000; seed < 50'000 + 12; ++seed) {
    DecodeCase c = fault_case(seed);
    c.drafter = DrafterKind::noisy_oracle;  // rejects now and then, so rollbacks happen
    ensure_drafts(c);
    SCOPED_TRACE(c.describe());
    const GreedyReference ref = plain_greedy(c.rule.rule, c.prompt, c.options);
    with_drafter(c, [&](auto drafter) {
      GreedyModel model(c.rule.rule, c.max_batch);
      SpeculativeDecoder decoder(model, std::move(drafter));
      model.reset_counters();
      (void)decoder.generate(c.prompt, c.options);
      const std::size_t calls = model.rollback_calls();
      for (std::size_t k = 1; k <= calls; ++k) {  // k == 1 is the rollback(0) that starts afresh
        SCOPED_TRACE("rollback call " + std::to_string(k) + " of " + std::to_string(calls) + " throws");
        model.fail_rollback_at(k);
        EXPECT_THROW((void)decoder.generate(c.prompt, c.options), ModelFault);
        ++faults_tested;
        const DecodeResult result = decoder.generate(c.prompt, c.options);
        ASSERT_EQ(result.tokens, ref.tokens);
        EXPECT_EQ(model.history(), expected_cache(c.prompt, result.tokens));
      }
      EXPECT_THAT(model.violations(), IsEmpty());
    });
  }
  EXPECT_GT(faults_tested, 30U);  // the cases do roll back
}

TEST(SpeculativeDecoderErrors, DrafterFaultPropagatesAndNextGenerateIsExact) {
  for (std::uint64_t seed = 60'000; seed < 60'000 + 8; ++seed) {
    DecodeCase c = fault_case(seed);
    ensure_drafts(c);
    SCOPED_TRACE(c.describe());
    const GreedyReference ref = plain_greedy(c.rule.rule, c.prompt, c.options);
    GreedyModel model(c.rule.rule, c.max_batch);
    SpeculativeDecoder decoder(model, RecordingDrafter(ThrowingDrafter(NGramPredictor(c.ngram), 0)));
    (void)decoder.generate(c.prompt, c.options);
    const std::size_t calls = decoder.drafter().predicts();
    EXPECT_GT(calls, 0U);
    for (std::size_t k = 1; k <= calls; ++k) {
      SCOPED_TRACE("predict call " + std::to_string(k) + " throws");
      decoder.drafter().inner().fail_predict_at(k);
      EXPECT_THROW((void)decoder.generate(c.prompt, c.options), DrafterFault);
      ASSERT_EQ(decoder.generate(c.prompt, c.options).tokens, ref.tokens);
      EXPECT_EQ(model.history(), expected_cache(c.prompt, ref.tokens));
    }
    EXPECT_THAT(model.violations(), IsEmpty());
  }
}

struct CallbackFault {
  std::size_t chunk;
};

TEST(SpeculativeDecoderErrors, CallbackExceptionPropagatesAndNextGenerateIsExact) {
  for (std::uint64_t seed = 70'000; seed < 70'000 + 8; ++seed) {
    const DecodeCase c = fault_case(seed);
    SCOPED_TRACE(c.describe());
    const GreedyReference ref = plain_greedy(c.rule.rule, c.prompt, c.options);
    GreedyModel model(c.rule.rule, c.max_batch);
    SpeculativeDecoder decoder(model, NGramPredictor(c.ngram));
    std::size_t chunks = 0;
    (void)decoder.generate(c.prompt, c.options, [&](std::span<const Token>) { return ++chunks > 0; });
    for (std::size_t k = 1; k <= chunks; ++k) {
      SCOPED_TRACE("chunk " + std::to_string(k) + " throws");
      std::size_t seen = 0;
      try {
        (void)decoder.generate(c.prompt, c.options, [&](std::span<const Token>) -> bool {
          if (++seen == k) throw CallbackFault{k};
          return true;
        });
        ADD_FAILURE() << "no exception";
      } catch (const CallbackFault& fault) {
        EXPECT_EQ(fault.chunk, k);
      }
      ASSERT_EQ(decoder.generate(c.prompt, c.options).tokens, ref.tokens);
    }
    EXPECT_THAT(model.violations(), IsEmpty());
  }
}

// --- Exact call sequences, traced by hand ----------------------------------------------

class PinnedCalls : public ::testing::Test {
 protected:
  void SetUp() override { EXPECT_CALL(model_, max_batch()).WillRepeatedly(ReturnPointee(&max_batch_)); }
  void set_max_batch(std::size_t n) { max_batch_ = n; }

  StrictMock<MockTargetModel> model_;
  std::size_t max_batch_ = 8;
};

TEST_F(PinnedCalls, AcceptThreeOfFourDrafts) {
  const std::vector<Token> prompt = {10, 11, 12};
  SpeculativeDecoder decoder(model_, ScriptedDrafter({{4, {21, 22, 23, 24}}}));
  DecodeOptions options;
  options.max_new_tokens = 6;
  {
    InSequence in_order;
    EXPECT_CALL(model_, rollback(0));
    EXPECT_CALL(model_, forward(0, TokensAre(ElementsAre(10, 11, 12)), SizeIs(3))).WillOnce(WriteNext({1, 2, 20}));
    // The last token and the four drafts; the model agrees on three and then says 30.
    EXPECT_CALL(model_, forward(3, TokensAre(ElementsAre(20, 21, 22, 23, 24)), SizeIs(5)))
        .WillOnce(WriteNext({21, 22, 23, 30, 31}));
    // Emitted 20 21 22 23 30: keep prompt + 4 of them; 30 is fed next.
    EXPECT_CALL(model_, rollback(7));
    EXPECT_CALL(model_, forward(7, TokensAre(ElementsAre(30)), SizeIs(1))).WillOnce(WriteNext({40}));
  }
  const DecodeResult result = decoder.generate(prompt, options);
  EXPECT_EQ(result.tokens, (std::vector<Token>{20, 21, 22, 23, 30, 40}));
  EXPECT_EQ(result.stop_reason, StopReason::max_new_tokens);
  EXPECT_EQ(result.stats.prefill_passes, 1U);
  EXPECT_EQ(result.stats.decode_passes, 2U);
  EXPECT_EQ(result.stats.drafted, 4U);
  EXPECT_EQ(result.stats.accepted, 3U);
  EXPECT_EQ(result.stats.drafted_at, (std::vector<std::size_t>{1, 1, 1, 1}));
  EXPECT_EQ(result.stats.accepted_at, (std::vector<std::size_t>{1, 1, 1, 0}));
  EXPECT_DOUBLE_EQ(result.stats.mean_accepted_length(), 2.0);
  ASSERT_FALSE(decoder.drafter().offered().empty());
  EXPECT_EQ(decoder.drafter().offered()[0], 4U);  // 5 tokens left: 4 drafts + the model's own
}

TEST_F(PinnedCalls, FullAcceptanceNeedsNoRollback) {
  const std::vector<Token> prompt = {10, 11, 12};
  SpeculativeDecoder decoder(model_, ScriptedDrafter({{4, {21, 22, 23, 24}}}));
  DecodeOptions options;
  options.max_new_tokens = 7;
  {
    InSequence in_order;
    EXPECT_CALL(model_, rollback(0));
    EXPECT_CALL(model_, forward(0, TokensAre(ElementsAre(10, 11, 12)), SizeIs(3))).WillOnce(WriteNext({0, 0, 20}));
    EXPECT_CALL(model_, forward(3, TokensAre(ElementsAre(20, 21, 22, 23, 24)), SizeIs(5)))
        .WillOnce(WriteNext({21, 22, 23, 24, 25}));
    // The model already holds prompt + 5 emitted tokens; 25 is fed next, at 8.
    EXPECT_CALL(model_, forward(8, TokensAre(ElementsAre(25)), SizeIs(1))).WillOnce(WriteNext({26}));
  }
  const DecodeResult result = decoder.generate(prompt, options);
  EXPECT_EQ(result.tokens, (std::vector<Token>{20, 21, 22, 23, 24, 25, 26}));
  EXPECT_EQ(result.stats.accepted, 4U);
  EXPECT_EQ(result.stats.accepted_at, (std::vector<std::size_t>{1, 1, 1, 1}));
  EXPECT_EQ(result.stats.decode_passes, 2U);
}

TEST_F(PinnedCalls, ZeroDraftsFeedOneTokenAndNeverRollBack) {
  const std::vector<Token> prompt = {5};
  SpeculativeDecoder decoder(model_, SilentDrafter{});
  DecodeOptions options;
  options.max_new_tokens = 3;
  {
    InSequence in_order;
    EXPECT_CALL(model_, rollback(0));
    EXPECT_CALL(model_, forward(0, TokensAre(ElementsAre(5)), SizeIs(1))).WillOnce(WriteNext({6}));
    EXPECT_CALL(model_, forward(1, TokensAre(ElementsAre(6)), SizeIs(1))).WillOnce(WriteNext({7}));
    EXPECT_CALL(model_, forward(2, TokensAre(ElementsAre(7)), SizeIs(1))).WillOnce(WriteNext({8}));
  }
  const DecodeResult result = decoder.generate(prompt, options);
  EXPECT_EQ(result.tokens, (std::vector<Token>{6, 7, 8}));
  EXPECT_EQ(result.stats.decode_passes, 2U);
  EXPECT_DOUBLE_EQ(result.stats.mean_accepted_length(), 1.0);
}

TEST_F(PinnedCalls, ChunkedPrefillWithMaxBatchTwo) {
  set_max_batch(2);
  const std::vector<Token> prompt = {1, 2, 3, 4, 5};
  // max_batch 2 leaves room for one draft a pass.
  SpeculativeDecoder decoder(model_, ScriptedDrafter({{6, {10, 77}}, {8, {99}}}));
  DecodeOptions options;
  options.max_new_tokens = 5;
  {
    InSequence in_order;
    EXPECT_CALL(model_, rollback(0));
    EXPECT_CALL(model_, forward(0, TokensAre(ElementsAre(1, 2)), SizeIs(2))).WillOnce(WriteNext({50, 51}));
    EXPECT_CALL(model_, forward(2, TokensAre(ElementsAre(3, 4)), SizeIs(2))).WillOnce(WriteNext({52, 53}));
    EXPECT_CALL(model_, forward(4, TokensAre(ElementsAre(5)), SizeIs(1))).WillOnce(WriteNext({9}));
    EXPECT_CALL(model_, forward(5, TokensAre(ElementsAre(9, 10)), SizeIs(2))).WillOnce(WriteNext({10, 11}));
    EXPECT_CALL(model_, forward(7, TokensAre(ElementsAre(11, 99)), SizeIs(2))).WillOnce(WriteNext({12, 13}));
    EXPECT_CALL(model_, rollback(8));
    EXPECT_CALL(model_, forward(8, TokensAre(ElementsAre(12)), SizeIs(1))).WillOnce(WriteNext({14}));
  }
  const DecodeResult result = decoder.generate(prompt, options);
  EXPECT_EQ(result.tokens, (std::vector<Token>{9, 10, 11, 12, 14}));
  EXPECT_EQ(result.stats.prefill_passes, 3U);
  EXPECT_EQ(result.stats.decode_passes, 3U);
  EXPECT_EQ(result.stats.drafted, 2U);
  EXPECT_EQ(result.stats.accepted, 1U);
}

TEST_F(PinnedCalls, StopTokenInTheMiddleOfAnAcceptedRun) {
  const std::vector<Token> prompt = {1, 2, 3};
  SpeculativeDecoder decoder(model_, ScriptedDrafter({{4, {6, 7, 8, 9}}}));
  DecodeOptions options;
  options.max_new_tokens = 10;
  options.stop_tokens = {7};
  {
    InSequence in_order;
    EXPECT_CALL(model_, rollback(0));
    EXPECT_CALL(model_, forward(0, TokensAre(ElementsAre(1, 2, 3)), SizeIs(3))).WillOnce(WriteNext({0, 0, 5}));
    EXPECT_CALL(model_, forward(3, TokensAre(ElementsAre(5, 6, 7, 8, 9)), SizeIs(5)))
        .WillOnce(WriteNext({6, 7, 8, 9, 10}));
    // All four drafts match, but 7 stops: emit 6 7, keep prompt + 5 6.
    EXPECT_CALL(model_, rollback(5));
  }
  const DecodeResult result = decoder.generate(prompt, options);
  EXPECT_EQ(result.tokens, (std::vector<Token>{5, 6, 7}));
  EXPECT_EQ(result.stop_reason, StopReason::stop_token);
  EXPECT_EQ(result.stats.drafted, 4U);
  EXPECT_EQ(result.stats.accepted, 2U);
}

TEST_F(PinnedCalls, RejectedFirstDraftRollsBackEveryDraft) {
  const std::vector<Token> prompt = {1};
  SpeculativeDecoder decoder(model_, ScriptedDrafter({{2, {7, 8, 9}}}));
  DecodeOptions options;
  options.max_new_tokens = 4;
  {
    InSequence in_order;
    EXPECT_CALL(model_, rollback(0));
    EXPECT_CALL(model_, forward(0, TokensAre(ElementsAre(1)), SizeIs(1))).WillOnce(WriteNext({2}));
    // 3 tokens may follow: 2 drafts and the model's own; the third draft is cut off.
    EXPECT_CALL(model_, forward(1, TokensAre(ElementsAre(2, 7, 8)), SizeIs(3))).WillOnce(WriteNext({3, 4, 5}));
    EXPECT_CALL(model_, rollback(2));
    EXPECT_CALL(model_, forward(2, TokensAre(ElementsAre(3)), SizeIs(1))).WillOnce(WriteNext({4}));
    EXPECT_CALL(model_, forward(3, TokensAre(ElementsAre(4)), SizeIs(1))).WillOnce(WriteNext({5}));
  }
  const DecodeResult result = decoder.generate(prompt, options);
  EXPECT_EQ(result.tokens, (std::vector<Token>{2, 3, 4, 5}));
  EXPECT_EQ(result.stats.drafted, 2U);
  EXPECT_EQ(result.stats.accepted, 0U);
  EXPECT_EQ(result.stats.accepted_at, (std::vector<std::size_t>{0, 0}));
}

}  // namespace
}  // namespace ngramspec::test

namespace ngramspec::test {
namespace {

// A named drafter is borrowed: what it learns shows in the caller's object, and nothing is copied.
TEST(SpeculativeDecoderOwnership, ANamedDrafterIsBorrowedATemporaryIsOwned) {
  GreedyModel model(kCounter, 8);
  MatchDrafter drafter(MatchConfig{.index_capacity = 64});
  SpeculativeDecoder borrowing(model, drafter);
  EXPECT_TRUE(borrowing.borrows_drafter());
  EXPECT_EQ(&borrowing.drafter(), &drafter);
  const DecodeResult result = borrowing.generate({0, 1, 2});  // a braced prompt compiles
  EXPECT_EQ(result.tokens.size(), DecodeOptions{}.max_new_tokens);
  EXPECT_EQ(drafter.tokens_seen(), 3 + result.tokens.size());

  SpeculativeDecoder owning(model, MatchDrafter(MatchConfig{.index_capacity = 64}));
  EXPECT_FALSE(owning.borrows_drafter());
  static_assert(std::is_same_v<decltype(owning), SpeculativeDecoder<GreedyModel, MatchDrafter>>);
  SpeculativeDecoder defaulted(model);
  EXPECT_FALSE(defaulted.borrows_drafter());
  EXPECT_EQ(defaulted.generate({0, 1, 2}).tokens, result.tokens);
}

// DecodeOptions::max_drafts is the one setting of draft length: raising it drafts more.
TEST(SpeculativeDecoderDraftLength, MaxDraftsIsTheOneSetting) {
  GreedyModel model(kCounter, 64);
  SpeculativeDecoder decoder(model, OracleDrafter(kCounter));
  DecodeOptions options;
  options.max_new_tokens = 34;
  EXPECT_EQ(decoder.generate({0, 1}, options).stats.decode_passes, 33U / 5 + (33 % 5 != 0));
  options.max_drafts = 16;
  EXPECT_EQ(decoder.generate({0, 1}, options).stats.decode_passes, 2U);
}

// With a verify cost, every output is still plain greedy decoding, whatever the drafter and
// the curve; a pass that pays in full for every token drafts nothing; a flat one drafts what
// the drafter offers.
TEST(SpeculativeDecoderCost, GreedyIdentityUnderEveryCost) {
  const std::vector<std::string> costs = {"knee:1", "knee:4", "knee:1000", "table:1=1,2=1.25,3=1.71,5=2.77,9=5.06",
                                          "table:1=1,3=1,4=10"};
  for (std::uint64_t seed = 1; seed <= 150; ++seed) {
    const DecodeCase c = random_decode_case(seed);
    const std::string& spec = costs[seed % costs.size()];
    SCOPED_TRACE(c.describe() + " cost " + spec);
    const GreedyReference reference = plain_greedy(c.rule.rule, c.prompt, c.options);
    with_drafter(c, [&](auto drafter) {
      GreedyModel model(c.rule.rule, c.max_batch);
      SpeculativeDecoder decoder(model, std::move(drafter));
      decoder.set_verify_cost(VerifyCost::parse(spec));
      const DecodeResult result = decoder.generate(c.prompt, c.options);
      EXPECT_EQ(result.tokens, reference.tokens);
      EXPECT_EQ(result.stop_reason, reference.stop_reason);
      EXPECT_THAT(model.violations(), IsEmpty());
      if (spec == "knee:1") {
        EXPECT_EQ(result.stats.drafted, 0U);
      }
    });
  }
}

TEST(SpeculativeDecoderCost, AFlatCostSendsEverythingAndASteepOneOnlyLikelyDrafts) {
  // A copying model after a prompt of random tokens: some drafts right, some wrong.
  GreedyModel model(InductionRule{16}, 64);
  std::mt19937_64 rng(3);
  std::vector<Token> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(static_cast<Token>(rng() % 16));
  DecodeOptions options;
  options.max_new_tokens = 200;
  options.max_drafts = 8;
  SpeculativeDecoder decoder(model, MatchDrafter(MatchConfig{.index_capacity = 256, .min_confidence = 0}));
  const DecodeResult plain = decoder.generate(prompt, options);
  decoder.set_verify_cost(VerifyCost::knee(64));
  const DecodeResult flat = decoder.generate(prompt, options);
  EXPECT_EQ(flat.stats.drafted, plain.stats.drafted);
  decoder.set_verify_cost(VerifyCost::parse("table:1=1,2=1.25,3=1.71,5=2.77,9=5.06"));
  const DecodeResult cpu = decoder.generate(prompt, options);
  EXPECT_EQ(cpu.tokens, plain.tokens);
  EXPECT_LT(cpu.stats.rejected(), plain.stats.rejected());
  EXPECT_GT(cpu.stats.accepted, 0U);
}

// A learned cost (set_learned_cost) plans from the decoder's own timed forwards: every output
// is still plain greedy decoding, and every decode pass is observed once.
TEST(SpeculativeDecoderCost, GreedyIdentityWithALearnedCostThatSeesEveryPass) {
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    const DecodeCase c = random_decode_case(seed);
    SCOPED_TRACE(c.describe());
    const GreedyReference reference = plain_greedy(c.rule.rule, c.prompt, c.options);
    with_drafter(c, [&](auto drafter) {
      GreedyModel model(c.rule.rule, c.max_batch);
      SpeculativeDecoder decoder(model, std::move(drafter));
      LearnedCost learned(seed % 2 == 0 ? std::optional(VerifyCost::knee(64)) : std::nullopt);
      decoder.set_learned_cost(&learned);
      EXPECT_EQ(decoder.learned_cost(), &learned);
      const DecodeResult result = decoder.generate(c.prompt, c.options);
      EXPECT_EQ(result.tokens, reference.tokens);
      EXPECT_EQ(result.stop_reason, reference.stop_reason);
      EXPECT_THAT(model.violations(), IsEmpty());
      EXPECT_EQ(learned.passes(), result.stats.decode_passes);
    });
  }
}

}  // namespace
}  // namespace ngramspec::test
