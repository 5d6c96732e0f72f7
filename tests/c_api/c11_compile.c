/* ngramspec.h as plain C11 (-std=c11 -Wall -Wextra -pedantic -Werror): a drafter created, fed,
 * asked and freed, a batch driven through a few passes of a toy greedy model (chains, then trees), a corpus saved
 * to a file, mapped and loaded back, a chain of drafts verified by a sampler, and a drawing tree batch's passes verified
 * by ngramspec_sampler_verify_tree (the hand-off of docs/C_API.md). Exits 0 when every call did what the header says. */

#include <ngramspec/ngramspec.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                                              \
  do {                                                                                           \
    ngramspec_status check_status_ = (call);                                                     \
    if (check_status_ != NGRAMSPEC_OK) {                                                         \
      fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,                          \
              ngramspec_status_name(check_status_), ngramspec_last_error());                      \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

#define EXPECT(condition)                                                                        \
  do {                                                                                           \
    if (!(condition)) {                                                                          \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #condition);                    \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

/* The toy model: each token is followed by (token + 1) mod 5. */
static ngramspec_token next_token(ngramspec_token t) { return (t + 1) % 5; }

static int drafter(void) {
  const ngramspec_token prompt[] = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1};
  ngramspec_token drafts[4];
  float probabilities[4];
  size_t count = 99;
  ngramspec_match_drafter* match = NULL;
  ngramspec_ngram_predictor* ngram = NULL;
  ngramspec_match_config config = ngramspec_match_config_default();

  config.min_confidence = 0;
  /* cap is the former name of index_capacity: the same field. */
  EXPECT(config.index_capacity == 8192 && config.cap == 8192);
  config.cap = 64;
  EXPECT(config.index_capacity == 64);
  config.index_capacity = 128;
  EXPECT(config.cap == 128);
  CHECK(ngramspec_match_drafter_create(&config, NULL, &match));
  CHECK(ngramspec_match_drafter_update(match, prompt, sizeof prompt / sizeof prompt[0]));
  CHECK(ngramspec_match_drafter_predict(match, drafts, 4, probabilities, &count));
  EXPECT(count == 4 && drafts[0] == 2 && drafts[1] == 3 && drafts[2] == 4 && drafts[3] == 0);
  EXPECT(probabilities[0] > 0 && probabilities[3] <= probabilities[0]);
  EXPECT(ngramspec_match_drafter_memory_bytes(match) > 0);
  ngramspec_match_drafter_free(match);

  CHECK(ngramspec_ngram_predictor_create(NULL, &ngram));
  CHECK(ngramspec_ngram_predictor_update(ngram, prompt, sizeof prompt / sizeof prompt[0]));
  CHECK(ngramspec_ngram_predictor_predict(ngram, drafts, 4, NULL, &count));
  EXPECT(count == 4 && drafts[0] == 2);
  ngramspec_ngram_predictor_free(ngram);

  /* A bad call says why and changes nothing. */
  EXPECT(ngramspec_match_drafter_update(NULL, prompt, 1) == NGRAMSPEC_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(ngramspec_last_error(), "drafter is NULL") != NULL);
  return 0;
}

static int batch(void) {
  enum { kSequences = 2, kMaxDrafts = 4 };
  const ngramspec_sequence_id ids[kSequences] = {7, 8};
  const ngramspec_token prompt[] = {0, 1, 2, 3, 4, 0, 1};
  ngramspec_batch_config config = ngramspec_batch_config_default();
  ngramspec_sequence_options options = ngramspec_sequence_options_default();
  ngramspec_batch* spec = NULL;
  ngramspec_token drafts[kSequences * kMaxDrafts];
  ngramspec_token model_tokens[kSequences * (kMaxDrafts + 1)];
  ngramspec_token last[kSequences];
  size_t offsets[kSequences + 1];
  size_t model_offsets[kSequences + 1];
  ngramspec_step steps[kSequences];
  ngramspec_batch_stats stats;
  size_t emitted[kSequences] = {0, 0};
  size_t n_drafts = 0;
  size_t i;
  size_t j;
  int pass;

  config.max_sequences = kSequences;
  config.cost = "knee:64";
  options.max_new_tokens = 30;
  options.max_drafts = kMaxDrafts;
  CHECK(ngramspec_batch_create(&config, NULL, &spec));
  for (i = 0; i < kSequences; ++i) {
    CHECK(ngramspec_batch_begin(spec, ids[i], prompt, sizeof prompt / sizeof prompt[0], &options));
    last[i] = prompt[sizeof prompt / sizeof prompt[0] - 1];
  }
  EXPECT(ngramspec_batch_size(spec) == kSequences && ngramspec_batch_contains(spec, 8));

  for (pass = 0; pass < 30 && ngramspec_batch_size(spec) > 0; ++pass) {
    CHECK(ngramspec_batch_propose(spec, ids, kSequences, drafts, sizeof drafts / sizeof drafts[0], offsets, 0,
                                  &n_drafts));
    EXPECT(offsets[kSequences] == n_drafts);
    model_offsets[0] = 0;
    for (i = 0; i < kSequences; ++i) { /* the forward of [last token, drafts...] */
      ngramspec_token fed = last[i];
      size_t n = model_offsets[i];
      for (j = offsets[i]; j <= offsets[i + 1]; ++j) {
        model_tokens[n++] = next_token(fed);
        if (j < offsets[i + 1]) fed = drafts[j];
      }
      model_offsets[i + 1] = n;
    }
    CHECK(ngramspec_batch_accept(spec, ids, kSequences, model_tokens, model_offsets[kSequences], model_offsets,
                                 steps));
    for (i = 0; i < kSequences; ++i) {
      for (j = 0; j < steps[i].emitted; ++j) { /* plain greedy decoding, token for token */
        EXPECT(model_tokens[model_offsets[i] + j] == next_token(last[i]));
        last[i] = model_tokens[model_offsets[i] + j];
      }
      emitted[i] += steps[i].emitted;
      if (steps[i].finished) {
        EXPECT(steps[i].stop_reason == NGRAMSPEC_STOP_MAX_NEW_TOKENS);
        CHECK(ngramspec_batch_finish(spec, ids[i]));
      }
    }
    if (steps[0].finished || steps[1].finished) break;
  }
  EXPECT(emitted[0] == 30 && emitted[1] == 30);
  EXPECT(ngramspec_batch_size(spec) == 0);
  CHECK(ngramspec_batch_stats_get_sized(spec, &stats, sizeof stats));
  EXPECT(stats.emitted == 60 && stats.accepted > 0 && stats.proposals < 30 && stats.out_of_vocabulary == 0);
  memset(&stats, 0, sizeof stats);
  CHECK(ngramspec_batch_stats_get(spec, &stats)); /* the header's macro: the sized getter, every field */
  EXPECT(stats.emitted == 60);
  ngramspec_batch_free(spec);
  return 0;
}

/* A batch that learns its cost from the passes, each reported by the engine; and a learned cost on its own. */
static int learned(void) {
  ngramspec_batch_config config = ngramspec_batch_config_default();
  ngramspec_batch* spec = NULL;
  const ngramspec_sequence_id id = 3;
  const ngramspec_token prompt[] = {1, 2, 3, 1, 2, 3, 1, 2};
  ngramspec_token drafts[8], model_tokens[9];
  size_t offsets[2], model_offsets[2], n_drafts = 0, j, length = 0;
  ngramspec_step step;
  ngramspec_learned_cost_stats learned_stats;
  ngramspec_learned_cost* cost = NULL;
  float p[3] = {0.9f, 0.8f, 0.7f};
  char text[512];
  int pass;
  config.cost = "learn:knee:64";
  CHECK(ngramspec_batch_create(&config, NULL, &spec));
  EXPECT(ngramspec_batch_learns_cost(spec) == 1);
  CHECK(ngramspec_batch_begin(spec, id, prompt, sizeof prompt / sizeof prompt[0], NULL));
  for (pass = 0; pass < 5; ++pass) {
    ngramspec_token fed = pass == 0 ? prompt[7] : model_tokens[model_offsets[1] - 1];
    CHECK(ngramspec_batch_propose(spec, &id, 1, drafts, 8, offsets, 0, &n_drafts));
    model_offsets[0] = 0;
    for (j = 0; j <= n_drafts; ++j) {
      model_tokens[j] = next_token(fed);
      if (j < n_drafts) fed = drafts[j];
    }
    model_offsets[1] = n_drafts + 1;
    EXPECT(ngramspec_batch_report_pass_seconds(spec, NAN) == NGRAMSPEC_ERROR_INVALID_ARGUMENT);
    CHECK(ngramspec_batch_report_pass_seconds(spec, 1e-3));
    CHECK(ngramspec_batch_accept(spec, &id, 1, model_tokens, model_offsets[1], model_offsets, &step));
    if (step.finished) break;
  }
  CHECK(ngramspec_batch_learned_cost_stats(spec, &learned_stats, sizeof learned_stats));
  EXPECT(learned_stats.passes == 5 && learned_stats.seconds > 0.0049 && learned_stats.seconds < 0.0051);
  CHECK(ngramspec_batch_describe_cost(spec, text, sizeof text, &length));
  EXPECT(length > 0 && length < sizeof text && strlen(text) == length);
  ngramspec_batch_free(spec);

  CHECK(ngramspec_learned_cost_create("flat", 0.005, 128, &cost));
  CHECK(ngramspec_learned_cost_plan(cost, 1, 1, 1.0, p, 3, &length));
  EXPECT(length == 0); /* nothing measured yet: a plain pass */
  CHECK(ngramspec_learned_cost_observe(cost, 1, 1, 1e-3));
  EXPECT(ngramspec_learned_cost_observe(cost, 0, 1, 1e-3) == NGRAMSPEC_ERROR_INVALID_ARGUMENT);
  CHECK(ngramspec_learned_cost_stats_get(cost, &learned_stats, sizeof learned_stats));
  EXPECT(learned_stats.passes == 1 && learned_stats.plain_passes == 1);
  CHECK(ngramspec_learned_cost_describe(cost, NULL, 0, &length));
  EXPECT(length > 0);
  ngramspec_learned_cost_free(cost);
  return 0;
}

/* A corpus saved to a file, mapped, drafted from, loaded back, and consulted by a drafter. */
static int corpus_file(void) {
  const char* path = "c_api_c11_compile.ngc";
  const ngramspec_token record[] = {10, 11, 12, 13, 14, 15};
  const ngramspec_token context[] = {7, 11, 12};
  const ngramspec_token sequence[] = {7, 8, 11, 12};
  ngramspec_token out[4];
  size_t count = 99;
  size_t match_length = 99;
  ngramspec_corpus* corpus = NULL;
  ngramspec_corpus* loaded = NULL;
  ngramspec_corpus_file* file = NULL;
  ngramspec_match_drafter* match = NULL;
  ngramspec_match_config config = ngramspec_match_config_default();

  CHECK(ngramspec_corpus_create(1u << 20, &corpus));
  CHECK(ngramspec_corpus_append_stamped(corpus, record, sizeof record / sizeof record[0], 1000));
  EXPECT(ngramspec_corpus_last_stamp(corpus) == 1000);
  CHECK(ngramspec_corpus_draft(corpus, context, 3, out, 4, &count, &match_length));
  EXPECT(count == 3 && out[0] == 13 && out[2] == 15 && match_length == 2);
  CHECK(ngramspec_corpus_save(corpus, path));

  CHECK(ngramspec_corpus_file_open(path, &file));
  CHECK(ngramspec_corpus_file_verify(file));
  EXPECT(ngramspec_corpus_file_size(file) == 6 && ngramspec_corpus_file_records(file) == 1);
  EXPECT(ngramspec_corpus_file_bytes(file) > 320 && ngramspec_corpus_file_last_stamp(file) == 1000);
  count = 99;
  CHECK(ngramspec_corpus_file_draft(file, context, 3, out, 4, &count, NULL));
  EXPECT(count == 3 && out[0] == 13 && out[1] == 14 && out[2] == 15);

  config.min_confidence = 0;
  CHECK(ngramspec_match_drafter_create_file(&config, NULL, file, NGRAMSPEC_PREFER_LONGER_MATCH, &match));
  CHECK(ngramspec_match_drafter_update(match, sequence, sizeof sequence / sizeof sequence[0]));
  CHECK(ngramspec_match_drafter_predict(match, out, 4, NULL, &count));
  EXPECT(count == 3 && out[0] == 13);
  ngramspec_match_drafter_free(match);
  ngramspec_corpus_file_close(file);

  CHECK(ngramspec_corpus_create(1u << 20, &loaded));
  CHECK(ngramspec_corpus_load(loaded, path));
  EXPECT(ngramspec_corpus_size(loaded) == 6 && ngramspec_corpus_last_stamp(loaded) == 1000);
  ngramspec_corpus_free(loaded);
  ngramspec_corpus_free(corpus);
  remove(path);

  /* A missing file says so, naming the file. */
  file = NULL;
  EXPECT(ngramspec_corpus_file_open("no-such-corpus-file.ngc", &file) == NGRAMSPEC_ERROR_CORPUS_FILE);
  EXPECT(file == NULL && strstr(ngramspec_last_error(), "no-such-corpus-file.ngc") != NULL);
  EXPECT(strcmp(ngramspec_status_name(NGRAMSPEC_ERROR_CORPUS_FILE), "NGRAMSPEC_ERROR_CORPUS_FILE") == 0);
  return 0;
}

/* A tree batch of one sequence over the toy model, with a shared top-k table: tree passes keep
 * the entries the model accepted, and every emitted token is the toy model's. */
static int tree_batch(void) {
  enum { kMaxNodes = 8, kK = 2 };
  const ngramspec_sequence_id id = 5;
  const ngramspec_token prompt[] = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0};
  ngramspec_batch_config config = ngramspec_batch_config_default();
  ngramspec_tree_config tree;
  ngramspec_sequence_options options = ngramspec_sequence_options_default();
  ngramspec_batch* spec = NULL;
  ngramspec_token tokens[kMaxNodes];
  int32_t parents[kMaxNodes];
  size_t offsets[2];
  ngramspec_token model_tokens[kMaxNodes + 1];
  ngramspec_token top[(kMaxNodes + 1) * kK];
  size_t model_offsets[2] = {0, 1};
  size_t kept[kMaxNodes + 1];
  ngramspec_step step;
  ngramspec_token last = 0;
  size_t n = 0, e = 0, j = 0, emitted = 0, pass = 0;

  /* the defaults of this header's version of the struct, which a later library still writes alone */
  CHECK(ngramspec_tree_config_init(&tree, sizeof tree));
  config.max_sequences = 1;
  tree.vocab_size = 5;
  tree.top_k = kK;
  options.max_new_tokens = 40;
  options.max_drafts = kMaxNodes;
  CHECK(ngramspec_batch_create_tree(&config, &tree, NULL, &spec));
  EXPECT(ngramspec_batch_top_k(spec) == kK);
  CHECK(ngramspec_batch_begin(spec, id, prompt, sizeof prompt / sizeof prompt[0], &options));
  model_tokens[0] = next_token(prompt[sizeof prompt / sizeof prompt[0] - 1]); /* the prefill */
  CHECK(ngramspec_batch_accept_trees(spec, &id, 1, model_tokens, 1, model_offsets, NULL, 0, &step, kept, 1));
  last = model_tokens[0];
  emitted = 1;
  for (pass = 0; pass < 40 && !step.finished; ++pass) {
    CHECK(ngramspec_batch_propose_trees(spec, &id, 1, tokens, parents, kMaxNodes, offsets, 0, &n));
    for (e = 0; e <= n; ++e) { /* entry 0 is the root, entry j + 1 node j */
      model_tokens[e] = next_token(e == 0 ? last : tokens[e - 1]);
      for (j = 0; j < kK; ++j) top[e * kK + j] = (model_tokens[e] + j) % 5;
      if (e > 0) EXPECT(parents[e - 1] == NGRAMSPEC_TREE_ROOT || (size_t)parents[e - 1] < e - 1);
    }
    model_offsets[1] = n + 1;
    CHECK(ngramspec_batch_accept_trees(spec, &id, 1, model_tokens, n + 1, model_offsets, top, (n + 1) * kK, &step,
                                       kept, n + 1));
    for (j = 0; j < step.emitted; ++j) {
      EXPECT(model_tokens[kept[j]] == next_token(last));
      last = model_tokens[kept[j]];
    }
    emitted += step.emitted;
  }
  EXPECT(step.finished && emitted == 40 && pass < 40);
  CHECK(ngramspec_batch_finish(spec, id));
  ngramspec_batch_free(spec);
  return 0;
}

/* A chain of two drafts verified against three rows of logits: greedily (the first draft is its row's
 * argmax, the second is not), then by rejection with each draft's q. */
static int verify_chain(void) {
  const float logits[3 * 5] = {0, 0, 3, 0, 0, /* argmax 2 */ 0, 0, 0, 0, 3, /* argmax 4 */ 3, 0, 0, 0, 0};
  const ngramspec_token drafts[2] = {2, 1};
  const size_t q_offsets[3] = {0, 2, 2}; /* draft 0 drawn from {2: 0.75, 3: 0.25}; draft 1 chosen */
  const ngramspec_token q_tokens[2] = {2, 3};
  const float q_probabilities[2] = {0.75f, 0.25f};
  ngramspec_sampling_options options;
  ngramspec_sampler* sampler = NULL;
  size_t accepted = 99;
  ngramspec_token next = 99;

  CHECK(ngramspec_sampling_options_init(&options, sizeof options));
  CHECK(ngramspec_sampler_create(&options, 5, &sampler));
  CHECK(ngramspec_sampler_verify_chain(sampler, logits, 15, 7, drafts, 2, NULL, NULL, NULL, 0, &accepted, &next));
  EXPECT(accepted == 1 && next == 4);
  options.temperature = 1.0f;
  options.seed = 5;
  options.mode = NGRAMSPEC_SAMPLING_REJECTION;
  CHECK(ngramspec_sampler_set_options(sampler, &options));
  CHECK(ngramspec_sampler_verify_chain(sampler, logits, 15, 7, drafts, 2, q_offsets, q_tokens, q_probabilities, 2,
                                       &accepted, &next));
  EXPECT(accepted <= 2 && next < 5);
  options.mode = 2;
  EXPECT(ngramspec_sampler_set_options(sampler, &options) == NGRAMSPEC_ERROR_INVALID_ARGUMENT);
  ngramspec_sampler_free(sampler);
  return 0;
}

/* A drawing tree batch of two sequences over a sampled toy model (the toy model's token has logit 3, the rest 0; p =
 * 0.8339 on it, 0.0415 on each other token), each pass verified by rejection sampling: propose_trees_q, then
 * verify_tree per sequence writing its part of model_tokens, then accept_trees_q, which keeps the entries verify_tree
 * walked. */
enum { TREE_IDS = 2, TREE_DRAFTS = 6, TREE_CAP = TREE_IDS * TREE_DRAFTS, TREE_K = 4, TREE_V = 5 };

static int verify_tree(void) {
  const ngramspec_token prompts[TREE_IDS][4] = {{0, 1, 2, 3}, {2, 3, 4, 0}};
  ngramspec_sequence_id running[TREE_IDS] = {1, 2};
  size_t n_running = TREE_IDS;
  size_t length[3] = {0, 4, 4}; /* by id */
  ngramspec_token last[3] = {0, 3, 0};
  ngramspec_token tokens[TREE_CAP], q_tokens[TREE_CAP * TREE_K], model_tokens[TREE_CAP + TREE_IDS];
  ngramspec_token top[(TREE_CAP + TREE_IDS) * TREE_K], next = 0;
  int32_t parents[TREE_CAP];
  float q_probabilities[TREE_CAP * TREE_K], top_p[(TREE_CAP + TREE_IDS) * TREE_K], rows[(TREE_DRAFTS + 1) * TREE_V];
  size_t offsets[TREE_IDS + 1], q_offsets[TREE_CAP + 1], model_offsets[TREE_IDS + 1], kept[TREE_CAP + TREE_IDS];
  size_t paths[TREE_IDS][TREE_DRAFTS + 1], n_nodes = 0, n_q = 0, accepted = 0, emitted = 0, pass, i, j, e, t, r;
  ngramspec_step steps[TREE_IDS];
  ngramspec_batch_config config = ngramspec_batch_config_default();
  ngramspec_tree_config tree;
  ngramspec_sequence_options options = ngramspec_sequence_options_default();
  ngramspec_sampling_options sampling;
  ngramspec_batch* spec = NULL;
  ngramspec_sampler* sampler = NULL;

  CHECK(ngramspec_tree_config_init(&tree, sizeof tree));
  CHECK(ngramspec_sampling_options_init(&sampling, sizeof sampling));
  config.max_sequences = TREE_IDS;
  tree.vocab_size = TREE_V;
  tree.top_k = TREE_K;
  tree.draw_recycled = 1;
  options.max_new_tokens = 12;
  options.max_drafts = TREE_DRAFTS;
  sampling.temperature = 1.0f;
  sampling.seed = 7;
  sampling.mode = NGRAMSPEC_SAMPLING_REJECTION;
  CHECK(ngramspec_batch_create_tree(&config, &tree, NULL, &spec));
  CHECK(ngramspec_sampler_create(&sampling, TREE_V, &sampler));
  for (i = 0; i < TREE_IDS; ++i) CHECK(ngramspec_batch_begin(spec, running[i], prompts[i], 4, &options));
  for (pass = 0; pass < 40 && n_running > 0; ++pass) {
    size_t m = 0, still = 0;
    CHECK(ngramspec_batch_propose_trees_q(spec, running, n_running, tokens, parents, TREE_CAP, offsets, 0, &n_nodes,
                                          q_offsets, q_tokens, q_probabilities, TREE_CAP * TREE_K, &n_q));
    model_offsets[0] = 0;
    for (i = 0; i < n_running; ++i) {
      const ngramspec_sequence_id id = running[i];
      const size_t nodes = offsets[i + 1] - offsets[i];
      for (e = 0; e <= nodes; ++e) { /* the model's row after each entry, and its top tokens best first */
        const ngramspec_token fed = e == 0 ? last[id] : tokens[offsets[i] + e - 1];
        for (t = 0; t < TREE_V; ++t) rows[e * TREE_V + t] = t == next_token(fed) ? 3.0f : 0.0f;
        top[(m + e) * TREE_K] = next_token(fed);
        top_p[(m + e) * TREE_K] = 0.833929f;
        for (t = 0, r = 1; r < TREE_K; ++t) {
          if (t == next_token(fed)) continue;
          top[(m + e) * TREE_K + r] = (ngramspec_token)t;
          top_p[(m + e) * TREE_K + r++] = 0.0415186f;
        }
      }
      CHECK(ngramspec_sampler_verify_tree(sampler, rows, (nodes + 1) * TREE_V, length[id], tokens + offsets[i],
                                          parents + offsets[i], nodes, q_offsets + offsets[i], q_tokens,
                                          q_probabilities, n_q, model_tokens + m, paths[i], &accepted, &next));
      EXPECT(paths[i][0] == 0 && model_tokens[m + paths[i][accepted]] == next);
      m += nodes + 1;
      model_offsets[i + 1] = m;
    }
    CHECK(ngramspec_batch_accept_trees_q(spec, running, n_running, model_tokens, m, model_offsets, top, top_p,
                                         m * TREE_K, steps, kept, TREE_CAP + TREE_IDS));
    for (i = 0; i < n_running; ++i) {
      const ngramspec_sequence_id id = running[i];
      for (j = 0; j < steps[i].emitted; ++j) {
        EXPECT(kept[model_offsets[i] + j] == paths[i][j]); /* the entries verify_tree walked */
        last[id] = model_tokens[model_offsets[i] + kept[model_offsets[i] + j]];
        ++length[id];
        ++emitted;
      }
      if (steps[i].finished) {
        CHECK(ngramspec_batch_finish(spec, id));
      } else {
        running[still++] = id;
      }
    }
    n_running = still;
  }
  EXPECT(n_running == 0 && emitted == 24 && pass < 12); /* plain sampling takes 12 passes */
  ngramspec_sampler_free(sampler);
  ngramspec_batch_free(spec);
  return 0;
}

int main(void) {
  EXPECT(ngramspec_version_number() == NGRAMSPEC_VERSION_NUMBER);
  EXPECT(strcmp(ngramspec_status_name(NGRAMSPEC_ERROR_OUT_OF_MEMORY), "NGRAMSPEC_ERROR_OUT_OF_MEMORY") == 0);
  /* C may hold any int in the enum; the name says so. */
  EXPECT(strcmp(ngramspec_status_name((ngramspec_status)42), "unknown status") == 0);
  EXPECT(strcmp(ngramspec_status_name((ngramspec_status)-1), "unknown status") == 0);
  EXPECT(strcmp(ngramspec_last_error(), "") == 0);
  ngramspec_match_drafter_free(NULL);
  ngramspec_ngram_predictor_free(NULL);
  ngramspec_corpus_free(NULL);
  ngramspec_batch_free(NULL);
  ngramspec_corpus_file_close(NULL);
  ngramspec_sampler_free(NULL);
  ngramspec_learned_cost_free(NULL);
  if (drafter() != 0 || batch() != 0 || tree_batch() != 0 || corpus_file() != 0 || verify_chain() != 0 ||
      verify_tree() != 0 || learned() != 0) {
    return 1;
  }
  printf("ngramspec %s: the C API works from C11\n", ngramspec_version_string());
  return 0;
}
