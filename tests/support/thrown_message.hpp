#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <stdexcept>
#include <string>

namespace ngramspec::test {

/// The message of the exception `f` throws, which must be an E; "" (and a test failure) otherwise.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

/// The message of the std::invalid_argument that `f` throws ("" and a test failure otherwise).
template <class F>
std::string invalid_argument_message(F&& f) {
  return message_of<std::invalid_argument>(static_cast<F&&>(f));
}

}  // namespace ngramspec::test
