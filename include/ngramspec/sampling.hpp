#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ngramspec/detail/top_k_select.hpp"
#include "ngramspec/draft_tree.hpp"
#include "ngramspec/logits_model.hpp"
#include "ngramspec/position_random.hpp"
#include "ngramspec/sampling_options.hpp"
#include "ngramspec/target_model.hpp"
#include "ngramspec/token.hpp"
#include "ngramspec/token_sampler.hpp"

namespace ngramspec {

/// Adapts a LogitsModel into a TargetModel that samples: SpeculativeDecoder<SamplingModel<M>>
/// decodes with temperature, top-k, top-p and min-p exactly as it decodes greedily.
///
/// forward(pos, tokens, next) runs the model, then chooses next[i] from logits row i with
/// TokenSampler::choose at position pos + i + 1, the absolute position of the token being
/// chosen (the prompt's first token is position 0). The draw there is
/// position_uniform(seed, pos + i + 1), so the token at a position depends only on the
/// model's logits for its prefix and the seed: speculative decoding, which computes rows for
/// drafts it later rejects and rolls back, emits the same tokens as plain decoding with the
/// same seed, provided the model's logits for a prefix do not depend on how it was fed. Every
/// row is sampled, prefill rows included (the TargetModel contract asks for all of them).
///
/// The adapter holds a reference to the model, which must outlive it. It reads max_batch()
/// and vocab_size() once, at construction, and allocates max_batch() x vocab_size() floats
/// there plus the sampler's scratch; forward allocates nothing. Exceptions from the model
/// propagate; a NaN or +inf logit throws std::domain_error naming the token and position.
/// Thread safety: one adapter per sequence, one thread at a time.
template <class M>
class SamplingModel {
  static_assert(
      LogitsModel<M>,
      "ngramspec: SamplingModel<M> needs M to provide forward(std::size_t pos, std::span<const Token> tokens, "
      "std::span<float> logits), rollback(std::size_t pos), and const max_batch() and vocab_size()");

 public:
  /// Throws std::invalid_argument for invalid options (see validate()), a model whose
  /// max_batch() or vocab_size() is 0, or a logits buffer too large to address.
  SamplingModel(M& model, const SamplingOptions& options)
      : model_(&model),
        rows_(static_cast<std::size_t>(static_cast<const M&>(model).max_batch())),
        sampler_(options, static_cast<std::size_t>(static_cast<const M&>(model).vocab_size())) {
    if (rows_ == 0) throw std::invalid_argument("ngramspec: SamplingModel: the model's max_batch() is 0");
    const std::size_t vocab = sampler_.vocab_size();
    if (rows_ > std::numeric_limits<std::size_t>::max() / sizeof(float) / vocab) {
      throw std::invalid_argument("ngramspec: SamplingModel: a logits buffer of max_batch() = " +
                                  std::to_string(rows_) + " rows of " + std::to_string(vocab) + " floats is too large");
    }
    logits_.resize(rows_ * vocab);
    depths_.resize(rows_);
  }

  /// See the class comment. Throws std::invalid_argument if next.size() != tokens.size() or
  /// tokens.size() is 0 or exceeds max_batch().
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) {
    const std::size_t n = tokens.size();
    if (next.size() != n || n == 0 || n > rows_) {
      throw std::invalid_argument("ngramspec: SamplingModel::forward of " + std::to_string(n) + " tokens into " +
                                  std::to_string(next.size()) + "; needs 1 .. max_batch() = " + std::to_string(rows_) +
                                  " tokens and as many outputs");
    }
    const std::size_t vocab = sampler_.vocab_size();
    const std::span<float> rows = std::span<float>(logits_).first(n * vocab);
    model_->forward(pos, tokens, rows);
    for (std::size_t i = 0; i < n; ++i) {
      next[i] = sampler_.choose(rows.subspan(i * vocab, vocab), static_cast<std::uint64_t>(pos + i + 1));
    }
  }

  /// TreeTargetModel, for a LogitsTreeModel: the model's tree pass, then next[i] chosen from
  /// row i at position pos + depth(i) + 1, the absolute position of the token being chosen
  /// after node i's path: the draw a chain pass of that path would use, so a tree pass emits
  /// along its accepted path exactly the tokens plain decoding would (docs/SAMPLING.md).
  /// Throws std::invalid_argument as forward() does, and for parents that are not a tree.
  void forward_tree(std::size_t pos, std::span<const Token> tokens, std::span<const std::int32_t> parents,
                    std::span<Token> next)
    requires LogitsTreeModel<M>
  {
    tree_rows(pos, tokens, parents, next, {});
  }
  /// TopKTreeModel: as above, and the top.size() / tokens.size() highest logits of each row,
  /// best first, ties to the lower id (the model's ranking, whatever the sampling options).
  void forward_tree(std::size_t pos, std::span<const Token> tokens, std::span<const std::int32_t> parents,
                    std::span<Token> next, std::span<Token> top)
    requires LogitsTreeModel<M>
  {
    tree_rows(pos, tokens, parents, next, top);
  }
  /// TreeTargetModel: the model's keep.
  void keep(std::size_t pos, std::span<const std::size_t> kept)
    requires LogitsTreeModel<M>
  {
    model_->keep(pos, kept);
  }

  void rollback(std::size_t pos) { model_->rollback(pos); }
  /// The model's max_batch() as read at construction (the rows the logits buffer holds).
  [[nodiscard]] std::size_t max_batch() const noexcept { return rows_; }
  /// The model's vocab_size() as read at construction.
  [[nodiscard]] std::size_t vocab_size() const noexcept { return sampler_.vocab_size(); }

  [[nodiscard]] const SamplingOptions& options() const noexcept { return sampler_.options(); }
  /// Replaces the options between generations (a new seed for a new request, say) after
  /// validating them; no allocation.
  void set_options(const SamplingOptions& options) { sampler_.set_options(options); }

  /// The wrapped model.
  [[nodiscard]] M& model() noexcept { return *model_; }
  [[nodiscard]] const M& model() const noexcept { return *model_; }

 private:
  void tree_rows(std::size_t pos, std::span<const Token> tokens, std::span<const std::int32_t> parents,
                 std::span<Token> next, std::span<Token> top) {
    const std::size_t n = tokens.size();
    if (next.size() != n || parents.size() != n || n == 0 || n > rows_) {
      throw std::invalid_argument("ngramspec: SamplingModel::forward_tree of " + std::to_string(n) + " tokens, " +
                                  std::to_string(parents.size()) + " parents, into " + std::to_string(next.size()) +
                                  "; needs 1 .. max_batch() = " + std::to_string(rows_) +
                                  " tokens and as many parents and outputs");
    }
    if (top.size() % n != 0) {
      throw std::invalid_argument("ngramspec: SamplingModel::forward_tree: " + std::to_string(top.size()) +
                                  " top-k slots are not a multiple of the " + std::to_string(n) + " tokens");
    }
    validate_tree_parents(parents);
    const std::size_t vocab = sampler_.vocab_size();
    const std::size_t k = top.size() / n;
    if (k > vocab) {
      throw std::invalid_argument("ngramspec: SamplingModel::forward_tree: top-" + std::to_string(k) +
                                  " of a vocabulary of " + std::to_string(vocab));
    }
    const std::span<float> rows = std::span<float>(logits_).first(n * vocab);
    model_->forward_tree(pos, tokens, parents, rows);
    for (std::size_t i = 0; i < n; ++i) {
      depths_[i] = parents[i] == kTreeRoot ? 0 : depths_[static_cast<std::size_t>(parents[i])] + 1;
      const std::span<const float> row = rows.subspan(i * vocab, vocab);
      next[i] = sampler_.choose(row, static_cast<std::uint64_t>(pos + depths_[i] + 1));
      if (k != 0) detail::top_k_select(row, top.subspan(i * k, k));
    }
  }

  M* model_;
  std::size_t rows_;
  TokenSampler sampler_;
  std::vector<float> logits_;  // rows_ x vocab_size()
  std::vector<std::size_t> depths_;  // tree passes: each token's depth
};

static_assert(TargetModel<SamplingModel<AbstractLogitsModel>>);

}  // namespace ngramspec
