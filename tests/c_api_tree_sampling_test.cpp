// The C ABI's tree batches that draw (ngramspec_tree_config::draw_recycled): the config's new
// fields and their versioning, the refusals of ngramspec_batch_propose_trees_q and
// ngramspec_batch_accept_trees_q (named, nothing written), and a chi-square test that an engine
// loop over the C tree batch, verifying each tree row by row with TokenSampler against the q
// the batch gives, keeps the target's distribution, and fails with a uniform q in its place.

#include "ngramspec/ngramspec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ngramspec/draft_distribution.hpp"
#include "ngramspec/sampling_options.hpp"
#include "ngramspec/token.hpp"
#include "ngramspec/token_sampler.hpp"
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
  // Nothing changed: the pass is still pending and is decided by a valid call.
  const float good[kTopK] = {0.4f, 0.3f, 0.2f, 0.1f};
  ASSERT_C_OK(ngramspec_batch_accept_trees_q(r.batch.get(), &r.id, 1, &model_token, 1, model_offsets, top, good, kTopK,
                                             &step, kept, 1));
  EXPECT_EQ(step.emitted, 1U);
}

// ---- The target's distribution -------------------------------------------------------------------

// An engine's loop over the C tree batch: kRuns requests, kBatch at a time, each prompt ending in
// token 0; every tree verified row by row with TokenSampler::verify (each entry's children in index
// order, the request's seed), the rows' top probabilities recorded through accept_trees_q. The
// first two tokens of each request must be distributed as the target's sampling distribution
// gives them.
constexpr std::size_t kRuns = 4000;
constexpr std::size_t kWarmRuns = 200;  // the requests after these count the calls' allocations
constexpr std::size_t kNew = 6;

/// What the engine tells the sampler each node was drawn from.
enum class EngineQ {
  given,    ///< the batch's q
  uniform,  ///< uniform over the vocabulary for every node, which no node was drawn from
};

struct Outcome {
  std::vector<std::size_t> counts = std::vector<std::size_t>(kVocab * kVocab, 0);
  ngramspec_batch_stats stats{};
  std::size_t drawn_nodes = 0;        // nodes with a support (drawn, not chosen)
  std::size_t warm_allocations = 0;   // by propose_trees_q and accept_trees_q once warm
};

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
  DraftDistributions q;
  q.reserve(kMaxDrafts, kVocab);
  const std::array<Token, kVocab> all = {0, 1, 2, 3, 4};
  const std::array<float, kVocab> flat = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  for (std::uint64_t first = 0; first < kRuns; first += kBatch) {
    std::vector<ngramspec_sequence_id> running;
    std::vector<std::vector<Token>> sequences(kBatch);
    std::vector<TokenSampler> samplers;
    for (std::size_t s = 0; s < kBatch; ++s) {
      SamplingOptions request = base;
      request.seed = first + s;
      samplers.emplace_back(request, kVocab);
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
      std::vector<Token> model_tokens;
      std::vector<std::size_t> model_offsets{0};
      std::vector<Token> top;
      std::vector<float> top_probabilities;
      for (std::size_t i = 0; i < running.size(); ++i) {
        const std::vector<Token>& s = sequences[running[i]];
        TokenSampler& sampler = samplers[running[i]];
        const std::size_t begin = offsets[i];
        const std::size_t nodes = offsets[i + 1] - begin;
        q.clear();
        for (std::size_t j = 0; j < nodes; ++j) {
          const std::size_t from = q_offsets[begin + j];
          const std::size_t size = q_offsets[begin + j + 1] - from;
          if (engine_q == EngineQ::uniform) {
            q.push_unchecked(all, flat);
          } else if (size == 0) {
            q.push_one_hot();
          } else {
            q.push_unchecked(std::span<const Token>(q_tokens).subspan(from, size),
                             std::span<const float>(q_probabilities).subspan(from, size));
          }
        }
        const auto token_of = [&](std::size_t e) { return e == 0 ? s.back() : tokens[begin + e - 1]; };
        const std::size_t e0 = model_tokens.size();
        model_tokens.resize(e0 + nodes + 1, 0);  // entries off the walk: never read
        for (std::size_t e = 0; e <= nodes; ++e) {
          std::array<Token, kTopK> top_tokens{};
          std::array<float, kTopK> top_p{};
          TokenSampler::TopDistribution d{top_tokens, top_p};
          sampler.distribution(target_row(token_of(e)), s.size(), d);
          top.insert(top.end(), top_tokens.begin(), top_tokens.end());
          top_probabilities.insert(top_probabilities.end(), top_p.begin(), top_p.end());
        }
        walk_tree(
            sampler, std::span<const Token>(tokens).subspan(begin, nodes),
            std::span<const std::int32_t>(parents).subspan(begin, nodes), s.size(),
            [&](std::size_t e) { return target_row(token_of(e)); },
            [](std::size_t j) { return static_cast<std::uint32_t>(j); }, q,
            std::span<Token>(model_tokens).subspan(e0, nodes + 1));
        model_offsets.push_back(model_tokens.size());
      }
      std::vector<ngramspec_step> steps(running.size());
      std::vector<std::size_t> kept(model_tokens.size());
      {
        const AllocationCounter counter;
        const ngramspec_status status = ngramspec_batch_accept_trees_q(
            batch.get(), running.data(), running.size(), model_tokens.data(), model_tokens.size(), model_offsets.data(),
            top.data(), top_probabilities.data(), top.size(), steps.data(), kept.data(), kept.size());
        if (first >= kWarmRuns) out.warm_allocations += counter.count();
        if (status != NGRAMSPEC_OK) {  // the sequences would never finish
          ADD_FAILURE() << ngramspec_last_error();
          return out;
        }
      }
      std::vector<ngramspec_sequence_id> still;
      for (std::size_t i = 0; i < running.size(); ++i) {
        for (std::size_t j = 0; j < steps[i].emitted; ++j) {
          sequences[running[i]].push_back(model_tokens[model_offsets[i] + kept[model_offsets[i] + j]]);
        }
        if (steps[i].finished != 0) {
          EXPECT_C_OK(ngramspec_batch_finish(batch.get(), running[i]));
        } else {
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
    EXPECT_EQ(o.warm_allocations, 0U) << "propose_trees_q and accept_trees_q allocate nothing once warm";
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
