// DraftTree, validate_tree_parents and accept_tree: the tree a pass carries and how a pass
// over it is decided, against an independent reference walk.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "ngramspec/decode_step.hpp"
#include "ngramspec/draft_tree.hpp"
#include "support/thrown_message.hpp"

namespace ngramspec::test {
namespace {

TEST(DraftTree, AddKeepsDepthsAndPathProbabilities) {
  DraftTree tree(4);
  EXPECT_EQ(tree.add(kTreeRoot, 7, 0.5f), 0U);
  EXPECT_EQ(tree.add(0, 8, 0.5f), 1U);
  EXPECT_EQ(tree.add(kTreeRoot, 9, 0.25f), 2U);
  EXPECT_EQ(tree.add(1, 10, 2.0f), 3U);  // clamped to 1
  EXPECT_EQ(std::vector<std::uint32_t>(tree.depths().begin(), tree.depths().end()),
            (std::vector<std::uint32_t>{0, 1, 0, 2}));
  EXPECT_FLOAT_EQ(tree.path_probabilities()[1], 0.25f);
  EXPECT_FLOAT_EQ(tree.path_probabilities()[3], 0.25f);
  EXPECT_FLOAT_EQ(tree.probabilities()[3], 1.0f);
  EXPECT_EQ(tree.height(), 3U);
  tree.truncate(2);
  EXPECT_EQ(tree.size(), 2U);
  EXPECT_EQ(tree.height(), 2U);
}

TEST(DraftTree, RefusesBadParentsAndOverflowNamingTheValue) {
  DraftTree tree(2);
  EXPECT_EQ(invalid_argument_message([&] { tree.add(0, 1, 0.5f); }),
            "ngramspec: DraftTree::add: parent 0 is neither kTreeRoot (-1) nor one of the tree's 0 nodes");
  EXPECT_EQ(invalid_argument_message([&] { tree.add(-2, 1, 0.5f); }),
            "ngramspec: DraftTree::add: parent -2 is neither kTreeRoot (-1) nor one of the tree's 0 nodes");
  tree.add(kTreeRoot, 1, 0.5f);
  tree.add(0, 2, 0.5f);
  EXPECT_EQ(invalid_argument_message([&] { tree.add(0, 3, 0.5f); }),
            "ngramspec: DraftTree is full: it holds its capacity of 2 nodes");
  EXPECT_EQ(tree.size(), 2U);  // nothing changed
  EXPECT_EQ(invalid_argument_message([] { DraftTree big(DraftTree::kMaxNodes + 1); }),
            "ngramspec: DraftTree capacity 1025 is more than kMaxNodes = 1024");
}

TEST(DraftTree, ValidateNamesTheFirstBadParent) {
  const std::vector<std::int32_t> good = {-1, 0, 0, -1, 3};
  EXPECT_NO_THROW(validate_tree_parents(good));
  const std::vector<std::int32_t> self = {-1, 1};
  EXPECT_EQ(invalid_argument_message([&] { validate_tree_parents(self); }),
            "ngramspec: tree node 1 has parent 1; a parent is kTreeRoot (-1) or an earlier node (0 .. 0)");
  const std::vector<std::int32_t> first = {0};
  EXPECT_EQ(invalid_argument_message([&] { validate_tree_parents(first); }),
            "ngramspec: tree node 0 has parent 0; a parent is kTreeRoot (-1) or an earlier node (0 .. none)");
  const std::vector<std::int32_t> negative = {-1, -7};
  EXPECT_EQ(invalid_argument_message([&] { validate_tree_parents(negative); }),
            "ngramspec: tree node 1 has parent -7; a parent is kTreeRoot (-1) or an earlier node (0 .. 0)");
}

// The reference: the accepted path by recursion over children sets, written apart from
// accept_tree's single scan. Among siblings with the model's token the earliest wins.
std::vector<std::size_t> reference_path(const std::vector<Token>& tokens, const std::vector<std::int32_t>& parents,
                                        const std::vector<Token>& model) {
  std::vector<std::size_t> path = {0};
  for (;;) {
    const std::size_t at = path.back();
    std::size_t found = 0;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (static_cast<std::size_t>(parents[i] + 1) == at && tokens[i] == model[at]) {
        found = i + 1;
        break;
      }
    }
    if (found == 0) return path;
    path.push_back(found);
  }
}

TEST(AcceptTree, MatchesAReferenceWalkOnRandomTrees) {
  std::mt19937_64 rng(20);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::size_t n = std::uniform_int_distribution<std::size_t>(0, 40)(rng);
    const Token vocab = std::uniform_int_distribution<Token>(1, 4)(rng);
    std::vector<Token> tokens(n);
    std::vector<std::int32_t> parents(n);
    for (std::size_t i = 0; i < n; ++i) {
      parents[i] = std::uniform_int_distribution<std::int32_t>(-1, static_cast<std::int32_t>(i) - 1)(rng);
      tokens[i] = std::uniform_int_distribution<Token>(0, vocab - 1)(rng);
    }
    std::vector<Token> model(n + 1);
    for (Token& t : model) t = std::uniform_int_distribution<Token>(0, vocab - 1)(rng);
    DecodeOptions options;
    options.max_new_tokens = std::uniform_int_distribution<std::size_t>(2, 60)(rng);
    if (rng() % 3 == 0) options.stop_tokens = {static_cast<Token>(rng() % vocab)};
    SequenceState state = start_sequence(5, options);
    state.generated = 1;

    std::vector<std::size_t> kept(n + 1, 999);
    const StepOutcome outcome = accept_tree(state, tokens, parents, model, options, kept);
    const std::vector<std::size_t> path = reference_path(tokens, parents, model);
    // Emitted: the model's tokens along the path, cut after a stop token and at the limit.
    std::size_t emit = std::min(path.size(), options.max_new_tokens - 1);
    for (std::size_t j = 0; j < emit; ++j) {
      if (!options.stop_tokens.empty() && model[path[j]] == options.stop_tokens[0]) {
        emit = j + 1;
        break;
      }
    }
    ASSERT_EQ(outcome.emitted, emit) << "trial " << trial;
    ASSERT_EQ(outcome.accepted, std::min(path.size() - 1, emit)) << "trial " << trial;
    for (std::size_t j = 0; j < emit; ++j) ASSERT_EQ(kept[j], path[j]) << "trial " << trial << " j " << j;
    ASSERT_EQ(outcome.rollback_to, state.cache_length() + emit);
    ASSERT_EQ(outcome.discarded, n + 1 - emit);
  }
}

TEST(AcceptTree, AChainDecidesAsAcceptDrafts) {
  std::mt19937_64 rng(21);
  for (int trial = 0; trial < 2000; ++trial) {
    const std::size_t n = std::uniform_int_distribution<std::size_t>(0, 12)(rng);
    std::vector<Token> drafts(n);
    std::vector<std::int32_t> parents(n);
    for (std::size_t i = 0; i < n; ++i) {
      drafts[i] = static_cast<Token>(rng() % 3);
      parents[i] = static_cast<std::int32_t>(i) - 1;
    }
    std::vector<Token> model(n + 1);
    for (Token& t : model) t = static_cast<Token>(rng() % 3);
    DecodeOptions options;
    options.max_new_tokens = std::uniform_int_distribution<std::size_t>(2, 20)(rng);
    options.stop_tokens = {2};
    SequenceState state = start_sequence(3, options);
    state.generated = 1;
    std::vector<std::size_t> kept(n + 1);
    const StepOutcome tree = accept_tree(state, drafts, parents, model, options, kept);
    const StepOutcome chain = accept_drafts(state, drafts, model, options);
    ASSERT_EQ(tree.emitted, chain.emitted);
    ASSERT_EQ(tree.accepted, chain.accepted);
    ASSERT_EQ(tree.rollback_to, chain.rollback_to);
    ASSERT_EQ(tree.discarded, chain.discarded);
    ASSERT_EQ(tree.finished, chain.finished);
    ASSERT_EQ(tree.stop_reason, chain.stop_reason);
    ASSERT_TRUE(kept_is_prefix(std::span<const std::size_t>(kept).first(tree.emitted)));
  }
}

TEST(AcceptTree, RefusesBadInputNamingTheValueAndWritesNothing) {
  DecodeOptions options;
  SequenceState state = start_sequence(3, options);
  state.generated = 1;
  const std::vector<Token> tokens = {1, 2};
  const std::vector<Token> model = {1, 2, 3};
  std::vector<std::size_t> kept = {77, 77, 77};
  const std::vector<std::int32_t> forward_parent = {-1, 1};
  EXPECT_EQ(invalid_argument_message([&] { (void)accept_tree(state, tokens, forward_parent, model, options, kept); }),
            "ngramspec: tree node 1 has parent 1; a parent is kTreeRoot (-1) or an earlier node (0 .. 0)");
  const std::vector<std::int32_t> parents = {-1, 0};
  EXPECT_EQ(invalid_argument_message(
                [&] { (void)accept_tree(state, tokens, parents, std::span<const Token>(model).first(2), options, kept); }),
            "ngramspec: accept_tree needs tree nodes + 1 model tokens; got 2 for 2 nodes");
  EXPECT_EQ(invalid_argument_message(
                [&] { (void)accept_tree(state, tokens, std::span<const std::int32_t>(parents).first(1), model, options, kept); }),
            "ngramspec: accept_tree: 1 parents for 2 tree nodes");
  EXPECT_EQ(invalid_argument_message(
                [&] { (void)accept_tree(state, tokens, parents, model, options, std::span<std::size_t>(kept).first(2)); }),
            "ngramspec: accept_tree: `kept` has room for 2 entries; a tree of 2 nodes needs 3");
  EXPECT_EQ(kept, (std::vector<std::size_t>{77, 77, 77}));
  SequenceState prefill = start_sequence(3, options);
  EXPECT_EQ(invalid_argument_message([&] { (void)accept_tree(prefill, tokens, parents, model, options, kept); }),
            "ngramspec: accept_tree: the prefill step takes no drafts; got 2 nodes");
}

}  // namespace
}  // namespace ngramspec::test
