// ngramspec-llama2-bench: what a verify pass of k+1 tokens costs next to a one-token pass, and what n-gram
// speculation buys end to end, with a fixed draft cap and sized by the measured verify cost, on a
// random-weight memory-bound model and on the stories260K checkpoint. Prints tables; medians of several runs.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "command_line.hpp"
#include "llama2_generate.hpp"
#include "llama2_model.hpp"
#include "llama2_tokenizer.hpp"
#include "ngramspec/detail/parse_number.hpp"

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

// One way of decoding: plain, speculative with a fixed cap of k drafts sized by the drafter's gate, or
// speculative with drafts sized by the measured verify cost (up to k).
struct Variant {
  std::string label;
  bool speculate = true;
  std::size_t k = 4;
  std::optional<ngramspec::VerifyCost> cost;
  std::size_t tree_nodes = 0;  // > 0: tree passes of up to this many nodes, k unused
};

struct Timed {
  Generation last;
  double seconds = 0.0;  // median over the runs
};

// Every variant on the same prompt, one run of each per round (so that a slow spell of a shared machine hits
// them all alike); median times.
std::vector<Timed> race(Transformer& model, const std::vector<Token>& prompt, std::size_t steps,
                        const std::vector<Variant>& variants, int runs) {
  std::vector<Timed> out(variants.size());
  std::vector<std::vector<double>> seconds(variants.size());
  for (int r = 0; r < runs; ++r) {
    for (std::size_t v = 0; v < variants.size(); ++v) {
      if (variants[v].tree_nodes != 0) {
        ngramspec::TreeDrafter drafter = make_tree_drafter(model, 8, false);
        out[v].last = generate_tree(model, prompt, steps, variants[v].tree_nodes, drafter, {}, variants[v].cost);
      } else {
        out[v].last = generate(model, prompt, steps, variants[v].k, variants[v].speculate, {}, variants[v].cost);
      }
      seconds[v].push_back(out[v].last.seconds);
    }
  }
  for (std::size_t v = 0; v < variants.size(); ++v) out[v].seconds = median(seconds[v]);
  return out;
}

// The variants compared: plain first (the reference), then fixed k, then cost-aware.
std::vector<Variant> variants(const std::vector<std::size_t>& fixed_k, std::size_t cost_k,
                              const ngramspec::VerifyCost& cost, std::size_t tree_nodes) {
  std::vector<Variant> out;
  out.push_back({"plain", false, 1, std::nullopt});
  for (const std::size_t k : fixed_k) out.push_back({"fixed k = " + std::to_string(k), true, k, std::nullopt});
  out.push_back({"cost-aware, k <= " + std::to_string(cost_k), true, cost_k, cost});
  if (tree_nodes != 0) {
    out.push_back({"cost-aware tree <= " + std::to_string(tree_nodes), true, 0, cost, tree_nodes});
  }
  return out;
}

void print_race(const std::vector<Variant>& vs, const std::vector<Timed>& t) {
  std::printf("%-24s %6s %10s %8s %8s %8s %9s\n", "decoding", "tokens", "tok/s", "speedup", "passes", "accept",
              "identical");
  for (std::size_t v = 0; v < vs.size(); ++v) {
    const ngramspec::DecodeStats& s = t[v].last.result.stats;
    const double tokens = static_cast<double>(s.generated);
    std::printf("%-24s %6.0f %10.1f %7.2fx %8zu %8.2f %9s\n", vs[v].label.c_str(), tokens, tokens / t[v].seconds,
                t[0].seconds / t[v].seconds, s.prefill_passes + s.decode_passes, s.mean_accepted_length(),
                t[v].last.result.tokens == t[0].last.result.tokens ? "yes" : "NO");
  }
}

// Measures the cost curve as ngramspec-generate does (midway through a generation of `steps` tokens after a
// prompt of `prompt_tokens`), prints it, and returns it.
ngramspec::VerifyCost measured_cost(Transformer& model, std::size_t k, std::size_t prompt_tokens, std::size_t steps) {
  const auto start = std::chrono::steady_clock::now();
  ngramspec::VerifyCost cost = measure_pass_cost(model, k, {}, 21, midway_context(prompt_tokens, steps));
  std::printf("measured verify cost (%.0f ms): %s\n", seconds_since(start) * 1e3, cost.spec().c_str());
  return cost;
}

struct Args {
  std::filesystem::path models = NGRAMSPEC_LLAMA2_MODELS_DIR;
  int runs = 7;
  std::size_t max_k = 16;
  std::size_t steps = 256;
  std::size_t k = 4;
  std::size_t cost_k = 16;
  std::size_t tree_nodes = 16;
  bool large = true;
};

constexpr const char* kUsage =
    "usage: ngramspec-llama2-bench [--models DIR] [--runs R] [--steps N] [--max-drafts K] [--cost-k K]\n"
    "                              [--tree-nodes N] [--no-large]\n"
    "  --models DIR    the folder with stories260K.bin and tok512.bin (default: ../shared/models beside the\n"
    "                  repository; where that is absent the stories260K measurements are skipped)\n"
    "  --runs R        timed runs of each variant, 1 to 1000 (default 7)\n"
    "  --steps N       most tokens generated per run on stories260K, 1 to 16777216\n"
    "                  (default 256; generation also stops at the model's seq_len)\n"
    "  --max-drafts K  the fixed draft cap compared on stories260K, 1 to 1024 (default 4); --k K is its old\n"
    "                  name, still read\n"
    "  --cost-k K      the draft cap of the cost-aware runs, 1 to 1024 (default 16)\n"
    "  --tree-nodes N  the node budget of the cost-aware tree runs, with the model's top-8 recycled,\n"
    "                  0 to 1024 (default 16; 0: no tree runs)\n"
    "Each option at most once.\n";

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "ngramspec-llama2-bench: %s\n%s", what.c_str(), kUsage);
  std::exit(2);
}

// Digits only, within [low, high]: no sign, spaces or suffix.
std::size_t parse_count(std::string_view flag, std::string_view text, std::size_t low, std::size_t high) {
  const ngramspec::detail::ParsedNumber<std::size_t> count = ngramspec::detail::parse_whole<std::size_t>(text);
  const std::size_t value = count.value;
  if (!count.ok() || value < low || value > high) {
    usage_error(std::string(flag) + " wants a whole number from " + std::to_string(low) + " to " +
                std::to_string(high) + ", got '" + std::string(text) + "'");
  }
  return value;
}

Args parse(int argc, char** argv) {
  Args args;
  ngramspec::cli::GivenOptions given;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    const auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) usage_error(std::string(flag) + " needs a value");
      return argv[++i];
    };
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    try {
      given.once(flag);
    } catch (const std::invalid_argument& e) {
      usage_error(e.what());
    }
    if (flag == "--models") {
      args.models = std::string(value());
      // A folder named on the command line must hold the model: only the default may be absent.
      for (const char* file : {"stories260K.bin", "tok512.bin"}) {
        if (!std::filesystem::is_regular_file(args.models / file)) {
          usage_error("--models '" + args.models.string() + "' holds no " + file);
        }
      }
    } else if (flag == "--runs") {
      args.runs = static_cast<int>(parse_count(flag, value(), 1, 1000));
    } else if (flag == "--steps") {
      args.steps = parse_count(flag, value(), 1, std::size_t{1} << 24);
    } else if (ngramspec::cli::is_max_drafts(flag)) {  // --max-drafts, or its old name --k
      args.k = parse_count(flag, value(), 1, ngramspec::kMaxDraftsPerPass);
    } else if (flag == "--cost-k") {
      args.cost_k = parse_count(flag, value(), 1, ngramspec::kMaxDraftsPerPass);
    } else if (flag == "--tree-nodes") {
      args.tree_nodes = parse_count(flag, value(), 0, ngramspec::kMaxDraftsPerPass);
    } else if (flag == "--no-large") {
      args.large = false;
    } else {
      usage_error("unknown argument '" + std::string(flag) + "'");
    }
  }
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  constexpr std::size_t kContext = 64;     // positions already in the cache when a pass is timed
  constexpr std::size_t kLargeSteps = 96;  // tokens generated end to end on the random-weight model
  const std::size_t max_k = std::max({args.max_k, args.k, args.cost_k, args.tree_nodes});
  std::printf("Verify-pass cost: one forward of k+1 tokens at position %zu vs one token; median of %d runs.\n",
              kContext, args.runs);
  std::printf("End to end: plain decoding; speculative with MatchDrafter and a fixed cap of k drafts (its gate "
              "sizes them); and cost-aware, where each pass sends the number of drafts (up to k) with the most "
              "expected tokens per unit of the verify cost measured at start (as ngramspec-generate does); and "
              "cost-aware trees (TreeDrafter, the model's top-8 recycled), cut to the best prefix for the same cost.\n");

  if (args.large) {
    // Llama-2 proportions (hidden = 2/3 of 4 dim, rounded up to 32), large enough that a pass streams far more
    // weights than any cache holds, so a one-token pass is bound by memory bandwidth.
    const Config large{512, 1376, 8, 8, 8, 32000, 256, true};
    Transformer model = Transformer::random(large, 42, max_k + 1);
    std::printf("\nRandom-weight model: ");
    describe(large);
    print_verify_table("random-weight model", pass_times(model, kContext, args.max_k, args.runs));
    const ngramspec::VerifyCost cost = measured_cost(model, max_k, 3, kLargeSteps);

    // A random network's greedy output soon falls into a loop, which the drafter learns: not text, but it shows
    // what accepted drafts buy when a pass is bound by memory rather than arithmetic.
    std::printf("\nEnd to end on the random-weight model (its greedy output loops, so drafts get accepted): "
                "%zu new tokens after [1, 2, 3], median of %d runs.\n",
                kLargeSteps, args.runs);
    const std::vector<Variant> vs = variants({1, 2, 4, 8}, args.cost_k, cost, args.tree_nodes);
    print_race(vs, race(model, {1, 2, 3}, kLargeSteps, vs, args.runs));
  }

  const std::filesystem::path checkpoint = args.models / "stories260K.bin";
  const std::filesystem::path tokenizer_file = args.models / "tok512.bin";
  if (!std::filesystem::exists(checkpoint) || !std::filesystem::exists(tokenizer_file)) {
    std::printf("\n%s or %s is absent: skipping the stories260K measurements.\n", checkpoint.c_str(),
                tokenizer_file.c_str());
    return 0;
  }
  Transformer model = Transformer::load(checkpoint, max_k + 1);
  const Tokenizer tokenizer(tokenizer_file, model.vocab_size());
  std::printf("\nstories260K: ");
  describe(model.config());
  print_verify_table("stories260K", pass_times(model, kContext, args.max_k, args.runs));
  const ngramspec::VerifyCost cost = measured_cost(model, max_k, tokenizer.encode("Once upon a time").size(), args.steps);

  std::printf("\nEnd to end on stories260K: greedy, up to %zu new tokens; median of %d runs.\n", args.steps,
              args.runs);
  const std::vector<Variant> vs = variants({args.k}, args.cost_k, cost, args.tree_nodes);
  std::printf("%-44s %6s %12s", "prompt", "tokens", "plain tok/s");
  for (std::size_t v = 1; v < vs.size(); ++v) std::printf(" %20s", vs[v].label.c_str());
  std::printf(" %9s\n", "identical");
  const char* const prompts[] = {"", "Once upon a time", "Lily and Tom went to the park", "One day, a little boy named Tim",
                                 "The cat sat on the mat. The cat sat on the"};
  std::vector<std::vector<double>> speedups(vs.size());
  for (const char* text : prompts) {
    const std::vector<Timed> t = race(model, tokenizer.encode(text), args.steps, vs, args.runs);
    const double tokens = static_cast<double>(t[0].last.result.stats.generated);
    std::printf("%-44s %6.0f %12.1f", (std::string("\"") + text + "\"").c_str(), tokens, tokens / t[0].seconds);
    bool identical = true;
    for (std::size_t v = 1; v < vs.size(); ++v) {
      const double speedup = t[0].seconds / t[v].seconds;
      speedups[v].push_back(speedup);
      char cell[64];
      std::snprintf(cell, sizeof cell, "%.2fx (AL %.2f)", speedup, t[v].last.result.stats.mean_accepted_length());
      std::printf(" %20s", cell);
      identical = identical && t[v].last.result.tokens == t[0].last.result.tokens;
    }
    std::printf(" %9s\n", identical ? "yes" : "NO");
  }
  std::printf("%-44s %6s %12s", "median speedup over the prompts", "", "");
  for (std::size_t v = 1; v < vs.size(); ++v) {
    char cell[32];
    std::snprintf(cell, sizeof cell, "%.2fx", median(speedups[v]));
    std::printf(" %20s", cell);
  }
  std::printf("\n");
  std::printf("passes and accept are the speculative run's target passes (prefill included) and mean accepted "
              "length (generated tokens per pass, AL); speedup is plain time / that run's time.\n");
  return 0;
}
