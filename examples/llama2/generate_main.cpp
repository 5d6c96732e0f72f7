// ngramspec-generate: text generation from a llama2.c checkpoint, greedy or sampled, with n-gram speculation.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "generate_options.hpp"
#include "llama2_generate.hpp"
#include "llama2_model.hpp"
#include "llama2_tokenizer.hpp"

namespace {

constexpr const char* kUsage =
    "usage: ngramspec-generate --model M --tokenizer T --prompt TEXT [--steps N] [--k K] [--no-speculate] [--check]\n"
    "                          [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--seed S]\n"
    "  --steps N       most tokens generated after the prompt (default 256; generation also stops on BOS and at\n"
    "                  the model's seq_len)\n"
    "  --k K           most drafts verified per pass (default 4)\n"
    "  --no-speculate  plain decoding, one token per pass\n"
    "  --check         also decode plainly and report whether the outputs are identical\n"
    "  --temperature T sample at temperature T (default 0: greedy); --top-k K (0 = off), --top-p P and\n"
    "                  --min-p P filter the distribution; --seed S keys the randomness (default 0), so the same\n"
    "                  seed gives the same text with and without speculation\n";

// Exit code 2 and the usage for any mistake on the command line, 0 after --help.
ngramspec::llama2::GenerateOptions parse(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  ngramspec::llama2::GenerateOptions options;
  try {
    options = ngramspec::llama2::parse_generate_options(args);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "ngramspec-generate: %s\n%s", e.what(), kUsage);
    std::exit(2);
  }
  if (options.help) {
    std::fputs(kUsage, stdout);
    std::exit(0);
  }
  return options;
}

void report(const char* label, const ngramspec::llama2::Generation& run) {
  const ngramspec::DecodeStats& s = run.result.stats;
  std::printf("%s: %zu tokens in %.3f s, %.1f tokens/s, %zu passes (%zu prefill + %zu decode), "
              "mean accepted length %.2f, stop: %s\n",
              label, s.generated, run.seconds, run.seconds > 0 ? static_cast<double>(s.generated) / run.seconds : 0.0,
              s.prefill_passes + s.decode_passes, s.prefill_passes, s.decode_passes, s.mean_accepted_length(),
              ngramspec::to_string(run.result.stop_reason));
}

}  // namespace

int main(int argc, char** argv) {
  const ngramspec::llama2::GenerateOptions args = parse(argc, argv);
  try {
    using namespace ngramspec::llama2;
    Transformer model = Transformer::load(args.model, args.k + 1 > Transformer::kDefaultMaxBatch
                                                          ? args.k + 1
                                                          : Transformer::kDefaultMaxBatch);
    const Tokenizer tokenizer(args.tokenizer, model.vocab_size());
    const std::vector<ngramspec::Token> prompt = tokenizer.encode(args.prompt);
    const Generation run = generate(model, prompt, args.steps, args.k, args.speculate, args.sampling);

    std::printf("%s%s\n\n", args.prompt.c_str(), tokenizer.decode(run.result.tokens, prompt.back()).c_str());
    report(args.speculate ? "speculative" : "plain", run);
    if (args.check) {
      const Generation other = generate(model, prompt, args.steps, args.k, !args.speculate, args.sampling);
      report(args.speculate ? "plain" : "speculative", other);
      const bool same = other.result.tokens == run.result.tokens;
      std::printf("outputs identical: %s", same ? "yes" : "no");
      if (other.seconds > 0 && run.seconds > 0) {
        const double plain = args.speculate ? other.seconds : run.seconds;
        const double spec = args.speculate ? run.seconds : other.seconds;
        std::printf(", speedup %.2fx", plain / spec);
      }
      std::printf("\n");
      if (!same) return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ngramspec-generate: %s\n", e.what());
    return 1;
  }
  return 0;
}
