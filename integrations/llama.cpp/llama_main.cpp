// ngramspec-llama: llama.cpp decoding with ngramspec drafting, checked against plain decoding and
// compared with llama.cpp's own n-gram drafters in one run.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unistd.h>

#include <ngramspec/batch_speculator.hpp>
#include <ngramspec/mapped_corpus.hpp>
#include <ngramspec/model_drafter.hpp>
#include <ngramspec/shared_corpus.hpp>

#include "command_line.hpp"
#include "llama_cost.hpp"
#include "llama_decoding.hpp"
#include "llama_divergence.hpp"
#include "llama_draft_gguf.hpp"
#include "llama_engine.hpp"
#include "llama_logits_model.hpp"
#include "llama_options.hpp"
#if NGRAMSPEC_LLAMA_CPP_DRAFTERS
#include "llama_cpp_drafter.hpp"
#endif

namespace {

using namespace ngramspec;
using namespace ngramspec::llama_cpp;

std::vector<std::string> read_prompts(const LlamaOptions& o) {
  if (o.prompt) return {*o.prompt};
  return cli::read_prompt_lines(o.prompts_file);
}

#if NGRAMSPEC_LLAMA_CPP_DRAFTERS
// What --compare runs of llama.cpp's drafters without --llama-drafter: every n-gram type at its
// defaults, and the settings that draft on short texts (the defaults look for 12 to 24 tokens of
// match and draft nothing on a story of 256).
std::vector<std::string> comparison_drafters() {
  return {"ngram-simple",     "ngram-simple:n=1,m=4",      "ngram-simple:n=2,m=4",      "ngram-simple:n=3,m=4",
          "ngram-map-k",      "ngram-map-k:n=2,m=4",       "ngram-map-k:n=3,m=4",       "ngram-map-k4v",
          "ngram-map-k4v:n=2,m=4", "ngram-map-k4v:n=3,m=4", "ngram-mod",                "ngram-mod:n_match=2,n_max=4,n_min=1",
          "ngram-mod:n_match=3,n_max=4,n_min=1", "ngram-mod:n_match=3,n_max=8,n_min=1", "ngram-cache"};
}

// The most tokens one llama.cpp draft of this configuration holds.
std::size_t most_drafts(const LlamaCppDrafterConfig& c) {
  switch (c.type) {
    case NGramType::mod: return static_cast<std::size_t>(std::max(1, c.n_max));
    case NGramType::cache: return 8;
    default: return c.m;
  }
}
#endif

// A draft model of --draft-model or --draft-layers, loaded, and what the table calls it.
struct DraftModel {
  std::unique_ptr<Engine> engine;
  std::string label;
};

// The file name of a path, for table rows.
std::string file_name(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The draft models of --draft-model (each file) or --draft-layers (each cut of the one file, or
// of --model, written to a temporary file removed once loaded), each loaded with the model's
// context and threads and checked to share its vocabulary; a failure names the option and value.
std::vector<DraftModel> load_draft_models(const LlamaOptions& o, const Engine& target) {
  std::vector<DraftModel> drafts;
  const auto load = [&](const std::string& path) {
    EngineConfig config{path, o.threads, o.parallel, target.context(), 0, o.verbose, o.flash_attention};
    auto engine = std::make_unique<Engine>(config);
    engine->require_vocabulary_of(target);
    return engine;
  };
  for (const std::string& path : o.draft_layers.empty() ? o.draft_models : std::vector<std::string>{}) {
    try {
      drafts.push_back({load(path), file_name(path)});
    } catch (const std::runtime_error& e) {
      throw std::runtime_error("--draft-model '" + path + "': " + e.what());
    }
  }
  const std::string source = o.draft_models.empty() ? o.model : o.draft_models.front();
  for (const std::size_t layers : o.draft_layers) {
    const std::string temporary = (std::filesystem::temp_directory_path() /
                                   ("ngramspec-llama-draft-" + std::to_string(::getpid()) + "-" + std::to_string(layers) + ".gguf"))
                                      .string();
    try {
      const std::size_t blocks = write_first_blocks(source, layers, temporary);
      std::unique_ptr<Engine> engine;
      try {
        engine = load(temporary);
      } catch (...) {
        std::filesystem::remove(temporary);
        throw;
      }
      std::filesystem::remove(temporary);  // llama.cpp has read or mapped it
      drafts.push_back({std::move(engine), file_name(source) + " " + std::to_string(layers) + " of " +
                                               std::to_string(blocks) + " blocks"});
    } catch (const std::runtime_error& e) {
      throw std::runtime_error("--draft-layers " + std::to_string(layers) + ": " + e.what());
    }
  }
  return drafts;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// One way of decoding in a comparison: its name and a run over the prompts.
struct Contender {
  Contender(std::string n, std::function<RunResult()> r) : name(std::move(n)), run(std::move(r)) {}

  std::string name;
  std::function<RunResult()> run;
  std::vector<double> seconds;
  // Each run's tokens per second and drafts (a learned cost drafts otherwise from run to run).
  std::vector<std::pair<double, std::uint64_t>> runs;
  RunResult first;  // the first timed run's outputs and counts
  bool identical = true;
  // The outputs of its first run that differed from plain decoding's first, if any, and where.
  std::optional<std::vector<std::vector<Token>>> differing;
  std::vector<Divergence> divergences;
};

// The label of the run a divergence line compares with plain decoding.
const char* other_label(const Contender& c) { return c.name == "plain" ? "a later plain run" : "drafted run"; }

// Finds where each contender's differing run left plain decoding's first run, and reads the plain
// model's logits there from one more plain run (only when something differed: the timed runs
// record nothing). Returns false when that plain run did not reproduce the first, whose logits
// it then does not show.
bool locate_divergences(std::vector<Contender>& contenders, Engine& engine, std::span<const std::vector<Token>> prompts,
                        const RunSettings& settings) {
  const std::vector<std::vector<Token>>& reference = contenders[0].first.outputs;
  std::vector<std::vector<Divergence*>> at_prompt(prompts.size());
  for (Contender& c : contenders) {
    if (!c.differing) continue;
    c.divergences = find_divergences(reference, *c.differing);
    for (Divergence& d : c.divergences) {
      if (d.plain) at_prompt[d.prompt].push_back(&d);
    }
  }
  if (std::all_of(at_prompt.begin(), at_prompt.end(), [](const auto& v) { return v.empty(); })) return true;
  const RunResult again =
      decode_plain(engine, prompts, settings, [&](std::size_t prompt, std::size_t token, std::span<const float> row) {
        for (Divergence* d : at_prompt[prompt]) {
          if (d->token == token) d->logits = score(row, *d->plain, d->other);
        }
      });
  return again.outputs == reference;
}

// One line per divergence of `c`, then a warning when the logits shown are not the first plain run's.
void print_divergences(const Contender& c, bool greedy, bool reproduced) {
  for (const Divergence& d : c.divergences) std::printf("%s\n", divergence_line(c.name, d, other_label(c), greedy).c_str());
  if (!c.divergences.empty() && !reproduced) {
    std::printf("%s: the plain run that read these logits differed from the first plain run: plain decoding does "
                "not reproduce itself here, and the logits shown are that run's\n",
                c.name.c_str());
  }
}

// The cost the speculative runs plan with, and the line that says where it came from.
struct CostChoice {
  std::optional<VerifyCost> cost;
  std::string line;
  std::optional<FixedShapeCosts> shape;  // with --pass-shape fixed
  bool learn = false;                    // learned from the passes served, `cost` the prior
};

CostChoice choose_cost(const LlamaOptions& o, Engine& engine, std::size_t at) {
  CostChoice c;
  if (o.cost_source == LlamaOptions::Cost::none) {
    c.line = "verify cost: none (MatchDrafter's gate sizes the drafts)";
  } else if (o.cost_source == LlamaOptions::Cost::given) {
    c.cost = *o.cost;
    c.line = "verify cost (given): " + c.cost->spec();
  } else if (o.cost_source == LlamaOptions::Cost::learn && o.cost) {
    c.cost = *o.cost;
    c.learn = true;
    c.line = "verify cost: learned from the passes served, from " + c.cost->spec();
  } else if (o.cost_source == LlamaOptions::Cost::learn) {
    const auto start = std::chrono::steady_clock::now();
    c.cost = measure_pass_cost(engine, o.parallel, o.k, at);
    c.learn = true;
    char took[64];
    std::snprintf(took, sizeof took, "measured in %.1f s",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    c.line = std::string("verify cost: learned from the passes served, from the passes timed at position ") +
             std::to_string(at) + " (" + took + (o.print_cost ? "): " + c.cost->spec() : ", --print-cost shows it)");
  } else if (o.fixed_shape && o.parallel == 1) {
    const auto start = std::chrono::steady_clock::now();
    c.shape = measure_fixed_shape_costs(engine, o.k, at);
    c.cost = c.shape->entry;  // the configuration's: the drafters do not gate under it
    char line[256];
    std::snprintf(line, sizeof line,
                  "verify cost at position %zu, every pass with drafts %zu tokens: measured in %.1f s: plain pass %.3f ms, "
                  "one of %zu tokens after its like %.3f ms, a graph rebuild %.3f ms",
                  at, o.k + 1, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                  1e3 * c.shape->plain_seconds, o.k + 1, 1e3 * c.shape->shape_seconds, 1e3 * c.shape->rebuild_seconds);
    c.line = line;
    if (o.print_cost) c.line += "; after a plain pass " + c.shape->entry.spec() + ", after one with drafts " + c.shape->streak.spec();
  } else {
    const auto start = std::chrono::steady_clock::now();
    c.cost = measure_pass_cost(engine, o.parallel, o.k, at);
    char took[64];
    std::snprintf(took, sizeof took, "measured in %.1f s",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    c.line = std::string("verify cost at position ") + std::to_string(at) + ": " + took +
             (o.print_cost ? ": " + c.cost->spec() : " (--print-cost shows it)");
  }
  return c;
}

void print_run(const char* label, const RunResult& r) {
  std::printf("%-10s %6llu tokens in %7.3f s, %8.1f tokens/s, %5llu passes, drafted %llu, accepted %llu, "
              "mean accepted length %.2f, outside llama_decode %.1f%%, out-of-vocabulary drafts dropped %llu\n",
              label, static_cast<unsigned long long>(r.generated), r.seconds, r.tokens_per_second(),
              static_cast<unsigned long long>(r.passes), static_cast<unsigned long long>(r.drafted),
              static_cast<unsigned long long>(r.accepted), r.mean_accepted_length(),
              r.seconds > 0 ? 100.0 * (r.seconds - r.decode_seconds) / r.seconds : 0.0,
              static_cast<unsigned long long>(r.out_of_vocabulary));
}

// `identical`: "true", "false", or "null" where the run is not compared (the rejection mode's drafted runs).
std::string run_json(const std::string& name, const RunResult& r, double seconds, double plain_seconds,
                     const char* identical, const std::string& divergences = {}) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"drafter\": %s, \"generated\": %llu, \"passes\": %llu, \"drafted\": %llu, \"accepted\": %llu, "
                "\"mean_accepted_length\": %.4f, \"seconds\": %.6f, \"tokens_per_second\": %.2f, \"speedup\": %.4f, "
                "\"outside_decode_fraction\": %.4f, \"out_of_vocabulary\": %llu, \"identical\": %s}",
                json_string(name).c_str(), static_cast<unsigned long long>(r.generated),
                static_cast<unsigned long long>(r.passes), static_cast<unsigned long long>(r.drafted),
                static_cast<unsigned long long>(r.accepted), r.mean_accepted_length(), seconds,
                seconds > 0 ? static_cast<double>(r.generated) / seconds : 0.0, seconds > 0 ? plain_seconds / seconds : 0.0,
                r.seconds > 0 ? (r.seconds - r.decode_seconds) / r.seconds : 0.0,
                static_cast<unsigned long long>(r.out_of_vocabulary), identical);
  std::string json = buf;
  if (divergences.empty()) return json;  // a run compared with nothing
  json.pop_back();
  return json + ", \"divergences\": " + divergences + "}";
}

int curve_mode(const LlamaOptions& o) {
  EngineConfig config{o.model, o.threads, *std::max_element(o.curve.begin(), o.curve.end()), o.context, 0, o.verbose, o.flash_attention};
  Engine engine(config);
  if (o.curve_at + o.curve_tokens + 64 > engine.context()) {
    throw std::runtime_error("--curve-at " + std::to_string(o.curve_at) + " leaves no room for passes of --curve-tokens " +
                             std::to_string(o.curve_tokens) + " in a context of " + std::to_string(engine.context()) +
                             " tokens (--ctx): the position plus the tokens plus 64 must fit");
  }
  std::printf("# %s, %d threads, at position %zu; ms per pass of k tokens per sequence (k > 1: with the plain pass after it, less a plain pass; median of %zu after a warm-up)\n",
              engine.description().c_str(), o.threads, o.curve_at, o.repeats);
  std::vector<std::vector<double>> ms(o.curve.size());
  std::vector<std::string> specs;
  for (std::size_t c = 0; c < o.curve.size(); ++c) {
    const std::size_t s = o.curve[c];
    std::vector<std::size_t> counts;
    for (std::size_t k = 1; k <= o.curve_tokens; ++k) {
      counts.push_back(k * s);
      // The first pass with a draft (one sequence's): what any pass with drafts costs beyond a
      // plain one is a step there, which the spec must hold for the planner to see it.
      if (k == 1 && s > 1 && o.curve_tokens > 1) counts.push_back(s + 1);
    }
    const std::vector<double> seconds = time_passes(engine, s, counts, o.curve_at, o.repeats);
    std::string spec = "table:";
    for (std::size_t i = 0; i < counts.size(); ++i) {
      if (counts[i] % s == 0) ms[c].push_back(1e3 * seconds[i]);
      char point[64];
      std::snprintf(point, sizeof point, "%s%zu=%.4g", i ? "," : "", counts[i], seconds[i] / seconds[0]);
      spec += point;
    }
    specs.push_back(spec);
  }
  std::printf("| k |");
  for (const std::size_t s : o.curve) std::printf(" %zu seq |", s);
  std::printf("\n|---:|");
  for (std::size_t c = 0; c < o.curve.size(); ++c) std::printf("---:|");
  std::printf("\n");
  for (std::size_t k = 0; k < o.curve_tokens; ++k) {
    std::printf("| %zu |", k + 1);
    for (std::size_t c = 0; c < o.curve.size(); ++c) std::printf(" %.3f |", ms[c][k]);
    std::printf("\n");
  }
  for (std::size_t c = 0; c < o.curve.size(); ++c) std::printf("# %zu sequences: --cost %s\n", o.curve[c], specs[c].c_str());
  // Passes with drafts one after another keep llama.cpp's graph: what each costs there.
  std::printf("# ms per pass of k tokens per sequence in a run of such passes (graph kept), k = 2, 5, 9, %zu:", o.curve_tokens);
  for (std::size_t c = 0; c < o.curve.size(); ++c) {
    std::printf(" %zu seq:", o.curve[c]);
    for (const std::size_t k : {std::size_t{2}, std::size_t{5}, std::size_t{9}, o.curve_tokens}) {
      if (k > o.curve_tokens) continue;
      std::printf(" %.3f", 1e3 * time_same_shape_passes(engine, o.curve[c], k * o.curve[c], o.curve_at, o.repeats));
    }
  }
  std::printf("\n");
  return 0;
}

int run(const LlamaOptions& o) {
  const bool rejection = o.sampling.mode == SamplingMode::rejection && o.sampling.temperature > 0;
  if (!o.curve.empty()) return curve_mode(o);
  // The prompts first: a bad --prompts file is refused before the model is loaded.
  const std::vector<std::string> texts = read_prompts(o);
  EngineConfig config{o.model, o.threads, o.parallel, o.context, 0, o.verbose, o.flash_attention};
  Engine engine(config);
  std::vector<std::vector<Token>> prompts;
  for (const std::string& t : texts) prompts.push_back(engine.tokenize(t, true));
  llama_cpp::detail::prompt_limit_check(engine, prompts);
  const std::vector<DraftModel> draft_models = load_draft_models(o, engine);

  RunSettings settings;
  settings.max_new_tokens = o.n;
  settings.stop_at_eog = !o.ignore_eos;
  settings.sampling = o.sampling;

  std::unique_ptr<SharedCorpus> corpus;
  if (o.corpus_mib != 0) corpus = std::make_unique<SharedCorpus>(o.corpus_mib << 20);
  std::unique_ptr<MappedCorpus> file;
  if (!o.corpus_file.empty()) file = std::make_unique<MappedCorpus>(o.corpus_file);

  const bool speculates = o.speculate || o.check || o.compare;
  // Passes are timed midway through a typical sequence: what attention reads changes their cost.
  std::size_t prompt_tokens = 0;
  for (const std::vector<Token>& p : prompts) prompt_tokens += p.size();
  // (PassTimer needs room for the largest pass after it: a long --n on a short --ctx times nearer the start.)
  const std::size_t room = engine.context() > o.k + 1 + 64 ? engine.context() - (o.k + 1 + 64) : 0;
  const std::size_t midway = std::min(prompt_tokens / prompts.size() + o.n / 2, room);
  CostChoice cost = speculates ? choose_cost(o, engine, midway) : CostChoice{};
  BatchConfig batch;
  batch.max_sequences = o.parallel;
  batch.max_pass_tokens = engine.max_pass_tokens();
  batch.cost = cost.cost;
  batch.learn_cost = cost.learn;
  // The drafters know the model's vocabulary: a corpus file built for another one is refused here,
  // naming it, and a token outside it (a damaged file's) is dropped from the drafts, never decoded.
  MatchConfig drafter = BatchSpeculator<MatchDrafter>::default_drafter(batch);
  drafter.vocab_size = engine.vocab_size();
  // Tables sized to the context a sequence can hold, not to the default cap: a drafter per
  // sequence, and their memory is what every update walks.
  drafter.index_capacity =
      std::clamp<std::size_t>(engine.context(), MatchDrafter::kMaxCountOrder, MatchDrafter::kMaxIndexCapacity);
  BatchSpeculator<MatchDrafter> speculator(batch, drafter, corpus.get(), file.get());
  // With --draft-model: ngramspec drafts with each draft model (ModelDrafter, drawing its drafts
  // as the run samples, so that each draft's q is the draft model's distribution).
  ModelDraftConfig model_drafter;
  model_drafter.max_drafts = o.k;
  model_drafter.sampling = o.sampling;
  std::vector<std::unique_ptr<DraftModelSpeculator>> draft_speculators;
  for (const DraftModel& draft : draft_models) {
    draft_speculators.push_back(std::make_unique<DraftModelSpeculator>(*draft.engine, batch, model_drafter));
  }
  // With --best-of: per draft model, the text beside it each pass, a drafted token priced at the
  // draft model's one-token pass over the model's (measured where the verify cost is), or --draft-cost.
  std::vector<std::unique_ptr<BestOfSpeculator>> best_speculators;
  std::vector<std::string> draft_cost_lines;
  if (o.best_of) {
    const std::size_t one[] = {1};
    const std::size_t repeats = 11;
    const double model_pass = o.draft_cost ? 0.0 : time_passes(engine, 1, one, midway, repeats)[0];
    for (const DraftModel& draft : draft_models) {
      BestOfConfig best;
      char line[256];
      if (o.draft_cost) {
        best.second_draft_cost = *o.draft_cost;
        std::snprintf(line, sizeof line, "draft cost of %s (given): %.3f passes a drafted token", draft.label.c_str(),
                      best.second_draft_cost);
      } else {
        const double draft_pass = time_passes(*draft.engine, 1, one, midway, repeats)[0];
        best.second_draft_cost = model_pass > 0 ? draft_pass / model_pass : 1.0;
        std::snprintf(line, sizeof line,
                      "draft cost of %s at position %zu: one-token pass %.3f ms against the model's %.3f ms: %.3f "
                      "passes a drafted token",
                      draft.label.c_str(), midway, 1e3 * draft_pass, 1e3 * model_pass, best.second_draft_cost);
      }
      draft_cost_lines.emplace_back(line);
      best_speculators.push_back(std::make_unique<BestOfSpeculator>(*draft.engine, batch, drafter, model_drafter, best));
    }
  }
  const auto speculate = [&](auto& s) {
    if (!cost.shape) return decode_speculative(engine, s, prompts, settings, o.k);
    const FixedPassShape shape{o.k, &cost.shape->entry, &cost.shape->streak};
    return decode_speculative(engine, s, prompts, settings, o.k, &shape);
  };
  const auto run_plain = [&] { return decode_plain(engine, prompts, settings); };
  const auto run_ngramspec = [&] {
    if (corpus) corpus->clear();  // every timed run starts from the same corpus
    return speculate(speculator);
  };
  // ngramspec's run outside --compare: with the draft model when one is given.
  const auto run_ngramspec_drafter = [&] {
    if (!best_speculators.empty()) return speculate(*best_speculators.front()->speculator);
    return draft_speculators.empty() ? run_ngramspec() : speculate(*draft_speculators.front()->speculator);
  };
  const auto draft_model_name = [&](std::size_t i) { return "ngramspec draft-model " + draft_models[i].label; };
  const auto best_of_name = [&](std::size_t i) { return "ngramspec best-of " + draft_models[i].label; };
  const std::string single_name =
      !o.speculate ? "plain" : draft_models.empty() ? "ngramspec" : o.best_of ? best_of_name(0) : draft_model_name(0);

  if (!o.check && !o.compare) {
    const RunResult r = o.speculate ? run_ngramspec_drafter() : run_plain();
    if (o.json) {
      std::printf("{\"model\": %s, \"cost\": %s, \"runs\": [%s], \"outputs\": [", json_string(engine.description()).c_str(),
                  json_string(cost.cost ? (cost.learn ? "learn:" : "") + cost.cost->spec() : std::string("none")).c_str(),
                  run_json(single_name, r, r.seconds, r.seconds, "true").c_str());
      for (std::size_t i = 0; i < r.outputs.size(); ++i) {
        std::printf("%s{\"prompt\": %s, \"text\": %s, \"tokens\": [", i ? ", " : "", json_string(texts[i]).c_str(),
                    json_string(engine.detokenize(r.outputs[i])).c_str());
        for (std::size_t j = 0; j < r.outputs[i].size(); ++j) std::printf("%s%d", j ? ", " : "", static_cast<int>(r.outputs[i][j]));
        std::printf("]}");
      }
      std::printf("]}\n");
      return 0;
    }
    for (std::size_t i = 0; i < r.outputs.size(); ++i) {
      std::printf("%s%s\n\n", texts[i].c_str(), engine.detokenize(r.outputs[i]).c_str());
    }
    std::printf("%s\n", engine.description().c_str());
    if (o.speculate) std::printf("%s\n", cost.line.c_str());
    for (const std::string& line : draft_cost_lines) std::printf("%s\n", line.c_str());
    print_run(!o.speculate ? "plain" : draft_models.empty() ? "ngramspec" : o.best_of ? "best-of" : "draft-model", r);
    if (o.print_cost && speculator.learned_cost() != nullptr) {
      std::printf("learned cost:\n%s", speculator.learned_cost()->describe().c_str());
    }
    return 0;
  }

  std::vector<Contender> contenders;
  contenders.emplace_back("plain", run_plain);
  if (o.compare || draft_models.empty()) contenders.emplace_back("ngramspec", run_ngramspec);
  // --check runs one ngramspec drafter: the best of text and draft model with --best-of.
  for (std::size_t i = 0; i < (o.compare || !o.best_of ? draft_speculators.size() : 0); ++i) {
    BatchSpeculator<DraftModelSpeculator::Drafter>* s = draft_speculators[i]->speculator.get();
    contenders.emplace_back(draft_model_name(i), [&speculate, s] { return speculate(*s); });
  }
  for (std::size_t i = 0; i < best_speculators.size(); ++i) {
    BatchSpeculator<BestOfSpeculator::Drafter>* s = best_speculators[i]->speculator.get();
    contenders.emplace_back(best_of_name(i), [&speculate, s] { return speculate(*s); });
  }
#if NGRAMSPEC_LLAMA_CPP_DRAFTERS
  std::vector<std::unique_ptr<BatchSpeculator<LlamaCppDrafter>>> llama_speculators;
  if (o.compare) {
    quiet_llama_cpp_logs();
    const std::vector<std::string> specs = o.llama_drafters.empty() ? comparison_drafters() : o.llama_drafters;
    for (const std::string& spec : specs) {
      const LlamaCppDrafterConfig drafter = parse_spec(spec, "--llama-drafter '" + spec + "'");
      // Each type drafts as many tokens as llama.cpp lets it (its own n_max); llama.cpp sizes
      // nothing by cost, so neither does this speculator.
      const std::size_t max_drafts = most_drafts(drafter);
      BatchConfig c;
      c.max_sequences = o.parallel;
      c.max_pass_tokens = engine.max_pass_tokens();
      llama_speculators.push_back(std::make_unique<BatchSpeculator<LlamaCppDrafter>>(
          c, [drafter] { return LlamaCppDrafter(drafter); }));
      BatchSpeculator<LlamaCppDrafter>* s = llama_speculators.back().get();
      contenders.emplace_back(describe(drafter), [&engine, s, &prompts, &settings, max_drafts] {
        return decode_speculative(engine, *s, prompts, settings, max_drafts);
      });
    }
    // llama.cpp's draft-model speculation with each draft model: a drafter per sequence, each in
    // its own sequence of the draft model's context.
    const DraftSimpleConfig draft_simple{static_cast<std::int32_t>(o.llama_draft_max)};
    for (const DraftModel& draft : draft_models) {
      BatchConfig c;
      c.max_sequences = o.parallel;
      c.max_pass_tokens = engine.max_pass_tokens();
      std::int32_t sequence = 0;
      llama_speculators.push_back(std::make_unique<BatchSpeculator<LlamaCppDrafter>>(c, [&, d = draft.engine.get()] {
        return LlamaCppDrafter(draft_simple, engine.handle(), d->handle(), sequence++);
      }));
      BatchSpeculator<LlamaCppDrafter>* s = llama_speculators.back().get();
      const auto max_drafts = static_cast<std::size_t>(draft_simple.n_max);
      contenders.emplace_back(describe(draft_simple) + " " + draft.label,
                              [&engine, s, &prompts, &settings, max_drafts] {
                                return decode_speculative(engine, *s, prompts, settings, max_drafts);
                              });
    }
  }
#else
  if (o.compare) {
    std::fprintf(stderr, "ngramspec-llama: this build has no llama.cpp drafters (built without llama.cpp's common "
                         "library); --compare runs plain and ngramspec only\n");
  }
#endif

  // Rounds over every contender, each round in a rotated order so none always runs first (the
  // first round starts with plain decoding, whose first run every run is compared with).
  for (std::size_t round = 0; round < o.repeats; ++round) {
    for (std::size_t j = 0; j < contenders.size(); ++j) {
      Contender& c = contenders[(j + round) % contenders.size()];
      RunResult r = c.run();
      c.seconds.push_back(r.seconds);
      c.runs.emplace_back(r.tokens_per_second(), r.drafted);
      const bool reference = &c == &contenders[0] && c.seconds.size() == 1;
      // In the rejection mode a drafted run keeps the model's distribution, not the seed's text: only
      // plain decoding's runs are compared (with its first).
      const bool compared = !rejection || &c == &contenders[0];
      if (!reference && compared && !c.differing && r.outputs != contenders[0].first.outputs) c.differing = r.outputs;
      if (c.seconds.size() == 1) c.first = std::move(r);
    }
  }
  for (Contender& c : contenders) c.identical = !c.differing && !contenders[0].differing;
  // What the identity column says of a run: "yes", "no", or "n/a" for a drafted run in the rejection mode.
  const auto compared = [&](const Contender& c) { return !rejection || &c == &contenders[0]; };
  const auto identity = [&](const Contender& c) { return !compared(c) ? "n/a" : c.identical ? "yes" : "no"; };
  const auto json_identity = [&](const Contender& c) { return !compared(c) ? "null" : c.identical ? "true" : "false"; };
  const bool greedy = !(o.sampling.temperature > 0);
  const bool reproduced = locate_divergences(contenders, engine, prompts, settings);
  const double plain_seconds = median(contenders[0].seconds);

  bool all_identical = true;
  for (const Contender& c : contenders) all_identical = all_identical && c.identical;
  if (o.json) {
    std::printf("{\"model\": %s, \"prompts\": %zu, \"parallel\": %zu, \"threads\": %d, \"cost\": %s, \"repeats\": %zu, "
                "\"runs\": [",
                json_string(engine.description()).c_str(), prompts.size(), o.parallel, o.threads,
                json_string(cost.cost ? (cost.learn ? "learn:" : "") + cost.cost->spec() : std::string("none")).c_str(), o.repeats);
    for (std::size_t i = 0; i < contenders.size(); ++i) {
      std::printf("%s%s", i ? ", " : "",
                  run_json(contenders[i].name, contenders[i].first, median(contenders[i].seconds), plain_seconds,
                           json_identity(contenders[i]), divergences_json(contenders[i].divergences, greedy)).c_str());
    }
    std::printf("], \"identical\": %s, \"plain_reproduced\": %s}\n", all_identical ? "true" : "false",
                reproduced ? "true" : "false");
    return all_identical ? 0 : 1;
  }
  std::printf("%s; %zu prompts, --n %zu, --parallel %zu, %s\n%s\n", engine.description().c_str(), prompts.size(), o.n,
              o.parallel, o.sampling.temperature > 0 ? "sampled" : "greedy", cost.line.c_str());
  for (const std::string& line : draft_cost_lines) std::printf("%s\n", line.c_str());
  if (o.check) {
    const Contender& plain = contenders[0];
    const Contender& spec = contenders[1];
    print_run("plain", plain.first);
    print_run("ngramspec", spec.first);
    if (spec.runs.size() > 1) {
      // The lines above are the first runs'; the speedup is the median's, and a speculator that
      // learns its cost keeps learning from run to run.
      std::printf("ngramspec runs:");
      for (std::size_t i = 0; i < spec.runs.size(); ++i) {
        std::printf("%s %.1f tokens/s (drafted %llu)", i ? "," : "", spec.runs[i].first,
                    static_cast<unsigned long long>(spec.runs[i].second));
      }
      std::printf("\n");
    }
    std::printf("identical: %s\n", identity(spec));
    print_divergences(plain, greedy, reproduced);
    print_divergences(spec, greedy, reproduced);
    std::printf("plain %.1f tokens/s, ngramspec %.1f tokens/s, mean accepted length %.2f\n",
                static_cast<double>(plain.first.generated) / plain_seconds,
                static_cast<double>(spec.first.generated) / median(spec.seconds), spec.first.mean_accepted_length());
    std::printf("speedup %.2fx (median of %zu alternating runs each)\n", plain_seconds / median(spec.seconds), o.repeats);
    return spec.identical ? 0 : 1;
  }
  std::printf("\n| drafter | drafted | accepted | mean accepted length | tokens/s | speedup | identical |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---|\n");
  for (const Contender& c : contenders) {
    const double s = median(c.seconds);
    std::printf("| %s | %llu | %llu | %.2f | %.1f | %.2fx | %s |\n", c.name.c_str(),
                static_cast<unsigned long long>(c.first.drafted), static_cast<unsigned long long>(c.first.accepted),
                c.first.mean_accepted_length(), static_cast<double>(c.first.generated) / s, plain_seconds / s,
                identity(c));
  }
  std::printf("\ntokens/s and speedup: medians of %zu rounds, each running every drafter in a rotated order\n",
              o.repeats);
  for (const Contender& c : contenders) print_divergences(c, greedy, reproduced);
  return all_identical ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  LlamaOptions options;
  try {
    options = parse_llama_options(args);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "ngramspec-llama: %s\n%s", e.what(), llama_usage());
    return 2;
  }
  if (options.help) {
    std::fputs(llama_usage(), stdout);
    return 0;
  }
  try {
    return run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ngramspec-llama: error: %s\n", e.what());
    return 1;
  }
}
