#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include <ngramspec/target_model.hpp>
#include <ngramspec/token.hpp>

namespace ngramspec::llama2 {

/// Shape of a Llama-2-architecture model, as the llama2.c checkpoint header states it.
struct Config {
  std::size_t dim = 0;         ///< width of the residual stream
  std::size_t hidden_dim = 0;  ///< width of the SwiGLU feed-forward layer
  std::size_t n_layers = 0;    ///< transformer blocks
  std::size_t n_heads = 0;     ///< query heads; head_size = dim / n_heads
  std::size_t n_kv_heads = 0;  ///< key/value heads (grouped-query attention when fewer than n_heads)
  std::size_t vocab_size = 0;  ///< tokens in the vocabulary
  std::size_t seq_len = 0;     ///< most positions the KV cache holds
  bool shared_classifier = true;  ///< logits use the token embedding (else a separate wcls)

  [[nodiscard]] std::size_t head_size() const noexcept { return dim / n_heads; }
  [[nodiscard]] std::size_t kv_dim() const noexcept { return n_kv_heads * head_size(); }
  /// Floats the checkpoint holds after its header, the two unused legacy RoPE tables included.
  [[nodiscard]] std::uint64_t file_floats() const noexcept;
};

/// Throws std::invalid_argument saying which field is wrong when `config` cannot describe a model.
void validate(const Config& config);

/// Float32 Llama-2 transformer over one sequence, with its KV cache sized to seq_len.
///
/// forward_logits() takes several tokens at once and streams every weight matrix once for all of
/// them, so a verify pass of k+1 tokens is matrix-matrix work, not k+1 one-token passes. The
/// kernels are batch-invariant: each output element is reduced in an order fixed by the matrix
/// shape alone, so the logits at a position are bitwise the same whether the position is fed alone
/// or inside a longer pass, and after a rollback. Greedy speculative decoding over this model thus
/// reproduces plain decoding exactly, near-ties included.
///
/// Tree passes (forward_tree_logits, then keep) verify several candidate continuations in one pass,
/// so the weights are streamed once for all of them. A token's key and value go to the cache slot of
/// its index in the pass, not of its position, so siblings do not overwrite each other; attention reads
/// its ancestors' slots in depth order and reduces over logical positions 0..p in exactly the chain's
/// order, so every row is bitwise the row the same path gives fed as a chain. keep() then moves the
/// accepted path's slots down to their positions, after which the cache is what the chain would have
/// left.
///
/// Satisfies ngramspec::TargetModel (greedy: the argmax of the logits, ties to the lowest id),
/// ngramspec::LogitsModel (wrap it in a SamplingModel to sample), and their tree forms
/// ngramspec::TreeTargetModel, ngramspec::TopKTreeModel and ngramspec::LogitsTreeModel.
/// Not thread-safe; one sequence per instance.
class Transformer {
 public:
  /// Most tokens one forward takes unless the constructor is told otherwise.
  static constexpr std::size_t kDefaultMaxBatch = 64;
  /// Largest KV cache load() accepts, in floats (64 GiB): above it a header is taken as corrupt.
  static constexpr std::uint64_t kMaxKvCacheFloats = std::uint64_t{1} << 34;

  /// Loads a llama2.c checkpoint (legacy format, version 0). Throws std::runtime_error when the
  /// file cannot be read, and std::invalid_argument when its header is inconsistent or its size
  /// is not what the header implies.
  static Transformer load(const std::filesystem::path& path, std::size_t max_batch = kDefaultMaxBatch);
  /// The shape a checkpoint's header states, checked as load() checks it, without reading the weights:
  /// what a program needs to judge its options against the model before the (much longer) load.
  /// Throws as load() does for a file that cannot be opened or a header that is invalid.
  static Config read_config(const std::filesystem::path& path);
  /// A model of shape `config` with deterministic pseudo-random weights drawn from `seed`.
  static Transformer random(const Config& config, std::uint64_t seed, std::size_t max_batch = kDefaultMaxBatch);
  /// The early exit of `base` after its first `layers` blocks: those blocks, then the final norm and the classifier
  /// (self-speculation's draft, as LayerSkip drafts; Elhoushi et al. 2024). It shares base's weights (no copy; they
  /// live while either model does) and has a KV cache of its own, for `layers` blocks; its config() says
  /// n_layers = layers. With layers = base's n_layers its logits are bitwise base's. Throws
  /// std::invalid_argument naming the value when layers is 0 or more than base's n_layers, or max_batch is 0.
  static Transformer early_exit(const Transformer& base, std::size_t layers, std::size_t max_batch = kDefaultMaxBatch);

  // Movable, not copyable: the layer pointers point into *weights_, which a move keeps.
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;
  Transformer(Transformer&&) noexcept = default;
  Transformer& operator=(Transformer&&) noexcept = default;
  ~Transformer() = default;

  /// Feeds `tokens` at positions pos .. pos+n-1 and writes n rows of vocab_size() logits, row i
  /// for the sequence up to tokens[i]. Requires pos == length(), 1 <= n <= max_batch(),
  /// pos + n <= seq_len and logits.size() == n * vocab_size(); throws std::invalid_argument otherwise.
  void forward_logits(std::size_t pos, std::span<const Token> tokens, std::span<float> logits);
  /// TargetModel: as forward_logits, and next[i] = the argmax of row i (ties to the lowest id).
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next);
  /// LogitsModel: forward_logits under the name SamplingModel calls.
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<float> logits) {
    forward_logits(pos, tokens, logits);
  }
  /// Discards positions >= pos (pos <= length()).
  void rollback(std::size_t pos);

  /// Feeds a tree of n tokens after the cached pos: token i follows parents[i] (kTreeRoot = -1: the
  /// cached sequence; else an index below i), sits at position pos + its depth and attends to the cache
  /// and its ancestors only. Row i of `logits` is bitwise the last row forward_logits gives for the path
  /// root..i fed as a chain. Token i's key and value occupy cache slot pos + i; length() becomes pos + n
  /// until keep() or rollback(). Requires what forward_logits does, plus parents.size() == n; throws
  /// std::invalid_argument, changing nothing, otherwise.
  void forward_tree_logits(std::size_t pos, std::span<const Token> tokens, std::span<const std::int32_t> parents,
                           std::span<float> logits);
  /// LogitsTreeModel: forward_tree_logits under the name SamplingModel calls.
  void forward_tree(std::size_t pos, std::span<const Token> tokens, std::span<const std::int32_t> parents,
                    std::span<float> logits) {
    forward_tree_logits(pos, tokens, parents, logits);
  }
  /// TreeTargetModel: as forward_tree_logits, and next[i] = the argmax of row i (ties to the lowest id).
  void forward_tree(std::size_t pos, std::span<const Token> tokens, std::span<const std::int32_t> parents,
                    std::span<Token> next);
  /// TopKTreeModel: as above, and with K = top.size() / n (a positive multiple of n, K <= vocab_size()),
  /// top[i*K .. i*K+K) = the K highest-scoring ids of row i, best first, ties to the lower id.
  void forward_tree(std::size_t pos, std::span<const Token> tokens, std::span<const std::int32_t> parents,
                    std::span<Token> next, std::span<Token> top);
  /// Right after a tree pass at pos, keeps its entries `kept` (a root path: kept[0]'s parent is kTreeRoot,
  /// kept[j]'s is kept[j-1]) at positions pos .. pos + kept.size() - 1 and discards the rest, as if the path
  /// had been fed as a chain; an empty `kept` is rollback(pos). Throws std::invalid_argument, changing
  /// nothing, when the last call was not a tree pass at pos or `kept` is not a root path of it.
  void keep(std::size_t pos, std::span<const std::size_t> kept);

  [[nodiscard]] std::size_t max_batch() const noexcept { return max_batch_; }
  [[nodiscard]] std::size_t vocab_size() const noexcept { return config_.vocab_size; }
  [[nodiscard]] const Config& config() const noexcept { return config_; }
  /// Positions the KV cache holds.
  [[nodiscard]] std::size_t length() const noexcept { return length_; }

 private:
  struct Layer {
    const float* rms_att;
    const float* wq;
    const float* wk;
    const float* wv;
    const float* wo;
    const float* rms_ffn;
    const float* w1;
    const float* w2;
    const float* w3;
  };

  Transformer(const Config& config, std::vector<float> weights, std::size_t max_batch);
  // early_exit(): base's first `layers` blocks over its weights.
  Transformer(const Transformer& base, std::size_t layers, std::size_t max_batch);
  // Sizes the KV cache and the activations for config_ and max_batch_, and computes the RoPE table.
  void allocate();
  void check_pass(std::size_t pos, std::span<const Token> tokens, std::size_t logits_size) const;
  // The pass proper, once its input is checked: a chain, or the tree whose depths are in depth_.
  void run(std::size_t pos, std::span<const Token> tokens, bool tree, std::span<float> logits);
  void attend(std::size_t layer, std::size_t t, std::size_t contiguous, std::span<const std::size_t> tail);

  Config config_;
  std::size_t max_batch_;
  std::size_t length_ = 0;
  // The checkpoint's floats, in file order; shared with the early exits made from this model.
  std::shared_ptr<std::vector<float>> weights_;
  const float* token_embedding_ = nullptr;
  std::vector<Layer> layers_;
  const float* rms_final_ = nullptr;
  const float* classifier_ = nullptr;
  std::vector<float> key_cache_;    // [layer][position][kv_dim]
  std::vector<float> value_cache_;  // [layer][position][kv_dim]
  std::vector<float> rotation_;     // RoPE [position][head_size]: cos, sin of each pair's angle
  // Activations for max_batch tokens, row-major [token][width].
  std::vector<float> x_, xb_, xb2_, q_, hb_, hb2_, scores_, logits_;
  // The last tree pass, for keep(): valid while tree_size_ > 0, until anything else changes the cache.
  std::size_t tree_pos_ = 0;
  std::size_t tree_size_ = 0;
  std::vector<std::int32_t> tree_parents_;  // [max_batch]
  std::vector<std::size_t> depth_;          // [max_batch]: depth of each token of the tree pass
  std::vector<std::size_t> path_;           // [max_batch]: cache slots of one token's ancestors and itself
};

/// Index of the largest value; the lowest index wins ties.
[[nodiscard]] Token argmax(std::span<const float> values) noexcept;

/// Writes the indices of the out.size() largest values, largest first, the lower index first among equals;
/// out.size() <= values.size(). O(values.size() * log(out.size())), no allocation.
void top_k(std::span<const float> values, std::span<Token> out) noexcept;

}  // namespace ngramspec::llama2
