#include "support/allocation_counter.hpp"

#include <cstdlib>
#include <new>

namespace {
thread_local std::size_t g_allocations = 0;
thread_local bool g_active = false;

void* counted_alloc(std::size_t size) {
  if (g_active) ++g_allocations;
  if (size == 0) size = 1;
  if (void* p = std::malloc(size)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t size) { return counted_alloc(size); }
void* operator new[](std::size_t size) { return counted_alloc(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  if (g_active) ++g_allocations;
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  if (g_active) ++g_allocations;
  return std::malloc(size == 0 ? 1 : size);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace ngramspec::test {

AllocationCounter::AllocationCounter() noexcept : start_(g_allocations), was_active_(g_active) { g_active = true; }
AllocationCounter::~AllocationCounter() { g_active = was_active_; }
std::size_t AllocationCounter::count() const noexcept { return g_allocations - start_; }

}  // namespace ngramspec::test
