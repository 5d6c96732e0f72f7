#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ngramspec/batch_speculator.hpp"
#include "ngramspec/decode_options.hpp"
#include "ngramspec/decode_step.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "ngramspec/token.hpp"
#include "ngramspec/verify_cost.hpp"
#include "pass_price.hpp"
#include "replay_model.hpp"
#include "token_streams.hpp"

namespace ngramspec::replay {

/// How a serving simulation drafts (ngramspec-replay --policy).
enum class Policy {
  plain,  ///< no drafts (DecodeOptions::speculate = false): the baseline every speedup divides
  fixed,  ///< up to k drafts a pass, the drafter's gate off (MatchDrafter min_confidence 0)
  gate,   ///< up to k drafts a pass, the drafter as configured (MatchDrafter's default gate 0.03)
  cost,   ///< gate off, up to k drafts, lengths chosen by BatchSpeculator against the verify cost
};

[[nodiscard]] constexpr const char* to_string(Policy policy) noexcept {
  switch (policy) {
    case Policy::plain: return "plain";
    case Policy::fixed: return "fixed";
    case Policy::gate: return "gate";
    case Policy::cost: return "cost";
  }
  return "unknown";
}

/// The cost of every pass is 1 whatever it carries.
[[nodiscard]] inline VerifyCost flat_cost() { return VerifyCost::flat(); }

/// A verify cost as the replay tool names it: "flat" (every pass costs 1) or VerifyCost::spec().
struct CostCurve {
  std::string name;
  VerifyCost curve;
  /// "learn" or "learn:SPEC": the cost policy learns the cost from the passes (--price), from
  /// `curve` as prior when `prior`.
  bool learn = false;
  bool prior = true;
};

/// "flat", "knee:N" or "table:T=C,T=C,..." (VerifyCost::parse). Throws std::invalid_argument
/// naming the spec and what is wrong with it.
[[nodiscard]] inline CostCurve parse_cost_curve(std::string_view spec) {
  if (spec == "learn") return CostCurve{"learn", flat_cost(), true, false};
  if (spec.rfind("learn:", 0) == 0) {
    VerifyCost prior = VerifyCost::parse(spec.substr(6));
    std::string name = "learn:" + prior.spec();
    return CostCurve{std::move(name), std::move(prior), true, true};
  }
  VerifyCost curve = VerifyCost::parse(spec);
  std::string name = curve.spec();
  return CostCurve{std::move(name), std::move(curve)};
}

/// What serve_records() runs.
struct ServeConfig {
  std::size_t k = 4;       ///< DecodeOptions::max_drafts of every sequence
  std::size_t batch = 1;   ///< sequences running at once
  bool speculate = true;   ///< false: plain decoding
  std::optional<VerifyCost> plan_cost;  ///< BatchConfig::cost: draft lengths chosen against it
  std::vector<VerifyCost> prices;       ///< curves every decode pass is priced under
  /// Learn the cost from the passes (BatchConfig::learn_cost, plan_cost the prior when given),
  /// each pass reported at what `price` charged it (or, without one, prices.front()).
  bool learn_cost = false;
  /// What passes really cost (--price): when given, every curve of `prices` is replaced by it in
  /// the sums, and each record is charged an equal share of every pass it takes part in.
  std::optional<PassPrice> price;
};

/// One record's part of a serving simulation.
struct ServedRecord {
  std::size_t generated = 0;
  std::size_t passes = 0;  ///< decode passes it took part in + its prefill, as RecordResult counts
  std::size_t drafted = 0;
  std::size_t accepted = 0;
  /// Counts a decode pass that sent `sent` drafts (or tree nodes) and decided `step`.
  void add_pass(std::size_t sent, const StepOutcome& step) noexcept {
    ++passes;
    drafted += sent;
    accepted += step.accepted;
    generated += step.emitted;
  }
  /// The cost charged to it under each of ServeConfig::prices: for every decode pass it takes
  /// part in, cost(B) / B, B the batch (or the records, when fewer), what a pass without drafts
  /// costs per sequence while the batch is full; plus, of what the pass's drafts add to it,
  /// cost(T) - cost(S) for a pass of S sequences and T tokens, the part in proportion to the
  /// drafts it sent. So a record's charge depends on its own passes and drafts, not on how full
  /// the batch happens to be around it: the passes of a batch that is not full (while the last
  /// records drain) cost more per sequence, and that excess is charged to no record. With a
  /// batch of 1 the charges add up to ServeResult::simulated_cost exactly.
  std::vector<double> cost;
};

/// What serve_records() measured.
struct ServeResult {
  std::vector<ServedRecord> records;  ///< one per stream, in order
  /// Per curve of ServeConfig::prices: the sum over decode passes of cost(tokens in the pass),
  /// a pass's tokens being every decoding sequence's last token and drafts. Prefills are left
  /// out: every policy runs the same ones.
  std::vector<double> simulated_cost;
  std::size_t decode_passes = 0;  ///< batched decode passes (one propose and one accept each)
};

/// Replays `streams` as a server would serve them, through one BatchSpeculator whose pooled
/// drafters `make()` builds (finish() appends to `corpus` when given): config.batch records
/// run at once, and when one finishes the next in order is admitted. Each running record has
/// its own ReplayModel. Admitting a record begins it and runs its prefill as a step of its own
/// (its prompt forwarded, its first output token accepted), not priced. Each decode pass is one
/// propose() over every running sequence, each sequence's model forwarded with its last token
/// and drafts, one accept(), rollbacks, finish() of the finished ones, then admission of new
/// records. Throws std::runtime_error when a record's output departs from its recording.
template <class MakeDrafter>
ServeResult serve_records(std::span<const TokenStream> streams, const ServeConfig& config, MakeDrafter make,
                          SharedCorpus* corpus = nullptr) {
  using D = std::invoke_result_t<MakeDrafter&>;
  if (config.batch == 0) throw std::invalid_argument("serve_records: batch = 0; it must be at least 1");
  const std::size_t curves = config.prices.size();
  ServeResult result;
  result.records.assign(streams.size(), ServedRecord{});
  for (ServedRecord& r : result.records) r.cost.assign(curves, 0.0);
  result.simulated_cost.assign(curves, 0.0);
  if (streams.empty()) return result;

  std::size_t longest_output = 1;
  for (const TokenStream& s : streams) longest_output = std::max(longest_output, s.output.size());
  BatchConfig batch_config;
  batch_config.max_sequences = std::min(config.batch, streams.size());
  batch_config.max_record_tokens = longest_output;  // the whole output goes to the corpus
  batch_config.cost = config.plan_cost;
  batch_config.learn_cost = config.learn_cost && config.speculate;
  // What a pass without drafts costs per sequence while the batch is full, per curve.
  std::vector<double> per_sequence;
  for (const VerifyCost& price : config.prices) {
    per_sequence.push_back(price(batch_config.max_sequences) / static_cast<double>(batch_config.max_sequences));
  }
  BatchSpeculator<D> speculator(std::move(batch_config), make, corpus);

  struct Running {
    std::size_t record;
    ReplayModel model;
    std::vector<Token> output;  // emitted so far
  };
  std::vector<Running> running;
  running.reserve(std::min(config.batch, streams.size()));

  const auto check = [&](const Running& r) {
    const TokenStream& stream = streams[r.record];
    if (r.output == stream.output) return;
    const auto diverged = std::mismatch(r.output.begin(), r.output.end(), stream.output.begin(), stream.output.end());
    throw std::runtime_error("record " + stream.id + ": the decoded output departs from the recording at output token " +
                             std::to_string(diverged.first - r.output.begin()) + " (decoded " +
                             std::to_string(r.output.size()) + " tokens, recorded " +
                             std::to_string(stream.output.size()) + ") in a batch of " + std::to_string(config.batch));
  };

  // Begins records in file order while there is room, each with its prefill, alone.
  std::size_t next = 0;
  std::vector<Token> prefill_next;
  StepOutcome prefill_step;
  const auto admit = [&] {
    while (running.size() < config.batch && next < streams.size()) {
      const std::size_t index = next++;
      const TokenStream& stream = streams[index];
      DecodeOptions options;
      options.max_new_tokens = stream.output.size();
      options.max_drafts = config.k;
      options.speculate = config.speculate;
      const SequenceId id = index;
      speculator.begin(id, stream.prompt, options);
      Running r{index, ReplayModel(stream), {}};
      r.output.reserve(stream.output.size());
      ServedRecord& record = result.records[index];
      if (!speculator.state(id).finished) {
        prefill_next.resize(stream.prompt.size());
        const std::size_t chunk = r.model.max_batch();
        for (std::size_t pos = 0; pos < stream.prompt.size(); pos += chunk) {
          const std::size_t n = std::min(chunk, stream.prompt.size() - pos);
          r.model.forward(pos, std::span<const Token>(stream.prompt).subspan(pos, n),
                          std::span<Token>(prefill_next).subspan(pos, n));
        }
        const SequenceId ids[1] = {id};
        const std::size_t offsets[2] = {0, 1};
        speculator.accept(ids, std::span<const Token>(&prefill_next.back(), 1), offsets,
                          std::span<StepOutcome>(&prefill_step, 1));
        record.passes = 1;
        record.generated = prefill_step.emitted;
        r.output.insert(r.output.end(), prefill_next.end() - 1,
                        prefill_next.end() - 1 + static_cast<std::ptrdiff_t>(prefill_step.emitted));
        if (prefill_step.discarded != 0) r.model.rollback(prefill_step.rollback_to);
      }
      if (speculator.state(id).finished) {
        speculator.finish(id);
        check(r);
        continue;
      }
      running.push_back(std::move(r));
    }
  };

  std::vector<SequenceId> ids;
  std::vector<Token> drafts;
  std::vector<std::size_t> offsets;
  std::vector<Token> fed;
  std::vector<Token> model_tokens;
  std::vector<std::size_t> model_offsets;
  std::vector<StepOutcome> steps;
  std::size_t previous_tokens = 0;  // the last decode pass's tokens, for a price's shape
  const bool batch_config_learns = config.learn_cost && config.speculate;
  admit();
  while (!running.empty()) {
    const std::size_t n = running.size();
    ids.resize(n);
    for (std::size_t i = 0; i < n; ++i) ids[i] = running[i].record;
    offsets.resize(n + 1);
    drafts.resize(config.speculate ? n * config.k : 0);
    const std::size_t total = speculator.propose(ids, drafts, offsets);

    model_tokens.resize(n + total);
    model_offsets.resize(n + 1);
    for (std::size_t i = 0; i < n; ++i) {
      Running& r = running[i];
      const std::size_t d = offsets[i + 1] - offsets[i];
      fed.resize(d + 1);
      fed[0] = r.output.back();
      std::copy_n(drafts.begin() + static_cast<std::ptrdiff_t>(offsets[i]), d, fed.begin() + 1);
      model_offsets[i] = offsets[i] + i;
      const std::size_t cache_length = streams[r.record].prompt.size() + r.output.size() - 1;
      r.model.forward(cache_length, fed, std::span<Token>(model_tokens).subspan(model_offsets[i], d + 1));
    }
    model_offsets[n] = total + n;
    steps.resize(n);
    // What the pass really cost, when a price is given (the planner sees only its cost).
    const double charged =
        config.price ? config.price->charge(result.decode_passes, n, total, previous_tokens)
                     : (curves != 0 ? config.prices.front().pass(n, total) : 1.0);
    previous_tokens = n + total;
    if (batch_config_learns) speculator.report_pass_seconds(charged);
    speculator.accept(ids, model_tokens, model_offsets, steps);
    ++result.decode_passes;

    for (std::size_t c = 0; c < curves && config.price; ++c) {
      result.simulated_cost[c] += charged;
      for (std::size_t i = 0; i < n; ++i) result.records[running[i].record].cost[c] += charged / static_cast<double>(n);
    }
    for (std::size_t c = 0; c < curves && !config.price; ++c) {
      const VerifyCost& price = config.prices[c];
      const double pass = price.pass(n, total);
      const double drafts_cost = pass - price.pass(n, 0);
      result.simulated_cost[c] += pass;
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t d = offsets[i + 1] - offsets[i];
        double charge = per_sequence[c];
        if (total != 0) charge += drafts_cost * static_cast<double>(d) / static_cast<double>(total);
        result.records[running[i].record].cost[c] += charge;
      }
    }

    std::size_t kept = 0;
    for (std::size_t i = 0; i < n; ++i) {
      Running& r = running[i];
      const StepOutcome& step = steps[i];
      result.records[r.record].add_pass(offsets[i + 1] - offsets[i], step);
      const auto from = model_tokens.begin() + static_cast<std::ptrdiff_t>(model_offsets[i]);
      r.output.insert(r.output.end(), from, from + static_cast<std::ptrdiff_t>(step.emitted));
      if (step.discarded != 0) r.model.rollback(step.rollback_to);
      if (step.finished) {
        speculator.finish(ids[i]);
        check(r);
        continue;
      }
      if (kept != i) running[kept] = std::move(r);
      ++kept;
    }
    running.erase(running.begin() + static_cast<std::ptrdiff_t>(kept), running.end());
    admit();
  }
  return result;
}

}  // namespace ngramspec::replay
