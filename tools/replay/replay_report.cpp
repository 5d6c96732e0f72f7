#include "replay_report.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace ngramspec::replay {

std::vector<TokenStream> load_streams(const ReplayOptions& options) {
  std::vector<TokenStream> streams;
  for (const std::string& file : options.stream_files) {
    std::vector<TokenStream> read = read_streams(file);
    if (options.limit != 0 && read.size() > options.limit) read.resize(options.limit);
    if (!options.records.all()) read = slice_records(std::move(read), options.records);
    for (TokenStream& s : read) streams.push_back(std::move(s));
  }
  for (const std::string& text : options.synthetic_specs) {
    SyntheticSpec spec = parse_synthetic(text);
    spec.output_length = options.length;
    spec.samples = options.samples;
    spec.seed = options.seed;
    for (TokenStream& s : make_synthetic(spec)) streams.push_back(std::move(s));
  }
  return streams;
}
namespace {

bool wants(const ReplayOptions& options, Policy policy) {
  return std::find(options.policies.begin(), options.policies.end(), policy) != options.policies.end();
}

// The single-sequence replay of every record, in order.
std::vector<RecordResult> replay_each(const DrafterEntry::Run& run, std::span<const TokenStream> streams,
                                      std::size_t k, int repeats, const HeapMeter& meter) {
  std::vector<RecordResult> results;
  results.reserve(streams.size());
  for (const TokenStream& s : streams) results.push_back(run(s, k, repeats, meter));
  return results;
}

// A batch of one must replay each record exactly as SpeculativeDecoder does.
void check_batch_of_one(const std::string& drafter, std::size_t k, Policy policy, std::span<const TokenStream> streams,
                        const ServeResult& served, const std::vector<RecordResult>& single) {
  for (std::size_t i = 0; i < streams.size(); ++i) {
    const ServedRecord& a = served.records[i];
    const RecordResult& b = single[i];
    if (a.generated != b.generated || a.passes != b.passes || a.drafted != b.drafted || a.accepted != b.accepted) {
      throw std::logic_error(
          "record " + streams[i].id + ", " + drafter + " at k = " + std::to_string(k) + ", policy " +
          to_string(policy) + ": the serving simulation at batch 1 (generated " + std::to_string(a.generated) +
          ", passes " + std::to_string(a.passes) + ", drafted " + std::to_string(a.drafted) + ", accepted " +
          std::to_string(a.accepted) + ") differs from the single-sequence replay (generated " +
          std::to_string(b.generated) + ", passes " + std::to_string(b.passes) + ", drafted " +
          std::to_string(b.drafted) + ", accepted " + std::to_string(b.accepted) + ")");
    }
  }
}

}  // namespace

std::vector<Row> measure_rows(const std::vector<DrafterEntry>& drafters, std::span<const TokenStream> streams,
                              const ReplayOptions& options, const HeapMeter& meter) {
  std::vector<Row> rows;
  if (drafters.empty() || streams.empty()) return rows;
  std::vector<std::string> categories;
  for (const TokenStream& s : streams) {
    if (std::find(categories.begin(), categories.end(), s.category) == categories.end()) {
      categories.push_back(s.category);
    }
  }
  std::vector<CostCurve> curves = options.costs;
  if (curves.empty()) curves.push_back(CostCurve{"flat", flat_cost()});
  std::vector<VerifyCost> prices;
  for (const CostCurve& c : curves) prices.push_back(c.curve);
  const int repeats = static_cast<int>(std::max<std::size_t>(options.timing_repeats, 1));

  // Plain decoding never asks its drafter for anything: one simulation per batch serves every
  // drafter and k, priced under every curve.
  std::map<std::size_t, ServeResult> plain;
  for (const std::size_t batch : options.batches) {
    if (plain.count(batch) == 0) {
      plain.emplace(batch, drafters.front().serve(streams, ServeRequest{.k = 1,
                                                                        .batch = batch,
                                                                        .policy = Policy::plain,
                                                                        .cost = nullptr,
                                                                        .prices = prices}));
    }
  }

  // The rows of one configuration: per category, then overall.
  const auto add_rows = [&](const std::string& drafter, std::size_t k, std::size_t batch, Policy policy,
                            std::size_t curve, const ServeResult& served, const std::vector<RecordResult>* timing) {
    const ServeResult& base = plain.at(batch);
    const RecordResult none;
    const auto totals_of = [&](const std::string* category, double& plain_cost) {
      Totals t;
      plain_cost = 0;
      for (std::size_t i = 0; i < streams.size(); ++i) {
        if (category != nullptr && streams[i].category != *category) continue;
        const ServedRecord& r = served.records[i];
        t.add(r.generated, r.passes, r.drafted, r.accepted, timing != nullptr ? (*timing)[i] : none);
        t.simulated_cost += r.cost[curve];
        plain_cost += base.records[i].cost[curve];
      }
      return t;
    };
    const auto row = [&](std::string category, Totals t, double plain_cost) {
      const double speedup = t.simulated_cost == 0 ? 1.0 : plain_cost / t.simulated_cost;
      rows.push_back(Row{drafter, k, batch, policy, curves[curve].name, std::move(category), t, speedup});
    };
    // Overall (and for the one category when there is only one) the simulated cost is the
    // passes' own; a category's is what its records were charged (ServedRecord::cost).
    for (const std::string& category : categories) {
      double plain_cost = 0;
      Totals t = totals_of(&category, plain_cost);
      if (categories.size() == 1) {
        t.simulated_cost = served.simulated_cost[curve];
        plain_cost = base.simulated_cost[curve];
      }
      row(category, t, plain_cost);
    }
    if (categories.size() > 1) {
      double plain_cost = 0;
      Totals t = totals_of(nullptr, plain_cost);
      t.simulated_cost = served.simulated_cost[curve];
      row("overall", t, base.simulated_cost[curve]);
    }
  };

  for (const DrafterEntry& drafter : drafters) {
    // The single-sequence replays: the drafter's time and peak heap, and the reference a batch
    // of one must reproduce.
    std::map<std::size_t, std::vector<RecordResult>> gated;
    std::map<std::size_t, std::vector<RecordResult>> ungated;
    const bool need_ungated = wants(options, Policy::fixed) || wants(options, Policy::cost);
    for (const std::size_t k : options.ks) {
      if (wants(options, Policy::gate) || (need_ungated && !drafter.has_gate)) {
        if (gated.count(k) == 0) gated.emplace(k, replay_each(drafter.run, streams, k, repeats, meter));
      }
      if (need_ungated && ungated.count(k) == 0) {
        ungated.emplace(k, drafter.has_gate ? replay_each(drafter.run_ungated, streams, k, repeats, meter) : gated.at(k));
      }
    }

    // The serving simulations: fixed and gate priced under every curve at once; cost, whose
    // drafts depend on the curve, once per curve.
    using Key = std::tuple<std::size_t, std::size_t, Policy, std::size_t>;  // batch, k, policy, curve
    std::map<Key, ServeResult> served;
    const auto serve = [&](std::size_t batch, std::size_t k, Policy policy, std::size_t curve) -> const ServeResult& {
      const Key key{batch, k, policy, policy == Policy::cost ? curve : 0};
      auto it = served.find(key);
      if (it != served.end()) return it->second;
      // Without a gate, gate and fixed are the same run.
      if (policy == Policy::gate && !drafter.has_gate) {
        it = served.find(Key{batch, k, Policy::fixed, 0});
        if (it != served.end()) return it->second;
      }
      if (policy == Policy::fixed && !drafter.has_gate) {
        it = served.find(Key{batch, k, Policy::gate, 0});
        if (it != served.end()) return it->second;
      }
      ServeResult result = drafter.serve(
          streams, ServeRequest{.k = k, .batch = batch, .policy = policy, .cost = &curves[curve].curve, .prices = prices});
      if (batch == 1 && policy == Policy::fixed) check_batch_of_one(drafter.name, k, policy, streams, result, ungated.at(k));
      if (batch == 1 && policy == Policy::gate) check_batch_of_one(drafter.name, k, policy, streams, result, gated.at(k));
      return served.emplace(key, std::move(result)).first->second;
    };

    for (std::size_t curve = 0; curve < curves.size(); ++curve) {
      for (const std::size_t batch : options.batches) {
        if (wants(options, Policy::plain)) add_rows(drafter.name, 0, batch, Policy::plain, curve, plain.at(batch), nullptr);
        for (const std::size_t k : options.ks) {
          for (const Policy policy : options.policies) {
            if (policy == Policy::plain) continue;
            const std::vector<RecordResult>& timing = policy == Policy::gate ? gated.at(k) : ungated.at(k);
            add_rows(drafter.name, k, batch, policy, curve, serve(batch, k, policy, curve), &timing);
          }
        }
      }
    }
  }
  return rows;
}

}  // namespace ngramspec::replay
