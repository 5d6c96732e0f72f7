// Fuzz target: the llama2 example's file loaders on arbitrary bytes.
//
// The first byte picks the loader. Low bit clear: the rest is a checkpoint for Transformer::load, which
// must return a model or throw std::runtime_error / std::invalid_argument with a message. A model it
// returns has the header's shape, came from a file of exactly the size that shape implies, and runs a
// forward of one or two tokens, a rollback and the same tokens again one at a time with the same logits.
// Low bit set: two bytes give a vocabulary size, one byte a text length, then the text; the rest is a
// tokenizer file. Tokenizer's constructor must return or throw likewise, and a tokenizer it returns
// encodes the text to BOS and in-range ids, which decode.
//
// The loaders take a path, so each input is written to a temporary file: the public entry points are
// what is fuzzed, not a byte-buffer variant of them.

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz_input.hpp"
#include "llama2_model.hpp"
#include "llama2_tokenizer.hpp"

namespace ngramspec::test {
namespace {

/// A file in /tmp holding `bytes`, removed when this goes out of scope.
class TempFile {
 public:
  explicit TempFile(std::span<const std::uint8_t> bytes) {
    char name[] = "/tmp/llama2_loader_fuzz.XXXXXX";
    const int fd = mkstemp(name);
    if (fd < 0) fuzz_fail("mkstemp failed");
    path_ = name;
    std::size_t written = 0;
    while (written < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
      if (n <= 0) {
        ::close(fd);
        std::remove(path_.c_str());
        fuzz_fail("cannot write the temporary file");
      }
      written += static_cast<std::size_t>(n);
    }
    if (::close(fd) != 0) fuzz_fail("cannot close the temporary file");
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() { std::remove(path_.c_str()); }

  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

void require_message(const std::exception& e) {
  if (e.what() == nullptr || e.what()[0] == '\0') fuzz_fail("a loader threw an exception without a message");
}

// Runs `load` on a temporary file of `bytes`: true when it loaded, false when it rejected the
// file the way a loader may (std::invalid_argument or std::runtime_error, with a message).
template <class Load>
bool loads(std::span<const std::uint8_t> bytes, const Load& load) {
  const TempFile file(bytes);
  try {
    load(file.path());
  } catch (const std::invalid_argument& e) {
    require_message(e);
    return false;
  } catch (const std::runtime_error& e) {
    require_message(e);
    return false;
  }
  return true;
}

// Bitwise equal, or both NaN: corrupt weights may well make NaNs, whose payloads are not the point.
bool same_float(float a, float b) noexcept {
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b) || (std::isnan(a) && std::isnan(b));
}

void check_checkpoint(std::uint8_t mode, std::span<const std::uint8_t> bytes) {
  const std::size_t max_batch = 1 + (mode >> 1) % 3;
  std::optional<llama2::Transformer> model;
  if (!loads(bytes, [&](const std::string& path) { model.emplace(llama2::Transformer::load(path, max_batch)); })) {
    return;
  }

  // It loaded, so the header is all there and the model must have its shape.
  std::int32_t header[7];
  std::memcpy(header, bytes.data(), sizeof header);
  const llama2::Config& c = model->config();
  const std::int64_t vocab_field = header[5];
  if (c.dim != static_cast<std::size_t>(header[0]) || c.hidden_dim != static_cast<std::size_t>(header[1]) ||
      c.n_layers != static_cast<std::size_t>(header[2]) || c.n_heads != static_cast<std::size_t>(header[3]) ||
      c.n_kv_heads != static_cast<std::size_t>(header[4]) || c.seq_len != static_cast<std::size_t>(header[6]) ||
      c.vocab_size != static_cast<std::size_t>(vocab_field < 0 ? -vocab_field : vocab_field) ||
      c.shared_classifier != (vocab_field > 0)) {
    fuzz_fail("the loaded model's shape is not the header's");
  }
  if (bytes.size() != sizeof header + 4 * c.file_floats()) {
    fuzz_fail("a checkpoint loaded whose size is not what its header implies");
  }
  if (model->length() != 0 || model->max_batch() != max_batch || model->vocab_size() != c.vocab_size) {
    fuzz_fail("a fresh model is not empty or has the wrong max_batch / vocab_size");
  }

  const std::size_t vocab = c.vocab_size;
  const std::size_t n = std::min({std::size_t{1} + ((mode >> 3) & 1), max_batch, c.seq_len});
  const Token tokens[2] = {static_cast<Token>((mode >> 4) % vocab), static_cast<Token>((mode >> 2) % vocab)};
  const std::span<const Token> fed(tokens, n);

  std::vector<float> together(n * vocab);
  model->forward_logits(0, fed, together);
  if (model->length() != n) fuzz_fail("forward_logits did not advance length() by its tokens");
  model->rollback(0);
  if (model->length() != 0) fuzz_fail("rollback(0) did not empty the cache");
  std::vector<float> alone(vocab);
  for (std::size_t t = 0; t < n; ++t) {
    model->forward_logits(t, fed.subspan(t, 1), alone);
    for (std::size_t i = 0; i < vocab; ++i) {
      if (!same_float(alone[i], together[t * vocab + i])) {
        fuzz_fail("a token's logits differ between a batched forward and one after a rollback");
      }
    }
  }

  // The TargetModel entry point over the same cache: greedy next tokens are the rows' argmaxes.
  model->rollback(0);
  Token next[2] = {};
  model->forward(0, fed, std::span<Token>(next, n));
  for (std::size_t t = 0; t < n; ++t) {
    if (next[t] != llama2::argmax(std::span<const float>(together).subspan(t * vocab, vocab))) {
      fuzz_fail("forward's next token is not the argmax of its logits");
    }
  }
  if (model->length() != n) fuzz_fail("forward did not advance length() by its tokens");
}

void check_tokenizer(FuzzInput& in) {
  const auto vocab = static_cast<std::size_t>(in.in_range(0, 1023));
  const std::size_t text_length = in.byte() % 32;
  std::string text;
  while (text.size() < text_length && !in.empty()) text += static_cast<char>(in.byte());

  std::optional<llama2::Tokenizer> tokenizer;
  if (!loads(in.rest(), [&](const std::string& path) { tokenizer.emplace(path, vocab); })) return;
  if (tokenizer->vocab_size() != vocab) fuzz_fail("the tokenizer's vocabulary is not the size it was asked for");

  const std::vector<Token> ids = tokenizer->encode(text);
  if (ids.empty() || ids[0] != llama2::kBos) fuzz_fail("encode did not start with BOS");
  if (text.empty() != (ids.size() == 1)) fuzz_fail("encode of a non-empty text gave BOS alone, or the reverse");
  // BOS, then at most one token per byte of the text and its leading space.
  if (ids.size() > 2 + text.size()) fuzz_fail("encode gave more tokens than the text has bytes");
  for (const Token id : ids) {
    if (id >= vocab) fuzz_fail("encode gave an id outside the vocabulary");
  }
  const std::string decoded = tokenizer->decode(std::span<const Token>(ids).subspan(1));
  // Decoding piece by piece, each after the one before, is the same text.
  std::string streamed;
  Token previous = llama2::kBos;
  for (std::size_t i = 1; i < ids.size(); ++i) {
    streamed += tokenizer->decode(std::span<const Token>(ids).subspan(i, 1), previous);
    previous = ids[i];
  }
  if (streamed != decoded) fuzz_fail("decoding token by token differs from decoding the whole sequence");
}

}  // namespace
}  // namespace ngramspec::test

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ngramspec::test::FuzzInput in(data, size);
  const std::uint8_t mode = in.byte();
  if ((mode & 1) == 0) {
    ngramspec::test::check_checkpoint(mode, in.rest());
  } else {
    ngramspec::test::check_tokenizer(in);
  }
  return 0;
}
