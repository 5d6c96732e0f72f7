// The C ABI's batches: BatchSpeculator over MatchDrafters (chains) or TreeDrafters (trees).

#include <algorithm>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common.hpp"
#include "ngramspec/batch_speculator.hpp"
#include "ngramspec/decode_options.hpp"
#include "ngramspec/decode_step.hpp"
#include "ngramspec/detail/number_text.hpp"
#include "ngramspec/draft_distribution.hpp"
#include "ngramspec/learned_cost.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/ngramspec.h"
#include "ngramspec/token.hpp"
#include "ngramspec/top_k_table.hpp"
#include "ngramspec/tree_drafter.hpp"
#include "ngramspec/verify_cost.hpp"

static_assert(std::is_same_v<ngramspec_sequence_id, ngramspec::SequenceId>);

// The speculator, and the scratch its calls convert through.
struct ngramspec_batch {
  using ChainSpeculator = ngramspec::BatchSpeculator<ngramspec::MatchDrafter>;
  using TreeSpeculator = ngramspec::BatchSpeculator<ngramspec::TreeDrafter>;

  ngramspec_batch(const ngramspec::BatchConfig& config, const ngramspec::MatchConfig& drafter,
                  ngramspec::SharedCorpus* corpus, const ngramspec::MappedCorpus* file) {
    chain.emplace(config, drafter, corpus, file);
    steps.resize(config.max_sequences);  // after the speculator has checked max_sequences
  }
  // A tree batch; its drafters share `shared_table` when it is not null.
  ngramspec_batch(const ngramspec::BatchConfig& config, const ngramspec::TreeConfig& drafter,
                  std::unique_ptr<ngramspec::TopKTable> shared_table, ngramspec::SharedCorpus* corpus,
                  const ngramspec::MappedCorpus* file)
      : table(std::move(shared_table)) {
    ngramspec::TopKTable* const shared = table.get();
    tree.emplace(
        config, [&drafter, shared, corpus, file] { return ngramspec::TreeDrafter(drafter, shared, corpus, file); },
        corpus);
    steps.resize(config.max_sequences);  // after the speculator has checked max_sequences
  }

  // Calls f with the speculator, whichever kind it is.
  template <class F>
  decltype(auto) visit(F&& f) {
    if (tree) return f(*tree);
    return f(*chain);
  }
  template <class F>
  decltype(auto) visit(F&& f) const {
    if (tree) return f(std::as_const(*tree));
    return f(std::as_const(*chain));
  }

  // The speculator's learned cost, nullptr when it does not learn one.
  [[nodiscard]] const ngramspec::LearnedCost* learned_cost() const noexcept {
    return visit([](const auto& spec) { return spec.learned_cost(); });
  }

  std::unique_ptr<ngramspec::TopKTable> table;  // a tree batch's shared top-k table; outlives `tree`
  std::optional<ChainSpeculator> chain;         // one of the two
  std::optional<TreeSpeculator> tree;
  // accept()'s outcomes before they become ngramspec_steps: one per sequence of the pool, the
  // most a valid call steps (its ids are distinct running sequences).
  std::vector<ngramspec::StepOutcome> steps;
  // begin()'s options; its stop tokens keep their capacity from call to call.
  ngramspec::DecodeOptions options;
  // propose_trees_q's distributions, one per sequence of the call; they keep their memory.
  std::vector<ngramspec::DraftDistributions> q;
};

namespace {

using namespace ngramspec::c_api;  // the parts every C function uses

int to_c(ngramspec::StopReason reason) noexcept {
  switch (reason) {
    case ngramspec::StopReason::max_new_tokens: return NGRAMSPEC_STOP_MAX_NEW_TOKENS;
    case ngramspec::StopReason::stop_token: return NGRAMSPEC_STOP_TOKEN;
    case ngramspec::StopReason::max_context: return NGRAMSPEC_STOP_MAX_CONTEXT;
    case ngramspec::StopReason::callback: break;  // the decoders' token callback: never a batch's
  }
  return NGRAMSPEC_STOP_MAX_NEW_TOKENS;
}

ngramspec_step to_c(const ngramspec::StepOutcome& outcome) noexcept {
  ngramspec_step step;
  step.emitted = outcome.emitted;
  step.accepted = outcome.accepted;
  step.rollback_to = outcome.rollback_to;
  step.discarded = outcome.discarded;
  step.finished = outcome.finished ? 1 : 0;
  step.stop_reason = to_c(outcome.stop_reason);
  return step;
}

// A batch configuration from C (NULL: the defaults): the speculator's and its MatchDrafters'.
void to_cpp(const ngramspec_batch_config* config, ngramspec::BatchConfig& batch, ngramspec::MatchConfig& drafter) {
  const ngramspec_batch_config c = config != nullptr ? *config : ngramspec_batch_config_default();
  batch.max_sequences = c.max_sequences;
  batch.max_pass_tokens = c.max_pass_tokens;
  batch.max_record_tokens = c.max_record_tokens;
  if (c.cost != nullptr) {
    CostSpec cost = parse_cost_spec(c.cost);
    batch.learn_cost = cost.learn;
    batch.cost = std::move(cost.curve);
  }
  drafter = c.default_drafter != 0 ? ngramspec::BatchSpeculator<>::default_drafter(batch)
                                   : ngramspec::c_api::to_cpp(&c.drafter);
}

ngramspec_tree_config to_c(const ngramspec::TreeConfig& config) noexcept {
  ngramspec_tree_config c;
  std::memset(&c, 0, sizeof c);  // no indeterminate byte for ngramspec_tree_config_init to copy
  c.struct_size = sizeof(ngramspec_tree_config);
  c.successor_slots = config.successor_slots;
  c.max_children = config.max_children;
  c.vocab_size = config.vocab_size;
  c.top_k = config.top_k;
  c.shared_top_k = 1;
  c.carry_over = config.carry_over ? 1 : 0;
  c.enrich_counts = config.enrich_counts ? 1 : 0;
  c.draw_recycled = config.draw_recycled ? 1 : 0;
  c.draw_seed = config.draw_seed;
  c.recycled_history = config.recycled_history;
  return c;
}

// The versions of ngramspec_tree_config, as ngramspec.h lists them: each added fields after the
// last one of the version before, the third (draw_recycled) in the second's tail padding.
constexpr StructVersion kTreeConfigVersions[] = {
    {offsetof(ngramspec_tree_config, carry_over) + sizeof(int), member_align<std::size_t, int>},
    {offsetof(ngramspec_tree_config, enrich_counts) + sizeof(int), member_align<std::size_t, int>},
    {offsetof(ngramspec_tree_config, draw_seed) + sizeof(std::uint64_t),
     member_align<std::size_t, int, std::uint64_t>},
    {offsetof(ngramspec_tree_config, recycled_history) + sizeof(float),
     member_align<std::size_t, int, std::uint64_t, float>},
};
static_assert(std::size(kTreeConfigVersions) > 0 &&
                  kTreeConfigVersions[std::size(kTreeConfigVersions) - 1].size() == sizeof(ngramspec_tree_config),
              "a field added to ngramspec_tree_config is a new version: add it to kTreeConfigVersions");

// The versions of ngramspec_batch_stats, as ngramspec.h lists them; the caller passes the size of its struct.
constexpr StructVersion kBatchStatsVersions[] = {
    {offsetof(ngramspec_batch_stats, emitted) + sizeof(std::uint64_t), member_align<std::uint64_t>},
    {offsetof(ngramspec_batch_stats, out_of_vocabulary) + sizeof(std::uint64_t), member_align<std::uint64_t>},
};
static_assert(kBatchStatsVersions[std::size(kBatchStatsVersions) - 1].size() == sizeof(ngramspec_batch_stats),
              "a field added to ngramspec_batch_stats is a new version: add it to kBatchStatsVersions");

// ngramspec_batch_create, ngramspec_batch_create_file and ngramspec_batch_create_vocab.
ngramspec_status create_batch(const char* where, const ngramspec_batch_config* config, ngramspec_corpus* corpus,
                              const ngramspec_corpus_file* file, ngramspec::CorpusPreference preference,
                              Vocabulary vocabulary, ngramspec_batch** out) noexcept {
  return guarded(Where{where}, [&] {
    ngramspec::BatchConfig batch;
    ngramspec::MatchConfig drafter;
    to_cpp(config, batch, drafter);
    drafter.corpus_preference = preference;
    drafter.vocab_size = vocabulary.size;
    drafter.tokenizer_fingerprint = vocabulary.tokenizer_fingerprint;
    *out = new ngramspec_batch(batch, drafter, object_of(corpus), object_of(file));
  });
}

// ngramspec_batch_create_tree and ngramspec_batch_create_tree_file.
ngramspec_status create_tree_batch(const char* where, const ngramspec_batch_config* config,
                                   const ngramspec_tree_config* tree, ngramspec_corpus* corpus,
                                   const ngramspec_corpus_file* file, ngramspec::CorpusPreference preference,
                                   Vocabulary vocabulary, ngramspec_batch** out) noexcept {
  // A struct of an earlier version (an older header's) has its fields up to that version's last; the
  // later ones keep their defaults. Any other size is another header's struct, or one never set.
  ngramspec_tree_config t = ngramspec_tree_config_default();
  if (tree != nullptr) {
    const std::size_t bytes = struct_bytes(kTreeConfigVersions, tree->struct_size);
    if (bytes == 0) {
      return bad_struct_size(where, "tree->struct_size", "ngramspec_tree_config", tree->struct_size,
                             kTreeConfigVersions, "ngramspec_tree_config_init");
    }
    std::memcpy(&t, tree, bytes);
  }
  if (!(t.recycled_history >= 0.0f && t.recycled_history < 1.0f)) {
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT, "%s: tree->recycled_history = %s is invalid: it must be in [0, 1)",
                where, ngramspec::detail::number_text(t.recycled_history).c_str());
  }
  if (t.draw_recycled != 0 && t.vocab_size == 0) {
    // Drawing would be off without a word: no top-k table, no rows to draw from.
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
                "%s: tree->draw_recycled = %d needs the top-k table, and tree->vocab_size = 0 makes none: set "
                "tree->vocab_size to the model's vocabulary",
                where, t.draw_recycled);
  }
  return guarded(Where{where}, [&] {
    ngramspec::BatchConfig batch;
    ngramspec::TreeConfig drafter;
    to_cpp(config, batch, drafter.chain);
    drafter.chain.corpus_preference = preference;
    // One vocabulary: the model's, which the top-k table is also sized by.
    if (vocabulary.size != 0 && t.vocab_size != 0 && vocabulary.size != t.vocab_size) {
      return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
                  "%s: vocab_size = %" PRIu64 " and tree->vocab_size = %zu disagree; both are the model's vocabulary",
                  where, vocabulary.size, t.vocab_size);
    }
    drafter.chain.vocab_size = vocabulary.size != 0 ? vocabulary.size : t.vocab_size;
    drafter.chain.tokenizer_fingerprint = vocabulary.tokenizer_fingerprint;
    drafter.successor_slots = t.successor_slots;
    drafter.max_children = t.max_children;
    drafter.top_k = t.top_k;
    drafter.carry_over = t.carry_over != 0;
    drafter.enrich_counts = t.enrich_counts != 0;
    drafter.draw_recycled = t.draw_recycled != 0;
    drafter.draw_seed = t.draw_seed;
    drafter.recycled_history = t.recycled_history;
    std::unique_ptr<ngramspec::TopKTable> table;
    if (t.shared_top_k != 0 && t.vocab_size != 0) {
      if (t.top_k == 0 || t.top_k > ngramspec::TopKTable::kMaxK) {
        return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT, "%s: tree->top_k = %zu is invalid: it must be 1 .. %zu", where,
                    t.top_k, ngramspec::TopKTable::kMaxK);
      }
      // drawing needs the probabilities accept_trees_q records
      table = std::make_unique<ngramspec::TopKTable>(t.vocab_size, t.top_k, drafter.draw_recycled, t.recycled_history);
    } else {
      // each drafter's own table, or none; BatchSpeculator refuses a pool beyond the machine's memory
      drafter.vocab_size = t.vocab_size;
    }
    *out = new ngramspec_batch(batch, drafter, std::move(table), object_of(corpus), object_of(file));
    return NGRAMSPEC_OK;
  });
}

// The tree batch calls' speculator, or NGRAMSPEC_ERROR_INVALID_ARGUMENT for a chain batch.
ngramspec_status tree_speculator(const char* where, ngramspec_batch& batch,
                                 ngramspec_batch::TreeSpeculator*& out) noexcept {
  if (!batch.tree) {
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
                "%s: the batch drafts chains (ngramspec_batch_create); tree passes need one made by "
                "ngramspec_batch_create_tree",
                where);
  }
  out = &*batch.tree;
  return NGRAMSPEC_OK;
}

// The ids of one pass are distinct running sequences, so there are at most max_sequences of
// them; more (a count that is wrong, or ids listed twice) is refused before any array is read.
ngramspec_status check_id_count(const char* where, const ngramspec_batch& batch, std::size_t n_ids) noexcept {
  if (n_ids > batch.steps.size()) {
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
                "%s: n_ids = %zu is more than max_sequences = %zu; ids must name distinct running sequences", where,
                n_ids, batch.steps.size());
  }
  return NGRAMSPEC_OK;
}

// The arguments of ngramspec_batch_propose_trees and _q that both check, and the speculator.
ngramspec_status check_tree_proposal(const char* where, ngramspec_batch* batch, const ngramspec_sequence_id* ids,
                                     std::size_t n_ids, const ngramspec_token* tokens, const std::int32_t* parents,
                                     std::size_t capacity, const std::size_t* offsets, const std::size_t* n_nodes,
                                     ngramspec_batch::TreeSpeculator*& spec) noexcept {
  if (batch == nullptr) return null_argument(where, "batch");
  if (const ngramspec_status bad = tree_speculator(where, *batch, spec); bad != NGRAMSPEC_OK) return bad;
  if (ids == nullptr && n_ids != 0) return null_array(where, "ids", "n_ids", n_ids);
  if (const ngramspec_status bad = check_tokens(where, tokens, "tokens", "capacity", capacity); bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (const ngramspec_status bad = check_array(where, parents, "parents", "capacity", capacity, sizeof(std::int32_t));
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (offsets == nullptr) return null_argument(where, "offsets");
  if (n_nodes == nullptr) return null_argument(where, "n_nodes");
  return check_id_count(where, *batch, n_ids);
}

// The arguments of ngramspec_batch_accept_trees and _q that both check, and the speculator.
ngramspec_status check_tree_acceptance(const char* where, ngramspec_batch* batch, const ngramspec_sequence_id* ids,
                                       std::size_t n_ids, const ngramspec_token* model_tokens,
                                       std::size_t n_model_tokens, const std::size_t* offsets,
                                       const ngramspec_token* top, std::size_t n_top, const ngramspec_step* steps,
                                       const std::size_t* kept, std::size_t kept_capacity,
                                       ngramspec_batch::TreeSpeculator*& spec) noexcept {
  if (batch == nullptr) return null_argument(where, "batch");
  if (const ngramspec_status bad = tree_speculator(where, *batch, spec); bad != NGRAMSPEC_OK) return bad;
  if (ids == nullptr && n_ids != 0) return null_array(where, "ids", "n_ids", n_ids);
  if (const ngramspec_status bad = check_tokens(where, model_tokens, "model_tokens", "n_model_tokens", n_model_tokens);
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (offsets == nullptr) return null_argument(where, "offsets");
  if (const ngramspec_status bad = check_tokens(where, top, "top", "n_top", n_top); bad != NGRAMSPEC_OK) return bad;
  if (steps == nullptr && n_ids != 0) return null_array(where, "steps", "n_ids", n_ids);
  if (const ngramspec_status bad = check_array(where, kept, "kept", "kept_capacity", kept_capacity, sizeof(std::size_t));
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  return check_id_count(where, *batch, n_ids);
}

// accept_trees with top_probabilities (NULL: without), guarded; steps to C.
ngramspec_status accept_tree_pass(const char* where, ngramspec_batch& batch, ngramspec_batch::TreeSpeculator& spec,
                                  const ngramspec_sequence_id* ids, std::size_t n_ids,
                                  const ngramspec_token* model_tokens, std::size_t n_model_tokens,
                                  const std::size_t* offsets, const ngramspec_token* top,
                                  const float* top_probabilities, std::size_t n_top, ngramspec_step* steps,
                                  std::size_t* kept, std::size_t kept_capacity) noexcept {
  return guarded(Where{where}, [&] {
    const std::span<ngramspec::StepOutcome> outcomes = std::span<ngramspec::StepOutcome>(batch.steps).first(n_ids);
    const std::span<const ngramspec::SequenceId> id_span(ids, n_ids);
    const std::span<const ngramspec::Token> answers(model_tokens, n_model_tokens);
    const std::span<const std::size_t> offset_span(offsets, n_ids + 1);
    const std::span<const ngramspec::Token> top_span(top, n_top);
    const std::span<std::size_t> kept_span(kept, kept_capacity);
    if (top_probabilities != nullptr) {
      spec.accept_trees(id_span, answers, offset_span, top_span, std::span<const float>(top_probabilities, n_top),
                        outcomes, kept_span);
    } else {
      spec.accept_trees(id_span, answers, offset_span, top_span, outcomes, kept_span);
    }
    for (std::size_t i = 0; i < n_ids; ++i) steps[i] = to_c(outcomes[i]);
  });
}

// A step call on one sequence (finish, cancel): `f` with the speculator, guarded.
template <class F>
ngramspec_status on_sequence(const char* where, ngramspec_batch* batch, F f) noexcept {
  if (batch == nullptr) return null_argument(where, "batch");
  return guarded(Where{where}, [&] { batch->visit(f); });
}

}  // namespace

extern "C" {

ngramspec_batch_config ngramspec_batch_config_default(void) {
  const ngramspec::BatchConfig config;
  ngramspec_batch_config c;
  c.max_sequences = config.max_sequences;
  c.max_pass_tokens = config.max_pass_tokens;
  c.max_record_tokens = config.max_record_tokens;
  c.cost = nullptr;
  c.default_drafter = 1;
  c.drafter = ngramspec::c_api::to_c(ngramspec::MatchConfig{});
  return c;
}

ngramspec_sequence_options ngramspec_sequence_options_default(void) {
  const ngramspec::DecodeOptions options;
  ngramspec_sequence_options c;
  c.max_new_tokens = options.max_new_tokens;
  c.stop_tokens = nullptr;
  c.n_stop_tokens = 0;
  c.max_context = options.max_context;
  c.speculate = options.speculate ? 1 : 0;
  c.max_drafts = options.max_drafts;
  return c;
}

ngramspec_status ngramspec_batch_create(const ngramspec_batch_config* config, ngramspec_corpus* corpus,
                                        ngramspec_batch** out) {
  if (out == nullptr) return null_argument(__func__, "out");
  return create_batch(__func__, config, corpus, nullptr, ngramspec::CorpusPreference::longer_match, {}, out);
}

ngramspec_status ngramspec_batch_create_file(const ngramspec_batch_config* config, ngramspec_corpus* corpus,
                                             const ngramspec_corpus_file* file, int preference,
                                             ngramspec_batch** out) {
  if (out == nullptr) return null_argument(__func__, "out");
  ngramspec::CorpusPreference cpp_preference{};
  if (!ngramspec::c_api::to_cpp(preference, cpp_preference, __func__)) return NGRAMSPEC_ERROR_INVALID_ARGUMENT;
  return create_batch(__func__, config, corpus, file, cpp_preference, {}, out);
}

ngramspec_status ngramspec_batch_create_vocab(const ngramspec_batch_config* config, ngramspec_corpus* corpus,
                                              const ngramspec_corpus_file* file, int preference, uint64_t vocab_size,
                                              uint64_t tokenizer_fingerprint, ngramspec_batch** out) {
  if (out == nullptr) return null_argument(__func__, "out");
  ngramspec::CorpusPreference cpp_preference{};
  if (!ngramspec::c_api::to_cpp(preference, cpp_preference, __func__)) return NGRAMSPEC_ERROR_INVALID_ARGUMENT;
  return create_batch(__func__, config, corpus, file, cpp_preference, Vocabulary{vocab_size, tokenizer_fingerprint},
                      out);
}

void ngramspec_batch_free(ngramspec_batch* batch) { delete batch; }

ngramspec_status ngramspec_batch_begin(ngramspec_batch* batch, ngramspec_sequence_id id, const ngramspec_token* prompt,
                                       size_t prompt_length, const ngramspec_sequence_options* options) {
  if (batch == nullptr) return null_argument(__func__, "batch");
  if (const ngramspec_status bad = check_tokens(__func__, prompt, "prompt", "prompt_length", prompt_length);
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  const ngramspec_sequence_options o = options != nullptr ? *options : ngramspec_sequence_options_default();
  if (o.stop_tokens == nullptr && o.n_stop_tokens != 0) {
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
                "%s: sequence %" PRIu64 ": options->stop_tokens is NULL but options->n_stop_tokens = %zu", __func__, id,
                o.n_stop_tokens);
  }
  if (const ngramspec_status bad =
          check_tokens(__func__, o.stop_tokens, "options->stop_tokens", "options->n_stop_tokens", o.n_stop_tokens);
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  return guarded(Where{__func__, id}, [&] {
    ngramspec::DecodeOptions& d = batch->options;
    d.max_new_tokens = o.max_new_tokens;
    d.stop_tokens.assign(o.stop_tokens, o.stop_tokens + o.n_stop_tokens);
    d.max_context = o.max_context;
    d.speculate = o.speculate != 0;
    d.max_drafts = o.max_drafts;
    batch->visit([&](auto& spec) { spec.begin(id, std::span<const ngramspec::Token>(prompt, prompt_length), d); });
  });
}

ngramspec_status ngramspec_batch_propose(ngramspec_batch* batch, const ngramspec_sequence_id* ids, size_t n_ids,
                                         ngramspec_token* drafts, size_t drafts_capacity, size_t* offsets,
                                         size_t extra_tokens, size_t* n_drafts) {
  if (batch == nullptr) return null_argument(__func__, "batch");
  if (ids == nullptr && n_ids != 0) return null_array(__func__, "ids", "n_ids", n_ids);
  if (const ngramspec_status bad = check_tokens(__func__, drafts, "drafts", "drafts_capacity", drafts_capacity);
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (offsets == nullptr) return null_argument(__func__, "offsets");
  if (n_drafts == nullptr) return null_argument(__func__, "n_drafts");
  if (const ngramspec_status bad = check_id_count(__func__, *batch, n_ids); bad != NGRAMSPEC_OK) return bad;
  return guarded(Where{__func__}, [&] {
    *n_drafts = batch->visit([&](auto& spec) {
      return spec.propose(std::span<const ngramspec::SequenceId>(ids, n_ids),
                          std::span<ngramspec::Token>(drafts, drafts_capacity),
                          std::span<std::size_t>(offsets, n_ids + 1), extra_tokens);
    });
  });
}

ngramspec_status ngramspec_batch_accept(ngramspec_batch* batch, const ngramspec_sequence_id* ids, size_t n_ids,
                                        const ngramspec_token* model_tokens, size_t n_model_tokens,
                                        const size_t* offsets, ngramspec_step* steps) {
  if (batch == nullptr) return null_argument(__func__, "batch");
  if (ids == nullptr && n_ids != 0) return null_array(__func__, "ids", "n_ids", n_ids);
  if (const ngramspec_status bad = check_tokens(__func__, model_tokens, "model_tokens", "n_model_tokens", n_model_tokens);
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (offsets == nullptr) return null_argument(__func__, "offsets");
  if (steps == nullptr && n_ids != 0) return null_array(__func__, "steps", "n_ids", n_ids);
  if (const ngramspec_status bad = check_id_count(__func__, *batch, n_ids); bad != NGRAMSPEC_OK) return bad;
  return guarded(Where{__func__}, [&] {
    const std::span<ngramspec::StepOutcome> outcomes = std::span<ngramspec::StepOutcome>(batch->steps).first(n_ids);
    batch->visit([&](auto& spec) {
      spec.accept(std::span<const ngramspec::SequenceId>(ids, n_ids),
                  std::span<const ngramspec::Token>(model_tokens, n_model_tokens),
                  std::span<const std::size_t>(offsets, n_ids + 1), outcomes);
    });
    for (std::size_t i = 0; i < n_ids; ++i) steps[i] = to_c(outcomes[i]);
  });
}

ngramspec_status ngramspec_batch_finish(ngramspec_batch* batch, ngramspec_sequence_id id) {
  return on_sequence(__func__, batch, [id](auto& spec) { spec.finish(id); });
}

ngramspec_status ngramspec_batch_cancel(ngramspec_batch* batch, ngramspec_sequence_id id) {
  return on_sequence(__func__, batch, [id](auto& spec) { spec.cancel(id); });
}

int ngramspec_batch_contains(const ngramspec_batch* batch, ngramspec_sequence_id id) {
  return batch != nullptr && batch->visit([id](const auto& spec) { return spec.contains(id); }) ? 1 : 0;
}

size_t ngramspec_batch_size(const ngramspec_batch* batch) {
  return batch == nullptr ? 0 : batch->visit([](const auto& spec) { return spec.size(); });
}

size_t ngramspec_batch_memory_bytes(const ngramspec_batch* batch) {
  if (batch == nullptr) return 0;
  // propose_trees_q's distributions: one per sequence of the largest call, each reserved for its tree.
  std::size_t q_bytes = (batch->q.capacity() - batch->q.size()) * sizeof(ngramspec::DraftDistributions);
  for (const ngramspec::DraftDistributions& q : batch->q) q_bytes += q.memory_bytes();
  return batch->visit([](const auto& spec) { return spec.memory_bytes() - sizeof(spec); }) + sizeof(ngramspec_batch) +
         (batch->table ? batch->table->memory_bytes() : 0) + batch->steps.capacity() * sizeof(ngramspec::StepOutcome) +
         batch->options.stop_tokens.capacity() * sizeof(ngramspec::Token) + q_bytes;
}

ngramspec_status ngramspec_batch_report_pass_seconds(ngramspec_batch* batch, double seconds) {
  if (batch == nullptr) return null_argument(__func__, "batch");
  return guarded(Where{__func__}, [&] { batch->visit([seconds](auto& spec) { spec.report_pass_seconds(seconds); }); });
}

int ngramspec_batch_learns_cost(const ngramspec_batch* batch) {
  return batch != nullptr && batch->learned_cost() != nullptr ? 1 : 0;
}

ngramspec_status ngramspec_batch_describe_cost(const ngramspec_batch* batch, char* out, size_t capacity,
                                               size_t* length) {
  if (batch == nullptr) return null_argument(__func__, "batch");
  return guarded(Where{__func__}, [&] {
    if (const ngramspec::LearnedCost* learned = batch->learned_cost()) {
      return write_text(__func__, learned->describe(), out, capacity, length);
    }
    const ngramspec::VerifyCost* fixed = batch->visit([](const auto& spec) { return spec.active_cost(); });
    return write_text(__func__, fixed != nullptr ? std::string_view(fixed->spec()) : std::string_view(), out, capacity,
                      length);
  });
}

ngramspec_status ngramspec_batch_learned_cost_stats(const ngramspec_batch* batch, ngramspec_learned_cost_stats* out,
                                                    size_t out_size) {
  if (batch == nullptr) return null_argument(__func__, "batch");
  const ngramspec::LearnedCost* learned = batch->learned_cost();
  if (learned == nullptr) {
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
                "%s: the batch does not learn its cost: its config's cost is not \"learn\" or \"learn:SPEC\"",
                __func__);
  }
  return learned_cost_stats(__func__, *learned, out, out_size);
}

ngramspec_tree_config ngramspec_tree_config_default(void) { return to_c(ngramspec::TreeConfig{}); }

ngramspec_status ngramspec_tree_config_init(ngramspec_tree_config* config, size_t struct_size) {
  return init_struct(__func__, "config", "ngramspec_tree_config", config, struct_size, kTreeConfigVersions,
                     to_c(ngramspec::TreeConfig{}));
}

ngramspec_status ngramspec_batch_create_tree(const ngramspec_batch_config* config, const ngramspec_tree_config* tree,
                                             ngramspec_corpus* corpus, ngramspec_batch** out) {
  if (out == nullptr) return null_argument(__func__, "out");
  return create_tree_batch(__func__, config, tree, corpus, nullptr, ngramspec::CorpusPreference::longer_match, {}, out);
}

ngramspec_status ngramspec_batch_create_tree_file(const ngramspec_batch_config* config,
                                                  const ngramspec_tree_config* tree, ngramspec_corpus* corpus,
                                                  const ngramspec_corpus_file* file, int preference,
                                                  uint64_t vocab_size, uint64_t tokenizer_fingerprint,
                                                  ngramspec_batch** out) {
  if (out == nullptr) return null_argument(__func__, "out");
  ngramspec::CorpusPreference cpp_preference{};
  if (!ngramspec::c_api::to_cpp(preference, cpp_preference, __func__)) return NGRAMSPEC_ERROR_INVALID_ARGUMENT;
  return create_tree_batch(__func__, config, tree, corpus, file, cpp_preference,
                           Vocabulary{vocab_size, tokenizer_fingerprint}, out);
}

size_t ngramspec_batch_top_k(const ngramspec_batch* batch) {
  return batch == nullptr ? 0 : batch->visit([](const auto& spec) { return spec.top_k(); });
}

ngramspec_status ngramspec_batch_propose_trees(ngramspec_batch* batch, const ngramspec_sequence_id* ids, size_t n_ids,
                                               ngramspec_token* tokens, int32_t* parents, size_t capacity,
                                               size_t* offsets, size_t extra_tokens, size_t* n_nodes) {
  ngramspec_batch::TreeSpeculator* spec = nullptr;
  if (const ngramspec_status bad =
          check_tree_proposal(__func__, batch, ids, n_ids, tokens, parents, capacity, offsets, n_nodes, spec);
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  return guarded(Where{__func__}, [&] {
    *n_nodes = spec->propose_trees(std::span<const ngramspec::SequenceId>(ids, n_ids),
                                   std::span<ngramspec::Token>(tokens, capacity),
                                   std::span<std::int32_t>(parents, capacity), std::span<std::size_t>(offsets, n_ids + 1),
                                   extra_tokens);
  });
}

ngramspec_status ngramspec_batch_propose_trees_q(ngramspec_batch* batch, const ngramspec_sequence_id* ids,
                                                 size_t n_ids, ngramspec_token* tokens, int32_t* parents,
                                                 size_t capacity, size_t* offsets, size_t extra_tokens,
                                                 size_t* n_nodes, size_t* q_offsets, ngramspec_token* q_tokens,
                                                 float* q_probabilities, size_t q_capacity, size_t* n_q) {
  ngramspec_batch::TreeSpeculator* spec = nullptr;
  if (const ngramspec_status bad =
          check_tree_proposal(__func__, batch, ids, n_ids, tokens, parents, capacity, offsets, n_nodes, spec);
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  // capacity + 1 offsets: capacity was checked against PTRDIFF_MAX bytes of tokens, so it cannot wrap
  if (q_offsets == nullptr) return null_argument(__func__, "q_offsets");
  if (const ngramspec_status bad = check_tokens(__func__, q_tokens, "q_tokens", "q_capacity", q_capacity);
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (const ngramspec_status bad =
          check_array(__func__, q_probabilities, "q_probabilities", "q_capacity", q_capacity, sizeof(float));
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (n_q == nullptr) return null_argument(__func__, "n_q");
  // A drawn node's support is what is left of a top-k row: at most top_k tokens a node.
  const std::size_t top_k = spec->top_k();
  if (top_k != 0 && q_capacity / top_k < capacity) {
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
                "%s: q_capacity = %zu is too small: it must be at least capacity x ngramspec_batch_top_k() = %zu x "
                "%zu, the most support entries the nodes can have",
                __func__, q_capacity, capacity, top_k);
  }
  return guarded(Where{__func__}, [&] {
    if (batch->q.size() < batch->steps.size()) batch->q.resize(batch->steps.size());
    const std::span<ngramspec::DraftDistributions> q = std::span(batch->q).first(n_ids);
    const std::size_t made = spec->propose_trees(
        std::span<const ngramspec::SequenceId>(ids, n_ids), std::span<ngramspec::Token>(tokens, capacity),
        std::span<std::int32_t>(parents, capacity), std::span<std::size_t>(offsets, n_ids + 1), q, extra_tokens);
    std::size_t node = 0;
    std::size_t entries = 0;
    q_offsets[0] = 0;
    for (std::size_t i = 0; i < n_ids; ++i) {
      for (std::size_t j = 0; j < offsets[i + 1] - offsets[i]; ++j) {
        const std::span<const ngramspec::Token> support = q[i].tokens(j);
        const std::span<const float> probabilities = q[i].probabilities(j);
        std::copy(support.begin(), support.end(), q_tokens + entries);
        std::copy(probabilities.begin(), probabilities.end(), q_probabilities + entries);
        entries += support.size();
        q_offsets[++node] = entries;
      }
    }
    *n_q = entries;
    *n_nodes = made;
  });
}

ngramspec_status ngramspec_batch_accept_trees(ngramspec_batch* batch, const ngramspec_sequence_id* ids, size_t n_ids,
                                              const ngramspec_token* model_tokens, size_t n_model_tokens,
                                              const size_t* offsets, const ngramspec_token* top, size_t n_top,
                                              ngramspec_step* steps, size_t* kept, size_t kept_capacity) {
  ngramspec_batch::TreeSpeculator* spec = nullptr;
  if (const ngramspec_status bad = check_tree_acceptance(__func__, batch, ids, n_ids, model_tokens, n_model_tokens,
                                                         offsets, top, n_top, steps, kept, kept_capacity, spec);
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  return accept_tree_pass(__func__, *batch, *spec, ids, n_ids, model_tokens, n_model_tokens, offsets, top, nullptr, n_top,
                          steps, kept, kept_capacity);
}

ngramspec_status ngramspec_batch_accept_trees_q(ngramspec_batch* batch, const ngramspec_sequence_id* ids,
                                                size_t n_ids, const ngramspec_token* model_tokens,
                                                size_t n_model_tokens, const size_t* offsets,
                                                const ngramspec_token* top, const float* top_probabilities,
                                                size_t n_top, ngramspec_step* steps, size_t* kept,
                                                size_t kept_capacity) {
  ngramspec_batch::TreeSpeculator* spec = nullptr;
  if (const ngramspec_status bad = check_tree_acceptance(__func__, batch, ids, n_ids, model_tokens, n_model_tokens,
                                                         offsets, top, n_top, steps, kept, kept_capacity, spec);
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (const ngramspec_status bad =
          check_array(__func__, top_probabilities, "top_probabilities", "n_top", n_top, sizeof(float));
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  return accept_tree_pass(__func__, *batch, *spec, ids, n_ids, model_tokens, n_model_tokens, offsets, top,
                          top_probabilities, n_top, steps, kept, kept_capacity);
}

ngramspec_status ngramspec_batch_stats_get_sized(const ngramspec_batch* batch, ngramspec_batch_stats* out,
                                                size_t out_size) {
  if (batch == nullptr) return null_argument(__func__, "batch");
  if (out == nullptr) return null_argument(__func__, "out");
  const std::size_t bytes = struct_bytes(kBatchStatsVersions, out_size);
  if (bytes == 0) {
    return bad_struct_size(__func__, "out_size", "ngramspec_batch_stats", out_size, kBatchStatsVersions, nullptr);
  }
  const ngramspec::BatchStats& stats =
      batch->visit([](const auto& spec) -> const ngramspec::BatchStats& { return spec.stats(); });
  ngramspec_batch_stats c;
  c.proposals = stats.proposals;
  c.drafted = stats.drafted;
  c.accepted = stats.accepted;
  c.emitted = stats.emitted;
  c.out_of_vocabulary = stats.out_of_vocabulary;
  std::memcpy(out, &c, bytes);
  return NGRAMSPEC_OK;
}

// The parentheses keep the header's macro of the same name from expanding here: this is the symbol that
// programs built before the macro call, with room for the first version of the struct or a later one.
ngramspec_status(ngramspec_batch_stats_get)(const ngramspec_batch* batch, ngramspec_batch_stats* out) {
  if (batch == nullptr) return null_argument(__func__, "batch");
  if (out == nullptr) return null_argument(__func__, "out");
  return ngramspec_batch_stats_get_sized(batch, out, kBatchStatsVersions[0].end);
}

}  // extern "C"
