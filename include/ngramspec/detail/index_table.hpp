#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "ngramspec/detail/fnv1a.hpp"

namespace ngramspec::detail {

/// Fixed-capacity open-addressing map from a 64-bit key to a 32-bit value.
///
/// Linear probing with backward-shift deletion, so erasing leaves no tombstones and probe
/// lengths stay short however long the stream runs. The capacity is fixed at construction
/// (at most half full), so insert and erase never allocate.
class IndexTable {
 public:
  static constexpr std::uint32_t kAbsent = std::numeric_limits<std::uint32_t>::max();

  IndexTable() = default;
  explicit IndexTable(std::size_t max_entries)
      : slots_(std::bit_ceil(max_entries < 4 ? std::size_t{8} : 2 * max_entries)),
        mask_(slots_.size() - 1) {}

  [[nodiscard]] std::uint32_t find(std::uint64_t key) const noexcept {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.value == kAbsent) return kAbsent;
      if (slot.key == key) return slot.value;
    }
  }

  /// Precondition: key is absent and size() < max_entries.
  void insert(std::uint64_t key, std::uint32_t value) noexcept {
    std::size_t i = home(key);
    while (slots_[i].value != kAbsent) i = (i + 1) & mask_;
    slots_[i] = Slot{key, value};
    ++size_;
  }

  /// Precondition: key is present.
  void erase(std::uint64_t key) noexcept {
    std::size_t hole = home(key);
    while (slots_[hole].key != key || slots_[hole].value == kAbsent) hole = (hole + 1) & mask_;
    // Shift later members of the probe run back into the hole when the hole lies between
    // their home slot and where they sit, so every key stays reachable from its home.
    for (std::size_t i = (hole + 1) & mask_; slots_[i].value != kAbsent; i = (i + 1) & mask_) {
      const std::size_t want = home(slots_[i].key);
      if (((i - want) & mask_) >= ((i - hole) & mask_)) {
        slots_[hole] = slots_[i];
        hole = i;
      }
    }
    slots_[hole].value = kAbsent;
    --size_;
  }

  void clear() noexcept {
    for (Slot& slot : slots_) slot.value = kAbsent;
    size_ = 0;
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t memory_bytes() const noexcept { return slots_.capacity() * sizeof(Slot); }

 private:
  struct Slot {
    std::uint64_t key = 0;
    std::uint32_t value = kAbsent;
  };

  [[nodiscard]] std::size_t home(std::uint64_t key) const noexcept {
    return static_cast<std::size_t>(mix64(key)) & mask_;
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace ngramspec::detail
