#include "llama_options.hpp"

#include <algorithm>
#include <charconv>
#include <initializer_list>
#include <cmath>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <ngramspec/decode_step.hpp>

#include "command_line.hpp"
#include "llama_drafter_spec.hpp"
#include "ngramspec/detail/parse_number.hpp"

namespace ngramspec::llama_cpp {
namespace {

[[noreturn]] void bad(std::string_view flag, std::string_view text, const std::string& why) {
  throw std::invalid_argument(std::string(flag) + " " + std::string(text) + ": " + why);
}

std::size_t parse_count(std::string_view flag, std::string_view text, std::size_t min, std::size_t max) {
  const ngramspec::detail::ParsedNumber<std::size_t> count = ngramspec::detail::parse_whole<std::size_t>(text);
  if (count.status == ngramspec::detail::NumberStatus::out_of_range) bad(flag, text, "is too large; at most " + std::to_string(max));
  if (!count.ok()) bad(flag, text, "is not a whole number");
  if (count.value < min || count.value > max) {
    bad(flag, text, "is out of range: " + std::to_string(min) + " to " + std::to_string(max));
  }
  return count.value;
}

// "1,4,16": whole numbers from min to max, each once.
std::vector<std::size_t> parse_count_list(std::string_view flag, std::string_view text, std::size_t min, std::size_t max) {
  std::vector<std::size_t> values;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    const std::size_t value = parse_count(flag, item, min, max);
    cli::refuse_repeated_item(flag, values, value, item);
    values.push_back(value);
    start = comma + 1;
  }
  return values;
}

float parse_real(std::string_view flag, std::string_view text) {
  const ngramspec::detail::ParsedNumber<float> real = ngramspec::detail::parse_real<float>(text);
  if (!real.ok()) bad(flag, text, "is not a finite number");
  return real.value;
}

}  // namespace

// The value of `flag` among `choices` (text, value), in order; else "FLAG 'TEXT' is invalid: give a, b or c".
template <class T>
T choice(std::string_view flag, std::string_view text, std::initializer_list<std::pair<std::string_view, T>> choices) {
  std::string names;
  std::size_t i = 0;
  for (const auto& [name, value] : choices) {
    if (name == text) return value;
    names += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + std::string(name);
    ++i;
  }
  throw std::invalid_argument(std::string(flag) + " '" + std::string(text) + "' is invalid: give " + names);
}

const char* llama_usage() noexcept {
  return "usage: ngramspec-llama --model FILE.gguf (--prompt TEXT | --prompts FILE) [options]\n"
         "Decodes with llama.cpp, drafting with ngramspec (MatchDrafter, or ModelDrafter with a draft model, through\n"
         "BatchSpeculator).\n"
         "  --model FILE       a GGUF model llama.cpp loads\n"
         "  --prompt TEXT      one prompt (\"\" decodes from BOS alone); --prompts FILE: one prompt a line\n"
         "  --n N              most tokens generated per prompt (default 256)\n"
         "  --threads N        CPU threads (default: every core)\n"
         "  --parallel N       sequences decoded together in one llama_batch, 1 to 256 (default 1); a finished\n"
         "                     sequence's slot takes the next prompt\n"
         "  --ctx N            tokens each sequence holds (default: the model's training context)\n"
         "  --max-drafts N     most drafts per sequence and pass, 1 to 1024 (default 16; 4 with --cost none or\n"
         "                     --draft-model, whose every draft is a pass of the draft model); --k N is its old\n"
         "                     name, still read\n"
         "  --cost SPEC        what a verify pass costs, which sizes every pass's drafts: measure (default: this\n"
         "                     model's passes timed at start, trusted for the run), learn (learned from the passes\n"
         "                     served, starting from the passes timed at start; it follows a machine that changes,\n"
         "                     and loses to measure on an idle one), learn:SPEC (starting from SPEC), none\n"
         "                     (MatchDrafter's own gate decides), flat, knee:N, or table:1=1,2=1.5,... (what\n"
         "                     --print-cost prints)\n"
         "  --print-cost       print the cost table used, to give back to --cost\n"
         "  --flash-attn F     backend (default: off on a CPU, where its kernels sum a verify pass otherwise\n"
         "                     than a one-token pass and a near tie can flip a token; llama.cpp's choice on a\n"
         "                     GPU), on, off\n"
         "  --pass-shape S     fixed (the default with --parallel 1 and --cost measure; else free): every pass with drafts\n"
         "                     carries k of them (padded), so llama.cpp keeps its graph from one to the next, and\n"
         "                     drafts are priced by the pass before (starting a run of them pays both graph\n"
         "                     rebuilds); free: passes of any size, priced by one measured curve\n"
         "  --temperature T    sample (default 0: greedy); --top-k K, --top-p P, --min-p P filter, --seed S keys\n"
         "                     the randomness per position (prompt i uses seed S + i), so the same seed gives the\n"
         "                     same text with and without drafting (those four need a temperature above 0)\n"
         "  --sampling-mode M  exact (default: each token is plain sampling's for the seed, greedy's at 0,\n"
         "                     a draft accepted when it is that token) or rejection (each draft accepted with\n"
         "                     probability min(1, p/q) for the q it was drawn from: the model's distribution,\n"
         "                     not the seed's text; more drafts accepted from a draft model; --check and\n"
         "                     --compare then report identity as n/a)\n"
         "  --ignore-eos       do not stop at the model's end-of-generation tokens\n"
         "  --no-speculate     plain decoding\n"
         "  --corpus MIB       a SharedCorpus of MIB MiB: each prompt drafts from the outputs of earlier ones\n"
         "  --corpus-file F    draft from a corpus file too (made by ngramspec-corpus build); one that\n"
         "                     records another vocabulary size than the model's is refused, and drafts\n"
         "                     of tokens outside the model's vocabulary are dropped and counted\n"
         "  --check            also decode plainly; print 'identical: yes' (or 'no', exit 1, and for each prompt\n"
         "                     that differs a line: the first differing token, both runs' tokens, their logits in\n"
         "                     plain decoding, the top-1 minus top-2 margin, and 'a near tie' (the gap within 1% of\n"
         "                     the largest |logit|) or 'NOT a near tie'), both speeds, the mean accepted length and\n"
         "                     'speedup N.NNx' (plain time / speculative time, medians of --repeats alternating runs);\n"
         "                     the counts are the first run's, and with --repeats above 1 a line gives every\n"
         "                     ngramspec run's tokens/s and drafts\n"
         "  --compare          plain, ngramspec and llama.cpp's own n-gram drafters (through its\n"
         "                     common_speculative code; with a draft model, both drafters of each draft model too)\n"
         "                     on the same prompts in one run: one table, then such a line for every drafter's\n"
         "                     prompts that differ\n"
         "  --llama-drafter S  with --compare: a llama.cpp drafter to run, TYPE[:key=value,...] (repeatable, each\n"
         "                     drafter once; default: every n-gram type at its defaults and at settings that\n"
         "                     draft on short texts)\n"
         "  --draft-model F    a draft model GGUF of the model's vocabulary (make_draft_gguf.py writes one of the\n"
         "                     model's first blocks): ngramspec drafts with it (up to --k tokens a pass) instead\n"
         "                     of from the text; with --compare (repeatable, each file once) each one joins the\n"
         "                     table twice, as ngramspec's drafter and as llama.cpp's draft-simple\n"
         "  --draft-layers L,... draft models of the first L blocks of the --draft-model file, or of --model\n"
         "                     without one (written as make_draft_gguf.py writes them, into a temporary file\n"
         "                     that is removed once loaded), each L from 1 to the block count and once; more\n"
         "                     than one goes with --compare\n"
         "  --best-of          with a draft model: each pass drafted by whichever of the text (MatchDrafter) and\n"
         "                     the draft model promises more tokens per unit of cost, or the text's drafts\n"
         "                     continued by the draft model (BestOfDrafter); the draft model runs only on the\n"
         "                     passes it drafts for\n"
         "  --draft-cost C     with --best-of: what one draft-model token costs in one-token passes of the model\n"
         "                     (default: measured at start, the draft model's one-token pass over the model's)\n"
         "  --llama-draft-max N  with --compare and a draft model: most tokens a draft of llama.cpp's\n"
         "                     draft-simple holds, 1 to 1024 (default 3, llama.cpp's --spec-draft-n-max)\n"
         "  --repeats N        timed rounds of --check, --compare and --curve (default 3)\n"
         "  --curve 1,4,16     measure the cost of passes of 1 .. --curve-tokens (default 17) tokens per sequence,\n"
         "                     at position --curve-at (default 256) of each sequence,\n"
         "                     for each number of sequences given, print the table and what a pass of 2, 5, 9\n"
         "                     and --curve-tokens tokens per sequence costs after one like it, and exit\n"
         "  --json             print the result as JSON (with --check or --compare: each run's divergences)\n"
         "  --verbose          show llama.cpp's log\n"
         "Every option but --llama-drafter and --draft-model at most once.\n";
}

LlamaOptions parse_llama_options(std::span<const std::string_view> args) {
  LlamaOptions o;
  std::vector<std::string_view> given;  // every option, to refuse the ones the chosen mode would not read
  cli::GivenOptions once;               // every option but --llama-drafter (repeatable) is given once
  std::vector<std::string> drafters;    // describe() of each --llama-drafter, to refuse one named twice
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view flag = args[i];
    given.push_back(flag);
    if (flag != "--llama-drafter" && flag != "--draft-model" && flag != "--help" && flag != "-h") once.once(flag);
    const auto value = [&]() -> std::string_view {
      if (i + 1 >= args.size()) throw std::invalid_argument(std::string(flag) + " needs a value");
      return args[++i];
    };
    if (flag == "--help" || flag == "-h") {
      o.help = true;
      return o;
    } else if (flag == "--model") {
      o.model = value();
    } else if (flag == "--prompt") {
      o.prompt = std::string(value());
    } else if (flag == "--prompts") {
      o.prompts_file = value();
    } else if (flag == "--n") {
      o.n = parse_count(flag, value(), 1, std::size_t{1} << 24);
    } else if (flag == "--threads") {
      o.threads = static_cast<int>(parse_count(flag, value(), 1, 1024));
    } else if (flag == "--parallel") {
      o.parallel = parse_count(flag, value(), 1, 256);
    } else if (flag == "--ctx") {
      o.context = parse_count(flag, value(), 2, std::size_t{1} << 24);
    } else if (cli::is_max_drafts(flag)) {  // --max-drafts, or its old name --k
      o.k = parse_count(flag, value(), 1, kMaxDraftsPerPass);
      o.k_given = true;
    } else if (flag == "--cost") {
      const std::string_view text = value();
      if (text == "measure") {
        o.cost_source = LlamaOptions::Cost::measure;
      } else if (text == "learn") {
        o.cost_source = LlamaOptions::Cost::learn;
        o.cost.reset();
      } else if (text.rfind("learn:", 0) == 0) {
        o.cost = VerifyCost::parse(text.substr(6));
        o.cost_source = LlamaOptions::Cost::learn;
      } else if (text == "none") {
        o.cost_source = LlamaOptions::Cost::none;
      } else {
        o.cost = VerifyCost::parse(text);
        o.cost_source = LlamaOptions::Cost::given;
      }
    } else if (flag == "--print-cost") {
      o.print_cost = true;
    } else if (flag == "--flash-attn") {
      using enum EngineConfig::FlashAttention;
      o.flash_attention = choice<EngineConfig::FlashAttention>(flag, value(), {{"backend", by_backend}, {"on", on}, {"off", off}});
    } else if (flag == "--pass-shape") {
      o.fixed_shape = choice<bool>(flag, value(), {{"fixed", true}, {"free", false}});
      o.pass_shape_given = true;
    } else if (flag == "--temperature") {
      o.sampling.temperature = parse_real(flag, value());
    } else if (flag == "--top-k") {
      o.sampling.top_k = parse_count(flag, value(), 0, std::size_t{1} << 31);
    } else if (flag == "--top-p") {
      o.sampling.top_p = parse_real(flag, value());
    } else if (flag == "--min-p") {
      o.sampling.min_p = parse_real(flag, value());
    } else if (flag == "--seed") {
      o.sampling.seed = parse_count(flag, value(), 0, std::numeric_limits<std::uint64_t>::max());
    } else if (flag == "--sampling-mode") {
      o.sampling.mode = choice<SamplingMode>(flag, value(), {{"exact", SamplingMode::exact},
                                                             {"rejection", SamplingMode::rejection}});
    } else if (flag == "--ignore-eos") {
      o.ignore_eos = true;
    } else if (flag == "--no-speculate") {
      o.speculate = false;
    } else if (flag == "--check") {
      o.check = true;
    } else if (flag == "--compare") {
      o.compare = true;
    } else if (flag == "--llama-drafter") {
      // Checked now, before anything is loaded: a bad spec is a mistake on the command line.
      const std::string_view spec = value();
      const std::string described = describe(parse_spec(spec, "--llama-drafter '" + std::string(spec) + "'"));
      cli::refuse_repeated_item(flag, drafters, described, spec);
      drafters.push_back(described);
      o.llama_drafters.emplace_back(spec);
    } else if (flag == "--draft-model") {
      const std::string_view path = value();
      cli::refuse_repeated_item(flag, o.draft_models, std::string(path), path);
      o.draft_models.emplace_back(path);
    } else if (flag == "--draft-layers") {
      o.draft_layers = parse_count_list(flag, value(), 1, 1024);
    } else if (flag == "--best-of") {
      o.best_of = true;
    } else if (flag == "--draft-cost") {
      const std::string_view text = value();
      const float cost = parse_real(flag, text);
      if (cost < 0.0f) bad(flag, text, "is negative; a drafted token costs 0 or more passes");
      o.draft_cost = cost;
    } else if (flag == "--llama-draft-max") {
      o.llama_draft_max = parse_count(flag, value(), 1, 1024);
      o.llama_draft_max_given = true;
    } else if (flag == "--repeats") {
      o.repeats = parse_count(flag, value(), 1, 1000);
    } else if (flag == "--corpus") {
      o.corpus_mib = parse_count(flag, value(), 1, std::size_t{1} << 16);
    } else if (flag == "--corpus-file") {
      o.corpus_file = value();
    } else if (flag == "--curve") {
      o.curve = parse_count_list(flag, value(), 1, 256);
    } else if (flag == "--curve-at") {
      o.curve_at = parse_count(flag, value(), 0, std::size_t{1} << 24);
    } else if (flag == "--curve-tokens") {
      o.curve_tokens = parse_count(flag, value(), 1, 1024);
    } else if (flag == "--json") {
      o.json = true;
    } else if (flag == "--verbose") {
      o.verbose = true;
    } else {
      throw std::invalid_argument("unknown option '" + std::string(flag) + "'");
    }
  }
  // A name given empty is named as such: "required" would send its user looking for an option that is there.
  if (o.model.empty() && once.given("--model")) throw std::invalid_argument("--model needs a file name, got ''");
  if (o.model.empty()) throw std::invalid_argument("--model FILE is required");
  const auto refuse_with = [&](std::initializer_list<std::string_view> flags, const char* why) {
    for (const std::string_view f : flags) {
      if (std::find(given.begin(), given.end(), f) != given.end()) {
        throw std::invalid_argument(std::string(f) + " " + why);
      }
    }
  };
  if (!o.curve.empty()) {
    refuse_with({"--prompt", "--prompts", "--n", "--parallel", "--max-drafts", "--k", "--cost", "--print-cost",
                 "--pass-shape", "--temperature", "--top-k", "--top-p", "--min-p", "--seed", "--sampling-mode",
                 "--ignore-eos", "--no-speculate", "--check", "--compare", "--corpus", "--corpus-file", "--json",
                 "--draft-model", "--draft-layers", "--best-of", "--draft-cost"},
                "does nothing with --curve, which only times passes (its options: --threads, --ctx, --flash-attn, --curve-at, "
                "--curve-tokens, --repeats, --verbose)");
  } else {
    refuse_with({"--curve-at", "--curve-tokens"}, "goes with --curve");
  }
  if (!o.check && !o.compare && o.curve.empty()) refuse_with({"--repeats"}, "goes with --check, --compare or --curve");
  if (!o.speculate) {
    refuse_with({"--max-drafts", "--k", "--cost", "--print-cost", "--pass-shape", "--corpus", "--corpus-file", "--draft-model",
                 "--draft-layers", "--sampling-mode"},
                "does nothing with --no-speculate, which drafts nothing");
  }
  if (o.pass_shape_given && o.fixed_shape && (o.parallel != 1 || o.cost_source != LlamaOptions::Cost::measure)) {
    throw std::invalid_argument("--pass-shape fixed needs --parallel 1 and a measured cost (--cost measure)");
  }
  if (o.cost_source == LlamaOptions::Cost::none) refuse_with({"--print-cost"}, "has no cost to print with --cost none");
  if (o.curve.empty() && !o.prompt && o.prompts_file.empty()) {
    throw std::invalid_argument("give --prompt TEXT or --prompts FILE");
  }
  if (o.prompt && !o.prompts_file.empty()) throw std::invalid_argument("give --prompt or --prompts, not both");
  if (o.check && o.compare) throw std::invalid_argument("--check and --compare are separate modes; give one");
  if (!o.speculate && (o.check || o.compare)) {
    throw std::invalid_argument("--no-speculate decodes plainly; --check and --compare decode both ways already");
  }
  if (!o.llama_drafters.empty() && !o.compare) throw std::invalid_argument("--llama-drafter goes with --compare");
  if (o.drafts_with_model()) {
    if (!o.compare) {
      refuse_with({"--corpus", "--corpus-file"},
                  "drafts from text, and --draft-model drafts with the model instead (--compare runs both)");
    }
    if (!o.draft_layers.empty() && o.draft_models.size() > 1) {
      throw std::invalid_argument("--draft-layers cuts one model: give at most one --draft-model (without one it cuts "
                                  "--model)");
    }
    if (o.draft_layers.size() > 1 && !o.compare) {
      throw std::invalid_argument("--draft-layers " + std::to_string(o.draft_layers[0]) + "," +
                                  std::to_string(o.draft_layers[1]) +
                                  ": more than one draft model goes with --compare only, which runs each");
    }
    if (o.draft_models.size() > 1 && !o.compare) {
      throw std::invalid_argument("--draft-model '" + o.draft_models[1] +
                                  "': more than one draft model goes with --compare only, which runs each");
    }
  }
  if (o.best_of && !o.drafts_with_model()) {
    throw std::invalid_argument("--best-of chooses between the text and a draft model: it needs --draft-model or "
                                "--draft-layers");
  }
  if (o.draft_cost && !o.best_of) {
    throw std::invalid_argument("--draft-cost prices the draft model's tokens for --best-of: it needs --best-of");
  }
  if (o.llama_draft_max_given && (!o.compare || !o.drafts_with_model())) {
    throw std::invalid_argument("--llama-draft-max goes with --compare and --draft-model or --draft-layers (llama.cpp's "
                                "draft-simple)");
  }
  if ((o.cost_source == LlamaOptions::Cost::none || o.drafts_with_model()) && !o.k_given) {
    o.k = LlamaOptions::kDefaultKWithoutCost;
  }
  cli::check_sampling_options(o.sampling);
  // Greedy decoding takes the most likely token: a filter or a seed would change nothing. The exact mode, the
  // default, is greedy decoding at temperature 0, so it is taken there; the rejection mode needs sampling.
  if (o.sampling.temperature == 0) {
    refuse_with({"--top-k", "--top-p", "--min-p", "--seed"},
                "applies to sampling only: it needs --temperature above 0 (0 is greedy decoding)");
    if (cli::sampling_mode_needs_temperature(o.sampling.mode)) {
      refuse_with({"--sampling-mode"}, "applies to sampling only: it needs --temperature above 0 (0 is greedy decoding)");
    }
  }
  return o;
}

}  // namespace ngramspec::llama_cpp
