#include "llama2_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <new>
#include <stdexcept>
#include <string>

namespace ngramspec::llama2 {
namespace {

constexpr std::size_t kHeaderBytes = 7 * sizeof(std::int32_t);
// The header's fields, in file order, by their llama2.c names.
constexpr const char* kHeaderFields[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                                          "n_kv_heads", "vocab_size", "seq_len"};
// Bounds on the header's sizes, so a corrupt header fails validation instead of overflowing the size arithmetic.
constexpr std::size_t kMaxWidth = std::size_t{1} << 20;

std::string describe(const Config& c) {
  return "dim " + std::to_string(c.dim) + ", hidden_dim " + std::to_string(c.hidden_dim) + ", n_layers " +
         std::to_string(c.n_layers) + ", n_heads " + std::to_string(c.n_heads) + ", n_kv_heads " +
         std::to_string(c.n_kv_heads) + ", vocab_size " + std::to_string(c.vocab_size) + ", seq_len " +
         std::to_string(c.seq_len);
}

// out[t][i] = dot(w[i], x[t]) for t < n, i < rows; w is [rows][cols], x is [n][cols], out is [n][out_stride].
// Each weight row is read once for all n tokens. The dot product has a fixed order that depends on cols
// only: eight interleaved partial sums over the first cols - cols % 8 columns, combined pairwise, then the
// remaining columns in sequence. That is what makes every kernel here batch-invariant, and the eight
// independent sums let the compiler vectorize without reassociating anything.
void matmul(float* out, std::size_t out_stride, const float* x, const float* w, std::size_t n, std::size_t rows,
            std::size_t cols) {
  const std::size_t blocked = cols - cols % 8;
  for (std::size_t i = 0; i < rows; ++i) {
    const float* row = w + i * cols;
    for (std::size_t t = 0; t < n; ++t) {
      const float* v = x + t * cols;
      float acc[8] = {};
      for (std::size_t j = 0; j < blocked; j += 8) {
        for (std::size_t l = 0; l < 8; ++l) acc[l] += row[j + l] * v[j + l];
      }
      float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
      for (std::size_t j = blocked; j < cols; ++j) sum += row[j] * v[j];
      out[t * out_stride + i] = sum;
    }
  }
}

void rmsnorm(float* out, const float* x, const float* weight, std::size_t size) {
  float ss = 0.0f;
  for (std::size_t j = 0; j < size; ++j) ss += x[j] * x[j];
  ss /= static_cast<float>(size);
  ss += 1e-5f;
  ss = 1.0f / std::sqrt(ss);
  for (std::size_t j = 0; j < size; ++j) out[j] = weight[j] * (ss * x[j]);
}

void softmax(float* x, std::size_t size) {
  const float max = *std::max_element(x, x + size);
  float sum = 0.0f;
  for (std::size_t i = 0; i < size; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  for (std::size_t i = 0; i < size; ++i) x[i] /= sum;
}

// Rotates the adjacent pairs (j, j+1) of `v`, `width` floats made of heads of head_size, by pos * theta_j;
// `rotation` holds (cos, sin) of that angle for j / 2 mod head_size / 2 at this position.
void rope(float* v, std::size_t width, std::size_t head_size, const float* rotation) {
  for (std::size_t j = 0; j < width; j += 2) {
    const float c = rotation[j % head_size];
    const float s = rotation[j % head_size + 1];
    const float a = v[j];
    const float b = v[j + 1];
    v[j] = a * c - b * s;
    v[j + 1] = a * s + b * c;
  }
}

// splitmix64: a tiny, well-mixed generator whose output is the same everywhere, unlike std distributions.
std::uint64_t next_random(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

std::uint64_t Config::file_floats() const noexcept {
  const std::uint64_t L = n_layers;
  const std::uint64_t kv = kv_dim();
  std::uint64_t floats = std::uint64_t{vocab_size} * dim;  // token embedding
  floats += L * dim * 2;                                       // rms_att, rms_ffn
  floats += L * dim * dim * 2 + L * kv * dim * 2;              // wq, wo; wk, wv
  floats += L * hidden_dim * dim * 3;                          // w1, w2, w3
  floats += dim;                                               // rms_final
  floats += std::uint64_t{seq_len} * head_size();              // two legacy RoPE tables of seq_len * head_size / 2
  if (!shared_classifier) floats += std::uint64_t{vocab_size} * dim;
  return floats;
}

void validate(const Config& c) {
  const auto fail = [&](const std::string& what) {
    throw std::invalid_argument("llama2: inconsistent model shape (" + describe(c) + "): " + what);
  };
  const std::size_t sizes[7] = {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len};
  for (int i = 0; i < 7; ++i) {
    if (sizes[i] == 0 || sizes[i] > kMaxWidth) {
      fail(std::string(kHeaderFields[i]) + " = " + std::to_string(sizes[i]) + " is not between 1 and " +
           std::to_string(kMaxWidth));
    }
  }
  const auto value = [](const char* name, std::size_t v) { return std::string(name) + " = " + std::to_string(v); };
  if (c.dim % c.n_heads != 0) fail(value("dim", c.dim) + " must be a multiple of " + value("n_heads", c.n_heads));
  if (c.head_size() % 2 != 0) {
    fail("head_size = dim / n_heads = " + std::to_string(c.dim) + " / " + std::to_string(c.n_heads) + " = " +
         std::to_string(c.head_size()) + " must be even for RoPE");
  }
  if (c.n_kv_heads > c.n_heads || c.n_heads % c.n_kv_heads != 0) {
    fail(value("n_heads", c.n_heads) + " must be a multiple of " + value("n_kv_heads", c.n_kv_heads));
  }
}

namespace {

// The checkpoint's header, read from `file` (at its start, `file_bytes` long) and checked (validate()).
Config read_header(std::ifstream& file, const std::filesystem::path& path, std::uint64_t file_bytes) {
  if (file_bytes < kHeaderBytes) {
    throw std::invalid_argument("llama2: checkpoint '" + path.string() + "' is truncated: " +
                                std::to_string(file_bytes) + " bytes, shorter than the 28-byte header");
  }
  std::int32_t header[7];
  file.read(reinterpret_cast<char*>(header), sizeof header);
  for (int i = 0; i < 7; ++i) {
    // Only vocab_size carries a sign (negative = separate classifier); a negative anything else is corrupt.
    if (header[i] <= 0 && i != 5) {
      throw std::invalid_argument("llama2: checkpoint '" + path.string() + "' has an invalid header: " +
                                  kHeaderFields[i] + " = " + std::to_string(header[i]) + " is not positive");
    }
  }
  Config config;
  config.dim = static_cast<std::size_t>(header[0]);
  config.hidden_dim = static_cast<std::size_t>(header[1]);
  config.n_layers = static_cast<std::size_t>(header[2]);
  config.n_heads = static_cast<std::size_t>(header[3]);
  config.n_kv_heads = static_cast<std::size_t>(header[4]);
  config.shared_classifier = header[5] > 0;
  config.vocab_size = static_cast<std::size_t>(header[5] > 0 ? std::int64_t{header[5]} : -std::int64_t{header[5]});
  config.seq_len = static_cast<std::size_t>(header[6]);
  validate(config);
  return config;
}

// Opens `path`, saying which file could not be opened; leaves its size in `file_bytes`.
std::ifstream open_checkpoint(const std::filesystem::path& path, std::uint64_t& file_bytes) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("llama2: cannot open checkpoint '" + path.string() + "'");
  file.seekg(0, std::ios::end);
  file_bytes = static_cast<std::uint64_t>(file.tellg());
  file.seekg(0);
  return file;
}

}  // namespace

Config Transformer::read_config(const std::filesystem::path& path) {
  std::uint64_t file_bytes = 0;
  std::ifstream file = open_checkpoint(path, file_bytes);
  return read_header(file, path, file_bytes);
}

Transformer Transformer::load(const std::filesystem::path& path, std::size_t max_batch) {
  std::uint64_t file_bytes = 0;
  std::ifstream file = open_checkpoint(path, file_bytes);
  const Config config = read_header(file, path, file_bytes);

  // The KV cache grows with n_layers * seq_len * kv_dim, which the file's size does not bound
  // (the file grows with each factor apart): a small corrupt file must not demand terabytes.
  const std::uint64_t kv_floats = std::uint64_t{config.n_layers} * config.kv_dim();
  if (kv_floats != 0 && config.seq_len > kMaxKvCacheFloats / 2 / kv_floats) {
    throw std::invalid_argument("llama2: checkpoint '" + path.string() + "' (" + describe(config) +
                                ") needs a KV cache of 2 * n_layers * seq_len * kv_dim floats, more than " +
                                std::to_string(kMaxKvCacheFloats) + "; its header is implausible");
  }
  // Compared in floats, not bytes: 4 * floats can overflow for a corrupt header that passes validate().
  const std::uint64_t expected = config.file_floats();
  const std::uint64_t body = file_bytes - kHeaderBytes;
  if (body % sizeof(float) != 0 || body / sizeof(float) != expected) {
    throw std::invalid_argument("llama2: checkpoint '" + path.string() + "' is " + std::to_string(file_bytes) +
                                " bytes but its header (" + describe(config) +
                                (config.shared_classifier ? "" : ", separate classifier") + ") implies 28 + 4 * " +
                                std::to_string(expected) + " bytes: " +
                                (body / sizeof(float) < expected ? "the file is truncated" : "the file has trailing data"));
  }
  try {
    std::vector<float> weights(config.file_floats());
    file.read(reinterpret_cast<char*>(weights.data()), static_cast<std::streamsize>(weights.size() * sizeof(float)));
    if (!file) throw std::runtime_error("llama2: error reading checkpoint '" + path.string() + "'");
    return Transformer(config, std::move(weights), max_batch);
  } catch (const std::bad_alloc&) {
    throw std::runtime_error("llama2: not enough memory for checkpoint '" + path.string() + "' (" + describe(config) +
                             "): its weights, KV cache and activations could not be allocated");
  }
}

Transformer Transformer::random(const Config& config, std::uint64_t seed, std::size_t max_batch) {
  validate(config);
  std::vector<float> weights(config.file_floats());
  std::uint64_t state = seed;
  // Uniform in [-1, 1) scaled by 1/sqrt(dim) keeps activations of a deep stack in a sane range.
  const float scale = 1.0f / std::sqrt(static_cast<float>(config.dim));
  for (float& w : weights) {
    w = (static_cast<float>(next_random(state) >> 40) * 0x1.0p-23f - 1.0f) * scale;
  }
  Transformer model(config, std::move(weights), max_batch);
  // RMSNorm gains of one, as a freshly initialised network has.
  const auto ones = [&](const float* p, std::size_t count) {
    float* w = model.weights_->data() + (p - model.weights_->data());
    std::fill_n(w, count, 1.0f);
  };
  for (const Layer& layer : model.layers_) {
    ones(layer.rms_att, config.dim);
    ones(layer.rms_ffn, config.dim);
  }
  ones(model.rms_final_, config.dim);
  return model;
}

Transformer::Transformer(const Config& config, std::vector<float> weights, std::size_t max_batch)
    : config_(config), max_batch_(max_batch), weights_(std::make_shared<std::vector<float>>(std::move(weights))) {
  if (max_batch_ == 0) throw std::invalid_argument("llama2: max_batch must be at least 1");
  const Config& c = config_;
  const std::size_t L = c.n_layers;
  const std::size_t kv = c.kv_dim();
  const float* p = weights_->data();
  const auto take = [&p](std::size_t count) {
    const float* start = p;
    p += count;
    return start;
  };
  token_embedding_ = take(c.vocab_size * c.dim);
  const float* rms_att = take(L * c.dim);
  const float* wq = take(L * c.dim * c.dim);
  const float* wk = take(L * kv * c.dim);
  const float* wv = take(L * kv * c.dim);
  const float* wo = take(L * c.dim * c.dim);
  const float* rms_ffn = take(L * c.dim);
  const float* w1 = take(L * c.hidden_dim * c.dim);
  const float* w2 = take(L * c.dim * c.hidden_dim);
  const float* w3 = take(L * c.hidden_dim * c.dim);
  rms_final_ = take(c.dim);
  take(c.seq_len * c.head_size());  // the unused legacy RoPE tables
  classifier_ = c.shared_classifier ? token_embedding_ : take(c.vocab_size * c.dim);
  for (std::size_t l = 0; l < L; ++l) {
    layers_.push_back(Layer{rms_att + l * c.dim, wq + l * c.dim * c.dim, wk + l * kv * c.dim, wv + l * kv * c.dim,
                            wo + l * c.dim * c.dim, rms_ffn + l * c.dim, w1 + l * c.hidden_dim * c.dim,
                            w2 + l * c.dim * c.hidden_dim, w3 + l * c.hidden_dim * c.dim});
  }
  allocate();
}

Transformer Transformer::early_exit(const Transformer& base, std::size_t layers, std::size_t max_batch) {
  if (layers == 0 || layers > base.config_.n_layers) {
    throw std::invalid_argument("llama2: an early exit after " + std::to_string(layers) +
                                " layers; the model has 1 to " + std::to_string(base.config_.n_layers));
  }
  if (max_batch == 0) throw std::invalid_argument("llama2: max_batch must be at least 1");
  return Transformer(base, layers, max_batch);
}

Transformer::Transformer(const Transformer& base, std::size_t layers, std::size_t max_batch)
    : config_(base.config_),
      max_batch_(max_batch),
      weights_(base.weights_),
      token_embedding_(base.token_embedding_),
      layers_(base.layers_.begin(), base.layers_.begin() + static_cast<std::ptrdiff_t>(layers)),
      rms_final_(base.rms_final_),
      classifier_(base.classifier_) {
  config_.n_layers = layers;
  allocate();
}

void Transformer::allocate() {
  const Config& c = config_;
  const std::size_t L = c.n_layers;
  const std::size_t kv = c.kv_dim();
  key_cache_.resize(L * c.seq_len * kv);
  value_cache_.resize(L * c.seq_len * kv);
  const std::size_t b = max_batch_;
  x_.resize(b * c.dim);
  xb_.resize(b * c.dim);
  xb2_.resize(b * c.dim);
  q_.resize(b * c.dim);
  hb_.resize(b * c.hidden_dim);
  hb2_.resize(b * c.hidden_dim);
  scores_.resize(c.seq_len);
  // The RoPE angles depend only on position and pair, so they are computed once, not per token and layer.
  const std::size_t hs = c.head_size();
  rotation_.resize(c.seq_len * hs);
  for (std::size_t pos = 0; pos < c.seq_len; ++pos) {
    for (std::size_t j = 0; j < hs; j += 2) {
      const float freq = 1.0f / std::pow(10000.0f, static_cast<float>(j) / static_cast<float>(hs));
      const float angle = static_cast<float>(pos) * freq;
      rotation_[pos * hs + j] = std::cos(angle);
      rotation_[pos * hs + j + 1] = std::sin(angle);
    }
  }
  logits_.resize(b * c.vocab_size);
  tree_parents_.resize(b);
  depth_.resize(b);
  path_.resize(b);
}

// Attention of the pass's token t (row t of q_, written to row t of xb_) over the cache slots
// 0 .. contiguous-1, then the slots `tail`, in that order. The scores, the softmax and the weighted sum run
// over those entries in sequence, so the float operations depend only on the logical positions attended to,
// not on which slots hold them: a tree token that reads its ancestors' slots reduces exactly as the same
// path fed as a chain does.
void Transformer::attend(std::size_t layer, std::size_t t, std::size_t contiguous, std::span<const std::size_t> tail) {
  const Config& c = config_;
  const std::size_t hs = c.head_size();
  const std::size_t kv = c.kv_dim();
  const std::size_t group = c.n_heads / c.n_kv_heads;
  const float* keys = key_cache_.data() + layer * c.seq_len * kv;
  const float* values = value_cache_.data() + layer * c.seq_len * kv;
  const float inv_sqrt = 1.0f / std::sqrt(static_cast<float>(hs));
  const std::size_t count = contiguous + tail.size();
  for (std::size_t h = 0; h < c.n_heads; ++h) {
    const float* q = q_.data() + t * c.dim + h * hs;
    const std::size_t kv_offset = (h / group) * hs;
    float* att = scores_.data();
    const auto score = [&](std::size_t slot) {
      const float* k = keys + slot * kv + kv_offset;
      float sum = 0.0f;
      for (std::size_t i = 0; i < hs; ++i) sum += q[i] * k[i];
      return sum * inv_sqrt;
    };
    for (std::size_t s = 0; s < contiguous; ++s) att[s] = score(s);
    for (std::size_t j = 0; j < tail.size(); ++j) att[contiguous + j] = score(tail[j]);
    softmax(att, count);
    float* out = xb_.data() + t * c.dim + h * hs;
    std::fill_n(out, hs, 0.0f);
    const auto accumulate = [&](float weight, std::size_t slot) {
      const float* v = values + slot * kv + kv_offset;
      for (std::size_t i = 0; i < hs; ++i) out[i] += weight * v[i];
    };
    for (std::size_t s = 0; s < contiguous; ++s) accumulate(att[s], s);
    for (std::size_t j = 0; j < tail.size(); ++j) accumulate(att[contiguous + j], tail[j]);
  }
}

void Transformer::check_pass(std::size_t pos, std::span<const Token> tokens, std::size_t logits_size) const {
  const Config& c = config_;
  const std::size_t n = tokens.size();
  if (pos != length_) {
    throw std::invalid_argument("llama2: forward at position " + std::to_string(pos) + " but the cache holds " +
                                std::to_string(length_));
  }
  if (n == 0 || n > max_batch_) {
    throw std::invalid_argument("llama2: forward of " + std::to_string(n) + " tokens; it takes 1 to " +
                                std::to_string(max_batch_));
  }
  if (pos + n > c.seq_len) {
    throw std::invalid_argument("llama2: positions up to " + std::to_string(pos + n) + " exceed seq_len " +
                                std::to_string(c.seq_len));
  }
  if (logits_size != n * c.vocab_size) {
    throw std::invalid_argument("llama2: logits hold " + std::to_string(logits_size) +
                                " floats; they must hold n * vocab_size = " + std::to_string(n) + " * " +
                                std::to_string(c.vocab_size));
  }
  for (const Token token : tokens) {
    if (token >= c.vocab_size) {
      throw std::invalid_argument("llama2: token " + std::to_string(token) + " is outside the vocabulary of " +
                                  std::to_string(c.vocab_size));
    }
  }
}

void Transformer::forward_logits(std::size_t pos, std::span<const Token> tokens, std::span<float> logits) {
  check_pass(pos, tokens, logits.size());
  run(pos, tokens, false, logits);
  tree_size_ = 0;
}

void Transformer::forward_tree_logits(std::size_t pos, std::span<const Token> tokens,
                                      std::span<const std::int32_t> parents, std::span<float> logits) {
  check_pass(pos, tokens, logits.size());
  const std::size_t n = tokens.size();
  if (parents.size() != n) {
    throw std::invalid_argument("llama2: a tree pass of " + std::to_string(n) + " tokens got " +
                                std::to_string(parents.size()) + " parents");
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t parent = parents[i];
    if (parent < kTreeRoot || (parent != kTreeRoot && static_cast<std::size_t>(parent) >= i)) {
      throw std::invalid_argument("llama2: parents[" + std::to_string(i) + "] = " + std::to_string(parent) +
                                  " must be -1 (the cached sequence) or an index below " + std::to_string(i));
    }
  }
  // Nothing is written before this point, so a refused pass leaves the model as it was.
  for (std::size_t i = 0; i < n; ++i) {
    depth_[i] = parents[i] == kTreeRoot ? 0 : depth_[static_cast<std::size_t>(parents[i])] + 1;
    tree_parents_[i] = parents[i];
  }
  run(pos, tokens, true, logits);
  tree_pos_ = pos;
  tree_size_ = n;
}

void Transformer::run(std::size_t pos, std::span<const Token> tokens, bool tree, std::span<float> logits) {
  const Config& c = config_;
  const std::size_t n = tokens.size();
  const std::size_t dim = c.dim;
  const std::size_t hidden = c.hidden_dim;
  const std::size_t kv = c.kv_dim();
  for (std::size_t t = 0; t < n; ++t) std::copy_n(token_embedding_ + tokens[t] * dim, dim, x_.data() + t * dim);
  for (std::size_t l = 0; l < c.n_layers; ++l) {
    const Layer& w = layers_[l];
    for (std::size_t t = 0; t < n; ++t) rmsnorm(xb_.data() + t * dim, x_.data() + t * dim, w.rms_att, dim);
    // Keys and values go straight into the cache rows of their slots: pos + t, in pass order.
    float* k_rows = key_cache_.data() + (l * c.seq_len + pos) * kv;
    float* v_rows = value_cache_.data() + (l * c.seq_len + pos) * kv;
    matmul(q_.data(), dim, xb_.data(), w.wq, n, dim, dim);
    matmul(k_rows, kv, xb_.data(), w.wk, n, kv, dim);
    matmul(v_rows, kv, xb_.data(), w.wv, n, kv, dim);
    for (std::size_t t = 0; t < n; ++t) {
      const float* rotation = rotation_.data() + (pos + (tree ? depth_[t] : t)) * c.head_size();
      rope(q_.data() + t * dim, dim, c.head_size(), rotation);
      rope(k_rows + t * kv, kv, c.head_size(), rotation);
    }
    for (std::size_t t = 0; t < n; ++t) {
      if (!tree) {
        attend(l, t, pos + t + 1, {});
        continue;
      }
      // The slots of token t's ancestors, root first, then its own.
      const std::size_t depth = depth_[t];
      std::size_t node = t;
      for (std::size_t d = depth + 1; d-- > 0;) {
        path_[d] = pos + node;
        node = static_cast<std::size_t>(tree_parents_[node]);  // past the root the loop has ended: never read
      }
      attend(l, t, pos, std::span<const std::size_t>(path_).first(depth + 1));
    }
    matmul(xb2_.data(), dim, xb_.data(), w.wo, n, dim, dim);
    for (std::size_t i = 0; i < n * dim; ++i) x_[i] += xb2_[i];

    for (std::size_t t = 0; t < n; ++t) rmsnorm(xb_.data() + t * dim, x_.data() + t * dim, w.rms_ffn, dim);
    matmul(hb_.data(), hidden, xb_.data(), w.w1, n, hidden, dim);
    matmul(hb2_.data(), hidden, xb_.data(), w.w3, n, hidden, dim);
    for (std::size_t i = 0; i < n * hidden; ++i) {
      const float a = hb_[i];
      hb_[i] = a * (1.0f / (1.0f + std::exp(-a))) * hb2_[i];
    }
    matmul(xb2_.data(), dim, hb_.data(), w.w2, n, dim, hidden);
    for (std::size_t i = 0; i < n * dim; ++i) x_[i] += xb2_[i];
  }
  for (std::size_t t = 0; t < n; ++t) rmsnorm(xb_.data() + t * dim, x_.data() + t * dim, rms_final_, dim);
  matmul(logits.data(), c.vocab_size, xb_.data(), classifier_, n, c.vocab_size, dim);
  length_ = pos + n;
}

void Transformer::forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) {
  if (next.size() != tokens.size()) throw std::invalid_argument("llama2: next must have one slot per token");
  const std::size_t vocab = config_.vocab_size;
  const std::span<float> logits = std::span<float>(logits_).first(std::min(tokens.size(), max_batch_) * vocab);
  forward_logits(pos, tokens, logits);
  for (std::size_t t = 0; t < tokens.size(); ++t) next[t] = argmax(logits.subspan(t * vocab, vocab));
}

void Transformer::forward_tree(std::size_t pos, std::span<const Token> tokens, std::span<const std::int32_t> parents,
                               std::span<Token> next) {
  if (next.size() != tokens.size()) {
    throw std::invalid_argument("llama2: next has " + std::to_string(next.size()) + " slots for " +
                                std::to_string(tokens.size()) + " tokens");
  }
  const std::size_t vocab = config_.vocab_size;
  const std::span<float> logits = std::span<float>(logits_).first(std::min(tokens.size(), max_batch_) * vocab);
  forward_tree_logits(pos, tokens, parents, logits);
  for (std::size_t t = 0; t < tokens.size(); ++t) next[t] = argmax(logits.subspan(t * vocab, vocab));
}

void Transformer::forward_tree(std::size_t pos, std::span<const Token> tokens, std::span<const std::int32_t> parents,
                               std::span<Token> next, std::span<Token> top) {
  const std::size_t n = tokens.size();
  const std::size_t vocab = config_.vocab_size;
  // n == 0 is left to the pass, which names it.
  if (n != 0 && (top.empty() || top.size() % n != 0 || top.size() / n > vocab)) {
    throw std::invalid_argument("llama2: top holds " + std::to_string(top.size()) + " ids for " + std::to_string(n) +
                                " tokens; it must hold K per token, 1 <= K <= vocab_size = " + std::to_string(vocab));
  }
  forward_tree(pos, tokens, parents, next);
  const std::size_t k = top.size() / n;
  for (std::size_t t = 0; t < n; ++t) {
    top_k(std::span<const float>(logits_).subspan(t * vocab, vocab), top.subspan(t * k, k));
  }
}

void Transformer::keep(std::size_t pos, std::span<const std::size_t> kept) {
  if (tree_size_ == 0 || pos != tree_pos_) {
    throw std::invalid_argument("llama2: keep at position " + std::to_string(pos) +
                                (tree_size_ == 0 ? std::string(" but the last call was not a tree pass")
                                                 : " but the last tree pass was at " + std::to_string(tree_pos_)));
  }
  if (kept.size() > tree_size_) {
    throw std::invalid_argument("llama2: keep of " + std::to_string(kept.size()) + " entries from a tree pass of " +
                                std::to_string(tree_size_));
  }
  for (std::size_t j = 0; j < kept.size(); ++j) {
    const std::size_t index = kept[j];
    if (index >= tree_size_) {
      throw std::invalid_argument("llama2: kept[" + std::to_string(j) + "] = " + std::to_string(index) +
                                  " is not an entry of the tree pass of " + std::to_string(tree_size_));
    }
    const std::int32_t parent = tree_parents_[index];
    const std::int32_t want = j == 0 ? kTreeRoot : static_cast<std::int32_t>(kept[j - 1]);
    if (parent != want) {
      throw std::invalid_argument("llama2: kept[" + std::to_string(j) + "] = " + std::to_string(index) +
                                  " has parent " + std::to_string(parent) + ", not " +
                                  (j == 0 ? std::string("-1 (the root)")
                                          : "kept[" + std::to_string(j - 1) + "] = " + std::to_string(kept[j - 1])) +
                                  ": kept is not a root path");
    }
  }
  // A root path's indices increase from kept[0] >= 0, so kept[j] >= j: each copy reads a slot no earlier
  // copy wrote.
  const Config& c = config_;
  const std::size_t kv = c.kv_dim();
  for (std::size_t l = 0; l < c.n_layers; ++l) {
    float* keys = key_cache_.data() + (l * c.seq_len + pos) * kv;
    float* values = value_cache_.data() + (l * c.seq_len + pos) * kv;
    for (std::size_t j = 0; j < kept.size(); ++j) {
      if (kept[j] == j) continue;
      std::copy_n(keys + kept[j] * kv, kv, keys + j * kv);
      std::copy_n(values + kept[j] * kv, kv, values + j * kv);
    }
  }
  length_ = pos + kept.size();
  tree_size_ = 0;
}

void Transformer::rollback(std::size_t pos) {
  if (pos > length_) {
    throw std::invalid_argument("llama2: rollback to " + std::to_string(pos) + " but the cache holds only " +
                                std::to_string(length_));
  }
  length_ = pos;
  tree_size_ = 0;
}

Token argmax(std::span<const float> values) noexcept {
  std::size_t best = 0;
  for (std::size_t i = 1; i < values.size(); ++i) {
    if (values[i] > values[best]) best = i;
  }
  return static_cast<Token>(best);
}

void top_k(std::span<const float> values, std::span<Token> out) noexcept {
  const std::size_t k = out.size();
  if (k == 0) return;
  // `better` orders by value, then by the lower id; as the heap's "less", it keeps the worst kept id on top.
  const auto better = [&](Token a, Token b) { return values[a] > values[b] || (values[a] == values[b] && a < b); };
  for (std::size_t i = 0; i < k; ++i) out[i] = static_cast<Token>(i);
  std::make_heap(out.begin(), out.end(), better);
  for (std::size_t i = k; i < values.size(); ++i) {
    const auto id = static_cast<Token>(i);
    if (!better(id, out.front())) continue;
    std::pop_heap(out.begin(), out.end(), better);
    out.back() = id;
    std::push_heap(out.begin(), out.end(), better);
  }
  std::sort_heap(out.begin(), out.end(), better);
}

}  // namespace ngramspec::llama2
