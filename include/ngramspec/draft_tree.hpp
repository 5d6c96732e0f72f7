#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ngramspec/argument_error.hpp"
#include "ngramspec/target_model.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec {

/// The first index i whose parents[i] is neither kTreeRoot nor an index below i (parents.size()
/// when `parents` describes a tree in topological order): the rule every tree pass is checked by,
/// for callers that report it their own way (the C ABI).
[[nodiscard]] inline std::size_t first_invalid_tree_parent(std::span<const std::int32_t> parents) noexcept {
  for (std::size_t i = 0; i < parents.size(); ++i) {
    const std::int32_t p = parents[i];
    if (p != kTreeRoot && (p < 0 || static_cast<std::size_t>(p) >= i)) return i;
  }
  return parents.size();
}

/// Checks that `parents` describes a tree in topological order: each parents[i] is kTreeRoot
/// or an index below i. Throws std::invalid_argument naming the first index that is not, and
/// its value.
inline void validate_tree_parents(std::span<const std::int32_t> parents) {
  const std::size_t i = first_invalid_tree_parent(parents);
  if (i == parents.size()) return;
  throw ArgumentError("ngramspec", "tree node " + std::to_string(i) + " has parent " + std::to_string(parents[i]) +
                                       "; a parent is kTreeRoot (-1) or an earlier node (0 .. " +
                                       (i == 0 ? std::string("none") : std::to_string(i - 1)) + ")");
}

/// A draft tree: candidate continuations of a sequence, sharing their prefixes.
///
/// Nodes live in flat arrays in topological order (a parent precedes its children). Node i
/// holds its token, its parent (kTreeRoot: it follows the sequence's last token, the root)
/// and two estimates: probability(i), the chance that the model's token after the parent's
/// path is this node's token given that the parent was accepted, and path_probability(i),
/// the chance that the whole path root..i is accepted (the product along the path). A chain
/// is the tree whose parents are kTreeRoot, 0, 1, ...
///
/// TreeDrafter fills trees best-first, so path probabilities never increase with the index
/// and any prefix of the nodes is itself a tree: the best tree of that many nodes under the
/// estimates. That is what lets the planner size a tree by cutting it (DraftPlanner::plan_one
/// over path_probabilities()). Each node also carries a small class tag, the estimate's
/// source, which the drafter's calibration reads back after the pass.
///
/// Capacity is fixed at construction; add() and clear() never allocate.
class DraftTree {
 public:
  /// Largest capacity accepted (a pass carries at most kMaxDraftsPerPass drafts anyway).
  static constexpr std::size_t kMaxNodes = 1024;

  DraftTree() = default;
  /// Room for `capacity` nodes; std::invalid_argument above kMaxNodes.
  explicit DraftTree(std::size_t capacity) { reserve(capacity); }

  /// Makes room for `capacity` nodes (never less than the current size); allocates.
  void reserve(std::size_t capacity) {
    if (capacity > kMaxNodes) {
      throw ArgumentError("ngramspec", "DraftTree capacity " + std::to_string(capacity) +
                                           " is more than kMaxNodes = " + std::to_string(kMaxNodes));
    }
    if (capacity <= capacity_) return;
    tokens_.resize(capacity);
    parents_.resize(capacity);
    probabilities_.resize(capacity);
    path_probabilities_.resize(capacity);
    depths_.resize(capacity);
    classes_.resize(capacity);
    capacity_ = capacity;
  }

  /// Appends a node under `parent` (kTreeRoot or an existing node) and returns its index.
  /// Throws std::invalid_argument, changing nothing, when the tree is full or the parent is
  /// neither; a probability outside [0, 1] (or NaN) is clamped, as the planner would.
  std::size_t add(std::int32_t parent, Token token, float probability, std::uint8_t source_class = 0) {
    if (size_ == capacity_) {
      throw ArgumentError("ngramspec",
                          "DraftTree is full: it holds its capacity of " + std::to_string(capacity_) + " nodes");
    }
    if (parent != kTreeRoot && (parent < 0 || static_cast<std::size_t>(parent) >= size_)) {
      throw ArgumentError("ngramspec", "DraftTree::add: parent " + std::to_string(parent) +
                                           " is neither kTreeRoot (-1) nor one of the tree's " + std::to_string(size_) +
                                           " nodes");
    }
    return push(parent, token, probability, source_class);
  }

  /// Forgets every node; keeps the memory.
  void clear() noexcept { size_ = 0; }
  /// Keeps the first `count` nodes (a prefix is a tree); larger counts change nothing.
  void truncate(std::size_t count) noexcept {
    if (count < size_) size_ = count;
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

  [[nodiscard]] std::span<const Token> tokens() const noexcept { return {tokens_.data(), size_}; }
  [[nodiscard]] std::span<const std::int32_t> parents() const noexcept { return {parents_.data(), size_}; }
  /// Per node, the chance it is accepted given its parent was.
  [[nodiscard]] std::span<const float> probabilities() const noexcept { return {probabilities_.data(), size_}; }
  /// Per node, the chance its whole root path is accepted.
  [[nodiscard]] std::span<const float> path_probabilities() const noexcept {
    return {path_probabilities_.data(), size_};
  }
  /// Per node, its depth: 0 for a child of the root.
  [[nodiscard]] std::span<const std::uint32_t> depths() const noexcept { return {depths_.data(), size_}; }
  /// Per node, the source tag its drafter gave it.
  [[nodiscard]] std::span<const std::uint8_t> source_classes() const noexcept { return {classes_.data(), size_}; }

  /// Depth of the deepest node plus one: the longest path's drafts (0 when empty).
  [[nodiscard]] std::size_t height() const noexcept {
    std::size_t height = 0;
    for (std::size_t i = 0; i < size_; ++i) height = depths_[i] + 1 > height ? depths_[i] + 1 : height;
    return height;
  }

  /// add() without its checks, for drafters that build valid trees by construction.
  std::size_t push(std::int32_t parent, Token token, float probability, std::uint8_t source_class) noexcept {
    const float p = probability >= 0.0f ? (probability <= 1.0f ? probability : 1.0f) : 0.0f;  // NaN -> 0
    const std::size_t i = size_++;
    tokens_[i] = token;
    parents_[i] = parent;
    probabilities_[i] = p;
    if (parent == kTreeRoot) {
      path_probabilities_[i] = p;
      depths_[i] = 0;
    } else {
      const auto up = static_cast<std::size_t>(parent);
      path_probabilities_[i] = path_probabilities_[up] * p;
      depths_[i] = depths_[up] + 1;
    }
    classes_[i] = source_class;
    return i;
  }

 private:
  std::vector<Token> tokens_;
  std::vector<std::int32_t> parents_;
  std::vector<float> probabilities_;
  std::vector<float> path_probabilities_;
  std::vector<std::uint32_t> depths_;
  std::vector<std::uint8_t> classes_;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

}  // namespace ngramspec
