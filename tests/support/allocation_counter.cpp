#include "support/allocation_counter.hpp"

#include <cstdlib>
#include <new>

namespace {
thread_local std::size_t g_allocations = 0;
thread_local bool g_active = false;
// FailingAllocations: while g_failing, allocations beyond the next g_left fail.
thread_local bool g_failing = false;
thread_local std::size_t g_left = 0;
thread_local std::size_t g_failed = 0;

// Counts the allocation; false when it must fail.
bool admit() noexcept {
  if (g_active) ++g_allocations;
  if (!g_failing) return true;
  if (g_left == 0) {
    ++g_failed;
    return false;
  }
  --g_left;
  return true;
}

void* counted_alloc(std::size_t size) {
  if (!admit()) throw std::bad_alloc();
  if (size == 0) size = 1;
  if (void* p = std::malloc(size)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t size) { return counted_alloc(size); }
void* operator new[](std::size_t size) { return counted_alloc(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  return admit() ? std::malloc(size == 0 ? 1 : size) : nullptr;
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return admit() ? std::malloc(size == 0 ? 1 : size) : nullptr;
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace ngramspec::test {

AllocationCounter::AllocationCounter() noexcept : start_(g_allocations), was_active_(g_active) { g_active = true; }
AllocationCounter::~AllocationCounter() { g_active = was_active_; }
std::size_t AllocationCounter::count() const noexcept { return g_allocations - start_; }

FailingAllocations::FailingAllocations(std::size_t succeed) noexcept
    : previous_left_(g_left), previous_failing_(g_failing), failed_start_(g_failed) {
  g_failing = true;
  g_left = succeed;
}
FailingAllocations::~FailingAllocations() {
  g_failing = previous_failing_;
  g_left = previous_left_;
}
std::size_t FailingAllocations::failed() const noexcept { return g_failed - failed_start_; }

}  // namespace ngramspec::test
