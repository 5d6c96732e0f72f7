#pragma once

#include <concepts>
#include <cstddef>
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
