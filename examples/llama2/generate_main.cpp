// ngramspec-generate: text generation from a llama2.c checkpoint, greedy or sampled, with n-gram speculation sized by
// the model's own measured verify cost.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
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
    "usage: ngramspec-generate --model M --tokenizer T --prompt TEXT [--steps N] [--k K] [--cost SPEC]\n"
    "                          [--no-speculate] [--check]\n"
    "                          [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--seed S]\n"
    "  --steps N       most tokens generated after the prompt (default 256; generation also stops on BOS and at\n"
    "                  the model's seq_len)\n"
    "  --k K           most drafts verified per pass, 1 to 1024 (default 16; 4 with --cost none)\n"
    "  --cost SPEC     what a verify pass costs against its tokens, which sizes each pass's drafts: the number\n"
    "                  (up to K) with the most expected tokens per unit of cost, from the drafter's estimates.\n"
    "                  measure (default): time this model's passes of 1 .. K+1 tokens at start and print the\n"
    "                  curve; knee:N: flat up to N tokens, then linear; table:1=1,2=1.9,...: measured points;\n"
    "                  none: no cost model, the drafter's own gate decides (MatchDrafter)\n"
    "  --no-speculate  plain decoding, one token per pass\n"
    "  --check         also decode plainly and report whether the outputs are identical, and the speedup: each\n"
    "                  decoding runs 3 times, alternating, and the median times are compared (the speculative\n"
    "                  runs use the same cost model)\n"
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

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
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

    // The cost model of whichever run speculates: measured here, given, or none.
    std::optional<ngramspec::VerifyCost> cost;
    std::string cost_line = "verify cost: none (drafts sized by the drafter's gate)";
    if (args.cost_source == GenerateOptions::Cost::given) {
      cost = args.cost;
      cost_line = "verify cost (given): " + cost->spec();
    } else if (args.cost_source == GenerateOptions::Cost::measure && (args.speculate || args.check)) {
      const auto start = std::chrono::steady_clock::now();
      cost = measure_pass_cost(model, args.k, args.sampling, 21, midway_context(prompt.size(), args.steps));
      const double ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      char took[64];
      std::snprintf(took, sizeof took, " (measured in %.0f ms)", ms);
      cost_line = "verify cost: " + cost->spec() + took;
    }

    const auto decode = [&](bool speculate) {
      return generate(model, prompt, args.steps, args.k, speculate, args.sampling, cost);
    };
    Generation run = decode(args.speculate);
    if (!args.check) {
      std::printf("%s%s\n\n", args.prompt.c_str(), tokenizer.decode(run.result.tokens, prompt.back()).c_str());
      if (args.speculate) std::printf("%s\n", cost_line.c_str());
      report(args.speculate ? "speculative" : "plain", run);
      return 0;
    }

    // --check: the other decoding too, each kCheckRuns times in the order A B B A A B (so that neither always
    // runs first, into caches the other has just warmed), every output compared with the first; median times.
    constexpr int kCheckRuns = 3;
    const bool order[] = {false, false, true, true, false};  // after the first run of A: true = A again
    std::vector<double> seconds_a = {run.seconds};
    std::vector<double> seconds_b;
    Generation other;
    bool same = true;
    for (const bool again : order) {
      const Generation g = decode(again ? args.speculate : !args.speculate);
      same = same && g.result.tokens == run.result.tokens;
      (again ? seconds_a : seconds_b).push_back(g.seconds);
      if (!again && seconds_b.size() == 1) other = g;
    }
    run.seconds = median(seconds_a);
    other.seconds = median(seconds_b);
    std::printf("%s%s\n\n", args.prompt.c_str(), tokenizer.decode(run.result.tokens, prompt.back()).c_str());
    std::printf("%s\n", cost_line.c_str());
    report(args.speculate ? "speculative" : "plain", run);
    report(args.speculate ? "plain" : "speculative", other);
    std::printf("outputs identical: %s", same ? "yes" : "no");
    if (other.seconds > 0 && run.seconds > 0) {
      const double plain = args.speculate ? other.seconds : run.seconds;
      const double spec = args.speculate ? run.seconds : other.seconds;
      std::printf(", speedup %.2fx (median times of %d runs each)", plain / spec, kCheckRuns);
    }
    std::printf("\n");
    if (!same) return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ngramspec-generate: %s\n", e.what());
    return 1;
  }
  return 0;
}
