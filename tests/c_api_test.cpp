// The C ABI (ngramspec.h, compiled here as C++) through libngramspec.so: every entry point with
// bad arguments (the right status, a message naming the argument and its value, nothing
// changed, the object still usable), out of memory, the drafters against the C++ ones, a batch
// served through it against plain greedy decoding and the C++ BatchSpeculator, corpus files saved,
// loaded and mapped (drafting as the live corpus, bad files reported naming the file and the
// section), and the hot calls' allocations.

#include "ngramspec/ngramspec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ngramspec/batch_speculator.hpp"
#include "ngramspec/corpus_builder.hpp"
#include "ngramspec/detail/corpus_format.hpp"
#include "ngramspec/mapped_corpus.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "ngramspec/top_k_table.hpp"
#include "ngramspec/tree_drafter.hpp"
#include "ngramspec/version.hpp"
#include "support/allocation_counter.hpp"
#include "support/c_api_checks.hpp"
#include "support/mock_models.hpp"
#include "support/serving_pass.hpp"
#include "support/temp_dir.hpp"
#include "support/test_drafters.hpp"

namespace ngramspec::test {
namespace {

using ::testing::HasSubstr;

// ---- Owning handles ------------------------------------------------------------------------------

struct CorpusFree {
  void operator()(ngramspec_corpus* p) const noexcept { ngramspec_corpus_free(p); }
};
struct MatchFree {
  void operator()(ngramspec_match_drafter* p) const noexcept { ngramspec_match_drafter_free(p); }
};
struct NGramFree {
  void operator()(ngramspec_ngram_predictor* p) const noexcept { ngramspec_ngram_predictor_free(p); }
};
struct BatchFree {
  void operator()(ngramspec_batch* p) const noexcept { ngramspec_batch_free(p); }
};
using CorpusPtr = std::unique_ptr<ngramspec_corpus, CorpusFree>;
using MatchPtr = std::unique_ptr<ngramspec_match_drafter, MatchFree>;
using NGramPtr = std::unique_ptr<ngramspec_ngram_predictor, NGramFree>;
using BatchPtr = std::unique_ptr<ngramspec_batch, BatchFree>;

CorpusPtr make_corpus(std::size_t max_bytes) {
  ngramspec_corpus* p = nullptr;
  EXPECT_EQ(ngramspec_corpus_create(max_bytes, &p), NGRAMSPEC_OK) << ngramspec_last_error();
  return CorpusPtr(p);
}
MatchPtr make_match(const ngramspec_match_config* config, const ngramspec_corpus* corpus = nullptr) {
  ngramspec_match_drafter* p = nullptr;
  EXPECT_EQ(ngramspec_match_drafter_create(config, corpus, &p), NGRAMSPEC_OK) << ngramspec_last_error();
  return MatchPtr(p);
}
NGramPtr make_ngram(const ngramspec_ngram_config* config) {
  ngramspec_ngram_predictor* p = nullptr;
  EXPECT_EQ(ngramspec_ngram_predictor_create(config, &p), NGRAMSPEC_OK) << ngramspec_last_error();
  return NGramPtr(p);
}
BatchPtr make_batch(const ngramspec_batch_config* config, ngramspec_corpus* corpus = nullptr) {
  ngramspec_batch* p = nullptr;
  EXPECT_EQ(ngramspec_batch_create(config, corpus, &p), NGRAMSPEC_OK) << ngramspec_last_error();
  return BatchPtr(p);
}

// ---- Checks --------------------------------------------------------------------------------------

// fails_with, EXPECT_INVALID, EXPECT_C_OK and ASSERT_C_OK: support/c_api_checks.hpp.

/// A pointer no call may write: outputs keep it when a call fails.
template <class T>
T* sentinel_handle() {
  static int object;
  return reinterpret_cast<T*>(&object);
}

/// A stream with repeats: a motif over a small alphabet, with noise, so drafters draft.
std::vector<Token> motif_stream(std::mt19937_64& rng, std::size_t length) {
  const Token alphabet = static_cast<Token>(2 + rng() % 11);
  std::vector<Token> motif(1 + rng() % 12);
  for (Token& t : motif) t = static_cast<Token>(rng() % alphabet);
  std::vector<Token> stream(length);
  for (std::size_t i = 0; i < length; ++i) {
    stream[i] = rng() % 10 == 0 ? static_cast<Token>(rng() % alphabet) : motif[i % motif.size()];
  }
  if (rng() % 4 == 0) stream.back() = 0xFFFFFFFFU;  // the top of the id range
  return stream;
}

// ---- Version, errors, NULL handles -----------------------------------------------------------------

TEST(CApiVersion, MacrosRuntimeCxxConstantsAndCMakeProjectAgree) {
  EXPECT_EQ(NGRAMSPEC_VERSION_MAJOR, kVersionMajor);
  EXPECT_EQ(NGRAMSPEC_VERSION_MINOR, kVersionMinor);
  EXPECT_EQ(NGRAMSPEC_VERSION_PATCH, kVersionPatch);
  EXPECT_EQ(NGRAMSPEC_VERSION_NUMBER, kVersionMajor * 10000 + kVersionMinor * 100 + kVersionPatch);
  EXPECT_EQ(ngramspec_version_number(), static_cast<unsigned>(NGRAMSPEC_VERSION_NUMBER));
  const std::string version = std::to_string(kVersionMajor) + "." + std::to_string(kVersionMinor) + "." +
                              std::to_string(kVersionPatch);
  EXPECT_EQ(std::string(ngramspec_version_string()), version);
  EXPECT_EQ(std::string(ngramspec_version_string()), NGRAMSPEC_PROJECT_VERSION);  // CMakeLists.txt's project()
}

TEST(CApiErrors, EveryStatusHasItsName) {
  EXPECT_STREQ(ngramspec_status_name(NGRAMSPEC_OK), "NGRAMSPEC_OK");
  EXPECT_STREQ(ngramspec_status_name(NGRAMSPEC_ERROR_INVALID_ARGUMENT), "NGRAMSPEC_ERROR_INVALID_ARGUMENT");
  EXPECT_STREQ(ngramspec_status_name(NGRAMSPEC_ERROR_OUT_OF_MEMORY), "NGRAMSPEC_ERROR_OUT_OF_MEMORY");
  EXPECT_STREQ(ngramspec_status_name(NGRAMSPEC_ERROR_INTERNAL), "NGRAMSPEC_ERROR_INTERNAL");
  EXPECT_STREQ(ngramspec_status_name(NGRAMSPEC_ERROR_CORPUS_FILE), "NGRAMSPEC_ERROR_CORPUS_FILE");
  // Values outside the enum ("unknown status") are C's to pass: tests/c_api/c11_compile.c checks them.
}

TEST(CApiErrors, TheLastErrorIsPerThreadAndLastsUntilTheNextFailure) {
  std::string initial;
  std::string after_failure;
  std::string after_success;
  std::string after_other_thread;
  std::thread([&] {
    initial = ngramspec_last_error();
    (void)ngramspec_corpus_clear(nullptr);
    after_failure = ngramspec_last_error();
    ngramspec_ngram_predictor* predictor = nullptr;
    if (ngramspec_ngram_predictor_create(nullptr, &predictor) == NGRAMSPEC_OK) ngramspec_ngram_predictor_free(predictor);
    after_success = ngramspec_last_error();
    std::thread([] { (void)ngramspec_batch_finish(nullptr, 1); }).join();
    after_other_thread = ngramspec_last_error();
  }).join();
  EXPECT_EQ(initial, "");
  EXPECT_EQ(after_failure, "ngramspec_corpus_clear: corpus is NULL");
  EXPECT_EQ(after_success, after_failure);
  EXPECT_EQ(after_other_thread, after_failure);
}

TEST(CApiErrors, ALongMessageIsCutToTheBufferAndSaysSo) {
  ngramspec_batch_config config = ngramspec_batch_config_default();
  const std::string cost = "table:" + std::string(3000, 'x');
  config.cost = cost.c_str();
  ngramspec_batch* out = sentinel_handle<ngramspec_batch>();
  EXPECT_INVALID(ngramspec_batch_create(&config, nullptr, &out), "ngramspec_batch_create: ", "xxxxxxxx");
  EXPECT_EQ(out, sentinel_handle<ngramspec_batch>());
  const std::string message = ngramspec_last_error();
  EXPECT_EQ(message.size(), 1023U);
  EXPECT_THAT(message, ::testing::EndsWith("..."));
}

TEST(CApiErrors, FreeingNullDoesNothingAndQueriesOfNullAreZero) {
  ngramspec_corpus_free(nullptr);
  ngramspec_match_drafter_free(nullptr);
  ngramspec_ngram_predictor_free(nullptr);
  ngramspec_batch_free(nullptr);
  EXPECT_EQ(ngramspec_corpus_size(nullptr), 0U);
  EXPECT_EQ(ngramspec_corpus_records(nullptr), 0U);
  EXPECT_EQ(ngramspec_corpus_capacity_tokens(nullptr), 0U);
  EXPECT_EQ(ngramspec_corpus_memory_bytes(nullptr), 0U);
  EXPECT_EQ(ngramspec_match_drafter_memory_bytes(nullptr), 0U);
  EXPECT_EQ(ngramspec_ngram_predictor_memory_bytes(nullptr), 0U);
  EXPECT_EQ(ngramspec_batch_contains(nullptr, 1), 0);
  EXPECT_EQ(ngramspec_batch_size(nullptr), 0U);
  EXPECT_EQ(ngramspec_batch_memory_bytes(nullptr), 0U);
}

TEST(CApiConfigs, DefaultsAreTheCppDefaults) {
  const MatchConfig match;
  const ngramspec_match_config c = ngramspec_match_config_default();
  EXPECT_EQ(c.cap, match.index_capacity);
  EXPECT_EQ(c.copy_min_match, match.copy_min_match);
  EXPECT_EQ(c.count_max_order, match.count_max_order);
  EXPECT_EQ(c.count_window, match.count_window);
  EXPECT_EQ(c.min_confidence, match.min_confidence);

  const NGramConfig ngram;
  const ngramspec_ngram_config n = ngramspec_ngram_config_default();
  EXPECT_EQ(n.min_order, ngram.min_order);
  EXPECT_EQ(n.max_order, ngram.max_order);
  EXPECT_EQ(n.window, ngram.window);

  const BatchConfig batch;
  const ngramspec_batch_config b = ngramspec_batch_config_default();
  EXPECT_EQ(b.max_sequences, batch.max_sequences);
  EXPECT_EQ(b.max_pass_tokens, batch.max_pass_tokens);
  EXPECT_EQ(b.max_record_tokens, batch.max_record_tokens);
  EXPECT_EQ(b.cost, nullptr);
  EXPECT_NE(b.default_drafter, 0);
  EXPECT_EQ(b.drafter.cap, match.index_capacity);
  EXPECT_EQ(b.drafter.min_confidence, match.min_confidence);

  const DecodeOptions options;
  const ngramspec_sequence_options o = ngramspec_sequence_options_default();
  EXPECT_EQ(o.max_new_tokens, options.max_new_tokens);
  EXPECT_EQ(o.stop_tokens, nullptr);
  EXPECT_EQ(o.n_stop_tokens, 0U);
  EXPECT_EQ(o.max_context, options.max_context);
  EXPECT_EQ(o.speculate, 1);
  EXPECT_EQ(o.max_drafts, options.max_drafts);
}

// ---- SharedCorpus --------------------------------------------------------------------------------

TEST(CApiCorpus, BadArgumentsAreReportedAndChangeNothing) {
  const std::size_t bytes = SharedCorpus::min_bytes();
  EXPECT_INVALID(ngramspec_corpus_create(bytes, nullptr), "ngramspec_corpus_create: out is NULL");
  ngramspec_corpus* out = sentinel_handle<ngramspec_corpus>();
  EXPECT_INVALID(ngramspec_corpus_create(10, &out), "ngramspec_corpus_create: ", "max_bytes = 10 is invalid");
  EXPECT_EQ(out, sentinel_handle<ngramspec_corpus>());

  const CorpusPtr corpus = make_corpus(bytes);
  const std::vector<Token> record = {1, 2, 3, 4, 5};
  EXPECT_C_OK(ngramspec_corpus_append(corpus.get(), record.data(), record.size()));
  EXPECT_INVALID(ngramspec_corpus_append(nullptr, record.data(), record.size()),
                 "ngramspec_corpus_append: corpus is NULL");
  EXPECT_INVALID(ngramspec_corpus_append(corpus.get(), nullptr, 3),
                 "ngramspec_corpus_append: tokens is NULL but count = 3");
  EXPECT_INVALID(ngramspec_corpus_clear(nullptr), "ngramspec_corpus_clear: corpus is NULL");
  EXPECT_EQ(ngramspec_corpus_size(corpus.get()), 5U);
  EXPECT_EQ(ngramspec_corpus_records(corpus.get()), 1U);
  // No tokens is a record of none: nothing changes.
  EXPECT_C_OK(ngramspec_corpus_append(corpus.get(), nullptr, 0));
  EXPECT_EQ(ngramspec_corpus_records(corpus.get()), 1U);
}

TEST(CApiCorpus, ReportsWhatTheCppCorpusDoes) {
  const std::size_t bytes = SharedCorpus::bytes_for(512) + 100;
  SharedCorpus cpp(bytes);
  const CorpusPtr c = make_corpus(bytes);
  EXPECT_EQ(ngramspec_corpus_capacity_tokens(c.get()), cpp.capacity_tokens());
  EXPECT_EQ(ngramspec_corpus_memory_bytes(c.get()), cpp.memory_bytes());
  std::mt19937_64 rng(5);
  for (int i = 0; i < 40; ++i) {
    const std::vector<Token> record = motif_stream(rng, 1 + rng() % 60);
    cpp.append(record);
    ASSERT_C_OK(ngramspec_corpus_append(c.get(), record.data(), record.size()));
    ASSERT_EQ(ngramspec_corpus_size(c.get()), cpp.size());
    ASSERT_EQ(ngramspec_corpus_records(c.get()), cpp.records());
  }
  EXPECT_C_OK(ngramspec_corpus_clear(c.get()));
  cpp.clear();
  EXPECT_EQ(ngramspec_corpus_size(c.get()), 0U);
  EXPECT_EQ(ngramspec_corpus_records(c.get()), 0U);
  EXPECT_EQ(ngramspec_corpus_memory_bytes(c.get()), cpp.memory_bytes());
}

// ---- Drafters ------------------------------------------------------------------------------------

/// What a drafter drafts for `capacity` (with probabilities or without), through the C API.
struct CDrafts {
  std::vector<Token> tokens;
  std::vector<float> probabilities;
};

template <class Predict>
CDrafts c_drafts(Predict predict, std::size_t capacity, bool with_probabilities) {
  CDrafts d;
  d.tokens.assign(capacity, 0);
  d.probabilities.assign(capacity, -1.0f);
  std::size_t count = std::numeric_limits<std::size_t>::max();
  EXPECT_C_OK(predict(d.tokens.data(), capacity, with_probabilities ? d.probabilities.data() : nullptr, &count));
  EXPECT_LE(count, capacity);
  d.tokens.resize(std::min(count, capacity));
  d.probabilities.resize(with_probabilities ? d.tokens.size() : 0);
  return d;
}

template <class D>
CDrafts cpp_drafts(const D& drafter, std::size_t capacity, bool with_probabilities) {
  CDrafts d;
  d.tokens.assign(capacity, 0);
  d.probabilities.assign(capacity, -1.0f);
  const std::size_t count = with_probabilities ? drafter.predict(std::span<Token>(d.tokens), std::span<float>(d.probabilities))
                                               : drafter.predict(std::span<Token>(d.tokens));
  d.tokens.resize(count);
  d.probabilities.resize(with_probabilities ? count : 0);
  return d;
}

TEST(CApiMatchDrafter, BadArgumentsAreReportedAndChangeNothing) {
  EXPECT_INVALID(ngramspec_match_drafter_create(nullptr, nullptr, nullptr), "ngramspec_match_drafter_create: out is NULL");
  struct BadConfig {
    ngramspec_match_config config;
    std::string names;
  };
  std::vector<BadConfig> bad;
  const ngramspec_match_config defaults = ngramspec_match_config_default();
  bad.push_back({defaults, "index_capacity = 1 is invalid"});
  bad.back().config.cap = 1;
  bad.push_back({defaults, "index_capacity = 16777217 is invalid"});
  bad.back().config.cap = MatchDrafter::kMaxIndexCapacity + 1;
  bad.push_back({defaults, "copy_min_match = 0 is invalid"});
  bad.back().config.copy_min_match = 0;
  bad.push_back({defaults, "count_max_order = 5 is invalid"});
  bad.back().config.count_max_order = 5;
  bad.push_back({defaults, "count_max_order = 1 is invalid"});
  bad.back().config.count_max_order = 1;
  bad.push_back({defaults, "count_window = 2 is invalid"});
  bad.back().config.count_window = 2;
  bad.push_back({defaults, "min_confidence = 1.5"});
  bad.back().config.min_confidence = 1.5;
  bad.push_back({defaults, "min_confidence = nan"});
  bad.back().config.min_confidence = std::nan("");
  for (const BadConfig& b : bad) {
    ngramspec_match_drafter* out = sentinel_handle<ngramspec_match_drafter>();
    EXPECT_INVALID(ngramspec_match_drafter_create(&b.config, nullptr, &out), "ngramspec_match_drafter_create: ",
                   "MatchConfig: " + b.names);
    EXPECT_EQ(out, sentinel_handle<ngramspec_match_drafter>());
  }

  ngramspec_match_config config = defaults;
  config.min_confidence = 0;
  const MatchPtr drafter = make_match(&config);
  const std::vector<Token> prompt = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2};
  ASSERT_C_OK(ngramspec_match_drafter_update(drafter.get(), prompt.data(), prompt.size()));
  const auto predict = [&](ngramspec_token* out, std::size_t capacity, float* p, std::size_t* count) {
    return ngramspec_match_drafter_predict(drafter.get(), out, capacity, p, count);
  };
  const CDrafts before = c_drafts(predict, 8, true);
  ASSERT_EQ(before.tokens, (std::vector<Token>{3, 4, 1, 2, 3, 4, 1, 2}));

  EXPECT_INVALID(ngramspec_match_drafter_update(nullptr, prompt.data(), 1), "ngramspec_match_drafter_update: drafter is NULL");
  EXPECT_INVALID(ngramspec_match_drafter_update(drafter.get(), nullptr, 2),
                 "ngramspec_match_drafter_update: tokens is NULL but count = 2");
  std::array<Token, 4> out{7, 7, 7, 7};
  std::size_t count = 99;
  EXPECT_INVALID(ngramspec_match_drafter_predict(nullptr, out.data(), 4, nullptr, &count),
                 "ngramspec_match_drafter_predict: drafter is NULL");
  EXPECT_INVALID(ngramspec_match_drafter_predict(drafter.get(), nullptr, 4, nullptr, &count),
                 "ngramspec_match_drafter_predict: out is NULL but capacity = 4");
  EXPECT_INVALID(ngramspec_match_drafter_predict(drafter.get(), out.data(), 4, nullptr, nullptr),
                 "ngramspec_match_drafter_predict: count is NULL");
  EXPECT_INVALID(ngramspec_match_drafter_reset(nullptr), "ngramspec_match_drafter_reset: drafter is NULL");
  EXPECT_INVALID(ngramspec_match_drafter_restart(nullptr), "ngramspec_match_drafter_restart: drafter is NULL");
  EXPECT_EQ(count, 99U);
  EXPECT_EQ(out, (std::array<Token, 4>{7, 7, 7, 7}));
  const CDrafts after = c_drafts(predict, 8, true);
  EXPECT_EQ(after.tokens, before.tokens);
  EXPECT_EQ(after.probabilities, before.probabilities);

  // No room is no drafts, not an error.
  EXPECT_C_OK(ngramspec_match_drafter_predict(drafter.get(), nullptr, 0, nullptr, &count));
  EXPECT_EQ(count, 0U);
  EXPECT_C_OK(ngramspec_match_drafter_update(drafter.get(), nullptr, 0));
  EXPECT_C_OK(ngramspec_match_drafter_reset(drafter.get()));
  EXPECT_TRUE(c_drafts(predict, 8, false).tokens.empty());
}

TEST(CApiNGramPredictor, BadArgumentsAreReportedAndChangeNothing) {
  EXPECT_INVALID(ngramspec_ngram_predictor_create(nullptr, nullptr), "ngramspec_ngram_predictor_create: out is NULL");
  const ngramspec_ngram_config defaults = ngramspec_ngram_config_default();
  struct BadConfig {
    ngramspec_ngram_config config;
    std::string names;
  };
  std::vector<BadConfig> bad;
  bad.push_back({defaults, "min_order = 1 is invalid"});
  bad.back().config.min_order = 1;
  bad.push_back({defaults, "max_order = 1 is invalid"});
  bad.back().config.max_order = 1;
  bad.push_back({defaults, "max_order = 9 is invalid"});
  bad.back().config.max_order = 9;
  bad.push_back({defaults, "window = 3 is invalid"});
  bad.back().config.window = 3;
  bad.push_back({defaults, "window = 16777217 is invalid"});
  bad.back().config.window = NGramPredictor::kMaxWindow + 1;
  for (const BadConfig& b : bad) {
    ngramspec_ngram_predictor* out = sentinel_handle<ngramspec_ngram_predictor>();
    EXPECT_INVALID(ngramspec_ngram_predictor_create(&b.config, &out), "ngramspec_ngram_predictor_create: ",
                   "NGramConfig: " + b.names);
    EXPECT_EQ(out, sentinel_handle<ngramspec_ngram_predictor>());
  }

  const NGramPtr predictor = make_ngram(nullptr);
  const std::vector<Token> prompt = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2};
  ASSERT_C_OK(ngramspec_ngram_predictor_update(predictor.get(), prompt.data(), prompt.size()));
  const auto predict = [&](ngramspec_token* out, std::size_t capacity, float* p, std::size_t* count) {
    return ngramspec_ngram_predictor_predict(predictor.get(), out, capacity, p, count);
  };
  const CDrafts before = c_drafts(predict, 6, true);
  ASSERT_EQ(before.tokens, (std::vector<Token>{3, 4, 1, 2, 3, 4}));

  EXPECT_INVALID(ngramspec_ngram_predictor_update(nullptr, prompt.data(), 1),
                 "ngramspec_ngram_predictor_update: predictor is NULL");
  EXPECT_INVALID(ngramspec_ngram_predictor_update(predictor.get(), nullptr, 5),
                 "ngramspec_ngram_predictor_update: tokens is NULL but count = 5");
  std::array<Token, 4> out{7, 7, 7, 7};
  std::size_t count = 99;
  EXPECT_INVALID(ngramspec_ngram_predictor_predict(nullptr, out.data(), 4, nullptr, &count),
                 "ngramspec_ngram_predictor_predict: predictor is NULL");
  EXPECT_INVALID(ngramspec_ngram_predictor_predict(predictor.get(), nullptr, 4, nullptr, &count),
                 "ngramspec_ngram_predictor_predict: out is NULL but capacity = 4");
  EXPECT_INVALID(ngramspec_ngram_predictor_predict(predictor.get(), out.data(), 4, nullptr, nullptr),
                 "ngramspec_ngram_predictor_predict: count is NULL");
  EXPECT_INVALID(ngramspec_ngram_predictor_reset(nullptr), "ngramspec_ngram_predictor_reset: predictor is NULL");
  EXPECT_EQ(count, 99U);
  EXPECT_EQ(out, (std::array<Token, 4>{7, 7, 7, 7}));
  const CDrafts after = c_drafts(predict, 6, true);
  EXPECT_EQ(after.tokens, before.tokens);
  EXPECT_EQ(after.probabilities, before.probabilities);
  EXPECT_C_OK(ngramspec_ngram_predictor_reset(predictor.get()));
  EXPECT_TRUE(c_drafts(predict, 6, false).tokens.empty());
}

// The C drafters are the C++ ones: over random configurations and streams, with and without a
// corpus, resets and corpus appends along the way, every prediction (with probabilities and
// without, any room) is the C++ drafter's, bit for bit.
TEST(CApiProperty, TheDraftersDraftExactlyWhatTheCppOnesDo) {
  std::size_t drafted = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(scramble(seed));
    ngramspec_match_config mc = ngramspec_match_config_default();
    mc.cap = 4 + rng() % 300;
    mc.copy_min_match = 1 + rng() % 4;
    mc.count_max_order = 2 + rng() % 3;
    mc.count_window = rng() % 2 == 0 ? 0 : 4 + rng() % (mc.cap - 3);
    static constexpr double kGates[] = {0, 0.03, 0.2};
    mc.min_confidence = kGates[rng() % 3];
    ngramspec_ngram_config nc;
    nc.min_order = 2 + rng() % 2;
    nc.max_order = nc.min_order + rng() % 3;
    nc.window = nc.max_order + rng() % 128;

    const bool with_corpus = rng() % 2 == 0;
    const std::size_t corpus_bytes = SharedCorpus::bytes_for(256);
    SharedCorpus cpp_corpus(corpus_bytes);
    const CorpusPtr c_corpus = make_corpus(corpus_bytes);
    MatchConfig cpp_mc;
    cpp_mc.index_capacity = mc.cap;
    cpp_mc.copy_min_match = mc.copy_min_match;
    cpp_mc.count_max_order = mc.count_max_order;
    cpp_mc.count_window = mc.count_window;
    cpp_mc.min_confidence = mc.min_confidence;
    MatchDrafter cpp_match(cpp_mc, with_corpus ? &cpp_corpus : nullptr);
    NGramPredictor cpp_ngram(NGramConfig{.min_order = nc.min_order, .max_order = nc.max_order, .window = nc.window});
    const MatchPtr c_match = make_match(&mc, with_corpus ? c_corpus.get() : nullptr);
    const NGramPtr c_ngram = make_ngram(&nc);
    ASSERT_TRUE(c_match && c_ngram);
    EXPECT_EQ(ngramspec_match_drafter_memory_bytes(c_match.get()), cpp_match.memory_bytes());
    EXPECT_EQ(ngramspec_ngram_predictor_memory_bytes(c_ngram.get()), cpp_ngram.memory_bytes());

    const std::vector<Token> stream = motif_stream(rng, 200 + rng() % 200);
    const auto match_predict = [&](ngramspec_token* out, std::size_t capacity, float* p, std::size_t* count) {
      return ngramspec_match_drafter_predict(c_match.get(), out, capacity, p, count);
    };
    const auto ngram_predict = [&](ngramspec_token* out, std::size_t capacity, float* p, std::size_t* count) {
      return ngramspec_ngram_predictor_predict(c_ngram.get(), out, capacity, p, count);
    };
    for (std::size_t at = 0; at < stream.size();) {
      const std::size_t n = std::min<std::size_t>(1 + rng() % 5, stream.size() - at);
      const std::span<const Token> chunk(stream.data() + at, n);
      at += n;
      cpp_match.update(chunk);
      cpp_ngram.update(chunk);
      ASSERT_C_OK(ngramspec_match_drafter_update(c_match.get(), chunk.data(), chunk.size()));
      ASSERT_C_OK(ngramspec_ngram_predictor_update(c_ngram.get(), chunk.data(), chunk.size()));

      const std::size_t capacity = rng() % 25;
      const bool with_probabilities = rng() % 2 == 0;
      const CDrafts c_m = c_drafts(match_predict, capacity, with_probabilities);
      const CDrafts cpp_m = cpp_drafts(cpp_match, capacity, with_probabilities);
      ASSERT_EQ(c_m.tokens, cpp_m.tokens) << "MatchDrafter at " << at;
      ASSERT_EQ(c_m.probabilities, cpp_m.probabilities) << "MatchDrafter at " << at;
      const CDrafts c_n = c_drafts(ngram_predict, capacity, with_probabilities);
      const CDrafts cpp_n = cpp_drafts(cpp_ngram, capacity, with_probabilities);
      ASSERT_EQ(c_n.tokens, cpp_n.tokens) << "NGramPredictor at " << at;
      ASSERT_EQ(c_n.probabilities, cpp_n.probabilities) << "NGramPredictor at " << at;
      drafted += c_m.tokens.size() + c_n.tokens.size();

      switch (rng() % 60) {
        case 0:
          cpp_match.reset();
          cpp_ngram.reset();
          ASSERT_C_OK(ngramspec_match_drafter_reset(c_match.get()));
          ASSERT_C_OK(ngramspec_ngram_predictor_reset(c_ngram.get()));
          break;
        case 5:  // the next request of the same slot: the calibration kept
          cpp_match.restart();
          cpp_ngram.reset();
          ASSERT_C_OK(ngramspec_match_drafter_restart(c_match.get()));
          ASSERT_C_OK(ngramspec_ngram_predictor_reset(c_ngram.get()));
          break;
        case 1:
        case 2:
        case 3: {  // an earlier request's output: the stream's recent tokens, or new ones
          const std::vector<Token> record =
              rng() % 2 == 0 ? std::vector<Token>(stream.begin() + static_cast<std::ptrdiff_t>(at - std::min<std::size_t>(at, 30)),
                                                  stream.begin() + static_cast<std::ptrdiff_t>(at))
                             : motif_stream(rng, 1 + rng() % 40);
          cpp_corpus.append(record);
          ASSERT_C_OK(ngramspec_corpus_append(c_corpus.get(), record.data(), record.size()));
          break;
        }
        case 4:
          cpp_corpus.clear();
          ASSERT_C_OK(ngramspec_corpus_clear(c_corpus.get()));
          break;
        default: break;
      }
    }
  }
  EXPECT_GT(drafted, 10000U) << "the streams must draft for the comparison to say anything";
}

// ---- BatchSpeculator: bad calls ------------------------------------------------------------------

/// The model of the batch tests: next = (3 * last + 1) mod 7, a cycle the drafters learn.
Token affine_next(Token t) { return static_cast<Token>((3 * std::uint64_t{t} + 1) % 7); }

/// The model's tokens for a pass: ids[i] was fed [last[i], drafts[offsets[i] .. offsets[i + 1])).
void forward(std::span<const Token> last, std::span<const Token> drafts, std::span<const std::size_t> offsets,
             std::vector<Token>& model_tokens, std::vector<std::size_t>& model_offsets) {
  model_tokens.clear();
  model_offsets.assign(1, 0);
  for (std::size_t i = 0; i < last.size(); ++i) {
    Token fed = last[i];
    for (std::size_t j = offsets[i]; j <= offsets[i + 1]; ++j) {
      model_tokens.push_back(affine_next(fed));
      if (j < offsets[i + 1]) fed = drafts[j];
    }
    model_offsets.push_back(model_tokens.size());
  }
}

bool same_step(const ngramspec_step& a, const ngramspec_step& b) {
  return a.emitted == b.emitted && a.accepted == b.accepted && a.rollback_to == b.rollback_to &&
         a.discarded == b.discarded && a.finished == b.finished && a.stop_reason == b.stop_reason;
}

bool same_stats(const ngramspec_batch* a, const ngramspec_batch* b) {
  ngramspec_batch_stats x{};
  ngramspec_batch_stats y{};
  EXPECT_C_OK(ngramspec_batch_stats_get(a, &x));
  EXPECT_C_OK(ngramspec_batch_stats_get(b, &y));
  return x.proposals == y.proposals && x.drafted == y.drafted && x.accepted == y.accepted && x.emitted == y.emitted;
}

ngramspec_batch_config small_batch_config(std::size_t max_sequences) {
  ngramspec_batch_config config = ngramspec_batch_config_default();
  config.max_sequences = max_sequences;
  config.cost = "knee:16";
  config.default_drafter = 0;
  config.drafter.cap = 64;
  config.drafter.count_window = 32;
  config.drafter.min_confidence = 0;
  return config;
}

// ---- Counts and sizes at the limits ---------------------------------------------------------------

// Counts no array can have (SIZE_MAX, and SIZE_MAX / 4 + 1 tokens, whose byte size wraps to 0)
// segfaulted or returned OK having recorded nothing: every one is refused naming the argument,
// before any element is read, and the object goes on.
TEST(CApiLimits, CountsNoArrayCanHaveAreRefusedNamingTheArgument) {
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  const std::array<std::size_t, 3> huge = {kMax, kMax / 4 + 1, static_cast<std::size_t>(PTRDIFF_MAX) / 4 + 1};
  const CorpusPtr corpus = make_corpus(SharedCorpus::min_bytes());
  const MatchPtr drafter = make_match(nullptr);
  const NGramPtr predictor = make_ngram(nullptr);
  const std::vector<Token> motif = {5, 6, 7, 5, 6, 7, 5, 6, 7, 5, 6, 7, 5, 6};
  ASSERT_C_OK(ngramspec_corpus_append(corpus.get(), motif.data(), motif.size()));
  ASSERT_C_OK(ngramspec_match_drafter_update(drafter.get(), motif.data(), motif.size()));
  ASSERT_C_OK(ngramspec_ngram_predictor_update(predictor.get(), motif.data(), motif.size()));
  std::array<Token, 8> out{};
  std::array<float, 8> probabilities{};
  std::size_t count = 0;
  for (const std::size_t n : huge) {
    SCOPED_TRACE(n);
    const std::string value = " = " + std::to_string(n) + " is too large";
    EXPECT_INVALID(ngramspec_corpus_append(corpus.get(), motif.data(), n), "ngramspec_corpus_append: count" + value);
    EXPECT_INVALID(ngramspec_corpus_append_stamped(corpus.get(), motif.data(), n, 1),
                   "ngramspec_corpus_append_stamped: count" + value);
    EXPECT_INVALID(ngramspec_corpus_draft(corpus.get(), motif.data(), n, out.data(), out.size(), &count, nullptr),
                   "ngramspec_corpus_draft: n" + value);
    EXPECT_INVALID(ngramspec_corpus_draft(corpus.get(), motif.data(), 3, out.data(), n, &count, nullptr),
                   "ngramspec_corpus_draft: room" + value);
    EXPECT_INVALID(ngramspec_match_drafter_update(drafter.get(), motif.data(), n),
                   "ngramspec_match_drafter_update: count" + value, "PTRDIFF_MAX");
    EXPECT_INVALID(ngramspec_match_drafter_predict(drafter.get(), out.data(), n, nullptr, &count),
                   "ngramspec_match_drafter_predict: capacity" + value);
    EXPECT_INVALID(ngramspec_match_drafter_predict(drafter.get(), out.data(), n, probabilities.data(), &count),
                   "ngramspec_match_drafter_predict: capacity" + value);
    EXPECT_INVALID(ngramspec_ngram_predictor_update(predictor.get(), motif.data(), n),
                   "ngramspec_ngram_predictor_update: count" + value);
    EXPECT_INVALID(ngramspec_ngram_predictor_predict(predictor.get(), out.data(), n, nullptr, &count),
                   "ngramspec_ngram_predictor_predict: capacity" + value);
  }
  // Nothing changed: one record of the motif, and the drafters draft what they drafted.
  EXPECT_EQ(ngramspec_corpus_records(corpus.get()), 1U);
  EXPECT_EQ(ngramspec_corpus_size(corpus.get()), motif.size());
  ASSERT_C_OK(ngramspec_match_drafter_predict(drafter.get(), out.data(), out.size(), nullptr, &count));
  EXPECT_EQ(count, out.size());  // a repeating context copies as far as the room goes
  EXPECT_EQ(out[0], 7U);

  // The batch: a prompt, stop tokens, a drafts buffer and model tokens no array can hold.
  const ngramspec_batch_config config = small_batch_config(2);
  const BatchPtr batch = make_batch(&config);
  for (const std::size_t n : huge) {
    SCOPED_TRACE(n);
    const std::string value = " = " + std::to_string(n) + " is too large";
    EXPECT_INVALID(ngramspec_batch_begin(batch.get(), 1, motif.data(), n, nullptr),
                   "ngramspec_batch_begin: prompt_length" + value);
    ngramspec_sequence_options options = ngramspec_sequence_options_default();
    options.stop_tokens = motif.data();
    options.n_stop_tokens = n;
    EXPECT_INVALID(ngramspec_batch_begin(batch.get(), 1, motif.data(), motif.size(), &options),
                   "ngramspec_batch_begin: options->n_stop_tokens" + value);
  }
  EXPECT_EQ(ngramspec_batch_size(batch.get()), 0U);
  ASSERT_C_OK(ngramspec_batch_begin(batch.get(), 1, motif.data(), motif.size(), nullptr));
  const ngramspec_sequence_id id = 1;
  std::array<std::size_t, 2> offsets{};
  std::size_t n_drafts = 0;
  std::array<Token, 8> drafts{};
  for (const std::size_t n : huge) {
    EXPECT_INVALID(ngramspec_batch_propose(batch.get(), &id, 1, drafts.data(), n, offsets.data(), 0, &n_drafts),
                   "ngramspec_batch_propose: drafts_capacity = " + std::to_string(n) + " is too large");
    const std::array<std::size_t, 2> model_offsets = {0, 1};
    ngramspec_step step{};
    EXPECT_INVALID(ngramspec_batch_accept(batch.get(), &id, 1, motif.data(), n, model_offsets.data(), &step),
                   "ngramspec_batch_accept: n_model_tokens = " + std::to_string(n) + " is too large");
  }
  // The prefill still steps.
  ASSERT_C_OK(ngramspec_batch_propose(batch.get(), &id, 1, drafts.data(), drafts.size(), offsets.data(), 0, &n_drafts));
  const std::array<std::size_t, 2> model_offsets = {0, 1};
  ngramspec_step step{};
  EXPECT_C_OK(ngramspec_batch_accept(batch.get(), &id, 1, motif.data(), 1, model_offsets.data(), &step));
  EXPECT_EQ(step.emitted, 1U);
}

// Sizes beyond a documented maximum or the machine's memory are refused up front naming the value
// and the limit, not allocated (max_record_tokens = SIZE_MAX was INTERNAL: vector::reserve).
TEST(CApiLimits, SizesBeyondTheirMaximumAreRefusedNamingTheValueAndTheLimit) {
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  ngramspec_corpus* corpus = sentinel_handle<ngramspec_corpus>();
  EXPECT_INVALID(ngramspec_corpus_create(kMax, &corpus), "ngramspec_corpus_create: ",
                 "max_bytes = " + std::to_string(kMax) + " is invalid",
                 "max_bytes() = " + std::to_string(SharedCorpus::max_bytes()));
  EXPECT_INVALID(ngramspec_corpus_create(SharedCorpus::max_bytes() + 1, &corpus), "kMaxTokens = 268435456");
  EXPECT_EQ(corpus, sentinel_handle<ngramspec_corpus>());

  const CorpusPtr live = make_corpus(SharedCorpus::min_bytes());
  ngramspec_batch_config config = small_batch_config(2);
  ngramspec_batch* batch = sentinel_handle<ngramspec_batch>();
  for (const std::size_t bad : {kMax, SharedCorpus::kMaxTokens + 1}) {
    config.max_record_tokens = bad;
    EXPECT_INVALID(ngramspec_batch_create(&config, live.get(), &batch),
                   "ngramspec_batch_create: ngramspec::BatchConfig: max_record_tokens = " + std::to_string(bad) +
                       " is invalid: must be at most SharedCorpus::kMaxTokens = 268435456");
  }
  EXPECT_EQ(batch, sentinel_handle<ngramspec_batch>());

  // max_drafts: the one rule of kMaxDraftsPerPass.
  config = small_batch_config(2);
  const BatchPtr owner = make_batch(&config);
  const std::vector<Token> prompt = {1, 2, 3};
  ngramspec_sequence_options options = ngramspec_sequence_options_default();
  for (const std::size_t bad : {kMax, kMaxDraftsPerPass + 1}) {
    options.max_drafts = bad;
    EXPECT_INVALID(ngramspec_batch_begin(owner.get(), 4, prompt.data(), prompt.size(), &options),
                   "sequence 4: ", "max_drafts = " + std::to_string(bad) + " is more than kMaxDraftsPerPass = 1024");
  }
  options.max_drafts = kMaxDraftsPerPass;
  EXPECT_C_OK(ngramspec_batch_begin(owner.get(), 4, prompt.data(), prompt.size(), &options));
}

// Model tokens the offsets do not cover were ignored (OK returned): offsets must start at 0 and
// end at n_model_tokens.
TEST(CApiLimits, AcceptRefusesModelTokensOutsideTheOffsets) {
  const ngramspec_batch_config config = small_batch_config(2);
  const BatchPtr batch = make_batch(&config);
  const std::vector<Token> prompt = {1, 2, 3};
  ASSERT_C_OK(ngramspec_batch_begin(batch.get(), 1, prompt.data(), prompt.size(), nullptr));
  ASSERT_C_OK(ngramspec_batch_begin(batch.get(), 2, prompt.data(), prompt.size(), nullptr));
  const std::array<ngramspec_sequence_id, 2> ids = {1, 2};
  std::array<std::size_t, 3> offsets{};
  std::size_t n_drafts = 0;
  ASSERT_C_OK(ngramspec_batch_propose(batch.get(), ids.data(), 2, nullptr, 0, offsets.data(), 0, &n_drafts));
  const std::vector<Token> model_tokens = {5, 6, 7};
  std::array<ngramspec_step, 2> steps{};
  const std::array<std::size_t, 3> tail_ignored = {0, 1, 2};
  EXPECT_INVALID(ngramspec_batch_accept(batch.get(), ids.data(), 2, model_tokens.data(), 3, tail_ignored.data(),
                                        steps.data()),
                 "ngramspec_batch_accept: offsets[0] = 0 and offsets[2] = 2 are invalid: they must be 0 and the "
                 "count of model tokens, 3");
  const std::array<std::size_t, 3> head_ignored = {1, 2, 3};
  EXPECT_INVALID(ngramspec_batch_accept(batch.get(), ids.data(), 2, model_tokens.data(), 3, head_ignored.data(),
                                        steps.data()),
                 "offsets[0] = 1 and offsets[2] = 3 are invalid");
  EXPECT_INVALID(ngramspec_batch_accept(batch.get(), nullptr, 0, model_tokens.data(), 3, head_ignored.data(), nullptr),
                 "offsets[0] = 1 and offsets[0] = 1 are invalid");
  // Nothing changed: the right call steps both.
  EXPECT_C_OK(ngramspec_batch_accept(batch.get(), ids.data(), 2, model_tokens.data(), 2, tail_ignored.data(),
                                     steps.data()));
  EXPECT_EQ(steps[0].emitted, 1U);
  EXPECT_EQ(steps[1].emitted, 1U);
}

// One cost grammar: "flat" is a cost in C; costs that would overflow are refused naming the point.
TEST(CApiLimits, TheCostGrammarIsVerifyCostsWithFlatAndNoOverflow) {
  ngramspec_batch_config config = small_batch_config(2);
  config.cost = "flat";
  EXPECT_TRUE(make_batch(&config) != nullptr);
  config.cost = "table:1=1e308,2=1e308";
  EXPECT_TRUE(make_batch(&config) != nullptr);
  config.cost = "table:1=1,2=1.79e308";
  ngramspec_batch* batch = sentinel_handle<ngramspec_batch>();
  EXPECT_INVALID(ngramspec_batch_create(&config, nullptr, &batch), "ngramspec_batch_create: ",
                 "'table:1=1,2=1.79e308' is not a cost", "more than kMaxCost");
  EXPECT_EQ(batch, sentinel_handle<ngramspec_batch>());
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NGRAMSPEC_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define NGRAMSPEC_TEST_SANITIZED 1
#endif
#endif

// Runs `body` in a child process whose address space is limited to 1 GiB (the limit binds
// nobody else); the child passes when `body` returns true, printing `body`'s complaint otherwise.
template <class Body>
void expect_in_child_under_1_gib(Body body) {
#ifdef NGRAMSPEC_TEST_SANITIZED
  (void)body;
  GTEST_SKIP() << "sanitizers reserve address space of their own; an address-space limit breaks them";
#else
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rlimit limit{};
    getrlimit(RLIMIT_AS, &limit);
    limit.rlim_cur = rlim_t{1} << 30;  // far above the test's own needs
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(2);
    _exit(body() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
#endif
}

// Under a lowered address-space limit (ulimit -v), a corpus whose memory cannot be had is
// NGRAMSPEC_ERROR_OUT_OF_MEMORY naming what was being made, never a crash or a bare bad_alloc.
TEST(CApiLimits, ACorpusBeyondTheAddressSpaceLimitIsOutOfMemoryNamingIt) {
  expect_in_child_under_1_gib([] {
    ngramspec_corpus* corpus = nullptr;
    const ngramspec_status status = ngramspec_corpus_create(SharedCorpus::bytes_for(std::size_t{1} << 26), &corpus);
    const std::string message = ngramspec_last_error();
    const bool ok = status == NGRAMSPEC_ERROR_OUT_OF_MEMORY && corpus == nullptr &&
                    message.find("ngramspec_corpus_create: out of memory: could not allocate ") == 0 &&
                    message.find(" bytes for a SharedCorpus") != std::string::npos;
    if (!ok) std::fprintf(stderr, "status %s, message \"%s\"\n", ngramspec_status_name(status), message.c_str());
    return ok;
  });
}

TEST(CApiBatch, CreateRejectsBadConfigsNamingTheFieldAndValue) {
  EXPECT_INVALID(ngramspec_batch_create(nullptr, nullptr, nullptr), "ngramspec_batch_create: out is NULL");
  struct BadConfig {
    ngramspec_batch_config config;
    std::vector<std::string> pieces;
  };
  const ngramspec_batch_config base = small_batch_config(2);
  std::vector<BadConfig> bad;
  bad.push_back({base, {"max_sequences = 0 is invalid"}});
  bad.back().config.max_sequences = 0;
  bad.push_back({base, {"max_pass_tokens = 1 is invalid"}});
  bad.back().config.max_pass_tokens = 1;
  bad.push_back({base, {"'knee:0' is not a cost"}});
  bad.back().config.cost = "knee:0";
  bad.push_back({base, {"'fast' is not a cost", "unknown form 'fast'"}});
  bad.back().config.cost = "fast";
  bad.push_back({base, {"'' is not a cost"}});
  bad.back().config.cost = "";
  bad.push_back({base, {"'table:2=1,1=2' is not a cost"}});
  bad.back().config.cost = "table:2=1,1=2";
  bad.push_back({base, {"MatchConfig: index_capacity = 2 is invalid"}});
  bad.back().config.drafter.cap = 2;
  bad.push_back({base, {"MatchConfig: min_confidence = -1"}});
  bad.back().config.drafter.min_confidence = -1;
  for (const BadConfig& b : bad) {
    ngramspec_batch* out = sentinel_handle<ngramspec_batch>();
    const std::string first = b.pieces.front();
    const std::string second = b.pieces.size() > 1 ? b.pieces[1] : first;
    EXPECT_INVALID(ngramspec_batch_create(&b.config, nullptr, &out), "ngramspec_batch_create: ", first, second);
    EXPECT_EQ(out, sentinel_handle<ngramspec_batch>());
  }
  // With the default drafter its configuration is not used, however wrong.
  ngramspec_batch_config defaults = base;
  defaults.default_drafter = 1;
  defaults.drafter.cap = 0;
  EXPECT_NE(make_batch(&defaults), nullptr);
  // NULL: BatchConfig's defaults (64 default MatchDrafters).
  const BatchPtr batch = make_batch(nullptr);
  ASSERT_NE(batch, nullptr);
  EXPECT_GE(ngramspec_batch_memory_bytes(batch.get()), 64 * MatchDrafter(MatchConfig{}).memory_bytes());
}

// max_sequences beyond BatchConfig::kMaxSequences, however far (2^62 was INTERNAL: a vector
// sized before the speculator checked it), is INVALID_ARGUMENT naming the value and the range,
// for chain and tree batches alike.
TEST(CApiBatch, AHugePoolIsARangeErrorNamingTheValue) {
  for (const std::size_t n : {BatchConfig::kMaxSequences + 1, std::size_t{1} << 32, std::size_t{1} << 62,
                              std::numeric_limits<std::size_t>::max() / 2, std::numeric_limits<std::size_t>::max()}) {
    SCOPED_TRACE(n);
    ngramspec_batch_config config = ngramspec_batch_config_default();
    config.max_sequences = n;
    const std::string message = "max_sequences = " + std::to_string(n) + " is invalid: must be between 1 and 1048576";
    ngramspec_batch* out = sentinel_handle<ngramspec_batch>();
    EXPECT_INVALID(ngramspec_batch_create(&config, nullptr, &out), "ngramspec_batch_create: ", message);
    EXPECT_INVALID(ngramspec_batch_create_tree(&config, nullptr, nullptr, &out), "ngramspec_batch_create_tree: ",
                   message);
    ngramspec_tree_config own = ngramspec_tree_config_default();
    own.vocab_size = 512;
    own.shared_top_k = 0;
    EXPECT_INVALID(ngramspec_batch_create_tree(&config, &own, nullptr, &out), "ngramspec_batch_create_tree: ", message);
    EXPECT_EQ(out, sentinel_handle<ngramspec_batch>());
  }
}

// Two batches in lockstep, the second also taking every kind of bad call between its propose
// and accept: each bad call is reported naming what is wrong, writes no output, and the two
// batches go on to draft, step and finish identically.
TEST(CApiBatch, BadCallsNameWhatIsWrongChangeNothingAndTheBatchGoesOn) {
  const ngramspec_batch_config config = small_batch_config(3);
  const BatchPtr control = make_batch(&config);
  const BatchPtr abused = make_batch(&config);
  ngramspec_batch* a = control.get();
  ngramspec_batch* b = abused.get();
  const std::vector<Token> prompt = {0, 1, 4, 6, 5, 2, 0, 1, 4};
  ngramspec_sequence_options options = ngramspec_sequence_options_default();
  options.max_new_tokens = 40;
  ngramspec_sequence_options short_options = options;
  short_options.max_new_tokens = 1;  // finished by its prefill
  for (ngramspec_batch* batch : {a, b}) {
    ASSERT_C_OK(ngramspec_batch_begin(batch, 7, prompt.data(), prompt.size(), &options));
    ASSERT_C_OK(ngramspec_batch_begin(batch, 8, prompt.data(), prompt.size(), &short_options));
  }

  // The prefill pass of both sequences.
  const std::vector<ngramspec_sequence_id> both = {7, 8};
  std::vector<Token> drafts(16);
  std::vector<std::size_t> offsets(3);
  std::vector<Token> model_tokens;
  std::vector<std::size_t> model_offsets;
  std::vector<ngramspec_step> steps_a(2);
  std::vector<ngramspec_step> steps_b(2);
  std::size_t n_drafts = 0;
  for (ngramspec_batch* batch : {a, b}) {
    ASSERT_C_OK(ngramspec_batch_propose(batch, both.data(), 2, drafts.data(), drafts.size(), offsets.data(), 0, &n_drafts));
    ASSERT_EQ(n_drafts, 0U);
  }
  const std::vector<Token> last_of_prompt = {prompt.back(), prompt.back()};
  forward(last_of_prompt, drafts, offsets, model_tokens, model_offsets);
  ASSERT_C_OK(ngramspec_batch_accept(a, both.data(), 2, model_tokens.data(), model_tokens.size(), model_offsets.data(),
                                     steps_a.data()));
  ASSERT_C_OK(ngramspec_batch_accept(b, both.data(), 2, model_tokens.data(), model_tokens.size(), model_offsets.data(),
                                     steps_b.data()));
  ASSERT_TRUE(same_step(steps_a[0], steps_b[0]) && same_step(steps_a[1], steps_b[1]));
  ASSERT_EQ(steps_a[1].finished, 1);
  ASSERT_EQ(steps_a[1].stop_reason, NGRAMSPEC_STOP_MAX_NEW_TOKENS);
  ASSERT_EQ(steps_a[0].finished, 0);
  Token last = model_tokens[0];

  // Sequence 7 proposes; then the abused batch takes every bad call.
  const std::vector<ngramspec_sequence_id> seven = {7};
  std::vector<Token> drafts_a(8);
  std::vector<Token> drafts_b(8);
  std::vector<std::size_t> offsets_a(2);
  std::vector<std::size_t> offsets_b(2);
  std::size_t n_a = 0;
  std::size_t n_b = 0;
  ASSERT_C_OK(ngramspec_batch_propose(a, seven.data(), 1, drafts_a.data(), drafts_a.size(), offsets_a.data(), 0, &n_a));
  ASSERT_C_OK(ngramspec_batch_propose(b, seven.data(), 1, drafts_b.data(), drafts_b.size(), offsets_b.data(), 0, &n_b));
  ASSERT_EQ(n_a, n_b);
  ASSERT_GT(n_a, 0U);
  ASSERT_EQ(drafts_a, drafts_b);
  const std::size_t pending = n_a;

  {  // begin
    const Token stops[] = {3, 5};
    ngramspec_sequence_options o = options;
    EXPECT_INVALID(ngramspec_batch_begin(nullptr, 9, prompt.data(), prompt.size(), &o),
                   "ngramspec_batch_begin: batch is NULL");
    EXPECT_INVALID(ngramspec_batch_begin(b, 9, nullptr, 3, &o), "ngramspec_batch_begin: prompt is NULL but prompt_length = 3");
    o.n_stop_tokens = 2;
    EXPECT_INVALID(ngramspec_batch_begin(b, 9, prompt.data(), prompt.size(), &o),
                   "ngramspec_batch_begin: sequence 9: options->stop_tokens is NULL but options->n_stop_tokens = 2");
    o.stop_tokens = stops;
    EXPECT_INVALID(ngramspec_batch_begin(b, 7, prompt.data(), prompt.size(), &o),
                   "ngramspec_batch_begin: sequence 7 is already running");
    EXPECT_INVALID(ngramspec_batch_begin(b, 8, prompt.data(), prompt.size(), &o),
                   "ngramspec_batch_begin: sequence 8 is already running");
    EXPECT_INVALID(ngramspec_batch_begin(b, 9, prompt.data(), 0, &o),
                   "ngramspec_batch_begin: sequence 9: the prompt is empty");
    o.max_context = 3;
    EXPECT_INVALID(ngramspec_batch_begin(b, 9, prompt.data(), 5, &o),
                   "ngramspec_batch_begin: sequence 9: the prompt has 5 tokens, more than max_context = 3");
    o.max_context = 0;
    o.max_drafts = 2000;
    EXPECT_INVALID(ngramspec_batch_begin(b, 9, prompt.data(), prompt.size(), &o),
                   "ngramspec_batch_begin: sequence 9: max_drafts = 2000 is more than kMaxDraftsPerPass = 1024");
    EXPECT_EQ(ngramspec_batch_contains(b, 9), 0);
    EXPECT_EQ(ngramspec_batch_size(b), 2U);
  }
  {  // propose
    constexpr Token kUnwritten = 0xABABABAB;
    std::vector<Token> d(8, kUnwritten);
    std::vector<std::size_t> o(3, 777);
    std::size_t n = 555;
    const std::vector<ngramspec_sequence_id> unknown = {7, 99};
    const std::vector<ngramspec_sequence_id> twice = {7, 7};
    const std::vector<ngramspec_sequence_id> finished = {8};
    const std::vector<ngramspec_sequence_id> four = {7, 8, 9, 10};
    EXPECT_INVALID(ngramspec_batch_propose(nullptr, seven.data(), 1, d.data(), d.size(), o.data(), 0, &n),
                   "ngramspec_batch_propose: batch is NULL");
    EXPECT_INVALID(ngramspec_batch_propose(b, nullptr, 1, d.data(), d.size(), o.data(), 0, &n),
                   "ngramspec_batch_propose: ids is NULL but n_ids = 1");
    EXPECT_INVALID(ngramspec_batch_propose(b, seven.data(), 1, nullptr, 8, o.data(), 0, &n),
                   "ngramspec_batch_propose: drafts is NULL but drafts_capacity = 8");
    EXPECT_INVALID(ngramspec_batch_propose(b, seven.data(), 1, d.data(), d.size(), nullptr, 0, &n),
                   "ngramspec_batch_propose: offsets is NULL");
    EXPECT_INVALID(ngramspec_batch_propose(b, seven.data(), 1, d.data(), d.size(), o.data(), 0, nullptr),
                   "ngramspec_batch_propose: n_drafts is NULL");
    EXPECT_INVALID(ngramspec_batch_propose(b, four.data(), 4, d.data(), d.size(), o.data(), 0, &n),
                   "ngramspec_batch_propose: n_ids = 4 is more than max_sequences = 3");
    EXPECT_INVALID(ngramspec_batch_propose(b, unknown.data(), 2, d.data(), d.size(), o.data(), 0, &n),
                   "ngramspec_batch_propose: sequence 99 is not running");
    EXPECT_INVALID(ngramspec_batch_propose(b, twice.data(), 2, d.data(), d.size(), o.data(), 0, &n),
                   "ngramspec_batch_propose: sequence 7 is listed twice (ids[1])");
    EXPECT_INVALID(ngramspec_batch_propose(b, finished.data(), 1, d.data(), d.size(), o.data(), 0, &n),
                   "ngramspec_batch_propose: sequence 8 (ids[0]) is finished (max_new_tokens)");
    EXPECT_EQ(n, 555U);
    EXPECT_THAT(d, ::testing::Each(kUnwritten));
    EXPECT_THAT(o, ::testing::Each(777U));
  }
  {  // accept
    ngramspec_step unwritten{};
    unwritten.emitted = 12345;
    std::vector<ngramspec_step> s(4, unwritten);
    const std::vector<Token> tokens(pending + 3, 1);
    const std::vector<ngramspec_sequence_id> unknown = {99};
    const std::vector<ngramspec_sequence_id> twice = {7, 7};
    const std::vector<ngramspec_sequence_id> finished = {8};
    const std::vector<ngramspec_sequence_id> four = {7, 8, 9, 10};
    const std::vector<std::size_t> one = {0, 1};
    const std::vector<std::size_t> two = {0, 1, 2};
    const std::vector<std::size_t> decreasing = {2, 1};
    const std::vector<std::size_t> past_the_tokens = {0, tokens.size() + 1};
    const std::vector<std::size_t> none = {0, 0};
    const std::vector<std::size_t> too_many = {0, pending + 2};
    const std::vector<std::size_t> five(5, 0);
    EXPECT_INVALID(ngramspec_batch_accept(nullptr, seven.data(), 1, tokens.data(), 1, one.data(), s.data()),
                   "ngramspec_batch_accept: batch is NULL");
    EXPECT_INVALID(ngramspec_batch_accept(b, nullptr, 1, tokens.data(), 1, one.data(), s.data()),
                   "ngramspec_batch_accept: ids is NULL but n_ids = 1");
    EXPECT_INVALID(ngramspec_batch_accept(b, seven.data(), 1, nullptr, 2, one.data(), s.data()),
                   "ngramspec_batch_accept: model_tokens is NULL but n_model_tokens = 2");
    EXPECT_INVALID(ngramspec_batch_accept(b, seven.data(), 1, tokens.data(), 1, nullptr, s.data()),
                   "ngramspec_batch_accept: offsets is NULL");
    EXPECT_INVALID(ngramspec_batch_accept(b, seven.data(), 1, tokens.data(), 1, one.data(), nullptr),
                   "ngramspec_batch_accept: steps is NULL but n_ids = 1");
    EXPECT_INVALID(ngramspec_batch_accept(b, four.data(), 4, tokens.data(), 0, five.data(), s.data()),
                   "ngramspec_batch_accept: n_ids = 4 is more than max_sequences = 3");
    EXPECT_INVALID(ngramspec_batch_accept(b, unknown.data(), 1, tokens.data(), 1, one.data(), s.data()),
                   "ngramspec_batch_accept: sequence 99 is not running");
    EXPECT_INVALID(ngramspec_batch_accept(b, twice.data(), 2, tokens.data(), 2, two.data(), s.data()),
                   "ngramspec_batch_accept: sequence 7 is listed twice (ids[1])");
    EXPECT_INVALID(ngramspec_batch_accept(b, finished.data(), 1, tokens.data(), 1, one.data(), s.data()),
                   "ngramspec_batch_accept: sequence 8 (ids[0]) is finished (max_new_tokens)");
    // Offsets run from 0 to n_model_tokens: tokens outside them are refused, not ignored.
    EXPECT_INVALID(ngramspec_batch_accept(b, seven.data(), 1, tokens.data(), tokens.size(), decreasing.data(), s.data()),
                   "ngramspec_batch_accept: offsets[0] = 2 and offsets[1] = 1 are invalid: they must be 0 and the "
                   "count of model tokens, " + std::to_string(tokens.size()));
    EXPECT_INVALID(
        ngramspec_batch_accept(b, seven.data(), 1, tokens.data(), tokens.size(), past_the_tokens.data(), s.data()),
        "ngramspec_batch_accept: offsets[0] = 0 and offsets[1] = " + std::to_string(tokens.size() + 1) +
            " are invalid", "model tokens, " + std::to_string(tokens.size()));
    EXPECT_INVALID(ngramspec_batch_accept(b, seven.data(), 1, tokens.data(), 1, none.data(), s.data()),
                   "ngramspec_batch_accept: offsets[0] = 0 and offsets[1] = 0 are invalid");
    EXPECT_INVALID(ngramspec_batch_accept(b, seven.data(), 1, tokens.data(), 0, none.data(), s.data()),
                   "ngramspec_batch_accept: sequence 7 has 0 model tokens; it needs 1 to " + std::to_string(pending + 1));
    EXPECT_INVALID(ngramspec_batch_accept(b, seven.data(), 1, tokens.data(), too_many[1], too_many.data(), s.data()),
                   "ngramspec_batch_accept: sequence 7 has " + std::to_string(pending + 2) + " model tokens");
    for (const ngramspec_step& step : s) EXPECT_EQ(step.emitted, 12345U);
  }
  {  // finish, cancel, stats
    ngramspec_batch_stats stats{};
    stats.proposals = 4242;
    EXPECT_INVALID(ngramspec_batch_finish(nullptr, 7), "ngramspec_batch_finish: batch is NULL");
    EXPECT_INVALID(ngramspec_batch_cancel(nullptr, 7), "ngramspec_batch_cancel: batch is NULL");
    EXPECT_INVALID(ngramspec_batch_finish(b, 42), "ngramspec_batch_finish: sequence 42 is not running");
    EXPECT_INVALID(ngramspec_batch_cancel(b, 42), "ngramspec_batch_cancel: sequence 42 is not running");
    // The symbol that programs built before the header's macro call, and the call the macro makes.
    EXPECT_INVALID((ngramspec_batch_stats_get)(nullptr, &stats), "ngramspec_batch_stats_get: batch is NULL");
    EXPECT_INVALID((ngramspec_batch_stats_get)(b, nullptr), "ngramspec_batch_stats_get: out is NULL");
    EXPECT_INVALID(ngramspec_batch_stats_get(nullptr, &stats), "ngramspec_batch_stats_get_sized: batch is NULL");
    EXPECT_INVALID(ngramspec_batch_stats_get(b, nullptr), "ngramspec_batch_stats_get_sized: out is NULL");
    EXPECT_INVALID(ngramspec_batch_stats_get_sized(b, &stats, 36), "ngramspec_batch_stats_get_sized: out_size = 36");
    EXPECT_EQ(stats.proposals, 4242U);
  }
  EXPECT_TRUE(same_stats(a, b));
  EXPECT_EQ(ngramspec_batch_size(b), 2U);

  // Both go on alike to the end of sequence 7.
  ASSERT_C_OK(ngramspec_batch_finish(a, 8));
  ASSERT_C_OK(ngramspec_batch_finish(b, 8));
  std::size_t emitted = 1;
  for (int pass = 0; pass < 60; ++pass) {
    if (pass > 0) {
      ASSERT_C_OK(ngramspec_batch_propose(a, seven.data(), 1, drafts_a.data(), drafts_a.size(), offsets_a.data(), 0, &n_a));
      ASSERT_C_OK(ngramspec_batch_propose(b, seven.data(), 1, drafts_b.data(), drafts_b.size(), offsets_b.data(), 0, &n_b));
      ASSERT_EQ(n_a, n_b);
      ASSERT_EQ(drafts_a, drafts_b);
    }
    const std::vector<Token> lasts = {last};
    forward(lasts, drafts_a, offsets_a, model_tokens, model_offsets);
    ASSERT_C_OK(ngramspec_batch_accept(a, seven.data(), 1, model_tokens.data(), model_tokens.size(),
                                       model_offsets.data(), steps_a.data()));
    ASSERT_C_OK(ngramspec_batch_accept(b, seven.data(), 1, model_tokens.data(), model_tokens.size(),
                                       model_offsets.data(), steps_b.data()));
    ASSERT_TRUE(same_step(steps_a[0], steps_b[0]));
    emitted += steps_a[0].emitted;
    last = model_tokens[steps_a[0].emitted - 1];
    if (steps_a[0].finished) break;
  }
  EXPECT_EQ(steps_a[0].finished, 1);
  EXPECT_EQ(emitted, 40U);
  EXPECT_TRUE(same_stats(a, b));
  EXPECT_C_OK(ngramspec_batch_finish(a, 7));
  EXPECT_C_OK(ngramspec_batch_finish(b, 7));
  EXPECT_EQ(ngramspec_batch_size(a), 0U);
  EXPECT_EQ(ngramspec_batch_size(b), 0U);
}

TEST(CApiBatch, AFullPoolRefusesAnotherSequenceUntilOneEnds) {
  const ngramspec_batch_config config = small_batch_config(1);
  const BatchPtr batch = make_batch(&config);
  const std::vector<Token> prompt = {1, 2, 3};
  ASSERT_C_OK(ngramspec_batch_begin(batch.get(), 1, prompt.data(), prompt.size(), nullptr));
  EXPECT_INVALID(ngramspec_batch_begin(batch.get(), 2, prompt.data(), prompt.size(), nullptr),
                 "ngramspec_batch_begin: sequence 2: all 1 sequences of the pool", "max_sequences");
  EXPECT_EQ(ngramspec_batch_contains(batch.get(), 2), 0);
  EXPECT_C_OK(ngramspec_batch_cancel(batch.get(), 1));
  EXPECT_C_OK(ngramspec_batch_begin(batch.get(), 2, prompt.data(), prompt.size(), nullptr));
  EXPECT_EQ(ngramspec_batch_contains(batch.get(), 2), 1);
  EXPECT_EQ(ngramspec_batch_contains(batch.get(), 1), 0);
}

TEST(CApiBatch, ASequenceThatMayEmitNothingStartsFinished) {
  const ngramspec_batch_config config = small_batch_config(2);
  const BatchPtr batch = make_batch(&config);
  const std::vector<Token> prompt = {1, 2, 3};
  ngramspec_sequence_options none = ngramspec_sequence_options_default();
  none.max_new_tokens = 0;
  ngramspec_sequence_options full = ngramspec_sequence_options_default();
  full.max_context = prompt.size();
  ASSERT_C_OK(ngramspec_batch_begin(batch.get(), 1, prompt.data(), prompt.size(), &none));
  ASSERT_C_OK(ngramspec_batch_begin(batch.get(), 2, prompt.data(), prompt.size(), &full));
  const std::vector<ngramspec_sequence_id> ids = {1, 2};
  std::vector<std::size_t> offsets(2);
  std::size_t n = 0;
  EXPECT_INVALID(ngramspec_batch_propose(batch.get(), ids.data(), 1, nullptr, 0, offsets.data(), 0, &n),
                 "sequence 1 (ids[0]) is finished (max_new_tokens)");
  EXPECT_INVALID(ngramspec_batch_propose(batch.get(), ids.data() + 1, 1, nullptr, 0, offsets.data(), 0, &n),
                 "sequence 2 (ids[0]) is finished (max_context)");
  EXPECT_C_OK(ngramspec_batch_finish(batch.get(), 1));
  EXPECT_C_OK(ngramspec_batch_cancel(batch.get(), 2));
  EXPECT_EQ(ngramspec_batch_size(batch.get()), 0U);
}

TEST(CApiBatch, FinishAppendsTheOutputToTheCorpusAndCancelDoesNot) {
  const CorpusPtr corpus = make_corpus(SharedCorpus::min_bytes());
  ngramspec_batch_config config = small_batch_config(2);
  config.max_record_tokens = 5;
  const BatchPtr batch = make_batch(&config, corpus.get());
  const std::vector<Token> prompt = {1, 2, 3};
  ngramspec_sequence_options options = ngramspec_sequence_options_default();
  options.max_new_tokens = 8;
  options.speculate = 0;
  const std::vector<ngramspec_sequence_id> ids = {1, 2};
  for (const ngramspec_sequence_id id : ids) {
    ASSERT_C_OK(ngramspec_batch_begin(batch.get(), id, prompt.data(), prompt.size(), &options));
  }
  std::vector<std::size_t> offsets(3);
  std::size_t n = 0;
  const std::vector<std::size_t> model_offsets = {0, 1, 2};
  const std::vector<Token> model_tokens = {4, 4};
  std::vector<ngramspec_step> steps(2);
  for (int pass = 0; pass < 8; ++pass) {
    ASSERT_C_OK(ngramspec_batch_propose(batch.get(), ids.data(), 2, nullptr, 0, offsets.data(), 0, &n));
    ASSERT_EQ(n, 0U);  // speculate = 0
    ASSERT_C_OK(ngramspec_batch_accept(batch.get(), ids.data(), 2, model_tokens.data(), 2, model_offsets.data(),
                                       steps.data()));
  }
  EXPECT_EQ(steps[0].finished, 1);
  EXPECT_C_OK(ngramspec_batch_cancel(batch.get(), 2));
  EXPECT_EQ(ngramspec_corpus_records(corpus.get()), 0U);
  EXPECT_C_OK(ngramspec_batch_finish(batch.get(), 1));
  EXPECT_EQ(ngramspec_corpus_records(corpus.get()), 1U);
  EXPECT_EQ(ngramspec_corpus_size(corpus.get()), 5U);  // max_record_tokens
}

// ---- BatchSpeculator: serving through the C API ----------------------------------------------------

/// One running sequence: its case, the model that answers for it, what it emitted.
struct CLane {
  DecodeCase c;
  ngramspec_sequence_id id = 0;
  GreedyModel model{NextTokenRule{}, GreedyModel::kUnlimitedBatch};
  GreedyReference reference;
  std::vector<Token> output;
};

ngramspec_stop_reason c_reason(StopReason reason) {
  switch (reason) {
    case StopReason::max_new_tokens: return NGRAMSPEC_STOP_MAX_NEW_TOKENS;
    case StopReason::stop_token: return NGRAMSPEC_STOP_TOKEN;
    case StopReason::max_context: return NGRAMSPEC_STOP_MAX_CONTEXT;
    case StopReason::callback: break;
  }
  ADD_FAILURE() << "a batch never stops for a callback";
  return NGRAMSPEC_STOP_MAX_NEW_TOKENS;
}

/// Serves random sequences through a C batch and, in lockstep, the C++ BatchSpeculator it wraps:
/// sequences join and leave (finished or cancelled), each pass steps a random subset in random
/// order, sometimes with a small drafts buffer, extra prefill tokens or drafts trimmed by the
/// engine. Every C result must be the C++ one and every output plain greedy decoding.
void serve_through_c(std::uint64_t seed, std::size_t& finished_total, std::size_t& drafted_total) {
  SCOPED_TRACE("serving seed " + std::to_string(seed));
  std::mt19937_64 rng(scramble(seed));
  static constexpr const char* kCosts[] = {nullptr, "knee:1", "knee:8", "knee:256",
                                           "table:1=1,2=1.25,3=1.71,5=2.77,9=5.06", "table:4=1,16=1.1,64=3"};
  static constexpr std::size_t kPools[] = {1, 2, 3, 7, 16};
  ngramspec_batch_config config = ngramspec_batch_config_default();
  config.max_sequences = kPools[rng() % std::size(kPools)];
  config.max_pass_tokens = rng() % 3 == 0 ? 2 + rng() % (8 * config.max_sequences) : 0;
  config.max_record_tokens = 16 + rng() % 64;
  config.cost = kCosts[rng() % std::size(kCosts)];
  config.default_drafter = rng() % 3 == 0 ? 1 : 0;
  config.drafter.cap = 8 + rng() % 120;
  config.drafter.count_window = rng() % 2 == 0 ? 0 : 4 + rng() % (config.drafter.cap - 3);
  config.drafter.copy_min_match = 1 + rng() % 3;
  config.drafter.min_confidence = rng() % 2 == 0 ? 0 : 0.03;
  SCOPED_TRACE(std::string("cost ") + (config.cost ? config.cost : "none") + ", pool " +
               std::to_string(config.max_sequences) + ", default drafter " + std::to_string(config.default_drafter));

  const bool with_corpus = rng() % 2 == 0;
  SharedCorpus cpp_corpus(SharedCorpus::min_bytes());
  const CorpusPtr c_corpus = make_corpus(SharedCorpus::min_bytes());
  const BatchPtr batch = make_batch(&config, with_corpus ? c_corpus.get() : nullptr);
  ASSERT_NE(batch, nullptr);
  BatchConfig cpp_config;
  cpp_config.max_sequences = config.max_sequences;
  cpp_config.max_pass_tokens = config.max_pass_tokens;
  cpp_config.max_record_tokens = config.max_record_tokens;
  if (config.cost != nullptr) cpp_config.cost = VerifyCost::parse(config.cost);
  MatchConfig cpp_drafter;
  cpp_drafter.index_capacity = config.drafter.cap;
  cpp_drafter.count_window = config.drafter.count_window;
  cpp_drafter.copy_min_match = config.drafter.copy_min_match;
  cpp_drafter.min_confidence = config.drafter.min_confidence;
  if (config.default_drafter != 0) cpp_drafter = BatchSpeculator<>::default_drafter(cpp_config);
  BatchSpeculator<> cpp(cpp_config, cpp_drafter, with_corpus ? &cpp_corpus : nullptr);

  const std::size_t pool = config.max_sequences;
  const std::size_t total = pool * 3 + 4;
  std::vector<std::unique_ptr<CLane>> lanes;
  std::size_t started = 0;
  std::vector<ngramspec_sequence_id> ids;
  std::vector<CLane*> pass;
  std::vector<Token> drafts, cpp_drafts_buffer;
  std::vector<std::size_t> offsets, cpp_offsets;
  std::vector<Token> model_tokens;
  std::vector<std::size_t> model_offsets;
  std::vector<ngramspec_step> steps;
  std::vector<StepOutcome> cpp_steps;

  const auto retire = [&](std::size_t index, bool cancel) {
    CLane& lane = *lanes[index];
    EXPECT_THAT(lane.model.violations(), ::testing::IsEmpty()) << lane.c.describe();
    if (cancel) {
      EXPECT_C_OK(ngramspec_batch_cancel(batch.get(), lane.id));
      cpp.cancel(lane.id);
    } else {
      EXPECT_C_OK(ngramspec_batch_finish(batch.get(), lane.id));
      cpp.finish(lane.id);
      ++finished_total;
    }
    EXPECT_EQ(ngramspec_batch_contains(batch.get(), lane.id), 0);
    lanes.erase(lanes.begin() + static_cast<std::ptrdiff_t>(index));
  };

  for (std::size_t iteration = 0; started < total || !lanes.empty(); ++iteration) {
    ASSERT_LT(iteration, 100000U) << "serving did not end";
    while (lanes.size() < pool && started < total && (lanes.empty() || rng() % 4 != 0)) {
      auto lane = std::make_unique<CLane>();
      lane->c = random_decode_case(seed * 100003 + started);
      lane->id = scramble(seed + started) | 1;
      ++started;
      const DecodeOptions& o = lane->c.options;
      ngramspec_sequence_options options;
      options.max_new_tokens = o.max_new_tokens;
      options.stop_tokens = o.stop_tokens.empty() ? nullptr : o.stop_tokens.data();
      options.n_stop_tokens = o.stop_tokens.size();
      options.max_context = o.max_context;
      options.speculate = o.speculate ? 1 : 0;
      options.max_drafts = o.max_drafts;
      const ngramspec_status status =
          ngramspec_batch_begin(batch.get(), lane->id, lane->c.prompt.data(), lane->c.prompt.size(), &options);
      if (o.max_drafts > kMaxDraftsPerPass) {  // a case the C++ refuses too
        EXPECT_INVALID(status, "max_drafts = " + std::to_string(o.max_drafts));
        EXPECT_THROW(cpp.begin(lane->id, lane->c.prompt, o), std::invalid_argument);
        continue;
      }
      ASSERT_EQ(status, NGRAMSPEC_OK) << ngramspec_last_error() << " " << lane->c.describe();
      cpp.begin(lane->id, lane->c.prompt, o);
      lane->model = GreedyModel(lane->c.rule.rule, GreedyModel::kUnlimitedBatch);
      lane->reference = plain_greedy(lane->c.rule.rule, lane->c.prompt, o);
      // The header's rule for a sequence that starts finished, which a C caller cannot query.
      const bool starts_finished =
          o.max_new_tokens == 0 || (o.max_context != 0 && lane->c.prompt.size() >= o.max_context);
      ASSERT_EQ(cpp.state(lane->id).finished, starts_finished) << lane->c.describe();
      if (starts_finished) {
        EXPECT_TRUE(lane->reference.tokens.empty()) << lane->c.describe();
        ASSERT_C_OK(ngramspec_batch_finish(batch.get(), lane->id));
        cpp.finish(lane->id);
        continue;
      }
      lanes.push_back(std::move(lane));
    }
    ASSERT_EQ(ngramspec_batch_size(batch.get()), cpp.size());
    if (lanes.empty()) continue;

    pick_pass(lanes, rng, pass, ids);

    std::size_t room = 0;
    for (const CLane* lane : pass) room += std::min<std::size_t>(lane->c.options.max_drafts, 64);
    if (rng() % 5 == 0) room = rng() % (room + 1);
    const std::size_t extra = rng() % 6 == 0 ? rng() % 40 : 0;
    drafts.assign(room, 0);
    cpp_drafts_buffer.assign(room, 0);
    offsets.assign(ids.size() + 1, 0);
    cpp_offsets.assign(ids.size() + 1, 0);
    std::size_t n_drafts = 0;
    ASSERT_C_OK(ngramspec_batch_propose(batch.get(), ids.data(), ids.size(), drafts.data(), drafts.size(),
                                        offsets.data(), extra, &n_drafts));
    const std::size_t cpp_n = cpp.propose(ids, cpp_drafts_buffer, cpp_offsets, extra);
    ASSERT_EQ(n_drafts, cpp_n);
    ASSERT_EQ(offsets, cpp_offsets);
    ASSERT_EQ(drafts, cpp_drafts_buffer);
    ASSERT_LE(n_drafts, room);

    model_tokens.clear();
    model_offsets.assign(1, 0);
    for (std::size_t i = 0; i < pass.size(); ++i) {
      CLane& lane = *pass[i];
      const std::size_t n = offsets[i + 1] - offsets[i];
      std::vector<Token> next;
      if (lane.output.empty()) {
        ASSERT_EQ(n, 0U) << "a sequence drafts before its prefill";
        next.resize(lane.c.prompt.size());
        lane.model.forward(0, lane.c.prompt, next);
        model_tokens.push_back(next.back());
      } else {
        const std::size_t verified = rng() % 10 == 0 ? static_cast<std::size_t>(rng() % (n + 1)) : n;
        std::vector<Token> fed{lane.output.back()};
        fed.insert(fed.end(), drafts.begin() + static_cast<std::ptrdiff_t>(offsets[i]),
                   drafts.begin() + static_cast<std::ptrdiff_t>(offsets[i] + verified));
        next.resize(fed.size());
        const std::size_t cache = lane.c.prompt.size() + lane.output.size() - 1;
        lane.model.forward(cache, fed, next);
        model_tokens.insert(model_tokens.end(), next.begin(), next.end());
        drafted_total += verified;
      }
      model_offsets.push_back(model_tokens.size());
    }

    steps.assign(ids.size(), ngramspec_step{});
    cpp_steps.assign(ids.size(), StepOutcome{});
    ASSERT_C_OK(ngramspec_batch_accept(batch.get(), ids.data(), ids.size(), model_tokens.data(), model_tokens.size(),
                                       model_offsets.data(), steps.data()));
    cpp.accept(ids, model_tokens, model_offsets, cpp_steps);
    for (std::size_t i = 0; i < pass.size(); ++i) {
      CLane& lane = *pass[i];
      const ngramspec_step& step = steps[i];
      const StepOutcome& expected = cpp_steps[i];
      ASSERT_EQ(step.emitted, expected.emitted);
      ASSERT_EQ(step.accepted, expected.accepted);
      ASSERT_EQ(step.rollback_to, expected.rollback_to);
      ASSERT_EQ(step.discarded, expected.discarded);
      ASSERT_EQ(step.finished, expected.finished ? 1 : 0);
      if (step.finished != 0) {
        ASSERT_EQ(step.stop_reason, c_reason(expected.stop_reason));
      }
      ASSERT_GE(step.emitted, 1U);
      lane.output.insert(lane.output.end(), model_tokens.begin() + static_cast<std::ptrdiff_t>(model_offsets[i]),
                         model_tokens.begin() + static_cast<std::ptrdiff_t>(model_offsets[i] + step.emitted));
      if (step.discarded != 0) lane.model.rollback(step.rollback_to);
      ASSERT_EQ(lane.model.length(), lane.c.prompt.size() + lane.output.size() - 1) << lane.c.describe();
      const std::size_t common = std::min(lane.output.size(), lane.reference.tokens.size());
      ASSERT_TRUE(std::equal(lane.output.begin(), lane.output.begin() + static_cast<std::ptrdiff_t>(common),
                             lane.reference.tokens.begin()))
          << lane.c.describe();
      if (step.finished != 0) {
        EXPECT_EQ(lane.output, lane.reference.tokens) << lane.c.describe();
        EXPECT_EQ(step.stop_reason, c_reason(lane.reference.stop_reason)) << lane.c.describe();
      } else {
        EXPECT_LT(lane.output.size(), lane.reference.tokens.size()) << lane.c.describe();
      }
    }
    for (std::size_t i = lanes.size(); i-- > 0;) {
      if (cpp.state(lanes[i]->id).finished) {
        retire(i, rng() % 5 == 0);
      } else if (rng() % 60 == 0) {
        retire(i, true);
      }
    }
  }
  EXPECT_EQ(ngramspec_batch_size(batch.get()), 0U);
  ngramspec_batch_stats stats{};
  ASSERT_C_OK(ngramspec_batch_stats_get(batch.get(), &stats));
  EXPECT_EQ(stats.proposals, cpp.stats().proposals);
  EXPECT_EQ(stats.drafted, cpp.stats().drafted);
  EXPECT_EQ(stats.accepted, cpp.stats().accepted);
  EXPECT_EQ(stats.emitted, cpp.stats().emitted);
  EXPECT_EQ(ngramspec_corpus_size(c_corpus.get()), cpp_corpus.size());
  EXPECT_EQ(ngramspec_corpus_records(c_corpus.get()), cpp_corpus.records());
}

TEST(CApiProperty, ABatchServedThroughTheCApiEmitsPlainGreedyDecodingAndWhatTheCppBatchDoes) {
  std::size_t finished = 0;
  std::size_t drafted = 0;
  for (std::uint64_t seed = 1; seed <= 30; ++seed) serve_through_c(seed, finished, drafted);
  EXPECT_GT(finished, 150U);
  EXPECT_GT(drafted, 500U) << "the runs must speculate for the invariant to say anything";
}

// ---- Tree batches --------------------------------------------------------------------------------

BatchPtr make_tree_batch(const ngramspec_batch_config* config, const ngramspec_tree_config* tree,
                         ngramspec_corpus* corpus = nullptr) {
  ngramspec_batch* p = nullptr;
  EXPECT_EQ(ngramspec_batch_create_tree(config, tree, corpus, &p), NGRAMSPEC_OK) << ngramspec_last_error();
  return BatchPtr(p);
}

TEST(CApiTrees, TheTreeConfigDefaultsAreTheCppDefaults) {
  const TreeConfig cpp;
  const ngramspec_tree_config c = ngramspec_tree_config_default();
  EXPECT_EQ(c.struct_size, sizeof(ngramspec_tree_config));
  EXPECT_EQ(c.successor_slots, cpp.successor_slots);
  EXPECT_EQ(c.max_children, cpp.max_children);
  EXPECT_EQ(c.vocab_size, cpp.vocab_size);
  EXPECT_EQ(c.top_k, cpp.top_k);
  EXPECT_NE(c.shared_top_k, 0);
  EXPECT_EQ(c.carry_over, cpp.carry_over ? 1 : 0);
  EXPECT_EQ(c.enrich_counts, cpp.enrich_counts ? 1 : 0);
  EXPECT_EQ(NGRAMSPEC_TREE_ROOT, kTreeRoot);
}

/// One tree sequence of a C serving run, its model and what it emitted.
struct TreeLane {
  DecodeCase c;
  SequenceId id = 0;
  GreedyModel model{NextTokenRule{}, GreedyModel::kUnlimitedBatch};
  GreedyReference reference;
  std::vector<Token> output;
};

/// Serves random sequences through a C tree batch and, pass for pass, the C++
/// BatchSpeculator<TreeDrafter> of the same configuration: both propose the same trees and decide
/// the same steps, and every output is plain greedy decoding.
void serve_trees_through_c(std::uint64_t seed, std::size_t& finished_total, std::size_t& nodes_total) {
  SCOPED_TRACE("tree serving seed " + std::to_string(seed));
  std::mt19937_64 rng(scramble(seed ^ 0x43545245ULL));
  static constexpr const char* kCosts[] = {nullptr, "knee:8", "knee:256", "table:1=1,2=1.25,3=1.71,5=2.77,9=5.06"};
  constexpr std::size_t kVocab = 96;
  ngramspec_batch_config config = ngramspec_batch_config_default();
  config.max_sequences = 1 + rng() % 8;
  config.max_pass_tokens = rng() % 3 == 0 ? 2 + rng() % (8 * config.max_sequences) : 0;
  config.cost = kCosts[rng() % std::size(kCosts)];
  ngramspec_tree_config tree = ngramspec_tree_config_default();
  tree.max_children = 1 + rng() % 8;
  tree.top_k = 1 + rng() % 8;
  tree.vocab_size = rng() % 4 == 0 ? 0 : kVocab;
  tree.shared_top_k = rng() % 2 == 0 ? 1 : 0;
  tree.carry_over = rng() % 2 == 0 ? 1 : 0;
  tree.enrich_counts = rng() % 2 == 0 ? 1 : 0;
  const BatchPtr batch = make_tree_batch(&config, &tree);
  ASSERT_TRUE(batch);

  BatchConfig cpp_config;
  cpp_config.max_sequences = config.max_sequences;
  cpp_config.max_pass_tokens = config.max_pass_tokens;
  if (config.cost != nullptr) cpp_config.cost = VerifyCost::parse(config.cost);
  TreeConfig cpp_tree;
  cpp_tree.chain = BatchSpeculator<>::default_drafter(cpp_config);
  cpp_tree.max_children = tree.max_children;
  cpp_tree.top_k = tree.top_k;
  cpp_tree.carry_over = tree.carry_over != 0;
  cpp_tree.enrich_counts = tree.enrich_counts != 0;
  std::optional<TopKTable> table;
  if (tree.shared_top_k != 0 && tree.vocab_size != 0) {
    table.emplace(tree.vocab_size, tree.top_k);
  } else {
    cpp_tree.vocab_size = tree.vocab_size;
  }
  BatchSpeculator<TreeDrafter> cpp(cpp_config, [&] { return TreeDrafter(cpp_tree, table ? &*table : nullptr); });
  const std::size_t k = ngramspec_batch_top_k(batch.get());
  ASSERT_EQ(k, tree.vocab_size != 0 ? tree.top_k : 0);
  ASSERT_EQ(k, cpp.top_k());

  std::vector<std::unique_ptr<TreeLane>> lanes;
  std::vector<TreeLane*> pass;
  std::vector<SequenceId> ids;
  std::size_t started = 0;
  const std::size_t total = 3 * config.max_sequences + 3;
  for (std::size_t iteration = 0; started < total || !lanes.empty(); ++iteration) {
    ASSERT_LT(iteration, 100000U) << "serving did not end";
    while (lanes.size() < config.max_sequences && started < total) {
      auto lane = std::make_unique<TreeLane>();
      lane->c = random_decode_case(seed * 1009 + started);
      lane->c.options.max_drafts = 1 + rng() % 32;
      lane->id = scramble(seed + 77 * started);
      lane->model = GreedyModel(lane->c.rule.rule, GreedyModel::kUnlimitedBatch);
      lane->model.set_max_positions(kv_positions(lane->c.options));
      lane->reference = plain_greedy(lane->c.rule.rule, lane->c.prompt, lane->c.options);
      ++started;
      const DecodeOptions& o = lane->c.options;
      ngramspec_sequence_options options = ngramspec_sequence_options_default();
      options.max_new_tokens = o.max_new_tokens;
      options.stop_tokens = o.stop_tokens.data();
      options.n_stop_tokens = o.stop_tokens.size();
      options.max_context = o.max_context;
      options.speculate = o.speculate ? 1 : 0;
      options.max_drafts = o.max_drafts;
      ASSERT_C_OK(ngramspec_batch_begin(batch.get(), lane->id, lane->c.prompt.data(), lane->c.prompt.size(), &options));
      cpp.begin(lane->id, lane->c.prompt, o);
      if (cpp.state(lane->id).finished) {
        ASSERT_C_OK(ngramspec_batch_finish(batch.get(), lane->id));
        cpp.finish(lane->id);
        continue;
      }
      lanes.push_back(std::move(lane));
    }
    if (lanes.empty()) continue;
    pick_pass(lanes, rng, pass, ids);

    std::size_t capacity = 0;
    for (const TreeLane* lane : pass) capacity += lane->c.options.max_drafts;
    std::vector<Token> tokens(capacity);
    std::vector<std::int32_t> parents(capacity);
    std::vector<std::size_t> offsets(ids.size() + 1);
    std::size_t n_nodes = 0;
    ASSERT_C_OK(ngramspec_batch_propose_trees(batch.get(), ids.data(), ids.size(), tokens.data(), parents.data(),
                                              capacity, offsets.data(), 0, &n_nodes));
    std::vector<Token> cpp_tokens(capacity);
    std::vector<std::int32_t> cpp_parents(capacity);
    std::vector<std::size_t> cpp_offsets(ids.size() + 1);
    ASSERT_EQ(cpp.propose_trees(ids, cpp_tokens, cpp_parents, cpp_offsets), n_nodes);
    ASSERT_EQ(offsets, cpp_offsets);
    ASSERT_TRUE(std::equal(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n_nodes), cpp_tokens.begin()));
    ASSERT_TRUE(std::equal(parents.begin(), parents.begin() + static_cast<std::ptrdiff_t>(n_nodes), cpp_parents.begin()));
    nodes_total += n_nodes;

    const bool send_top = k != 0 && rng() % 3 != 0;
    std::vector<Token> model_tokens;
    std::vector<Token> top;
    std::vector<std::size_t> model_offsets{0};
    std::vector<std::size_t> positions;
    for (std::size_t i = 0; i < pass.size(); ++i) {
      TreeLane& lane = *pass[i];
      const std::size_t n = offsets[i + 1] - offsets[i];
      positions.push_back(lane.model.length());
      if (lane.output.empty()) {
        std::vector<Token> next(lane.c.prompt.size());
        lane.model.forward(0, lane.c.prompt, next);
        model_tokens.push_back(next.back());
        for (std::size_t r = 0; r < k; ++r) top.push_back(static_cast<Token>(next.back() + r));
        positions.back() = lane.c.prompt.size();
      } else {
        std::vector<Token> fed{lane.output.back()};
        std::vector<std::int32_t> pass_parents{kTreeRoot};
        for (std::size_t j = 0; j < n; ++j) {
          fed.push_back(tokens[offsets[i] + j]);
          pass_parents.push_back(parents[offsets[i] + j] + 1);
        }
        std::vector<Token> next(fed.size());
        std::vector<Token> rows(send_top ? fed.size() * k : 0);
        lane.model.forward_tree(lane.model.length(), fed, pass_parents, next, rows);
        model_tokens.insert(model_tokens.end(), next.begin(), next.end());
        top.insert(top.end(), rows.begin(), rows.end());
      }
      model_offsets.push_back(model_tokens.size());
    }
    if (!send_top) top.clear();
    std::vector<ngramspec_step> steps(ids.size());
    std::vector<std::size_t> kept(model_tokens.size());
    ASSERT_C_OK(ngramspec_batch_accept_trees(batch.get(), ids.data(), ids.size(), model_tokens.data(),
                                             model_tokens.size(), model_offsets.data(), top.data(), top.size(),
                                             steps.data(), kept.data(), kept.size()));
    std::vector<StepOutcome> cpp_steps(ids.size());
    std::vector<std::size_t> cpp_kept(model_tokens.size());
    cpp.accept_trees(ids, model_tokens, model_offsets, top, cpp_steps, cpp_kept);
    for (std::size_t i = 0; i < pass.size(); ++i) {
      TreeLane& lane = *pass[i];
      const ngramspec_step& step = steps[i];
      ASSERT_EQ(step.emitted, cpp_steps[i].emitted);
      ASSERT_EQ(step.accepted, cpp_steps[i].accepted);
      ASSERT_EQ(step.rollback_to, cpp_steps[i].rollback_to);
      ASSERT_EQ(step.finished != 0, cpp_steps[i].finished);
      const std::size_t at = model_offsets[i];
      const std::span<const std::size_t> path = std::span<const std::size_t>(kept).subspan(at, step.emitted);
      ASSERT_TRUE(std::equal(path.begin(), path.end(), cpp_kept.begin() + static_cast<std::ptrdiff_t>(at)));
      const bool prefill = lane.output.empty();
      for (const std::size_t entry : path) lane.output.push_back(model_tokens[at + entry]);
      if (!prefill) {
        if (kept_is_prefix(path)) {
          if (step.discarded != 0) lane.model.rollback(step.rollback_to);
        } else {
          lane.model.keep(positions[i], path);
        }
      }
      ASSERT_EQ(lane.model.length(), step.rollback_to);
      if (step.finished != 0) {
        EXPECT_EQ(lane.output, lane.reference.tokens) << lane.c.describe();
      }
    }
    for (std::size_t i = lanes.size(); i-- > 0;) {
      if (cpp.state(lanes[i]->id).finished) {
        EXPECT_THAT(lanes[i]->model.violations(), ::testing::IsEmpty());
        ASSERT_C_OK(ngramspec_batch_finish(batch.get(), lanes[i]->id));
        cpp.finish(lanes[i]->id);
        ++finished_total;
        lanes.erase(lanes.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
  }
  ngramspec_batch_stats stats{};
  ASSERT_C_OK(ngramspec_batch_stats_get(batch.get(), &stats));
  EXPECT_EQ(stats.drafted, cpp.stats().drafted);
  EXPECT_EQ(stats.accepted, cpp.stats().accepted);
  EXPECT_EQ(stats.emitted, cpp.stats().emitted);
}

TEST(CApiProperty, ATreeBatchServedThroughTheCApiEmitsPlainGreedyDecodingAndWhatTheCppBatchDoes) {
  std::size_t finished = 0;
  std::size_t nodes = 0;
  for (std::uint64_t seed = 1; seed <= 24; ++seed) {
    serve_trees_through_c(seed, finished, nodes);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(finished, 100U);
  EXPECT_GT(nodes, 2000U) << "the runs must speculate for the invariant to say anything";
}

// A tree pass writes one KV entry per node: however bushy the trees, a sequence's pass ends
// where a chain's would, below max_context - 1, so an engine whose KV cache holds max_context
// entries never overflows it, and the trees shrink as the context fills.
TEST(CApiTrees, TreesNeverProposePastMaxContext) {
  constexpr std::size_t kMaxContext = 50;
  constexpr Token kVocab = 16;
  ngramspec_batch_config config = ngramspec_batch_config_default();
  config.max_sequences = 3;
  ngramspec_tree_config tree = ngramspec_tree_config_default();
  tree.vocab_size = kVocab + 8;  // the model's top-k is its token and the next 7
  const BatchPtr batch = make_tree_batch(&config, &tree);
  ASSERT_TRUE(batch);
  const std::size_t k = ngramspec_batch_top_k(batch.get());
  ASSERT_EQ(k, tree.top_k);

  struct Sequence {
    SequenceId id = 0;
    std::vector<Token> prompt;
    GreedyModel model{NextTokenRule{}, GreedyModel::kUnlimitedBatch};
    std::vector<Token> output;
    bool finished = false;
  };
  DecodeOptions limits;
  limits.max_new_tokens = 200;
  limits.max_context = kMaxContext;
  limits.max_drafts = 64;
  std::vector<Sequence> sequences(3);
  for (std::size_t s = 0; s < sequences.size(); ++s) {
    Sequence& q = sequences[s];
    q.id = 100 + s;
    for (std::size_t i = 0; i < 10 + 4 * s; ++i) q.prompt.push_back(static_cast<Token>((3 * i + s) % 5));
    // Sequence 0 repeats its prompt (long chains); the others are pseudo-random (bushy trees).
    q.model = GreedyModel(s == 0 ? NextTokenRule(RepeatRule{5, kVocab}) : NextTokenRule(HashRule{4, 1, s, true}),
                          GreedyModel::kUnlimitedBatch);
    q.model.set_max_positions(kv_positions(limits));
    ngramspec_sequence_options options = ngramspec_sequence_options_default();
    options.max_new_tokens = limits.max_new_tokens;
    options.max_context = limits.max_context;
    options.max_drafts = limits.max_drafts;
    ASSERT_C_OK(ngramspec_batch_begin(batch.get(), q.id, q.prompt.data(), q.prompt.size(), &options));
  }

  std::size_t deepest_end = 0;  // the most KV entries a pass left in a cache
  std::size_t bushy_passes = 0;  // passes whose tree had more nodes than its deepest path
  for (std::size_t iteration = 0; iteration < 200; ++iteration) {
    std::vector<Sequence*> pass;
    std::vector<SequenceId> ids;
    for (Sequence& q : sequences) {
      if (!q.finished) {
        pass.push_back(&q);
        ids.push_back(q.id);
      }
    }
    if (pass.empty()) break;
    std::vector<Token> tokens(pass.size() * limits.max_drafts);
    std::vector<std::int32_t> parents(tokens.size());
    std::vector<std::size_t> offsets(ids.size() + 1);
    std::size_t n_nodes = 0;
    ASSERT_C_OK(ngramspec_batch_propose_trees(batch.get(), ids.data(), ids.size(), tokens.data(), parents.data(),
                                              tokens.size(), offsets.data(), 0, &n_nodes));
    std::vector<Token> model_tokens;
    std::vector<Token> top;
    std::vector<std::size_t> model_offsets{0};
    std::vector<std::size_t> positions;
    for (std::size_t i = 0; i < pass.size(); ++i) {
      Sequence& q = *pass[i];
      const std::size_t n = offsets[i + 1] - offsets[i];
      positions.push_back(q.model.length());
      std::vector<Token> next;
      if (q.output.empty()) {  // the prefill: the model's token after the prompt
        std::vector<Token> after(q.prompt.size());
        q.model.forward(0, q.prompt, after);
        next.assign(1, after.back());
        for (std::size_t r = 0; r < k; ++r) top.push_back(static_cast<Token>(next[0] + r));
      } else {
        // Entries cache length .. cache length + n: the root and one per node, all below the bound.
        const std::size_t end = q.model.length() + 1 + n;
        ASSERT_LE(end, kMaxContext - 1) << "sequence " << q.id << ": " << n << " nodes at cache length "
                                        << q.model.length();
        deepest_end = std::max(deepest_end, end);
        std::vector<Token> fed{q.output.back()};
        std::vector<std::int32_t> pass_parents{kTreeRoot};
        std::size_t depth = 0;
        std::vector<std::size_t> depths(n);
        for (std::size_t j = 0; j < n; ++j) {
          const std::int32_t p = parents[offsets[i] + j];
          depths[j] = p == kTreeRoot ? 1 : depths[static_cast<std::size_t>(p)] + 1;
          depth = std::max(depth, depths[j]);
          fed.push_back(tokens[offsets[i] + j]);
          pass_parents.push_back(p + 1);
        }
        if (n > depth) ++bushy_passes;
        next.resize(fed.size());
        std::vector<Token> rows(fed.size() * k);
        q.model.forward_tree(q.model.length(), fed, pass_parents, next, rows);
        top.insert(top.end(), rows.begin(), rows.end());
      }
      model_tokens.insert(model_tokens.end(), next.begin(), next.end());
      model_offsets.push_back(model_tokens.size());
    }
    std::vector<ngramspec_step> steps(ids.size());
    std::vector<std::size_t> kept(model_tokens.size());
    ASSERT_C_OK(ngramspec_batch_accept_trees(batch.get(), ids.data(), ids.size(), model_tokens.data(),
                                             model_tokens.size(), model_offsets.data(), top.data(), top.size(),
                                             steps.data(), kept.data(), kept.size()));
    for (std::size_t i = 0; i < pass.size(); ++i) {
      Sequence& q = *pass[i];
      const std::span<const std::size_t> path =
          std::span<const std::size_t>(kept).subspan(model_offsets[i], steps[i].emitted);
      const bool prefill = q.output.empty();
      for (const std::size_t entry : path) q.output.push_back(model_tokens[model_offsets[i] + entry]);
      if (!prefill) {
        if (kept_is_prefix(path)) {
          if (steps[i].discarded != 0) q.model.rollback(steps[i].rollback_to);
        } else {
          q.model.keep(positions[i], path);
        }
      }
      ASSERT_EQ(q.model.length(), steps[i].rollback_to);
      if (steps[i].finished != 0) {
        q.finished = true;
        EXPECT_EQ(steps[i].stop_reason, NGRAMSPEC_STOP_MAX_CONTEXT);
        EXPECT_EQ(q.output, plain_greedy(q.model.rule(), q.prompt, limits).tokens) << "sequence " << q.id;
        ASSERT_C_OK(ngramspec_batch_finish(batch.get(), q.id));
      }
    }
  }
  for (const Sequence& q : sequences) {
    EXPECT_TRUE(q.finished) << "sequence " << q.id;
    EXPECT_THAT(q.model.violations(), ::testing::IsEmpty()) << "sequence " << q.id;
  }
  // The trees were bushy and filled the room to its end: the bound, not a small tree, held them.
  EXPECT_GT(bushy_passes, 0U);
  EXPECT_EQ(deepest_end, kMaxContext - 1);
}

// Top-k tables are sized before anything is allocated: a vocabulary beyond
// TopKTable::kMaxVocabSize (2e8 took 6.5 GB and most of a minute) is refused naming it, shared
// or one per sequence, and so is a pool of drafters with tables of their own whose sum is more
// than the machine's memory, naming the pool and each drafter's bytes.
TEST(CApiTrees, ATopKTableTooLargeIsRefusedNamingItBeforeAllocating) {
  ngramspec_batch_config config = ngramspec_batch_config_default();
  config.max_sequences = 4;
  ngramspec_batch* out = sentinel_handle<ngramspec_batch>();
  for (const int shared : {1, 0}) {
    for (const std::size_t vocab : {TopKTable::kMaxVocabSize + 1, std::size_t{200000000},
                                    std::numeric_limits<std::size_t>::max()}) {
      SCOPED_TRACE(vocab);
      ngramspec_tree_config tree = ngramspec_tree_config_default();
      tree.vocab_size = vocab;
      tree.shared_top_k = shared;
      EXPECT_INVALID(ngramspec_batch_create_tree(&config, &tree, nullptr, &out), "ngramspec_batch_create_tree: ",
                     "vocab_size = " + std::to_string(vocab) + " is out of range: it must be 1 .. kMaxVocabSize = " +
                         "16777216");
    }
  }
  ngramspec_batch_config pool = ngramspec_batch_config_default();
  pool.max_sequences = BatchConfig::kMaxSequences;
  ngramspec_tree_config own = ngramspec_tree_config_default();
  own.vocab_size = std::size_t{1} << 20;
  own.shared_top_k = 0;
  EXPECT_INVALID(ngramspec_batch_create_tree(&pool, &own, nullptr, &out), "ngramspec_batch_create_tree: ",
                 "ngramspec::BatchSpeculator: max_sequences = 1048576 drafters of ",
                 " bytes, more than this machine's memory");
  EXPECT_EQ(out, sentinel_handle<ngramspec_batch>());
}

TEST(CApiTrees, BadCallsNameWhatIsWrongChangeNothingAndTheBatchGoesOn) {
  ngramspec_batch_config config = ngramspec_batch_config_default();
  config.max_sequences = 2;
  ngramspec_tree_config tree = ngramspec_tree_config_default();
  tree.vocab_size = 32;
  tree.top_k = 2;
  ngramspec_batch* out = sentinel_handle<ngramspec_batch>();

  ngramspec_tree_config unsized = tree;
  unsized.struct_size = 8;
  EXPECT_INVALID(ngramspec_batch_create_tree(&config, &unsized, nullptr, &out), "ngramspec_batch_create_tree",
                 "tree->struct_size = 8 is invalid: it must be the size of a version of ngramspec_tree_config");
  ngramspec_tree_config bad = tree;
  bad.max_children = 0;
  EXPECT_INVALID(ngramspec_batch_create_tree(&config, &bad, nullptr, &out), "ngramspec_batch_create_tree",
                 "max_children = 0");
  bad = tree;
  bad.top_k = 33;
  EXPECT_INVALID(ngramspec_batch_create_tree(&config, &bad, nullptr, &out), "tree->top_k = 33 is invalid");
  EXPECT_INVALID(ngramspec_batch_create_tree(&config, &tree, nullptr, nullptr), "out is NULL");
  EXPECT_EQ(out, sentinel_handle<ngramspec_batch>());

  // A chain batch takes no tree calls.
  const BatchPtr chains = make_batch(&config);
  std::array<Token, 16> tokens{};
  std::array<std::int32_t, 16> parents{};
  std::array<std::size_t, 3> offsets{};
  std::size_t n_nodes = 99;
  const std::array<SequenceId, 2> ids{1, 2};
  EXPECT_INVALID(ngramspec_batch_propose_trees(chains.get(), ids.data(), 2, tokens.data(), parents.data(), 16,
                                               offsets.data(), 0, &n_nodes),
                 "ngramspec_batch_propose_trees: the batch drafts chains", "ngramspec_batch_create_tree");
  EXPECT_EQ(ngramspec_batch_top_k(chains.get()), 0U);
  EXPECT_EQ(ngramspec_batch_top_k(nullptr), 0U);

  const BatchPtr batch = make_tree_batch(&config, &tree);
  EXPECT_EQ(ngramspec_batch_top_k(batch.get()), 2U);
  const std::array<Token, 8> prompt{1, 2, 3, 1, 2, 3, 1, 2};
  ngramspec_sequence_options options = ngramspec_sequence_options_default();
  options.max_drafts = 6;
  ASSERT_C_OK(ngramspec_batch_begin(batch.get(), 1, prompt.data(), prompt.size(), &options));
  ASSERT_C_OK(ngramspec_batch_begin(batch.get(), 2, prompt.data(), prompt.size(), &options));
  EXPECT_INVALID(ngramspec_batch_propose_trees(batch.get(), ids.data(), 2, tokens.data(), nullptr, 16, offsets.data(),
                                               0, &n_nodes),
                 "ngramspec_batch_propose_trees: parents is NULL but capacity = 16");
  EXPECT_INVALID(ngramspec_batch_propose_trees(batch.get(), ids.data(), 2, tokens.data(), parents.data(), 16,
                                               offsets.data(), 0, nullptr),
                 "n_nodes is NULL");
  EXPECT_INVALID(ngramspec_batch_propose_trees(batch.get(), ids.data(), 3, tokens.data(), parents.data(), 16,
                                               offsets.data(), 0, &n_nodes),
                 "n_ids = 3 is more than max_sequences = 2");
  const std::array<SequenceId, 2> twice{2, 2};
  EXPECT_INVALID(ngramspec_batch_propose_trees(batch.get(), twice.data(), 2, tokens.data(), parents.data(), 16,
                                               offsets.data(), 0, &n_nodes),
                 "ngramspec_batch_propose_trees: sequence 2 is listed twice");
  EXPECT_EQ(n_nodes, 99U);
  ASSERT_C_OK(ngramspec_batch_propose_trees(batch.get(), ids.data(), 2, tokens.data(), parents.data(), 16,
                                            offsets.data(), 0, &n_nodes));
  EXPECT_EQ(n_nodes, 0U);  // the prefill

  std::array<Token, 2> model{3, 3};
  const std::array<std::size_t, 3> model_offsets{0, 1, 2};
  std::array<ngramspec_step, 2> steps{};
  std::array<std::size_t, 8> kept{};
  std::array<Token, 4> top{4, 5, 4, 5};
  EXPECT_INVALID(ngramspec_batch_accept_trees(batch.get(), ids.data(), 2, model.data(), 2, model_offsets.data(),
                                              top.data(), 3, steps.data(), kept.data(), kept.size()),
                 "ngramspec_batch_accept_trees: top has 3 tokens; it needs none or top_k() = 2 per model token, 4");
  EXPECT_INVALID(ngramspec_batch_accept_trees(batch.get(), ids.data(), 2, model.data(), 2, model_offsets.data(),
                                              nullptr, 4, steps.data(), kept.data(), kept.size()),
                 "top is NULL but n_top = 4");
  EXPECT_INVALID(ngramspec_batch_accept_trees(batch.get(), ids.data(), 2, model.data(), 2, model_offsets.data(),
                                              top.data(), 4, steps.data(), kept.data(), 1),
                 "kept has room for 1 entries; it needs one per model token, 2");
  EXPECT_INVALID(ngramspec_batch_accept_trees(batch.get(), ids.data(), 2, model.data(), 2, model_offsets.data(),
                                              top.data(), 4, steps.data(), nullptr, 2),
                 "kept is NULL but kept_capacity = 2");
  top[3] = 32;
  EXPECT_INVALID(ngramspec_batch_accept_trees(batch.get(), ids.data(), 2, model.data(), 2, model_offsets.data(),
                                              top.data(), 4, steps.data(), kept.data(), kept.size()),
                 "sequence 2: top[3] = 32 is outside the top-k table's vocabulary of 32");
  ngramspec_batch_stats stats{};
  ASSERT_C_OK(ngramspec_batch_stats_get(batch.get(), &stats));
  EXPECT_EQ(stats.emitted, 0U);
  top[3] = 5;
  ASSERT_C_OK(ngramspec_batch_accept_trees(batch.get(), ids.data(), 2, model.data(), 2, model_offsets.data(),
                                           top.data(), 4, steps.data(), kept.data(), kept.size()));
  EXPECT_EQ(steps[0].emitted, 1U);
  EXPECT_EQ(kept[0], 0U);

  // Trees now, and the chain calls step a tree batch too (its drafters' spines).
  ASSERT_C_OK(ngramspec_batch_propose_trees(batch.get(), ids.data(), 2, tokens.data(), parents.data(), 16,
                                            offsets.data(), 0, &n_nodes));
  EXPECT_GT(n_nodes, 0U);
  EXPECT_EQ(parents[0], NGRAMSPEC_TREE_ROOT);
  std::array<Token, 16> drafts{};
  std::size_t n_drafts = 0;
  ASSERT_C_OK(ngramspec_batch_propose(batch.get(), ids.data(), 2, drafts.data(), drafts.size(), offsets.data(), 0,
                                      &n_drafts));
  EXPECT_GT(n_drafts, 0U);
  std::vector<Token> answers;
  std::vector<std::size_t> answer_offsets{0};
  for (std::size_t i = 0; i < 2; ++i) {
    for (std::size_t j = offsets[i]; j <= offsets[i + 1]; ++j) answers.push_back(j < offsets[i + 1] ? drafts[j] : 9);
    answer_offsets.push_back(answers.size());
  }
  ASSERT_C_OK(ngramspec_batch_accept(batch.get(), ids.data(), 2, answers.data(), answers.size(), answer_offsets.data(),
                                     steps.data()));
  EXPECT_EQ(steps[0].accepted, offsets[1]);
  EXPECT_GT(ngramspec_batch_memory_bytes(batch.get()), 32U * 2 * sizeof(Token));
  ASSERT_C_OK(ngramspec_batch_cancel(batch.get(), 1));
  ASSERT_C_OK(ngramspec_batch_finish(batch.get(), 2));
  EXPECT_EQ(ngramspec_batch_size(batch.get()), 0U);
}

TEST(CApiAllocation, TreeCallsAllocateNothingOnceWarm) {
  ngramspec_batch_config config = ngramspec_batch_config_default();
  config.max_sequences = 4;
  config.cost = "knee:64";
  ngramspec_tree_config tree = ngramspec_tree_config_default();
  tree.vocab_size = 16;
  tree.top_k = 4;
  const BatchPtr batch = make_tree_batch(&config, &tree);
  ngramspec_sequence_options options = ngramspec_sequence_options_default();
  options.max_drafts = 12;
  options.max_new_tokens = 100000;
  std::vector<Token> prompt;
  for (Token t = 0; t < 40; ++t) prompt.push_back(t % 5);
  const std::array<SequenceId, 4> ids{10, 11, 12, 13};
  for (const SequenceId id : ids) ASSERT_C_OK(ngramspec_batch_begin(batch.get(), id, prompt.data(), prompt.size(), &options));
  std::array<Token, 48> tokens{};
  std::array<std::int32_t, 48> parents{};
  std::array<std::size_t, 5> offsets{};
  std::array<Token, 52> model{};
  std::array<std::size_t, 5> model_offsets{};
  std::array<Token, 4 * 52> top{};
  std::array<ngramspec_step, 4> steps{};
  std::array<std::size_t, 52> kept{};
  std::array<Token, 4> last{4, 4, 4, 4};
  std::size_t accepted = 0;
  const auto step = [&] {
    std::size_t n = 0;
    ASSERT_C_OK(ngramspec_batch_propose_trees(batch.get(), ids.data(), 4, tokens.data(), parents.data(), tokens.size(),
                                              offsets.data(), 0, &n));
    std::size_t e = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      model[e] = (last[i] + 1) % 5;
      for (std::size_t j = offsets[i]; j < offsets[i + 1]; ++j) model[e + 1 + j - offsets[i]] = (tokens[j] + 1) % 5;
      e += 1 + offsets[i + 1] - offsets[i];
      model_offsets[i + 1] = e;
    }
    for (std::size_t x = 0; x < e * 4; ++x) top[x] = static_cast<Token>((model[x / 4] + x % 4) % 5);
    ASSERT_C_OK(ngramspec_batch_accept_trees(batch.get(), ids.data(), 4, model.data(), e, model_offsets.data(),
                                             top.data(), e * 4, steps.data(), kept.data(), kept.size()));
    for (std::size_t i = 0; i < 4; ++i) {
      last[i] = model[model_offsets[i] + kept[model_offsets[i] + steps[i].emitted - 1]];
      accepted += steps[i].accepted;
    }
  };
  for (int warm = 0; warm < 3; ++warm) step();
  std::size_t allocations = 0;
  {
    const AllocationCounter counter;
    for (int i = 0; i < 20; ++i) step();
    allocations = counter.count();
  }
  EXPECT_EQ(allocations, 0U);
  EXPECT_GT(accepted, 50U);
}

// ---- Corpus files: save, load, map ---------------------------------------------------------------

struct CorpusFileClose {
  void operator()(ngramspec_corpus_file* p) const noexcept { ngramspec_corpus_file_close(p); }
};
using CorpusFilePtr = std::unique_ptr<ngramspec_corpus_file, CorpusFileClose>;

CorpusFilePtr open_file(const std::filesystem::path& path) {
  ngramspec_corpus_file* p = nullptr;
  EXPECT_EQ(ngramspec_corpus_file_open(path.c_str(), &p), NGRAMSPEC_OK) << ngramspec_last_error();
  return CorpusFilePtr(p);
}

/// What a corpus's draft function wrote: count, match length and tokens.
struct CorpusDrafted {
  std::size_t count = 0;
  std::size_t match_length = 0;
  std::vector<Token> tokens;
  bool operator==(const CorpusDrafted&) const = default;
};

template <class Draft>
CorpusDrafted corpus_drafts(Draft draft, std::span<const Token> context, std::size_t room) {
  constexpr Token kUnwritten = 0xDEADBEEFU;
  CorpusDrafted d;
  d.tokens.assign(room, kUnwritten);
  d.count = std::numeric_limits<std::size_t>::max();
  d.match_length = std::numeric_limits<std::size_t>::max();
  EXPECT_C_OK(draft(context.data(), context.size(), d.tokens.data(), room, &d.count, &d.match_length));
  EXPECT_LE(d.count, room);
  for (std::size_t j = std::min(d.count, room); j < room; ++j) {
    EXPECT_EQ(d.tokens[j], kUnwritten) << "wrote past its count";
  }
  d.tokens.resize(std::min(d.count, room));
  return d;
}

/// A context that ends in the corpus's own text (so that it matches), or random tokens.
std::vector<Token> probe_context(std::mt19937_64& rng, const std::vector<Token>& held, Token vocab) {
  std::vector<Token> context(rng() % 5);
  for (Token& t : context) t = static_cast<Token>(rng() % vocab);
  if (!held.empty() && rng() % 4 != 0) {
    const std::size_t end = 1 + rng() % held.size();
    const std::size_t length = std::min<std::size_t>(end, 1 + rng() % 80);
    context.insert(context.end(), held.begin() + static_cast<std::ptrdiff_t>(end - length),
                   held.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return context;
}

// Saved, then mapped and loaded: over random corpora (some evicting), the file and the loaded
// corpus hold what the live one does and draft exactly what it drafts for many contexts.
TEST(CApiCorpusFile, SaveLoadAndMapDraftAsTheLiveCorpus) {
  const TempDir dir;
  std::mt19937_64 rng(20260301);
  std::size_t matched = 0;
  for (int trial = 0; trial < 30; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const Token vocab = static_cast<Token>(2 + rng() % 40);
    const std::size_t bytes = SharedCorpus::bytes_for(std::size_t{256} << (rng() % 3));
    const CorpusPtr live = make_corpus(bytes);
    std::vector<Token> all;  // every token appended, for contexts that match
    const std::size_t records = rng() % 50;
    for (std::size_t r = 0; r < records; ++r) {
      std::vector<Token> record(rng() % 40);
      for (Token& t : record) t = static_cast<Token>(rng() % vocab);
      all.insert(all.end(), record.begin(), record.end());
      if (rng() % 2 == 0) {
        ASSERT_C_OK(ngramspec_corpus_append_stamped(live.get(), record.data(), record.size(),
                                                    static_cast<std::int64_t>(1000 + 10 * r)));
      } else {
        ASSERT_C_OK(ngramspec_corpus_append(live.get(), record.data(), record.size()));
      }
    }
    const std::filesystem::path path = dir / ("trial" + std::to_string(trial) + ".ngc");
    ASSERT_C_OK(ngramspec_corpus_save(live.get(), path.c_str()));

    const CorpusFilePtr file = open_file(path);
    ASSERT_NE(file, nullptr);
    EXPECT_C_OK(ngramspec_corpus_file_verify(file.get()));
    EXPECT_EQ(ngramspec_corpus_file_size(file.get()), ngramspec_corpus_size(live.get()));
    EXPECT_EQ(ngramspec_corpus_file_bytes(file.get()), std::filesystem::file_size(path));
    EXPECT_EQ(ngramspec_corpus_file_last_stamp(file.get()), ngramspec_corpus_last_stamp(live.get()));
    EXPECT_LE(ngramspec_corpus_file_first_stamp(file.get()), ngramspec_corpus_file_last_stamp(file.get()));
    EXPECT_LE(ngramspec_corpus_file_records(file.get()), ngramspec_corpus_records(live.get()));
    if (ngramspec_corpus_size(live.get()) == 0) {
      EXPECT_EQ(ngramspec_corpus_file_records(file.get()), 0U);
    }

    const CorpusPtr loaded = make_corpus(bytes);
    const std::vector<Token> old = {1, 2, 3};
    ASSERT_C_OK(ngramspec_corpus_append(loaded.get(), old.data(), old.size()));  // replaced by the load
    ASSERT_C_OK(ngramspec_corpus_load(loaded.get(), path.c_str()));
    EXPECT_EQ(ngramspec_corpus_size(loaded.get()), ngramspec_corpus_size(live.get()));
    EXPECT_EQ(ngramspec_corpus_records(loaded.get()), ngramspec_corpus_file_records(file.get()));
    EXPECT_EQ(ngramspec_corpus_last_stamp(loaded.get()), ngramspec_corpus_last_stamp(live.get()));

    const auto live_draft = [&](const ngramspec_token* c, std::size_t n, ngramspec_token* o, std::size_t room,
                                std::size_t* count, std::size_t* length) {
      return ngramspec_corpus_draft(live.get(), c, n, o, room, count, length);
    };
    const auto loaded_draft = [&](const ngramspec_token* c, std::size_t n, ngramspec_token* o, std::size_t room,
                                  std::size_t* count, std::size_t* length) {
      return ngramspec_corpus_draft(loaded.get(), c, n, o, room, count, length);
    };
    const auto file_draft = [&](const ngramspec_token* c, std::size_t n, ngramspec_token* o, std::size_t room,
                                std::size_t* count, std::size_t* length) {
      return ngramspec_corpus_file_draft(file.get(), c, n, o, room, count, length);
    };
    for (int probe = 0; probe < 200; ++probe) {
      const std::vector<Token> context = probe_context(rng, all, vocab);
      const std::size_t room = rng() % 20;
      const CorpusDrafted expected = corpus_drafts(live_draft, context, room);
      ASSERT_EQ(corpus_drafts(file_draft, context, room), expected) << "probe " << probe;
      ASSERT_EQ(corpus_drafts(loaded_draft, context, room), expected) << "probe " << probe;
      matched += expected.count;
    }
  }
  EXPECT_GT(matched, 5000U) << "the contexts must match for the comparison to say anything";
}

TEST(CApiCorpusFile, StampsRoundTripAndOnlyIncrease) {
  const TempDir dir;
  const CorpusPtr corpus = make_corpus(SharedCorpus::min_bytes());
  EXPECT_EQ(ngramspec_corpus_last_stamp(corpus.get()), 0);
  const std::vector<Token> a = {1, 2, 3};
  const std::vector<Token> b = {4, 5};
  const std::vector<Token> c = {6};
  ASSERT_C_OK(ngramspec_corpus_append_stamped(corpus.get(), a.data(), a.size(), 100));
  ASSERT_C_OK(ngramspec_corpus_append_stamped(corpus.get(), b.data(), b.size(), 50));  // raised to 101
  EXPECT_EQ(ngramspec_corpus_last_stamp(corpus.get()), 101);
  ASSERT_C_OK(ngramspec_corpus_append_stamped(corpus.get(), c.data(), c.size(), 200));
  ASSERT_C_OK(ngramspec_corpus_append_stamped(corpus.get(), nullptr, 0, 900));  // no tokens: nothing changes
  EXPECT_EQ(ngramspec_corpus_last_stamp(corpus.get()), 200);
  EXPECT_EQ(ngramspec_corpus_records(corpus.get()), 3U);
  const std::filesystem::path path = dir / "stamps.ngc";
  ASSERT_C_OK(ngramspec_corpus_save(corpus.get(), path.c_str()));
  const CorpusFilePtr file = open_file(path);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(ngramspec_corpus_file_records(file.get()), 3U);
  EXPECT_EQ(ngramspec_corpus_file_size(file.get()), 6U);
  EXPECT_EQ(ngramspec_corpus_file_first_stamp(file.get()), 100);
  EXPECT_EQ(ngramspec_corpus_file_last_stamp(file.get()), 200);
  // The time now, in nanoseconds since the epoch, is far above 200.
  ASSERT_C_OK(ngramspec_corpus_append(corpus.get(), a.data(), a.size()));
  EXPECT_GT(ngramspec_corpus_last_stamp(corpus.get()), std::int64_t{1} << 60);

  // Saving again replaces the file; the mapping keeps the old contents.
  ASSERT_C_OK(ngramspec_corpus_save(corpus.get(), path.c_str()));
  EXPECT_EQ(ngramspec_corpus_file_records(file.get()), 3U);
  EXPECT_C_OK(ngramspec_corpus_file_verify(file.get()));
  EXPECT_EQ(ngramspec_corpus_file_records(open_file(path).get()), 4U);

  // An empty corpus saves to an empty file, which drafts nothing.
  const CorpusPtr empty = make_corpus(SharedCorpus::min_bytes());
  ASSERT_C_OK(ngramspec_corpus_save(empty.get(), (dir / "empty.ngc").c_str()));
  const CorpusFilePtr none = open_file(dir / "empty.ngc");
  EXPECT_EQ(ngramspec_corpus_file_size(none.get()), 0U);
  EXPECT_EQ(ngramspec_corpus_file_records(none.get()), 0U);
  EXPECT_C_OK(ngramspec_corpus_file_verify(none.get()));
  std::array<Token, 4> out{};
  std::size_t count = 9;
  EXPECT_C_OK(ngramspec_corpus_file_draft(none.get(), a.data(), a.size(), out.data(), out.size(), &count, nullptr));
  EXPECT_EQ(count, 0U);
}

TEST(CApiCorpusFile, BadArgumentsAreReportedAndChangeNothing) {
  const TempDir dir;
  const CorpusPtr corpus = make_corpus(SharedCorpus::min_bytes());
  const std::vector<Token> record = {1, 2, 3, 4, 5};
  ASSERT_C_OK(ngramspec_corpus_append_stamped(corpus.get(), record.data(), record.size(), 7));
  const std::filesystem::path path = dir / "c.ngc";
  ASSERT_C_OK(ngramspec_corpus_save(corpus.get(), path.c_str()));
  const CorpusFilePtr file = open_file(path);
  ASSERT_NE(file, nullptr);

  EXPECT_INVALID(ngramspec_corpus_append_stamped(nullptr, record.data(), record.size(), 1),
                 "ngramspec_corpus_append_stamped: corpus is NULL");
  EXPECT_INVALID(ngramspec_corpus_append_stamped(corpus.get(), nullptr, 4, 1),
                 "ngramspec_corpus_append_stamped: tokens is NULL but count = 4");
  EXPECT_INVALID(ngramspec_corpus_save(nullptr, path.c_str()), "ngramspec_corpus_save: corpus is NULL");
  EXPECT_INVALID(ngramspec_corpus_save(corpus.get(), nullptr), "ngramspec_corpus_save: path is NULL");
  EXPECT_INVALID(ngramspec_corpus_load(nullptr, path.c_str()), "ngramspec_corpus_load: corpus is NULL");
  EXPECT_INVALID(ngramspec_corpus_load(corpus.get(), nullptr), "ngramspec_corpus_load: path is NULL");
  EXPECT_EQ(ngramspec_corpus_records(corpus.get()), 1U);
  EXPECT_EQ(ngramspec_corpus_last_stamp(corpus.get()), 7);

  ngramspec_corpus_file* out = sentinel_handle<ngramspec_corpus_file>();
  EXPECT_INVALID(ngramspec_corpus_file_open(nullptr, &out), "ngramspec_corpus_file_open: path is NULL");
  EXPECT_INVALID(ngramspec_corpus_file_open(path.c_str(), nullptr), "ngramspec_corpus_file_open: out is NULL");
  EXPECT_EQ(out, sentinel_handle<ngramspec_corpus_file>());
  EXPECT_INVALID(ngramspec_corpus_file_verify(nullptr), "ngramspec_corpus_file_verify: file is NULL");

  std::array<Token, 4> drafts{7, 7, 7, 7};
  std::size_t count = 99;
  std::size_t length = 98;
  const std::vector<Token> context = {2, 3};
  EXPECT_INVALID(ngramspec_corpus_file_draft(nullptr, context.data(), 2, drafts.data(), 4, &count, &length),
                 "ngramspec_corpus_file_draft: file is NULL");
  EXPECT_INVALID(ngramspec_corpus_file_draft(file.get(), nullptr, 2, drafts.data(), 4, &count, &length),
                 "ngramspec_corpus_file_draft: context is NULL but n = 2");
  EXPECT_INVALID(ngramspec_corpus_file_draft(file.get(), context.data(), 2, nullptr, 4, &count, &length),
                 "ngramspec_corpus_file_draft: out is NULL but room = 4");
  EXPECT_INVALID(ngramspec_corpus_file_draft(file.get(), context.data(), 2, drafts.data(), 4, nullptr, &length),
                 "ngramspec_corpus_file_draft: count is NULL");
  EXPECT_INVALID(ngramspec_corpus_draft(nullptr, context.data(), 2, drafts.data(), 4, &count, &length),
                 "ngramspec_corpus_draft: corpus is NULL");
  EXPECT_INVALID(ngramspec_corpus_draft(corpus.get(), nullptr, 1, drafts.data(), 4, &count, &length),
                 "ngramspec_corpus_draft: context is NULL but n = 1");
  EXPECT_INVALID(ngramspec_corpus_draft(corpus.get(), context.data(), 2, nullptr, 3, &count, &length),
                 "ngramspec_corpus_draft: out is NULL but room = 3");
  EXPECT_INVALID(ngramspec_corpus_draft(corpus.get(), context.data(), 2, drafts.data(), 4, nullptr, &length),
                 "ngramspec_corpus_draft: count is NULL");
  EXPECT_EQ(count, 99U);
  EXPECT_EQ(length, 98U);
  EXPECT_EQ(drafts, (std::array<Token, 4>{7, 7, 7, 7}));
  // No context or no room is no drafts, not an error; match_length may be NULL.
  EXPECT_C_OK(ngramspec_corpus_file_draft(file.get(), nullptr, 0, drafts.data(), 4, &count, &length));
  EXPECT_EQ(count, 0U);
  EXPECT_C_OK(ngramspec_corpus_draft(corpus.get(), context.data(), 2, nullptr, 0, &count, nullptr));
  EXPECT_EQ(count, 0U);
  EXPECT_C_OK(ngramspec_corpus_file_draft(file.get(), context.data(), 2, drafts.data(), 4, &count, nullptr));
  EXPECT_EQ(count, 2U);
  EXPECT_EQ(drafts[0], 4U);
  EXPECT_EQ(drafts[1], 5U);

  // The create functions: out, and a preference outside the enum, named with its value.
  EXPECT_INVALID(ngramspec_match_drafter_create_file(nullptr, nullptr, file.get(), NGRAMSPEC_PREFER_FILE, nullptr),
                 "ngramspec_match_drafter_create_file: out is NULL");
  EXPECT_INVALID(ngramspec_batch_create_file(nullptr, nullptr, file.get(), NGRAMSPEC_PREFER_FILE, nullptr),
                 "ngramspec_batch_create_file: out is NULL");
  for (const int bad : {3, -1, 1000}) {
    const int preference = bad;
    const std::string named = "preference = " + std::to_string(bad) + " is invalid";
    ngramspec_match_drafter* match = sentinel_handle<ngramspec_match_drafter>();
    EXPECT_INVALID(ngramspec_match_drafter_create_file(nullptr, corpus.get(), file.get(), preference, &match),
                   "ngramspec_match_drafter_create_file: " + named, "NGRAMSPEC_PREFER_LONGER_MATCH (0)");
    EXPECT_EQ(match, sentinel_handle<ngramspec_match_drafter>());
    ngramspec_batch* batch = sentinel_handle<ngramspec_batch>();
    EXPECT_INVALID(ngramspec_batch_create_file(nullptr, corpus.get(), file.get(), preference, &batch),
                   "ngramspec_batch_create_file: " + named);
    EXPECT_EQ(batch, sentinel_handle<ngramspec_batch>());
  }
  // A bad configuration is named as by the functions without a file.
  ngramspec_match_config config = ngramspec_match_config_default();
  config.cap = 1;
  ngramspec_match_drafter* match = sentinel_handle<ngramspec_match_drafter>();
  EXPECT_INVALID(ngramspec_match_drafter_create_file(&config, nullptr, file.get(), NGRAMSPEC_PREFER_LIVE, &match),
                 "ngramspec_match_drafter_create_file: ", "MatchConfig: index_capacity = 1 is invalid");
  EXPECT_EQ(match, sentinel_handle<ngramspec_match_drafter>());
  ngramspec_batch_config batch_config = small_batch_config(2);
  batch_config.cost = "knee:0";
  ngramspec_batch* batch = sentinel_handle<ngramspec_batch>();
  EXPECT_INVALID(ngramspec_batch_create_file(&batch_config, nullptr, file.get(), NGRAMSPEC_PREFER_LIVE, &batch),
                 "ngramspec_batch_create_file: ", "'knee:0' is not a cost");
  EXPECT_EQ(batch, sentinel_handle<ngramspec_batch>());

  // NULL handles: close does nothing, queries are 0.
  ngramspec_corpus_file_close(nullptr);
  EXPECT_EQ(ngramspec_corpus_file_size(nullptr), 0U);
  EXPECT_EQ(ngramspec_corpus_file_records(nullptr), 0U);
  EXPECT_EQ(ngramspec_corpus_file_bytes(nullptr), 0U);
  EXPECT_EQ(ngramspec_corpus_file_first_stamp(nullptr), 0);
  EXPECT_EQ(ngramspec_corpus_file_last_stamp(nullptr), 0);
  EXPECT_EQ(ngramspec_corpus_last_stamp(nullptr), 0);
  EXPECT_STREQ(ngramspec_status_name(NGRAMSPEC_ERROR_CORPUS_FILE), "NGRAMSPEC_ERROR_CORPUS_FILE");
}

/// `status` is NGRAMSPEC_ERROR_CORPUS_FILE and the last error contains every piece.
#define EXPECT_FILE_ERROR(call, ...) EXPECT_TRUE(fails_with((call), NGRAMSPEC_ERROR_CORPUS_FILE, {__VA_ARGS__}))

// A file that is missing, truncated or corrupted: the status says so, the message names the
// function, the file, the section and the problem, and nothing changes.
TEST(CApiCorpusFile, BadFilesAreReportedNamingTheFileAndTheSection) {
  const TempDir dir;
  const CorpusPtr corpus = make_corpus(SharedCorpus::min_bytes());
  std::mt19937_64 rng(11);
  for (int r = 0; r < 8; ++r) {
    const std::vector<Token> record = motif_stream(rng, 20 + rng() % 20);
    ASSERT_C_OK(ngramspec_corpus_append(corpus.get(), record.data(), record.size()));
  }
  const std::filesystem::path good = dir / "good.ngc";
  ASSERT_C_OK(ngramspec_corpus_save(corpus.get(), good.c_str()));
  const std::vector<char> bytes = test::read_file(good);
  ASSERT_GT(bytes.size(), detail::corpus_format::kHeaderBytes);
  detail::corpus_format::Header header;
  std::memcpy(&header, bytes.data(), sizeof header);

  const CorpusPtr target = make_corpus(SharedCorpus::min_bytes());
  const std::vector<Token> kept = {9, 8, 7};
  ASSERT_C_OK(ngramspec_corpus_append_stamped(target.get(), kept.data(), kept.size(), 5));
  const auto target_unchanged = [&] {
    EXPECT_EQ(ngramspec_corpus_size(target.get()), 3U);
    EXPECT_EQ(ngramspec_corpus_records(target.get()), 1U);
    EXPECT_EQ(ngramspec_corpus_last_stamp(target.get()), 5);
  };

  const auto expect_unreadable = [&](const std::filesystem::path& path, std::initializer_list<std::string> pieces) {
    SCOPED_TRACE(path.filename().string());
    const std::string named = "corpus file '" + path.string() + "'";
    ngramspec_corpus_file* out = sentinel_handle<ngramspec_corpus_file>();
    const ngramspec_status open_status = ngramspec_corpus_file_open(path.c_str(), &out);
    EXPECT_FILE_ERROR(open_status, "ngramspec_corpus_file_open: " + named);
    for (const std::string& piece : pieces) EXPECT_FILE_ERROR(open_status, piece);
    EXPECT_EQ(out, sentinel_handle<ngramspec_corpus_file>());
    const ngramspec_status load_status = ngramspec_corpus_load(target.get(), path.c_str());
    EXPECT_FILE_ERROR(load_status, "ngramspec_corpus_load: " + named);
    for (const std::string& piece : pieces) EXPECT_FILE_ERROR(load_status, piece);
    target_unchanged();
  };

  expect_unreadable(dir / "missing.ngc", {"cannot open: No such file or directory"});
  expect_unreadable(dir.path(), {"it is a directory"});
  {
    const std::filesystem::path path = dir / "empty.ngc";
    ASSERT_TRUE(test::write_file(path, std::vector<char>{}));
    expect_unreadable(path, {", section header: ", "the file is empty"});
  }
  {
    const std::filesystem::path path = dir / "not-a-corpus.ngc";
    ASSERT_TRUE(test::write_file(path, std::vector<char>(400, 'x')));
    expect_unreadable(path, {", section header: ", "not a corpus file"});
  }
  {
    std::vector<char> corrupted = bytes;
    corrupted[offsetof(detail::corpus_format::Header, tokens)] ^= 0x10;  // the header's checksum no longer holds
    const std::filesystem::path path = dir / "bad-header.ngc";
    ASSERT_TRUE(test::write_file(path, corrupted));
    expect_unreadable(path, {", section header: ", "checksum mismatch"});
  }
  {
    std::vector<char> truncated(bytes.begin(), bytes.end() - 64);
    const std::filesystem::path path = dir / "truncated.ngc";
    ASSERT_TRUE(test::write_file(path, truncated));
    expect_unreadable(path, {"truncated: " + std::to_string(truncated.size()) + " bytes"});
  }
  {  // A token flipped: it maps (only the header is checked), verify finds it.
    std::vector<char> corrupted = bytes;
    corrupted[header.sections[0].offset + 5] ^= 0x01;
    const std::filesystem::path path = dir / "bad-tokens.ngc";
    ASSERT_TRUE(test::write_file(path, corrupted));
    const CorpusFilePtr file = open_file(path);
    ASSERT_NE(file, nullptr);
    EXPECT_FILE_ERROR(ngramspec_corpus_file_verify(file.get()),
                      "ngramspec_corpus_file_verify: corpus file '" + path.string() + "', section tokens: ");
    EXPECT_EQ(ngramspec_corpus_file_size(file.get()), ngramspec_corpus_size(corpus.get()));
  }
  {  // The last table's bytes flipped.
    std::vector<char> corrupted = bytes;
    const detail::corpus_format::SectionEntry& last = header.sections[detail::corpus_format::kSections - 1];
    corrupted[last.offset + last.bytes - 3] ^= 0x40;
    const std::filesystem::path path = dir / "bad-ngrams3.ngc";
    ASSERT_TRUE(test::write_file(path, corrupted));
    const CorpusFilePtr file = open_file(path);
    ASSERT_NE(file, nullptr);
    EXPECT_FILE_ERROR(ngramspec_corpus_file_verify(file.get()), ", section ngrams3: ");
  }
  // Saving where no file can be made.
  const std::filesystem::path nowhere = dir / "no-such-folder" / "c.ngc";
  EXPECT_FILE_ERROR(ngramspec_corpus_save(corpus.get(), nowhere.c_str()),
                    "ngramspec_corpus_save: corpus file '" + nowhere.string() + "'", "cannot create");
  EXPECT_FALSE(std::filesystem::exists(nowhere));
  // The good file still opens and verifies; the corpus that failed to save still drafts.
  const CorpusFilePtr file = open_file(good);
  EXPECT_C_OK(ngramspec_corpus_file_verify(file.get()));
  ASSERT_C_OK(ngramspec_corpus_load(target.get(), good.c_str()));
  EXPECT_EQ(ngramspec_corpus_size(target.get()), ngramspec_corpus_size(corpus.get()));
}

// A drafter consulting a corpus file drafts from it when its sequence has no match of its own; with
// a live corpus too, the preference chooses.
TEST(CApiCorpusFile, ADrafterDraftsFromTheFileAndThePreferenceChooses) {
  const TempDir dir;
  const CorpusPtr builder = make_corpus(SharedCorpus::min_bytes());
  const std::vector<Token> in_file = {9, 5, 6, 50, 51};
  ASSERT_C_OK(ngramspec_corpus_append(builder.get(), in_file.data(), in_file.size()));
  const std::filesystem::path path = dir / "c.ngc";
  ASSERT_C_OK(ngramspec_corpus_save(builder.get(), path.c_str()));
  const CorpusFilePtr file = open_file(path);
  const CorpusPtr live = make_corpus(SharedCorpus::min_bytes());
  const std::vector<Token> in_live = {4, 5, 6, 60, 61};
  ASSERT_C_OK(ngramspec_corpus_append(live.get(), in_live.data(), in_live.size()));

  ngramspec_match_config config = ngramspec_match_config_default();
  config.min_confidence = 0;
  const auto drafts = [&](const ngramspec_corpus* corpus, ngramspec_corpus_preference preference,
                          const std::vector<Token>& sequence) {
    ngramspec_match_drafter* p = nullptr;
    EXPECT_C_OK(ngramspec_match_drafter_create_file(&config, corpus, file.get(), preference, &p));
    const MatchPtr drafter(p);
    EXPECT_C_OK(ngramspec_match_drafter_update(drafter.get(), sequence.data(), sequence.size()));
    std::vector<Token> out(2);
    std::size_t count = 0;
    EXPECT_C_OK(ngramspec_match_drafter_predict(drafter.get(), out.data(), out.size(), nullptr, &count));
    out.resize(count);
    return out;
  };
  const std::vector<Token> file_only = {7, 9, 5, 6};
  EXPECT_EQ(drafts(nullptr, NGRAMSPEC_PREFER_LONGER_MATCH, file_only), (std::vector<Token>{50, 51}));
  const std::vector<Token> live_longer = {4, 5, 6};
  EXPECT_EQ(drafts(live.get(), NGRAMSPEC_PREFER_LONGER_MATCH, live_longer), (std::vector<Token>{60, 61}));
  EXPECT_EQ(drafts(live.get(), NGRAMSPEC_PREFER_LIVE, live_longer), (std::vector<Token>{60, 61}));
  EXPECT_EQ(drafts(live.get(), NGRAMSPEC_PREFER_FILE, live_longer), (std::vector<Token>{50, 51}));
  const std::vector<Token> file_longer = {9, 5, 6};
  EXPECT_EQ(drafts(live.get(), NGRAMSPEC_PREFER_LONGER_MATCH, file_longer), (std::vector<Token>{50, 51}));
  EXPECT_EQ(drafts(live.get(), NGRAMSPEC_PREFER_LIVE, file_longer), (std::vector<Token>{60, 61}));
  // Without the file, as ngramspec_match_drafter_create.
  ngramspec_match_drafter* p = nullptr;
  ASSERT_C_OK(ngramspec_match_drafter_create_file(&config, nullptr, nullptr, NGRAMSPEC_PREFER_FILE, &p));
  const MatchPtr plain(p);
  ASSERT_C_OK(ngramspec_match_drafter_update(plain.get(), file_only.data(), file_only.size()));
  std::array<Token, 2> out{};
  std::size_t count = 9;
  ASSERT_C_OK(ngramspec_match_drafter_predict(plain.get(), out.data(), out.size(), nullptr, &count));
  EXPECT_EQ(count, 0U);
}

// Over random configurations, streams and preferences, a C drafter with a live corpus and a corpus
// file drafts bit for bit what the C++ MatchDrafter over the same two does.
TEST(CApiCorpusFile, DraftersWithAFileDraftExactlyWhatTheCppOnesDo) {
  const TempDir dir;
  std::size_t drafted = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(scramble(seed + 1000));
    // The file: records from a few motifs, which the streams below quote.
    const CorpusPtr builder = make_corpus(SharedCorpus::bytes_for(512));
    std::vector<std::vector<Token>> records;
    for (int r = 0; r < 20; ++r) {
      records.push_back(motif_stream(rng, 5 + rng() % 60));
      ASSERT_C_OK(ngramspec_corpus_append(builder.get(), records.back().data(), records.back().size()));
    }
    const std::filesystem::path path = dir / ("seed" + std::to_string(seed) + ".ngc");
    ASSERT_C_OK(ngramspec_corpus_save(builder.get(), path.c_str()));
    const CorpusFilePtr c_file = open_file(path);
    const MappedCorpus cpp_file(path);

    ngramspec_match_config mc = ngramspec_match_config_default();
    mc.cap = 16 + rng() % 200;
    mc.copy_min_match = 1 + rng() % 4;
    mc.count_window = rng() % 2 == 0 ? 0 : 4 + rng() % (mc.cap - 3);
    static constexpr double kGates[] = {0, 0.03, 0.2};
    mc.min_confidence = kGates[rng() % 3];
    static constexpr ngramspec_corpus_preference kPreferences[] = {NGRAMSPEC_PREFER_LONGER_MATCH,
                                                                   NGRAMSPEC_PREFER_LIVE, NGRAMSPEC_PREFER_FILE};
    static constexpr CorpusPreference kCppPreferences[] = {CorpusPreference::longer_match, CorpusPreference::live,
                                                           CorpusPreference::file};
    const std::size_t pick = rng() % 3;
    const bool with_live = rng() % 2 == 0;
    SharedCorpus cpp_live(SharedCorpus::bytes_for(256));
    const CorpusPtr c_live = make_corpus(SharedCorpus::bytes_for(256));
    MatchConfig cpp_mc;
    cpp_mc.index_capacity = mc.cap;
    cpp_mc.copy_min_match = mc.copy_min_match;
    cpp_mc.count_window = mc.count_window;
    cpp_mc.min_confidence = mc.min_confidence;
    cpp_mc.corpus_preference = kCppPreferences[pick];
    MatchDrafter cpp(cpp_mc, with_live ? &cpp_live : nullptr, &cpp_file);
    ngramspec_match_drafter* p = nullptr;
    ASSERT_C_OK(ngramspec_match_drafter_create_file(&mc, with_live ? c_live.get() : nullptr, c_file.get(),
                                                    kPreferences[pick], &p));
    const MatchPtr c(p);
    EXPECT_EQ(ngramspec_match_drafter_memory_bytes(c.get()), cpp.memory_bytes());
    const auto predict = [&](ngramspec_token* out, std::size_t capacity, float* probabilities, std::size_t* count) {
      return ngramspec_match_drafter_predict(c.get(), out, capacity, probabilities, count);
    };
    // The stream: pieces of the file's records between random tokens.
    std::vector<Token> stream;
    while (stream.size() < 300) {
      if (rng() % 3 == 0) {
        stream.push_back(static_cast<Token>(100 + rng() % 50));
      } else {
        const std::vector<Token>& record = records[rng() % records.size()];
        const std::size_t from = rng() % record.size();
        const std::size_t n = std::min<std::size_t>(record.size() - from, 1 + rng() % 12);
        stream.insert(stream.end(), record.begin() + static_cast<std::ptrdiff_t>(from),
                      record.begin() + static_cast<std::ptrdiff_t>(from + n));
      }
    }
    for (std::size_t at = 0; at < stream.size();) {
      const std::size_t n = std::min<std::size_t>(1 + rng() % 4, stream.size() - at);
      const std::span<const Token> chunk(stream.data() + at, n);
      at += n;
      cpp.update(chunk);
      ASSERT_C_OK(ngramspec_match_drafter_update(c.get(), chunk.data(), chunk.size()));
      const std::size_t capacity = rng() % 20;
      const bool with_probabilities = rng() % 2 == 0;
      const CDrafts c_d = c_drafts(predict, capacity, with_probabilities);
      const CDrafts cpp_d = cpp_drafts(cpp, capacity, with_probabilities);
      ASSERT_EQ(c_d.tokens, cpp_d.tokens) << "at " << at;
      ASSERT_EQ(c_d.probabilities, cpp_d.probabilities) << "at " << at;
      drafted += c_d.tokens.size();
      if (rng() % 20 == 0) {  // an earlier request's output: the stream's recent tokens
        const std::size_t from = at - std::min<std::size_t>(at, 20);
        const std::vector<Token> record(stream.begin() + static_cast<std::ptrdiff_t>(from),
                                        stream.begin() + static_cast<std::ptrdiff_t>(at));
        cpp_live.append(record, static_cast<std::int64_t>(at));
        ASSERT_C_OK(ngramspec_corpus_append_stamped(c_live.get(), record.data(), record.size(),
                                                    static_cast<std::int64_t>(at)));
      }
      if (rng() % 80 == 0) {
        cpp.reset();
        ASSERT_C_OK(ngramspec_match_drafter_reset(c.get()));
      }
    }
  }
  EXPECT_GT(drafted, 2000U) << "the streams must draft for the comparison to say anything";
}

// A batch whose drafters consult a corpus file drafts the file's continuation for a sequence with
// no match of its own, emits plain greedy decoding, and finishes into the live corpus alone.
TEST(CApiCorpusFile, ABatchDraftsFromTheFile) {
  const TempDir dir;
  // The model's text: next = (3 * last + 1) mod 7, cycling 0 1 4 6 5 2 0 ...; the file holds it.
  std::vector<Token> text = {0};
  for (int i = 0; i < 30; ++i) text.push_back(affine_next(text.back()));
  const CorpusPtr builder = make_corpus(SharedCorpus::min_bytes());
  ASSERT_C_OK(ngramspec_corpus_append(builder.get(), text.data(), text.size()));
  const std::filesystem::path path = dir / "c.ngc";
  ASSERT_C_OK(ngramspec_corpus_save(builder.get(), path.c_str()));
  const CorpusFilePtr file = open_file(path);
  const CorpusPtr live = make_corpus(SharedCorpus::min_bytes());

  for (const bool with_file : {false, true}) {
    SCOPED_TRACE(with_file ? "with the file" : "without the file");
    ngramspec_batch_config config = small_batch_config(2);
    config.drafter.count_window = 0;
    ngramspec_batch* p = nullptr;
    ASSERT_C_OK(ngramspec_batch_create_file(&config, live.get(), with_file ? file.get() : nullptr,
                                            NGRAMSPEC_PREFER_FILE, &p));
    const BatchPtr batch(p);
    // After the prefill the sequence is 3 0 1 4: its last token never occurred before in it, so it
    // has nothing of its own to copy; the file has what followed 0 1 4.
    const std::vector<Token> prompt = {3, 0, 1};
    ngramspec_sequence_options options = ngramspec_sequence_options_default();
    options.max_new_tokens = 20;
    options.max_drafts = 4;
    const std::vector<ngramspec_sequence_id> ids = {42};
    ASSERT_C_OK(ngramspec_batch_begin(batch.get(), 42, prompt.data(), prompt.size(), &options));
    std::vector<Token> drafts(8);
    std::vector<std::size_t> offsets(2);
    std::vector<Token> model_tokens;
    std::vector<std::size_t> model_offsets;
    std::vector<ngramspec_step> steps(1);
    std::vector<Token> output;
    std::size_t first_drafts = 0;
    for (int pass = 0; pass < 40; ++pass) {
      std::size_t n = 0;
      ASSERT_C_OK(ngramspec_batch_propose(batch.get(), ids.data(), 1, drafts.data(), drafts.size(), offsets.data(), 0,
                                          &n));
      if (pass == 1) first_drafts = n;
      if (pass == 1 && with_file) {  // after 0 1 and the prefill's 4: the file's 6 5 2 0
        ASSERT_EQ(n, 4U);
        EXPECT_EQ(std::vector<Token>(drafts.begin(), drafts.begin() + 4), (std::vector<Token>{6, 5, 2, 0}));
      }
      const std::vector<Token> last = {output.empty() ? prompt.back() : output.back()};
      forward(last, drafts, offsets, model_tokens, model_offsets);
      ASSERT_C_OK(ngramspec_batch_accept(batch.get(), ids.data(), 1, model_tokens.data(), model_tokens.size(),
                                         model_offsets.data(), steps.data()));
      output.insert(output.end(), model_tokens.begin(),
                    model_tokens.begin() + static_cast<std::ptrdiff_t>(steps[0].emitted));
      if (steps[0].finished != 0) break;
    }
    ASSERT_EQ(output.size(), 20U);
    for (std::size_t i = 0; i < output.size(); ++i) {
      ASSERT_EQ(output[i], affine_next(i == 0 ? prompt.back() : output[i - 1])) << "plain greedy decoding at " << i;
    }
    if (!with_file) {
      EXPECT_EQ(first_drafts, 0U) << "nothing to draft from without the file";
    }
    ngramspec_batch_stats stats{};
    ASSERT_C_OK(ngramspec_batch_stats_get(batch.get(), &stats));
    if (with_file) {
      EXPECT_GE(stats.accepted, 4U);
    }
    const std::uint64_t records = ngramspec_corpus_records(live.get());
    ASSERT_C_OK(ngramspec_batch_finish(batch.get(), 42));
    EXPECT_EQ(ngramspec_corpus_records(live.get()), records + 1);
  }
  EXPECT_EQ(ngramspec_corpus_file_records(file.get()), 1U);  // read-only
  EXPECT_C_OK(ngramspec_corpus_file_verify(file.get()));
}


// ngramspec_batch_stats into a struct of every size from 0 to 64 bytes, followed by guard bytes, from a batch
// whose totals are `all`: ngramspec_batch_stats_get_sized writes the fields of the version of that size (32:
// the first four; 40: all five) and not one byte past it, and refuses every other size by name with nothing
// written; the getter that programs built before it call writes the first version's 32 bytes alone, the room
// a program built against any header has.
void expect_stats_written_to_their_size(const ngramspec_batch* batch, const ngramspec_batch_stats& all) {
  ASSERT_NE(all.out_of_vocabulary, 0U);  // so that a write of the last field shows
  constexpr unsigned char kGuard = 0xA5;
  constexpr std::size_t kFirst = offsetof(ngramspec_batch_stats, out_of_vocabulary);
  static_assert(kFirst == 32 && sizeof(ngramspec_batch_stats) == 40);
  const auto expect_written = [&](const unsigned char* bytes, std::size_t written, std::size_t room) {
    EXPECT_EQ(std::memcmp(bytes, &all, written), 0);
    for (std::size_t i = written; i < room; ++i) ASSERT_EQ(bytes[i], kGuard) << "byte " << i;
  };
  for (std::size_t size = 0; size <= 64; ++size) {
    SCOPED_TRACE("out_size = " + std::to_string(size));
    alignas(ngramspec_batch_stats) unsigned char bytes[64 + 16];
    std::memset(bytes, kGuard, sizeof bytes);
    auto* const out = reinterpret_cast<ngramspec_batch_stats*>(bytes);
    if (size == kFirst || size == sizeof(ngramspec_batch_stats)) {
      ASSERT_C_OK(ngramspec_batch_stats_get_sized(batch, out, size));
      expect_written(bytes, size, sizeof bytes);
    } else {
      EXPECT_INVALID(ngramspec_batch_stats_get_sized(batch, out, size),
                     "ngramspec_batch_stats_get_sized: out_size = " + std::to_string(size) + " is invalid",
                     "ngramspec_batch_stats, one of 32, 40 (40: sizeof(ngramspec_batch_stats)");
      expect_written(bytes, 0, sizeof bytes);
    }
  }
  alignas(ngramspec_batch_stats) unsigned char bytes[sizeof(ngramspec_batch_stats) + 16];
  std::memset(bytes, kGuard, sizeof bytes);
  ASSERT_C_OK((ngramspec_batch_stats_get)(batch, reinterpret_cast<ngramspec_batch_stats*>(bytes)));
  expect_written(bytes, kFirst, sizeof bytes);
  // The header's macro: this header's struct, every field.
  ngramspec_batch_stats stats{};
  ASSERT_C_OK(ngramspec_batch_stats_get(batch, &stats));
  EXPECT_EQ(std::memcmp(&stats, &all, sizeof stats), 0);
}

// The vocabulary: what a file records, a drafter or batch of another vocabulary refusing it by
// name, and drafts cut at a foreign token and counted, for drafters, chain batches and tree
// batches (which read a corpus file through ngramspec_batch_create_tree_file).
TEST(CApiCorpusFile, TheVocabularyIsRecordedMatchedAndForeignDraftsAreDroppedAndCounted) {
  const TempDir dir;
  const std::filesystem::path damaged = dir / "unknown.ngc";
  const std::filesystem::path other = dir / "32000.ngc";
  {
    CorpusBuilder builder;
    builder.add(std::vector<Token>{100, 101, 102, 103, 5000, 104}, 1);
    static_cast<void>(builder.write(damaged));
    CorpusBuilder larger(CorpusBuilder::kNoCap, CorpusVocabulary{32000, 0xabc});
    larger.add(std::vector<Token>{1, 2, 3}, 1);
    static_cast<void>(larger.write(other));
  }
  const CorpusFilePtr unknown = open_file(damaged);
  const CorpusFilePtr foreign = open_file(other);
  EXPECT_EQ(ngramspec_corpus_file_vocab_size(foreign.get()), 32000U);
  EXPECT_EQ(ngramspec_corpus_file_tokenizer_fingerprint(foreign.get()), 0xabcU);
  EXPECT_EQ(ngramspec_corpus_file_vocab_size(unknown.get()), 0U);
  EXPECT_EQ(ngramspec_corpus_file_tokenizer_fingerprint(unknown.get()), 0U);
  EXPECT_EQ(ngramspec_corpus_file_vocab_size(nullptr), 0U);

  // Another vocabulary, or tokenizer: refused, naming the call, the file and both values.
  ngramspec_match_drafter* d = nullptr;
  ngramspec_batch* b = nullptr;
  const std::string refused = "corpus file '" + other.string() + "', section header: its tokens come from a "
                              "vocabulary of 32000 tokens, the model's has 512";
  EXPECT_FILE_ERROR(ngramspec_match_drafter_create_vocab(nullptr, nullptr, foreign.get(), 0, 512, 0, &d),
                    "ngramspec_match_drafter_create_vocab: " + refused);
  EXPECT_FILE_ERROR(ngramspec_match_drafter_create_vocab(nullptr, nullptr, foreign.get(), 0, 32000, 0xabd, &d),
                    "tokenizer fingerprint 0x0000000000000abc, the model's is 0x0000000000000abd");
  const ngramspec_batch_config config = small_batch_config(1);
  EXPECT_FILE_ERROR(ngramspec_batch_create_vocab(&config, nullptr, foreign.get(), 0, 512, 0, &b),
                    "ngramspec_batch_create_vocab: " + refused);
  EXPECT_FILE_ERROR(ngramspec_batch_create_tree_file(&config, nullptr, nullptr, foreign.get(), 0, 512, 0, &b),
                    "ngramspec_batch_create_tree_file: " + refused);
  EXPECT_EQ(d, nullptr);
  EXPECT_EQ(b, nullptr);
  EXPECT_INVALID(ngramspec_batch_create_vocab(&config, nullptr, unknown.get(), 7, 512, 0, &b),
                 "ngramspec_batch_create_vocab: preference = 7 is invalid");
  EXPECT_INVALID(ngramspec_batch_create_tree_file(&config, nullptr, nullptr, unknown.get(), 0, 512, 0, nullptr),
                 "ngramspec_batch_create_tree_file: out is NULL");
  ngramspec_tree_config tree = ngramspec_tree_config_default();
  tree.vocab_size = 999;
  EXPECT_INVALID(ngramspec_batch_create_tree_file(&config, &tree, nullptr, unknown.get(), 0, 1000, 0, &b),
                 "ngramspec_batch_create_tree_file: vocab_size = 1000 and tree->vocab_size = 999 disagree");
  const std::uint64_t too_large = (std::uint64_t{1} << 32) + 1;
  EXPECT_INVALID(ngramspec_match_drafter_create_vocab(nullptr, nullptr, nullptr, 0, too_large, 0, &d),
                 "vocab_size = 4294967297 is invalid");

  // A file of unknown vocabulary: the draft 103 5000 104 is cut to 103, two tokens counted.
  ngramspec_match_config match = ngramspec_match_config_default();
  match.min_confidence = 0;
  ASSERT_C_OK(ngramspec_match_drafter_create_vocab(&match, nullptr, unknown.get(), 0, 1000, 0, &d));
  const MatchPtr drafter(d);
  const std::vector<Token> sequence = {7, 100, 101, 102};
  ASSERT_C_OK(ngramspec_match_drafter_update(drafter.get(), sequence.data(), sequence.size()));
  std::vector<Token> out(8);
  std::size_t count = 0;
  ASSERT_C_OK(ngramspec_match_drafter_predict(drafter.get(), out.data(), out.size(), nullptr, &count));
  ASSERT_EQ(count, 1U);
  EXPECT_EQ(out[0], 103U);
  EXPECT_EQ(ngramspec_match_drafter_out_of_vocabulary(drafter.get()), 2U);
  EXPECT_EQ(ngramspec_match_drafter_out_of_vocabulary(nullptr), 0U);

  ngramspec_batch_config batch_config = small_batch_config(1);
  batch_config.default_drafter = 0;
  batch_config.drafter = match;
  for (const bool trees : {false, true}) {
    for (const std::uint64_t vocab : {std::uint64_t{0}, std::uint64_t{1000}}) {
      SCOPED_TRACE(std::string(trees ? "tree" : "chain") + " batch, vocab_size " + std::to_string(vocab));
      ASSERT_C_OK(trees ? ngramspec_batch_create_tree_file(&batch_config, nullptr, nullptr, unknown.get(), 0, vocab, 0,
                                                           &b)
                        : ngramspec_batch_create_vocab(&batch_config, nullptr, unknown.get(), 0, vocab, 0, &b));
      const BatchPtr batch(b);
      const std::vector<Token> prompt = {7, 100, 101};
      ngramspec_sequence_options options = ngramspec_sequence_options_default();
      options.max_new_tokens = 16;
      options.max_drafts = 8;
      const ngramspec_sequence_id id = 9;
      ASSERT_C_OK(ngramspec_batch_begin(batch.get(), id, prompt.data(), prompt.size(), &options));
      std::vector<Token> tokens(8);
      std::vector<std::int32_t> parents(8);
      std::vector<std::size_t> offsets(2);
      std::size_t n = 0;
      const auto propose = [&] {
        return trees ? ngramspec_batch_propose_trees(batch.get(), &id, 1, tokens.data(), parents.data(), tokens.size(),
                                                     offsets.data(), 0, &n)
                     : ngramspec_batch_propose(batch.get(), &id, 1, tokens.data(), tokens.size(), offsets.data(), 0,
                                               &n);
      };
      ASSERT_C_OK(propose());  // the prefill
      ASSERT_EQ(n, 0U);
      const std::vector<Token> next = {102};
      const std::vector<std::size_t> one = {0, 1};
      ngramspec_step step{};
      std::vector<std::size_t> kept(1);
      ASSERT_C_OK(trees ? ngramspec_batch_accept_trees(batch.get(), &id, 1, next.data(), 1, one.data(), nullptr, 0, &step,
                                                       kept.data(), kept.size())
                        : ngramspec_batch_accept(batch.get(), &id, 1, next.data(), 1, one.data(), &step));
      ASSERT_C_OK(propose());
      ASSERT_GE(n, 1U);
      EXPECT_EQ(tokens[0], 103U);  // the file's continuation
      if (trees) {
        EXPECT_EQ(parents[0], NGRAMSPEC_TREE_ROOT);
      }
      const bool has_foreign = std::any_of(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n),
                                           [](Token t) { return t >= 1000; });
      EXPECT_EQ(has_foreign, vocab == 0);
      ngramspec_batch_stats stats{};
      ASSERT_C_OK(ngramspec_batch_stats_get(batch.get(), &stats));
      EXPECT_EQ(stats.out_of_vocabulary, vocab == 0 ? 0U : 2U);
      if (vocab != 0) expect_stats_written_to_their_size(batch.get(), stats);
    }
  }
}

// ngramspec_corpus_load verifies every section's checksum: a body damaged since it was written
// (random bytes over a tenth of it) is refused naming the file, the corpus unchanged;
// ngramspec_corpus_load_trusted skips the checksums.
TEST(CApiCorpusFile, LoadRefusesADamagedBodyAndLoadTrustedSkipsTheCheck) {
  const TempDir dir;
  std::mt19937_64 rng(99);
  const CorpusPtr source = make_corpus(SharedCorpus::min_bytes());
  for (int r = 0; r < 20; ++r) {
    std::vector<Token> record(1 + rng() % 30);
    for (Token& t : record) t = static_cast<Token>(rng() % 40);
    ASSERT_C_OK(ngramspec_corpus_append(source.get(), record.data(), record.size()));
  }
  const std::filesystem::path path = dir / "c.ngc";
  ASSERT_C_OK(ngramspec_corpus_save(source.get(), path.c_str()));
  std::vector<std::uint8_t> bytes = read_file<std::uint8_t>(path);
  detail::corpus_format::Header header;
  std::memcpy(&header, bytes.data(), sizeof header);
  // Over a tenth of the tokens section: load_trusted then loads it (the structure is intact).
  const auto& tokens = header.sections[0];
  for (std::size_t i = 0; i < tokens.bytes / 10 + 1; ++i) {
    bytes[static_cast<std::size_t>(tokens.offset + rng() % tokens.bytes)] ^= static_cast<std::uint8_t>(1 + rng() % 255);
  }
  const std::filesystem::path bad = dir / "bad.ngc";
  ASSERT_TRUE(write_file(bad, bytes));

  const CorpusPtr corpus = make_corpus(SharedCorpus::min_bytes());
  const std::vector<Token> held = {1, 2, 3};
  ASSERT_C_OK(ngramspec_corpus_append(corpus.get(), held.data(), held.size()));
  EXPECT_FILE_ERROR(ngramspec_corpus_load(corpus.get(), bad.c_str()),
                    "ngramspec_corpus_load: corpus file '" + bad.string() + "', section tokens: checksum mismatch");
  EXPECT_EQ(ngramspec_corpus_records(corpus.get()), 1U);
  EXPECT_EQ(ngramspec_corpus_size(corpus.get()), 3U);
  const CorpusFilePtr file = open_file(bad);  // the header still checks out
  EXPECT_FILE_ERROR(ngramspec_corpus_file_verify_checksums(file.get()),
                    "ngramspec_corpus_file_verify_checksums: corpus file '" + bad.string() + "', section tokens");
  EXPECT_INVALID(ngramspec_corpus_file_verify_checksums(nullptr), "ngramspec_corpus_file_verify_checksums: file is NULL");
  EXPECT_INVALID(ngramspec_corpus_load_trusted(nullptr, bad.c_str()), "ngramspec_corpus_load_trusted: corpus is NULL");
  ASSERT_C_OK(ngramspec_corpus_load_trusted(corpus.get(), bad.c_str()));
  const std::uint64_t records = ngramspec_corpus_records(corpus.get());
  EXPECT_GT(records, 1U);
  ASSERT_C_OK(ngramspec_corpus_load(corpus.get(), path.c_str()));  // the good file loads, as many records
  EXPECT_EQ(ngramspec_corpus_records(corpus.get()), records);
}

// A record table written wrong under checksums made to match (record 10 starts at 10^12): both
// loads refuse it as ngramspec_corpus_file_verify does, naming record 10, the corpus unchanged.
TEST(CApiCorpusFile, BothLoadsRefuseARecordTableVerifyRefusesWhateverItsChecksums) {
  const TempDir dir;
  const CorpusPtr source = make_corpus(SharedCorpus::min_bytes());
  for (Token r = 0; r < 20; ++r) {
    const std::vector<Token> record = {r, r + 1, r + 2, r % 3};
    ASSERT_C_OK(ngramspec_corpus_append(source.get(), record.data(), record.size()));
  }
  const std::filesystem::path path = dir / "forged.ngc";
  ASSERT_C_OK(ngramspec_corpus_save(source.get(), path.c_str()));
  std::vector<std::uint8_t> bytes = read_file<std::uint8_t>(path);
  detail::corpus_format::Header header;
  std::memcpy(&header, bytes.data(), sizeof header);
  detail::corpus_format::SectionEntry& records = header.sections[2];
  const std::uint64_t first = 1000000000000ULL;
  std::memcpy(bytes.data() + records.offset + 10 * sizeof(detail::corpus_format::RecordEntry), &first, sizeof first);
  records.checksum = detail::corpus_format::checksum(
      std::as_bytes(std::span(bytes).subspan(static_cast<std::size_t>(records.offset),
                                             static_cast<std::size_t>(records.bytes))));
  header.header_checksum = detail::corpus_format::checksum(
      std::as_bytes(std::span(&header, 1)).first(offsetof(detail::corpus_format::Header, header_checksum)));
  std::memcpy(bytes.data(), &header, sizeof header);
  ASSERT_TRUE(write_file(path, bytes));

  const std::string problem = "corpus file '" + path.string() +
                              "', section records: record 10 starts at token 1000000000000, not at a start bit after "
                              "the previous record's start";
  const CorpusFilePtr file = open_file(path);
  ASSERT_C_OK(ngramspec_corpus_file_verify_checksums(file.get()));
  EXPECT_FILE_ERROR(ngramspec_corpus_file_verify(file.get()), "ngramspec_corpus_file_verify: " + problem);
  const CorpusPtr corpus = make_corpus(SharedCorpus::min_bytes());
  const std::vector<Token> held = {1, 2, 3};
  ASSERT_C_OK(ngramspec_corpus_append(corpus.get(), held.data(), held.size()));
  EXPECT_FILE_ERROR(ngramspec_corpus_load(corpus.get(), path.c_str()), "ngramspec_corpus_load: " + problem);
  EXPECT_FILE_ERROR(ngramspec_corpus_load_trusted(corpus.get(), path.c_str()),
                    "ngramspec_corpus_load_trusted: " + problem);
  EXPECT_EQ(ngramspec_corpus_records(corpus.get()), 1U);
  EXPECT_EQ(ngramspec_corpus_size(corpus.get()), 3U);
}

// ---- Allocation ----------------------------------------------------------------------------------

TEST(CApiAllocation, CorpusDraftsAllocateNothing) {
  const TempDir dir;
  const CorpusPtr corpus = make_corpus(SharedCorpus::min_bytes());
  std::mt19937_64 rng(8);
  const std::vector<Token> stream = motif_stream(rng, 400);
  for (std::size_t i = 0; i + 40 <= stream.size(); i += 40) {
    ASSERT_C_OK(ngramspec_corpus_append(corpus.get(), stream.data() + i, 40));
  }
  const std::filesystem::path path = dir / "c.ngc";
  ASSERT_C_OK(ngramspec_corpus_save(corpus.get(), path.c_str()));
  const CorpusFilePtr file = open_file(path);
  std::array<Token, 16> out{};
  std::size_t count = 0;
  std::size_t length = 0;
  std::size_t drafted = 0;
  std::size_t allocations = 0;
  {
    const AllocationCounter counter;
    for (std::size_t i = 1; i < stream.size(); i += 7) {
      const std::size_t n = std::min<std::size_t>(i, 12);
      (void)ngramspec_corpus_draft(corpus.get(), stream.data() + i - n, n, out.data(), out.size(), &count, &length);
      drafted += count;
      (void)ngramspec_corpus_file_draft(file.get(), stream.data() + i - n, n, out.data(), out.size(), &count, &length);
      drafted += count;
    }
    (void)ngramspec_corpus_file_draft(nullptr, stream.data(), 1, out.data(), out.size(), &count, &length);
    allocations = counter.count();
  }
  EXPECT_EQ(allocations, 0U);
  EXPECT_GT(drafted, 100U);
}

TEST(CApiAllocation, HotCallsAllocateNothingOnceWarm) {
  const CorpusPtr corpus = make_corpus(SharedCorpus::min_bytes());
  ngramspec_match_config mc = ngramspec_match_config_default();
  mc.cap = 256;
  const MatchPtr match = make_match(&mc, corpus.get());
  const NGramPtr ngram = make_ngram(nullptr);
  std::mt19937_64 rng(3);
  const std::vector<Token> stream = motif_stream(rng, 600);
  std::array<Token, 16> out{};
  std::array<float, 16> probabilities{};
  std::size_t count = 0;
  // Warm: the first pass over the stream.
  for (std::size_t i = 0; i + 3 <= 300; i += 3) {
    ASSERT_C_OK(ngramspec_match_drafter_update(match.get(), stream.data() + i, 3));
    ASSERT_C_OK(ngramspec_ngram_predictor_update(ngram.get(), stream.data() + i, 3));
  }
  std::size_t drafters = 0;
  std::size_t drafted = 0;
  {
    const AllocationCounter counter;
    for (std::size_t i = 300; i + 3 <= stream.size(); i += 3) {
      (void)ngramspec_match_drafter_update(match.get(), stream.data() + i, 3);
      (void)ngramspec_ngram_predictor_update(ngram.get(), stream.data() + i, 3);
      (void)ngramspec_match_drafter_predict(match.get(), out.data(), out.size(), probabilities.data(), &count);
      drafted += count;
      (void)ngramspec_match_drafter_predict(match.get(), out.data(), out.size(), nullptr, &count);
      (void)ngramspec_ngram_predictor_predict(ngram.get(), out.data(), out.size(), probabilities.data(), &count);
      drafted += count;
      (void)ngramspec_ngram_predictor_predict(ngram.get(), out.data(), out.size(), nullptr, &count);
      if (i % 90 == 0) (void)ngramspec_corpus_append(corpus.get(), stream.data() + i - 30, 30);
    }
    (void)ngramspec_match_drafter_reset(match.get());
    (void)ngramspec_ngram_predictor_reset(ngram.get());
    // A bad argument is caught before anything that could allocate.
    (void)ngramspec_match_drafter_update(nullptr, stream.data(), 1);
    (void)ngramspec_batch_propose(nullptr, nullptr, 0, nullptr, 0, nullptr, 0, nullptr);
    drafters = counter.count();
  }
  EXPECT_EQ(drafters, 0U);
  EXPECT_GT(drafted, 100U);
  {  // The counter sees the library's allocations: a create allocates.
    const AllocationCounter counter;
    ngramspec_ngram_predictor* p = nullptr;
    (void)ngramspec_ngram_predictor_create(nullptr, &p);
    const std::size_t created = counter.count();
    ngramspec_ngram_predictor_free(p);
    EXPECT_GT(created, 0U);
  }

  // A batch: three sequences through passes, finishing and beginning again.
  ngramspec_batch_config config = small_batch_config(3);
  config.max_pass_tokens = 12;
  const BatchPtr batch = make_batch(&config, corpus.get());
  constexpr std::size_t kSequences = 3;
  std::array<ngramspec_sequence_id, kSequences> ids = {11, 12, 13};
  const std::array<Token, 9> prompt = {0, 1, 4, 6, 5, 2, 0, 1, 4};
  const std::array<Token, 2> stops = {60, 61};  // never emitted
  ngramspec_sequence_options options = ngramspec_sequence_options_default();
  options.max_new_tokens = 24;
  options.stop_tokens = stops.data();
  options.n_stop_tokens = stops.size();
  std::array<Token, 32> drafts{};
  std::array<std::size_t, kSequences + 1> offsets{};
  std::array<Token, 64> model_tokens{};
  std::array<std::size_t, kSequences + 1> model_offsets{};
  std::array<ngramspec_step, kSequences> steps{};
  std::array<Token, kSequences> last{};
  std::size_t n_drafts = 0;
  std::size_t failures = 0;
  std::size_t finished = 0;
  const auto run = [&](std::size_t passes) {
    for (std::size_t pass = 0; pass < passes; ++pass) {
      failures += ngramspec_batch_propose(batch.get(), ids.data(), kSequences, drafts.data(), drafts.size(),
                                          offsets.data(), 0, &n_drafts) != NGRAMSPEC_OK;
      std::size_t n = 0;
      model_offsets[0] = 0;
      for (std::size_t i = 0; i < kSequences; ++i) {
        Token fed = last[i];
        for (std::size_t j = offsets[i]; j <= offsets[i + 1]; ++j) {
          model_tokens[n++] = affine_next(fed);
          if (j < offsets[i + 1]) fed = drafts[j];
        }
        model_offsets[i + 1] = n;
      }
      failures += ngramspec_batch_accept(batch.get(), ids.data(), kSequences, model_tokens.data(), n,
                                         model_offsets.data(), steps.data()) != NGRAMSPEC_OK;
      for (std::size_t i = 0; i < kSequences; ++i) {
        last[i] = model_tokens[model_offsets[i] + steps[i].emitted - 1];
        if (steps[i].finished != 0) {  // the next request takes its place
          ++finished;
          failures += ngramspec_batch_finish(batch.get(), ids[i]) != NGRAMSPEC_OK;
          ids[i] += kSequences;
          failures += ngramspec_batch_begin(batch.get(), ids[i], prompt.data(), prompt.size(), &options) != NGRAMSPEC_OK;
          last[i] = prompt.back();
        }
      }
    }
  };
  for (std::size_t i = 0; i < kSequences; ++i) {
    ASSERT_C_OK(ngramspec_batch_begin(batch.get(), ids[i], prompt.data(), prompt.size(), &options));
    last[i] = prompt.back();
  }
  run(40);  // warm: every sequence has finished and begun again
  ASSERT_EQ(failures, 0U) << ngramspec_last_error();
  ASSERT_GE(finished, kSequences);
  std::size_t batch_allocations = 0;
  {
    const AllocationCounter counter;
    run(60);
    batch_allocations = counter.count();
  }
  EXPECT_EQ(failures, 0U) << ngramspec_last_error();
  EXPECT_EQ(batch_allocations, 0U);
  EXPECT_GE(finished, 3 * kSequences);
  ngramspec_batch_stats stats{};
  ASSERT_C_OK(ngramspec_batch_stats_get(batch.get(), &stats));
  EXPECT_GT(stats.accepted, 0U);
}

// Under a lowered address-space limit, a top-k table whose memory cannot be had is
// NGRAMSPEC_ERROR_OUT_OF_MEMORY naming it, never a crash.
TEST(CApiLimits, ATopKTableBeyondTheAddressSpaceLimitIsOutOfMemoryNamingIt) {
  expect_in_child_under_1_gib([] {
    ngramspec_batch_config config = ngramspec_batch_config_default();
    config.max_sequences = 1;
    ngramspec_tree_config tree = ngramspec_tree_config_default();
    tree.vocab_size = TopKTable::kMaxVocabSize;  // 2 GiB of rows with kMaxK
    tree.top_k = TopKTable::kMaxK;
    ngramspec_batch* batch = nullptr;
    const ngramspec_status status = ngramspec_batch_create_tree(&config, &tree, nullptr, &batch);
    const std::string message = ngramspec_last_error();
    const bool ok = status == NGRAMSPEC_ERROR_OUT_OF_MEMORY && batch == nullptr &&
                    message == "ngramspec_batch_create_tree: out of memory: could not allocate " +
                                   std::to_string(TopKTable::bytes_for(tree.vocab_size, tree.top_k)) +
                                   " bytes for a TopKTable (its rows)";
    if (!ok) std::fprintf(stderr, "status %s, message \"%s\"\n", ngramspec_status_name(status), message.c_str());
    return ok;
  });
}

// ---- Out of memory -------------------------------------------------------------------------------

// Every allocation a call makes, failed in turn: the call reports NGRAMSPEC_ERROR_OUT_OF_MEMORY,
// changes nothing (`unchanged` checks, after each failure) and leaks nothing (ASan's leak check
// in the sanitizer build). Ends once the call succeeds.
template <class Call, class Unchanged>
void expect_out_of_memory_reported(const char* name, Call call, Unchanged unchanged) {
  SCOPED_TRACE(name);
  for (std::size_t succeed = 0;; ++succeed) {
    ASSERT_LT(succeed, 10000U) << "never succeeded";
    ngramspec_status status = NGRAMSPEC_OK;
    std::size_t failed = 0;
    {
      const FailingAllocations failing(succeed);
      status = call();
      failed = failing.failed();
    }
    if (failed == 0) {
      ASSERT_EQ(status, NGRAMSPEC_OK) << ngramspec_last_error();
      // The library's allocations go through the replaced operator new: it did fail some.
      EXPECT_GT(succeed, 0U) << "the call made no allocation that could fail";
      return;
    }
    ASSERT_TRUE(fails_with(status, NGRAMSPEC_ERROR_OUT_OF_MEMORY, {std::string(name) + ": ", "out of memory"}))
        << "with the first " << succeed << " allocations allowed";
    unchanged();
  }
}

TEST(CApiOutOfMemory, CreateReportsItLeavesOutAloneAndLeaksNothing) {
  ngramspec_corpus* corpus = sentinel_handle<ngramspec_corpus>();
  expect_out_of_memory_reported(
      "ngramspec_corpus_create", [&] { return ngramspec_corpus_create(SharedCorpus::min_bytes(), &corpus); },
      [&] { EXPECT_EQ(corpus, sentinel_handle<ngramspec_corpus>()); });
  const CorpusPtr corpus_owner(corpus);

  ngramspec_match_drafter* match = sentinel_handle<ngramspec_match_drafter>();
  ngramspec_match_config mc = ngramspec_match_config_default();
  mc.cap = 128;
  expect_out_of_memory_reported(
      "ngramspec_match_drafter_create", [&] { return ngramspec_match_drafter_create(&mc, corpus, &match); },
      [&] { EXPECT_EQ(match, sentinel_handle<ngramspec_match_drafter>()); });
  const MatchPtr match_owner(match);

  ngramspec_ngram_predictor* ngram = sentinel_handle<ngramspec_ngram_predictor>();
  expect_out_of_memory_reported(
      "ngramspec_ngram_predictor_create", [&] { return ngramspec_ngram_predictor_create(nullptr, &ngram); },
      [&] { EXPECT_EQ(ngram, sentinel_handle<ngramspec_ngram_predictor>()); });
  const NGramPtr ngram_owner(ngram);

  ngramspec_batch* batch = sentinel_handle<ngramspec_batch>();
  const ngramspec_batch_config config = small_batch_config(3);
  expect_out_of_memory_reported(
      "ngramspec_batch_create", [&] { return ngramspec_batch_create(&config, corpus, &batch); },
      [&] { EXPECT_EQ(batch, sentinel_handle<ngramspec_batch>()); });
  const BatchPtr batch_owner(batch);
  EXPECT_EQ(ngramspec_batch_size(batch), 0U);
}

TEST(CApiOutOfMemory, BeginReportsItAndTheBatchGoesOn) {
  const ngramspec_batch_config config = small_batch_config(2);
  const BatchPtr batch = make_batch(&config);
  const std::vector<Token> prompt = {1, 2, 3, 1, 2, 3};
  ASSERT_C_OK(ngramspec_batch_begin(batch.get(), 1, prompt.data(), prompt.size(), nullptr));
  // More stop tokens and drafts than any slot held before: begin must allocate.
  const std::vector<Token> stops(50, 9);
  ngramspec_sequence_options options = ngramspec_sequence_options_default();
  options.stop_tokens = stops.data();
  options.n_stop_tokens = stops.size();
  options.max_drafts = 100;
  expect_out_of_memory_reported(
      "ngramspec_batch_begin",
      [&] { return ngramspec_batch_begin(batch.get(), 2, prompt.data(), prompt.size(), &options); },
      [&] {
        EXPECT_EQ(ngramspec_batch_contains(batch.get(), 2), 0);
        EXPECT_EQ(ngramspec_batch_size(batch.get()), 1U);
        EXPECT_THAT(std::string(ngramspec_last_error()), HasSubstr("sequence 2: out of memory"));
      });
  EXPECT_EQ(ngramspec_batch_contains(batch.get(), 2), 1);
  // Both sequences step.
  const std::vector<ngramspec_sequence_id> ids = {1, 2};
  std::vector<std::size_t> offsets(3);
  std::size_t n = 0;
  ASSERT_C_OK(ngramspec_batch_propose(batch.get(), ids.data(), 2, nullptr, 0, offsets.data(), 0, &n));
  const std::vector<Token> model_tokens = {1, 1};
  const std::vector<std::size_t> model_offsets = {0, 1, 2};
  std::vector<ngramspec_step> steps(2);
  EXPECT_C_OK(ngramspec_batch_accept(batch.get(), ids.data(), 2, model_tokens.data(), 2, model_offsets.data(),
                                     steps.data()));
  EXPECT_EQ(steps[0].emitted, 1U);
  EXPECT_EQ(steps[1].emitted, 1U);
}


TEST(CApiOutOfMemory, CorpusFileCallsReportItAndChangeNothing) {
  const TempDir dir;
  const CorpusPtr corpus = make_corpus(SharedCorpus::min_bytes());
  const std::vector<Token> record = {1, 2, 3, 4, 5, 1, 2, 3};
  ASSERT_C_OK(ngramspec_corpus_append_stamped(corpus.get(), record.data(), record.size(), 3));
  const std::filesystem::path path = dir / "c.ngc";
  const auto only_the_file = [&](bool saved) {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir.path())) names.push_back(entry.path().filename());
    EXPECT_EQ(names, saved ? std::vector<std::string>{"c.ngc"} : std::vector<std::string>{})
        << "a failed save leaves no file, not even a temporary one";
  };
  expect_out_of_memory_reported(
      "ngramspec_corpus_save", [&] { return ngramspec_corpus_save(corpus.get(), path.c_str()); },
      [&] { only_the_file(false); });
  only_the_file(true);

  ngramspec_corpus_file* file = sentinel_handle<ngramspec_corpus_file>();
  expect_out_of_memory_reported(
      "ngramspec_corpus_file_open", [&] { return ngramspec_corpus_file_open(path.c_str(), &file); },
      [&] { EXPECT_EQ(file, sentinel_handle<ngramspec_corpus_file>()); });
  const CorpusFilePtr file_owner(file);
  EXPECT_EQ(ngramspec_corpus_file_size(file), record.size());

  const CorpusPtr target = make_corpus(SharedCorpus::min_bytes());
  const std::vector<Token> kept = {9, 9};
  ASSERT_C_OK(ngramspec_corpus_append_stamped(target.get(), kept.data(), kept.size(), 1));
  expect_out_of_memory_reported(
      "ngramspec_corpus_load", [&] { return ngramspec_corpus_load(target.get(), path.c_str()); },
      [&] {
        EXPECT_EQ(ngramspec_corpus_size(target.get()), 2U);
        EXPECT_EQ(ngramspec_corpus_last_stamp(target.get()), 1);
      });
  EXPECT_EQ(ngramspec_corpus_size(target.get()), record.size());

  ngramspec_match_drafter* match = sentinel_handle<ngramspec_match_drafter>();
  ngramspec_match_config mc = ngramspec_match_config_default();
  mc.cap = 128;
  expect_out_of_memory_reported(
      "ngramspec_match_drafter_create_file",
      [&] { return ngramspec_match_drafter_create_file(&mc, corpus.get(), file, NGRAMSPEC_PREFER_FILE, &match); },
      [&] { EXPECT_EQ(match, sentinel_handle<ngramspec_match_drafter>()); });
  const MatchPtr match_owner(match);

  ngramspec_batch* batch = sentinel_handle<ngramspec_batch>();
  const ngramspec_batch_config config = small_batch_config(2);
  expect_out_of_memory_reported(
      "ngramspec_batch_create_file",
      [&] { return ngramspec_batch_create_file(&config, corpus.get(), file, NGRAMSPEC_PREFER_LIVE, &batch); },
      [&] { EXPECT_EQ(batch, sentinel_handle<ngramspec_batch>()); });
  const BatchPtr batch_owner(batch);
  EXPECT_EQ(ngramspec_batch_size(batch), 0U);
}

// ---- Verify costs and the draft planner ---------------------------------------------------------

struct VerifyCostFree {
  void operator()(ngramspec_verify_cost* p) const noexcept { ngramspec_verify_cost_free(p); }
};
using VerifyCostPtr = std::unique_ptr<ngramspec_verify_cost, VerifyCostFree>;

VerifyCostPtr make_verify_cost(const std::string& spec) {
  ngramspec_verify_cost* p = nullptr;
  EXPECT_EQ(ngramspec_verify_cost_create(spec.c_str(), &p), NGRAMSPEC_OK) << ngramspec_last_error();
  return VerifyCostPtr(p);
}

/// A random non-decreasing cost curve as a spec: flat, a knee, or a table of up to 6 points.
std::string random_cost_spec(std::mt19937_64& rng) {
  switch (rng() % 4) {
    case 0: return "flat";
    case 1: return "knee:" + std::to_string(1 + rng() % 40);
    default: {
      std::string spec = "table:";
      std::size_t tokens = 0;
      double cost = 0.5 + static_cast<double>(rng() % 100) / 50.0;
      for (std::size_t i = 0, n = 1 + rng() % 6; i < n; ++i) {
        tokens += 1 + rng() % 12;
        cost += static_cast<double>(rng() % 100) / (rng() % 2 == 0 ? 400.0 : 40.0);
        // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict, a false positive) on a literal + std::string.
        if (i != 0) spec += ',';
        spec += std::to_string(tokens);
        spec += '=';
        spec += std::to_string(cost);
      }
      return spec;
    }
  }
}

TEST(CApiProperty, PlanDraftsSendsTheCountWithTheBestExpectedTokensPerCost) {
  std::mt19937_64 rng(20261128);
  std::size_t sent_some = 0;
  std::size_t sent_none = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const std::string spec = random_cost_spec(rng);
    const VerifyCostPtr cost = make_verify_cost(spec);
    ASSERT_TRUE(cost != nullptr) << spec;
    const std::size_t n = rng() % 20;
    std::vector<float> p(n);
    float previous = 1.0f;
    for (float& x : p) x = previous = previous * static_cast<float>(rng() % 1001) / 1000.0f;
    if (n > 0 && rng() % 5 == 0) p[rng() % n] = std::nanf("");  // a bad estimate: read as 0
    if (n > 1 && rng() % 5 == 0) p[1 + rng() % (n - 1)] = 1.5f;  // above the one before it: lowered to it
    std::vector<float> valid = p;
    previous = 1.0f;
    for (float& x : valid) x = previous = std::isnan(x) ? 0.0f : std::clamp(x, 0.0f, previous);
    const std::size_t base_tokens = rng() % 3;
    const double base_expected = 1.0 + static_cast<double>(rng() % 3);
    std::size_t best_n = 0;
    double expected = base_expected;
    double best = expected / ngramspec_verify_cost_of_pass(cost.get(), base_tokens, 0);
    for (std::size_t j = 0; j < n; ++j) {
      expected += valid[j];
      const double rate = expected / ngramspec_verify_cost_of_pass(cost.get(), base_tokens, j + 1);
      if (rate > best * (1 + 1e-12)) {
        best = rate;
        best_n = j + 1;
      }
    }
    std::size_t count = 12345;
    ASSERT_C_OK(ngramspec_plan_drafts(cost.get(), base_tokens, base_expected, p.data(), n, &count));
    EXPECT_EQ(count, best_n) << spec << " n " << n << " base " << base_tokens << " " << base_expected;
    EXPECT_EQ(p, valid) << "the probabilities are made valid in place";
    (count > 0 ? sent_some : sent_none) += 1;
    // Without a cost every candidate goes.
    ASSERT_C_OK(ngramspec_plan_drafts(nullptr, base_tokens, base_expected, p.data(), n, &count));
    EXPECT_EQ(count, n);
  }
  EXPECT_GT(sent_some, 300U);
  EXPECT_GT(sent_none, 200U);
}

TEST(CApiPlanner, CostsReadTheBatchGrammarAndTheirSpecReadsBackEqual) {
  const VerifyCostPtr knee = make_verify_cost("knee:4");
  EXPECT_EQ(ngramspec_verify_cost_of(knee.get(), 0), 1.0);
  EXPECT_EQ(ngramspec_verify_cost_of(knee.get(), 4), 1.0);
  EXPECT_EQ(ngramspec_verify_cost_of(knee.get(), 8), 2.0);
  EXPECT_STREQ(ngramspec_verify_cost_spec(knee.get()), "knee:4");
  const VerifyCostPtr table = make_verify_cost("table:1=2,3=3,5=5");  // normalized: the first point costs 1
  EXPECT_EQ(ngramspec_verify_cost_of(table.get(), 1), 1.0);
  EXPECT_EQ(ngramspec_verify_cost_of(table.get(), 2), 1.25);
  EXPECT_EQ(ngramspec_verify_cost_of(table.get(), 7), 3.5);  // the last slope goes on
  const VerifyCostPtr again = make_verify_cost(ngramspec_verify_cost_spec(table.get()));
  for (std::size_t t = 0; t < 12; ++t) {
    EXPECT_DOUBLE_EQ(ngramspec_verify_cost_of(again.get(), t), ngramspec_verify_cost_of(table.get(), t)) << t;
  }
  EXPECT_EQ(ngramspec_verify_cost_of(nullptr, 3), 0.0);
  EXPECT_EQ(ngramspec_verify_cost_of_pass(nullptr, 3, 1), 0.0);
  EXPECT_STREQ(ngramspec_verify_cost_spec(nullptr), "");
  ngramspec_verify_cost_free(nullptr);
}

TEST(CApiPlanner, BadArgumentsAreReportedAndChangeNothing) {
  ngramspec_verify_cost* cost = sentinel_handle<ngramspec_verify_cost>();
  EXPECT_INVALID(ngramspec_verify_cost_create("knee:0", &cost), "ngramspec_verify_cost_create: ", "knee:0");
  EXPECT_INVALID(ngramspec_verify_cost_create("steep", &cost), "ngramspec_verify_cost_create: ", "'steep'");
  EXPECT_INVALID(ngramspec_verify_cost_create("table:2=1,1=2", &cost), "ngramspec_verify_cost_create: ",
                 "table:2=1,1=2");
  EXPECT_INVALID(ngramspec_verify_cost_create(nullptr, &cost), "ngramspec_verify_cost_create: spec is NULL");
  EXPECT_EQ(cost, sentinel_handle<ngramspec_verify_cost>());
  EXPECT_INVALID(ngramspec_verify_cost_create("flat", nullptr), "ngramspec_verify_cost_create: out is NULL");

  const VerifyCostPtr flat = make_verify_cost("flat");
  std::array<float, 3> p{0.9f, 0.5f, 0.2f};
  const std::array<float, 3> before = p;
  std::size_t count = 77;
  EXPECT_INVALID(ngramspec_plan_drafts(flat.get(), 1, 1.0, p.data(), 3, nullptr), "ngramspec_plan_drafts: count is NULL");
  EXPECT_INVALID(ngramspec_plan_drafts(flat.get(), 1, 1.0, nullptr, 3, &count),
                 "ngramspec_plan_drafts: probabilities is NULL but n = 3");
  EXPECT_INVALID(ngramspec_plan_drafts(flat.get(), 1, 1.0, p.data(), SIZE_MAX, &count), "n = 18446744073709551615");
  for (const double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    EXPECT_INVALID(ngramspec_plan_drafts(flat.get(), 1, bad, p.data(), 3, &count), "ngramspec_plan_drafts: base_expected = ",
                   "finite and positive");
  }
  EXPECT_EQ(count, 77U);
  EXPECT_EQ(p, before);
  ASSERT_C_OK(ngramspec_plan_drafts(flat.get(), 1, 1.0, p.data(), 3, &count));
  EXPECT_EQ(count, 3U);  // a flat cost: every draft with a chance is free
  ASSERT_C_OK(ngramspec_plan_drafts(flat.get(), 1, 1.0, nullptr, 0, &count));
  EXPECT_EQ(count, 0U);
}

TEST(CApiAllocation, PlanDraftsAllocatesNothing) {
  const VerifyCostPtr cost = make_verify_cost("table:1=1,2=1.2,4=1.5,16=3");
  std::array<float, 16> p{};
  std::size_t total = 0;
  std::size_t allocations = 0;
  {
    const AllocationCounter counter;
    for (int i = 0; i < 100; ++i) {
      for (std::size_t j = 0; j < p.size(); ++j) p[j] = 1.0f / static_cast<float>(j + 1 + i % 3);
      std::size_t count = 0;
      if (ngramspec_plan_drafts(cost.get(), 1, 1.0, p.data(), p.size(), &count) != NGRAMSPEC_OK) return;
      total += count;
    }
    allocations = counter.count();
  }
  EXPECT_EQ(allocations, 0U);
  EXPECT_GT(total, 0U);
}

}  // namespace
}  // namespace ngramspec::test
