#pragma once

// The drafting rule that SharedCorpus and MappedCorpus share, over any index of latest n-gram
// ends: one implementation, so that a saved corpus drafts exactly as the live one did.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "ngramspec/corpus_draft.hpp"
#include "ngramspec/detail/fnv1a.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec::detail {

/// The FNV-1a hashes of a context's last 1, 2 and 3 tokens, read newest first (so each
/// continues the one before); `orders` of them are set.
struct SuffixHashes {
  std::array<std::uint64_t, kCorpusMaxOrder> of{};
  std::size_t orders = 0;
};

[[nodiscard]] inline SuffixHashes suffix_hashes(std::span<const Token> context) noexcept {
  SuffixHashes hashes;
  hashes.orders = std::min(kCorpusMaxOrder, context.size());
  std::uint64_t hash = kFnvOffsetBasis;
  for (std::size_t n = 1; n <= hashes.orders; ++n) {
    hashes.of[n - 1] = hash = fnv1a_step(hash, context[context.size() - n]);
  }
  return hashes;
}

/// The hash of the `order` tokens before position `end` (at(p) is the token at p), read newest
/// first: the key a corpus indexes that n-gram by.
template <class At>
[[nodiscard]] std::uint64_t ngram_hash(const At& at, std::uint64_t end, std::size_t order) noexcept {
  std::uint64_t hash = kFnvOffsetBasis;
  for (std::size_t back = 1; back <= order; ++back) hash = fnv1a_step(hash, at(end - back));
  return hash;
}

/// The most recent occurrence of the longest suffix (3, then 2, then 1 tokens) of `context`
/// (its last kCorpusMaxVerify tokens) in `index`, measured backwards within one record. `index`
/// gives end_of(order, key) (the latest end stored for the key, 0 when none), at(position),
/// starts_record(position), oldest() and written() (the positions held are [oldest, written)).
/// An end outside what is held is skipped, and a match shorter than the n-gram it was found by
/// (a hash or fingerprint shared with another n-gram) falls back to a shorter suffix.
/// With a `hint` (an end, 0: none), the match ending there is measured too and wins when it is
/// longer: a match followed from one lookup to the next stays on its record while that record
/// goes on matching, where the most recent occurrence of the last 3 tokens may lie in another.
template <class Index>
[[nodiscard]] CorpusMatch longest_suffix_match(const Index& index, std::span<const Token> context,
                                               const SuffixHashes& hashes, std::uint64_t hint = 0) noexcept {
  if (context.size() > kCorpusMaxVerify) context = context.last(kCorpusMaxVerify);
  const std::uint64_t oldest = index.oldest();
  const auto measure = [&](std::uint64_t end) {
    std::size_t length = 0;
    while (length < context.size() && end - length > oldest && (length == 0 || !index.starts_record(end - length)) &&
           index.at(end - 1 - length) == context[context.size() - 1 - length]) {
      ++length;
    }
    return length;
  };
  CorpusMatch hinted;
  if (hint > oldest && hint <= index.written()) hinted = CorpusMatch{measure(hint), hint};
  if (hinted.length == 0) hinted = {};
  for (std::size_t n = hashes.orders; n >= 1; --n) {
    const std::uint64_t end = index.end_of(n, hashes.of[n - 1]);
    if (end < oldest + n || end > index.written()) continue;
    const std::size_t length = measure(end);
    if (length >= n) return hinted.length > length ? hinted : CorpusMatch{length, end};
  }
  return hinted;
}

/// Copies what follows `match` in `index`, up to the end of its record or out.size().
template <class Index>
[[nodiscard]] std::size_t copy_after(const Index& index, const CorpusMatch& match, std::span<Token> out) noexcept {
  if (match.length == 0) return 0;
  std::size_t count = 0;
  const std::uint64_t written = index.written();
  while (count < out.size()) {
    const std::uint64_t from = match.end + count;
    if (from >= written || index.starts_record(from)) break;
    out[count++] = index.at(from);
  }
  return count;
}

}  // namespace ngramspec::detail
