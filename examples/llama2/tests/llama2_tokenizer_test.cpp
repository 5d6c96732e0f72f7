// The llama2.c tokenizer on the shared tok512.bin: known encodings, round trips, size checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "llama2_tokenizer.hpp"
#include "llama2_test_support.hpp"

namespace ngramspec::llama2 {
namespace {

std::filesystem::path tok512() { return test::models_dir() / "tok512.bin"; }

// A tokenizer.bin's contents, read apart from Tokenizer: the reference encoder's vocabulary.
struct Vocabulary {
  std::vector<std::string> pieces;
  std::vector<float> scores;
};

Vocabulary read_vocabulary(const std::filesystem::path& path, std::size_t vocab_size) {
  std::ifstream in(path, std::ios::binary);
  std::int32_t max_length = 0;
  in.read(reinterpret_cast<char*>(&max_length), sizeof max_length);
  Vocabulary v;
  for (std::size_t id = 0; id < vocab_size; ++id) {
    float score = 0;
    std::int32_t length = 0;
    in.read(reinterpret_cast<char*>(&score), sizeof score);
    in.read(reinterpret_cast<char*>(&length), sizeof length);
    std::string piece(static_cast<std::size_t>(length), '\0');
    in.read(piece.data(), length);
    v.pieces.push_back(piece);
    v.scores.push_back(score);
  }
  return v;
}

void write_vocabulary(const std::filesystem::path& path, const Vocabulary& v) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  std::int32_t max_length = 1;
  for (const std::string& p : v.pieces) max_length = std::max(max_length, static_cast<std::int32_t>(p.size()));
  out.write(reinterpret_cast<const char*>(&max_length), sizeof max_length);
  for (std::size_t id = 0; id < v.pieces.size(); ++id) {
    const auto length = static_cast<std::int32_t>(v.pieces[id].size());
    out.write(reinterpret_cast<const char*>(&v.scores[id]), sizeof(float));
    out.write(reinterpret_cast<const char*>(&length), sizeof length);
    out.write(v.pieces[id].data(), length);
  }
}

// The llama2.c encoder as written there: every round rescans all adjacent pairs and merges the one
// with the best score, the leftmost on ties. Quadratic; the reference the tokenizer must equal.
std::vector<Token> reference_encode(const Vocabulary& v, std::string_view text) {
  std::unordered_map<std::string, Token> ids;
  for (std::size_t id = 0; id < v.pieces.size(); ++id) ids.emplace(v.pieces[id], static_cast<Token>(id));
  const auto lookup = [&](const std::string& piece) -> int {
    const auto it = ids.find(piece);
    return it == ids.end() ? -1 : static_cast<int>(it->second);
  };
  std::vector<Token> tokens{kBos};
  if (text.empty()) return tokens;
  const std::string spaced = " " + std::string(text);
  for (std::size_t i = 0; i < spaced.size();) {
    std::size_t end = i + 1;
    while (end < spaced.size() && end - i < 4 && (static_cast<unsigned char>(spaced[end]) & 0xC0) == 0x80) ++end;
    const int id = lookup(spaced.substr(i, end - i));
    if (id >= 0) {
      tokens.push_back(static_cast<Token>(id));
    } else {
      for (std::size_t b = i; b < end; ++b) tokens.push_back(3 + static_cast<unsigned char>(spaced[b]));
    }
    i = end;
  }
  for (;;) {
    float best_score = 0;
    int best_id = -1;
    std::size_t best_at = 0;
    for (std::size_t i = 1; i + 1 < tokens.size(); ++i) {
      const int id = lookup(v.pieces[tokens[i]] + v.pieces[tokens[i + 1]]);
      if (id >= 0 && (best_id < 0 || v.scores[static_cast<std::size_t>(id)] > best_score)) {
        best_score = v.scores[static_cast<std::size_t>(id)];
        best_id = id;
        best_at = i;
      }
    }
    if (best_id < 0) break;
    tokens[best_at] = static_cast<Token>(best_id);
    tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
  }
  return tokens;
}

// <unk>, <s>, </s> and the byte-fallback tokens <0x00>..<0xFF> at ids 3..258, as llama2.c's files hold them.
Vocabulary special_and_byte_tokens() {
  Vocabulary v;
  for (const char* p : {"<unk>", "<s>", "</s>"}) {
    v.pieces.emplace_back(p);
    v.scores.push_back(0);
  }
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    v.pieces.emplace_back(hex);
    v.scores.push_back(0);
  }
  return v;
}

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

// The encoder equals the straightforward one (reference_encode) on random texts over tok512's own
// pieces, with spaces, punctuation and characters it lacks (byte fallback).
TEST(Llama2Tokenizer, EncodesAsTheRescanningMergeOnRandomTexts) {
  NGRAMSPEC_REQUIRE_MODELS();
  const Tokenizer tokenizer(tok512(), 512);
  const Vocabulary vocabulary = read_vocabulary(tok512(), 512);
  std::mt19937_64 rng(20261128);
  const std::vector<std::string> extra = {" ", "  ", ".", ",", "\n", "!", "\"", "\xC3\xA9", "\xE2\x98\x83",
                                          "\xF0\x9F\x98\x80", "\xFF", "\x80", "Q", "z", "7"};
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const std::size_t parts = rng() % 60;
    for (std::size_t p = 0; p < parts; ++p) {
      if (rng() % 4 == 0) {
        text += extra[rng() % extra.size()];
      } else {
        text += vocabulary.pieces[259 + rng() % (512 - 259)];
      }
    }
    ASSERT_EQ(tokenizer.encode(text), reference_encode(vocabulary, text)) << "text: '" << text << "'";
  }
}

// The same on random vocabularies over a small alphabet: many scores tie (the leftmost pair must
// merge first), some pieces repeat (the lowest id is the one used), some scores are infinite.
TEST(Llama2Tokenizer, EncodesAsTheRescanningMergeOnRandomVocabularies) {
  std::mt19937_64 rng(7);
  const std::string alphabet = " abc";
  const std::filesystem::path file = std::filesystem::path(::testing::TempDir()) / "llama2_random_vocabulary.bin";
  for (int vocabulary_trial = 0; vocabulary_trial < 40; ++vocabulary_trial) {
    Vocabulary v = special_and_byte_tokens();
    const std::size_t extra = 20 + rng() % 200;
    for (std::size_t i = 0; i < extra; ++i) {
      std::string piece;
      const std::size_t length = 1 + rng() % 5;
      for (std::size_t c = 0; c < length; ++c) piece += alphabet[rng() % alphabet.size()];
      v.pieces.push_back(piece);
      const std::size_t kind = rng() % 20;
      v.scores.push_back(kind == 0   ? -std::numeric_limits<float>::infinity()
                         : kind == 1 ? std::numeric_limits<float>::infinity()
                                     : static_cast<float>(rng() % 6) - 3.0f);  // few values: many ties
    }
    write_vocabulary(file, v);
    const Tokenizer tokenizer(file, v.pieces.size());
    for (int trial = 0; trial < 100; ++trial) {
      std::string text;
      const std::size_t length = rng() % 80;
      for (std::size_t c = 0; c < length; ++c) text += rng() % 30 == 0 ? 'x' : alphabet[rng() % alphabet.size()];
      ASSERT_EQ(tokenizer.encode(text), reference_encode(v, text))
          << "vocabulary " << vocabulary_trial << ", text: '" << text << "'";
    }
  }
}

// Merging orders pieces by score, which a NaN has no place in: such a file is refused, naming the token.
TEST(Llama2Tokenizer, RejectsANanScore) {
  Vocabulary v = special_and_byte_tokens();
  v.pieces.emplace_back("ab");
  v.scores.push_back(std::numeric_limits<float>::quiet_NaN());
  const std::filesystem::path file = std::filesystem::path(::testing::TempDir()) / "llama2_nan_score.bin";
  write_vocabulary(file, v);
  try {
    const Tokenizer tokenizer(file, v.pieces.size());
    FAIL() << "loaded a tokenizer with a NaN score";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("token 259 has a score that is not a number"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ngramspec::llama2
