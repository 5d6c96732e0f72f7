#include <cstdio>
#include <vector>

#include <ngramspec/ngramspec.hpp>

using ngramspec::Token;

// A toy greedy model that counts 0, 1, ..., 9, 0, ...; a real one runs the network here.
struct CountingModel {
  std::size_t length = 0;  // tokens in the KV cache
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) {
    for (std::size_t i = 0; i < tokens.size(); ++i) next[i] = (tokens[i] + 1) % 10;
    length = pos + tokens.size();
  }
  void rollback(std::size_t pos) { length = pos; }
  std::size_t max_batch() const { return 16; }
};

int main() {
  CountingModel model;
  ngramspec::SpeculativeDecoder decoder(model);  // drafts with a MatchDrafter
  const std::vector<Token> prompt = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1};
  const ngramspec::DecodeResult result = decoder.generate(prompt);  // DecodeOptions: 128 new tokens
  std::printf("%zu tokens in %zu target passes: %.2f tokens per pass\n", result.stats.generated,
              result.stats.prefill_passes + result.stats.decode_passes, result.stats.mean_accepted_length());
}
