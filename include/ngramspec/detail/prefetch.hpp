#pragma once

namespace ngramspec::detail {

/// Starts loading the cache line at `address`, to be read, so that a miss overlaps other work.
/// Only a hint: a no-op where the compiler offers none.
inline void prefetch(const void* address) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(address);
#else
  static_cast<void>(address);
#endif
}

/// The same, for a line about to be written.
inline void prefetch_to_write(const void* address) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(address, 1);
#else
  static_cast<void>(address);
#endif
}

}  // namespace ngramspec::detail
