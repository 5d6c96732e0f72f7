#pragma once

#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "drafter_registry.hpp"
#include "serving_sim.hpp"

namespace ngramspec::replay {

/// The command line of ngramspec-replay, parsed and checked (see its --help).
struct ReplayOptions {
  bool help = false;                         ///< --help / -h: print the usage and do nothing else
  std::vector<std::string> stream_files;     ///< --streams, in order
  std::vector<std::string> synthetic_specs;  ///< --synthetic, unparsed (parse_synthetic checks them)
  /// --drafter, unparsed (make_drafter checks them); default {"match"}, or {"match:file=1"} with a
  /// --corpus-file (the default drafter reads the file named).
  std::vector<std::string> drafter_names;
  std::vector<std::size_t> ks;               ///< --k: each in 1 .. kMaxDraftsPerPass; default {4}
  /// --tree-nodes: node budgets of the tree replays, each in 1 .. DraftTree::kMaxNodes; empty
  /// (the default): no tree replay.
  std::vector<std::size_t> tree_nodes;
  std::vector<std::size_t> batches;          ///< --batch: each in 1 .. kMaxBatch; default {1}
  /// --cost, repeatable, parsed: "flat", "knee:N" or "table:T=C,..."; empty (the default): flat only.
  std::vector<CostCurve> costs;
  /// --price: what passes really cost, hidden from the planner (which sees its --cost); every
  /// row is priced by it. Needed by --cost learn.
  std::optional<PassPrice> price;
  /// --policy, in the order plain, fixed, gate, cost whatever the order given; default {gate}
  /// without --cost, {plain, fixed, gate, cost} with it.
  std::vector<Policy> policies;
  bool categories = false;                   ///< --categories: the table prints every category row
  DrafterDefaults defaults;                  ///< --window, --min-order, --max-order: each >= 1
  std::size_t length = 2048;                 ///< --length: 1 .. kMaxSyntheticTokens
  std::size_t samples = 4;                   ///< --samples: 1 .. kMaxSyntheticTokens
  std::size_t seed = 1;                      ///< --seed
  std::size_t limit = 0;                     ///< --limit: >= 1 when given; 0 = every record
  RecordRange records;                       ///< --records START:END of each --streams file (after --limit)
  std::string corpus_file;                   ///< --corpus-file: mapped by the program into defaults.corpus_file
  std::size_t timing_repeats = 3;            ///< --timing-repeats: 1 .. kMaxTimingRepeats
  bool json = false;                         ///< --json
  double expect_al = -1;                     ///< --expect-al: finite and >= 0 when given; -1 = no check
  double tolerance = 0.005;                  ///< --tolerance: finite and >= 0
};

/// Most --batch: records running at once in a serving simulation.
inline constexpr std::size_t kMaxBatch = 65536;

/// Most synthetic tokens in all (--synthetic specs x --samples x --length): 2^24 token ids
/// (64 MiB), each replayed by every drafter, k, batch and policy; --length and --samples are
/// each at most this too.
inline constexpr std::size_t kMaxSyntheticTokens = std::size_t{1} << 24;

/// Most --timing-repeats: the runner counts repeats in an int.
inline constexpr std::size_t kMaxTimingRepeats = static_cast<std::size_t>(std::numeric_limits<int>::max());

/// Parses the arguments after the program name. Throws std::invalid_argument naming the option
/// and the value for an unknown option, a missing or malformed value, a value out of range, an
/// option given twice (but --streams, --synthetic, --drafter and --cost, which are repeatable), a
/// list or repeatable option that names an item twice, or nothing to replay. Stops at --help,
/// returning what it parsed with `help` set.
[[nodiscard]] ReplayOptions parse_replay_options(std::span<const std::string_view> args);

}  // namespace ngramspec::replay
