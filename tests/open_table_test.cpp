#include "ngramspec/detail/open_table.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ngramspec/detail/fnv1a.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec::detail {
namespace {

// ---------------------------------------------------------------------------------------------
// FNV-1a

// The definition, byte by byte: for each octet, hash ^= octet; hash *= prime.
std::uint64_t fnv1a_bytes(std::string_view bytes) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

// The little-endian token made of four bytes of text.
Token token_of(std::string_view four) {
  Token token = 0;
  for (std::size_t i = 0; i < 4; ++i) token |= static_cast<Token>(static_cast<unsigned char>(four[i])) << (8 * i);
  return token;
}

TEST(Fnv1a, ByteLoopMatchesPublishedVectors) {
  // FNV-1a 64-bit test vectors from the reference implementation's test suite (test_fnv.c).
  EXPECT_EQ(fnv1a_bytes(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a_bytes("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a_bytes("foob"), 0xdd120e790c2512afULL);
  EXPECT_EQ(fnv1a_bytes("foobar"), 0x85944171f73967e8ULL);
}

TEST(Fnv1a, TokensHashAsTheirLittleEndianBytes) {
  EXPECT_EQ(fnv1a({}), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a({}), kFnvOffsetBasis);
  const std::array<Token, 1> foob{token_of("foob")};
  EXPECT_EQ(fnv1a(foob), 0xdd120e790c2512afULL);
  const std::array<Token, 2> foobarba{token_of("foob"), token_of("arba")};
  EXPECT_EQ(fnv1a(foobarba), fnv1a_bytes("foobarba"));
  EXPECT_EQ(fnv1a_step(fnv1a_step(kFnvOffsetBasis, foobarba[0]), foobarba[1]), fnv1a(foobarba));

  // Every byte of a token counts, and in little-endian order.
  std::mt19937_64 rng(5);
  for (int i = 0; i < 1000; ++i) {
    std::vector<Token> tokens(rng() % 9);
    std::string bytes;
    for (Token& token : tokens) {
      token = static_cast<Token>(rng());
      for (int shift = 0; shift < 32; shift += 8) bytes.push_back(static_cast<char>((token >> shift) & 0xffU));
    }
    ASSERT_EQ(fnv1a(tokens), fnv1a_bytes(bytes)) << "case " << i;
  }
}

TEST(Fnv1a, OrderMatters) {
  const std::array<Token, 2> ab{1, 2};
  const std::array<Token, 2> ba{2, 1};
  EXPECT_NE(fnv1a(ab), fnv1a(ba));
  const std::array<Token, 3> abc{1, 2, 3};
  const std::array<Token, 3> cba{3, 2, 1};
  EXPECT_NE(fnv1a(abc), fnv1a(cba));
  // A zero token is not the same as no token.
  const std::array<Token, 1> zero{0};
  EXPECT_NE(fnv1a(zero), fnv1a({}));
}

TEST(Fnv1a, GoldenValues) {
  // Contexts are keyed by these hashes; changing them must be a decision.
  const std::array<Token, 2> ab{1, 2};
  const std::array<Token, 3> abc{1, 2, 3};
  const std::array<Token, 3> mixed{31999, 7, 123456};
  EXPECT_EQ(fnv1a(ab), 0xc9c28939c99668c6ULL);
  EXPECT_EQ(fnv1a(abc), 0xfd1f0f4381eb0395ULL);
  EXPECT_EQ(fnv1a(mixed), 0xf6e02ef9c39db9c2ULL);
  static_assert(fnv1a(std::array<Token, 1>{0xffffffffU}) == 0x994f76653e2a3951ULL);
}

// ---------------------------------------------------------------------------------------------
// OpenTable

// Stored while its payload is non-zero, as the predictor's entries are while their count is.
// `extra` shows whether a fresh entry really is value-initialized rather than left over.
struct TestEntry {
  std::uint64_t key = 0;
  std::uint32_t payload = 0;
  std::uint32_t extra = 0;
  [[nodiscard]] bool empty() const noexcept { return payload == 0; }
};

// A wider entry, to see memory_bytes() scale with the entry size.
struct WideEntry {
  std::uint64_t key = 0;
  std::array<std::uint64_t, 5> payload{};
  [[nodiscard]] bool empty() const noexcept { return payload[0] == 0; }
};

using Table = OpenTable<TestEntry>;
using Model = std::unordered_map<std::uint64_t, std::uint32_t>;

static_assert(noexcept(std::declval<Table&>().find(0)));
static_assert(noexcept(std::declval<const Table&>().find(0)));
static_assert(noexcept(std::declval<Table&>().find_or_insert(0)));
static_assert(noexcept(std::declval<Table&>().erase(std::declval<TestEntry&>())));
static_assert(noexcept(std::declval<Table&>().clear()));

// The slot count the table uses for `max_entries`: a power of two at least twice the entries.
std::size_t capacity_for(std::size_t max_entries) {
  return std::bit_ceil(max_entries < 4 ? std::size_t{8} : 2 * max_entries);
}

// The table's home slot of a key is the top log2(capacity) bits of key * kGolden. HomeSlot*
// pins that, so the crafted collisions below keep colliding.
constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// The inverse of an odd number modulo 2^64 by Newton's iteration x <- x(2 - ax): odd a is its
// own inverse modulo 8, and each step doubles the number of correct low bits (3, 6, ..., 96).
constexpr std::uint64_t inverse_mod_2_64(std::uint64_t odd) {
  std::uint64_t x = odd;
  for (int i = 0; i < 5; ++i) x *= 2 - odd * x;
  return x;
}
constexpr std::uint64_t kGoldenInverse = inverse_mod_2_64(kGolden);
static_assert(kGolden * kGoldenInverse == 1);

unsigned home_shift(std::size_t capacity) { return 64 - static_cast<unsigned>(std::countr_zero(capacity)); }

std::size_t home_of(std::uint64_t key, std::size_t capacity) {
  return static_cast<std::size_t>((key * kGolden) >> home_shift(capacity));
}

// The key whose product with kGolden has `slot` in its top bits and the bits of `low` below.
std::uint64_t key_homed_at(std::size_t slot, std::size_t capacity, std::uint64_t low) {
  const unsigned shift = home_shift(capacity);
  return kGoldenInverse * ((std::uint64_t{slot} << shift) | (low & ((std::uint64_t{1} << shift) - 1)));
}

// `count` distinct keys whose home is `slot`, the first with no low bits (so slot 0 yields key 0)
// and the rest with random ones.
std::vector<std::uint64_t> keys_homed_at(std::size_t slot, std::size_t capacity, std::size_t count,
                                         std::mt19937_64& rng) {
  std::vector<std::uint64_t> keys;
  std::unordered_set<std::uint64_t> seen;
  for (std::uint64_t low = 0; keys.size() < count; low = rng()) {
    const std::uint64_t key = key_homed_at(slot, capacity, low);
    if (seen.insert(key).second) keys.push_back(key);
  }
  return keys;
}

// Size, and for every key of `keys`, presence, stored key and payload agree with the model;
// the const and non-const finds agree too.
::testing::AssertionResult same_contents(Table& table, const Model& model, const std::vector<std::uint64_t>& keys) {
  if (table.size() != model.size()) {
    return ::testing::AssertionFailure() << "size " << table.size() << ", model " << model.size();
  }
  for (const std::uint64_t key : keys) {
    const TestEntry* found = table.find(key);
    if (found != std::as_const(table).find(key)) {
      return ::testing::AssertionFailure() << "const find differs, key " << key;
    }
    const auto it = model.find(key);
    if (it == model.end()) {
      if (found != nullptr) return ::testing::AssertionFailure() << "erased key found: " << key;
      continue;
    }
    if (found == nullptr) return ::testing::AssertionFailure() << "stored key not found: " << key;
    if (found->key != key || found->payload != it->second) {
      return ::testing::AssertionFailure() << "key " << key << " finds {key " << found->key << ", payload "
                                           << found->payload << "}, model payload " << it->second;
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(OpenTable, CapacityAndMemory) {
  for (const std::size_t entries : {0, 1, 3, 4, 5, 8, 100, 1000, 4096}) {
    SCOPED_TRACE("max_entries " + std::to_string(entries));
    const Table table(entries);
    EXPECT_EQ(table.size(), 0U);
    EXPECT_EQ(table.capacity(), capacity_for(entries));
    EXPECT_GE(table.capacity(), 2 * entries);
    EXPECT_TRUE(std::has_single_bit(table.capacity()));
    EXPECT_EQ(table.memory_bytes(), capacity_for(entries) * sizeof(TestEntry));
    EXPECT_EQ(OpenTable<WideEntry>(entries).memory_bytes(), capacity_for(entries) * sizeof(WideEntry));
  }
  // A default-constructed table is a placeholder to assign a sized one to; it holds nothing.
  const Table placeholder;
  EXPECT_EQ(placeholder.size(), 0U);
  EXPECT_EQ(placeholder.capacity(), 0U);
  EXPECT_EQ(placeholder.memory_bytes(), 0U);
}

// Each crafted key, alone in the table, sits in the slot keys_homed_at aimed it at.
TEST(OpenTable, HomeSlotIsTopBitsOfGoldenRatioProduct) {
  std::mt19937_64 rng(11);
  for (const std::size_t entries : {1, 4, 32, 300}) {
    SCOPED_TRACE("max_entries " + std::to_string(entries));
    Table table(entries);
    const std::size_t capacity = table.capacity();
    const std::uint64_t key0 = keys_homed_at(0, capacity, 1, rng)[0];
    ASSERT_EQ(key0, 0U);
    TestEntry& first = table.find_or_insert(key0);
    first.payload = 1;
    for (std::size_t slot = 1; slot < capacity; ++slot) {
      for (const std::uint64_t key : keys_homed_at(slot, capacity, 3, rng)) {
        ASSERT_EQ(home_of(key, capacity), slot);
        TestEntry& entry = table.find_or_insert(key);
        ASSERT_EQ(&entry - &first, static_cast<std::ptrdiff_t>(slot)) << "key " << key;
        entry.payload = 1;
        table.erase(entry);
      }
    }
    EXPECT_EQ(table.size(), 1U);
  }
}

TEST(OpenTable, EmptyTableFindsNothing) {
  Table table(16);
  const Table& view = table;
  EXPECT_EQ(table.size(), 0U);
  // Key 0 is what an empty slot holds; it must still be absent.
  std::mt19937_64 rng(3);
  std::vector<std::uint64_t> keys{0, 1, ~std::uint64_t{0}};
  for (int i = 0; i < 100; ++i) keys.push_back(rng());
  for (const std::uint64_t key : keys) {
    EXPECT_EQ(table.find(key), nullptr) << key;
    EXPECT_EQ(view.find(key), nullptr) << key;
  }
}

TEST(OpenTable, FindOrInsertGivesAFreshEntryOrTheStoredOne) {
  Table table(4);
  TestEntry& zero = table.find_or_insert(0);
  EXPECT_EQ(zero.key, 0U);
  EXPECT_EQ(zero.payload, 0U);
  EXPECT_EQ(zero.extra, 0U);
  EXPECT_EQ(table.size(), 1U);
  zero.payload = 7;
  zero.extra = 99;

  TestEntry& ones = table.find_or_insert(~std::uint64_t{0});
  EXPECT_EQ(ones.key, ~std::uint64_t{0});
  EXPECT_EQ(ones.payload, 0U);
  EXPECT_EQ(ones.extra, 0U);
  ones.payload = 1;
  TestEntry& other = table.find_or_insert(42);
  other.payload = 0xffffffffU;
  EXPECT_EQ(table.size(), 3U);

  // The stored entry itself, unchanged, and no new one.
  TestEntry& again = table.find_or_insert(0);
  EXPECT_EQ(&again, &zero);
  EXPECT_EQ(again.payload, 7U);
  EXPECT_EQ(again.extra, 99U);
  EXPECT_EQ(table.size(), 3U);
  EXPECT_EQ(table.find(0), &zero);
  EXPECT_EQ(std::as_const(table).find(0), &zero);
  EXPECT_EQ(table.find(~std::uint64_t{0}), &ones);
  EXPECT_EQ(table.find(42), &other);
  EXPECT_EQ(table.find(43), nullptr);

  // Changes through the reference are what find sees.
  zero.payload = 8;
  EXPECT_EQ(table.find(0)->payload, 8U);
}

TEST(OpenTable, EraseRemovesOnlyThatEntry) {
  Table table(4);
  for (const std::uint64_t key : {std::uint64_t{0}, std::uint64_t{42}, ~std::uint64_t{0}}) {
    TestEntry& entry = table.find_or_insert(key);
    entry.payload = static_cast<std::uint32_t>(key % 1000 + 1);
    entry.extra = 99;
  }
  table.erase(*table.find(0));
  EXPECT_EQ(table.size(), 2U);
  EXPECT_EQ(table.find(0), nullptr);
  ASSERT_NE(table.find(42), nullptr);
  EXPECT_EQ(table.find(42)->payload, 43U);
  ASSERT_NE(table.find(~std::uint64_t{0}), nullptr);
  EXPECT_EQ(table.find(~std::uint64_t{0})->payload, ~std::uint64_t{0} % 1000 + 1);

  // Inserted again, the key comes back as a fresh entry, not as what was erased.
  TestEntry& back = table.find_or_insert(0);
  EXPECT_EQ(back.key, 0U);
  EXPECT_EQ(back.payload, 0U);
  EXPECT_EQ(back.extra, 0U);
  EXPECT_EQ(table.size(), 3U);
  back.payload = 5;

  table.erase(*table.find(42));
  table.erase(*table.find(~std::uint64_t{0}));
  table.erase(*table.find(0));
  EXPECT_EQ(table.size(), 0U);
  for (const std::uint64_t key : {std::uint64_t{0}, std::uint64_t{42}, ~std::uint64_t{0}}) {
    EXPECT_EQ(table.find(key), nullptr) << key;
  }
}

// Hand-traced erases in an 8-slot table around the wrap from slot 7 to slot 0: keys with the
// given homes are inserted in order into the given slots, then one is erased and the others
// must end in the slots after (-1 for the erased one).
struct ShiftCase {
  std::vector<std::size_t> homes;
  std::vector<std::ptrdiff_t> slots;
  std::size_t erase;
  std::vector<std::ptrdiff_t> slots_after;
};

TEST(OpenTable, BackwardShiftAcrossTheEnd) {
  const std::vector<ShiftCase> cases{
      // The wrapped key moves back to its home past a key already home at slot 0.
      {{7, 0, 7}, {7, 0, 1}, 0, {-1, 0, 7}},
      // A run homed at 6, 7 and 0 moves back by one, across the end.
      {{6, 6, 7, 0}, {6, 7, 0, 1}, 0, {-1, 6, 7, 0}},
      // The hole at 6 lies before the home (7) of the key wrapped to 0, so that key stays.
      {{5, 5, 7, 7}, {5, 6, 7, 0}, 0, {-1, 5, 7, 0}},
      // Erasing the wrapped key at slot 0 pulls the next one back across no end.
      {{7, 7, 7}, {7, 0, 1}, 1, {7, -1, 0}},
      // The last slot erased while the run goes on at slot 0.
      {{7, 7}, {7, 0}, 0, {-1, 7}},
      // Keys at their homes or after the hole's cyclic successor stay put.
      {{0, 1, 1}, {0, 1, 2}, 0, {-1, 1, 2}},
  };
  std::mt19937_64 rng(17);
  for (std::size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const ShiftCase& shift_case = cases[c];
    Table table(4);
    ASSERT_EQ(table.capacity(), 8U);
    // Key 0 homes at slot 0, alone in the table: its entry's address locates the slots.
    TestEntry& slot0 = table.find_or_insert(0);
    slot0.payload = 1;
    table.erase(slot0);
    const auto slot_of = [&](std::uint64_t key) -> std::ptrdiff_t {
      const TestEntry* entry = table.find(key);
      return entry == nullptr ? -1 : entry - &slot0;
    };

    std::vector<std::uint64_t> keys;
    for (const std::size_t home : shift_case.homes) keys.push_back(key_homed_at(home, 8, rng() | 1));
    std::vector<std::ptrdiff_t> slots;
    for (const std::uint64_t key : keys) table.find_or_insert(key).payload = 1;
    for (const std::uint64_t key : keys) slots.push_back(slot_of(key));
    ASSERT_EQ(slots, shift_case.slots);

    table.erase(*table.find(keys[shift_case.erase]));
    slots.clear();
    for (const std::uint64_t key : keys) slots.push_back(slot_of(key));
    EXPECT_EQ(slots, shift_case.slots_after);
    EXPECT_EQ(table.size(), keys.size() - 1);
  }
}

TEST(OpenTable, ClearEmptiesAndKeepsMemory) {
  Table table(32);
  const std::size_t memory = table.memory_bytes();
  for (std::uint64_t key = 0; key < 32; ++key) {
    table.find_or_insert(key * 977).payload = static_cast<std::uint32_t>(key + 1);
  }
  EXPECT_EQ(table.size(), 32U);
  table.clear();
  EXPECT_EQ(table.size(), 0U);
  EXPECT_EQ(table.memory_bytes(), memory);
  for (std::uint64_t key = 0; key < 32; ++key) EXPECT_EQ(table.find(key * 977), nullptr) << key;
  // Reusable to max_entries after a clear, and every entry comes back fresh.
  for (std::uint64_t key = 0; key < 32; ++key) {
    TestEntry& entry = table.find_or_insert(key * 977);
    EXPECT_EQ(entry.payload, 0U) << key;
    entry.payload = static_cast<std::uint32_t>(key + 100);
  }
  EXPECT_EQ(table.size(), 32U);
  for (std::uint64_t key = 0; key < 32; ++key) {
    ASSERT_NE(table.find(key * 977), nullptr) << key;
    EXPECT_EQ(table.find(key * 977)->payload, key + 100);
  }
}

TEST(OpenTable, FillsToMaxEntries) {
  for (const std::size_t entries : {1, 2, 3, 4, 5, 7, 16, 100, 1000}) {
    SCOPED_TRACE("max_entries " + std::to_string(entries));
    Table table(entries);
    std::mt19937_64 rng(entries);
    Model model;
    std::vector<std::uint64_t> keys;
    while (model.size() < entries) {
      const std::uint64_t key = rng();
      if (model.contains(key)) continue;
      const auto payload = static_cast<std::uint32_t>(rng() | 1);
      TestEntry& entry = table.find_or_insert(key);
      ASSERT_EQ(entry.payload, 0U);
      entry.payload = payload;
      model.emplace(key, payload);
      keys.push_back(key);
    }
    // Keys never inserted must miss too, which needs the full table to still end every probe.
    for (int i = 0; i < 200; ++i) keys.push_back(rng());
    ASSERT_TRUE(same_contents(table, model, keys));
  }
}

// Mirrors random operations into std::unordered_map. Keys come from a small pool so that erase
// and re-insert of the same key are common; one pool in three is crafted to share a few home
// slots at the end and the start of the table, so that runs wrap around to slot 0 and interleave.
TEST(OpenTable, MatchesUnorderedMapUnderRandomOperations) {
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const std::size_t max_entries = 1 + rng() % 64;
    Table table(max_entries);
    const std::size_t capacity = table.capacity();
    const std::size_t memory = table.memory_bytes();

    std::vector<std::uint64_t> pool;
    switch (seed % 3) {
      case 0:  // random keys
        for (std::size_t i = 0; i < 2 * max_entries + 4; ++i) pool.push_back(rng());
        break;
      case 1:  // small integers
        for (std::uint64_t key = 0; key < 2 * max_entries + 4; ++key) pool.push_back(key);
        break;
      default:  // crowded homes
        for (const std::size_t slot : {capacity - 1, capacity - 2, std::size_t{0}, std::size_t{1}}) {
          for (const std::uint64_t key : keys_homed_at(slot, capacity, max_entries / 2 + 2, rng)) pool.push_back(key);
        }
        break;
    }

    Model model;
    for (int step = 0; step < 600; ++step) {
      const std::uint64_t key = pool[rng() % pool.size()];
      const auto it = model.find(key);
      const bool present = it != model.end();
      const auto roll = rng() % 10;
      if (roll < 5 && (present || model.size() < max_entries)) {
        TestEntry& entry = table.find_or_insert(key);
        ASSERT_EQ(entry.key, key) << "step " << step;
        ASSERT_EQ(entry.payload, present ? it->second : 0U) << "step " << step;
        if (!present) {
          ASSERT_EQ(entry.extra, 0U) << "step " << step;
        }
        const auto payload = static_cast<std::uint32_t>(1 + rng() % 1000);
        entry.payload = payload;
        entry.extra = payload;
        model[key] = payload;
      } else if (roll < 9 && present) {
        TestEntry* entry = table.find(key);
        ASSERT_NE(entry, nullptr) << "step " << step;
        table.erase(*entry);
        model.erase(key);
      } else if (roll == 9 && rng() % 20 == 0) {
        table.clear();
        model.clear();
      }
      ASSERT_TRUE(same_contents(table, model, {key})) << "step " << step;
      if (step % 8 == 0) {
        ASSERT_TRUE(same_contents(table, model, pool)) << "step " << step;
      }
    }
    ASSERT_TRUE(same_contents(table, model, pool));
    EXPECT_EQ(table.memory_bytes(), memory);
  }
}

// Runs of keys homed at the last three slots, wrapping into keys homed at the first three,
// erased in random orders with re-inserts: every erase must shift later keys back so that all
// that remain are still found, including those that wrapped past the last slot, and must leave
// in place keys whose home the hole does not lie between (cyclically) their home and their slot.
TEST(OpenTable, BackwardShiftKeepsWrappedCollisionsFindable) {
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const std::size_t max_entries = 4 + rng() % 29;
    Table table(max_entries);
    const std::size_t capacity = table.capacity();

    // Three in four keys home at the end, the rest at the start, where the wrapped runs land.
    std::vector<std::uint64_t> keys;
    while (keys.size() < max_entries) {
      const std::size_t near = rng() % 3;
      const std::uint64_t key = key_homed_at(rng() % 4 == 0 ? near : capacity - 1 - near, capacity, rng());
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    }
    std::shuffle(keys.begin(), keys.end(), rng);

    Model model;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const auto payload = static_cast<std::uint32_t>(i + 1);
      table.find_or_insert(keys[i]).payload = payload;
      model.emplace(keys[i], payload);
      ASSERT_TRUE(same_contents(table, model, keys)) << "insert " << i;
    }

    // Erase everything in a random order, re-inserting now and then so runs re-form.
    std::vector<std::uint64_t> order = keys;
    std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t i = 0; i < order.size(); ++i) {
      TestEntry* entry = table.find(order[i]);
      ASSERT_NE(entry, nullptr) << "erase " << i;
      table.erase(*entry);
      model.erase(order[i]);
      ASSERT_TRUE(same_contents(table, model, keys)) << "erase " << i;
      if (rng() % 3 == 0) {
        const std::uint64_t back = order[rng() % (i + 1)];
        if (!model.contains(back)) {
          TestEntry& fresh = table.find_or_insert(back);
          ASSERT_EQ(fresh.payload, 0U);
          fresh.payload = 5000;
          model.emplace(back, 5000);
          order.push_back(back);
          ASSERT_TRUE(same_contents(table, model, keys)) << "re-insert after erase " << i;
        }
      }
    }
    EXPECT_EQ(table.size(), 0U);
  }
}

}  // namespace
}  // namespace ngramspec::detail
