#include "heap_tracking.hpp"

#include <cstdlib>
#include <new>

// Each block carries its size in a header so that delete can account for it; the header is
// 16 bytes to keep the alignment operator new promises.
namespace {
constexpr std::size_t kHeader = 16;
std::size_t g_live = 0;
std::size_t g_peak = 0;
std::size_t g_allocations = 0;

void* tracked_alloc(std::size_t size) noexcept {
  auto* block = static_cast<unsigned char*>(std::malloc(size + kHeader));
  if (block == nullptr) return nullptr;
  *reinterpret_cast<std::size_t*>(block) = size;
  g_live += size;
  ++g_allocations;
  if (g_live > g_peak) g_peak = g_live;
  return block + kHeader;
}

void tracked_free(void* p) noexcept {
  if (p == nullptr) return;
  auto* block = static_cast<unsigned char*>(p) - kHeader;
  g_live -= *reinterpret_cast<std::size_t*>(block);
  std::free(block);
}

void* throwing_alloc(std::size_t size) {
  if (void* p = tracked_alloc(size)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t size) { return throwing_alloc(size); }
void* operator new[](std::size_t size) { return throwing_alloc(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return tracked_alloc(size); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return tracked_alloc(size); }
void operator delete(void* p) noexcept { tracked_free(p); }
void operator delete[](void* p) noexcept { tracked_free(p); }
void operator delete(void* p, std::size_t) noexcept { tracked_free(p); }
void operator delete[](void* p, std::size_t) noexcept { tracked_free(p); }

namespace ngramspec::replay {

std::size_t live_heap_bytes() noexcept { return g_live; }
std::size_t peak_heap_bytes() noexcept { return g_peak; }
void reset_peak_heap_bytes() noexcept { g_peak = g_live; }
std::size_t heap_allocations() noexcept { return g_allocations; }

}  // namespace ngramspec::replay
