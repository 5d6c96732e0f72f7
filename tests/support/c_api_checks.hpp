#pragma once

// Checks of C ABI calls for the tests: the status and the pieces of the thread's last error.

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "ngramspec/ngramspec.h"

namespace ngramspec::test {

/// `status` is `expected`, and the calling thread's last error contains every piece.
inline ::testing::AssertionResult fails_with(ngramspec_status status, ngramspec_status expected,
                                             std::initializer_list<std::string> pieces) {
  const std::string message = ngramspec_last_error();
  if (status != expected) {
    return ::testing::AssertionFailure() << "status " << ngramspec_status_name(status) << ", expected "
                                         << ngramspec_status_name(expected) << " (last error: \"" << message << "\")";
  }
  for (const std::string& piece : pieces) {
    if (message.find(piece) == std::string::npos) {
      return ::testing::AssertionFailure() << "the last error \"" << message << "\" does not contain \"" << piece
                                           << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace ngramspec::test

#define EXPECT_INVALID(call, ...) \
  EXPECT_TRUE(::ngramspec::test::fails_with((call), NGRAMSPEC_ERROR_INVALID_ARGUMENT, {__VA_ARGS__}))
#define EXPECT_C_OK(call) EXPECT_EQ((call), NGRAMSPEC_OK) << ngramspec_last_error()
#define ASSERT_C_OK(call) ASSERT_EQ((call), NGRAMSPEC_OK) << ngramspec_last_error()
