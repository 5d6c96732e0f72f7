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

/// Makes this thread's allocations through the global operator new fail while an instance lives:
/// the first `succeed` of them succeed, every later one throws std::bad_alloc (the nothrow forms
/// return nullptr). For testing what a call does when memory runs out.
/// Linking tests/support/allocation_counter.cpp replaces the global allocation functions.
class FailingAllocations {
 public:
  explicit FailingAllocations(std::size_t succeed = 0) noexcept;
  ~FailingAllocations();
  FailingAllocations(const FailingAllocations&) = delete;
  FailingAllocations& operator=(const FailingAllocations&) = delete;
  /// Allocations refused so far.
  [[nodiscard]] std::size_t failed() const noexcept;

 private:
  std::size_t previous_left_;
  bool previous_failing_;
  std::size_t failed_start_;
};

}  // namespace ngramspec::test
