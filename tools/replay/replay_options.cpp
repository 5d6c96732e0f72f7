#include "replay_options.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>

#include "command_line.hpp"
#include "ngramspec/decode_step.hpp"
#include "ngramspec/detail/parse_number.hpp"
#include "ngramspec/draft_tree.hpp"

namespace ngramspec::replay {
namespace {

std::string in_quotes(std::string_view text) { return "'" + std::string(text) + "'"; }

// A whole number in [min_value, max_value]: digits only, so no sign, no spaces, no suffix.
// With a max_value, every rejection names the whole range.
std::size_t parse_count(std::string_view option, std::string_view text, std::size_t min_value,
                        std::size_t max_value = std::numeric_limits<std::size_t>::max()) {
  const ngramspec::detail::ParsedNumber<std::size_t> count = ngramspec::detail::parse_whole<std::size_t>(text);
  if (max_value != std::numeric_limits<std::size_t>::max()) {
    const std::string range = "from " + std::to_string(min_value) + " to " + std::to_string(max_value);
    if (count.status == ngramspec::detail::NumberStatus::malformed) {
      throw std::invalid_argument(std::string(option) + ": " + in_quotes(text) + " is not a whole number " + range);
    }
    if (!count.ok() || count.value < min_value || count.value > max_value) {
      throw std::invalid_argument(std::string(option) + ": " + in_quotes(text) + " is out of range: it must be " + range);
    }
    return count.value;
  }
  if (count.status == ngramspec::detail::NumberStatus::out_of_range) {
    throw std::invalid_argument(std::string(option) + ": " + in_quotes(text) + " is more than " +
                                std::to_string(max_value));
  }
  if (!count.ok() || count.value < min_value) {
    throw std::invalid_argument(std::string(option) + ": " + in_quotes(text) + " is not a whole number >= " +
                                std::to_string(min_value));
  }
  return count.value;
}

// A finite number >= 0 in plain decimal or exponent notation (no sign, spaces, hex, inf or nan).
double parse_non_negative(std::string_view option, std::string_view text) {
  const ngramspec::detail::ParsedNumber<double> real = ngramspec::detail::parse_real<double>(text);
  if (real.status == ngramspec::detail::NumberStatus::out_of_range) {
    throw std::invalid_argument(std::string(option) + ": " + in_quotes(text) + " is out of a double's range");
  }
  if (!real.ok() || !(real.value >= 0)) {
    throw std::invalid_argument(std::string(option) + ": " + in_quotes(text) + " is not a non-negative number");
  }
  return real.value;
}

// Calls each(item) for every comma-separated item of `list`: "", "4," and "4,,8" hold empty items.
template <class Each>
void for_each_item(std::string_view list, const Each& each) {
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = list.find(',', start);
    each(list.substr(start, comma == std::string_view::npos ? comma : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
}

Policy parse_policy(std::string_view text) {
  for (const Policy p : {Policy::plain, Policy::fixed, Policy::gate, Policy::cost}) {
    if (text == to_string(p)) return p;
  }
  throw std::invalid_argument("--policy: " + in_quotes(text) +
                              " is not a policy: expected a comma-separated list of plain, fixed, gate and cost");
}

}  // namespace

ReplayOptions parse_replay_options(std::span<const std::string_view> args) {
  ReplayOptions options;
  bool has_tolerance = false;  // --tolerance given: the margin of --expect-al
  cli::GivenOptions given;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    const auto value = [&]() -> std::string_view {
      if (i + 1 >= args.size()) throw std::invalid_argument(std::string(arg) + " needs a value");
      return args[++i];
    };
    // Each value of these is an item of a list; every other option is given once.
    if (arg != "--streams" && arg != "--synthetic" && arg != "--drafter" && arg != "--cost" && arg != "--help" &&
        arg != "-h") {
      given.once(arg);
    }
    // A list must not name an item twice: its rows would be printed twice.
    const auto add_count = [&](std::vector<std::size_t>& list, std::string_view item, std::size_t most) {
      const std::size_t count = parse_count(arg, item, 1, most);
      cli::refuse_repeated_item(arg, list, count, item);
      list.push_back(count);
    };
    const auto add_text = [&](std::vector<std::string>& list, std::string_view item) {
      cli::refuse_repeated_item(arg, list, item, item);
      list.emplace_back(item);
    };
    if (arg == "--help" || arg == "-h") {
      options.help = true;
      return options;
    } else if (arg == "--streams") {
      add_text(options.stream_files, value());
    } else if (arg == "--synthetic") {
      add_text(options.synthetic_specs, value());
    } else if (arg == "--drafter") {
      add_text(options.drafter_names, value());
    } else if (cli::is_max_drafts(arg)) {  // --max-drafts, or its old name --k
      // Every comma-separated item must be a number: "", "4," and "4,,8" are mistakes.
      for_each_item(value(), [&](std::string_view item) { add_count(options.ks, item, kMaxDraftsPerPass); });
    } else if (arg == "--tree-nodes") {
      for_each_item(value(), [&](std::string_view item) { add_count(options.tree_nodes, item, DraftTree::kMaxNodes); });
    } else if (arg == "--batch") {
      for_each_item(value(), [&](std::string_view item) { add_count(options.batches, item, kMaxBatch); });
    } else if (arg == "--cost") {
      const std::string_view spec = value();
      std::optional<CostCurve> cost;
      try {
        cost = parse_cost_curve(spec);
      } catch (const std::invalid_argument& e) {
        // VerifyCost's message names the spec and the problem; say which option gave it.
        std::string what = e.what();
        const std::string_view prefix = "ngramspec::VerifyCost: ";
        if (what.rfind(prefix, 0) == 0) what.erase(0, prefix.size());
        throw std::invalid_argument("--cost: " + what);
      }
      for (const CostCurve& c : options.costs) {
        if (c.name == cost->name) {
          throw std::invalid_argument("--cost: " + in_quotes(spec) + " is given twice (as " + in_quotes(c.name) + ")");
        }
      }
      options.costs.push_back(std::move(*cost));
    } else if (arg == "--price") {
      options.price = PassPrice::parse(value());
    } else if (arg == "--policy") {
      for_each_item(value(), [&](std::string_view item) {
        const Policy policy = parse_policy(item);
        if (std::find(options.policies.begin(), options.policies.end(), policy) != options.policies.end()) {
          throw std::invalid_argument("--policy: " + in_quotes(item) + " is given twice");
        }
        options.policies.push_back(policy);
      });
    } else if (arg == "--categories") {
      options.categories = true;
    } else if (arg == "--window") {
      options.defaults.window = parse_count(arg, value(), 1);
    } else if (arg == "--min-order") {
      options.defaults.min_order = parse_count(arg, value(), 1);
    } else if (arg == "--max-order") {
      options.defaults.max_order = parse_count(arg, value(), 1);
    } else if (arg == "--length") {
      options.length = parse_count(arg, value(), 1, kMaxSyntheticTokens);
    } else if (arg == "--samples") {
      options.samples = parse_count(arg, value(), 1, kMaxSyntheticTokens);
    } else if (arg == "--seed") {
      options.seed = parse_count(arg, value(), 0);
    } else if (arg == "--records") {
      options.records = parse_record_range(arg, value());
    } else if (arg == "--corpus-file") {
      options.corpus_file = std::string(value());
      if (options.corpus_file.empty()) throw std::invalid_argument("--corpus-file: the file name is empty");
    } else if (arg == "--limit") {
      options.limit = parse_count(arg, value(), 1);
    } else if (arg == "--timing-repeats") {
      options.timing_repeats = parse_count(arg, value(), 1, kMaxTimingRepeats);
    } else if (arg == "--expect-al") {
      options.expect_al = parse_non_negative(arg, value());
    } else if (arg == "--tolerance") {
      options.tolerance = parse_non_negative(arg, value());
      has_tolerance = true;
    } else if (arg == "--json") {
      options.json = true;
    } else {
      throw std::invalid_argument("unknown option " + in_quotes(arg) + " (see --help)");
    }
  }
  if (options.stream_files.empty() && options.synthetic_specs.empty()) {
    throw std::invalid_argument("nothing to replay: give --streams FILE or --synthetic SPEC (see --help)");
  }
  // --samples and --length are each at most kMaxSyntheticTokens (2^24), so their product fits.
  const std::size_t specs = options.synthetic_specs.size();
  if (specs != 0 && options.samples * options.length > kMaxSyntheticTokens / specs) {
    throw std::invalid_argument("--synthetic: " + std::to_string(specs) + " spec(s) x --samples " +
                                std::to_string(options.samples) + " x --length " + std::to_string(options.length) +
                                " tokens is more than the most synthetic tokens, " +
                                std::to_string(kMaxSyntheticTokens));
  }
  if (has_tolerance && options.expect_al < 0) {
    throw std::invalid_argument("--tolerance is the margin of --expect-al: it needs --expect-al");
  }
  // --expect-al checks one configuration; tree rows beside the chain rows would be a second.
  if (!options.tree_nodes.empty() && options.expect_al >= 0) {
    throw std::invalid_argument("--expect-al: not with --tree-nodes: it checks one configuration, and the tree rows "
                                "come beside the chain rows of --k");
  }
  const bool learns = std::any_of(options.costs.begin(), options.costs.end(), [](const CostCurve& c) { return c.learn; });
  if (learns && !options.price) {
    throw std::invalid_argument("--cost learn: a learned cost learns from what passes cost; give it --price SPEC");
  }
  if (options.price && !options.tree_nodes.empty()) {
    throw std::invalid_argument("--price: trees are priced by --cost alone; leave --tree-nodes out");
  }
  // The library's default drafter; with a corpus file, reading it (a file named is a file used).
  if (options.drafter_names.empty()) {
    options.drafter_names.emplace_back(options.corpus_file.empty() ? "match" : "match:file=1");
  }
  if (options.ks.empty()) options.ks.push_back(4);
  if (options.batches.empty()) options.batches.push_back(1);
  if (options.policies.empty()) {
    if (options.costs.empty()) options.policies = {Policy::gate};
    else options.policies = {Policy::plain, Policy::fixed, Policy::gate, Policy::cost};
  }
  std::sort(options.policies.begin(), options.policies.end());
  if (!options.tree_nodes.empty() && options.policies == std::vector<Policy>{Policy::plain}) {
    throw std::invalid_argument("--tree-nodes: --policy plain alone sends no tree; add fixed, gate or cost");
  }
  return options;
}

}  // namespace ngramspec::replay
