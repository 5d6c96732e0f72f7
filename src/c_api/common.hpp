// What every part of the C ABI (include/ngramspec/ngramspec.h) shares: the handles over the C++
// objects, the thread's last error, the argument checks, and the guarded call that keeps every
// exception on the C++ side of the boundary.
//
// Every entry point checks its handles, pointers and sizes itself, then calls the C++ object inside
// guarded(), so no exception crosses the boundary. The C++ calls validate all of their arguments
// before they change anything, so a call that fails changes nothing. A failure writes its message
// to a fixed thread-local buffer: reporting never allocates, not even after an allocation failed.

#ifndef NGRAMSPEC_SRC_C_API_COMMON_HPP
#define NGRAMSPEC_SRC_C_API_COMMON_HPP

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

#include "ngramspec/corpus_file.hpp"
#include "ngramspec/learned_cost.hpp"
#include "ngramspec/mapped_corpus.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/ngramspec.h"
#include "ngramspec/shared_corpus.hpp"
#include "ngramspec/token.hpp"
#include "ngramspec/verify_cost.hpp"

namespace ngramspec::c_api {

/// A C handle's C++ object; a handle is `struct ngramspec_x : Handle<X>`.
template <class T>
struct Handle {
  template <class... Args>
  explicit Handle(Args&&... args) : object(std::forward<Args>(args)...) {}
  T object;
};

}  // namespace ngramspec::c_api

struct ngramspec_corpus : ngramspec::c_api::Handle<ngramspec::SharedCorpus> {
  using Handle::Handle;
};

struct ngramspec_corpus_file : ngramspec::c_api::Handle<ngramspec::MappedCorpus> {
  explicit ngramspec_corpus_file(const char* path) : Handle(std::filesystem::path(path)) {}
};

struct ngramspec_match_drafter : ngramspec::c_api::Handle<ngramspec::MatchDrafter> {
  using Handle::Handle;
};

struct ngramspec_ngram_predictor : ngramspec::c_api::Handle<ngramspec::NGramPredictor> {
  using Handle::Handle;
};

namespace ngramspec::c_api {

// ---- Errors ------------------------------------------------------------------------------------

/// Where a failure happened, as the C caller knows it: the C function and, for a call about one
/// sequence, the sequence (named in front of a message that does not name it).
struct Where {
  const char* function;
  std::optional<ngramspec_sequence_id> sequence = std::nullopt;
};

/// Writes the calling thread's last error (cut to its buffer, ending "..." when cut); returns `status`.
[[gnu::format(printf, 2, 3)]] ngramspec_status fail(ngramspec_status status, const char* format, ...) noexcept;

/// The status and message of the exception being handled; call it only from a catch block.
ngramspec_status translate_exception(const Where& where) noexcept;

/// Calls `f`, which returns nothing or a status; an exception becomes its status and the thread's
/// last error, named by `where`.
template <class F>
ngramspec_status guarded(const Where& where, F&& f) noexcept {
  try {
    if constexpr (std::is_void_v<std::invoke_result_t<F&>>) {
      f();
      return NGRAMSPEC_OK;
    } else {
      return f();
    }
  } catch (...) {
    return translate_exception(where);
  }
}

/// guarded() for the calls that return a value rather than a status: `on_failure` when `f` throws.
template <class T, class F>
T guarded_value(const Where& where, T on_failure, F&& f) noexcept {
  try {
    return f();
  } catch (...) {
    translate_exception(where);
    return on_failure;
  }
}

// ---- Argument checks ---------------------------------------------------------------------------

/// `name` is NULL.
ngramspec_status null_argument(const char* where, const char* name) noexcept;

/// `name` is NULL but its count is not 0.
ngramspec_status null_array(const char* where, const char* name, const char* count_name, std::size_t count) noexcept;

/// NGRAMSPEC_OK when `pointer` and `count` (of `element_bytes`-byte elements) can be an array: not
/// NULL unless empty, and no larger than the largest array.
ngramspec_status check_array(const char* where, const void* pointer, const char* name, const char* count_name,
                             std::size_t count, std::size_t element_bytes) noexcept;

/// check_array for an array of tokens.
inline ngramspec_status check_tokens(const char* where, const void* pointer, const char* name,
                                     const char* count_name, std::size_t count) noexcept {
  return check_array(where, pointer, name, count_name, count, sizeof(ngramspec_token));
}

/// A corpus preference from C: any int, checked against the enum (false: refused, the last error set).
bool to_cpp(int value, CorpusPreference& out, const char* where) noexcept;

/// A MatchConfig from C (NULL: the defaults).
MatchConfig to_cpp(const ngramspec_match_config* config) noexcept;

/// A MatchConfig in C.
ngramspec_match_config to_c(const MatchConfig& config) noexcept;

/// A cost spec as the C ABI takes it (ngramspec_batch_config::cost): "learn" (learned, no prior),
/// "learn:SPEC" (learned, SPEC its prior) or a fixed curve (VerifyCost::parse).
struct CostSpec {
  bool learn = false;
  std::optional<VerifyCost> curve;  // the fixed curve, or the prior
};

/// Reads `spec`; throws ArgumentError naming the spec and what is wrong with it.
CostSpec parse_cost_spec(std::string_view spec);

/// NGRAMSPEC_OK when base_expected (what a pass emits without drafts) is finite and positive.
ngramspec_status check_base_expected(const char* where, double base_expected) noexcept;

/// `text` into the caller's buffer as snprintf writes: at most capacity - 1 bytes and a NUL (nothing for
/// capacity 0), its whole length to *length. `out` may be NULL only when capacity is 0.
ngramspec_status write_text(const char* where, std::string_view text, char* out, std::size_t capacity,
                            std::size_t* length) noexcept;

/// A learned cost's totals into the caller's ngramspec_learned_cost_stats of out_size bytes (a version's size).
ngramspec_status learned_cost_stats(const char* where, const LearnedCost& cost, ngramspec_learned_cost_stats* out,
                                    std::size_t out_size) noexcept;

/// A handle's C++ object, or nothing for NULL: the corpora a drafter may read.
template <class H>
auto* object_of(H* handle) noexcept {
  return handle != nullptr ? &handle->object : nullptr;
}

/// The model's vocabulary as the create calls take it.
struct Vocabulary {
  std::uint64_t size = 0;
  std::uint64_t tokenizer_fingerprint = 0;
};

/// The single-drafter handles' update (a noexcept C++ update); `name` is the handle's parameter.
template <class H>
ngramspec_status update_handle(const char* where, H* handle, const char* name, const ngramspec_token* tokens,
                               std::size_t count) noexcept {
  if (handle == nullptr) return null_argument(where, name);
  if (const ngramspec_status bad = check_tokens(where, tokens, "tokens", "count", count); bad != NGRAMSPEC_OK) {
    return bad;
  }
  handle->object.update(std::span<const Token>(tokens, count));
  return NGRAMSPEC_OK;
}

/// The single-drafter handles' predict (a noexcept C++ predict), with the drafts' confidences when
/// `probabilities` is not NULL.
template <class H>
ngramspec_status predict_handle(const char* where, const H* handle, const char* name, ngramspec_token* out,
                                std::size_t capacity, float* probabilities, std::size_t* count) noexcept {
  if (handle == nullptr) return null_argument(where, name);
  if (const ngramspec_status bad = check_tokens(where, out, "out", "capacity", capacity); bad != NGRAMSPEC_OK) {
    return bad;
  }
  if (count == nullptr) return null_argument(where, "count");
  const std::span<Token> drafts(out, capacity);
  *count = probabilities != nullptr ? handle->object.predict(drafts, std::span<float>(probabilities, capacity))
                                    : handle->object.predict(drafts);
  return NGRAMSPEC_OK;
}

/// The single-drafter handles' reset (a noexcept C++ reset).
template <class H>
ngramspec_status reset_handle(const char* where, H* handle, const char* name) noexcept {
  if (handle == nullptr) return null_argument(where, name);
  handle->object.reset();
  return NGRAMSPEC_OK;
}

/// `new H(args...)` into `*out`, guarded.
template <class H, class... Args>
ngramspec_status create_handle(const char* where, H** out, Args&&... args) noexcept {
  if (out == nullptr) return null_argument(where, "out");
  return guarded(Where{where}, [&] { *out = new H(std::forward<Args>(args)...); });
}

// ---- Versioned structs --------------------------------------------------------------------------

/// One version of a versioned C struct (one whose first field is struct_size): where its last field
/// ends, and its alignment, its widest field's. A program built against that version's header sets
/// struct_size to its sizeof, the end rounded up to the alignment (the tail padding that a later version
/// may fill with a field of its own); one that set it to the end is read alike.
struct StructVersion {
  std::size_t end;
  std::size_t align;
  [[nodiscard]] constexpr std::size_t size() const noexcept { return (end + align - 1) / align * align; }
};

/// The alignment of T as a struct member (uint64_t's is 4 on i386, though alignof says 8).
template <class T>
struct AsMember {
  T value;
};
template <class... T>
inline constexpr std::size_t member_align = std::max({alignof(AsMember<T>)...});

/// The bytes to read of a struct whose struct_size is `size`: the end of the version whose end or
/// sizeof it is (the padding after it is not that version's, and may be garbage); 0 for any other size.
constexpr std::size_t struct_bytes(std::span<const StructVersion> versions, std::size_t size) noexcept {
  for (const StructVersion& v : versions) {
    if (size == v.end || size == v.size()) return v.end;
  }
  return 0;
}

/// Refuses a size that no version of `type` has: `name` (a struct's struct_size field, or a size argument)
/// = `size`, naming the sizes that are read. `set_by`: the call that sets struct_size, NULL for none.
inline ngramspec_status bad_struct_size(const char* where, const char* name, const char* type, std::size_t size,
                                        std::span<const StructVersion> versions, const char* set_by) noexcept {
  char sizes[160] = "";
  std::size_t used = 0;
  std::size_t last = 0;  // versions ascend, so a size already written is the last one
  for (const StructVersion& v : versions) {
    for (const std::size_t s : {v.end, v.size()}) {
      if (s == last) continue;
      const std::size_t room = sizeof sizes - used;
      const int n = std::snprintf(sizes + used, room, "%s%zu", used != 0 ? ", " : "", s);
      if (n < 0 || static_cast<std::size_t>(n) >= room) break;
      used += static_cast<std::size_t>(n);
      last = s;
    }
  }
  return fail(NGRAMSPEC_ERROR_INVALID_ARGUMENT,
              "%s: %s = %zu is invalid: it must be the size of a version of %s, one of %s (%zu: sizeof(%s) of this "
              "header%s%s)",
              where, name, size, type, sizes, versions.back().size(), type, set_by != nullptr ? ", set by " : "",
              set_by != nullptr ? set_by : "");
}

/// The first `struct_size` bytes of `defaults` into `out`, the caller's struct of that many bytes: the fields
/// of the version whose size it is, its tail padding zeroed, struct_size set; nothing past struct_size is
/// written. `defaults` has no indeterminate padding (it was cleared before its fields were set).
template <class T>
ngramspec_status init_struct(const char* where, const char* name, const char* type, T* out, std::size_t struct_size,
                             std::span<const StructVersion> versions, const T& defaults) noexcept {
  if (out == nullptr) return null_argument(where, name);
  const std::size_t bytes = struct_bytes(versions, struct_size);
  if (bytes == 0) return bad_struct_size(where, "struct_size", type, struct_size, versions, nullptr);
  auto* const destination = reinterpret_cast<unsigned char*>(out);
  std::memcpy(destination, &defaults, bytes);
  std::memset(destination + bytes, 0, struct_size - bytes);
  out->struct_size = struct_size;
  return NGRAMSPEC_OK;
}

}  // namespace ngramspec::c_api

#endif  // NGRAMSPEC_SRC_C_API_COMMON_HPP
