#include "drafter_registry.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include <unistd.h>

#include "baselines/ngram_cache.hpp"
#include "baselines/prompt_lookup.hpp"
#include "drafter_entry.hpp"
#include "ngramspec/detail/parse_number.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "ngramspec/tree_drafter.hpp"
#include "tree_serving.hpp"

namespace ngramspec::replay {
namespace {

// Parses "name:key=value,key=value" into the name and its parameters.
std::map<std::string, std::string> parse_parameters(const std::string& spec, std::string& name) {
  std::map<std::string, std::string> parameters;
  const std::size_t colon = spec.find(':');
  name = spec.substr(0, colon);
  if (colon == std::string::npos) return parameters;
  std::string_view rest = std::string_view(spec).substr(colon + 1);
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      throw std::invalid_argument("drafter '" + spec + "': parameter '" + std::string(item) + "' is not key=value");
    }
    if (!parameters.emplace(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1))).second) {
      throw std::invalid_argument("drafter '" + spec + "': parameter '" + std::string(item.substr(0, eq)) +
                                  "' is given twice");
    }
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
  }
  return parameters;
}

class Parameters {
 public:
  Parameters(std::string spec, std::map<std::string, std::string> values)
      : spec_(std::move(spec)), values_(std::move(values)) {}

  std::size_t count(const std::string& key, std::size_t fallback) {
    const auto it = values_.find(key);
    if (it == values_.end()) return fallback;
    const std::string& text = it->second;
    const ngramspec::detail::ParsedNumber<std::size_t> value = ngramspec::detail::parse_whole<std::size_t>(text);
    if (!value.ok()) {
      throw std::invalid_argument("drafter '" + spec_ + "': " + key + " = '" + text + "' is not a whole number");
    }
    values_.erase(it);
    return value.value;
  }
  // A finite decimal number.
  double number(const std::string& key, double fallback) {
    const auto it = values_.find(key);
    if (it == values_.end()) return fallback;
    const std::string& text = it->second;
    // The project's reader: hexadecimal, inf, a sign or spaces are refused as on every command line.
    const ngramspec::detail::ParsedNumber<double> value = ngramspec::detail::parse_real<double>(text);
    if (!value.ok()) {
      throw std::invalid_argument("drafter '" + spec_ + "': " + key + " = '" + text + "' is not a finite number");
    }
    values_.erase(it);
    return value.value;
  }
  // A parameter that takes one of `choices` (the first is the default); returns its index.
  std::size_t choice(const std::string& key, std::initializer_list<const char*> choices) {
    const auto it = values_.find(key);
    if (it == values_.end()) return 0;
    std::size_t index = 0;
    std::string known;
    for (const char* c : choices) {
      if (it->second == c) {
        values_.erase(it);
        return index;
      }
      known += std::string(index++ ? ", " : "") + c;
    }
    throw std::invalid_argument("drafter '" + spec_ + "': " + key + " = '" + it->second + "' is not one of " + known);
  }
  // Whether the parameter is the word `word` (consumed if so).
  bool is(const std::string& key, const std::string& word) {
    const auto it = values_.find(key);
    if (it == values_.end() || it->second != word) return false;
    values_.erase(it);
    return true;
  }
  // Every parameter must have been used: a misspelt one must not silently do nothing.
  void finish() const {
    if (!values_.empty()) {
      throw std::invalid_argument("drafter '" + spec_ + "': unknown parameter '" + values_.begin()->first + "'");
    }
  }

 private:
  std::string spec_;
  std::map<std::string, std::string> values_;
};

// DrafterEntry::serve_tree of a match drafter: TreeDrafters over its chain `config`, drafting
// from `file` and, with corpus_bytes > 0, from a causal SharedCorpus of that size (primed with
// `prime`'s records when given), as the chain's serve() does.
DrafterEntry::Serve tree_server(const MatchConfig& config, std::shared_ptr<const MappedCorpus> file,
                                std::size_t corpus_bytes, std::shared_ptr<const MappedCorpus> prime) {
  return [config, file, corpus_bytes, prime](std::span<const TokenStream> streams, const ServeRequest& request) {
    if (request.policy == Policy::plain) {
      throw std::invalid_argument("tree replay: policy plain sends no tree; plain decoding is the chain rows' plain");
    }
    if (request.price != nullptr || request.learn) {
      throw std::invalid_argument("--tree-nodes: trees are priced by --cost alone; --price and --cost learn "
                                  "replay chains (leave --tree-nodes out)");
    }
    TreeServeConfig serving;
    serving.nodes = request.k;
    serving.batch = request.batch;
    if (request.policy == Policy::cost) serving.plan_cost = request.cost != nullptr ? *request.cost : flat_cost();
    serving.prices.assign(request.prices.begin(), request.prices.end());
    TreeConfig tree;  // the defaults; vocab_size 0: recordings hold no top-k to recycle
    tree.chain = config;
    tree.chain.max_drafts = request.k;
    if (request.policy != Policy::gate) tree.chain.min_confidence = 0;
    std::optional<SharedCorpus> corpus;
    if (corpus_bytes != 0) corpus.emplace(corpus_bytes);
    if (corpus && prime != nullptr) corpus->load(prime->path(), ChecksumCheck::skip);  // verified when opened
    SharedCorpus* const shared = corpus ? &*corpus : nullptr;
    return serve_tree_records(
        streams, serving, [&] { return TreeDrafter(tree, nullptr, shared, file.get()); }, shared);
  };
}

// Refuses a live corpus larger than SharedCorpus holds (it would be capped without a word) or
// than the machine's memory holds (the kernel would kill the replay): each way of replaying
// holds a corpus of its own while the served replay runs (gated, with a gate ungated, served).
void check_corpus_size(const std::string& spec, std::size_t corpus_mib, bool has_gate) {
  const std::size_t most = max_corpus_mib();
  if (corpus_mib > most) {
    throw std::invalid_argument("drafter '" + spec + "': corpus = " + std::to_string(corpus_mib) +
                                " MiB is more than the largest corpus, " + std::to_string(most) + " MiB (" +
                                std::to_string(SharedCorpus::kMaxTokens) + " tokens)");
  }
  const std::size_t copies = has_gate ? 3 : 2;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_bytes = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_bytes > 0) {
    const std::size_t memory_mib = static_cast<std::size_t>(pages) * static_cast<std::size_t>(page_bytes) >> 20;
    if (corpus_mib * copies > memory_mib) {
      throw std::invalid_argument("drafter '" + spec + "': corpus = " + std::to_string(corpus_mib) + " MiB, held " +
                                  std::to_string(copies) + " times at once by the replays, is more than this "
                                  "machine's memory, " + std::to_string(memory_mib) + " MiB");
    }
  }
}

// The families other parts of the build registered (register_drafter_family), by name. A
// function's static, so registrars running before main find it made.
std::vector<DrafterFamily>& families() {
  static std::vector<DrafterFamily> registered;
  return registered;
}

// The family whose name `spec` is or starts with (NAME:...), or nullptr.
const DrafterFamily* family_of(const std::string& spec) {
  for (const DrafterFamily& family : families()) {
    if (spec == family.name || spec.starts_with(family.name + ":")) return &family;
  }
  return nullptr;
}

// llama.cpp:TYPE[:key=value,...] in a replay built without llama.cpp (integrations/llama.cpp
// registers the family when it is built in).
[[noreturn]] void llama_cpp_not_built(const std::string& spec) {
  throw std::invalid_argument("drafter '" + spec +
                              "': this ngramspec-replay was built without llama.cpp; configure with "
                              "-DNGRAMSPEC_WITH_LLAMA_CPP=ON (or run `cmake --workflow --preset llama-cpp`) "
                              "to replay llama.cpp's own drafters");
}

}  // namespace

std::size_t max_corpus_mib() noexcept {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  return (SharedCorpus::bytes_for(SharedCorpus::kMaxTokens) + kMiB - 1) / kMiB;
}

DrafterEntry make_drafter(const std::string& spec, const DrafterDefaults& defaults) {
  if (const DrafterFamily* family = family_of(spec)) return family->make(spec);
  if (spec == "llama.cpp" || spec.starts_with("llama.cpp:")) llama_cpp_not_built(spec);
  std::string name;
  Parameters parameters(spec, parse_parameters(spec, name));
  if (name == "ngram") {
    const bool full = parameters.is("window", "full");
    const std::size_t window = full ? 0 : parameters.count("window", defaults.window);
    const std::size_t min_order = parameters.count("min", defaults.min_order);
    const std::size_t max_order = parameters.count("max", defaults.max_order);
    parameters.finish();
    NGramConfig config{.min_order = min_order, .max_order = max_order, .max_drafts = 4,
                       .window = full ? max_order : window};
    NGramPredictor{config};  // validates now, so a bad configuration fails before any replay
    std::string display = "ngram(w=" + (full ? std::string("full") : std::to_string(window)) + "," +
                          std::to_string(min_order) + "-" + std::to_string(max_order) + ")";
    return drafter_entry(display, [config, full](const TokenStream& stream, std::size_t k, const SharedCorpus*, bool) {
      NGramConfig c = config;
      c.max_drafts = k;
      if (full) c.window = std::max(c.max_order, stream.prompt.size() + stream.output.size());
      return NGramPredictor(c);
    });
  }
  if (name == "match") {
    MatchConfig config;
    config.index_capacity = parameters.count("cap", config.index_capacity);
    config.copy_min_match = parameters.count("copy_min", config.copy_min_match);
    config.count_max_order = parameters.count("count_max", config.count_max_order);
    config.count_window = parameters.count("count_window", config.count_window);
    config.min_confidence = parameters.number("gate", config.min_confidence);
    const std::size_t corpus_mib = parameters.count("corpus", 0);
    const bool use_file = parameters.count("file", 0) != 0;
    const bool prime = parameters.count("prime", 0) != 0;
    const std::size_t prefer = parameters.choice("prefer", {"longer", "live", "file"});
    config.corpus_preference = static_cast<CorpusPreference>(prefer);
    parameters.finish();
    MatchDrafter{config};  // validates now
    if ((use_file || prime) && defaults.corpus_file == nullptr) {
      throw std::invalid_argument("drafter '" + spec + "': " + (use_file ? "file" : "prime") +
                                  " = 1 needs a corpus file: give --corpus-file FILE");
    }
    if (prime && corpus_mib == 0) {
      throw std::invalid_argument("drafter '" + spec + "': prime = 1 loads the corpus file into the live corpus: "
                                  "give corpus = MIB too");
    }
    char gate[32];
    std::snprintf(gate, sizeof gate, "%g", config.min_confidence);
    std::string display = "match(cap=" + std::to_string(config.index_capacity) + ",copy_min=" +
                          std::to_string(config.copy_min_match) + ",2-" + std::to_string(config.count_max_order);
    if (config.count_window != 0) display += ",count_window=" + std::to_string(config.count_window);
    display += std::string(",gate=") + gate;
    const std::shared_ptr<const MappedCorpus> file = use_file ? defaults.corpus_file : nullptr;
    const auto make = [config, file](const TokenStream&, std::size_t k, const SharedCorpus* corpus, bool gated) {
      MatchConfig c = config;
      c.max_drafts = k;
      if (!gated) c.min_confidence = 0;
      return MatchDrafter(c, corpus, file.get());
    };
    const bool has_gate = config.min_confidence > 0;
    if (use_file) display += ",file";
    if (use_file && corpus_mib != 0 && prefer != 0) display += std::string(",prefer=") + (prefer == 1 ? "live" : "file");
    if (corpus_mib == 0) {
      DrafterEntry e = drafter_entry(display + ")", make, has_gate);
      e.reads_corpus_file = use_file;
      e.serve_tree = tree_server(config, file, 0, nullptr);
      return e;
    }
    check_corpus_size(spec, corpus_mib, has_gate);
    // The corpus is causal: each record drafts from the outputs of the records before it in
    // the file (served: of the records finished before it began), then adds its own.
    display += ",corpus=" + std::to_string(corpus_mib) + "MiB" + (prime ? ",primed)" : ")");
    try {
      DrafterEntry e = drafter_entry(display, make, has_gate, corpus_mib << 20, prime ? defaults.corpus_file : nullptr);
      e.reads_corpus_file = use_file || prime;
      e.serve_tree = tree_server(config, file, corpus_mib << 20, prime ? defaults.corpus_file : nullptr);
      return e;
    } catch (const std::bad_alloc&) {
      throw std::runtime_error("drafter '" + spec + "': cannot allocate its corpus of " + std::to_string(corpus_mib) +
                               " MiB: out of memory");
    }
  }
  if (name == "prompt-lookup") {
    const std::size_t min_n = parameters.count("min", 1);
    const std::size_t max_n = parameters.count("max", 4);
    const bool latest = parameters.choice("occurrence", {"earliest", "latest"}) == 1;
    parameters.finish();
    baselines::PromptLookupConfig config = baselines::vllm_ngram(min_n, max_n, 1);
    if (latest) config.occurrence = baselines::Occurrence::latest;
    baselines::PromptLookupDrafter{config};  // validates now
    std::string display = "prompt-lookup(" + std::to_string(min_n) + "-" + std::to_string(max_n) +
                          (latest ? ",latest)" : ")");
    return drafter_entry(display, [config](const TokenStream&, std::size_t k, const SharedCorpus*, bool) {
      baselines::PromptLookupConfig c = config;
      c.max_drafts = k;
      return baselines::PromptLookupDrafter(c);
    });
  }
  if (name == "pld-specbench") {
    parameters.finish();
    return drafter_entry("pld-specbench", [](const TokenStream&, std::size_t k, const SharedCorpus*, bool) {
      baselines::PromptLookupConfig c = baselines::spec_bench_pld();
      c.max_drafts = k;
      return baselines::PromptLookupDrafter(c);
    });
  }
  if (name == "prompt-lookup-hf") {
    const std::size_t max_n = parameters.count("max", 2);
    const std::size_t eos = parameters.count("eos", 2);
    if (eos > std::numeric_limits<Token>::max()) {
      throw std::invalid_argument("drafter '" + spec + "': eos = " + std::to_string(eos) + " is not a token id");
    }
    parameters.finish();
    baselines::PromptLookupDrafter{baselines::hf_prompt_lookup(1, max_n, {static_cast<Token>(eos)})};
    return drafter_entry("prompt-lookup-hf(1-" + std::to_string(max_n) + ")",
                 [max_n, eos](const TokenStream&, std::size_t k, const SharedCorpus*, bool) {
                   return baselines::PromptLookupDrafter(
                       baselines::hf_prompt_lookup(k, max_n, {static_cast<Token>(eos)}));
                 });
  }
  if (name == "ngram-cache") {
    parameters.finish();
    return drafter_entry("ngram-cache(llama.cpp)", [](const TokenStream&, std::size_t k, const SharedCorpus*, bool) {
      return baselines::NGramCacheDrafter(baselines::llama_cpp_lookup(k));
    });
  }
  throw std::invalid_argument("unknown drafter '" + name + "'; known drafters:\n" + drafter_names_help());
}

std::string drafter_names_help() {
  std::string help = "  ngram[:window=W|full,min=N,max=N]   NGramPredictor: windowed hashed n-gram counts (defaults from\n"
         "                                       --window, --min-order, --max-order)\n"
         "  match[:cap=N,copy_min=L,count_max=M,count_window=W,gate=P,corpus=MIB,file=1,prime=1,\n"
         "        prefer=longer|live|file]\n"
         "                                       MatchDrafter: copies what followed the most recent earlier\n"
         "                                       occurrence of a match of L or more tokens (default 2), else\n"
         "                                       n-gram counts of orders 2-M (default 3) over the last W tokens\n"
         "                                       (default 2048; 0: the cap); indexes the first N tokens\n"
         "                                       (default 8192); stops drafting when the estimated chance that\n"
         "                                       all drafts are accepted falls below P (default 0.03; 0: no\n"
         "                                       gate); with corpus > 0, a SharedCorpus of that many MiB (at\n"
         "                                       most " + std::to_string(max_corpus_mib()) + " and what the machine's memory holds) that\n"
         "                                       holds the outputs of the records before, in file order\n"
         "                                       (served in batches: of the records finished before);\n"
         "                                       file=1 drafts from the --corpus-file too (prefer: which of the\n"
         "                                       two drafts when both match, default the longer match, the\n"
         "                                       live corpus on a tie); prime=1 loads the --corpus-file into the\n"
         "                                       live corpus before the first record\n"
         "  prompt-lookup[:min=N,max=N,occurrence=earliest|latest]\n"
         "                                       vLLM's n-gram proposer: longest suffix match over the whole\n"
         "                                       context, earliest occurrence (default min 1, max 4)\n"
         "  pld-specbench                        Spec-Bench's PLD: suffix of 3, 2, 1 tokens, earliest occurrence\n"
         "                                       followed by all k drafts\n"
         "  prompt-lookup-hf[:max=N,eos=ID]      Hugging Face prompt lookup (default max 2, eos 2)\n"
         "  ngram-cache                          llama.cpp's context n-gram cache, lax thresholds\n";
  for (const DrafterFamily& family : families()) help += family.help;
  return help;
}

void register_drafter_family(DrafterFamily family) {
  if (family.name.empty() || !family.make) {
    throw std::invalid_argument("register_drafter_family: a family needs a name and a make function");
  }
  if (family_of(family.name) != nullptr) {
    throw std::invalid_argument("register_drafter_family: drafter family '" + family.name + "' is registered twice");
  }
  families().push_back(std::move(family));
}

}  // namespace ngramspec::replay
