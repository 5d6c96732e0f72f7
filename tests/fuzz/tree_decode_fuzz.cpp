// Fuzz target: tree-verified decoding (SpeculativeDecoder over a TreeTargetModel) against plain
// greedy decoding.
//
// The input decodes into a greedy model (a table, hash, copying or induction rule over a small
// vocabulary, any max_batch), a prompt, DecodeOptions (stop tokens, max_new_tokens, max_context,
// the node budget), an optional verify cost, and a tree drafter: TreeDrafter with settings from
// the input (recycled top-k or not, max_children, carry_over, enrich_counts), or one whose trees
// come straight from the bytes — any shape, siblings that repeat a token, the model's true token
// here and there, nodes it never emits. Invariants: the output is plain greedy decoding's, twice
// in a row (the second starts from what carry_over kept), the model contract holds on every call
// (GreedyModel checks forward_tree, keep and rollback, and that no pass reaches position
// max_context - 1), the model ends holding exactly the prompt and the kept output, and the
// stats add up.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "fuzz_input.hpp"
#include "fuzz_rules.hpp"
#include "ngramspec/draft_tree.hpp"
#include "ngramspec/speculative_decoder.hpp"
#include "ngramspec/tree_drafter.hpp"
#include "ngramspec/verify_cost.hpp"
#include "support/mock_models.hpp"
#include "support/test_drafters.hpp"

namespace ngramspec::test {
namespace {

/// Trees straight from the fuzzer's bytes: for each node, its parent among the nodes so far
/// and its token (the model's true token after the parent's path, an in-vocabulary guess, or a
/// token the model never emits).
class ByteTreeDrafter : public ObservedSequence {
 public:
  ByteTreeDrafter(std::vector<std::uint8_t> script, NextTokenRule rule, Token vocab)
      : script_(std::move(script)), rule_(std::move(rule)), vocab_(vocab) {}

  [[nodiscard]] std::size_t predict(std::span<Token>) const noexcept { return 0; }
  std::size_t predict_tree(DraftTree& tree, std::size_t max_nodes, std::size_t max_depth, float) {
    tree.clear();
    if (script_.empty() || seen().empty()) return 0;
    const std::size_t n = std::min<std::size_t>(script_.next() % 24, std::min(max_nodes, tree.capacity()));
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint8_t b = script_.next();
      auto parent = static_cast<std::int32_t>(script_.next() % (i + 1)) - 1;
      if (parent != kTreeRoot && tree.depths()[static_cast<std::size_t>(parent)] + 1 >= max_depth) parent = kTreeRoot;
      if (max_depth == 0) break;
      Token t = static_cast<Token>(b % vocab_);
      if ((b & 0x80) != 0) {
        path_.assign(seen().begin(), seen().end());
        const std::size_t at = path_.size();
        for (std::int32_t up = parent; up != kTreeRoot; up = tree.parents()[static_cast<std::size_t>(up)]) {
          path_.insert(path_.begin() + static_cast<std::ptrdiff_t>(at), tree.tokens()[static_cast<std::size_t>(up)]);
        }
        t = rule_(std::span<const Token>(path_));
      } else if ((b & 0x40) != 0) {
        t = kForeignToken + (b & 0x3F);
      }
      tree.add(parent, t, 0.5f);
    }
    return tree.size();
  }
  void observe_pass(const DraftTree&, std::span<const Token>, std::span<const Token>, std::span<const std::size_t>,
                    std::span<const Token>) noexcept {}
  [[nodiscard]] const TopKTable* top_k_table() const noexcept { return nullptr; }

 private:
  ByteScript script_;
  NextTokenRule rule_;
  Token vocab_;
  std::vector<Token> path_;
};

void check(const GreedyModel& model, const DecodeResult& result, std::span<const Token> prompt,
           const NextTokenRule& rule, const DecodeOptions& options) {
  if (!model.violations().empty()) {
    std::fprintf(stderr, "%s\n", model.violations().front().c_str());
    fuzz_fail("the decoder broke the tree model contract");
  }
  const GreedyReference reference = plain_greedy(rule, prompt, options);
  if (result.tokens != reference.tokens) fuzz_fail("tree decoding's output is not plain greedy decoding's");
  if (result.stop_reason != reference.stop_reason) fuzz_fail("tree decoding stopped for another reason");
  if (result.stats.generated != result.tokens.size()) fuzz_fail("stats.generated != output size");
  if (result.stats.accepted > result.stats.drafted) fuzz_fail("stats.accepted > stats.drafted");
  if (!result.tokens.empty()) {
    std::vector<Token> kept(prompt.begin(), prompt.end());
    kept.insert(kept.end(), result.tokens.begin(), result.tokens.end() - 1);
    if (model.history() != kept) fuzz_fail("the model does not hold exactly the prompt and the kept output");
  }
}

template <class D>
void decode_twice(GreedyModel& model, D drafter, const std::vector<Token>& prompt, const DecodeOptions& options,
                  const NextTokenRule& rule, std::size_t knee) {
  SpeculativeDecoder decoder(model, std::move(drafter));
  if (knee != 0) decoder.set_verify_cost(VerifyCost::knee(knee));
  for (int request = 0; request < 2; ++request) {
    const DecodeResult result = decoder.generate(prompt, options);
    check(model, result, prompt, rule, options);
  }
}

void run(FuzzInput& in) {
  const Token vocab = static_cast<Token>(in.in_range(2, 16));
  const NextTokenRule rule = fuzz_rule(in, vocab);
  static constexpr std::size_t kBatches[] = {1, 2, 3, 5, 9, 17, 65};
  GreedyModel model(rule, kBatches[in.byte() % std::size(kBatches)]);
  model.set_top_vocabulary(vocab);

  std::vector<Token> prompt(in.in_range(1, 32));
  for (Token& t : prompt) t = static_cast<Token>(in.byte() % vocab);
  DecodeOptions options;
  options.max_new_tokens = in.in_range(0, 64);
  for (std::size_t n = in.in_range(0, 2); n > 0; --n) options.stop_tokens.push_back(static_cast<Token>(in.byte() % vocab));
  if (in.flag()) options.max_context = prompt.size() + in.in_range(0, 48);
  options.max_drafts = in.in_range(1, 96);
  model.set_max_positions(kv_positions(options));  // a tree pass too ends where a chain's would
  const std::size_t knee = in.flag() ? in.in_range(1, 32) : 0;

  if (in.flag()) {
    const std::vector<std::uint8_t> script(in.rest().begin(), in.rest().end());
    decode_twice(model, ByteTreeDrafter(script, rule, vocab), prompt, options, rule, knee);
    return;
  }
  TreeConfig config;
  config.vocab_size = in.flag() ? vocab : 0;
  config.top_k = in.in_range(1, 8);
  config.max_children = in.in_range(1, 16);
  config.successor_slots = std::size_t{1} << in.in_range(0, 10);
  config.carry_over = in.flag();
  config.enrich_counts = config.vocab_size != 0 && in.flag();
  config.chain.min_confidence = in.flag() ? 0.0 : 0.03;
  decode_twice(model, TreeDrafter(config), prompt, options, rule, knee);
}

}  // namespace
}  // namespace ngramspec::test

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ngramspec::test::FuzzInput in(data, size);
  ngramspec::test::run(in);
  return 0;
}
