// Fuzz target: the C ABI (ngramspec.h, through libngramspec.so) under arbitrary calls.
//
// The input decodes into a script of calls to every entry point with arguments the contract says
// are checked: NULL handles, NULL pointers with nonzero counts, counts and capacities no array can
// have (bytes beyond PTRDIFF_MAX, or wrapping size_t) with real arrays, NULL outputs, counts and offsets
// that disagree, unknown, duplicate and finished sequence ids, invalid configurations and cost
// specs (arbitrary bytes among them), huge extra_tokens. It never passes a dangling pointer nor an
// array shorter than its count: those are outside the contract. What must hold:
// - every call returns a status the header names; a failing call leaves a message that starts
//   with its function's name, and writes no output (sentinels survive);
// - the batch's calls succeed exactly when their arguments are valid, as computed here from the
//   sequences the script has begun, stepped and ended (begin, propose, accept, finish, cancel);
// - a successful propose keeps its drafts within the buffer, each sequence's max_drafts and
//   remaining tokens, and none for a sequence before its prefill; a successful accept emits 1 to
//   n tokens per sequence, rolls back to prompt + output - 1, and, when the model tokens come
//   from the script's greedy model, emits exactly that model's greedy decoding;
// - predict never returns more than its room, nor writes past it, with non-increasing
//   probabilities in [0, 1];
// - sizes, stats and corpus records agree with what the script did;
// - corpus files: a corpus saved, mapped and loaded back (or a file overwritten with garbage, or a
//   path that cannot be written) succeeds exactly when the file is good, a bad one failing with
//   NGRAMSPEC_ERROR_CORPUS_FILE; a mapped file verifies and drafts exactly what a live corpus
//   loaded from it drafts; drafters and batches consult it (any preference, invalid ones refused);
// - samplers: creation and new options succeed exactly when the options are valid; verify_chain
//   never writes its outputs when it fails, succeeds whenever its arguments are valid, accepts at
//   most its drafts and returns a token of the vocabulary, and at temperature 0 accepts exactly the
//   greedy prefix of the drafts and returns the argmax after it (either mode); verify_tree likewise
//   writes nothing when it fails, walks a path of the tree that follows the tokens it chose, writes
//   tokens of the vocabulary only, and at temperature 0 walks exactly the argmax path.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "fuzz_input.hpp"
#include "ngramspec/ngramspec.h"
#include "support/temp_dir.hpp"

namespace ngramspec::test {
namespace {

constexpr Token kSentinel = 0xABABABABU;
constexpr std::size_t kSizeSentinel = 0xDEADBEEFU;
constexpr std::size_t kSlots = 2;

// The script's greedy model: a 13-token cycle.
Token model_after(Token t) noexcept { return static_cast<Token>((std::uint64_t{t} * 5 + 3) % 13); }

bool known_status(ngramspec_status status) noexcept {
  return status == NGRAMSPEC_OK || status == NGRAMSPEC_ERROR_INVALID_ARGUMENT ||
         status == NGRAMSPEC_ERROR_OUT_OF_MEMORY || status == NGRAMSPEC_ERROR_INTERNAL ||
         status == NGRAMSPEC_ERROR_CORPUS_FILE;
}

// Checks a call's status: known, and on failure a message naming the function.
bool check_status(ngramspec_status status, const char* function) {
  if (!known_status(status)) fuzz_fail("a call returned a status the header does not name");
  if (status != NGRAMSPEC_OK) {
    const char* message = ngramspec_last_error();
    const std::size_t n = std::strlen(function);
    if (std::strncmp(message, function, n) != 0 || message[n] != ':') {
      std::fprintf(stderr, "%s failed with \"%s\"\n", function, message);
      fuzz_fail("a failing call's message does not start with its function's name");
    }
    if (std::strcmp(ngramspec_status_name(status), "unknown status") == 0) fuzz_fail("a status has no name");
  }
  return status == NGRAMSPEC_OK;
}

// The folder the script's corpus files go to, made once per process.
const std::filesystem::path& file_folder() {
  static const TempDir folder;
  return folder.path();
}

// Expects the call to have succeeded exactly when its arguments were valid.
void expect_valid(bool ok, bool valid, const char* function) {
  if (ok == valid) return;
  std::fprintf(stderr, "%s %s; last error: \"%s\"\n", function, ok ? "succeeded" : "failed", ngramspec_last_error());
  fuzz_fail(valid ? "a valid call failed" : "an invalid call succeeded");
}

// One sequence the batch runs, as the script knows it.
struct Sequence {
  std::vector<Token> prompt;
  std::vector<Token> output;
  std::vector<Token> stops;
  std::size_t max_new_tokens = 0;
  std::size_t max_context = 0;
  std::size_t max_drafts = 0;
  bool speculate = true;
  bool finished = false;
  bool honest = true;          // every model token so far was the greedy model's
  std::vector<Token> pending;  // drafts proposed since its last step
  [[nodiscard]] std::size_t remaining() const {
    if (finished) return 0;
    std::size_t left = max_new_tokens > output.size() ? max_new_tokens - output.size() : 0;
    if (max_context != 0) {
      const std::size_t used = prompt.size() + output.size();
      left = std::min(left, max_context > used ? max_context - used : 0);
    }
    return left;
  }
  [[nodiscard]] Token last() const { return output.empty() ? prompt.back() : output.back(); }
};

class Script {
 public:
  explicit Script(FuzzInput& in) : in_(in) {
    // Every input starts with none of its files on disk (the folder outlives the inputs).
    for (std::size_t f = 0; f < kSlots; ++f) std::filesystem::remove(file_path(f));
  }
  Script(const Script&) = delete;
  Script& operator=(const Script&) = delete;

  ~Script() {
    ngramspec_batch_free(batch_);
    for (auto* m : matches_) ngramspec_match_drafter_free(m);
    for (auto* n : ngrams_) ngramspec_ngram_predictor_free(n);
    for (auto* c : corpora_) ngramspec_corpus_free(c);
    for (auto* s : samplers_) ngramspec_sampler_free(s);
    for (auto* f : files_) ngramspec_corpus_file_close(f);
    for (auto* m : mirrors_) ngramspec_corpus_free(m);
  }

  void run() {
    while (!in_.empty()) {
      // The top 16 byte values are the corpus files' calls (added after the others: the rest of
      // the committed inputs decode as they did).
      const std::uint8_t op = in_.byte();
      if (op >= kFileOps) {
        corpus_file(op - kFileOps);
        continue;
      }
      if (op >= kSamplerOps) {  // the 8 byte values below the files' (added after them)
        sampler(op - kSamplerOps);
        continue;
      }
      switch (op % 20) {
        case 0: corpus_create(); break;
        case 1: corpus_append(); break;
        case 2: corpus_misc(); break;
        case 3: match_create(false); break;
        case 4: drafter_update(true); break;
        case 5: drafter_predict(true); break;
        case 6: ngram_create(); break;
        case 7: drafter_update(false); break;
        case 8: drafter_predict(false); break;
        case 9: drafter_reset_or_free(); break;
        case 10: batch_create(false); break;
        case 11:
        case 12: begin(); break;
        case 13:
        case 14: propose(); break;
        case 15:
        case 16: accept(); break;
        case 17: end_sequence(); break;
        case 18: observe(); break;
        default: free_something(); break;
      }
    }
  }

 private:
  // ---- Arguments -------------------------------------------------------------------------------

  std::size_t slot() { return in_.in_range(0, kSlots - 1); }
  // Small tokens mostly, so that drafts happen; now and then any 32-bit id.
  Token token() { return in_.in_range(0, 7) == 0 ? static_cast<Token>(in_.in_range(0, 0xFFFFFFFFU)) : static_cast<Token>(in_.in_range(0, 12)); }
  std::vector<Token> tokens(std::size_t max) {
    std::vector<Token> t(in_.in_range(0, max));
    if (!t.empty() && in_.flag()) {  // the greedy model's own text
      t[0] = static_cast<Token>(in_.in_range(0, 12));
      for (std::size_t i = 1; i < t.size(); ++i) t[i] = model_after(t[i - 1]);
    } else {
      for (Token& x : t) x = token();
    }
    return t;
  }
  // A size as a caller might get it wrong: small, or near the top of size_t.
  std::size_t size_value(std::size_t small) {
    switch (in_.in_range(0, 7)) {
      case 0: return std::numeric_limits<std::size_t>::max() - in_.in_range(0, 4);
      case 1: return std::size_t{1} << in_.in_range(0, 40);
      default: return in_.in_range(0, small);
    }
  }
  // A token count no array can have: its bytes exceed PTRDIFF_MAX or wrap round size_t (SIZE_MAX / 4
  // + 1 tokens are 0 bytes). Passed with a real array, the call must refuse it before reading any.
  std::size_t impossible_count() {
    switch (in_.in_range(0, 3)) {
      case 0: return std::numeric_limits<std::size_t>::max() - in_.in_range(0, 4);
      case 1: return std::numeric_limits<std::size_t>::max() / sizeof(Token) + 1 + in_.in_range(0, 4);
      case 2: return kLargestTokenCount + 1 + in_.in_range(0, 4);
      default: return std::size_t{1} << in_.in_range(62, 63);
    }
  }
  static constexpr std::size_t kLargestTokenCount = static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(Token);
  static bool possible(std::size_t count) { return count <= kLargestTokenCount; }
  // A value beyond every size a configuration accepts (so nothing that large is allocated).
  std::size_t huge() {
    switch (in_.in_range(0, 2)) {
      case 0: return std::numeric_limits<std::size_t>::max() - in_.in_range(0, 4);
      case 1: return (std::size_t{1} << 25) + in_.in_range(0, 4);
      default: return std::size_t{1} << 40;
    }
  }
  // A pointer to `data` or NULL, the latter when the input says so.
  template <class T>
  T* maybe_null(T* data) {
    return in_.in_range(0, 9) == 0 ? nullptr : data;
  }

  // ---- SharedCorpus ----------------------------------------------------------------------------

  static constexpr std::uint8_t kFileOps = 240;
  static constexpr std::uint8_t kSamplerOps = 232;

  // ---- Samplers --------------------------------------------------------------------------------

  // Options, valid mostly; `valid` says whether they are.
  ngramspec_sampling_options sampling_options(bool& valid) {
    ngramspec_sampling_options o = ngramspec_sampling_options_default();
    const auto real = [&](float lo, float hi) {
      switch (in_.in_range(0, 15)) {
        case 0: return std::numeric_limits<float>::quiet_NaN();
        case 1: return std::numeric_limits<float>::infinity();
        case 2: return -1.0f;
        default: return lo + (hi - lo) * static_cast<float>(in_.in_range(0, 1000)) / 1000.0f;
      }
    };
    if (in_.flag()) o.temperature = in_.flag() ? 0.0f : real(0.1f, 3.0f);
    if (in_.in_range(0, 3) == 0) o.top_k = in_.in_range(0, 20);
    if (in_.in_range(0, 3) == 0) o.top_p = real(0.0f, 1.0f);
    if (in_.in_range(0, 3) == 0) o.min_p = real(0.0f, 1.0f);
    o.seed = in_.in_range(0, 0xFFFFFFFFU);
    o.mode = static_cast<int>(in_.in_range(0, 9) == 0 ? in_.in_range(2, 5) : in_.in_range(0, 1));
    if (in_.in_range(0, 15) == 0) o.struct_size = in_.in_range(0, 200);
    valid = o.struct_size == sizeof(ngramspec_sampling_options) && std::isfinite(o.temperature) &&
            o.temperature >= 0.0f && o.top_p > 0.0f && o.top_p <= 1.0f && o.min_p >= 0.0f && o.min_p < 1.0f &&
            (o.mode == 0 || o.mode == 1);
    return o;
  }

  void sampler(std::uint8_t which) {
    const std::size_t s = slot();
    switch (which % 4) {
      case 0: {  // create, replacing the slot's
        bool valid = false;
        const ngramspec_sampling_options o = sampling_options(valid);
        const std::size_t vocab = in_.in_range(0, 9) == 0 ? 0 : in_.in_range(1, 12);
        ngramspec_sampler* out = reinterpret_cast<ngramspec_sampler*>(&sentinel_object_);
        const bool defaults = in_.in_range(0, 7) == 0;
        const bool ok = check_status(ngramspec_sampler_create(defaults ? nullptr : &o, vocab, &out),
                                     "ngramspec_sampler_create");
        expect_valid(ok, (defaults || valid) && vocab != 0, "ngramspec_sampler_create");
        if (!ok) {
          if (out != reinterpret_cast<ngramspec_sampler*>(&sentinel_object_)) fuzz_fail("a failed create wrote *out");
          return;
        }
        ngramspec_sampler_free(samplers_[s]);
        samplers_[s] = out;
        sampler_vocab_[s] = vocab;
        sampler_options_[s] = defaults ? ngramspec_sampling_options_default() : o;
        return;
      }
      case 1: {  // new options; invalid ones change nothing
        bool valid = false;
        const ngramspec_sampling_options o = sampling_options(valid);
        const bool ok = check_status(ngramspec_sampler_set_options(samplers_[s], &o), "ngramspec_sampler_set_options");
        expect_valid(ok, valid && samplers_[s] != nullptr, "ngramspec_sampler_set_options");
        if (ok) sampler_options_[s] = o;
        return;
      }
      case 2: verify_chain(s); return;
      default: verify_tree(s); return;
    }
  }

  // A verify call's rows of logits: finite mostly, now and then -inf (masked), NaN or +inf
  // (refused when read); passed as null now and then, and with a wrong count now and then.
  struct Rows {
    std::vector<float> logits;
    bool odd = false;  // a non-finite logit among them
    const float* in = nullptr;
    std::size_t n = 0;
  };
  Rows random_rows(std::size_t rows, std::size_t vocab) {
    Rows r;
    r.logits.resize(rows * vocab);
    for (float& l : r.logits) {
      switch (in_.in_range(0, 40)) {
        case 0: l = -std::numeric_limits<float>::infinity(); r.odd = true; break;
        case 1: l = std::numeric_limits<float>::quiet_NaN(); r.odd = true; break;
        case 2: l = std::numeric_limits<float>::infinity(); r.odd = true; break;
        default: l = static_cast<float>(in_.in_range(0, 60)) / 10.0f - 3.0f;
      }
    }
    r.in = maybe_null(r.logits.data());
    r.n = r.logits.size();
    if (in_.in_range(0, 15) == 0) r.n = in_.in_range(0, r.logits.size() + 3) % (r.logits.size() + 1);
    return r;
  }

  void verify_tree(std::size_t s) {
    ngramspec_sampler* sampler = samplers_[s];
    const std::size_t vocab = sampler != nullptr ? sampler_vocab_[s] : in_.in_range(1, 12);
    const std::size_t n_nodes = in_.in_range(0, 6);
    const Rows rows = random_rows(n_nodes + 1, vocab);
    // Nodes: each the root's child or an earlier node's, now and then a parent that is neither.
    std::vector<Token> tokens(n_nodes);
    std::vector<std::int32_t> parents(n_nodes);
    bool parents_valid = true;
    for (std::size_t j = 0; j < n_nodes; ++j) {
      tokens[j] = in_.in_range(0, 9) == 0 ? token() : static_cast<Token>(in_.in_range(0, vocab - 1));
      parents[j] = static_cast<std::int32_t>(in_.in_range(0, j)) - 1;
      if (in_.in_range(0, 20) == 0) {
        parents[j] = static_cast<std::int32_t>(in_.in_range(0, 8)) - 3;
        parents_valid = parents_valid && parents[j] >= -1 && parents[j] < static_cast<std::int32_t>(j);
      }
    }
    // q: none, or a support per node (empty: chosen) after a few others (one sequence's part of a
    // call), valid mostly.
    std::vector<std::size_t> offsets;
    std::vector<Token> q_tokens(in_.in_range(0, 3), 0);
    std::vector<float> q_probabilities(q_tokens.size(), 1.0f);
    const bool with_q = in_.flag();
    bool q_valid = true;
    if (with_q) {
      offsets.push_back(q_tokens.size());
      for (std::size_t d = 0; d < n_nodes; ++d) {
        const std::size_t support = in_.in_range(0, 4);
        for (std::size_t j = 0; j < support; ++j) {
          q_tokens.push_back(j == 0 ? tokens[d] : static_cast<Token>(in_.in_range(0, vocab - 1)));
          q_probabilities.push_back(static_cast<float>(in_.in_range(1, 10)) / 10.0f);
        }
        offsets.push_back(q_tokens.size());
      }
      if (in_.in_range(0, 15) == 0 && !q_probabilities.empty()) {
        q_probabilities[in_.in_range(0, q_probabilities.size() - 1)] = in_.flag() ? -1.0f : std::numeric_limits<float>::quiet_NaN();
      }
      if (in_.in_range(0, 15) == 0) offsets[in_.in_range(0, offsets.size() - 1)] += in_.in_range(1, 3);
      // Valid: offsets rising inside q_tokens, and every support's probabilities finite, >= 0 (those
      // outside every support are never read).
      q_valid = std::is_sorted(offsets.begin(), offsets.end()) && offsets.back() <= q_tokens.size();
      for (std::size_t i = offsets.front(); q_valid && i < offsets.back(); ++i) {
        q_valid = std::isfinite(q_probabilities[i]) && q_probabilities[i] >= 0.0f;
      }
    } else {
      q_tokens.clear();
      q_probabilities.clear();
    }
    const bool valid =
        sampler != nullptr && rows.in != nullptr && rows.n == rows.logits.size() && parents_valid && q_valid;
    std::vector<Token> model_tokens(n_nodes + 1, kSentinel);
    std::vector<std::size_t> path(n_nodes + 1, kSizeSentinel);
    std::size_t accepted = kSizeSentinel;
    Token next = kSentinel;
    const bool ok = check_status(
        ngramspec_sampler_verify_tree(sampler, rows.in, rows.n, in_.in_range(0, 1000),
                                      tokens.empty() ? maybe_null(tokens.data()) : tokens.data(),
                                      parents.empty() ? maybe_null(parents.data()) : parents.data(), n_nodes,
                                      with_q ? offsets.data() : nullptr, with_q ? q_tokens.data() : nullptr,
                                      with_q ? q_probabilities.data() : nullptr, q_tokens.size(), model_tokens.data(),
                                      path.data(), &accepted, &next),
        "ngramspec_sampler_verify_tree");
    // A row read with NaN or +inf, or masked whole, fails a call whose arguments are otherwise valid.
    if (!(rows.odd && valid && !ok)) expect_valid(ok, valid, "ngramspec_sampler_verify_tree");
    if (!ok) {
      const bool untouched =
          accepted == kSizeSentinel && next == kSentinel &&
          std::all_of(model_tokens.begin(), model_tokens.end(), [](Token t) { return t == kSentinel; }) &&
          std::all_of(path.begin(), path.end(), [](std::size_t e) { return e == kSizeSentinel; });
      if (!untouched) fuzz_fail("a failed verify_tree wrote its outputs");
      return;
    }
    if (accepted > n_nodes || path[0] != 0) fuzz_fail("verify_tree walked a path that is not the tree's");
    for (std::size_t d = 1; d <= accepted; ++d) {
      const std::size_t node = path[d] - 1;
      if (path[d] == 0 || path[d] > n_nodes || static_cast<std::size_t>(parents[node] + 1) != path[d - 1] ||
          tokens[node] != model_tokens[path[d - 1]]) {
        fuzz_fail("verify_tree's path does not follow the tokens it chose from the root");
      }
    }
    if (next >= vocab || model_tokens[path[accepted]] != next) fuzz_fail("verify_tree's next token is wrong");
    for (const Token t : model_tokens) {
      if (t >= vocab) fuzz_fail("verify_tree wrote a model token outside the vocabulary");
    }
    if (sampler_options_[s].temperature == 0.0f && !rows.odd) {
      // Greedy: from the root, each row's argmax (ties to the lowest id) leads to the first child that
      // carries it; the walk ends at the first row whose argmax no child carries.
      const auto argmax = [&](std::size_t row) {
        const float* r = rows.logits.data() + row * vocab;
        return static_cast<Token>(std::max_element(r, r + vocab) - r);
      };
      std::size_t e = 0;
      std::size_t depth = 0;
      for (;; ++depth) {
        if (path[depth] != e || model_tokens[e] != argmax(e)) fuzz_fail("greedy verify_tree is not the argmax path");
        std::size_t j = 0;
        while (j < n_nodes && !(static_cast<std::size_t>(parents[j] + 1) == e && tokens[j] == argmax(e))) ++j;
        if (j == n_nodes) break;
        e = j + 1;
      }
      if (accepted != depth || next != argmax(e)) fuzz_fail("greedy verify_tree is not the argmax path");
    }
  }

  void verify_chain(std::size_t s) {
    ngramspec_sampler* sampler = samplers_[s];
    const std::size_t vocab = sampler != nullptr ? sampler_vocab_[s] : in_.in_range(1, 12);
    const std::size_t n_drafts = in_.in_range(0, 5);
    const Rows rows = random_rows(n_drafts + 1, vocab);
    std::vector<Token> drafts(n_drafts);
    for (Token& t : drafts) t = in_.in_range(0, 9) == 0 ? token() : static_cast<Token>(in_.in_range(0, vocab - 1));
    // q: none, or a support per draft (empty: chosen), valid mostly.
    std::vector<std::size_t> offsets;
    std::vector<Token> q_tokens;
    std::vector<float> q_probabilities;
    const bool with_q = in_.flag();
    bool q_valid = true;
    if (with_q) {
      offsets.push_back(0);
      for (std::size_t d = 0; d < n_drafts; ++d) {
        const std::size_t support = in_.in_range(0, 4);
        for (std::size_t j = 0; j < support; ++j) {
          q_tokens.push_back(j == 0 ? drafts[d] : static_cast<Token>(in_.in_range(0, vocab - 1)));
          q_probabilities.push_back(static_cast<float>(in_.in_range(1, 10)) / 10.0f);
        }
        offsets.push_back(q_tokens.size());
      }
      if (in_.in_range(0, 15) == 0 && !q_probabilities.empty()) {
        q_probabilities[in_.in_range(0, q_probabilities.size() - 1)] = in_.flag() ? -1.0f : std::numeric_limits<float>::quiet_NaN();
        q_valid = false;
      }
      if (in_.in_range(0, 15) == 0) {
        offsets[in_.in_range(0, offsets.size() - 1)] += in_.in_range(1, 3);
        q_valid = q_valid && offsets.front() == 0 && std::is_sorted(offsets.begin(), offsets.end()) &&
                  offsets.back() == q_tokens.size();
      }
    }
    const bool valid = sampler != nullptr && rows.in != nullptr && rows.n == rows.logits.size() && q_valid;
    std::size_t accepted = kSizeSentinel;
    Token next = kSentinel;
    const bool ok = check_status(
        ngramspec_sampler_verify_chain(sampler, rows.in, rows.n, in_.in_range(0, 1000),
                                       drafts.empty() ? maybe_null(drafts.data()) : drafts.data(), n_drafts,
                                       with_q ? offsets.data() : nullptr, with_q ? q_tokens.data() : nullptr,
                                       with_q ? q_probabilities.data() : nullptr, q_tokens.size(), &accepted, &next),
        "ngramspec_sampler_verify_chain");
    // A row read with NaN or +inf, or masked whole, fails a call whose arguments are otherwise valid.
    if (!(rows.odd && valid && !ok)) expect_valid(ok, valid, "ngramspec_sampler_verify_chain");
    if (!ok) {
      if (accepted != kSizeSentinel || next != kSentinel) fuzz_fail("a failed verify_chain wrote its outputs");
      return;
    }
    if (accepted > n_drafts) fuzz_fail("verify_chain accepted more drafts than it had");
    if (next >= vocab) fuzz_fail("verify_chain returned a token outside the vocabulary");
    if (sampler_options_[s].temperature == 0.0f && !rows.odd) {
      // Greedy: the argmax prefix (ties to the lowest id), then the argmax after it.
      const auto argmax = [&](std::size_t row) {
        const float* r = rows.logits.data() + row * vocab;
        return static_cast<Token>(std::max_element(r, r + vocab) - r);
      };
      std::size_t greedy = 0;
      while (greedy < n_drafts && drafts[greedy] == argmax(greedy)) ++greedy;
      if (accepted != greedy || next != argmax(greedy)) fuzz_fail("greedy verify_chain is not the argmax chain");
    }
  }

  bool corpus_in_use(const ngramspec_corpus* corpus) const {
    if (corpus == nullptr) return false;
    if (batch_ != nullptr && batch_corpus_ == corpus) return true;
    for (std::size_t i = 0; i < kSlots; ++i) {
      if (matches_[i] != nullptr && match_corpus_[i] == corpus) return true;
    }
    return false;
  }

  void corpus_create() {
    const std::size_t s = slot();
    if (corpus_in_use(corpora_[s])) return;  // drafters and batches need their corpus to outlive them
    // Too small mostly, or 256 to 1024 tokens (a larger corpus only takes longer to make).
    const std::size_t bytes = in_.in_range(0, 2) == 0 ? in_.in_range(0, 30000) : std::size_t{27000} << in_.in_range(0, 2);
    ngramspec_corpus_free(corpora_[s]);
    corpora_[s] = nullptr;
    ngramspec_corpus* out = reinterpret_cast<ngramspec_corpus*>(&sentinel_object_);
    ngramspec_corpus** where = maybe_null(&out);
    const bool ok = check_status(ngramspec_corpus_create(bytes, where), "ngramspec_corpus_create");
    if (where == nullptr && ok) fuzz_fail("create succeeded without an out pointer");
    if (!ok) {
      if (out != reinterpret_cast<ngramspec_corpus*>(&sentinel_object_)) fuzz_fail("a failed create wrote *out");
      return;
    }
    corpora_[s] = out;
    if (ngramspec_corpus_size(out) != 0 || ngramspec_corpus_records(out) != 0) fuzz_fail("a new corpus is not empty");
    if (ngramspec_corpus_capacity_tokens(out) < 256) fuzz_fail("a corpus holds fewer than 256 tokens");
    if (ngramspec_corpus_memory_bytes(out) > bytes) fuzz_fail("a corpus holds more than its byte cap");
  }

  void corpus_append() {
    ngramspec_corpus* corpus = maybe_null(corpora_[slot()]);
    const std::vector<Token> record = tokens(48);
    const std::size_t mode = in_.in_range(0, 9);
    const bool null_tokens = mode == 0;
    const std::size_t count = null_tokens ? size_value(8) : mode == 1 ? impossible_count() : record.size();
    const std::uint64_t before = ngramspec_corpus_records(corpus);
    const bool ok = check_status(ngramspec_corpus_append(corpus, null_tokens ? nullptr : record.data(), count),
                                 "ngramspec_corpus_append");
    expect_valid(ok, corpus != nullptr && (!null_tokens || count == 0) && possible(count), "ngramspec_corpus_append");
    const std::uint64_t after = ngramspec_corpus_records(corpus);
    if (after != before + (ok && count != 0 ? 1 : 0)) fuzz_fail("an append changed the records by something else");
    if (corpus != nullptr && ngramspec_corpus_size(corpus) > ngramspec_corpus_capacity_tokens(corpus)) {
      fuzz_fail("a corpus holds more tokens than its capacity");
    }
  }

  void corpus_misc() {
    ngramspec_corpus* corpus = maybe_null(corpora_[slot()]);
    if (in_.flag()) {
      const bool ok = check_status(ngramspec_corpus_clear(corpus), "ngramspec_corpus_clear");
      expect_valid(ok, corpus != nullptr, "ngramspec_corpus_clear");
      if (ok && (ngramspec_corpus_size(corpus) != 0 || ngramspec_corpus_records(corpus) != 0)) {
        fuzz_fail("a cleared corpus is not empty");
      }
    }
    if (corpus == nullptr && (ngramspec_corpus_size(corpus) != 0 || ngramspec_corpus_memory_bytes(corpus) != 0 ||
                              ngramspec_corpus_capacity_tokens(corpus) != 0 || ngramspec_corpus_records(corpus) != 0)) {
      fuzz_fail("a NULL corpus reports something");
    }
  }

  // ---- Drafters --------------------------------------------------------------------------------

  ngramspec_match_config match_config() {
    ngramspec_match_config c = ngramspec_match_config_default();
    c.cap = in_.in_range(0, 7) == 0 ? huge() : in_.in_range(0, 300);
    c.copy_min_match = in_.in_range(0, 5);
    c.count_max_order = in_.in_range(1, 5);
    c.count_window = in_.in_range(0, 7) == 0 ? huge() : in_.in_range(0, std::min<std::size_t>(c.cap, 300));
    static constexpr double kConfidences[] = {0, 0.03, 0.3, 0.99, 1, -0.5, 2};
    const std::size_t pick = in_.in_range(0, std::size(kConfidences));
    c.min_confidence = pick == std::size(kConfidences) ? std::nan("") : kConfidences[pick];
    return c;
  }

  // ngramspec_match_drafter_create, or with `with_file` ngramspec_match_drafter_create_file (the
  // second drafter slot: ngramspec_match_drafter_create_vocab, with a vocabulary of 2^32, every
  // token inside it, so that it drafts what create_file's drafter would).
  void match_create(bool with_file) {
    const std::size_t s = slot();
    ngramspec_match_drafter_free(matches_[s]);
    matches_[s] = nullptr;
    const ngramspec_match_config config = match_config();
    const bool with_config = in_.in_range(0, 9) != 0;  // NULL: the defaults (8192 cap)
    ngramspec_corpus* corpus = in_.flag() ? corpora_[slot()] : nullptr;
    ngramspec_match_drafter* out = reinterpret_cast<ngramspec_match_drafter*>(&sentinel_object_);
    ngramspec_match_drafter** where = maybe_null(&out);
    const ngramspec_corpus_file* file = nullptr;
    bool preference_valid = true;
    bool ok = false;
    if (with_file) {
      file = in_.flag() ? files_[slot()] : nullptr;
      const int preference = corpus_preference(preference_valid);
      const ngramspec_match_config* c = with_config ? &config : nullptr;
      ok = s == 0 ? check_status(ngramspec_match_drafter_create_file(c, corpus, file, preference, where),
                                 "ngramspec_match_drafter_create_file")
                  : check_status(ngramspec_match_drafter_create_vocab(c, corpus, file, preference, std::uint64_t{1} << 32,
                                                                      0, where),
                                 "ngramspec_match_drafter_create_vocab");
      if (!preference_valid && ok) fuzz_fail("a drafter was made with an invalid corpus preference");
    } else {
      ok = check_status(ngramspec_match_drafter_create(with_config ? &config : nullptr, corpus, where),
                        "ngramspec_match_drafter_create");
    }
    if (!ok) {
      if (out != reinterpret_cast<ngramspec_match_drafter*>(&sentinel_object_)) fuzz_fail("a failed create wrote *out");
      return;
    }
    if (where == nullptr) fuzz_fail("create succeeded without an out pointer");
    matches_[s] = out;
    match_corpus_[s] = corpus;
    match_file_[s] = file;
    match_memory_[s] = ngramspec_match_drafter_memory_bytes(out);
  }

  // A preference: one of the three mostly, now and then a value outside the enum.
  int corpus_preference(bool& valid) {
    static constexpr int kValues[] = {0, 1, 2, 0, 1, 2, 3, -1};
    const int value = kValues[in_.in_range(0, std::size(kValues) - 1)];
    valid = value >= 0 && value <= 2;
    return value;
  }

  void ngram_create() {
    const std::size_t s = slot();
    ngramspec_ngram_predictor_free(ngrams_[s]);
    ngrams_[s] = nullptr;
    ngramspec_ngram_config config;
    config.min_order = in_.in_range(0, 4);
    config.max_order = in_.in_range(0, 9);
    config.window = in_.in_range(0, 7) == 0 ? huge() : in_.in_range(0, 100);
    const bool with_config = in_.in_range(0, 9) != 0;
    ngramspec_ngram_predictor* out = reinterpret_cast<ngramspec_ngram_predictor*>(&sentinel_object_);
    ngramspec_ngram_predictor** where = maybe_null(&out);
    const bool ok = check_status(ngramspec_ngram_predictor_create(with_config ? &config : nullptr, where),
                                 "ngramspec_ngram_predictor_create");
    if (!ok) {
      if (out != reinterpret_cast<ngramspec_ngram_predictor*>(&sentinel_object_)) {
        fuzz_fail("a failed create wrote *out");
      }
      return;
    }
    if (where == nullptr) fuzz_fail("create succeeded without an out pointer");
    ngrams_[s] = out;
  }

  void drafter_update(bool match) {
    const std::size_t s = slot();
    const std::vector<Token> t = tokens(24);
    const std::size_t mode = in_.in_range(0, 9);
    const bool null_tokens = mode == 0;
    const std::size_t count = null_tokens ? size_value(4) : mode == 1 ? impossible_count() : t.size();
    const Token* data = null_tokens ? nullptr : t.data();
    const bool valid_arrays = (data != nullptr || count == 0) && possible(count);
    if (match) {
      ngramspec_match_drafter* d = maybe_null(matches_[s]);
      const bool ok = check_status(ngramspec_match_drafter_update(d, data, count), "ngramspec_match_drafter_update");
      expect_valid(ok, d != nullptr && valid_arrays, "ngramspec_match_drafter_update");
    } else {
      ngramspec_ngram_predictor* d = maybe_null(ngrams_[s]);
      const bool ok =
          check_status(ngramspec_ngram_predictor_update(d, data, count), "ngramspec_ngram_predictor_update");
      expect_valid(ok, d != nullptr && valid_arrays, "ngramspec_ngram_predictor_update");
    }
  }

  void drafter_predict(bool match) {
    const std::size_t s = slot();
    const std::size_t capacity = in_.in_range(0, 40);
    std::vector<Token> out(capacity, kSentinel);
    std::vector<float> probabilities(capacity, -7.0f);
    const std::size_t mode = in_.in_range(0, 9);
    const bool null_out = mode == 0;
    // A room no array can have, with a real array (SIZE_MAX on a repeating context wrote on and on).
    const std::size_t room = null_out ? size_value(4) : mode == 1 ? impossible_count() : capacity;
    Token* out_data = null_out ? nullptr : out.data();
    float* p = in_.flag() && !null_out ? probabilities.data() : nullptr;
    std::size_t count = kSizeSentinel;
    std::size_t* count_ptr = maybe_null(&count);
    bool ok = false;
    bool has_handle = false;
    if (match) {
      const ngramspec_match_drafter* d = maybe_null(matches_[s]);
      has_handle = d != nullptr;
      ok = check_status(ngramspec_match_drafter_predict(d, out_data, room, p, count_ptr), "ngramspec_match_drafter_predict");
      if (d != nullptr && ngramspec_match_drafter_memory_bytes(d) != match_memory_[s]) {
        fuzz_fail("a MatchDrafter's memory changed");
      }
    } else {
      const ngramspec_ngram_predictor* d = maybe_null(ngrams_[s]);
      has_handle = d != nullptr;
      ok = check_status(ngramspec_ngram_predictor_predict(d, out_data, room, p, count_ptr),
                        "ngramspec_ngram_predictor_predict");
    }
    expect_valid(ok, has_handle && (out_data != nullptr || room == 0) && possible(room) && count_ptr != nullptr,
                 "predict");
    const std::size_t written = ok ? count : 0;
    if (!ok && count != kSizeSentinel) fuzz_fail("a failed predict wrote its count");
    if (written > room) fuzz_fail("predict returned more drafts than its room");
    if (!ok) {
      for (std::size_t i = 0; i < capacity; ++i) {
        if (out[i] != kSentinel || probabilities[i] != -7.0f) fuzz_fail("a failed predict wrote its outputs");
      }
    }
    // Past the count, within the room, the drafters may write (a gate drafts, then cuts): ASan
    // checks the room, the arrays being exactly that long.
    if (p != nullptr) {
      for (std::size_t i = 0; i < written; ++i) {
        if (!(probabilities[i] >= 0 && probabilities[i] <= 1) || (i > 0 && probabilities[i] > probabilities[i - 1])) {
          fuzz_fail("predict's probabilities are not non-increasing in [0, 1]");
        }
      }
    }
  }

  void drafter_reset_or_free() {
    const std::size_t s = slot();
    switch (in_.in_range(0, 3)) {
      case 0: {
        ngramspec_match_drafter* d = maybe_null(matches_[s]);
        expect_valid(check_status(ngramspec_match_drafter_reset(d), "ngramspec_match_drafter_reset"), d != nullptr,
                     "ngramspec_match_drafter_reset");
        break;
      }
      case 1: {
        ngramspec_ngram_predictor* d = maybe_null(ngrams_[s]);
        expect_valid(check_status(ngramspec_ngram_predictor_reset(d), "ngramspec_ngram_predictor_reset"),
                     d != nullptr, "ngramspec_ngram_predictor_reset");
        break;
      }
      case 2:
        ngramspec_match_drafter_free(matches_[s]);
        matches_[s] = nullptr;
        break;
      default:
        ngramspec_ngram_predictor_free(ngrams_[s]);
        ngrams_[s] = nullptr;
    }
  }

  // ---- BatchSpeculator -------------------------------------------------------------------------

  void drop_batch() {
    ngramspec_batch_free(batch_);
    batch_ = nullptr;
    batch_corpus_ = nullptr;
    batch_file_ = nullptr;
    batch_vocab_ = 0;
    sequences_.clear();
  }

  // ngramspec_batch_create, or with `with_file` ngramspec_batch_create_file, or (an odd
  // max_record_tokens) ngramspec_batch_create_vocab with a vocabulary of max_record_tokens tokens,
  // which cuts drafts of the larger ids.
  void batch_create(bool with_file) {
    drop_batch();
    ngramspec_batch_config config = ngramspec_batch_config_default();
    config.max_sequences = in_.in_range(0, 7) == 0 ? size_value(2) % 5 : in_.in_range(1, 4);
    config.max_pass_tokens = in_.in_range(0, 1) == 0 ? 0 : in_.in_range(0, 24);
    config.max_record_tokens = in_.in_range(0, 48);
    static constexpr const char* kCosts[] = {"knee:1", "knee:8", "knee:256", "table:1=1,2=1.25,3=1.71",
                                             "knee:0", "table:", "knee", "table:2=1,1=2", "table:1=nan", ""};
    std::string cost;
    switch (in_.in_range(0, 3)) {
      case 0: config.cost = nullptr; break;
      case 1:  // arbitrary bytes, NUL-terminated
        for (std::size_t n = in_.in_range(0, 24); n > 0; --n) cost.push_back(static_cast<char>(in_.in_range(1, 255)));
        config.cost = cost.c_str();
        break;
      default: config.cost = kCosts[in_.in_range(0, std::size(kCosts) - 1)];
    }
    // The default drafters take 8192 tokens of cap each: a cheap configuration mostly.
    config.default_drafter = in_.in_range(0, 7) == 0 ? 1 : 0;
    config.drafter = match_config();
    ngramspec_corpus* corpus = in_.flag() ? corpora_[slot()] : nullptr;
    ngramspec_batch* out = reinterpret_cast<ngramspec_batch*>(&sentinel_object_);
    ngramspec_batch** where = maybe_null(&out);
    const ngramspec_corpus_file* file = nullptr;
    std::size_t vocab = 0;
    bool ok = false;
    if (with_file) {
      file = in_.flag() ? files_[slot()] : nullptr;
      bool preference_valid = true;
      const int preference = corpus_preference(preference_valid);
      vocab = config.max_record_tokens % 2 == 1 ? config.max_record_tokens : 0;
      ok = vocab == 0 ? check_status(ngramspec_batch_create_file(&config, corpus, file, preference, where),
                                     "ngramspec_batch_create_file")
                      : check_status(ngramspec_batch_create_vocab(&config, corpus, file, preference, vocab, 0, where),
                                     "ngramspec_batch_create_vocab");
      if (!preference_valid && ok) fuzz_fail("a batch was made with an invalid corpus preference");
    } else {
      ok = check_status(ngramspec_batch_create(&config, corpus, where), "ngramspec_batch_create");
    }
    if (!ok) {
      if (out != reinterpret_cast<ngramspec_batch*>(&sentinel_object_)) fuzz_fail("a failed create wrote *out");
      return;
    }
    if (where == nullptr) fuzz_fail("create succeeded without an out pointer");
    batch_ = out;
    batch_corpus_ = corpus;
    batch_file_ = file;
    batch_vocab_ = vocab;
    max_sequences_ = config.max_sequences;
    max_record_tokens_ = config.max_record_tokens;
    emitted_ = 0;
    if (ngramspec_batch_size(batch_) != 0) fuzz_fail("a new batch runs sequences");
  }

  // An id: one the script has begun, a small one, or any.
  ngramspec_sequence_id id() {
    if (!sequences_.empty() && in_.in_range(0, 3) != 0) {
      auto it = sequences_.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(in_.in_range(0, sequences_.size() - 1)));
      return it->first;
    }
    return in_.in_range(0, 3) == 0 ? in_.in_range(0, std::numeric_limits<std::uint64_t>::max()) : in_.in_range(1, 6);
  }

  void begin() {
    ngramspec_batch* batch = maybe_null(batch_);
    const ngramspec_sequence_id sid = id();
    Sequence sequence;
    sequence.prompt = tokens(20);
    const bool null_prompt = in_.in_range(0, 9) == 0;
    const std::size_t prompt_length = null_prompt ? size_value(4) : sequence.prompt.size();
    ngramspec_sequence_options options = ngramspec_sequence_options_default();
    const bool with_options = in_.in_range(0, 5) != 0;
    sequence.stops = tokens(3);
    bool null_stops = false;
    if (with_options) {
      options.max_new_tokens = in_.in_range(0, 7) == 0 ? size_value(4) : in_.in_range(0, 40);
      null_stops = in_.in_range(0, 9) == 0;
      options.stop_tokens = null_stops ? nullptr : sequence.stops.data();
      options.n_stop_tokens = null_stops ? in_.in_range(0, 3) : sequence.stops.size();
      if (!null_stops && sequence.stops.empty()) options.stop_tokens = nullptr;
      options.max_context = in_.in_range(0, 1) == 0 ? 0 : in_.in_range(0, 60);
      options.speculate = in_.in_range(0, 5) == 0 ? 0 : static_cast<int>(in_.in_range(1, 3));
      static constexpr std::size_t kDrafts[] = {0, 1, 2, 4, 8, 16, 1024, 1025, std::numeric_limits<std::size_t>::max()};
      options.max_drafts = kDrafts[in_.in_range(0, std::size(kDrafts) - 1)];
    } else {
      sequence.stops.clear();
    }
    if (null_stops) sequence.stops.clear();
    sequence.max_new_tokens = options.max_new_tokens;
    sequence.max_context = options.max_context;
    sequence.max_drafts = options.max_drafts;
    sequence.speculate = options.speculate != 0;

    const bool running = sequences_.count(sid) != 0;
    const bool valid = batch != nullptr && (!null_prompt || prompt_length == 0) &&
                       (!null_stops || options.n_stop_tokens == 0) && !running &&
                       sequences_.size() < max_sequences_ && prompt_length != 0 &&
                       (options.max_context == 0 || prompt_length <= options.max_context) &&
                       options.max_drafts <= 1024;
    const bool ok = check_status(ngramspec_batch_begin(batch, sid, null_prompt ? nullptr : sequence.prompt.data(),
                                                       prompt_length, with_options ? &options : nullptr),
                                 "ngramspec_batch_begin");
    expect_valid(ok, valid, "ngramspec_batch_begin");
    if (!ok) return;
    // A sequence that may emit nothing starts finished.
    sequence.finished = sequence.max_new_tokens == 0 ||
                        (sequence.max_context != 0 && sequence.prompt.size() >= sequence.max_context);
    sequences_[sid] = std::move(sequence);
    if (ngramspec_batch_contains(batch_, sid) != 1) fuzz_fail("a begun sequence is not running");
  }

  // ids for a pass: running ones mostly, with an unknown or repeated one now and then.
  std::vector<ngramspec_sequence_id> pass_ids() {
    std::vector<ngramspec_sequence_id> ids;
    for (const auto& [sid, sequence] : sequences_) {
      if (!sequence.finished && in_.in_range(0, 4) != 0) ids.push_back(sid);
    }
    switch (in_.in_range(0, 9)) {
      case 0: ids.push_back(id()); break;
      case 1:
        if (!ids.empty()) ids.push_back(ids[in_.in_range(0, ids.size() - 1)]);
        break;
      case 2:
        for (std::size_t n = in_.in_range(0, 6); n > 0; --n) ids.push_back(id());
        break;
      default: break;
    }
    if (ids.size() > 1 && in_.flag()) std::rotate(ids.begin(), ids.begin() + 1, ids.end());
    return ids;
  }

  // Whether ids are distinct running unfinished sequences, at most max_sequences of them.
  bool ids_valid(const std::vector<ngramspec_sequence_id>& ids) const {
    if (ids.size() > max_sequences_) return false;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto it = sequences_.find(ids[i]);
      if (it == sequences_.end() || it->second.finished) return false;
      if (std::find(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(i), ids[i]) != ids.begin() + static_cast<std::ptrdiff_t>(i)) {
        return false;
      }
    }
    return true;
  }

  void propose() {
    ngramspec_batch* batch = maybe_null(batch_);
    const std::vector<ngramspec_sequence_id> ids = pass_ids();
    const bool null_ids = in_.in_range(0, 11) == 0;
    const std::size_t n_ids = null_ids ? size_value(3) : ids.size();
    const std::size_t capacity = in_.in_range(0, 48);
    std::vector<Token> drafts(capacity, kSentinel);
    const bool null_drafts = in_.in_range(0, 11) == 0;
    const std::size_t drafts_capacity = null_drafts ? size_value(4) : capacity;
    std::vector<std::size_t> offsets(ids.size() + 1, kSizeSentinel);
    std::size_t* offsets_ptr = maybe_null(offsets.data());
    std::size_t n_drafts = kSizeSentinel;
    std::size_t* n_drafts_ptr = maybe_null(&n_drafts);
    const std::size_t extra = in_.in_range(0, 5) == 0 ? size_value(64) : 0;
    // offsets has ids.size() + 1 elements; an n_ids beyond that comes with NULL ids, and then with
    // NULL offsets too, so that no array is shorter than the count passed with it.
    if (null_ids && n_ids + 1 > offsets.size()) offsets_ptr = nullptr;
    const bool ids_ok = null_ids ? n_ids == 0 : ids_valid(ids);
    const bool valid = batch != nullptr && ids_ok && (!null_drafts || drafts_capacity == 0) && offsets_ptr != nullptr &&
                       n_drafts_ptr != nullptr;
    const bool ok = check_status(ngramspec_batch_propose(batch, null_ids ? nullptr : ids.data(), n_ids,
                                                         null_drafts ? nullptr : drafts.data(), drafts_capacity,
                                                         offsets_ptr, extra, n_drafts_ptr),
                                 "ngramspec_batch_propose");
    expect_valid(ok, valid, "ngramspec_batch_propose");
    if (!ok) {
      if (n_drafts != kSizeSentinel) fuzz_fail("a failed propose wrote n_drafts");
      for (const std::size_t o : offsets) {
        if (o != kSizeSentinel) fuzz_fail("a failed propose wrote offsets");
      }
      for (const Token t : drafts) {
        if (t != kSentinel) fuzz_fail("a failed propose wrote drafts");
      }
      return;
    }
    if (null_ids) return;  // no ids: nothing proposed
    if (offsets[0] != 0 || offsets[ids.size()] != n_drafts || n_drafts > drafts_capacity) {
      fuzz_fail("propose's offsets do not add up to its drafts within the buffer");
    }
    for (std::size_t i = n_drafts; i < capacity; ++i) {
      if (drafts[i] != kSentinel) fuzz_fail("propose wrote past its drafts");
    }
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (offsets[i + 1] < offsets[i]) fuzz_fail("propose's offsets decrease");
      Sequence& sequence = sequences_.at(ids[i]);
      const std::size_t n = offsets[i + 1] - offsets[i];
      const std::size_t limit = sequence.output.empty() || !sequence.speculate
                                    ? 0
                                    : std::min({sequence.remaining() - 1, sequence.max_drafts, std::size_t{1024}});
      if (n > limit) fuzz_fail("propose drafted beyond a sequence's limit (prefill, max_drafts, remaining tokens)");
      sequence.pending.assign(drafts.begin() + static_cast<std::ptrdiff_t>(offsets[i]),
                              drafts.begin() + static_cast<std::ptrdiff_t>(offsets[i + 1]));
    }
  }

  void accept() {
    ngramspec_batch* batch = maybe_null(batch_);
    const std::vector<ngramspec_sequence_id> ids = pass_ids();
    const bool honest = in_.in_range(0, 3) != 0;
    // Model tokens per sequence: the greedy model's after [last token, first k pending drafts],
    // k from the input (all of them mostly); or arbitrary counts and tokens.
    std::vector<Token> model_tokens;
    std::vector<std::size_t> offsets{0};
    std::vector<bool> truthful;
    for (const ngramspec_sequence_id sid : ids) {
      const auto it = sequences_.find(sid);
      std::size_t n = in_.in_range(0, 3);
      bool truth = false;
      if (honest && it != sequences_.end()) {
        const Sequence& s = it->second;
        const std::size_t verified = in_.in_range(0, 5) == 0 ? in_.in_range(0, s.pending.size()) : s.pending.size();
        n = verified + 1;
        Token fed = s.last();
        for (std::size_t j = 0; j < n; ++j) {
          model_tokens.push_back(model_after(fed));
          if (j < verified) fed = s.pending[j];
        }
        truth = true;
      } else {
        for (std::size_t j = 0; j < n; ++j) model_tokens.push_back(token());
      }
      truthful.push_back(truth);
      offsets.push_back(model_tokens.size());
    }
    if (in_.in_range(0, 7) == 0) {  // a wrong offset: the slices are no longer the model's answers
      std::size_t& offset = offsets[in_.in_range(0, offsets.size() - 1)];
      const std::size_t wrong = size_value(model_tokens.size() + 2);
      if (wrong != offset) truthful.assign(truthful.size(), false);
      offset = wrong;
    }
    const bool null_ids = in_.in_range(0, 11) == 0;
    const bool null_tokens = in_.in_range(0, 11) == 0;
    const std::size_t n_model_tokens = null_tokens ? size_value(4) : model_tokens.size();
    const std::size_t* offsets_ptr = maybe_null(offsets.data());
    ngramspec_step unwritten{};
    unwritten.emitted = kSizeSentinel;
    std::vector<ngramspec_step> steps(ids.size(), unwritten);
    ngramspec_step* steps_ptr = in_.in_range(0, 11) == 0 ? nullptr : steps.data();
    const std::size_t n_ids = null_ids ? 0 : ids.size();

    bool valid = batch != nullptr && (!null_tokens || n_model_tokens == 0) && offsets_ptr != nullptr &&
                 (steps_ptr != nullptr || n_ids == 0) && n_ids <= max_sequences_;
    // Every model token belongs to one sequence: the offsets run from 0 to n_model_tokens.
    valid = valid && offsets[0] == 0 && offsets[n_ids] == n_model_tokens;
    if (valid && !null_ids) {
      valid = ids_valid(ids);
      for (std::size_t i = 0; valid && i < ids.size(); ++i) {
        const Sequence& s = sequences_.at(ids[i]);
        if (offsets[i + 1] < offsets[i] || offsets[i + 1] > n_model_tokens) valid = false;
        else if (offsets[i + 1] - offsets[i] == 0 || offsets[i + 1] - offsets[i] > s.pending.size() + 1) valid = false;
      }
    }
    const bool ok = check_status(ngramspec_batch_accept(batch, null_ids ? nullptr : ids.data(), n_ids,
                                                        null_tokens ? nullptr : model_tokens.data(), n_model_tokens,
                                                        offsets_ptr, steps_ptr),
                                 "ngramspec_batch_accept");
    expect_valid(ok, valid, "ngramspec_batch_accept");
    if (!ok || null_ids) {
      for (const ngramspec_step& step : steps) {
        if (step.emitted != kSizeSentinel) fuzz_fail("a failed accept wrote steps");
      }
      return;
    }
    for (std::size_t i = 0; i < ids.size(); ++i) {
      Sequence& s = sequences_.at(ids[i]);
      const ngramspec_step& step = steps[i];
      const std::size_t n = offsets[i + 1] - offsets[i];
      const bool prefill = s.output.empty();
      const std::size_t cache = s.prompt.size() + s.output.size() - (prefill ? 0 : 1);
      const std::size_t pass_end = prefill ? s.prompt.size() : cache + n;
      if (step.emitted < 1 || step.emitted > n || step.emitted > s.remaining() || step.accepted > step.emitted ||
          step.accepted > n - 1) {
        fuzz_fail("accept emitted a count outside 1 .. its model tokens and remaining tokens");
      }
      const std::size_t before = s.output.size();
      s.output.insert(s.output.end(), model_tokens.begin() + static_cast<std::ptrdiff_t>(offsets[i]),
                      model_tokens.begin() + static_cast<std::ptrdiff_t>(offsets[i] + step.emitted));
      emitted_ += step.emitted;
      if (step.rollback_to != s.prompt.size() + s.output.size() - 1 || step.discarded != pass_end - step.rollback_to) {
        fuzz_fail("accept's rollback is not to prompt + output - 1, or its discarded count is wrong");
      }
      s.honest = s.honest && truthful[i];
      if (s.honest) {  // plain greedy decoding of the model
        for (std::size_t j = before; j < s.output.size(); ++j) {
          const Token previous = j == 0 ? s.prompt.back() : s.output[j - 1];
          if (s.output[j] != model_after(previous)) fuzz_fail("the batch did not emit plain greedy decoding");
        }
      }
      if (step.finished != 0) {
        const bool by_stop = std::find(s.stops.begin(), s.stops.end(), s.output.back()) != s.stops.end();
        if (step.stop_reason == NGRAMSPEC_STOP_TOKEN ? !by_stop
                                                     : (by_stop || (step.stop_reason != NGRAMSPEC_STOP_MAX_NEW_TOKENS &&
                                                                    step.stop_reason != NGRAMSPEC_STOP_MAX_CONTEXT))) {
          fuzz_fail("a sequence finished for the wrong reason");
        }
        s.finished = true;
      } else if (s.remaining() == 0) {
        fuzz_fail("a sequence with no tokens left did not finish");
      }
      s.pending.clear();
    }
  }

  void end_sequence() {
    ngramspec_batch* batch = maybe_null(batch_);
    const ngramspec_sequence_id sid = id();
    const bool finish = in_.flag();
    const auto it = sequences_.find(sid);
    const bool valid = batch != nullptr && it != sequences_.end();
    const std::uint64_t records = ngramspec_corpus_records(batch_corpus_);
    const bool ok = finish ? check_status(ngramspec_batch_finish(batch, sid), "ngramspec_batch_finish")
                           : check_status(ngramspec_batch_cancel(batch, sid), "ngramspec_batch_cancel");
    expect_valid(ok, valid, finish ? "ngramspec_batch_finish" : "ngramspec_batch_cancel");
    if (!ok) return;
    const bool appended = finish && batch_corpus_ != nullptr && !it->second.output.empty() && max_record_tokens_ != 0;
    if (ngramspec_corpus_records(batch_corpus_) != records + (appended ? 1 : 0)) {
      fuzz_fail("finish did not append the output to the corpus, or cancel did");
    }
    sequences_.erase(it);
    if (ngramspec_batch_contains(batch_, sid) != 0) fuzz_fail("an ended sequence is still running");
  }

  void observe() {
    const ngramspec_batch* batch = maybe_null(batch_);
    // The sized getter at either version's size or any other, or the symbol that programs built before it
    // call (the first version's 32 bytes): the fields of that version written, nothing past them, nothing at
    // all on failure.
    constexpr std::size_t kFirst = offsetof(ngramspec_batch_stats, out_of_vocabulary);
    constexpr unsigned char kGuard = 0xA5;
    alignas(ngramspec_batch_stats) unsigned char bytes[sizeof(ngramspec_batch_stats) + 16];
    std::memset(bytes, kGuard, sizeof bytes);
    ngramspec_batch_stats* out = maybe_null(reinterpret_cast<ngramspec_batch_stats*>(bytes));
    const std::size_t way = in_.in_range(0, 3);
    const bool sized = way != 3;
    const std::size_t size = way == 0   ? sizeof(ngramspec_batch_stats)
                             : way == 1 ? kFirst
                             : way == 2 ? in_.in_range(0, sizeof bytes)
                                        : kFirst;
    const char* function = sized ? "ngramspec_batch_stats_get_sized" : "ngramspec_batch_stats_get";
    const bool ok = check_status(
        sized ? ngramspec_batch_stats_get_sized(batch, out, size) : (ngramspec_batch_stats_get)(batch, out), function);
    expect_valid(ok, batch != nullptr && out != nullptr && (size == kFirst || size == sizeof(ngramspec_batch_stats)),
                 function);
    for (std::size_t i = ok ? size : 0; i < sizeof bytes; ++i) {
      if (bytes[i] != kGuard) fuzz_fail("stats_get wrote past the size of its struct, or wrote when it failed");
    }
    ngramspec_batch_stats stats{};
    if (ok) std::memcpy(&stats, bytes, size);
    if (ok && (stats.emitted != emitted_ || stats.accepted > stats.drafted || stats.accepted > stats.emitted)) {
      fuzz_fail("the batch's stats disagree with what it emitted");
    }
    if (ok && batch_vocab_ == 0 && stats.out_of_vocabulary != 0) {
      fuzz_fail("a batch that knows no vocabulary dropped drafts outside one");
    }
    if (ngramspec_batch_size(batch_) != (batch_ == nullptr ? 0 : sequences_.size())) {
      fuzz_fail("the batch's size is not the sequences running");
    }
    if (batch_ != nullptr && ngramspec_batch_memory_bytes(batch_) == 0) fuzz_fail("a batch holds no memory");
    (void)ngramspec_status_name(static_cast<ngramspec_status>(in_.in_range(0, 3)));
    if (ngramspec_version_number() != NGRAMSPEC_VERSION_NUMBER) fuzz_fail("the library's version is not the header's");
  }

  // ---- Corpus files ----------------------------------------------------------------------------

  bool file_in_use(const ngramspec_corpus_file* file) const {
    if (file == nullptr) return false;
    if (batch_ != nullptr && batch_file_ == file) return true;
    for (std::size_t i = 0; i < kSlots; ++i) {
      if (matches_[i] != nullptr && match_file_[i] == file) return true;
    }
    return false;
  }

  static std::filesystem::path file_path(std::size_t f) {
    return file_folder() / ("corpus" + std::to_string(f) + ".ngc");
  }

  // A path as a caller might give it: NULL now and then, else the script's path `f`.
  const char* path_arg(const std::string& path) { return in_.in_range(0, 9) == 0 ? nullptr : path.c_str(); }

  void corpus_file(std::size_t what) {
    switch (what) {
      case 0:
      case 1:
      case 2: file_save(); break;
      case 3: file_spoil(); break;
      case 4:
      case 5: file_open(); break;
      case 6: file_load(); break;
      case 7:
      case 8:
      case 9: file_draft(); break;
      case 10: live_draft(); break;
      case 11: append_stamped(); break;
      case 12:
      case 13: match_create(true); break;
      case 14: batch_create(true); break;
      default: file_verify_or_close(); break;
    }
  }

  void file_save() {
    const ngramspec_corpus* corpus = maybe_null(corpora_[slot()]);
    const std::size_t f = slot();
    const bool nowhere = in_.in_range(0, 7) == 0;  // a folder that does not exist
    const std::string path = nowhere ? (file_folder() / "no-such-folder" / "c.ngc").string() : file_path(f).string();
    const char* p = path_arg(path);
    const ngramspec_status status = ngramspec_corpus_save(corpus, p);
    const bool ok = check_status(status, "ngramspec_corpus_save");
    expect_valid(ok, corpus != nullptr && p != nullptr && !nowhere, "ngramspec_corpus_save");
    if (corpus != nullptr && p != nullptr && nowhere && status != NGRAMSPEC_ERROR_CORPUS_FILE) {
      fuzz_fail("a save to a folder that does not exist is not NGRAMSPEC_ERROR_CORPUS_FILE");
    }
    if (ok) on_disk_[f] = OnDisk::good;
  }

  // Replaces the script's file `f` (by a rename: a mapping of the old one stays valid) with bytes
  // from the input, or with the good file cut short.
  void file_spoil() {
    const std::size_t f = slot();
    std::vector<char> bytes;
    if (on_disk_[f] == OnDisk::good && in_.flag()) {
      std::ifstream in(file_path(f), std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      bytes.resize(bytes.size() - std::min<std::size_t>(bytes.size(), in_.in_range(1, 400)));
    } else {
      bytes.resize(in_.in_range(0, 400));
      for (char& b : bytes) b = static_cast<char>(in_.byte());
    }
    const std::filesystem::path spoiled = file_folder() / "spoiled.tmp";
    {
      std::ofstream out(spoiled, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    std::filesystem::rename(spoiled, file_path(f));
    on_disk_[f] = OnDisk::garbage;
  }

  void close_file(std::size_t k) {
    ngramspec_corpus_file_close(files_[k]);
    ngramspec_corpus_free(mirrors_[k]);
    files_[k] = nullptr;
    mirrors_[k] = nullptr;
  }

  void file_open() {
    const std::size_t f = slot();
    const std::size_t k = slot();
    if (file_in_use(files_[k])) return;  // drafters and batches need their file to outlive them
    close_file(k);
    const std::string path = file_path(f).string();
    const char* p = path_arg(path);
    ngramspec_corpus_file* out = reinterpret_cast<ngramspec_corpus_file*>(&sentinel_object_);
    ngramspec_corpus_file** where = maybe_null(&out);
    const ngramspec_status status = ngramspec_corpus_file_open(p, where);
    const bool ok = check_status(status, "ngramspec_corpus_file_open");
    expect_valid(ok, p != nullptr && where != nullptr && on_disk_[f] == OnDisk::good, "ngramspec_corpus_file_open");
    if (!ok) {
      if (out != reinterpret_cast<ngramspec_corpus_file*>(&sentinel_object_)) fuzz_fail("a failed open wrote *out");
      if (p != nullptr && where != nullptr && status != NGRAMSPEC_ERROR_CORPUS_FILE) {
        fuzz_fail("a missing or bad corpus file is not NGRAMSPEC_ERROR_CORPUS_FILE");
      }
      if (status == NGRAMSPEC_ERROR_CORPUS_FILE && std::strstr(ngramspec_last_error(), path.c_str()) == nullptr) {
        fuzz_fail("a corpus file's error does not name the file");
      }
      return;
    }
    files_[k] = out;
    if (!check_status(ngramspec_corpus_file_verify(out), "ngramspec_corpus_file_verify")) {
      fuzz_fail("a corpus file just saved does not verify");
    }
    // What it must draft: a live corpus loaded from it, large enough to hold all of it.
    if (!check_status(ngramspec_corpus_create(std::size_t{1} << 20, &mirrors_[k]), "ngramspec_corpus_create") ||
        !check_status(ngramspec_corpus_load(mirrors_[k], path.c_str()), "ngramspec_corpus_load")) {
      fuzz_fail("a corpus file just mapped does not load");
    }
    if (ngramspec_corpus_size(mirrors_[k]) != ngramspec_corpus_file_size(out) ||
        ngramspec_corpus_records(mirrors_[k]) != ngramspec_corpus_file_records(out) ||
        ngramspec_corpus_last_stamp(mirrors_[k]) != ngramspec_corpus_file_last_stamp(out) ||
        ngramspec_corpus_file_first_stamp(out) > ngramspec_corpus_file_last_stamp(out) ||
        ngramspec_corpus_file_bytes(out) < 320) {
      fuzz_fail("a loaded corpus does not hold what its file does");
    }
  }

  void file_load() {
    ngramspec_corpus* corpus = maybe_null(corpora_[slot()]);
    const std::size_t f = slot();
    const std::string path = file_path(f).string();
    const char* p = path_arg(path);
    const std::size_t size = ngramspec_corpus_size(corpus);
    const std::uint64_t records = ngramspec_corpus_records(corpus);
    const std::int64_t stamp = ngramspec_corpus_last_stamp(corpus);
    // The second file slot loads trusted: a file is good or not a corpus file at all, so both
    // calls succeed on the same files.
    const char* const name = f == 0 ? "ngramspec_corpus_load" : "ngramspec_corpus_load_trusted";
    const ngramspec_status status = f == 0 ? ngramspec_corpus_load(corpus, p) : ngramspec_corpus_load_trusted(corpus, p);
    const bool ok = check_status(status, name);
    expect_valid(ok, corpus != nullptr && p != nullptr && on_disk_[f] == OnDisk::good, name);
    if (!ok) {
      if (corpus != nullptr && p != nullptr && status != NGRAMSPEC_ERROR_CORPUS_FILE) {
        fuzz_fail("a missing or bad corpus file is not NGRAMSPEC_ERROR_CORPUS_FILE");
      }
      if (ngramspec_corpus_size(corpus) != size || ngramspec_corpus_records(corpus) != records ||
          ngramspec_corpus_last_stamp(corpus) != stamp) {
        fuzz_fail("a failed load changed the corpus");
      }
      return;
    }
    if (ngramspec_corpus_size(corpus) > ngramspec_corpus_capacity_tokens(corpus)) {
      fuzz_fail("a loaded corpus holds more tokens than its capacity");
    }
  }

  // The arguments of a draft call, some of them wrong, and what it must do with them.
  struct DraftCall {
    std::vector<Token> context;
    std::vector<Token> out;
    std::size_t n = 0;
    std::size_t room = 0;
    const Token* context_ptr = nullptr;
    Token* out_ptr = nullptr;
    std::size_t count = kSizeSentinel;
    std::size_t length = kSizeSentinel;
    std::size_t* count_ptr = nullptr;
    std::size_t* length_ptr = nullptr;
    [[nodiscard]] bool valid() const {
      return (context_ptr != nullptr || n == 0) && (out_ptr != nullptr || room == 0) && count_ptr != nullptr;
    }
  };

  void draft_call(DraftCall& call) {
    call.context = tokens(12);
    const std::size_t capacity = in_.in_range(0, 16);
    call.out.assign(capacity, kSentinel);
    const bool null_context = in_.in_range(0, 9) == 0;
    call.n = null_context ? size_value(4) : call.context.size();
    call.context_ptr = null_context ? nullptr : call.context.data();
    const bool null_out = in_.in_range(0, 9) == 0;
    call.room = null_out ? size_value(4) : capacity;
    call.out_ptr = null_out ? nullptr : call.out.data();
    call.count_ptr = maybe_null(&call.count);
    call.length_ptr = in_.flag() ? nullptr : &call.length;
  }

  // After a draft call: nothing written when it failed, nothing past the count when it succeeded.
  void check_drafted(const DraftCall& call, bool ok) {
    if (!ok) {
      if (call.count != kSizeSentinel || call.length != kSizeSentinel) fuzz_fail("a failed draft wrote its count");
      for (const Token t : call.out) {
        if (t != kSentinel) fuzz_fail("a failed draft wrote its output");
      }
      return;
    }
    if (call.count > call.room) fuzz_fail("a draft returned more than its room");
    for (std::size_t i = call.count; i < call.out.size(); ++i) {
      if (call.out[i] != kSentinel) fuzz_fail("a draft wrote past its count");
    }
    if (call.length_ptr != nullptr && call.count > 0 && call.length == 0) fuzz_fail("a draft without a match");
  }

  void file_draft() {
    const std::size_t k = slot();
    const ngramspec_corpus_file* file = maybe_null(files_[k]);
    DraftCall call;
    draft_call(call);
    const bool ok = check_status(ngramspec_corpus_file_draft(file, call.context_ptr, call.n, call.out_ptr, call.room,
                                                             call.count_ptr, call.length_ptr),
                                 "ngramspec_corpus_file_draft");
    expect_valid(ok, file != nullptr && call.valid(), "ngramspec_corpus_file_draft");
    check_drafted(call, ok);
    if (!ok || call.count_ptr == nullptr) return;
    // The live corpus loaded from the file drafts the same.
    std::vector<Token> expected(call.out.size(), kSentinel);
    std::size_t count = 0;
    std::size_t length = 0;
    Token* const expected_out = call.out_ptr != nullptr ? expected.data() : nullptr;
    if (!check_status(
            ngramspec_corpus_draft(mirrors_[k], call.context_ptr, call.n, expected_out, call.room, &count, &length),
            "ngramspec_corpus_draft")) {
      fuzz_fail("a live corpus refused a draft its file took");
    }
    if (count != call.count || (call.length_ptr != nullptr && length != call.length) || expected != call.out) {
      fuzz_fail("a corpus file drafts otherwise than the live corpus loaded from it");
    }
  }

  void live_draft() {
    const ngramspec_corpus* corpus = maybe_null(corpora_[slot()]);
    DraftCall call;
    draft_call(call);
    const bool ok = check_status(ngramspec_corpus_draft(corpus, call.context_ptr, call.n, call.out_ptr, call.room,
                                                        call.count_ptr, call.length_ptr),
                                 "ngramspec_corpus_draft");
    expect_valid(ok, corpus != nullptr && call.valid(), "ngramspec_corpus_draft");
    check_drafted(call, ok);
  }

  void append_stamped() {
    ngramspec_corpus* corpus = maybe_null(corpora_[slot()]);
    const std::vector<Token> record = tokens(48);
    const bool null_tokens = in_.in_range(0, 7) == 0;
    const std::size_t count = null_tokens ? size_value(8) : record.size();
    const auto stamp = static_cast<std::int64_t>(in_.in_range(0, std::numeric_limits<std::uint64_t>::max()));
    const std::uint64_t records = ngramspec_corpus_records(corpus);
    const std::int64_t last = ngramspec_corpus_last_stamp(corpus);
    const bool ok = check_status(
        ngramspec_corpus_append_stamped(corpus, null_tokens ? nullptr : record.data(), count, stamp),
        "ngramspec_corpus_append_stamped");
    expect_valid(ok, corpus != nullptr && (!null_tokens || count == 0), "ngramspec_corpus_append_stamped");
    const bool appended = ok && count != 0;
    if (ngramspec_corpus_records(corpus) != records + (appended ? 1 : 0)) {
      fuzz_fail("a stamped append changed the records by something else");
    }
    // Stamps only increase: one not above the last is raised to one more than it.
    const std::int64_t raised = last == std::numeric_limits<std::int64_t>::max() ? last : last + 1;
    const std::int64_t expected = !appended ? last : records > 0 && stamp <= last ? raised : stamp;
    if (ngramspec_corpus_last_stamp(corpus) != expected) fuzz_fail("the last stamp is not the one appended, raised");
  }

  void file_verify_or_close() {
    const std::size_t k = slot();
    if (in_.flag()) {
      if (!file_in_use(files_[k])) close_file(k);
      return;
    }
    const ngramspec_corpus_file* file = maybe_null(files_[k]);
    // A mapping keeps the file it mapped, whatever has been written to its path since.
    expect_valid(check_status(ngramspec_corpus_file_verify(file), "ngramspec_corpus_file_verify"), file != nullptr,
                 "ngramspec_corpus_file_verify");
    expect_valid(check_status(ngramspec_corpus_file_verify_checksums(file), "ngramspec_corpus_file_verify_checksums"),
                 file != nullptr, "ngramspec_corpus_file_verify_checksums");
    // The files are saved from live corpora, which record no vocabulary.
    if (ngramspec_corpus_file_vocab_size(file) != 0 || ngramspec_corpus_file_tokenizer_fingerprint(file) != 0) {
      fuzz_fail("a file saved from a live corpus records a vocabulary");
    }
    if (file == nullptr && (ngramspec_corpus_file_size(file) != 0 || ngramspec_corpus_file_records(file) != 0 ||
                            ngramspec_corpus_file_bytes(file) != 0 || ngramspec_corpus_file_first_stamp(file) != 0 ||
                            ngramspec_corpus_file_last_stamp(file) != 0)) {
      fuzz_fail("a NULL corpus file reports something");
    }
  }

  void free_something() {
    switch (in_.in_range(0, 3)) {
      case 0: drop_batch(); break;
      case 1: {
        const std::size_t s = slot();
        if (!corpus_in_use(corpora_[s])) {
          ngramspec_corpus_free(corpora_[s]);
          corpora_[s] = nullptr;
        }
        break;
      }
      default:  // the NULL handles
        ngramspec_batch_free(nullptr);
        ngramspec_corpus_free(nullptr);
        ngramspec_match_drafter_free(nullptr);
        ngramspec_ngram_predictor_free(nullptr);
        ngramspec_corpus_file_close(nullptr);
    }
  }

  std::array<ngramspec_sampler*, kSlots> samplers_{};
  std::array<std::size_t, kSlots> sampler_vocab_{};
  std::array<ngramspec_sampling_options, kSlots> sampler_options_{};
  FuzzInput& in_;
  int sentinel_object_ = 0;  // the address *out holds until a create writes it
  ngramspec_corpus* corpora_[kSlots] = {};
  ngramspec_match_drafter* matches_[kSlots] = {};
  const ngramspec_corpus* match_corpus_[kSlots] = {};
  const ngramspec_corpus_file* match_file_[kSlots] = {};
  // Corpus files: the mapped ones, a live corpus loaded from each when it was mapped (what it
  // must draft), and what each of the script's paths holds.
  enum class OnDisk { nothing, good, garbage };
  ngramspec_corpus_file* files_[kSlots] = {};
  ngramspec_corpus* mirrors_[kSlots] = {};
  OnDisk on_disk_[kSlots] = {OnDisk::nothing, OnDisk::nothing};
  std::size_t match_memory_[kSlots] = {};
  ngramspec_ngram_predictor* ngrams_[kSlots] = {};
  ngramspec_batch* batch_ = nullptr;
  const ngramspec_corpus* batch_corpus_ = nullptr;
  const ngramspec_corpus_file* batch_file_ = nullptr;
  std::size_t batch_vocab_ = 0;  // the vocabulary its drafters know (0: unknown)
  std::size_t max_sequences_ = 0;
  std::size_t max_record_tokens_ = 0;
  std::uint64_t emitted_ = 0;
  std::map<ngramspec_sequence_id, Sequence> sequences_;
};

}  // namespace
}  // namespace ngramspec::test

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ngramspec::test::FuzzInput in(data, size);
  ngramspec::test::Script script(in);
  script.run();
  return 0;
}
