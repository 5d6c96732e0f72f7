/* The C program the C ABI's consumer tests build against the installed library, once through
 * CMake (find_package, ngramspec::ngramspec_c) and once through pkg-config. It serves requests
 * through a batch with a corpus as an engine would, with a toy greedy model, and returns 0 when
 * the header and library versions agree, every output is plain greedy decoding and speculation
 * saved passes. */

#include <ngramspec/ngramspec.h>

#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                                               \
  do {                                                                                            \
    ngramspec_status check_status_ = (call);                                                      \
    if (check_status_ != NGRAMSPEC_OK) {                                                          \
      fprintf(stderr, "FAILED: %s: %s (%s)\n", #call, ngramspec_status_name(check_status_),        \
              ngramspec_last_error());                                                            \
      return 1;                                                                                   \
    }                                                                                             \
  } while (0)

enum { kSequences = 3, kMaxDrafts = 8, kNewTokens = 48 };

/* The model: a 12-token cycle. */
static ngramspec_token model_after(ngramspec_token t) { return (t * 5 + 3) % 12; }

int main(void) {
  ngramspec_corpus* corpus = NULL;
  ngramspec_batch* batch = NULL;
  ngramspec_batch_config config = ngramspec_batch_config_default();
  ngramspec_sequence_options options = ngramspec_sequence_options_default();
  const ngramspec_token prompt[] = {0, 3, 6, 9, 0, 3};
  ngramspec_sequence_id ids[kSequences] = {101, 202, 303};
  ngramspec_token last[kSequences];
  ngramspec_token drafts[kSequences * kMaxDrafts];
  ngramspec_token model_tokens[kSequences * (kMaxDrafts + 1)];
  size_t offsets[kSequences + 1];
  size_t model_offsets[kSequences + 1];
  ngramspec_step steps[kSequences];
  size_t emitted[kSequences] = {0, 0, 0};
  size_t n_ids = kSequences;
  size_t passes = 0;
  size_t i;

  if (ngramspec_version_number() != NGRAMSPEC_VERSION_NUMBER) {
    fprintf(stderr, "FAILED: the header is version %d, the library %s\n", NGRAMSPEC_VERSION_NUMBER,
            ngramspec_version_string());
    return 1;
  }
  CHECK(ngramspec_corpus_create(1u << 20, &corpus));
  config.max_sequences = kSequences;
  config.cost = "knee:32";
  CHECK(ngramspec_batch_create(&config, corpus, &batch));
  options.max_new_tokens = kNewTokens;
  options.max_drafts = kMaxDrafts;
  for (i = 0; i < kSequences; ++i) {
    CHECK(ngramspec_batch_begin(batch, ids[i], prompt, sizeof prompt / sizeof prompt[0], &options));
    last[i] = prompt[sizeof prompt / sizeof prompt[0] - 1];
  }

  while (n_ids > 0 && passes < 100) {
    size_t n_drafts = 0;
    size_t kept = 0;
    CHECK(ngramspec_batch_propose(batch, ids, n_ids, drafts, sizeof drafts / sizeof drafts[0], offsets, 0, &n_drafts));
    model_offsets[0] = 0;
    for (i = 0; i < n_ids; ++i) { /* one batched forward: [last token, drafts...] per sequence */
      ngramspec_token fed = last[i];
      size_t n = model_offsets[i];
      size_t j;
      for (j = offsets[i]; j <= offsets[i + 1]; ++j) {
        model_tokens[n++] = model_after(fed);
        if (j < offsets[i + 1]) fed = drafts[j];
      }
      model_offsets[i + 1] = n;
    }
    CHECK(ngramspec_batch_accept(batch, ids, n_ids, model_tokens, model_offsets[n_ids], model_offsets, steps));
    ++passes;
    for (i = 0; i < n_ids; ++i) {
      size_t j;
      for (j = 0; j < steps[i].emitted; ++j) {
        if (model_tokens[model_offsets[i] + j] != model_after(last[i])) {
          fprintf(stderr, "FAILED: sequence %lu is not plain greedy decoding\n", (unsigned long)ids[i]);
          return 1;
        }
        last[i] = model_tokens[model_offsets[i] + j];
      }
      emitted[i] += steps[i].emitted;
      if (steps[i].finished) {
        if (emitted[i] != kNewTokens || steps[i].stop_reason != NGRAMSPEC_STOP_MAX_NEW_TOKENS) {
          fprintf(stderr, "FAILED: sequence %lu finished after %lu tokens\n", (unsigned long)ids[i],
                  (unsigned long)emitted[i]);
          return 1;
        }
        CHECK(ngramspec_batch_finish(batch, ids[i]));
      } else {
        ids[kept] = ids[i];
        last[kept] = last[i];
        emitted[kept] = emitted[i];
        ++kept;
      }
    }
    n_ids = kept;
  }
  if (n_ids != 0 || ngramspec_batch_size(batch) != 0 || ngramspec_corpus_records(corpus) != kSequences) {
    fprintf(stderr, "FAILED: %lu sequences still running after %lu passes\n", (unsigned long)n_ids,
            (unsigned long)passes);
    return 1;
  }
  if (passes >= kNewTokens) {
    fprintf(stderr, "FAILED: %lu passes for %d tokens: speculation saved nothing\n", (unsigned long)passes, kNewTokens);
    return 1;
  }
  printf("ok: ngramspec %s, %d sequences of %d tokens in %lu batched passes\n", ngramspec_version_string(),
         kSequences, kNewTokens, (unsigned long)passes);
  ngramspec_batch_free(batch);
  ngramspec_corpus_free(corpus);
  return strcmp(ngramspec_last_error(), "") == 0 ? 0 : 1;
}
