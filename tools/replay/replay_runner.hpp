#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ngramspec/decode_options.hpp"
#include "ngramspec/drafter.hpp"
#include "ngramspec/speculative_decoder.hpp"
#include "replay_model.hpp"
#include "token_streams.hpp"

namespace ngramspec::replay {

/// What replaying one record with one drafter measured.
struct RecordResult {
  std::size_t generated = 0;
  std::size_t passes = 0;  ///< target passes after the prompt: decode passes + the prefill's one
  std::size_t drafted = 0;
  std::size_t accepted = 0;
  double drafter_ns = 0;              ///< drafter time (updates and predicts), best of the repeats
  std::size_t drafter_peak_bytes = 0;  ///< peak heap the drafter held
};

/// Reads the heap in use, for the drafter's peak memory. Default: no meter (peak reported as 0);
/// ngramspec-replay passes one that reads its replaced global operator new.
struct HeapMeter {
  std::size_t (*live_bytes)() noexcept = nullptr;
  std::size_t (*peak_bytes)() noexcept = nullptr;
  void (*reset_peak)() noexcept = nullptr;
  [[nodiscard]] bool present() const noexcept { return live_bytes && peak_bytes && reset_peak; }
};

/// Drafter calls of one generation, so they can be replayed alone for timing: an update of
/// n tokens is n, a predict into `limit` slots is kPredict | limit.
using DrafterTrace = std::vector<std::uint32_t>;
inline constexpr std::uint32_t kPredict = 0x80000000u;

/// Passes every call to the drafter it wraps and records it.
template <Drafter D>
class RecordingDrafter {
 public:
  RecordingDrafter(D inner, DrafterTrace* trace) : inner_(std::move(inner)), trace_(trace) {}
  void update(Token token) {
    inner_.update(token);
    trace_->push_back(1);
  }
  void update(std::span<const Token> tokens) {
    inner_.update(tokens);
    trace_->push_back(static_cast<std::uint32_t>(tokens.size()));
  }
  std::size_t predict(std::span<Token> out) const {
    trace_->push_back(kPredict | static_cast<std::uint32_t>(out.size()));
    return inner_.predict(out);
  }
  void reset() {
    inner_.reset();
    trace_->clear();
  }

 private:
  D inner_;
  DrafterTrace* trace_;
};

/// Replays `stream` through SpeculativeDecoder with the drafter `make(stream, k)` builds and
/// at most k drafts a pass; throws std::runtime_error when the output departs from the
/// recording. Then runs the drafter's recorded calls alone `timing_repeats` times for its
/// time and, with a meter, its peak heap.
template <class Make>
RecordResult replay_record(const TokenStream& stream, std::size_t k, const Make& make, int timing_repeats,
                           const HeapMeter& meter = {}) {
  using D = decltype(make(stream, k));
  DrafterTrace trace;
  ReplayModel model(stream);
  SpeculativeDecoder<ReplayModel, RecordingDrafter<D>> decoder(model, RecordingDrafter<D>(make(stream, k), &trace));
  DecodeOptions options;
  options.max_new_tokens = stream.output.size();
  options.max_drafts = k;
  const DecodeResult decoded = decoder.generate(stream.prompt, options);
  if (decoded.tokens != stream.output) {
    const auto diverged = std::mismatch(decoded.tokens.begin(), decoded.tokens.end(), stream.output.begin(),
                                        stream.output.end());
    throw std::runtime_error("record " + stream.id + ": the decoded output departs from the recording at output token " +
                             std::to_string(diverged.first - decoded.tokens.begin()) + " (decoded " +
                             std::to_string(decoded.tokens.size()) + " tokens, recorded " +
                             std::to_string(stream.output.size()) + ")");
  }

  RecordResult result;
  result.generated = decoded.stats.generated;
  result.passes = decoded.stats.decode_passes + 1;
  result.drafted = decoded.stats.drafted;
  result.accepted = decoded.stats.accepted;

  std::vector<Token> sequence(stream.prompt);
  sequence.insert(sequence.end(), stream.output.begin(), stream.output.end());
  std::vector<Token> out(options.max_drafts + 1);
  double best = std::numeric_limits<double>::infinity();
  for (int repeat = 0; repeat < std::max(timing_repeats, 1); ++repeat) {
    const std::size_t heap_before = meter.present() ? meter.live_bytes() : 0;
    if (meter.present()) meter.reset_peak();
    std::size_t sink = 0;
    std::chrono::steady_clock::duration elapsed{};
    {
      D drafter = make(stream, k);
      std::size_t pos = 0;
      const auto start = std::chrono::steady_clock::now();
      for (const std::uint32_t call : trace) {
        if ((call & kPredict) != 0) {
          sink += drafter.predict(std::span<Token>(out).first(call & ~kPredict));
        } else {
          drafter.update(std::span<const Token>(sequence).subspan(pos, call));
          pos += call;
        }
      }
      elapsed = std::chrono::steady_clock::now() - start;
    }
    // The sink keeps the predictions observable so the calls cannot be optimized away.
    if (sink == std::numeric_limits<std::size_t>::max()) throw std::logic_error("unreachable");
    best = std::min(best, std::chrono::duration<double, std::nano>(elapsed).count());
    if (meter.present()) {
      result.drafter_peak_bytes = std::max(result.drafter_peak_bytes, meter.peak_bytes() - heap_before);
    }
  }
  result.drafter_ns = best;
  return result;
}

}  // namespace ngramspec::replay
