#include "replay_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
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
    if (!options.records.all()) {
      // The rule ngramspec-corpus applies too (RecordRange::resolve): a range that selects no
      // record, or starts after it ends, is refused.
      try {
        read = slice_records(std::move(read), options.records);
      } catch (const std::invalid_argument& e) {
        const std::string after_limit = options.limit != 0 ? " after --limit " + std::to_string(options.limit) : "";
        throw std::invalid_argument("--records: '" + file + "'" + after_limit + ": " + e.what());
      }
    }
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
  if (!options.tree_nodes.empty() &&
      std::none_of(drafters.begin(), drafters.end(), [](const DrafterEntry& d) { return bool(d.serve_tree); })) {
    throw std::invalid_argument("--tree-nodes: no --drafter drafts trees: trees grow from a match drafter's chain "
                                "(TreeDrafter); add --drafter match[:...] or leave --drafter out");
  }
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
  const PassPrice* const price = options.price ? &*options.price : nullptr;
  // What the cost policy plans against: the curve, or a learned cost's prior (nullptr: none).
  const auto plan_of = [&](std::size_t curve) -> const VerifyCost* {
    return curves[curve].prior ? &curves[curve].curve : nullptr;
  };

  // Plain decoding never asks its drafter for anything: one simulation per batch serves every
  // drafter and k, priced under every curve.
  std::map<std::size_t, ServeResult> plain;
  for (const std::size_t batch : options.batches) {
    if (plain.count(batch) == 0) {
      plain.emplace(batch, drafters.front().serve(streams, ServeRequest{.k = 1,
                                                                        .batch = batch,
                                                                        .policy = Policy::plain,
                                                                        .cost = nullptr,
                                                                        .prices = prices,
                                                                        .price = price}));
    }
  }

  // The rows of one configuration: per category, then overall.
  const auto add_rows = [&](const std::string& drafter, std::size_t k, std::size_t batch, Policy policy,
                            std::size_t curve, const ServeResult& served, const std::vector<RecordResult>* timing,
                            bool tree = false) {
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
      rows.push_back(Row{drafter, k, batch, policy, curves[curve].name, price != nullptr ? price->spec() : "",
                         std::move(category), t, speedup, tree});
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
          streams, ServeRequest{.k = k, .batch = batch, .policy = policy, .cost = plan_of(curve), .prices = prices, .learn = curves[curve].learn, .price = price});
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

    // The tree replays: whole trees (fixed, gate) priced under every curve at once; cost, whose
    // cuts depend on the curve, once per curve.
    if (!drafter.serve_tree || options.tree_nodes.empty()) continue;
    std::map<Key, ServeResult> trees;
    const auto serve_tree = [&](std::size_t batch, std::size_t nodes, Policy policy,
                                std::size_t curve) -> const ServeResult& {
      const Key key{batch, nodes, policy, policy == Policy::cost ? curve : 0};
      auto it = trees.find(key);
      if (it != trees.end()) return it->second;
      ServeResult result = drafter.serve_tree(
          streams, ServeRequest{.k = nodes, .batch = batch, .policy = policy, .cost = plan_of(curve), .prices = prices, .learn = curves[curve].learn, .price = price});
      return trees.emplace(key, std::move(result)).first->second;
    };
    for (std::size_t curve = 0; curve < curves.size(); ++curve) {
      for (const std::size_t batch : options.batches) {
        for (const std::size_t nodes : options.tree_nodes) {
          for (const Policy policy : options.policies) {
            if (policy == Policy::plain) continue;
            add_rows(drafter.name, nodes, batch, policy, curve, serve_tree(batch, nodes, policy, curve), nullptr, true);
          }
        }
      }
    }
  }
  return rows;
}

namespace {

std::string printed(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

}  // namespace

namespace {

// One table: the chain rows' columns, or the tree rows'.
std::string format_rows(const std::vector<const Row*>& rows, bool tree) {
  if (rows.empty()) return {};

  // The columns: names as the README's and docs/BENCHMARKS.md's tables name them, over two
  // lines so the numbers' columns stay narrow.
  struct Column {
    std::string top;
    std::string bottom;
    bool left = false;  // text, left-aligned; numbers are right-aligned
    std::vector<std::string> cells;
  };
  const auto same_everywhere = [&](const auto& field) {
    return std::all_of(rows.begin(), rows.end(), [&](const Row* r) { return field(*r) == field(*rows.front()); });
  };
  std::vector<Column> columns;
  std::vector<std::string> shared;  // the values of the columns left out
  const auto add = [&](std::string top, std::string bottom, bool left, const auto& cell) {
    Column c{std::move(top), std::move(bottom), left, {}};
    for (const Row* r : rows) c.cells.push_back(cell(*r));
    columns.push_back(std::move(c));
  };
  // A serving column, left out (and its value said once) when every row has the same value.
  const auto add_serving = [&](const char* name, bool left, const auto& cell, const std::string& shared_text) {
    if (same_everywhere(cell)) {
      shared.push_back(shared_text);
    } else {
      add("", name, left, cell);
    }
  };
  add("", "drafter", true, [](const Row& r) { return r.drafter; });
  if (tree) {
    add("", "nodes", false, [](const Row& r) { return std::to_string(r.k); });
  } else {
    add("", "k", false, [](const Row& r) { return r.policy == Policy::plain ? std::string("-") : std::to_string(r.k); });
  }
  const Row& first = *rows.front();
  add_serving("batch", false, [](const Row& r) { return std::to_string(r.batch); },
              "batch " + std::to_string(first.batch));
  add_serving("policy", true, [](const Row& r) { return std::string(to_string(r.policy)); },
              std::string("policy ") + to_string(first.policy));
  add_serving("cost", true, [](const Row& r) { return r.cost; }, "cost " + first.cost);
  add_serving("category", true, [](const Row& r) { return r.category; },
              first.category == "overall" ? std::string("all records") : "category " + first.category);
  add("", "samples", false, [](const Row& r) { return std::to_string(r.totals.samples); });
  add("tokens", "per pass", false, [](const Row& r) { return printed("%.3f", r.totals.mean_accepted_length()); });
  if (tree) {
    add("", "speedup", false, [](const Row& r) { return printed("%.3f", r.speedup); });
    add("nodes", "per pass", false, [](const Row& r) { return printed("%.3f", r.totals.drafted_per_pass()); });
    add("wasted nodes", "per pass", false, [](const Row& r) { return printed("%.3f", r.totals.rejected_per_pass()); });
  } else {
    add("acceptance", "rate", false, [](const Row& r) { return printed("%.3f", r.totals.acceptance_rate()); });
    add("rejected drafts", "per pass", false,
        [](const Row& r) { return printed("%.3f", r.totals.rejected_per_pass()); });
    add("", "speedup", false, [](const Row& r) { return printed("%.3f", r.speedup); });
    add("drafter ns", "per token", false, [](const Row& r) { return printed("%.1f", r.totals.ns_per_token()); });
    add("peak", "drafter KiB", false,
        [](const Row& r) { return printed("%.1f", static_cast<double>(r.totals.peak_bytes) / 1024.0); });
  }

  std::vector<std::size_t> widths;
  for (const Column& c : columns) {
    std::size_t w = std::max(c.top.size(), c.bottom.size());
    for (const std::string& cell : c.cells) w = std::max(w, cell.size());
    widths.push_back(w);
  }
  const auto line = [&](const auto& text_of) {
    std::string out;
    for (std::size_t i = 0; i < columns.size(); ++i) {
      const std::string text = text_of(columns[i]);
      const std::string pad(widths[i] - text.size(), ' ');
      if (i > 0) out += "  ";
      out += columns[i].left ? text + pad : pad + text;
    }
    out += '\n';
    return out;
  };
  std::string out;
  if (!shared.empty()) {
    out += "every row: ";
    for (std::size_t i = 0; i < shared.size(); ++i) out += (i ? ", " : "") + shared[i];
    out += '\n';
  }
  out += line([](const Column& c) { return c.top; });
  out += line([](const Column& c) { return c.bottom; });
  for (std::size_t r = 0; r < rows.size(); ++r) out += line([r](const Column& c) { return c.cells[r]; });
  return out;
}

}  // namespace

std::string format_table(const std::vector<Row>& all_rows, bool categories) {
  bool several = false;
  for (const Row& row : all_rows) several = several || row.category == "overall";
  std::vector<const Row*> chains;
  std::vector<const Row*> trees;
  for (const Row& row : all_rows) {
    if (categories || !several || row.category == "overall") (row.tree ? trees : chains).push_back(&row);
  }
  std::string out = format_rows(chains, false);
  if (!trees.empty()) {
    if (!out.empty()) out += '\n';
    out += "trees (TreeDrafter over each drafter's chain; nodes: the budget of a pass; wasted: nodes off the "
           "accepted path):\n";
    out += format_rows(trees, true);
  }
  return out;
}

namespace {

std::string json_escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

namespace {

// The rows of one JSON list, chain rows or tree rows, each as one object.
std::string json_rows(const std::vector<const Row*>& rows, bool tree) {
  std::string out;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& row = *rows[i];
    const Totals& t = row.totals;
    std::vector<std::string> not_finite;
    std::string fields;
    const auto text = [&](const char* key, const std::string& value) {
      fields += std::string(fields.empty() ? "" : ", ") + "\"" + key + "\": \"" + json_escape(value) + "\"";
    };
    const auto count = [&](const char* key, std::size_t value) {
      fields += std::string(fields.empty() ? "" : ", ") + "\"" + key + "\": " + std::to_string(value);
    };
    // JSON has no inf or nan: such a number is null, and the row says which it was.
    const auto number = [&](const char* key, double value, const char* format) {
      fields += std::string(fields.empty() ? "" : ", ") + "\"" + key + "\": ";
      if (std::isfinite(value)) {
        fields += printed(format, value);
      } else {
        fields += "null";
        not_finite.emplace_back(key);
      }
    };
    text("drafter", row.drafter);
    count(tree ? "nodes" : "k", row.k);
    text("category", row.category);
    count("samples", t.samples);
    count("passes", t.passes);
    count("decode_passes", t.passes - t.samples);
    count("generated", t.generated);
    count(tree ? "nodes_sent" : "drafted", t.drafted);
    count("accepted", t.accepted);
    number("mean_accepted_length", t.mean_accepted_length(), "%.6f");
    if (tree) {
      count("nodes_wasted", t.drafted - t.accepted);
      number("nodes_per_pass", t.drafted_per_pass(), "%.6f");
      number("wasted_per_pass", t.rejected_per_pass(), "%.6f");
    } else {
      number("acceptance_rate", t.acceptance_rate(), "%.6f");
      number("rejected_per_pass", t.rejected_per_pass(), "%.6f");
      number("drafter_ns_per_token", t.ns_per_token(), "%.3f");
      count("drafter_peak_bytes", t.peak_bytes);
    }
    count("batch", row.batch);
    text("cost", row.cost);
    if (!row.price.empty()) text("price", row.price);
    text("policy", to_string(row.policy));
    number("simulated_cost", t.simulated_cost, "%.6f");
    number("speedup", row.speedup, "%.6f");
    if (!not_finite.empty()) {
      fields += ", \"not_finite\": [";
      for (std::size_t j = 0; j < not_finite.size(); ++j) fields += (j ? ", \"" : "\"") + not_finite[j] + "\"";
      fields += "]";
    }
    out += std::string(i ? "," : "") + "\n  {" + fields + "}";
  }
  return out;
}

}  // namespace

std::string format_json(const std::vector<Row>& rows) {
  std::vector<const Row*> chains;
  std::vector<const Row*> trees;
  for (const Row& row : rows) (row.tree ? trees : chains).push_back(&row);
  std::string out = "{\"results\": [" + json_rows(chains, false) + "\n]";
  if (!trees.empty()) out += ",\n\"trees\": [" + json_rows(trees, true) + "\n]";
  out += "}\n";
  return out;
}

}  // namespace ngramspec::replay
