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

struct TypeInfo {
  NGramType type;
  const char* name;
  const char* keys;  // for messages: the parameters it takes
};
constexpr std::array<TypeInfo, 5> kTypes{{
    {NGramType::simple, "ngram-simple", "n, m"},
    {NGramType::map_k, "ngram-map-k", "n, m"},
    {NGramType::map_k4v, "ngram-map-k4v", "n, m, min_hits"},
    {NGramType::mod, "ngram-mod", "n_match, n_max, n_min"},
    {NGramType::cache, "ngram-cache", "none"},
}};

const TypeInfo& info(NGramType type) {
  for (const TypeInfo& t : kTypes) {
    if (t.type == type) return t;
  }
  throw std::invalid_argument("LlamaCppDrafterConfig::type = " + std::to_string(static_cast<int>(type)) +
                              " is not an n-gram type");
}

std::string type_list() {
  std::string list;
  for (const TypeInfo& t : kTypes) list += std::string(list.empty() ? "" : ", ") + t.name;
  return list;
}

bool uses_map_sizes(NGramType type) {
  return type == NGramType::simple || type == NGramType::map_k || type == NGramType::map_k4v;
}

// The field's value if it is within [low, high]; otherwise the message `where` = value.
void check_range(const std::string& where, long long value, long long low, long long high) {
  if (value < low || value > high) {
    throw std::invalid_argument(where + " = " + std::to_string(value) + " is out of range: it must be from " +
                                std::to_string(low) + " to " + std::to_string(high));
  }
}

void validate(const LlamaCppDrafterConfig& c) {
  info(c.type);
  // The ranges of llama.cpp's own options (common/arg.cpp: --spec-ngram-*).
  check_range("LlamaCppDrafterConfig::n", c.n, 1, 1024);
  check_range("LlamaCppDrafterConfig::m", c.m, 1, 1024);
  check_range("LlamaCppDrafterConfig::min_hits", c.min_hits, 1, std::numeric_limits<std::uint16_t>::max());
  check_range("LlamaCppDrafterConfig::n_match", c.n_match, 1, 1024);
  check_range("LlamaCppDrafterConfig::n_max", c.n_max, 0, 1024);
  check_range("LlamaCppDrafterConfig::n_min", c.n_min, 0, 1024);
}

common_speculative_type to_llama(NGramType type) {
  // By llama.cpp's own name table, so a renamed or dropped type fails loudly here.
  const common_speculative_type t = common_speculative_type_from_name(info(type).name);
  if (t == COMMON_SPECULATIVE_TYPE_COUNT) {
    throw std::logic_error(std::string("llama.cpp does not know the type '") + info(type).name + "'");
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

std::string_view type_name(NGramType type) noexcept {
  for (const TypeInfo& t : kTypes) {
    if (t.type == type) return t.name;
  }
  return "unknown";
}

LlamaCppDrafterConfig parse_spec(std::string_view spec, std::string_view source) {
  const std::string where = source.empty() ? "llama.cpp drafter '" + std::string(spec) + "'" : std::string(source);
  const auto fail = [&where](const std::string& what) { return std::invalid_argument(where + ": " + what); };
  const std::size_t colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  LlamaCppDrafterConfig config;
  const TypeInfo* type = nullptr;
  for (const TypeInfo& t : kTypes) {
    if (name == t.name) type = &t;
  }
  if (type == nullptr) {
    throw fail("unknown n-gram type '" + std::string(name) + "'; llama.cpp's n-gram types: " + type_list());
  }
  config.type = type->type;

  std::vector<std::string> seen;
  std::string_view rest = colon == std::string_view::npos ? std::string_view{} : spec.substr(colon + 1);
  if (colon != std::string_view::npos && rest.empty()) throw fail("nothing after ':' (expected key=value,...)");
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string item(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (comma != std::string_view::npos && rest.empty()) throw fail("a trailing ','");
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) throw fail("parameter '" + item + "' is not key=value");
    const std::string key = item.substr(0, eq);
    const std::string text = item.substr(eq + 1);
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) throw fail("parameter '" + key + "' is given twice");
    seen.push_back(key);

    const auto value = [&](long long low, long long high) {
      long long v = 0;
      const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (text.empty() || ec == std::errc::invalid_argument || ptr != text.data() + text.size()) {
        throw fail(key + " = '" + text + "' is not a whole number");
      }
      if (ec == std::errc::result_out_of_range || v < low || v > high) {
        throw fail(key + " = '" + text + "' is out of range: it must be from " + std::to_string(low) + " to " +
                   std::to_string(high));
      }
      return v;
    };
    const auto unused = [&]() {
      return fail("unknown parameter '" + key + "' (" + type->name + " takes: " + type->keys + ")");
    };
    if (key == "n" || key == "m") {
      if (!uses_map_sizes(config.type)) throw unused();
      (key == "n" ? config.n : config.m) = static_cast<std::uint16_t>(value(1, 1024));
    } else if (key == "min_hits") {
      // llama.cpp accepts min_hits for ngram-simple and ngram-map-k too, but only ngram-map-k4v reads it.
      if (config.type != NGramType::map_k4v) throw unused();
      config.min_hits = static_cast<std::uint16_t>(value(1, std::numeric_limits<std::uint16_t>::max()));
    } else if (key == "n_match" || key == "n_max" || key == "n_min") {
      if (config.type != NGramType::mod) throw unused();
      const auto v = static_cast<std::int32_t>(key == "n_match" ? value(1, 1024) : value(0, 1024));
      (key == "n_match" ? config.n_match : key == "n_max" ? config.n_max : config.n_min) = v;
    } else {
      throw unused();
    }
  }
  return config;
}

std::string describe(const LlamaCppDrafterConfig& c) {
  std::string s = "llama.cpp:" + std::string(type_name(c.type));
  if (uses_map_sizes(c.type)) {
    s += "(n=" + std::to_string(c.n) + ",m=" + std::to_string(c.m);
    if (c.type == NGramType::map_k4v) s += ",min_hits=" + std::to_string(c.min_hits);
    s += ")";
  } else if (c.type == NGramType::mod) {
    s += "(n_match=" + std::to_string(c.n_match) + ",n_max=" + std::to_string(c.n_max) +
         ",n_min=" + std::to_string(c.n_min) + ")";
  }
  return s;
}

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
  validate(config_);
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
