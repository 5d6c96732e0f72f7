#include <cstdio>
#include <filesystem>
#include <vector>

#include <ngramspec/ngramspec.hpp>

using ngramspec::Token;

// A toy greedy model that recites a long text (token t is followed by 7t mod 1009); a real one
// runs the network here. Its requests quote text that a corpus file holds.
struct ReciterModel {
  void forward(std::size_t, std::span<const Token> tokens, std::span<Token> next) {
    for (std::size_t i = 0; i < tokens.size(); ++i) next[i] = tokens[i] * 7 % 1009;
  }
  void rollback(std::size_t) {}
  std::size_t max_batch() const { return 16; }
};

int main() {
  // Ahead of time (or with `ngramspec-corpus build`): the text that requests will quote.
  std::vector<Token> text = {3};
  while (text.size() < 1000) text.push_back(text.back() * 7 % 1009);
  const auto path = std::filesystem::temp_directory_path() / "ngramspec-example.ngc";
  ngramspec::CorpusBuilder builder;
  builder.add(text, /*stamp=*/1);
  builder.write(path);

  // In every server process: map it (microseconds; the page cache holds one copy for all).
  const ngramspec::MappedCorpus file(path);
  ngramspec::SharedCorpus live(64 << 20);  // this process's finished outputs, 64 MiB
  for (const bool with_file : {false, true}) {
    ReciterModel model;
    ngramspec::SpeculativeDecoder decoder(model, ngramspec::MatchDrafter({}, &live, with_file ? &file : nullptr));
    const ngramspec::DecodeResult result = decoder.generate({text[500], text[501]});
    std::printf("%s: %.2f tokens per pass\n", with_file ? "with the corpus file" : "without it",
                result.stats.mean_accepted_length());
  }
  std::filesystem::remove(path);
}
