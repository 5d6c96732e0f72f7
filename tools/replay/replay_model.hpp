#pragma once

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ngramspec/token.hpp"
#include "token_streams.hpp"

namespace ngramspec::replay {

/// A TargetModel that answers from a recorded greedy generation.
///
/// While the tokens it holds equal the recording (prompt then output), its token after
/// position p is the recorded token at p + 1: exactly what the real model answered, since
/// greedy decoding is a function of the prefix. After a token that departs from the
/// recording (a rejected draft) the real answer is unknown, and it answers kUnknown, which
/// the decoder must never emit; the replay checks that the output equals the recording.
class ReplayModel {
 public:
  /// Answer at positions whose prefix departs from the recording.
  static constexpr Token kUnknown = 0xFFFFFFFFu;

  explicit ReplayModel(const TokenStream& stream, std::size_t max_batch = std::size_t{1} << 16)
      : max_batch_(max_batch) {
    sequence_.reserve(stream.prompt.size() + stream.output.size());
    sequence_.insert(sequence_.end(), stream.prompt.begin(), stream.prompt.end());
    sequence_.insert(sequence_.end(), stream.output.begin(), stream.output.end());
  }

  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) {
    if (pos != length_) {
      throw std::logic_error("ReplayModel: forward at position " + std::to_string(pos) + " but the model holds " +
                             std::to_string(length_) + " tokens");
    }
    if (tokens.empty() || tokens.size() > max_batch_ || next.size() != tokens.size()) {
      throw std::logic_error("ReplayModel: forward of " + std::to_string(tokens.size()) + " tokens into " +
                             std::to_string(next.size()) + " outputs (max_batch " + std::to_string(max_batch_) + ")");
    }
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const std::size_t p = pos + i;
      if (matched_ == p && p < sequence_.size() && tokens[i] == sequence_[p]) ++matched_;
      next[i] = (matched_ == p + 1 && p + 1 < sequence_.size()) ? sequence_[p + 1] : kUnknown;
    }
    length_ += tokens.size();
    ++forwards_;
  }

  void rollback(std::size_t pos) {
    if (pos > length_) {
      throw std::logic_error("ReplayModel: rollback to " + std::to_string(pos) + " beyond the " +
                             std::to_string(length_) + " tokens held");
    }
    length_ = pos;
    if (matched_ > pos) matched_ = pos;
  }

  [[nodiscard]] std::size_t max_batch() const noexcept { return max_batch_; }
  /// forward() calls so far.
  [[nodiscard]] std::size_t forwards() const noexcept { return forwards_; }

 private:
  std::vector<Token> sequence_;
  std::size_t max_batch_;
  std::size_t length_ = 0;   // tokens held
  std::size_t matched_ = 0;  // leading tokens held that equal the recording
  std::size_t forwards_ = 0;
};

}  // namespace ngramspec::replay
