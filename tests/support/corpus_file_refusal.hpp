#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <functional>

#include "ngramspec/corpus_file.hpp"

namespace ngramspec::test {

/// The CorpusFileError that `f` throws (a test failure, and an error naming no file, when it
/// throws nothing or something else).
inline CorpusFileError refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const CorpusFileError& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw something other than CorpusFileError: " << e.what();
    return CorpusFileError("", "?", "");
  }
  ADD_FAILURE() << "did not throw";
  return CorpusFileError("", "?", "");
}

}  // namespace ngramspec::test
