#pragma once

// A llama.cpp model and context behind the few calls a drafting loop makes: tokenize, build a
// pass of several sequences, decode it, read a row of logits, and cut a sequence's KV cache
// back. Only llama.cpp's public C API (llama.h) is used.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <ngramspec/token.hpp>

struct llama_model;
struct llama_context;
struct llama_vocab;

namespace ngramspec::llama_cpp {

/// How to load the model and size its context.
struct EngineConfig {
  std::string model;              ///< GGUF file
  int threads = 0;                ///< CPU threads; 0: every core
  /// Most sequences one engine decodes together.
  static constexpr std::size_t kMaxParallel = 256;
  std::size_t sequences = 1;      ///< sequences decoded together (their KV cache is held at once): 1 .. kMaxParallel
  std::size_t context = 0;        ///< tokens each sequence may hold; 0: the model's training context
  std::size_t max_pass_tokens = 0;  ///< most tokens one pass carries; 0: sequences x context
  bool verbose = false;           ///< llama.cpp's own log lines (errors are always shown)
  /// Flash attention. Off by default where llama.cpp has no GPU backend: its CPU kernel splits
  /// the keys among the threads for a one-token pass past position 256 but not for a pass of
  /// several tokens, or tiles passes of 64 tokens and more, so verify passes sum in another
  /// order than plain decoding and a near tie can flip a greedy token (integrations/llama.cpp/
  /// README.md, "Identity"); without it every pass computes each row as a one-token pass does.
  /// With a GPU backend llama.cpp's own choice (auto).
  enum class FlashAttention { by_backend, on, off };
  FlashAttention flash_attention = FlashAttention::by_backend;
};

/// One loaded model and its context. Every failure throws std::runtime_error naming what and
/// the value (the file, the position, llama_decode's status); nothing aborts.
class Engine {
 public:
  explicit Engine(const EngineConfig& config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// `text` as tokens, with the model's BOS first when `add_bos` and the model wants one.
  [[nodiscard]] std::vector<Token> tokenize(std::string_view text, bool add_bos) const;
  /// The text of `tokens` (special tokens left out).
  [[nodiscard]] std::string detokenize(std::span<const Token> tokens) const;
  /// Every end-of-generation token of the vocabulary (EOS, EOT, ...).
  [[nodiscard]] const std::vector<Token>& stop_tokens() const noexcept { return stop_tokens_; }

  [[nodiscard]] std::size_t vocab_size() const noexcept { return vocab_size_; }
  /// Tokens each sequence may hold.
  [[nodiscard]] std::size_t context() const noexcept { return context_; }
  [[nodiscard]] std::size_t sequences() const noexcept { return sequences_; }
  /// Most tokens one pass may carry.
  [[nodiscard]] std::size_t max_pass_tokens() const noexcept { return max_pass_tokens_; }
  /// "llama 260K all F32, 0.00 B params, 1.1 MiB" and the like.
  [[nodiscard]] const std::string& description() const noexcept { return description_; }
  /// The GGUF file it loaded.
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  /// The block count of the model (llama_model_n_layer).
  [[nodiscard]] std::size_t layers() const noexcept { return layers_; }

  /// Throws std::runtime_error naming both files and the first difference unless this model's
  /// vocabulary is `target`'s token for token (the same size, type, text of every token and
  /// BOS/EOS), as a draft model's must be: a draft is the target's token ids.
  void require_vocabulary_of(const Engine& target) const;

  /// llama.cpp's context, for llama.cpp's own code that drives one (common_speculative's
  /// draft-model types). Owned by this Engine.
  [[nodiscard]] llama_context* handle() const noexcept { return context_ptr_; }

  /// Starts an empty pass.
  void clear_pass() noexcept;
  /// Adds `tokens` of sequence `sequence` at positions pos, pos + 1, ... to the pass, with
  /// logits for every one of them (`all_logits`) or for the last only; returns the pass index
  /// of the first token (the row to read with logits()). Throws when the pass would exceed
  /// max_pass_tokens() or the sequence's context.
  std::size_t add(std::size_t sequence, std::size_t pos, std::span<const Token> tokens, bool all_logits);
  /// Tokens in the pass.
  [[nodiscard]] std::size_t pass_size() const noexcept;
  /// Runs the pass (llama_decode) and waits for it to finish (on a GPU llama_decode only queues it).
  void decode();
  /// The logits of the pass's token `index` (one that asked for them): vocab_size() floats.
  [[nodiscard]] std::span<const float> logits(std::size_t index) const;

  /// Cuts sequence `sequence` back to its first `length` tokens. Throws when the model's memory
  /// cannot drop part of a sequence (recurrent and hybrid models).
  void truncate(std::size_t sequence, std::size_t length);
  /// Drops every token of sequence `sequence`.
  void clear_sequence(std::size_t sequence);

 private:
  llama_model* model_ = nullptr;
  llama_context* context_ptr_ = nullptr;
  const llama_vocab* vocab_ = nullptr;
  std::size_t vocab_size_ = 0;
  std::size_t context_ = 0;
  std::size_t sequences_ = 0;
  std::size_t max_pass_tokens_ = 0;
  std::string description_;
  std::string path_;
  std::size_t layers_ = 0;
  std::vector<Token> stop_tokens_;
  struct Pass;
  std::unique_ptr<Pass> pass_;
};

}  // namespace ngramspec::llama_cpp
