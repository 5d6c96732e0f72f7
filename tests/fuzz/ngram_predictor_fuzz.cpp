// Fuzz target: NGramPredictor against the naive ReferenceNGram.
//
// The input decodes into a configuration (orders 2..4 up to 8, a window of max_order to 64 tokens,
// 1..10 drafts a call) and a script of update(token), update(span), predict and reset over a small
// vocabulary; every predict must equal the reference's, and the predictor's size and memory must
// stay within their bounds.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <span>
#include <vector>

#include "fuzz_input.hpp"
#include "ngramspec/ngram_predictor.hpp"
#include "support/reference_ngram.hpp"

namespace ngramspec::test {
namespace {

// Most tokens one update(span) or predict takes in the script.
constexpr std::size_t kMaxRun = 16;

void print_tokens(const char* name, std::span<const Token> tokens) {
  std::fprintf(stderr, "%s[%zu] =", name, tokens.size());
  for (const Token t : tokens) std::fprintf(stderr, " %u", static_cast<unsigned>(t));
  std::fprintf(stderr, "\n");
}

[[noreturn]] void mismatch(const NGramConfig& config, std::size_t step, const ReferenceNGram& reference,
                           std::span<const Token> got, std::span<const Token> expected) {
  std::fprintf(stderr, "config: orders %zu..%zu, max_drafts %zu, window %zu; script step %zu\n", config.min_order,
               config.max_order, config.max_drafts, config.window, step);
  print_tokens("observed since reset", reference.history());
  print_tokens("predictor", got);
  print_tokens("reference", expected);
  fuzz_fail("NGramPredictor::predict differs from ReferenceNGram::predict");
}

void run(FuzzInput& in) {
  NGramConfig config;
  config.min_order = in.in_range(2, 4);
  config.max_order = in.in_range(config.min_order, NGramPredictor::kMaxSupportedOrder);
  config.window = in.in_range(config.max_order, 64);
  config.max_drafts = in.in_range(1, 10);
  // Few distinct tokens, so n-grams repeat; sometimes at the top of the id range, where a hash or a
  // sentinel that assumes small ids would break.
  const Token vocab = static_cast<Token>(in.in_range(1, 8));
  const Token base = in.flag() ? Token{0xFFFFFFFFU} - 7 : 0;

  NGramPredictor predictor(config);
  ReferenceNGram reference(config);
  const std::size_t memory = predictor.memory_bytes();
  std::vector<Token> run_tokens;
  Token got[kMaxRun + 4];
  Token expected[kMaxRun + 4];

  for (std::size_t step = 0; !in.empty(); ++step) {
    const std::uint8_t op = in.byte();
    switch (op % 8) {
      case 0:
      case 1:
      case 2: {
        const Token t = base + static_cast<Token>((op >> 3) % vocab);
        predictor.update(t);
        reference.update(t);
        break;
      }
      case 3: {
        run_tokens.resize(in.in_range(0, kMaxRun));
        for (Token& t : run_tokens) t = base + static_cast<Token>(in.byte() % vocab);
        predictor.update(std::span<const Token>(run_tokens));
        reference.update(std::span<const Token>(run_tokens));
        break;
      }
      case 4:
      case 5:
      case 6: {
        // Room from none to more than max_drafts; filler shows a write past the count.
        const std::size_t room = (op >> 3) % (kMaxRun + 1);
        std::fill(std::begin(got), std::end(got), Token{0xABABABABU});
        const std::size_t n = predictor.predict(std::span<Token>(got, room));
        const std::size_t m = reference.predict(std::span<Token>(expected, room));
        if (n > room || n > config.max_drafts) fuzz_fail("predict returned more than it had room for");
        for (std::size_t i = n; i < kMaxRun + 4; ++i) {
          if (got[i] != 0xABABABABU) fuzz_fail("predict wrote past the drafts it returned");
        }
        if (n != m || !std::equal(got, got + n, expected)) {
          mismatch(config, step, reference, std::span<const Token>(got, n), std::span<const Token>(expected, m));
        }
        break;
      }
      default:
        // Rarely a reset, so most scripts build long streams that wrap the window.
        if ((op >> 3) % 4 == 0) {
          predictor.reset();
          reference.reset();
        }
        break;
    }
    if (predictor.tokens_seen() != reference.tokens_seen()) fuzz_fail("tokens_seen() disagrees with the reference");
    if (predictor.size() > predictor.max_size()) fuzz_fail("size() is above max_size()");
    if (predictor.memory_bytes() != memory) fuzz_fail("memory_bytes() changed after construction");
  }
}

}  // namespace
}  // namespace ngramspec::test

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ngramspec::test::FuzzInput in(data, size);
  ngramspec::test::run(in);
  return 0;
}
