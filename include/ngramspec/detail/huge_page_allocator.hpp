#pragma once

#include <cstddef>
#include <new>

namespace ngramspec::detail {

/// Asks the system to back [memory, memory + bytes) with huge pages; a no-op where it cannot.
void advise_huge_pages(void* memory, std::size_t bytes) noexcept;

/// Allocator for the large tables probed at random (MatchDrafter's match index): a block of at
/// least kHugePageBytes is aligned to that size and, where the system offers it, backed by
/// transparent huge pages. One 2 MiB page maps what 512 small ones would, so random probes
/// into tables of many MiB stop missing the TLB on almost every access. Smaller blocks are
/// ordinary allocations. The memory is the same either way; only its mapping differs.
template <class T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

  HugePageAllocator() noexcept = default;
  template <class U>
  explicit HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

  [[nodiscard]] T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < kHugePageBytes) return static_cast<T*>(::operator new(bytes));
    void* memory = ::operator new(bytes, std::align_val_t{kHugePageBytes});
    advise_huge_pages(memory, bytes);
    return static_cast<T*>(memory);
  }
  void deallocate(T* memory, std::size_t n) noexcept {
    if (n * sizeof(T) < kHugePageBytes) {
      ::operator delete(memory);
    } else {
      ::operator delete(memory, std::align_val_t{kHugePageBytes});
    }
  }

  template <class U>
  bool operator==(const HugePageAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace ngramspec::detail
