#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "llama_drafter_spec.hpp"
#include "ngramspec/drafter.hpp"
#include "ngramspec/token.hpp"

// llama.cpp's drafting state (common/speculative.h) and a model's context (llama.h); only the
// .cpp sees their definitions.
struct common_speculative;
struct llama_context;

namespace ngramspec::llama_cpp {

/// Lowers the threshold of llama.cpp's common log to errors (warnings, notes and debug output
/// are dropped; errors still print) and routes libllama's own log (llama_log_set) to standard
/// error for errors only. Process-wide; for programs that want llama.cpp quiet.
void quiet_llama_cpp_logs();

/// llama.cpp's own n-gram drafting, run by llama.cpp's code (common_speculative_init / begin /
/// draft / accept for one sequence), as an ngramspec Drafter. It drives llama.cpp exactly as
/// llama.cpp's examples/speculative-simple does: at the first predict() after construction or
/// reset(), begin() with every observed token but the last; each predict() drafts with the
/// observed tokens but the last as the target's context, the last as the pending token, and at
/// most out.size() drafts (llama.cpp's n_max); the next predict() first reports to llama.cpp how
/// many of the previous draft were accepted: the common prefix of that draft and the tokens
/// update() brought since (the decoder feeds the accepted drafts, then the model's own token).
///
/// predict() is const as the Drafter concept asks, but llama.cpp's drafters learn while they
/// draft (ngram-mod and ngram-cache add the context's new n-grams then, the maps their keys),
/// so it changes this object's hidden state: a second predict() without an update() in between
/// drafts again, as llama.cpp would; calls must not overlap, const or not.
///
/// Cost: update() appends to a token vector; predict() copies the draft out of llama.cpp's
/// vector (reused) and costs what llama.cpp's draft costs: ngram-simple scans the context
/// backwards, ngram-cache copies the whole context into a new vector on every call (llama.cpp
/// does), the others are near-constant. reset() builds a fresh llama.cpp state.
/// Memory: the observed tokens, plus llama.cpp's state: ngram-mod allocates a table of 4M
/// entries (16 MiB) per drafter, ngram-map-k/k4v a 1 MiB key hash map, ngram-cache grows with
/// the distinct n-grams of the context.
///
/// With a draft model (the DraftSimpleConfig constructor) it is llama.cpp's draft-simple, driven
/// as speculative-simple drives it with -md: llama.cpp's loop hands every verify pass of the
/// target (the last token and the drafts) to common_speculative_process, which decodes it on
/// the draft model's context, and then cuts both contexts back to the tokens kept. Here the
/// next predict() does both, before it drafts: it hands llama.cpp the pass that verified the
/// previous draft, cuts the draft context to the tokens kept (llama_memory_seq_rm), feeds it
/// through the same call any tokens it has not seen (the prompt, passes without drafts), and
/// drafts (common_speculative_draft: the last token, then one draft a pass of the draft model,
/// its argmax); afterwards it cuts the draft context back to before the draft, as the loop does
/// before verifying. The draft model's context thus does exactly the work llama.cpp's does.
/// A draft-model pass llama.cpp refuses throws std::runtime_error naming its size and position;
/// reset() then makes the drafter usable again.
///
/// Thread safety: none; one drafter per thread.
class LlamaCppDrafter {
 public:
  /// Throws std::invalid_argument naming the field and its value when `config` is invalid.
  explicit LlamaCppDrafter(const LlamaCppDrafterConfig& config = {});
  /// llama.cpp's draft-simple with the draft model's context `draft` (its sequence `sequence`,
  /// which this drafter alone uses; llama.cpp sizes its state to the context's n_seq_max), for
  /// the target's context `target`, both owned by the caller and outliving the drafter.
  /// Throws std::invalid_argument naming the value for a null context, an n_max outside 1-1024
  /// or a sequence outside the draft context's, and what llama.cpp throws when it refuses the
  /// pair (a draft vocabulary that does not match the target's).
  LlamaCppDrafter(const DraftSimpleConfig& config, llama_context* target, llama_context* draft, std::int32_t sequence);
  /// As LlamaCppDrafter(parse_spec(spec)).
  explicit LlamaCppDrafter(std::string_view spec) : LlamaCppDrafter(parse_spec(spec)) {}
  LlamaCppDrafter(LlamaCppDrafter&&) noexcept;
  LlamaCppDrafter& operator=(LlamaCppDrafter&&) noexcept;
  LlamaCppDrafter(const LlamaCppDrafter&) = delete;
  LlamaCppDrafter& operator=(const LlamaCppDrafter&) = delete;
  ~LlamaCppDrafter();

  /// Appends one token. Throws std::invalid_argument for an id llama.cpp cannot hold (> INT32_MAX).
  void update(Token token);
  /// Appends several tokens in order (none if one is invalid).
  void update(std::span<const Token> tokens);
  /// Writes llama.cpp's draft, at most out.size() tokens, to `out`; returns how many. Nothing
  /// before the first update() or into an empty `out` (llama.cpp is not called then).
  std::size_t predict(std::span<Token> out) const;
  /// Forgets everything: the tokens and llama.cpp's state.
  void reset();

  /// The n-gram configuration (its defaults when the drafter drafts with a model).
  [[nodiscard]] const LlamaCppDrafterConfig& config() const noexcept { return config_; }
  /// Whether it is llama.cpp's draft-simple over a draft model.
  [[nodiscard]] bool drafts_with_model() const noexcept { return model_ != nullptr; }
  /// Tokens observed since construction or the last reset().
  [[nodiscard]] std::size_t tokens_seen() const noexcept { return context_.size() + (has_last_ ? 1 : 0); }

 private:
  struct Free {
    void operator()(common_speculative* spec) const noexcept;
  };
  using Spec = std::unique_ptr<common_speculative, Free>;
  [[nodiscard]] static Spec make_state(const LlamaCppDrafterConfig& config);
  void observe(Token token) noexcept;
  void settle_accepted() const;
  void hand_over(std::size_t pos, std::span<const std::int32_t> tokens) const;
  void catch_up_draft_context() const;

  LlamaCppDrafterConfig config_;
  Spec spec_;
  // With a draft model: its context, sequence and llama.cpp's batch for it (defined in the .cpp).
  struct Model;
  std::unique_ptr<Model> model_;
  // What speculative-simple keeps: the tokens in the target's context (every observed token but
  // the last; llama.cpp's prompt_tgt) and the last one (its id_last).
  std::vector<std::int32_t> context_;
  std::int32_t last_ = 0;
  bool has_last_ = false;
  // Drafting state, changed by the const predict() (see the class comment).
  mutable bool begun_ = false;               // begin() was called
  mutable std::vector<std::int32_t> draft_;  // llama.cpp's last draft (its result vector, reused)
  mutable std::size_t proposed_ = 0;         // drafts of it predict() handed out
  mutable bool pending_ = false;             // the accept() of that draft is still owed
  mutable std::size_t matched_ = 0;          // tokens since the draft equal to its first ones
  mutable bool matching_ = true;             // every token since the draft matched it
  mutable std::vector<std::int32_t> pass_;   // with a draft model: the pass that verified the last draft
};

static_assert(Drafter<LlamaCppDrafter>);

}  // namespace ngramspec::llama_cpp
