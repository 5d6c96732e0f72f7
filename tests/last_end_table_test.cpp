#include "ngramspec/detail/last_end_table.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "ngramspec/detail/huge_page_allocator.hpp"

namespace ngramspec::detail {
namespace {

// Keys whose low halves (the fingerprints) are all distinct, so that the table must behave
// exactly as a map: merging two keys is allowed only when their fingerprints agree.
std::vector<std::uint64_t> distinct_print_keys(std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> keys;
  std::unordered_map<std::uint32_t, bool> prints;
  while (keys.size() < count) {
    const std::uint64_t key = rng();
    if (prints.emplace(static_cast<std::uint32_t>(key), true).second) keys.push_back(key);
  }
  return keys;
}

TEST(LastEndTable, StoreFindAndExchangeAgreeWithAMapOverRandomOperations) {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed);
    const std::size_t max_entries = 1 + rng() % 300;
    const std::vector<std::uint64_t> keys = distinct_print_keys(max_entries, seed * 7919);
    LastEndTable table(max_entries);
    std::unordered_map<std::uint64_t, std::uint32_t> model;
    for (int op = 0; op < 2000; ++op) {
      const std::uint64_t key = keys[rng() % keys.size()];
      const auto end = static_cast<std::uint32_t>(1 + rng() % 1000000);
      const std::uint32_t expected = model.contains(key) ? model[key] : 0;
      switch (rng() % 3) {
        case 0:
          ASSERT_EQ(table.find(key), expected) << "seed " << seed << " op " << op;
          ASSERT_EQ(table.find(key, table.home(key)), expected) << "seed " << seed << " op " << op;
          break;
        case 1:
          table.store(key, end);
          model[key] = end;
          break;
        default:
          ASSERT_EQ(table.exchange(key, table.home(key), end), expected) << "seed " << seed << " op " << op;
          model[key] = end;
          break;
      }
    }
  }
}

TEST(LastEndTable, KeysSharingAFingerprintAndAProbeRunMerge) {
  // The documented trade: the fingerprint is the key's low half, so two such keys with the same
  // home read each other's end (callers compare tokens). Found by search, as homes are hashed.
  LastEndTable table(4);
  const std::uint64_t a = 0x0000000100000005ULL;
  std::uint64_t b = 0;
  for (std::uint64_t high = 2; b == 0; ++high) {
    const std::uint64_t candidate = (high << 32) | 5U;
    if (table.home(candidate) == table.home(a)) b = candidate;
  }
  table.store(a, 17);
  EXPECT_EQ(table.find(b), 17U);
  EXPECT_EQ(table.exchange(b, table.home(b), 23), 17U);
  EXPECT_EQ(table.find(a), 23U);
}

TEST(LastEndTable, ClearForgetsEveryEnd) {
  const std::vector<std::uint64_t> keys = distinct_print_keys(100, 3);
  LastEndTable table(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) table.store(keys[i], static_cast<std::uint32_t>(i + 1));
  table.clear();
  for (const std::uint64_t key : keys) EXPECT_EQ(table.find(key), 0U);
}

TEST(LastEndTable, TablesOfHugePageSizeWorkAndCopy) {
  // 2 * 131072 slots of 8 B: 2 MiB, the size from which the slots are aligned for huge pages.
  const std::vector<std::uint64_t> keys = distinct_print_keys(131072, 11);
  LastEndTable table(keys.size());
  EXPECT_EQ(table.memory_bytes(), std::size_t{2} << 20);
  for (std::size_t i = 0; i < keys.size(); ++i) table.store(keys[i], static_cast<std::uint32_t>(i + 1));
  const LastEndTable copy = table;
  for (std::size_t i = 0; i < keys.size(); i += 97) {
    ASSERT_EQ(table.find(keys[i]), i + 1);
    ASSERT_EQ(copy.find(keys[i]), i + 1);
  }
}

TEST(HugePageAllocator, LargeBlocksAreAlignedToAHugePageAndSmallOnesAreOrdinary) {
  HugePageAllocator<std::uint64_t> allocator;
  constexpr std::size_t kLarge = HugePageAllocator<std::uint64_t>::kHugePageBytes / sizeof(std::uint64_t);
  std::uint64_t* const large = allocator.allocate(kLarge);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(large) % HugePageAllocator<std::uint64_t>::kHugePageBytes, 0U);
  large[0] = 1;
  large[kLarge - 1] = 2;  // the whole block is usable
  EXPECT_EQ(large[0] + large[kLarge - 1], 3U);
  allocator.deallocate(large, kLarge);
  std::uint64_t* const small = allocator.allocate(16);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(small) % alignof(std::uint64_t), 0U);
  allocator.deallocate(small, 16);
  std::vector<std::uint64_t, HugePageAllocator<std::uint64_t>> grown(kLarge, 7);
  grown.assign(8, 9);  // reuses the block: sizes given back must match the ones allocated
  EXPECT_EQ(grown.back(), 9U);
}

}  // namespace
}  // namespace ngramspec::detail
