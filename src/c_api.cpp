// The C ABI (include/ngramspec/ngramspec.h) over the C++ classes.
//
// Every entry point checks its handles, pointers and sizes itself, then calls the C++ object
// inside a try block, so no exception crosses the boundary. The C++ calls validate all of their
// arguments before they change anything, so a call that fails changes nothing. A failure writes
// its message to a fixed thread-local buffer: reporting never allocates, not even after an
// allocation failed.

#include "ngramspec/ngramspec.h"

#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ngramspec/allocation_error.hpp"
#include "ngramspec/batch_speculator.hpp"
#include "ngramspec/corpus_file.hpp"
#include "ngramspec/decode_options.hpp"
#include "ngramspec/decode_step.hpp"
#include "ngramspec/draft_planner.hpp"
#include "ngramspec/mapped_corpus.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "ngramspec/token.hpp"
#include "ngramspec/top_k_table.hpp"
#include "ngramspec/tree_drafter.hpp"
#include "ngramspec/verify_cost.hpp"
#include "ngramspec/verify_cost.hpp"
#include "ngramspec/version.hpp"

static_assert(NGRAMSPEC_VERSION_MAJOR == ngramspec::kVersionMajor && NGRAMSPEC_VERSION_MINOR == ngramspec::kVersionMinor &&
                  NGRAMSPEC_VERSION_PATCH == ngramspec::kVersionPatch,
              "ngramspec.h's NGRAMSPEC_VERSION_* and ngramspec/version.hpp disagree");
static_assert(std::is_same_v<ngramspec_token, ngramspec::Token>);
static_assert(std::is_same_v<ngramspec_sequence_id, ngramspec::SequenceId>);

#define NGRAMSPEC_C_API_STRING_(x) #x
#define NGRAMSPEC_C_API_STRING(x) NGRAMSPEC_C_API_STRING_(x)

namespace {

constexpr const char* kVersionString = NGRAMSPEC_C_API_STRING(NGRAMSPEC_VERSION_MAJOR) "." NGRAMSPEC_C_API_STRING(
    NGRAMSPEC_VERSION_MINOR) "." NGRAMSPEC_C_API_STRING(NGRAMSPEC_VERSION_PATCH);
#ifdef NGRAMSPEC_PROJECT_VERSION
static_assert(std::string_view(kVersionString) == NGRAMSPEC_PROJECT_VERSION,
              "ngramspec.h's NGRAMSPEC_VERSION_* and the CMake project version disagree");
#endif

}  // namespace

// The handles: the C++ objects, and for the batch the scratch its calls convert through.

struct ngramspec_corpus {
  explicit ngramspec_corpus(std::size_t max_bytes) : corpus(max_bytes) {}
  ngramspec::SharedCorpus corpus;
};

struct ngramspec_corpus_file {
  explicit ngramspec_corpus_file(const char* path) : file(std::filesystem::path(path)) {}
  ngramspec::MappedCorpus file;
};

struct ngramspec_match_drafter {
  ngramspec::MatchDrafter drafter;
};

struct ngramspec_ngram_predictor {
  ngramspec::NGramPredictor predictor;
};

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

  std::unique_ptr<ngramspec::TopKTable> table;  // a tree batch's shared top-k table; outlives `tree`
  std::optional<ChainSpeculator> chain;         // one of the two
  std::optional<TreeSpeculator> tree;
  // accept()'s outcomes before they become ngramspec_steps: one per sequence of the pool, the
  // most a valid call steps (its ids are distinct running sequences).
  std::vector<ngramspec::StepOutcome> steps;
  // begin()'s options; its stop tokens keep their capacity from call to call.
  ngramspec::DecodeOptions options;
};

namespace {

// ---- Errors ------------------------------------------------------------------------------------

constexpr std::size_t kErrorBytes = 1024;
thread_local char t_last_error[kErrorBytes] = "";

// Writes the calling thread's last error (cut to the buffer, ending "..." when cut); returns
// `status`.
[[gnu::format(printf, 2, 3)]] ngramspec_status fail(ngramspec_status status, const char* format, ...) noexcept {
  va_list args;
  va_start(args, format);
  const int length = std::vsnprintf(t_last_error, kErrorBytes, format, args);
  va_end(args);
  if (length < 0) {
    std::snprintf(t_last_error, kErrorBytes, "ngramspec: a call failed and its message could not be formatted");
  } else if (static_cast<std::size_t>(length) >= kErrorBytes) {
    std::memcpy(t_last_error + kErrorBytes - 4, "...", 4);
  }
  return status;
}

ngramspec_status null_argument(const char* where, const char* name) noexcept {
  return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", where, name);
}

ngramspec_status null_array(const char* where, const char* name, const char* count_name, std::size_t count) noexcept {
  return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL but %s = %zu", where, name, count_name, count);
}

// No array is larger than PTRDIFF_MAX bytes (pointer differences must hold its size), so a count
// of elements whose bytes exceed it, or wrap round size_t, is not a real array's: a negative
// number converted, a length in bytes, garbage. It is refused before any element is read.
constexpr std::size_t kLargestArrayBytes = static_cast<std::size_t>(PTRDIFF_MAX);

// NGRAMSPEC_OK when `pointer` and `count` (of `element_bytes`-byte elements) can be an array:
// not NULL unless empty, and no larger than the largest array.
ngramspec_status check_array(const char* where, const void* pointer, const char* name, const char* count_name,
                             std::size_t count, std::size_t element_bytes) noexcept {
  if (pointer == nullptr && count != 0) return null_array(where, name, count_name, count);
  if (count > kLargestArrayBytes / element_bytes) {
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
                "%s: %s = %zu is too large: %zu elements of %zu bytes exceed the largest array (PTRDIFF_MAX = %zu "
                "bytes)",
                where, count_name, count, count, element_bytes, kLargestArrayBytes);
  }
  return NGRAMSPEC_OK;
}
// check_array for an array of tokens.
ngramspec_status check_tokens(const char* where, const void* pointer, const char* name, const char* count_name,
                              std::size_t count) noexcept {
  return check_array(where, pointer, name, count_name, count, sizeof(ngramspec_token));
}

// A C++ message, less the prefix naming the C++ function that the C function's name replaces
// ("ngramspec::BatchSpeculator::propose: ", or the step functions' "ngramspec: "). `generic`:
// the message was the step functions', which do not name the sequence.
const char* c_message(const char* message, bool& generic) noexcept {
  constexpr std::string_view kSpeculator = "ngramspec::BatchSpeculator::";
  constexpr std::string_view kSteps = "ngramspec: ";
  const std::string_view text(message);
  generic = false;
  if (text.starts_with(kSpeculator)) {
    const std::size_t colon = text.find(": ");
    if (colon != std::string_view::npos) return message + colon + 2;
  } else if (text.starts_with(kSteps)) {
    generic = true;
    return message + kSteps.size();
  }
  return message;
}

// The status and message of the exception being handled; call it only from a catch block.
// `subject` ("sequence 7: ") goes before a message that does not name it.
ngramspec_status translate_exception(const char* where, const char* subject = "") noexcept {
  try {
    throw;
  } catch (const ngramspec::AllocationError& e) {  // names what was being made
    return fail(NGRAMSPEC_ERROR_OUT_OF_MEMORY, "%s: %sout of memory: %s", where, subject, e.what());
  } catch (const std::bad_alloc&) {
    return fail(NGRAMSPEC_ERROR_OUT_OF_MEMORY, "%s: %sout of memory", where, subject);
  } catch (const ngramspec::CorpusFileError& e) {  // names the file, the section and the problem
    return fail(NGRAMSPEC_ERROR_CORPUS_FILE, "%s: %s%s", where, subject, e.what());
  } catch (const std::invalid_argument& e) {
    bool generic = false;
    const char* message = c_message(e.what(), generic);
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT, "%s: %s%s", where, generic ? subject : "", message);
  } catch (const std::exception& e) {
    return fail(NGRAMSPEC_ERROR_INTERNAL, "%s: %s%s", where, subject, e.what());
  } catch (...) {
    return fail(NGRAMSPEC_ERROR_INTERNAL, "%s: %san exception that is not a std::exception", where, subject);
  }
}

// A corpus preference from C: any int, checked against the enum.
bool to_cpp(int value, ngramspec::CorpusPreference& out, const char* where) noexcept {
  switch (value) {
    case NGRAMSPEC_PREFER_LONGER_MATCH: out = ngramspec::CorpusPreference::longer_match; return true;
    case NGRAMSPEC_PREFER_LIVE: out = ngramspec::CorpusPreference::live; return true;
    case NGRAMSPEC_PREFER_FILE: out = ngramspec::CorpusPreference::file; return true;
    default: break;
  }
  fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
       "%s: preference = %d is invalid: it must be NGRAMSPEC_PREFER_LONGER_MATCH (0), NGRAMSPEC_PREFER_LIVE (1) or "
       "NGRAMSPEC_PREFER_FILE (2)",
       where, value);
  return false;
}

// The draft functions' common checks; NGRAMSPEC_OK when the arguments are usable.
ngramspec_status check_draft_arguments(const char* where, const ngramspec_token* context, std::size_t n,
                                       const ngramspec_token* out, std::size_t room,
                                       const std::size_t* count) noexcept {
  if (const ngramspec_status bad = check_tokens(where, context, "context", "n", n); bad != NGRAMSPEC_OK) return bad;
  if (const ngramspec_status bad = check_tokens(where, out, "out", "room", room); bad != NGRAMSPEC_OK) return bad;
  if (count == nullptr) return null_argument(where, "count");
  return NGRAMSPEC_OK;
}

// ---- Conversions ---------------------------------------------------------------------------------

ngramspec::MatchConfig to_cpp(const ngramspec_match_config& c) noexcept {
  ngramspec::MatchConfig config;
  config.cap = c.cap;
  config.copy_min_match = c.copy_min_match;
  config.count_max_order = c.count_max_order;
  config.count_window = c.count_window;
  config.min_confidence = c.min_confidence;
  return config;
}

ngramspec_match_config to_c(const ngramspec::MatchConfig& config) noexcept {
  ngramspec_match_config c;
  c.cap = config.cap;
  c.copy_min_match = config.copy_min_match;
  c.count_max_order = config.count_max_order;
  c.count_window = config.count_window;
  c.min_confidence = config.min_confidence;
  return c;
}

ngramspec::NGramConfig to_cpp(const ngramspec_ngram_config& c) noexcept {
  ngramspec::NGramConfig config;
  config.min_order = c.min_order;
  config.max_order = c.max_order;
  config.window = c.window;
  return config;
}

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
  if (c.cost != nullptr) batch.cost = ngramspec::VerifyCost::parse(c.cost);
  drafter = c.default_drafter != 0 ? ngramspec::BatchSpeculator<>::default_drafter(batch) : to_cpp(c.drafter);
}

ngramspec_tree_config to_c(const ngramspec::TreeConfig& config) noexcept {
  ngramspec_tree_config c;
  c.struct_size = sizeof(ngramspec_tree_config);
  c.successor_slots = config.successor_slots;
  c.max_children = config.max_children;
  c.vocab_size = config.vocab_size;
  c.top_k = config.top_k;
  c.shared_top_k = 1;
  c.carry_over = config.carry_over ? 1 : 0;
  c.enrich_counts = config.enrich_counts ? 1 : 0;
  return c;
}

// The ids of one pass are distinct running sequences, so there are at most max_sequences of
// them; more (a count that is wrong, or ids listed twice) is refused before any array is read.
ngramspec_status too_many_ids(const char* where, std::size_t n_ids, const ngramspec_batch& batch) noexcept {
  return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
              "%s: n_ids = %zu is more than max_sequences = %zu; ids must name distinct running sequences", where,
              n_ids, batch.steps.size());
}

// ngramspec_corpus_load and ngramspec_corpus_load_trusted; `where` names the one called.
ngramspec_status load_corpus(const char* where, ngramspec_corpus* corpus, const char* path,
                             ngramspec::ChecksumCheck check) noexcept {
  if (corpus == nullptr) return null_argument(where, "corpus");
  if (path == nullptr) return null_argument(where, "path");
  try {
    corpus->corpus.load(std::filesystem::path(path), check);
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(where);
  }
}

// The model's vocabulary as the create calls take it.
struct Vocabulary {
  std::uint64_t size = 0;
  std::uint64_t tokenizer_fingerprint = 0;
};

// ngramspec_match_drafter_create_file and ngramspec_match_drafter_create_vocab; `where` names the
// one called.
ngramspec_status create_match_drafter(const char* where, const ngramspec_match_config* config,
                                      const ngramspec_corpus* corpus, const ngramspec_corpus_file* file, int preference,
                                      Vocabulary vocabulary, ngramspec_match_drafter** out) noexcept {
  if (out == nullptr) return null_argument(where, "out");
  ngramspec::CorpusPreference cpp_preference{};
  if (!to_cpp(preference, cpp_preference, where)) return NGRAMSPEC_ERROR_INVALID_ARGUMENT;
  try {
    ngramspec::MatchConfig cpp = config != nullptr ? to_cpp(*config) : ngramspec::MatchConfig{};
    cpp.corpus_preference = cpp_preference;
    cpp.vocab_size = vocabulary.size;
    cpp.tokenizer_fingerprint = vocabulary.tokenizer_fingerprint;
    *out = new ngramspec_match_drafter{ngramspec::MatchDrafter(cpp, corpus != nullptr ? &corpus->corpus : nullptr,
                                                               file != nullptr ? &file->file : nullptr)};
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(where);
  }
}

// ngramspec_batch_create, ngramspec_batch_create_file and ngramspec_batch_create_vocab; `where`
// names the one called.
ngramspec_status create_batch(const char* where, const ngramspec_batch_config* config, ngramspec_corpus* corpus,
                              const ngramspec_corpus_file* file, ngramspec::CorpusPreference preference,
                              Vocabulary vocabulary, ngramspec_batch** out) noexcept {
  try {
    ngramspec::BatchConfig batch;
    ngramspec::MatchConfig drafter;
    to_cpp(config, batch, drafter);
    drafter.corpus_preference = preference;
    drafter.vocab_size = vocabulary.size;
    drafter.tokenizer_fingerprint = vocabulary.tokenizer_fingerprint;
    *out = new ngramspec_batch(batch, drafter, corpus != nullptr ? &corpus->corpus : nullptr,
                               file != nullptr ? &file->file : nullptr);
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(where);
  }
}

// ngramspec_batch_create_tree and ngramspec_batch_create_tree_file; `where` names the one called.
ngramspec_status create_tree_batch(const char* where, const ngramspec_batch_config* config,
                                   const ngramspec_tree_config* tree, ngramspec_corpus* corpus,
                                   const ngramspec_corpus_file* file, ngramspec::CorpusPreference preference,
                                   Vocabulary vocabulary, ngramspec_batch** out) noexcept {
  const ngramspec_tree_config t = tree != nullptr ? *tree : ngramspec_tree_config_default();
  // The first version of the struct is the only one: a size that is not its size is another
  // header's struct, or one never set.
  if (t.struct_size != sizeof(ngramspec_tree_config)) {
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
                "%s: tree->struct_size = %zu is invalid: it must be sizeof(ngramspec_tree_config) = %zu (set it with "
                "ngramspec_tree_config_default)",
                where, t.struct_size, sizeof(ngramspec_tree_config));
  }
  try {
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
    std::unique_ptr<ngramspec::TopKTable> table;
    if (t.shared_top_k != 0 && t.vocab_size != 0) {
      if (t.top_k == 0 || t.top_k > ngramspec::TopKTable::kMaxK) {
        return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT, "%s: tree->top_k = %zu is invalid: it must be 1 .. %zu",
                    where, t.top_k, ngramspec::TopKTable::kMaxK);
      }
      table = std::make_unique<ngramspec::TopKTable>(t.vocab_size, t.top_k);
    } else {
      // each drafter's own table, or none; BatchSpeculator refuses a pool beyond the machine's memory
      drafter.vocab_size = t.vocab_size;
    }
    *out = new ngramspec_batch(batch, drafter, std::move(table), corpus != nullptr ? &corpus->corpus : nullptr,
                               file != nullptr ? &file->file : nullptr);
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(where);
  }
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

}  // namespace

extern "C" {

// ---- Version and errors ------------------------------------------------------------------------

unsigned ngramspec_version_number(void) {
  return static_cast<unsigned>(ngramspec::kVersionMajor * 10000 + ngramspec::kVersionMinor * 100 +
                               ngramspec::kVersionPatch);
}

const char* ngramspec_version_string(void) { return kVersionString; }

const char* ngramspec_status_name(ngramspec_status status) {
  // Read as an int: a C caller may pass any value, which C++ may not hold in the enum.
  int value = 0;
  static_assert(sizeof value == sizeof status);
  std::memcpy(&value, &status, sizeof value);
  switch (value) {
    case NGRAMSPEC_OK: return "NGRAMSPEC_OK";
    case NGRAMSPEC_ERROR_INVALID_ARGUMENT: return "NGRAMSPEC_ERROR_INVALID_ARGUMENT";
    case NGRAMSPEC_ERROR_OUT_OF_MEMORY: return "NGRAMSPEC_ERROR_OUT_OF_MEMORY";
    case NGRAMSPEC_ERROR_INTERNAL: return "NGRAMSPEC_ERROR_INTERNAL";
    case NGRAMSPEC_ERROR_CORPUS_FILE: return "NGRAMSPEC_ERROR_CORPUS_FILE";
    default: return "unknown status";
  }
}

const char* ngramspec_last_error(void) { return t_last_error; }

// ---- SharedCorpus --------------------------------------------------------------------------------

ngramspec_status ngramspec_corpus_create(size_t max_bytes, ngramspec_corpus** out) {
  if (out == nullptr) return null_argument(__func__, "out");
  try {
    *out = new ngramspec_corpus(max_bytes);
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(__func__);
  }
}

void ngramspec_corpus_free(ngramspec_corpus* corpus) { delete corpus; }

ngramspec_status ngramspec_corpus_append(ngramspec_corpus* corpus, const ngramspec_token* tokens, size_t count) {
  if (corpus == nullptr) return null_argument(__func__, "corpus");
  if (const ngramspec_status bad = check_tokens(__func__, tokens, "tokens", "count", count); bad != NGRAMSPEC_OK) {
    return bad;
  }
  try {
    corpus->corpus.append(std::span<const ngramspec::Token>(tokens, count));
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(__func__);
  }
}

ngramspec_status ngramspec_corpus_clear(ngramspec_corpus* corpus) {
  if (corpus == nullptr) return null_argument(__func__, "corpus");
  try {
    corpus->corpus.clear();
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(__func__);
  }
}

size_t ngramspec_corpus_size(const ngramspec_corpus* corpus) {
  if (corpus == nullptr) return 0;
  try {
    return corpus->corpus.size();
  } catch (...) {  // the lock failed
    translate_exception(__func__);
    return 0;
  }
}

uint64_t ngramspec_corpus_records(const ngramspec_corpus* corpus) {
  if (corpus == nullptr) return 0;
  try {
    return corpus->corpus.records();
  } catch (...) {
    translate_exception(__func__);
    return 0;
  }
}

size_t ngramspec_corpus_capacity_tokens(const ngramspec_corpus* corpus) {
  return corpus == nullptr ? 0 : corpus->corpus.capacity_tokens();
}

size_t ngramspec_corpus_memory_bytes(const ngramspec_corpus* corpus) {
  return corpus == nullptr ? 0 : corpus->corpus.memory_bytes();
}

ngramspec_status ngramspec_corpus_append_stamped(ngramspec_corpus* corpus, const ngramspec_token* tokens, size_t count,
                                                 int64_t stamp) {
  if (corpus == nullptr) return null_argument(__func__, "corpus");
  if (const ngramspec_status bad = check_tokens(__func__, tokens, "tokens", "count", count); bad != NGRAMSPEC_OK) {
    return bad;
  }
  try {
    corpus->corpus.append(std::span<const ngramspec::Token>(tokens, count), stamp);
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(__func__);
  }
}

int64_t ngramspec_corpus_last_stamp(const ngramspec_corpus* corpus) {
  if (corpus == nullptr) return 0;
  try {
    return corpus->corpus.last_stamp();
  } catch (...) {  // the lock failed
    translate_exception(__func__);
    return 0;
  }
}

ngramspec_status ngramspec_corpus_draft(const ngramspec_corpus* corpus, const ngramspec_token* context, size_t n,
                                        ngramspec_token* out, size_t room, size_t* count, size_t* match_length) {
  if (corpus == nullptr) return null_argument(__func__, "corpus");
  if (const ngramspec_status bad = check_draft_arguments(__func__, context, n, out, room, count); bad != NGRAMSPEC_OK) {
    return bad;
  }
  const ngramspec::CorpusDraft found = corpus->corpus.draft(std::span<const ngramspec::Token>(context, n),
                                                            std::span<ngramspec::Token>(out, room));  // noexcept
  *count = found.count;
  if (match_length != nullptr) *match_length = found.match_length;
  return NGRAMSPEC_OK;
}

ngramspec_status ngramspec_corpus_save(const ngramspec_corpus* corpus, const char* path) {
  if (corpus == nullptr) return null_argument(__func__, "corpus");
  if (path == nullptr) return null_argument(__func__, "path");
  try {
    corpus->corpus.save(std::filesystem::path(path));
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(__func__);
  }
}

ngramspec_status ngramspec_corpus_load(ngramspec_corpus* corpus, const char* path) {
  return load_corpus(__func__, corpus, path, ngramspec::ChecksumCheck::verify);
}

ngramspec_status ngramspec_corpus_load_trusted(ngramspec_corpus* corpus, const char* path) {
  return load_corpus(__func__, corpus, path, ngramspec::ChecksumCheck::skip);
}

// ---- Corpus files --------------------------------------------------------------------------------

ngramspec_status ngramspec_corpus_file_open(const char* path, ngramspec_corpus_file** out) {
  if (path == nullptr) return null_argument(__func__, "path");
  if (out == nullptr) return null_argument(__func__, "out");
  try {
    *out = new ngramspec_corpus_file(path);
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(__func__);
  }
}

void ngramspec_corpus_file_close(ngramspec_corpus_file* file) { delete file; }

ngramspec_status ngramspec_corpus_file_verify(const ngramspec_corpus_file* file) {
  if (file == nullptr) return null_argument(__func__, "file");
  try {
    file->file.verify();
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(__func__);
  }
}

ngramspec_status ngramspec_corpus_file_verify_checksums(const ngramspec_corpus_file* file) {
  if (file == nullptr) return null_argument(__func__, "file");
  try {
    file->file.verify_checksums();
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(__func__);
  }
}

uint64_t ngramspec_corpus_file_vocab_size(const ngramspec_corpus_file* file) {
  return file == nullptr ? 0 : file->file.vocabulary().size;
}

uint64_t ngramspec_corpus_file_tokenizer_fingerprint(const ngramspec_corpus_file* file) {
  return file == nullptr ? 0 : file->file.vocabulary().tokenizer_fingerprint;
}

size_t ngramspec_corpus_file_size(const ngramspec_corpus_file* file) {
  return file == nullptr ? 0 : file->file.size();
}

uint64_t ngramspec_corpus_file_records(const ngramspec_corpus_file* file) {
  return file == nullptr ? 0 : file->file.records();
}

uint64_t ngramspec_corpus_file_bytes(const ngramspec_corpus_file* file) {
  return file == nullptr ? 0 : file->file.file_bytes();
}

int64_t ngramspec_corpus_file_first_stamp(const ngramspec_corpus_file* file) {
  return file == nullptr ? 0 : file->file.first_stamp();
}

int64_t ngramspec_corpus_file_last_stamp(const ngramspec_corpus_file* file) {
  return file == nullptr ? 0 : file->file.last_stamp();
}

ngramspec_status ngramspec_corpus_file_draft(const ngramspec_corpus_file* file, const ngramspec_token* context,
                                             size_t n, ngramspec_token* out, size_t room, size_t* count,
                                             size_t* match_length) {
  if (file == nullptr) return null_argument(__func__, "file");
  if (const ngramspec_status bad = check_draft_arguments(__func__, context, n, out, room, count); bad != NGRAMSPEC_OK) {
    return bad;
  }
  const ngramspec::CorpusDraft found = file->file.draft(std::span<const ngramspec::Token>(context, n),
                                                        std::span<ngramspec::Token>(out, room));  // noexcept
  *count = found.count;
  if (match_length != nullptr) *match_length = found.match_length;
  return NGRAMSPEC_OK;
}

// ---- MatchDrafter --------------------------------------------------------------------------------

ngramspec_match_config ngramspec_match_config_default(void) { return to_c(ngramspec::MatchConfig{}); }

ngramspec_status ngramspec_match_drafter_create(const ngramspec_match_config* config, const ngramspec_corpus* corpus,
                                                ngramspec_match_drafter** out) {
  if (out == nullptr) return null_argument(__func__, "out");
  try {
    const ngramspec::MatchConfig cpp = config != nullptr ? to_cpp(*config) : ngramspec::MatchConfig{};
    *out = new ngramspec_match_drafter{ngramspec::MatchDrafter(cpp, corpus != nullptr ? &corpus->corpus : nullptr)};
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(__func__);
  }
}

ngramspec_status ngramspec_match_drafter_create_file(const ngramspec_match_config* config,
                                                     const ngramspec_corpus* corpus, const ngramspec_corpus_file* file,
                                                     int preference,
                                                     ngramspec_match_drafter** out) {
  return create_match_drafter(__func__, config, corpus, file, preference, {}, out);
}

ngramspec_status ngramspec_match_drafter_create_vocab(const ngramspec_match_config* config,
                                                      const ngramspec_corpus* corpus, const ngramspec_corpus_file* file,
                                                      int preference, uint64_t vocab_size,
                                                      uint64_t tokenizer_fingerprint, ngramspec_match_drafter** out) {
  return create_match_drafter(__func__, config, corpus, file, preference, Vocabulary{vocab_size, tokenizer_fingerprint},
                              out);
}

void ngramspec_match_drafter_free(ngramspec_match_drafter* drafter) { delete drafter; }

ngramspec_status ngramspec_match_drafter_update(ngramspec_match_drafter* drafter, const ngramspec_token* tokens,
                                                size_t count) {
  if (drafter == nullptr) return null_argument(__func__, "drafter");
  if (const ngramspec_status bad = check_tokens(__func__, tokens, "tokens", "count", count); bad != NGRAMSPEC_OK) {
    return bad;
  }
  drafter->drafter.update(std::span<const ngramspec::Token>(tokens, count));  // noexcept
  return NGRAMSPEC_OK;
}

ngramspec_status ngramspec_match_drafter_predict(const ngramspec_match_drafter* drafter, ngramspec_token* out,
                                                 size_t capacity, float* probabilities, size_t* count) {
  if (drafter == nullptr) return null_argument(__func__, "drafter");
  if (const ngramspec_status bad = check_tokens(__func__, out, "out", "capacity", capacity); bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (count == nullptr) return null_argument(__func__, "count");
  const std::span<ngramspec::Token> drafts(out, capacity);
  *count = probabilities != nullptr ? drafter->drafter.predict(drafts, std::span<float>(probabilities, capacity))
                                    : drafter->drafter.predict(drafts);  // noexcept
  return NGRAMSPEC_OK;
}

ngramspec_status ngramspec_match_drafter_reset(ngramspec_match_drafter* drafter) {
  if (drafter == nullptr) return null_argument(__func__, "drafter");
  drafter->drafter.reset();  // noexcept
  return NGRAMSPEC_OK;
}

size_t ngramspec_match_drafter_memory_bytes(const ngramspec_match_drafter* drafter) {
  return drafter == nullptr ? 0 : drafter->drafter.memory_bytes();
}

uint64_t ngramspec_match_drafter_out_of_vocabulary(const ngramspec_match_drafter* drafter) {
  return drafter == nullptr ? 0 : drafter->drafter.out_of_vocabulary_drafts();
}

// ---- NGramPredictor ------------------------------------------------------------------------------

ngramspec_ngram_config ngramspec_ngram_config_default(void) {
  const ngramspec::NGramConfig config;
  ngramspec_ngram_config c;
  c.min_order = config.min_order;
  c.max_order = config.max_order;
  c.window = config.window;
  return c;
}

ngramspec_status ngramspec_ngram_predictor_create(const ngramspec_ngram_config* config,
                                                  ngramspec_ngram_predictor** out) {
  if (out == nullptr) return null_argument(__func__, "out");
  try {
    const ngramspec::NGramConfig cpp = config != nullptr ? to_cpp(*config) : ngramspec::NGramConfig{};
    *out = new ngramspec_ngram_predictor{ngramspec::NGramPredictor(cpp)};
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(__func__);
  }
}

void ngramspec_ngram_predictor_free(ngramspec_ngram_predictor* predictor) { delete predictor; }

ngramspec_status ngramspec_ngram_predictor_update(ngramspec_ngram_predictor* predictor, const ngramspec_token* tokens,
                                                  size_t count) {
  if (predictor == nullptr) return null_argument(__func__, "predictor");
  if (const ngramspec_status bad = check_tokens(__func__, tokens, "tokens", "count", count); bad != NGRAMSPEC_OK) {
    return bad;
  }
  predictor->predictor.update(std::span<const ngramspec::Token>(tokens, count));  // noexcept
  return NGRAMSPEC_OK;
}

ngramspec_status ngramspec_ngram_predictor_predict(const ngramspec_ngram_predictor* predictor, ngramspec_token* out,
                                                   size_t capacity, float* probabilities, size_t* count) {
  if (predictor == nullptr) return null_argument(__func__, "predictor");
  if (const ngramspec_status bad = check_tokens(__func__, out, "out", "capacity", capacity); bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (count == nullptr) return null_argument(__func__, "count");
  const std::span<ngramspec::Token> drafts(out, capacity);
  *count = probabilities != nullptr ? predictor->predictor.predict(drafts, std::span<float>(probabilities, capacity))
                                    : predictor->predictor.predict(drafts);  // noexcept
  return NGRAMSPEC_OK;
}

ngramspec_status ngramspec_ngram_predictor_reset(ngramspec_ngram_predictor* predictor) {
  if (predictor == nullptr) return null_argument(__func__, "predictor");
  predictor->predictor.reset();  // noexcept
  return NGRAMSPEC_OK;
}

size_t ngramspec_ngram_predictor_memory_bytes(const ngramspec_ngram_predictor* predictor) {
  return predictor == nullptr ? 0 : predictor->predictor.memory_bytes();
}

// ---- BatchSpeculator -----------------------------------------------------------------------------

ngramspec_batch_config ngramspec_batch_config_default(void) {
  const ngramspec::BatchConfig config;
  ngramspec_batch_config c;
  c.max_sequences = config.max_sequences;
  c.max_pass_tokens = config.max_pass_tokens;
  c.max_record_tokens = config.max_record_tokens;
  c.cost = nullptr;
  c.default_drafter = 1;
  c.drafter = to_c(ngramspec::MatchConfig{});
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
  if (!to_cpp(preference, cpp_preference, __func__)) return NGRAMSPEC_ERROR_INVALID_ARGUMENT;
  return create_batch(__func__, config, corpus, file, cpp_preference, {}, out);
}

ngramspec_status ngramspec_batch_create_vocab(const ngramspec_batch_config* config, ngramspec_corpus* corpus,
                                              const ngramspec_corpus_file* file, int preference, uint64_t vocab_size,
                                              uint64_t tokenizer_fingerprint, ngramspec_batch** out) {
  if (out == nullptr) return null_argument(__func__, "out");
  ngramspec::CorpusPreference cpp_preference{};
  if (!to_cpp(preference, cpp_preference, __func__)) return NGRAMSPEC_ERROR_INVALID_ARGUMENT;
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
  try {
    ngramspec::DecodeOptions& d = batch->options;
    d.max_new_tokens = o.max_new_tokens;
    d.stop_tokens.assign(o.stop_tokens, o.stop_tokens + o.n_stop_tokens);
    d.max_context = o.max_context;
    d.speculate = o.speculate != 0;
    d.max_drafts = o.max_drafts;
    batch->visit([&](auto& spec) { spec.begin(id, std::span<const ngramspec::Token>(prompt, prompt_length), d); });
    return NGRAMSPEC_OK;
  } catch (...) {
    char subject[48];
    std::snprintf(subject, sizeof subject, "sequence %" PRIu64 ": ", id);
    return translate_exception(__func__, subject);
  }
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
  if (n_ids > batch->steps.size()) return too_many_ids(__func__, n_ids, *batch);
  try {
    *n_drafts = batch->visit([&](auto& spec) {
      return spec.propose(std::span<const ngramspec::SequenceId>(ids, n_ids),
                          std::span<ngramspec::Token>(drafts, drafts_capacity),
                          std::span<std::size_t>(offsets, n_ids + 1), extra_tokens);
    });
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(__func__);
  }
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
  if (n_ids > batch->steps.size()) return too_many_ids(__func__, n_ids, *batch);
  try {
    const std::span<ngramspec::StepOutcome> outcomes = std::span<ngramspec::StepOutcome>(batch->steps).first(n_ids);
    batch->visit([&](auto& spec) {
      spec.accept(std::span<const ngramspec::SequenceId>(ids, n_ids),
                  std::span<const ngramspec::Token>(model_tokens, n_model_tokens),
                  std::span<const std::size_t>(offsets, n_ids + 1), outcomes);
    });
    for (std::size_t i = 0; i < n_ids; ++i) steps[i] = to_c(outcomes[i]);
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(__func__);
  }
}

ngramspec_status ngramspec_batch_finish(ngramspec_batch* batch, ngramspec_sequence_id id) {
  if (batch == nullptr) return null_argument(__func__, "batch");
  try {
    batch->visit([id](auto& spec) { spec.finish(id); });
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(__func__);
  }
}

ngramspec_status ngramspec_batch_cancel(ngramspec_batch* batch, ngramspec_sequence_id id) {
  if (batch == nullptr) return null_argument(__func__, "batch");
  try {
    batch->visit([id](auto& spec) { spec.cancel(id); });
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(__func__);
  }
}

int ngramspec_batch_contains(const ngramspec_batch* batch, ngramspec_sequence_id id) {
  return batch != nullptr && batch->visit([id](const auto& spec) { return spec.contains(id); }) ? 1 : 0;
}

size_t ngramspec_batch_size(const ngramspec_batch* batch) {
  return batch == nullptr ? 0 : batch->visit([](const auto& spec) { return spec.size(); });
}

size_t ngramspec_batch_memory_bytes(const ngramspec_batch* batch) {
  if (batch == nullptr) return 0;
  return batch->visit([](const auto& spec) { return spec.memory_bytes() - sizeof(spec); }) + sizeof(ngramspec_batch) +
         (batch->table ? batch->table->memory_bytes() : 0) + batch->steps.capacity() * sizeof(ngramspec::StepOutcome) +
         batch->options.stop_tokens.capacity() * sizeof(ngramspec::Token);
}

ngramspec_tree_config ngramspec_tree_config_default(void) { return to_c(ngramspec::TreeConfig{}); }

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
  if (!to_cpp(preference, cpp_preference, __func__)) return NGRAMSPEC_ERROR_INVALID_ARGUMENT;
  return create_tree_batch(__func__, config, tree, corpus, file, cpp_preference,
                           Vocabulary{vocab_size, tokenizer_fingerprint}, out);
}

size_t ngramspec_batch_top_k(const ngramspec_batch* batch) {
  return batch == nullptr ? 0 : batch->visit([](const auto& spec) { return spec.top_k(); });
}

ngramspec_status ngramspec_batch_propose_trees(ngramspec_batch* batch, const ngramspec_sequence_id* ids, size_t n_ids,
                                               ngramspec_token* tokens, int32_t* parents, size_t capacity,
                                               size_t* offsets, size_t extra_tokens, size_t* n_nodes) {
  if (batch == nullptr) return null_argument(__func__, "batch");
  ngramspec_batch::TreeSpeculator* spec = nullptr;
  if (const ngramspec_status bad = tree_speculator(__func__, *batch, spec); bad != NGRAMSPEC_OK) return bad;
  if (ids == nullptr && n_ids != 0) return null_array(__func__, "ids", "n_ids", n_ids);
  if (const ngramspec_status bad = check_tokens(__func__, tokens, "tokens", "capacity", capacity);
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (const ngramspec_status bad = check_array(__func__, parents, "parents", "capacity", capacity, sizeof(int32_t));
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (offsets == nullptr) return null_argument(__func__, "offsets");
  if (n_nodes == nullptr) return null_argument(__func__, "n_nodes");
  if (n_ids > batch->steps.size()) return too_many_ids(__func__, n_ids, *batch);
  try {
    *n_nodes = spec->propose_trees(std::span<const ngramspec::SequenceId>(ids, n_ids),
                                   std::span<ngramspec::Token>(tokens, capacity),
                                   std::span<std::int32_t>(parents, capacity), std::span<std::size_t>(offsets, n_ids + 1),
                                   extra_tokens);
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(__func__);
  }
}

ngramspec_status ngramspec_batch_accept_trees(ngramspec_batch* batch, const ngramspec_sequence_id* ids, size_t n_ids,
                                              const ngramspec_token* model_tokens, size_t n_model_tokens,
                                              const size_t* offsets, const ngramspec_token* top, size_t n_top,
                                              ngramspec_step* steps, size_t* kept, size_t kept_capacity) {
  if (batch == nullptr) return null_argument(__func__, "batch");
  ngramspec_batch::TreeSpeculator* spec = nullptr;
  if (const ngramspec_status bad = tree_speculator(__func__, *batch, spec); bad != NGRAMSPEC_OK) return bad;
  if (ids == nullptr && n_ids != 0) return null_array(__func__, "ids", "n_ids", n_ids);
  if (const ngramspec_status bad = check_tokens(__func__, model_tokens, "model_tokens", "n_model_tokens", n_model_tokens);
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (offsets == nullptr) return null_argument(__func__, "offsets");
  if (const ngramspec_status bad = check_tokens(__func__, top, "top", "n_top", n_top); bad != NGRAMSPEC_OK) return bad;
  if (steps == nullptr && n_ids != 0) return null_array(__func__, "steps", "n_ids", n_ids);
  if (const ngramspec_status bad = check_array(__func__, kept, "kept", "kept_capacity", kept_capacity, sizeof(size_t));
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (n_ids > batch->steps.size()) return too_many_ids(__func__, n_ids, *batch);
  try {
    const std::span<ngramspec::StepOutcome> outcomes = std::span<ngramspec::StepOutcome>(batch->steps).first(n_ids);
    spec->accept_trees(std::span<const ngramspec::SequenceId>(ids, n_ids),
                       std::span<const ngramspec::Token>(model_tokens, n_model_tokens),
                       std::span<const std::size_t>(offsets, n_ids + 1), std::span<const ngramspec::Token>(top, n_top),
                       outcomes, std::span<std::size_t>(kept, kept_capacity));
    for (std::size_t i = 0; i < n_ids; ++i) steps[i] = to_c(outcomes[i]);
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(__func__);
  }
}

ngramspec_status ngramspec_batch_stats_get(const ngramspec_batch* batch, ngramspec_batch_stats* out) {
  if (batch == nullptr) return null_argument(__func__, "batch");
  if (out == nullptr) return null_argument(__func__, "out");
  const ngramspec::BatchStats& stats = batch->visit([](const auto& spec) -> const ngramspec::BatchStats& { return spec.stats(); });
  out->proposals = stats.proposals;
  out->drafted = stats.drafted;
  out->accepted = stats.accepted;
  out->emitted = stats.emitted;
  out->out_of_vocabulary = stats.out_of_vocabulary;
  return NGRAMSPEC_OK;
}

// ---- Verify costs and the draft planner ---------------------------------------------------------

struct ngramspec_verify_cost {
  ngramspec::VerifyCost cost;
  std::string spec;  // cost.normalized().spec(), kept for ngramspec_verify_cost_spec
};

ngramspec_status ngramspec_verify_cost_create(const char* spec, ngramspec_verify_cost** out) {
  if (out == nullptr) return null_argument(__func__, "out");
  if (spec == nullptr) return null_argument(__func__, "spec");
  try {
    ngramspec::VerifyCost cost = ngramspec::VerifyCost::parse(spec);
    std::string normalized = cost.normalized().spec();
    *out = new ngramspec_verify_cost{std::move(cost), std::move(normalized)};
    return NGRAMSPEC_OK;
  } catch (...) {
    return translate_exception(__func__);
  }
}

void ngramspec_verify_cost_free(ngramspec_verify_cost* cost) { delete cost; }

double ngramspec_verify_cost_of(const ngramspec_verify_cost* cost, size_t tokens) {
  return cost == nullptr ? 0.0 : cost->cost(tokens);
}

double ngramspec_verify_cost_of_pass(const ngramspec_verify_cost* cost, size_t base_tokens, size_t drafts) {
  return cost == nullptr ? 0.0 : cost->cost.pass(base_tokens, drafts);
}

const char* ngramspec_verify_cost_spec(const ngramspec_verify_cost* cost) {
  return cost == nullptr ? "" : cost->spec.c_str();
}

ngramspec_status ngramspec_plan_drafts(const ngramspec_verify_cost* cost, size_t base_tokens, double base_expected,
                                       float* probabilities, size_t n, size_t* count) {
  if (count == nullptr) return null_argument(__func__, "count");
  if (const ngramspec_status bad = check_array(__func__, probabilities, "probabilities", "n", n, sizeof(float));
      bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (!std::isfinite(base_expected) || base_expected <= 0) {
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
                "%s: base_expected = %g is invalid: it must be finite and positive (a pass emits at least its "
                "model token)",
                __func__, base_expected);
  }
  *count = ngramspec::DraftPlanner::plan_one(cost == nullptr ? nullptr : &cost->cost, base_tokens, base_expected, 0,
                                             std::span<float>(probabilities, n));
  return NGRAMSPEC_OK;
}

}  // extern "C"
