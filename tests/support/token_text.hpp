#pragma once

#include <cstddef>
#include <span>
#include <sstream>
#include <string>

#include "ngramspec/token.hpp"

namespace ngramspec::test {

/// "[a b c]": tokens as a failure message shows them.
inline std::string tokens_string(std::span<const Token> tokens) {
  std::ostringstream text;
  text << "[";
  for (std::size_t i = 0; i < tokens.size(); ++i) text << (i == 0 ? "" : " ") << tokens[i];
  text << "]";
  return text.str();
}

}  // namespace ngramspec::test
