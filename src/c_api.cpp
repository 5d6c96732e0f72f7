// The C ABI (include/ngramspec/ngramspec.h) over the C++ classes: the version, the thread's last
// error, the verify costs and the draft planner. The corpora are in c_api/corpus.cpp, the single
// drafters in c_api/drafters.cpp, the batches in c_api/batch.cpp; what they share is in
// c_api/common.hpp.

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "c_api/common.hpp"
#include "ngramspec/allocation_error.hpp"
#include "ngramspec/argument_error.hpp"
#include "ngramspec/corpus_file.hpp"
#include "ngramspec/detail/number_text.hpp"
#include "ngramspec/draft_planner.hpp"
#include "ngramspec/ngramspec.h"
#include "ngramspec/token.hpp"
#include "ngramspec/verify_cost.hpp"
#include "ngramspec/version.hpp"

static_assert(NGRAMSPEC_VERSION_MAJOR == ngramspec::kVersionMajor && NGRAMSPEC_VERSION_MINOR == ngramspec::kVersionMinor &&
                  NGRAMSPEC_VERSION_PATCH == ngramspec::kVersionPatch,
              "ngramspec.h's NGRAMSPEC_VERSION_* and ngramspec/version.hpp disagree");
static_assert(std::is_same_v<ngramspec_token, ngramspec::Token>);

#define NGRAMSPEC_C_API_STRING_(x) #x
#define NGRAMSPEC_C_API_STRING(x) NGRAMSPEC_C_API_STRING_(x)

namespace {

constexpr const char* kVersionString = NGRAMSPEC_C_API_STRING(NGRAMSPEC_VERSION_MAJOR) "." NGRAMSPEC_C_API_STRING(
    NGRAMSPEC_VERSION_MINOR) "." NGRAMSPEC_C_API_STRING(NGRAMSPEC_VERSION_PATCH);
#ifdef NGRAMSPEC_PROJECT_VERSION
static_assert(std::string_view(kVersionString) == NGRAMSPEC_PROJECT_VERSION,
              "ngramspec.h's NGRAMSPEC_VERSION_* and the CMake project version disagree");
#endif

constexpr std::size_t kErrorBytes = 1024;
thread_local char t_last_error[kErrorBytes] = "";

// No array is larger than PTRDIFF_MAX bytes (pointer differences must hold its size), so a count
// of elements whose bytes exceed it, or wrap round size_t, is not a real array's: a negative
// number converted, a length in bytes, garbage. It is refused before any element is read.
constexpr std::size_t kLargestArrayBytes = static_cast<std::size_t>(PTRDIFF_MAX);

// A located library error (ArgumentError, DomainError) in C terms: the C function's name, then the
// detail. A member of BatchSpeculator, which the batch calls wrap one for one, gives way to the C
// function; a class or setting that threw ("ngramspec::BatchConfig") stays as context before the
// detail; the library's free functions and settings ("ngramspec") do not name the sequence, so
// `subject` ("sequence 7: ") goes first.
template <class Error>
ngramspec_status located_error(const char* function, const char* subject, const Error& e) noexcept {
  constexpr std::string_view kSpeculatorMember = "ngramspec::BatchSpeculator::";
  const std::string_view where = e.where();
  const std::string_view shown = where.starts_with(kSpeculatorMember) || where == "ngramspec" || where.empty()
                                     ? e.detail()
                                     : std::string_view(e.what());
  return ngramspec::c_api::fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT, "%s: %s%.*s", function,
                                where == "ngramspec" ? subject : "", static_cast<int>(shown.size()), shown.data());
}

}  // namespace

namespace ngramspec::c_api {

ngramspec_status fail(ngramspec_status status, const char* format, ...) noexcept {
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

ngramspec_status translate_exception(const Where& where) noexcept {
  // "sequence 7: " before a message that does not name its sequence.
  char subject[48] = "";
  if (where.sequence) std::snprintf(subject, sizeof subject, "sequence %" PRIu64 ": ", *where.sequence);
  const char* const function = where.function;
  try {
    throw;
  } catch (const AllocationError& e) {  // names what was being made
    return fail(NGRAMSPEC_ERROR_OUT_OF_MEMORY, "%s: %sout of memory: %s", function, subject, e.what());
  } catch (const std::bad_alloc&) {
    return fail(NGRAMSPEC_ERROR_OUT_OF_MEMORY, "%s: %sout of memory", function, subject);
  } catch (const CorpusFileError& e) {  // names the file, the section and the problem
    return fail(NGRAMSPEC_ERROR_CORPUS_FILE, "%s: %s%s", function, subject, e.what());
  } catch (const ArgumentError& e) {
    return located_error(function, subject, e);
  } catch (const DomainError& e) {  // a row of logits the sampler cannot draw from
    return located_error(function, subject, e);
  } catch (const std::invalid_argument& e) {  // not the library's own: as it is
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT, "%s: %s", function, e.what());
  } catch (const std::domain_error& e) {
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT, "%s: %s", function, e.what());
  } catch (const std::exception& e) {
    return fail(NGRAMSPEC_ERROR_INTERNAL, "%s: %s%s", function, subject, e.what());
  } catch (...) {
    return fail(NGRAMSPEC_ERROR_INTERNAL, "%s: %san exception that is not a std::exception", function, subject);
  }
}

ngramspec_status null_argument(const char* where, const char* name) noexcept {
  return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", where, name);
}

ngramspec_status null_array(const char* where, const char* name, const char* count_name, std::size_t count) noexcept {
  return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL but %s = %zu", where, name, count_name, count);
}

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

bool to_cpp(int value, CorpusPreference& out, const char* where) noexcept {
  switch (value) {
    case NGRAMSPEC_PREFER_LONGER_MATCH: out = CorpusPreference::longer_match; return true;
    case NGRAMSPEC_PREFER_LIVE: out = CorpusPreference::live; return true;
    case NGRAMSPEC_PREFER_FILE: out = CorpusPreference::file; return true;
    default: break;
  }
  fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
       "%s: preference = %d is invalid: it must be NGRAMSPEC_PREFER_LONGER_MATCH (0), NGRAMSPEC_PREFER_LIVE (1) or "
       "NGRAMSPEC_PREFER_FILE (2)",
       where, value);
  return false;
}

CostSpec parse_cost_spec(std::string_view spec) {
  constexpr std::string_view kLearn = "learn";
  if (!spec.starts_with(kLearn)) return CostSpec{false, VerifyCost::parse(spec)};
  if (spec.size() == kLearn.size()) return CostSpec{true, std::nullopt};
  if (spec[kLearn.size()] != ':') {
    throw ArgumentError("ngramspec::VerifyCost", "'" + std::string(spec) +
                                                     "' is not a cost: expected flat, knee:N, table:TOKENS=COST,..., "
                                                     "learn or learn:SPEC (learned, SPEC its prior)");
  }
  try {
    return CostSpec{true, VerifyCost::parse(spec.substr(kLearn.size() + 1))};
  } catch (const ArgumentError& e) {
    throw ArgumentError("ngramspec::VerifyCost",
                        "'" + std::string(spec) + "': its prior is not a cost: " + std::string(e.detail()));
  }
}

ngramspec_status check_base_expected(const char* where, double base_expected) noexcept {
  if (std::isfinite(base_expected) && base_expected > 0) return NGRAMSPEC_OK;
  return guarded_value(Where{where}, NGRAMSPEC_ERROR_INTERNAL, [&] {
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
                "%s: base_expected = %s is invalid: it must be finite and positive (a pass emits at least its "
                "model token)",
                where, ngramspec::detail::number_text(base_expected).c_str());
  });
}

ngramspec_status write_text(const char* where, std::string_view text, char* out, std::size_t capacity,
                            std::size_t* length) noexcept {
  if (length == nullptr) return null_argument(where, "length");
  if (const ngramspec_status bad = check_array(where, out, "out", "capacity", capacity, 1); bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (capacity != 0) {
    const std::size_t n = std::min(text.size(), capacity - 1);
    if (n != 0) std::memcpy(out, text.data(), n);  // an empty view may hold no pointer at all
    out[n] = '\0';
  }
  *length = text.size();
  return NGRAMSPEC_OK;
}

}  // namespace ngramspec::c_api

struct ngramspec_verify_cost {
  ngramspec::VerifyCost cost;
  std::string spec;  // cost.normalized().spec(), kept for ngramspec_verify_cost_spec
};

using namespace ngramspec::c_api;  // the parts every C function uses

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

// ---- Verify costs and the draft planner ---------------------------------------------------------

ngramspec_status ngramspec_verify_cost_create(const char* spec, ngramspec_verify_cost** out) {
  if (out == nullptr) return null_argument(__func__, "out");
  if (spec == nullptr) return null_argument(__func__, "spec");
  if (std::string_view(spec).starts_with("learn")) {
    return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
                "%s: spec = '%s' is not a fixed curve: a learned cost is a batch's (ngramspec_batch_config::cost) or "
                "ngramspec_learned_cost_create's",
                __func__, spec);
  }
  return guarded(Where{__func__}, [&] {
    ngramspec::VerifyCost cost = ngramspec::VerifyCost::parse(spec);
    std::string normalized = cost.normalized().spec();
    *out = new ngramspec_verify_cost{std::move(cost), std::move(normalized)};
  });
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
  if (const ngramspec_status bad = check_base_expected(__func__, base_expected); bad != NGRAMSPEC_OK) return bad;
  *count = ngramspec::DraftPlanner::plan_one(cost == nullptr ? nullptr : &cost->cost, base_tokens, base_expected, 0,
                                             std::span<float>(probabilities, n));
  return NGRAMSPEC_OK;
}

}  // extern "C"
