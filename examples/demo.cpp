// Decodes two streams through a mock greedy model, with and without speculation, and shows
// what speculation buys on each: a periodic stream, where n-gram drafts keep being right, and
// a random stream, where they have nothing to go on. Exits nonzero if speculation changed the
// output or took more target passes than plain decoding.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <ngramspec/ngramspec.hpp>

namespace {

using ngramspec::Token;

constexpr Token kVocab = 32000;      // a Llama-sized vocabulary
constexpr std::size_t kPeriod = 32;  // length of the periodic stream's cycle
constexpr std::size_t kPromptLength = 16;
constexpr std::size_t kNewTokens = 256;
constexpr std::size_t kMaxBatch = 16;  // tokens one forward takes

[[nodiscard]] std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

enum class Stream { periodic, random };

/// A deterministic greedy "model": its next token is a fixed function of the tokens it holds.
/// It keeps those tokens as its KV cache and throws if the decoder ever breaks the contract.
class MockModel {
 public:
  explicit MockModel(Stream stream) : stream_(stream) {
    for (std::size_t i = 0; i < kPeriod; ++i) period_.push_back(static_cast<Token>(mix(i) % kVocab));
    held_.reserve(kPromptLength + kNewTokens);
  }

  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) {
    if (pos != held_.size()) {
      throw std::logic_error("forward at " + std::to_string(pos) + ", model holds " + std::to_string(held_.size()));
    }
    if (tokens.empty() || tokens.size() > kMaxBatch || next.size() != tokens.size()) {
      throw std::logic_error("forward with a bad batch size");
    }
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      held_.push_back(tokens[i]);
      next[i] = next_token();
    }
  }

  void rollback(std::size_t pos) {
    if (pos > held_.size()) throw std::logic_error("rollback beyond what the model holds");
    held_.resize(pos);
  }

  [[nodiscard]] std::size_t max_batch() const noexcept { return kMaxBatch; }

  /// The first `n` tokens of the stream this model continues.
  [[nodiscard]] std::vector<Token> prompt(std::size_t n) const {
    std::vector<Token> tokens;
    for (std::size_t i = 0; i < n; ++i) {
      tokens.push_back(stream_ == Stream::periodic ? period_[i % kPeriod] : static_cast<Token>(mix(~i) % kVocab));
    }
    return tokens;
  }

 private:
  // The greedy choice after held_.
  [[nodiscard]] Token next_token() const noexcept {
    const Token last = held_.back();
    if (stream_ == Stream::periodic) {
      // The period entry after the last token; anything off the cycle re-enters at its start.
      const auto it = std::find(period_.begin(), period_.end(), last);
      return it == period_.end() ? period_[0] : period_[static_cast<std::size_t>(it - period_.begin() + 1) % kPeriod];
    }
    // Position and the last two tokens through a strong mixer: with 32000 tokens, contexts
    // practically never repeat, so there is nothing for an n-gram drafter to learn.
    const std::size_t n = held_.size();
    const Token before = n >= 2 ? held_[n - 2] : 0;
    return static_cast<Token>(mix(mix(n) ^ (std::uint64_t{last} << 32 | before)) % kVocab);
  }

  Stream stream_;
  std::vector<Token> period_;
  std::vector<Token> held_;
};

struct Row {
  const char* name = "";
  ngramspec::DecodeResult plain;
  ngramspec::DecodeResult speculative;
  std::vector<Token> reference;  // a bare one-token-per-forward loop, outside the decoder
};

[[nodiscard]] std::size_t passes(const ngramspec::DecodeStats& stats) noexcept {
  return stats.prefill_passes + stats.decode_passes;
}

// Plain greedy decoding written out by hand, as the yardstick for both decoder runs.
[[nodiscard]] std::vector<Token> reference_decode(MockModel& model, std::span<const Token> prompt) {
  model.rollback(0);
  std::vector<Token> out;
  Token next = 0;
  for (std::size_t pos = 0; pos < prompt.size(); ++pos) model.forward(pos, prompt.subspan(pos, 1), {&next, 1});
  while (out.size() < kNewTokens) {
    out.push_back(next);
    if (out.size() == kNewTokens) break;
    model.forward(prompt.size() + out.size() - 1, {&out.back(), 1}, {&next, 1});
  }
  return out;
}

[[nodiscard]] Row run(const char* name, Stream stream) {
  MockModel model(stream);
  const std::vector<Token> prompt = model.prompt(kPromptLength);
  ngramspec::SpeculativeDecoder decoder(model);

  ngramspec::DecodeOptions options;
  options.max_new_tokens = kNewTokens;
  Row row;
  row.name = name;
  row.speculative = decoder.generate(prompt, options);
  options.speculate = false;
  row.plain = decoder.generate(prompt, options);
  row.reference = reference_decode(model, prompt);
  return row;
}

}  // namespace

int main() {
  const ngramspec::MatchDrafter drafter;  // the decoder's default drafter
  const ngramspec::MatchConfig& config = drafter.config();
  std::printf("Greedy mock model, %u-token vocabulary, %zu-token prompt, %zu new tokens.\n", kVocab, kPromptLength,
              kNewTokens);
  std::printf("Drafter: MatchDrafter defaults: copies matches of %zu+ tokens from the first %zu, else n-gram counts\n"
              "of orders 2-%zu over the last %zu; %zu drafts a pass, %zu KiB.\n\n",
              config.copy_min_match, config.index_capacity, config.count_max_order, config.count_window,
              ngramspec::DecodeOptions{}.max_drafts,
              (drafter.memory_bytes() + 512) / 1024);

  const Row rows[] = {run("periodic", Stream::periodic), run("random", Stream::random)};

  std::printf("%-9s %7s %13s %12s %18s %17s  %s\n", "stream", "tokens", "passes plain", "passes spec",
              "tokens/pass plain", "tokens/pass spec", "outputs identical");
  bool ok = true;
  for (const Row& row : rows) {
    const bool identical = row.speculative.tokens == row.plain.tokens && row.plain.tokens == row.reference;
    const bool no_more_passes = passes(row.speculative.stats) <= passes(row.plain.stats);
    ok = ok && identical && no_more_passes;
    std::printf("%-9s %7zu %13zu %12zu %18.2f %17.2f  %s\n", row.name, row.speculative.stats.generated,
                passes(row.plain.stats), passes(row.speculative.stats), row.plain.stats.mean_accepted_length(),
                row.speculative.stats.mean_accepted_length(), identical ? "yes" : "no");
    if (!no_more_passes) std::printf("  error: speculation took more target passes than plain decoding\n");
  }
  std::printf("\ntokens/pass = generated tokens / target passes (mean accepted length; plain decoding = 1.00)\n");
  return ok ? 0 : 1;
}
