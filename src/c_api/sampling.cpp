// The C ABI's sampler: TokenSampler, and the rejection verification of one sequence's chain.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <span>
#include <vector>

#include "common.hpp"
#include "ngramspec/detail/number_text.hpp"
#include "ngramspec/draft_distribution.hpp"
#include "ngramspec/draft_tree.hpp"
#include "ngramspec/ngramspec.h"
#include "ngramspec/sampling_options.hpp"
#include "ngramspec/token.hpp"
#include "ngramspec/token_sampler.hpp"

static_assert(NGRAMSPEC_MAX_SUPPORT == ngramspec::DraftDistributions::kMaxSupport);

// The sampler, and the scratch its verify calls convert through (grown to the largest pass, then kept).
struct ngramspec_sampler : ngramspec::c_api::Handle<ngramspec::TokenSampler> {
  using Handle::Handle;
  ngramspec::DraftDistributions q;                       // the drafts' distributions
  std::vector<ngramspec::TokenSampler::Draft> children;  // verify_tree: one row's children
  std::vector<std::size_t> walk;                         // verify_tree: the entries walked
  std::vector<ngramspec::Token> chosen;                  // verify_tree: the token chosen after each
};

namespace {

using namespace ngramspec::c_api;  // the parts every C function uses

// The versions of ngramspec_sampling_options, as ngramspec.h lists them (one so far).
constexpr StructVersion kSamplingOptionsVersions[] = {
    {offsetof(ngramspec_sampling_options, mode) + sizeof(int), member_align<std::size_t, float, std::uint64_t, int>},
};
static_assert(kSamplingOptionsVersions[std::size(kSamplingOptionsVersions) - 1].size() ==
                  sizeof(ngramspec_sampling_options),
              "a field added to ngramspec_sampling_options is a new version: add it to kSamplingOptionsVersions");

// Sampling options from C (NULL: the defaults) into `out`; false: refused, the last error set.
// The C++ validation (the sampler's) checks the fields that SamplingOptions has.
bool to_cpp(const ngramspec_sampling_options* options, ngramspec::SamplingOptions& out, const char* where) noexcept {
  // A struct of an earlier version has its fields up to that version's last, the later ones keep their
  // defaults; any other size is another header's struct, or one never set.
  ngramspec_sampling_options c = ngramspec_sampling_options_default();
  if (options != nullptr) {
    const std::size_t bytes = struct_bytes(kSamplingOptionsVersions, options->struct_size);
    if (bytes == 0) {
      bad_struct_size(where, "options->struct_size", "ngramspec_sampling_options", options->struct_size,
                      kSamplingOptionsVersions, "ngramspec_sampling_options_init");
      return false;
    }
    std::memcpy(&c, options, bytes);
  }
  switch (c.mode) {
    case NGRAMSPEC_SAMPLING_EXACT: out.mode = ngramspec::SamplingMode::exact; break;
    case NGRAMSPEC_SAMPLING_REJECTION: out.mode = ngramspec::SamplingMode::rejection; break;
    default:
      fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
           "%s: options->mode = %d is invalid: it must be NGRAMSPEC_SAMPLING_EXACT (0) or NGRAMSPEC_SAMPLING_REJECTION "
           "(1)",
           where, c.mode);
      return false;
  }
  out.temperature = c.temperature;
  out.top_k = c.top_k;
  out.top_p = c.top_p;
  out.min_p = c.min_p;
  out.seed = c.seed;
  return true;
}

// How q_offsets may lie in q_tokens: from 0 to n_q (a chain's), or anywhere inside (a tree's, which may
// be one sequence's part of a whole ngramspec_batch_propose_trees_q call).
enum class Span { whole, inside };

// The drafts' distributions as ngramspec_sampler_verify_chain and _tree take them: NGRAMSPEC_OK when
// q_offsets cut q_tokens and q_probabilities into one support per draft (`item`: "draft" or "node")
// that DraftDistributions::push accepts.
ngramspec_status check_distributions(const char* where, const char* item, Span span, std::size_t n_drafts,
                                     const std::size_t* q_offsets, const ngramspec_token* q_tokens,
                                     const float* q_probabilities, std::size_t n_q) noexcept {
  if (q_offsets == nullptr) {
    if (n_q != 0) {
      return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT, "%s: q_offsets is NULL (every draft chosen) but n_q = %zu", where,
                  n_q);
    }
    return NGRAMSPEC_OK;
  }
  if (const ngramspec_status bad = check_tokens(where, q_tokens, "q_tokens", "n_q", n_q); bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (const ngramspec_status bad = check_array(where, q_probabilities, "q_probabilities", "n_q", n_q, sizeof(float));
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (span == Span::whole && q_offsets[0] != 0) {
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT, "%s: q_offsets[0] = %zu is invalid: it must be 0", where,
                q_offsets[0]);
  }
  if (q_offsets[0] > n_q) {
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT, "%s: q_offsets[0] = %zu is invalid: it must be at most n_q = %zu",
                where, q_offsets[0], n_q);
  }
  for (std::size_t i = 0; i < n_drafts; ++i) {
    const std::size_t begin = q_offsets[i];
    const std::size_t end = q_offsets[i + 1];
    if (end < begin || end > n_q) {
      return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
                  "%s: q_offsets[%zu] = %zu is invalid: it must be from q_offsets[%zu] = %zu to n_q = %zu", where,
                  i + 1, end, i, begin, n_q);
    }
    if (end - begin > ngramspec::DraftDistributions::kMaxSupport) {
      return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
                  "%s: %s %zu's support (q_offsets[%zu] .. q_offsets[%zu]) has %zu tokens, more than "
                  "NGRAMSPEC_MAX_SUPPORT = %zu",
                  where, item, i, i, i + 1, end - begin, ngramspec::DraftDistributions::kMaxSupport);
    }
    double total = 0.0;
    for (std::size_t s = begin; s < end; ++s) {
      const float probability = q_probabilities[s];
      if (!std::isfinite(probability) || probability < 0.0f) {
        return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
                    "%s: q_probabilities[%zu] = %s (%s %zu, token %u) is invalid: it must be finite and >= 0", where, s,
                    ngramspec::detail::number_text(probability).c_str(), item, i, static_cast<unsigned>(q_tokens[s]));
      }
      total += probability;
    }
    if (end != begin && !(total > 0.0)) {
      return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
                  "%s: %s %zu's probabilities q_probabilities[%zu .. %zu) sum to 0; a support needs some (an "
                  "empty one reads the %s as chosen)",
                  where, item, i, begin, end, item);
    }
  }
  if (span == Span::whole && q_offsets[n_drafts] != n_q) {
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT, "%s: q_offsets[%zu] = %zu is invalid: it must be n_q = %zu", where,
                n_drafts, q_offsets[n_drafts], n_q);
  }
  return NGRAMSPEC_OK;
}

// Loads the checked supports of n drafts into q, an empty one as chosen (one-hot).
void load_distributions(ngramspec::DraftDistributions& q, std::size_t n, const std::size_t* q_offsets,
                        const ngramspec_token* q_tokens, const float* q_probabilities) {
  q.clear();
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t begin = q_offsets[i];
    const std::size_t size = q_offsets[i + 1] - begin;
    if (size == 0) {
      q.push_one_hot();
    } else {
      q.push_unchecked(std::span<const ngramspec::Token>(q_tokens + begin, size),
                       std::span<const float>(q_probabilities + begin, size));
    }
  }
}

static_assert(NGRAMSPEC_TREE_ROOT == ngramspec::kTreeRoot, "one root marker");

// NGRAMSPEC_OK when parents[0 .. n_nodes) make a tree, as ngramspec_batch_propose_trees writes them: each
// NGRAMSPEC_TREE_ROOT or an earlier node (ngramspec::first_invalid_tree_parent), named in C's terms.
ngramspec_status check_parents(const char* where, const std::int32_t* parents, std::size_t n_nodes) noexcept {
  const std::size_t j = ngramspec::first_invalid_tree_parent(std::span<const std::int32_t>(parents, n_nodes));
  if (j == n_nodes) return NGRAMSPEC_OK;
  if (j == 0) {
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
                "%s: parents[0] = %d is invalid: node 0's parent must be NGRAMSPEC_TREE_ROOT (-1), there being no "
                "earlier node",
                where, static_cast<int>(parents[0]));
  }
  return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
              "%s: parents[%zu] = %d is invalid: it must be NGRAMSPEC_TREE_ROOT (-1) or an earlier node, 0 .. %zu",
              where, j, static_cast<int>(parents[j]), j - 1);
}

}  // namespace

extern "C" {

ngramspec_sampling_options ngramspec_sampling_options_default(void) {
  const ngramspec::SamplingOptions options;
  ngramspec_sampling_options c;
  std::memset(&c, 0, sizeof c);  // no indeterminate byte (the padding) for ngramspec_sampling_options_init to copy
  c.struct_size = sizeof(ngramspec_sampling_options);
  c.temperature = options.temperature;
  c.top_k = options.top_k;
  c.top_p = options.top_p;
  c.min_p = options.min_p;
  c.seed = options.seed;
  c.mode = options.mode == ngramspec::SamplingMode::rejection ? NGRAMSPEC_SAMPLING_REJECTION : NGRAMSPEC_SAMPLING_EXACT;
  return c;
}

ngramspec_status ngramspec_sampling_options_init(ngramspec_sampling_options* options, size_t struct_size) {
  return init_struct(__func__, "options", "ngramspec_sampling_options", options, struct_size,
                     kSamplingOptionsVersions, ngramspec_sampling_options_default());
}

ngramspec_status ngramspec_sampler_create(const ngramspec_sampling_options* options, size_t vocab_size,
                                          ngramspec_sampler** out) {
  if (out == nullptr) return null_argument(__func__, "out");
  ngramspec::SamplingOptions cpp;
  if (!to_cpp(options, cpp, __func__)) return NGRAMSPEC_ERROR_INVALID_ARGUMENT;
  return ngramspec::c_api::create_handle(__func__, out, cpp, vocab_size);
}

void ngramspec_sampler_free(ngramspec_sampler* sampler) { delete sampler; }

ngramspec_status ngramspec_sampler_set_options(ngramspec_sampler* sampler, const ngramspec_sampling_options* options) {
  if (sampler == nullptr) return null_argument(__func__, "sampler");
  ngramspec::SamplingOptions cpp;
  if (!to_cpp(options, cpp, __func__)) return NGRAMSPEC_ERROR_INVALID_ARGUMENT;
  return guarded(Where{__func__}, [&] { sampler->object.set_options(cpp); });
}

ngramspec_status ngramspec_sampler_verify_chain(ngramspec_sampler* sampler, const float* logits, size_t n_logits,
                                                uint64_t position, const ngramspec_token* drafts, size_t n_drafts,
                                                const size_t* q_offsets, const ngramspec_token* q_tokens,
                                                const float* q_probabilities, size_t n_q, size_t* accepted,
                                                ngramspec_token* next) {
  if (sampler == nullptr) return null_argument(__func__, "sampler");
  if (const ngramspec_status bad = check_array(__func__, logits, "logits", "n_logits", n_logits, sizeof(float));
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (const ngramspec_status bad = check_tokens(__func__, drafts, "drafts", "n_drafts", n_drafts);
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  const std::size_t vocab = sampler->object.vocab_size();
  if (n_logits % vocab != 0 || n_logits / vocab != n_drafts + 1) {  // n_drafts + 1 cannot wrap: checked above
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
                "%s: n_logits = %zu is invalid: it must be (n_drafts + 1) x vocab_size = (%zu + 1) x %zu, a row per "
                "draft and one after them",
                __func__, n_logits, n_drafts, vocab);
  }
  if (const ngramspec_status bad =
          check_distributions(__func__, "draft", Span::whole, n_drafts, q_offsets, q_tokens, q_probabilities, n_q);
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (accepted == nullptr) return null_argument(__func__, "accepted");
  if (next == nullptr) return null_argument(__func__, "next");
  return guarded(Where{__func__}, [&] {
    ngramspec::TokenSampler& tokens = sampler->object;
    const bool rejection = tokens.options().mode == ngramspec::SamplingMode::rejection;
    ngramspec::DraftDistributions& q = sampler->q;
    q.clear();
    if (rejection && q_offsets != nullptr) load_distributions(q, n_drafts, q_offsets, q_tokens, q_probabilities);
    const auto row = [&](std::size_t i) { return std::span<const float>(logits + i * vocab, vocab); };
    std::size_t n = 0;
    for (; n < n_drafts; ++n) {
      ngramspec::Token token = 0;
      if (rejection) {
        const ngramspec::TokenSampler::Draft draft{
            drafts[n], q_offsets != nullptr ? static_cast<std::uint32_t>(n) : ngramspec::TokenSampler::Draft::kChosen};
        token = tokens.verify(row(n), position + n, std::span<const ngramspec::TokenSampler::Draft>(&draft, 1), q);
      } else {
        token = tokens.choose(row(n), position + n);
      }
      if (token != drafts[n]) {  // rejected: the residual gives a rejected draft no mass
        *accepted = n;
        *next = token;
        return;
      }
    }
    *next = tokens.choose(row(n_drafts), position + n_drafts);  // every draft accepted: the row after them
    *accepted = n_drafts;
  });
}

ngramspec_status ngramspec_sampler_verify_tree(ngramspec_sampler* sampler, const float* logits, size_t n_logits,
                                               uint64_t position, const ngramspec_token* tokens, const int32_t* parents,
                                               size_t n_nodes, const size_t* q_offsets, const ngramspec_token* q_tokens,
                                               const float* q_probabilities, size_t n_q, ngramspec_token* model_tokens,
                                               size_t* path, size_t* accepted, ngramspec_token* next) {
  if (sampler == nullptr) return null_argument(__func__, "sampler");
  if (const ngramspec_status bad = check_array(__func__, logits, "logits", "n_logits", n_logits, sizeof(float));
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (const ngramspec_status bad = check_tokens(__func__, tokens, "tokens", "n_nodes", n_nodes); bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (const ngramspec_status bad = check_array(__func__, parents, "parents", "n_nodes", n_nodes, sizeof(int32_t));
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  const std::size_t vocab = sampler->object.vocab_size();
  if (n_logits % vocab != 0 || n_logits / vocab != n_nodes + 1) {  // n_nodes + 1 cannot wrap: checked above
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
                "%s: n_logits = %zu is invalid: it must be (n_nodes + 1) x vocab_size = (%zu + 1) x %zu, a row for "
                "the root and one per node",
                __func__, n_logits, n_nodes, vocab);
  }
  if (const ngramspec_status bad = check_parents(__func__, parents, n_nodes); bad != NGRAMSPEC_OK) return bad;
  if (const ngramspec_status bad =
          check_distributions(__func__, "node", Span::inside, n_nodes, q_offsets, q_tokens, q_probabilities, n_q);
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (model_tokens == nullptr) return null_argument(__func__, "model_tokens");
  if (path == nullptr) return null_argument(__func__, "path");
  if (accepted == nullptr) return null_argument(__func__, "accepted");
  if (next == nullptr) return null_argument(__func__, "next");
  return guarded(Where{__func__}, [&] {
    ngramspec::TokenSampler& sampling = sampler->object;
    const bool rejection = sampling.options().mode == ngramspec::SamplingMode::rejection;
    ngramspec::DraftDistributions& q = sampler->q;
    // The scratch grows to the largest tree seen, then stays: a warm sampler allocates nothing.
    q.reserve(n_nodes, ngramspec::DraftDistributions::kMaxSupport);
    q.clear();
    if (rejection && q_offsets != nullptr) load_distributions(q, n_nodes, q_offsets, q_tokens, q_probabilities);
    if (sampler->children.size() < n_nodes) sampler->children.resize(n_nodes);
    if (sampler->walk.size() < n_nodes + 1) {
      sampler->walk.resize(n_nodes + 1);
      sampler->chosen.resize(n_nodes + 1);
    }
    // From the root down: at entry e (0: the root, j + 1: node j), depth d, the token is chosen from row e
    // at position + d (verified against e's children, in index order, in rejection mode); the walk goes on
    // to the first child that carries it (a node's children come after it), or ends there.
    std::size_t e = 0;
    std::size_t depth = 0;
    for (;; ++depth) {
      const std::span<const float> row(logits + e * vocab, vocab);
      const auto child_of_e = [&](std::size_t j) {
        return static_cast<std::int64_t>(parents[j]) + 1 == static_cast<std::int64_t>(e);
      };
      ngramspec::Token token = 0;
      if (rejection) {
        std::size_t m = 0;
        for (std::size_t j = e; j < n_nodes; ++j) {
          if (!child_of_e(j)) continue;
          sampler->children[m++] = {tokens[j], q_offsets != nullptr ? static_cast<std::uint32_t>(j)
                                                                    : ngramspec::TokenSampler::Draft::kChosen};
        }
        token = sampling.verify(row, position + depth,
                                std::span<const ngramspec::TokenSampler::Draft>(sampler->children.data(), m), q);
      } else {
        token = sampling.choose(row, position + depth);
      }
      sampler->walk[depth] = e;
      sampler->chosen[depth] = token;
      std::size_t child = e;
      while (child < n_nodes && !(child_of_e(child) && tokens[child] == token)) ++child;
      if (child == n_nodes) break;
      e = child + 1;
    }
    // Every entry off the walk gets the last token, one of the vocabulary (ngramspec_batch_accept_trees
    // checks them against it but never walks them).
    std::fill_n(model_tokens, n_nodes + 1, sampler->chosen[depth]);
    for (std::size_t d = 0; d <= depth; ++d) {
      model_tokens[sampler->walk[d]] = sampler->chosen[d];
      path[d] = sampler->walk[d];
    }
    *accepted = depth;
    *next = sampler->chosen[depth];
  });
}

}  // extern "C"
