#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "baselines/ngram_cache.hpp"
#include "baselines/prompt_lookup.hpp"
#include "ngramspec/speculative_decoder.hpp"

namespace ngramspec::test {
namespace {

using baselines::NGramCacheConfig;
using baselines::NGramCacheDrafter;
using baselines::Occurrence;
using baselines::PromptLookupConfig;
using baselines::PromptLookupDrafter;

static_assert(Drafter<PromptLookupDrafter>);
static_assert(Drafter<NGramCacheDrafter>);

using Tokens = std::vector<Token>;

// The drafter after observing `context`.
template <class D>
D observing(D drafter, const Tokens& context) {
  drafter.update(std::span<const Token>(context));
  return drafter;
}

// What the drafter proposes, given room for `room` tokens.
template <class D>
Tokens drafts_of(const D& drafter, std::size_t room = 64) {
  Tokens out(room, 0);
  const std::size_t n = drafter.predict(out);
  EXPECT_LE(n, room);
  out.resize(std::min(n, room));
  return out;
}

PromptLookupConfig lookup(std::size_t min_n, std::size_t max_n, std::size_t k,
                          Occurrence occurrence = Occurrence::earliest) {
  PromptLookupConfig config;
  config.min_n = min_n;
  config.max_n = max_n;
  config.max_drafts = k;
  config.occurrence = occurrence;
  return config;
}

// ---------------------------------------------------------------- prompt lookup, by hand

TEST(PromptLookup, EarliestAndLatestOccurrenceDraftDifferentContinuations) {
  // [2 3] occurs at 1, 4 and as the suffix; [5 2 3] only as the suffix.
  const Tokens context{1, 2, 3, 9, 2, 3, 8, 5, 2, 3};
  EXPECT_EQ(drafts_of(observing(PromptLookupDrafter(lookup(1, 3, 4, Occurrence::earliest)), context)),
            (Tokens{9, 2, 3, 8}));
  EXPECT_EQ(drafts_of(observing(PromptLookupDrafter(lookup(1, 3, 4, Occurrence::latest)), context)),
            (Tokens{8, 5, 2, 3}));
}

TEST(PromptLookup, LongestSuffixWinsOverAnEarlierShorterOne) {
  // [3 1 2] has no earlier occurrence; [1 2] occurs at 2 (then 5 3 1 2); [2] already at 0 (then 6 1 2 5).
  const Tokens context{2, 6, 1, 2, 5, 3, 1, 2};
  EXPECT_EQ(drafts_of(observing(PromptLookupDrafter(lookup(1, 3, 4)), context)), (Tokens{5, 3, 1, 2}));
  EXPECT_EQ(drafts_of(observing(PromptLookupDrafter(lookup(1, 1, 4)), context)), (Tokens{6, 1, 2, 5}));
}

TEST(PromptLookup, MinNRejectsShorterMatches) {
  // Only the last token, 9, recurs (at 1, followed by 6 9).
  const Tokens context{4, 9, 6, 9};
  EXPECT_EQ(drafts_of(observing(PromptLookupDrafter(baselines::vllm_ngram(1, 3, 4)), context)), (Tokens{6, 9}));
  EXPECT_TRUE(drafts_of(observing(PromptLookupDrafter(baselines::vllm_ngram(2, 3, 4)), context)).empty());
}

TEST(PromptLookup, VllmDocstringExampleStopsAtTheEndOfTheContext) {
  // vllm/v1/spec_decode/ngram_proposer.py: [1,2,3,4,2,3], min_n 2, max_n 3, k 4 -> [4,2,3].
  EXPECT_EQ(drafts_of(observing(PromptLookupDrafter(baselines::vllm_ngram(2, 3, 4)), Tokens{1, 2, 3, 4, 2, 3})),
            (Tokens{4, 2, 3}));
}

TEST(PromptLookup, VllmMaxModelLenCapsTheDrafts) {
  const Tokens context{1, 2, 3, 4, 5, 1, 2};  // [1 2] at 0 -> 3 4 5 1 2
  EXPECT_EQ(drafts_of(observing(PromptLookupDrafter(baselines::vllm_ngram(1, 3, 4, 9)), context)), (Tokens{3, 4}));
  EXPECT_TRUE(drafts_of(observing(PromptLookupDrafter(baselines::vllm_ngram(1, 3, 4, 7)), context)).empty());
  EXPECT_EQ(drafts_of(observing(PromptLookupDrafter(baselines::vllm_ngram(1, 3, 4, 0)), context)),
            (Tokens{3, 4, 5, 1}));
}

TEST(PromptLookup, OccurrenceMayOverlapTheSuffixUnlessAGapIsRequired) {
  // [8 8] has no earlier occurrence; [8] occurs at 1, right before the suffix.
  const Tokens context{7, 8, 8};
  EXPECT_EQ(drafts_of(observing(PromptLookupDrafter(lookup(1, 3, 4)), context)), (Tokens{8}));
  PromptLookupConfig gap = lookup(1, 3, 1);
  gap.require_gap_before_suffix = true;
  EXPECT_TRUE(drafts_of(observing(PromptLookupDrafter(gap), context)).empty());
  // [3 5] at 2 ends right where the suffix starts: the gap rule passes it over, and the
  // unigram [5] at 0 wins instead.
  const Tokens touching{5, 9, 3, 5, 3, 5};
  EXPECT_EQ(drafts_of(observing(PromptLookupDrafter(lookup(1, 3, 3)), touching)), (Tokens{3, 5}));
  gap.max_drafts = 3;
  EXPECT_EQ(drafts_of(observing(PromptLookupDrafter(gap), touching)), (Tokens{9, 3, 5}));
  // One token between the occurrence and the suffix is enough.
  EXPECT_EQ(drafts_of(observing(PromptLookupDrafter(gap), Tokens{3, 5, 9, 3, 5})), (Tokens{9, 3, 5}));
}

TEST(PromptLookup, FullDraftRuleSkipsOccurrencesNearTheEnd) {
  // [1 2] occurs at 6 with only 9 1 2 after it; [2] occurs at 0 with ten tokens after it.
  const Tokens context{2, 8, 8, 8, 8, 5, 1, 2, 9, 1, 2};
  PromptLookupConfig full = lookup(1, 3, 4);
  full.require_full_draft = true;
  EXPECT_EQ(drafts_of(observing(PromptLookupDrafter(full), context)), (Tokens{8, 8, 8, 8}));
  EXPECT_EQ(drafts_of(observing(PromptLookupDrafter(lookup(1, 3, 4)), context)), (Tokens{9, 1, 2}));
  // Nothing qualifies at all: no drafts, or the placeholder when one is configured.
  const Tokens short_context{5, 6, 1, 2, 9, 1, 2};
  EXPECT_TRUE(drafts_of(observing(PromptLookupDrafter(full), short_context)).empty());
  full.no_match_draft = Token{100};
  EXPECT_EQ(drafts_of(observing(PromptLookupDrafter(full), short_context)), (Tokens{100}));
}

TEST(PromptLookup, SpecBenchPldDraftsTenTokensOrThePlaceholder) {
  const PromptLookupDrafter pld(baselines::spec_bench_pld());
  EXPECT_EQ(drafts_of(observing(pld, Tokens{1, 2, 3})), (Tokens{100}));
  // [22 11 12] is new; [11 12] at 1 is followed by 13 .. 22, 11, 12.
  const Tokens context{10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 11, 12};
  EXPECT_EQ(drafts_of(observing(pld, context)), (Tokens{13, 14, 15, 16, 17, 18, 19, 20, 21, 22}));
  EXPECT_EQ(drafts_of(observing(pld, context), 3), (Tokens{13, 14, 15}));
}

TEST(PromptLookup, HuggingFaceCutsTheDraftBeforeEos) {
  const PromptLookupDrafter hf(baselines::hf_prompt_lookup(10, 2, {3}));
  EXPECT_EQ(drafts_of(observing(hf, Tokens{1, 2, 5, 3, 6, 1, 2})), (Tokens{5}));
  // The earliest occurrence is followed by EOS: no drafts, even though a later one is not.
  EXPECT_TRUE(drafts_of(observing(hf, Tokens{1, 2, 3, 1, 2, 6, 1, 2})).empty());
  // Its default matches at most two tokens: [3 1 2] would find 7, [1 2] finds 4 first.
  EXPECT_EQ(
      drafts_of(observing(PromptLookupDrafter(baselines::hf_prompt_lookup()), Tokens{1, 2, 4, 3, 1, 2, 7, 3, 1, 2}), 1),
      (Tokens{4}));
}

TEST(PromptLookup, ProposesAtMostTheRoomGivenAndMaxDrafts) {
  const Tokens context{1, 2, 3, 4, 5, 6, 7, 1, 2};
  EXPECT_EQ(drafts_of(observing(PromptLookupDrafter(lookup(1, 3, 5)), context)), (Tokens{3, 4, 5, 6, 7}));
  EXPECT_EQ(drafts_of(observing(PromptLookupDrafter(lookup(1, 3, 5)), context), 2), (Tokens{3, 4}));
  EXPECT_TRUE(drafts_of(observing(PromptLookupDrafter(lookup(1, 3, 5)), context), 0).empty());
}

TEST(PromptLookup, ResetForgetsAndSpanUpdateEqualsTokenUpdates) {
  const Tokens context{1, 2, 3, 4, 1, 2};
  PromptLookupDrafter one_by_one(lookup(1, 3, 4));
  for (const Token token : context) one_by_one.update(token);
  const PromptLookupDrafter at_once = observing(PromptLookupDrafter(lookup(1, 3, 4)), context);
  EXPECT_EQ(drafts_of(one_by_one), (Tokens{3, 4, 1, 2}));
  EXPECT_EQ(drafts_of(at_once), drafts_of(one_by_one));
  one_by_one.reset();
  EXPECT_TRUE(one_by_one.context().empty());
  EXPECT_TRUE(drafts_of(one_by_one).empty());
}

TEST(PromptLookup, RejectsInvalidConfigs) {
  EXPECT_THROW(PromptLookupDrafter{lookup(0, 3, 4)}, std::invalid_argument);
  EXPECT_THROW(PromptLookupDrafter{lookup(3, 2, 4)}, std::invalid_argument);
  EXPECT_THROW(PromptLookupDrafter{lookup(1, 3, 0)}, std::invalid_argument);
  EXPECT_NO_THROW(PromptLookupDrafter{lookup(2, 2, 1)});
}

// The published loops, transcribed literally: n from max_n down to min_n, occurrences in
// order (or reverse order), the first qualifying one supplies the drafts.
Tokens reference_lookup(const Tokens& context, const PromptLookupConfig& config, std::size_t room) {
  const std::size_t length = context.size();
  std::size_t limit = std::min(room, config.max_drafts);
  if (config.max_context != 0) limit = std::min(limit, config.max_context > length ? config.max_context - length : 0);
  if (limit == 0) return {};
  for (std::size_t n = config.max_n; n >= config.min_n; --n) {
    if (n >= length) continue;
    std::vector<std::size_t> starts;
    for (std::size_t s = 0; s + n < length; ++s) {  // s + n < length: not the suffix itself, one token follows
      if (std::equal(context.begin() + static_cast<std::ptrdiff_t>(s),
                     context.begin() + static_cast<std::ptrdiff_t>(s + n),
                     context.end() - static_cast<std::ptrdiff_t>(n))) {
        starts.push_back(s);
      }
    }
    if (config.occurrence == Occurrence::latest) std::reverse(starts.begin(), starts.end());
    for (const std::size_t s : starts) {
      const std::size_t end = s + n;
      if (config.require_full_draft && end + config.max_drafts > length) continue;
      if (config.require_gap_before_suffix && !(end < length - n)) continue;
      Tokens drafts;
      for (std::size_t i = end; i < length && drafts.size() < limit; ++i) {
        if (std::find(config.stop_tokens.begin(), config.stop_tokens.end(), context[i]) != config.stop_tokens.end()) {
          break;
        }
        drafts.push_back(context[i]);
      }
      return drafts;
    }
    if (n == 1) break;
  }
  if (config.no_match_draft) return {*config.no_match_draft};
  return {};
}

TEST(PromptLookup, MatchesTheLiteralLongestFirstLoopOnRandomContexts) {
  std::mt19937_64 rng(20240611);
  for (int trial = 0; trial < 3000; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    PromptLookupConfig config;
    config.min_n = 1 + rng() % 3;
    config.max_n = config.min_n + rng() % 3;
    config.max_drafts = 1 + rng() % 8;
    config.occurrence = rng() % 2 == 0 ? Occurrence::earliest : Occurrence::latest;
    config.require_full_draft = rng() % 3 == 0;
    config.require_gap_before_suffix = rng() % 3 == 0;
    if (rng() % 4 == 0) config.stop_tokens = {static_cast<Token>(rng() % 4)};
    if (rng() % 4 == 0) config.no_match_draft = Token{99};
    const std::size_t length = rng() % 40;
    if (rng() % 5 == 0) config.max_context = length + rng() % 6;
    const Token vocab = 2 + static_cast<Token>(rng() % 4);
    Tokens context(length);
    for (Token& token : context) token = static_cast<Token>(rng() % vocab);
    const std::size_t room = rng() % 10;
    const PromptLookupDrafter drafter = observing(PromptLookupDrafter(config), context);
    ASSERT_EQ(drafts_of(drafter, room), reference_lookup(context, config, room));
  }
}

// ---------------------------------------------------------------- n-gram cache, by hand

NGramCacheConfig cache_config(std::size_t k) {
  NGramCacheConfig config;
  config.max_drafts = k;
  return config;
}

TEST(NGramCache, ExtendsTheDraftThroughItsOwnDrafts) {
  // [3 4 5] -> 6 once (trigram: one sighting suffices), then the 4-grams [3 4 5 6] -> 2,
  // [4 5 6 2] -> 3, [5 6 2 3] -> 4, each seen once. The drafts are never counted.
  const Tokens context{3, 4, 5, 6, 2, 3, 4, 5};
  EXPECT_EQ(drafts_of(observing(NGramCacheDrafter(cache_config(4)), context)), (Tokens{6, 2, 3, 4}));
  EXPECT_EQ(drafts_of(observing(NGramCacheDrafter(cache_config(4)), context), 2), (Tokens{6, 2}));
  EXPECT_EQ(drafts_of(observing(NGramCacheDrafter(baselines::llama_cpp_lookup(3)), context)), (Tokens{6, 2, 3}));
}

TEST(NGramCache, BigramAndUnigramNeedTwoSightings) {
  // [4 5] -> 6 and [5] -> 6 were each seen once; the longer n-grams never.
  const Tokens context{4, 5, 6, 3, 4, 5};
  EXPECT_TRUE(drafts_of(observing(NGramCacheDrafter(cache_config(4)), context)).empty());
  NGramCacheConfig loose = cache_config(1);
  loose.min_samples = {1, 1, 1, 1};
  EXPECT_EQ(drafts_of(observing(NGramCacheDrafter(loose), context)), (Tokens{6}));
}

TEST(NGramCache, UnigramNeedsTwoThirdsShare) {
  // Only the unigram [1] was seen; its continuations decide.
  EXPECT_TRUE(drafts_of(observing(NGramCacheDrafter(cache_config(1)), Tokens{1, 9, 1, 8, 1, 7, 1})).empty());  // 1/3
  EXPECT_TRUE(drafts_of(observing(NGramCacheDrafter(cache_config(1)), Tokens{1, 9, 1, 8, 1})).empty());        // 1/2
  EXPECT_EQ(drafts_of(observing(NGramCacheDrafter(cache_config(1)), Tokens{1, 9, 1, 9, 1, 8, 1})),
            (Tokens{9}));  // 2/3 >= 66%
  NGramCacheConfig strict = cache_config(1);
  strict.min_percent[0] = 67;
  EXPECT_TRUE(drafts_of(observing(NGramCacheDrafter(strict), Tokens{1, 9, 1, 9, 1, 8, 1})).empty());
}

TEST(NGramCache, AnEvenSplitPassesTheFiftyPercentShare) {
  // [9 1 2] -> 3 once and -> 4 once: 50% is enough for a trigram, and either may be drafted
  // (llama.cpp keeps whichever its hash map iterates first).
  NGramCacheConfig trigram_only = cache_config(1);
  trigram_only.min_n = 3;
  trigram_only.max_n = 3;
  const Tokens drafts =
      drafts_of(observing(NGramCacheDrafter(trigram_only), Tokens{5, 9, 1, 2, 3, 9, 1, 2, 4, 6, 9, 1, 2}));
  ASSERT_EQ(drafts.size(), 1u);
  EXPECT_TRUE(drafts[0] == 3 || drafts[0] == 4) << drafts[0];
  trigram_only.min_percent[2] = 51;
  EXPECT_TRUE(
      drafts_of(observing(NGramCacheDrafter(trigram_only), Tokens{5, 9, 1, 2, 3, 9, 1, 2, 4, 6, 9, 1, 2})).empty());
}

TEST(NGramCache, LongestQualifyingNGramOverridesTheMajority) {
  // [5 1 2] -> 8 once; [2] -> 7 three times and 8 once.
  const Tokens context{5, 1, 2, 8, 6, 1, 2, 7, 6, 1, 2, 7, 6, 1, 2, 7, 5, 1, 2};
  EXPECT_EQ(drafts_of(observing(NGramCacheDrafter(cache_config(1)), context)), (Tokens{8}));
  NGramCacheConfig unigram_only = cache_config(1);
  unigram_only.max_n = 1;
  EXPECT_EQ(drafts_of(observing(NGramCacheDrafter(unigram_only), context)), (Tokens{7}));  // 3/4 >= 66%
}

TEST(NGramCache, StopsAtTheFirstStepWithoutAQualifyingNGram) {
  // [6 1 2] -> 3 three times; then every n-gram ending in 3 has 4, 5, 7 once each (33%).
  const Tokens context{6, 1, 2, 3, 4, 6, 1, 2, 3, 5, 6, 1, 2, 3, 7, 6, 1, 2};
  EXPECT_EQ(drafts_of(observing(NGramCacheDrafter(cache_config(8)), context)), (Tokens{3}));
}

TEST(NGramCache, ShortContexts) {
  EXPECT_TRUE(drafts_of(observing(NGramCacheDrafter(cache_config(3)), Tokens{})).empty());
  EXPECT_TRUE(drafts_of(observing(NGramCacheDrafter(cache_config(3)), Tokens{5})).empty());
  EXPECT_TRUE(drafts_of(observing(NGramCacheDrafter(cache_config(3)), Tokens{5, 5})).empty());  // [5] -> 5 once
  // [5] -> 5 twice; the bigram [5 5] -> 5 was seen once, too few, so the unigram drafts.
  EXPECT_EQ(drafts_of(observing(NGramCacheDrafter(cache_config(3)), Tokens{5, 5, 5})), (Tokens{5, 5, 5}));
}

TEST(NGramCache, CountsEveryNGramOnceAndResetForgets) {
  NGramCacheDrafter drafter(cache_config(4));
  drafter.update(Tokens{1, 2, 1, 2});
  // Contexts: [1] [2] | [1 2] [2 1] | [1 2 1] (the suffix n-grams have no continuation yet).
  EXPECT_EQ(drafter.ngrams(), 5u);
  EXPECT_EQ(drafter.tokens_seen(), 4u);
  drafter.reset();
  EXPECT_EQ(drafter.ngrams(), 0u);
  EXPECT_EQ(drafter.tokens_seen(), 0u);
  EXPECT_TRUE(drafts_of(drafter).empty());
}

TEST(NGramCache, RejectsInvalidConfigs) {
  NGramCacheConfig config;
  config.min_n = 0;
  EXPECT_THROW(NGramCacheDrafter{config}, std::invalid_argument);
  config = {};
  config.max_n = 5;
  EXPECT_THROW(NGramCacheDrafter{config}, std::invalid_argument);
  config = {};
  config.min_n = 3;
  config.max_n = 2;
  EXPECT_THROW(NGramCacheDrafter{config}, std::invalid_argument);
  config = {};
  config.max_drafts = 0;
  EXPECT_THROW(NGramCacheDrafter{config}, std::invalid_argument);
  config = {};
  config.min_percent[2] = 101;
  EXPECT_THROW(NGramCacheDrafter{config}, std::invalid_argument);
  EXPECT_NO_THROW(NGramCacheDrafter{NGramCacheConfig{}});
}

// Recounts the whole context at every step and checks each draft against the thresholds;
// where continuations tie, any of the tied tokens is accepted and the check follows the
// drafter's choice (llama.cpp breaks ties by hash-map iteration order).
void check_against_recount(const Tokens& context, const NGramCacheConfig& config, const Tokens& drafts,
                           std::size_t room) {
  Tokens sequence = context;
  const std::size_t limit = std::min(room, config.max_drafts);
  for (std::size_t step = 0;; ++step) {
    std::vector<Token> allowed;
    for (std::size_t n = config.max_n; n >= config.min_n && allowed.empty(); --n) {
      if (n <= sequence.size()) {
        std::map<Token, std::uint64_t> counts;
        std::uint64_t total = 0;
        for (std::size_t i = n; i < context.size(); ++i) {  // only the observed context is counted
          if (std::equal(context.begin() + static_cast<std::ptrdiff_t>(i - n),
                         context.begin() + static_cast<std::ptrdiff_t>(i),
                         sequence.end() - static_cast<std::ptrdiff_t>(n))) {
            ++counts[context[i]];
            ++total;
          }
        }
        std::uint64_t best = 0;
        for (const auto& [token, count] : counts) best = std::max(best, count);
        if (total > 0 && total >= config.min_samples[n - 1] && 100 * best >= config.min_percent[n - 1] * total) {
          for (const auto& [token, count] : counts) {
            if (count == best) allowed.push_back(token);
          }
        }
      }
      if (n == 1) break;
    }
    if (step == limit || allowed.empty()) {
      ASSERT_EQ(drafts.size(), step) << "the draft should end here";
      return;
    }
    ASSERT_LT(step, drafts.size()) << "the draft ended early";
    ASSERT_NE(std::find(allowed.begin(), allowed.end(), drafts[step]), allowed.end()) << "step " << step;
    sequence.push_back(drafts[step]);
  }
}

TEST(NGramCache, MatchesARecountOnRandomContexts) {
  std::mt19937_64 rng(777001);
  for (int trial = 0; trial < 1500; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    NGramCacheConfig config;
    config.min_n = 1 + rng() % 2;
    config.max_n = config.min_n + rng() % (5 - config.min_n);
    config.max_drafts = 1 + rng() % 12;
    if (rng() % 2 == 0) {
      for (auto& samples : config.min_samples) samples = static_cast<std::uint32_t>(rng() % 4);
      for (auto& percent : config.min_percent) percent = static_cast<std::uint32_t>(rng() % 101);
    }
    const Token vocab = 2 + static_cast<Token>(rng() % 4);
    Tokens context(rng() % 60);
    for (Token& token : context) token = static_cast<Token>(rng() % vocab);
    const std::size_t room = rng() % 14;
    // Token by token and all at once must agree, with each other and with the recount.
    NGramCacheDrafter one_by_one(config);
    for (const Token token : context) one_by_one.update(token);
    const Tokens drafts = drafts_of(observing(NGramCacheDrafter(config), context), room);
    ASSERT_EQ(drafts_of(one_by_one, room), drafts);
    check_against_recount(context, config, drafts, room);
  }
}

// ---------------------------------------------------------------- greedy identity

// A toy model: the next token is a fixed function of the last two tokens, except at every
// seventh position, where a second table takes over. The greedy output soon repeats, so the
// lookup drafters find matches, and the second table makes some of them wrong.
class ChainModel {
 public:
  ChainModel(Token vocab, std::uint64_t seed, std::size_t max_batch) : vocab_(vocab), max_batch_(max_batch) {
    std::mt19937_64 rng(seed);
    for (auto* table : {&table_, &detour_}) {
      table->resize(static_cast<std::size_t>(vocab) * vocab);
      for (Token& token : *table) token = static_cast<Token>(rng() % vocab);
    }
  }

  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) {
    ASSERT_EQ(pos, held_.size());
    ASSERT_GE(tokens.size(), 1u);
    ASSERT_LE(tokens.size(), max_batch_);
    ASSERT_EQ(tokens.size(), next.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      held_.push_back(tokens[i]);
      next[i] = successor(held_);
    }
  }
  void rollback(std::size_t pos) {
    ASSERT_LE(pos, held_.size());
    held_.resize(pos);
  }
  [[nodiscard]] std::size_t max_batch() const { return max_batch_; }

  // The model's token after `sequence`.
  [[nodiscard]] Token successor(std::span<const Token> sequence) const {
    // Tokens outside the vocabulary (Spec-Bench's placeholder draft) are folded into it.
    const Token last = sequence.back() % vocab_;
    const Token before = sequence.size() >= 2 ? sequence[sequence.size() - 2] % vocab_ : 0;
    const auto& table = sequence.size() % 7 == 0 ? detour_ : table_;
    return table[static_cast<std::size_t>(before) * vocab_ + last];
  }

 private:
  Token vocab_;
  std::size_t max_batch_;
  std::vector<Token> table_;
  std::vector<Token> detour_;
  std::vector<Token> held_;
};

// Plain greedy decoding, written out without the decoder.
Tokens greedy(const ChainModel& model, const Tokens& prompt, const DecodeOptions& options) {
  Tokens sequence = prompt;
  Tokens output;
  while (output.size() < options.max_new_tokens) {
    const Token token = model.successor(sequence);
    sequence.push_back(token);
    output.push_back(token);
    if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), token) != options.stop_tokens.end()) break;
  }
  return output;
}

template <class D>
void check_greedy_identity(const std::string& name, const std::function<D()>& make) {
  SCOPED_TRACE(name);
  std::mt19937_64 rng(4242);
  std::size_t accepted = 0;
  std::size_t rejected = 0;
  for (int trial = 0; trial < 150; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const Token vocab = 2 + static_cast<Token>(rng() % 6);
    ChainModel model(vocab, rng(), 1 + rng() % 20);
    Tokens prompt(1 + rng() % 30);
    for (Token& token : prompt) token = static_cast<Token>(rng() % vocab);
    DecodeOptions options;
    options.max_new_tokens = rng() % 90;
    options.max_drafts = 1 + rng() % 16;
    if (rng() % 3 == 0) options.stop_tokens = {static_cast<Token>(rng() % vocab)};

    SpeculativeDecoder<ChainModel, D> decoder(model, make());
    const DecodeResult result = decoder.generate(prompt, options);
    ASSERT_EQ(result.tokens, greedy(model, prompt, options));
    ASSERT_EQ(result.stats.generated, result.tokens.size());
    accepted += result.stats.accepted;
    rejected += result.stats.rejected();
  }
  // The cases must exercise both outcomes, or the identity would hold trivially.
  EXPECT_GT(accepted, 100u);
  EXPECT_GT(rejected, 100u);
}

TEST(GreedyIdentity, PromptLookupConfigurations) {
  check_greedy_identity<PromptLookupDrafter>("spec_bench_pld",
                                             [] { return PromptLookupDrafter(baselines::spec_bench_pld()); });
  check_greedy_identity<PromptLookupDrafter>("vllm 1..4 k4",
                                             [] { return PromptLookupDrafter(baselines::vllm_ngram(1, 4, 4)); });
  check_greedy_identity<PromptLookupDrafter>("vllm 2..3 k8 max_model_len 60",
                                             [] { return PromptLookupDrafter(baselines::vllm_ngram(2, 3, 8, 60)); });
  check_greedy_identity<PromptLookupDrafter>(
      "hf 10/2 eos 1", [] { return PromptLookupDrafter(baselines::hf_prompt_lookup(10, 2, {1})); });
  check_greedy_identity<PromptLookupDrafter>("latest 1..3 k4",
                                             [] { return PromptLookupDrafter(lookup(1, 3, 4, Occurrence::latest)); });
}

TEST(GreedyIdentity, NGramCacheConfigurations) {
  check_greedy_identity<NGramCacheDrafter>("llama.cpp k4",
                                           [] { return NGramCacheDrafter(baselines::llama_cpp_lookup(4)); });
  check_greedy_identity<NGramCacheDrafter>("llama.cpp k16",
                                           [] { return NGramCacheDrafter(baselines::llama_cpp_lookup(16)); });
  check_greedy_identity<NGramCacheDrafter>("llama.cpp 2..3 k8", [] {
    NGramCacheConfig config = baselines::llama_cpp_lookup(8);
    config.min_n = 2;
    config.max_n = 3;
    return NGramCacheDrafter(config);
  });
}

}  // namespace
}  // namespace ngramspec::test
