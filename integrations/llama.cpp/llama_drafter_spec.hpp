#pragma once
// What names one of llama.cpp's n-gram drafters: its type and parameters, and the spec
// "TYPE[:key=value,...]" that command lines give. Plain C++ (no llama.cpp header), so that a
// program checks its specs when it reads its options, before it loads a model.

#include <cstdint>
#include <string>
#include <string_view>

namespace ngramspec::llama_cpp {

/// llama.cpp's n-gram drafting types (common_speculative_type), the ones that need no draft model.
enum class NGramType {
  simple,   ///< "ngram-simple": the latest earlier occurrence of the last n tokens, the m after it
  map_k,    ///< "ngram-map-k": the same through a map of keys, drafting as long as the key's last acceptance
  map_k4v,  ///< "ngram-map-k4v": keys with up to 4 values, drafting the dominant value
  mod,      ///< "ngram-mod": a hashed table of n_match-grams to their next token, chained
  cache,    ///< "ngram-cache": 1- to 4-gram counts of the context (llama-lookup's cache), 8 drafts at most
};

/// llama.cpp's name of `type` ("ngram-simple", ...).
[[nodiscard]] std::string_view type_name(NGramType type) noexcept;

/// Configuration of a LlamaCppDrafter. The defaults are llama.cpp's (common_params_speculative
/// at the pinned commit; a test holds them equal). Each field applies to the types named.
struct LlamaCppDrafterConfig {
  NGramType type = NGramType::mod;  ///< which of llama.cpp's drafters runs
  std::uint16_t n = 12;             ///< simple, map-k, map-k4v: tokens of the lookup n-gram (size_n), 1-1024
  std::uint16_t m = 48;             ///< simple, map-k, map-k4v: tokens of the drafted m-gram (size_m), 1-1024
  std::uint16_t min_hits = 1;       ///< map-k4v: sightings of a key before it drafts, >= 1
  std::int32_t n_match = 24;        ///< mod: tokens of the lookup n-gram, 1-1024
  std::int32_t n_max = 64;          ///< mod: most tokens one draft chains, 0-1024
  std::int32_t n_min = 48;          ///< mod: a chain that stops before this many tokens drafts nothing, 0-1024
  /// On construction, lower llama.cpp's common log threshold (process-wide) to errors, so its
  /// drafters' warnings and notes are not printed; errors still are. false: leave it as it is.
  bool quiet_logs = true;
};

/// llama.cpp's draft-model speculation ("draft-simple"): a second model drafts greedily, one
/// token a pass of its own context, as llama.cpp's examples/speculative-simple does with -md.
struct DraftSimpleConfig {
  /// Most tokens one draft holds (common_params_speculative_draft::n_max, llama.cpp's
  /// --spec-draft-n-max; 3 is its default), 1-1024.
  std::int32_t n_max = 3;
};

/// "llama.cpp:draft-simple(n_max=3)".
[[nodiscard]] std::string describe(const DraftSimpleConfig& config);

/// Throws std::invalid_argument naming the field and its value when `config` is invalid: a
/// field outside its range, or n_min above n_max (ngram-mod: a draft holds at most n_max tokens).
void validate_config(const LlamaCppDrafterConfig& config);

/// Parses "TYPE[:key=value,...]": TYPE is one of llama.cpp's n-gram type names; the keys are
/// n, m (all but ngram-mod and ngram-cache), min_hits (ngram-map-k4v), n_match, n_max, n_min
/// (ngram-mod); ngram-cache takes none. Throws std::invalid_argument naming the spec and what is
/// wrong: an unknown type or key, a key the type does not use, a bad or out-of-range value, or
/// an n_min above the n_max. The message begins with `source` when given (what the user typed,
/// e.g. "drafter 'llama.cpp:...'"), else with "llama.cpp drafter 'SPEC'". Needs no llama.cpp:
/// programs check their specs with it before loading anything.
[[nodiscard]] LlamaCppDrafterConfig parse_spec(std::string_view spec, std::string_view source = {});

/// The type and its parameters, without spaces: "llama.cpp:ngram-simple(n=12,m=48)".
[[nodiscard]] std::string describe(const LlamaCppDrafterConfig& config);

}  // namespace ngramspec::llama_cpp
