#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <ngramspec/token.hpp>

namespace ngramspec::llama2 {

/// Id of the beginning-of-sequence token in llama2.c vocabularies.
inline constexpr Token kBos = 1;
/// Id of the end-of-sequence token in llama2.c vocabularies.
inline constexpr Token kEos = 2;

/// The llama2.c tokenizer (tokenizer.bin format): byte-pair encoding by merge score, byte fallback.
///
/// The file holds an int32 max_token_length and then, for each of vocab_size tokens, a float32 merge
/// score, an int32 length and that many raw bytes. The vocabulary size is not stored; it comes from
/// the model, and a file with fewer or more tokens than that is rejected.
class Tokenizer {
 public:
  /// Reads `path` for a vocabulary of `vocab_size` tokens. Throws std::runtime_error when the file
  /// cannot be opened, std::invalid_argument when it does not hold exactly vocab_size tokens or a
  /// score is NaN.
  Tokenizer(const std::filesystem::path& path, std::size_t vocab_size);

  /// BOS, then `text` with a leading space (if not empty), split into UTF-8 characters (bytes without
  /// a token of their own become byte-fallback tokens <0xHH>), then merged pair by pair, always the
  /// adjacent pair whose merged piece has the highest score (the leftmost on ties). O(n log n) in the
  /// text's length n.
  [[nodiscard]] std::vector<Token> encode(std::string_view text) const;
  /// The text of `tokens` as they follow `previous`: byte-fallback tokens become their byte, and the
  /// leading space of the piece after BOS is dropped.
  [[nodiscard]] std::string decode(std::span<const Token> tokens, Token previous = kBos) const;

  [[nodiscard]] std::size_t vocab_size() const noexcept { return pieces_.size(); }
  [[nodiscard]] const std::string& piece(Token token) const { return pieces_.at(token); }

 private:
  [[nodiscard]] int lookup(std::string_view piece) const;

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, Token> ids_;  // piece -> lowest id with that piece
  Token byte_base_ = 3;                         // id of <0x00>
};

}  // namespace ngramspec::llama2
