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

void LlamaCppDrafter::settle_accepted() const {
  if (!pending_) return;
  // speculative-simple reports every verification, an empty draft's too (0 accepted).
  const auto accepted = static_cast<std::uint16_t>(std::min<std::size_t>(matched_, std::numeric_limits<std::uint16_t>::max()));
  pending_ = false;
  common_speculative_accept(spec_.get(), 0, accepted);
}

std::size_t LlamaCppDrafter::predict(std::span<Token> out) const {
  if (out.empty() || !has_last_) return 0;
  settle_accepted();
  if (!begun_) {
    common_speculative_begin(spec_.get(), 0, context_);
    begun_ = true;
  }
  draft_.clear();
  common_speculative_draft_params& dp = common_speculative_get_draft_params(spec_.get(), 0);
  dp.drafting = true;
  dp.n_max = static_cast<std::int32_t>(std::min<std::size_t>(out.size(), std::numeric_limits<std::int32_t>::max()));
  dp.n_past = static_cast<llama_pos>(context_.size());
  dp.id_last = last_;
  dp.prompt = &context_;
  dp.result = &draft_;
  common_speculative_draft(spec_.get());
  const std::size_t n = std::min(draft_.size(), out.size());
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<Token>(draft_[i]);
  proposed_ = n;
  pending_ = true;
  matched_ = 0;  // the tokens that follow are compared with this draft
  matching_ = true;
  return n;
}

void LlamaCppDrafter::reset() {
  spec_ = make_state(config_);
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
