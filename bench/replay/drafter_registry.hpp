#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "replay_runner.hpp"
#include "token_streams.hpp"

namespace ngramspec::replay {

/// Defaults for drafters whose name does not set them.
struct DrafterDefaults {
  std::size_t window = 512;
  std::size_t min_order = 2;
  std::size_t max_order = 4;
};

/// A drafter the replay tool can run: its display name and a function that replays one
/// record with it at k drafts per pass.
struct DrafterEntry {
  std::string name;
  std::function<RecordResult(const TokenStream&, std::size_t k, int timing_repeats, const HeapMeter& meter)> run;
};

/// Builds the drafter NAME[:key=value,...]; throws std::invalid_argument naming what is wrong.
[[nodiscard]] DrafterEntry make_drafter(const std::string& spec, const DrafterDefaults& defaults);

/// One line per drafter name, for --help.
[[nodiscard]] std::string drafter_names_help();

}  // namespace ngramspec::replay
