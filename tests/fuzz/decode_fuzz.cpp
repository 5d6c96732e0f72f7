// Fuzz target: SpeculativeDecoder::generate and the per-sequence step API against plain greedy
// decoding.
//
// The input decodes into a greedy model (a table, hash, copying or induction rule over a small
// vocabulary, any max_batch), a prompt, DecodeOptions (stop tokens, max_new_tokens, max_context,
// speculation, max_drafts), a drafter (NGramPredictor, or one whose drafts and their claimed count
// come from the input: right, wrong, foreign or lying), a callback that may stop, and a model fault
// (forward or rollback) to inject into a first generation. Invariants: the output is plain greedy
// decoding's (a prefix of it when the callback stops), the model contract holds on every call
// (GreedyModel checks it), the model ends holding exactly what was kept, and the stats add up.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz_input.hpp"
#include "fuzz_rules.hpp"
#include "ngramspec/decode_step.hpp"
#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/speculative_decoder.hpp"
#include "support/mock_models.hpp"
#include "support/test_drafters.hpp"

namespace ngramspec::test {
namespace {

/// Drafts straight from the fuzzer's bytes: how many to claim (at times more than it was offered,
/// which the decoder must clamp), and for each draft the model's true token, an in-vocabulary guess
/// or a token the model never emits.
class ByteDrafter : public ObservedSequence {
 public:
  ByteDrafter(std::vector<std::uint8_t> script, NextTokenRule rule, Token vocab)
      : script_(std::move(script)), rule_(std::move(rule)), vocab_(vocab) {}

  [[nodiscard]] std::size_t predict(std::span<Token> out) const {
    if (script_.empty()) return 0;
    const std::size_t claim = script_.next() % (out.size() + 3);
    const std::size_t n = std::min(claim, out.size());
    scratch_.assign(seen().begin(), seen().end());
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint8_t b = script_.next();
      Token t = 0;
      if ((b & 0x80) != 0 && !scratch_.empty()) {
        t = rule_(std::span<const Token>(scratch_));
      } else if ((b & 0x40) != 0) {
        t = kForeignToken + (b & 0x3F);
      } else {
        t = static_cast<Token>(b % vocab_);
      }
      out[i] = t;
      scratch_.push_back(t);
    }
    return claim;
  }

 private:
  ByteScript script_;
  NextTokenRule rule_;
  Token vocab_;
  mutable std::vector<Token> scratch_;
};

struct Scenario {
  NextTokenRule rule;
  Token vocab = 2;
  std::size_t max_batch = 1;
  std::vector<Token> prompt;
  DecodeOptions options;
  bool prompt_too_long = false;  // max_context below the prompt: generate must throw
  bool ngram_drafter = false;
  NGramConfig ngram;
  std::size_t stop_after_chunks = 0;  // the callback returns false on this call; 0 never
  std::size_t forward_fault = 0;      // a first generate whose k-th forward throws; 0 none
  std::size_t rollback_fault = 0;     // or whose k-th rollback throws; 0 none
  FaultTiming fault_timing = FaultTiming::before_change;
  std::vector<std::uint8_t> script;  // ByteDrafter's bytes
};

Scenario decode_scenario(FuzzInput& in) {
  Scenario s;
  s.vocab = static_cast<Token>(in.in_range(2, 16));
  s.rule = fuzz_rule(in, s.vocab);
  static constexpr std::size_t kBatches[] = {1, 2, 3, 4, 5, 8, 17, GreedyModel::kUnlimitedBatch};
  s.max_batch = kBatches[in.byte() % std::size(kBatches)];

  s.prompt.resize(in.in_range(1, 32));
  for (Token& t : s.prompt) t = static_cast<Token>(in.byte() % s.vocab);

  DecodeOptions& o = s.options;
  o.max_new_tokens = in.in_range(0, 64);
  for (std::size_t n = in.in_range(0, 3); n > 0; --n) o.stop_tokens.push_back(static_cast<Token>(in.byte() % s.vocab));
  switch (in.byte() % 4) {
    case 0: o.max_context = 0; break;
    case 1:
      if (s.prompt.size() > 1) {
        o.max_context = in.in_range(1, s.prompt.size() - 1);
        s.prompt_too_long = true;
        break;
      }
      [[fallthrough]];
    default: o.max_context = s.prompt.size() + in.in_range(0, 80); break;
  }
  o.speculate = in.byte() % 8 != 0;
  static constexpr std::size_t kMaxDrafts[] = {64, 0, 1, 2, 3, 7, kMaxDraftsPerPass};
  o.max_drafts = kMaxDrafts[in.byte() % std::size(kMaxDrafts)];

  s.ngram_drafter = in.byte() % 4 == 0;
  s.ngram.min_order = in.in_range(2, 3);
  s.ngram.max_order = in.in_range(s.ngram.min_order, 6);
  s.ngram.window = in.in_range(s.ngram.max_order, 64);
  s.ngram.max_drafts = in.in_range(1, 12);
  s.stop_after_chunks = in.byte() % 2 == 0 ? 0 : in.in_range(1, 16);
  const std::uint8_t fault = in.byte();
  s.forward_fault = fault % 4 == 0 ? fault / 4 % 8 + 1 : 0;
  s.rollback_fault = fault % 4 == 1 ? fault / 4 % 8 + 1 : 0;
  s.fault_timing = (fault & 0x80) != 0 ? FaultTiming::after_change : FaultTiming::before_change;
  const auto rest = in.rest();
  s.script.assign(rest.begin(), rest.end());
  return s;
}

AnyDrafter make_drafter(const Scenario& s) {
  if (s.ngram_drafter) return AnyDrafter(NGramPredictor(s.ngram));
  return AnyDrafter(ByteDrafter(s.script, s.rule, s.vocab));
}

void check_contract(const GreedyModel& model) {
  if (model.violations().empty()) return;
  for (const std::string& v : model.violations()) std::fprintf(stderr, "model contract: %s\n", v.c_str());
  fuzz_fail("the decoder broke the model contract");
}

// The model holds the prompt and every emitted token but the last (nothing when nothing was
// emitted: generate() rolls back to 0 and a finished sequence never prefills).
void check_model_holds(const GreedyModel& model, const Scenario& s, std::span<const Token> output) {
  if (output.empty()) {
    if (model.length() != 0) fuzz_fail("the model holds tokens after a generation that emitted none");
    return;
  }
  std::vector<Token> kept(s.prompt);
  kept.insert(kept.end(), output.begin(), output.end() - 1);
  if (model.history() != kept) fuzz_fail("the model does not hold exactly the prompt and the kept output");
}

void check_stats(const DecodeStats& stats, const GreedyModel& model, const Scenario& s, std::size_t generated) {
  if (stats.generated != generated) fuzz_fail("stats.generated != output size");
  if (stats.accepted > stats.drafted) fuzz_fail("stats.accepted > stats.drafted");
  if (!s.options.speculate && stats.drafted != 0) fuzz_fail("drafts without speculation");
  const std::size_t prefill = generated == 0 ? 0 : (s.prompt.size() + s.max_batch - 1) / s.max_batch;
  if (s.max_batch != GreedyModel::kUnlimitedBatch && stats.prefill_passes != prefill) {
    fuzz_fail("prefill_passes is not ceil(prompt / max_batch)");
  }
  if (s.max_batch == GreedyModel::kUnlimitedBatch && stats.prefill_passes != (generated == 0 ? 0 : 1)) {
    fuzz_fail("prefill_passes is not 1 with an unlimited batch");
  }
  if (stats.prefill_passes + stats.decode_passes != model.forward_calls()) fuzz_fail("passes != forward calls");
  if (generated != 0) {
    // Every pass emits its accepted drafts and the model's token, but the last may be cut.
    if (generated > stats.accepted + stats.decode_passes + 1 || generated < stats.accepted + stats.decode_passes) {
      fuzz_fail("generated does not add up from accepted drafts and passes");
    }
    if (model.forwarded_tokens() != s.prompt.size() + stats.decode_passes + stats.drafted) {
      fuzz_fail("tokens fed to the model != prompt + one per pass + drafts");
    }
  }
  if (stats.drafted_at.size() != stats.accepted_at.size()) fuzz_fail("histograms differ in size");
  if (!stats.drafted_at.empty() && stats.drafted_at.back() == 0) fuzz_fail("drafted_at is not trimmed");
  if (stats.drafted_at.size() > std::min(s.options.max_drafts, kMaxDraftsPerPass)) {
    fuzz_fail("a pass carried more than max_drafts drafts");
  }
  for (std::size_t i = 0; i < stats.drafted_at.size(); ++i) {
    if (stats.accepted_at[i] > stats.drafted_at[i]) fuzz_fail("accepted_at[i] > drafted_at[i]");
    if (i > 0 && stats.drafted_at[i] > stats.drafted_at[i - 1]) fuzz_fail("drafted_at is not non-increasing");
    if (i > 0 && stats.accepted_at[i] > stats.accepted_at[i - 1]) fuzz_fail("accepted_at is not non-increasing");
  }
  if (std::accumulate(stats.drafted_at.begin(), stats.drafted_at.end(), std::size_t{0}) != stats.drafted) {
    fuzz_fail("drafted_at does not sum to drafted");
  }
  if (std::accumulate(stats.accepted_at.begin(), stats.accepted_at.end(), std::size_t{0}) != stats.accepted) {
    fuzz_fail("accepted_at does not sum to accepted");
  }
}

void check_generate(const Scenario& s, const GreedyReference& ref) {
  GreedyModel model(s.rule, s.max_batch);
  SpeculativeDecoder<GreedyModel, AnyDrafter> decoder(model, make_drafter(s));
  if (s.forward_fault != 0 || s.rollback_fault != 0) {
    // A generation that fails part-way must leave the decoder usable: the next one starts fresh.
    model.fail_forward_at(s.forward_fault, s.fault_timing);
    model.fail_rollback_at(s.rollback_fault);
    try {
      (void)decoder.generate(s.prompt, s.options);
    } catch (const ModelFault&) {
    }
    model.fail_forward_at(0);
    model.fail_rollback_at(0);
    check_contract(model);
    model.reset_counters();
  }

  std::vector<Token> streamed;
  std::size_t calls = 0;
  const DecodeResult result = decoder.generate(s.prompt, s.options, [&](std::span<const Token> chunk) {
    ++calls;
    if (chunk.empty()) fuzz_fail("the callback got an empty chunk");
    streamed.insert(streamed.end(), chunk.begin(), chunk.end());
    return calls != s.stop_after_chunks;
  });
  check_contract(model);
  if (streamed != result.tokens) fuzz_fail("the callback's chunks are not the output");
  if (result.tokens.size() > ref.tokens.size() ||
      !std::equal(result.tokens.begin(), result.tokens.end(), ref.tokens.begin())) {
    fuzz_fail("generate's output is not (a prefix of) plain greedy decoding");
  }
  if (result.tokens.size() < ref.tokens.size()) {
    if (result.stop_reason != StopReason::callback || calls != s.stop_after_chunks) {
      fuzz_fail("generate stopped early without the callback asking");
    }
  } else if (result.stop_reason != ref.stop_reason) {
    fuzz_fail("generate's stop reason differs from plain greedy decoding's");
  }
  if (s.stop_after_chunks != 0 && calls > s.stop_after_chunks) fuzz_fail("the callback was called after it stopped");
  check_stats(result.stats, model, s, result.tokens.size());
  check_model_holds(model, s, result.tokens);
}

// The step API's engine loop (docs/MODEL_CONTRACT.md) over one sequence, with every step's outcome checked.
void check_steps(const Scenario& s, const GreedyReference& ref) {
  GreedyModel model(s.rule, s.max_batch);
  AnyDrafter drafter = make_drafter(s);
  const DecodeOptions& options = s.options;
  SequenceState state = start_sequence(s.prompt.size(), options);
  std::vector<Token> output;
  if (!state.finished) {
    if (options.speculate) drafter.update(std::span<const Token>(s.prompt));
    std::vector<Token> next(1);
    for (std::size_t pos = 0; pos < s.prompt.size();) {
      const std::size_t n = std::min(s.max_batch, s.prompt.size() - pos);
      next.resize(n);
      model.forward(pos, std::span<const Token>(s.prompt).subspan(pos, n), next);
      pos += n;
    }
    const Token first = next.back();
    StepOutcome outcome = accept_drafts(state, {}, std::span<const Token>(&first, 1), options);
    if (outcome.emitted != 1 || outcome.discarded != 0) fuzz_fail("the prefill step must emit one token, no rollback");
    output.push_back(first);
    if (options.speculate) drafter.update(first);
    advance(state, outcome);

    const std::size_t cap = s.max_batch - 1;
    std::vector<Token> drafts(std::min(cap, kMaxDraftsPerPass + 1));
    std::vector<Token> fed;
    std::vector<Token> model_tokens;
    while (!state.finished) {
      if (model.length() != state.cache_length()) fuzz_fail("the model does not hold cache_length() tokens");
      const std::size_t limit = draft_limit(state, options, cap);
      const std::size_t n = propose_drafts(drafter, state, options, cap, drafts);
      if (n > limit) fuzz_fail("propose_drafts returned more than draft_limit");
      fed.assign(1, output.back());
      fed.insert(fed.end(), drafts.begin(), drafts.begin() + static_cast<std::ptrdiff_t>(n));
      model_tokens.resize(fed.size());
      model.forward(state.cache_length(), fed, model_tokens);
      outcome = accept_drafts(state, std::span<const Token>(drafts).first(n), model_tokens, options);
      if (outcome.emitted == 0 || outcome.emitted > outcome.accepted + 1 || outcome.accepted > n) {
        fuzz_fail("a verify step emitted nothing, or more than its accepted drafts and one");
      }
      if (outcome.rollback_to + outcome.discarded != state.cache_length() + n + 1) {
        fuzz_fail("rollback_to + discarded != what the pass left in the model");
      }
      if (outcome.discarded != 0) model.rollback(outcome.rollback_to);
      const auto emitted = std::span<const Token>(model_tokens).first(outcome.emitted);
      output.insert(output.end(), emitted.begin(), emitted.end());
      if (options.speculate) drafter.update(emitted);
      advance(state, outcome);
    }
  }
  check_contract(model);
  if (output != ref.tokens) fuzz_fail("the step API's output is not plain greedy decoding");
  if (state.stop_reason != ref.stop_reason) {
    fuzz_fail("the step API's stop reason differs from plain greedy decoding's");
  }
  check_model_holds(model, s, output);
}

void run(FuzzInput& in) {
  const Scenario s = decode_scenario(in);
  if (s.prompt_too_long) {
    GreedyModel model(s.rule, s.max_batch);
    SpeculativeDecoder<GreedyModel, AnyDrafter> decoder(model, make_drafter(s));
    try {
      (void)decoder.generate(s.prompt, s.options);
    } catch (const std::invalid_argument&) {
      return;
    }
    fuzz_fail("generate accepted a prompt longer than max_context");
  }
  const GreedyReference ref = plain_greedy(s.rule, s.prompt, s.options);
  check_generate(s, ref);
  check_steps(s, ref);
}

}  // namespace
}  // namespace ngramspec::test

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ngramspec::test::FuzzInput in(data, size);
  ngramspec::test::run(in);
  return 0;
}
