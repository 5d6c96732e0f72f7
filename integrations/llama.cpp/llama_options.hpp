#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <ngramspec/sampling_options.hpp>
#include <ngramspec/verify_cost.hpp>

#include "llama_engine.hpp"

namespace ngramspec::llama_cpp {

/// The command line of ngramspec-llama, parsed and checked (see its --help).
struct LlamaOptions {
  bool help = false;
  std::string model;                 ///< --model (required)
  std::optional<std::string> prompt;  ///< --prompt TEXT (may be empty: BOS alone)
  std::string prompts_file;          ///< --prompts FILE, one prompt a line
  std::size_t n = 256;               ///< --n: most tokens generated per prompt
  int threads = 0;                   ///< --threads (0: every core)
  std::size_t parallel = 1;          ///< --parallel: sequences decoded together
  std::size_t context = 0;           ///< --ctx: tokens per sequence (0: the model's training context)
  std::size_t k = 16;                ///< --k: most drafts a pass per sequence
  bool k_given = false;
  /// --cost: measure (default: the curve measured at start, trusted), learn (learned from the passes
  /// served, from a curve measured at start), learn:SPEC (from SPEC), none (the drafter's gate alone), or
  /// a spec VerifyCost::parse reads (trusted). `cost` holds a given spec or learn's given prior.
  enum class Cost { measure, given, none, learn };
  Cost cost_source = Cost::measure;
  std::optional<VerifyCost> cost;
  bool print_cost = false;           ///< --print-cost: print the cost table spec (to reuse with --cost)
  /// --pass-shape: fixed (default) pads every pass with drafts of one sequence to k drafts and
  /// plans by the pass before (FixedPassShape), with a measured cost and --parallel 1; free sends
  /// passes of any size against one curve.
  bool fixed_shape = true;
  /// --flash-attn: backend (default: off on a CPU, where it makes verify passes sum otherwise than
  /// plain decoding; llama.cpp's choice with a GPU), on, off.
  EngineConfig::FlashAttention flash_attention = EngineConfig::FlashAttention::by_backend;
  bool pass_shape_given = false;
  SamplingOptions sampling;          ///< --temperature, --top-k, --top-p, --min-p, --seed
  bool ignore_eos = false;           ///< --ignore-eos
  bool speculate = true;             ///< false with --no-speculate
  bool check = false;                ///< --check
  bool compare = false;              ///< --compare
  std::vector<std::string> llama_drafters;  ///< --llama-drafter SPEC (repeatable, checked): drafters --compare runs
  /// --draft-model GGUF (repeatable with --compare, each file once): a draft model of the same
  /// vocabulary; ngramspec drafts with it (ModelDrafter), and --compare runs llama.cpp's
  /// draft-simple with it too.
  std::vector<std::string> draft_models;
  /// --draft-layers L,...: draft models of the first L blocks of the --draft-model file, or of
  /// --model without one (each L once; more than one with --compare).
  std::vector<std::size_t> draft_layers;
  /// Whether ngramspec drafts with a draft model (--draft-model or --draft-layers).
  [[nodiscard]] bool drafts_with_model() const noexcept { return !draft_models.empty() || !draft_layers.empty(); }
  /// --best-of: with a draft model, each pass drafted by whichever of the text (MatchDrafter) and the draft model
  /// promises more tokens per unit of cost, or the text's drafts continued by the draft model (BestOfDrafter)
  bool best_of = false;
  /// --draft-cost C: with --best-of, what one draft-model token costs in one-token passes of the model (default:
  /// measured at start, the draft model's one-token pass over the model's)
  std::optional<double> draft_cost;
  std::size_t llama_draft_max = 3;   ///< --llama-draft-max: llama.cpp's draft-simple n_max (its default, 3)
  bool llama_draft_max_given = false;
  std::size_t repeats = 3;           ///< --repeats: timed rounds of --check and --compare
  std::size_t corpus_mib = 0;        ///< --corpus MIB: a SharedCorpus across prompts
  std::string corpus_file;           ///< --corpus-file FILE: a corpus file (ngramspec-corpus build)
  std::vector<std::size_t> curve;    ///< --curve 1,4,16: measure and print cost curves, then exit
  std::size_t curve_tokens = 17;     ///< --curve-tokens: most tokens per sequence a curve pass carries
  std::size_t curve_at = 256;        ///< --curve-at: the position of each sequence where curve passes start
  bool json = false;                 ///< --json
  bool verbose = false;              ///< --verbose: llama.cpp's log

  static constexpr std::size_t kDefaultK = 16;           ///< with a cost: it keeps drafts that do not pay out
  /// --cost none (the drafter's gate alone) or --draft-model (a draft model's pass per draft).
  static constexpr std::size_t kDefaultKWithoutCost = 4;
};

/// Parses the arguments after the program name. Throws std::invalid_argument naming the option
/// and the value for anything unknown, missing, malformed or out of range, an option given twice
/// (but --llama-drafter, which is repeatable), a list that names an item twice, and a
/// --llama-drafter spec that parse_spec() refuses: all before any model is loaded.
[[nodiscard]] LlamaOptions parse_llama_options(std::span<const std::string_view> args);

/// The usage text.
[[nodiscard]] const char* llama_usage() noexcept;

}  // namespace ngramspec::llama_cpp
