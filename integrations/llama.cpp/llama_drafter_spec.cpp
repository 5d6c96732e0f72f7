#include "llama_drafter_spec.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "ngramspec/detail/parse_number.hpp"

namespace ngramspec::llama_cpp {
namespace {

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

}  // namespace

void validate_config(const LlamaCppDrafterConfig& c) {
  info(c.type);
  // The ranges of llama.cpp's own options (common/arg.cpp: --spec-ngram-*).
  check_range("LlamaCppDrafterConfig::n", c.n, 1, 1024);
  check_range("LlamaCppDrafterConfig::m", c.m, 1, 1024);
  check_range("LlamaCppDrafterConfig::min_hits", c.min_hits, 1, std::numeric_limits<std::uint16_t>::max());
  check_range("LlamaCppDrafterConfig::n_match", c.n_match, 1, 1024);
  check_range("LlamaCppDrafterConfig::n_max", c.n_max, 0, 1024);
  check_range("LlamaCppDrafterConfig::n_min", c.n_min, 0, 1024);
  if (c.n_min > c.n_max) {
    throw std::invalid_argument("LlamaCppDrafterConfig::n_min = " + std::to_string(c.n_min) + " is more than n_max = " +
                                std::to_string(c.n_max) + ": a draft holds at most n_max tokens");
  }
}

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
      const ngramspec::detail::ParsedNumber<long long> parsed = ngramspec::detail::parse_whole<long long>(text);
      if (parsed.status == ngramspec::detail::NumberStatus::malformed) throw fail(key + " = '" + text + "' is not a whole number");
      const long long v = parsed.value;
      if (!parsed.ok() || v < low || v > high) {
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
  if (config.n_min > config.n_max) {
    throw fail("n_min = " + std::to_string(config.n_min) + " is more than n_max = " + std::to_string(config.n_max) +
               ": a draft holds at most n_max tokens");
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

std::string describe(const DraftSimpleConfig& c) {
  return "llama.cpp:draft-simple(n_max=" + std::to_string(c.n_max) + ")";
}

}  // namespace ngramspec::llama_cpp
