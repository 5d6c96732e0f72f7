#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ngramspec/argument_error.hpp"
#include "ngramspec/detail/number_text.hpp"
#include "ngramspec/draft_tree.hpp"
#include "ngramspec/drafter.hpp"
#include "ngramspec/target_model.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec {

/// The distributions a pass's drafts were drawn from, one per draft: a chain's drafts in
/// order, or a DraftTree's nodes by index. Rejection sampling (SamplingMode::rejection) needs
/// them to accept a draft x with probability min(1, p(x) / q(x)) and to resample from what p
/// keeps beyond q, which keeps the target's distribution p exactly (docs/SAMPLING.md).
///
/// Entry i is q_i, the distribution draft i was drawn from given everything drafted before it
/// (its ancestors and, in a tree, its earlier siblings). It is either
/// - drawn: a support of 1 .. kMaxSupport distinct tokens with their probabilities (finite,
///   non-negative, summing to more than 0; they are read normalized by their sum), the draft's
///   own token among them with a probability above 0; or
/// - chosen (one-hot): the drafter chose the token without drawing it, q = 1 on it. A drafter
///   that does not give distributions is read this way, and so is an entry whose support gives
///   the draft's own token no probability (which keeps the verification exact, if less likely to
///   accept, rather than failing a pass over a drafter's slip).
///
/// Memory: reserve() sizes it for a pass; after that clear() and the pushes allocate nothing.
/// Thread safety: none; one per sequence.
class DraftDistributions {
 public:
  /// Most tokens one draft's support holds (TopKTable::kMaxK).
  static constexpr std::size_t kMaxSupport = 32;

  /// Room for `drafts` entries of up to `support` tokens each, so that the pushes of a pass
  /// allocate nothing.
  void reserve(std::size_t drafts, std::size_t support = kMaxSupport) {
    begin_.reserve(drafts + 1);
    tokens_.reserve(drafts * support);
    probabilities_.reserve(drafts * support);
  }

  /// Forgets every entry; keeps the memory.
  void clear() noexcept {
    begin_.clear();
    tokens_.clear();
    probabilities_.clear();
  }

  /// Appends a drawn draft's distribution. Throws std::invalid_argument naming the value,
  /// appending nothing, when the sizes differ or are outside 1 .. kMaxSupport, a probability is
  /// negative or not finite, or they sum to 0.
  void push(std::span<const Token> tokens, std::span<const float> probabilities) {
    if (tokens.size() != probabilities.size() || tokens.empty() || tokens.size() > kMaxSupport) {
      throw ArgumentError("ngramspec", "DraftDistributions::push: " + std::to_string(tokens.size()) + " tokens and " +
                                           std::to_string(probabilities.size()) +
                                           " probabilities; it needs as many of each, 1 .. " +
                                           std::to_string(kMaxSupport));
    }
    double total = 0.0;
    for (std::size_t i = 0; i < probabilities.size(); ++i) {
      const float q = probabilities[i];
      if (!std::isfinite(q) || q < 0.0f) {
        throw ArgumentError("ngramspec", "DraftDistributions::push: the probability of token " +
                                             std::to_string(tokens[i]) + " is " + detail::number_text(q) +
                                             "; it must be finite and >= 0");
      }
      total += q;
    }
    if (!(total > 0.0)) {
      throw ArgumentError("ngramspec", "DraftDistributions::push: the probabilities sum to 0");
    }
    push_unchecked(tokens, probabilities);
  }

  /// push() without its checks, for drafters whose distributions come from the model.
  void push_unchecked(std::span<const Token> tokens, std::span<const float> probabilities) {
    if (begin_.empty()) begin_.push_back(0);
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
    probabilities_.insert(probabilities_.end(), probabilities.begin(), probabilities.end());
    begin_.push_back(static_cast<std::uint32_t>(tokens_.size()));
  }

  /// Appends a chosen draft (q one-hot on its token).
  void push_one_hot() {
    if (begin_.empty()) begin_.push_back(0);
    begin_.push_back(static_cast<std::uint32_t>(tokens_.size()));
  }

  /// Bytes it holds: itself and its buffers' capacity (what reserve() and the pushes made room for).
  [[nodiscard]] std::size_t memory_bytes() const noexcept {
    return sizeof(*this) + begin_.capacity() * sizeof(std::uint32_t) + tokens_.capacity() * sizeof(Token) +
           probabilities_.capacity() * sizeof(float);
  }

  /// Entries held.
  [[nodiscard]] std::size_t size() const noexcept { return begin_.empty() ? 0 : begin_.size() - 1; }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  /// Throws std::logic_error when there are fewer entries than `drafts`, the drafts a drafter
  /// made with them: a drafter that gives distributions gives one per draft (or node).
  void check_one_per_draft(std::size_t drafts) const {
    if (size() < drafts) {
      throw std::logic_error("ngramspec: the drafter proposed " + std::to_string(drafts) + " drafts and " +
                             std::to_string(size()) + " distributions; it must give one per draft");
    }
  }
  /// Whether any entry was drawn (has a support), rather than chosen.
  [[nodiscard]] bool any_drawn() const noexcept {
    for (std::size_t i = 0; i < size(); ++i) {
      if (begin_[i + 1] != begin_[i]) return true;
    }
    return false;
  }

  /// Entry i's support (empty: chosen, one-hot). i < size().
  [[nodiscard]] std::span<const Token> tokens(std::size_t i) const noexcept {
    return std::span<const Token>(tokens_).subspan(begin_[i], begin_[i + 1] - begin_[i]);
  }
  /// Entry i's probabilities, as pushed (not normalized). i < size().
  [[nodiscard]] std::span<const float> probabilities(std::size_t i) const noexcept {
    return std::span<const float>(probabilities_).subspan(begin_[i], begin_[i + 1] - begin_[i]);
  }

  /// Keeps the first `n` entries (a chain or tree cut to its first n drafts).
  void truncate(std::size_t n) noexcept {
    if (n >= size()) return;
    begin_.resize(n + 1);
    tokens_.resize(begin_[n]);
    probabilities_.resize(begin_[n]);
  }

 private:
  std::vector<std::uint32_t> begin_;  // entry i is [begin_[i], begin_[i + 1]); empty while no entry
  std::vector<Token> tokens_;
  std::vector<float> probabilities_;
};

/// A drafter that says what its chain's drafts were drawn from:
/// `predict(out, probabilities, q)` drafts as predict(out, probabilities) does (EstimatingDrafter:
/// the chance each prefix is accepted) and replaces q's entries with one per draft.
template <class D>
concept DistributionDrafter =
    EstimatingDrafter<D> && requires(const D& cd, std::span<Token> out, std::span<float> probabilities,
                                     DraftDistributions& q) {
      { cd.predict(out, probabilities, q) } -> std::convertible_to<std::size_t>;
    };

/// A tree drafter that says what each node was drawn from: `predict_tree(tree, max_drafts,
/// max_depth, min_path_probability, q)` builds the tree as predict_tree does and replaces q's
/// entries with one per node, by index.
template <class D>
concept DistributionTreeDrafter =
    TreeDraftingDrafter<D> && requires(D& d, DraftTree& tree, std::size_t count, float least, DraftDistributions& q) {
      { d.predict_tree(tree, count, count, least, q) } -> std::convertible_to<std::size_t>;
    };

/// A model that verifies drafts against the distributions they were drawn from:
/// `forward(pos, tokens, next, q)` as forward(pos, tokens, next), where tokens[i + 1] was drawn
/// from q's entry i (q.size() >= tokens.size() - 1; entries past the pass are ignored).
template <class M>
concept DistributionTargetModel =
    TargetModel<M> && requires(M& m, std::size_t pos, std::span<const Token> tokens, std::span<Token> next,
                               const DraftDistributions& q) { m.forward(pos, tokens, next, q); };

/// The same for tree passes: `forward_tree(pos, tokens, parents, next, q)`, where tokens[i + 1]
/// (the tree's node i; tokens[0] is the root) was drawn from q's entry i.
template <class M>
concept DistributionTreeModel =
    TreeTargetModel<M> && requires(M& m, std::size_t pos, std::span<const Token> tokens,
                                   std::span<const std::int32_t> parents, std::span<Token> next,
                                   const DraftDistributions& q) { m.forward_tree(pos, tokens, parents, next, q); };

}  // namespace ngramspec
