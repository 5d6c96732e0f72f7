#include "llama_cpp_drafter.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "common.h"
#include "llama.h"
#include "log.h"
#include "speculative.h"

namespace ngramspec::llama_cpp {
namespace {

static_assert(std::is_same_v<llama_token, std::int32_t>, "llama_token is no longer int32_t: revisit the conversions");
static_assert(std::is_same_v<llama_tokens, std::vector<std::int32_t>>, "llama_tokens changed type");

common_speculative_type to_llama(NGramType type) {
  // By llama.cpp's own name table, so a renamed or dropped type fails loudly here.
  const std::string name(type_name(type));
  const common_speculative_type t = common_speculative_type_from_name(name);
  if (t == COMMON_SPECULATIVE_TYPE_COUNT) {
    throw std::logic_error("llama.cpp does not know the type '" + name + "'");
  }
  return t;
}

void errors_only(ggml_log_level level, const char* text, void*) {
  // A continuation line belongs to the message before it.
  static thread_local bool printing = false;
  if (level != GGML_LOG_LEVEL_CONT) printing = level == GGML_LOG_LEVEL_ERROR;
  if (printing) std::fputs(text, stderr);
}

void quiet_common_log() {
  if (common_log_get_verbosity_thold() > LOG_LEVEL_ERROR) common_log_set_verbosity_thold(LOG_LEVEL_ERROR);
}

}  // namespace

void quiet_llama_cpp_logs() {
  quiet_common_log();
  llama_log_set(errors_only, nullptr);
}

struct LlamaCppDrafter::Model {
  Model(llama_context* target_context, llama_context* draft_context, std::int32_t seq, std::size_t capacity)
      : target(target_context), draft(draft_context), sequence(seq), batch(llama_batch_init(static_cast<std::int32_t>(capacity), 0, 1)),
        capacity(capacity), context(llama_n_ctx_seq(draft_context)) {}
  ~Model() { llama_batch_free(batch); }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  llama_context* target;
  llama_context* draft;
  std::int32_t sequence;
  llama_batch batch;      // what llama.cpp's loop would hand common_speculative_process
  std::size_t capacity;   // tokens the batch holds (the draft context's n_batch)
  std::size_t context;    // tokens the draft context holds for the sequence
  std::size_t fed = 0;    // tokens at positions 0 .. fed - 1 of the draft context, the observed ones
  llama_pos drafted_at = 0;   // the position of the last token of the pending draft's pass
  llama_token drafted_after = 0;  // that token
};

void LlamaCppDrafter::Free::operator()(common_speculative* spec) const noexcept { common_speculative_free(spec); }

LlamaCppDrafter::Spec LlamaCppDrafter::make_state(const LlamaCppDrafterConfig& config) {
  common_params_speculative params;
  params.types = {to_llama(config.type)};
  for (common_params_speculative_ngram_map* map : {&params.ngram_simple, &params.ngram_map_k, &params.ngram_map_k4v}) {
    map->size_n = config.n;
    map->size_m = config.m;
    map->min_hits = config.min_hits;
  }
  params.ngram_mod.n_match = config.n_match;
  params.ngram_mod.n_max = config.n_max;
  params.ngram_mod.n_min = config.n_min;
  Spec spec(common_speculative_init(params, 1));
  if (spec == nullptr) {
    throw std::runtime_error("llama.cpp's common_speculative_init made no drafter for " + describe(config));
  }
  return spec;
}

LlamaCppDrafter::LlamaCppDrafter(const LlamaCppDrafterConfig& config) : config_(config) {
  validate_config(config_);
  if (config_.quiet_logs) quiet_common_log();
  spec_ = make_state(config_);
}

LlamaCppDrafter::LlamaCppDrafter(const DraftSimpleConfig& config, llama_context* target, llama_context* draft,
                                 std::int32_t sequence) {
  if (target == nullptr || draft == nullptr) {
    throw std::invalid_argument(std::string("LlamaCppDrafter: draft-simple needs both contexts; the ") +
                                (target == nullptr ? "target's" : "draft model's") + " is null");
  }
  if (config.n_max < 1 || config.n_max > 1024) {
    throw std::invalid_argument("DraftSimpleConfig::n_max = " + std::to_string(config.n_max) +
                                " is out of range: it must be from 1 to 1024");
  }
  const auto sequences = static_cast<std::int32_t>(llama_n_seq_max(draft));
  if (sequence < 0 || sequence >= sequences) {
    throw std::invalid_argument("LlamaCppDrafter: sequence " + std::to_string(sequence) +
                                " is outside the draft context's " + std::to_string(sequences));
  }
  quiet_common_log();
  common_params_speculative params;
  params.types = {COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE};
  params.draft.n_max = config.n_max;
  params.draft.ctx_tgt = target;
  params.draft.ctx_dft = draft;
  spec_ = Spec(common_speculative_init(params, static_cast<std::uint32_t>(sequences)));
  if (spec_ == nullptr) throw std::runtime_error("llama.cpp's common_speculative_init made no drafter for " + describe(config));
  model_ = std::make_unique<Model>(target, draft, sequence, llama_n_batch(draft));
  llama_memory_seq_rm(llama_get_memory(draft), sequence, -1, -1);
}

LlamaCppDrafter::LlamaCppDrafter(LlamaCppDrafter&&) noexcept = default;
LlamaCppDrafter& LlamaCppDrafter::operator=(LlamaCppDrafter&&) noexcept = default;
LlamaCppDrafter::~LlamaCppDrafter() = default;

void LlamaCppDrafter::observe(Token token) noexcept {
  if (has_last_) context_.push_back(last_);
  last_ = static_cast<std::int32_t>(token);
  has_last_ = true;
  if (pending_ && matching_) {
    if (matched_ < proposed_ && draft_[matched_] == last_) {
      ++matched_;
    } else {
      matching_ = false;
    }
  }
}

void LlamaCppDrafter::update(Token token) {
  if (token > static_cast<Token>(std::numeric_limits<std::int32_t>::max())) {
    throw std::invalid_argument("LlamaCppDrafter::update: token id " + std::to_string(token) +
                                " exceeds llama.cpp's largest (INT32_MAX)");
  }
  context_.reserve(context_.size() + 1);  // so observe() cannot fail half-way
  observe(token);
}

void LlamaCppDrafter::update(std::span<const Token> tokens) {
  for (const Token token : tokens) {
    if (token > static_cast<Token>(std::numeric_limits<std::int32_t>::max())) {
      throw std::invalid_argument("LlamaCppDrafter::update: token id " + std::to_string(token) +
                                  " exceeds llama.cpp's largest (INT32_MAX)");
    }
  }
  context_.reserve(context_.size() + tokens.size());
  for (const Token token : tokens) observe(token);
}

void LlamaCppDrafter::hand_over(std::size_t pos, std::span<const std::int32_t> tokens) const {
  Model& m = *model_;
  for (std::size_t done = 0; done < tokens.size();) {
    const std::size_t n = std::min(m.capacity, tokens.size() - done);
    common_batch_clear(m.batch);
    for (std::size_t i = 0; i < n; ++i) {
      common_batch_add(m.batch, tokens[done + i], static_cast<llama_pos>(pos + done + i), {m.sequence}, i + 1 == n);
    }
    if (!common_speculative_process(spec_.get(), m.batch)) {
      throw std::runtime_error("llama.cpp's draft model could not decode a pass of " + std::to_string(n) +
                               " tokens at position " + std::to_string(pos + done) + " (common_speculative_process)");
    }
    done += n;
  }
}

void LlamaCppDrafter::catch_up_draft_context() const {
  Model& m = *model_;
  const std::size_t n_past = context_.size();
  std::size_t keep = n_past;
  if (pending_) {
    // The pass that verified the pending draft, as llama.cpp's loop hands it over: the token
    // drafted after and every draft (those past the context left out).
    const auto at = static_cast<std::size_t>(m.drafted_at);
    const std::size_t room = m.context > at ? m.context - at : 0;
    pass_.assign(1, m.drafted_after);
    pass_.insert(pass_.end(), draft_.begin(), draft_.begin() + static_cast<std::ptrdiff_t>(proposed_));
    pass_.resize(std::min(pass_.size(), room));
    hand_over(at, pass_);
    m.fed = at + pass_.size();
    // What the target kept of it: that token once observed, and the drafts the tokens since matched.
    keep = std::min(keep, n_past > at ? at + 1 + matched_ : at);
  }
  if (m.fed > keep) {
    llama_memory_seq_rm(llama_get_memory(m.draft), m.sequence, static_cast<llama_pos>(keep), -1);
    m.fed = keep;
  }
  hand_over(m.fed, std::span<const std::int32_t>(context_).subspan(m.fed));
  m.fed = n_past;
}

void LlamaCppDrafter::settle_accepted() const {
  if (!pending_) return;
  // speculative-simple reports every verification, an empty draft's too (0 accepted).
  const auto accepted = static_cast<std::uint16_t>(std::min<std::size_t>(matched_, std::numeric_limits<std::uint16_t>::max()));
  pending_ = false;
  common_speculative_accept(spec_.get(), model_ ? model_->sequence : 0, accepted);
}

std::size_t LlamaCppDrafter::predict(std::span<Token> out) const {
  if (out.empty() || !has_last_) return 0;
  std::size_t most = out.size();
  if (model_) {
    catch_up_draft_context();
    // As the loop does: room for the last token and the drafts in the context, less one.
    const std::size_t used = context_.size() + 2;
    most = std::min(most, model_->context > used ? model_->context - used : 0);
  }
  settle_accepted();
  if (most == 0) return 0;
  if (!begun_) {
    common_speculative_begin(spec_.get(), model_ ? model_->sequence : 0, context_);
    begun_ = true;
  }
  draft_.clear();
  common_speculative_draft_params& dp = common_speculative_get_draft_params(spec_.get(), model_ ? model_->sequence : 0);
  dp.drafting = true;
  dp.n_max = static_cast<std::int32_t>(std::min<std::size_t>(most, std::numeric_limits<std::int32_t>::max()));
  dp.pos0 = static_cast<llama_pos>(context_.size());
  dp.id_last = last_;
  dp.prompt = &context_;
  dp.result = &draft_;
  common_speculative_draft(spec_.get());
  if (model_) {
    // As the loop does before verifying: the draft context back to the target's tokens.
    llama_memory_seq_rm(llama_get_memory(model_->draft), model_->sequence, dp.pos0, -1);
    model_->drafted_at = dp.pos0;
    model_->drafted_after = last_;
  }
  const std::size_t n = std::min(draft_.size(), most);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<Token>(draft_[i]);
  proposed_ = n;
  pending_ = true;
  matched_ = 0;  // the tokens that follow are compared with this draft
  matching_ = true;
  return n;
}

void LlamaCppDrafter::reset() {
  if (model_) {
    // draft-simple keeps nothing between drafts but the draft context's tokens.
    llama_memory_seq_rm(llama_get_memory(model_->draft), model_->sequence, -1, -1);
    model_->fed = 0;
  } else {
    spec_ = make_state(config_);
  }
  context_.clear();
  has_last_ = false;
  begun_ = false;
  draft_.clear();
  proposed_ = 0;
  pending_ = false;
  matched_ = 0;
  matching_ = true;
}

}  // namespace ngramspec::llama_cpp
