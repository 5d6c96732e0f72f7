// TreeDrafter and TopKTable: the trees are valid and best-first within their limits, the
// sources they draw on (the spine, the text, the model's recycled top-k) reach them, and
// nothing on the hot path allocates.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ngramspec/top_k_table.hpp"
#include "ngramspec/tree_drafter.hpp"
#include "support/allocation_counter.hpp"
#include "support/mixed_stream.hpp"
#include "support/thrown_message.hpp"

namespace ngramspec::test {
namespace {

// Every property a drafted tree must have, whatever the drafter learnt.
void expect_valid(const DraftTree& tree, std::size_t max_nodes, std::size_t max_depth) {
  ASSERT_LE(tree.size(), max_nodes);
  validate_tree_parents(tree.parents());
  std::vector<float> child_sum(tree.size() + 1, 0.0f);
  for (std::size_t i = 0; i < tree.size(); ++i) {
    ASSERT_LT(tree.depths()[i], max_depth) << "node " << i;
    if (i > 0) {
      ASSERT_LE(tree.path_probabilities()[i], tree.path_probabilities()[i - 1]) << "node " << i;
    }
    child_sum[static_cast<std::size_t>(tree.parents()[i] + 1)] += tree.probabilities()[i];
  }
  for (std::size_t e = 0; e <= tree.size(); ++e) ASSERT_LE(child_sum[e], 1.0f + 1e-5f) << "entry " << e;
  // Siblings draft different tokens: one would be wasted.
  std::set<std::pair<std::int32_t, Token>> seen;
  for (std::size_t i = 0; i < tree.size(); ++i) {
    ASSERT_TRUE(seen.insert({tree.parents()[i], tree.tokens()[i]}).second) << "node " << i;
  }
}

// The class numbering DraftTree::source_classes() reports and class_estimate() reads: the spine,
// the text's rank-0 continuations after 1 / 2 / 3 tokens, then the top-k ranks.
static_assert(TreeDrafter::kSpineClass == 0 && TreeDrafter::text_class(1, 0) == 1 &&
              TreeDrafter::text_class(2, 0) == 5 && TreeDrafter::text_class(3, 0) == 9 &&
              TreeDrafter::top_k_class(0) == 13 &&
              TreeDrafter::top_k_class(TopKTable::kMaxK - 1) < TreeDrafter::kClasses);

// Which source a node's class names: 0 the spine, 1 the text, 2 the model's top-k (ranks below
// `top_k`); fails on any other class.
std::size_t source_of(std::uint8_t source_class, std::size_t top_k) {
  if (source_class == TreeDrafter::kSpineClass) return 0;
  for (std::size_t order = 1; order <= TreeDrafter::kOrders; ++order) {
    if (source_class == TreeDrafter::text_class(order, 0)) return 1;
  }
  EXPECT_GE(source_class, TreeDrafter::top_k_class(0));
  EXPECT_LT(source_class, TreeDrafter::top_k_class(top_k));
  return 2;
}

TEST(TreeDrafter, TreesAreValidBestFirstAndWithinTheirLimits) {
  std::mt19937_64 rng(3);
  std::array<std::size_t, 3> sources{};  // nodes seen of each source_of()
  for (int trial = 0; trial < 40; ++trial) {
    TreeConfig config;
    config.vocab_size = 32000;
    config.top_k = std::uniform_int_distribution<std::size_t>(1, 8)(rng);
    config.max_children = std::uniform_int_distribution<std::size_t>(1, 16)(rng);
    config.successor_slots = std::size_t{1} << std::uniform_int_distribution<int>(0, 12)(rng);
    TreeDrafter drafter(config);
    MixedStream stream(rng());
    DraftTree tree(DraftTree::kMaxNodes);
    std::vector<Token> fed;
    std::vector<Token> top;
    std::vector<Token> next;
    for (int step = 0; step < 300; ++step) {
      const std::size_t nodes = std::uniform_int_distribution<std::size_t>(0, 200)(rng);
      const std::size_t depth = std::uniform_int_distribution<std::size_t>(0, 40)(rng);
      drafter.predict_tree(tree, nodes, depth);
      expect_valid(tree, nodes, std::max<std::size_t>(depth, 1));
      if (depth == 0) {
        ASSERT_TRUE(tree.empty());
      }
      for (const std::uint8_t c : tree.source_classes()) ++sources[source_of(c, config.top_k)];
      // A pass: the model's token is the stream's next one at the root and made up elsewhere.
      const Token truth = stream.next();
      fed.assign(1, 0);
      fed.insert(fed.end(), tree.tokens().begin(), tree.tokens().end());
      next.assign(fed.size(), truth);
      top.resize(fed.size() * config.top_k);
      for (std::size_t i = 0; i < top.size(); ++i) top[i] = static_cast<Token>((fed[i / config.top_k] * 31 + i) % 32000);
      const std::vector<std::size_t> kept = {0};
      drafter.observe_pass(tree, fed, next, kept, top);
      drafter.update(truth);
    }
  }
  for (const std::size_t seen : sources) EXPECT_GT(seen, 0U);  // every source reached the trees
}

TEST(TreeDrafter, RecycledTopKFillsTheTreeWhereTheTextHasNothing) {
  TreeConfig config;
  config.vocab_size = 100;
  config.top_k = 4;
  TreeDrafter drafter(config);
  drafter.update(std::vector<Token>{5});
  DraftTree tree(16);
  EXPECT_EQ(drafter.predict_tree(tree, 16, 4), 0U);  // nothing known after a fresh token

  // The model said: after 5 come 6, 7, 8, 9; after 6 come 10, 11, 12, 13.
  const std::vector<Token> fed = {5, 6};
  const std::vector<Token> top = {6, 7, 8, 9, 10, 11, 12, 13};
  DraftTree pass(1);
  pass.add(kTreeRoot, 6, 0.5f);
  const std::vector<Token> next = {6, 10};
  const std::vector<std::size_t> kept = {0, 1};
  drafter.observe_pass(pass, fed, next, kept, top);

  ASSERT_GT(drafter.predict_tree(tree, 16, 4), 0U);
  std::vector<Token> roots;
  for (std::size_t i = 0; i < tree.size(); ++i) {
    if (tree.parents()[i] == kTreeRoot) roots.push_back(tree.tokens()[i]);
  }
  EXPECT_EQ(roots, (std::vector<Token>{6, 7, 8, 9}));
  EXPECT_EQ(tree.tokens()[0], 6U);
  // Under 6, the model's top-k after 6.
  bool found = false;
  for (std::size_t i = 0; i < tree.size(); ++i) found |= tree.parents()[i] == 0 && tree.tokens()[i] == 10U;
  EXPECT_TRUE(found);
}

// Drawing (draw_recycled), a node whose token has no row yet gets one candidate drawn from the
// table's overall row, of its own class, saying it was drawn from that row; its token follows
// the row's probabilities over many seeds. A token with a row draws from its row alone, and
// without draw_recycled nothing stands in for a missing row.
TEST(TreeDrafter, WhereATokenHasNoRowOneCandidateIsDrawnFromTheOverallRow) {
  for (const bool drawn : {false, true}) {
    SCOPED_TRACE(drawn ? "drawn" : "not drawn");
    TreeConfig config;
    config.vocab_size = 100;
    config.top_k = 4;
    config.draw_recycled = drawn;
    TopKTable table(100, 4, /*probabilities=*/true);  // shared: reset() keeps it
    TreeDrafter drafter(config, &table);
    table.record_distribution(5, std::vector<Token>{6, 7}, std::vector<float>{0.5f, 0.3f});
    table.record_distribution(8, std::vector<Token>{9, 6}, std::vector<float>{0.6f, 0.2f});
    const std::span<const Token> overall = table.overall_row();
    const std::span<const float> overall_p = table.overall_row_probabilities();
    ASSERT_EQ(overall.size(), 3U);
    float overall_total = 0.0f;
    for (const float p : overall_p) overall_total += p;

    DraftTree tree(16);
    DraftDistributions q;
    q.reserve(16, 4);
    std::map<Token, int> drawn_roots;
    constexpr int kSeeds = 4000;
    for (int seed = 0; seed < kSeeds; ++seed) {
      drafter.reset();
      drafter.set_draw_seed(static_cast<std::uint64_t>(seed));
      drafter.update(std::vector<Token>{20});  // no row, no text
      drafter.predict_tree(tree, 16, 4, 0.0f, q);
      if (!drawn) {
        ASSERT_EQ(tree.size(), 0U);
        break;
      }
      ASSERT_GE(tree.size(), 1U);
      std::size_t roots = 0;
      for (std::size_t i = 0; i < tree.size(); ++i) {
        if (tree.parents()[i] != kTreeRoot) continue;
        ++roots;
        ASSERT_EQ(tree.source_classes()[i], TreeDrafter::kOverallClass);
        ASSERT_EQ(std::vector<Token>(q.tokens(i).begin(), q.tokens(i).end()),
                  std::vector<Token>(overall.begin(), overall.end()));
        ASSERT_EQ(std::vector<float>(q.probabilities(i).begin(), q.probabilities(i).end()),
                  std::vector<float>(overall_p.begin(), overall_p.end()));
        ++drawn_roots[tree.tokens()[i]];
      }
      ASSERT_EQ(roots, 1U);  // one candidate from the overall row
    }
    for (std::size_t j = 0; drawn && j < overall.size(); ++j) {
      EXPECT_NEAR(drawn_roots[overall[j]] / static_cast<double>(kSeeds), overall_p[j] / overall_total, 0.03)
          << "token " << overall[j];
    }

    // After 5, which has a row, the candidates come from that row alone.
    drafter.reset();
    drafter.update(std::vector<Token>{5});
    drafter.predict_tree(tree, 16, 4, 0.0f, q);
    ASSERT_GE(tree.size(), 1U);
    for (std::size_t i = 0; i < tree.size(); ++i) {
      if (tree.parents()[i] == kTreeRoot) {
        EXPECT_NE(tree.source_classes()[i], TreeDrafter::kOverallClass);
      }
    }
  }
}

TEST(TreeDrafter, TheTextOffersAlternativesBesideTheSpine) {
  TreeDrafter drafter;
  // After "1 2" came 3 twice and 4 once: the spine drafts one, the text offers the other.
  drafter.update(std::vector<Token>{1, 2, 3, 9, 1, 2, 4, 9, 1, 2, 3, 9, 1, 2});
  DraftTree tree(8);
  ASSERT_GT(drafter.predict_tree(tree, 8, 4), 1U);
  std::set<Token> roots;
  for (std::size_t i = 0; i < tree.size(); ++i) {
    if (tree.parents()[i] == kTreeRoot) roots.insert(tree.tokens()[i]);
  }
  EXPECT_TRUE(roots.count(3) == 1 && roots.count(4) == 1);
}

// Beside a row drawn from (draw_recycled, a row with probabilities) the text's continuations
// after one token are left to the row; those after 2 or 3 tokens stay. Random streams, every
// token's row recorded with a distribution: no tree holds an order-1 text candidate, while the
// same drafter with rows taken best first does, and longer contexts' candidates are in both.
TEST(TreeDrafter, BesideADrawnRowTheTextSpeaksOnlyAfterTwoOrMoreTokens) {
  constexpr std::size_t kVocab = 24;
  for (const bool drawn : {false, true}) {
    SCOPED_TRACE(drawn ? "drawn rows" : "rows taken best first");
    std::array<std::size_t, TreeDrafter::kOrders + 1> text_by_order{};
    for (std::uint64_t seed = 0; seed < 20; ++seed) {
      std::mt19937_64 rng(seed);
      TreeConfig config;
      config.vocab_size = kVocab;
      config.top_k = 4;
      config.draw_recycled = drawn;
      TreeDrafter drafter(config);
      for (Token t = 0; t < kVocab; ++t) {
        const std::vector<Token> top = {static_cast<Token>((t + 1) % kVocab), static_cast<Token>((t + 5) % kVocab)};
        if (drawn) {
          drafter.top_k_table()->record_distribution(t, top, std::vector<float>{0.5f, 0.3f});
        } else {
          drafter.top_k_table()->record(std::vector<Token>{t}, std::vector<Token>{top[0], top[1], top[0], top[1]});
        }
      }
      DraftTree tree(32);
      DraftDistributions q;
      q.reserve(32, 4);
      for (int step = 0; step < 200; ++step) {
        drafter.update(static_cast<Token>(rng() % 6));  // a small alphabet: contexts of every order repeat
        if (drawn) {
          drafter.predict_tree(tree, 32, 6, 0.0f, q);
        } else {
          drafter.predict_tree(tree, 32, 6);
        }
        for (std::size_t i = 0; i < tree.size(); ++i) {
          for (std::size_t order = 1; order <= TreeDrafter::kOrders; ++order) {
            for (std::size_t rank = 0; rank < TreeDrafter::kSlotsPerContext; ++rank) {
              text_by_order[order] += tree.source_classes()[i] == TreeDrafter::text_class(order, rank);
            }
          }
        }
      }
    }
    EXPECT_EQ(text_by_order[1] == 0, drawn) << text_by_order[1] << " order-1 text candidates";
    EXPECT_GT(text_by_order[2] + text_by_order[3], 0U);
  }
}

TEST(TreeDrafter, CalibrationFollowsWhatPassesAccept) {
  TreeConfig config;
  config.vocab_size = 50;
  config.top_k = 2;
  TreeDrafter drafter(config);
  const float before = drafter.class_estimate(13);  // top-k rank 0
  DraftTree tree(1);
  tree.add(kTreeRoot, 7, 0.5f, 13);
  const std::vector<Token> fed = {1, 7};
  const std::vector<std::size_t> kept = {0, 1};
  for (int i = 0; i < 50; ++i) {
    drafter.observe_pass(tree, fed, std::vector<Token>{7, 3}, kept, {});
  }
  EXPECT_GT(drafter.class_estimate(13), 0.95f);
  for (int i = 0; i < 1000; ++i) {
    drafter.observe_pass(tree, fed, std::vector<Token>{8, 3}, std::vector<std::size_t>{0}, {});
  }
  EXPECT_LT(drafter.class_estimate(13), 0.1f);
  drafter.reset();
  EXPECT_FLOAT_EQ(drafter.class_estimate(13), before);
}

// `rows` top rows of k tokens each: first, first + 1, ..., as a model's k best are distinct.
std::vector<Token> rows_from(Token first, std::size_t rows, std::size_t k) {
  std::vector<Token> top;
  for (std::size_t e = 0; e < rows; ++e) {
    for (std::size_t r = 0; r < k; ++r) top.push_back(first + static_cast<Token>(r));
  }
  return top;
}

TEST(TreeDrafter, CarryOverKeepsWhatItLearntAcrossReset) {
  TreeConfig config;
  config.vocab_size = 50;
  config.carry_over = true;
  TreeDrafter drafter(config);
  DraftTree pass(1);
  pass.add(kTreeRoot, 6, 0.5f);
  drafter.update(std::vector<Token>{5});
  drafter.observe_pass(pass, std::vector<Token>{5, 6}, std::vector<Token>{6, 1},
                       std::vector<std::size_t>{0, 1}, rows_from(6, 2, config.top_k));
  drafter.reset();
  drafter.update(std::vector<Token>{5});
  DraftTree tree(4);
  ASSERT_GT(drafter.predict_tree(tree, 4, 2), 0U);
  EXPECT_EQ(tree.tokens()[0], 6U);

  config.carry_over = false;
  TreeDrafter forgets(config);
  forgets.update(std::vector<Token>{5});
  forgets.observe_pass(pass, std::vector<Token>{5, 6}, std::vector<Token>{6, 1}, std::vector<std::size_t>{0, 1},
                       rows_from(6, 2, config.top_k));
  forgets.reset();
  forgets.update(std::vector<Token>{5});
  EXPECT_EQ(forgets.predict_tree(tree, 4, 2), 0U);
}

TEST(TreeDrafter, CopiesShareNothingAndMovesKeepTheTable) {
  TreeConfig config;
  config.vocab_size = 20;
  TreeDrafter a(config);
  TreeDrafter b(a);
  a.observe_pass(DraftTree{}, std::vector<Token>{3}, std::vector<Token>{4}, std::vector<std::size_t>{0},
                 rows_from(4, 1, config.top_k));
  EXPECT_FALSE(a.top_k_table()->row(3).empty());
  EXPECT_TRUE(b.top_k_table()->row(3).empty());
  EXPECT_NE(a.top_k_table(), b.top_k_table());
  const TopKTable* table = a.top_k_table();
  TreeDrafter moved(std::move(a));
  EXPECT_EQ(moved.top_k_table(), table);
}

TEST(TreeDrafter, HotPathDoesNotAllocate) {
  TreeConfig config;
  config.vocab_size = 32000;
  TreeDrafter drafter(config);
  DraftTree tree(64);
  MixedStream stream(9);
  std::vector<Token> fed(65);
  std::vector<Token> next(65);
  std::vector<Token> top(65 * config.top_k);
  const std::vector<std::size_t> kept = {0};
  AllocationCounter counter;
  for (int step = 0; step < 2000; ++step) {
    drafter.predict_tree(tree, 64, 16);
    const std::size_t n = tree.size() + 1;
    for (std::size_t i = 0; i < n; ++i) next[i] = fed[i] = static_cast<Token>(step % 100);
    for (std::size_t i = 0; i < n * config.top_k; ++i) top[i] = static_cast<Token>(i % 300);
    drafter.observe_pass(tree, std::span<const Token>(fed).first(n), std::span<const Token>(next).first(n), kept,
                         std::span<const Token>(top).first(n * config.top_k));
    drafter.update(stream.next());
  }
  EXPECT_EQ(counter.count(), 0U);
}

TEST(TreeDrafter, RefusesBadConfigurationNamingTheValue) {
  TreeConfig config;
  config.successor_slots = 1000;
  EXPECT_EQ(invalid_argument_message([&] { TreeDrafter d(config); }),
            "ngramspec: TreeConfig::successor_slots = 1000; it must be a power of two from 1 to 16777216");
  config = {};
  config.max_children = 17;
  EXPECT_EQ(invalid_argument_message([&] { TreeDrafter d(config); }),
            "ngramspec: TreeConfig::max_children = 17; it must be 1 .. 16");
  config = {};
  config.top_k = 0;
  EXPECT_EQ(invalid_argument_message([&] { TreeDrafter d(config); }),
            "ngramspec: TreeConfig::top_k = 0; it must be 1 .. 32");
  config = {};
  config.chain.min_confidence = 2.0;
  EXPECT_NE(invalid_argument_message([&] { TreeDrafter d(config); }).find("min_confidence"), std::string::npos);
  // Drawing needs rows to draw from: without a table it would be off without a word.
  config = {};
  config.draw_recycled = true;
  EXPECT_EQ(invalid_argument_message([&] { TreeDrafter d(config); }),
            "ngramspec: TreeConfig::draw_recycled = true needs a top-k table to draw from, and "
            "TreeConfig::vocab_size = 0 makes none: set vocab_size (the drafter's own table) or pass a TopKTable");
  TopKTable shared(16, config.top_k, true);
  EXPECT_NE(TreeDrafter(config, &shared).top_k_table(), nullptr);
  config.vocab_size = 16;
  EXPECT_TRUE(TreeDrafter(config).top_k_table()->has_probabilities());
}

TEST(TreeDrafter, ObservePassRefusesAPassThatIsNotTheTreesNamingTheValue) {
  TreeConfig config;
  config.vocab_size = 10;
  config.top_k = 2;
  TreeDrafter drafter(config);
  DraftTree tree(2);
  tree.add(kTreeRoot, 3, 0.5f, 13);
  tree.add(0, 4, 0.5f, 13);
  const std::vector<Token> fed = {1, 3, 4};
  const std::vector<Token> next = {3, 4, 5};
  const std::vector<std::size_t> path = {0, 1, 2};
  const std::vector<Token> top = {2, 1, 2, 5, 2, 6};
  const float before = drafter.class_estimate(13);
  EXPECT_EQ(invalid_argument_message([&] { drafter.observe_pass(tree, std::vector<Token>{1, 3}, next, path, {}); }),
            "ngramspec: TreeDrafter::observe_pass: 2 fed and 3 model tokens for a tree of 2 nodes; it needs 3 each");
  EXPECT_EQ(invalid_argument_message([&] { drafter.observe_pass(tree, fed, next, std::vector<std::size_t>{1}, {}); }),
            "ngramspec: TreeDrafter::observe_pass: kept must start at the root (entry 0) and hold at most 3 entries; "
            "got 1 starting at 1");
  EXPECT_EQ(invalid_argument_message([&] { drafter.observe_pass(tree, fed, next, std::vector<std::size_t>{0, 2}, {}); }),
            "ngramspec: TreeDrafter::observe_pass: kept[1] = 2 does not follow entry 0 in the tree");
  EXPECT_EQ(invalid_argument_message([&] { drafter.observe_pass(tree, fed, next, path, std::vector<Token>(3, 2)); }),
            "ngramspec: TreeDrafter::observe_pass: 3 top-k tokens for 3 fed tokens; it needs 2 for each");
  EXPECT_EQ(invalid_argument_message([&] {
              drafter.observe_pass(tree, fed, next, path, std::vector<Token>{2, 2, 2, 10, 2, 2});
            }),
            "ngramspec: TreeDrafter::observe_pass: a top-k token 10 is outside the top-k table's vocabulary of 10");
  EXPECT_EQ(invalid_argument_message([&] { drafter.observe_pass(tree, std::vector<Token>{1, 3, 12}, next, path, top); }),
            "ngramspec: TreeDrafter::observe_pass: a fed token 12 is outside the top-k table's vocabulary of 10");
  EXPECT_EQ(invalid_argument_message([&] {
              drafter.observe_pass(tree, fed, next, path, std::vector<Token>{2, 1, 7, 7, 2, 6});
            }),
            "ngramspec: TreeDrafter::observe_pass: top[3] = 7 is invalid: token 7 is also top[2], in the same row "
            "(entry 1); a row lists 2 distinct tokens");
  // Nothing was learnt from the refused passes; the drafter still takes a good one.
  EXPECT_FLOAT_EQ(drafter.class_estimate(13), before);
  EXPECT_TRUE(drafter.top_k_table()->row(3).empty());
  drafter.observe_pass(tree, fed, next, path, top);
  EXPECT_GT(drafter.class_estimate(13), before);
  EXPECT_FALSE(drafter.top_k_table()->row(3).empty());
}

TEST(TopKTable, RecordsRowsAndRefusesBadShapesChangingNothing) {
  TopKTable table(10, 3);
  const std::vector<Token> tokens = {1, 2};
  table.record(tokens, std::vector<Token>{4, 5, 6, 7, 8, 9});
  EXPECT_EQ(std::vector<Token>(table.row(2).begin(), table.row(2).end()), (std::vector<Token>{7, 8, 9}));
  EXPECT_TRUE(table.row(3).empty());
  EXPECT_TRUE(table.row(99).empty());
  EXPECT_EQ(invalid_argument_message([&] { table.record(tokens, std::vector<Token>{1, 2, 3}); }),
            "ngramspec: TopKTable::record: 3 top-k tokens for 2 tokens; it needs 2 × k = 3 each");
  EXPECT_EQ(invalid_argument_message([&] { table.record(tokens, std::vector<Token>{1, 2, 3, 4, 5, 10}); }),
            "ngramspec: TopKTable::record: a top-k token 10 is outside the vocabulary of 10");
  EXPECT_EQ(invalid_argument_message([&] { table.record(std::vector<Token>{11}, std::vector<Token>{1, 2, 3}); }),
            "ngramspec: TopKTable::record: a token 11 is outside the vocabulary of 10");
  EXPECT_EQ(std::vector<Token>(table.row(1).begin(), table.row(1).end()), (std::vector<Token>{4, 5, 6}));
  EXPECT_EQ(invalid_argument_message([] { TopKTable t(10, 0); }), "ngramspec: TopKTable: k = 0; it must be 1 .. 32");
  EXPECT_EQ(invalid_argument_message([] { TopKTable t(0, 2); }), "ngramspec: TopKTable: the vocabulary size is 0");
  table.clear();
  EXPECT_TRUE(table.row(1).empty());
}

// A row recorded with probabilities is the blend of the distributions recorded after its
// token, and the overall row the blend of every distribution recorded: random tables (k,
// history weight) and random records, against a reference that keeps every token's mass in a map.
TEST(TopKTable, ARowIsTheBlendOfTheDistributionsRecordedAfterItsToken) {
  using Row = std::vector<std::pair<Token, float>>;  // best first
  // The reference blend: `row` keeps `weight` of its mass, the new distribution adds the rest;
  // an empty row (or weight 0) is replaced.
  const auto blend = [](Row& row, float weight, std::span<const Token> top, std::span<const float> p, std::size_t k) {
    if (row.empty() || weight == 0.0f) {
      row.clear();
      for (std::size_t i = 0; i < top.size(); ++i) row.emplace_back(top[i], p[i]);
      return;
    }
    std::map<Token, float> mass;
    for (const auto& [t, m] : row) mass[t] = weight * m;
    for (std::size_t i = 0; i < top.size(); ++i) mass[top[i]] += (1.0f - weight) * p[i];
    row.assign(mass.begin(), mass.end());
    std::stable_sort(row.begin(), row.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    row.resize(std::min(row.size(), k));
  };
  const auto expect_row = [](std::span<const Token> row, std::span<const float> probabilities, const Row& expected,
                             const std::string& what) {
    ASSERT_EQ(row.size(), expected.size()) << what;
    ASSERT_EQ(probabilities.size(), row.size()) << what;
    for (std::size_t i = 0; i < row.size(); ++i) {
      EXPECT_EQ(row[i], expected[i].first) << what << ", rank " << i;
      EXPECT_NEAR(probabilities[i], expected[i].second, 1e-6f) << what << ", rank " << i;
    }
  };
  std::mt19937_64 rng(29);
  constexpr Token kVocab = 12;
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t k = 1 + rng() % 6;
    const float weight = trial % 5 == 0 ? 0.0f : std::uniform_real_distribution<float>(0.0f, 0.95f)(rng);
    SCOPED_TRACE("trial " + std::to_string(trial) + ", k " + std::to_string(k) + ", weight " + std::to_string(weight));
    TopKTable table(kVocab, k, true, weight);
    EXPECT_EQ(table.history_weight(), weight);
    std::vector<Row> expected(kVocab);
    Row overall;
    for (int record = 0; record < 12; ++record) {
      const auto token = static_cast<Token>(rng() % 3);  // few tokens, so rows are recorded often
      // A distribution's top: 1 .. k distinct tokens, best first, summing to at most 1.
      std::vector<Token> pool(kVocab);
      for (Token t = 0; t < kVocab; ++t) pool[t] = t;
      std::shuffle(pool.begin(), pool.end(), rng);
      const std::size_t n = 1 + rng() % k;
      std::vector<float> p(n);
      float left = 1.0f;
      for (float& x : p) left -= (x = left * std::uniform_real_distribution<float>(0.05f, 0.7f)(rng));
      std::sort(p.rbegin(), p.rend());
      const std::vector<Token> top(pool.begin(), pool.begin() + static_cast<std::ptrdiff_t>(n));
      if (rng() % 8 == 0) {  // a row without probabilities is replaced, not blended, and not in the overall row
        std::vector<Token> row(k);
        for (std::size_t i = 0; i < k; ++i) row[i] = pool[i];
        table.record(std::vector<Token>{token}, row);
        expected[token].clear();
        continue;
      }
      if (rng() % 20 == 0) {  // clear() forgets the overall row too
        table.clear();
        for (Row& row : expected) row.clear();
        overall.clear();
      }
      table.record_distribution(token, top, p);
      blend(expected[token], weight, top, p, k);
      blend(overall, TopKTable::kOverallHistoryWeight, top, p, k);
    }
    for (Token t = 0; t < 3; ++t) {
      if (expected[t].empty()) continue;
      expect_row(table.row(t), table.row_probabilities(t), expected[t], "token " + std::to_string(t));
    }
    expect_row(table.overall_row(), table.overall_row_probabilities(), overall, "the overall row");
  }
}

TEST(TopKTable, RefusesAHistoryWeightOutsideZeroToOneNamingIt) {
  EXPECT_EQ(invalid_argument_message([] { TopKTable t(10, 3, true, 1.0f); }),
            "ngramspec: TopKTable: history_weight = 1; it must be in [0, 1)");
  EXPECT_EQ(invalid_argument_message([] { TopKTable t(10, 3, true, -0.25f); }),
            "ngramspec: TopKTable: history_weight = -0.25; it must be in [0, 1)");
  TopKTable table(10, 3, true);
  EXPECT_EQ(table.history_weight(), TopKTable::kDefaultHistoryWeight);
  EXPECT_EQ(invalid_argument_message([&] { table.set_history_weight(std::numeric_limits<float>::quiet_NaN()); }),
            "ngramspec: TopKTable: history_weight = nan; it must be in [0, 1)");
  EXPECT_EQ(table.history_weight(), TopKTable::kDefaultHistoryWeight);
  TreeConfig config;
  config.vocab_size = 10;
  config.draw_recycled = true;
  config.recycled_history = 1.5f;
  EXPECT_EQ(invalid_argument_message([&] { TreeDrafter d(config); }),
            "ngramspec: TreeConfig::recycled_history = 1.5; it must be in [0, 1)");
  config.recycled_history = 0.25f;
  EXPECT_EQ(TreeDrafter(config).top_k_table()->history_weight(), 0.25f);
}

// A vocabulary beyond kMaxVocabSize is refused naming the value and the limit before anything
// is allocated, however large (2e8 took 6.5 GB and most of a minute to fill), and so is a
// TreeDrafter's own table of that size.
TEST(TopKTable, RefusesAVocabularyBeyondItsLimitBeforeAllocating) {
  const std::string limit = " is out of range: it must be 1 .. kMaxVocabSize = 16777216";
  for (const std::size_t vocab : {TopKTable::kMaxVocabSize + 1, std::size_t{200000000}, std::size_t{1} << 40,
                                  std::numeric_limits<std::size_t>::max()}) {
    EXPECT_EQ(invalid_argument_message([&] { TopKTable t(vocab, 8); }),
              "ngramspec: TopKTable: vocab_size = " + std::to_string(vocab) + limit);
    TreeConfig config;
    config.vocab_size = vocab;
    EXPECT_EQ(invalid_argument_message([&] { TreeDrafter d(config); }),
              "ngramspec: TopKTable: vocab_size = " + std::to_string(vocab) + limit);
  }
  EXPECT_EQ(TopKTable::bytes_for(TopKTable::kMaxVocabSize, TopKTable::kMaxK), (std::size_t{1} << 24) * 129);
  const TopKTable largest_row(1000, TopKTable::kMaxK);
  EXPECT_EQ(largest_row.memory_bytes(), TopKTable::bytes_for(1000, TopKTable::kMaxK) + sizeof(TopKTable));
}

}  // namespace
}  // namespace ngramspec::test
