/* ngramspec: n-gram speculative decoding, the C ABI.
 *
 * One stable binary boundary for engines written in C, Rust, Go, Python (ctypes) and anything else
 * that calls C. Plain C11; every symbol starts with ngramspec_ / NGRAMSPEC_.
 *
 * Conventions
 * - Objects are opaque handles made by *_create and released by *_free (a corpus file: *_open and
 *   *_close). Passing NULL to *_free or *_close does nothing; using a handle after freeing it (or
 *   freeing it twice) is undefined.
 * - Every call that can fail returns an ngramspec_status. On failure nothing was changed, and
 *   ngramspec_last_error() returns a message naming what was wrong and the value (the argument, the
 *   size, the sequence id), valid on the calling thread until its next failing call.
 * - No C++ exception crosses this boundary and no bad argument aborts: NULL handles and pointers,
 *   sizes that disagree and unknown ids are reported as NGRAMSPEC_ERROR_INVALID_ARGUMENT.
 * - Paths are NUL-terminated byte strings, passed to the operating system as they are.
 * - Tokens are uint32_t arrays with explicit lengths; outputs go to caller-owned arrays whose
 *   capacity is passed in, and counts come back through pointers. A length or capacity whose
 *   bytes exceed PTRDIFF_MAX (the largest array there can be; e.g. SIZE_MAX, or SIZE_MAX / 4 + 1
 *   tokens, whose byte size wraps) is refused as NGRAMSPEC_ERROR_INVALID_ARGUMENT naming the
 *   argument and the value, before any element is read.
 * - Sizes chosen at creation beyond a documented maximum, or beyond the machine's memory, are
 *   refused up front naming the value and the limit; an allocation that fails anyway is
 *   NGRAMSPEC_ERROR_OUT_OF_MEMORY with a message naming what was being made.
 * - Hot calls (update, predict, propose, accept) allocate nothing once warm.
 * - Thread safety is that of the C++ classes: a drafter or batch speculator is driven by one thread
 *   at a time; a corpus takes drafts from any number of threads while one appends.
 *
 * Sections: the stable API below; the EXPERIMENTAL section at the end may change between minor
 * versions.
 */
#ifndef NGRAMSPEC_NGRAMSPEC_H
#define NGRAMSPEC_NGRAMSPEC_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#if defined(NGRAMSPEC_BUILDING_C_API)
#define NGRAMSPEC_API __declspec(dllexport)
#else
#define NGRAMSPEC_API __declspec(dllimport)
#endif
#elif defined(__GNUC__) || defined(__clang__)
#define NGRAMSPEC_API __attribute__((visibility("default")))
#else
#define NGRAMSPEC_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Version ---------------------------------------------------------------------------------- */

#define NGRAMSPEC_VERSION_MAJOR 0
#define NGRAMSPEC_VERSION_MINOR 3
#define NGRAMSPEC_VERSION_PATCH 0
/* MAJOR * 10000 + MINOR * 100 + PATCH */
#define NGRAMSPEC_VERSION_NUMBER (NGRAMSPEC_VERSION_MAJOR * 10000 + NGRAMSPEC_VERSION_MINOR * 100 + NGRAMSPEC_VERSION_PATCH)

/* The version of the library linked at run time, as NGRAMSPEC_VERSION_NUMBER computes it. */
NGRAMSPEC_API unsigned ngramspec_version_number(void);
/* "MAJOR.MINOR.PATCH" of the library linked at run time. */
NGRAMSPEC_API const char* ngramspec_version_string(void);

/* ---- Errors ----------------------------------------------------------------------------------- */

typedef enum ngramspec_status {
  NGRAMSPEC_OK = 0,
  NGRAMSPEC_ERROR_INVALID_ARGUMENT = 1, /* a NULL, a size, a value or an id that is wrong */
  NGRAMSPEC_ERROR_OUT_OF_MEMORY = 2,    /* an allocation failed (create, begin) */
  NGRAMSPEC_ERROR_INTERNAL = 3,         /* anything else; the message says what */
  NGRAMSPEC_ERROR_CORPUS_FILE = 4       /* a corpus file could not be read or written: missing, truncated,
                                           corrupted, of another format version or byte order, or the
                                           disk failed; the message names the file, the section and the
                                           problem (since 0.3) */
} ngramspec_status;

/* The status's name, e.g. "NGRAMSPEC_ERROR_INVALID_ARGUMENT"; "unknown status" for other values. */
NGRAMSPEC_API const char* ngramspec_status_name(ngramspec_status status);
/* The message of the calling thread's last failing call; "" when none has failed. */
NGRAMSPEC_API const char* ngramspec_last_error(void);

typedef uint32_t ngramspec_token;
typedef uint64_t ngramspec_sequence_id;

/* ---- SharedCorpus: earlier requests' outputs ---------------------------------------------------- */

typedef struct ngramspec_corpus ngramspec_corpus;

/* A corpus of at most max_bytes of memory (capacity: the largest power of two of tokens that fits).
 * NGRAMSPEC_ERROR_INVALID_ARGUMENT naming the value and the limit when max_bytes holds fewer than 256
 * tokens, is above what the largest corpus takes (2^28 tokens, SharedCorpus::max_bytes()), or the
 * capacity would take more than the machine's physical memory. */
NGRAMSPEC_API ngramspec_status ngramspec_corpus_create(size_t max_bytes, ngramspec_corpus** out);
NGRAMSPEC_API void ngramspec_corpus_free(ngramspec_corpus* corpus);
/* Appends one record (a finished request's output); evicts the oldest tokens beyond the capacity. */
NGRAMSPEC_API ngramspec_status ngramspec_corpus_append(ngramspec_corpus* corpus, const ngramspec_token* tokens,
                                                       size_t count);
NGRAMSPEC_API ngramspec_status ngramspec_corpus_clear(ngramspec_corpus* corpus);
/* Tokens held, records appended, capacity in tokens, bytes held; 0 for a NULL corpus. */
NGRAMSPEC_API size_t ngramspec_corpus_size(const ngramspec_corpus* corpus);
NGRAMSPEC_API uint64_t ngramspec_corpus_records(const ngramspec_corpus* corpus);
NGRAMSPEC_API size_t ngramspec_corpus_capacity_tokens(const ngramspec_corpus* corpus);
NGRAMSPEC_API size_t ngramspec_corpus_memory_bytes(const ngramspec_corpus* corpus);

/* Since 0.3. ngramspec_corpus_append with the record's stamp given (ngramspec_corpus_append stamps
 * it with the time now, in nanoseconds since the Unix epoch): any number that orders records in
 * time. Stamps only increase: one not above the last record's is raised to one more than it. */
NGRAMSPEC_API ngramspec_status ngramspec_corpus_append_stamped(ngramspec_corpus* corpus, const ngramspec_token* tokens,
                                                               size_t count, int64_t stamp);
/* Since 0.3. The stamp of the last record appended; 0 when none, or for a NULL corpus. */
NGRAMSPEC_API int64_t ngramspec_corpus_last_stamp(const ngramspec_corpus* corpus);
/* Since 0.3. Writes to `out` up to `room` tokens that followed the most recent occurrence in the
 * corpus of the longest suffix (up to 3 tokens) of context[0 .. n) (a sequence's last tokens, oldest
 * first; only the last 64 are read), their count to *count and the length of the match to
 * *match_length (NULL: not wanted; 0: no match). Finds nothing (*count = 0) while another thread
 * appends or clears. Allocates nothing. */
NGRAMSPEC_API ngramspec_status ngramspec_corpus_draft(const ngramspec_corpus* corpus, const ngramspec_token* context,
                                                      size_t n, ngramspec_token* out, size_t room, size_t* count,
                                                      size_t* match_length);
/* Since 0.3. Writes the records held, with their stamps, to a corpus file at `path`, replacing it
 * atomically (a temporary file beside it, renamed over it). Appends wait meanwhile; drafts go on.
 * NGRAMSPEC_ERROR_CORPUS_FILE when the disk fails. */
NGRAMSPEC_API ngramspec_status ngramspec_corpus_save(const ngramspec_corpus* corpus, const char* path);
/* Since 0.3. Replaces what the corpus holds with the records of the corpus file at `path` (the most
 * recent that fit its capacity), stamps kept. NGRAMSPEC_ERROR_CORPUS_FILE, the corpus unchanged, when
 * the file cannot be read. */
NGRAMSPEC_API ngramspec_status ngramspec_corpus_load(ngramspec_corpus* corpus, const char* path);

/* ---- Corpus files: a corpus mapped read-only (since 0.3) ---------------------------------------- */

/* A corpus file (written by ngramspec_corpus_save or the ngramspec-corpus tool) mapped read-only:
 * text built ahead of time, whose pages any number of processes share. Opening reads the header and
 * checks the file's structure, nothing more (microseconds, whatever its size); verify reads every
 * byte. Immutable: any number of threads may use it at once. POSIX only. */
typedef struct ngramspec_corpus_file ngramspec_corpus_file;

/* Maps the corpus file at `path`. NGRAMSPEC_ERROR_CORPUS_FILE when it cannot be opened or is not a
 * well-formed corpus file of this format version (the message names the file, the section and the
 * problem). */
NGRAMSPEC_API ngramspec_status ngramspec_corpus_file_open(const char* path, ngramspec_corpus_file** out);
/* Unmaps it; the drafters and batches that consult it must be freed first. */
NGRAMSPEC_API void ngramspec_corpus_file_close(ngramspec_corpus_file* file);
/* Checks every byte: each section's checksum, then the structure. NGRAMSPEC_ERROR_CORPUS_FILE naming
 * the section and what is wrong when the file was corrupted since it was written (drafts from such a
 * file may be wrong, but never read out of bounds). About a second per GiB. */
NGRAMSPEC_API ngramspec_status ngramspec_corpus_file_verify(const ngramspec_corpus_file* file);
/* Tokens held, records held, the file's size in bytes; 0 for a NULL file. */
NGRAMSPEC_API size_t ngramspec_corpus_file_size(const ngramspec_corpus_file* file);
NGRAMSPEC_API uint64_t ngramspec_corpus_file_records(const ngramspec_corpus_file* file);
NGRAMSPEC_API uint64_t ngramspec_corpus_file_bytes(const ngramspec_corpus_file* file);
/* Stamps of the oldest and the newest record; 0 when empty, or for a NULL file. */
NGRAMSPEC_API int64_t ngramspec_corpus_file_first_stamp(const ngramspec_corpus_file* file);
NGRAMSPEC_API int64_t ngramspec_corpus_file_last_stamp(const ngramspec_corpus_file* file);
/* As ngramspec_corpus_draft: what a live corpus holding the same records would draft. */
NGRAMSPEC_API ngramspec_status ngramspec_corpus_file_draft(const ngramspec_corpus_file* file,
                                                           const ngramspec_token* context, size_t n,
                                                           ngramspec_token* out, size_t room, size_t* count,
                                                           size_t* match_length);

/* Which corpus drafts when a live corpus and a corpus file both match a sequence's end (since 0.3).
 * The create functions take it as an int, so that any value a caller passes is well defined and a
 * value outside the enum is refused by name. */
typedef enum ngramspec_corpus_preference {
  NGRAMSPEC_PREFER_LONGER_MATCH = 0, /* the one whose match is longer; the live corpus on a tie */
  NGRAMSPEC_PREFER_LIVE = 1,         /* the live corpus whenever it drafts; the file otherwise */
  NGRAMSPEC_PREFER_FILE = 2          /* the file whenever it matches; the live corpus otherwise */
} ngramspec_corpus_preference;

/* ---- MatchDrafter: whole-context copies and n-gram counts (the default drafter) ------------------- */

typedef struct ngramspec_match_config {
  size_t cap;             /* most tokens the match index holds (default 8192) */
  size_t copy_min_match;  /* copy after a match of at least this many tokens (default 2) */
  size_t count_max_order; /* longest n-gram of the counts, 2..4 (default 3) */
  size_t count_window;    /* the counts slide over this many tokens; 0: the cap (default 2048) */
  double min_confidence;  /* the gate, in [0, 1) (default 0.03; 0: no gate) */
} ngramspec_match_config;

/* MatchConfig's defaults. */
NGRAMSPEC_API ngramspec_match_config ngramspec_match_config_default(void);

typedef struct ngramspec_match_drafter ngramspec_match_drafter;

/* A drafter with `config` (NULL: the defaults) that consults `corpus` when not NULL (the corpus must
 * outlive it). */
NGRAMSPEC_API ngramspec_status ngramspec_match_drafter_create(const ngramspec_match_config* config,
                                                              const ngramspec_corpus* corpus,
                                                              ngramspec_match_drafter** out);
/* Since 0.3. ngramspec_match_drafter_create that also consults the corpus file `file` when not NULL
 * (it must outlive the drafter), `preference` (an ngramspec_corpus_preference) choosing when both match. */
NGRAMSPEC_API ngramspec_status ngramspec_match_drafter_create_file(const ngramspec_match_config* config,
                                                                   const ngramspec_corpus* corpus,
                                                                   const ngramspec_corpus_file* file,
                                                                   int preference,
                                                                   ngramspec_match_drafter** out);
NGRAMSPEC_API void ngramspec_match_drafter_free(ngramspec_match_drafter* drafter);
/* Observes `count` tokens in order (a prompt, or the tokens a pass emitted). */
NGRAMSPEC_API ngramspec_status ngramspec_match_drafter_update(ngramspec_match_drafter* drafter,
                                                              const ngramspec_token* tokens, size_t count);
/* Writes up to `capacity` drafts to `out` and their count to *count; with `probabilities` (NULL:
 * none; else room for `capacity` floats), the estimated chance that drafts 0..j are all accepted.
 * Elements past *count (within `capacity`) may be overwritten. */
NGRAMSPEC_API ngramspec_status ngramspec_match_drafter_predict(const ngramspec_match_drafter* drafter,
                                                               ngramspec_token* out, size_t capacity,
                                                               float* probabilities, size_t* count);
NGRAMSPEC_API ngramspec_status ngramspec_match_drafter_reset(ngramspec_match_drafter* drafter);
NGRAMSPEC_API size_t ngramspec_match_drafter_memory_bytes(const ngramspec_match_drafter* drafter);

/* ---- NGramPredictor: windowed n-gram counts ----------------------------------------------------- */

typedef struct ngramspec_ngram_config {
  size_t min_order; /* shortest n-gram, counting the predicted token (default 2) */
  size_t max_order; /* longest n-gram (default 4) */
  size_t window;    /* sliding window of recent tokens (default 512) */
} ngramspec_ngram_config;

/* NGramConfig's defaults. */
NGRAMSPEC_API ngramspec_ngram_config ngramspec_ngram_config_default(void);

typedef struct ngramspec_ngram_predictor ngramspec_ngram_predictor;

/* A predictor with `config` (NULL: the defaults); the calls below work as the drafter's above. */
NGRAMSPEC_API ngramspec_status ngramspec_ngram_predictor_create(const ngramspec_ngram_config* config,
                                                                ngramspec_ngram_predictor** out);
NGRAMSPEC_API void ngramspec_ngram_predictor_free(ngramspec_ngram_predictor* predictor);
NGRAMSPEC_API ngramspec_status ngramspec_ngram_predictor_update(ngramspec_ngram_predictor* predictor,
                                                                const ngramspec_token* tokens, size_t count);
NGRAMSPEC_API ngramspec_status ngramspec_ngram_predictor_predict(const ngramspec_ngram_predictor* predictor,
                                                                 ngramspec_token* out, size_t capacity,
                                                                 float* probabilities, size_t* count);
NGRAMSPEC_API ngramspec_status ngramspec_ngram_predictor_reset(ngramspec_ngram_predictor* predictor);
NGRAMSPEC_API size_t ngramspec_ngram_predictor_memory_bytes(const ngramspec_ngram_predictor* predictor);

/* ---- BatchSpeculator: every running sequence of an engine --------------------------------------- */

/* The engine drives each sequence in passes: begin; then per pass propose, one batched forward,
 * accept; then finish or cancel.
 * - The prefill is a pass of its own: for a sequence with no output yet, propose gives no drafts
 *   (offsets[i] == offsets[i + 1]), the engine feeds its whole prompt, and accept takes exactly one
 *   model token for it, the token after the prompt.
 * - After that, each pass feeds a sequence's last emitted token, then its drafts: the last emitted
 *   token is not in the KV cache yet (the cache holds the prompt and every emitted token but the
 *   last), so the model tokens for a sequence are one more than its drafts verified.
 * - accept's offsets run from offsets[0] == 0 to offsets[n_ids] == n_model_tokens, never decreasing. */

typedef struct ngramspec_batch_config {
  size_t max_sequences;     /* sequences running at once; one drafter each, made at creation (default 64) */
  size_t max_pass_tokens;   /* most tokens one verify pass carries; 0: no limit (default 0) */
  size_t max_record_tokens; /* output tokens of a sequence kept for the corpus, up to 2^28 (default 8192) */
  const char* cost;         /* the verify cost, "flat", "knee:N" or "table:T=C,..." (copied; VerifyCost::parse);
                               NULL: none (default) */
  int default_drafter;      /* nonzero: MatchDrafter's defaults, without the gate when there is a cost
                               (default 1); zero: `drafter` below */
  ngramspec_match_config drafter;
} ngramspec_batch_config;

NGRAMSPEC_API ngramspec_batch_config ngramspec_batch_config_default(void);

/* A sequence's limits (DecodeOptions). */
typedef struct ngramspec_sequence_options {
  size_t max_new_tokens;                /* default 128 */
  const ngramspec_token* stop_tokens;   /* copied by begin; NULL when n_stop_tokens is 0 */
  size_t n_stop_tokens;
  size_t max_context;                   /* prompt + output; 0: no limit (default 0) */
  int speculate;                        /* zero: this sequence drafts nothing (default 1) */
  size_t max_drafts;                    /* most drafts it sends in one pass, up to 1024 (default 4) */
} ngramspec_sequence_options;

NGRAMSPEC_API ngramspec_sequence_options ngramspec_sequence_options_default(void);

/* Why a sequence finished. */
typedef enum ngramspec_stop_reason {
  NGRAMSPEC_STOP_MAX_NEW_TOKENS = 0,
  NGRAMSPEC_STOP_TOKEN = 1,
  NGRAMSPEC_STOP_MAX_CONTEXT = 2
} ngramspec_stop_reason;

/* What one pass decided for one sequence. */
typedef struct ngramspec_step {
  size_t emitted;     /* tokens to emit: the first `emitted` of its model tokens */
  size_t accepted;    /* drafts accepted */
  size_t rollback_to; /* the length to roll its KV cache back to, when discarded > 0 */
  size_t discarded;   /* positions the pass wrote beyond rollback_to */
  int finished;       /* nonzero: the sequence is finished; finish or cancel it */
  int stop_reason;    /* an ngramspec_stop_reason, when finished */
} ngramspec_step;

typedef struct ngramspec_batch ngramspec_batch;

/* A batch speculator with `config` (NULL: the defaults); `corpus` (NULL: none) receives finished
 * outputs and is consulted by the drafters; it must outlive the batch. */
NGRAMSPEC_API ngramspec_status ngramspec_batch_create(const ngramspec_batch_config* config, ngramspec_corpus* corpus,
                                                      ngramspec_batch** out);
/* Since 0.3. ngramspec_batch_create whose drafters also consult the corpus file `file` when not NULL
 * (it must outlive the batch), `preference` (an ngramspec_corpus_preference) choosing when both match.
 * Finished outputs go to
 * `corpus` alone: a corpus file is read-only. */
NGRAMSPEC_API ngramspec_status ngramspec_batch_create_file(const ngramspec_batch_config* config,
                                                           ngramspec_corpus* corpus, const ngramspec_corpus_file* file,
                                                           int preference, ngramspec_batch** out);
NGRAMSPEC_API void ngramspec_batch_free(ngramspec_batch* batch);
/* Starts sequence `id` after the prompt (options NULL: the defaults); its drafter reads the prompt.
 * A sequence that may emit nothing (max_new_tokens 0, or a prompt of max_context tokens) starts
 * finished: finish or cancel it without stepping it. */
NGRAMSPEC_API ngramspec_status ngramspec_batch_begin(ngramspec_batch* batch, ngramspec_sequence_id id,
                                                     const ngramspec_token* prompt, size_t prompt_length,
                                                     const ngramspec_sequence_options* options);
/* Drafts for the pass of the sequences ids[0 .. n_ids): ids[i]'s drafts go to
 * drafts[offsets[i] .. offsets[i + 1]) (offsets has n_ids + 1 elements); the total, at most
 * drafts_capacity, to *n_drafts. `extra_tokens`: what else the pass carries (prefills). The ids
 * are distinct running sequences, none finished (so at most max_sequences of them); so are accept's. */
NGRAMSPEC_API ngramspec_status ngramspec_batch_propose(ngramspec_batch* batch, const ngramspec_sequence_id* ids,
                                                       size_t n_ids, ngramspec_token* drafts,
                                                       size_t drafts_capacity, size_t* offsets, size_t extra_tokens,
                                                       size_t* n_drafts);
/* Decides the pass: model_tokens[offsets[i] .. offsets[i + 1]) are the model's tokens for ids[i]
 * (one more than the drafts verified; one for a sequence's prefill); writes steps[0 .. n_ids).
 * offsets has n_ids + 1 elements, offsets[0] is 0 and offsets[n_ids] is n_model_tokens: every model
 * token belongs to one sequence. */
NGRAMSPEC_API ngramspec_status ngramspec_batch_accept(ngramspec_batch* batch, const ngramspec_sequence_id* ids,
                                                      size_t n_ids, const ngramspec_token* model_tokens,
                                                      size_t n_model_tokens, const size_t* offsets,
                                                      ngramspec_step* steps);
/* Ends sequence `id`: finish appends its output to the corpus, cancel does not. */
NGRAMSPEC_API ngramspec_status ngramspec_batch_finish(ngramspec_batch* batch, ngramspec_sequence_id id);
NGRAMSPEC_API ngramspec_status ngramspec_batch_cancel(ngramspec_batch* batch, ngramspec_sequence_id id);
/* Whether `id` is running (1) or not (0); 0 for a NULL batch. */
NGRAMSPEC_API int ngramspec_batch_contains(const ngramspec_batch* batch, ngramspec_sequence_id id);
/* Sequences running; bytes held; 0 for a NULL batch. */
NGRAMSPEC_API size_t ngramspec_batch_size(const ngramspec_batch* batch);
NGRAMSPEC_API size_t ngramspec_batch_memory_bytes(const ngramspec_batch* batch);

/* ---- EXPERIMENTAL: may change between minor versions -------------------------------------------- */

/* Totals of a batch: propose calls, drafts verified, drafts accepted, tokens emitted. */
typedef struct ngramspec_batch_stats {
  uint64_t proposals;
  uint64_t drafted;
  uint64_t accepted;
  uint64_t emitted;
} ngramspec_batch_stats;

NGRAMSPEC_API ngramspec_status ngramspec_batch_stats_get(const ngramspec_batch* batch, ngramspec_batch_stats* out);

/* Tree batches (since 0.3): drafters that draft trees (TreeDrafter), several candidate
 * continuations a sequence, for a model that verifies a tree in one pass (each token attending only
 * to the cached sequence and its ancestors in the pass). The loop is the chain loop's, with
 * ngramspec_batch_propose_trees and ngramspec_batch_accept_trees:
 * - propose_trees writes sequence i's nodes to tokens[offsets[i] .. offsets[i + 1]) and their
 *   parents, tree-local, to the same range of parents: NGRAMSPEC_TREE_ROOT for a child of the root,
 *   else the index of the parent node in the sequence's range (always an earlier one).
 * - The engine's pass for sequence i feeds its last emitted token (entry 0, the root) at its cache
 *   length, then node j as entry j + 1 under entry parents[offsets[i] + j] + 1 (0: the root). For a
 *   sequence with no output yet (no nodes), its prompt: the prefill, as for chains.
 * - accept_trees takes the model's token after every entry (n_model_tokens: each sequence's entries,
 *   the first k + 1 verifying its first k nodes), and optionally its top ngramspec_batch_top_k()
 *   tokens after every entry, best first (top[e * k ..] for model_tokens[e]); it writes steps and,
 *   from kept[offsets[i]], the entries sequence i keeps: the emitted tokens are
 *   model_tokens[offsets[i] + kept[offsets[i] + j]] for j < steps[i].emitted, and the KV entry
 *   kept[offsets[i] + j] goes to position cache length + j. When they are 0, 1, ... the KV cache is
 *   rolled back to rollback_to instead (when discarded > 0). */

/* The parent of a tree node that follows the sequence itself. */
enum { NGRAMSPEC_TREE_ROOT = -1 };

/* A tree batch's drafters (TreeConfig). A versioned struct: struct_size is its size, set by
 * ngramspec_tree_config_default; later versions add fields at the end. */
typedef struct ngramspec_tree_config {
  size_t struct_size;     /* sizeof(ngramspec_tree_config) */
  size_t successor_slots; /* continuations kept per context order, a power of two (default 4096) */
  size_t max_children;    /* most children a node offers, 1..16 (default 8) */
  size_t vocab_size;      /* the model's vocabulary, to recycle its top-k (0: no recycling; default 0) */
  size_t top_k;           /* top tokens kept after each token, 1..32 (default 8) */
  int shared_top_k;       /* nonzero: one top-k table (vocab_size x top_k tokens) that every drafter of the
                             batch shares and learns from (default 1); zero: one per drafter */
  int carry_over;         /* nonzero: a drafter keeps what it learnt for its next sequence (default 0) */
} ngramspec_tree_config;

/* TreeConfig's defaults, with struct_size set. */
NGRAMSPEC_API ngramspec_tree_config ngramspec_tree_config_default(void);
/* A batch speculator (as ngramspec_batch_create) whose drafters draft trees with `tree` (NULL: the
 * defaults): their chain (spine) is config's MatchDrafter. Every call of ngramspec_batch_* works on
 * it; propose and accept step it with chains (the spine alone). */
NGRAMSPEC_API ngramspec_status ngramspec_batch_create_tree(const ngramspec_batch_config* config,
                                                           const ngramspec_tree_config* tree,
                                                           ngramspec_corpus* corpus, ngramspec_batch** out);
/* Top tokens per pass entry that accept_trees takes (0: none; also for a chain batch or NULL). */
NGRAMSPEC_API size_t ngramspec_batch_top_k(const ngramspec_batch* batch);
/* Trees for the pass of ids[0 .. n_ids), as above; tokens and parents have room for `capacity` nodes
 * (a cap on the total, as drafts_capacity is), offsets for n_ids + 1; the total to *n_nodes. */
NGRAMSPEC_API ngramspec_status ngramspec_batch_propose_trees(ngramspec_batch* batch, const ngramspec_sequence_id* ids,
                                                             size_t n_ids, ngramspec_token* tokens, int32_t* parents,
                                                             size_t capacity, size_t* offsets, size_t extra_tokens,
                                                             size_t* n_nodes);
/* Decides the tree pass, as above: offsets as ngramspec_batch_accept's; top NULL with n_top 0 (none)
 * or n_top = n_model_tokens x ngramspec_batch_top_k(), its tokens and the model tokens below the
 * top-k table's vocab_size; kept has room for kept_capacity >= n_model_tokens entries. */
NGRAMSPEC_API ngramspec_status ngramspec_batch_accept_trees(ngramspec_batch* batch, const ngramspec_sequence_id* ids,
                                                            size_t n_ids, const ngramspec_token* model_tokens,
                                                            size_t n_model_tokens, const size_t* offsets,
                                                            const ngramspec_token* top, size_t n_top,
                                                            ngramspec_step* steps, size_t* kept,
                                                            size_t kept_capacity);

#ifdef __cplusplus
}
#endif

#endif /* NGRAMSPEC_NGRAMSPEC_H */
