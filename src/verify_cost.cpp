#include "ngramspec/verify_cost.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>

#include "ngramspec/argument_error.hpp"
#include "ngramspec/detail/number_text.hpp"
#include "ngramspec/detail/parse_number.hpp"

namespace ngramspec {
namespace {

// How spec() writes a cost: six significant digits keep a measured curve readable. Messages name
// values with detail::number_text, which shows every digit that matters.
std::string spec_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

[[noreturn]] void bad_spec(std::string_view spec, const std::string& what) {
  throw ArgumentError("ngramspec::VerifyCost", "'" + std::string(spec) + "' is not a cost: " + what +
                                                   " (expected flat, knee:N or table:TOKENS=COST,TOKENS=COST,...)");
}

std::size_t parse_count(std::string_view spec, std::string_view text, const char* what) {
  const detail::ParsedNumber<std::size_t> count = detail::parse_whole<std::size_t>(text);
  if (count.status == detail::NumberStatus::out_of_range) {
    bad_spec(spec, std::string(what) + " '" + std::string(text) + "' is more than " +
                       std::to_string(std::numeric_limits<std::size_t>::max()));
  }
  if (!count.ok()) bad_spec(spec, std::string(what) + " '" + std::string(text) + "' is not a whole number");
  return count.value;
}

double parse_cost(std::string_view spec, std::string_view text) {
  // The reader of every number of the project: a cost in hexadecimal, with a sign or spaces, or
  // inf, is refused here as it is on every command line.
  const detail::ParsedNumber<double> cost = detail::parse_real<double>(text);
  if (cost.status == detail::NumberStatus::out_of_range) {
    bad_spec(spec, "cost '" + std::string(text) + "' is out of the range of a double");
  }
  if (!cost.ok()) bad_spec(spec, "cost '" + std::string(text) + "' is not a finite number in decimal");
  return cost.value;
}

}  // namespace

VerifyCost VerifyCost::knee(std::size_t flat_tokens, double base) {
  if (flat_tokens == 0)
    throw ArgumentError("ngramspec::VerifyCost::knee", "flat_tokens = 0 is invalid: must be at least 1");
  if (!(std::isfinite(base) && base > 0)) {
    throw ArgumentError("ngramspec::VerifyCost::knee",
                        "base = " + detail::number_text(base) + " is invalid: must be finite and positive");
  }
  VerifyCost cost;  // normalized: the flat part costs 1
  cost.points_ = {{1, 1.0}};
  if (flat_tokens > 1) cost.points_.push_back({flat_tokens, 1.0});
  cost.tail_slope_ = 1.0 / static_cast<double>(flat_tokens);
  cost.spec_ = "knee:" + std::to_string(flat_tokens);
  if (base != 1.0) cost.spec_ += " (base " + spec_number(base) + ")";
  return cost;
}

VerifyCost VerifyCost::table(std::span<const Point> points) {
  if (points.empty()) throw ArgumentError("ngramspec::VerifyCost::table", "no points; it needs at least one");
  for (std::size_t i = 0; i < points.size(); ++i) {
    const Point& p = points[i];
    const std::string name =
        "point " + std::to_string(i) + " (" + std::to_string(p.tokens) + " tokens, cost " + detail::number_text(p.cost) +
        ")";
    if (p.tokens == 0)
      throw ArgumentError("ngramspec::VerifyCost::table", name + " is invalid: tokens must be at least 1");
    if (!(std::isfinite(p.cost) && p.cost > 0)) {
      throw ArgumentError("ngramspec::VerifyCost::table", name + " is invalid: cost must be finite and positive");
    }
    if (i > 0 && p.tokens <= points[i - 1].tokens) {
      throw ArgumentError("ngramspec::VerifyCost::table",
                          name + " is invalid: tokens must increase from point to point (point " +
                              std::to_string(i - 1) + " has " + std::to_string(points[i - 1].tokens) + ")");
    }
    if (i > 0 && p.cost < points[i - 1].cost) {
      throw ArgumentError("ngramspec::VerifyCost::table",
                          name + " is invalid: a pass never costs less for carrying more tokens (point " +
                              std::to_string(i - 1) + " costs " + detail::number_text(points[i - 1].cost) + ")");
    }
  }
  // Normalized so that the one-token pass (the first point's cost) costs 1: only ratios
  // matter, and a curve of tiny (subnormal) or huge costs then plans exactly as the same curve
  // at any other scale. A ratio above kMaxCost is refused: beyond it a pass's cost, or the
  // planner's sums and differences of costs, could overflow to inf and decide nothing.
  VerifyCost cost;
  const double unit = points.front().cost;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const double r = points[i].cost / unit;
    if (!(r <= kMaxCost)) {
      throw ArgumentError("ngramspec::VerifyCost::table",
                          "point " + std::to_string(i) + " (" + std::to_string(points[i].tokens) + " tokens, cost " +
                              detail::number_text(points[i].cost) + ") is invalid: it costs " +
                              detail::number_text(points[i].cost / unit) +
                              " times point 0, more than kMaxCost = " + detail::number_text(kMaxCost));
    }
    cost.points_.push_back({points[i].tokens, r});
  }
  if (points.size() >= 2) {
    const Point& a = cost.points_[points.size() - 2];
    const Point& b = cost.points_.back();
    cost.tail_slope_ = (b.cost - a.cost) / static_cast<double>(b.tokens - a.tokens);
  }
  cost.spec_ = "table:";
  for (std::size_t i = 0; i < points.size(); ++i) {
    // Appended piece by piece: GCC 12 at -O3 reports a false -Wrestrict for `"," + std::string`.
    if (i != 0) cost.spec_ += ',';
    cost.spec_ += std::to_string(points[i].tokens);
    cost.spec_ += '=';
    cost.spec_ += spec_number(points[i].cost);
  }
  return cost;
}

VerifyCost VerifyCost::flat() {
  const Point one{1, 1.0};
  VerifyCost cost = table(std::span<const Point>(&one, 1));
  cost.spec_ = "flat";
  return cost;
}

VerifyCost VerifyCost::parse(std::string_view spec) {
  if (spec == "flat") return flat();
  const std::size_t colon = spec.find(':');
  const std::string_view kind = spec.substr(0, colon);
  const std::string_view rest = colon == std::string_view::npos ? std::string_view{} : spec.substr(colon + 1);
  if (kind == "knee") {
    if (colon == std::string_view::npos) bad_spec(spec, "knee needs its token count");
    const std::size_t n = parse_count(spec, rest, "knee");
    if (n == 0) bad_spec(spec, "the knee must be at least 1 token");
    return knee(n);
  }
  if (kind == "table") {
    if (rest.empty()) bad_spec(spec, "the table has no points");
    std::vector<Point> points;
    std::string_view items = rest;
    while (!items.empty()) {
      const std::size_t comma = items.find(',');
      const std::string_view item = items.substr(0, comma);
      const std::size_t eq = item.find('=');
      if (eq == std::string_view::npos) bad_spec(spec, "point '" + std::string(item) + "' is not TOKENS=COST");
      points.push_back({parse_count(spec, item.substr(0, eq), "token count"), parse_cost(spec, item.substr(eq + 1))});
      if (comma == std::string_view::npos) break;
      items = items.substr(comma + 1);
      if (items.empty()) bad_spec(spec, "it ends with a comma");
    }
    try {
      return table(points);
    } catch (const std::invalid_argument& e) {
      bad_spec(spec, e.what());
    }
  }
  bad_spec(spec, "unknown form '" + std::string(kind) + "'");
}

double VerifyCost::operator()(std::size_t tokens) const noexcept {
  const Point* first = points_.data();
  const Point* last = first + points_.size() - 1;
  if (tokens <= first->tokens) return first->cost;
  if (tokens >= last->tokens) return last->cost + tail_slope_ * static_cast<double>(tokens - last->tokens);
  // The first point at or beyond `tokens`; tables are short, and a knee has two points.
  const Point* upper = std::lower_bound(first, last, tokens, [](const Point& p, std::size_t t) { return p.tokens < t; });
  const Point* lower = upper - 1;
  const double t = static_cast<double>(tokens - lower->tokens) / static_cast<double>(upper->tokens - lower->tokens);
  return lower->cost + t * (upper->cost - lower->cost);
}

VerifyCost VerifyCost::normalized() const {
  // The points are normalized already; what remains is the spec, which then says so.
  VerifyCost cost = *this;
  if (spec_.rfind("knee:", 0) == 0) {
    cost.spec_ = spec_.substr(0, spec_.find(' '));
  } else if (spec_ != "flat") {
    cost.spec_ = table(points_).spec_;
  }
  return cost;
}

}  // namespace ngramspec
