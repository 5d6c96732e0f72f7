#pragma once

// Where a run's output leaves plain decoding's, and what the plain model's logits say there:
// a near tie (the two tokens' logits closer than the numeric difference between the kernels of
// a pass of several tokens and of a one-token pass, so the greedy choice may flip) or not (a
// difference no kernel explains: a bug in drafting, acceptance or rollback).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <ngramspec/token.hpp>

namespace ngramspec::llama_cpp {

/// A divergence is a near tie when the plain token's logit beats the other run's token by at most
/// this fraction of the logit scale (the largest |logit| of the plain model's row there). ggml's
/// CPU kernels for passes of several tokens differ from its one-token kernels by less than 0.3% of
/// it (the integration test pins it); a wrong token from a bug is not confined to near ties.
inline constexpr float kNearTieFraction = 0.01f;

/// The plain model's logits at a divergence: the row plain decoding chose its token from.
struct DivergenceLogits {
  float plain = 0;                  ///< the plain token's logit
  std::optional<float> other;       ///< the other run's token's logit (none when that run had ended)
  float top1 = 0;                   ///< the largest logit of the row
  float top2 = 0;                   ///< the second largest logit of the row
  float scale = 0;                  ///< the largest |logit| of the row

  /// Top-1 minus top-2 logit: how close the row's best two tokens are.
  [[nodiscard]] float margin() const noexcept { return top1 - top2; }
  /// The plain token's logit minus the other run's token's (absent when that run had ended).
  [[nodiscard]] std::optional<float> gap() const noexcept {
    return other ? std::optional<float>(plain - *other) : std::nullopt;
  }
  /// The gap is within kNearTieFraction of the scale (false when there is no gap).
  [[nodiscard]] bool near_tie() const noexcept {
    const std::optional<float> g = gap();
    return g.has_value() && std::fabs(*g) <= kNearTieFraction * scale;
  }
};

/// The first token at which one prompt's output differs from plain decoding's.
struct Divergence {
  std::size_t prompt = 0;              ///< the prompt's index, from 0
  std::size_t token = 0;               ///< the first differing token's index in the output, from 0
  std::optional<Token> plain;          ///< plain decoding's token there (none: its output ended before)
  std::optional<Token> other;          ///< the other run's token there (none: its output ended before)
  std::optional<DivergenceLogits> logits;  ///< the plain model's logits there, once read (score())
};

/// One Divergence per prompt whose output in `other` differs from `plain`'s, in prompt order.
/// Throws std::invalid_argument when the two runs hold outputs for different numbers of prompts.
[[nodiscard]] inline std::vector<Divergence> find_divergences(std::span<const std::vector<Token>> plain,
                                                              std::span<const std::vector<Token>> other) {
  if (plain.size() != other.size()) {
    throw std::invalid_argument("cannot compare outputs for " + std::to_string(other.size()) + " prompts with plain " +
                                "decoding's for " + std::to_string(plain.size()));
  }
  std::vector<Divergence> out;
  for (std::size_t p = 0; p < plain.size(); ++p) {
    const std::vector<Token>& a = plain[p];
    const std::vector<Token>& b = other[p];
    const auto [at_a, at_b] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
    if (at_a == a.end() && at_b == b.end()) continue;
    Divergence d;
    d.prompt = p;
    d.token = static_cast<std::size_t>(at_a - a.begin());
    if (at_a != a.end()) d.plain = *at_a;
    if (at_b != b.end()) d.other = *at_b;
    out.push_back(d);
  }
  return out;
}

/// The plain model's logits at a divergence from its row `row`. Throws std::invalid_argument
/// naming the token when `plain` or `other` lies outside the row.
[[nodiscard]] inline DivergenceLogits score(std::span<const float> row, Token plain, std::optional<Token> other) {
  const auto logit_of = [&](Token t) {
    if (static_cast<std::size_t>(t) >= row.size()) {
      throw std::invalid_argument("token " + std::to_string(t) + " lies outside a row of " + std::to_string(row.size()) +
                                  " logits");
    }
    return row[static_cast<std::size_t>(t)];
  };
  DivergenceLogits s;
  s.plain = logit_of(plain);
  if (other) s.other = logit_of(*other);
  s.top1 = -INFINITY;
  s.top2 = -INFINITY;
  for (const float x : row) {
    if (x > s.top1) {
      s.top2 = s.top1;
      s.top1 = x;
    } else if (x > s.top2) {
      s.top2 = x;
    }
    s.scale = std::max(s.scale, std::fabs(x));
  }
  return s;
}

namespace detail {

inline std::string number(float x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", static_cast<double>(x));
  return buf;
}

inline std::string percent_of_scale() {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g%%", static_cast<double>(100 * kNearTieFraction));
  return buf;
}

}  // namespace detail

/// One line saying where run `name` left plain decoding and why, prompts and tokens counted
/// from 1: "ngram-mod: prompt 7, token 93: plain 318 (logit 12.41), drafted run 421 (logit
/// 12.40), margin 0.01: a near tie (within 1% of the logit scale 12.5)". `other_label` names the
/// other run ("drafted run"); `greedy` false (a sampled run) leaves the classification out, since a
/// draw may flip between tokens of any logits.
[[nodiscard]] inline std::string divergence_line(std::string_view name, const Divergence& d, std::string_view other_label,
                                                 bool greedy) {
  std::string line = std::string(name) + ": prompt " + std::to_string(d.prompt + 1) + ", token " +
                     std::to_string(d.token + 1) + ": ";
  const std::string label(other_label);
  if (!d.plain) {
    return line + "plain decoding had ended (after " + std::to_string(d.token) + " tokens), the " + label + " went on with " +
           std::to_string(*d.other);
  }
  line += "plain " + std::to_string(*d.plain);
  if (d.logits) line += " (logit " + detail::number(d.logits->plain) + ")";
  if (!d.other) return line + ", the " + label + " had ended (after " + std::to_string(d.token) + " tokens)";
  line += ", " + label + " " + std::to_string(*d.other);
  if (!d.logits) return line + " (the plain model's logits there were not read)";
  line += " (logit " + detail::number(*d.logits->other) + "), margin " + detail::number(d.logits->margin());
  if (!greedy) return line + " (sampled: a draw may flip between tokens of any logits)";
  return line + (d.logits->near_tie() ? ": a near tie (within " : ": NOT a near tie (beyond ") +
         detail::percent_of_scale() + " of the logit scale " + detail::number(d.logits->scale) + ")";
}

/// The divergences as a JSON array; prompts and tokens counted from 1 as in divergence_line(),
/// a token or logit that does not exist as null, and "near_tie" null for a sampled run.
[[nodiscard]] inline std::string divergences_json(std::span<const Divergence> divergences, bool greedy) {
  const auto token = [](std::optional<Token> t) { return t ? std::to_string(*t) : std::string("null"); };
  const auto real = [](std::optional<float> x) { return x ? detail::number(*x) : std::string("null"); };
  std::string out = "[";
  for (const Divergence& d : divergences) {
    if (out.size() > 1) out += ", ";
    out += "{\"prompt\": " + std::to_string(d.prompt + 1) + ", \"token\": " + std::to_string(d.token + 1) +
           ", \"plain\": " + token(d.plain) + ", \"drafted\": " + token(d.other);
    const std::optional<DivergenceLogits>& s = d.logits;
    out += ", \"plain_logit\": " + real(s ? std::optional<float>(s->plain) : std::nullopt) +
           ", \"drafted_logit\": " + real(s ? s->other : std::nullopt) +
           ", \"margin\": " + real(s ? std::optional<float>(s->margin()) : std::nullopt) +
           ", \"logit_scale\": " + real(s ? std::optional<float>(s->scale) : std::nullopt) + ", \"near_tie\": " +
           (s && greedy && s->other ? (s->near_tie() ? "true" : "false") : "null") + "}";
  }
  return out + "]";
}

}  // namespace ngramspec::llama_cpp
