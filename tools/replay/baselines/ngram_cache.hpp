#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "ngramspec/detail/fnv1a.hpp"
#include "ngramspec/drafter.hpp"
#include "ngramspec/token.hpp"

// llama.cpp's context n-gram cache (common/ngram-cache.cpp, driven by examples/lookup/lookup.cpp),
// rebuilt from its published code so that replays compare against what it really drafts:
//
// - common_ngram_cache_update counts, for every n in [LLAMA_NGRAM_MIN, LLAMA_NGRAM_MAX] = [1, 4]
//   and every position of the context (prompt, then each accepted token as it arrives, the
//   model's own token included), how often the n tokens before it were followed by its token.
// - common_ngram_cache_draft extends the draft one token at a time, up to n_draft tokens. Each
//   step looks up the n-grams ending at the end of context + draft so far, longest first; an
//   n-gram drafts its most frequent continuation when it was seen at least
//   draft_min_sample_size_lax[n-1] = {2, 2, 1, 1} times and that continuation holds at least
//   draft_min_percent_lax[n-1] = {66, 50, 50, 50} percent of them; an n-gram that is unknown
//   or fails either threshold hands over to the next shorter one. The draft ends at the first
//   step where no n-gram qualifies. (It also drafts nothing from fewer than 2 context tokens,
//   which needs no code here: a single token has no counted n-gram to draft from.)
// - With no static or dynamic cache (lookup's default), the context cache alone decides.
// - The most frequent continuation is the first one met with the highest count while iterating
//   the n-gram's std::unordered_map<token, count> (a strict `>`), so ties go to whichever
//   continuation the hash map iterates first. This drafter keeps the same map type and inserts
//   in the same order, so with the same standard library it breaks ties identically.

namespace ngramspec::baselines {

/// Configuration of an NGramCacheDrafter; validated once, by the constructor.
struct NGramCacheConfig {
  /// Longest n-gram the cache supports (llama.cpp's LLAMA_NGRAM_MAX).
  static constexpr std::size_t kMaxN = 4;

  std::size_t min_n = 1;        ///< shortest n-gram counted and looked up
  std::size_t max_n = 4;        ///< longest n-gram, looked up first
  std::size_t max_drafts = 16;  ///< most tokens one predict() proposes (llama.cpp's --draft-max default)
  std::array<std::uint32_t, kMaxN> min_samples{2, 2, 1, 1};      ///< [n-1]: fewest sightings of an n-gram that drafts
  std::array<std::uint32_t, kMaxN> min_percent{66, 50, 50, 50};  ///< [n-1]: least share of its top continuation, in %
};

/// Drafts from counts of which token followed each 1..4-gram of the whole context, the
/// longest n-gram whose top continuation is frequent and dominant enough winning each step.
///
/// Cost: update() is O(max_n) expected hash-map work and allocates when it meets a new n-gram
/// or continuation; predict() is O(drafts · max_n · continuations of the n-grams looked at) and
/// does not allocate. Memory grows with the distinct n-grams of the context, without bound.
///
/// Thread safety: none inside; concurrent const calls are safe while no thread updates.
class NGramCacheDrafter {
 public:
  /// Throws std::invalid_argument naming the field and its value when `config` is invalid.
  explicit NGramCacheDrafter(NGramCacheConfig config = {}) : config_(config) {
    if (config_.min_n == 0) throw std::invalid_argument("NGramCacheConfig::min_n is 0; it must be at least 1");
    if (config_.max_n > NGramCacheConfig::kMaxN) {
      throw std::invalid_argument("NGramCacheConfig::max_n = " + std::to_string(config_.max_n) + " exceeds " +
                                  std::to_string(NGramCacheConfig::kMaxN));
    }
    if (config_.max_n < config_.min_n) {
      throw std::invalid_argument("NGramCacheConfig::max_n = " + std::to_string(config_.max_n) +
                                  " is below min_n = " + std::to_string(config_.min_n));
    }
    if (config_.max_drafts == 0) {
      throw std::invalid_argument("NGramCacheConfig::max_drafts is 0; it must be at least 1");
    }
    for (std::size_t i = 0; i < NGramCacheConfig::kMaxN; ++i) {
      if (config_.min_percent[i] > 100) {
        throw std::invalid_argument("NGramCacheConfig::min_percent[" + std::to_string(i) +
                                    "] = " + std::to_string(config_.min_percent[i]) + " exceeds 100");
      }
    }
  }

  /// Appends one token: counts it as the continuation of each n-gram that ends before it.
  void update(Token token) {
    for (std::size_t n = config_.min_n; n <= config_.max_n && n <= seen_; ++n) {
      ++caches_[n - 1][key_of(tail_, n)][token];
    }
    push(tail_, token);
    ++seen_;
  }
  /// Appends several tokens in order.
  void update(std::span<const Token> tokens) {
    for (const Token token : tokens) update(token);
  }
  /// Forgets every count.
  void reset() noexcept {
    for (Cache& cache : caches_) cache.clear();
    tail_.fill(0);
    seen_ = 0;
  }

  /// Writes up to min(out.size(), max_drafts) drafts to `out`; returns how many.
  [[nodiscard]] std::size_t predict(std::span<Token> out) const {
    const std::size_t limit = std::min(out.size(), config_.max_drafts);
    Tail tail = tail_;  // the last tokens of context + drafts so far
    std::size_t drafted = 0;
    for (; drafted < limit; ++drafted) {
      bool found = false;
      Token token = 0;
      for (std::size_t n = std::min(config_.max_n, seen_ + drafted); n >= config_.min_n && !found; --n) {
        found = draft_from(n, key_of(tail, n), token);
      }
      if (!found) break;
      out[drafted] = token;
      push(tail, token);
    }
    return drafted;
  }

  [[nodiscard]] const NGramCacheConfig& config() const noexcept { return config_; }
  /// Tokens observed since construction or the last reset().
  [[nodiscard]] std::size_t tokens_seen() const noexcept { return seen_; }
  /// Distinct n-grams counted, over all n.
  [[nodiscard]] std::size_t ngrams() const noexcept {
    std::size_t total = 0;
    for (const Cache& cache : caches_) total += cache.size();
    return total;
  }

 private:
  using Key = std::array<Token, NGramCacheConfig::kMaxN>;   // n tokens in order, then zeros
  using Tail = std::array<Token, NGramCacheConfig::kMaxN>;  // last kMaxN tokens, oldest first
  struct KeyHash {
    std::size_t operator()(const Key& key) const noexcept {
      return static_cast<std::size_t>(detail::fnv1a(key));
    }
  };
  using Continuations = std::unordered_map<Token, std::uint32_t>;
  using Cache = std::unordered_map<Key, Continuations, KeyHash>;

  [[nodiscard]] static Key key_of(const Tail& tail, std::size_t n) noexcept {
    Key key{};
    std::copy(tail.end() - static_cast<std::ptrdiff_t>(n), tail.end(), key.begin());
    return key;
  }
  static void push(Tail& tail, Token token) noexcept {
    std::shift_left(tail.begin(), tail.end(), 1);
    tail.back() = token;
  }

  // The top continuation of one n-gram, if it passes the thresholds for n.
  [[nodiscard]] bool draft_from(std::size_t n, const Key& key, Token& token) const {
    const Cache& cache = caches_[n - 1];
    const auto it = cache.find(key);
    if (it == cache.end()) return false;
    std::uint64_t best = 0;
    std::uint64_t total = 0;
    for (const auto& [candidate, count] : it->second) {
      if (count > best) {
        best = count;
        token = candidate;
      }
      total += count;
    }
    return total >= config_.min_samples[n - 1] && 100 * best >= config_.min_percent[n - 1] * total;
  }

  NGramCacheConfig config_;
  std::array<Cache, NGramCacheConfig::kMaxN> caches_;  // [n-1]: n-gram -> continuation -> count
  Tail tail_{};
  std::size_t seen_ = 0;
};

static_assert(Drafter<NGramCacheDrafter>);

/// llama.cpp's lookup with its context cache alone, drafting up to `n_draft` tokens.
[[nodiscard]] inline NGramCacheConfig llama_cpp_lookup(std::size_t n_draft = 16) {
  NGramCacheConfig config;
  config.max_drafts = n_draft;
  return config;
}

}  // namespace ngramspec::baselines
