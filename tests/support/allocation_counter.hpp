#pragma once

#include <cstddef>

namespace ngramspec::test {

/// Counts calls to the global operator new made by this thread while an instance lives.
/// Linking tests/support/allocation_counter.cpp replaces the global allocation functions.
class AllocationCounter {
 public:
  AllocationCounter() noexcept;
  ~AllocationCounter();
  AllocationCounter(const AllocationCounter&) = delete;
  AllocationCounter& operator=(const AllocationCounter&) = delete;
  /// Allocations since construction.
  [[nodiscard]] std::size_t count() const noexcept;

 private:
  std::size_t start_;
  bool was_active_;
};

}  // namespace ngramspec::test
