#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "ngramspec/token.hpp"

namespace ngramspec::replay {

/// One recorded generation: what the model was given and what it answered.
struct TokenStream {
  std::string id;
  std::string category;
  std::vector<Token> prompt;
  std::vector<Token> output;
};

/// Parses the streams TSV format (one record per line: id, category, prompt ids, output ids,
/// TAB-separated; ids space-separated). Throws std::runtime_error naming the source, the line
/// and what is wrong. Empty lines are skipped.
[[nodiscard]] std::vector<TokenStream> parse_streams(std::istream& in, std::string_view source_name);
/// Reads a streams TSV file; throws std::runtime_error when it cannot be opened (a directory
/// included) or parsed, and std::invalid_argument ("FILE: no records") when it holds no record.
[[nodiscard]] std::vector<TokenStream> read_streams(const std::string& path);

/// Parameters of a synthetic stream set.
struct SyntheticSpec {
  std::string kind;             ///< "periodic", "random" or "mixture"
  std::size_t period = 0;       ///< periodic / mixture: the repeated unit's length
  double noise = 0.0;           ///< periodic: probability that a token is replaced by a random one
  std::size_t output_length = 2048;
  std::size_t samples = 4;
  std::uint64_t seed = 1;
  std::size_t vocab = 32000;
};

/// Parses "periodic:P[:noise]", "random" or "mixture:P"; throws std::invalid_argument.
[[nodiscard]] SyntheticSpec parse_synthetic(std::string_view text);

/// Builds the streams of a synthetic spec. Periodic streams repeat a random unit of `period`
/// tokens, the prompt holding the first two periods so the output is measured after them;
/// random streams draw uniformly from the vocabulary (prompt of 64 tokens); mixtures alternate
/// fresh random runs with copies of earlier runs of `period` tokens.
[[nodiscard]] std::vector<TokenStream> make_synthetic(const SyntheticSpec& spec);

}  // namespace ngramspec::replay
