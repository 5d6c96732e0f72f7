#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "ngramspec/sampling_options.hpp"

namespace ngramspec::llama2 {

/// The command line of ngramspec-generate, parsed and checked (see its --help).
struct GenerateOptions {
  bool help = false;       ///< --help / -h: print the usage and do nothing else
  std::string model;       ///< --model: required, non-empty
  std::string tokenizer;   ///< --tokenizer: required, non-empty
  std::string prompt;      ///< --prompt: required (may be empty)
  std::size_t steps = 256;  ///< --steps
  std::size_t k = 4;        ///< --k: 1 .. kMaxDraftsPerPass
  bool speculate = true;    ///< false with --no-speculate
  bool check = false;       ///< --check
  SamplingOptions sampling;  ///< --temperature, --top-k, --top-p, --min-p, --seed; passes validate()
};

/// Parses the arguments after the program name. Throws std::invalid_argument naming the option
/// and the value for an unknown option, a missing or malformed value (a number with a sign,
/// spaces, trailing characters, out of range, or not finite), a missing required option, or
/// options that fail their checks. Stops at --help, returning what it parsed with `help` set.
[[nodiscard]] GenerateOptions parse_generate_options(std::span<const std::string_view> args);

}  // namespace ngramspec::llama2
