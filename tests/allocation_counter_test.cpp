// The allocation counter that the zero-allocation tests rely on: a counter that counted
// nothing would make every one of them pass.
#include <gtest/gtest.h>

#include <memory>
#include <new>
#include <vector>

#include "support/allocation_counter.hpp"

namespace ngramspec::test {
namespace {

// Allocations whose result is never used may be elided by the optimizer; this one is observed.
int* volatile g_observed = nullptr;
std::unique_ptr<int> allocate(int value) {
  auto p = std::make_unique<int>(value);
  g_observed = p.get();
  return p;
}

TEST(AllocationCounter, CountsAllocationsMadeWhileItLives) {
  std::size_t inside = 0;
  {
    const AllocationCounter counter;
    auto a = allocate(1);
    std::vector<int> v(64);
    g_observed = v.data();
    inside = counter.count();
  }
  EXPECT_EQ(inside, 2U);
}

TEST(AllocationCounter, CountsNothingOutsideItsLifetime) {
  std::size_t count = 0;
  {
    const AllocationCounter counter;
    count = counter.count();
  }
  auto outside = allocate(2);
  EXPECT_EQ(count, 0U);
}

TEST(AllocationCounter, NestedCountersEachCountFromTheirStart) {
  const AllocationCounter outer;
  auto first = allocate(1);
  std::size_t inner_count = 0;
  {
    const AllocationCounter inner;
    auto second = allocate(2);
    inner_count = inner.count();
  }
  auto third = allocate(3);
  const std::size_t outer_count = outer.count();  // read before any assertion, which may allocate
  EXPECT_EQ(inner_count, 1U);
  EXPECT_EQ(outer_count, 3U);
}

TEST(FailingAllocations, LetsTheFirstAllocationsThroughThenThrowsBadAlloc) {
  std::unique_ptr<int> first;
  bool threw = false;
  std::size_t failed = 0;
  int* nothrow = nullptr;
  {
    const FailingAllocations failing(1);
    first = allocate(1);
    try {
      auto second = allocate(2);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    nothrow = new (std::nothrow) int(3);
    failed = failing.failed();
  }
  auto after = allocate(4);  // allocations work again once it is gone
  EXPECT_NE(first, nullptr);
  EXPECT_TRUE(threw);
  EXPECT_EQ(nothrow, nullptr);
  EXPECT_EQ(failed, 2U);
  EXPECT_EQ(*after, 4);
}

}  // namespace
}  // namespace ngramspec::test
