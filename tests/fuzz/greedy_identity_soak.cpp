// Nightly property run: greedy identity over many random cases.
//
// Each case (tests/support/test_drafters.hpp, random_decode_case) is a random greedy model and
// max_batch, prompt, stop tokens, max_new_tokens, max_context and drafter, NGramPredictor included;
// SpeculativeDecoder::generate must return plain greedy decoding's tokens and stop reason, keep the
// model contract, count its passes and tokens consistently, leave the model holding exactly what
// was kept, and return the same again when run a second time. A failing case prints its seed;
// `greedy_identity_soak --seed S --cases 1` replays it.
//
// Usage: greedy_identity_soak [--seed FIRST] [--cases N]   (defaults: 1, 100000)

#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "ngramspec/speculative_decoder.hpp"
#include "support/mock_models.hpp"
#include "support/test_drafters.hpp"

namespace ngramspec::test {
namespace {

// Why the case failed, or empty when it passed.
std::string run_case(std::uint64_t seed) {
  const DecodeCase c = random_decode_case(seed);
  const GreedyReference ref = plain_greedy(c.rule.rule, std::span<const Token>(c.prompt), c.options);
  return with_drafter(c, [&](auto drafter) -> std::string {
    GreedyModel model(c.rule.rule, c.max_batch);
    SpeculativeDecoder<GreedyModel, decltype(drafter)> decoder(model, std::move(drafter));
    const DecodeResult result = decoder.generate(c.prompt, c.options);
    if (!model.violations().empty()) return "model contract: " + model.violations().front();
    if (result.tokens != ref.tokens) {
      return "output differs from plain greedy decoding (" + std::to_string(result.tokens.size()) + " vs " +
             std::to_string(ref.tokens.size()) + " tokens)";
    }
    if (result.stop_reason != ref.stop_reason) {
      return std::string("stop reason ") + to_string(result.stop_reason) + ", expected " + to_string(ref.stop_reason);
    }
    const DecodeStats& s = result.stats;
    if (s.generated != result.tokens.size()) return "stats.generated != output size";
    if (s.prefill_passes + s.decode_passes != model.forward_calls()) return "passes != forward calls";
    if (s.accepted > s.drafted) return "accepted > drafted";
    if (!result.tokens.empty() && s.decode_passes + 1 > s.generated) return "more passes than tokens";
    // The model keeps the prompt and every emitted token but the last.
    std::vector<Token> kept;
    if (!result.tokens.empty()) {
      kept = c.prompt;
      kept.insert(kept.end(), result.tokens.begin(), result.tokens.end() - 1);
    }
    if (model.history() != kept) return "the model does not hold exactly the prompt and the kept output";
    // A second generation on the same decoder and model starts fresh.
    const DecodeResult again = decoder.generate(c.prompt, c.options);
    if (again.tokens != result.tokens || again.stop_reason != result.stop_reason) {
      return "a second generate() differs from the first";
    }
    if (!model.violations().empty()) return "model contract, second generate: " + model.violations().front();
    return {};
  });
}

bool parse_number(const char* text, std::uint64_t& value) {
  const std::string_view word(text);
  const auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
  return ec == std::errc() && ptr == word.data() + word.size();
}

}  // namespace
}  // namespace ngramspec::test

int main(int argc, char** argv) {
  std::uint64_t first = 1;
  std::uint64_t cases = 100'000;
  for (int i = 1; i < argc; i += 2) {
    const std::string_view arg(argv[i]);
    std::uint64_t* target = arg == "--seed" ? &first : arg == "--cases" ? &cases : nullptr;
    if (target == nullptr || i + 1 >= argc || !ngramspec::test::parse_number(argv[i + 1], *target)) {
      std::fprintf(stderr, "usage: %s [--seed FIRST] [--cases N]\n", argv[0]);
      return 2;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t failures = 0;
  std::uint64_t ran = 0;
  for (std::uint64_t seed = first; seed < first + cases; ++seed) {
    ++ran;
    std::string why;
    try {
      why = ngramspec::test::run_case(seed);
    } catch (const std::exception& e) {
      why = std::string("exception: ") + e.what();
    }
    if (!why.empty()) {
      ++failures;
      std::fprintf(stderr,
                   "FAIL seed %llu: %s\n  case: %s\n  replay: %s --seed %llu "
                   "--cases 1\n",
                   static_cast<unsigned long long>(seed), why.c_str(),
                   ngramspec::test::random_decode_case(seed).describe().c_str(), argv[0],
                   static_cast<unsigned long long>(seed));
      if (failures >= 10) break;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("greedy identity: %llu cases from seed %llu, %llu failed, %.1f s\n", static_cast<unsigned long long>(ran),
              static_cast<unsigned long long>(first), static_cast<unsigned long long>(failures), seconds);
  return failures == 0 ? 0 : 1;
}
