#include "ngramspec/detail/huge_page_allocator.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace ngramspec::detail {

void advise_huge_pages(void* memory, std::size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Only advice: where huge pages are off or unavailable the block stays in small pages.
  ::madvise(memory, bytes, MADV_HUGEPAGE);
#else
  static_cast<void>(memory);
  static_cast<void>(bytes);
#endif
}

}  // namespace ngramspec::detail
