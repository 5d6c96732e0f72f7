#include "ngramspec/match_drafter.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "ngramspec/detail/fnv1a.hpp"

namespace ngramspec {
namespace {

[[noreturn]] void invalid(const char* field, std::size_t value, const std::string& requirement) {
  throw std::invalid_argument(std::string("ngramspec::MatchConfig: ") + field + " = " + std::to_string(value) +
                              " is invalid: " + requirement);
}

// The counts need a window of at least their longest order.
constexpr std::size_t kMinCap = MatchDrafter::kMaxCountOrder;

MatchConfig validated(MatchConfig config) {
  if (config.cap < kMinCap) invalid("cap", config.cap, "must be at least " + std::to_string(kMinCap));
  if (config.cap > MatchDrafter::kMaxCap) {
    invalid("cap", config.cap, "must be at most " + std::to_string(MatchDrafter::kMaxCap));
  }
  if (config.copy_min_match == 0) invalid("copy_min_match", config.copy_min_match, "must be at least 1");
  if (config.draft_count == 0) invalid("draft_count", config.draft_count, "must be at least 1");
  if (config.count_max_order < 2 || config.count_max_order > MatchDrafter::kMaxCountOrder) {
    invalid("count_max_order", config.count_max_order,
            "must be between 2 and " + std::to_string(MatchDrafter::kMaxCountOrder));
  }
  return config;
}

}  // namespace

MatchDrafter::MatchDrafter(MatchConfig config)
    : config_(validated(config)),
      tokens_(config_.cap),
      counts_(NGramConfig{.min_order = 2,
                          .max_order = config_.count_max_order,
                          .draft_count = config_.draft_count,
                          .window = config_.cap}) {
  // Each indexed position ends at most one n-gram of each order: no table holds more than cap entries.
  for (detail::OpenTable<LastEnd>& table : last_) table = detail::OpenTable<LastEnd>(config_.cap);
}

void MatchDrafter::reset() noexcept {
  for (detail::OpenTable<LastEnd>& table : last_) table.clear();
  counts_.reset();
  indexed_ = 0;
  seen_ = 0;
  length_ = 0;
  end_ = 0;
}

void MatchDrafter::update(std::span<const Token> tokens) noexcept {
  for (const Token token : tokens) update(token);
}

void MatchDrafter::update(Token token) noexcept {
  // The most recent earlier occurrence followed by `token` is the most recent occurrence of
  // the match extended by it, so extending keeps both properties of the match.
  const bool extends = length_ > 0 && end_ < indexed_ && tokens_[end_] == token;
  const bool indexes = indexed_ < config_.cap;
  if (indexes) tokens_[indexed_++] = token;
  recent_[static_cast<std::size_t>(seen_) & (kMaxVerify - 1)] = token;
  ++seen_;
  counts_.update(token);
  // hashes[n - 1]: FNV-1a of the last n tokens read newest first, so that one pass of
  // kAnchorOrder steps yields every order (read oldest first, each would need its own pass).
  const std::size_t orders = static_cast<std::size_t>(std::min<std::uint64_t>(kAnchorOrder, seen_));
  std::array<std::uint64_t, kAnchorOrder> hashes{};
  std::uint64_t hash = detail::kFnvOffsetBasis;
  for (std::size_t n = 1; n <= orders; ++n) hashes[n - 1] = hash = detail::fnv1a_step(hash, recent(n - 1));
  if (extends) {
    ++length_;
    ++end_;
  } else {
    re_anchor(std::span<const std::uint64_t>(hashes.data(), orders));  // before this end is stamped: no self-match
  }
  if (indexes) {
    for (std::size_t n = 1; n <= orders; ++n) {
      last_[n - 1].find_or_insert(hashes[n - 1]).end = static_cast<std::uint32_t>(indexed_);
    }
  }
}

void MatchDrafter::re_anchor(std::span<const std::uint64_t> hashes) noexcept {
  length_ = 0;
  end_ = 0;
  for (std::size_t n = hashes.size(); n >= 1; --n) {
    const LastEnd* found = last_[n - 1].find(hashes[n - 1]);
    if (found == nullptr) continue;
    const std::size_t end = found->end;
    // Compare the tokens, so that a hash collision costs a shorter anchor, never a false one.
    std::size_t length = 0;
    while (length < kMaxVerify && length < end && length < seen_ && tokens_[end - 1 - length] == recent(length)) {
      ++length;
    }
    if (length < n) continue;
    length_ = length;
    end_ = end;
    return;
  }
}

std::size_t MatchDrafter::predict(std::span<Token> out) const noexcept {
  const std::size_t n = std::min(out.size(), config_.draft_count);
  if (n == 0 || seen_ == 0) return 0;
  if (length_ == 0 || length_ < config_.copy_min_match) return counts_.predict(out.first(n));
  // While nothing is beyond the index, position indexed_ + j of the sequence extended by the
  // drafts is draft j; beyond the cap the index is not the sequence's end, so the copy stops.
  const bool whole = seen_ == indexed_;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t from = end_ + i;
    if (from < indexed_) {
      out[i] = tokens_[from];
    } else if (whole) {
      out[i] = out[from - indexed_];  // from - indexed_ < i: end_ < indexed_
    } else {
      return i;
    }
  }
  return n;
}

std::size_t MatchDrafter::memory_bytes() const noexcept {
  std::size_t bytes = sizeof(*this) + tokens_.capacity() * sizeof(Token) + counts_.memory_bytes() - sizeof(counts_);
  for (const detail::OpenTable<LastEnd>& table : last_) bytes += table.memory_bytes();
  return bytes;
}

}  // namespace ngramspec
