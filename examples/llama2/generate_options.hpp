#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ngramspec/sampling_options.hpp"
#include "ngramspec/verify_cost.hpp"

namespace ngramspec::llama2 {

/// The command line of ngramspec-generate, parsed and checked (see its --help).
struct GenerateOptions {
  bool help = false;       ///< --help / -h: print the usage and do nothing else
  std::string model;       ///< --model: required, non-empty
  std::string tokenizer;   ///< --tokenizer: required, non-empty
  std::string prompt;      ///< --prompt: the prompt (may be empty); this or --prompts is required
  std::string prompts_file;  ///< --prompts: a file of prompts, one a line, each a request of its own
  /// --tree-nodes: 0 drafts chains (the default); N verifies trees of up to N drafts a pass (1 .. 1024),
  /// with the model's top-k fed back (--recycle). Replaces --k, which is then refused.
  std::size_t tree_nodes = 0;
  /// --recycle: the model's top tokens kept per token for trees (0: text only; <= 32); default 8, and
  /// kRejectionRecycle with --sampling-mode rejection
  std::size_t recycle = 8;
  /// --tree-width: most children a tree node offers (TreeConfig::max_children, 1 .. 16; 1 drafts chains
  /// through the tree drafter, its candidates drawn in rejection mode)
  std::size_t tree_width = 8;
  bool carry_over = false;  ///< --carry-over: trees keep what they learnt (top-k, counts) across --prompts
  bool enrich_counts = false;  ///< --enrich-counts: trees count the model's top-1 as text (TreeConfig::enrich_counts)
  /// --draft-layers: 0 drafts with MatchDrafter (the default); L drafts with a ModelDrafter over the model's
  /// first L layers, then its final norm and classifier (self-speculation: Transformer::early_exit), L from 1 to
  /// the model's n_layers (checked once the model is read). Chains only: refused with --tree-nodes.
  std::size_t draft_layers = 0;
  /// --best-of: with --draft-layers, each pass drafted by whichever of MatchDrafter and the self-draft promises
  /// more tokens per unit of cost (BestOfDrafter), the self-draft's drafts costing L / n_layers of a pass each
  bool best_of = false;
  /// false with --no-continue: --best-of never sends the text's drafts continued by the self-draft (a third
  /// choice each pass, BestOfConfig::continue_first, on by default)
  bool continue_text = true;
  /// --draft-cost: with --best-of, what one self-drafted token costs in one-token passes (default L / n_layers;
  /// 0 compares tokens per pass alone)
  std::optional<double> draft_cost;
  std::size_t steps = 256;  ///< --steps
  /// --k: 1 .. kMaxDraftsPerPass; by default kDefaultK, or kDefaultKWithoutCost with --cost none.
  std::size_t k = kDefaultK;
  bool speculate = true;    ///< false with --no-speculate
  bool check = false;       ///< --check
  SamplingOptions sampling;  ///< --temperature, --top-k, --top-p, --min-p, --seed, --sampling-mode; passes validate()
  /// --cost: measure the model's verify-pass cost at start (the default, "measure"), use the one given
  /// (`cost`, from "knee:N", "table:T=C,..." or "learn:SPEC"), learn it with no curve at start ("learn"),
  /// or draft without a cost model ("none"). A curve, measured or given, is the prior of a cost learned
  /// from the passes served (LearnedCost), unless --fixed-cost.
  enum class Cost { measure, given, learn, none };
  Cost cost_source = Cost::measure;
  std::optional<VerifyCost> cost;  ///< the cost given, when cost_source is Cost::given
  /// --fixed-cost: plan every pass against the curve as it is, not learning from the passes.
  bool fixed_cost = false;

  /// The default --k when drafts are sized by a cost model: long copies may run, and the cost keeps
  /// drafts that do not pay out of the pass.
  static constexpr std::size_t kDefaultK = 16;
  /// The default --k with --cost none, where the drafter's gate alone sizes the drafts.
  static constexpr std::size_t kDefaultKWithoutCost = 4;
  /// The default --recycle in the rejection mode, where trees draw from the rows' distributions: the most
  /// a row keeps (TopKTable::kMaxK), the widest rows covering the most of each distribution
  /// (docs/BENCHMARKS.md#sampling compares it with 8).
  static constexpr std::size_t kRejectionRecycle = 32;
};

/// Parses the arguments after the program name. Throws std::invalid_argument naming the option
/// and the value for an unknown option, an option given twice, a missing or malformed value (a
/// number with a sign, spaces, trailing characters, out of range, or not finite), a missing
/// required option, or options that fail their checks. Stops at --help, returning what it parsed with `help` set.
[[nodiscard]] GenerateOptions parse_generate_options(std::span<const std::string_view> args);

}  // namespace ngramspec::llama2
