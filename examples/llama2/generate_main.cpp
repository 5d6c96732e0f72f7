// ngramspec-generate: text generation from a llama2.c checkpoint, greedy or sampled, with n-gram speculation (or
// drafts from the model's own first layers) sized by the model's own measured verify cost.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "command_line.hpp"
#include "generate_options.hpp"
#include "llama2_generate.hpp"
#include "llama2_model.hpp"
#include "llama2_tokenizer.hpp"
#include "ngramspec/learned_cost.hpp"

namespace {

constexpr const char* kUsage =
    "usage: ngramspec-generate --model M --tokenizer T (--prompt TEXT | --prompts FILE) [--steps N] [--max-drafts K]\n"
    "                          [--tree-nodes N [--recycle K] [--tree-width W] [--carry-over] [--enrich-counts]]\n"
    "                          [--cost SPEC [--fixed-cost]] [--draft-layers L [--best-of [--draft-cost C] [--no-continue]]]\n"
    "                          [--no-speculate]\n"
    "                          [--check] [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--seed S]\n"
    "                          [--sampling-mode exact|rejection]\n"
    "  --model M       the model: a llama2.c checkpoint (its legacy format, version 0), e.g. stories260K.bin\n"
    "  --tokenizer T   the model's tokenizer in llama2.c's tokenizer.bin format, e.g. tok512.bin for stories260K\n"
    "  --prompt TEXT   the text to continue (may be empty), one request; or:\n"
    "  --prompts FILE  one prompt a line (empty lines skipped), each a request of its own; prints the totals\n"
    "  --steps N       most tokens generated after the prompt (default 256; generation also stops on BOS and at\n"
    "                  the model's seq_len)\n"
    "  --max-drafts K  most drafts verified per pass, 1 to 1024 (default 16; 4 with --cost none); --k K is its\n"
    "                  old name, still read\n"
    "  --tree-nodes N  verify trees of up to N drafts a pass instead of chains (TreeDrafter: the chain as the\n"
    "                  spine, the text's alternatives, and the model's own top-k after every verified token);\n"
    "                  fewer as the context fills, every node taking a KV slot\n"
    "  --recycle K     with trees: the model's top K tokens kept per token (default 8, 32 with --sampling-mode\n"
    "                  rejection; 0: text-only trees)\n"
    "  --tree-width W  with trees: most children a node offers, 1 to 16 (default 8; 1 drafts chains)\n"
    "  --carry-over    with trees and --prompts: keep the top-k table and counts from request to request\n"
    "  --enrich-counts with trees: the model's top-1 after each token also counts as text (NASD's enrichment)\n"
    "  --cost SPEC     what a verify pass costs against its tokens, which sizes each pass's drafts: the number\n"
    "                  (up to K, or the best N-node prefix of a tree) with the most expected tokens per unit of\n"
    "                  cost, from the drafter's estimates.\n"
    "                  measure (default): time this model's passes of 1 .. K+1 tokens at start and print the\n"
    "                  curve; knee:N: flat up to N tokens, then linear; table:1=1,2=1.9,...: measured points;\n"
    "                  none: no cost model, the drafter's own gate decides (MatchDrafter); learn: learned from\n"
    "                  the passes served with no curve at start. A curve, measured or given (also as learn:SPEC),\n"
    "                  is the prior of a cost learned from the passes served (each forward timed; greedy chains)\n"
    "  --fixed-cost    plan every pass against the curve of --cost as it is, not learning from the passes\n"
    "  --draft-layers L draft with the model's own first L layers, then its final norm and classifier\n"
    "                  (self-speculation; a ModelDrafter, greedy or drawing from the draft's distribution under\n"
    "                  the same sampling options) instead of MatchDrafter; 1 to the model's n_layers (default:\n"
    "                  off); with a cost model, drafting stops at the first draft too unlikely to pay\n"
    "  --best-of       with --draft-layers: each pass drafted by whichever of MatchDrafter and the self-draft\n"
    "                  promises more tokens per unit of cost (the self-draft's drafts costing L / n_layers of a\n"
    "                  pass each, or --draft-cost C: 0 compares tokens per pass alone), or the text's drafts\n"
    "                  continued by the self-draft; prints which drafted how often and what was accepted\n"
    "  --no-continue   with --best-of: never continue the text's drafts with the self-draft\n"
    "  --no-speculate  plain decoding, one token per pass (no --k, --cost, --sampling-mode, tree or draft options)\n"
    "  --check         also decode plainly and report whether the outputs are identical, and the speedup: each\n"
    "                  decoding runs 3 times, alternating, and the median times are compared (the speculative\n"
    "                  runs use the same cost model)\n"
    "  --temperature T sample at temperature T (default 0: greedy); --top-k K (0 = off), --top-p P and\n"
    "                  --min-p P filter the distribution; --seed S keys the randomness (default 0), so the same\n"
    "                  seed gives the same text with and without speculation; those four need a temperature\n"
    "                  above 0\n"
    "  --sampling-mode exact (default): drafts are checked against the token plain decoding draws for the seed\n"
    "                  (same text as plain); rejection: drafts drawn from a distribution q are accepted with\n"
    "                  probability min(1, p/q), the model's distribution kept but not the seed's text, and trees\n"
    "                  draw the model's recycled candidates from its recorded distributions (needs a temperature)\n"
    "Each option at most once.\n";

// Exit code 2 and the usage for any mistake on the command line.
[[noreturn]] void usage_error(const char* what) {
  std::fprintf(stderr, "ngramspec-generate: %s\n%s", what, kUsage);
  std::exit(2);
}

// Exit code 2 and the usage for any mistake on the command line, 0 after --help.
ngramspec::llama2::GenerateOptions parse(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  ngramspec::llama2::GenerateOptions options;
  try {
    options = ngramspec::llama2::parse_generate_options(args);
  } catch (const std::invalid_argument& e) {
    usage_error(e.what());
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

// Every request's output and what the requests cost together.
struct Run {
  std::vector<std::vector<ngramspec::Token>> outputs;
  ngramspec::DecodeStats stats;  // summed over the requests
  std::size_t requests = 0;
  double seconds = 0.0;
  ngramspec::StopReason stop_reason = ngramspec::StopReason::max_new_tokens;  // the last request's
  // --best-of: what the text and the self-draft each drafted and had accepted.
  using Best = ngramspec::BestOfDrafter<ngramspec::MatchDrafter, ngramspec::ModelDrafter<ngramspec::llama2::Transformer>>;
  struct Sources {
    Best::Tally text, model, continued;
  };
  std::optional<Sources> sources;
};

void report(const char* label, const Run& run, bool trees) {
  const ngramspec::DecodeStats& s = run.stats;
  const double passes = static_cast<double>(s.decode_passes + run.requests);  // a prefill pass a request
  const double decode = s.decode_passes == 0 ? 1.0 : static_cast<double>(s.decode_passes);
  std::printf("%s: %zu tokens in %.3f s, %.1f tokens/s, %zu passes (%zu prefill + %zu decode), "
              "mean accepted length %.2f, %s per pass %.2f, wasted per pass %.2f",
              label, s.generated, run.seconds, run.seconds > 0 ? static_cast<double>(s.generated) / run.seconds : 0.0,
              s.prefill_passes + s.decode_passes, s.prefill_passes, s.decode_passes,
              passes > 0 ? static_cast<double>(s.generated) / passes : 0.0, trees ? "nodes" : "drafts",
              static_cast<double>(s.drafted) / decode, static_cast<double>(s.drafted - s.accepted) / decode);
  if (run.requests == 1) std::printf(", stop: %s", ngramspec::to_string(run.stop_reason));
  std::printf("\n");
  if (run.sources) {
    const auto& [text, model, continued] = *run.sources;
    const auto u = [](std::uint64_t v) { return static_cast<unsigned long long>(v); };
    std::printf("best of: the text drafted for %llu passes (%llu of %llu drafts accepted), the self-draft for %llu "
                "(%llu of %llu), the text continued by the self-draft for %llu (%llu of %llu; of the continuation, "
                "%llu of %llu)\n",
                u(text.passes), u(text.accepted), u(text.drafted), u(model.passes), u(model.accepted),
                u(model.drafted), u(continued.passes), u(continued.accepted), u(continued.drafted),
                u(continued.continuation_accepted), u(continued.continuation_drafted));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const ngramspec::llama2::GenerateOptions args = parse(argc, argv);
  try {
    using namespace ngramspec::llama2;
    const bool trees = args.tree_nodes != 0;
    const std::size_t width = trees ? args.tree_nodes : args.k;  // most drafts a pass carries
    // The prompts first: a bad --prompts file is refused before the model is read.
    const std::vector<std::string> texts = args.prompts_file.empty()
                                               ? std::vector<std::string>{args.prompt}
                                               : ngramspec::cli::read_prompt_lines(args.prompts_file);
    // --draft-layers is judged against the checkpoint's header before the weights are read (or the tokenizer):
    // a usage mistake like any other on the command line, refused as quickly.
    if (args.draft_layers != 0) {
      const std::size_t layers = Transformer::read_config(args.model).n_layers;
      if (args.draft_layers > layers) {
        const std::string what = "--draft-layers " + std::to_string(args.draft_layers) + " is more than the " +
                                 std::to_string(layers) + " layers of '" + args.model + "': it must be 1 to " +
                                 std::to_string(layers);
        usage_error(what.c_str());
      }
    }
    Transformer model = Transformer::load(args.model, std::max(width + 1, Transformer::kDefaultMaxBatch));
    const Tokenizer tokenizer(args.tokenizer, model.vocab_size());
    // The self-draft: the model's first layers over its own weights, with a KV cache of its own.
    std::optional<Transformer> draft;
    if (args.draft_layers != 0) draft.emplace(Transformer::early_exit(model, args.draft_layers));
    std::vector<std::vector<ngramspec::Token>> prompts;
    for (const std::string& text : texts) {
      prompts.push_back(tokenizer.encode(text));
      // Refused before anything runs: a prompt the model's context cannot hold never decodes.
      if (prompts.back().size() > model.config().seq_len) {
        throw std::invalid_argument(
            (args.prompts_file.empty() ? std::string("--prompt")
                                       : "prompt " + std::to_string(prompts.size()) + " of --prompts '" +
                                             args.prompts_file + "'") +
            " is " + std::to_string(prompts.back().size()) +
            " tokens (BOS included), more than the model's seq_len of " + std::to_string(model.config().seq_len));
      }
    }

    // The cost model of whichever run speculates: measured here (at the middle of the first request), given, or
    // none.
    std::optional<ngramspec::VerifyCost> cost;
    std::string cost_line = "verify cost: none (drafts sized by the drafter's gate)";
    if (args.cost_source == GenerateOptions::Cost::given) {
      cost = args.cost;
      cost_line = "verify cost (given): " + cost->spec();
    } else if (args.cost_source == GenerateOptions::Cost::measure && (args.speculate || args.check)) {
      const auto start = std::chrono::steady_clock::now();
      cost = measure_pass_cost(model, width, args.sampling, 21, midway_context(prompts[0].size(), args.steps));
      const double ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      char took[64];
      std::snprintf(took, sizeof took, " (measured in %.0f ms)", ms);
      cost_line = "verify cost: " + cost->spec() + took;
    }
    // By default the curve is the prior of a cost learned from the passes served, kept across every request
    // and run (each greedy chain pass planned against it, its forward timed into it); --fixed-cost: the curve
    // as it is.
    std::optional<ngramspec::LearnedCost> learned;
    if ((args.speculate || args.check) && !args.fixed_cost && args.cost_source != GenerateOptions::Cost::none) {
      learned.emplace(cost);
      if (args.cost_source == GenerateOptions::Cost::learn) {
        cost_line = "verify cost: learned from the passes served (no prior)";
      } else {
        cost_line += "\nverify cost: learned from the passes served, the curve above its prior";
      }
    } else if (args.fixed_cost) {
      cost_line += "\nverify cost: fixed (--fixed-cost)";
    }

    // Every request in order; trees start from a new drafter each run, so that repeated runs draft alike (with
    // --carry-over it keeps what it learns from one request to the next within the run).
    const auto decode = [&](bool speculate) {
      Run run;
      std::optional<ngramspec::TreeDrafter> drafter;
      if (trees && speculate) {
        drafter.emplace(make_tree_drafter(model, args.recycle, args.carry_over, args.enrich_counts, args.tree_width,
                                          args.sampling));
      }
      std::optional<ngramspec::ModelDrafter<Transformer>> self_drafter;
      if (draft && speculate) self_drafter.emplace(make_self_drafter(model, *draft, width, args.sampling, cost));
      // --best-of: the text beside the self-draft, whose drafts cost about L / n_layers of a pass each.
      std::optional<ngramspec::MatchDrafter> text;
      std::optional<ngramspec::BestOfDrafter<ngramspec::MatchDrafter, ngramspec::ModelDrafter<Transformer>>> best;
      if (self_drafter && args.best_of) {
        text.emplace(make_text_drafter(model));
        ngramspec::BestOfConfig config;
        config.second_draft_cost = args.draft_cost.value_or(static_cast<double>(args.draft_layers) /
                                                            static_cast<double>(model.config().n_layers));
        config.continue_first = args.continue_text;
        best.emplace(*text, *self_drafter, cost, config);
      }
      for (const auto& prompt : prompts) {
        const Generation g =
            drafter        ? generate_tree(model, prompt, args.steps, width, *drafter, args.sampling, cost)
            : best         ? generate_best_of(model, prompt, args.steps, width, *best, args.sampling, cost)
            : self_drafter ? generate_with_draft(model, prompt, args.steps, width, *self_drafter, args.sampling, cost)
                           : generate(model, prompt, args.steps, width, speculate, args.sampling, cost,
                                      learned ? &*learned : nullptr);
        const ngramspec::DecodeStats& s = g.result.stats;
        run.outputs.push_back(g.result.tokens);
        run.stats.prefill_passes += s.prefill_passes;
        run.stats.decode_passes += s.decode_passes;
        run.stats.drafted += s.drafted;
        run.stats.accepted += s.accepted;
        run.stats.generated += s.generated;
        run.seconds += g.seconds;
        run.stop_reason = g.result.stop_reason;
        ++run.requests;
      }
      if (best) {
        using Source = decltype(best)::value_type::Source;
        run.sources = Run::Sources{best->tally(Source::first), best->tally(Source::second),
                                   best->tally(Source::continued)};
      }
      return run;
    };
    const auto print_text = [&](const Run& run) {
      if (prompts.size() == 1) {
        std::printf("%s%s\n\n", texts[0].c_str(), tokenizer.decode(run.outputs[0], prompts[0].back()).c_str());
      } else {
        std::printf("%zu requests\n", prompts.size());
      }
    };
    Run run = decode(args.speculate);
    if (!args.check) {
      print_text(run);
      if (args.speculate) std::printf("%s\n", cost_line.c_str());
      report(args.speculate ? "speculative" : "plain", run, trees);
      return 0;
    }

    // --check: the other decoding too, each kCheckRuns times in the order A B B A A B (so that neither always
    // runs first, into caches the other has just warmed), every output compared with the first; median times.
    constexpr int kCheckRuns = 3;
    const bool order[] = {false, false, true, true, false};  // after the first run of A: true = A again
    std::vector<double> seconds_a = {run.seconds};
    std::vector<double> seconds_b;
    Run other;
    bool same = true;
    for (const bool again : order) {
      const Run r = decode(again ? args.speculate : !args.speculate);
      same = same && r.outputs == run.outputs;
      (again ? seconds_a : seconds_b).push_back(r.seconds);
      if (!again && seconds_b.size() == 1) other = r;
    }
    run.seconds = median(seconds_a);
    other.seconds = median(seconds_b);
    print_text(run);
    std::printf("%s\n", cost_line.c_str());
    report(args.speculate ? "speculative" : "plain", run, trees);
    report(args.speculate ? "plain" : "speculative", other, trees);
    // Rejection sampling keeps the model's distribution, not plain decoding's text for the seed.
    const bool same_text_expected =
        args.sampling.temperature == 0.0f || args.sampling.mode == ngramspec::SamplingMode::exact;
    if (!same_text_expected) {
      same = true;
      std::printf("outputs identical: not expected (rejection sampling keeps the distribution, not the text)");
    } else {
      std::printf("outputs identical: %s", same ? "yes" : "no");
    }
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
