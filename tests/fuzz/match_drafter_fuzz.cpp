// Fuzz target: MatchDrafter against the naive NaiveMatch (and, with a corpus, NaiveCorpus).
//
// The input decodes into a configuration (an index_capacity of 4..300 tokens, so scripts cross it
// often; copy_min_match 1..8, max_drafts 1..20, count_max_order 2..4, a count window of 0 or
// 4..index_capacity),
// whether a SharedCorpus is consulted, a token alphabet (small ids, ids at the top of the range,
// or scattered 32-bit ids with 0xFFFFFFFF among them) and a script of update(token),
// update(span), predict, reset, and corpus appends and clears. After every step the ungated
// drafter's match and drafts equal the reference's: without a corpus NaiveMatch's; with one,
// the corpus's drafts when the match is empty and the corpus has some, or when the corpus's match
// is at least kLongCorpusMatch tokens and longer than the sequence's, else NaiveMatch's.
// Three gated drafters run beside it: they keep the same match, and each drafts a prefix of
// what the next lower gate drafts.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <vector>

#include "fuzz_input.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "support/reference_corpus.hpp"
#include "support/reference_match.hpp"

namespace ngramspec::test {
namespace {

// Most tokens one update(span) or corpus append takes in the script.
constexpr std::size_t kMaxRun = 24;
// Most slots one predict is given: more than the largest max_drafts.
constexpr std::size_t kMaxRoom = 24;
constexpr Token kFiller = 0xABABABABU;
// The gates beside the ungated drafter, lowest first; the middle one is the input's.
constexpr std::size_t kGates = 3;

void print_tokens(const char* name, std::span<const Token> tokens) {
  std::fprintf(stderr, "%s[%zu] =", name, tokens.size());
  for (const Token t : tokens) std::fprintf(stderr, " %u", static_cast<unsigned>(t));
  std::fprintf(stderr, "\n");
}

struct Scenario {
  MatchConfig config;
  bool with_corpus = false;
  std::size_t corpus_tokens = 0;
  std::array<double, kGates> gates{};
};

void print_scenario(const Scenario& s, std::size_t step) {
  std::fprintf(stderr,
               "config: index_capacity %zu, copy_min_match %zu, max_drafts %zu, count_max_order %zu, count_window %zu; "
               "corpus %s (%zu tokens); gates %g %g %g; script step %zu\n",
               s.config.index_capacity, s.config.copy_min_match, s.config.max_drafts, s.config.count_max_order,
               s.config.count_window, s.with_corpus ? "yes" : "no", s.corpus_tokens, s.gates[0], s.gates[1],
               s.gates[2], step);
}

class Run {
 public:
  Run(FuzzInput& in, const Scenario& scenario)
      : in_(in),
        s_(scenario),
        corpus_(s_.with_corpus ? std::make_unique<SharedCorpus>(SharedCorpus::bytes_for(s_.corpus_tokens)) : nullptr),
        naive_corpus_(s_.corpus_tokens),
        drafter_(s_.config, corpus_.get()),
        naive_(s_.config),
        memory_(drafter_.memory_bytes()) {
    for (const double gate : s_.gates) {
      MatchConfig gated = s_.config;
      gated.min_confidence = gate;
      gated_.push_back(std::make_unique<MatchDrafter>(gated, corpus_.get()));
    }
    alphabet_ = fuzz_alphabet(in_, 12);
  }

  void run() {
    for (step_ = 0; !in_.empty(); ++step_) {
      const std::uint8_t op = in_.byte();
      const std::size_t arg = op >> 3;
      switch (op % 8) {
        case 0:
        case 1:
        case 2: observe_one(token(arg)); break;
        case 3: {
          run_tokens_.resize(in_.in_range(0, kMaxRun));
          for (Token& t : run_tokens_) t = token(in_.byte());
          observe(run_tokens_);
          break;
        }
        case 4:
        case 5: check_predict(arg % (kMaxRoom + 1)); break;
        case 6:
          if (corpus_ != nullptr) {
            append_record(arg);
          } else {
            observe_one(token(arg));
          }
          break;
        default:
          // Rarely a reset or a clear, so that most scripts build long sequences past the cap.
          if (arg % 8 == 0 || arg % 8 == 2) {
            // restart() forgets the sequence as reset() does, keeping the gates' calibration.
            const bool restart = arg % 8 == 2;
            restart ? drafter_.restart() : drafter_.reset();
            for (const auto& gated : gated_) restart ? gated->restart() : gated->reset();
            naive_.reset();
            hint_end_ = 0;
          } else if (arg % 8 == 1 && corpus_ != nullptr) {
            corpus_->clear();
            naive_corpus_.clear();
          }
          break;
      }
      check_state();
      check_predict(kMaxRoom);
    }
  }

 private:
  [[nodiscard]] Token token(std::size_t choice) const noexcept { return alphabet_[choice % alphabet_.size()]; }

  void observe_one(Token t) {
    drafter_.update(t);
    for (const auto& gated : gated_) gated->update(t);
    naive_.update(t);
  }
  void observe(std::span<const Token> tokens) {
    drafter_.update(tokens);
    for (const auto& gated : gated_) gated->update(tokens);
    for (const Token t : tokens) naive_.update(t);
  }

  // A record for the corpus: the sequence's last tokens, a piece of it, or new tokens.
  void append_record(std::size_t arg) {
    const std::vector<Token>& sequence = naive_.sequence();
    record_.clear();
    const std::size_t length = in_.in_range(0, kMaxRun);
    if (arg % 3 != 2 && !sequence.empty()) {
      const std::size_t n = std::min(length, sequence.size());
      const std::size_t from = arg % 3 == 0 ? sequence.size() - n : in_.in_range(0, sequence.size() - n);
      record_.assign(sequence.begin() + static_cast<std::ptrdiff_t>(from),
                     sequence.begin() + static_cast<std::ptrdiff_t>(from + n));
    } else {
      record_.resize(length);
      for (Token& t : record_) t = token(in_.byte());
    }
    corpus_->append(record_);
    naive_corpus_.append(record_);
    if (corpus_->size() != naive_corpus_.size() || corpus_->appended() != naive_corpus_.appended() ||
        corpus_->records() != naive_corpus_.records()) {
      fail("the corpus's size, appended or records differ from NaiveCorpus's");
    }
  }

  void check_state() {
    const std::size_t seen = naive_.sequence().size();
    if (drafter_.tokens_seen() != seen) fail("tokens_seen() differs from the tokens observed");
    if (drafter_.indexed() != std::min(seen, s_.config.index_capacity)) {
      fail("indexed() is not min(tokens_seen(), index_capacity)");
    }
    if (drafter_.match_length() != naive_.length()) fail("match_length() differs from NaiveMatch's");
    if (drafter_.match_end() != naive_.end()) fail("match_end() differs from NaiveMatch's");
    for (const auto& gated : gated_) {
      if (gated->match_length() != drafter_.match_length() || gated->match_end() != drafter_.match_end()) {
        fail("a gated drafter's match differs from the ungated one's");
      }
    }
    if (drafter_.memory_bytes() != memory_) fail("memory_bytes() changed after construction");
  }

  // predict() with `room` slots: filler past them shows a write beyond min(room, max_drafts).
  std::size_t predict(const MatchDrafter& drafter, std::size_t room, std::array<Token, kMaxRoom + 4>& out) {
    out.fill(kFiller);
    const std::size_t n = drafter.predict(std::span<Token>(out.data(), room));
    const std::size_t limit = std::min(room, s_.config.max_drafts);
    if (n > limit) fail("predict returned more than min(room, max_drafts)");
    for (std::size_t i = limit; i < out.size(); ++i) {
      if (out[i] != kFiller) fail("predict wrote past min(room, max_drafts)");
    }
    return n;
  }

  void check_predict(std::size_t room) {
    std::array<Token, kMaxRoom + 4> got{};
    const std::size_t n = predict(drafter_, room, got);
    expected_ = naive_.predict(room);
    const std::size_t drafts = std::min(room, s_.config.max_drafts);
    const std::vector<Token>& sequence = naive_.sequence();
    if (corpus_ != nullptr && naive_.length() < MatchDrafter::kCorpusContext && drafts > 0 && !sequence.empty()) {
      // An empty match drafts from the corpus, after the sequence's last kCorpusContext tokens,
      // and so does a shorter match than a long one of the corpus. The lookup is hinted with
      // where the last one matched, moved on by the tokens seen since.
      const std::size_t context = std::min(sequence.size(), MatchDrafter::kCorpusContext);
      const std::uint64_t hint = hint_end_ == 0 ? 0 : hint_end_ + (sequence.size() - hint_seen_);
      const Drafted from_corpus = naive_corpus_.draft(std::span<const Token>(sequence).last(context), drafts, hint);
      hint_end_ = from_corpus.end;
      hint_seen_ = sequence.size();
      const bool longer = from_corpus.match_length >= MatchDrafter::kLongCorpusMatch &&
                          from_corpus.match_length > naive_.length();
      if (from_corpus.count > 0 && (naive_.length() == 0 || longer)) expected_ = from_corpus.tokens;
    }
    if (n != expected_.size() || !std::equal(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(n),
                                             expected_.begin())) {
      print_tokens("drafter", std::span<const Token>(got.data(), n));
      print_tokens("reference", expected_);
      fail("the ungated predict differs from the reference");
    }
    // Each gate drafts a prefix of what the next lower one drafts, the ungated drafter first.
    std::array<Token, kMaxRoom + 4> lower = got;
    std::size_t lower_n = n;
    for (std::size_t g = 0; g < gated_.size(); ++g) {
      std::array<Token, kMaxRoom + 4> higher{};
      const std::size_t higher_n = predict(*gated_[g], room, higher);
      if (higher_n > lower_n || !std::equal(higher.begin(), higher.begin() + static_cast<std::ptrdiff_t>(higher_n),
                                            lower.begin())) {
        std::fprintf(stderr, "room %zu, gate %g\n", room, s_.gates[g]);
        print_tokens("higher gate", std::span<const Token>(higher.data(), higher_n));
        print_tokens("lower gate", std::span<const Token>(lower.data(), lower_n));
        fail("a higher gate's drafts are not a prefix of a lower one's");
      }
      lower = higher;
      lower_n = higher_n;
    }
  }

  [[noreturn]] void fail(const char* what) {
    print_scenario(s_, step_);
    print_tokens("observed since reset", naive_.sequence());
    std::fprintf(stderr, "match: drafter L %zu e %zu, reference L %zu e %zu; corpus %zu tokens held\n",
                 drafter_.match_length(), drafter_.match_end(), naive_.length(), naive_.end(), naive_corpus_.size());
    fuzz_fail(what);
  }

  FuzzInput& in_;
  Scenario s_;
  std::unique_ptr<SharedCorpus> corpus_;
  NaiveCorpus naive_corpus_;
  std::uint64_t hint_end_ = 0;   // where the ungated drafter's last lookup matched (0: nowhere)
  std::size_t hint_seen_ = 0;    // and the tokens seen then
  MatchDrafter drafter_;
  std::vector<std::unique_ptr<MatchDrafter>> gated_;
  NaiveMatch naive_;
  std::size_t memory_;
  std::vector<Token> alphabet_;
  std::vector<Token> run_tokens_;
  std::vector<Token> record_;
  std::vector<Token> expected_;
  std::size_t step_ = 0;
};

void run(FuzzInput& in) {
  Scenario s;
  s.config.index_capacity = in.in_range(4, 300);
  s.config.copy_min_match = in.in_range(1, 8);
  s.config.max_drafts = in.in_range(1, 20);
  s.config.count_max_order = in.in_range(2, 4);
  s.config.count_window = in.flag() ? 0 : in.in_range(4, s.config.index_capacity);
  s.config.min_confidence = 0;  // the reference is the ungated drafter
  s.with_corpus = in.flag();
  s.corpus_tokens = SharedCorpus::kMinTokens << in.in_range(0, 1);
  // The middle gate from the input, in (0, 0.99]; the default gate below it unless that is lower.
  const double middle = static_cast<double>(in.in_range(1, 99)) / 100;
  s.gates = {std::min(MatchConfig{}.min_confidence, middle), middle, std::min(0.99, middle + 0.3)};
  Run(in, s).run();
}

}  // namespace
}  // namespace ngramspec::test

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ngramspec::test::FuzzInput in(data, size);
  ngramspec::test::run(in);
  return 0;
}
