#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "drafter_registry.hpp"
#include "replay_options.hpp"
#include "replay_runner.hpp"
#include "serving_sim.hpp"
#include "token_streams.hpp"

namespace ngramspec::replay {

/// The records the options name: every --streams file (its first --limit records), then every
/// --synthetic spec (--length, --samples, --seed). Throws as read_streams and parse_synthetic do,
/// and std::invalid_argument naming the file when --records selects none of its records.
[[nodiscard]] std::vector<TokenStream> load_streams(const ReplayOptions& options);

/// Counts of a set of records replayed one way.
struct Totals {
  std::size_t samples = 0;
  std::size_t generated = 0;
  std::size_t passes = 0;  ///< per record: decode passes it took part in + its prefill
  std::size_t drafted = 0;
  std::size_t accepted = 0;
  double drafter_ns = 0;
  std::size_t peak_bytes = 0;
  /// Overall: the decode passes' cost (ServeResult::simulated_cost); for a category, what its
  /// records were charged (ServedRecord::cost).
  double simulated_cost = 0;

  /// A record's counts, and its drafter time and peak heap from `timing`.
  void add(std::size_t record_generated, std::size_t record_passes, std::size_t record_drafted,
           std::size_t record_accepted, const RecordResult& timing) {
    ++samples;
    generated += record_generated;
    passes += record_passes;
    drafted += record_drafted;
    accepted += record_accepted;
    drafter_ns += timing.drafter_ns;
    peak_bytes = std::max(peak_bytes, timing.drafter_peak_bytes);
  }
  [[nodiscard]] double mean_accepted_length() const { return passes ? double(generated) / double(passes) : 0.0; }
  [[nodiscard]] double acceptance_rate() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
  // Decode passes carry drafts; the prefill pass does not.
  [[nodiscard]] double rejected_per_pass() const {
    return passes > samples ? double(drafted - accepted) / double(passes - samples) : 0.0;
  }
  /// Drafts (a tree's: nodes) per record per decode pass.
  [[nodiscard]] double drafted_per_pass() const {
    return passes > samples ? double(drafted) / double(passes - samples) : 0.0;
  }
  [[nodiscard]] double ns_per_token() const { return generated ? drafter_ns / double(generated) : 0.0; }
};

/// One line of the report: a drafter at k drafts, served `batch` at a time under `policy`,
/// priced under the cost `cost`, over the records of `category` ("overall": all of them).
struct Row {
  std::string drafter;
  std::size_t k = 0;  ///< 0 for plain decoding, which drafts nothing; a tree row's node budget
  std::size_t batch = 1;
  Policy policy = Policy::gate;
  std::string cost;  ///< CostCurve::name: "flat", "knee:N", "table:...", "learn" or "learn:..."
  std::string price;  ///< --price's spec; empty: the passes were priced by `cost`
  std::string category;
  Totals totals;
  /// Simulated cost of plain decoding of the same records at the same batch and cost, divided
  /// by this row's (1 when both are 0: records of one token have no decode pass).
  double speedup = 1;
  /// A tree row (--tree-nodes): the drafter's TreeDrafter at k nodes a pass; totals.drafted
  /// counts the nodes sent, and drafted - accepted the nodes wasted (off the accepted path).
  bool tree = false;
};

/// Runs every drafter of `drafters` over `streams` (in file order) at every k, batch, cost and
/// policy of `options`, and returns the rows, for each drafter by cost, batch, k (plain first,
/// as k 0) and policy, each with a row per category (in order of first appearance) and an
/// "overall" row when there is more than one category.
///
/// Each serving simulation is DrafterEntry::serve; plain decoding is simulated once per batch
/// (with the first drafter, whose drafts it never asks for) and gives every row its speedup.
/// The drafter's time and peak heap come from the single-sequence replay of each record
/// (DrafterEntry::run, or run_ungated for fixed and cost), whatever the batch; plain rows have
/// none. At batch 1, the fixed and gate simulations must reproduce the single-sequence replay
/// exactly (each record's generated tokens, passes, drafts and accepted drafts): a difference
/// throws std::logic_error. Throws std::runtime_error when an output departs from its
/// recording.
///
/// With --tree-nodes, each drafter that drafts trees (DrafterEntry::serve_tree) adds, after its
/// chain rows, tree rows (Row::tree) by cost, batch, node budget and policy (plain excepted:
/// its rows are the chain's), priced against the same plain decoding; they carry no drafter
/// time. Throws std::invalid_argument naming --tree-nodes when no drafter drafts trees.
[[nodiscard]] std::vector<Row> measure_rows(const std::vector<DrafterEntry>& drafters,
                                            std::span<const TokenStream> streams, const ReplayOptions& options,
                                            const HeapMeter& meter = {});

/// The report as text: a header and one line per row, columns aligned; with `categories` every
/// row, else the overall rows (with one category, its rows). Columns that hold one value on every
/// row (batch, policy, cost, category) are left out and their values said on a line above. Tree
/// rows follow in a table of their own: node budget, tokens per pass, nodes and wasted nodes per
/// pass, speedup.
[[nodiscard]] std::string format_table(const std::vector<Row>& rows, bool categories);

/// The report as one JSON object, {"results": [row, ...]}, every chain row with every field, and
/// with tree rows {"results": [...], "trees": [tree row, ...]}. Numbers
/// are always finite: one that is not is written as null, and the row names it in
/// "not_finite" (VerifyCost keeps that from happening: it normalizes every curve so that one token
/// costs 1 and refuses ratios above VerifyCost::kMaxCost, so no sum of passes nears a double's range).
[[nodiscard]] std::string format_json(const std::vector<Row>& rows);

}  // namespace ngramspec::replay
