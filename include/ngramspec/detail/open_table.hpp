#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ngramspec::detail {

/// Fixed-capacity open-addressing table of entries keyed by a 64-bit hash.
///
/// `Entry` has a member `std::uint64_t key` and a member function `bool empty() const`;
/// a value-initialized Entry is empty, and an entry stays non-empty while it is stored.
/// An entry's home slot is the top bits of its key times a 64-bit golden-ratio constant
/// (Fibonacci hashing): one multiply spreads every key bit, where FNV-1a alone leaves the
/// last bytes it fed weakly mixed. Linear probing with backward-shift deletion: erasing leaves no
/// tombstones, so probe lengths stay short however long the stream runs. The capacity is
/// fixed at construction (at least twice the most entries it will hold), so nothing here
/// allocates after that.
template <class Entry>
class OpenTable {
 public:
  /// A placeholder with no slots, only to be assigned a sized table.
  OpenTable() = default;
  explicit OpenTable(std::size_t max_entries)
      : slots_(std::bit_ceil(max_entries < 4 ? std::size_t{8} : 2 * max_entries)),
        mask_(slots_.size() - 1),
        shift_(64 - static_cast<unsigned>(std::countr_zero(slots_.size()))) {}

  /// The entry with `key`, or nullptr.
  [[nodiscard]] Entry* find(std::uint64_t key) noexcept {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      Entry& entry = slots_[i];
      if (entry.empty()) return nullptr;
      if (entry.key == key) return &entry;
    }
  }
  [[nodiscard]] const Entry* find(std::uint64_t key) const noexcept {
    return const_cast<OpenTable*>(this)->find(key);
  }

  /// The entry with `key`; when absent, a value-initialized entry with that key, which the
  /// caller must make non-empty before the next call. Precondition: size() < max_entries.
  [[nodiscard]] Entry& find_or_insert(std::uint64_t key) noexcept {
    std::size_t i = home(key);
    for (;; i = (i + 1) & mask_) {
      Entry& entry = slots_[i];
      if (entry.empty()) break;
      if (entry.key == key) return entry;
    }
    slots_[i] = Entry{};
    slots_[i].key = key;
    ++size_;
    return slots_[i];
  }

  /// Removes a stored entry (a reference from find or find_or_insert).
  void erase(Entry& entry) noexcept {
    std::size_t hole = static_cast<std::size_t>(&entry - slots_.data());
    // Move later members of the probe run back into the hole when it lies between their home
    // and where they sit, so that every key stays reachable from its home.
    for (std::size_t i = (hole + 1) & mask_; !slots_[i].empty(); i = (i + 1) & mask_) {
      const std::size_t want = home(slots_[i].key);
      if (((i - want) & mask_) >= ((i - hole) & mask_)) {
        slots_[hole] = slots_[i];
        hole = i;
      }
    }
    slots_[hole] = Entry{};
    --size_;
  }

  void clear() noexcept {
    for (Entry& entry : slots_) entry = Entry{};
    size_ = 0;
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t capacity() const noexcept { return slots_.size(); }
  [[nodiscard]] std::size_t memory_bytes() const noexcept { return slots_.capacity() * sizeof(Entry); }

 private:
  [[nodiscard]] std::size_t home(std::uint64_t key) const noexcept {
    return static_cast<std::size_t>((key * 0x9e3779b97f4a7c15ULL) >> shift_);
  }

  std::vector<Entry> slots_;
  std::size_t mask_ = 0;
  unsigned shift_ = 63;
  std::size_t size_ = 0;
};

}  // namespace ngramspec::detail
