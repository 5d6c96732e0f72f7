// Fuzz target: the replay tool's input parsers on arbitrary bytes.
//
// parse_streams (the streams TSV) and parse_synthetic (the --synthetic spec) must return or throw
// std::runtime_error / std::invalid_argument, never crash or read out of bounds (ASan); what they
// return must be well formed, and a parsed synthetic spec must build streams of the promised shape.

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "fuzz_input.hpp"
#include "token_streams.hpp"

namespace ngramspec::test {
namespace {

void check_streams(std::string_view text) {
  std::istringstream in{std::string(text)};
  try {
    for (const replay::TokenStream& stream : replay::parse_streams(in, "fuzz")) {
      if (stream.id.empty() || stream.category.empty() || stream.prompt.empty() || stream.output.empty()) {
        fuzz_fail("parse_streams returned a stream with an empty field");
      }
      if (stream.id.find('\t') != std::string::npos || stream.category.find('\t') != std::string::npos) {
        fuzz_fail("parse_streams kept a TAB inside a field");
      }
    }
  } catch (const std::runtime_error&) {
  }
}

void check_synthetic(std::string_view text, std::size_t output_length) {
  replay::SyntheticSpec spec;
  try {
    spec = replay::parse_synthetic(text);
  } catch (const std::invalid_argument&) {
    return;
  }
  if (spec.kind != "random" && spec.kind != "periodic" && spec.kind != "mixture") {
    fuzz_fail("parse_synthetic accepted an unknown kind");
  }
  if (spec.kind != "random" && spec.period < 2) fuzz_fail("parse_synthetic accepted a period below 2");
  if (!(spec.noise >= 0.0 && spec.noise <= 1.0)) fuzz_fail("parse_synthetic accepted a noise outside [0, 1]");
  // Long periods are valid but slow to build; the shape is what is checked here.
  if (spec.period > 512) return;
  spec.output_length = output_length;
  spec.samples = 2;
  spec.vocab = 4 + output_length % 64;
  for (const replay::TokenStream& stream : replay::make_synthetic(spec)) {
    if (stream.output.size() != output_length) fuzz_fail("make_synthetic's output is not output_length tokens");
    if (stream.prompt.empty()) fuzz_fail("make_synthetic made an empty prompt");
    for (const auto* part : {&stream.prompt, &stream.output}) {
      for (const Token t : *part) {
        if (t < 3 || t >= spec.vocab) fuzz_fail("make_synthetic made a token outside [3, vocab)");
      }
    }
  }
}

}  // namespace
}  // namespace ngramspec::test

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ngramspec::test::FuzzInput in(data, size);
  const std::uint8_t mode = in.byte();
  const auto rest = in.rest();
  const std::string_view text(reinterpret_cast<const char*>(rest.data()), rest.size());
  if ((mode & 1) == 0) {
    ngramspec::test::check_streams(text);
  } else {
    ngramspec::test::check_synthetic(text, 1 + mode / 2);
  }
  return 0;
}
