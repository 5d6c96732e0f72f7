// The llama2.c tokenizer on the shared tok512.bin: known encodings, round trips, size checks.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "llama2_tokenizer.hpp"
#include "llama2_test_support.hpp"

namespace ngramspec::llama2 {
namespace {

std::filesystem::path tok512() { return test::models_dir() / "tok512.bin"; }

TEST(Llama2Tokenizer, EncodesLikeLlama2c) {
  NGRAMSPEC_REQUIRE_MODELS();
  const Tokenizer tokenizer(tok512(), 512);
  EXPECT_EQ(tokenizer.encode("Once upon a time"), (std::vector<Token>{1, 403, 407, 261, 378}));
  EXPECT_EQ(tokenizer.encode(""), (std::vector<Token>{kBos}));
  EXPECT_EQ(tokenizer.piece(259), " t");
  EXPECT_EQ(tokenizer.piece(260), "he");
  EXPECT_EQ(tokenizer.piece(261), " a");
  // The golden story starts with the same four ids as the encoded prompt.
  const std::vector<Token> golden = test::read_ids(test::models_dir() / "stories260K_greedy256.ids");
  ASSERT_GE(golden.size(), 4u);
  EXPECT_EQ(std::vector<Token>(golden.begin(), golden.begin() + 4), (std::vector<Token>{403, 407, 261, 378}));
}

// Decoding an encoding gives the text back, including characters the vocabulary lacks (byte fallback).
TEST(Llama2Tokenizer, DecodeInvertsEncode) {
  NGRAMSPEC_REQUIRE_MODELS();
  const Tokenizer tokenizer(tok512(), 512);
  for (const std::string text : {"Once upon a time", "Lily said, \"Hello!\"\nTom laughed.", "  two  spaces",
                                 "caf\xC3\xA9 \xE2\x98\x83 \xF0\x9F\x98\x80", "x", "{}[]<>|~`^", "123 456"}) {
    SCOPED_TRACE(text);
    const std::vector<Token> ids = tokenizer.encode(text);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], kBos);
    for (std::size_t i = 1; i < ids.size(); ++i) EXPECT_NE(ids[i], kBos);
    EXPECT_EQ(tokenizer.decode(std::span<const Token>(ids).subspan(1)), text);
  }
  // A character the vocabulary lacks becomes its UTF-8 bytes, id = byte + 3.
  const std::vector<Token> snowman = tokenizer.encode("\xE2\x98\x83");
  EXPECT_NE(std::find(snowman.begin(), snowman.end(), Token{0xE2 + 3}), snowman.end());
}

// Merging picks the best-scoring pair each time: no adjacent pair of the result forms a known piece.
TEST(Llama2Tokenizer, MergesUntilNoPairIsAPiece) {
  NGRAMSPEC_REQUIRE_MODELS();
  const Tokenizer tokenizer(tok512(), 512);
  std::vector<std::string> known;
  for (Token id = 0; id < 512; ++id) known.push_back(tokenizer.piece(id));
  const std::vector<Token> ids = tokenizer.encode("The little dog and the big cat played together in the garden.");
  for (std::size_t i = 1; i + 1 < ids.size(); ++i) {
    const std::string pair = tokenizer.piece(ids[i]) + tokenizer.piece(ids[i + 1]);
    EXPECT_EQ(std::find(known.begin(), known.end(), pair), known.end()) << "pair at " << i << ": '" << pair << "'";
  }
}

TEST(Llama2Tokenizer, RejectsAVocabularySizeThatDisagreesWithTheModel) {
  NGRAMSPEC_REQUIRE_MODELS();
  const auto error = [](std::size_t vocab) -> std::string {
    try {
      const Tokenizer tokenizer(tok512(), vocab);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(loaded)";
  };
  EXPECT_NE(error(511).find("more tokens than the model's vocabulary of 511"), std::string::npos) << error(511);
  EXPECT_NE(error(32000).find("ends after 512 tokens"), std::string::npos) << error(32000);
  EXPECT_THROW(Tokenizer(test::models_dir() / "no-such-tokenizer.bin", 512), std::runtime_error);
}

TEST(Llama2Tokenizer, RejectsATruncatedFile) {
  NGRAMSPEC_REQUIRE_MODELS();
  std::ifstream in(tok512(), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::filesystem::path cut = std::filesystem::path(::testing::TempDir()) / "llama2_tok_cut.bin";
  std::ofstream(cut, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 2));
  try {
    const Tokenizer tokenizer(cut, 512);
    FAIL() << "a truncated tokenizer loaded";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("ends inside token 511"), std::string::npos) << e.what();
  }
}

// A token length field larger than what is left of the file is refused before anything is
// allocated for the piece (a 12-byte file once asked for 2 GiB).
TEST(Llama2Tokenizer, RejectsALengthLongerThanTheFileBeforeAllocating) {
  const std::filesystem::path file = std::filesystem::path(::testing::TempDir()) / "llama2_huge_length.bin";
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    const std::int32_t max_length = 0x7fffffff;
    const float score = 0.0f;
    const std::int32_t length = 0x7fffffff;
    out.write(reinterpret_cast<const char*>(&max_length), sizeof max_length);
    out.write(reinterpret_cast<const char*>(&score), sizeof score);
    out.write(reinterpret_cast<const char*>(&length), sizeof length);
  }
  // Peak resident memory in KiB (VmHWM): filling a 2 GiB piece before noticing would raise it.
  const auto peak_kib = [] {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6));
    }
    return 0ULL;
  };
  const unsigned long long before = peak_kib();
  try {
    const Tokenizer tokenizer(file, 1);
    FAIL() << "loaded a truncated tokenizer";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("ends inside token 0"), std::string::npos) << e.what();
  }
  EXPECT_LT(peak_kib(), before + 256 * 1024) << "the tokenizer allocated for a length the file cannot hold";
}

}  // namespace
}  // namespace ngramspec::llama2
