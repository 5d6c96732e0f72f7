#pragma once

#include <stdexcept>
#include <string>

#include "ngramspec/argument_error.hpp"

namespace ngramspec::detail {

/// Folds a setting's former name into its name, in a configuration that keeps the former name as
/// a member so that code written against it still compiles. The former counts as set when it
/// differs from `default_value`; then it gives the value, unless the name holds another value
/// that is not the default either: std::invalid_argument, prefixed by `where`, naming both. Leaves
/// the value under both names (a configuration read back reads alike by either) and returns the
/// name it was set by, for the messages that refuse the value.
template <class T>
const char* fold_renamed_setting(T& value, T& former, const T& default_value, const char* where, const char* name,
                                 const char* former_name) {
  if (former == default_value || former == value) {
    former = value;
    return name;
  }
  if (value != default_value) {
    throw ArgumentError(where, std::string(former_name) + " = " + std::to_string(former) + " and " + name + " = " +
                                   std::to_string(value) + " disagree: " + former_name + " is the former name of " +
                                   name + "; set one of them, or both to the same value");
  }
  value = former;
  return former_name;
}

}  // namespace ngramspec::detail
