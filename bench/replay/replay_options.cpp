#include "replay_options.hpp"

#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <system_error>

#include "ngramspec/decode_step.hpp"

namespace ngramspec::replay {
namespace {

std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

// A whole number in [min_value, max_value]: digits only, so no sign, no spaces, no suffix.
std::size_t parse_count(std::string_view option, std::string_view text, std::size_t min_value,
                        std::size_t max_value = std::numeric_limits<std::size_t>::max()) {
  std::size_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && ptr == text.data() + text.size() &&
                                               value > max_value)) {
    throw std::invalid_argument(std::string(option) + ": " + quoted(text) + " is more than " +
                                std::to_string(max_value));
  }
  if (ec != std::errc() || ptr != text.data() + text.size() || value < min_value) {
    throw std::invalid_argument(std::string(option) + ": " + quoted(text) + " is not a whole number >= " +
                                std::to_string(min_value));
  }
  return value;
}

// A finite number >= 0 in plain decimal or exponent notation (no sign, spaces, hex, inf or nan).
double parse_non_negative(std::string_view option, std::string_view text) {
  double value = -1;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value, std::chars_format::general);
  if (ec == std::errc::result_out_of_range && ptr == text.data() + text.size()) {
    throw std::invalid_argument(std::string(option) + ": " + quoted(text) + " is out of a double's range");
  }
  if (ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(value) || !(value >= 0)) {
    throw std::invalid_argument(std::string(option) + ": " + quoted(text) + " is not a non-negative number");
  }
  return value;
}

}  // namespace

ReplayOptions parse_replay_options(std::span<const std::string_view> args) {
  ReplayOptions options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    const auto value = [&]() -> std::string_view {
      if (i + 1 >= args.size()) throw std::invalid_argument(std::string(arg) + " needs a value");
      return args[++i];
    };
    if (arg == "--help" || arg == "-h") {
      options.help = true;
      return options;
    } else if (arg == "--streams") {
      options.stream_files.emplace_back(value());
    } else if (arg == "--synthetic") {
      options.synthetic_specs.emplace_back(value());
    } else if (arg == "--drafter") {
      options.drafter_names.emplace_back(value());
    } else if (arg == "--k") {
      // Every comma-separated item must be a number: "", "4," and "4,,8" are mistakes.
      const std::string_view list = value();
      std::size_t start = 0;
      for (;;) {
        const std::size_t comma = list.find(',', start);
        const std::string_view item = list.substr(start, comma == std::string_view::npos ? comma : comma - start);
        const std::size_t k = parse_count("--k", item, 1);
        if (k > kMaxDraftsPerPass) {
          throw std::invalid_argument("--k: " + std::to_string(k) + " is more than " +
                                      std::to_string(kMaxDraftsPerPass));
        }
        options.ks.push_back(k);
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
    } else if (arg == "--window") {
      options.defaults.window = parse_count(arg, value(), 1);
    } else if (arg == "--min-order") {
      options.defaults.min_order = parse_count(arg, value(), 1);
    } else if (arg == "--max-order") {
      options.defaults.max_order = parse_count(arg, value(), 1);
    } else if (arg == "--length") {
      options.length = parse_count(arg, value(), 1);
    } else if (arg == "--samples") {
      options.samples = parse_count(arg, value(), 1);
    } else if (arg == "--seed") {
      options.seed = parse_count(arg, value(), 0);
    } else if (arg == "--limit") {
      options.limit = parse_count(arg, value(), 1);
    } else if (arg == "--timing-repeats") {
      options.timing_repeats = parse_count(arg, value(), 1, kMaxTimingRepeats);
    } else if (arg == "--expect-al") {
      options.expect_al = parse_non_negative(arg, value());
    } else if (arg == "--tolerance") {
      options.tolerance = parse_non_negative(arg, value());
    } else if (arg == "--json") {
      options.json = true;
    } else {
      throw std::invalid_argument("unknown option " + quoted(arg) + " (see --help)");
    }
  }
  if (options.stream_files.empty() && options.synthetic_specs.empty()) {
    throw std::invalid_argument("nothing to replay: give --streams FILE or --synthetic SPEC (see --help)");
  }
  if (options.drafter_names.empty()) options.drafter_names.emplace_back("ngram");
  if (options.ks.empty()) options.ks.push_back(4);
  return options;
}

}  // namespace ngramspec::replay
