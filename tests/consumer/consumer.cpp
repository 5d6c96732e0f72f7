// The program every consumer project builds. It decodes through the library as an engine
// would, so it needs the public headers and links the compiled predictor; it returns 0 when
// speculation drafted, accepted and still produced the plain greedy output.

#include <cstdio>
#include <span>
#include <stdexcept>
#include <vector>

#include <ngramspec/ngramspec.hpp>

namespace {

using ngramspec::Token;

// A greedy model that cycles through 8 tokens; it checks the positions the decoder uses.
class CycleModel {
 public:
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) {
    if (pos != length_ || tokens.size() > max_batch()) throw std::logic_error("bad forward");
    for (std::size_t i = 0; i < tokens.size(); ++i) next[i] = (tokens[i] + 1) % 8;
    length_ = pos + tokens.size();
  }
  void rollback(std::size_t pos) {
    if (pos > length_) throw std::logic_error("bad rollback");
    length_ = pos;
  }
  [[nodiscard]] std::size_t max_batch() const noexcept { return 8; }

 private:
  std::size_t length_ = 0;
};

}  // namespace

int main() {
#ifdef NGRAMSPEC_PACKAGE_VERSION
  // find_package's version must be the one the headers declare.
  static_assert(ngramspec::kVersionMajor * 10000 + ngramspec::kVersionMinor * 100 + ngramspec::kVersionPatch ==
                    NGRAMSPEC_PACKAGE_VERSION,
                "the CMake package version and ngramspec/version.hpp disagree");
#endif
  const std::vector<Token> prompt = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1};
  ngramspec::DecodeOptions options;
  options.max_new_tokens = 40;

  CycleModel model;
  ngramspec::SpeculativeDecoder decoder(model);
  const ngramspec::DecodeResult speculative = decoder.generate(prompt, options);
  options.speculate = false;
  const ngramspec::DecodeResult plain = decoder.generate(prompt, options);

  const bool ok = speculative.tokens == plain.tokens && speculative.tokens.size() == options.max_new_tokens &&
                  speculative.stats.accepted > 0 && speculative.stats.decode_passes < plain.stats.decode_passes;
  std::printf("%s: %zu tokens, %zu verify passes speculative vs %zu plain, %zu drafts accepted\n",
              ok ? "ok" : "FAILED", speculative.tokens.size(), speculative.stats.decode_passes,
              plain.stats.decode_passes, speculative.stats.accepted);
  return ok ? 0 : 1;
}
