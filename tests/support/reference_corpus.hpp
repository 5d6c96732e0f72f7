#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <random>
#include <span>
#include <vector>

#include "ngramspec/shared_corpus.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec::test {

/// What SharedCorpus::draft returned: its count and match length, and the drafts themselves.
struct Drafted {
  std::size_t count = 0;
  std::size_t match_length = 0;
  std::vector<Token> tokens;  // the first `count` of out
  std::uint64_t end = 0;      // the position after the match (0: none)
  // What was drafted; where the match ended is left out, as a corpus file numbers its positions
  // otherwise than the live corpus it was saved from.
  bool operator==(const Drafted& other) const {
    return count == other.count && match_length == other.match_length && tokens == other.tokens;
  }
};

inline std::ostream& operator<<(std::ostream& os, const Drafted& d) {
  os << "{count " << d.count << ", match_length " << d.match_length << ", end " << d.end << ", tokens [";
  for (std::size_t i = 0; i < d.tokens.size(); ++i) os << (i == 0 ? "" : " ") << d.tokens[i];
  return os << "]}";
}

/// A token no draft may write: marks the part of `out` past the drafts.
inline constexpr Token kUntouched = 0xDEADBEEFU;

/// Calls corpus.draft() (a SharedCorpus or a MappedCorpus) with `room` slots and checks that
/// it wrote nothing past its count.
template <class Corpus>
Drafted draft(const Corpus& corpus, std::span<const Token> context, std::size_t room) {
  std::vector<Token> out(room, kUntouched);
  const CorpusDraft found = corpus.draft(context, out);
  EXPECT_LE(found.count, room);
  for (std::size_t j = std::min(found.count, room); j < room; ++j) {
    EXPECT_EQ(out[j], kUntouched) << "draft() wrote past its count at " << j;
  }
  out.resize(std::min(found.count, room));
  return Drafted{found.count, found.match_length, out, found.end};
}

/// SharedCorpus::draft with a hint, checked as draft() above.
inline Drafted draft(const SharedCorpus& corpus, std::span<const Token> context, std::size_t room, std::uint64_t hint) {
  std::vector<Token> out(room, kUntouched);
  const CorpusDraft found = corpus.draft(context, out, hint);
  EXPECT_LE(found.count, room);
  for (std::size_t j = std::min(found.count, room); j < room; ++j) {
    EXPECT_EQ(out[j], kUntouched) << "draft() wrote past its count at " << j;
  }
  out.resize(std::min(found.count, room));
  return Drafted{found.count, found.match_length, out, found.end};
}

/// `length` tokens drawn uniformly from [0, vocab).
inline std::vector<Token> random_tokens(std::mt19937_64& rng, std::size_t length, Token vocab) {
  std::vector<Token> tokens(length);
  for (Token& t : tokens) t = static_cast<Token>(rng() % vocab);
  return tokens;
}

/// SharedCorpus's documented semantics, computed naively: every token appended since the last
/// clear with the number of its record; the corpus holds the last `capacity` of them. draft()
/// scans backwards for the most recent end of the context's last 3, then 2, then 1 tokens lying
/// in one record and in what is held; with a hint, the match ending there wins when longer.
class NaiveCorpus {
 public:
  explicit NaiveCorpus(std::size_t capacity) : capacity_(capacity) {}

  void append(std::span<const Token> record) {
    if (record.empty()) return;
    for (const Token t : record) {
      tokens_.push_back(t);
      record_of_.push_back(records_);
    }
    ++records_;
  }

  void clear() {
    tokens_.clear();
    record_of_.clear();
    records_ = 0;
  }

  [[nodiscard]] std::size_t oldest() const { return tokens_.size() - std::min(tokens_.size(), capacity_); }
  [[nodiscard]] std::size_t size() const { return tokens_.size() - oldest(); }
  [[nodiscard]] std::size_t appended() const { return tokens_.size(); }
  [[nodiscard]] std::size_t records() const { return records_; }

  /// What SharedCorpus::draft finds for `context` with `room` slots (never busy), and with `hint`.
  [[nodiscard]] Drafted draft(std::span<const Token> context, std::size_t room, std::uint64_t hint = 0) const {
    // draft() does no lookup when there is no room for a draft, so it reports no match either.
    if (context.empty() || room == 0) return {};
    if (context.size() > SharedCorpus::kMaxVerify) context = context.last(SharedCorpus::kMaxVerify);
    const std::size_t total = tokens_.size();
    const std::size_t first = oldest();
    // The match ending at `end`, measured backwards within the record of the token before it.
    const auto measure = [&](std::size_t end) {
      const std::size_t record = record_of_[end - 1];
      std::size_t length = 0;
      while (length < context.size() && length < end - first && record_of_[end - 1 - length] == record &&
             tokens_[end - 1 - length] == context[context.size() - 1 - length]) {
        ++length;
      }
      return length;
    };
    const auto drafted = [&](std::size_t end, std::size_t length) {
      Drafted found;
      found.match_length = length;
      found.end = end;
      const std::size_t record = record_of_[end - 1];
      for (std::size_t from = end; found.tokens.size() < room && from < total && record_of_[from] == record; ++from) {
        found.tokens.push_back(tokens_[from]);
      }
      found.count = found.tokens.size();
      return found;
    };
    const std::size_t hinted = hint > first && hint <= total ? measure(static_cast<std::size_t>(hint)) : 0;
    for (std::size_t n = std::min<std::size_t>(3, context.size()); n >= 1; --n) {
      for (std::size_t end = total; end >= first + n; --end) {
        if (record_of_[end - n] != record_of_[end - 1]) continue;
        if (!std::equal(tokens_.begin() + static_cast<std::ptrdiff_t>(end - n),
                        tokens_.begin() + static_cast<std::ptrdiff_t>(end),
                        context.end() - static_cast<std::ptrdiff_t>(n))) {
          continue;
        }
        const std::size_t length = measure(end);
        return hinted > length ? drafted(static_cast<std::size_t>(hint), hinted) : drafted(end, length);
      }
    }
    return hinted > 0 ? drafted(static_cast<std::size_t>(hint), hinted) : Drafted{};
  }

 private:
  std::size_t capacity_;
  std::vector<Token> tokens_;
  std::vector<std::size_t> record_of_;
  std::size_t records_ = 0;
};

}  // namespace ngramspec::test
