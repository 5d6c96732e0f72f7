#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ngramspec/drafter.hpp"
#include "ngramspec/token.hpp"

// Prompt-lookup drafting as the systems that people deploy instead of ngramspec implement it,
// rebuilt from their published code so that replays compare against what they really draft:
//
// - Spec-Bench's PLD (hemingkx/Spec-Bench, model/pld/pld.py, find_candidate_pred_tokens):
//   the last 3, then 2, then 1 tokens; the earliest occurrence that is followed by all 10
//   candidate tokens and ends before the suffix does (`start_idx < input_length - ngram_size`);
//   when nothing qualifies it verifies the placeholder token 100 instead of nothing.
// - vLLM v1's n-gram proposer (vllm/v1/spec_decode/ngram_proposer.py): one KMP pass over the
//   reversed context finds the longest suffix of length min_n..max_n that occurs earlier;
//   among occurrences of that length the earliest wins; it drafts min(k, tokens after the
//   occurrence), and never past max_model_len.
// - Hugging Face transformers' PromptLookupCandidateGenerator (generation/candidate_generator.py):
//   n from max_matching_ngram_size (default 2) down to 1, the earliest occurrence with at least
//   one following token, up to num_output_tokens of them, cut before the first EOS.
//
// All of them search the whole context (prompt and every accepted token, the model's bonus
// token included) for every proposal, which this drafter does too: O(context) per predict.

namespace ngramspec::baselines {

/// Which occurrence of the matched suffix supplies the drafts.
enum class Occurrence {
  earliest,  ///< the first in the context (Spec-Bench, vLLM, Hugging Face)
  latest,    ///< the most recent one
};

/// Configuration of a PromptLookupDrafter; validated once, by the constructor.
struct PromptLookupConfig {
  std::size_t min_n = 1;                         ///< shortest suffix that is looked up
  std::size_t max_n = 3;                         ///< longest suffix, tried first
  std::size_t max_drafts = 10;                   ///< most tokens one predict() proposes (k)
  Occurrence occurrence = Occurrence::earliest;  ///< which occurrence wins among those of the longest n
  /// Only occurrences followed by max_drafts tokens qualify (Spec-Bench); otherwise one
  /// following token suffices and the drafts stop at the end of the context.
  bool require_full_draft = false;
  /// Only occurrences that end at least one token before the suffix starts qualify
  /// (Spec-Bench's `start_idx < input_length - ngram_size`); otherwise they may overlap it.
  bool require_gap_before_suffix = false;
  std::vector<Token> stop_tokens;       ///< the drafts end before the first of these (Hugging Face's EOS cut)
  std::optional<Token> no_match_draft;  ///< proposed alone when nothing matches (Spec-Bench: 100)
  std::size_t max_context = 0;  ///< drafts never grow the context past this (vLLM's max_model_len); 0 = no limit
};

/// Drafts the tokens that followed an earlier occurrence of the context's last n tokens,
/// the longest n in [min_n, max_n] that has a qualifying occurrence winning.
///
/// Keeps the whole context in a vector and scans it on every predict(): O(context · max_n)
/// time, no allocation. Memory grows by one Token per observed token.
///
/// Thread safety: none inside; concurrent const calls are safe while no thread updates.
class PromptLookupDrafter {
 public:
  /// Throws std::invalid_argument naming the field and its value when `config` is invalid.
  explicit PromptLookupDrafter(PromptLookupConfig config = {}) : config_(std::move(config)) {
    if (config_.min_n == 0) throw std::invalid_argument("PromptLookupConfig::min_n is 0; it must be at least 1");
    if (config_.max_n < config_.min_n) {
      throw std::invalid_argument("PromptLookupConfig::max_n = " + std::to_string(config_.max_n) +
                                  " is below min_n = " + std::to_string(config_.min_n));
    }
    if (config_.max_drafts == 0) {
      throw std::invalid_argument("PromptLookupConfig::max_drafts is 0; it must be at least 1");
    }
  }

  /// Appends one token to the context.
  void update(Token token) { context_.push_back(token); }
  /// Appends several tokens in order.
  void update(std::span<const Token> tokens) { context_.insert(context_.end(), tokens.begin(), tokens.end()); }
  /// Forgets the context; keeps its memory.
  void reset() noexcept { context_.clear(); }

  /// Writes up to min(out.size(), max_drafts) drafts to `out`; returns how many.
  [[nodiscard]] std::size_t predict(std::span<Token> out) const noexcept {
    std::size_t limit = std::min(out.size(), config_.max_drafts);
    const std::size_t length = context_.size();
    if (config_.max_context != 0) {
      limit = std::min(limit, config_.max_context > length ? config_.max_context - length : 0);
    }
    if (limit == 0) return 0;

    const Match match = find_match();
    if (match.n == 0) {
      if (!config_.no_match_draft) return 0;
      out[0] = *config_.no_match_draft;
      return 1;
    }
    std::size_t count = std::min(limit, length - match.end);
    for (std::size_t i = 0; i < count; ++i) {
      const Token token = context_[match.end + i];
      if (std::find(config_.stop_tokens.begin(), config_.stop_tokens.end(), token) != config_.stop_tokens.end()) {
        count = i;
        break;
      }
      out[i] = token;
    }
    return count;
  }

  [[nodiscard]] const PromptLookupConfig& config() const noexcept { return config_; }
  /// The observed context.
  [[nodiscard]] std::span<const Token> context() const noexcept { return context_; }

 private:
  struct Match {
    std::size_t n = 0;    // matched suffix length; 0 = none
    std::size_t end = 0;  // position just past the occurrence, where the drafts start
  };

  // One pass over every possible occurrence end e (the drafts would start at e): the suffix
  // length that matches there, capped at max_n, is the longest n this occurrence can serve.
  // The winner is the longest n, then the earliest or latest e, which is what the
  // longest-first loops and vLLM's KMP pass both select.
  [[nodiscard]] Match find_match() const noexcept {
    const std::size_t length = context_.size();
    Match best;
    for (std::size_t end = 1; end < length; ++end) {
      if (config_.require_full_draft && length - end < config_.max_drafts) break;
      std::size_t cap = std::min(config_.max_n, end);
      // The occurrence must end before length - n, i.e. end + n < length.
      if (config_.require_gap_before_suffix) cap = std::min(cap, length - end - 1);
      if (cap < config_.min_n) continue;
      std::size_t n = 0;
      while (n < cap && context_[end - 1 - n] == context_[length - 1 - n]) ++n;
      if (n < config_.min_n) continue;
      const bool wins = config_.occurrence == Occurrence::earliest ? n > best.n : n >= best.n;
      if (wins) best = {n, end};
    }
    return best;
  }

  PromptLookupConfig config_;
  std::vector<Token> context_;
};

static_assert(Drafter<PromptLookupDrafter>);

/// Spec-Bench's PLD as evaluated on its leaderboard: suffixes of 3, 2, 1 tokens, the earliest
/// occurrence followed by all 10 drafts, the placeholder token 100 when nothing matches.
[[nodiscard]] inline PromptLookupConfig spec_bench_pld() {
  PromptLookupConfig config;
  config.min_n = 1;
  config.max_n = 3;
  config.max_drafts = 10;
  config.occurrence = Occurrence::earliest;
  config.require_full_draft = true;
  config.require_gap_before_suffix = true;
  config.no_match_draft = Token{100};
  return config;
}

/// vLLM v1's n-gram proposer (prompt_lookup_min, prompt_lookup_max, num_speculative_tokens):
/// the longest matching suffix in [min_n, max_n], its earliest occurrence, up to k of the
/// tokens after it; max_model_len = 0 for no limit.
[[nodiscard]] inline PromptLookupConfig vllm_ngram(std::size_t min_n, std::size_t max_n, std::size_t k,
                                                   std::size_t max_model_len = 0) {
  PromptLookupConfig config;
  config.min_n = min_n;
  config.max_n = max_n;
  config.max_drafts = k;
  config.occurrence = Occurrence::earliest;
  config.max_context = max_model_len;
  return config;
}

/// Hugging Face transformers' prompt lookup (prompt_lookup_num_tokens,
/// max_matching_ngram_size, which defaults to 2; the model's EOS ids as stop tokens).
[[nodiscard]] inline PromptLookupConfig hf_prompt_lookup(std::size_t num_output_tokens = 10,
                                                         std::size_t max_matching_ngram_size = 2,
                                                         std::vector<Token> eos_tokens = {}) {
  PromptLookupConfig config;
  config.min_n = 1;
  config.max_n = max_matching_ngram_size;
  config.max_drafts = num_output_tokens;
  config.occurrence = Occurrence::earliest;
  config.stop_tokens = std::move(eos_tokens);
  return config;
}

}  // namespace ngramspec::baselines
