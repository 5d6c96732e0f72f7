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
 * corpus of the last 3 tokens of context[0 .. n) (else its last 2, else its last 1; the context is a
 * sequence's last tokens, oldest first), their count to *count and the length of the match to
 * *match_length (NULL: not wanted; 0: no match): how far that occurrence matches the context
 * backwards within its record, up to 64 tokens (only the context's last 64 are read), so it can be
 * more than 3. Finds nothing (*count = 0) while another thread appends or clears. Allocates nothing. */
NGRAMSPEC_API ngramspec_status ngramspec_corpus_draft(const ngramspec_corpus* corpus, const ngramspec_token* context,
                                                      size_t n, ngramspec_token* out, size_t room, size_t* count,
                                                      size_t* match_length);
/* Since 0.3. Writes the records held, with their stamps, to a corpus file at `path`, replacing it
 * atomically (a temporary file beside it, renamed over it). Appends wait meanwhile; drafts go on.
 * NGRAMSPEC_ERROR_CORPUS_FILE when the disk fails. */
NGRAMSPEC_API ngramspec_status ngramspec_corpus_save(const ngramspec_corpus* corpus, const char* path);
/* Since 0.3. Replaces what the corpus holds with the records of the corpus file at `path` (the most
 * recent that fit its capacity), stamps kept. NGRAMSPEC_ERROR_CORPUS_FILE, the corpus unchanged, when
 * the file cannot be read, when a section fails its checksum (every byte is checked first, so a file
 * damaged since it was written is refused by name and a later save cannot write its damage out under
 * fresh checksums), or when its records, or the tokens of the records kept, are not what
 * ngramspec_corpus_file_verify accepts (the message names the record or the token and the value). */
NGRAMSPEC_API ngramspec_status ngramspec_corpus_load(ngramspec_corpus* corpus, const char* path);
/* Since 0.3. ngramspec_corpus_load without the checksums (the header, the records and the
 * tokens kept are checked, in O(records + tokens kept)), for files known good: one this process just wrote, say. */
NGRAMSPEC_API ngramspec_status ngramspec_corpus_load_trusted(ngramspec_corpus* corpus, const char* path);

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
/* Every section's checksum alone, every byte read once (what ngramspec_corpus_load checks):
 * NGRAMSPEC_ERROR_CORPUS_FILE naming the section whose checksum does not match. */
NGRAMSPEC_API ngramspec_status ngramspec_corpus_file_verify_checksums(const ngramspec_corpus_file* file);
/* The vocabulary the file records (format version 2, docs/CORPUS_FORMAT.md): its size and the
 * tokenizer fingerprint its writer set; 0 when unknown (a version 1 file, or not set), or for NULL. */
NGRAMSPEC_API uint64_t ngramspec_corpus_file_vocab_size(const ngramspec_corpus_file* file);
NGRAMSPEC_API uint64_t ngramspec_corpus_file_tokenizer_fingerprint(const ngramspec_corpus_file* file);
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
  union {
    size_t index_capacity; /* most tokens the match index holds: the sequence's first ones (default 8192) */
    size_t cap;            /* the former name of index_capacity, the same field */
  };
  size_t copy_min_match;  /* copy after a match of at least this many tokens (default 2) */
  size_t count_max_order; /* longest n-gram of the counts, 2..4 (default 3) */
  size_t count_window;    /* the counts slide over this many tokens; 0: index_capacity (default 2048) */
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
/* Since 0.3. ngramspec_match_drafter_create_file for a model of `vocab_size` tokens (0: unknown) and
 * tokenizer fingerprint `tokenizer_fingerprint` (0: unset) (MatchConfig::vocab_size,
 * tokenizer_fingerprint; ngramspec_match_config has no room for them): drafts are cut at their first
 * token not below vocab_size, the tokens cut counted (ngramspec_match_drafter_out_of_vocabulary), and
 * a corpus file recording another vocabulary size or fingerprint is refused,
 * NGRAMSPEC_ERROR_CORPUS_FILE naming the file and both values. vocab_size at most 2^32. */
NGRAMSPEC_API ngramspec_status ngramspec_match_drafter_create_vocab(const ngramspec_match_config* config,
                                                                    const ngramspec_corpus* corpus,
                                                                    const ngramspec_corpus_file* file, int preference,
                                                                    uint64_t vocab_size, uint64_t tokenizer_fingerprint,
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
/* Since 0.3. Begins a new sequence of the same workload (an engine slot's next request): forgets the
 * sequence as ngramspec_match_drafter_reset does, but keeps how the gate's estimates have fared on
 * the text served (MatchDrafter::restart). */
NGRAMSPEC_API ngramspec_status ngramspec_match_drafter_restart(ngramspec_match_drafter* drafter);
NGRAMSPEC_API size_t ngramspec_match_drafter_memory_bytes(const ngramspec_match_drafter* drafter);
/* Since 0.3. Draft tokens dropped since creation for lying outside the vocabulary (the first such
 * token of a draft and every one after it); 0 for NULL. */
NGRAMSPEC_API uint64_t ngramspec_match_drafter_out_of_vocabulary(const ngramspec_match_drafter* drafter);

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
  size_t max_sequences;     /* sequences running at once, 1..2^20; one drafter each, made at creation (default 64) */
  size_t max_pass_tokens;   /* most tokens one verify pass carries; 0: no limit (default 0) */
  size_t max_record_tokens; /* output tokens of a sequence kept for the corpus, up to 2^28 (default 8192) */
  const char* cost;         /* the verify cost, "flat", "knee:N" or "table:T=C,..." (copied; VerifyCost::parse);
                               "learn" or "learn:SPEC": learned from the passes served, SPEC (any of the
                               above) its prior (since 0.3; see "Learned verify costs" below);
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
/* Since 0.3. ngramspec_batch_create_file whose drafters know the model's vocabulary, as
 * ngramspec_match_drafter_create_vocab's do (config's drafter settings otherwise; ngramspec_batch_config
 * has no room for them): out-of-vocabulary drafts dropped and counted (ngramspec_batch_stats), a corpus
 * file of another vocabulary refused by name. */
NGRAMSPEC_API ngramspec_status ngramspec_batch_create_vocab(const ngramspec_batch_config* config,
                                                            ngramspec_corpus* corpus, const ngramspec_corpus_file* file,
                                                            int preference, uint64_t vocab_size,
                                                            uint64_t tokenizer_fingerprint, ngramspec_batch** out);
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
/* Sequences running; bytes held (the speculator, its drafters and tables, and the scratch its calls keep,
 * ngramspec_batch_propose_trees_q's per-sequence distributions among them); 0 for a NULL batch. */
NGRAMSPEC_API size_t ngramspec_batch_size(const ngramspec_batch* batch);
NGRAMSPEC_API size_t ngramspec_batch_memory_bytes(const ngramspec_batch* batch);

/* ---- EXPERIMENTAL: may change between minor versions -------------------------------------------- */

/* Totals of a batch: propose calls, drafts verified, drafts accepted, tokens emitted, and draft tokens
 * dropped for lying outside the model's vocabulary (each such token and every one after it in its
 * draft; ngramspec_batch_create_vocab). A struct that grows at the end, with no struct_size of its own:
 * the caller passes its size. The versions end at: 1. emitted (32); 2. out_of_vocabulary (40, since 0.3). */
typedef struct ngramspec_batch_stats {
  uint64_t proposals;
  uint64_t drafted;
  uint64_t accepted;
  uint64_t emitted;
  /* Version 2: */
  uint64_t out_of_vocabulary;
} ngramspec_batch_stats;

/* Since 0.3. Writes the fields of the version of ngramspec_batch_stats whose size is out_size (32 or 40
 * with this header: sizeof(ngramspec_batch_stats)) to `out`, and not one byte past out_size. Any other
 * out_size is NGRAMSPEC_ERROR_INVALID_ARGUMENT naming it and the sizes written, nothing written. */
NGRAMSPEC_API ngramspec_status ngramspec_batch_stats_get_sized(const ngramspec_batch* batch, ngramspec_batch_stats* out,
                                                              size_t out_size);
/* Writes the first version's fields alone (proposals .. emitted, 32 bytes), the room that every program
 * built against any header has: programs built before ngramspec_batch_stats_get_sized call this symbol with
 * a struct of 32 bytes or of 40, which it cannot tell apart (one of 40 finds its out_of_vocabulary
 * unwritten). Compiled against this header, a call ngramspec_batch_stats_get(batch, out) is the macro below,
 * ngramspec_batch_stats_get_sized(batch, out, sizeof(ngramspec_batch_stats)), every field written.
 * Bindings that call functions by name call ngramspec_batch_stats_get_sized with their struct's size. */
NGRAMSPEC_API ngramspec_status ngramspec_batch_stats_get(const ngramspec_batch* batch, ngramspec_batch_stats* out);
#define ngramspec_batch_stats_get(batch, out) \
  ngramspec_batch_stats_get_sized((batch), (out), sizeof(ngramspec_batch_stats))

/* Tree batches (since 0.3): drafters that draft trees (TreeDrafter), several candidate
 * continuations a sequence, for a model that verifies a tree in one pass (each token attending only
 * to the cached sequence and its ancestors in the pass). The loop is the chain loop's, with
 * ngramspec_batch_propose_trees and ngramspec_batch_accept_trees:
 * - propose_trees writes sequence i's nodes to tokens[offsets[i] .. offsets[i + 1]) and their
 *   parents, tree-local, to the same range of parents: NGRAMSPEC_TREE_ROOT for a child of the root,
 *   else the index of the parent node in the sequence's range (always an earlier one). At most its
 *   max_drafts nodes, fewer near the end of its max_context: the pass writes a KV entry per node, so
 *   a tree has no more nodes than a chain there could carry, and its entries end below position
 *   max_context - 1 (a KV cache of max_context entries holds every pass).
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
 * ngramspec_tree_config_init; later versions add fields at the end. struct_size says which version a
 * struct is: the sizeof that a program built against that version's header sets, or the end of that
 * version's last field. The fields of that version are read, those after it (and its tail padding, where
 * a later version may have put a field) keep their defaults; any other struct_size is
 * NGRAMSPEC_ERROR_INVALID_ARGUMENT naming it and the sizes read. The versions end at (bytes with an 8-byte
 * size_t): 1. carry_over (48); 2. enrich_counts (52, sizeof 56); 3. draw_seed (64; its draw_recycled lies
 * in version 2's tail padding); 4. recycled_history (68, sizeof 72). */
typedef struct ngramspec_tree_config {
  size_t struct_size;     /* sizeof(ngramspec_tree_config) */
  size_t successor_slots; /* continuations kept per context order, a power of two (default 4096) */
  size_t max_children;    /* most children a node offers, 1..16 (default 8) */
  size_t vocab_size;      /* the model's vocabulary, to recycle its top-k, up to 2^24 (0: no recycling;
                             default 0); it also bounds the spine's drafts */
  size_t top_k;           /* top tokens kept after each token, 1..32 (default 8) */
  int shared_top_k;       /* nonzero: one top-k table (vocab_size x top_k tokens) that every drafter of the
                             batch shares and learns from (default 1); zero: one per drafter */
  int carry_over;         /* nonzero: a drafter keeps what it learnt for its next sequence (default 0) */
  /* Version 2: */
  int enrich_counts;      /* nonzero: the model's top-1 after each token also counts as text (default 0) */
  /* Version 3: */
  int draw_recycled;      /* nonzero: the recycled top-k candidates are drawn from the probabilities that
                             ngramspec_batch_accept_trees_q records, for rejection verification; the
                             top-k tables then keep probabilities (default 0) */
  uint64_t draw_seed;     /* the draws' seed (default 0); they also number every tree a drafter has built
                             and are keyed by how many sequences the batch began before, so sequences
                             that share it, side by side or one after another, still draw afresh */
  /* Version 4: */
  float recycled_history; /* with draw_recycled: what a top-k row keeps of the distributions recorded
                             before when a new one is recorded after its token, in [0, 1) (default 0.6;
                             0: the last one alone; TopKTable::history_weight) */
} ngramspec_tree_config;

/* Sets the struct `config` of struct_size bytes to TreeConfig's defaults, as the version whose size
 * is struct_size has them (a version's sizeof or the end of its last field, as above; its tail padding, up to
 * struct_size, zeroed), with config->struct_size = struct_size, and writes not one byte past struct_size. Call
 * it as ngramspec_tree_config_init(&config, sizeof config): a program built against this header then keeps
 * working with every later library, whose struct may be larger. NGRAMSPEC_ERROR_INVALID_ARGUMENT, nothing
 * written, for a NULL config or a struct_size of no version (naming it and the sizes read). */
NGRAMSPEC_API ngramspec_status ngramspec_tree_config_init(ngramspec_tree_config* config, size_t struct_size);
/* TreeConfig's defaults, with struct_size set, returned by value: the struct of the library linked at run
 * time, which the caller's is only when the program was built against the library's own header. A later
 * library's struct, grown, is written past the end of a program's (and its struct_size claims bytes that the
 * program does not have): it serves source written before ngramspec_tree_config_init, in a program always
 * rebuilt with the library; any program that may run with a later library calls ngramspec_tree_config_init. */
NGRAMSPEC_API ngramspec_tree_config ngramspec_tree_config_default(void);
/* A batch speculator (as ngramspec_batch_create) whose drafters draft trees with `tree` (NULL: the
 * defaults): their chain (spine) is config's MatchDrafter. Every call of ngramspec_batch_* works on
 * it; propose and accept step it with chains (the spine alone). Its top-k tables take
 * vocab_size x (4 x top_k + 1) bytes each, vocab_size x (8 x top_k + 1) with draw_recycled (one, or
 * max_sequences with shared_top_k 0): more than
 * the machine's memory is NGRAMSPEC_ERROR_INVALID_ARGUMENT, an allocation that fails
 * NGRAMSPEC_ERROR_OUT_OF_MEMORY. */
NGRAMSPEC_API ngramspec_status ngramspec_batch_create_tree(const ngramspec_batch_config* config,
                                                           const ngramspec_tree_config* tree,
                                                           ngramspec_corpus* corpus, ngramspec_batch** out);
/* ngramspec_batch_create_tree whose drafters also consult the corpus file `file` when not NULL (it must
 * outlive the batch; `preference` an ngramspec_corpus_preference) and know the model's vocabulary as
 * ngramspec_batch_create_vocab's do: spine drafts cut at their first token not below vocab_size, counted
 * in ngramspec_batch_stats, a corpus file of another vocabulary refused by name. vocab_size 0 takes
 * tree->vocab_size (the recycled top-k's vocabulary, the model's too); the two may not disagree. */
NGRAMSPEC_API ngramspec_status ngramspec_batch_create_tree_file(const ngramspec_batch_config* config,
                                                                const ngramspec_tree_config* tree,
                                                                ngramspec_corpus* corpus,
                                                                const ngramspec_corpus_file* file, int preference,
                                                                uint64_t vocab_size, uint64_t tokenizer_fingerprint,
                                                                ngramspec_batch** out);
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
 * top-k table's vocab_size, each row listing a token once (with probabilities, up to the row's first
 * probability 0); kept has room for kept_capacity >= n_model_tokens entries. */
NGRAMSPEC_API ngramspec_status ngramspec_batch_accept_trees(ngramspec_batch* batch, const ngramspec_sequence_id* ids,
                                                            size_t n_ids, const ngramspec_token* model_tokens,
                                                            size_t n_model_tokens, const size_t* offsets,
                                                            const ngramspec_token* top, size_t n_top,
                                                            ngramspec_step* steps, size_t* kept,
                                                            size_t kept_capacity);

/* Tree batches that draw (tree->draw_recycled), for an engine that verifies each tree by rejection
 * sampling (docs/SAMPLING.md, "Engines that verify"): ngramspec_batch_propose_trees_q gives each node's
 * distribution q with the trees, ngramspec_sampler_verify_tree (or the engine's own sampler, row by row)
 * verifies each sequence's tree with it, and ngramspec_batch_accept_trees_q records the probabilities of
 * the model's top tokens after every entry, which the next trees' drawn candidates are drawn from.
 *
 * ngramspec_batch_propose_trees, and what each node was drawn from, in ngramspec_sampler_verify_chain's
 * layout over the whole call: node n (of the *n_nodes, sequence by sequence) has the support
 * q_tokens[q_offsets[n] .. q_offsets[n + 1]) with the probabilities at the same indices of
 * q_probabilities, empty for a chosen node (one-hot); q_offsets has room for capacity + 1 entries and
 * gets *n_nodes + 1 of them, q_tokens and q_probabilities room for q_capacity entries, which must be at
 * least capacity x ngramspec_batch_top_k() (a drawn node's support is the rest of a top-k row); *n_q gets
 * the support entries written. When any node of the pass was drawn, each tree is cut by its drafter's
 * estimates alone (BatchSpeculator::propose_trees with q). NGRAMSPEC_ERROR_INVALID_ARGUMENT naming the
 * argument and its value, nothing written, as ngramspec_batch_propose_trees, and for a q buffer too small.
 * Allocates nothing once warm. */
NGRAMSPEC_API ngramspec_status ngramspec_batch_propose_trees_q(
    ngramspec_batch* batch, const ngramspec_sequence_id* ids, size_t n_ids, ngramspec_token* tokens, int32_t* parents,
    size_t capacity, size_t* offsets, size_t extra_tokens, size_t* n_nodes, size_t* q_offsets,
    ngramspec_token* q_tokens, float* q_probabilities, size_t q_capacity, size_t* n_q);
/* ngramspec_batch_accept_trees, and top_probabilities: n_top floats, the probability of each token of top
 * under the distribution the engine sampled that entry's token from (the sampling distribution p, after
 * temperature and filters), best first; a row with fewer tokens left by the filters ends in probability 0.
 * Recorded into the drafters' top-k tables, so that drawn candidates are drawn from p. Besides what
 * ngramspec_batch_accept_trees refuses, NGRAMSPEC_ERROR_INVALID_ARGUMENT, nothing changed, naming the
 * sequence and the value for a probability outside [0, 1], a row whose first probability is 0, or a batch
 * made without draw_recycled (its tables keep no probabilities). */
NGRAMSPEC_API ngramspec_status ngramspec_batch_accept_trees_q(ngramspec_batch* batch, const ngramspec_sequence_id* ids,
                                                              size_t n_ids, const ngramspec_token* model_tokens,
                                                              size_t n_model_tokens, const size_t* offsets,
                                                              const ngramspec_token* top,
                                                              const float* top_probabilities, size_t n_top,
                                                              ngramspec_step* steps, size_t* kept,
                                                              size_t kept_capacity);

/* Verify costs and the draft planner, for an engine that sizes one sequence's drafts itself (since 0.3):
 * what BatchSpeculator's propose does for each pass when its config has a cost, offered to an engine
 * that runs its own loop (a candidate generator, a decoder driving one sequence). */
typedef struct ngramspec_verify_cost ngramspec_verify_cost;

/* A verify cost read from `spec` ("flat", "knee:N" or "table:T=C,...", as ngramspec_batch_config::cost;
 * VerifyCost::parse). NGRAMSPEC_ERROR_INVALID_ARGUMENT naming the spec and what is wrong with it ("learn" is
 * no fixed curve: see ngramspec_learned_cost_create). */
NGRAMSPEC_API ngramspec_status ngramspec_verify_cost_create(const char* spec, ngramspec_verify_cost** out);
NGRAMSPEC_API void ngramspec_verify_cost_free(ngramspec_verify_cost* cost);
/* What a pass of `tokens` tokens costs, the one-token pass costing 1 (0 tokens cost what 1 does); 0 for a
 * NULL cost. */
NGRAMSPEC_API double ngramspec_verify_cost_of(const ngramspec_verify_cost* cost, size_t tokens);
/* What a pass of `base_tokens` tokens carrying `drafts` drafts more costs, as the planner prices it
 * (VerifyCost::pass): the cost of base_tokens + drafts, except below the first point N of a table (measured on N
 * sequences, it says nothing of fewer): a plain pass there costs the first point's cost times base_tokens / N,
 * and drafts add what they add over N. A sum past SIZE_MAX is priced on the curve's tail, never wrapped. 0 for
 * a NULL cost. */
NGRAMSPEC_API double ngramspec_verify_cost_of_pass(const ngramspec_verify_cost* cost, size_t base_tokens,
                                                   size_t drafts);
/* The spec that ngramspec_verify_cost_create reads back into an equal cost, costs normalized so that the
 * first point costs 1 ("flat", "knee:N" or "table:..."); "" for a NULL cost. Valid while the cost lives. */
NGRAMSPEC_API const char* ngramspec_verify_cost_spec(const ngramspec_verify_cost* cost);
/* How many of one sequence's `n` candidate drafts its pass should carry (DraftPlanner::plan_one):
 * probabilities[j], the estimated chance that drafts 0..j are all accepted (a drafter's predict), the pass
 * carrying base_tokens tokens besides them (the sequence's last token, anything else the pass runs) and
 * emitting base_expected tokens without them; writes to *count the number n' <= n that maximizes
 * (base_expected + p[0] + ... + p[n' - 1]) / cost(base_tokens + n'), ties to fewer. The probabilities are
 * made valid in place first (NaN and negatives to 0, above 1 to 1, each lowered to the one before it). A
 * NULL cost: every candidate (*count = n). NGRAMSPEC_ERROR_INVALID_ARGUMENT when base_expected is not
 * finite and positive. Allocates nothing. */
NGRAMSPEC_API ngramspec_status ngramspec_plan_drafts(const ngramspec_verify_cost* cost, size_t base_tokens,
                                                     double base_expected, float* probabilities, size_t n,
                                                     size_t* count);


/* Learned verify costs (since 0.3): what a pass costs, learned from the passes an engine serves
 * (LearnedCost; docs/ALGORITHM.md, "A cost learned from the passes served"), so that a curve timed at
 * start is a prior, not the truth: a machine that gets busy, a GPU whose large passes cost more than a
 * start-up timing said, all show up in the passes served. A batch learns its cost when
 * ngramspec_batch_config::cost is "learn" (from a pessimistic start) or "learn:SPEC" (SPEC, any cost spec,
 * the curve measured at start say, as its prior): propose plans each pass against the estimate for its
 * number of sequences, and the drafters do not gate. Each pass is timed from the end of propose to the start
 * of accept, or reported by the engine (ngramspec_batch_report_pass_seconds) when it knows better. */

/* The time the engine took to run the pass proposed last (its forward, and whatever else it counts as the
 * pass's), in seconds: call it between ngramspec_batch_propose (or _propose_trees) and the accept of that
 * pass; the last report before accept counts. NGRAMSPEC_ERROR_INVALID_ARGUMENT, nothing learned, naming the
 * value when seconds is not finite and positive, when the batch does not learn its cost (its config's cost
 * is not "learn" or "learn:SPEC"), or when no pass was proposed since the last accept. */
NGRAMSPEC_API ngramspec_status ngramspec_batch_report_pass_seconds(ngramspec_batch* batch, double seconds);
/* Whether the batch learns its cost (1) or not (0); 0 for a NULL batch. */
NGRAMSPEC_API int ngramspec_batch_learns_cost(const ngramspec_batch* batch);
/* What the batch plans against, as text: for a learned cost, one line per batch size served (passes,
 * plain-pass time, shape-change price, whether the prior is trusted, the ratios measured; "" before any
 * pass); for a fixed cost, its spec ("knee:256"); without a cost, "". Written as snprintf writes: at most
 * capacity - 1 bytes and a NUL (out may be NULL when capacity is 0), the whole text's length, without its
 * NUL, to *length (call again with length + 1 bytes when it did not fit). */
NGRAMSPEC_API ngramspec_status ngramspec_batch_describe_cost(const ngramspec_batch* batch, char* out, size_t capacity,
                                                             size_t* length);

/* What a learned cost observed: passes and their seconds, plain passes (no drafts) and theirs, and the
 * passes that carried more drafts than had been measured with what they cost above what the estimate said
 * of them (negative: less; at most the exploration bound times the seconds served, plus one pass). A
 * struct that grows at the end, as ngramspec_batch_stats: the caller passes its size. One version so far,
 * ending at exploration_seconds (48 bytes). */
typedef struct ngramspec_learned_cost_stats {
  uint64_t passes;
  double seconds;
  uint64_t plain_passes;
  double plain_seconds;
  uint64_t exploring_passes;
  double exploration_seconds;
} ngramspec_learned_cost_stats;

/* The learned cost's totals into `out` (out_size: sizeof(ngramspec_learned_cost_stats)).
 * NGRAMSPEC_ERROR_INVALID_ARGUMENT, nothing written, for a batch that does not learn its cost or an
 * out_size of no version. */
NGRAMSPEC_API ngramspec_status ngramspec_batch_learned_cost_stats(const ngramspec_batch* batch,
                                                                  ngramspec_learned_cost_stats* out, size_t out_size);

/* A learned cost on its own, for an engine that sizes one sequence's drafts itself (as
 * ngramspec_plan_drafts does with a fixed cost) and times its own passes. Not thread-safe: one engine's
 * passes. Its memory is fixed at creation (a few tens of kilobytes); plan and observe allocate nothing. */
typedef struct ngramspec_learned_cost ngramspec_learned_cost;

/* A learned cost from `prior` (a cost spec, as ngramspec_verify_cost_create reads; NULL: none, a
 * pessimistic start), exploring at most `exploration` of the time served (in [0, 1]; LearnedCostConfig's
 * default is 0.005) and running a plain pass at least once in `plain_every` passes of a batch size (at
 * least 2; default 128). NGRAMSPEC_ERROR_INVALID_ARGUMENT naming the spec or the value. */
NGRAMSPEC_API ngramspec_status ngramspec_learned_cost_create(const char* prior, double exploration,
                                                             size_t plain_every, ngramspec_learned_cost** out);
NGRAMSPEC_API void ngramspec_learned_cost_free(ngramspec_learned_cost* cost);
/* How many of one sequence's `n` candidate drafts the next pass of `rows` sequences (0 is taken as 1)
 * should carry, planned against the estimate for that many sequences: ngramspec_plan_drafts's arguments
 * and result otherwise (base_tokens: what the pass carries besides the drafts, at least `rows`). Before
 * the first passes of a batch size, and now and then after, the estimate asks for a plain pass (*count 0):
 * that is how the time of a plain pass, which every other is priced against, is learned and followed. */
NGRAMSPEC_API ngramspec_status ngramspec_learned_cost_plan(ngramspec_learned_cost* cost, size_t rows,
                                                           size_t base_tokens, double base_expected,
                                                           float* probabilities, size_t n, size_t* count);
/* One pass served: `rows` sequences, `tokens` tokens in all (at least one a sequence), in `seconds`.
 * NGRAMSPEC_ERROR_INVALID_ARGUMENT, nothing learned, naming the value when rows is 0, tokens is below rows
 * or seconds is not finite and positive. */
NGRAMSPEC_API ngramspec_status ngramspec_learned_cost_observe(ngramspec_learned_cost* cost, size_t rows,
                                                              size_t tokens, double seconds);
/* ngramspec_batch_describe_cost's text and ngramspec_batch_learned_cost_stats's totals, for this cost. */
NGRAMSPEC_API ngramspec_status ngramspec_learned_cost_describe(const ngramspec_learned_cost* cost, char* out,
                                                               size_t capacity, size_t* length);
NGRAMSPEC_API ngramspec_status ngramspec_learned_cost_stats_get(const ngramspec_learned_cost* cost,
                                                                ngramspec_learned_cost_stats* out, size_t out_size);

/* ---- Sampling and rejection verification (since 0.3) ---------------------------------------------- */

/* How a sampler verifies drafts (SamplingMode; docs/SAMPLING.md). Taken as an int, so that a value
 * outside the enum is refused by name. */
typedef enum ngramspec_sampling_mode {
  NGRAMSPEC_SAMPLING_EXACT = 0,    /* each token is plain sampling's for (seed, position); q is not read */
  NGRAMSPEC_SAMPLING_REJECTION = 1 /* speculative sampling: x drawn from q is accepted w.p. min(1, p(x)/q(x)) */
} ngramspec_sampling_mode;

/* Most tokens in one draft's support (DraftDistributions::kMaxSupport). */
enum { NGRAMSPEC_MAX_SUPPORT = 32 };

/* How a sampler turns a row of logits into a token (SamplingOptions). A versioned struct: struct_size
 * is its size, set by ngramspec_sampling_options_init, read as ngramspec_tree_config's is (a version's
 * sizeof or the end of its last field; a later version's fields at their defaults). One version so far,
 * ending at mode (44, sizeof 48 with an 8-byte size_t). Each filter's neutral value switches it off. */
typedef struct ngramspec_sampling_options {
  size_t struct_size; /* sizeof(ngramspec_sampling_options) */
  float temperature;  /* 0 (default): greedy, argmax with ties to the lowest id; else > 0 and finite */
  size_t top_k;       /* keep the k most likely tokens; 0 (default): off */
  float top_p;        /* keep the fewest most likely tokens whose mass reaches top_p, in (0, 1]; 1 (default): off */
  float min_p;        /* keep tokens of probability >= min_p x the top one's, in [0, 1); 0 (default): off */
  uint64_t seed;      /* the draws at position p depend only on (seed, p); default 0 */
  int mode;           /* NGRAMSPEC_SAMPLING_EXACT (default) or NGRAMSPEC_SAMPLING_REJECTION */
} ngramspec_sampling_options;

/* SamplingOptions' defaults (greedy, exact mode) into the struct `options` of struct_size bytes, as
 * ngramspec_tree_config_init does for its struct: the fields of the version whose size is struct_size, with
 * options->struct_size = struct_size, not one byte past it; call it as
 * ngramspec_sampling_options_init(&options, sizeof options). NGRAMSPEC_ERROR_INVALID_ARGUMENT, nothing
 * written, for a NULL options or a struct_size of no version. */
NGRAMSPEC_API ngramspec_status ngramspec_sampling_options_init(ngramspec_sampling_options* options,
                                                               size_t struct_size);
/* SamplingOptions' defaults, with struct_size set, returned by value, as ngramspec_tree_config_default: safe
 * only in a program built against the header of the library it runs with; any program that may run with a
 * later library calls ngramspec_sampling_options_init. */
NGRAMSPEC_API ngramspec_sampling_options ngramspec_sampling_options_default(void);

/* A sampler (TokenSampler) for a vocabulary of vocab_size tokens: it chooses the tokens of one sequence's
 * verify pass from the target model's logits, for an engine that verifies drafts itself (whose drafts came
 * with their distributions q, from a draft model, say). One sampler per thread; it allocates its scratch
 * (about 12 bytes per vocabulary token) at creation and nothing once warm. */
typedef struct ngramspec_sampler ngramspec_sampler;

/* A sampler with `options` (NULL: the defaults). NGRAMSPEC_ERROR_INVALID_ARGUMENT naming the field and
 * its value for invalid options or a vocab_size of 0, and naming vocab_size and the machine's memory for a
 * vocabulary whose scratch is larger than that memory (refused before allocating); an allocation that fails
 * NGRAMSPEC_ERROR_OUT_OF_MEMORY naming the scratch. */
NGRAMSPEC_API ngramspec_status ngramspec_sampler_create(const ngramspec_sampling_options* options,
                                                        size_t vocab_size, ngramspec_sampler** out);
NGRAMSPEC_API void ngramspec_sampler_free(ngramspec_sampler* sampler);
/* Replaces the sampler's options (a new seed for a new request, say); invalid options change nothing. */
NGRAMSPEC_API ngramspec_status ngramspec_sampler_set_options(ngramspec_sampler* sampler,
                                                             const ngramspec_sampling_options* options);

/* Verifies one sequence's chain of n_drafts drafts, as an engine's rejection sampler does, and writes how
 * many were accepted to *accepted and the token that follows them to *next: the sequence goes on with
 * drafts[0 .. *accepted) and then *next (*accepted + 1 tokens in all).
 *
 * logits: the target model's pass over the sequence's last token and the drafts, n_drafts + 1 rows of
 * vocab_size floats (n_logits = (n_drafts + 1) x vocab_size): row i is the distribution of the token after
 * drafts[0 .. i), chosen at absolute position `position` + i (`position`: the sequence's length before the
 * pass, the index the first new token takes). A logit of -infinity masks its token.
 *
 * q: what each draft was drawn from, given the drafts before it (DraftDistributions): draft i's support is
 * q_tokens[q_offsets[i] .. q_offsets[i + 1]) with the probabilities at the same indices of
 * q_probabilities (read normalized by their sum; at most NGRAMSPEC_MAX_SUPPORT tokens, each finite and
 * >= 0, summing to more than 0). An empty support, one that gives the draft's token no probability, or
 * q_offsets NULL (for every draft; n_q must then be 0) reads the draft as chosen, not drawn: q one-hot on
 * it. q_offsets has n_drafts + 1 entries, from q_offsets[0] = 0 to q_offsets[n_drafts] = n_q, never
 * decreasing.
 *
 * NGRAMSPEC_SAMPLING_REJECTION: row i accepts drafts[i] with probability min(1, p(x)/q(x)) and otherwise
 * draws *next from the residual max(0, p - q), renormalized (TokenSampler::verify); after n_drafts
 * accepted drafts *next is drawn from the last row. Whatever q is, the tokens are distributed as the
 * target's sampling distribution p (the options' temperature and filters), provided each draft was drawn
 * from the q given for it. NGRAMSPEC_SAMPLING_EXACT: each row's token is the one plain sampling draws at
 * its position for the seed, and a draft is accepted when it equals it (q is checked but not read). At
 * temperature 0 both are greedy. A draft outside the vocabulary is rejected. Rows after the first
 * rejection are not read.
 *
 * NGRAMSPEC_ERROR_INVALID_ARGUMENT, *accepted and *next unwritten, naming the argument and its value, or
 * the token and position of a NaN or +infinity logit in a row read, or the position of a row read with
 * every token masked. Allocates nothing once warm. */
NGRAMSPEC_API ngramspec_status ngramspec_sampler_verify_chain(ngramspec_sampler* sampler, const float* logits,
                                                              size_t n_logits, uint64_t position,
                                                              const ngramspec_token* drafts, size_t n_drafts,
                                                              const size_t* q_offsets, const ngramspec_token* q_tokens,
                                                              const float* q_probabilities, size_t n_q,
                                                              size_t* accepted, ngramspec_token* next);

/* Verifies one sequence's tree pass, as an engine's rejection sampler does (since 0.3): the tree of
 * ngramspec_batch_propose_trees (or the engine's own), checked from the root down. At entry e of the
 * pass (0: the root, the sequence's last token; j + 1: node j) at depth d, the token is chosen from row e
 * at absolute position `position` + d (`position`: the sequence's length before the pass); the walk goes
 * on to the first child of e that carries it, and ends at the first entry where no child does. Writes:
 * - model_tokens (room for n_nodes + 1): at each entry walked, the token chosen there; every other entry
 *   gets *next (a token of the vocabulary: accept checks it but never walks it). This is what
 *   ngramspec_batch_accept_trees_q takes as the sequence's model_tokens (from its offsets[i]): it then
 *   keeps exactly the walk's entries (kept = path, as far as stops and max_new_tokens allow);
 * - path (room for n_nodes + 1): the entries walked, *accepted + 1 of them, path[0] = 0: the pass's KV
 *   entries the sequence keeps, entry path[j] going to KV position position - 1 + j (the root's entry is
 *   fed at the cache length, position - 1);
 * - *accepted: the nodes accepted, node path[j] - 1 for 1 <= j <= *accepted; the sequence goes on with
 *   their tokens and then *next (*accepted + 1 tokens in all: model_tokens[path[0 .. *accepted]]);
 * - *next: the token chosen at the last entry walked.
 *
 * logits: the target's tree pass, n_nodes + 1 rows of vocab_size floats (n_logits = (n_nodes + 1) x
 * vocab_size), row 0 the root's, row j + 1 node j's (each token attending to the cached sequence and its
 * ancestors). tokens, parents: the nodes, parents tree-local as propose_trees writes them:
 * NGRAMSPEC_TREE_ROOT (-1) for a child of the root, else the index of an earlier node.
 *
 * q: what each node was drawn from, in ngramspec_sampler_verify_chain's layout per node (node j's support
 * q_tokens[q_offsets[j] .. q_offsets[j + 1]), empty: chosen, one-hot; q_offsets NULL with n_q 0: every
 * node chosen), except that q_offsets[0] may be any index up to n_q and q_offsets[n_nodes] need only be at
 * most n_q: sequence i of an ngramspec_batch_propose_trees_q call passes q_offsets + offsets[i] with the
 * call's q_tokens, q_probabilities and *n_q as they are.
 *
 * NGRAMSPEC_SAMPLING_REJECTION: row e verifies e's children, in index order, by
 * TokenSampler::verify (the first is accepted with probability min(1, p(x)/q(x)), each rejection
 * replacing p by the residual max(0, p - q), the token drawn from the last residual when all are
 * rejected): the emitted tokens are distributed as the target's sampling distribution p, provided each
 * node was drawn from its q given its ancestors and earlier siblings. NGRAMSPEC_SAMPLING_EXACT: each
 * row's token is the one plain sampling draws at its position for the seed (q checked, not read); a tree
 * pass then emits exactly the text plain decoding would. At temperature 0 both walk the argmax path.
 * Rows off the walk are not read.
 *
 * The engine's hand-off, for sequence i of a propose_trees_q call with nodes at offsets[i] .. offsets[i +
 * 1] and its entries at m = offsets[i] + i in model_tokens (each sequence has one entry more than nodes):
 *   ngramspec_sampler_verify_tree(sampler, rows, (nodes + 1) * vocab, length, tokens + offsets[i],
 *                                 parents + offsets[i], nodes, q_offsets + offsets[i], q_tokens,
 *                                 q_probabilities, n_q, model_tokens + m, path, &accepted, &next);
 * (length: the sequence's tokens, prompt and output), then ngramspec_batch_accept_trees_q over every
 * sequence's model_tokens (docs/SAMPLING.md, "Engines that verify").
 *
 * NGRAMSPEC_ERROR_INVALID_ARGUMENT, nothing written, naming the argument and its value (a parent that is
 * neither the root nor an earlier node, sizes, offsets, q as verify_chain refuses it), or the token and
 * position of a NaN or +infinity logit in a row read, or the position of a row read with every token
 * masked. Allocates nothing once warm (once it has verified a tree as large). */
NGRAMSPEC_API ngramspec_status ngramspec_sampler_verify_tree(
    ngramspec_sampler* sampler, const float* logits, size_t n_logits, uint64_t position,
    const ngramspec_token* tokens, const int32_t* parents, size_t n_nodes, const size_t* q_offsets,
    const ngramspec_token* q_tokens, const float* q_probabilities, size_t n_q, ngramspec_token* model_tokens,
    size_t* path, size_t* accepted, ngramspec_token* next);

#ifdef __cplusplus
}
#endif

#endif /* NGRAMSPEC_NGRAMSPEC_H */
