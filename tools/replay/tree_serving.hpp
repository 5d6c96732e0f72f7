#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ngramspec/decode_options.hpp"
#include "ngramspec/decode_step.hpp"
#include "ngramspec/draft_planner.hpp"
#include "ngramspec/draft_tree.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "ngramspec/token.hpp"
#include "ngramspec/verify_cost.hpp"
#include "replay_model.hpp"
#include "serving_sim.hpp"
#include "token_streams.hpp"

namespace ngramspec::replay {

/// What serve_tree_records() runs.
struct TreeServeConfig {
  std::size_t nodes = 16;  ///< most tree nodes a sequence sends a pass: 1 .. DraftTree::kMaxNodes
  std::size_t batch = 1;   ///< sequences running at once
  /// Trees cut by DraftPlanner over the batch so that the pass's expected emitted tokens per
  /// unit of this cost is highest; std::nullopt: every tree whole.
  std::optional<VerifyCost> plan_cost;
  std::vector<VerifyCost> prices;  ///< curves every decode pass is priced under
};

/// Replays `streams` with draft trees, as serve_records() replays them with chains: config.batch
/// records at once, admitted in file order as others finish, each record's prefill a step of
/// its own (not priced), every decode pass priced by the tokens in it (each running sequence's
/// last token and its tree's nodes) and each record charged as ServedRecord::cost says, a
/// record's `drafted` counting the nodes it sent. `make()` builds the pooled drafters (a
/// TreeDrafter, or anything with its predict_tree / observe_pass / update / reset); each
/// admitted record resets one and feeds it its prompt, as SpeculativeDecoder::generate does.
/// A finished record's output is appended to `corpus` when given (as BatchSpeculator::finish
/// does), so a corpus is causal: a record drafts from the records finished before it began.
///
/// A pass: the drafter builds a tree of up to config.nodes nodes (tree_node_limit, as the
/// decoders limit one), no deeper than the drafts the record may still send (draft_limit, as a
/// chain is limited); with a plan cost the batch's
/// trees are cut to the prefixes DraftPlanner chooses over their path probabilities (each a
/// non-increasing list, and any prefix of a best-first tree a tree); accept_tree() then keeps
/// the longest root path that follows the recording, and the drafter observes the pass
/// (without top-k: recordings hold none) and the emitted tokens. Text only: a node's fate is
/// known only on the recorded path. Throws std::runtime_error when a record's output departs
/// from its recording.
template <class MakeDrafter>
ServeResult serve_tree_records(std::span<const TokenStream> streams, const TreeServeConfig& config,
                               MakeDrafter make, SharedCorpus* corpus = nullptr) {
  using D = std::invoke_result_t<MakeDrafter&>;
  if (config.batch == 0) throw std::invalid_argument("serve_tree_records: batch = 0; it must be at least 1");
  if (config.nodes == 0 || config.nodes > DraftTree::kMaxNodes) {
    throw std::invalid_argument("serve_tree_records: nodes = " + std::to_string(config.nodes) +
                                "; it must be from 1 to " + std::to_string(DraftTree::kMaxNodes));
  }
  const std::size_t curves = config.prices.size();
  ServeResult result;
  result.records.assign(streams.size(), ServedRecord{});
  for (ServedRecord& r : result.records) r.cost.assign(curves, 0.0);
  result.simulated_cost.assign(curves, 0.0);
  if (streams.empty()) return result;

  const std::size_t slots = std::min(config.batch, streams.size());
  std::vector<double> per_sequence;
  for (const VerifyCost& price : config.prices) {
    per_sequence.push_back(price(slots) / static_cast<double>(slots));
  }
  std::vector<D> pool;
  std::vector<DraftTree> trees;
  pool.reserve(slots);
  trees.reserve(slots);
  std::vector<std::size_t> free_slots;
  for (std::size_t s = 0; s < slots; ++s) {
    pool.push_back(make());
    trees.emplace_back(config.nodes);
    free_slots.push_back(slots - 1 - s);
  }

  struct Running {
    std::size_t record;
    std::size_t slot;
    DecodeOptions options;
    SequenceState state;
    std::vector<Token> output;  // emitted so far
  };
  std::vector<Running> running;
  running.reserve(slots);

  const auto finish = [&](const Running& r) {
    const TokenStream& stream = streams[r.record];
    if (r.output != stream.output) {
      const auto diverged =
          std::mismatch(r.output.begin(), r.output.end(), stream.output.begin(), stream.output.end());
      throw std::runtime_error("record " + stream.id + ": the tree-decoded output departs from the recording at "
                               "output token " + std::to_string(diverged.first - r.output.begin()) + " (decoded " +
                               std::to_string(r.output.size()) + " tokens, recorded " +
                               std::to_string(stream.output.size()) + ") in a batch of " +
                               std::to_string(config.batch));
    }
    if (corpus != nullptr) corpus->append(stream.output);
    free_slots.push_back(r.slot);
  };

  // Begins records in file order while there is room: the drafter reset and fed the prompt,
  // then the prefill, whose token (the recording's first output token) is emitted alone.
  std::size_t next = 0;
  const auto admit = [&] {
    while (running.size() < config.batch && next < streams.size()) {
      const std::size_t index = next++;
      const TokenStream& stream = streams[index];
      Running r{index, free_slots.back(), {}, {}, {}};
      free_slots.pop_back();
      r.options.max_new_tokens = stream.output.size();
      r.options.max_drafts = config.nodes;
      r.state = start_sequence(stream.prompt.size(), r.options);
      r.output.reserve(stream.output.size());
      D& drafter = pool[r.slot];
      drafter.reset();
      drafter.update(std::span<const Token>(stream.prompt));
      if (!r.state.finished) {
        const Token first[1] = {stream.output.front()};
        const StepOutcome step = accept_drafts(r.state, {}, first, r.options);
        advance(r.state, step);
        r.output.push_back(first[0]);
        drafter.update(std::span<const Token>(first));
        ServedRecord& record = result.records[index];
        record.passes = 1;
        record.generated = step.emitted;
      }
      if (r.state.finished) {
        finish(r);
        continue;
      }
      running.push_back(std::move(r));
    }
  };

  DraftPlanner planner;
  std::vector<float> probabilities;
  std::vector<std::size_t> offsets;
  std::vector<std::size_t> lengths;
  std::vector<Token> fed(config.nodes + 1);
  std::vector<Token> model_tokens(config.nodes + 1);
  std::vector<std::uint8_t> on_path(config.nodes + 1);
  std::vector<std::size_t> kept(config.nodes + 1);
  admit();
  while (!running.empty()) {
    const std::size_t n = running.size();
    std::size_t total = 0;
    for (Running& r : running) {
      const std::size_t depth = draft_limit(r.state, r.options, kMaxDraftsPerPass);
      const std::size_t nodes = tree_node_limit(r.state, r.options, kMaxDraftsPerPass);
      total += pool[r.slot].predict_tree(trees[r.slot], nodes, depth);
    }
    if (config.plan_cost && total != 0) {
      probabilities.clear();
      offsets.assign(1, 0);
      for (const Running& r : running) {
        const std::span<const float> path = trees[r.slot].path_probabilities();
        probabilities.insert(probabilities.end(), path.begin(), path.end());
        offsets.push_back(probabilities.size());
      }
      lengths.resize(n);
      total = planner.plan(&*config.plan_cost, n, static_cast<double>(n), 0, probabilities, offsets, lengths);
      for (std::size_t i = 0; i < n; ++i) trees[running[i].slot].truncate(lengths[i]);
    }
    ++result.decode_passes;
    for (std::size_t c = 0; c < curves; ++c) {
      const VerifyCost& price = config.prices[c];
      const double pass = price.pass(n, total);
      const double nodes_cost = pass - price.pass(n, 0);
      result.simulated_cost[c] += pass;
      for (const Running& r : running) {
        double charge = per_sequence[c];
        if (total != 0) {
          charge += nodes_cost * static_cast<double>(trees[r.slot].size()) / static_cast<double>(total);
        }
        result.records[r.record].cost[c] += charge;
      }
    }

    std::size_t still = 0;
    for (std::size_t i = 0; i < n; ++i) {
      Running& r = running[i];
      const std::vector<Token>& recorded = streams[r.record].output;
      const DraftTree& tree = trees[r.slot];
      const std::size_t size = tree.size();
      const std::span<const Token> tokens = tree.tokens();
      const std::span<const std::int32_t> parents = tree.parents();
      // The model's token after each pass entry (the root, then the nodes). On the recorded
      // path it is the recording's next token. Off it the model was fed a token it did not
      // produce, and what it would answer is unknown: kUnknown (the largest Token), which no
      // node holds, since drafters draft only tokens they have seen in the text and the
      // recordings hold no such id, so no node below an entry off the path is accepted.
      const std::size_t at = r.output.size();
      fed[0] = r.output.back();
      model_tokens[0] = recorded[at];
      on_path[0] = 1;
      for (std::size_t e = 1; e <= size; ++e) {
        const std::size_t node = e - 1;
        const std::size_t up = static_cast<std::size_t>(parents[node] + 1);
        fed[e] = tokens[node];
        on_path[e] = on_path[up] != 0 && model_tokens[up] != ReplayModel::kUnknown && tokens[node] == model_tokens[up];
        const std::size_t ahead = at + tree.depths()[node] + 1;  // the recording's index of its answer
        model_tokens[e] = on_path[e] != 0 && ahead < recorded.size() ? recorded[ahead] : ReplayModel::kUnknown;
      }
      const std::span<const Token> answers = std::span<const Token>(model_tokens).first(size + 1);
      const StepOutcome step = accept_tree(r.state, tokens, parents, answers, r.options, kept);
      const std::span<const std::size_t> kept_entries = std::span<const std::size_t>(kept).first(step.emitted);
      const std::size_t before = r.output.size();
      for (const std::size_t e : kept_entries) r.output.push_back(model_tokens[e]);
      D& drafter = pool[r.slot];
      drafter.observe_pass(tree, std::span<const Token>(fed).first(size + 1), answers, kept_entries, {});
      drafter.update(std::span<const Token>(r.output).subspan(before));
      advance(r.state, step);

      result.records[r.record].add_pass(size, step);
      if (r.state.finished) {
        finish(r);
        continue;
      }
      if (still != i) running[still] = std::move(r);
      ++still;
    }
    running.erase(running.begin() + static_cast<std::ptrdiff_t>(still), running.end());
    admit();
  }
  return result;
}

}  // namespace ngramspec::replay
