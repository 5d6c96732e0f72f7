#pragma once

#include <cstddef>
#include <cstdio>
#include <new>
#include <utility>

namespace ngramspec {

/// An allocation failed: what() names what was being made and how many bytes it needed.
///
/// A std::bad_alloc, so code that handles running out of memory handles it; thrown in place of
/// the bare one by the constructors that make large, size-chosen structures (SharedCorpus,
/// BatchSpeculator's records). The message lives in the object: making it allocates nothing.
class AllocationError : public std::bad_alloc {
 public:
  /// "could not allocate <bytes> bytes for <what>".
  AllocationError(const char* what, std::size_t bytes) noexcept {
    std::snprintf(message_, sizeof message_, "could not allocate %zu bytes for %s", bytes, what);
  }
  [[nodiscard]] const char* what() const noexcept override { return message_; }

 private:
  char message_[256];
};

namespace detail {

/// make(), with a std::bad_alloc from it rethrown as an AllocationError naming `what` (a
/// NUL-terminated description that outlives the call) and `bytes`.
template <class Make>
decltype(auto) allocating(const char* what, std::size_t bytes, Make&& make) {
  try {
    return std::forward<Make>(make)();
  } catch (const AllocationError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw AllocationError(what, bytes);
  }
}

}  // namespace detail
}  // namespace ngramspec
