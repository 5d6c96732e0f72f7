#include <cstdint>
#include <cstdio>
#include <vector>

#include <ngramspec/ngramspec.hpp>

using ngramspec::Token;

// A toy greedy model that counts 0 .. 9, then goes on at 0 or at 5, which of the two hard to
// tell (a bit of a hash of how many 9s came before): after a 9 the text holds both
// continuations, and a chain bets on one of them.
struct TurnModel {
  std::vector<Token> cache;  // the KV cache: the tokens it holds
  static Token after(const std::vector<Token>& prefix) {
    std::size_t nines = 0;
    for (const Token t : prefix) nines += t == 9 ? 1 : 0;
    std::uint64_t h = nines * 0x9e3779b97f4a7c15ULL;
    h = (h ^ (h >> 29)) * 0xbf58476d1ce4e5b9ULL;
    const bool restart = ((h ^ (h >> 32)) & 1U) != 0;
    return prefix.back() != 9 ? prefix.back() + 1 : (restart ? 0 : 5);
  }
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) {
    cache.resize(pos);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      cache.push_back(tokens[i]);
      next[i] = after(cache);
    }
  }
  // A tree pass: token i follows its parent (kTreeRoot: the cache), and sees only its path.
  void forward_tree(std::size_t pos, std::span<const Token> tokens, std::span<const std::int32_t> parents,
                    std::span<Token> next) {
    cache.resize(pos);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::vector<Token> path;
      for (auto at = static_cast<std::int32_t>(i); at != ngramspec::kTreeRoot; at = parents[at]) {
        path.insert(path.begin(), tokens[at]);
      }
      std::vector<Token> prefix = cache;
      prefix.insert(prefix.end(), path.begin(), path.end());
      next[i] = after(prefix);
    }
    cache.insert(cache.end(), tokens.begin(), tokens.end());  // entry pos + i holds token i
  }
  // Keeps the accepted path's entries, in order, and drops the rest.
  void keep(std::size_t pos, std::span<const std::size_t> kept) {
    for (std::size_t j = 0; j < kept.size(); ++j) cache[pos + j] = cache[pos + kept[j]];
    cache.resize(pos + kept.size());
  }
  void rollback(std::size_t pos) { cache.resize(pos); }
  std::size_t max_batch() const { return 65; }
};

int main() {
  const std::vector<Token> prompt = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 5};
  ngramspec::DecodeOptions options;
  options.max_new_tokens = 200;
  options.max_drafts = 64;  // trees: nodes a pass; chains: drafts a pass

  TurnModel chain_model;
  ngramspec::SpeculativeDecoder chains(chain_model);  // MatchDrafter: chains
  const ngramspec::DecodeResult chain = chains.generate(prompt, options);

  TurnModel tree_model;
  ngramspec::SpeculativeDecoder trees(tree_model, ngramspec::TreeDrafter());  // trees: both turns at once
  const ngramspec::DecodeResult tree = trees.generate(prompt, options);

  std::printf("chains: %zu tokens in %zu passes\n", chain.tokens.size(), chain.stats.decode_passes + 1);
  std::printf("trees:  %zu tokens in %zu passes, same tokens: %s\n", tree.tokens.size(),
              tree.stats.decode_passes + 1, tree.tokens == chain.tokens ? "yes" : "no");
}
