#include "generate_options.hpp"

#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string>
#include <system_error>

#include "command_line.hpp"
#include "ngramspec/decode_step.hpp"
#include "ngramspec/detail/number_text.hpp"
#include "ngramspec/detail/parse_number.hpp"
#include "ngramspec/top_k_table.hpp"
#include "ngramspec/tree_drafter.hpp"

namespace ngramspec::llama2 {
namespace {

[[noreturn]] void bad_number(std::string_view flag, std::string_view text) {
  throw std::invalid_argument(std::string(flag) + " wants a number, got '" + std::string(text) + "'");
}

// The one message for a --max-drafts (or --k, `flag` as given) outside 1 .. kMaxDraftsPerPass, however far outside.
[[noreturn]] void k_out_of_range(std::string_view flag, std::string_view text) {
  throw std::invalid_argument(std::string(flag) + " must be between 1 and " + std::to_string(kMaxDraftsPerPass) + ", got " +
                              std::string(text));
}

// Digits only: no sign, spaces or suffix, and nothing a std::size_t cannot hold.
std::size_t parse_count(std::string_view flag, std::string_view text) {
  const ngramspec::detail::ParsedNumber<std::size_t> count = ngramspec::detail::parse_whole<std::size_t>(text);
  if (count.status == ngramspec::detail::NumberStatus::out_of_range) {
    throw std::invalid_argument(std::string(flag) + " wants a number, got '" + std::string(text) +
                                "', which is too large");
  }
  if (!count.ok()) bad_number(flag, text);
  return count.value;
}

// A finite float in decimal or exponent notation, optionally negative (validate() judges the
// range); no spaces, hex, inf or nan, and nothing beyond a float's range.
float parse_real(std::string_view flag, std::string_view text) {
  const ngramspec::detail::ParsedNumber<float> real = ngramspec::detail::parse_real<float>(text);
  if (real.status == ngramspec::detail::NumberStatus::out_of_range) {
    throw std::invalid_argument(std::string(flag) + " wants a number, got '" + std::string(text) +
                                "', which is out of a float's range");
  }
  if (!real.ok()) bad_number(flag, text);
  return real.value;
}

}  // namespace

GenerateOptions parse_generate_options(std::span<const std::string_view> args) {
  GenerateOptions options;
  bool has_prompt = false;
  std::string_view k_flag;  // --max-drafts or --k, as given; empty when neither was
  bool has_recycle = false;
  bool has_sampling_mode = false;
  bool has_width = false;
  bool has_cost = false;
  std::string_view sampling_filter;  // the first of --top-k, --top-p, --min-p and --seed given
  cli::GivenOptions given;  // every option takes one value or is one switch
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view flag = args[i];
    if (flag != "--help" && flag != "-h") given.once(flag);
    const auto value = [&]() -> std::string_view {
      if (i + 1 >= args.size()) throw std::invalid_argument(std::string(flag) + " needs a value");
      return args[++i];
    };
    if (flag == "--model") {
      options.model = value();
    } else if (flag == "--tokenizer") {
      options.tokenizer = value();
    } else if (flag == "--prompt") {
      options.prompt = value();
      has_prompt = true;
    } else if (flag == "--prompts") {
      options.prompts_file = value();
      if (options.prompts_file.empty()) throw std::invalid_argument("--prompts needs a file name, got ''");
    } else if (flag == "--tree-nodes") {
      options.tree_nodes = parse_count(flag, value());
      if (options.tree_nodes == 0 || options.tree_nodes > kMaxDraftsPerPass) {
        throw std::invalid_argument("--tree-nodes must be between 1 and " + std::to_string(kMaxDraftsPerPass) +
                                    ", got " + std::to_string(options.tree_nodes));
      }
    } else if (flag == "--recycle") {
      options.recycle = parse_count(flag, value());
      has_recycle = true;
      if (options.recycle > TopKTable::kMaxK) {
        throw std::invalid_argument("--recycle must be between 0 and " + std::to_string(TopKTable::kMaxK) +
                                    ", got " + std::to_string(options.recycle));
      }
    } else if (flag == "--tree-width") {
      options.tree_width = parse_count(flag, value());
      has_width = true;
      if (options.tree_width == 0 || options.tree_width > TreeDrafter::kMaxChildren) {
        throw std::invalid_argument("--tree-width must be between 1 and " + std::to_string(TreeDrafter::kMaxChildren) +
                                    ", got " + std::to_string(options.tree_width));
      }
    } else if (flag == "--sampling-mode") {
      has_sampling_mode = true;
      const std::string_view text = value();
      if (text == "exact") {
        options.sampling.mode = SamplingMode::exact;
      } else if (text == "rejection") {
        options.sampling.mode = SamplingMode::rejection;
      } else {
        throw std::invalid_argument("--sampling-mode must be exact or rejection, got '" + std::string(text) + "'");
      }
      if (sampling_filter.empty() && cli::sampling_mode_needs_temperature(options.sampling.mode)) {
        sampling_filter = flag;
      }
    } else if (flag == "--carry-over") {
      options.carry_over = true;
    } else if (flag == "--enrich-counts") {
      options.enrich_counts = true;
    } else if (flag == "--draft-layers") {
      options.draft_layers = parse_count(flag, value());
      if (options.draft_layers == 0) throw std::invalid_argument("--draft-layers must be at least 1, got 0");
    } else if (flag == "--best-of") {
      options.best_of = true;
    } else if (flag == "--no-continue") {
      options.continue_text = false;
    } else if (flag == "--draft-cost") {
      options.draft_cost = parse_real(flag, value());
      if (!(*options.draft_cost >= 0.0)) {
        throw std::invalid_argument("--draft-cost must be >= 0, got " +
                                    ngramspec::detail::number_text(static_cast<float>(*options.draft_cost)));
      }
    } else if (flag == "--steps") {
      options.steps = parse_count(flag, value());
    } else if (cli::is_max_drafts(flag)) {  // --max-drafts, or its old name --k
      const std::string_view text = value();
      if (ngramspec::detail::parse_whole<std::size_t>(text).status == ngramspec::detail::NumberStatus::out_of_range) {
        k_out_of_range(flag, text);
      }
      options.k = parse_count(flag, text);
      k_flag = flag;
    } else if (flag == "--cost") {
      has_cost = true;
      const std::string_view text = value();
      if (text == "measure") {
        options.cost_source = GenerateOptions::Cost::measure;
        options.cost.reset();
      } else if (text == "learn") {
        options.cost_source = GenerateOptions::Cost::learn;
        options.cost.reset();
      } else if (text == "none") {
        options.cost_source = GenerateOptions::Cost::none;
        options.cost.reset();
      } else {
        // learn:SPEC: the curve SPEC, learned from (a curve is a prior anyway, unless --fixed-cost)
        const std::string_view spec = text.starts_with("learn:") ? text.substr(6) : text;
        try {
          options.cost = VerifyCost::parse(spec);
        } catch (const std::invalid_argument& e) {
          throw std::invalid_argument(
              "--cost wants measure, learn, learn:SPEC, none, knee:N or table:TOKENS=COST,...: " +
              std::string(e.what()));
        }
        options.cost_source = GenerateOptions::Cost::given;
      }
    } else if (flag == "--temperature") {
      options.sampling.temperature = parse_real(flag, value());
    } else if (flag == "--top-k") {
      options.sampling.top_k = parse_count(flag, value());
      if (sampling_filter.empty()) sampling_filter = flag;
    } else if (flag == "--top-p") {
      options.sampling.top_p = parse_real(flag, value());
      if (sampling_filter.empty()) sampling_filter = flag;
    } else if (flag == "--min-p") {
      options.sampling.min_p = parse_real(flag, value());
      if (sampling_filter.empty()) sampling_filter = flag;
    } else if (flag == "--seed") {
      options.sampling.seed = parse_count(flag, value());
      if (sampling_filter.empty()) sampling_filter = flag;
    } else if (flag == "--fixed-cost") {
      options.fixed_cost = true;
    } else if (flag == "--no-speculate") {
      options.speculate = false;
    } else if (flag == "--check") {
      options.check = true;
    } else if (flag == "--help" || flag == "-h") {
      options.help = true;
      return options;
    } else {
      throw std::invalid_argument("unknown argument '" + std::string(flag) + "'");
    }
  }
  // A name given empty is named as such: "required" would send its user looking for an option that is there.
  const auto refuse_empty = [&](std::string_view option, const std::string& text) {
    if (given.given(option) && text.empty()) {
      throw std::invalid_argument(std::string(option) + " needs a file name, got ''");
    }
  };
  refuse_empty("--model", options.model);
  refuse_empty("--tokenizer", options.tokenizer);
  if (options.model.empty() || options.tokenizer.empty() || (!has_prompt && options.prompts_file.empty())) {
    throw std::invalid_argument("--model, --tokenizer and --prompt (or --prompts) are required");
  }
  if (has_prompt && !options.prompts_file.empty()) throw std::invalid_argument("--prompt and --prompts exclude each other");
  if (options.tree_nodes != 0 && !k_flag.empty()) {
    throw std::invalid_argument(std::string(k_flag) +
                                " sizes chains: with --tree-nodes the tree's node budget is the one setting");
  }
  if (options.tree_nodes == 0 && (has_recycle || has_width || options.carry_over || options.enrich_counts)) {
    throw std::invalid_argument(std::string(has_recycle         ? "--recycle"
                                            : has_width          ? "--tree-width"
                                            : options.carry_over ? "--carry-over"
                                                                 : "--enrich-counts") +
                                " applies to trees only: it needs --tree-nodes");
  }
  // Drawn candidates are drawn from what the row keeps of each distribution: the widest row covers the most.
  if (!has_recycle && options.sampling.mode == SamplingMode::rejection) options.recycle = GenerateOptions::kRejectionRecycle;
  if (options.enrich_counts && options.recycle == 0) {
    throw std::invalid_argument("--enrich-counts counts the model's top-k, which --recycle 0 does not ask for");
  }
  if (options.draft_cost && !options.best_of) {
    throw std::invalid_argument("--draft-cost prices the self-draft's drafts for --best-of: it needs --best-of");
  }
  if (!options.continue_text && !options.best_of) {
    throw std::invalid_argument("--no-continue keeps --best-of from continuing the text's drafts: it needs --best-of");
  }
  if (options.best_of && options.draft_layers == 0) {
    throw std::invalid_argument("--best-of chooses between the text and the self-draft: it needs --draft-layers");
  }
  if (options.draft_layers != 0 && options.tree_nodes != 0) {
    throw std::invalid_argument("--draft-layers drafts chains, and --tree-nodes drafts trees: give one of them");
  }
  if (options.draft_layers != 0 && !options.speculate) {
    throw std::invalid_argument("--draft-layers drafts with the model's first layers, and --no-speculate drafts nothing");
  }
  if (options.tree_nodes != 0 && !options.speculate) {
    throw std::invalid_argument("--tree-nodes drafts trees, and --no-speculate drafts nothing");
  }
  if (!options.speculate && (!k_flag.empty() || has_cost)) {
    throw std::invalid_argument(std::string(!k_flag.empty() ? k_flag : "--cost") +
                                " sizes drafts, and --no-speculate drafts nothing");
  }
  if (options.fixed_cost && !options.speculate) {
    throw std::invalid_argument("--fixed-cost says how drafts are sized, and --no-speculate drafts nothing");
  }
  if (options.fixed_cost &&
      (options.cost_source == GenerateOptions::Cost::none || options.cost_source == GenerateOptions::Cost::learn)) {
    throw std::invalid_argument(std::string("--fixed-cost plans against the curve of --cost as it is, and --cost ") +
                                (options.cost_source == GenerateOptions::Cost::none ? "none" : "learn") +
                                " gives no curve");
  }
  if (!options.speculate && has_sampling_mode) {
    throw std::invalid_argument("--sampling-mode says how drafts are verified, and --no-speculate drafts nothing");
  }
  if (options.carry_over && options.prompts_file.empty()) {
    throw std::invalid_argument("--carry-over keeps what was learnt from one request to the next: it needs --prompts");
  }
  if (k_flag.empty() && options.cost_source == GenerateOptions::Cost::none) options.k = GenerateOptions::kDefaultKWithoutCost;
  if (options.k == 0 || options.k > kMaxDraftsPerPass) {
    k_out_of_range(k_flag.empty() ? cli::kMaxDraftsAlias : k_flag, std::to_string(options.k));
  }
  cli::check_sampling_options(options.sampling);
  // Greedy decoding takes the most likely token: a filter or a seed would change nothing.
  if (options.sampling.temperature == 0 && !sampling_filter.empty()) {
    throw std::invalid_argument(std::string(sampling_filter) +
                                " applies to sampling only: it needs --temperature above 0 (0 is greedy decoding)");
  }
  return options;
}

}  // namespace ngramspec::llama2
