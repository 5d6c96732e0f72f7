// The C ABI's sampler (ngramspec_sampler_*): options and refusals, greedy and exact-mode
// verification against TokenSampler, and a chi-square test that rejection verification through
// the C ABI keeps the target's distribution, which fails when the drafts' q is not passed.

#include "ngramspec/ngramspec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ngramspec/detail/physical_memory.hpp"
#include "ngramspec/draft_distribution.hpp"
#include "ngramspec/sampling_options.hpp"
#include "ngramspec/token.hpp"
#include "ngramspec/token_sampler.hpp"
#include "support/allocation_counter.hpp"
#include "support/c_api_checks.hpp"
#include "support/chi_square.hpp"
#include "support/last_token_target.hpp"

namespace ngramspec::test {
namespace {

struct SamplerFree {
  void operator()(ngramspec_sampler* p) const noexcept { ngramspec_sampler_free(p); }
};
using SamplerPtr = std::unique_ptr<ngramspec_sampler, SamplerFree>;

SamplerPtr make_sampler(const ngramspec_sampling_options* options, std::size_t vocab) {
  ngramspec_sampler* p = nullptr;
  EXPECT_EQ(ngramspec_sampler_create(options, vocab, &p), NGRAMSPEC_OK) << ngramspec_last_error();
  return SamplerPtr(p);
}

ngramspec_sampling_options options_of(float temperature, std::size_t top_k, float top_p, float min_p,
                                      std::uint64_t seed, int mode) {
  ngramspec_sampling_options o = ngramspec_sampling_options_default();
  o.temperature = temperature;
  o.top_k = top_k;
  o.top_p = top_p;
  o.min_p = min_p;
  o.seed = seed;
  o.mode = mode;
  return o;
}

SamplingOptions to_cpp(const ngramspec_sampling_options& o) {
  SamplingOptions c;
  c.temperature = o.temperature;
  c.top_k = o.top_k;
  c.top_p = o.top_p;
  c.min_p = o.min_p;
  c.seed = o.seed;
  c.mode = o.mode == NGRAMSPEC_SAMPLING_REJECTION ? SamplingMode::rejection : SamplingMode::exact;
  return c;
}

/// One verify_chain call's inputs: rows of logits, drafts, and their q as offsets into supports.
struct Chain {
  std::vector<float> logits;
  std::vector<Token> drafts;
  std::vector<std::size_t> q_offsets;  // empty: q_offsets NULL
  std::vector<Token> q_tokens;
  std::vector<float> q_probabilities;
};

/// What verify_chain returned: the drafts accepted and the token after them.
struct Verified {
  std::size_t accepted = 0;
  Token next = 0;
};

ngramspec_status verify(ngramspec_sampler* sampler, const Chain& c, std::uint64_t position, Verified& out) {
  return ngramspec_sampler_verify_chain(sampler, c.logits.data(), c.logits.size(), position, c.drafts.data(),
                                        c.drafts.size(), c.q_offsets.empty() ? nullptr : c.q_offsets.data(),
                                        c.q_tokens.data(), c.q_probabilities.data(), c.q_tokens.size(), &out.accepted,
                                        &out.next);
}

/// A random chain of up to 6 drafts over `vocab` tokens, with rows of logits in [-3, 3] (some
/// masked), and each draft's q a random support that mostly holds the draft (an empty one now
/// and then: chosen).
Chain random_chain(std::mt19937_64& rng, std::size_t vocab) {
  Chain c;
  const std::size_t n = rng() % 7;
  std::uniform_real_distribution<float> logit(-3.0f, 3.0f);
  c.logits.resize((n + 1) * vocab);
  for (float& l : c.logits) l = rng() % 13 == 0 ? -std::numeric_limits<float>::infinity() : logit(rng);
  for (std::size_t r = 0; r <= n; ++r) c.logits[r * vocab + rng() % vocab] = 2.5f;  // no row fully masked
  c.q_offsets.push_back(0);
  for (std::size_t i = 0; i < n; ++i) {
    c.drafts.push_back(static_cast<Token>(rng() % 17 == 0 ? vocab + rng() % 3 : rng() % vocab));
    const std::size_t support = rng() % 5 == 0 ? 0 : 1 + rng() % 4;
    for (std::size_t s = 0; s < support; ++s) {
      c.q_tokens.push_back(s == 0 && rng() % 4 != 0 ? c.drafts.back() : static_cast<Token>(rng() % vocab));
      c.q_probabilities.push_back(0.05f + static_cast<float>(rng() % 100) / 100.0f);
    }
    c.q_offsets.push_back(c.q_tokens.size());
  }
  return c;
}

// ---- Options and refusals ------------------------------------------------------------------------

TEST(CApiSampling, OptionDefaultsAreTheCppDefaults) {
  const ngramspec_sampling_options c = ngramspec_sampling_options_default();
  const SamplingOptions cpp;
  EXPECT_EQ(c.struct_size, sizeof(ngramspec_sampling_options));
  EXPECT_EQ(c.temperature, cpp.temperature);
  EXPECT_EQ(c.top_k, cpp.top_k);
  EXPECT_EQ(c.top_p, cpp.top_p);
  EXPECT_EQ(c.min_p, cpp.min_p);
  EXPECT_EQ(c.seed, cpp.seed);
  EXPECT_EQ(c.mode, NGRAMSPEC_SAMPLING_EXACT);
  EXPECT_EQ(NGRAMSPEC_MAX_SUPPORT, DraftDistributions::kMaxSupport);
}

// Every struct_size is one that a program built against a version's header sets (its sizeof, or the end of
// its last field: one version so far) or refused naming the sizes read.
TEST(CApiSampling, EveryStructSizeIsAVersionsOrRefusedNamingTheSizes) {
  if (sizeof(std::size_t) != 8 || alignof(ngramspec_sampling_options) != 8) GTEST_SKIP() << "sizes of LP64";
  for (std::size_t size = 0; size <= sizeof(ngramspec_sampling_options) + 16; ++size) {
    SCOPED_TRACE("struct_size = " + std::to_string(size));
    ngramspec_sampling_options o = ngramspec_sampling_options_default();
    o.struct_size = size;
    ngramspec_sampler* p = nullptr;
    if (size != 44 && size != 48) {
      EXPECT_INVALID(ngramspec_sampler_create(&o, 16, &p),
                     "ngramspec_sampler_create: options->struct_size = " + std::to_string(size) + " is invalid",
                     "one of 44, 48 (48: sizeof(ngramspec_sampling_options)");
      EXPECT_EQ(p, nullptr);
      continue;
    }
    ASSERT_C_OK(ngramspec_sampler_create(&o, 16, &p));
    ngramspec_sampler_free(p);
  }
}

// ngramspec_sampling_options_init over a struct of every size followed by guard bytes: a version's size (its
// sizeof or the end of its last field) gets the defaults of its fields, its tail padding up to the size zeroed,
// struct_size set, not one byte past the size written, and a sampler made with it is the default one (greedy);
// any other size, or NULL, is refused by name with nothing written.
TEST(CApiSampling, InitWritesTheDefaultsOfTheVersionOfItsSizeAndNothingPastIt) {
  if (sizeof(std::size_t) != 8 || alignof(ngramspec_sampling_options) != 8) GTEST_SKIP() << "sizes of LP64";
  struct Field {
    std::size_t offset;
    std::size_t size;
  };
  const Field fields[] = {
      {offsetof(ngramspec_sampling_options, temperature), sizeof(float)},
      {offsetof(ngramspec_sampling_options, top_k), sizeof(std::size_t)},
      {offsetof(ngramspec_sampling_options, top_p), sizeof(float)},
      {offsetof(ngramspec_sampling_options, min_p), sizeof(float)},
      {offsetof(ngramspec_sampling_options, seed), sizeof(std::uint64_t)},
      {offsetof(ngramspec_sampling_options, mode), sizeof(int)},
  };
  constexpr std::size_t kEnd = 44;  // of the one version's last field
  const ngramspec_sampling_options defaults = ngramspec_sampling_options_default();
  const auto* const expected = reinterpret_cast<const unsigned char*>(&defaults);
  constexpr unsigned char kGuard = 0xA5;
  const std::array<float, 6> logits = {0.1f, 0.4f, 2.0f, -1.0f, 1.9f, 0.0f};
  for (std::size_t size = 0; size <= sizeof(ngramspec_sampling_options) + 16; ++size) {
    SCOPED_TRACE("struct_size = " + std::to_string(size));
    alignas(ngramspec_sampling_options) unsigned char bytes[sizeof(ngramspec_sampling_options) + 32];
    std::memset(bytes, kGuard, sizeof bytes);
    auto* const options = reinterpret_cast<ngramspec_sampling_options*>(bytes);
    if (size != kEnd && size != 48) {
      EXPECT_INVALID(ngramspec_sampling_options_init(options, size),
                     "ngramspec_sampling_options_init: struct_size = " + std::to_string(size) + " is invalid",
                     "one of 44, 48 (48: sizeof(ngramspec_sampling_options)");
      for (const unsigned char b : bytes) ASSERT_EQ(b, kGuard);
      continue;
    }
    ASSERT_C_OK(ngramspec_sampling_options_init(options, size));
    EXPECT_EQ(options->struct_size, size);
    for (const Field& f : fields) {
      EXPECT_EQ(std::memcmp(bytes + f.offset, expected + f.offset, f.size), 0) << "the field at " << f.offset;
    }
    for (std::size_t i = kEnd; i < size; ++i) EXPECT_EQ(bytes[i], 0) << "tail padding byte " << i;
    for (std::size_t i = size; i < sizeof bytes; ++i) ASSERT_EQ(bytes[i], kGuard) << "byte " << i;
    const SamplerPtr sampler = make_sampler(options, logits.size());
    ASSERT_NE(sampler, nullptr);
    for (std::uint64_t position = 0; position < 4; ++position) {
      std::size_t accepted = 99;
      Token next = 99;
      ASSERT_C_OK(ngramspec_sampler_verify_chain(sampler.get(), logits.data(), logits.size(), position, nullptr, 0,
                                                 nullptr, nullptr, nullptr, 0, &accepted, &next));
      EXPECT_EQ(accepted, 0U);
      EXPECT_EQ(next, 2U);  // greedy: the argmax
    }
  }
  EXPECT_INVALID(ngramspec_sampling_options_init(nullptr, sizeof(ngramspec_sampling_options)),
                 "ngramspec_sampling_options_init: options is NULL");
}

// A vocabulary whose scratch (12 bytes a token) is larger than the machine's memory is refused before
// anything is allocated, naming the vocabulary and the memory, as a tree batch's tables are.
TEST(CApiSampling, AVocabularyBeyondTheMachinesMemoryIsRefusedBeforeAllocating) {
  if (sizeof(std::size_t) < 8) GTEST_SKIP() << "2^32 tokens: a 64-bit size_t";
  const std::size_t vocab = std::size_t{1} << 32;
  const std::size_t machine = detail::physical_memory_bytes();
  if (machine == 0 || machine / 12 >= vocab) GTEST_SKIP() << "this machine has the memory for 2^32 tokens' scratch";
  ngramspec_sampler* out = nullptr;
  EXPECT_INVALID(ngramspec_sampler_create(nullptr, vocab, &out),
                 "ngramspec_sampler_create: TokenSampler: vocab_size = 4294967296 takes 51539607552 bytes",
                 "more than this machine's memory (" + std::to_string(machine) + " bytes)");
  EXPECT_EQ(out, nullptr);
}

TEST(CApiSampling, BadOptionsAreRefusedNamingTheFieldAndValue) {
  ngramspec_sampler* out = reinterpret_cast<ngramspec_sampler*>(&out);  // a value no failing call may replace
  ngramspec_sampler* const untouched = out;
  ngramspec_sampling_options o = ngramspec_sampling_options_default();
  o.struct_size = 8;
  EXPECT_INVALID(ngramspec_sampler_create(&o, 16, &out), "ngramspec_sampler_create: options->struct_size = 8",
                 "sizeof(ngramspec_sampling_options)");
  o = ngramspec_sampling_options_default();
  o.mode = 7;
  EXPECT_INVALID(ngramspec_sampler_create(&o, 16, &out), "ngramspec_sampler_create: options->mode = 7 is invalid",
                 "NGRAMSPEC_SAMPLING_REJECTION (1)");
  o = options_of(-1.0f, 0, 1.0f, 0.0f, 0, NGRAMSPEC_SAMPLING_REJECTION);
  EXPECT_INVALID(ngramspec_sampler_create(&o, 16, &out),
                 "ngramspec_sampler_create: SamplingOptions::temperature = -1 is invalid");
  o = options_of(1.0f, 0, 0.0f, 0.0f, 0, NGRAMSPEC_SAMPLING_REJECTION);
  EXPECT_INVALID(ngramspec_sampler_create(&o, 16, &out), "SamplingOptions::top_p = 0 is invalid");
  o = options_of(1.0f, 0, 1.0f, 1.0f, 0, NGRAMSPEC_SAMPLING_REJECTION);
  EXPECT_INVALID(ngramspec_sampler_create(&o, 16, &out), "SamplingOptions::min_p = 1 is invalid");
  EXPECT_INVALID(ngramspec_sampler_create(nullptr, 0, &out), "ngramspec_sampler_create: ",
                 "the vocabulary size is 0");
  EXPECT_EQ(out, untouched);
  EXPECT_INVALID(ngramspec_sampler_create(nullptr, 16, nullptr), "ngramspec_sampler_create: out is NULL");

  // set_options: refused options change nothing; the sampler stays greedy and goes on.
  const SamplerPtr sampler = make_sampler(nullptr, 4);
  o = ngramspec_sampling_options_default();
  o.mode = -1;
  EXPECT_INVALID(ngramspec_sampler_set_options(sampler.get(), &o), "ngramspec_sampler_set_options: options->mode = -1");
  o = options_of(std::numeric_limits<float>::quiet_NaN(), 0, 1.0f, 0.0f, 0, NGRAMSPEC_SAMPLING_EXACT);
  EXPECT_INVALID(ngramspec_sampler_set_options(sampler.get(), &o), "SamplingOptions::temperature = nan");
  EXPECT_INVALID(ngramspec_sampler_set_options(nullptr, nullptr), "ngramspec_sampler_set_options: sampler is NULL");
  const Chain greedy{{0.0f, 1.0f, 0.5f, 0.0f}, {}, {}, {}, {}};
  for (std::uint64_t position = 0; position < 50; ++position) {
    Verified v;
    ASSERT_C_OK(verify(sampler.get(), greedy, position, v));
    EXPECT_EQ(v.accepted, 0u);
    EXPECT_EQ(v.next, 1u);
  }
}

TEST(CApiSampling, BadVerifyCallsNameWhatIsWrongWriteNothingAndTheSamplerGoesOn) {
  const ngramspec_sampling_options o = options_of(1.0f, 0, 1.0f, 0.0f, 3, NGRAMSPEC_SAMPLING_REJECTION);
  const SamplerPtr sampler = make_sampler(&o, 4);
  ngramspec_sampler* const s = sampler.get();
  const std::vector<float> rows(12, 0.0f);  // three rows of four
  const std::array<Token, 2> drafts{1, 2};
  const std::array<std::size_t, 3> offsets{0, 2, 3};
  const std::array<Token, 3> tokens{1, 3, 2};
  const std::array<float, 3> probabilities{0.5f, 0.5f, 1.0f};
  std::size_t accepted = 77;
  Token next = 99;
  const auto call = [&](const float* logits, std::size_t n_logits, const Token* d, std::size_t n_drafts,
                        const std::size_t* q_offsets, const Token* q_tokens, const float* q_probabilities,
                        std::size_t n_q) {
    return ngramspec_sampler_verify_chain(s, logits, n_logits, 10, d, n_drafts, q_offsets, q_tokens, q_probabilities,
                                          n_q, &accepted, &next);
  };
  const char* const where = "ngramspec_sampler_verify_chain: ";
  EXPECT_INVALID(ngramspec_sampler_verify_chain(nullptr, rows.data(), 12, 0, drafts.data(), 2, nullptr, nullptr,
                                                nullptr, 0, &accepted, &next),
                 "ngramspec_sampler_verify_chain: sampler is NULL");
  EXPECT_INVALID(call(nullptr, 12, drafts.data(), 2, nullptr, nullptr, nullptr, 0), where,
                 "logits is NULL but n_logits = 12");
  EXPECT_INVALID(call(rows.data(), 8, drafts.data(), 2, nullptr, nullptr, nullptr, 0), where,
                 "n_logits = 8 is invalid: it must be (n_drafts + 1) x vocab_size = (2 + 1) x 4");
  EXPECT_INVALID(call(rows.data(), 11, drafts.data(), 2, nullptr, nullptr, nullptr, 0), "n_logits = 11 is invalid");
  EXPECT_INVALID(call(rows.data(), 12, nullptr, 2, nullptr, nullptr, nullptr, 0), where,
                 "drafts is NULL but n_drafts = 2");
  EXPECT_INVALID(call(rows.data(), 12, drafts.data(), 2, nullptr, tokens.data(), probabilities.data(), 3), where,
                 "q_offsets is NULL (every draft chosen) but n_q = 3");
  EXPECT_INVALID(call(rows.data(), 12, drafts.data(), 2, offsets.data(), nullptr, probabilities.data(), 3), where,
                 "q_tokens is NULL but n_q = 3");
  EXPECT_INVALID(call(rows.data(), 12, drafts.data(), 2, offsets.data(), tokens.data(), nullptr, 3), where,
                 "q_probabilities is NULL but n_q = 3");
  const std::array<std::size_t, 3> starts_late{1, 2, 3};
  EXPECT_INVALID(call(rows.data(), 12, drafts.data(), 2, starts_late.data(), tokens.data(), probabilities.data(), 3),
                 where, "q_offsets[0] = 1 is invalid: it must be 0");
  const std::array<std::size_t, 3> falls{0, 2, 1};
  EXPECT_INVALID(call(rows.data(), 12, drafts.data(), 2, falls.data(), tokens.data(), probabilities.data(), 3), where,
                 "q_offsets[2] = 1 is invalid: it must be from q_offsets[1] = 2 to n_q = 3");
  const std::array<std::size_t, 3> beyond{0, 4, 4};
  EXPECT_INVALID(call(rows.data(), 12, drafts.data(), 2, beyond.data(), tokens.data(), probabilities.data(), 3), where,
                 "q_offsets[1] = 4 is invalid: it must be from q_offsets[0] = 0 to n_q = 3");
  const std::array<std::size_t, 3> short_of_n_q{0, 1, 2};
  EXPECT_INVALID(
      call(rows.data(), 12, drafts.data(), 2, short_of_n_q.data(), tokens.data(), probabilities.data(), 3), where,
      "q_offsets[2] = 2 is invalid: it must be n_q = 3");
  std::vector<Token> wide_tokens(34, 1);
  std::vector<float> wide_probabilities(34, 1.0f);
  const std::array<std::size_t, 3> wide{0, 33, 34};
  EXPECT_INVALID(call(rows.data(), 12, drafts.data(), 2, wide.data(), wide_tokens.data(), wide_probabilities.data(),
                      34),
                 where, "draft 0's support (q_offsets[0] .. q_offsets[1]) has 33 tokens, more than "
                        "NGRAMSPEC_MAX_SUPPORT = 32");
  const std::array<float, 3> negative{0.5f, -0.25f, 1.0f};
  EXPECT_INVALID(call(rows.data(), 12, drafts.data(), 2, offsets.data(), tokens.data(), negative.data(), 3), where,
                 "q_probabilities[1] = -0.25 (draft 0, token 3) is invalid: it must be finite and >= 0");
  const std::array<float, 3> not_a_number{0.5f, 0.5f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_INVALID(call(rows.data(), 12, drafts.data(), 2, offsets.data(), tokens.data(), not_a_number.data(), 3), where,
                 "q_probabilities[2] = nan (draft 1, token 2) is invalid");
  const std::array<float, 3> nothing{0.5f, 0.5f, 0.0f};
  EXPECT_INVALID(call(rows.data(), 12, drafts.data(), 2, offsets.data(), tokens.data(), nothing.data(), 3), where,
                 "draft 1's probabilities q_probabilities[2 .. 3) sum to 0");
  EXPECT_INVALID(ngramspec_sampler_verify_chain(s, rows.data(), 12, 0, drafts.data(), 2, nullptr, nullptr, nullptr, 0,
                                                nullptr, &next),
                 "ngramspec_sampler_verify_chain: accepted is NULL");
  EXPECT_INVALID(ngramspec_sampler_verify_chain(s, rows.data(), 12, 0, drafts.data(), 2, nullptr, nullptr, nullptr, 0,
                                                &accepted, nullptr),
                 "ngramspec_sampler_verify_chain: next is NULL");
  // Rows the sampler cannot draw from: bad input, named by token and position.
  std::vector<float> bad = rows;
  bad[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_INVALID(call(bad.data(), 12, drafts.data(), 2, nullptr, nullptr, nullptr, 0), where,
                 "logit of token 2 at position 10 is NaN");
  bad = rows;
  std::fill(bad.begin(), bad.begin() + 4, -std::numeric_limits<float>::infinity());
  EXPECT_INVALID(call(bad.data(), 12, drafts.data(), 2, nullptr, nullptr, nullptr, 0), where,
                 "every logit is -inf at position 10");
  EXPECT_EQ(accepted, 77u);
  EXPECT_EQ(next, 99u);

  // The same sampler verifies the good call afterwards, and as a fresh one does.
  const SamplerPtr fresh = make_sampler(&o, 4);
  std::size_t fresh_accepted = 0;
  Token fresh_next = 0;
  ASSERT_C_OK(call(rows.data(), 12, drafts.data(), 2, offsets.data(), tokens.data(), probabilities.data(), 3));
  ASSERT_C_OK(ngramspec_sampler_verify_chain(fresh.get(), rows.data(), 12, 10, drafts.data(), 2, offsets.data(),
                                             tokens.data(), probabilities.data(), 3, &fresh_accepted, &fresh_next));
  EXPECT_EQ(accepted, fresh_accepted);
  EXPECT_EQ(next, fresh_next);
}

// ---- Properties ----------------------------------------------------------------------------------

// At temperature 0 both modes are greedy decoding: the drafts are accepted while each is its row's
// argmax (ties to the lowest id), and the token after them is the next row's argmax, whatever q is.
TEST(CApiSamplingProperty, GreedyAcceptsTheArgmaxPrefixInEitherMode) {
  std::mt19937_64 rng(20261128);
  for (int trial = 0; trial < 2000; ++trial) {
    const std::size_t vocab = 1 + rng() % 9;
    const int mode = trial % 2 == 0 ? NGRAMSPEC_SAMPLING_EXACT : NGRAMSPEC_SAMPLING_REJECTION;
    const ngramspec_sampling_options o = options_of(0.0f, rng() % 3, 1.0f, 0.0f, rng(), mode);
    const SamplerPtr sampler = make_sampler(&o, vocab);
    Chain c = random_chain(rng, vocab);
    // Drafts often the argmax, so chains are accepted in part.
    for (std::size_t i = 0; i < c.drafts.size(); ++i) {
      const std::span<const float> row(c.logits.data() + i * vocab, vocab);
      if (rng() % 3 != 0) {
        c.drafts[i] = static_cast<Token>(std::max_element(row.begin(), row.end()) - row.begin());
      }
    }
    if (trial % 3 == 0) {  // no distributions: every draft chosen
      c.q_offsets.clear();
      c.q_tokens.clear();
      c.q_probabilities.clear();
    }
    Verified v;
    ASSERT_C_OK(verify(sampler.get(), c, rng() % 1000, v));
    std::size_t expected = 0;
    Token argmax = 0;
    for (;; ++expected) {
      const std::span<const float> row(c.logits.data() + expected * vocab, vocab);
      argmax = static_cast<Token>(std::max_element(row.begin(), row.end()) - row.begin());
      if (expected == c.drafts.size() || c.drafts[expected] != argmax) break;
    }
    ASSERT_EQ(v.accepted, expected) << "trial " << trial;
    ASSERT_EQ(v.next, argmax) << "trial " << trial;
  }
}

// In the exact mode each row's token is the one TokenSampler::choose draws at its position, so a
// chain verified through the C ABI emits what plain sampling emits for the seed, whatever q is.
TEST(CApiSamplingProperty, TheExactModeEmitsPlainSamplingsTokens) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const std::size_t vocab = 1 + rng() % 9;
    const float temperature = 0.25f + static_cast<float>(rng() % 8) / 4.0f;
    const ngramspec_sampling_options o =
        options_of(temperature, rng() % 4, rng() % 2 == 0 ? 1.0f : 0.8f, rng() % 2 == 0 ? 0.0f : 0.1f, rng(),
                   NGRAMSPEC_SAMPLING_EXACT);
    const SamplerPtr sampler = make_sampler(&o, vocab);
    TokenSampler reference(to_cpp(o), vocab);
    Chain c = random_chain(rng, vocab);
    const std::uint64_t position = rng() % 1000;
    // Drafts often plain sampling's own tokens, so chains are accepted in part.
    for (std::size_t i = 0; i < c.drafts.size(); ++i) {
      if (rng() % 3 != 0) {
        c.drafts[i] = reference.choose(std::span<const float>(c.logits.data() + i * vocab, vocab), position + i);
      }
    }
    Verified v;
    ASSERT_C_OK(verify(sampler.get(), c, position, v));
    std::size_t expected = 0;
    Token token = 0;
    for (;; ++expected) {
      token = reference.choose(std::span<const float>(c.logits.data() + expected * vocab, vocab), position + expected);
      if (expected == c.drafts.size() || c.drafts[expected] != token) break;
    }
    ASSERT_EQ(v.accepted, expected) << "trial " << trial;
    ASSERT_EQ(v.next, token) << "trial " << trial;
  }
}

// The rejection mode through the C ABI, the way an engine runs it: a draft model proposes two drafts
// a pass, each drawn from its q given the one before, the target's rows are those of the drafted
// prefix, and ngramspec_sampler_verify_chain says what the sequence keeps. Over many requests (the
// sampler's seed and the drafter's randomness fresh for each) the first two tokens must be
// distributed as the target's sampling distribution gives them.
constexpr std::size_t kVocab = kTargetVocab;
constexpr std::size_t kRuns = 20000;
constexpr std::size_t kDrafts = 2;

/// The draft model's q after `last`: two tokens, unlike the target (which has mass q lacks).
struct DraftQ {
  std::array<Token, 2> tokens;
  std::array<float, 2> probabilities;
};
DraftQ draft_q(Token last) {
  return {{static_cast<Token>((last + 1) % kVocab), static_cast<Token>((last + 3) % kVocab)}, {0.7f, 0.3f}};
}

/// What the engine tells the sampler each draft was drawn from.
enum class Declared {
  drawn_q,  ///< the q it was drawn from
  chosen,   ///< nothing: the draft read as chosen (one-hot), which keeps the distribution but accepts less
  other_q,  ///< a q it was not drawn from (the two probabilities swapped): a bias the test must see
};

/// The first two tokens of kRuns requests after the prompt {0}, counted by cell, and the drafts
/// accepted in all.
struct FirstTwo {
  std::vector<std::size_t> counts = std::vector<std::size_t>(kVocab * kVocab, 0);
  std::size_t accepted = 0;
};

FirstTwo first_two_tokens(const ngramspec_sampling_options& options, Declared declared) {
  FirstTwo out;
  const SamplerPtr sampler = make_sampler(&options, kVocab);
  for (std::size_t run = 0; run < kRuns; ++run) {
    ngramspec_sampling_options request = options;
    request.seed = run;
    EXPECT_EQ(ngramspec_sampler_set_options(sampler.get(), &request), NGRAMSPEC_OK) << ngramspec_last_error();
    std::mt19937_64 drafter(0x9E3779B97F4A7C15ULL ^ run);  // the drafter's own randomness
    std::vector<Token> sequence{0};
    while (sequence.size() < 3) {
      Chain c;
      c.q_offsets.push_back(0);
      Token last = sequence.back();
      for (std::size_t i = 0; i <= kDrafts; ++i) {
        for (Token t = 0; t < kVocab; ++t) c.logits.push_back(target_logit(last, t));
        if (i == kDrafts) break;
        const DraftQ q = draft_q(last);
        const double u = static_cast<double>(drafter() >> 11) * 0x1p-53;
        last = u < q.probabilities[0] ? q.tokens[0] : q.tokens[1];
        c.drafts.push_back(last);
        c.q_tokens.insert(c.q_tokens.end(), q.tokens.begin(), q.tokens.end());
        if (declared == Declared::other_q) {
          c.q_probabilities.insert(c.q_probabilities.end(), q.probabilities.rbegin(), q.probabilities.rend());
        } else {
          c.q_probabilities.insert(c.q_probabilities.end(), q.probabilities.begin(), q.probabilities.end());
        }
        c.q_offsets.push_back(c.q_tokens.size());
      }
      if (declared == Declared::chosen) {
        c.q_offsets.clear();
        c.q_tokens.clear();
        c.q_probabilities.clear();
      }
      Verified v;
      EXPECT_EQ(verify(sampler.get(), c, sequence.size(), v), NGRAMSPEC_OK) << ngramspec_last_error();
      sequence.insert(sequence.end(), c.drafts.begin(), c.drafts.begin() + static_cast<std::ptrdiff_t>(v.accepted));
      sequence.push_back(v.next);
      out.accepted += v.accepted;
    }
    ++out.counts[sequence[1] * kVocab + sequence[2]];
  }
  return out;
}

// With q passed the tokens keep the target's distribution, and more drafts are accepted than when
// the same drafts are passed as chosen (min(p, q) summed against q·p), which keeps it too.
TEST(CApiSamplingProperty, RejectionVerificationKeepsTheTargetsDistribution) {
  for (const ngramspec_sampling_options& options :
       {options_of(1.0f, 0, 1.0f, 0.0f, 0, NGRAMSPEC_SAMPLING_REJECTION),
        options_of(0.7f, 3, 1.0f, 0.0f, 0, NGRAMSPEC_SAMPLING_REJECTION)}) {
    const std::vector<double> exact = first_two_probabilities(options);
    const FirstTwo with_q = first_two_tokens(options, Declared::drawn_q);
    const ChiSquareTest r = chi_square_test(with_q.counts, exact, kRuns);
    std::printf("  with q: %s; %zu drafts accepted\n", r.describe().c_str(), with_q.accepted);
    EXPECT_GE(r.least_expected, 5.0) << "too few runs for the approximation";
    EXPECT_TRUE(r.passes()) << "temperature " << options.temperature << ", top_k " << options.top_k << ": "
                            << r.describe();
    const FirstTwo chosen = first_two_tokens(options, Declared::chosen);
    const ChiSquareTest rc = chi_square_test(chosen.counts, exact, kRuns);
    std::printf("  chosen: %s; %zu drafts accepted\n", rc.describe().c_str(), chosen.accepted);
    EXPECT_TRUE(rc.passes()) << "chosen: " << rc.describe();
    EXPECT_GT(with_q.accepted, chosen.accepted + chosen.accepted / 10)
        << "temperature " << options.temperature << ": passing q should accept clearly more";
  }
}

// The same test sees a q that is not the one the drafts were drawn from: a draft declared less
// likely than it was drawn is accepted too often.
TEST(CApiSamplingProperty, TheChiSquareTestFailsWhenTheDeclaredQIsNotTheDrawnOne) {
  const ngramspec_sampling_options options = options_of(1.0f, 0, 1.0f, 0.0f, 0, NGRAMSPEC_SAMPLING_REJECTION);
  const ChiSquareTest r =
      chi_square_test(first_two_tokens(options, Declared::other_q).counts, first_two_probabilities(options), kRuns);
  std::printf("  declared another q: %s\n", r.describe().c_str());
  EXPECT_FALSE(r.passes()) << r.describe();
}

TEST(CApiSamplingProperty, ADraftOutsideTheVocabularyIsRejectedInEitherMode) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 1000; ++trial) {
    const std::size_t vocab = 1 + rng() % 9;
    const int mode = trial % 2 == 0 ? NGRAMSPEC_SAMPLING_EXACT : NGRAMSPEC_SAMPLING_REJECTION;
    const ngramspec_sampling_options o = options_of(0.5f + static_cast<float>(rng() % 4), 0, 1.0f, 0.0f, rng(), mode);
    const SamplerPtr sampler = make_sampler(&o, vocab);
    Chain c = random_chain(rng, vocab);
    if (c.drafts.empty()) continue;
    const std::size_t outside = rng() % c.drafts.size();
    c.drafts[outside] = trial % 3 == 0 ? 0xFFFFFFFFU : static_cast<Token>(vocab + rng() % 5);
    // Its q all on it: the most a declared q can argue for it.
    c.q_tokens.erase(c.q_tokens.begin() + static_cast<std::ptrdiff_t>(c.q_offsets[outside]),
                     c.q_tokens.begin() + static_cast<std::ptrdiff_t>(c.q_offsets[outside + 1]));
    c.q_probabilities.erase(c.q_probabilities.begin() + static_cast<std::ptrdiff_t>(c.q_offsets[outside]),
                            c.q_probabilities.begin() + static_cast<std::ptrdiff_t>(c.q_offsets[outside + 1]));
    const std::size_t removed = c.q_offsets[outside + 1] - c.q_offsets[outside];
    c.q_tokens.insert(c.q_tokens.begin() + static_cast<std::ptrdiff_t>(c.q_offsets[outside]), c.drafts[outside]);
    c.q_probabilities.insert(c.q_probabilities.begin() + static_cast<std::ptrdiff_t>(c.q_offsets[outside]), 1.0f);
    for (std::size_t i = outside + 1; i < c.q_offsets.size(); ++i) c.q_offsets[i] = c.q_offsets[i] + 1 - removed;
    Verified v;
    ASSERT_C_OK(verify(sampler.get(), c, rng() % 1000, v));
    ASSERT_LE(v.accepted, outside) << "trial " << trial;
    ASSERT_LT(v.next, vocab) << "trial " << trial;
  }
}

// ---- Allocation ----------------------------------------------------------------------------------

TEST(CApiSamplingAllocation, VerifyAllocatesNothingOnceWarm) {
  std::mt19937_64 rng(11);
  constexpr std::size_t kVocabulary = 64;
  for (const int mode : {NGRAMSPEC_SAMPLING_EXACT, NGRAMSPEC_SAMPLING_REJECTION}) {
    const ngramspec_sampling_options o = options_of(0.9f, 20, 0.9f, 0.0f, 5, mode);
    const SamplerPtr sampler = make_sampler(&o, kVocabulary);
    std::vector<Chain> chains;
    for (int i = 0; i < 50; ++i) chains.push_back(random_chain(rng, kVocabulary));
    Verified v;
    for (const Chain& c : chains) ASSERT_C_OK(verify(sampler.get(), c, 3, v));  // warm
    const AllocationCounter counter;
    for (std::uint64_t position = 0; position < 20; ++position) {
      for (const Chain& c : chains) ASSERT_C_OK(verify(sampler.get(), c, position, v));
    }
    EXPECT_EQ(counter.count(), 0u) << "mode " << mode;
  }
}

}  // namespace
}  // namespace ngramspec::test
