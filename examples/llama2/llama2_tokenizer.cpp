#include "llama2_tokenizer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace ngramspec::llama2 {

Tokenizer::Tokenizer(const std::filesystem::path& path, std::size_t vocab_size) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("llama2: cannot open tokenizer '" + path.string() + "'");
  const auto bad = [&](const std::string& what) {
    return std::invalid_argument("llama2: tokenizer '" + path.string() + "' " + what);
  };
  // The file's size bounds every length field, so a corrupt one cannot make us allocate more.
  file.seekg(0, std::ios::end);
  const auto file_bytes = static_cast<std::uint64_t>(file.tellg());
  file.seekg(0, std::ios::beg);
  std::int32_t max_token_length = 0;
  if (!file.read(reinterpret_cast<char*>(&max_token_length), sizeof max_token_length) || max_token_length <= 0) {
    throw bad("has no valid max_token_length header");
  }
  // Each token takes at least 8 bytes of the file, which bounds the reservation too.
  const auto expected_tokens = static_cast<std::size_t>(std::min<std::uint64_t>(vocab_size, file_bytes / 8));
  pieces_.reserve(expected_tokens);
  scores_.reserve(expected_tokens);
  for (std::size_t id = 0; id < vocab_size; ++id) {
    float score = 0.0f;
    std::int32_t length = 0;
    file.read(reinterpret_cast<char*>(&score), sizeof score);
    file.read(reinterpret_cast<char*>(&length), sizeof length);
    if (!file) {
      throw bad("ends after " + std::to_string(id) + " tokens, but the model's vocabulary has " +
                std::to_string(vocab_size));
    }
    // Merging orders pieces by score: a NaN has no place in that order.
    if (std::isnan(score)) throw bad("token " + std::to_string(id) + " has a score that is not a number (NaN)");
    if (length < 0 || length > max_token_length) {
      throw bad("token " + std::to_string(id) + " has length " + std::to_string(length) + ", outside 0.." +
                std::to_string(max_token_length));
    }
    if (static_cast<std::uint64_t>(length) > file_bytes - static_cast<std::uint64_t>(file.tellg())) {
      throw bad("ends inside token " + std::to_string(id) + ", but the model's vocabulary has " +
                std::to_string(vocab_size));
    }
    std::string piece(static_cast<std::size_t>(length), '\0');
    if (!file.read(piece.data(), length)) {
      throw bad("ends inside token " + std::to_string(id) + ", but the model's vocabulary has " +
                std::to_string(vocab_size));
    }
    ids_.emplace(piece, static_cast<Token>(id));  // keeps the first id of a repeated piece
    pieces_.push_back(std::move(piece));
    scores_.push_back(score);
  }
  if (file.peek() != std::ifstream::traits_type::eof()) {
    throw bad("holds more tokens than the model's vocabulary of " + std::to_string(vocab_size));
  }
  // Byte fallback needs <0x00>..<0xFF> at consecutive ids; llama2.c vocabularies put them at 3..258.
  if (vocab_size < 259 || pieces_[3] != "<0x00>" || pieces_[258] != "<0xFF>") {
    throw bad("lacks the byte-fallback tokens <0x00>..<0xFF> at ids 3..258");
  }
}

int Tokenizer::lookup(std::string_view piece) const {
  const auto it = ids_.find(std::string(piece));
  return it == ids_.end() ? -1 : static_cast<int>(it->second);
}

std::vector<Token> Tokenizer::encode(std::string_view text) const {
  std::vector<Token> tokens{kBos};
  if (text.empty()) return tokens;
  // The dummy prefix: SentencePiece-trained vocabularies expect words to start with a space.
  std::string spaced(1, ' ');
  spaced.append(text);
  for (std::size_t i = 0; i < spaced.size();) {
    // A UTF-8 character: the lead byte and up to three continuation bytes (10xxxxxx).
    std::size_t end = i + 1;
    while (end < spaced.size() && end - i < 4 && (static_cast<unsigned char>(spaced[end]) & 0xC0) == 0x80) ++end;
    const int id = lookup(std::string_view(spaced).substr(i, end - i));
    if (id >= 0) {
      tokens.push_back(static_cast<Token>(id));
    } else {
      for (std::size_t b = i; b < end; ++b) tokens.push_back(byte_base_ + static_cast<unsigned char>(spaced[b]));
    }
    i = end;
  }
  // Merge the best-scoring adjacent pair until no adjacent pair forms a known piece, the leftmost of the best on
  // ties. Every adjacent pair that forms a piece waits in a heap keyed by (score, position); a merge links its two
  // symbols into one (a doubly linked list over the symbols, so nothing shifts) and offers the two new pairs it
  // makes. An entry whose pair has since changed is stale and skipped when it comes up: the pair it names is
  // checked against the list. O(n log n) in the text's length, where rescanning every pair each round is O(n^2).
  const std::size_t first = 1;  // never merge across BOS
  const std::size_t end = tokens.size();
  if (end - first < 2) return tokens;
  constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::vector<std::size_t> next(end);
  std::vector<std::size_t> prev(end);
  for (std::size_t i = first; i < end; ++i) {
    next[i] = i + 1 < end ? i + 1 : kNone;
    prev[i] = i > first ? i - 1 : kNone;
  }
  struct Candidate {
    float score;
    std::size_t left;   // the pair's symbols; `left` is also its position (symbols never move)
    std::size_t right;
    Token left_token;   // what the two held when the pair was offered
    Token right_token;
    Token merged;
  };
  // The heap's top is the highest score, the leftmost on ties.
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::vector<Candidate> heap;
  heap.reserve(end);
  std::string merged;
  const auto offer = [&](std::size_t left) {
    if (left == kNone || next[left] == kNone) return;
    const std::size_t right = next[left];
    merged = pieces_[tokens[left]];
    merged += pieces_[tokens[right]];
    const int id = lookup(merged);
    if (id < 0) return;
    heap.push_back({scores_[static_cast<std::size_t>(id)], left, right, tokens[left], tokens[right],
                    static_cast<Token>(id)});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (std::size_t i = first; i + 1 < end; ++i) offer(i);
  std::vector<bool> merged_away(end, false);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate c = heap.back();
    heap.pop_back();
    if (merged_away[c.left] || next[c.left] != c.right || tokens[c.left] != c.left_token ||
        tokens[c.right] != c.right_token) {
      continue;  // stale: a merge since has changed this pair
    }
    tokens[c.left] = c.merged;
    merged_away[c.right] = true;
    next[c.left] = next[c.right];
    if (next[c.right] != kNone) prev[next[c.right]] = c.left;
    offer(prev[c.left]);
    offer(c.left);
  }
  std::size_t kept = first;
  for (std::size_t i = first; i != kNone; i = next[i]) tokens[kept++] = tokens[i];
  tokens.resize(kept);
  return tokens;
}

std::string Tokenizer::decode(std::span<const Token> tokens, Token previous) const {
  std::string text;
  for (const Token token : tokens) {
    const std::string& piece = pieces_.at(token);
    std::size_t skip = 0;
    if (previous == kBos && !piece.empty() && piece[0] == ' ') skip = 1;
    if (token >= byte_base_ && token < byte_base_ + 256) {
      text += static_cast<char>(token - byte_base_);
    } else {
      text.append(piece, skip);
    }
    previous = token;
  }
  return text;
}

}  // namespace ngramspec::llama2
