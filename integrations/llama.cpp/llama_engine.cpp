#include "llama_engine.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "llama.h"

namespace ngramspec::llama_cpp {
namespace {

// llama.cpp logs through one process-wide callback: errors always reach stderr, the rest only
// when some engine asked for it.
bool g_verbose = false;
ggml_log_level g_last_level = GGML_LOG_LEVEL_NONE;

void log_line(ggml_log_level level, const char* text, void*) {
  if (level != GGML_LOG_LEVEL_CONT) g_last_level = level;
  if (g_verbose || g_last_level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

void init_backend_once() {
  static const bool done = [] {
    llama_log_set(log_line, nullptr);
    llama_backend_init();
    return true;
  }();
  (void)done;
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

}  // namespace

struct Engine::Pass {
  explicit Pass(std::size_t capacity) : batch(llama_batch_init(static_cast<int32_t>(capacity), 0, 1)) {}
  ~Pass() { llama_batch_free(batch); }
  Pass(const Pass&) = delete;
  Pass& operator=(const Pass&) = delete;
  llama_batch batch;
};

Engine::Engine(const EngineConfig& config) {
  init_backend_once();
  g_verbose = config.verbose;
  if (config.sequences == 0 || config.sequences > EngineConfig::kMaxParallel) {
    throw std::runtime_error("--parallel " + std::to_string(config.sequences) + " is invalid: 1 to " +
                             std::to_string(EngineConfig::kMaxParallel) + " sequences");
  }
  std::error_code error;
  if (!std::filesystem::is_regular_file(config.model, error)) {
    throw std::runtime_error("model file " + quoted(config.model) + " does not exist or is not a file");
  }
  llama_model_params model_params = llama_model_default_params();
  model_params.n_gpu_layers = 999;  // every layer on a GPU when llama.cpp was built with one; none otherwise
  model_ = llama_model_load_from_file(config.model.c_str(), model_params);
  if (model_ == nullptr) {
    throw std::runtime_error("llama.cpp could not load " + quoted(config.model) +
                             " as a GGUF model (its message is above; --verbose shows llama.cpp's log)");
  }
  if (llama_model_is_recurrent(model_) || llama_model_is_hybrid(model_)) {
    llama_model_free(model_);
    throw std::runtime_error("the model in " + quoted(config.model) +
                             " is recurrent or hybrid: its memory cannot drop rejected drafts "
                             "(llama_memory_seq_rm of part of a sequence), which speculative decoding needs");
  }
  vocab_ = llama_model_get_vocab(model_);
  vocab_size_ = static_cast<std::size_t>(llama_vocab_n_tokens(vocab_));
  char desc[256] = {};
  llama_model_desc(model_, desc, sizeof desc);
  char size[64];
  std::snprintf(size, sizeof size, ", %.1f MiB", static_cast<double>(llama_model_size(model_)) / (1 << 20));
  description_ = std::string(desc) + size;
  path_ = config.model;
  layers_ = static_cast<std::size_t>(std::max(0, llama_model_n_layer(model_)));
  for (std::size_t t = 0; t < vocab_size_; ++t) {
    if (llama_vocab_is_eog(vocab_, static_cast<llama_token>(t))) stop_tokens_.push_back(static_cast<Token>(t));
  }

  const auto trained = static_cast<std::size_t>(std::max(1, llama_model_n_ctx_train(model_)));
  context_ = config.context != 0 ? config.context : trained;
  sequences_ = config.sequences;
  const std::size_t total = context_ * sequences_;
  if (context_ > (std::size_t{1} << 24) || total > std::numeric_limits<uint32_t>::max() / 2) {
    llama_model_free(model_);
    throw std::runtime_error("--ctx " + std::to_string(context_) + " x --parallel " + std::to_string(sequences_) +
                             " tokens is more context than llama.cpp can hold");
  }
  max_pass_tokens_ = config.max_pass_tokens != 0 ? std::min(config.max_pass_tokens, total) : total;
  llama_context_params params = llama_context_default_params();
  params.n_ctx = static_cast<uint32_t>(total);
  params.n_batch = static_cast<uint32_t>(max_pass_tokens_);
  params.n_ubatch = static_cast<uint32_t>(std::min<std::size_t>(max_pass_tokens_, 512));
  params.n_seq_max = static_cast<uint32_t>(sequences_);
  // A cache of its own per sequence: its tokens then sit in position order whatever the other
  // sequences do, so attention sums them in the same order in plain and speculative decoding.
  params.kv_unified = false;
  switch (config.flash_attention) {
    case EngineConfig::FlashAttention::on:
      params.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
      break;
    case EngineConfig::FlashAttention::off:
      params.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
      break;
    case EngineConfig::FlashAttention::by_backend:
      params.flash_attn_type = llama_supports_gpu_offload() ? LLAMA_FLASH_ATTN_TYPE_AUTO : LLAMA_FLASH_ATTN_TYPE_DISABLED;
      break;
  }
  const int threads = config.threads > 0 ? config.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  params.n_threads = threads;
  params.n_threads_batch = threads;
  params.no_perf = true;
  context_ptr_ = llama_init_from_model(model_, params);
  if (context_ptr_ == nullptr) {
    llama_model_free(model_);
    throw std::runtime_error("llama.cpp could not make a context of " + std::to_string(total) + " tokens (" +
                             std::to_string(sequences_) + " sequences of " + std::to_string(context_) + ")");
  }
  pass_ = std::make_unique<Pass>(max_pass_tokens_);
}

Engine::~Engine() {
  pass_.reset();
  if (context_ptr_ != nullptr) llama_free(context_ptr_);
  if (model_ != nullptr) llama_model_free(model_);
}

std::vector<Token> Engine::tokenize(std::string_view text, bool add_bos) const {
  if (text.size() > static_cast<std::size_t>(std::numeric_limits<int32_t>::max() / 2)) {
    throw std::runtime_error("a prompt of " + std::to_string(text.size()) + " bytes is too long to tokenize");
  }
  const auto length = static_cast<int32_t>(text.size());
  std::vector<llama_token> tokens(text.size() + 2);
  int32_t n = llama_tokenize(vocab_, text.data(), length, tokens.data(), static_cast<int32_t>(tokens.size()), add_bos,
                             false);
  if (n < 0) {
    tokens.resize(static_cast<std::size_t>(-n));
    n = llama_tokenize(vocab_, text.data(), length, tokens.data(), static_cast<int32_t>(tokens.size()), add_bos, false);
  }
  if (n < 0) throw std::runtime_error("llama.cpp could not tokenize a prompt of " + std::to_string(text.size()) + " bytes");
  return {tokens.begin(), tokens.begin() + n};
}

std::string Engine::detokenize(std::span<const Token> tokens) const {
  std::string text;
  std::vector<char> piece(256);
  for (const Token t : tokens) {
    int32_t n = llama_token_to_piece(vocab_, static_cast<llama_token>(t), piece.data(),
                                     static_cast<int32_t>(piece.size()), 0, false);
    if (n < 0) {  // a longer piece: -n bytes
      piece.resize(static_cast<std::size_t>(-n));
      n = llama_token_to_piece(vocab_, static_cast<llama_token>(t), piece.data(), static_cast<int32_t>(piece.size()), 0,
                               false);
    }
    if (n > 0) text.append(piece.data(), static_cast<std::size_t>(n));
  }
  return text;
}

void Engine::clear_pass() noexcept { pass_->batch.n_tokens = 0; }

std::size_t Engine::pass_size() const noexcept { return static_cast<std::size_t>(pass_->batch.n_tokens); }

std::size_t Engine::add(std::size_t sequence, std::size_t pos, std::span<const Token> tokens, bool all_logits) {
  llama_batch& b = pass_->batch;
  const auto first = static_cast<std::size_t>(b.n_tokens);
  if (sequence >= sequences_) {
    throw std::runtime_error("sequence " + std::to_string(sequence) + " is beyond the context's " +
                             std::to_string(sequences_) + " sequences");
  }
  if (tokens.size() > max_pass_tokens_ - first) {
    throw std::runtime_error("a pass of " + std::to_string(first + tokens.size()) + " tokens exceeds the most one pass " +
                             "carries (" + std::to_string(max_pass_tokens_) + ")");
  }
  if (pos + tokens.size() > context_) {
    throw std::runtime_error("sequence " + std::to_string(sequence) + " would reach position " +
                             std::to_string(pos + tokens.size()) + ", beyond its context of " + std::to_string(context_) +
                             " tokens (--ctx)");
  }
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::size_t j = first + i;
    b.token[j] = static_cast<llama_token>(tokens[i]);
    b.pos[j] = static_cast<llama_pos>(pos + i);
    b.n_seq_id[j] = 1;
    b.seq_id[j][0] = static_cast<llama_seq_id>(sequence);
    b.logits[j] = static_cast<int8_t>(all_logits || i + 1 == tokens.size());
  }
  b.n_tokens = static_cast<int32_t>(first + tokens.size());
  return first;
}

void Engine::decode() {
  if (pass_->batch.n_tokens == 0) return;
  const int32_t status = llama_decode(context_ptr_, pass_->batch);
  if (status != 0) {
    const char* what = status == 1   ? "no room in the KV cache for the pass"
                       : status == 2 ? "aborted"
                       : status == -1 ? "invalid batch"
                                      : "fatal error";
    throw std::runtime_error("llama_decode of a pass of " + std::to_string(pass_->batch.n_tokens) + " tokens failed with " +
                             std::to_string(status) + " (" + what + ")");
  }
  // On a GPU llama_decode only queues the pass; the first read of its logits would wait for it.
  // Waiting here puts the pass's whole time inside decode(): the pass costs that the planner is
  // given and the time reported outside llama_decode (the program's own work) are then what
  // they say, on any backend (a CPU pass is complete on return, so this costs nothing there).
  llama_synchronize(context_ptr_);
}

std::span<const float> Engine::logits(std::size_t index) const {
  const float* row = llama_get_logits_ith(context_ptr_, static_cast<int32_t>(index));
  if (row == nullptr) throw std::runtime_error("llama.cpp has no logits for pass token " + std::to_string(index));
  return {row, vocab_size_};
}

void Engine::truncate(std::size_t sequence, std::size_t length) {
  if (!llama_memory_seq_rm(llama_get_memory(context_ptr_), static_cast<llama_seq_id>(sequence),
                           static_cast<llama_pos>(length), -1)) {
    throw std::runtime_error("the model's memory cannot drop sequence " + std::to_string(sequence) +
                             "'s tokens from position " + std::to_string(length) +
                             " (llama_memory_seq_rm refused): rejected drafts cannot be rolled back");
  }
}

void Engine::require_vocabulary_of(const Engine& target) const {
  const auto refuse = [&](const std::string& what) {
    throw std::runtime_error("the draft model " + quoted(path_) + " does not share the vocabulary of " +
                             quoted(target.path_) + ": " + what + " (a draft model must have the model's tokens)");
  };
  if (vocab_size_ != target.vocab_size_) {
    refuse("it has " + std::to_string(vocab_size_) + " tokens, the model " + std::to_string(target.vocab_size_));
  }
  if (llama_vocab_type(vocab_) != llama_vocab_type(target.vocab_)) {
    refuse("its tokenizer type is " + std::to_string(llama_vocab_type(vocab_)) + ", the model's " +
           std::to_string(llama_vocab_type(target.vocab_)));
  }
  if (llama_vocab_bos(vocab_) != llama_vocab_bos(target.vocab_) || llama_vocab_eos(vocab_) != llama_vocab_eos(target.vocab_)) {
    refuse("its BOS/EOS are " + std::to_string(llama_vocab_bos(vocab_)) + "/" + std::to_string(llama_vocab_eos(vocab_)) +
           ", the model's " + std::to_string(llama_vocab_bos(target.vocab_)) + "/" +
           std::to_string(llama_vocab_eos(target.vocab_)));
  }
  for (std::size_t t = 0; t < vocab_size_; ++t) {
    const char* mine = llama_vocab_get_text(vocab_, static_cast<llama_token>(t));
    const char* theirs = llama_vocab_get_text(target.vocab_, static_cast<llama_token>(t));
    if (std::string_view(mine != nullptr ? mine : "") != std::string_view(theirs != nullptr ? theirs : "")) {
      refuse("token " + std::to_string(t) + " is " + quoted(mine != nullptr ? mine : "") + " there, " +
             quoted(theirs != nullptr ? theirs : "") + " in the model");
    }
  }
}

void Engine::clear_sequence(std::size_t sequence) {
  llama_memory_seq_rm(llama_get_memory(context_ptr_), static_cast<llama_seq_id>(sequence), -1, -1);
}

}  // namespace ngramspec::llama_cpp
