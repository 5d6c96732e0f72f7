#pragma once

// The two decoding loops of ngramspec-llama over an Engine: plain decoding (one token per
// sequence per pass, the reference) and speculative decoding through a BatchSpeculator, for
// any drafter (ngramspec's, or llama.cpp's own behind the Drafter concept). Both serve a list
// of prompts with up to engine.sequences() running at once (a finished sequence's slot takes
// the next prompt in the next pass), and both choose every token with the same TokenSampler at
// the same absolute position, so greedy and seeded sampled runs must agree token for token.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include <ngramspec/batch_speculator.hpp>
#include <ngramspec/detail/max_drafts_check.hpp>
#include <ngramspec/sampling_options.hpp>
#include <ngramspec/token_sampler.hpp>

#include "llama_engine.hpp"

namespace ngramspec::llama_cpp {

/// What every run of one comparison shares.
struct RunSettings {
  std::size_t max_new_tokens = 256;  ///< per prompt
  bool stop_at_eog = true;           ///< end a sequence at the model's end-of-generation tokens
  SamplingOptions sampling{};        ///< temperature 0: greedy; prompt i samples with seed + i
};

/// What one run produced and cost.
struct RunResult {
  std::vector<std::vector<Token>> outputs;  ///< per prompt, the tokens generated
  double seconds = 0;                       ///< the whole run, prefill included
  double decode_seconds = 0;                ///< inside llama_decode
  std::uint64_t passes = 0;                 ///< llama_decode calls
  std::uint64_t sequence_passes = 0;        ///< sum over prompts of the passes each took part in
  std::uint64_t drafted = 0;                ///< drafts verified
  std::uint64_t accepted = 0;               ///< drafts accepted
  std::uint64_t generated = 0;              ///< tokens generated
  /// Draft tokens the drafters dropped for lying outside the model's vocabulary (a corpus file
  /// built from another tokenizer, or damaged): BatchStats::out_of_vocabulary.
  std::uint64_t out_of_vocabulary = 0;

  [[nodiscard]] double tokens_per_second() const noexcept { return seconds > 0 ? static_cast<double>(generated) / seconds : 0; }
  /// Generated tokens per pass a sequence took part in (Spec-Bench's mean accepted length).
  [[nodiscard]] double mean_accepted_length() const noexcept {
    return sequence_passes > 0 ? static_cast<double>(generated) / static_cast<double>(sequence_passes) : 0;
  }
};

namespace detail {

using Clock = std::chrono::steady_clock;

inline double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// One running prompt in one of the engine's sequences.
struct Slot {
  std::optional<std::size_t> request;  // the prompt it serves, if any
  std::size_t cache = 0;               // tokens in its KV cache
  Token last = 0;                      // the last token, not yet in the cache
  bool prefilled = false;
  std::size_t first_row = 0;           // its first pass token in this pass
  std::size_t fed = 0;                 // tokens it fed in this pass
  std::size_t padding = 0;             // of them, tokens only there to keep the pass's shape
};

inline void prompt_limit_check(const Engine& engine, std::span<const std::vector<Token>> prompts) {
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) throw std::runtime_error("prompt " + std::to_string(i + 1) + " has no tokens");
    if (prompts[i].size() >= engine.context()) {
      throw std::runtime_error("prompt " + std::to_string(i + 1) + " has " + std::to_string(prompts[i].size()) +
                               " tokens; the context holds " + std::to_string(engine.context()) +
                               " per sequence (--ctx), which must leave room for at least one generated token");
    }
    if (prompts[i].size() > engine.max_pass_tokens()) {
      throw std::runtime_error("prompt " + std::to_string(i + 1) + " has " + std::to_string(prompts[i].size()) +
                               " tokens, more than one pass carries (" + std::to_string(engine.max_pass_tokens()) + ")");
    }
  }
}

// The passes' samplers, one per slot, keyed by the prompt's seed.
class Samplers {
 public:
  Samplers(const Engine& engine, const SamplingOptions& options) : options_(options) {
    for (std::size_t i = 0; i < engine.sequences(); ++i) samplers_.emplace_back(options, engine.vocab_size());
  }
  void start(std::size_t slot, std::size_t request) { samplers_[slot].set_options(for_request(request)); }
  // The token at absolute position `position` from the logits of the token before it.
  Token choose(std::size_t slot, std::span<const float> logits, std::size_t position) {
    return samplers_[slot].choose(logits, position);
  }
  // The same with the draft `draft` after the row, drawn from entry `entry` of `q`, verified by
  // rejection sampling (SamplingMode::rejection): the draft itself when accepted.
  Token verify(std::size_t slot, std::span<const float> logits, std::size_t position, Token draft, std::size_t entry,
               const DraftDistributions& q) {
    const TokenSampler::Draft d{draft, static_cast<std::uint32_t>(entry)};
    return samplers_[slot].verify(logits, position, std::span<const TokenSampler::Draft>(&d, 1), q);
  }
  // A drawing drafter's options for request `request`: the run's, seeded as the request's sampler is
  // (the drafter's draws use streams of their own), so that every request draws its drafts afresh.
  [[nodiscard]] SamplingOptions for_request(std::size_t request) const {
    SamplingOptions o = options_;
    o.seed = options_.seed + request;
    return o;
  }

 private:
  SamplingOptions options_;
  std::vector<TokenSampler> samplers_;
};

// Gives a drawing drafter (ModelDrafter, or one inside a BestOfDrafter) the options of its request.
template <class D>
void seed_drafter(D& drafter, const SamplingOptions& options) {
  if constexpr (requires { drafter.set_sampling(options); }) {
    drafter.set_sampling(options);
  } else if constexpr (requires { drafter.second().set_sampling(options); }) {
    drafter.second().set_sampling(options);
  }
}

}  // namespace detail

/// Sees the logits plain decoding chose each token from: the prompt's index, the token's index
/// in its output, and the row (valid during the call only).
using PlainLogitsObserver = std::function<void(std::size_t prompt, std::size_t token, std::span<const float> logits)>;

/// Plain decoding: every pass carries each running sequence's last token (or its prompt).
/// `observe`, when given, is called with the logits of every token chosen (to read the plain
/// model's logits where another run diverged).
inline RunResult decode_plain(Engine& engine, std::span<const std::vector<Token>> prompts, const RunSettings& settings,
                              const PlainLogitsObserver& observe = {}) {
  detail::prompt_limit_check(engine, prompts);
  RunResult result;
  result.outputs.resize(prompts.size());
  std::vector<detail::Slot> slots(engine.sequences());
  detail::Samplers samplers(engine, settings.sampling);
  std::size_t next = 0;
  const auto start = detail::Clock::now();
  for (;;) {
    for (std::size_t s = 0; s < slots.size() && next < prompts.size(); ++s) {
      if (slots[s].request) continue;
      slots[s] = detail::Slot{};
      slots[s].request = next;
      samplers.start(s, next++);
      engine.clear_sequence(s);
    }
    engine.clear_pass();
    bool any = false;
    for (std::size_t s = 0; s < slots.size(); ++s) {
      detail::Slot& slot = slots[s];
      if (!slot.request) continue;
      any = true;
      if (!slot.prefilled) {
        const std::vector<Token>& prompt = prompts[*slot.request];
        slot.first_row = engine.add(s, 0, prompt, false) + prompt.size() - 1;
        slot.fed = prompt.size();
      } else {
        slot.first_row = engine.add(s, slot.cache, std::span<const Token>(&slot.last, 1), true);
        slot.fed = 1;
      }
    }
    if (!any) break;
    const auto decode_start = detail::Clock::now();
    engine.decode();
    result.decode_seconds += detail::since(decode_start);
    ++result.passes;
    for (std::size_t s = 0; s < slots.size(); ++s) {
      detail::Slot& slot = slots[s];
      if (!slot.request) continue;
      slot.cache += slot.fed;
      slot.prefilled = true;
      const std::vector<Token>& prompt = prompts[*slot.request];
      std::vector<Token>& out = result.outputs[*slot.request];
      const std::span<const float> logits = engine.logits(slot.first_row);
      const Token token = samplers.choose(s, logits, slot.cache);
      if (observe) observe(*slot.request, out.size(), logits);
      out.push_back(token);
      slot.last = token;
      ++result.sequence_passes;
      ++result.generated;
      const bool stop = settings.stop_at_eog && std::find(engine.stop_tokens().begin(), engine.stop_tokens().end(),
                                                          token) != engine.stop_tokens().end();
      if (stop || out.size() >= settings.max_new_tokens || prompt.size() + out.size() >= engine.context()) {
        slot.request.reset();
      }
    }
  }
  result.seconds = detail::since(start);
  return result;
}

/// One shape for every pass with drafts of a single sequence (see measure_fixed_shape_costs()):
/// a pass that carries any drafts is padded to `drafts` of them, so that llama.cpp keeps its
/// compute graph from one such pass to the next, and the drafts are planned against `entry`
/// after a plain pass (the graph rebuilt now and again when plain passes resume) and against
/// `streak` after a pass with drafts (the graph kept).
struct FixedPassShape {
  std::size_t drafts = 0;
  const VerifyCost* entry = nullptr;
  const VerifyCost* streak = nullptr;
};

/// Speculative decoding: `speculator` drafts for every running sequence and decides each step;
/// every pass verifies all drafts in one llama_decode, and the rejected ones are cut from the
/// KV cache. `max_drafts` bounds each sequence's drafts per pass. With `shape` (one sequence
/// only: engine.sequences() == 1), passes with drafts are padded to its shape and planned by
/// the pass before; the padding's rows are computed and never read, and cut from the cache.
template <Drafter D>
RunResult decode_speculative(Engine& engine, BatchSpeculator<D>& speculator, std::span<const std::vector<Token>> prompts,
                             const RunSettings& settings, std::size_t max_drafts, const FixedPassShape* shape = nullptr) {
  detail::prompt_limit_check(engine, prompts);
  ngramspec::detail::check_max_drafts("", "", "max_drafts", max_drafts);
  RunResult result;
  result.outputs.resize(prompts.size());
  std::vector<detail::Slot> slots(engine.sequences());
  detail::Samplers samplers(engine, settings.sampling);
  DecodeOptions options;
  options.max_new_tokens = settings.max_new_tokens;
  if (settings.stop_at_eog) options.stop_tokens = engine.stop_tokens();
  options.max_context = engine.context();
  options.max_drafts = max_drafts;

  const std::size_t n = slots.size();
  std::vector<SequenceId> ids(n);
  std::vector<std::size_t> slot_of(n);
  std::vector<Token> drafts(n * max_drafts);
  std::vector<std::size_t> offsets(n + 1);
  std::vector<Token> model_tokens(n * (max_drafts + 1));
  std::vector<std::size_t> model_offsets(n + 1);
  std::vector<StepOutcome> steps;
  steps.resize(n);  // not steps(n): there GCC 12 at -O3 sees an allocation of an impossible size
  if (shape != nullptr && (n != 1 || shape->entry == nullptr || shape->streak == nullptr || shape->drafts > max_drafts)) {
    throw std::invalid_argument("a fixed pass shape needs one sequence, both costs and at most max_drafts = " +
                                std::to_string(max_drafts) + " drafts; it has " + std::to_string(shape->drafts));
  }
  std::vector<Token> fed;
  fed.reserve(max_drafts + 1);
  // The rejection mode: drafts come with what they were drawn from, and each row verifies its draft
  // by rejection sampling (TokenSampler::verify); a drawing drafter is seeded afresh per request.
  const bool rejection = settings.sampling.mode == SamplingMode::rejection && settings.sampling.temperature > 0.0f;
  std::vector<DraftDistributions> q(rejection ? n : 0);
  for (DraftDistributions& d : q) d.reserve(max_drafts);
  const BatchStats before = speculator.stats();
  bool after_drafts = false;  // the pass before carried drafts (and so the fixed shape)

  std::size_t next = 0;
  const auto start = detail::Clock::now();
  for (;;) {
    for (std::size_t s = 0; s < n && next < prompts.size(); ++s) {
      if (slots[s].request) continue;
      slots[s] = detail::Slot{};
      slots[s].request = next;
      samplers.start(s, next);
      engine.clear_sequence(s);
      speculator.begin(next, prompts[next], options);
      if (rejection) detail::seed_drafter(speculator.drafter(next), samplers.for_request(next));
      ++next;
    }
    std::size_t running = 0;
    for (std::size_t s = 0; s < n; ++s) {
      if (!slots[s].request) continue;
      ids[running] = *slots[s].request;
      slot_of[running++] = s;
    }
    if (running == 0) break;

    const std::span<const SequenceId> pass_ids(ids.data(), running);
    if (shape != nullptr) speculator.use_cost(after_drafts ? shape->streak : shape->entry);
    if (rejection) {
      speculator.propose(pass_ids, drafts, std::span<std::size_t>(offsets).first(running + 1),
                         std::span<DraftDistributions>(q).first(running));
    } else {
      speculator.propose(pass_ids, drafts, std::span<std::size_t>(offsets).first(running + 1));
    }
    after_drafts = false;
    engine.clear_pass();
    for (std::size_t i = 0; i < running; ++i) {
      detail::Slot& slot = slots[slot_of[i]];
      if (!slot.prefilled) {
        const std::vector<Token>& prompt = prompts[*slot.request];
        slot.first_row = engine.add(slot_of[i], 0, prompt, false) + prompt.size() - 1;
        slot.fed = prompt.size();
      } else {
        fed.assign(1, slot.last);
        fed.insert(fed.end(), drafts.begin() + static_cast<std::ptrdiff_t>(offsets[i]),
                   drafts.begin() + static_cast<std::ptrdiff_t>(offsets[i + 1]));
        slot.padding = 0;
        if (shape != nullptr && fed.size() > 1) {
          // Any token keeps the shape; the last draft again is as good as another, and never read.
          const std::size_t room = engine.context() > slot.cache ? engine.context() - slot.cache : 0;
          if (shape->drafts + 1 <= room) {
            slot.padding = shape->drafts + 1 - std::min(fed.size(), shape->drafts + 1);
            fed.resize(fed.size() + slot.padding, fed.back());
          }
          after_drafts = true;
        }
        slot.first_row = engine.add(slot_of[i], slot.cache, fed, true);
        slot.fed = fed.size() - slot.padding;
      }
    }
    const auto decode_start = detail::Clock::now();
    engine.decode();
    const double decode_seconds = detail::since(decode_start);
    result.decode_seconds += decode_seconds;
    // A learned cost learns from what llama_decode took, not from the sampling around it.
    if constexpr (requires { speculator.learned_cost(); }) {
      if (speculator.learned_cost() != nullptr) speculator.report_pass_seconds(std::max(decode_seconds, 1e-9));
    }
    ++result.passes;

    // The model's token after every fed token that has logits: position = that token's + 1.
    std::size_t made = 0;
    model_offsets[0] = 0;
    for (std::size_t i = 0; i < running; ++i) {
      const detail::Slot& slot = slots[slot_of[i]];
      const std::size_t rows = slot.prefilled ? slot.fed : 1;
      const std::size_t first_position = slot.prefilled ? slot.cache + 1 : slot.fed;
      for (std::size_t r = 0; r < rows; ++r) {
        const std::span<const float> row = engine.logits(slot.first_row + r);
        if (!rejection || r + 1 == rows) {
          model_tokens[made++] = samplers.choose(slot_of[i], row, first_position + r);
          continue;
        }
        // Row r verifies draft r. After a rejection the rows beyond are not read: the step ends
        // at the rejected draft whatever they hold, so they repeat the row's token.
        const Token draft = drafts[offsets[i] + r];
        const Token token = samplers.verify(slot_of[i], row, first_position + r, draft, r, q[i]);
        model_tokens[made++] = token;
        if (token != draft) {
          for (++r; r < rows; ++r) model_tokens[made++] = token;
          break;
        }
      }
      model_offsets[i + 1] = made;
    }
    speculator.accept(pass_ids, std::span<const Token>(model_tokens).first(made),
                      std::span<const std::size_t>(model_offsets).first(running + 1), steps);
    for (std::size_t i = 0; i < running; ++i) {
      detail::Slot& slot = slots[slot_of[i]];
      const StepOutcome& step = steps[i];
      std::vector<Token>& out = result.outputs[*slot.request];
      const Token* emitted = model_tokens.data() + model_offsets[i];
      out.insert(out.end(), emitted, emitted + step.emitted);
      slot.last = emitted[step.emitted - 1];
      slot.prefilled = true;
      slot.cache = step.rollback_to;
      if (step.discarded != 0 || slot.padding != 0) engine.truncate(slot_of[i], slot.cache);
      slot.padding = 0;
      ++result.sequence_passes;
      result.generated += step.emitted;
      if (step.finished) {
        speculator.finish(ids[i]);
        slot.request.reset();
      }
    }
  }
  if (shape != nullptr) speculator.use_cost(nullptr);
  result.seconds = detail::since(start);
  result.drafted = speculator.stats().drafted - before.drafted;
  result.accepted = speculator.stats().accepted - before.accepted;
  result.out_of_vocabulary = speculator.stats().out_of_vocabulary - before.out_of_vocabulary;
  return result;
}

}  // namespace ngramspec::llama_cpp
