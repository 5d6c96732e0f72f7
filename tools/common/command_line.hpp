#pragma once
// What every command-line program of the project (ngramspec-generate, ngramspec-llama2-bench,
// ngramspec-llama, ngramspec-replay, ngramspec-corpus) shares in reading its arguments: one rule
// for options given twice, one for lists that name an item twice, one reader of prompt files, and
// the checks of the sampling options in the options' own names.

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "ngramspec/detail/number_text.hpp"
#include "ngramspec/sampling_options.hpp"

namespace ngramspec::cli {

/// The one name, on every command line, of the most drafts (or tree nodes) a pass sends.
inline constexpr std::string_view kMaxDrafts = "--max-drafts";
/// Its old name, still read: a documented alias of kMaxDrafts.
inline constexpr std::string_view kMaxDraftsAlias = "--k";

/// Whether `option` is --max-drafts or its alias --k.
[[nodiscard]] constexpr bool is_max_drafts(std::string_view option) noexcept {
  return option == kMaxDrafts || option == kMaxDraftsAlias;
}

/// The single-valued options a command line has given so far. A second value of one of them is a
/// mistake (the first would be dropped without a word), so it is refused, naming the option; an
/// option documented as repeatable (its values form a list) is simply not passed to once().
class GivenOptions {
 public:
  /// Notes `option`; throws std::invalid_argument "OPTION is given twice" (after `prefix`, e.g.
  /// "build: ") when it was noted before.
  /// --max-drafts and its alias --k are one option: the second of them is refused as well,
  /// naming both.
  void once(std::string_view option, std::string_view prefix = {}) {
    if (given(option)) throw std::invalid_argument(std::string(prefix) + std::string(option) + " is given twice");
    if (is_max_drafts(option) && (given(kMaxDrafts) || given(kMaxDraftsAlias))) {
      throw std::invalid_argument(std::string(prefix) + std::string(kMaxDrafts) + " is given twice (" +
                                  std::string(kMaxDraftsAlias) + " is its other name)");
    }
    given_.emplace_back(option);
  }
  /// Whether once(`option`) was called.
  [[nodiscard]] bool given(std::string_view option) const noexcept {
    return std::find(given_.begin(), given_.end(), option) != given_.end();
  }

 private:
  std::vector<std::string> given_;
};

/// Throws std::invalid_argument "OPTION: 'TEXT' is given twice" when `items` already holds
/// `item` (TEXT: the item as the user wrote it): a list that names an item twice would run or
/// print it twice.
template <class T, class U>
void refuse_repeated_item(std::string_view option, const std::vector<T>& items, const U& item, std::string_view text) {
  if (std::find(items.begin(), items.end(), item) != items.end()) {
    throw std::invalid_argument(std::string(option) + ": '" + std::string(text) + "' is given twice");
  }
}

/// The prompts of a prompts file (`option`, e.g. --prompts, names it in messages): one a line,
/// CR LF line ends too, empty lines skipped. Throws std::runtime_error naming the option and the
/// file when it is a directory, cannot be opened or read, or holds no prompt.
[[nodiscard]] inline std::vector<std::string> read_prompt_lines(const std::string& path,
                                                                std::string_view option = "--prompts") {
  const std::string where = std::string(option) + " file '" + path + "'";
  // A directory opens on some systems and then reads as empty: say what it is.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw std::runtime_error("cannot read " + where + ": it is a directory");
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + where);
  std::vector<std::string> prompts;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) prompts.push_back(line);
  }
  if (in.bad()) throw std::runtime_error("cannot read " + where + ": read error");
  if (prompts.empty()) throw std::runtime_error(where + " holds no prompt (one a line)");
  return prompts;
}

/// Checks what --temperature, --top-p and --min-p set, as validate(SamplingOptions) does, but
/// naming the option a user typed rather than the field it sets: throws std::invalid_argument
/// "--top-p must be in (0, 1] (1 = off), got 1.0000001", the value printed in full (a float's
/// shortest text), so that it shows why it was refused.
inline void check_sampling_options(const SamplingOptions& sampling) {
  const auto refuse = [](std::string_view option, float value, std::string_view rule) {
    throw std::invalid_argument(std::string(option) + " must be " + std::string(rule) + ", got " +
                                detail::number_text(value));
  };
  if (!(std::isfinite(sampling.temperature) && sampling.temperature >= 0.0f)) {
    refuse("--temperature", sampling.temperature, "finite and >= 0 (0 is greedy decoding)");
  }
  if (!(sampling.top_p > 0.0f && sampling.top_p <= 1.0f)) refuse("--top-p", sampling.top_p, "in (0, 1] (1 = off)");
  if (!(sampling.min_p >= 0.0f && sampling.min_p < 1.0f)) refuse("--min-p", sampling.min_p, "in [0, 1) (0 = off)");
  validate(sampling);  // whatever else the library requires, in its own words
}

/// Whether --sampling-mode, as given, means something only when sampling: the rejection mode
/// does (it needs a temperature above 0), while exact, the default, is greedy decoding at
/// temperature 0 and is taken there as it is anywhere.
[[nodiscard]] constexpr bool sampling_mode_needs_temperature(SamplingMode mode) noexcept {
  return mode != SamplingMode::exact;
}

}  // namespace ngramspec::cli
