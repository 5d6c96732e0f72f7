#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "ngramspec/decode_options.hpp"

namespace ngramspec::detail {

/// The one rule of a pass's most drafts: `value`, named `field` after the caller's `where`
/// prefix, must be `least` .. kMaxDraftsPerPass. Throws std::invalid_argument
/// "<where><field> = <value> is more than kMaxDraftsPerPass = 1024" above it, and
/// "<where><field> = <value> is less than <least>" below. `where` is a string, or a callable
/// that makes one, called only to throw (so that a valid value costs no allocation).
template <class Where>
void check_max_drafts(const Where& where, std::string_view field, std::size_t value, std::size_t least = 0) {
  if (value <= kMaxDraftsPerPass && value >= least) return;
  std::string message;
  if constexpr (std::is_invocable_v<const Where&>) {
    message = where();
  } else {
    message = std::string_view(where);
  }
  message.append(field).append(" = ").append(std::to_string(value));
  if (value > kMaxDraftsPerPass) {
    message.append(" is more than kMaxDraftsPerPass = ").append(std::to_string(kMaxDraftsPerPass));
  } else {
    message.append(" is less than ").append(std::to_string(least));
  }
  throw std::invalid_argument(message);
}

}  // namespace ngramspec::detail
