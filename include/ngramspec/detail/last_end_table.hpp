#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ngramspec/detail/huge_page_allocator.hpp"
#include "ngramspec/detail/prefetch.hpp"

namespace ngramspec::detail {

/// Fixed-capacity map from a 64-bit n-gram hash to the latest end position stored for it,
/// in 8-byte slots: 32 bits of the hash as a fingerprint and the position.
///
/// Built for indexes that store and overwrite but never erase (MatchDrafter's last-occurrence
/// tables): half the bytes of a full-key table means half the cache misses at long contexts.
/// Two keys that share a probe run and a fingerprint are merged, so a lookup can return the
/// end of a different n-gram; callers compare the tokens (MatchDrafter does), which turns that
/// rare case into a shorter match, never a false one. Linear probing from a Fibonacci home,
/// as in OpenTable; the fingerprint is the hash's low half, the home comes from all 64 bits.
class LastEndTable {
 public:
  /// A placeholder with no slots, only to be assigned a sized table.
  LastEndTable() = default;
  explicit LastEndTable(std::size_t max_entries)
      : slots_(std::bit_ceil(max_entries < 4 ? std::size_t{8} : 2 * max_entries)),
        mask_(slots_.size() - 1),
        shift_(64 - static_cast<unsigned>(std::countr_zero(slots_.size()))) {}

  /// Where a lookup of `key` begins; the calls below that take it save computing it again.
  [[nodiscard]] std::size_t home(std::uint64_t key) const noexcept {
    return static_cast<std::size_t>((key * 0x9e3779b97f4a7c15ULL) >> shift_);
  }

  /// The end stored for `key`, or 0.
  [[nodiscard]] std::uint32_t find(std::uint64_t key) const noexcept { return find(key, home(key)); }
  [[nodiscard]] std::uint32_t find(std::uint64_t key, std::size_t home) const noexcept {
    const std::uint32_t print = fingerprint(key);
    for (std::size_t i = home;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.end == 0 || slot.print == print) return slot.end;
    }
  }

  /// Stores `end` (>= 1) for `key`, replacing what was stored. Precondition: fewer than
  /// max_entries keys stored, or `key` among them.
  void store(std::uint64_t key, std::uint32_t end) noexcept { store(key, home(key), end); }
  void store(std::uint64_t key, std::size_t home, std::uint32_t end) noexcept {
    const std::uint32_t print = fingerprint(key);
    std::size_t i = home;
    while (slots_[i].end != 0 && slots_[i].print != print) i = (i + 1) & mask_;
    slots_[i] = Slot{print, end};
  }

  /// Stores `end` (>= 1) for `key` and returns the end stored before (0: none): find and
  /// store in one probe. Same precondition as store.
  std::uint32_t exchange(std::uint64_t key, std::size_t home, std::uint32_t end) noexcept {
    const std::uint32_t print = fingerprint(key);
    std::size_t i = home;
    while (slots_[i].end != 0 && slots_[i].print != print) i = (i + 1) & mask_;
    const std::uint32_t before = slots_[i].end;
    slots_[i] = Slot{print, end};
    return before;
  }

  /// Starts fetching the slot at `home`, so that the miss overlaps other work.
  void prefetch(std::size_t home) const noexcept { detail::prefetch(&slots_[home]); }

  void clear() noexcept {
    for (Slot& slot : slots_) slot = Slot{};
  }

  [[nodiscard]] std::size_t capacity() const noexcept { return slots_.size(); }
  [[nodiscard]] std::size_t memory_bytes() const noexcept { return slots_.capacity() * sizeof(Slot); }

 private:
  struct Slot {
    std::uint32_t print = 0;
    std::uint32_t end = 0;  // 0: empty
  };
  static_assert(sizeof(Slot) == 8);

  [[nodiscard]] static std::uint32_t fingerprint(std::uint64_t key) noexcept {
    return static_cast<std::uint32_t>(key);
  }
  // In huge pages once a table reaches 2 MiB (a cap of 131,072 tokens): every probe lands on
  // a random slot, and with small pages nearly every one would also miss the TLB.
  std::vector<Slot, HugePageAllocator<Slot>> slots_;
  std::size_t mask_ = 0;
  unsigned shift_ = 63;
};

}  // namespace ngramspec::detail
