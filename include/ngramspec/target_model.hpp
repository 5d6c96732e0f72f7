#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "ngramspec/token.hpp"

namespace ngramspec {

/// What the decoder needs from the model it speculates for.
///
/// - `forward(pos, tokens, next)`: on entry the model holds exactly the first `pos` tokens of
///   the sequence (its KV cache); `tokens` take positions pos .. pos+n-1, and the model writes
///   `next[i]`, its token after tokens[0..i] (the argmax for greedy decoding, or its sample);
///   afterwards it holds pos + n tokens. `next.size() == tokens.size()`, and
///   1 <= tokens.size() <= max_batch().
/// - `rollback(pos)`: discard the state at positions >= pos, so the model holds `pos` tokens.
///   pos never exceeds what the model holds.
/// - `max_batch()`: the most tokens one forward takes (at least 1).
///
/// Exceptions thrown by forward or rollback propagate out of the decoder unchanged.
template <class M>
concept TargetModel = requires(M& m, const M& cm, std::size_t pos, std::span<const Token> tokens,
                               std::span<Token> next) {
  m.forward(pos, tokens, next);
  m.rollback(pos);
  { cm.max_batch() } -> std::convertible_to<std::size_t>;
};

/// Parent of a tree pass's token that hangs from the cached sequence itself (the root).
inline constexpr std::int32_t kTreeRoot = -1;

/// A model that also verifies trees: several candidate continuations in one pass, each token
/// attending only to its ancestors (docs/MODEL_CONTRACT.md, "Tree passes").
///
/// - `forward_tree(pos, tokens, parents, next)`: on entry the model holds exactly `pos` tokens.
///   Token i's parent is `parents[i]`: kTreeRoot (it follows the cached sequence) or an index
///   below i. Token i sits at position pos + depth(i) (depth 0 under the root, a parent's depth
///   plus one otherwise), attends to the cached positions 0 .. pos-1, its ancestors in the pass
///   and itself, and the model writes `next[i]`, its token after that path, exactly what it
///   would write had the path been fed as a chain. Afterwards the model holds the pos cached
///   tokens and the n pass entries, entry pos + i for token i.
///   `next.size() == parents.size() == tokens.size()`, 1 <= tokens.size() <= max_batch().
/// - `keep(pos, kept)`: right after forward_tree at `pos`, keeps the pass entries `kept` (a
///   root path: kept[0]'s parent is kTreeRoot, each next one's parent is the one before) at
///   positions pos .. pos + kept.size() - 1 and discards the rest: the model holds
///   pos + kept.size() tokens, as if the path had been fed as a chain. `rollback(pos)` after a
///   tree pass discards every entry of it, as after a chain pass.
///
/// A chain is the tree whose parents are kTreeRoot, 0, 1, ...; keep of 0 .. m-1 is then
/// rollback(pos + m).
template <class M>
concept TreeTargetModel = TargetModel<M> && requires(M& m, std::size_t pos, std::span<const Token> tokens,
                                                     std::span<const std::int32_t> parents, std::span<Token> next,
                                                     std::span<const std::size_t> kept) {
  m.forward_tree(pos, tokens, parents, next);
  m.keep(pos, kept);
};

/// A tree model that also reports its top candidates at every token of a tree pass, for the
/// drafters that recycle them (TopKTable): `forward_tree(pos, tokens, parents, next, top)`
/// writes next as above and, with K = top.size() / tokens.size() (top.size() a multiple of
/// tokens.size()), `top[i * K .. i * K + K)`: the K tokens it scores highest after token i,
/// best first, ties to the lower id.
template <class M>
concept TopKTreeModel = TreeTargetModel<M> && requires(M& m, std::size_t pos, std::span<const Token> tokens,
                                                        std::span<const std::int32_t> parents, std::span<Token> next,
                                                        std::span<Token> top) {
  m.forward_tree(pos, tokens, parents, next, top);
};

/// The TargetModel contract as an abstract class, for backends chosen at run time:
/// SpeculativeDecoder<AbstractTargetModel> over a reference to any subclass.
///
/// Thread safety: a decoder calls its model from one thread at a time; a model that several
/// decoders share across threads must serialize its own calls.
class AbstractTargetModel {
 public:
  virtual ~AbstractTargetModel() = default;
  virtual void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) = 0;
  virtual void rollback(std::size_t pos) = 0;
  [[nodiscard]] virtual std::size_t max_batch() const = 0;

 protected:
  AbstractTargetModel() = default;
  AbstractTargetModel(const AbstractTargetModel&) = default;
  AbstractTargetModel& operator=(const AbstractTargetModel&) = default;
};

static_assert(TargetModel<AbstractTargetModel>);

}  // namespace ngramspec
