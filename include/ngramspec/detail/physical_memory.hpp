#pragma once

#include <cstddef>
#include <limits>

#include <unistd.h>

namespace ngramspec::detail {

/// The bytes of memory this machine has; 0 when the system does not say. The rule of every
/// structure whose size the caller chooses (SharedCorpus, TopKTable): one larger than this is
/// refused before it is allocated, since its memory is written as it is made and would drive
/// the machine out of memory rather than fail the allocation.
[[nodiscard]] inline std::size_t physical_memory_bytes() noexcept {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_bytes = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_bytes <= 0) return 0;
  const auto p = static_cast<std::size_t>(pages);
  const auto b = static_cast<std::size_t>(page_bytes);
  return p > std::numeric_limits<std::size_t>::max() / b ? std::numeric_limits<std::size_t>::max() : p * b;
#else
  return 0;
#endif
}

}  // namespace ngramspec::detail
