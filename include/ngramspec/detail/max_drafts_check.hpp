#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "ngramspec/argument_error.hpp"
#include "ngramspec/decode_options.hpp"

namespace ngramspec::detail {

/// The one rule of a pass's most drafts: `value`, the setting `field`, must be `least` ..
/// kMaxDraftsPerPass. Throws ArgumentError from `where` (the thrower) with the detail
/// "<subject><field> = <value> is more than kMaxDraftsPerPass = 1024" above it, and
/// "<subject><field> = <value> is less than <least>" below. `subject` ("sequence 3: ", say) is a
/// string, or a callable that makes one, called only to throw (so that a valid value costs no
/// allocation).
template <class Subject>
void check_max_drafts(std::string_view where, const Subject& subject, std::string_view field, std::size_t value,
                      std::size_t least = 0) {
  if (value <= kMaxDraftsPerPass && value >= least) return;
  std::string detail;
  if constexpr (std::is_invocable_v<const Subject&>) {
    detail = subject();
  } else {
    detail = std::string_view(subject);
  }
  detail.append(field).append(" = ").append(std::to_string(value));
  if (value > kMaxDraftsPerPass) {
    detail.append(" is more than kMaxDraftsPerPass = ").append(std::to_string(kMaxDraftsPerPass));
  } else {
    detail.append(" is less than ").append(std::to_string(least));
  }
  throw ArgumentError(where, detail);
}

}  // namespace ngramspec::detail
