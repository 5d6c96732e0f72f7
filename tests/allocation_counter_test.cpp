// The allocation counter that the zero-allocation tests rely on: a counter that counted
// nothing would make every one of them pass.
#include <gtest/gtest.h>

#include <memory>
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

}  // namespace
}  // namespace ngramspec::test
