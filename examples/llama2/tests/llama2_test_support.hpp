#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <ngramspec/token.hpp>

namespace ngramspec::test {

/// The shared models folder, as the build configured it.
inline std::filesystem::path models_dir() { return NGRAMSPEC_LLAMA2_MODELS_DIR; }

/// Empty when every file is in models_dir(); otherwise why the test must be skipped.
inline std::string missing_models() {
  for (const char* name : {"stories260K.bin", "tok512.bin", "stories260K_greedy256.ids"}) {
    if (!std::filesystem::exists(models_dir() / name)) {
      return (models_dir() / name).string() + " is absent (set NGRAMSPEC_SHARED_DIR to the folder holding models/)";
    }
  }
  return {};
}

/// Skips the calling test, saying which file is missing, unless the shared models are there.
#define NGRAMSPEC_REQUIRE_MODELS()                                      \
  do {                                                                  \
    if (const std::string why = ::ngramspec::test::missing_models(); !why.empty()) GTEST_SKIP() << why; \
  } while (false)

inline std::vector<Token> read_ids(const std::filesystem::path& path) {
  std::ifstream file(path);
  std::vector<Token> ids;
  Token id = 0;
  while (file >> id) ids.push_back(id);
  return ids;
}

}  // namespace ngramspec::test
