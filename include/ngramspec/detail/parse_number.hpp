#pragma once

// Reading a count or a real from text: the one reader behind VerifyCost::parse and every command
// line of the project (the tools, the examples, the llama.cpp program, the benchmarks), so that
// all accept the same numbers. Each caller words its own messages from what was found.

#include <charconv>
#include <cmath>
#include <concepts>
#include <string_view>
#include <system_error>

namespace ngramspec::detail {

/// What reading a number found in a text.
enum class NumberStatus {
  ok,            ///< the whole text is a number that fits the type
  malformed,     ///< anything else but out_of_range: empty, a sign or space where none may be, a suffix, not finite
  out_of_range,  ///< the whole text is a number, but beyond the type's range (a real's: too large or too small)
};

/// A number read from text, and what was found.
template <class T>
struct ParsedNumber {
  T value{};  ///< the number; T{} unless status is ok
  NumberStatus status = NumberStatus::malformed;
  /// Whether the text was a number that fits.
  [[nodiscard]] bool ok() const noexcept { return status == NumberStatus::ok; }
};

/// The whole of `text` as a whole number of type T, in `base` (10: decimal digits; 16:
/// hexadecimal digits, without a 0x prefix): digits only, a leading minus for a signed T; no plus
/// sign, spaces or suffix.
template <std::integral T>
[[nodiscard]] ParsedNumber<T> parse_whole(std::string_view text, int base = 10) noexcept {
  T value{};
  const char* const end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value, base);
  if (ec == std::errc::result_out_of_range && ptr == end) return {T{}, NumberStatus::out_of_range};
  if (ec != std::errc() || ptr != end) return {T{}, NumberStatus::malformed};
  return {value, NumberStatus::ok};
}

/// The whole of `text` as a finite real of type T, in decimal or exponent notation ("0.5",
/// "2e-3", ".5"), a leading minus allowed; no plus sign, spaces, hexadecimal, inf or nan.
template <std::floating_point T>
[[nodiscard]] ParsedNumber<T> parse_real(std::string_view text) noexcept {
  T value{};
  const char* const end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value, std::chars_format::general);
  if (ec == std::errc::result_out_of_range && ptr == end) return {T{}, NumberStatus::out_of_range};
  if (ec != std::errc() || ptr != end || !std::isfinite(value)) return {T{}, NumberStatus::malformed};
  return {value, NumberStatus::ok};
}

}  // namespace ngramspec::detail
