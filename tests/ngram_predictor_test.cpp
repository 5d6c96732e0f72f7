#include <gtest/gtest.h>
#include "ngramspec/ngramspec.hpp"
using namespace ngramspec;
TEST(Smoke, Example) {
  // the cat sat on the mat . the cat sat
  NGramPredictor p;
  std::vector<Token> s{1,2,3,4,1,5,6,1,2,3};
  p.update(s);
  std::array<Token,4> out{};
  auto n = p.predict(out);
  ASSERT_EQ(n, 4u);
  EXPECT_EQ(out, (std::array<Token,4>{4,1,5,6}));
}
namespace {
struct Periodic {
  std::size_t len = 0; std::size_t period = 7;
  Token at(std::size_t p) const { return static_cast<Token>((p * 31 + 5) % period); }
  void forward(std::size_t pos, std::span<const Token> t, std::span<Token> next) {
    EXPECT_EQ(pos, len);
    for (std::size_t i = 0; i < t.size(); ++i) next[i] = static_cast<Token>((t[i] * 3 + 1) % period);
    len += t.size();
  }
  void rollback(std::size_t pos) { EXPECT_LE(pos, len); len = pos; }
  std::size_t max_batch() const { return 8; }
};
}
TEST(Smoke, Decoder) {
  Periodic m;
  SpeculativeDecoder dec(m);
  std::vector<Token> prompt{1, 2, 3};
  DecodeOptions o; o.max_new_tokens = 50;
  auto r = dec.generate(prompt, o);
  o.speculate = false;
  auto plain = dec.generate(prompt, o);
  EXPECT_EQ(r.tokens, plain.tokens);
  EXPECT_EQ(r.tokens.size(), 50u);
  std::printf("AL %.3f plain %.3f passes %zu\n", r.stats.mean_accepted_length(), plain.stats.mean_accepted_length(), r.stats.decode_passes);
}
