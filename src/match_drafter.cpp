#include "ngramspec/match_drafter.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>

#include "ngramspec/argument_error.hpp"
#include "ngramspec/detail/fnv1a.hpp"
#include "ngramspec/detail/number_text.hpp"
#include "ngramspec/detail/prefetch.hpp"

namespace ngramspec {
namespace {

[[noreturn]] void invalid(const char* field, std::size_t value, const std::string& requirement) {
  throw ArgumentError("ngramspec::MatchConfig", std::string(field) + " = " + std::to_string(value) + " is invalid: " + requirement);
}

// The counts need a window of at least their longest order.
constexpr std::size_t kMinIndexCapacity = MatchDrafter::kMaxCountOrder;

MatchConfig validated(MatchConfig config) {
  if (config.index_capacity < kMinIndexCapacity) {
    invalid("index_capacity", config.index_capacity, "must be at least " + std::to_string(kMinIndexCapacity));
  }
  if (config.index_capacity > MatchDrafter::kMaxIndexCapacity) {
    invalid("index_capacity", config.index_capacity,
            "must be at most " + std::to_string(MatchDrafter::kMaxIndexCapacity));
  }
  if (config.count_window != 0 &&
      (config.count_window < kMinIndexCapacity || config.count_window > MatchDrafter::kMaxIndexCapacity)) {
    invalid("count_window", config.count_window,
            "must be 0 (the index capacity) or between " + std::to_string(kMinIndexCapacity) + " and " +
                std::to_string(MatchDrafter::kMaxIndexCapacity));
  }
  if (config.copy_min_match == 0) invalid("copy_min_match", config.copy_min_match, "must be at least 1");
  if (config.max_drafts == 0) invalid("max_drafts", config.max_drafts, "must be at least 1");
  if (config.count_max_order < 2 || config.count_max_order > MatchDrafter::kMaxCountOrder) {
    invalid("count_max_order", config.count_max_order,
            "must be between 2 and " + std::to_string(MatchDrafter::kMaxCountOrder));
  }
  if (!(config.min_confidence >= 0 && config.min_confidence < 1)) {
    throw ArgumentError("ngramspec::MatchConfig",
                        "min_confidence = " + detail::number_text(config.min_confidence) +
                            " is invalid: must be in [0, 1)");
  }
  if (config.vocab_size > (std::uint64_t{1} << 32)) {
    throw ArgumentError("ngramspec::MatchConfig",
                        "vocab_size = " + std::to_string(config.vocab_size) +
                            " is invalid: must be 0 (unknown) or at most 2^32 (tokens are 32-bit)");
  }
  switch (config.corpus_preference) {
    case CorpusPreference::longer_match:
    case CorpusPreference::live:
    case CorpusPreference::file:
      break;
    default:
      invalid("corpus_preference", static_cast<std::size_t>(config.corpus_preference),
              "must be longer_match (0), live (1) or file (2)");
  }
  return config;
}

// The gate's estimates: the fraction of drafts of each class that the model accepted, given
// that every earlier draft of the pass was accepted, measured by replaying the Spec-Bench
// streams (docs/ALGORITHM.md, "The gate"). A class is the source, the length of the match
// the draft continues (the match plus the drafts before it), bucketed, and for counts the
// share of the context's occurrences that the drafted token followed.
constexpr std::array<std::size_t, 7> kLengthBucketEnds = {1, 2, 3, 4, 6, 9, 15};  // the last bucket is > 15
constexpr std::size_t kLengthBuckets = kLengthBucketEnds.size() + 1;

// bucket_of_length[L] for L <= 15, the last bucket's lower bound: a lookup instead of a search.
constexpr std::array<std::uint8_t, kLengthBucketEnds.back() + 1> kBucketOfLength = [] {
  std::array<std::uint8_t, kLengthBucketEnds.back() + 1> buckets{};
  std::size_t b = 0;
  for (std::size_t length = 0; length < buckets.size(); ++length) {
    while (length > kLengthBucketEnds[b]) ++b;
    buckets[length] = static_cast<std::uint8_t>(b);
  }
  return buckets;
}();

std::size_t length_bucket(std::size_t length) noexcept {
  return length < kBucketOfLength.size() ? kBucketOfLength[length] : kLengthBuckets - 1;
}

// [length bucket]: a copy of the sequence's own earlier text, and of the corpus.
constexpr std::array<double, kLengthBuckets> kSequenceCopyAccepted = {0.264, 0.487, 0.607, 0.652,
                                                                       0.718, 0.809, 0.866, 0.956};
// A copy of the sequence's own text past 15 tokens, finer: the longer the match, the likelier the
// copy goes on (a repeat that has run l tokens ends at the next one with a chance that falls
// about as 1.8 / l; docs/ALGORITHM.md, "Long copies"), which is what makes a long draft worth a
// pass whose every extra token costs. Measured as the buckets above, by
// bench/copy_acceptance on the Spec-Bench streams. The last is the gate's ceiling.
constexpr std::array<std::size_t, 5> kLongCopyBucketEnds = {23, 31, 47, 63, 127};  // the last bucket is > 127
constexpr std::array<double, kLongCopyBucketEnds.size() + 1> kLongCopyAccepted = {0.906, 0.936, 0.955,
                                                                                   0.958, 0.990, 0.995};

// [length] for lengths up to 127, beyond which the estimate is the last bucket's: one load per draft.
constexpr std::array<double, kLongCopyBucketEnds.back() + 1> kCopyEstimateOfLength = [] {
  std::array<double, kLongCopyBucketEnds.back() + 1> estimates{};
  std::size_t b = 0;
  for (std::size_t length = 0; length < estimates.size(); ++length) {
    if (length <= kLengthBucketEnds.back()) {
      estimates[length] = kSequenceCopyAccepted[kBucketOfLength[length]];
      continue;
    }
    while (length > kLongCopyBucketEnds[b]) ++b;
    estimates[length] = kLongCopyAccepted[b];
  }
  return estimates;
}();

double sequence_copy_estimate(std::size_t length) noexcept {
  return length < kCopyEstimateOfLength.size() ? kCopyEstimateOfLength[length] : kLongCopyAccepted.back();
}
constexpr std::array<double, kLengthBuckets> kCorpusCopyAccepted = {0.123, 0.242, 0.327, 0.376,
                                                                     0.424, 0.578, 0.741, 0.812};
// A copy of the corpus past 15 tokens (measured since the corpus is handed up to kCorpusContext
// tokens of the sequence's end, so a match can show itself longer than 15): the same hazard as the
// sequence's own copies, by the same buckets (bench/copy_acceptance, "a copy of the corpus"). Until
// then the one bucket > 15 stood for every long match, and the planner saw an earlier answer that
// the request repeats word for word as worth no more than a 16-token match.
constexpr std::array<double, kLongCopyBucketEnds.size() + 1> kLongCorpusCopyAccepted = {0.930, 0.931, 0.956,
                                                                                         0.989, 0.993, 0.995};
constexpr std::size_t kLongCorpusMatch = MatchDrafter::kLongCorpusMatch;
static_assert(kLongCorpusMatch == kLengthBucketEnds.back() + 1, "the long corpus copies begin past the short buckets");

std::size_t long_copy_bucket(std::size_t length) noexcept {
  std::size_t b = 0;
  while (b < kLongCopyBucketEnds.size() && length > kLongCopyBucketEnds[b]) ++b;
  return b;
}

double corpus_copy_estimate(std::size_t length) noexcept {
  return length < kLongCorpusMatch ? kCorpusCopyAccepted[kBucketOfLength[length]]
                                   : kLongCorpusCopyAccepted[long_copy_bucket(length)];
}
// [length bucket][share]: the counts. Shares: the context was seen once; every occurrence
// agreed; >= 70% did; >= 50%; less.
constexpr std::size_t kShares = 5;
constexpr std::array<std::array<double, kShares>, kLengthBuckets> kCountsAccepted = {{
    {0.358, 0.680, 0.476, 0.244, 0.159},
    {0.489, 0.812, 0.517, 0.276, 0.161},
    {0.638, 0.888, 0.654, 0.358, 0.199},
    {0.736, 0.918, 0.781, 0.349, 0.161},
    {0.750, 0.930, 0.753, 0.369, 0.243},
    {0.796, 0.927, 0.747, 0.412, 0.192},
    {0.851, 0.945, 0.583, 0.426, 0.314},
    {0.875, 0.945, 0.583, 0.426, 0.314},
}};

// The estimate classes a kept first draft names: a copy of a corpus by length bucket, then the
// counts by length bucket and share, then a long copy of a corpus by its bucket.
constexpr std::size_t kCountClasses = kLengthBuckets;  // the first of the counts' classes
constexpr std::size_t kLongCorpusClasses = kCountClasses + kLengthBuckets * kShares;
static_assert(kLongCorpusClasses + kLongCorpusCopyAccepted.size() <= 256, "a class is kept in 8 bits");

std::size_t corpus_class(std::size_t match_length) noexcept {
  return match_length < kLongCorpusMatch ? length_bucket(match_length)
                                         : kLongCorpusClasses + long_copy_bucket(match_length);
}

double class_estimate(std::size_t estimate_class) noexcept {
  if (estimate_class < kCountClasses) return kCorpusCopyAccepted[estimate_class];
  if (estimate_class >= kLongCorpusClasses) return kLongCorpusCopyAccepted[estimate_class - kLongCorpusClasses];
  const std::size_t counts = estimate_class - kCountClasses;
  return kCountsAccepted[counts / kShares][counts % kShares];
}

// A kept first draft: kept, drafted, the class (8 bits) and the token.
constexpr std::uint64_t kKept = std::uint64_t{1} << 63;
constexpr std::uint64_t kDrafted = std::uint64_t{1} << 62;

std::size_t share_class(DraftEvidence evidence) noexcept {
  const std::uint64_t count = evidence.count;
  const std::uint64_t total = evidence.total;
  if (total <= 1) return 0;
  if (count == total) return 1;
  if (10 * count >= 7 * total) return 2;
  if (2 * count >= total) return 3;
  return 4;
}

// The calibration: the estimates are scaled by how the sequence's first drafts have fared
// against them over a memory of about kMemory tokens. Fewer hits than estimated: each estimate e
// becomes e · (hits + kPrior) / (expected hits + kPrior). More: the chance of a miss shrinks
// instead, 1 - e becoming (1 - e) · (misses + kPrior) / (expected misses + kPrior), so that a
// sequence more predictable than the average raises an estimate of 0.5 much and one of 0.99
// little, never past the truth that every copy ends somewhere (scaling e itself would carry a
// long copy's 0.99 to the ceiling and the planner into passes that lose: docs/ALGORITHM.md).
constexpr double kPrior = 2;
constexpr double kMemory = 128;
constexpr double kDecay = 1 - 1 / kMemory;
constexpr double kMaxEstimate = 0.995;

// How many of `made` drafts pass the gate: the longest prefix whose running product of
// scaled estimates stays at or above min_confidence. With `probabilities`, each kept draft's
// running product is written there.
// (Calibration is MatchDrafter's own; deduced here, never named.)
template <class Calibration, class Estimate>
std::size_t gated(double min_confidence, Calibration scale, std::size_t made, const Estimate& estimate,
                  std::span<float> probabilities) noexcept {
  const bool report = !probabilities.empty();
  if (min_confidence <= 0 && !report) return made;
  double chance = 1;
  for (std::size_t j = 0; j < made; ++j) {
    const double e = estimate(j);
    chance *= std::min(kMaxEstimate, scale.hits < 1 ? e * scale.hits : 1 - (1 - e) * scale.misses);
    if (chance < min_confidence) return j;
    if (report) probabilities[j] = static_cast<float>(chance);
  }
  return made;
}

}  // namespace

MatchDrafter::MatchDrafter(MatchConfig config, const SharedCorpus* corpus, const MappedCorpus* file)
    : config_(validated(config)),
      corpus_(corpus),
      file_(file),
      tokens_(config_.index_capacity),
      counts_(NGramConfig{.min_order = 2,
                          .max_order = config_.count_max_order,
                          .max_drafts = config_.max_drafts,
                          .window = config_.count_window == 0
                                        ? config_.index_capacity
                                        : std::min(config_.count_window, config_.index_capacity)}) {
  if (file_ != nullptr) file_->check_vocabulary(CorpusVocabulary{config_.vocab_size, config_.tokenizer_fingerprint});
  // Each indexed position ends at most one n-gram of each order: no table holds more than
  // index_capacity entries.
  for (detail::LastEndTable& table : last_) table = detail::LastEndTable(config_.index_capacity);
}

void MatchDrafter::reset() noexcept {
  restart();
  hits_ = 0;
  expected_ = 0;
  trials_ = 0;
}

void MatchDrafter::restart() noexcept {
  for (detail::LastEndTable& table : last_) table.clear();
  counts_.reset();
  indexed_ = 0;
  seen_ = 0;
  length_ = 0;
  end_ = 0;
  first_draft_.value.store(0, std::memory_order_relaxed);
  corpus_end_.value.store(0, std::memory_order_relaxed);
  file_end_.value.store(0, std::memory_order_relaxed);
}

void MatchDrafter::update(std::span<const Token> tokens) noexcept {
  for (const Token token : tokens) update(token);
}

void MatchDrafter::update(Token token) noexcept {
  // next[n]: FNV-1a of the last n tokens, this one included. The counts extend the same hashes
  // of their contexts, so one pass of steps serves both (the counts' own reach is
  // count_max_order; the index's is kAnchorOrder).
  NGramPredictor::SuffixHashes next;
  counts_.next_suffix(token, next);
  for (std::size_t n = config_.count_max_order + 1; n <= kAnchorOrder; ++n) {
    next[n] = detail::fnv1a_step(counts_.suffix_[n - 1], token);
  }
  // Orders longer than the sequence would repeat a shorter order's hash: not indexed.
  const std::size_t orders = static_cast<std::size_t>(std::min<std::uint64_t>(kAnchorOrder, seen_ + 1));
  const std::span<const std::uint64_t> hashes(&next[1], orders);  // hashes[n - 1]: the last n tokens
  // The most recent earlier occurrence followed by `token` is the most recent occurrence of
  // the match extended by it, so extending keeps both properties of the match.
  const bool extends = length_ > 0 && end_ < indexed_ && tokens_[end_] == token;
  const bool indexes = indexed_ < config_.index_capacity;
  // At long contexts the tables miss the cache: their slots load while the gate's scoring and
  // the counts' update run.
  std::array<std::size_t, kAnchorOrder> homes{};  // where each order's probe begins
  for (std::size_t n = 1; n <= orders; ++n) homes[n - 1] = last_[n - 1].home(hashes[n - 1]);
  if (!extends || indexes) {
    for (std::size_t n = 1; n <= orders; ++n) last_[n - 1].prefetch(homes[n - 1]);
  }
  // Calibrated whether or not it gates: the estimates predict() reports need the scale too.
  if (seen_ > 0) calibrate(token);
  if (indexes) tokens_[indexed_++] = token;
  recent_[static_cast<std::size_t>(seen_) & (kMaxVerify - 1)] = token;
  ++seen_;
  counts_.update(token, next);
  // Re-anchoring reads the tables (each probe stamps this end and returns the end it held, so
  // no self-match) and then the index at those ends, a second miss at long contexts: their
  // first lines start loading before the comparisons.
  std::array<std::uint32_t, kAnchorOrder> ends{};
  const auto end = static_cast<std::uint32_t>(indexed_);
  if (!extends) {
    for (std::size_t n = 1; n <= orders; ++n) {
      ends[n - 1] = indexes ? last_[n - 1].exchange(hashes[n - 1], homes[n - 1], end)
                            : last_[n - 1].find(hashes[n - 1], homes[n - 1]);
      if (ends[n - 1] != 0) detail::prefetch(&tokens_[ends[n - 1] - 1]);
    }
  } else if (indexes) {
    for (std::size_t n = 1; n <= orders; ++n) last_[n - 1].store(hashes[n - 1], homes[n - 1], end);
  }
  if (extends) {
    ++length_;
    ++end_;
  } else {
    re_anchor(std::span<const std::uint32_t>(ends.data(), orders));
  }
}

void MatchDrafter::re_anchor(std::span<const std::uint32_t> ends) noexcept {
  length_ = 0;
  end_ = 0;
  for (std::size_t n = ends.size(); n >= 1; --n) {
    const std::size_t end = ends[n - 1];
    if (end == 0) continue;
    // Compare the tokens, so that a fingerprint collision costs a shorter anchor, never a false one.
    const auto recent_tokens = static_cast<std::size_t>(std::min<std::uint64_t>(seen_, kMaxVerify));
    const std::size_t limit = std::min(end, recent_tokens);
    std::size_t length = 0;
    while (length < limit && tokens_[end - 1 - length] == recent(length)) ++length;
    if (length < n) continue;
    length_ = length;
    end_ = end;
    return;
  }
}

std::size_t MatchDrafter::predict(std::span<Token> out) const noexcept { return draft(out, {}); }

std::size_t MatchDrafter::predict(std::span<Token> out, std::span<float> probabilities) const noexcept {
  if (probabilities.size() < out.size()) out = out.first(probabilities.size());
  return draft(out, probabilities.first(out.size()));
}

std::size_t MatchDrafter::draft(std::span<Token> out, std::span<float> probabilities) const noexcept {
  const std::size_t n = std::min(out.size(), config_.max_drafts);
  if (n == 0 || seen_ == 0) return 0;
  if (!probabilities.empty()) probabilities = probabilities.first(n);
  std::size_t made = 0;
  if (consults_corpus()) {
    made = draft_from_corpus(out.first(n), probabilities);
  } else if (length_ == 0 || length_ < config_.copy_min_match) {
    made = draft_from_counts(out.first(n), probabilities);
  } else {
    made = copy_from_sequence(out.first(n), probabilities);
  }
  return within_vocabulary(out, made);
}

std::size_t MatchDrafter::within_vocabulary(std::span<const Token> drafts, std::size_t made) const noexcept {
  if (config_.vocab_size == 0) return made;
  for (std::size_t j = 0; j < made; ++j) {
    if (drafts[j] >= config_.vocab_size) {
      dropped_.value.fetch_add(made - j, std::memory_order_relaxed);
      return j;
    }
  }
  return made;
}

std::size_t MatchDrafter::copy_from_sequence(std::span<Token> out, std::span<float> probabilities) const noexcept {
  // While nothing is beyond the index, position indexed_ + j of the sequence extended by the
  // drafts is draft j; beyond index_capacity the index is not the sequence's end, so the copy
  // stops at the index's end.
  const bool whole = seen_ == indexed_;
  const std::size_t made = whole ? out.size() : std::min(out.size(), indexed_ - end_);
  if (made < out.size()) {
    // Cut short by the frozen index: the counts slide with the sequence and may see further
    // (a short repeat in recent text, say). Which drafts more is decided before either's gate.
    CountEvidence evidence;
    const std::size_t counted = count_chain(out, evidence, !probabilities.empty());
    if (counted > made) return gate_counts(counted, evidence, probabilities);
  }
  for (std::size_t j = 0; j < made; ++j) {
    const std::size_t from = end_ + j;
    out[j] = from < indexed_ ? tokens_[from] : out[from - indexed_];  // from - indexed_ < j: end_ < indexed_
  }
  return gated(
      config_.min_confidence, scale(), made,
      [&](std::size_t j) { return sequence_copy_estimate(length_ + j); }, probabilities);
}

CorpusDraft MatchDrafter::ask_corpus(std::span<Token> out, bool follow) const noexcept {
  std::array<Token, kCorpusContext> context{};
  const std::size_t have = static_cast<std::size_t>(std::min<std::uint64_t>(seen_, kCorpusContext));
  for (std::size_t i = 0; i < have; ++i) context[i] = recent(have - 1 - i);
  const std::span<const Token> end(context.data(), have);
  // Each corpus's lookup is hinted with where its last one (predict()'s) matched, moved on by the
  // tokens seen since; predict() keeps where this one matched.
  const auto hint = [&](const RelaxedAtomic& last_end, const RelaxedAtomic& last_seen) -> std::uint64_t {
    const std::uint64_t at = last_end.value.load(std::memory_order_relaxed);
    return at == 0 ? 0 : at + (seen_ - last_seen.value.load(std::memory_order_relaxed));
  };
  const auto keep = [&](RelaxedAtomic& last_end, RelaxedAtomic& last_seen, std::uint64_t at) {
    if (!follow) return;
    last_end.value.store(at, std::memory_order_relaxed);
    last_seen.value.store(seen_, std::memory_order_relaxed);
  };
  const auto ask_live = [&] {
    const CorpusDraft live = corpus_->draft(end, out, hint(corpus_end_, corpus_seen_));
    if (!live.busy) keep(corpus_end_, corpus_seen_, live.end);
    return live;
  };
  const auto find_in_file = [&] {
    const CorpusMatch match = file_->find(end, hint(file_end_, file_seen_));
    keep(file_end_, file_seen_, match.end);
    return match;
  };
  if (file_ == nullptr) return ask_live();
  const auto from_file = [&](const CorpusMatch& match) {
    CorpusDraft found;
    found.match_length = match.length;
    found.end = match.end;
    found.count = file_->copy(match, out);
    return found;
  };
  if (corpus_ == nullptr) return from_file(find_in_file());
  switch (config_.corpus_preference) {
    case CorpusPreference::live: {
      const CorpusDraft live = ask_live();
      return live.count > 0 ? live : from_file(find_in_file());
    }
    case CorpusPreference::file: {
      const CorpusMatch in_file = find_in_file();
      return in_file.length > 0 ? from_file(in_file) : ask_live();
    }
    case CorpusPreference::longer_match:
      break;
  }
  const CorpusMatch in_file = find_in_file();
  const CorpusDraft live = ask_live();
  if (live.count > 0 && live.match_length >= in_file.length) return live;
  // A match at the very end of a record copies nothing; then the live draft (still in out) stands.
  const CorpusDraft copied = from_file(in_file);
  return copied.count > 0 ? copied : live;
}

bool MatchDrafter::consults_corpus() const noexcept {
  // With a match of its own as long as the corpus is handed, the sequence's copy is as good as any.
  return (corpus_ != nullptr || file_ != nullptr) && length_ < kCorpusContext;
}

bool MatchDrafter::prefers(const CorpusDraft& draft) const noexcept {
  return draft.count > 0 && (length_ == 0 || (draft.match_length >= kLongCorpusMatch && draft.match_length > length_));
}

std::size_t MatchDrafter::draft_from_corpus(std::span<Token> out, std::span<float> probabilities) const noexcept {
  const CorpusDraft draft = ask_corpus(out, true);
  if (!prefers(draft)) {
    // Beyond index_capacity the counts may know a token the frozen index does not.
    if (length_ == 0 || length_ < config_.copy_min_match) return draft_from_counts(out, probabilities);
    return copy_from_sequence(out, probabilities);
  }
  remember_first_draft(true, out[0], corpus_class(draft.match_length));
  return gated(
      config_.min_confidence, scale(), draft.count,
      [&](std::size_t j) { return corpus_copy_estimate(draft.match_length + j); }, probabilities);
}

std::size_t MatchDrafter::count_chain(std::span<Token> out, CountEvidence& evidence, bool estimate) const noexcept {
  if (config_.min_confidence <= 0 && !estimate) return counts_.predict(out);
  return counts_.predict(out, evidence);  // at most kMaxGatedCountDrafts
}

std::size_t MatchDrafter::gate_counts(std::size_t made, const CountEvidence& evidence,
                                      std::span<float> probabilities) const noexcept {
  return gated(
      config_.min_confidence, scale(), made,
      [&](std::size_t j) { return kCountsAccepted[length_bucket(length_ + j)][share_class(evidence[j])]; },
      probabilities);
}

std::size_t MatchDrafter::draft_from_counts(std::span<Token> out, std::span<float> probabilities) const noexcept {
  CountEvidence evidence;  // written by count_chain for every draft it makes; only those are read
  const bool estimate = !probabilities.empty();
  const std::size_t made = count_chain(out, evidence, estimate);
  if (config_.min_confidence > 0 || estimate) {  // else no evidence to class the first draft by
    remember_first_draft(made > 0, made > 0 ? out[0] : 0,
                         made > 0 ? kCountClasses + length_bucket(length_) * kShares + share_class(evidence[0]) : 0);
  }
  return gate_counts(made, evidence, probabilities);
}

void MatchDrafter::remember_first_draft(bool drafted, Token token, std::size_t estimate_class) const noexcept {
  first_draft_.value.store(kKept | (drafted ? kDrafted : 0) | (std::uint64_t{estimate_class} << 32) | token,
                           std::memory_order_relaxed);
}

MatchDrafter::Calibration MatchDrafter::scale() const noexcept {
  return {.hits = (hits_ + kPrior) / (expected_ + kPrior),
          .misses = (trials_ - hits_ + kPrior) / (trials_ - expected_ + kPrior)};
}

void MatchDrafter::calibrate(Token token) noexcept {
  // predict()'s first draft, without the gate, and its estimate: from the corpus when the
  // sequence has no match and the corpus has one; else a copy of the match; else the counts
  // (also beyond index_capacity, where a match can run to the end of the index).
  Token first = 0;
  double estimate = 0;
  const std::uint64_t kept = first_draft_.value.load(std::memory_order_relaxed);
  if (kept != 0) {
    // predict() drafted from this state: its first draft, as computed then.
    first_draft_.value.store(0, std::memory_order_relaxed);
    if ((kept & kDrafted) == 0) return;
    first = static_cast<Token>(kept);
    estimate = class_estimate(static_cast<std::size_t>(kept >> 32) & 0xffU);
    hits_ = hits_ * kDecay + (first == token ? 1 : 0);
    expected_ = expected_ * kDecay + estimate;
    trials_ = trials_ * kDecay + 1;
    return;
  }
  CorpusDraft from_corpus;
  if (consults_corpus()) from_corpus = ask_corpus(std::span<Token>(&first, 1));
  if (prefers(from_corpus)) {
    estimate = corpus_copy_estimate(from_corpus.match_length);
  } else if (length_ != 0 && length_ >= config_.copy_min_match && end_ < indexed_) {
    first = tokens_[end_];
    estimate = sequence_copy_estimate(length_);
  } else {
    DraftEvidence evidence{};
    if (!counts_.first_draft(first, evidence)) return;
    estimate = kCountsAccepted[length_bucket(length_)][share_class(evidence)];
  }
  hits_ = hits_ * kDecay + (first == token ? 1 : 0);
  expected_ = expected_ * kDecay + estimate;
  trials_ = trials_ * kDecay + 1;
}

std::size_t MatchDrafter::memory_bytes() const noexcept {
  std::size_t bytes = sizeof(*this) + tokens_.capacity() * sizeof(Token) + counts_.memory_bytes() - sizeof(counts_);
  for (const detail::LastEndTable& table : last_) bytes += table.memory_bytes();
  return bytes;
}

}  // namespace ngramspec
