#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "ngramspec/mapped_corpus.hpp"
#include "token_streams.hpp"

namespace ngramspec::corpus_tool {

/// N-grams of one order in a corpus file.
struct OrderStats {
  std::size_t order = 0;
  std::uint64_t ngrams = 0;       ///< distinct n-grams stored in the file's table
  std::uint64_t occurrences = 0;  ///< n-grams lying inside one record, repeats counted
  /// The share of occurrences that repeat an earlier one: 1 - ngrams / occurrences (0 when none).
  [[nodiscard]] double hit_rate() const noexcept {
    return occurrences == 0 || ngrams >= occurrences ? 0.0
                                                     : 1.0 - static_cast<double>(ngrams) / static_cast<double>(occurrences);
  }
};

/// The n-grams of 1, 2 and 3 tokens of `corpus`.
[[nodiscard]] std::array<OrderStats, 3> order_stats(const MappedCorpus& corpus);

/// How a corpus drafts for query records' outputs: at every position of an output after its
/// first token, its tokens so far (the last MappedCorpus::kMaxVerify) are looked up.
struct QueryStats {
  std::uint64_t records = 0;
  std::uint64_t positions = 0;
  std::array<std::uint64_t, 3> matched{};  ///< positions matched by at least 1, 2, 3 tokens
  std::uint64_t drafted = 0;               ///< positions with a draft (a match not at a record's end)
  std::uint64_t first_draft_hits = 0;      ///< positions whose first drafted token is the next one

  [[nodiscard]] double share(std::uint64_t count) const noexcept {
    return positions == 0 ? 0.0 : static_cast<double>(count) / static_cast<double>(positions);
  }
};

[[nodiscard]] QueryStats query_stats(const MappedCorpus& corpus, std::span<const replay::TokenStream> queries);

}  // namespace ngramspec::corpus_tool
