// How often a copy of the sequence's own earlier text is accepted, by the length of the match it
// continues: the measurements behind MatchDrafter's estimates for its copies (src/match_drafter.cpp,
// docs/ALGORITHM.md "Long copies").
//
//   build/release/bench/copy_acceptance [STREAMS.tsv ...]   (default: ../shared/data/specbench/streams.tsv)
//
// Along each recorded output, at every position where the drafter copies (its match is at least
// copy_min_match tokens), the copy is checked against the tokens that follow: draft j counts as a
// trial at continued length L + j when drafts 0..j-1 were all accepted, and as a hit when it is too.
// Every position starts a copy, as a pass could start there; a draft counts once per position.
//
// The same for copies of a corpus of earlier requests (a SharedCorpus holding the outputs of the
// records before, in file order, as the replay's corpus=64 does), by the length of the corpus match
// (up to MatchDrafter::kCorpusContext tokens) plus the drafts before: once over every position the
// corpus matches, once over those where the corpus match is longer than the sequence's own.

#include <cstddef>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "ngramspec/match_drafter.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "replay/token_streams.hpp"

namespace {

constexpr std::size_t kLongest = 256;  // lengths at or past it share the last row
// Rows: [first, next first) of continued length.
constexpr std::size_t kRows[] = {1, 2, 3, 4, 5, 7, 10, 16, 24, 32, 48, 64, 96, 128, 192, kLongest, kLongest + 1};

struct Tally {
  std::vector<double> trials = std::vector<double>(kLongest + 1);
  std::vector<double> hits = std::vector<double>(kLongest + 1);

  // Drafts `drafts` against the output from position i on, continuing a match of `match` tokens.
  void count(std::size_t match, std::span<const ngramspec::Token> drafts, std::span<const ngramspec::Token> output,
             std::size_t i) {
    for (std::size_t j = 0; j < drafts.size() && i + j < output.size(); ++j) {
      const std::size_t length = std::min(match + j, kLongest);
      trials[length] += 1;
      if (drafts[j] != output[i + j]) break;
      hits[length] += 1;
    }
  }

  void print(const char* title) const {
    std::printf("%s\n| continued length | drafts | accepted |\n|---|---:|---:|\n", title);
    for (std::size_t r = 0; r + 1 < std::size(kRows); ++r) {
      double t = 0;
      double h = 0;
      for (std::size_t l = kRows[r]; l < kRows[r + 1]; ++l) {
        t += trials[l];
        h += hits[l];
      }
      if (t == 0) continue;
      const std::string range = kRows[r] == kLongest             ? std::to_string(kLongest) + "+"
                                : kRows[r + 1] - 1 == kRows[r] ? std::to_string(kRows[r])
                                                               : std::to_string(kRows[r]) + "-" + std::to_string(kRows[r + 1] - 1);
      std::printf("| %s | %.0f | %.3f |\n", range.c_str(), t, h / t);
    }
  }
};

}  // namespace

int main(int argc, char** argv) try {
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) paths.emplace_back(argv[i]);
  if (paths.empty()) paths.emplace_back(NGRAMSPEC_SHARED_DIR "/data/specbench/streams.tsv");
  for (const std::string& path : paths) {
    std::FILE* probe = std::fopen(path.c_str(), "rb");
    if (probe == nullptr) {
      std::printf("skipped: %s not found (the shared data folder is not beside the project)\n", path.c_str());
      return 0;
    }
    std::fclose(probe);
    const std::vector<ngramspec::replay::TokenStream> streams = ngramspec::replay::read_streams(path);
    Tally sequence;
    Tally corpus;
    Tally corpus_longer;
    ngramspec::MatchConfig config;
    config.min_confidence = 0;  // every draft of the copy, ungated
    ngramspec::MatchDrafter drafter(config);
    ngramspec::SharedCorpus earlier(std::size_t{64} << 20);
    std::vector<ngramspec::Token> drafts(kLongest);
    std::vector<ngramspec::Token> context;
    constexpr std::size_t kContext = ngramspec::MatchDrafter::kCorpusContext;
    for (const ngramspec::replay::TokenStream& stream : streams) {
      drafter.reset();
      drafter.update(stream.prompt);
      context.assign(stream.prompt.begin(), stream.prompt.end());
      for (std::size_t i = 0; i < stream.output.size(); ++i) {
        const std::size_t match = drafter.match_length();
        if (match >= config.copy_min_match) {
          const std::size_t made = drafter.predict(drafts);
          sequence.count(match, std::span(drafts).first(made), stream.output, i);
        }
        const std::span<const ngramspec::Token> end =
            std::span<const ngramspec::Token>(context).last(std::min(context.size(), kContext));
        const ngramspec::CorpusDraft found = earlier.draft(end, drafts);
        if (found.count > 0) {
          const std::span<const ngramspec::Token> copied = std::span(drafts).first(found.count);
          corpus.count(found.match_length, copied, stream.output, i);
          if (found.match_length > match) corpus_longer.count(found.match_length, copied, stream.output, i);
        }
        drafter.update(stream.output[i]);
        context.push_back(stream.output[i]);
      }
      earlier.append(stream.output);
    }
    std::printf("# %s: %zu records; a copy's draft accepted, given the drafts before it were, by the length of\n"
                "# the match it continues (the match plus the drafts before it)\n",
                path.c_str(), streams.size());
    sequence.print("## a copy of the sequence's own text");
    corpus.print("## a copy of the corpus of earlier records' outputs");
    corpus_longer.print("## a copy of the corpus where its match is longer than the sequence's own");
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "copy_acceptance: %s\n", e.what());
  return 1;
}
