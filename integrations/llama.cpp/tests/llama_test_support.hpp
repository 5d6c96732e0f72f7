#pragma once
// What the llama.cpp tests on stories260K share: the model from the shared folder beside the
// project (skipped, saying so, without it), prompts in its words, and the program as a user runs it.
// Needs NGRAMSPEC_SHARED_DIR and NGRAMSPEC_LLAMA_PROGRAM defined by the build.

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <sys/wait.h>

#include <ngramspec/token.hpp>

#include "llama_engine.hpp"

namespace ngramspec::llama_cpp::testing {

inline const std::string kShared = NGRAMSPEC_SHARED_DIR;
inline const std::string kModel = kShared + "/models/stories260K.gguf";

#define REQUIRE_MODEL()                                                                                      \
  do {                                                                                                       \
    if (!std::filesystem::exists(::ngramspec::llama_cpp::testing::kModel)) {                                 \
      GTEST_SKIP() << ::ngramspec::llama_cpp::testing::kModel << " not found (the shared folder is not beside the project)"; \
    }                                                                                                        \
  } while (0)

// Prompts whose stories repeat names and phrases, so drafts get accepted, and a few that do not.
inline const std::vector<std::string> kPrompts = {
    "Once upon a time",
    "Lily and Ben went to the park. Lily and Ben",
    "The cat sat on the mat. The cat sat on the",
    "One day, a little girl named Sue",
    "Tom had a big red ball. Tom liked his ball. Tom",
    "The sun was hot",
    "Mom said, \"Let's go home.\" Mom said,",
    "x",
};

inline std::vector<std::vector<Token>> tokenized(const Engine& engine, const std::vector<std::string>& texts) {
  std::vector<std::vector<Token>> out;
  for (const std::string& t : texts) out.push_back(engine.tokenize(t, true));
  return out;
}

// ngramspec-llama with `args`, its standard output and error together; `status` its exit status
// (-1 when it did not exit).
inline std::string run_program(const std::string& args, int& status) {
  const std::string command = std::string(NGRAMSPEC_LLAMA_PROGRAM) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  while (pipe != nullptr && std::fgets(buf.data(), buf.size(), pipe) != nullptr) out += buf.data();
  status = pipe == nullptr ? -1 : pclose(pipe);
  status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

}  // namespace ngramspec::llama_cpp::testing
