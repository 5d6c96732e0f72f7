// An engine loop: several sequences share one batched forward per step, each with its own
// MatchDrafter, SequenceState and slot in the model's KV cache, driven through the step API
// (start_sequence / propose_drafts / accept_drafts / advance). At the end every sequence's
// output and pass count are checked against SpeculativeDecoder::generate on the same model;
// the program exits nonzero if any differs.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ngramspec/ngramspec.hpp>

namespace {

using ngramspec::Token;

constexpr Token kVocab = 64;
constexpr std::size_t kMaxTokensPerSequence = 16;  // tokens one sequence may feed in one forward
constexpr std::size_t kMaxLength = 1024;           // KV cache capacity of one slot

/// A toy batched model. Each slot holds one sequence's tokens (its KV cache); one forward()
/// serves a batch of slots at once, as an engine's batched step does. The greedy next token is
/// a hash of the last two tokens over a 64-token vocabulary, so streams fall into cycles the
/// drafter can learn after a while, at a different point for each prompt.
class BatchedToyModel {
 public:
  /// One sequence's share of a forward: `tokens` at positions pos.., `next` receives its tokens.
  struct Request {
    std::size_t slot = 0;
    std::size_t pos = 0;
    std::span<const Token> tokens;
    std::span<Token> next;
  };

  explicit BatchedToyModel(std::size_t slots) : slots_(slots) {
    for (std::vector<Token>& held : slots_) held.reserve(kMaxLength);
  }

  /// One pass over the whole batch. Throws if a request breaks the model contract.
  void forward(std::span<const Request> batch) {
    for (const Request& request : batch) {
      std::vector<Token>& held = slots_.at(request.slot);
      if (request.pos != held.size()) {
        throw std::logic_error("slot " + std::to_string(request.slot) + ": forward at " + std::to_string(request.pos) +
                               ", the slot holds " + std::to_string(held.size()));
      }
      if (request.tokens.empty() || request.tokens.size() > kMaxTokensPerSequence ||
          request.next.size() != request.tokens.size() || held.size() + request.tokens.size() > kMaxLength) {
        throw std::logic_error("slot " + std::to_string(request.slot) + ": bad request size");
      }
      for (std::size_t i = 0; i < request.tokens.size(); ++i) {
        held.push_back(request.tokens[i]);
        request.next[i] = next_token(held);
      }
    }
    ++passes_;
  }

  void rollback(std::size_t slot, std::size_t pos) {
    std::vector<Token>& held = slots_.at(slot);
    if (pos > held.size()) throw std::logic_error("rollback beyond what the slot holds");
    held.resize(pos);
  }

  [[nodiscard]] std::size_t passes() const noexcept { return passes_; }

 private:
  [[nodiscard]] static Token next_token(std::span<const Token> held) noexcept {
    const std::uint64_t last = held.back();
    const std::uint64_t before = held.size() >= 2 ? held[held.size() - 2] : kVocab;
    std::uint64_t x = (before * 131 + last) * 0x9e3779b97f4a7c15ULL;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 32;
    return static_cast<Token>(x % kVocab);
  }

  std::vector<std::vector<Token>> slots_;
  std::size_t passes_ = 0;
};

/// One slot of a BatchedToyModel seen as a single-sequence TargetModel, for SpeculativeDecoder.
class SlotModel {
 public:
  SlotModel(BatchedToyModel& model, std::size_t slot) : model_(&model), slot_(slot) {}
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) {
    const BatchedToyModel::Request request{slot_, pos, tokens, next};
    model_->forward({&request, 1});
  }
  void rollback(std::size_t pos) { model_->rollback(slot_, pos); }
  [[nodiscard]] std::size_t max_batch() const noexcept { return kMaxTokensPerSequence; }

 private:
  BatchedToyModel* model_;
  std::size_t slot_;
};
static_assert(ngramspec::TargetModel<SlotModel>);

/// What the engine keeps per sequence. Every buffer is sized once, so a step allocates nothing.
struct Sequence {
  std::vector<Token> prompt;
  ngramspec::DecodeOptions options;
  ngramspec::MatchDrafter drafter;
  ngramspec::SequenceState state;
  std::vector<Token> output;
  // [last emitted token, drafts...] and the model's tokens for them.
  std::vector<Token> fed = std::vector<Token>(kMaxTokensPerSequence);
  std::vector<Token> next = std::vector<Token>(kMaxTokensPerSequence);
  std::size_t drafted = 0;        // drafts in the pass in flight
  std::size_t verify_passes = 0;  // passes this sequence took part in after its prefill
  std::size_t accepted = 0;
};

// Emits the tokens a step decided, feeds them to the drafter and moves the sequence on.
void finish_step(Sequence& seq, const ngramspec::StepOutcome& outcome) {
  const std::span<const Token> emitted = std::span<const Token>(seq.next).first(outcome.emitted);
  seq.output.insert(seq.output.end(), emitted.begin(), emitted.end());
  seq.drafter.update(emitted);
  seq.accepted += outcome.accepted;
  ngramspec::advance(seq.state, outcome);
}

// Prefills every prompt in one batched pass and emits each sequence's first token. The prompts
// here fit in one forward; an engine chunks longer ones over several passes.
void prefill(BatchedToyModel& model, std::vector<Sequence>& seqs, std::vector<BatchedToyModel::Request>& batch) {
  batch.clear();
  for (std::size_t slot = 0; slot < seqs.size(); ++slot) {
    Sequence& seq = seqs[slot];
    seq.state = ngramspec::start_sequence(seq.prompt.size(), seq.options);
    seq.drafter.reset();
    seq.drafter.update(seq.prompt);
    seq.output.reserve(seq.options.max_new_tokens);
    if (seq.prompt.size() > seq.next.size()) seq.next.resize(seq.prompt.size());
    if (!seq.state.finished) {
      batch.push_back({slot, 0, seq.prompt, std::span<Token>(seq.next).first(seq.prompt.size())});
    }
  }
  if (batch.empty()) return;
  model.forward(batch);
  for (const BatchedToyModel::Request& request : batch) {
    Sequence& seq = seqs[request.slot];
    seq.next[0] = seq.next[seq.prompt.size() - 1];  // the token after the prompt
    finish_step(seq, ngramspec::accept_drafts(seq.state, {}, std::span<const Token>(seq.next).first(1), seq.options));
  }
}

// One engine step: draft for every live sequence, verify all of them in one batched forward,
// then accept, roll back and emit per sequence. Returns false once every sequence is finished.
bool step(BatchedToyModel& model, std::vector<Sequence>& seqs, std::vector<BatchedToyModel::Request>& batch) {
  batch.clear();
  for (std::size_t slot = 0; slot < seqs.size(); ++slot) {
    Sequence& seq = seqs[slot];
    if (seq.state.finished) continue;
    // The drafts go straight behind the last emitted token, which the pass feeds first.
    seq.drafted = ngramspec::propose_drafts(seq.drafter, seq.state, seq.options, kMaxTokensPerSequence - 1,
                                            std::span<Token>(seq.fed).subspan(1));
    seq.fed[0] = seq.output.back();
    batch.push_back({slot, seq.state.cache_length(), std::span<const Token>(seq.fed).first(seq.drafted + 1),
                     std::span<Token>(seq.next).first(seq.drafted + 1)});
  }
  if (batch.empty()) return false;
  model.forward(batch);
  for (const BatchedToyModel::Request& request : batch) {
    Sequence& seq = seqs[request.slot];
    ++seq.verify_passes;
    const ngramspec::StepOutcome outcome = ngramspec::accept_drafts(
        seq.state, std::span<const Token>(seq.fed).subspan(1, seq.drafted), request.next, seq.options);
    if (outcome.discarded != 0) model.rollback(request.slot, outcome.rollback_to);
    finish_step(seq, outcome);
  }
  return true;
}

[[nodiscard]] Sequence make_sequence(std::vector<Token> prompt, std::size_t max_new_tokens,
                                     std::vector<Token> stop_tokens = {}) {
  Sequence seq;
  seq.prompt = std::move(prompt);
  seq.options.max_new_tokens = max_new_tokens;
  seq.options.stop_tokens = std::move(stop_tokens);
  return seq;
}

}  // namespace

int main() {
  // Sequences of different lengths and limits, so they finish at different steps and the
  // batch shrinks as they do; sequence 2 stops on a token instead of a length.
  std::vector<Sequence> seqs;
  seqs.push_back(make_sequence({1, 2, 3, 4, 5, 6, 7, 8}, 200));
  seqs.push_back(make_sequence({9, 9, 9}, 120));
  seqs.push_back(make_sequence({42}, 250, {9}));
  seqs.push_back(make_sequence({5, 17, 33, 5, 17, 33, 5, 17, 33, 5, 17}, 300));
  seqs.push_back(make_sequence({60, 61, 62, 63}, 60));

  BatchedToyModel model(seqs.size());
  std::vector<BatchedToyModel::Request> batch;
  batch.reserve(seqs.size());
  prefill(model, seqs, batch);
  while (step(model, seqs, batch)) {
  }

  std::printf("%zu sequences, %zu batched forward passes (prefill included)\n\n", seqs.size(), model.passes());
  std::printf("%-3s %6s %9s %7s %9s %11s %-15s %s\n", "seq", "prompt", "generated", "passes", "accepted",
              "tokens/pass", "stop", "same as generate()");
  bool ok = true;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const Sequence& seq = seqs[i];
    // The same sequence alone through SpeculativeDecoder, on a fresh model of its own.
    BatchedToyModel alone_model(1);
    SlotModel slot(alone_model, 0);
    ngramspec::SpeculativeDecoder decoder(slot);
    const ngramspec::DecodeResult alone = decoder.generate(seq.prompt, seq.options);
    const bool same = alone.tokens == seq.output && alone.stop_reason == seq.state.stop_reason &&
                      alone.stats.decode_passes == seq.verify_passes && alone.stats.accepted == seq.accepted;
    ok = ok && same;
    // Passes after the prompt, the prefill pass that yields the first token counting as one.
    const double per_pass =
        seq.output.empty() ? 0.0 : static_cast<double>(seq.output.size()) / static_cast<double>(seq.verify_passes + 1);
    std::printf("%-3zu %6zu %9zu %7zu %9zu %11.2f %-15s %s\n", i, seq.prompt.size(), seq.output.size(),
                seq.verify_passes + 1, seq.accepted, per_pass, ngramspec::to_string(seq.state.stop_reason),
                same ? "yes" : "NO");
  }
  return ok ? 0 : 1;
}
