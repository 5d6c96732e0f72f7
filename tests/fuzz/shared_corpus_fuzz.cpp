// Fuzz target: SharedCorpus against the naive NaiveCorpus.
//
// The input decodes into a capacity (256..2048 tokens), a token alphabet (small ids, ids at the
// top of the range, or scattered 32-bit ids with 0xFFFFFFFF among them) and a script of appends
// (new tokens, periodic runs past the capacity, pieces of earlier records), drafts (contexts of
// new tokens or of pieces of records, some longer than kMaxVerify; rooms from none to twice the
// capacity) and clears. Every draft equals the reference's in count, match length and tokens and
// writes nothing past its count; after every step size(), appended() and records() equal the
// reference's and memory_bytes() has not changed.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

#include "fuzz_input.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "support/reference_corpus.hpp"

namespace ngramspec::test {
namespace {

// Most tokens a record or context takes from the input, one byte each.
constexpr std::size_t kMaxRun = 40;
constexpr Token kFiller = 0xABABABABU;

void print_tokens(const char* name, std::span<const Token> tokens) {
  std::fprintf(stderr, "%s[%zu] =", name, tokens.size());
  for (const Token t : tokens) std::fprintf(stderr, " %u", static_cast<unsigned>(t));
  std::fprintf(stderr, "\n");
}

class Run {
 public:
  explicit Run(FuzzInput& in)
      : in_(in),
        capacity_(SharedCorpus::kMinTokens << in_.in_range(0, 3)),
        corpus_(SharedCorpus::bytes_for(capacity_)),
        naive_(capacity_),
        memory_(corpus_.memory_bytes()) {
    alphabet_ = fuzz_alphabet(in_, 8);
  }

  void run() {
    if (corpus_.capacity_tokens() != capacity_) fail("capacity_tokens() is not the capacity bytes_for() holds");
    for (step_ = 0; !in_.empty(); ++step_) {
      const std::uint8_t op = in_.byte();
      const std::size_t arg = op >> 3;
      switch (op % 8) {
        case 0:
        case 1:
        case 2: append(arg); break;
        case 3:
        case 4:
        case 5:
        case 6: draft(arg); break;
        default:
          // Rarely a clear, so that most scripts fill the corpus and evict.
          if (arg % 4 == 0) {
            corpus_.clear();
            naive_.clear();
          } else {
            append(arg);
          }
          break;
      }
      if (corpus_.size() != naive_.size()) fail("size() differs from the reference");
      if (corpus_.appended() != naive_.appended()) fail("appended() differs from the reference");
      if (corpus_.records() != naive_.records()) fail("records() differs from the reference");
      if (corpus_.size() > corpus_.capacity_tokens()) fail("size() is above capacity_tokens()");
      if (corpus_.memory_bytes() != memory_) fail("memory_bytes() changed after construction");
    }
  }

 private:
  [[nodiscard]] Token token(std::size_t choice) const noexcept { return alphabet_[choice % alphabet_.size()]; }

  void random_tokens(std::vector<Token>& tokens, std::size_t length) {
    for (std::size_t i = 0; i < length; ++i) tokens.push_back(token(in_.byte()));
  }

  // A piece of the last record, or nothing when there is none.
  void piece_of_last(std::vector<Token>& tokens, std::size_t most) {
    if (last_record_.empty()) return;
    const std::size_t from = in_.in_range(0, last_record_.size() - 1);
    const std::size_t n = std::min(most, last_record_.size() - from);
    tokens.insert(tokens.end(), last_record_.begin() + static_cast<std::ptrdiff_t>(from),
                  last_record_.begin() + static_cast<std::ptrdiff_t>(from + n));
  }

  void append(std::size_t arg) {
    record_.clear();
    switch (arg % 4) {
      case 0: random_tokens(record_, in_.in_range(0, kMaxRun)); break;
      case 1: {
        // A period of up to 8 tokens repeated, up to past twice the capacity: eviction by one record.
        std::vector<Token> period;
        random_tokens(period, in_.in_range(1, 8));
        const std::size_t length = in_.flag() ? in_.in_range(capacity_ / 2, 2 * capacity_ + 5) : in_.in_range(1, 64);
        for (std::size_t i = 0; i < length; ++i) record_.push_back(period[i % period.size()]);
        break;
      }
      case 2: random_tokens(record_, in_.in_range(1, 3)); break;
      default:
        // New tokens around a piece of the last record, so long matches occur.
        random_tokens(record_, in_.in_range(0, 4));
        piece_of_last(record_, in_.in_range(1, 255));
        random_tokens(record_, in_.in_range(0, 4));
    }
    corpus_.append(record_);
    naive_.append(record_);
    if (!record_.empty()) last_record_ = record_;
  }

  void draft(std::size_t arg) {
    context_.clear();
    switch (arg % 4) {
      case 0: random_tokens(context_, in_.in_range(0, 8)); break;
      case 1: {
        // Longer than kMaxVerify at times: only the last kMaxVerify are read.
        std::vector<Token> period;
        random_tokens(period, in_.in_range(1, 4));
        const std::size_t length = in_.in_range(0, 150);
        for (std::size_t i = 0; i < length; ++i) context_.push_back(period[i % period.size()]);
        break;
      }
      default:
        // The start of a piece of a recent record, perhaps after new tokens.
        random_tokens(context_, in_.in_range(0, 3));
        piece_of_last(context_, in_.in_range(0, 100));
    }
    const std::size_t room = (arg & 16) != 0 ? in_.in_range(0, 2 * capacity_) : in_.in_range(0, 12);
    out_.assign(room + 8, kFiller);
    const CorpusDraft found = corpus_.draft(context_, std::span<Token>(out_.data(), room));
    const Drafted expected = naive_.draft(context_, room);
    if (found.busy) fail("draft() was busy with no other thread");
    if (found.count > room) fail("draft() returned more than its room");
    for (std::size_t i = found.count; i < out_.size(); ++i) {
      if (out_[i] != kFiller) fail("draft() wrote past its count");
    }
    const std::span<const Token> got(out_.data(), found.count);
    if (found.count != expected.count || found.match_length != expected.match_length ||
        !std::equal(got.begin(), got.end(), expected.tokens.begin(), expected.tokens.end())) {
      std::fprintf(stderr, "room %zu: corpus count %zu match_length %zu; reference count %zu match_length %zu\n", room,
                   found.count, found.match_length, expected.count, expected.match_length);
      print_tokens("context", context_);
      print_tokens("corpus drafts", got);
      print_tokens("reference drafts", expected.tokens);
      fail("draft() differs from the reference");
    }
  }

  [[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "capacity %zu, script step %zu; held %zu of %zu appended in %zu records\n", capacity_, step_,
                 naive_.size(), naive_.appended(), naive_.records());
    fuzz_fail(what);
  }

  FuzzInput& in_;
  std::size_t capacity_;
  SharedCorpus corpus_;
  NaiveCorpus naive_;
  std::size_t memory_;
  std::vector<Token> alphabet_;
  std::vector<Token> record_;
  std::vector<Token> last_record_;
  std::vector<Token> context_;
  std::vector<Token> out_;
  std::size_t step_ = 0;
};

}  // namespace
}  // namespace ngramspec::test

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ngramspec::test::FuzzInput in(data, size);
  ngramspec::test::Run(in).run();
  return 0;
}
