// ngramspec-llama2-bench: what a verify pass of k+1 tokens costs next to a one-token pass, and what n-gram
// speculation buys end to end on the stories260K checkpoint. Prints tables; medians of several runs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "llama2_generate.hpp"
#include "llama2_model.hpp"
#include "llama2_tokenizer.hpp"

namespace {

using ngramspec::Token;
using namespace ngramspec::llama2;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Median time of one forward of n tokens at position `context`, for n = 1 .. max_k + 1, over `runs` rounds.
// The rounds interleave the widths so that a slow spell of a shared machine hits them all alike.
std::vector<double> pass_times(Transformer& model, std::size_t context, std::size_t max_k, int runs) {
  std::vector<Token> tokens(context + max_k + 1);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<Token>((i * 7919 + 13) % model.vocab_size());
  std::vector<Token> next(tokens.size());
  model.rollback(0);
  for (std::size_t pos = 0; pos < context;) {
    const std::size_t n = std::min(model.max_batch(), context - pos);
    model.forward(pos, std::span<const Token>(tokens).subspan(pos, n), std::span<Token>(next).first(n));
    pos += n;
  }
  std::vector<std::vector<double>> samples(max_k + 1);
  for (int r = 0; r < runs; ++r) {
    for (std::size_t n = 1; n <= max_k + 1; ++n) {
      const auto start = std::chrono::steady_clock::now();
      model.forward(context, std::span<const Token>(tokens).subspan(context, n), std::span<Token>(next).first(n));
      samples[n - 1].push_back(seconds_since(start));
      model.rollback(context);
    }
  }
  std::vector<double> medians;
  for (auto& s : samples) medians.push_back(median(s));
  return medians;
}

void print_verify_table(const char* title, const std::vector<double>& t) {
  std::printf("\n%s\n", title);
  std::printf("%4s %7s %12s %16s %16s\n", "k", "tokens", "pass ms", "pass / 1-token", "ms per token");
  for (std::size_t n = 1; n <= t.size(); ++n) {
    std::printf("%4zu %7zu %12.3f %16.2f %16.3f\n", n - 1, n, t[n - 1] * 1e3, t[n - 1] / t[0],
                t[n - 1] * 1e3 / static_cast<double>(n));
  }
}

void describe(const Config& c) {
  const double params = static_cast<double>(c.file_floats() - std::uint64_t{c.seq_len} * c.head_size());
  std::printf("dim %zu, hidden %zu, %zu layers, %zu heads, %zu kv heads, vocab %zu, seq_len %zu: %.1fM params, %.0f MiB\n",
              c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len, params / 1e6,
              params * 4 / (1 << 20));
}

// Plain and speculative generation of the same prompt, alternating run by run; median times.
struct Comparison {
  Generation plain;
  Generation spec;
  double plain_seconds = 0.0;
  double spec_seconds = 0.0;
};

Comparison compare(Transformer& model, const std::vector<Token>& prompt, std::size_t steps, std::size_t k, int runs) {
  Comparison c;
  std::vector<double> plain_s, spec_s;
  for (int r = 0; r < runs; ++r) {
    c.plain = generate(model, prompt, steps, k, false);
    c.spec = generate(model, prompt, steps, k, true);
    plain_s.push_back(c.plain.seconds);
    spec_s.push_back(c.spec.seconds);
  }
  c.plain_seconds = median(plain_s);
  c.spec_seconds = median(spec_s);
  return c;
}

void print_end_to_end_header(const char* what) {
  std::printf("%-44s %6s %12s %12s %8s %8s %8s %9s\n", what, "tokens", "plain tok/s", "spec tok/s", "speedup",
              "passes", "accept", "identical");
}

void print_end_to_end_row(const std::string& label, const Comparison& c) {
  const ngramspec::DecodeStats& s = c.spec.result.stats;
  const double tokens = static_cast<double>(c.plain.result.stats.generated);
  std::printf("%-44s %6.0f %12.1f %12.1f %7.2fx %8zu %8.2f %9s\n", label.c_str(), tokens, tokens / c.plain_seconds,
              tokens / c.spec_seconds, c.plain_seconds / c.spec_seconds, s.prefill_passes + s.decode_passes,
              s.mean_accepted_length(), c.spec.result.tokens == c.plain.result.tokens ? "yes" : "NO");
}

struct Args {
  std::filesystem::path models = NGRAMSPEC_LLAMA2_MODELS_DIR;
  int runs = 7;
  std::size_t max_k = 16;
  std::size_t steps = 256;
  std::size_t k = 4;
  bool large = true;
};

Args parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    const bool has_value = i + 1 < argc;
    if (flag == "--models" && has_value) {
      args.models = argv[++i];
    } else if (flag == "--runs" && has_value) {
      args.runs = std::max(1, std::atoi(argv[++i]));
    } else if (flag == "--steps" && has_value) {
      args.steps = static_cast<std::size_t>(std::max(1, std::atoi(argv[++i])));
    } else if (flag == "--k" && has_value) {
      args.k = static_cast<std::size_t>(std::max(1, std::atoi(argv[++i])));
    } else if (flag == "--no-large") {
      args.large = false;
    } else {
      std::fprintf(stderr,
                   "usage: ngramspec-llama2-bench [--models DIR] [--runs R] [--steps N] [--k K] [--no-large]\n");
      std::exit(2);
    }
  }
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  constexpr std::size_t kContext = 64;     // positions already in the cache when a pass is timed
  constexpr std::size_t kLargeSteps = 96;  // tokens generated end to end on the random-weight model
  std::printf("Verify-pass cost: one forward of k+1 tokens at position %zu vs one token; median of %d runs.\n",
              kContext, args.runs);

  if (args.large) {
    // Llama-2 proportions (hidden = 2/3 of 4 dim, rounded up to 32), large enough that a pass streams far more
    // weights than any cache holds, so a one-token pass is bound by memory bandwidth.
    const Config large{512, 1376, 8, 8, 8, 32000, 256, true};
    Transformer model = Transformer::random(large, 42, args.max_k + 1);
    std::printf("\nRandom-weight model: ");
    describe(large);
    print_verify_table("random-weight model", pass_times(model, kContext, args.max_k, args.runs));

    // A random network's greedy output soon falls into a loop, which the drafter learns: not text, but it shows
    // what accepted drafts buy when a pass is bound by memory rather than arithmetic.
    std::printf("\nEnd to end on the random-weight model (its greedy output loops, so drafts get accepted): "
                "%zu new tokens after [1, 2, 3], median of %d runs.\n",
                kLargeSteps, args.runs);
    print_end_to_end_header("k");
    const std::vector<Token> prompt = {1, 2, 3};
    for (const std::size_t k : {1u, 2u, 4u, 8u}) {
      print_end_to_end_row(std::to_string(k), compare(model, prompt, kLargeSteps, k, args.runs));
    }
  }

  const std::filesystem::path checkpoint = args.models / "stories260K.bin";
  const std::filesystem::path tokenizer_file = args.models / "tok512.bin";
  if (!std::filesystem::exists(checkpoint) || !std::filesystem::exists(tokenizer_file)) {
    std::printf("\n%s or %s is absent: skipping the stories260K measurements.\n", checkpoint.c_str(),
                tokenizer_file.c_str());
    return 0;
  }
  Transformer model = Transformer::load(checkpoint, std::max<std::size_t>(args.max_k, args.k) + 1);
  const Tokenizer tokenizer(tokenizer_file, model.vocab_size());
  std::printf("\nstories260K: ");
  describe(model.config());
  print_verify_table("stories260K", pass_times(model, kContext, args.max_k, args.runs));

  std::printf("\nEnd to end on stories260K: greedy, up to %zu new tokens, k = %zu, NGramPredictor defaults otherwise; "
              "median of %d runs.\n",
              args.steps, args.k, args.runs);
  print_end_to_end_header("prompt");
  const char* const prompts[] = {"", "Once upon a time", "Lily and Tom went to the park", "One day, a little boy named Tim",
                                 "The cat sat on the mat. The cat sat on the"};
  std::vector<double> speedups;
  for (const char* text : prompts) {
    const Comparison c = compare(model, tokenizer.encode(text), args.steps, args.k, args.runs);
    speedups.push_back(c.plain_seconds / c.spec_seconds);
    print_end_to_end_row(std::string("\"") + text + "\"", c);
  }
  std::sort(speedups.begin(), speedups.end());
  std::printf("median speedup over the prompts: %.2fx\n", median(speedups));
  std::printf("passes and accept are the speculative run's target passes (prefill included) and mean accepted "
              "length (generated tokens per pass).\n");
  return 0;
}
