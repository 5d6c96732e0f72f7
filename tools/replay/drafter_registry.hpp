#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "ngramspec/mapped_corpus.hpp"
#include "ngramspec/verify_cost.hpp"
#include "replay_runner.hpp"
#include "serving_sim.hpp"
#include "token_streams.hpp"

namespace ngramspec::replay {

/// Defaults for drafters whose name does not set them.
struct DrafterDefaults {
  std::size_t window = 512;
  std::size_t min_order = 2;
  std::size_t max_order = 4;
  /// The corpus file (--corpus-file) that match:file=1 drafts from and match:prime=1 loads
  /// into its live corpus; nullptr when none was given.
  std::shared_ptr<const MappedCorpus> corpus_file;
};

/// A serving simulation to run with a drafter (DrafterEntry::serve).
struct ServeRequest {
  std::size_t k = 4;               ///< most drafts per pass (DecodeOptions::max_drafts)
  std::size_t batch = 1;           ///< records running at once
  Policy policy = Policy::gate;    ///< plain, fixed, gate or cost (see Policy)
  /// Policy::cost: the curve BatchSpeculator sizes drafts against (BatchConfig::cost);
  /// nullptr: the flat cost. Ignored by the other policies.
  const VerifyCost* cost = nullptr;
  std::span<const VerifyCost> prices;  ///< curves every decode pass is priced under
  /// Policy::cost: learn the cost from the passes (`cost` the prior, nullptr: none).
  bool learn = false;
  /// What the passes really cost (--price), nullptr: `prices`.
  const PassPrice* price = nullptr;
};

/// A drafter the replay tool can run: its display name, a function that replays one record
/// with it at k drafts per pass (as configured, and with its gate off), and one that serves
/// a list of records with it through one BatchSpeculator.
struct DrafterEntry {
  using Run = std::function<RecordResult(const TokenStream&, std::size_t k, int timing_repeats, const HeapMeter& meter)>;
  using Serve = std::function<ServeResult(std::span<const TokenStream> streams, const ServeRequest& request)>;
  std::string name;
  /// Replays one record through SpeculativeDecoder with the drafter as configured (see
  /// replay_record). With a corpus (match:corpus=MIB) the records must come in file order: the
  /// corpus holds the outputs of the records replayed before, and starts empty again when the
  /// first record comes again.
  Run run;
  /// The same with the drafter's gate off (MatchDrafter min_confidence 0); for a drafter
  /// without a gate, the same as run. Its corpus, if any, is its own.
  Run run_ungated;
  /// Whether run_ungated differs from run: the drafter has a gate that is on.
  bool has_gate = false;
  /// Whether the drafter reads DrafterDefaults::corpus_file (match:file=1 or prime=1).
  bool reads_corpus_file = false;
  /// Serves `streams` (in file order) as serve_records() does, with pooled drafters made as
  /// run's are for the longest record (what a whole-context window needs), the gate off for
  /// Policy::fixed and Policy::cost; a corpus (match:corpus=MIB) starts empty for each call.
  Serve serve;
  /// Serves `streams` with draft trees (serve_tree_records): TreeDrafters (TreeConfig's
  /// defaults, no recycled top-k) whose spine is this drafter's chain, configured and reading
  /// its corpora as run's and serve's drafters do; request.k is the node budget of a pass. Gate
  /// and fixed send whole trees, the spine gated as configured and ungated; cost sends the
  /// prefixes DraftPlanner chooses against request.cost, the spine ungated; plain is refused
  /// (std::invalid_argument). Empty for a drafter that drafts no trees: only match drafters do.
  Serve serve_tree;
};

/// Drafters that another part of the build adds to the replay, so that the replay includes none
/// of its code: integrations/llama.cpp registers llama.cpp's own drafters as "llama.cpp" from an
/// object its build links into ngramspec-replay (the NGRAMSPEC_REPLAY_DRAFTER_FAMILIES property).
struct DrafterFamily {
  /// The specs it builds: NAME and NAME:...
  std::string name;
  /// Builds the drafter of a spec; throws std::invalid_argument naming what is wrong.
  std::function<DrafterEntry(const std::string& spec)> make;
  /// Its lines of --help (drafter_names_help), each ending in a newline.
  std::string help;
};

/// Adds `family` to what make_drafter builds and drafter_names_help lists; for a registrar's
/// static object, before main. Throws std::invalid_argument when it has no name or make function,
/// or when its name is registered already.
void register_drafter_family(DrafterFamily family);

/// Builds the drafter NAME[:key=value,...]; throws std::invalid_argument naming what is wrong.
[[nodiscard]] DrafterEntry make_drafter(const std::string& spec, const DrafterDefaults& defaults);

/// Largest live corpus (match:corpus=MIB) in MiB: what SharedCorpus::kMaxTokens tokens take.
[[nodiscard]] std::size_t max_corpus_mib() noexcept;

/// One line per drafter name, for --help.
[[nodiscard]] std::string drafter_names_help();

}  // namespace ngramspec::replay
