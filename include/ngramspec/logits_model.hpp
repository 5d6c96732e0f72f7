#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "ngramspec/token.hpp"

namespace ngramspec {

/// A backend that returns logits instead of tokens; SamplingModel turns it into a TargetModel.
///
/// - `forward(pos, tokens, logits)`: as TargetModel::forward (on entry the model holds exactly
///   `pos` tokens; `tokens` take positions pos .. pos+n-1; afterwards it holds pos + n), but it
///   writes logits: row i, `logits[i * vocab_size() .. (i + 1) * vocab_size())`, scores the
///   token after tokens[0..i]. `logits.size() == tokens.size() * vocab_size()`, and
///   1 <= tokens.size() <= max_batch().
/// - `rollback(pos)`, `max_batch()`: exactly as for TargetModel.
/// - `vocab_size()`: floats per row (at least 1); token ids are 0 .. vocab_size() - 1.
///
/// A logit of -infinity masks a token (probability 0); NaN and +infinity are errors.
template <class M>
concept LogitsModel = requires(M& m, const M& cm, std::size_t pos, std::span<const Token> tokens,
                               std::span<float> logits) {
  m.forward(pos, tokens, logits);
  m.rollback(pos);
  { cm.max_batch() } -> std::convertible_to<std::size_t>;
  { cm.vocab_size() } -> std::convertible_to<std::size_t>;
};

/// A LogitsModel that also verifies trees (TreeTargetModel's contract, with logits):
/// `forward_tree(pos, tokens, parents, logits)` writes row i for the path that ends at token i,
/// and `keep(pos, kept)` keeps a root path of the pass. SamplingModel over one is a
/// TopKTreeModel.
template <class M>
concept LogitsTreeModel = LogitsModel<M> && requires(M& m, std::size_t pos, std::span<const Token> tokens,
                                                     std::span<const std::int32_t> parents, std::span<float> logits,
                                                     std::span<const std::size_t> kept) {
  m.forward_tree(pos, tokens, parents, logits);
  m.keep(pos, kept);
};

/// The LogitsModel contract as an abstract class, for backends chosen at run time:
/// SamplingModel<AbstractLogitsModel> over a reference to any subclass.
///
/// Thread safety: SamplingModel calls its model from one thread at a time; a model shared
/// across threads must serialize its own calls.
class AbstractLogitsModel {
 public:
  virtual ~AbstractLogitsModel() = default;
  virtual void forward(std::size_t pos, std::span<const Token> tokens, std::span<float> logits) = 0;
  virtual void rollback(std::size_t pos) = 0;
  [[nodiscard]] virtual std::size_t max_batch() const = 0;
  [[nodiscard]] virtual std::size_t vocab_size() const = 0;

 protected:
  AbstractLogitsModel() = default;
  AbstractLogitsModel(const AbstractLogitsModel&) = default;
  AbstractLogitsModel& operator=(const AbstractLogitsModel&) = default;
};

static_assert(LogitsModel<AbstractLogitsModel>);

}  // namespace ngramspec
