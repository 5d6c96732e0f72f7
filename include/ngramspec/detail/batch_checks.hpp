#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>

#include "ngramspec/argument_error.hpp"
#include "ngramspec/detail/number_text.hpp"
#include "ngramspec/detail/physical_memory.hpp"
#include "ngramspec/detail/top_k_select.hpp"
#include "ngramspec/token.hpp"

// BatchSpeculator's checks: of its pool, made at construction, and of the arguments of its
// passes (propose, propose_trees, accept, accept_trees). Every one throws std::invalid_argument
// naming the call (`where`), the argument and its value (a sequence by its id), before anything
// changes.
namespace ngramspec::detail {

/// How messages name a sequence: "sequence <id>".
inline std::string sequence_name(std::uint64_t id) { return "sequence " + std::to_string(id); }

/// A pool of `sequences` drafters of `each` bytes fits this machine's memory (the rule of
/// every structure whose size the caller chooses: see physical_memory_bytes()).
inline void check_pool_fits_memory(std::size_t sequences, std::size_t each) {
  const std::size_t machine = physical_memory_bytes();
  if (machine != 0 && each != 0 && sequences > machine / each) {
    const std::string total = sequences > std::numeric_limits<std::size_t>::max() / each
                                  ? "more than 2^64"
                                  : std::to_string(sequences * each);
    throw ArgumentError("ngramspec::BatchSpeculator", "max_sequences = " + std::to_string(sequences) + " drafters of " +
                                                          std::to_string(each) + " bytes each take " + total +
                                                          " bytes, more than this machine's memory (" +
                                                          std::to_string(machine) + " bytes)");
  }
}

/// Drafter i's top-k table has drafter 0's k (0: none): a pass's top rows share one k.
inline void check_same_top_k(std::size_t i, std::size_t k, std::size_t first) {
  if (k != first) {
    throw ArgumentError("ngramspec::BatchSpeculator", "drafter " + std::to_string(i) +
                                                          " recycles a top-k table of k = " + std::to_string(k) +
                                                          " but drafter 0 one of k = " + std::to_string(first) +
                                                          " (0: none); every drafter of a batch needs the same k");
  }
}

/// offsets holds one element per sequence of the call and one more.
inline void check_offsets_size(const char* where, std::size_t offsets, std::size_t ids) {
  if (offsets != ids + 1) {
    throw ArgumentError(where, "offsets has " + std::to_string(offsets) +
                                   " elements; it needs ids.size() + 1 = " + std::to_string(ids + 1));
  }
}

/// A span of the call that goes with another, element for element (`name` against `other`).
inline void check_same_size(const char* where, const char* name, std::size_t size, const char* other,
                            std::size_t other_size) {
  if (size != other_size) {
    throw ArgumentError(where, std::string(name) + " has " + std::to_string(size) + " elements; it needs " + other + " = " +
                                   std::to_string(other_size));
  }
}

/// propose() and propose_trees() with distributions: one DraftDistributions per sequence.
inline void check_distributions_size(const char* where, std::size_t q, std::size_t ids) {
  if (q < ids) {
    throw ArgumentError(where, "q has " + std::to_string(q) +
                                   " elements; it needs one per sequence, ids.size() = " + std::to_string(ids));
  }
}

/// accept() and accept_trees(): the sizes that need no sequence. Every model token belongs to
/// one sequence: tokens outside the offsets are a caller's mistake (a count or an offset that
/// is wrong), never silently ignored.
inline void check_step_arguments(const char* where, std::size_t ids, std::size_t model_tokens,
                                 std::span<const std::size_t> offsets, std::size_t steps) {
  check_offsets_size(where, offsets.size(), ids);
  if (steps < ids) {
    throw ArgumentError(
        where, "steps has room for " + std::to_string(steps) + " sequences; " + std::to_string(ids) + " are stepped");
  }
  if (offsets.front() != 0 || offsets.back() != model_tokens) {
    throw ArgumentError(where, "offsets[0] = " + std::to_string(offsets.front()) + " and offsets[" +
                                   std::to_string(ids) + "] = " + std::to_string(offsets.back()) +
                                   " are invalid: they must be 0 and the count of model tokens, " +
                                   std::to_string(model_tokens));
  }
}

/// Sequence i's model tokens, offsets[i] .. offsets[i + 1], checked: offsets do not decrease
/// nor pass the model tokens, and there are 1 to proposed + 1 of them (`entries` says what the
/// first and the rest verify). Returns their count.
inline std::size_t checked_model_token_count(const char* where, std::uint64_t sequence,
                                             std::span<const std::size_t> offsets, std::size_t i,
                                             std::size_t model_tokens, std::size_t proposed, const char* entries) {
  if (offsets[i + 1] < offsets[i] || offsets[i + 1] > model_tokens) {
    throw ArgumentError(where, "offsets[" + std::to_string(i + 1) + "] = " + std::to_string(offsets[i + 1]) +
                                   " is invalid: offsets[" + std::to_string(i) + "] = " + std::to_string(offsets[i]) +
                                   " and there are " + std::to_string(model_tokens) + " model tokens");
  }
  const std::size_t n = offsets[i + 1] - offsets[i];
  if (n == 0 || n > proposed + 1) {
    throw ArgumentError(where, sequence_name(sequence) + " has " + std::to_string(n) + " model tokens; it needs 1 to " +
                                   std::to_string(proposed + 1) + " (" + entries + " verified of the " +
                                   std::to_string(proposed) + " proposed)");
  }
  return n;
}

/// accept_trees(): `kept` has an entry per model token, and `top` is empty or top_k rows of
/// one per model token.
inline void check_tree_step_arguments(const char* where, std::size_t model_tokens, std::size_t kept,
                                      std::size_t top, std::size_t top_k) {
  if (kept < model_tokens) {
    throw ArgumentError(where, "kept has room for " + std::to_string(kept) +
                                   " entries; it needs one per model token, " + std::to_string(model_tokens));
  }
  if (top != 0 && top != model_tokens * top_k) {
    throw ArgumentError(where, "top has " + std::to_string(top) + " tokens; it needs none or top_k() = " +
                                   std::to_string(top_k) + " per model token, " + std::to_string(model_tokens * top_k) +
                                   (top_k == 0 ? " (the drafters recycle no top-k)" : ""));
  }
}

/// Throws the error of check_in_vocabulary(): `name`[`index`] = `token` lies outside `vocab`.
[[noreturn]] inline void throw_outside_vocabulary(const char* where, std::uint64_t sequence, const char* name,
                                                  std::size_t index, Token token, std::size_t vocab) {
  throw ArgumentError(where, sequence_name(sequence) + ": " + name + "[" + std::to_string(index) +
                                 "] = " + std::to_string(token) + " is outside the top-k table's vocabulary of " +
                                 std::to_string(vocab));
}

/// Every token of `tokens` (named `name`, its first at index `first` of the call's span) lies
/// inside a top-k table's vocabulary: drafters record top rows without checks.
inline void check_in_vocabulary(const char* where, std::uint64_t sequence, const char* name,
                                std::span<const Token> tokens, std::size_t first, std::size_t vocab) {
  // The scan alone is inline: it runs on every token of a pass.
  const auto outside = std::find_if(tokens.begin(), tokens.end(), [vocab](Token t) { return t >= vocab; });
  if (outside != tokens.end()) {
    throw_outside_vocabulary(where, sequence, name, first + static_cast<std::size_t>(outside - tokens.begin()),
                             *outside, vocab);
  }
}

/// Each of a sequence's top rows (`top`, k tokens per entry, its first at index `first` of the
/// call's span) lists a token at most once (detail::first_repeated_top_token: up to a row's first
/// probability 0 when `probabilities` is not empty, and up to `vocab` tokens).
inline void check_distinct_rows(const char* where, std::uint64_t sequence, std::span<const Token> top,
                                std::span<const float> probabilities, std::size_t first, std::size_t k,
                                std::size_t vocab) {
  if (const auto repeat = first_repeated_top_token(top, k, vocab, probabilities)) {
    throw ArgumentError(where, sequence_name(sequence) + ": " + repeated_top_token_text(top, *repeat, first, k));
  }
}

/// accept_trees() with probabilities: a sequence's rows (`probabilities`, k per entry, its first
/// at index `first` of the call's span) go to a table that keeps probabilities, each in [0, 1]
/// and each row's first above 0 (a row records its tokens up to its first probability 0).
inline void check_top_probabilities(const char* where, std::uint64_t sequence, bool table_has_probabilities,
                                    std::span<const float> probabilities, std::size_t first, std::size_t k) {
  if (!table_has_probabilities) {
    throw ArgumentError(where, sequence_name(sequence) +
                                   ": its top-k table keeps no probabilities (make it with TopKTable(vocab_size, k, "
                                   "true), or TreeConfig::draw_recycled for the drafter's own)");
  }
  for (std::size_t t = 0; t < probabilities.size(); ++t) {
    const float p = probabilities[t];
    if (!(p >= 0.0f && p <= 1.0f) || (t % k == 0 && p == 0.0f)) {
      throw ArgumentError(where, sequence_name(sequence) + ": top_probabilities[" + std::to_string(first + t) +
                                     "] = " + number_text(p) +
                                     " is invalid: probabilities are in [0, 1], and a row's first is above 0");
    }
  }
}

}  // namespace ngramspec::detail
