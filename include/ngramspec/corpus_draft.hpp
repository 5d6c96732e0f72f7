#pragma once

// What a corpus's lookup finds, shared by the corpus file (MappedCorpus) and the live corpus
// (SharedCorpus) above it: the file layer names it here, so it never reaches up for it.

#include <cstddef>
#include <cstdint>

namespace ngramspec {

namespace detail {
/// Longest n-gram a corpus indexes and looks up first.
inline constexpr std::size_t kCorpusMaxOrder = 3;
/// Longest match a corpus measures.
inline constexpr std::size_t kCorpusMaxVerify = 64;
}  // namespace detail

/// Where a corpus's longest suffix match ended: the match's length and the position after it.
struct CorpusMatch {
  std::size_t length = 0;  ///< tokens of the context matched (0: none)
  std::uint64_t end = 0;   ///< position after the match in the corpus (0 with no match); what follows it is the draft
};

/// What a corpus's draft() found (SharedCorpus::draft, MappedCorpus::draft).
struct CorpusDraft {
  std::size_t count = 0;         ///< drafts written
  std::size_t match_length = 0;  ///< tokens of the context that matched the corpus (0: no match)
  bool busy = false;             ///< an append or clear held the corpus, so nothing was looked up
  /// Since 0.3: the position after the match in the corpus (0: no match). A later lookup may pass
  /// it, advanced by the tokens observed since, as its hint (SharedCorpus::draft).
  std::uint64_t end = 0;
};

}  // namespace ngramspec
