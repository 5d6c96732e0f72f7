/* A program built against an earlier ngramspec.h (tests/c_api/headers, named by NGRAMSPEC_OLD_HEADER; plain C11,
 * with no sight of today's header) and run with today's library: every versioned struct of that header is
 * accepted at the sizeof this program sets, its fields are read, and nothing past them is (its tail padding and
 * the bytes after it are 0xFF here, which read as any later field would turn drawing on or be refused).
 * OLD_TREE_VERSION is the header's version of ngramspec_tree_config, OLD_SAMPLING_OPTIONS 1 when it has
 * ngramspec_sampling_options. Exits 0 when every call did what that header says. */

#include NGRAMSPEC_OLD_HEADER

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

/* The call is refused as an invalid argument with a message that names `text`. */
#define EXPECT_REFUSED(call, text)                                                               \
  do {                                                                                           \
    ngramspec_status refused_status_ = (call);                                                   \
    if (refused_status_ != NGRAMSPEC_ERROR_INVALID_ARGUMENT ||                                   \
        strstr(ngramspec_last_error(), (text)) == NULL) {                                        \
      fprintf(stderr, "%s:%d: %s: %s (%s), expected a refusal naming %s\n", __FILE__, __LINE__,  \
              #call, ngramspec_status_name(refused_status_), ngramspec_last_error(), (text));     \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

/* ---- ngramspec_tree_config ----------------------------------------------------------------------- */

/* The struct with garbage after its fields, as a stack variable may have. */
typedef union {
  ngramspec_tree_config config;
  unsigned char bytes[sizeof(ngramspec_tree_config) + 32];
} TreeBuffer;

/* Every field this version has set off its default, one by one over bytes of `fill` (an assignment of the
 * whole struct may clear its padding): a batch of them recycles a top-k table of k = 3. Not
 * ngramspec_tree_config_default: today's returns today's larger struct (ngramspec.h). */
static ngramspec_tree_config* tree_config(TreeBuffer* buffer, int fill) {
  ngramspec_tree_config* t = &buffer->config;
  memset(buffer, fill, sizeof *buffer);
  t->struct_size = sizeof(ngramspec_tree_config);
  t->successor_slots = 256;
  t->max_children = 3;
  t->vocab_size = 64;
  t->top_k = 3;
  t->shared_top_k = 1;
  t->carry_over = 1;
#if OLD_TREE_VERSION >= 2
  t->enrich_counts = 1;
#endif
#if OLD_TREE_VERSION >= 3
  t->draw_recycled = 0;
  t->draw_seed = 7;
#endif
#if OLD_TREE_VERSION >= 4
  t->recycled_history = 0.5f;
#endif
  return t;
}

static ngramspec_batch_config batch_config(void) {
  ngramspec_batch_config config = ngramspec_batch_config_default();
  config.max_sequences = 4;
  return config;
}

/* The toy model: each token is followed by (token + 1) mod 5. */
static ngramspec_token next_token(ngramspec_token t) { return (t + 1) % 5; }

/* The prefill, then one tree pass of a sequence that has seen the model's text: every node the model
 * writes is kept. */
static int drive(ngramspec_batch* batch) {
  const ngramspec_token prompt[] = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1};
  const ngramspec_sequence_id id = 1;
  ngramspec_sequence_options options = ngramspec_sequence_options_default();
  ngramspec_token tokens[16];
  int32_t parents[16];
  size_t offsets[2] = {0, 0};
  size_t n_nodes = 0;
  ngramspec_token model[17];
  ngramspec_token top[17 * 3];
  size_t kept[17];
  ngramspec_step step;
  ngramspec_token last = 0;
  size_t e = 0;
  size_t j = 0;

  options.max_new_tokens = 32;
  CHECK(ngramspec_batch_begin(batch, id, prompt, sizeof prompt / sizeof prompt[0], &options));
  model[0] = next_token(prompt[sizeof prompt / sizeof prompt[0] - 1]);
  offsets[1] = 1;
  CHECK(ngramspec_batch_accept_trees(batch, &id, 1, model, 1, offsets, NULL, 0, &step, kept, 1));
  EXPECT(step.emitted == 1);
  last = model[0];
  CHECK(ngramspec_batch_propose_trees(batch, &id, 1, tokens, parents, 16, offsets, 0, &n_nodes));
  EXPECT(n_nodes >= 1 && offsets[1] == n_nodes);
  for (e = 0; e <= n_nodes; ++e) { /* entry 0 is the root, entry j + 1 node j */
    model[e] = next_token(e == 0 ? last : tokens[e - 1]);
    for (j = 0; j < 3; ++j) top[e * 3 + j] = (ngramspec_token)((model[e] + j) % 5);
  }
  offsets[1] = n_nodes + 1;
  CHECK(ngramspec_batch_accept_trees(batch, &id, 1, model, n_nodes + 1, offsets, top, (n_nodes + 1) * 3, &step,
                                     kept, n_nodes + 1));
  EXPECT(step.emitted >= 2 && step.accepted == step.emitted - 1);
  for (j = 0; j < step.emitted; ++j) {
    EXPECT(model[kept[j]] == next_token(last));
    last = model[kept[j]];
  }
  CHECK(ngramspec_batch_finish(batch, id));
  return 0;
}

/* ---- ngramspec_batch_stats ---------------------------------------------------------------------- */

/* The struct with bytes after it, as a stack variable may have. */
typedef union {
  ngramspec_batch_stats stats;
  unsigned char bytes[sizeof(ngramspec_batch_stats) + 32];
} StatsBuffer;

/* ngramspec_batch_stats_get fills this header's struct (the totals of drive's two passes) and writes
 * nothing after it: today's struct may be larger than this header's. */
static int batch_stats_of_this_version(ngramspec_batch* batch) {
  StatsBuffer buffer;
  size_t i = 0;
  memset(&buffer, 0xAB, sizeof buffer);
  CHECK(ngramspec_batch_stats_get(batch, &buffer.stats));
  EXPECT(buffer.stats.proposals >= 1 && buffer.stats.drafted >= 1 && buffer.stats.accepted >= 1);
  EXPECT(buffer.stats.emitted > buffer.stats.accepted);
  for (i = sizeof(ngramspec_batch_stats); i < sizeof buffer; ++i) EXPECT(buffer.bytes[i] == 0xAB);
  return 0;
}

static int tree_config_of_this_version(void) {
  const ngramspec_batch_config config = batch_config();
  TreeBuffer buffer;
  ngramspec_tree_config* t = tree_config(&buffer, 0xFF);
  ngramspec_batch* batch = NULL;
  ngramspec_batch* shared = NULL;
  ngramspec_batch* own = NULL;

  /* accepted at this header's sizeof, with top_k and vocab_size read */
  CHECK(ngramspec_batch_create_tree(&config, t, NULL, &batch));
  EXPECT(ngramspec_batch_top_k(batch) == 3);
  if (drive(batch) != 0) return 1;
  if (batch_stats_of_this_version(batch) != 0) return 1;
  ngramspec_batch_free(batch);

  /* shared_top_k read: a table per drafter holds more than one shared by all */
  t = tree_config(&buffer, 0xFF);
  CHECK(ngramspec_batch_create_tree(&config, t, NULL, &shared));
  t->shared_top_k = 0;
  CHECK(ngramspec_batch_create_tree(&config, t, NULL, &own));
  EXPECT(ngramspec_batch_memory_bytes(own) > ngramspec_batch_memory_bytes(shared));
  ngramspec_batch_free(own);

#if OLD_TREE_VERSION >= 3
  /* draw_recycled read: the shared table then keeps probabilities too */
  t = tree_config(&buffer, 0xFF);
  t->draw_recycled = 1;
  CHECK(ngramspec_batch_create_tree(&config, t, NULL, &batch));
  EXPECT(ngramspec_batch_memory_bytes(batch) > ngramspec_batch_memory_bytes(shared));
  ngramspec_batch_free(batch);
#endif

  /* The garbage after the fields read as nothing: the same batch as with zeros there. */
  t = tree_config(&buffer, 0);
  CHECK(ngramspec_batch_create_tree(&config, t, NULL, &batch));
  EXPECT(ngramspec_batch_memory_bytes(batch) == ngramspec_batch_memory_bytes(shared));
  ngramspec_batch_free(batch);
  ngramspec_batch_free(shared);

  /* the other fields read: each refused by name when invalid */
  t = tree_config(&buffer, 0xFF);
  t->successor_slots = 3;
  EXPECT_REFUSED(ngramspec_batch_create_tree(&config, t, NULL, &batch), "successor_slots = 3");
  t = tree_config(&buffer, 0xFF);
  t->max_children = 17;
  EXPECT_REFUSED(ngramspec_batch_create_tree(&config, t, NULL, &batch), "max_children = 17");
  t = tree_config(&buffer, 0xFF);
  t->top_k = 33;
  EXPECT_REFUSED(ngramspec_batch_create_tree(&config, t, NULL, &batch), "top_k = 33");
  return 0;
}

/* ---- ngramspec_sampling_options ------------------------------------------------------------------- */

#if OLD_SAMPLING_OPTIONS
typedef union {
  ngramspec_sampling_options options;
  unsigned char bytes[sizeof(ngramspec_sampling_options) + 32];
} OptionsBuffer;

static ngramspec_sampling_options* sampling_options(OptionsBuffer* buffer) {
  ngramspec_sampling_options* o = &buffer->options;
  memset(buffer, 0xFF, sizeof *buffer);
  o->struct_size = sizeof(ngramspec_sampling_options);
  o->temperature = 1.0f;
  o->top_k = 1;
  o->top_p = 0.9f;
  o->min_p = 0.1f;
  o->seed = 3;
  o->mode = NGRAMSPEC_SAMPLING_REJECTION;
  return o;
}

static int sampling_options_of_this_version(void) {
  /* this struct has kept its size, so today's default fits it */
  const ngramspec_sampling_options defaults = ngramspec_sampling_options_default();
  const float logits[4] = {0.0f, 0.5f, 0.4f, 0.3f};
  OptionsBuffer buffer;
  ngramspec_sampling_options* o = sampling_options(&buffer);
  ngramspec_sampler* sampler = NULL;
  ngramspec_token next = 99;
  size_t accepted = 99;
  uint64_t position = 0;

  EXPECT(defaults.struct_size == sizeof(ngramspec_sampling_options) && defaults.temperature == 0.0f);
  CHECK(ngramspec_sampler_create(&defaults, 4, &sampler));
  ngramspec_sampler_free(sampler);

  /* top_k = 1 read: whatever the draw, the most likely token */
  CHECK(ngramspec_sampler_create(o, 4, &sampler));
  for (position = 0; position < 16; ++position) {
    CHECK(ngramspec_sampler_verify_chain(sampler, logits, 4, position, NULL, 0, NULL, NULL, NULL, 0, &accepted,
                                         &next));
    EXPECT(accepted == 0 && next == 1);
  }
  /* the options replaced through set_options too */
  o->top_k = 0;
  o->temperature = 0.0f;
  CHECK(ngramspec_sampler_set_options(sampler, o));
  ngramspec_sampler_free(sampler);

  o = sampling_options(&buffer);
  o->temperature = -1.0f;
  EXPECT_REFUSED(ngramspec_sampler_create(o, 4, &sampler), "temperature");
  o = sampling_options(&buffer);
  o->top_p = 2.0f;
  EXPECT_REFUSED(ngramspec_sampler_create(o, 4, &sampler), "top_p");
  o = sampling_options(&buffer);
  o->min_p = 1.0f;
  EXPECT_REFUSED(ngramspec_sampler_create(o, 4, &sampler), "min_p");
  o = sampling_options(&buffer);
  o->mode = 7;
  EXPECT_REFUSED(ngramspec_sampler_create(o, 4, &sampler), "mode = 7");
  return 0;
}
#endif

int main(void) {
  EXPECT(ngramspec_version_number() >= NGRAMSPEC_VERSION_NUMBER);
  if (tree_config_of_this_version() != 0) return 1;
#if OLD_SAMPLING_OPTIONS
  if (sampling_options_of_this_version() != 0) return 1;
#endif
  printf("%s: ngramspec_tree_config version %d (%zu bytes)%s read by library %s\n", NGRAMSPEC_OLD_HEADER,
         OLD_TREE_VERSION, sizeof(ngramspec_tree_config),
         OLD_SAMPLING_OPTIONS ? " and ngramspec_sampling_options" : "", ngramspec_version_string());
  return 0;
}
