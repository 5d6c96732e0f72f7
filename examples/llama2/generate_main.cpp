// ngramspec-generate: text generation from a llama2.c checkpoint, greedy or sampled, with n-gram speculation.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

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

struct Args {
  std::string model;
  std::string tokenizer;
  std::string prompt;
  bool has_prompt = false;
  std::size_t steps = 256;
  std::size_t k = 4;
  bool speculate = true;
  bool check = false;
  ngramspec::SamplingOptions sampling;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "ngramspec-generate: %s\n%s", message.c_str(), kUsage);
  std::exit(2);
}

std::size_t parse_count(std::string_view flag, const char* text) {
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (*text == '\0' || *text == '-' || *end != '\0') usage_error(std::string(flag) + " wants a number, got '" + text + "'");
  return static_cast<std::size_t>(value);
}

float parse_real(std::string_view flag, const char* text) {
  char* end = nullptr;
  const float value = std::strtof(text, &end);
  if (*text == '\0' || *end != '\0') usage_error(std::string(flag) + " wants a number, got '" + text + "'");
  return value;
}

Args parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    const auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage_error(std::string(flag) + " needs a value");
      return argv[++i];
    };
    if (flag == "--model") {
      args.model = value();
    } else if (flag == "--tokenizer") {
      args.tokenizer = value();
    } else if (flag == "--prompt") {
      args.prompt = value();
      args.has_prompt = true;
    } else if (flag == "--steps") {
      args.steps = parse_count(flag, value());
    } else if (flag == "--k") {
      args.k = parse_count(flag, value());
    } else if (flag == "--temperature") {
      args.sampling.temperature = parse_real(flag, value());
    } else if (flag == "--top-k") {
      args.sampling.top_k = parse_count(flag, value());
    } else if (flag == "--top-p") {
      args.sampling.top_p = parse_real(flag, value());
    } else if (flag == "--min-p") {
      args.sampling.min_p = parse_real(flag, value());
    } else if (flag == "--seed") {
      args.sampling.seed = parse_count(flag, value());
    } else if (flag == "--no-speculate") {
      args.speculate = false;
    } else if (flag == "--check") {
      args.check = true;
    } else if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else {
      usage_error("unknown argument '" + std::string(flag) + "'");
    }
  }
  if (args.model.empty() || args.tokenizer.empty() || !args.has_prompt) {
    usage_error("--model, --tokenizer and --prompt are required");
  }
  if (args.k == 0 || args.k > ngramspec::kMaxDraftsPerPass) {
    usage_error("--k must be between 1 and " + std::to_string(ngramspec::kMaxDraftsPerPass));
  }
  try {
    ngramspec::validate(args.sampling);
  } catch (const std::invalid_argument& e) {
    usage_error(e.what());
  }
  return args;
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
  const Args args = parse(argc, argv);
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
