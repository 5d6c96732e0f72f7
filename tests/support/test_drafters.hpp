#pragma once

// Drafters for tests and fuzz targets, from useless to hostile to perfect.
//
// All satisfy the Drafter concept. predict() is const in the concept, so a drafter that
// needs scratch space or randomness keeps it `mutable`; each still proposes the same thing
// for the same observed sequence and the same number of earlier predict() calls, so a test
// that rebuilds a drafter from its seed replays it exactly.
//
// The models of mock_models.hpp emit tokens below their vocabulary (< 64); tokens from
// kForeignToken up are never emitted by them, so drafts made of them are always rejected.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ngramspec/decode_options.hpp"
#include "ngramspec/drafter.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "ngramspec/token.hpp"
#include "support/mock_models.hpp"

namespace ngramspec::test {

/// First of the tokens no test model emits.
inline constexpr Token kForeignToken = 0xF0000000U;

/// Keeps the observed sequence; the drafters below derive from it for update() and reset().
class ObservedSequence {
 public:
  void update(Token token) { seen_.push_back(token); }
  void update(std::span<const Token> tokens) { seen_.insert(seen_.end(), tokens.begin(), tokens.end()); }
  void reset() noexcept { seen_.clear(); }
  /// Every token observed since the last reset(), in order.
  [[nodiscard]] const std::vector<Token>& seen() const noexcept { return seen_; }

 private:
  std::vector<Token> seen_;
};

/// Never proposes anything: speculation degenerates to plain decoding.
class SilentDrafter : public ObservedSequence {
 public:
  [[nodiscard]] std::size_t predict(std::span<Token>) const noexcept { return 0; }
};

/// Always wrong: proposes up to `length` foreign tokens, which no test model emits.
class WrongDrafter : public ObservedSequence {
 public:
  explicit WrongDrafter(std::size_t length = std::numeric_limits<std::size_t>::max()) : length_(length) {}
  [[nodiscard]] std::size_t predict(std::span<Token> out) const noexcept {
    const std::size_t n = std::min(out.size(), length_);
    for (std::size_t i = 0; i < n; ++i) out[i] = kForeignToken + static_cast<Token>(i % 1024);
    return n;
  }

 private:
  std::size_t length_;
};

/// Knows the model's rule and proposes up to `length` tokens of its true continuation.
/// With `wrong_per_mille` > 0 each draft is instead a wrong token (the true one XOR 1) with
/// that chance, decided by a hash of (seed, observed length, draft index), and the drafts
/// after it continue from the wrong guess: a drafter that is mostly right.
class OracleDrafter : public ObservedSequence {
 public:
  explicit OracleDrafter(NextTokenRule rule, std::size_t length = std::numeric_limits<std::size_t>::max(),
                         unsigned wrong_per_mille = 0, std::uint64_t seed = 0)
      : rule_(std::move(rule)), length_(length), wrong_per_mille_(wrong_per_mille), seed_(seed) {}

  [[nodiscard]] std::size_t predict(std::span<Token> out) const {
    const std::size_t n = std::min(out.size(), length_);
    if (n == 0 || seen().empty()) return 0;
    scratch_.assign(seen().begin(), seen().end());
    for (std::size_t i = 0; i < n; ++i) {
      Token t = rule_(std::span<const Token>(scratch_));
      if (wrong_per_mille_ != 0 && scramble(seed_ ^ scramble(scratch_.size() * 1031 + i)) % 1000 < wrong_per_mille_) {
        t ^= 1U;
      }
      out[i] = t;
      scratch_.push_back(t);
    }
    return n;
  }

 private:
  NextTokenRule rule_;
  std::size_t length_;
  unsigned wrong_per_mille_;
  std::uint64_t seed_;
  mutable std::vector<Token> scratch_;  // observed sequence + drafts so far
};

/// Proposes a random number (0 .. max_length) of random tokens below `vocab` from a seeded
/// generator that advances with every predict(): hits now and then by chance.
class RandomDrafter : public ObservedSequence {
 public:
  RandomDrafter(std::uint64_t seed, Token vocab, std::size_t max_length)
      : seed_(seed), rng_(seed), vocab_(vocab), max_length_(max_length) {}
  // Restarts the draws too, so that repeating a generation repeats its drafts.
  void reset() {
    ObservedSequence::reset();
    rng_.seed(seed_);
  }
  [[nodiscard]] std::size_t predict(std::span<Token> out) const {
    const std::size_t cap = std::min(out.size(), max_length_);
    const std::size_t n = std::uniform_int_distribution<std::size_t>(0, cap)(rng_);
    for (std::size_t i = 0; i < n; ++i) out[i] = std::uniform_int_distribution<Token>(0, vocab_ - 1)(rng_);
    return n;
  }

 private:
  std::uint64_t seed_;
  mutable std::mt19937_64 rng_;
  Token vocab_;
  std::size_t max_length_;
};

/// Proposes given drafts at given points: `script[k]` when exactly k tokens were observed
/// (the prompt and the emitted tokens), nothing otherwise; clipped to out.size(). Records
/// the room each predict() was offered.
class ScriptedDrafter : public ObservedSequence {
 public:
  explicit ScriptedDrafter(std::map<std::size_t, std::vector<Token>> script) : script_(std::move(script)) {}
  [[nodiscard]] std::size_t predict(std::span<Token> out) const {
    offered_.push_back(out.size());
    const auto it = script_.find(seen().size());
    if (it == script_.end()) return 0;
    const std::size_t n = std::min(out.size(), it->second.size());
    std::copy_n(it->second.begin(), n, out.begin());
    return n;
  }
  /// out.size() of every predict() call, in order.
  [[nodiscard]] const std::vector<std::size_t>& offered() const noexcept { return offered_; }

 private:
  std::map<std::size_t, std::vector<Token>> script_;
  mutable std::vector<std::size_t> offered_;
};

/// A drafter that lies about how much it wrote: it lets `inner` draft, fills the rest of
/// `out` with `filler`, and returns `claim` whatever out.size() is. Decoders must clamp the
/// count to what they offered.
template <Drafter D>
class LiarDrafter {
 public:
  LiarDrafter(D inner, std::size_t claim, Token filler = kForeignToken)
      : inner_(std::move(inner)), claim_(claim), filler_(filler) {}
  void update(Token token) { inner_.update(token); }
  void update(std::span<const Token> tokens) { inner_.update(tokens); }
  void reset() { inner_.reset(); }
  [[nodiscard]] std::size_t predict(std::span<Token> out) const {
    const std::size_t n = std::min<std::size_t>(inner_.predict(out), out.size());
    std::fill(out.begin() + static_cast<std::ptrdiff_t>(n), out.end(), filler_);
    return claim_;
  }
  [[nodiscard]] const D& inner() const noexcept { return inner_; }

 private:
  D inner_;
  std::size_t claim_;
  Token filler_;
};

/// Wraps a drafter and records how the decoder used it: every observed token (as the
/// decoder fed them, across resets), resets, predict() calls and the largest room offered.
template <Drafter D>
class RecordingDrafter {
 public:
  explicit RecordingDrafter(D inner) : inner_(std::move(inner)) {}
  void update(Token token) {
    inner_.update(token);
    seen_.push_back(token);
  }
  void update(std::span<const Token> tokens) {
    inner_.update(tokens);
    seen_.insert(seen_.end(), tokens.begin(), tokens.end());
  }
  void reset() {
    inner_.reset();
    seen_.clear();
    ++resets_;
  }
  [[nodiscard]] std::size_t predict(std::span<Token> out) const {
    ++predicts_;
    max_offered_ = std::max(max_offered_, out.size());
    return inner_.predict(out);
  }
  /// Tokens observed since the last reset().
  [[nodiscard]] const std::vector<Token>& seen() const noexcept { return seen_; }
  [[nodiscard]] std::size_t resets() const noexcept { return resets_; }
  [[nodiscard]] std::size_t predicts() const noexcept { return predicts_; }
  [[nodiscard]] std::size_t max_offered() const noexcept { return max_offered_; }
  [[nodiscard]] D& inner() noexcept { return inner_; }

 private:
  D inner_;
  std::vector<Token> seen_;
  std::size_t resets_ = 0;
  mutable std::size_t predicts_ = 0;
  mutable std::size_t max_offered_ = 0;
};

/// What a ThrowingDrafter throws.
struct DrafterFault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Wraps a drafter whose `k`-th predict() call from now (1-based) throws DrafterFault;
/// 0 never.
template <Drafter D>
class ThrowingDrafter {
 public:
  ThrowingDrafter(D inner, std::size_t k) : inner_(std::move(inner)), countdown_(k) {}
  void update(Token token) { inner_.update(token); }
  void update(std::span<const Token> tokens) { inner_.update(tokens); }
  void reset() { inner_.reset(); }
  [[nodiscard]] std::size_t predict(std::span<Token> out) const {
    if (countdown_ != 0 && --countdown_ == 0) throw DrafterFault("injected predict fault");
    return inner_.predict(out);
  }
  void fail_predict_at(std::size_t k) noexcept { countdown_ = k; }

 private:
  D inner_;
  mutable std::size_t countdown_;
};

/// Any drafter behind one type, for code that picks drafters at run time (an engine's
/// lanes, a fuzz target). Copies deep-copy the drafter.
class AnyDrafter {
 public:
  template <class D>
  requires(!std::same_as<D, AnyDrafter> && Drafter<D>) explicit AnyDrafter(D drafter)
      : impl_(std::make_unique<Model<D>>(std::move(drafter))) {}
  AnyDrafter(const AnyDrafter& other) : impl_(other.impl_->clone()) {}
  AnyDrafter(AnyDrafter&&) noexcept = default;
  AnyDrafter& operator=(const AnyDrafter& other) {
    if (this != &other) impl_ = other.impl_->clone();
    return *this;
  }
  AnyDrafter& operator=(AnyDrafter&&) noexcept = default;
  ~AnyDrafter() = default;

  void update(Token token) { impl_->update(token); }
  void update(std::span<const Token> tokens) { impl_->update(tokens); }
  [[nodiscard]] std::size_t predict(std::span<Token> out) const { return impl_->predict(out); }
  void reset() { impl_->reset(); }

 private:
  struct Concept {
    virtual ~Concept() = default;
    virtual void update(Token token) = 0;
    virtual void update(std::span<const Token> tokens) = 0;
    virtual std::size_t predict(std::span<Token> out) const = 0;
    virtual void reset() = 0;
    [[nodiscard]] virtual std::unique_ptr<Concept> clone() const = 0;
  };
  template <Drafter D>
  struct Model final : Concept {
    explicit Model(D d) : drafter(std::move(d)) {}
    void update(Token token) override { drafter.update(token); }
    void update(std::span<const Token> tokens) override { drafter.update(tokens); }
    std::size_t predict(std::span<Token> out) const override { return drafter.predict(out); }
    void reset() override { drafter.reset(); }
    [[nodiscard]] std::unique_ptr<Concept> clone() const override { return std::make_unique<Model>(*this); }
    D drafter;
  };
  std::unique_ptr<Concept> impl_;
};

/// NGramPredictor configurations worth covering: the default, the smallest (bigrams over a
/// tiny window, one draft), long contexts, many drafts, and a window of exactly max_order.
[[nodiscard]] inline std::vector<NGramConfig> ngram_configs() {
  return {
      NGramConfig{},
      NGramConfig{.min_order = 2, .max_order = 2, .max_drafts = 1, .window = 8},
      NGramConfig{.min_order = 3, .max_order = 8, .max_drafts = 16, .window = 64},
      NGramConfig{.min_order = 2, .max_order = 5, .max_drafts = 64, .window = 4096},
      NGramConfig{.min_order = 2, .max_order = 3, .max_drafts = 8, .window = 3},
  };
}

/// A corpus of earlier outputs shared by every test's MatchDrafter with a corpus: built once,
/// never appended to afterwards, so every case sees the same corpus whatever ran before.
/// Records are the continuations of random rules (as random_rule draws them) after short
/// prompts, so some cases' models continue them and the drafts are accepted, and random tokens.
[[nodiscard]] inline const SharedCorpus& test_corpus() {
  static SharedCorpus corpus(SharedCorpus::bytes_for(4096));
  // SharedCorpus cannot be moved: filled in place, once, by the first call.
  [[maybe_unused]] static const bool filled = [] {
    std::mt19937_64 rng(20261122);
    for (int k = 0; k < 300; ++k) {
      const NamedRule rule = random_rule(rng);
      std::vector<Token> record(1 + rng() % 5);
      for (Token& t : record) t = static_cast<Token>(rng() % rule.vocab);
      if (rng() % 4 == 0) {
        for (std::size_t n = rng() % 30; n > 0; --n) record.push_back(static_cast<Token>(rng() % rule.vocab));
      } else {
        const std::vector<Token> continued = plain_greedy(rule.rule, record, rng() % 40);
        record.insert(record.end(), continued.begin(), continued.end());
      }
      corpus.append(record);
    }
    return true;
  }();
  return corpus;
}

/// The drafter a DecodeCase runs with.
enum class DrafterKind {
  ngram,         ///< NGramPredictor with DecodeCase::ngram
  silent,        ///< SilentDrafter
  wrong,         ///< WrongDrafter
  oracle,        ///< OracleDrafter, always right
  noisy_oracle,  ///< OracleDrafter, wrong now and then
  random,        ///< RandomDrafter
  liar_oracle,   ///< LiarDrafter over a noisy OracleDrafter claiming SIZE_MAX drafts
  liar_ngram,    ///< LiarDrafter over NGramPredictor claiming 7 drafts
  match_corpus,  ///< MatchDrafter with DecodeCase::match, drafting from test_corpus() on an empty match
  match_gate,    ///< MatchDrafter with DecodeCase::match and a gate (min_confidence > 0), every other seed with test_corpus()
};

/// Name of a drafter kind, for traces.
[[nodiscard]] constexpr const char* to_string(DrafterKind kind) noexcept {
  switch (kind) {
    case DrafterKind::ngram: return "ngram";
    case DrafterKind::silent: return "silent";
    case DrafterKind::wrong: return "wrong";
    case DrafterKind::oracle: return "oracle";
    case DrafterKind::noisy_oracle: return "noisy_oracle";
    case DrafterKind::random: return "random";
    case DrafterKind::liar_oracle: return "liar_oracle";
    case DrafterKind::liar_ngram: return "liar_ngram";
    case DrafterKind::match_corpus: return "match_corpus";
    case DrafterKind::match_gate: return "match_gate";
  }
  return "unknown";
}

/// One random generation scenario: a greedy rule and batch limit, a prompt, options and a
/// drafter, all derived from `seed` so a failing case is replayed from its seed alone.
struct DecodeCase {
  std::uint64_t seed = 0;
  NamedRule rule;
  std::size_t max_batch = 1;
  std::vector<Token> prompt;
  DecodeOptions options;
  DrafterKind drafter = DrafterKind::ngram;
  NGramConfig ngram;  ///< for DrafterKind::ngram and liar_ngram
  MatchConfig match;  ///< for DrafterKind::match_corpus and match_gate

  /// Everything about the case on one line, for SCOPED_TRACE.
  [[nodiscard]] std::string describe() const {
    std::string s = "seed=" + std::to_string(seed) + " rule=" + rule.name + " max_batch=" + std::to_string(max_batch) +
                    " prompt[" + std::to_string(prompt.size()) + "]={";
    // Appended piece by piece: GCC 12 at -O3 reports a false -Wrestrict for `"," + std::string`.
    for (std::size_t i = 0; i < prompt.size(); ++i) {
      if (i != 0) s += ',';
      s += std::to_string(prompt[i]);
    }
    s += "} max_new_tokens=" + std::to_string(options.max_new_tokens) + " stops={";
    for (std::size_t i = 0; i < options.stop_tokens.size(); ++i) {
      if (i != 0) s += ',';
      s += std::to_string(options.stop_tokens[i]);
    }
    s += "} max_context=" + std::to_string(options.max_context) + " speculate=" + (options.speculate ? "1" : "0") +
         " max_drafts=" + std::to_string(options.max_drafts) + " drafter=" + to_string(drafter);
    if (drafter == DrafterKind::ngram || drafter == DrafterKind::liar_ngram) {
      s += "(orders " + std::to_string(ngram.min_order) + ".." + std::to_string(ngram.max_order) + ", max_drafts " +
           std::to_string(ngram.max_drafts) + ", window " + std::to_string(ngram.window) + ")";
    }
    if (drafter == DrafterKind::match_corpus || drafter == DrafterKind::match_gate) {
      s += "(index_capacity " + std::to_string(match.index_capacity) + ", copy_min_match " +
           std::to_string(match.copy_min_match) + ", max_drafts " + std::to_string(match.max_drafts) +
           ", count_max_order " + std::to_string(match.count_max_order) + ", min_confidence " +
           std::to_string(match.min_confidence) + (drafter == DrafterKind::match_corpus || seed % 2 == 1 ? ", corpus)" : ")");
    }
    return s;
  }
};

/// The case of `seed`: prompts of 1..40 tokens (random, or a repeated motif with noise so
/// n-grams hit), max_batch in {1, 2, 3, 5, 8, 17, 4096, unlimited}, max_new_tokens 0..100,
/// up to 3 stop tokens, max_context 0 or prompt length + 0..110, speculation mostly on,
/// max_drafts from 0 to above kMaxDraftsPerPass, and any drafter kind (MatchDrafter configs
/// from a generator of their own).
[[nodiscard]] inline DecodeCase random_decode_case(std::uint64_t seed) {
  std::mt19937_64 rng(scramble(seed));
  const auto pick = [&rng](std::uint64_t lo, std::uint64_t hi) {
    return static_cast<std::size_t>(std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng));
  };
  DecodeCase c;
  c.seed = seed;
  c.rule = random_rule(rng);
  static constexpr std::size_t kBatches[] = {1, 2, 3, 5, 8, 17, 4096, GreedyModel::kUnlimitedBatch};
  c.max_batch = kBatches[pick(0, std::size(kBatches) - 1)];

  const std::size_t length = pick(0, 3) == 0 ? pick(1, 4) : pick(1, 40);
  const Token vocab = c.rule.vocab;
  if (pick(0, 1) == 0) {
    for (std::size_t i = 0; i < length; ++i) c.prompt.push_back(static_cast<Token>(pick(0, vocab - 1)));
  } else {
    std::vector<Token> motif(pick(1, 8));
    for (Token& t : motif) t = static_cast<Token>(pick(0, vocab - 1));
    for (std::size_t i = 0; i < length; ++i) {
      c.prompt.push_back(pick(0, 9) == 0 ? static_cast<Token>(pick(0, vocab - 1)) : motif[i % motif.size()]);
    }
  }

  DecodeOptions& o = c.options;
  switch (pick(0, 9)) {
    case 0: o.max_new_tokens = 0; break;
    case 1: o.max_new_tokens = 1; break;
    default: o.max_new_tokens = pick(2, 100);
  }
  if (pick(0, 1) == 0) {
    for (std::size_t n = pick(1, 3); n > 0; --n) o.stop_tokens.push_back(static_cast<Token>(pick(0, vocab - 1)));
  }
  if (pick(0, 1) == 0) o.max_context = c.prompt.size() + (pick(0, 9) == 0 ? 0 : pick(0, 110));
  o.speculate = pick(0, 6) != 0;
  static constexpr std::size_t kMaxDrafts[] = {64, 64, 0, 1, 2, 5, kMaxDraftsPerPass};
  o.max_drafts = kMaxDrafts[pick(0, std::size(kMaxDrafts) - 1)];

  c.drafter = static_cast<DrafterKind>(pick(0, 7));
  const std::vector<NGramConfig> configs = ngram_configs();
  c.ngram = configs[pick(0, configs.size() - 1)];
  // The MatchDrafter kinds replace one case in five, drawn from a generator of their own so
  // that every other case stays what it was before they existed.
  std::mt19937_64 match_rng(scramble(seed ^ 0x6d61746368ULL));
  const auto match_pick = [&match_rng](std::uint64_t lo, std::uint64_t hi) {
    return static_cast<std::size_t>(std::uniform_int_distribution<std::uint64_t>(lo, hi)(match_rng));
  };
  if (match_pick(0, 4) == 0) c.drafter = match_pick(0, 1) == 0 ? DrafterKind::match_corpus : DrafterKind::match_gate;
  static constexpr double kGates[] = {0.02, 0.1, 0.3, 0.6, 0.9};
  c.match.index_capacity = match_pick(0, 1) == 0 ? match_pick(4, 40) : 4096;
  c.match.copy_min_match = match_pick(1, 4);
  c.match.max_drafts = match_pick(1, 16);
  c.match.count_max_order = match_pick(2, MatchDrafter::kMaxCountOrder);
  c.match.min_confidence = c.drafter == DrafterKind::match_gate ? kGates[match_pick(0, std::size(kGates) - 1)] : 0;
  return c;
}

/// Calls `f` with a freshly built drafter of the case's kind (a different type per kind)
/// and returns what it returns.
template <class F>
decltype(auto) with_drafter(const DecodeCase& c, F&& f) {
  const NextTokenRule& rule = c.rule.rule;
  switch (c.drafter) {
    case DrafterKind::ngram: return f(NGramPredictor(c.ngram));
    case DrafterKind::silent: return f(SilentDrafter{});
    case DrafterKind::wrong: return f(WrongDrafter{});
    case DrafterKind::oracle: return f(OracleDrafter(rule));
    case DrafterKind::noisy_oracle: return f(OracleDrafter(rule, 1 + c.seed % 12, 150, c.seed));
    case DrafterKind::random: return f(RandomDrafter(c.seed, c.rule.vocab, 1 + c.seed % 9));
    case DrafterKind::liar_oracle:
      return f(
          LiarDrafter<OracleDrafter>(OracleDrafter(rule, 3, 100, c.seed), std::numeric_limits<std::size_t>::max()));
    case DrafterKind::liar_ngram: return f(LiarDrafter<NGramPredictor>(NGramPredictor(c.ngram), 7));
    case DrafterKind::match_corpus: return f(MatchDrafter(c.match, &test_corpus()));
    case DrafterKind::match_gate: return f(MatchDrafter(c.match, c.seed % 2 == 1 ? &test_corpus() : nullptr));
  }
  throw std::logic_error("with_drafter: unknown DrafterKind");
}

/// The case's drafter, freshly built, behind AnyDrafter.
[[nodiscard]] inline AnyDrafter make_any_drafter(const DecodeCase& c) {
  return with_drafter(c, [](auto drafter) { return AnyDrafter(std::move(drafter)); });
}

static_assert(Drafter<SilentDrafter>);
static_assert(Drafter<WrongDrafter>);
static_assert(Drafter<OracleDrafter>);
static_assert(Drafter<RandomDrafter>);
static_assert(Drafter<ScriptedDrafter>);
static_assert(Drafter<LiarDrafter<OracleDrafter>>);
static_assert(Drafter<RecordingDrafter<NGramPredictor>>);
static_assert(Drafter<ThrowingDrafter<NGramPredictor>>);
static_assert(Drafter<AnyDrafter>);
static_assert(Drafter<MatchDrafter>);

}  // namespace ngramspec::test
