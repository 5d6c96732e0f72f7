#pragma once

// What the replay's passes really cost (--price), hidden from the planner, which sees only its
// --cost: a curve, a price for changing the pass's shape, seeded noise and a drift.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "ngramspec/verify_cost.hpp"

namespace ngramspec::replay {

/// "SPEC[,shape=R][,noise=S][,seed=K][,drift=N:SPEC2]": SPEC any --cost curve (flat, knee:N,
/// table:...); shape=R: a decode pass whose token count differs from the previous decode
/// pass's costs R more (in one-token passes, the curve's unit); noise=S: each price times a
/// log-normal factor of sigma S, seeded, the same for a pass of the same index in every run;
/// seed=K: the noise's seed (default 1), so that one price can be replayed under several
/// draws of its noise; drift=N:SPEC2, last (SPEC2 is the rest of the string): from decode pass
/// N on, the price is SPEC2 (with its own shape, noise and seed options, or none; its seed is
/// the first part's unless it names one).
class PassPrice {
 public:
  /// Throws std::invalid_argument naming the spec and what is wrong with it.
  static PassPrice parse(std::string_view spec) {
    PassPrice p;
    p.spec_ = std::string(spec);
    const std::size_t drift = spec.find(",drift=");
    std::string_view head = spec.substr(0, drift);
    if (drift != std::string_view::npos) {
      const std::string_view rest = spec.substr(drift + 7);
      const std::size_t colon = rest.find(':');
      if (colon == std::string_view::npos || colon == 0) {
        throw std::invalid_argument(quoted(spec) + ": drift=N:SPEC2 needs a pass number N, a colon and a price");
      }
      p.drift_pass_ = number<std::size_t>(spec, "drift", rest.substr(0, colon));
      const PassPrice after = parse(rest.substr(colon + 1));
      if (after.after_) throw std::invalid_argument(quoted(spec) + ": one drift at most");
      p.after_.emplace(after.part_);
    }
    // The curve is everything before the first item that is not a table's TOKENS=COST (a table
    // has commas of its own): the options start there.
    std::size_t options = head.size();
    for (std::size_t at = head.find(','); at != std::string_view::npos; at = head.find(',', at + 1)) {
      const std::string_view key = head.substr(at + 1, head.find('=', at + 1) - (at + 1));
      if (key.empty() || key.find_first_not_of("0123456789") != std::string_view::npos) {
        options = at;
        break;
      }
    }
    try {
      p.part_.curve = VerifyCost::parse(head.substr(0, options));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(quoted(spec) + ": " + e.what());
    }
    std::string_view tail = head.substr(options);
    while (!tail.empty()) {
      tail.remove_prefix(1);  // the comma
      const std::size_t end = tail.find(',');
      const std::string_view item = tail.substr(0, end);
      tail = end == std::string_view::npos ? std::string_view() : tail.substr(end);
      if (item.rfind("shape=", 0) == 0) {
        p.part_.shape = number<double>(spec, "shape", item.substr(6));
      } else if (item.rfind("noise=", 0) == 0) {
        p.part_.noise = number<double>(spec, "noise", item.substr(6));
      } else if (item.rfind("seed=", 0) == 0) {
        p.part_.seed = number<std::uint32_t>(spec, "seed", item.substr(5));
      } else {
        throw std::invalid_argument(quoted(spec) + ": " + quoted_value(std::string(item)) +
                                    " is not an option: expected shape=R, noise=S, seed=K or, last, drift=N:SPEC2");
      }
    }
    // A seed with no noise to draw would be ignored: refuse it. The first part's seed may serve a
    // noisy second part.
    if (p.part_.seed && p.part_.noise == 0 && !(p.after_ && p.after_->noise > 0)) {
      throw std::invalid_argument(quoted(spec) + ": seed=" + std::to_string(*p.part_.seed) +
                                  " seeds nothing: the price has no noise=S");
    }
    if (p.after_ && !p.after_->seed) p.after_->seed = p.part_.seed;
    return p;
  }

  /// The price of decode pass `index` (0 first) of `rows` sequences carrying `drafts` drafts,
  /// after a decode pass of `previous_tokens` tokens (0: none before). The noise is drawn from
  /// the part's seed=K (1 when none is named).
  [[nodiscard]] double charge(std::size_t index, std::size_t rows, std::size_t drafts,
                              std::size_t previous_tokens) const {
    const Part& part = after_ && index >= drift_pass_ ? *after_ : part_;
    double price = part.curve.pass(rows, drafts);
    if (previous_tokens != 0 && previous_tokens != rows + drafts) price += part.shape;
    if (part.noise > 0) price *= std::exp(part.noise * normal(index, part.seed.value_or(1)));
    return price;
  }
  /// The curve of the price at decode pass `index` (what a planner told the truth would see).
  [[nodiscard]] const VerifyCost& curve(std::size_t index = 0) const noexcept {
    return after_ && index >= drift_pass_ ? after_->curve : part_.curve;
  }
  [[nodiscard]] const std::string& spec() const noexcept { return spec_; }

 private:
  struct Part {
    VerifyCost curve = VerifyCost::flat();
    double shape = 0;
    double noise = 0;
    std::optional<std::uint32_t> seed;  // none: 1, or the first part's after a drift
  };
  static std::string quoted(std::string_view s) { return "--price \"" + std::string(s) + "\""; }
  template <class T>
  static T number(std::string_view spec, const char* name, std::string_view text) {
    const std::string s(text);
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != s.size() || s.empty() || !std::isfinite(v) || v < 0 ||
        (std::is_integral_v<T> && v != std::floor(v))) {
      throw std::invalid_argument(quoted(spec) + ": " + name + " = " + quoted_value(s) + " is not a " +
                                  (std::is_integral_v<T> ? "whole number" : "finite number") + " of at least 0");
    }
    // A double past the type's range converts to no defined value: refuse it, naming the most.
    if constexpr (std::is_integral_v<T>) {
      if (v > static_cast<double>(std::numeric_limits<T>::max())) {
        throw std::invalid_argument(quoted(spec) + ": " + name + " = " + quoted_value(s) + " is more than " +
                                    std::to_string(std::numeric_limits<T>::max()));
      }
    }
    return static_cast<T>(v);
  }
  static std::string quoted_value(const std::string& s) { return "\"" + s + "\""; }
  // A standard normal draw for pass `index`: splitmix64 into Box-Muller, no state.
  static double normal(std::size_t index, std::uint64_t seed) noexcept {
    const auto mix = [](std::uint64_t z) {
      z += 0x9e3779b97f4a7c15ULL;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      return z ^ (z >> 31);
    };
    const std::uint64_t a = mix(seed * 0x100000001b3ULL + 2 * static_cast<std::uint64_t>(index));
    const std::uint64_t b = mix(a ^ 0x5851f42d4c957f2dULL);
    const double u1 = (static_cast<double>(a >> 11) + 0.5) * 0x1.0p-53;
    const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
    return std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  Part part_;
  std::optional<Part> after_;
  std::size_t drift_pass_ = 0;
  std::string spec_;
};

}  // namespace ngramspec::replay
