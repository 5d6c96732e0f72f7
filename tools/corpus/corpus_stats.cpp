#include "corpus_stats.hpp"

#include <algorithm>

namespace ngramspec::corpus_tool {

std::array<OrderStats, 3> order_stats(const MappedCorpus& corpus) {
  std::array<OrderStats, 3> stats{};
  for (std::size_t n = 1; n <= stats.size(); ++n) {
    stats[n - 1].order = n;
    stats[n - 1].ngrams = corpus.ngrams(n);
  }
  for (std::size_t r = 0; r < corpus.records(); ++r) {
    const std::uint64_t length = corpus.record(r).tokens.size();
    for (OrderStats& s : stats) {
      if (length >= s.order) s.occurrences += length - s.order + 1;
    }
  }
  return stats;
}

QueryStats query_stats(const MappedCorpus& corpus, std::span<const replay::TokenStream> queries) {
  QueryStats stats;
  std::array<Token, 1> first{};
  for (const replay::TokenStream& query : queries) {
    ++stats.records;
    const std::span<const Token> output = query.output;
    for (std::size_t at = 1; at < output.size(); ++at) {
      const std::size_t from = at > MappedCorpus::kMaxVerify ? at - MappedCorpus::kMaxVerify : 0;
      const CorpusMatch match = corpus.find(output.subspan(from, at - from));
      ++stats.positions;
      for (std::size_t n = 1; n <= stats.matched.size(); ++n) {
        if (match.length >= n) ++stats.matched[n - 1];
      }
      if (corpus.copy(match, first) == 1) {
        ++stats.drafted;
        if (first[0] == output[at]) ++stats.first_draft_hits;
      }
    }
  }
  return stats;
}

}  // namespace ngramspec::corpus_tool
