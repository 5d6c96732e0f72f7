// LlamaCppDrafter against llama.cpp's common_speculative API driven directly, the way
// llama.cpp's examples/speculative-simple drives it, over random and repetitive token streams.

#include "llama_cpp_drafter.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "log.h"
#include "ngramspec/decode_options.hpp"
#include "ngramspec/speculative_decoder.hpp"
#include "speculative.h"

namespace ngramspec::llama_cpp {
namespace {

using Drafts = std::vector<std::vector<Token>>;

struct Stream {
  std::string name;
  std::vector<Token> prompt;
  std::vector<Token> output;
};

// Uniform tokens from a small vocabulary: short n-grams recur by chance, long ones do not.
Stream random_stream(std::uint32_t seed, std::size_t vocabulary, std::size_t prompt, std::size_t output) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<Token> token(0, static_cast<Token>(vocabulary - 1));
  Stream s{"random(seed=" + std::to_string(seed) + ",vocab=" + std::to_string(vocabulary) + ")", {}, {}};
  for (std::size_t i = 0; i < prompt; ++i) s.prompt.push_back(token(rng));
  for (std::size_t i = 0; i < output; ++i) s.output.push_back(token(rng));
  return s;
}

// Phrases of 4-120 tokens drawn from a small book and strung together with a little noise:
// what LLM output does when it quotes its context or repeats itself.
Stream repetitive_stream(std::uint32_t seed, std::size_t prompt, std::size_t output) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<Token> token(0, 499);
  std::uniform_int_distribution<std::size_t> length(4, 120);
  std::vector<std::vector<Token>> book(6);
  for (auto& phrase : book) {
    phrase.resize(length(rng));
    for (Token& t : phrase) t = token(rng);
  }
  std::uniform_int_distribution<std::size_t> pick(0, book.size() - 1);
  std::bernoulli_distribution noise(0.02);
  std::vector<Token> all;
  while (all.size() < prompt + output) {
    for (const Token t : book[pick(rng)]) all.push_back(noise(rng) ? token(rng) : t);
  }
  Stream s{"repetitive(seed=" + std::to_string(seed) + ")", {}, {}};
  s.prompt.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(prompt));
  s.output.assign(all.begin() + static_cast<std::ptrdiff_t>(prompt),
                  all.begin() + static_cast<std::ptrdiff_t>(prompt + output));
  return s;
}

std::vector<Stream> streams() {
  std::vector<Stream> all;
  for (std::uint32_t seed = 1; seed <= 3; ++seed) {
    all.push_back(random_stream(seed, 4, 40, 400));
    all.push_back(random_stream(seed + 10, 50, 300, 300));
    all.push_back(repetitive_stream(seed, 400, 900));
  }
  return all;
}

// The configurations under test: every type at llama.cpp's defaults, and at settings that
// draft often on short streams.
std::vector<LlamaCppDrafterConfig> configurations() {
  std::vector<LlamaCppDrafterConfig> all;
  for (const char* spec : {"ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
                           "ngram-simple:n=2,m=5", "ngram-map-k:n=2,m=5", "ngram-map-k4v:n=2,m=6,min_hits=2",
                           "ngram-mod:n_match=2,n_max=8,n_min=1", "ngram-mod:n_match=3,n_max=6,n_min=3"}) {
    all.push_back(parse_spec(spec));
  }
  return all;
}

// The model the replay stands in for: it answers the recorded token whatever it is fed, which
// is its greedy token wherever the fed tokens agree with the recording.
class ScriptedModel {
 public:
  explicit ScriptedModel(const Stream& s) : sequence_(s.prompt) {
    sequence_.insert(sequence_.end(), s.output.begin(), s.output.end());
  }
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      next[i] = pos + i + 1 < sequence_.size() ? sequence_[pos + i + 1] : 0;
    }
  }
  void rollback(std::size_t) {}
  [[nodiscard]] std::size_t max_batch() const { return 1 << 20; }

 private:
  std::vector<Token> sequence_;
};

// Passes every call through and records each draft handed out.
class RecordingDrafter {
 public:
  RecordingDrafter(LlamaCppDrafter inner, Drafts* drafts) : inner_(std::move(inner)), drafts_(drafts) {}
  void update(Token token) { inner_.update(token); }
  void update(std::span<const Token> tokens) { inner_.update(tokens); }
  std::size_t predict(std::span<Token> out) const {
    const std::size_t n = inner_.predict(out);
    EXPECT_LE(n, out.size());
    drafts_->emplace_back(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(std::min(n, out.size())));
    return n;
  }
  void reset() { inner_.reset(); }

 private:
  LlamaCppDrafter inner_;
  Drafts* drafts_;
};

// The wrapper as ngramspec-replay drives it: SpeculativeDecoder over the recorded stream.
Drafts wrapper_drafts(const LlamaCppDrafterConfig& config, const Stream& s, std::size_t k) {
  Drafts drafts;
  ScriptedModel model(s);
  SpeculativeDecoder<ScriptedModel, RecordingDrafter> decoder(model, RecordingDrafter(LlamaCppDrafter(config), &drafts));
  DecodeOptions options;
  options.max_new_tokens = s.output.size();
  options.max_drafts = k;
  const DecodeResult result = decoder.generate(s.prompt, options);
  EXPECT_EQ(result.tokens, s.output);
  return drafts;
}

// llama.cpp's API driven directly, as examples/speculative-simple does: the tokens in the target's
// context (prompt_tgt) and the pending one (id_last); begin() once; each pass drafts at most
// the room left, is verified, reported with accept(accepted), and the emitted tokens join the
// context. Here the prefill has emitted the first output token before the first draft (as in
// ngramspec's decoder), and a pass with no room drafts nothing (speculative-simple would draft
// unbounded there: its n_max 0 means no limit).
Drafts reference_drafts(const LlamaCppDrafterConfig& config, const Stream& s, std::size_t k) {
  common_params_speculative params;
  params.types = {common_speculative_type_from_name(std::string(type_name(config.type)))};
  for (auto* map : {&params.ngram_simple, &params.ngram_map_k, &params.ngram_map_k4v}) {
    map->size_n = config.n;
    map->size_m = config.m;
    map->min_hits = config.min_hits;
  }
  params.ngram_mod = {config.n_match, config.n_max, config.n_min};
  common_speculative* spec = common_speculative_init(params, 1);
  EXPECT_NE(spec, nullptr);
  if (spec == nullptr) return {};

  const auto as_llama = [](const std::vector<Token>& tokens) {
    return llama_tokens(tokens.begin(), tokens.end());
  };
  const llama_tokens output = as_llama(s.output);
  llama_tokens prompt_tgt = as_llama(s.prompt);
  llama_token id_last = output[0];
  common_speculative_begin(spec, 0, prompt_tgt);

  Drafts drafts;
  llama_tokens draft;
  std::size_t generated = 1;
  while (generated < output.size()) {
    const std::size_t room = std::min(k, output.size() - generated - 1);
    llama_tokens ids;
    if (room == 0) {
      ids.push_back(output[generated]);
    } else {
      draft.clear();
      common_speculative_get_draft_params(spec, 0) = {
          /* .drafting = */ true,
          /* .n_max    = */ static_cast<std::int32_t>(room),
          /* .pos0     = */ static_cast<llama_pos>(prompt_tgt.size()),
          /* .id_last  = */ id_last,
          /* .prompt   = */ &prompt_tgt,
          /* .result   = */ &draft,
      };
      common_speculative_draft(spec);
      drafts.emplace_back(draft.begin(), draft.end());
      std::size_t accepted = 0;
      while (accepted < draft.size() && draft[accepted] == output[generated + accepted]) ++accepted;
      ids.assign(draft.begin(), draft.begin() + static_cast<std::ptrdiff_t>(accepted));
      ids.push_back(output[generated + accepted]);
      common_speculative_accept(spec, 0, static_cast<std::uint16_t>(accepted));
    }
    for (const llama_token id : ids) {
      prompt_tgt.push_back(id_last);
      id_last = id;
    }
    generated += ids.size();
  }
  common_speculative_free(spec);
  return drafts;
}

std::size_t drafted(const Drafts& drafts) {
  std::size_t total = 0;
  for (const auto& d : drafts) total += d.size();
  return total;
}

TEST(LlamaCppDrafter, ProposesExactlyWhatLlamaCppProposesDrivenDirectly) {
  for (const LlamaCppDrafterConfig& config : configurations()) {
    std::size_t total = 0;
    for (const Stream& s : streams()) {
      for (const std::size_t k : {1, 4, 9}) {
        SCOPED_TRACE(describe(config) + " on " + s.name + " at k = " + std::to_string(k));
        const Drafts expected = reference_drafts(config, s, k);
        const Drafts got = wrapper_drafts(config, s, k);
        EXPECT_EQ(got, expected);
        total += drafted(got);
      }
    }
    // Not vacuous: every configuration drafts on these streams.
    EXPECT_GT(total, 0U) << describe(config);
  }
}

TEST(LlamaCppDrafter, NeverDraftsBeyondTheRoom) {
  constexpr Token kGuard = 0xDEADBEEF;
  for (const LlamaCppDrafterConfig& config : configurations()) {
    const Stream s = repetitive_stream(7, 300, 700);
    LlamaCppDrafter drafter(config);
    drafter.update(s.prompt);
    std::mt19937 rng(11);
    std::uniform_int_distribution<std::size_t> room(0, 12);
    std::size_t total = 0;
    for (std::size_t pos = 0; pos < s.output.size();) {
      std::vector<Token> buffer(16, kGuard);
      const std::size_t r = room(rng);
      const std::size_t n = drafter.predict(std::span<Token>(buffer).first(r));
      ASSERT_LE(n, r) << describe(config);
      for (std::size_t i = r; i < buffer.size(); ++i) ASSERT_EQ(buffer[i], kGuard) << describe(config);
      total += n;
      // Accept the agreeing prefix and the recorded token after it.
      std::size_t take = 0;
      while (take < n && pos + take < s.output.size() && buffer[take] == s.output[pos + take]) ++take;
      take = std::min(take + 1, s.output.size() - pos);
      drafter.update(std::span<const Token>(s.output).subspan(pos, take));
      pos += take;
    }
    EXPECT_GT(total, 0U) << describe(config);
  }
}

TEST(LlamaCppDrafter, NothingBeforeTheFirstTokenOrIntoNoRoom) {
  LlamaCppDrafter drafter(parse_spec("ngram-simple:n=1,m=2"));
  std::vector<Token> out(4, 7);
  EXPECT_EQ(drafter.predict(out), 0U);
  drafter.update(std::vector<Token>{1, 2, 3, 1, 2, 3, 1, 2});
  EXPECT_EQ(drafter.predict(std::span<Token>(out).first(0)), 0U);
  EXPECT_EQ(out, std::vector<Token>(4, 7));
  EXPECT_EQ(drafter.tokens_seen(), 8U);
}

TEST(LlamaCppDrafter, ResetStartsOver) {
  const Stream first = repetitive_stream(21, 300, 500);
  const Stream second = repetitive_stream(22, 300, 500);
  for (const LlamaCppDrafterConfig& config : configurations()) {
    SCOPED_TRACE(describe(config));
    Drafts fresh;
    {
      ScriptedModel model(second);
      SpeculativeDecoder<ScriptedModel, RecordingDrafter> decoder(model, RecordingDrafter(LlamaCppDrafter(config), &fresh));
      DecodeOptions options;
      options.max_new_tokens = second.output.size();
      options.max_drafts = 4;
      decoder.generate(second.prompt, options);
    }
    // One drafter, used on another stream first: the decoder resets it before each generation.
    Drafts reused;
    ScriptedModel model_first(first);
    ScriptedModel model_second(second);
    RecordingDrafter drafter(LlamaCppDrafter(config), &reused);
    DecodeOptions options;
    options.max_drafts = 4;
    options.max_new_tokens = first.output.size();
    SpeculativeDecoder<ScriptedModel, RecordingDrafter>(model_first, drafter).generate(first.prompt, options);
    reused.clear();
    options.max_new_tokens = second.output.size();
    SpeculativeDecoder<ScriptedModel, RecordingDrafter>(model_second, drafter).generate(second.prompt, options);
    EXPECT_EQ(reused, fresh);
    EXPECT_GT(drafted(fresh), 0U);
  }
}

TEST(LlamaCppDrafter, ResetForgetsTheTokens) {
  LlamaCppDrafter drafter(parse_spec("ngram-simple:n=1,m=2"));
  drafter.update(std::vector<Token>{5, 6, 7, 5, 6, 7, 5});
  drafter.reset();
  EXPECT_EQ(drafter.tokens_seen(), 0U);
  std::vector<Token> out(4);
  EXPECT_EQ(drafter.predict(out), 0U);
}

TEST(LlamaCppDrafter, DefaultsAreLlamaCppDefaults) {
  const common_params_speculative llama;
  const LlamaCppDrafterConfig ours;
  for (const auto* map : {&llama.ngram_simple, &llama.ngram_map_k, &llama.ngram_map_k4v}) {
    EXPECT_EQ(ours.n, map->size_n);
    EXPECT_EQ(ours.m, map->size_m);
    EXPECT_EQ(ours.min_hits, map->min_hits);
  }
  EXPECT_EQ(ours.n_match, llama.ngram_mod.n_match);
  EXPECT_EQ(ours.n_max, llama.ngram_mod.n_max);
  EXPECT_EQ(ours.n_min, llama.ngram_mod.n_min);
}

// Every speculative type of the llama.cpp built here is one that ngramspec-llama --compare runs (the
// n-gram types through this wrapper, draft-simple with a draft model), ngramspec's own, or one that needs
// a file the project has none of. A release that adds a type fails here, naming it, until it is sorted.
TEST(LlamaCppDrafter, CompareRunsEveryTypeThatNeedsNoOtherFile) {
  const std::vector<std::string> ngram = {"ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"};
  const std::vector<std::string> compared_with_a_draft_model = {"draft-simple"};
  // eagle3, dflash, dspark: a trained draft head of their kind; mtp: a model with multi-token-prediction layers.
  const std::vector<std::string> need_a_file = {"draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark"};
  const std::vector<std::string> not_drafters = {"none", "ngramspec"};
  std::vector<std::string> seen;
  for (int t = 0; t < static_cast<int>(COMMON_SPECULATIVE_TYPE_COUNT); ++t) {
    const std::string name = common_speculative_type_to_str(static_cast<common_speculative_type>(t));
    seen.push_back(name);
    const auto in = [&](const std::vector<std::string>& list) { return std::ranges::find(list, name) != list.end(); };
    EXPECT_TRUE(in(ngram) || in(compared_with_a_draft_model) || in(need_a_file) || in(not_drafters))
        << "llama.cpp's speculative type '" << name << "' (" << t << ") is new: run it in --compare or say what file it needs";
  }
  for (const std::string& name : ngram) {
    EXPECT_NE(std::ranges::find(seen, name), seen.end()) << name << " is gone from llama.cpp";
    EXPECT_EQ(type_name(parse_spec(name).type), name);
  }
}

TEST(LlamaCppDrafter, ParsesEveryTypeAndItsParameters) {
  EXPECT_EQ(parse_spec("ngram-simple").type, NGramType::simple);
  EXPECT_EQ(parse_spec("ngram-map-k").type, NGramType::map_k);
  EXPECT_EQ(parse_spec("ngram-map-k4v").type, NGramType::map_k4v);
  EXPECT_EQ(parse_spec("ngram-mod").type, NGramType::mod);
  EXPECT_EQ(parse_spec("ngram-cache").type, NGramType::cache);
  const LlamaCppDrafterConfig simple = parse_spec("ngram-simple:n=3,m=4");
  EXPECT_EQ(simple.n, 3);
  EXPECT_EQ(simple.m, 4);
  const LlamaCppDrafterConfig k4v = parse_spec("ngram-map-k4v:min_hits=3,m=1024");
  EXPECT_EQ(k4v.min_hits, 3);
  EXPECT_EQ(k4v.m, 1024);
  EXPECT_EQ(k4v.n, 12);
  const LlamaCppDrafterConfig mod = parse_spec("ngram-mod:n_match=8,n_max=16,n_min=0");
  EXPECT_EQ(mod.n_match, 8);
  EXPECT_EQ(mod.n_max, 16);
  EXPECT_EQ(mod.n_min, 0);
  EXPECT_EQ(describe(simple), "llama.cpp:ngram-simple(n=3,m=4)");
  EXPECT_EQ(describe(k4v), "llama.cpp:ngram-map-k4v(n=12,m=1024,min_hits=3)");
  EXPECT_EQ(describe(mod), "llama.cpp:ngram-mod(n_match=8,n_max=16,n_min=0)");
  EXPECT_EQ(describe(parse_spec("ngram-cache")), "llama.cpp:ngram-cache");
}

TEST(LlamaCppDrafter, BadSpecsSayWhatIsWrong) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ngram-smple", "llama.cpp drafter 'ngram-smple': unknown n-gram type 'ngram-smple'; llama.cpp's n-gram types: "
                      "ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache"},
      {"", "unknown n-gram type ''"},
      {"draft-simple", "unknown n-gram type 'draft-simple'"},
      {"ngram-simple:", "llama.cpp drafter 'ngram-simple:': nothing after ':'"},
      {"ngram-simple:n=3,", "llama.cpp drafter 'ngram-simple:n=3,': a trailing ','"},
      {"ngram-simple:n", "parameter 'n' is not key=value"},
      {"ngram-simple:=3", "parameter '=3' is not key=value"},
      {"ngram-simple:n=3,n=4", "parameter 'n' is given twice"},
      {"ngram-simple:x=1", "unknown parameter 'x' (ngram-simple takes: n, m)"},
      {"ngram-simple:min_hits=2", "unknown parameter 'min_hits' (ngram-simple takes: n, m)"},
      {"ngram-map-k:min_hits=2", "unknown parameter 'min_hits' (ngram-map-k takes: n, m)"},
      {"ngram-simple:n_match=2", "unknown parameter 'n_match' (ngram-simple takes: n, m)"},
      {"ngram-mod:n=2", "unknown parameter 'n' (ngram-mod takes: n_match, n_max, n_min)"},
      {"ngram-cache:n=2", "unknown parameter 'n' (ngram-cache takes: none)"},
      {"ngram-simple:n=0", "llama.cpp drafter 'ngram-simple:n=0': n = '0' is out of range: it must be from 1 to 1024"},
      {"ngram-simple:m=1025", "m = '1025' is out of range: it must be from 1 to 1024"},
      {"ngram-simple:n=-1", "n = '-1' is out of range: it must be from 1 to 1024"},
      {"ngram-simple:n=3x", "n = '3x' is not a whole number"},
      {"ngram-simple:n=", "n = '' is not a whole number"},
      {"ngram-simple:n=99999999999999999999999", "n = '99999999999999999999999' is out of range"},
      {"ngram-map-k4v:min_hits=0", "min_hits = '0' is out of range: it must be from 1 to 65535"},
      {"ngram-mod:n_match=0", "n_match = '0' is out of range: it must be from 1 to 1024"},
      {"ngram-mod:n_max=2000", "n_max = '2000' is out of range: it must be from 0 to 1024"},
      {"ngram-mod:n_min=-3", "n_min = '-3' is out of range: it must be from 0 to 1024"},
      {"ngram-mod:n_min=5,n_max=2",
       "llama.cpp drafter 'ngram-mod:n_min=5,n_max=2': n_min = 5 is more than n_max = 2: a draft holds at most n_max "
       "tokens"},
      {"ngram-mod:n_max=16", "n_min = 48 is more than n_max = 16"},  // the default n_min
  };
  for (const auto& [spec, message] : cases) {
    try {
      (void)parse_spec(spec);
      ADD_FAILURE() << "'" << spec << "' was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << spec << ": " << e.what();
    }
  }
}

TEST(LlamaCppDrafter, BadConfigurationsSayWhichField) {
  LlamaCppDrafterConfig config;
  config.n = 0;
  EXPECT_THROW(
      {
        try {
          LlamaCppDrafter{config};
        } catch (const std::invalid_argument& e) {
          EXPECT_STREQ(e.what(), "LlamaCppDrafterConfig::n = 0 is out of range: it must be from 1 to 1024");
          throw;
        }
      },
      std::invalid_argument);
  config = {};
  config.n_max = -1;
  EXPECT_THROW(LlamaCppDrafter{config}, std::invalid_argument);
  config = {};
  config.n_min = 8;
  config.n_max = 4;
  try {
    LlamaCppDrafter{config};
    ADD_FAILURE() << "accepted n_min 8 above n_max 4";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "LlamaCppDrafterConfig::n_min = 8 is more than n_max = 4: a draft holds at most n_max tokens");
  }
  config = {};
  config.type = static_cast<NGramType>(42);
  EXPECT_THROW(LlamaCppDrafter{config}, std::invalid_argument);
}

TEST(LlamaCppDrafter, RefusesTokenIdsLlamaCppCannotHold) {
  LlamaCppDrafter drafter(parse_spec("ngram-cache"));
  const Token too_big = static_cast<Token>(std::numeric_limits<std::int32_t>::max()) + 1;
  try {
    drafter.update(too_big);
    ADD_FAILURE() << "accepted " << too_big;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("token id 2147483648 exceeds"), std::string::npos) << e.what();
  }
  EXPECT_THROW(drafter.update(std::vector<Token>{1, 2, too_big}), std::invalid_argument);
  EXPECT_EQ(drafter.tokens_seen(), 0U);  // none of a bad span is taken
}

TEST(LlamaCppDrafter, QuietLogsKeepErrors) {
  testing::internal::CaptureStderr();
  // llama.cpp warns about so short an n_match on construction (common/speculative.cpp).
  LlamaCppDrafter drafter(parse_spec("ngram-mod:n_match=4"));
  common_log_flush(common_log_main());
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(common_log_get_verbosity_thold(), LOG_LEVEL_ERROR);  // errors (level 1) still print
}

}  // namespace
}  // namespace ngramspec::llama_cpp
