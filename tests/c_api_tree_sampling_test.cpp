// The C ABI's tree batches that draw (ngramspec_tree_config::draw_recycled) and its tree verifier
// (ngramspec_sampler_verify_tree): the config's new fields and their versioning, the refusals of
// ngramspec_batch_propose_trees_q, ngramspec_batch_accept_trees_q and verify_tree (named, nothing
// written), verify_tree's walk against TokenSampler's row by row and greedy's argmax path, the batch's
// memory counting propose_trees_q's scratch, and a chi-square test that an engine loop over the C tree
// batch, verifying each tree with verify_tree against the q the batch gives, keeps the target's
// distribution, and fails with a uniform q in its place.

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
#include <utility>
#include <vector>

#include "ngramspec/draft_distribution.hpp"
#include "ngramspec/sampling_options.hpp"
#include "ngramspec/token.hpp"
#include "ngramspec/token_sampler.hpp"
#include "ngramspec/top_k_table.hpp"
#include "support/allocation_counter.hpp"
#include "support/c_api_checks.hpp"
#include "support/chi_square.hpp"
#include "support/last_token_target.hpp"
#include "support/tree_walk.hpp"

namespace ngramspec::test {
namespace {

struct BatchFree {
  void operator()(ngramspec_batch* p) const noexcept { ngramspec_batch_free(p); }
};
using BatchPtr = std::unique_ptr<ngramspec_batch, BatchFree>;

struct SamplerFree {
  void operator()(ngramspec_sampler* p) const noexcept { ngramspec_sampler_free(p); }
};
using SamplerPtr = std::unique_ptr<ngramspec_sampler, SamplerFree>;

constexpr std::size_t kVocab = kTargetVocab;
constexpr std::size_t kTopK = 4;
constexpr std::size_t kBatch = 8;
constexpr std::size_t kMaxDrafts = 6;

ngramspec_tree_config drawing_config(std::uint64_t seed) {
  ngramspec_tree_config tree = ngramspec_tree_config_default();
  tree.vocab_size = kVocab;
  tree.top_k = kTopK;
  tree.successor_slots = 16;
  tree.draw_recycled = 1;
  tree.draw_seed = seed;
  return tree;
}

BatchPtr make_batch(const ngramspec_tree_config& tree) {
  ngramspec_batch_config config = ngramspec_batch_config_default();
  config.max_sequences = kBatch;
  ngramspec_batch* p = nullptr;
  EXPECT_C_OK(ngramspec_batch_create_tree(&config, &tree, nullptr, &p));
  return BatchPtr(p);
}

ngramspec_sequence_options sequence_options(std::size_t max_new_tokens) {
  ngramspec_sequence_options o = ngramspec_sequence_options_default();
  o.max_new_tokens = max_new_tokens;
  o.max_drafts = kMaxDrafts;
  return o;
}

std::array<float, kVocab> target_row(Token last) {
  std::array<float, kVocab> row{};
  for (Token t = 0; t < kVocab; ++t) row[t] = target_logit(last, t);
  return row;
}

// ---- The config --------------------------------------------------------------------------------

TEST(CApiTreeSampling, TheConfigDefaultsAreTheCppDefaults) {
  const ngramspec_tree_config c = ngramspec_tree_config_default();
  EXPECT_EQ(c.struct_size, sizeof(ngramspec_tree_config));
  EXPECT_EQ(c.draw_recycled, 0);
  EXPECT_EQ(c.draw_seed, 0U);
}

TEST(CApiTreeSampling, AConfigOfTheFirstVersionReadsTheNewFieldsAsTheirDefaults) {
  // The struct before draw_recycled: its size is accepted and draw_recycled stays off, so the
  // table keeps no probabilities and accept_trees_q refuses them by name.
  ngramspec_tree_config tree = drawing_config(0);
  tree.struct_size = offsetof(ngramspec_tree_config, draw_recycled);
  const BatchPtr batch = make_batch(tree);
  ASSERT_NE(batch, nullptr);
  const ngramspec_sequence_options o = sequence_options(8);
  const Token prompt[] = {0, 1};
  ASSERT_C_OK(ngramspec_batch_begin(batch.get(), 1, prompt, 2, &o));
  const ngramspec_sequence_id id = 1;
  const Token model_token = 2;
  const std::size_t offsets[] = {0, 1};
  const Token top[kTopK] = {2, 1, 0, 3};
  const float top_p[kTopK] = {0.4f, 0.3f, 0.2f, 0.1f};
  ngramspec_step step{};
  std::size_t kept[1] = {};
  std::array<Token, kMaxDrafts> tokens{};
  std::array<std::int32_t, kMaxDrafts> parents{};
  std::size_t tree_offsets[2] = {};
  std::size_t n = 0;
  ASSERT_C_OK(ngramspec_batch_propose_trees(batch.get(), &id, 1, tokens.data(), parents.data(), kMaxDrafts,
                                            tree_offsets, 0, &n));
  EXPECT_INVALID(ngramspec_batch_accept_trees_q(batch.get(), &id, 1, &model_token, 1, offsets, top, top_p, kTopK,
                                                &step, kept, 1),
                 "ngramspec_batch_accept_trees_q", "keeps no probabilities");
  for (const std::size_t size : {std::size_t{0}, sizeof(ngramspec_tree_config) + 8, sizeof(std::size_t) * 3}) {
    tree.struct_size = size;
    ngramspec_batch* p = nullptr;
    EXPECT_INVALID(ngramspec_batch_create_tree(nullptr, &tree, nullptr, &p), "ngramspec_batch_create_tree",
                   "tree->struct_size = " + std::to_string(size));
    EXPECT_EQ(p, nullptr);
  }
}

// Every struct_size is one that a program built against a version's header sets (its sizeof, or the end of
// its last field) or refused naming the sizes read. A version's tail padding is not read: the second
// version's, where draw_recycled lies now, leaves drawing off, as the fields past any version do.
TEST(CApiTreeSampling, EveryStructSizeIsAVersionsOrRefusedNamingTheSizes) {
  if (sizeof(std::size_t) != 8 || alignof(ngramspec_tree_config) != 8) GTEST_SKIP() << "sizes of an LP64 machine";
  struct Version {
    std::size_t size;
    bool draws;  // draw_recycled is one of its fields
  };
  const Version versions[] = {{48, false}, {52, false}, {56, false}, {64, true}, {68, true}, {72, true}};
  ngramspec_tree_config tree = drawing_config(0);
  tree.draw_recycled = 0;
  const std::size_t plain = ngramspec_batch_memory_bytes(make_batch(tree).get());
  tree.draw_recycled = 1;
  const std::size_t drawing = ngramspec_batch_memory_bytes(make_batch(tree).get());
  ASSERT_GT(drawing, plain);
  ngramspec_batch_config config = ngramspec_batch_config_default();
  config.max_sequences = kBatch;
  for (std::size_t size = 0; size <= sizeof(ngramspec_tree_config) + 16; ++size) {
    SCOPED_TRACE("struct_size = " + std::to_string(size));
    tree.struct_size = size;
    ngramspec_batch* p = nullptr;
    const auto version =
        std::find_if(std::begin(versions), std::end(versions), [&](const Version& v) { return v.size == size; });
    if (version == std::end(versions)) {
      EXPECT_INVALID(ngramspec_batch_create_tree(&config, &tree, nullptr, &p),
                     "ngramspec_batch_create_tree: tree->struct_size = " + std::to_string(size) + " is invalid",
                     "one of 48, 52, 56, 64, 68, 72 (72: sizeof(ngramspec_tree_config)");
      EXPECT_EQ(p, nullptr);
      continue;
    }
    ASSERT_C_OK(ngramspec_batch_create_tree(&config, &tree, nullptr, &p));
    const BatchPtr batch(p);
    EXPECT_EQ(ngramspec_batch_memory_bytes(batch.get()), version->draws ? drawing : plain);
  }
}

// ngramspec_tree_config_init over a struct of every size followed by guard bytes: a version's size (its sizeof
// or the end of its last field) gets the defaults of that version's fields, its tail padding up to the size
// zeroed, struct_size set, not one byte past the size written, and the library reads it as the defaults; any
// other size, or NULL, is refused by name with nothing written.
TEST(CApiTreeSampling, InitWritesTheDefaultsOfTheVersionOfItsSizeAndNothingPastIt) {
  if (sizeof(std::size_t) != 8 || alignof(ngramspec_tree_config) != 8) GTEST_SKIP() << "sizes of an LP64 machine";
  struct Field {
    std::size_t offset;
    std::size_t size;
  };
  const Field fields[] = {
      {offsetof(ngramspec_tree_config, successor_slots), sizeof(std::size_t)},
      {offsetof(ngramspec_tree_config, max_children), sizeof(std::size_t)},
      {offsetof(ngramspec_tree_config, vocab_size), sizeof(std::size_t)},
      {offsetof(ngramspec_tree_config, top_k), sizeof(std::size_t)},
      {offsetof(ngramspec_tree_config, shared_top_k), sizeof(int)},
      {offsetof(ngramspec_tree_config, carry_over), sizeof(int)},
      {offsetof(ngramspec_tree_config, enrich_counts), sizeof(int)},
      {offsetof(ngramspec_tree_config, draw_recycled), sizeof(int)},
      {offsetof(ngramspec_tree_config, draw_seed), sizeof(std::uint64_t)},
      {offsetof(ngramspec_tree_config, recycled_history), sizeof(float)},
  };
  struct Version {
    std::size_t size;
    std::size_t end;  // of its last field
  };
  const Version versions[] = {{48, 48}, {52, 52}, {56, 52}, {64, 64}, {68, 68}, {72, 68}};
  const ngramspec_tree_config defaults = ngramspec_tree_config_default();
  const auto* const expected = reinterpret_cast<const unsigned char*>(&defaults);
  ngramspec_batch_config config = ngramspec_batch_config_default();
  config.max_sequences = kBatch;
  ngramspec_batch* p = nullptr;
  ASSERT_C_OK(ngramspec_batch_create_tree(&config, nullptr, nullptr, &p));
  const std::size_t default_bytes = ngramspec_batch_memory_bytes(BatchPtr(p).get());
  constexpr unsigned char kGuard = 0xA5;
  for (std::size_t size = 0; size <= sizeof(ngramspec_tree_config) + 16; ++size) {
    SCOPED_TRACE("struct_size = " + std::to_string(size));
    alignas(ngramspec_tree_config) unsigned char bytes[sizeof(ngramspec_tree_config) + 32];
    std::memset(bytes, kGuard, sizeof bytes);
    auto* const tree = reinterpret_cast<ngramspec_tree_config*>(bytes);
    const auto version =
        std::find_if(std::begin(versions), std::end(versions), [&](const Version& v) { return v.size == size; });
    if (version == std::end(versions)) {
      EXPECT_INVALID(ngramspec_tree_config_init(tree, size),
                     "ngramspec_tree_config_init: struct_size = " + std::to_string(size) + " is invalid",
                     "one of 48, 52, 56, 64, 68, 72 (72: sizeof(ngramspec_tree_config)");
      for (const unsigned char b : bytes) ASSERT_EQ(b, kGuard);
      continue;
    }
    ASSERT_C_OK(ngramspec_tree_config_init(tree, size));
    EXPECT_EQ(tree->struct_size, size);
    for (const Field& f : fields) {
      if (f.offset + f.size <= version->end) {
        EXPECT_EQ(std::memcmp(bytes + f.offset, expected + f.offset, f.size), 0) << "the field at " << f.offset;
      }
    }
    for (std::size_t i = version->end; i < size; ++i) EXPECT_EQ(bytes[i], 0) << "tail padding byte " << i;
    for (std::size_t i = size; i < sizeof bytes; ++i) ASSERT_EQ(bytes[i], kGuard) << "byte " << i;
    ASSERT_C_OK(ngramspec_batch_create_tree(&config, tree, nullptr, &p));
    const BatchPtr batch(p);
    EXPECT_EQ(ngramspec_batch_memory_bytes(batch.get()), default_bytes);
  }
  EXPECT_INVALID(ngramspec_tree_config_init(nullptr, sizeof(ngramspec_tree_config)),
                 "ngramspec_tree_config_init: config is NULL");
}

TEST(CApiTreeSampling, RecycledHistoryIsReadFromItsVersionAndRefusedOutsideZeroToOne) {
  EXPECT_EQ(ngramspec_tree_config_default().recycled_history, ngramspec::TopKTable::kDefaultHistoryWeight);
  ngramspec_tree_config tree = drawing_config(0);
  tree.recycled_history = 5.0f;
  ngramspec_batch* p = nullptr;
  EXPECT_INVALID(ngramspec_batch_create_tree(nullptr, &tree, nullptr, &p), "ngramspec_batch_create_tree",
                 "tree->recycled_history = 5 is invalid: it must be in [0, 1)");
  EXPECT_EQ(p, nullptr);
  // The struct before recycled_history: the field past its size is not read.
  tree.struct_size = offsetof(ngramspec_tree_config, recycled_history);
  EXPECT_NE(make_batch(tree), nullptr);
}

TEST(CApiTreeSampling, DrawRecycledWithoutTheVocabularyIsRefusedByName) {
  // Without tree->vocab_size there is no top-k table: drawing would be off, top_k 0, without a word.
  ngramspec_tree_config tree = drawing_config(0);
  tree.vocab_size = 0;
  ngramspec_batch* p = nullptr;
  EXPECT_INVALID(ngramspec_batch_create_tree(nullptr, &tree, nullptr, &p), "ngramspec_batch_create_tree",
                 "tree->draw_recycled = 1 needs the top-k table, and tree->vocab_size = 0 makes none");
  EXPECT_EQ(p, nullptr);
  tree.shared_top_k = 0;
  EXPECT_INVALID(ngramspec_batch_create_tree(nullptr, &tree, nullptr, &p), "ngramspec_batch_create_tree",
                 "tree->vocab_size = 0");
  tree.draw_recycled = 0;
  EXPECT_C_OK(ngramspec_batch_create_tree(nullptr, &tree, nullptr, &p));
  EXPECT_EQ(ngramspec_batch_top_k(p), 0U);
  ngramspec_batch_free(p);
}

// A value refused for lying just past a bound is printed in full, so that it shows why (%g printed 1 for
// 1.0000001, the float just above 1).
TEST(CApiTreeSampling, ARecycledHistoryJustPastOneIsNamedInFull) {
  ngramspec_tree_config tree = drawing_config(0);
  tree.recycled_history = std::nextafter(1.0f, 2.0f);
  ngramspec_batch* p = nullptr;
  EXPECT_INVALID(ngramspec_batch_create_tree(nullptr, &tree, nullptr, &p), "ngramspec_batch_create_tree",
                 "tree->recycled_history = 1.0000001 is invalid: it must be in [0, 1)");
  EXPECT_EQ(p, nullptr);
}

// The rows a drawing batch draws from blend what accept_trees_q recorded after their token by
// recycled_history: after rows A then B for token 1, the next tree's first drawn node under the
// root (token 1) is drawn from h A + (1 - h) B, which the ratio of two of its tokens' q shows.
TEST(CApiTreeSampling, DrawnNodesAreDrawnFromTheRowsBlendedByRecycledHistory) {
  const Token a_tokens[kTopK] = {1, 2, 0, 3};
  const float a_p[kTopK] = {0.4f, 0.3f, 0.2f, 0.1f};
  const Token b_tokens[kTopK] = {2, 1, 3, 0};
  const float b_p[kTopK] = {0.5f, 0.2f, 0.2f, 0.1f};
  for (const float h : {0.0f, 0.5f, 0.75f}) {
    SCOPED_TRACE("recycled_history " + std::to_string(h));
    ngramspec_tree_config tree = drawing_config(11);
    tree.recycled_history = h;
    const BatchPtr batch = make_batch(tree);
    ASSERT_NE(batch, nullptr);
    const ngramspec_sequence_id id = 1;
    const ngramspec_sequence_options o = sequence_options(64);
    const Token prompt[] = {0, 1};
    ASSERT_C_OK(ngramspec_batch_begin(batch.get(), id, prompt, 2, &o));
    std::array<Token, kMaxDrafts> tokens{};
    std::array<std::int32_t, kMaxDrafts> parents{};
    std::size_t offsets[2] = {};
    std::array<std::size_t, kMaxDrafts + 1> q_offsets{};
    std::array<Token, kMaxDrafts * kTopK> q_tokens{};
    std::array<float, kMaxDrafts * kTopK> q_probabilities{};
    std::size_t n = 0;
    std::size_t n_q = 0;
    // Two passes whose model tokens cover the root alone (token 1 each time): row A, then row B.
    for (const auto& [row, p] : {std::pair{a_tokens, a_p}, std::pair{b_tokens, b_p}}) {
      ASSERT_C_OK(ngramspec_batch_propose_trees_q(batch.get(), &id, 1, tokens.data(), parents.data(), kMaxDrafts,
                                                  offsets, 0, &n, q_offsets.data(), q_tokens.data(),
                                                  q_probabilities.data(), q_tokens.size(), &n_q));
      const Token model_token = 1;
      const std::size_t model_offsets[] = {0, 1};
      ngramspec_step step{};
      std::size_t kept[1] = {};
      ASSERT_C_OK(ngramspec_batch_accept_trees_q(batch.get(), &id, 1, &model_token, 1, model_offsets, row, p, kTopK,
                                                 &step, kept, 1));
    }
    ASSERT_C_OK(ngramspec_batch_propose_trees_q(batch.get(), &id, 1, tokens.data(), parents.data(), kMaxDrafts,
                                                offsets, 0, &n, q_offsets.data(), q_tokens.data(),
                                                q_probabilities.data(), q_tokens.size(), &n_q));
    std::size_t node = n;
    for (std::size_t i = 0; i < n && node == n; ++i) {
      if (parents[i] == NGRAMSPEC_TREE_ROOT && q_offsets[i + 1] > q_offsets[i]) node = i;
    }
    ASSERT_LT(node, n) << "no drawn node under the root";
    float q0 = -1.0f;
    float q3 = -1.0f;
    for (std::size_t j = q_offsets[node]; j < q_offsets[node + 1]; ++j) {
      if (q_tokens[j] == 0) q0 = q_probabilities[j];
      if (q_tokens[j] == 3) q3 = q_probabilities[j];
    }
    ASSERT_GT(q0, 0.0f);
    ASSERT_GT(q3, 0.0f);
    EXPECT_NEAR(q0 / q3, (h * 0.2f + (1 - h) * 0.1f) / (h * 0.1f + (1 - h) * 0.2f), 1e-5f);
  }
}

// ---- Refusals ----------------------------------------------------------------------------------

/// A drawing batch with sequence 1 past its prefill, so that its next proposal has nodes.
struct Running {
  BatchPtr batch = make_batch(drawing_config(3));
  ngramspec_sequence_id id = 1;

  Running() {
    const ngramspec_sequence_options o = sequence_options(64);
    const Token prompt[] = {0, 1, 0, 1, 0, 1, 0};
    EXPECT_C_OK(ngramspec_batch_begin(batch.get(), id, prompt, 7, &o));
    std::array<Token, kMaxDrafts> tokens{};
    std::array<std::int32_t, kMaxDrafts> parents{};
    std::size_t offsets[2] = {};
    std::size_t n = 0;
    EXPECT_C_OK(ngramspec_batch_propose_trees(batch.get(), &id, 1, tokens.data(), parents.data(), kMaxDrafts, offsets,
                                              0, &n));
    const Token model_token = 1;
    const std::size_t model_offsets[] = {0, 1};
    ngramspec_step step{};
    std::size_t kept[1] = {};
    EXPECT_C_OK(ngramspec_batch_accept_trees(batch.get(), &id, 1, &model_token, 1, model_offsets, nullptr, 0, &step,
                                             kept, 1));
  }
};

TEST(CApiTreeSampling, ProposeTreesQRefusesTooSmallOrMissingBuffersByNameAndWritesNothing) {
  Running r;
  constexpr Token kUnwritten = 0xABCDEFU;
  std::vector<Token> tokens(kMaxDrafts, kUnwritten);
  std::vector<std::int32_t> parents(kMaxDrafts, 77);
  std::vector<std::size_t> offsets(2, 99);
  std::vector<std::size_t> q_offsets(kMaxDrafts + 1, 99);
  std::vector<Token> q_tokens(kMaxDrafts * kTopK, kUnwritten);
  std::vector<float> q_probabilities(kMaxDrafts * kTopK, -1.0f);
  std::size_t n = 99;
  std::size_t n_q = 99;
  const auto unwritten = [&] {
    return std::all_of(tokens.begin(), tokens.end(), [](Token t) { return t == kUnwritten; }) &&
           std::all_of(parents.begin(), parents.end(), [](std::int32_t p) { return p == 77; }) &&
           std::all_of(offsets.begin(), offsets.end(), [](std::size_t o) { return o == 99; }) &&
           std::all_of(q_offsets.begin(), q_offsets.end(), [](std::size_t o) { return o == 99; }) &&
           std::all_of(q_tokens.begin(), q_tokens.end(), [](Token t) { return t == kUnwritten; }) &&
           std::all_of(q_probabilities.begin(), q_probabilities.end(), [](float p) { return p == -1.0f; }) &&
           n == 99 && n_q == 99;
  };
  const auto propose = [&](std::size_t* q_off, Token* q_tok, float* q_prob, std::size_t q_capacity, std::size_t* nq) {
    return ngramspec_batch_propose_trees_q(r.batch.get(), &r.id, 1, tokens.data(), parents.data(), kMaxDrafts,
                                           offsets.data(), 0, &n, q_off, q_tok, q_prob, q_capacity, nq);
  };
  for (std::size_t capacity = 0; capacity < kMaxDrafts * kTopK; capacity += 5) {
    EXPECT_INVALID(propose(q_offsets.data(), q_tokens.data(), q_probabilities.data(), capacity, &n_q),
                   "ngramspec_batch_propose_trees_q", "q_capacity = " + std::to_string(capacity),
                   "capacity x ngramspec_batch_top_k() = 6 x 4");
    EXPECT_TRUE(unwritten());
  }
  EXPECT_INVALID(propose(nullptr, q_tokens.data(), q_probabilities.data(), q_tokens.size(), &n_q), "q_offsets");
  EXPECT_INVALID(propose(q_offsets.data(), nullptr, q_probabilities.data(), q_tokens.size(), &n_q), "q_tokens",
                 "q_capacity = 24");
  EXPECT_INVALID(propose(q_offsets.data(), q_tokens.data(), nullptr, q_tokens.size(), &n_q), "q_probabilities",
                 "q_capacity = 24");
  EXPECT_INVALID(propose(q_offsets.data(), q_tokens.data(), q_probabilities.data(), q_tokens.size(), nullptr), "n_q");
  EXPECT_TRUE(unwritten());
  // The batch goes on: the same call with room proposes, q's layout consistent with the trees.
  ASSERT_C_OK(propose(q_offsets.data(), q_tokens.data(), q_probabilities.data(), q_tokens.size(), &n_q));
  ASSERT_EQ(offsets[0], 0U);
  ASSERT_EQ(offsets[1], n);
  EXPECT_GT(n, 0U);
  EXPECT_EQ(q_offsets[0], 0U);
  EXPECT_EQ(q_offsets[n], n_q);
  for (std::size_t j = 0; j < n; ++j) {
    ASSERT_LE(q_offsets[j], q_offsets[j + 1]);
    ASSERT_LE(q_offsets[j + 1] - q_offsets[j], kTopK);
  }
  // A chain batch has no trees.
  ngramspec_batch* chain = nullptr;
  ASSERT_C_OK(ngramspec_batch_create(nullptr, nullptr, &chain));
  const BatchPtr chains(chain);
  EXPECT_INVALID(ngramspec_batch_propose_trees_q(chain, &r.id, 1, tokens.data(), parents.data(), kMaxDrafts,
                                                 offsets.data(), 0, &n, q_offsets.data(), q_tokens.data(),
                                                 q_probabilities.data(), q_tokens.size(), &n_q),
                 "ngramspec_batch_propose_trees_q", "drafts chains");
}

TEST(CApiTreeSampling, AcceptTreesQRefusesBadProbabilitiesByNameAndChangesNothing) {
  Running r;
  std::vector<Token> tokens(kMaxDrafts);
  std::vector<std::int32_t> parents(kMaxDrafts);
  std::size_t offsets[2] = {};
  std::size_t n = 0;
  ASSERT_C_OK(ngramspec_batch_propose_trees(r.batch.get(), &r.id, 1, tokens.data(), parents.data(), kMaxDrafts,
                                            offsets, 0, &n));
  // The model answers the root only: one entry, one top row.
  const Token model_token = 3;
  const std::size_t model_offsets[] = {0, 1};
  const Token top[kTopK] = {3, 1, 0, 2};
  ngramspec_step step{};
  std::size_t kept[1] = {};
  const std::array<std::array<float, kTopK>, 4> bad = {{
      {1.5f, 0.0f, 0.0f, 0.0f},
      {0.5f, -0.25f, 0.0f, 0.0f},
      {0.0f, 0.5f, 0.5f, 0.0f},
      {0.5f, 0.25f, NAN, 0.0f},
  }};
  for (const std::array<float, kTopK>& p : bad) {
    EXPECT_INVALID(ngramspec_batch_accept_trees_q(r.batch.get(), &r.id, 1, &model_token, 1, model_offsets, top,
                                                  p.data(), kTopK, &step, kept, 1),
                   "ngramspec_batch_accept_trees_q", "sequence 1", "top_probabilities[");
  }
  EXPECT_INVALID(ngramspec_batch_accept_trees_q(r.batch.get(), &r.id, 1, &model_token, 1, model_offsets, top, nullptr,
                                                kTopK, &step, kept, 1),
                 "ngramspec_batch_accept_trees_q", "top_probabilities", "n_top = 4");
  const float short_p[kTopK - 1] = {0.5f, 0.3f, 0.2f};
  EXPECT_INVALID(ngramspec_batch_accept_trees_q(r.batch.get(), &r.id, 1, &model_token, 1, model_offsets, top, short_p,
                                                kTopK - 1, &step, kept, 1),
                 "ngramspec_batch_accept_trees_q", "top has 3 tokens");
  // A row that lists a token twice would come back as twin siblings in later trees, and as a q
  // support holding the token twice.
  const float good[kTopK] = {0.4f, 0.3f, 0.2f, 0.1f};
  const Token twice[kTopK] = {3, 1, 0, 1};
  EXPECT_INVALID(ngramspec_batch_accept_trees_q(r.batch.get(), &r.id, 1, &model_token, 1, model_offsets, twice, good,
                                                kTopK, &step, kept, 1),
                 "ngramspec_batch_accept_trees_q",
                 "sequence 1: top[3] = 1 is invalid: token 1 is also top[1], in the same row (entry 0)");
  EXPECT_INVALID(ngramspec_batch_accept_trees(r.batch.get(), &r.id, 1, &model_token, 1, model_offsets, twice, kTopK,
                                              &step, kept, 1),
                 "ngramspec_batch_accept_trees", "sequence 1: top[3] = 1 is invalid");
  // Nothing changed: the pass is still pending and is decided by a valid call.
  ASSERT_C_OK(ngramspec_batch_accept_trees_q(r.batch.get(), &r.id, 1, &model_token, 1, model_offsets, top, good, kTopK,
                                             &step, kept, 1));
  EXPECT_EQ(step.emitted, 1U);
}

// ---- The tree verifier ------------------------------------------------------------------------------

/// One verify_tree call's inputs: rows of logits, the nodes and their parents, and their q as offsets
/// into supports (q_offsets empty: NULL), starting anywhere in them.
struct Tree {
  std::vector<float> logits;
  std::vector<Token> tokens;
  std::vector<std::int32_t> parents;
  std::vector<std::size_t> q_offsets;
  std::vector<Token> q_tokens;
  std::vector<float> q_probabilities;
};

/// What verify_tree wrote.
struct TreeVerified {
  std::vector<Token> model_tokens;
  std::vector<std::size_t> path;
  std::size_t accepted = 0;
  Token next = 0;
};

ngramspec_status verify_tree(ngramspec_sampler* sampler, const Tree& t, std::uint64_t position, TreeVerified& out) {
  const std::size_t n = t.tokens.size();
  out.model_tokens.assign(n + 1, 0xABCDEFU);
  out.path.assign(n + 1, 0xDEADBEEFU);
  return ngramspec_sampler_verify_tree(sampler, t.logits.data(), t.logits.size(), position, t.tokens.data(),
                                       t.parents.data(), n, t.q_offsets.empty() ? nullptr : t.q_offsets.data(),
                                       t.q_tokens.data(), t.q_probabilities.data(), t.q_tokens.size(),
                                       out.model_tokens.data(), out.path.data(), &out.accepted, &out.next);
}

/// A random tree of up to 10 nodes over `vocab` tokens (each parent the root or any earlier node;
/// tokens mostly in the vocabulary, siblings now and then alike), rows of logits in [-3, 3] (some
/// masked, none wholly), and each node's q a random support that mostly holds its token (empty now
/// and then: chosen), placed after a random run of other supports (as one sequence's part of a call).
Tree random_tree(std::mt19937_64& rng, std::size_t vocab) {
  Tree t;
  const std::size_t n = rng() % 11;
  std::uniform_real_distribution<float> logit(-3.0f, 3.0f);
  t.logits.resize((n + 1) * vocab);
  for (float& l : t.logits) l = rng() % 13 == 0 ? -std::numeric_limits<float>::infinity() : logit(rng);
  for (std::size_t r = 0; r <= n; ++r) t.logits[r * vocab + rng() % vocab] = 2.5f;  // no row fully masked
  const std::size_t before = rng() % 3 == 0 ? 0 : rng() % 9;
  for (std::size_t s = 0; s < before; ++s) {
    t.q_tokens.push_back(static_cast<Token>(rng() % vocab));
    t.q_probabilities.push_back(0.5f);
  }
  t.q_offsets.push_back(t.q_tokens.size());
  for (std::size_t j = 0; j < n; ++j) {
    t.parents.push_back(static_cast<std::int32_t>(rng() % (j + 1)) - 1);
    t.tokens.push_back(static_cast<Token>(rng() % 17 == 0 ? vocab + rng() % 3 : rng() % vocab));
    const std::size_t support = rng() % 5 == 0 ? 0 : 1 + rng() % 4;
    for (std::size_t s = 0; s < support; ++s) {
      t.q_tokens.push_back(s == 0 && rng() % 4 != 0 ? t.tokens.back() : static_cast<Token>(rng() % vocab));
      t.q_probabilities.push_back(0.05f + static_cast<float>(rng() % 100) / 100.0f);
    }
    t.q_offsets.push_back(t.q_tokens.size());
  }
  for (std::size_t s = rng() % 3; s > 0; --s) {  // and other supports after it
    t.q_tokens.push_back(0);
    t.q_probabilities.push_back(1.0f);
  }
  return t;
}

ngramspec_sampling_options sampling_options(float temperature, std::size_t top_k, float top_p, std::uint64_t seed,
                                            int mode) {
  ngramspec_sampling_options o = ngramspec_sampling_options_default();
  o.temperature = temperature;
  o.top_k = top_k;
  o.top_p = top_p;
  o.seed = seed;
  o.mode = mode;
  return o;
}

SamplerPtr make_sampler(const ngramspec_sampling_options& o, std::size_t vocab) {
  ngramspec_sampler* p = nullptr;
  EXPECT_C_OK(ngramspec_sampler_create(&o, vocab, &p));
  return SamplerPtr(p);
}

TEST(CApiTreeSampling, VerifyTreeRefusesBadCallsByNameWritesNothingAndTheSamplerGoesOn) {
  const ngramspec_sampling_options o = sampling_options(1.0f, 0, 1.0f, 3, NGRAMSPEC_SAMPLING_REJECTION);
  const SamplerPtr sampler = make_sampler(o, 4);
  ngramspec_sampler* const s = sampler.get();
  // The root with children 1 and 3, node 0 with child 2: four rows of four.
  const std::vector<float> rows(16, 0.0f);
  const std::array<Token, 3> nodes{1, 2, 3};
  const std::array<std::int32_t, 3> parents{-1, 0, -1};
  const std::array<std::size_t, 4> offsets{0, 2, 3, 3};
  const std::array<Token, 3> tokens{1, 3, 2};
  const std::array<float, 3> probabilities{0.5f, 0.5f, 1.0f};
  std::array<Token, 4> model_tokens{};
  std::array<std::size_t, 4> path{};
  std::size_t accepted = 77;
  Token next = 99;
  model_tokens.fill(0xABCDEFU);
  path.fill(55);
  const auto unwritten = [&] {
    return accepted == 77 && next == 99 &&
           std::all_of(model_tokens.begin(), model_tokens.end(), [](Token t) { return t == 0xABCDEFU; }) &&
           std::all_of(path.begin(), path.end(), [](std::size_t e) { return e == 55; });
  };
  const auto call = [&](const float* logits, std::size_t n_logits, const Token* n_tokens, const std::int32_t* ups,
                        std::size_t n_nodes, const std::size_t* q_offsets, const Token* q_tokens,
                        const float* q_probabilities, std::size_t n_q) {
    return ngramspec_sampler_verify_tree(s, logits, n_logits, 10, n_tokens, ups, n_nodes, q_offsets, q_tokens,
                                         q_probabilities, n_q, model_tokens.data(), path.data(), &accepted, &next);
  };
  const auto with_q = [&](const std::size_t* q_offsets, const Token* q_tokens, const float* q_probabilities,
                          std::size_t n_q) {
    return call(rows.data(), 16, nodes.data(), parents.data(), 3, q_offsets, q_tokens, q_probabilities, n_q);
  };
  const auto with_parents = [&](const std::array<std::int32_t, 3>& ups) {
    return call(rows.data(), 16, nodes.data(), ups.data(), 3, nullptr, nullptr, nullptr, 0);
  };
  const char* const where = "ngramspec_sampler_verify_tree: ";
  EXPECT_INVALID(ngramspec_sampler_verify_tree(nullptr, rows.data(), 16, 0, nodes.data(), parents.data(), 3, nullptr,
                                               nullptr, nullptr, 0, model_tokens.data(), path.data(), &accepted,
                                               &next),
                 "ngramspec_sampler_verify_tree: sampler is NULL");
  EXPECT_INVALID(call(nullptr, 16, nodes.data(), parents.data(), 3, nullptr, nullptr, nullptr, 0), where,
                 "logits is NULL but n_logits = 16");
  EXPECT_INVALID(call(rows.data(), 12, nodes.data(), parents.data(), 3, nullptr, nullptr, nullptr, 0), where,
                 "n_logits = 12 is invalid: it must be (n_nodes + 1) x vocab_size = (3 + 1) x 4");
  EXPECT_INVALID(call(rows.data(), 15, nodes.data(), parents.data(), 3, nullptr, nullptr, nullptr, 0), where,
                 "n_logits = 15 is invalid");
  EXPECT_INVALID(call(rows.data(), 16, nullptr, parents.data(), 3, nullptr, nullptr, nullptr, 0), where,
                 "tokens is NULL but n_nodes = 3");
  EXPECT_INVALID(call(rows.data(), 16, nodes.data(), nullptr, 3, nullptr, nullptr, nullptr, 0), where,
                 "parents is NULL but n_nodes = 3");
  EXPECT_INVALID(with_parents({0, 0, -1}), where,
                 "parents[0] = 0 is invalid: node 0's parent must be NGRAMSPEC_TREE_ROOT (-1)");
  EXPECT_INVALID(with_parents({-1, 0, 2}), where,
                 "parents[2] = 2 is invalid: it must be NGRAMSPEC_TREE_ROOT (-1) or an earlier node, 0 .. 1");
  EXPECT_INVALID(with_parents({-1, -2, 0}), where, "parents[1] = -2 is invalid");
  EXPECT_INVALID(with_parents({-1, 0, 5}), where, "parents[2] = 5 is invalid");
  EXPECT_INVALID(with_q(nullptr, tokens.data(), probabilities.data(), 3), where,
                 "q_offsets is NULL (every draft chosen) but n_q = 3");
  EXPECT_INVALID(with_q(offsets.data(), nullptr, probabilities.data(), 3), where, "q_tokens is NULL but n_q = 3");
  EXPECT_INVALID(with_q(offsets.data(), tokens.data(), nullptr, 3), where, "q_probabilities is NULL but n_q = 3");
  const std::array<std::size_t, 4> starts_beyond{4, 4, 4, 4};
  EXPECT_INVALID(with_q(starts_beyond.data(), tokens.data(), probabilities.data(), 3), where,
                 "q_offsets[0] = 4 is invalid: it must be at most n_q = 3");
  const std::array<std::size_t, 4> falls{0, 2, 1, 3};
  EXPECT_INVALID(with_q(falls.data(), tokens.data(), probabilities.data(), 3), where,
                 "q_offsets[2] = 1 is invalid: it must be from q_offsets[1] = 2 to n_q = 3");
  const std::array<std::size_t, 4> beyond{0, 2, 3, 4};
  EXPECT_INVALID(with_q(beyond.data(), tokens.data(), probabilities.data(), 3), where,
                 "q_offsets[3] = 4 is invalid: it must be from q_offsets[2] = 3 to n_q = 3");
  std::vector<Token> wide_tokens(34, 1);
  std::vector<float> wide_probabilities(34, 1.0f);
  const std::array<std::size_t, 4> wide{0, 1, 34, 34};
  EXPECT_INVALID(with_q(wide.data(), wide_tokens.data(), wide_probabilities.data(), 34), where,
                 "node 1's support (q_offsets[1] .. q_offsets[2]) has 33 tokens, more than NGRAMSPEC_MAX_SUPPORT = 32");
  const std::array<float, 3> negative{0.5f, -0.25f, 1.0f};
  EXPECT_INVALID(with_q(offsets.data(), tokens.data(), negative.data(), 3), where,
                 "q_probabilities[1] = -0.25 (node 0, token 3) is invalid: it must be finite and >= 0");
  const std::array<float, 3> nothing{0.5f, 0.5f, 0.0f};
  EXPECT_INVALID(with_q(offsets.data(), tokens.data(), nothing.data(), 3), where,
                 "node 1's probabilities q_probabilities[2 .. 3) sum to 0");
  EXPECT_INVALID(ngramspec_sampler_verify_tree(s, rows.data(), 16, 10, nodes.data(), parents.data(), 3, nullptr,
                                               nullptr, nullptr, 0, nullptr, path.data(), &accepted, &next),
                 "ngramspec_sampler_verify_tree: model_tokens is NULL");
  EXPECT_INVALID(ngramspec_sampler_verify_tree(s, rows.data(), 16, 10, nodes.data(), parents.data(), 3, nullptr,
                                               nullptr, nullptr, 0, model_tokens.data(), nullptr, &accepted, &next),
                 "ngramspec_sampler_verify_tree: path is NULL");
  EXPECT_INVALID(ngramspec_sampler_verify_tree(s, rows.data(), 16, 10, nodes.data(), parents.data(), 3, nullptr,
                                               nullptr, nullptr, 0, model_tokens.data(), path.data(), nullptr, &next),
                 "ngramspec_sampler_verify_tree: accepted is NULL");
  EXPECT_INVALID(ngramspec_sampler_verify_tree(s, rows.data(), 16, 10, nodes.data(), parents.data(), 3, nullptr,
                                               nullptr, nullptr, 0, model_tokens.data(), path.data(), &accepted,
                                               nullptr),
                 "ngramspec_sampler_verify_tree: next is NULL");
  // Rows the sampler cannot draw from: bad input, named by token and position; the root's row is read
  // at position 10, and a NaN found after the walk has begun still writes nothing.
  std::vector<float> bad = rows;
  bad[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_INVALID(call(bad.data(), 16, nodes.data(), parents.data(), 3, nullptr, nullptr, nullptr, 0), where,
                 "logit of token 2 at position 10 is NaN");
  bad = rows;
  std::fill(bad.begin(), bad.begin() + 4, -std::numeric_limits<float>::infinity());
  EXPECT_INVALID(call(bad.data(), 16, nodes.data(), parents.data(), 3, nullptr, nullptr, nullptr, 0), where,
                 "every logit is -inf at position 10");
  std::vector<float> greedy_rows(16, 0.0f);
  greedy_rows[1] = 1.0f;                                       // the root's argmax: node 0's token
  greedy_rows[4 + 3] = std::numeric_limits<float>::infinity();  // node 0's row: read next, at position 11
  const ngramspec_sampling_options greedy = sampling_options(0.0f, 0, 1.0f, 0, NGRAMSPEC_SAMPLING_EXACT);
  const SamplerPtr greedy_sampler = make_sampler(greedy, 4);
  EXPECT_INVALID(ngramspec_sampler_verify_tree(greedy_sampler.get(), greedy_rows.data(), 16, 10, nodes.data(),
                                               parents.data(), 3, nullptr, nullptr, nullptr, 0, model_tokens.data(),
                                               path.data(), &accepted, &next),
                 where, "logit of token 3 at position 11 is +inf");
  EXPECT_TRUE(unwritten());

  // The same sampler verifies the good call afterwards, and as a fresh one does.
  const SamplerPtr fresh = make_sampler(o, 4);
  std::array<Token, 4> fresh_tokens{};
  std::array<std::size_t, 4> fresh_path{};
  std::size_t fresh_accepted = 0;
  Token fresh_next = 0;
  ASSERT_C_OK(with_q(offsets.data(), tokens.data(), probabilities.data(), 3));
  ASSERT_C_OK(ngramspec_sampler_verify_tree(fresh.get(), rows.data(), 16, 10, nodes.data(), parents.data(), 3,
                                            offsets.data(), tokens.data(), probabilities.data(), 3,
                                            fresh_tokens.data(), fresh_path.data(), &fresh_accepted, &fresh_next));
  EXPECT_EQ(accepted, fresh_accepted);
  EXPECT_EQ(next, fresh_next);
  EXPECT_EQ(model_tokens, fresh_tokens);
  EXPECT_TRUE(std::equal(path.begin(), path.begin() + static_cast<std::ptrdiff_t>(accepted + 1), fresh_path.begin()));
}

// verify_tree walks as an engine verifying row by row with TokenSampler does (walk_tree: each row's
// children in index order, TokenSampler::verify in rejection mode, choose in the exact mode), in
// either mode, at any temperature and filter, whatever q is and wherever its part of the call starts:
// the model tokens on the walk, the path, the accepted count and the next token; every entry off the
// walk holds the next token.
TEST(CApiTreeSamplingProperty, VerifyTreeWalksAsTokenSamplerRowByRow) {
  std::mt19937_64 rng(20261206);
  std::size_t walked_below_the_root = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const std::size_t vocab = 1 + rng() % 9;
    const int mode = trial % 2 == 0 ? NGRAMSPEC_SAMPLING_EXACT : NGRAMSPEC_SAMPLING_REJECTION;
    const float temperature = trial % 5 == 0 ? 0.0f : 0.25f + static_cast<float>(rng() % 8) / 4.0f;
    const ngramspec_sampling_options o =
        sampling_options(temperature, rng() % 4, rng() % 2 == 0 ? 1.0f : 0.8f, rng(), mode);
    const SamplerPtr sampler = make_sampler(o, vocab);
    SamplingOptions cpp{.temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p, .seed = o.seed};
    cpp.mode = mode == NGRAMSPEC_SAMPLING_REJECTION ? SamplingMode::rejection : SamplingMode::exact;
    TokenSampler reference(cpp, vocab);
    Tree t = random_tree(rng, vocab);
    const std::size_t n = t.tokens.size();
    const std::uint64_t position = rng() % 1000;
    // Nodes often the reference's own token at their row, so walks go deep.
    for (std::size_t j = 0; j < n; ++j) {
      if (rng() % 2 == 0) {
        const std::size_t parent_entry = static_cast<std::size_t>(t.parents[j] + 1);
        std::size_t depth = 0;
        for (std::int32_t p = t.parents[j]; p != -1; p = t.parents[static_cast<std::size_t>(p)]) ++depth;
        t.tokens[j] = reference.choose(std::span<const float>(t.logits).subspan(parent_entry * vocab, vocab),
                                       position + depth);
      }
    }
    const bool chosen = trial % 4 == 0;  // no distributions: every node chosen
    if (chosen) {
      t.q_offsets.clear();
      t.q_tokens.clear();
      t.q_probabilities.clear();
    }
    DraftDistributions q;
    for (std::size_t j = 0; !chosen && j < n; ++j) {
      const std::size_t from = t.q_offsets[j];
      const std::size_t size = t.q_offsets[j + 1] - from;
      if (size == 0) {
        q.push_one_hot();
      } else {
        q.push(std::span<const Token>(t.q_tokens).subspan(from, size),
               std::span<const float>(t.q_probabilities).subspan(from, size));
      }
    }
    std::vector<Token> expected(n + 1, 0xABCDEFU);
    if (mode == NGRAMSPEC_SAMPLING_REJECTION) {
      walk_tree(
          reference, t.tokens, t.parents, position,
          [&](std::size_t e) { return std::span<const float>(t.logits).subspan(e * vocab, vocab); },
          [&](std::size_t j) { return chosen ? TokenSampler::Draft::kChosen : static_cast<std::uint32_t>(j); }, q,
          expected);
    } else {
      // The exact mode: each row's token is plain sampling's at its position, the walk as walk_tree's.
      std::size_t e = 0;
      for (std::size_t depth = 0;; ++depth) {
        expected[e] = reference.choose(std::span<const float>(t.logits).subspan(e * vocab, vocab), position + depth);
        std::size_t j = 0;
        while (j < n && !(static_cast<std::size_t>(t.parents[j] + 1) == e && t.tokens[j] == expected[e])) ++j;
        if (j == n) break;
        e = j + 1;
      }
    }
    TreeVerified v;
    ASSERT_C_OK(verify_tree(sampler.get(), t, position, v));
    // The walk the reference took: from the root down through the entries it wrote.
    std::vector<std::size_t> path{0};
    for (;;) {
      const Token token = expected[path.back()];
      std::size_t j = 0;
      while (j < n && !(static_cast<std::size_t>(t.parents[j] + 1) == path.back() && t.tokens[j] == token)) ++j;
      if (j == n) break;
      path.push_back(j + 1);
    }
    ASSERT_EQ(v.accepted + 1, path.size()) << "trial " << trial;
    ASSERT_EQ(v.next, expected[path.back()]) << "trial " << trial;
    for (std::size_t d = 0; d < path.size(); ++d) {
      ASSERT_EQ(v.path[d], path[d]) << "trial " << trial << ", depth " << d;
      ASSERT_EQ(v.model_tokens[path[d]], expected[path[d]]) << "trial " << trial << ", depth " << d;
      if (d > 0) {
        ASSERT_EQ(t.tokens[path[d] - 1], expected[path[d - 1]]) << "a walked node is its row's token";
      }
    }
    for (std::size_t e = 0; e <= n; ++e) {
      if (std::find(path.begin(), path.end(), e) == path.end()) {
        ASSERT_EQ(v.model_tokens[e], v.next) << "trial " << trial << ", entry " << e;
      }
    }
    walked_below_the_root += v.accepted;
  }
  EXPECT_GT(walked_below_the_root, 1000U) << "the walks must go below the root for the test to say anything";
}

// At temperature 0 both modes walk the argmax path: from the root, each row's argmax (ties to the
// lowest id) leads to the first child that carries it, and the walk ends at the first row whose argmax
// no child carries, whatever q is.
TEST(CApiTreeSamplingProperty, GreedyVerifyTreeWalksTheArgmaxPath) {
  std::mt19937_64 rng(1206);
  std::size_t accepted = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const std::size_t vocab = 1 + rng() % 9;
    const int mode = trial % 2 == 0 ? NGRAMSPEC_SAMPLING_EXACT : NGRAMSPEC_SAMPLING_REJECTION;
    const SamplerPtr sampler = make_sampler(sampling_options(0.0f, rng() % 3, 1.0f, rng(), mode), vocab);
    Tree t = random_tree(rng, vocab);
    const std::size_t n = t.tokens.size();
    const auto argmax = [&](std::size_t e) {
      const auto row = t.logits.begin() + static_cast<std::ptrdiff_t>(e * vocab);
      return static_cast<Token>(std::max_element(row, row + static_cast<std::ptrdiff_t>(vocab)) - row);
    };
    for (std::size_t j = 0; j < n; ++j) {  // nodes often their row's argmax
      if (rng() % 3 != 0) t.tokens[j] = argmax(static_cast<std::size_t>(t.parents[j] + 1));
    }
    TreeVerified v;
    ASSERT_C_OK(verify_tree(sampler.get(), t, rng() % 1000, v));
    std::size_t e = 0;
    std::size_t depth = 0;
    for (;; ++depth) {
      ASSERT_EQ(v.path[depth], e) << "trial " << trial;
      ASSERT_EQ(v.model_tokens[e], argmax(e)) << "trial " << trial;
      std::size_t j = 0;
      while (j < n && !(static_cast<std::size_t>(t.parents[j] + 1) == e && t.tokens[j] == argmax(e))) ++j;
      if (j == n) break;
      e = j + 1;
    }
    ASSERT_EQ(v.accepted, depth) << "trial " << trial;
    ASSERT_EQ(v.next, argmax(e)) << "trial " << trial;
    accepted += depth;
  }
  EXPECT_GT(accepted, 1000U);
}

// ---- Memory ------------------------------------------------------------------------------------------

// ngramspec_batch_memory_bytes counts the distributions propose_trees_q keeps for each sequence of a
// call: room for every node the sequence's tree may have, NGRAMSPEC_MAX_SUPPORT tokens and
// probabilities each. A batch stepped with propose_trees alone holds none of it.
TEST(CApiTreeSampling, MemoryBytesCountsProposeTreesQsScratch) {
  Running r;
  const std::size_t before = ngramspec_batch_memory_bytes(r.batch.get());
  std::vector<Token> tokens(kMaxDrafts);
  std::vector<std::int32_t> parents(kMaxDrafts);
  std::size_t offsets[2] = {};
  std::size_t n = 0;
  std::vector<std::size_t> q_offsets(kMaxDrafts + 1);
  std::vector<Token> q_tokens(kMaxDrafts * kTopK);
  std::vector<float> q_probabilities(q_tokens.size());
  std::size_t n_q = 0;
  ASSERT_C_OK(ngramspec_batch_propose_trees_q(r.batch.get(), &r.id, 1, tokens.data(), parents.data(), kMaxDrafts,
                                              offsets, 0, &n, q_offsets.data(), q_tokens.data(),
                                              q_probabilities.data(), q_tokens.size(), &n_q));
  ASSERT_GT(n, 0U);
  const std::size_t after = ngramspec_batch_memory_bytes(r.batch.get());
  // One DraftDistributions per pooled sequence, and the called one's room for its n nodes at least.
  const std::size_t scratch = kBatch * sizeof(DraftDistributions) +
                              n * NGRAMSPEC_MAX_SUPPORT * (sizeof(Token) + sizeof(float));
  EXPECT_GE(after, before + scratch) << "before " << before << ", after " << after;
  // And it stays: the figure is what the batch holds, not what the last call used.
  ASSERT_C_OK(ngramspec_batch_propose_trees(r.batch.get(), &r.id, 1, tokens.data(), parents.data(), kMaxDrafts,
                                            offsets, 0, &n));
  EXPECT_EQ(ngramspec_batch_memory_bytes(r.batch.get()), after);
}

// ---- The target's distribution -------------------------------------------------------------------

// An engine's loop over the C tree batch: kRuns requests, kBatch at a time, each prompt ending in
// token 0; every tree verified by ngramspec_sampler_verify_tree (one C sampler per slot, the
// request's seed set on it), its model tokens handed straight to accept_trees_q with the rows' top
// probabilities. The first two tokens of each request must be distributed as the target's
// sampling distribution gives them.
constexpr std::size_t kRuns = 4000;
constexpr std::size_t kWarmRuns = 200;  // the requests after these count the calls' allocations
constexpr std::size_t kNew = 6;

/// What the engine tells the sampler each node was drawn from.
enum class EngineQ {
  given,    ///< the batch's q, each sequence's part of the call's arrays as they are
  uniform,  ///< uniform over the vocabulary for every node, which no node was drawn from
};

struct Outcome {
  std::vector<std::size_t> counts = std::vector<std::size_t>(kVocab * kVocab, 0);
  ngramspec_batch_stats stats{};
  std::size_t drawn_nodes = 0;        // nodes with a support (drawn, not chosen)
  std::size_t warm_allocations = 0;   // by propose_trees_q, verify_tree and accept_trees_q once warm
  std::size_t kept_off_the_path = 0;  // entries accept_trees_q kept that verify_tree's path did not walk
};

ngramspec_sampling_options to_c(const SamplingOptions& o) {
  ngramspec_sampling_options c = ngramspec_sampling_options_default();
  c.temperature = o.temperature;
  c.top_k = o.top_k;
  c.top_p = o.top_p;
  c.min_p = o.min_p;
  c.seed = o.seed;
  c.mode = o.mode == SamplingMode::rejection ? NGRAMSPEC_SAMPLING_REJECTION : NGRAMSPEC_SAMPLING_EXACT;
  return c;
}

Outcome engine_runs(const SamplingOptions& base, EngineQ engine_q) {
  Outcome out;
  const BatchPtr batch = make_batch(drawing_config(17));
  const ngramspec_sequence_options o = sequence_options(kNew);
  const std::size_t k = ngramspec_batch_top_k(batch.get());
  EXPECT_EQ(k, kTopK);
  std::vector<Token> tokens(kBatch * kMaxDrafts);
  std::vector<std::int32_t> parents(tokens.size());
  std::vector<std::size_t> q_offsets(tokens.size() + 1);
  std::vector<Token> q_tokens(tokens.size() * k);
  std::vector<float> q_probabilities(q_tokens.size());
  // The uniform q: every node's support the whole vocabulary, evenly.
  std::vector<std::size_t> flat_offsets(kMaxDrafts + 1);
  std::vector<Token> flat_tokens;
  for (std::size_t j = 0; j <= kMaxDrafts; ++j) flat_offsets[j] = j * kVocab;
  for (std::size_t j = 0; j < kMaxDrafts; ++j) {
    for (Token t = 0; t < kVocab; ++t) flat_tokens.push_back(t);
  }
  const std::vector<float> flat(flat_tokens.size(), 1.0f);
  std::vector<SamplerPtr> samplers;  // one per slot, a new seed per request
  for (std::size_t s = 0; s < kBatch; ++s) {
    const ngramspec_sampling_options c = to_c(base);
    ngramspec_sampler* p = nullptr;
    EXPECT_C_OK(ngramspec_sampler_create(&c, kVocab, &p));
    samplers.emplace_back(p);
  }
  std::vector<Token> model_tokens(tokens.size() + kBatch);
  std::vector<std::size_t> path(kMaxDrafts + 1);
  std::vector<std::vector<std::size_t>> paths(kBatch);
  for (std::uint64_t first = 0; first < kRuns; first += kBatch) {
    std::vector<ngramspec_sequence_id> running;
    std::vector<std::vector<Token>> sequences(kBatch);
    std::vector<TokenSampler> distributions;  // the engine's p, for the top probabilities
    for (std::size_t s = 0; s < kBatch; ++s) {
      SamplingOptions request = base;
      request.seed = first + s;
      distributions.emplace_back(request, kVocab);
      const ngramspec_sampling_options c = to_c(request);
      EXPECT_C_OK(ngramspec_sampler_set_options(samplers[s].get(), &c));
      sequences[s] = {static_cast<Token>((first / kBatch + s) % kVocab), 0};
      running.push_back(s);
      EXPECT_C_OK(ngramspec_batch_begin(batch.get(), s, sequences[s].data(), 2, &o));
    }
    while (!running.empty()) {
      std::vector<std::size_t> offsets(running.size() + 1);
      std::size_t n = 0;
      std::size_t n_q = 0;
      {
        const AllocationCounter counter;
        const ngramspec_status status = ngramspec_batch_propose_trees_q(
            batch.get(), running.data(), running.size(), tokens.data(), parents.data(), tokens.size(), offsets.data(),
            0, &n, q_offsets.data(), q_tokens.data(), q_probabilities.data(), q_tokens.size(), &n_q);
        if (first >= kWarmRuns) out.warm_allocations += counter.count();
        if (status != NGRAMSPEC_OK) {
          ADD_FAILURE() << ngramspec_last_error();
          return out;
        }
      }
      for (std::size_t j = 0; j < n; ++j) out.drawn_nodes += q_offsets[j + 1] != q_offsets[j] ? 1 : 0;
      std::vector<std::size_t> model_offsets{0};
      std::vector<Token> top;
      std::vector<float> top_probabilities;
      for (std::size_t i = 0; i < running.size(); ++i) {
        const std::vector<Token>& s = sequences[running[i]];
        const std::size_t begin = offsets[i];
        const std::size_t nodes = offsets[i + 1] - begin;
        const auto token_of = [&](std::size_t e) { return e == 0 ? s.back() : tokens[begin + e - 1]; };
        std::vector<float> rows;
        for (std::size_t e = 0; e <= nodes; ++e) {
          const std::array<float, kVocab> row = target_row(token_of(e));
          rows.insert(rows.end(), row.begin(), row.end());
          std::array<Token, kTopK> top_tokens{};
          std::array<float, kTopK> top_p{};
          TokenSampler::TopDistribution d{top_tokens, top_p};
          distributions[running[i]].distribution(row, s.size(), d);
          top.insert(top.end(), top_tokens.begin(), top_tokens.end());
          top_probabilities.insert(top_probabilities.end(), top_p.begin(), top_p.end());
        }
        // The hand-off: sequence i's part of the call's arrays, and its entries of model_tokens.
        const bool given = engine_q == EngineQ::given;
        const std::size_t m = model_offsets.back();
        std::size_t accepted = 0;
        Token next = 0;
        const AllocationCounter counter;
        const ngramspec_status status = ngramspec_sampler_verify_tree(
            samplers[running[i]].get(), rows.data(), rows.size(), s.size(), tokens.data() + begin,
            parents.data() + begin, nodes, given ? q_offsets.data() + begin : flat_offsets.data(),
            given ? q_tokens.data() : flat_tokens.data(), given ? q_probabilities.data() : flat.data(),
            given ? n_q : flat_tokens.size(), model_tokens.data() + m, path.data(), &accepted, &next);
        if (first >= kWarmRuns) out.warm_allocations += counter.count();
        if (status != NGRAMSPEC_OK) {
          ADD_FAILURE() << ngramspec_last_error();
          return out;
        }
        EXPECT_EQ(model_tokens[m + path[accepted]], next);
        paths[i].assign(path.begin(), path.begin() + static_cast<std::ptrdiff_t>(accepted + 1));
        model_offsets.push_back(m + nodes + 1);
      }
      std::vector<ngramspec_step> steps(running.size());
      std::vector<std::size_t> kept(model_offsets.back());
      {
        const AllocationCounter counter;
        const ngramspec_status status = ngramspec_batch_accept_trees_q(
            batch.get(), running.data(), running.size(), model_tokens.data(), model_offsets.back(),
            model_offsets.data(), top.data(), top_probabilities.data(), top.size(), steps.data(), kept.data(),
            kept.size());
        if (first >= kWarmRuns) out.warm_allocations += counter.count();
        if (status != NGRAMSPEC_OK) {  // the sequences would never finish
          ADD_FAILURE() << ngramspec_last_error();
          return out;
        }
      }
      std::vector<ngramspec_sequence_id> still;
      for (std::size_t i = 0; i < running.size(); ++i) {
        for (std::size_t j = 0; j < steps[i].emitted; ++j) {
          const std::size_t entry = kept[model_offsets[i] + j];
          if (j >= paths[i].size() || paths[i][j] != entry) ++out.kept_off_the_path;
          sequences[running[i]].push_back(model_tokens[model_offsets[i] + entry]);
        }
        if (steps[i].finished != 0) {
          EXPECT_C_OK(ngramspec_batch_finish(batch.get(), running[i]));
        } else {
          EXPECT_EQ(steps[i].emitted, paths[i].size()) << "a running sequence keeps the whole path";
          still.push_back(running[i]);
        }
      }
      running = still;
    }
    for (const std::vector<Token>& s : sequences) {
      EXPECT_EQ(s.size(), 2 + kNew);
      ++out.counts[s[2] * kVocab + s[3]];
    }
  }
  EXPECT_C_OK(ngramspec_batch_stats_get(batch.get(), &out.stats));
  return out;
}

TEST(CApiTreeSamplingProperty, AnEngineLoopOverDrawnTreesKeepsTheTargetsDistribution) {
  for (const SamplingOptions& options : {SamplingOptions{.temperature = 1.0f, .mode = SamplingMode::rejection},
                                         SamplingOptions{.temperature = 0.7f, .top_k = 3, .mode = SamplingMode::rejection}}) {
    const Outcome o = engine_runs(options, EngineQ::given);
    const ChiSquareTest r = chi_square_test(o.counts, first_two_probabilities(options), kRuns);
    std::printf("  temperature %.1f, top_k %zu: %s; %llu of %llu nodes accepted\n",
                static_cast<double>(options.temperature), options.top_k, r.describe().c_str(),
                static_cast<unsigned long long>(o.stats.accepted), static_cast<unsigned long long>(o.stats.drafted));
    EXPECT_GE(r.least_expected, 5.0) << "too few runs for the approximation";
    EXPECT_TRUE(r.passes()) << r.describe();
    EXPECT_GT(o.stats.accepted, kRuns / 2) << "the trees must carry accepted drafts for the test to say anything";
    EXPECT_GT(o.drawn_nodes, kRuns) << "the trees must carry drawn nodes for the test to say anything";
    EXPECT_EQ(o.warm_allocations, 0U) << "propose_trees_q, verify_tree and accept_trees_q allocate nothing once warm";
    EXPECT_EQ(o.kept_off_the_path, 0U) << "accept_trees_q keeps the entries verify_tree walked";
  }
}

TEST(CApiTreeSamplingProperty, TheSameTestFailsWithAUniformQInPlaceOfTheBatchs) {
  const SamplingOptions options{.temperature = 1.0f, .mode = SamplingMode::rejection};
  const ChiSquareTest r = chi_square_test(engine_runs(options, EngineQ::uniform).counts,
                                          first_two_probabilities(options), kRuns);
  std::printf("  uniform q: %s\n", r.describe().c_str());
  EXPECT_FALSE(r.passes()) << r.describe();
}

}  // namespace
}  // namespace ngramspec::test
