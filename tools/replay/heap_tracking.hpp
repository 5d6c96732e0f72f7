#pragma once

#include <cstddef>

namespace ngramspec::replay {

/// Heap bytes currently allocated through the global operator new (this program only:
/// heap_tracking.cpp replaces the allocation functions).
[[nodiscard]] std::size_t live_heap_bytes() noexcept;
/// Highest live_heap_bytes() since the last reset_peak_heap_bytes().
[[nodiscard]] std::size_t peak_heap_bytes() noexcept;
void reset_peak_heap_bytes() noexcept;
/// Allocations made through the global operator new since the program started.
[[nodiscard]] std::size_t heap_allocations() noexcept;

}  // namespace ngramspec::replay
