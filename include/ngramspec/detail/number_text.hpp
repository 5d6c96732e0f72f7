#pragma once

#include <charconv>
#include <string>

namespace ngramspec::detail {

/// The shortest text that reads back as `value` (std::to_chars), for messages that name a refused
/// number: std::to_string's six decimals print a top_p of 1.0000001 as 1.000000, hiding why it was
/// refused, and a float prints at a float's precision (0.1f as 0.1, not 0.10000000149011612).
template <class Real>
[[nodiscard]] std::string number_text(Real value) {
  char text[64];
  const std::to_chars_result written = std::to_chars(text, text + sizeof text, value);
  return std::string(text, written.ptr);
}

}  // namespace ngramspec::detail
