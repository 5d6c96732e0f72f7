// Fuzz target: the command-line parsers of ngramspec-replay and ngramspec-generate.
//
// The input is split at newlines into arguments (the program name excluded), and both parsers
// get the same arguments. Each must either return options whose fields are in their documented
// ranges and agree with a reference walk over the arguments, or throw std::invalid_argument with
// a message, and throw only when the reference walk finds something wrong (an option given twice
// that is not repeatable, and a list that names an item twice, among others). Every --drafter value
// also goes to make_drafter and every --synthetic value to parse_synthetic: each returns or
// throws std::invalid_argument with a message. Any other exception, a crash or a sanitizer
// report fails.

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "drafter_registry.hpp"
#include "fuzz_input.hpp"
#include "generate_options.hpp"
#include "ngramspec/decode_step.hpp"
#include "ngramspec/draft_tree.hpp"
#include "ngramspec/tree_drafter.hpp"
#include "ngramspec/sampling_options.hpp"
#include "ngramspec/top_k_table.hpp"
#include "ngramspec/verify_cost.hpp"
#include "replay_options.hpp"
#include "token_streams.hpp"

namespace ngramspec::test {
namespace {

void check(bool ok, const char* what) {
  if (!ok) fuzz_fail(what);
}

// Runs `call`; returns whether it returned. std::invalid_argument with a message is a clean
// rejection; anything else thrown breaks the invariant.
template <class Call>
bool returns_or_rejects(Call&& call, const char* what) {
  try {
    call();
    return true;
  } catch (const std::invalid_argument& e) {
    if (std::string_view(e.what()).empty()) fuzz_fail(what);
    return false;
  } catch (...) {
    fuzz_fail(what);
  }
}

// The reference reading of a whole number: one or more digits, nothing else, within uint64.
std::optional<std::uint64_t> reference_count(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::uint64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

// The reference reading of a real: [-]digits[.digits][e[+-]digits] (or .digits), by strtod.
// nullopt when malformed or not finite; `underflow` when strtod reports a range error for a
// nonzero value too small for the type (a parser may reject those).
std::optional<double> reference_real(std::string_view text, bool& underflow) {
  underflow = false;
  std::size_t i = 0;
  if (i < text.size() && text[i] == '-') ++i;
  std::size_t digits = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i, ++digits;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i, ++digits;
  }
  if (digits == 0) return std::nullopt;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    std::size_t exponent_digits = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i, ++exponent_digits;
    if (exponent_digits == 0) return std::nullopt;
  }
  if (i != text.size()) return std::nullopt;
  const std::string copy(text);
  errno = 0;
  const double value = std::strtod(copy.c_str(), nullptr);
  if (!std::isfinite(value)) return std::nullopt;
  underflow = errno == ERANGE || (value != 0 && std::abs(value) < std::numeric_limits<double>::min());
  return value;
}

// The drafters allocate their fixed-size tables when constructed (make_drafter builds one to
// validate it), so specs with big numbers would only measure the allocator; their size limits
// are the drafters' own tests' business.
bool small_numbers(std::string_view spec) {
  std::uint64_t value = 0;
  for (const char c : spec) {
    if (c >= '0' && c <= '9') {
      value = value * 10 + static_cast<std::uint64_t>(c - '0');
      if (value > 4096) return false;
    } else {
      value = 0;
    }
  }
  return true;
}

void fuzz_replay(std::span<const std::string_view> args) {
  // Reference walk.
  static const std::set<std::string_view> kValued = {
      "--streams", "--synthetic", "--drafter", "--k", "--window", "--min-order", "--max-order", "--length",
      "--samples", "--seed", "--limit", "--timing-repeats", "--expect-al", "--tolerance", "--batch", "--policy",
      "--cost", "--records", "--corpus-file", "--tree-nodes"};
  static const std::vector<std::string_view> kPolicies = {"plain", "fixed", "gate", "cost"};
  bool help = false;
  bool wrong = false;      // an argument the parser must reject
  bool may_reject = false;  // a real the reference reads but a parser may find out of range
  bool json = false;
  bool categories = false;
  std::vector<std::string_view> streams, synthetic, drafters;
  std::vector<std::uint64_t> ks, batches, tree_nodes;
  std::vector<std::size_t> policies;  // indexes into kPolicies
  std::vector<std::string> costs;     // the curves' names: "flat" or VerifyCost::spec()
  std::string_view records;           // the last --records
  std::string_view corpus_file;       // the last --corpus-file
  std::vector<std::pair<std::string_view, std::string_view>> last;  // numeric option, its last value
  // Options given once at most: all but the repeatable --streams, --synthetic, --drafter, --cost.
  std::set<std::string_view> given;
  const auto twice = [&](std::string_view arg) {
    if (arg == "--streams" || arg == "--synthetic" || arg == "--drafter" || arg == "--cost") return false;
    return !given.insert(arg).second;
  };
  // A list must not name an item twice.
  const auto add_text = [&](std::vector<std::string_view>& list, std::string_view item) {
    if (std::find(list.begin(), list.end(), item) != list.end()) wrong = true;
    else list.push_back(item);
  };
  const auto add_count = [&](std::vector<std::uint64_t>& list, std::uint64_t item) {
    if (std::find(list.begin(), list.end(), item) != list.end()) wrong = true;
    else list.push_back(item);
  };
  for (std::size_t i = 0; i < args.size() && !wrong && !help; ++i) {
    // --max-drafts is the one name of --k, which stays read as its alias: one option either way.
    const std::string_view arg = args[i] == "--max-drafts" ? std::string_view("--k") : args[i];
    if (arg == "--help" || arg == "-h") {
      help = true;
    } else if ((kValued.count(arg) != 0 || arg == "--json" || arg == "--categories") && twice(arg)) {
      wrong = true;
    } else if (arg == "--json") {
      json = true;
    } else if (arg == "--categories") {
      categories = true;
    } else if (kValued.count(arg) == 0) {
      wrong = true;
    } else if (i + 1 == args.size()) {
      wrong = true;
    } else {
      const std::string_view value = args[++i];
      if (arg == "--streams") {
        add_text(streams, value);
      } else if (arg == "--synthetic") {
        add_text(synthetic, value);
      } else if (arg == "--drafter") {
        add_text(drafters, value);
      } else if (arg == "--k") {
        std::size_t start = 0;
        for (;;) {
          const std::size_t comma = value.find(',', start);
          const auto k = reference_count(value.substr(start, comma == std::string_view::npos ? comma : comma - start));
          if (!k || *k == 0 || *k > kMaxDraftsPerPass) wrong = true;
          else add_count(ks, *k);
          if (comma == std::string_view::npos || wrong) break;
          start = comma + 1;
        }
      } else if (arg == "--tree-nodes") {
        std::size_t start = 0;
        for (;;) {
          const std::size_t comma = value.find(',', start);
          const auto n = reference_count(value.substr(start, comma == std::string_view::npos ? comma : comma - start));
          if (!n || *n == 0 || *n > DraftTree::kMaxNodes) wrong = true;
          else add_count(tree_nodes, *n);
          if (comma == std::string_view::npos || wrong) break;
          start = comma + 1;
        }
      } else if (arg == "--batch") {
        std::size_t start = 0;
        for (;;) {
          const std::size_t comma = value.find(',', start);
          const auto b = reference_count(value.substr(start, comma == std::string_view::npos ? comma : comma - start));
          if (!b || *b == 0 || *b > replay::kMaxBatch) wrong = true;
          else add_count(batches, *b);
          if (comma == std::string_view::npos || wrong) break;
          start = comma + 1;
        }
      } else if (arg == "--policy") {
        std::size_t start = 0;
        for (;;) {
          const std::size_t comma = value.find(',', start);
          const std::string_view item = value.substr(start, comma == std::string_view::npos ? comma : comma - start);
          const auto it = std::find(kPolicies.begin(), kPolicies.end(), item);
          const auto index = static_cast<std::size_t>(it - kPolicies.begin());
          if (it == kPolicies.end() || std::find(policies.begin(), policies.end(), index) != policies.end()) {
            wrong = true;
          } else {
            policies.push_back(index);
          }
          if (comma == std::string_view::npos || wrong) break;
          start = comma + 1;
        }
      } else if (arg == "--cost") {
        // The curve's own parser is the reference for its forms (VerifyCost has its tests).
        std::string name;
        if (value == "flat") {
          name = "flat";
        } else {
          try {
            name = VerifyCost::parse(value).spec();
          } catch (const std::invalid_argument&) {
            wrong = true;
          }
        }
        if (!wrong && std::find(costs.begin(), costs.end(), name) != costs.end()) wrong = true;
        if (!wrong) costs.push_back(name);
      } else if (arg == "--records") {
        // START:END, each empty, digits (at most 18), or digits and '%' up to 100.
        const auto bound_ok = [](std::string_view bound) {
          const bool percent = !bound.empty() && bound.back() == '%';
          if (percent) bound.remove_suffix(1);
          if (bound.empty()) return !percent;
          if (bound.size() > 18 || !std::all_of(bound.begin(), bound.end(), [](char c) { return c >= '0' && c <= '9'; })) {
            return false;
          }
          return !percent || std::stoull(std::string(bound)) <= 100;
        };
        const std::size_t colon = value.find(':');
        if (colon == std::string_view::npos || value.find(':', colon + 1) != std::string_view::npos ||
            !bound_ok(value.substr(0, colon)) || !bound_ok(value.substr(colon + 1))) {
          wrong = true;
        } else {
          records = value;
        }
      } else if (arg == "--corpus-file") {
        if (value.empty()) wrong = true;
        corpus_file = value;
      } else if (arg == "--expect-al" || arg == "--tolerance") {
        bool underflow = false;
        const auto real = reference_real(value, underflow);
        if (!real || *real < 0) wrong = true;
        may_reject = may_reject || underflow;
        last.emplace_back(arg, value);
      } else {
        const auto count = reference_count(value);
        const std::uint64_t min_value = arg == "--seed" ? 0 : 1;
        const std::uint64_t max_value = arg == "--timing-repeats"                    ? replay::kMaxTimingRepeats
                                        : arg == "--length" || arg == "--samples" ? replay::kMaxSyntheticTokens
                                                                                  : std::numeric_limits<std::size_t>::max();
        if (!count || *count < min_value || *count > max_value) wrong = true;
        last.emplace_back(arg, value);
      }
    }
  }
  if (!help && streams.empty() && synthetic.empty()) wrong = true;
  if (!help) {
    // --tolerance is --expect-al's margin: alone it would check nothing.
    bool tolerance = false, expect = false;
    for (const auto& [name, text] : last) {
      tolerance = tolerance || name == "--tolerance";
      expect = expect || name == "--expect-al";
    }
    if (tolerance && !expect) wrong = true;
  }
  if (!help && !tree_nodes.empty()) {
    // Tree rows come beside the chain rows: not with --expect-al, and not with --policy plain alone.
    for (const auto& [name, text] : last) {
      if (name == "--expect-al") wrong = true;
    }
    if (policies.size() == 1 && kPolicies[policies[0]] == "plain") wrong = true;
  }
  if (!help && !wrong && !synthetic.empty()) {
    // Synthetic tokens in all: the specs x the last --samples x the last --length, bounded.
    std::uint64_t length = 2048;
    std::uint64_t samples = 4;
    for (const auto& [name, text] : last) {
      if (name == "--length") length = *reference_count(text);
      if (name == "--samples") samples = *reference_count(text);
    }
    if (samples * length > replay::kMaxSyntheticTokens / synthetic.size()) wrong = true;
  }

  replay::ReplayOptions options;
  const bool parsed = returns_or_rejects([&] { options = replay::parse_replay_options(args); },
                                         "parse_replay_options threw something other than a named invalid_argument");
  if (!parsed) {
    check(wrong || may_reject, "parse_replay_options rejected arguments the reference accepts");
    return;
  }
  check(!wrong, "parse_replay_options accepted arguments the reference rejects");
  check(options.help == help, "replay: --help not reported");
  if (help) return;
  check(!options.stream_files.empty() || !options.synthetic_specs.empty(), "replay: nothing to replay accepted");
  check(std::equal(options.stream_files.begin(), options.stream_files.end(), streams.begin(), streams.end()),
        "replay: --streams values differ");
  check(std::equal(options.synthetic_specs.begin(), options.synthetic_specs.end(), synthetic.begin(), synthetic.end()),
        "replay: --synthetic values differ");
  if (drafters.empty()) {
    // The default drafter reads a --corpus-file when one is named.
    const std::string expected_default = corpus_file.empty() ? "match" : "match:file=1";
    check(options.drafter_names == std::vector<std::string>{expected_default},
          "replay: the default drafter is not match (match:file=1 with --corpus-file)");
  } else {
    check(std::equal(options.drafter_names.begin(), options.drafter_names.end(), drafters.begin(), drafters.end()),
          "replay: --drafter values differ");
  }
  if (ks.empty()) ks.push_back(4);
  check(std::equal(options.ks.begin(), options.ks.end(), ks.begin(), ks.end()), "replay: --k values differ");
  check(std::equal(options.tree_nodes.begin(), options.tree_nodes.end(), tree_nodes.begin(), tree_nodes.end()),
        "replay: --tree-nodes values differ");
  for (const std::size_t k : options.ks) check(k >= 1 && k <= kMaxDraftsPerPass, "replay: k out of range");
  check(options.json == json, "replay: --json differs");
  check(options.categories == categories, "replay: --categories differs");
  if (batches.empty()) batches.push_back(1);
  check(std::equal(options.batches.begin(), options.batches.end(), batches.begin(), batches.end()),
        "replay: --batch values differ");
  check(options.costs.size() == costs.size(), "replay: --cost values differ");
  for (std::size_t i = 0; i < std::min(costs.size(), options.costs.size()); ++i) {
    check(options.costs[i].name == costs[i], "replay: a --cost name differs");
  }
  if (policies.empty()) {
    policies = costs.empty() ? std::vector<std::size_t>{2} : std::vector<std::size_t>{0, 1, 2, 3};
  }
  std::sort(policies.begin(), policies.end());
  check(options.policies.size() == policies.size(), "replay: --policy values differ");
  for (std::size_t i = 0; i < std::min(policies.size(), options.policies.size()); ++i) {
    check(replay::to_string(options.policies[i]) == kPolicies[policies[i]], "replay: a --policy value differs");
  }
  check(options.defaults.window >= 1 && options.defaults.min_order >= 1 && options.defaults.max_order >= 1,
        "replay: a drafter default is 0");
  check(options.length >= 1 && options.samples >= 1, "replay: --length or --samples is 0");
  check(options.timing_repeats >= 1 && options.timing_repeats <= replay::kMaxTimingRepeats,
        "replay: --timing-repeats out of range");
  check(options.expect_al == -1 || (std::isfinite(options.expect_al) && options.expect_al >= 0),
        "replay: --expect-al out of range");
  check(std::isfinite(options.tolerance) && options.tolerance >= 0, "replay: --tolerance out of range");
  // The last value of each numeric option is the field's value.
  const auto expected = [&](std::string_view option) -> std::optional<std::string_view> {
    std::optional<std::string_view> value;
    for (const auto& [name, text] : last) {
      if (name == option) value = text;
    }
    return value;
  };
  const auto check_count = [&](std::string_view option, std::uint64_t field, std::uint64_t fallback) {
    const auto text = expected(option);
    check(field == (text ? *reference_count(*text) : fallback), "replay: a numeric field differs from its option");
  };
  check_count("--window", options.defaults.window, replay::DrafterDefaults{}.window);
  check_count("--min-order", options.defaults.min_order, replay::DrafterDefaults{}.min_order);
  check_count("--max-order", options.defaults.max_order, replay::DrafterDefaults{}.max_order);
  check_count("--length", options.length, 2048);
  check_count("--samples", options.samples, 4);
  check_count("--seed", options.seed, 1);
  check_count("--limit", options.limit, 0);
  check_count("--timing-repeats", options.timing_repeats, 3);
  check(options.records.begin + ":" + options.records.end == (records.empty() ? std::string(":") : std::string(records)),
        "replay: --records differs from its option");
  check(options.corpus_file == corpus_file, "replay: --corpus-file differs from its option");
  const auto check_real = [&](std::string_view option, double field, double fallback) {
    const auto text = expected(option);
    bool underflow = false;
    check(field == (text ? *reference_real(*text, underflow) : fallback), "replay: a real field differs from its option");
  };
  check_real("--expect-al", options.expect_al, -1);
  check_real("--tolerance", options.tolerance, 0.005);

  for (const std::string& spec : options.drafter_names) {
    if (!small_numbers(spec) || !small_numbers(std::to_string(options.defaults.window))) continue;
    returns_or_rejects(
        [&] {
          const replay::DrafterEntry entry = replay::make_drafter(spec, options.defaults);
          check(!entry.name.empty() && entry.run != nullptr, "make_drafter returned an unusable entry");
        },
        "make_drafter threw something other than a named invalid_argument");
  }
  for (const std::string& text : options.synthetic_specs) {
    returns_or_rejects(
        [&] {
          const replay::SyntheticSpec spec = replay::parse_synthetic(text);
          check(spec.kind == "periodic" || spec.kind == "random" || spec.kind == "mixture",
                "parse_synthetic returned an unknown kind");
          check(spec.kind == "random" || (spec.period >= 2 && spec.period <= (std::size_t{1} << 20)),
                "parse_synthetic returned a period out of range");
          check(spec.noise >= 0.0 && spec.noise <= 1.0, "parse_synthetic returned a noise out of range");
        },
        "parse_synthetic threw something other than a named invalid_argument");
  }
}

void fuzz_generate(std::span<const std::string_view> args) {
  static const std::set<std::string_view> kCounts = {"--steps",   "--k",          "--top-k",       "--seed",
                                                     "--tree-nodes", "--recycle", "--tree-width", "--draft-layers"};
  static const std::set<std::string_view> kReals = {"--temperature", "--top-p", "--min-p", "--draft-cost"};
  bool help = false;
  bool wrong = false;
  bool may_reject = false;
  bool has_prompt = false;
  bool speculate = true;
  bool check_flag = false;
  bool has_k = false;
  bool has_recycle = false;
  bool has_width = false;
  bool has_cost = false;
  bool has_mode = false;  // --sampling-mode given
  bool sampling_filter = false;  // --top-k, --top-p, --min-p or --seed given
  llama2::GenerateOptions expected;
  std::set<std::string_view> given;  // every option is given once at most
  for (std::size_t i = 0; i < args.size() && !wrong && !help; ++i) {
    // --max-drafts is the one name of --k, which stays read as its alias: one option either way.
    const std::string_view arg = args[i] == "--max-drafts" ? std::string_view("--k") : args[i];
    if (arg == "--help" || arg == "-h") {
      help = true;
    } else if (!given.insert(arg).second) {
      wrong = true;
    } else if (arg == "--no-speculate") {
      speculate = false;
    } else if (arg == "--check") {
      check_flag = true;
    } else if (arg == "--carry-over") {
      expected.carry_over = true;
    } else if (arg == "--enrich-counts") {
      expected.enrich_counts = true;
    } else if (arg == "--best-of") {
      expected.best_of = true;
    } else if (arg == "--no-continue") {
      expected.continue_text = false;
    } else if (arg != "--model" && arg != "--tokenizer" && arg != "--prompt" && arg != "--prompts" && arg != "--cost" &&
               arg != "--sampling-mode" && kCounts.count(arg) == 0 && kReals.count(arg) == 0) {
      wrong = true;
    } else if (i + 1 == args.size()) {
      wrong = true;
    } else {
      const std::string_view value = args[++i];
      if (arg == "--model") {
        expected.model = value;
      } else if (arg == "--tokenizer") {
        expected.tokenizer = value;
      } else if (arg == "--prompt") {
        expected.prompt = value;
        has_prompt = true;
      } else if (arg == "--prompts") {
        expected.prompts_file = value;
        wrong = value.empty();
      } else if (arg == "--sampling-mode") {
        has_mode = true;
        if (value == "exact") {
          expected.sampling.mode = SamplingMode::exact;
        } else if (value == "rejection") {
          expected.sampling.mode = SamplingMode::rejection;
        } else {
          wrong = true;
        }
        // exact, the default, is greedy decoding at temperature 0; rejection needs sampling.
        sampling_filter = sampling_filter || value == "rejection";
      } else if (arg == "--cost") {
        has_cost = true;
        if (value == "measure") {
          expected.cost_source = llama2::GenerateOptions::Cost::measure;
          expected.cost.reset();
        } else if (value == "none") {
          expected.cost_source = llama2::GenerateOptions::Cost::none;
          expected.cost.reset();
        } else {
          try {
            expected.cost = VerifyCost::parse(value);
            expected.cost_source = llama2::GenerateOptions::Cost::given;
          } catch (const std::invalid_argument&) {
            wrong = true;
          }
        }
      } else if (kCounts.count(arg) != 0) {
        const auto count = reference_count(value);
        if (!count) {
          wrong = true;
        } else if (arg == "--steps") {
          expected.steps = *count;
        } else if (arg == "--k") {
          expected.k = *count;
          has_k = true;
        } else if (arg == "--top-k") {
          expected.sampling.top_k = *count;
          sampling_filter = true;
        } else if (arg == "--tree-nodes") {
          expected.tree_nodes = *count;
          wrong = *count == 0 || *count > kMaxDraftsPerPass;
        } else if (arg == "--recycle") {
          expected.recycle = *count;
          has_recycle = true;
          wrong = *count > TopKTable::kMaxK;
        } else if (arg == "--tree-width") {
          expected.tree_width = *count;
          has_width = true;
          wrong = *count == 0 || *count > TreeDrafter::kMaxChildren;
        } else if (arg == "--draft-layers") {
          expected.draft_layers = *count;
          wrong = *count == 0;
        } else {
          expected.sampling.seed = *count;
          sampling_filter = true;
        }
      } else {
        bool underflow = false;
        const auto real = reference_real(value, underflow);
        const float as_float = real ? std::strtof(std::string(value).c_str(), nullptr) : 0.0f;
        if (!real || std::isinf(as_float)) {
          wrong = true;
        } else {
          // Below a float's normal range a parser may report a range error.
          may_reject = may_reject || underflow || (*real != 0 && std::abs(*real) < double(std::numeric_limits<float>::min()));
          if (arg == "--draft-cost") {
            expected.draft_cost = as_float;
            wrong = !(as_float >= 0.0f);
          } else {
            (arg == "--temperature" ? expected.sampling.temperature
                                    : arg == "--top-p" ? expected.sampling.top_p : expected.sampling.min_p) = as_float;
            sampling_filter = sampling_filter || arg != "--temperature";
          }
        }
      }
    }
  }
  if (!help && !wrong) {
    if (!has_k && expected.cost_source == llama2::GenerateOptions::Cost::none) {
      expected.k = llama2::GenerateOptions::kDefaultKWithoutCost;
    }
    if (expected.model.empty() || expected.tokenizer.empty() || (!has_prompt && expected.prompts_file.empty())) {
      wrong = true;
    }
    if (has_prompt && !expected.prompts_file.empty()) wrong = true;
    const bool trees = expected.tree_nodes != 0;
    if (trees && (has_k || !speculate)) wrong = true;
    if (!trees && (has_recycle || has_width || expected.carry_over || expected.enrich_counts)) wrong = true;
    if (!has_recycle && expected.sampling.mode == SamplingMode::rejection) {
      expected.recycle = llama2::GenerateOptions::kRejectionRecycle;
    }
    if (expected.enrich_counts && expected.recycle == 0) wrong = true;
    if (expected.draft_cost && !expected.best_of) wrong = true;
    if (!expected.continue_text && !expected.best_of) wrong = true;
    if (expected.best_of && expected.draft_layers == 0) wrong = true;
    if (expected.draft_layers != 0 && (trees || !speculate)) wrong = true;
    if (expected.k == 0 || expected.k > kMaxDraftsPerPass) wrong = true;
    if (!speculate && (has_k || has_cost)) wrong = true;                  // nothing to size
    if (!speculate && has_mode) wrong = true;                             // nothing to verify
    if (expected.carry_over && expected.prompts_file.empty()) wrong = true;  // one request: nothing to carry
    try {
      validate(expected.sampling);
    } catch (const std::invalid_argument&) {
      wrong = true;
    }
    if (expected.sampling.temperature == 0 && sampling_filter) wrong = true;  // greedy: nothing to filter or seed
  }

  llama2::GenerateOptions options;
  const bool parsed = returns_or_rejects([&] { options = llama2::parse_generate_options(args); },
                                         "parse_generate_options threw something other than a named invalid_argument");
  if (!parsed) {
    check(wrong || may_reject, "parse_generate_options rejected arguments the reference accepts");
    return;
  }
  check(!wrong, "parse_generate_options accepted arguments the reference rejects");
  check(options.help == help, "generate: --help not reported");
  if (help) return;
  check(!options.model.empty() && !options.tokenizer.empty(), "generate: a required option is empty");
  check(options.k >= 1 && options.k <= kMaxDraftsPerPass, "generate: --k out of range");
  check(options.model == expected.model && options.tokenizer == expected.tokenizer &&
            options.prompt == expected.prompt,
        "generate: a text option differs");
  check(options.steps == expected.steps && options.k == expected.k &&
            options.sampling.top_k == expected.sampling.top_k && options.sampling.seed == expected.sampling.seed,
        "generate: a numeric option differs");
  check(options.sampling.temperature == expected.sampling.temperature &&
            options.sampling.top_p == expected.sampling.top_p && options.sampling.min_p == expected.sampling.min_p,
        "generate: a real option differs");
  check(options.speculate == speculate && options.check == check_flag && options.carry_over == expected.carry_over &&
            options.enrich_counts == expected.enrich_counts,
        "generate: a flag differs");
  check(options.prompts_file == expected.prompts_file && options.tree_nodes == expected.tree_nodes &&
            options.recycle == expected.recycle && options.tree_width == expected.tree_width,
        "generate: a tree or prompts option differs");
  check(options.sampling.mode == expected.sampling.mode, "generate: --sampling-mode differs");
  check(options.draft_layers == expected.draft_layers && options.best_of == expected.best_of &&
            options.continue_text == expected.continue_text &&
            options.draft_cost == expected.draft_cost,
        "generate: a draft model option differs");
  check(options.cost_source == expected.cost_source && options.cost.has_value() == expected.cost.has_value() &&
            (!options.cost || options.cost->spec() == expected.cost->spec()),
        "generate: --cost differs");
  try {
    validate(options.sampling);
  } catch (...) {
    fuzz_fail("generate: invalid sampling options accepted");
  }
}

}  // namespace
}  // namespace ngramspec::test

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> args;
  if (!text.empty()) {
    std::size_t start = 0;
    for (;;) {
      const std::size_t newline = text.find('\n', start);
      if (newline == std::string_view::npos) {
        // A final newline ends the last argument rather than starting an empty one.
        if (start < text.size()) args.push_back(text.substr(start));
        break;
      }
      args.push_back(text.substr(start, newline - start));
      start = newline + 1;
    }
  }
  if (args.size() > 64) return 0;  // longer command lines only repeat what shorter ones cover
  ngramspec::test::fuzz_replay(args);
  ngramspec::test::fuzz_generate(args);
  return 0;
}
