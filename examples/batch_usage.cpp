#include <cstdio>
#include <map>
#include <vector>

#include <ngramspec/ngramspec.hpp>

using ngramspec::SequenceId;
using ngramspec::Token;

// A toy greedy model: each sequence counts 0, 1, ..., 9, 0, ...; a real engine runs its network.
Token model_after(Token t) { return (t + 1) % 10; }

int main() {
  ngramspec::BatchConfig config;
  config.max_sequences = 8;                                // one pooled drafter per running sequence
  config.cost = ngramspec::VerifyCost::parse("knee:64");  // a pass of up to 64 tokens costs what 1 does
  ngramspec::BatchSpeculator<> spec(config);               // MatchDrafters; the cost sizes drafts
  std::vector<SequenceId> ids = {7, 8, 9};
  std::map<SequenceId, Token> last;  // each sequence's last token: the model's next input
  for (const SequenceId id : ids) {
    ngramspec::DecodeOptions options;
    options.max_new_tokens = 20 * id;
    options.max_drafts = 16;
    spec.begin(id, {0, 1, 2, 3, 4, 5, 6, 7, 8, Token(id)}, options);  // the drafter reads the prompt
    last[id] = Token(id);  // the prefill feeds the prompt; its last token stands in here
  }
  std::vector<Token> drafts(16 * ids.size()), model_tokens;
  std::vector<std::size_t> offsets(ids.size() + 1), model_offsets(ids.size() + 1);
  std::vector<ngramspec::StepOutcome> steps(ids.size());
  std::size_t passes = 0, emitted = 0;
  for (; !ids.empty(); ++passes) {
    offsets.resize(ids.size() + 1);
    model_offsets.resize(ids.size() + 1);
    spec.propose(ids, drafts, offsets);  // ids[i]'s drafts: drafts[offsets[i] .. offsets[i + 1])
    model_tokens.clear();
    for (std::size_t i = 0; i < ids.size(); ++i) {  // one batched forward of [last token, drafts...]
      Token fed = last[ids[i]];
      for (std::size_t j = offsets[i]; j <= offsets[i + 1]; ++j) {
        model_tokens.push_back(model_after(fed));
        if (j < offsets[i + 1]) fed = drafts[j];
      }
      model_offsets[i + 1] = model_tokens.size();
    }
    spec.accept(ids, model_tokens, model_offsets, steps);
    std::vector<SequenceId> still;
    for (std::size_t i = 0; i < ids.size(); ++i) {  // emit; a real engine also rolls back its KV cache
      emitted += steps[i].emitted;                  //   to steps[i].rollback_to when steps[i].discarded
      last[ids[i]] = model_tokens[model_offsets[i] + steps[i].emitted - 1];
      if (steps[i].finished) spec.finish(ids[i]);   // its drafter returns to the pool
      else still.push_back(ids[i]);
    }
    ids = still;
  }
  std::printf("%zu tokens in %zu batched passes; plain decoding takes 180\n", emitted, passes);
  return emitted == 20 * (7 + 8 + 9) ? 0 : 1;
}
