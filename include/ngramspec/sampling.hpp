#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ngramspec/argument_error.hpp"
#include "ngramspec/detail/top_k_select.hpp"
#include "ngramspec/draft_distribution.hpp"
#include "ngramspec/draft_tree.hpp"
#include "ngramspec/logits_model.hpp"
#include "ngramspec/position_random.hpp"
#include "ngramspec/sampling_options.hpp"
#include "ngramspec/target_model.hpp"
#include "ngramspec/token.hpp"
#include "ngramspec/token_sampler.hpp"
#include "ngramspec/top_k_table.hpp"

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
/// With SamplingOptions::mode = SamplingMode::rejection the rows that have drafts after them
/// verify those drafts by rejection sampling (TokenSampler::verify) instead: draft x, drawn from
/// q, is next[i] with probability min(1, p(x) / q(x)), else next[i] is drawn from the residual.
/// The overloads that take a DraftDistributions read each draft's q from it; the others read
/// every draft as chosen (q one-hot). In a chain pass row i's draft is tokens[i + 1] (q's entry
/// i); in a tree pass row i's drafts are its children, by index (node c, the pass's token c + 1,
/// is q's entry c). The output keeps the model's distribution; it is no longer the text plain
/// decoding gives for the seed (docs/SAMPLING.md).
///
/// With a distribution table (set_distribution_table()), every row also records, for the token
/// it follows, the k most likely tokens of its distribution and their probabilities: what
/// drafters that draw from the model's recent distributions read (TreeDrafter with
/// TreeConfig::draw_recycled). That costs a partial sort of the kept tokens per row, from the
/// same pass over the row as the sampling.
///
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
    if (rows_ == 0) throw ArgumentError("ngramspec", "SamplingModel: the model's max_batch() is 0");
    const std::size_t vocab = sampler_.vocab_size();
    if (rows_ > std::numeric_limits<std::size_t>::max() / sizeof(float) / vocab) {
      throw ArgumentError("ngramspec", "SamplingModel: a logits buffer of max_batch() = " + std::to_string(rows_) +
                                           " rows of " + std::to_string(vocab) + " floats is too large");
    }
    logits_.resize(rows_ * vocab);
    depths_.resize(rows_);
    first_child_.resize(rows_);
    next_sibling_.resize(rows_);
    drafts_.resize(rows_);
  }

  /// See the class comment. Throws std::invalid_argument if next.size() != tokens.size() or
  /// tokens.size() is 0 or exceeds max_batch().
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) {
    chain_rows(pos, tokens, next, nullptr);
  }
  /// DistributionTargetModel: as above, tokens[i + 1] drawn from q's entry i (read as chosen past
  /// q's end). q matters in rejection mode only.
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next, const DraftDistributions& q) {
    chain_rows(pos, tokens, next, &q);
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
    tree_rows(pos, tokens, parents, next, {}, nullptr);
  }
  /// DistributionTreeModel: as above, node c (the pass's token c + 1) drawn from q's entry c.
  void forward_tree(std::size_t pos, std::span<const Token> tokens, std::span<const std::int32_t> parents,
                    std::span<Token> next, const DraftDistributions& q)
    requires LogitsTreeModel<M>
  {
    tree_rows(pos, tokens, parents, next, {}, &q);
  }
  /// TopKTreeModel: as above, and the top.size() / tokens.size() highest logits of each row,
  /// best first, ties to the lower id (the model's ranking, whatever the sampling options).
  void forward_tree(std::size_t pos, std::span<const Token> tokens, std::span<const std::int32_t> parents,
                    std::span<Token> next, std::span<Token> top)
    requires LogitsTreeModel<M>
  {
    tree_rows(pos, tokens, parents, next, top, nullptr);
  }
  /// Both: the top-k and the drafts' distributions.
  void forward_tree(std::size_t pos, std::span<const Token> tokens, std::span<const std::int32_t> parents,
                    std::span<Token> next, std::span<Token> top, const DraftDistributions& q)
    requires LogitsTreeModel<M>
  {
    tree_rows(pos, tokens, parents, next, top, &q);
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

  /// Records every row's most likely tokens and their probabilities into `table` (nullptr:
  /// none, the default), which must have been made with probabilities
  /// (TopKTable(vocab, k, true)) over this model's vocabulary and must outlive its use here.
  /// Throws std::invalid_argument naming the value otherwise.
  void set_distribution_table(TopKTable* table) {
    if (table != nullptr && (!table->has_probabilities() || table->vocab_size() != vocab_size())) {
      throw ArgumentError("ngramspec",
                          "SamplingModel::set_distribution_table: a table of vocab_size " +
                              std::to_string(table->vocab_size()) +
                              (table->has_probabilities() ? std::string() : std::string(" without probabilities")) +
                              " for a model of vocab_size " + std::to_string(vocab_size()) +
                              "; it needs probabilities and the model's vocabulary");
    }
    table_ = table;
    table_tokens_.resize(table != nullptr ? table->k() : 0);
    table_probabilities_.resize(table_tokens_.size());
  }
  [[nodiscard]] TopKTable* distribution_table() const noexcept { return table_; }

  /// The wrapped model.
  [[nodiscard]] M& model() noexcept { return *model_; }
  [[nodiscard]] const M& model() const noexcept { return *model_; }

 private:
  void chain_rows(std::size_t pos, std::span<const Token> tokens, std::span<Token> next, const DraftDistributions* q) {
    const std::size_t n = tokens.size();
    if (next.size() != n || n == 0 || n > rows_) {
      throw ArgumentError("ngramspec", "SamplingModel::forward of " + std::to_string(n) + " tokens into " +
                                           std::to_string(next.size()) + "; needs 1 .. max_batch() = " +
                                           std::to_string(rows_) + " tokens and as many outputs");
    }
    const std::size_t vocab = sampler_.vocab_size();
    const std::span<float> rows = std::span<float>(logits_).first(n * vocab);
    model_->forward(pos, tokens, rows);
    const bool rejection = sampler_.options().mode == SamplingMode::rejection;
    for (std::size_t i = 0; i < n; ++i) {
      const std::span<const float> row = rows.subspan(i * vocab, vocab);
      const auto position = static_cast<std::uint64_t>(pos + i + 1);
      std::size_t m = 0;
      if (rejection && i + 1 < n) {
        drafts_[m++] = {tokens[i + 1], q != nullptr && i < q->size() ? static_cast<std::uint32_t>(i)
                                                                      : TokenSampler::Draft::kChosen};
      }
      next[i] = row_token(tokens[i], row, position, std::span<const TokenSampler::Draft>(drafts_).first(m), q,
                          rejection);
    }
  }

  // One row's token: sampled, or the drafts after it verified (rejection mode), and with a
  // distribution table its top tokens recorded for the token the row follows, from one pass
  // over the row.
  Token row_token(Token fed, std::span<const float> row, std::uint64_t position,
                  std::span<const TokenSampler::Draft> drafts, const DraftDistributions* q, bool rejection) {
    const DraftDistributions& distributions = q != nullptr ? *q : no_distributions_;
    if (table_ == nullptr) {
      return rejection ? sampler_.verify(row, position, drafts, distributions) : sampler_.choose(row, position);
    }
    TokenSampler::TopDistribution top{table_tokens_, table_probabilities_};
    const Token token = rejection ? sampler_.verify(row, position, drafts, distributions, top)
                                  : sampler_.choose(row, position, top);
    if (top.size != 0) {
      table_->record_distribution(fed, std::span<const Token>(table_tokens_).first(top.size),
                                  std::span<const float>(table_probabilities_).first(top.size));
    }
    return token;
  }

  void tree_rows(std::size_t pos, std::span<const Token> tokens, std::span<const std::int32_t> parents,
                 std::span<Token> next, std::span<Token> top, const DraftDistributions* q) {
    const std::size_t n = tokens.size();
    if (next.size() != n || parents.size() != n || n == 0 || n > rows_) {
      throw ArgumentError("ngramspec", "SamplingModel::forward_tree of " + std::to_string(n) + " tokens, " +
                                           std::to_string(parents.size()) + " parents, into " +
                                           std::to_string(next.size()) + "; needs 1 .. max_batch() = " +
                                           std::to_string(rows_) + " tokens and as many parents and outputs");
    }
    if (top.size() % n != 0) {
      throw ArgumentError("ngramspec", "SamplingModel::forward_tree: " + std::to_string(top.size()) +
                                           " top-k slots are not a multiple of the " + std::to_string(n) + " tokens");
    }
    validate_tree_parents(parents);
    const std::size_t vocab = sampler_.vocab_size();
    const std::size_t k = top.size() / n;
    if (k > vocab) {
      throw ArgumentError("ngramspec", "SamplingModel::forward_tree: top-" + std::to_string(k) +
                                           " of a vocabulary of " + std::to_string(vocab));
    }
    const std::span<float> rows = std::span<float>(logits_).first(n * vocab);
    model_->forward_tree(pos, tokens, parents, rows);
    const bool rejection = sampler_.options().mode == SamplingMode::rejection;
    if (rejection) {
      // Each row's children in index order: a list threaded backwards so that it comes out forwards.
      std::fill_n(first_child_.begin(), n, kNoChild);
      for (std::size_t c = n; c-- > 1;) {
        if (parents[c] == kTreeRoot) continue;
        const auto parent = static_cast<std::size_t>(parents[c]);
        next_sibling_[c] = first_child_[parent];
        first_child_[parent] = c;
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      depths_[i] = parents[i] == kTreeRoot ? 0 : depths_[static_cast<std::size_t>(parents[i])] + 1;
      const std::span<const float> row = rows.subspan(i * vocab, vocab);
      const auto position = static_cast<std::uint64_t>(pos + depths_[i] + 1);
      std::size_t m = 0;
      if (rejection) {
        for (std::size_t c = first_child_[i]; c != kNoChild; c = next_sibling_[c]) {
          const std::size_t entry = c - 1;  // node c - 1 of the tree
          drafts_[m++] = {tokens[c], q != nullptr && entry < q->size() ? static_cast<std::uint32_t>(entry)
                                                                        : TokenSampler::Draft::kChosen};
        }
      }
      next[i] = row_token(tokens[i], row, position, std::span<const TokenSampler::Draft>(drafts_).first(m), q,
                          rejection);
      if (k != 0) detail::top_k_select(row, top.subspan(i * k, k));
    }
  }

  M* model_;
  std::size_t rows_;
  TokenSampler sampler_;
  std::vector<float> logits_;  // rows_ x vocab_size()
  std::vector<std::size_t> depths_;  // tree passes: each token's depth
  // Rejection mode: each row's drafts (a tree row's children, threaded through first_child_ and
  // next_sibling_).
  static constexpr std::size_t kNoChild = static_cast<std::size_t>(-1);
  std::vector<std::size_t> first_child_;
  std::vector<std::size_t> next_sibling_;
  std::vector<TokenSampler::Draft> drafts_;
  DraftDistributions no_distributions_;  // every draft chosen
  TopKTable* table_ = nullptr;           // where rows' distributions go, or none
  std::vector<Token> table_tokens_;
  std::vector<float> table_probabilities_;
};

static_assert(TargetModel<SamplingModel<AbstractLogitsModel>>);

}  // namespace ngramspec
