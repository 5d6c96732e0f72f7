// The replay tool's parts: the streams TSV parser, the synthetic stream generators, the
// recorded-generation model, the replay runner, the drafter registry, the serving simulation
// and its report, and the command line.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "drafter_registry.hpp"
#include "ngramspec/decode_step.hpp"
#include "ngramspec/draft_tree.hpp"
#include "ngramspec/shared_corpus.hpp"
#include "replay_model.hpp"
#include "ngramspec/verify_cost.hpp"
#include "replay_options.hpp"
#include "replay_report.hpp"
#include "replay_runner.hpp"
#include "serving_sim.hpp"
#include "token_streams.hpp"
#include "tree_serving.hpp"
#include "support/thrown_message.hpp"

namespace ngramspec::test {
namespace {

using replay::DrafterDefaults;
using replay::DrafterEntry;
using replay::drafter_names_help;
using replay::make_drafter;
using replay::make_synthetic;
using replay::parse_streams;
using replay::parse_synthetic;
using replay::read_streams;
using replay::register_drafter_family;
using replay::RecordResult;
using replay::ReplayModel;
using replay::SyntheticSpec;
using replay::TokenStream;
using Tokens = std::vector<Token>;

constexpr Token kUnknown = ReplayModel::kUnknown;

std::vector<TokenStream> parse_text(const std::string& text, std::string_view source = "test.tsv") {
  std::istringstream in(text);
  return parse_streams(in, source);
}


Tokens whole_sequence(const TokenStream& stream) {
  Tokens all = stream.prompt;
  all.insert(all.end(), stream.output.begin(), stream.output.end());
  return all;
}

// --- parse_streams / read_streams --------------------------------------------------------

TEST(ParseStreams, ReadsRecordsWithCrlfBlankLinesAndRunsOfSpaces) {
  const std::string text =
      "q1-1\tmt_bench\t1 2  3\t4 5\r\n"
      "\r\n"
      "\n"
      "q2\trag\t   0 4294967295\t7   8 9  \n"
      "q3\tqa\t42\t43";  // no newline at the end
  const std::vector<TokenStream> streams = parse_text(text);
  ASSERT_EQ(streams.size(), 3u);
  EXPECT_EQ(streams[0].id, "q1-1");
  EXPECT_EQ(streams[0].category, "mt_bench");
  EXPECT_EQ(streams[0].prompt, (Tokens{1, 2, 3}));
  EXPECT_EQ(streams[0].output, (Tokens{4, 5}));  // the CR is not part of the last id
  EXPECT_EQ(streams[1].id, "q2");
  EXPECT_EQ(streams[1].category, "rag");
  EXPECT_EQ(streams[1].prompt, (Tokens{0, 4294967295u}));
  EXPECT_EQ(streams[1].output, (Tokens{7, 8, 9}));
  EXPECT_EQ(streams[2].prompt, (Tokens{42}));
  EXPECT_EQ(streams[2].output, (Tokens{43}));
}

TEST(ParseStreams, EmptyInputHasNoRecords) {
  EXPECT_TRUE(parse_text("").empty());
  EXPECT_TRUE(parse_text("\n\r\n\n").empty());
}

// Every malformed record is rejected with "<source>:<line>: <problem>". The bad record sits on
// line 4, after a good record and two blank lines, so the line count must include blank lines.
TEST(ParseStreams, RejectsEveryMalformedRecordNamingSourceLineAndProblem) {
  struct Case {
    std::string line;
    std::string problem;  // a part of the message that names the problem
  };
  const std::string digits(40, '9');
  const std::vector<Case> cases = {
      {"only-one-field", "expected 4 TAB-separated fields (id, category, prompt ids, output ids), found 1"},
      {"id\tcat\t1 2", "found 3"},
      {"id\tcat\t1\t2\t3", "more than 4 TAB-separated fields"},
      {"id\tcat\t1\t2\t", "more than 4 TAB-separated fields"},
      {"\tcat\t1\t2", "the id field is empty"},
      {"id\t\t1\t2", "the category field is empty"},
      {"id\tcat\t\t2", "the prompt is empty"},
      {"id\tcat\t   \t2", "the prompt is empty"},
      {"id\tcat\t1\t", "the output is empty"},
      {"id\tcat\t1\t  ", "the output is empty"},
      {"id\tcat\t12a\t2", "the prompt has an invalid token id '12a'"},
      {"id\tcat\t1\t-1", "the output has an invalid token id '-1'"},
      {"id\tcat\t1\t+1", "invalid token id '+1'"},
      {"id\tcat\t4294967296\t2", "invalid token id '4294967296'"},
      {"id\tcat\t18446744073709551616\t2", "invalid token id '18446744073709551616'"},
      {"id\tcat\t1\t" + digits, "invalid token id '" + digits + "'"},
      {"id\tcat\t1,2\t3", "invalid token id '1,2'"},
      {"id\tcat\t0x10\t3", "invalid token id '0x10'"},
      {"id\tcat\t1.5\t3", "invalid token id '1.5'"},
      {"id\tcat\t1\t2\r\r", "invalid token id '2\\x0d'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("bad record: " + c.line);
    const std::string message =
        message_of<std::runtime_error>([&] { (void)parse_text("a\tb\t1\t2\n\n\r\n" + c.line + "\n", "data/x.tsv"); });
    EXPECT_EQ(message.rfind("data/x.tsv:4: ", 0), 0u) << message;
    EXPECT_NE(message.find(c.problem), std::string::npos) << message;
  }
}

TEST(ParseStreams, ReportsTheFirstBadLine) {
  const std::string message =
      message_of<std::runtime_error>([] { (void)parse_text("a\tb\t1\t2\nbad\nx\ty\t\t1\n", "s"); });
  EXPECT_EQ(message.rfind("s:2: ", 0), 0u) << message;
}

class TempFile {
 public:
  TempFile(const std::string& name, const std::string& text)
      : path_(std::filesystem::path(::testing::TempDir()) / ("ngramspec_replay_test_" + name)) {
    std::ofstream(path_, std::ios::binary) << text;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  [[nodiscard]] std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

TEST(ReadStreams, ReadsAFileAndNamesItInParseErrors) {
  const TempFile good("good.tsv", "r1\tc\t5 6\t7\r\n");
  const std::vector<TokenStream> streams = read_streams(good.path());
  ASSERT_EQ(streams.size(), 1u);
  EXPECT_EQ(streams[0].prompt, (Tokens{5, 6}));
  EXPECT_EQ(streams[0].output, (Tokens{7}));

  const TempFile bad("bad.tsv", "r1\tc\t5 6\t7\nr2\tc\t5 x\t7\n");
  const std::string message = message_of<std::runtime_error>([&] { (void)read_streams(bad.path()); });
  EXPECT_EQ(message.rfind(bad.path() + ":2: ", 0), 0u) << message;
  EXPECT_NE(message.find("'x'"), std::string::npos) << message;
}

TEST(ReadStreams, MissingFileNamesThePath) {
  const std::string path = ::testing::TempDir() + "/ngramspec_replay_test_no_such_dir/streams.tsv";
  const std::string message = message_of<std::runtime_error>([&] { (void)read_streams(path); });
  EXPECT_NE(message.find("cannot open"), std::string::npos) << message;
  EXPECT_NE(message.find("'" + path + "'"), std::string::npos) << message;
}

TEST(ReadStreams, ADirectoryIsRejectedNamingThePathAsADirectory) {
  const std::string path = ::testing::TempDir();
  const std::string message = message_of<std::runtime_error>([&] { (void)read_streams(path); });
  EXPECT_NE(message.find("'" + path + "'"), std::string::npos) << message;
  EXPECT_NE(message.find("is a directory"), std::string::npos) << message;
  EXPECT_EQ(message.find("read error"), std::string::npos) << message;
}

// A file without a record (empty, or blank lines only) is bad input, as a malformed line is (a
// runtime_error: the tools report it as an input error, not as a usage mistake), not an empty replay.
TEST(ReadStreams, AFileWithNoRecordsIsBadInputNamingTheFile) {
  const TempFile empty("empty.tsv", "");
  EXPECT_EQ(message_of<std::runtime_error>([&] { (void)read_streams(empty.path()); }), empty.path() + ": no records");
  EXPECT_THROW((void)read_streams(empty.path()), std::runtime_error);
  const TempFile blank("blank.tsv", "\n\r\n\n");
  EXPECT_EQ(message_of<std::runtime_error>([&] { (void)read_streams(blank.path()); }), blank.path() + ": no records");
}

// A bad token shows escaped in the message: a NUL byte must not cut it short, nor a control
// character reach the terminal.
TEST(ReadStreams, ABadTokenIsShownEscaped) {
  const std::string text = std::string("r1\tc\t5 2") + '\0' + "3\x1b[31m\\ 6\t7\n";
  const std::string message = message_of<std::runtime_error>([&] { (void)parse_text(text); });
  EXPECT_NE(message.find("invalid token id '2\\x003\\x1b[31m\\\\' (expected"), std::string::npos) << message;
  EXPECT_EQ(message.find('\0'), std::string::npos);
  EXPECT_EQ(replay::escape_for_message(std::string(50, 'a')), std::string(40, 'a') + "...");
  EXPECT_EQ(replay::escape_for_message("\xff\t"), "\\xff\\x09");
}

// Every selection of no record is refused, as ngramspec-corpus build refuses it: the one rule.
TEST(RecordRange, ASelectionOfNoRecordIsRefusedNamingItAndTheCount) {
  for (const char* text : {"10:20", "3:3", "50%:50%", "3:", "0:0"}) {
    const replay::RecordRange range = replay::parse_record_range("--records", text);
    EXPECT_EQ(message_of<std::invalid_argument>([&] { (void)range.resolve(3); }).rfind(
                  "record range '" + std::string(text) + "' selects none of the 3 records", 0),
              0u)
        << text;
  }
  EXPECT_EQ(replay::parse_record_range("--records", "2:").resolve(3), (std::pair<std::size_t, std::size_t>{2, 3}));
  EXPECT_EQ(replay::parse_record_range("--records", "50%:").resolve(3), (std::pair<std::size_t, std::size_t>{1, 3}));
}

// The recorded Spec-Bench streams, when the shared data folder is beside the project: the
// parser takes the real file whole, with the counts its README documents.
TEST(ReadStreams, ParsesTheRecordedSpecBenchStreams) {
  const std::filesystem::path path = std::filesystem::path(NGRAMSPEC_SHARED_DIR) / "data/specbench/streams.tsv";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found (the shared data folder is not beside the project)";
  const std::vector<TokenStream> streams = read_streams(path.string());
  std::size_t prompt_tokens = 0;
  std::size_t output_tokens = 0;
  std::set<std::string> categories;
  std::set<std::string> ids;
  for (const TokenStream& s : streams) {
    prompt_tokens += s.prompt.size();
    output_tokens += s.output.size();
    categories.insert(s.category);
    ids.insert(s.id);
    for (const Token t : whole_sequence(s)) ASSERT_LT(t, 32000u) << "record " << s.id;
  }
  EXPECT_EQ(streams.size(), 560u);
  EXPECT_EQ(ids.size(), 560u);
  EXPECT_EQ(prompt_tokens, 199893u);
  EXPECT_EQ(output_tokens, 91875u);
  EXPECT_EQ(categories,
            (std::set<std::string>{"mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"}));
}

// --- parse_synthetic / make_synthetic ----------------------------------------------------

TEST(ParseSynthetic, AcceptsEveryDocumentedForm) {
  SyntheticSpec spec = parse_synthetic("random");
  EXPECT_EQ(spec.kind, "random");

  spec = parse_synthetic("periodic:64");
  EXPECT_EQ(spec.kind, "periodic");
  EXPECT_EQ(spec.period, 64u);
  EXPECT_EQ(spec.noise, 0.0);

  spec = parse_synthetic("periodic:100:0.05");
  EXPECT_EQ(spec.period, 100u);
  EXPECT_DOUBLE_EQ(spec.noise, 0.05);

  EXPECT_EQ(parse_synthetic("periodic:2:0").period, 2u);
  EXPECT_EQ(parse_synthetic("periodic:2:1").noise, 1.0);
  EXPECT_EQ(parse_synthetic("periodic:1048576").period, 1048576u);

  spec = parse_synthetic("mixture:48");
  EXPECT_EQ(spec.kind, "mixture");
  EXPECT_EQ(spec.period, 48u);
}

TEST(ParseSynthetic, RejectsBadSpecsWithAClearMessage) {
  struct Case {
    std::string text;
    std::string problem;
  };
  const std::vector<Case> cases = {
      {"", "unknown kind ''"},
      {"sine:4", "unknown kind 'sine'"},
      {"Random", "unknown kind 'Random'"},
      {"random:5", "random takes no parameters"},
      {"periodic", "periodic takes a period"},
      {"periodic:0", "period '0' is not a whole number from 2 to 1048576"},
      {"periodic:1", "period '1' is not"},
      {"periodic:abc", "period 'abc' is not"},
      {"periodic:-4", "period '-4' is not"},
      {"periodic:", "period '' is not"},
      {"periodic:8x", "period '8x' is not"},
      {"periodic:1048577", "period '1048577' is not"},
      {"periodic:64:1.5", "noise '1.5' is not a probability from 0 to 1"},
      {"periodic:64:-0.1", "noise '-0.1' is not a probability"},
      {"periodic:64:x", "noise 'x' is not a probability"},
      {"periodic:64:0.5x", "noise '0.5x' is not a probability"},
      {"periodic:64:nan", "noise 'nan' is not a probability"},
      {"periodic:64:0x1p-1", "noise '0x1p-1' is not a probability"},
      {"periodic:64: 0.5", "noise ' 0.5' is not a probability"},
      {"periodic:64:0.1:3", "periodic takes a period and an optional noise probability"},
      {"mixture", "mixture takes a run length"},
      {"mixture:48:2", "mixture takes a run length"},
      {"mixture:1", "period '1' is not"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("spec: '" + c.text + "'");
    const std::string message = message_of<std::invalid_argument>([&] { (void)parse_synthetic(c.text); });
    EXPECT_NE(message.find("synthetic stream '" + c.text + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(c.problem), std::string::npos) << message;
    EXPECT_NE(message.find("expected periodic:P[:noise], random or mixture:P"), std::string::npos) << message;
  }
}

// An empty noise field is accepted today as noise 0 (std::stod throws, and the check of the
// characters used compares 0 with the empty field's length 0); enable once rejected.
TEST(ParseSynthetic, RejectsAnEmptyNoiseField) {
  const std::string message = message_of<std::invalid_argument>([] { (void)parse_synthetic("periodic:64:"); });
  EXPECT_NE(message.find("noise '' is not a probability"), std::string::npos) << message;
}

SyntheticSpec spec_of(const std::string& text, std::size_t length, std::size_t samples, std::uint64_t seed,
                      std::size_t vocab = 32000) {
  SyntheticSpec spec = parse_synthetic(text);
  spec.output_length = length;
  spec.samples = samples;
  spec.seed = seed;
  spec.vocab = vocab;
  return spec;
}

void expect_same_streams(const std::vector<TokenStream>& a, const std::vector<TokenStream>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id);
    EXPECT_EQ(a[i].category, b[i].category);
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    EXPECT_EQ(a[i].output, b[i].output);
  }
}

TEST(MakeSynthetic, IsDeterministicForASeedAndDiffersAcrossSeedsAndSamples) {
  for (const std::string text : {"random", "periodic:16", "periodic:16:0.2", "mixture:8"}) {
    SCOPED_TRACE(text);
    const std::vector<TokenStream> a = make_synthetic(spec_of(text, 300, 3, 7));
    expect_same_streams(a, make_synthetic(spec_of(text, 300, 3, 7)));
    const std::vector<TokenStream> other_seed = make_synthetic(spec_of(text, 300, 3, 8));
    ASSERT_EQ(a.size(), 3u);
    ASSERT_EQ(other_seed.size(), 3u);
    EXPECT_NE(whole_sequence(a[0]), whole_sequence(other_seed[0]));
    EXPECT_NE(whole_sequence(a[0]), whole_sequence(a[1]));
    EXPECT_NE(whole_sequence(a[1]), whole_sequence(a[2]));
    std::set<std::string> ids;
    for (const TokenStream& s : a) ids.insert(s.id);
    EXPECT_EQ(ids.size(), a.size()) << "sample ids must be distinct";
  }
}

TEST(MakeSynthetic, SizesAndVocabularyAreAsRequested) {
  for (const std::size_t vocab : {std::size_t{8}, std::size_t{32000}, std::size_t{152064}}) {
    for (const std::string text : {"random", "periodic:5", "periodic:37:0.3", "mixture:5", "mixture:64"}) {
      for (const std::size_t length : {std::size_t{1}, std::size_t{63}, std::size_t{1000}}) {
        SCOPED_TRACE(text + " vocab " + std::to_string(vocab) + " length " + std::to_string(length));
        const std::vector<TokenStream> streams = make_synthetic(spec_of(text, length, 2, 3, vocab));
        ASSERT_EQ(streams.size(), 2u);
        for (const TokenStream& s : streams) {
          EXPECT_EQ(s.output.size(), length);
          EXPECT_FALSE(s.prompt.empty());
          EXPECT_FALSE(s.category.empty());
          for (const Token t : whole_sequence(s)) ASSERT_LT(t, vocab);
        }
      }
    }
  }
}

TEST(MakeSynthetic, RandomStreamsSpreadOverTheVocabulary) {
  const std::vector<TokenStream> streams = make_synthetic(spec_of("random", 4000, 2, 11, 32000));
  for (const TokenStream& s : streams) {
    EXPECT_EQ(s.prompt.size(), 64u);
    const Tokens all = whole_sequence(s);
    const std::set<Token> distinct(all.begin(), all.end());
    // 4064 uniform draws from ~32000 ids: about 3800 distinct; a stuck generator gives far fewer.
    EXPECT_GT(distinct.size(), 3500u);
    EXPECT_GT(*distinct.rbegin(), 28000u);
    EXPECT_LT(*distinct.begin(), 4000u);
  }
}

TEST(MakeSynthetic, NoiselessPeriodicStreamsArePeriodicWithATwoPeriodPrompt) {
  for (const std::size_t period : {std::size_t{2}, std::size_t{7}, std::size_t{128}}) {
    SCOPED_TRACE("period " + std::to_string(period));
    for (const TokenStream& s : make_synthetic(spec_of("periodic:" + std::to_string(period), 999, 3, 5))) {
      ASSERT_EQ(s.prompt.size(), 2 * period);
      const Tokens all = whole_sequence(s);
      for (std::size_t i = period; i < all.size(); ++i) ASSERT_EQ(all[i], all[i - period]) << "position " << i;
      // The unit is random, not a constant run that would make every period trivially true.
      const std::set<Token> unit(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(period));
      EXPECT_GE(unit.size(), period / 2 + 1);
    }
  }
}

TEST(MakeSynthetic, NoiseReplacesAboutThatShareOfOutputTokensAndSparesThePrompt) {
  const std::size_t period = 50;
  for (const double noise : {0.05, 0.3}) {
    SCOPED_TRACE("noise " + std::to_string(noise));
    std::size_t changed = 0;
    std::size_t total = 0;
    for (const TokenStream& s : make_synthetic(spec_of("periodic:50:" + std::to_string(noise), 4000, 4, 9))) {
      ASSERT_EQ(s.prompt.size(), 2 * period);
      for (std::size_t i = period; i < s.prompt.size(); ++i) ASSERT_EQ(s.prompt[i], s.prompt[i - period]);
      for (std::size_t i = 0; i < s.output.size(); ++i) changed += s.output[i] != s.prompt[i % period];
      total += s.output.size();
    }
    const double share = static_cast<double>(changed) / static_cast<double>(total);
    EXPECT_NEAR(share, noise, 0.02);  // 16000 draws: the standard error is below 0.004
  }
}

TEST(MakeSynthetic, MixturesAlternateFreshRunsWithCopiesOfEarlierText) {
  const std::size_t run = 20;
  for (const TokenStream& s : make_synthetic(spec_of("mixture:20", 2000, 3, 4))) {
    ASSERT_EQ(s.prompt.size(), run);
    const Tokens all = whole_sequence(s);
    std::size_t copies = 0;
    for (std::size_t start = run; start + run <= all.size(); start += run) {
      const auto begin = all.begin() + static_cast<std::ptrdiff_t>(start);
      const bool copied = std::search(all.begin(), begin, begin, begin + static_cast<std::ptrdiff_t>(run)) != begin;
      // Runs 1, 3, 5, ... are copies; fresh random runs of 20 tokens never occur earlier.
      EXPECT_EQ(copied, (start / run) % 2 == 1) << "run at " << start;
      copies += copied;
    }
    EXPECT_GE(copies, 45u);
  }
}

// --- ReplayModel -------------------------------------------------------------------------

TokenStream small_stream() { return TokenStream{"s", "c", {10, 11, 12}, {13, 14, 15, 16}}; }

Tokens forward(ReplayModel& model, std::size_t pos, const Tokens& tokens) {
  Tokens next(tokens.size(), 0);
  model.forward(pos, tokens, next);
  return next;
}

TEST(ReplayModel, AnswersTheRecordingWhileTheFedTokensMatchIt) {
  const TokenStream stream = small_stream();
  ReplayModel model(stream);
  EXPECT_EQ(forward(model, 0, {10, 11, 12}), (Tokens{11, 12, 13}));
  EXPECT_EQ(forward(model, 3, {13}), (Tokens{14}));
  EXPECT_EQ(forward(model, 4, {14, 15}), (Tokens{15, 16}));
  // After the last recorded token the real answer is unknown.
  EXPECT_EQ(forward(model, 6, {16}), (Tokens{kUnknown}));
  EXPECT_EQ(model.forwards(), 4u);
}

TEST(ReplayModel, AnswersUnknownAfterADepartureUntilRolledBack) {
  const TokenStream stream = small_stream();
  ReplayModel model(stream);
  (void)forward(model, 0, {10, 11, 12});
  // A rejected draft at position 4 poisons every later answer, even for matching tokens.
  EXPECT_EQ(forward(model, 3, {13, 99, 15, 16}), (Tokens{14, kUnknown, kUnknown, kUnknown}));
  EXPECT_EQ(forward(model, 7, {1}), (Tokens{kUnknown}));
  model.rollback(5);  // still past the departure
  EXPECT_EQ(forward(model, 5, {15}), (Tokens{kUnknown}));
  model.rollback(4);  // back to the recorded prefix 10..13
  EXPECT_EQ(forward(model, 4, {14, 15}), (Tokens{15, 16}));
  model.rollback(0);
  EXPECT_EQ(forward(model, 0, {10}), (Tokens{11}));
  // A departure inside the prompt too.
  EXPECT_EQ(forward(model, 1, {12, 12}), (Tokens{kUnknown, kUnknown}));
}

TEST(ReplayModel, ContractViolationsThrowLogicErrorsAndChangeNothing) {
  const TokenStream stream = small_stream();
  ReplayModel model(stream, 2);
  EXPECT_EQ(model.max_batch(), 2u);
  Tokens next(3, 0);
  const Tokens tokens = {10, 11, 12};
  const std::span<const Token> fed(tokens);
  const std::span<Token> out(next);

  std::string message = message_of<std::logic_error>([&] { model.forward(1, fed.first(1), out.first(1)); });
  EXPECT_NE(message.find("forward at position 1 but the model holds 0 tokens"), std::string::npos) << message;
  message = message_of<std::logic_error>([&] { model.forward(0, fed.first(0), out.first(0)); });
  EXPECT_NE(message.find("forward of 0 tokens"), std::string::npos) << message;
  message = message_of<std::logic_error>([&] { model.forward(0, fed, out); });
  EXPECT_NE(message.find("forward of 3 tokens"), std::string::npos) << message;
  EXPECT_NE(message.find("max_batch 2"), std::string::npos) << message;
  message = message_of<std::logic_error>([&] { model.forward(0, fed.first(2), out.first(1)); });
  EXPECT_NE(message.find("into 1 outputs"), std::string::npos) << message;
  message = message_of<std::logic_error>([&] { model.rollback(1); });
  EXPECT_NE(message.find("rollback to 1 beyond the 0 tokens held"), std::string::npos) << message;
  EXPECT_EQ(model.forwards(), 0u);

  EXPECT_EQ(forward(model, 0, {10, 11}), (Tokens{11, 12}));
  message = message_of<std::logic_error>([&] { model.rollback(3); });
  EXPECT_NE(message.find("rollback to 3 beyond the 2 tokens held"), std::string::npos) << message;
  EXPECT_EQ(forward(model, 2, {12}), (Tokens{13}));
}

// A reference replay model: holds every fed token, answers the recorded next token when the
// whole held prefix equals the recording.
class ReferenceReplay {
 public:
  explicit ReferenceReplay(Tokens sequence) : sequence_(std::move(sequence)) {}
  Tokens forward(const Tokens& tokens) {
    Tokens next;
    for (const Token t : tokens) {
      held_.push_back(t);
      const std::size_t p = held_.size() - 1;
      const bool on_record = p + 1 < sequence_.size() && std::equal(held_.begin(), held_.end(), sequence_.begin());
      next.push_back(on_record ? sequence_[p + 1] : kUnknown);
    }
    return next;
  }
  void rollback(std::size_t pos) { held_.resize(pos); }
  [[nodiscard]] std::size_t size() const { return held_.size(); }

 private:
  Tokens sequence_;
  Tokens held_;
};

TEST(ReplayModel, MatchesTheReferenceUnderRandomForwardsAndRollbacks) {
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const auto below = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
    TokenStream stream{"r", "c", {}, {}};
    for (std::size_t i = 0, n = 1 + below(8); i < n; ++i) stream.prompt.push_back(static_cast<Token>(below(4)));
    for (std::size_t i = 0, n = 1 + below(24); i < n; ++i) stream.output.push_back(static_cast<Token>(below(4)));
    const Tokens sequence = whole_sequence(stream);
    const std::size_t max_batch = 1 + below(6);
    ReplayModel model(stream, max_batch);
    ReferenceReplay reference(sequence);
    for (int step = 0; step < 60; ++step) {
      if (below(4) == 0) {
        const std::size_t pos = below(reference.size() + 1);
        model.rollback(pos);
        reference.rollback(pos);
        continue;
      }
      Tokens tokens;
      for (std::size_t i = 0, n = 1 + below(max_batch); i < n; ++i) {
        const std::size_t p = reference.size() + i;
        // Mostly the recording, so the replay stays on it for a while; tiny alphabet, so a
        // wrong token is often right by chance.
        tokens.push_back(p < sequence.size() && below(5) != 0 ? sequence[p] : static_cast<Token>(below(4)));
      }
      const std::size_t pos = reference.size();
      ASSERT_EQ(forward(model, pos, tokens), reference.forward(tokens)) << "step " << step << " at " << pos;
    }
  }
}

// --- replay_record and the drafter registry ----------------------------------------------

// Drafts exactly what the recording holds next: every draft is accepted.
class OracleDrafter {
 public:
  explicit OracleDrafter(Tokens sequence) : sequence_(std::move(sequence)) {}
  void update(Token) { ++seen_; }
  void update(std::span<const Token> tokens) { seen_ += tokens.size(); }
  [[nodiscard]] std::size_t predict(std::span<Token> out) const {
    const std::size_t n = std::min(out.size(), sequence_.size() - std::min(seen_, sequence_.size()));
    std::copy_n(sequence_.begin() + static_cast<std::ptrdiff_t>(seen_), n, out.begin());
    return n;
  }
  void reset() { seen_ = 0; }

 private:
  Tokens sequence_;
  std::size_t seen_ = 0;
};

// Always drafts `token` into every slot.
class ConstantDrafter {
 public:
  explicit ConstantDrafter(Token token) : token_(token) {}
  void update(Token) {}
  void update(std::span<const Token>) {}
  [[nodiscard]] std::size_t predict(std::span<Token> out) const {
    std::fill(out.begin(), out.end(), token_);
    return out.size();
  }
  void reset() {}

 private:
  Token token_;
};

static_assert(Drafter<OracleDrafter>);
static_assert(Drafter<ConstantDrafter>);

TEST(ReplayRecord, AnOracleDrafterFillsEveryPass) {
  for (const std::size_t length : {std::size_t{1}, std::size_t{2}, std::size_t{17}, std::size_t{300}}) {
    for (const std::size_t k : {std::size_t{1}, std::size_t{4}, std::size_t{8}}) {
      SCOPED_TRACE("length " + std::to_string(length) + " k " + std::to_string(k));
      const TokenStream stream = make_synthetic(spec_of("random", length, 1, 2)).front();
      const RecordResult r = replay::replay_record(
          stream, k, [](const TokenStream& s, std::size_t) { return OracleDrafter(whole_sequence(s)); }, 1);
      // The prefill yields the first token; each decode pass then emits k drafts and its own.
      const std::size_t passes = 1 + (length - 1 + k) / (k + 1);
      EXPECT_EQ(r.generated, length);
      EXPECT_EQ(r.passes, passes);
      EXPECT_EQ(r.accepted, length - passes);
      EXPECT_EQ(r.drafted, r.accepted);
      EXPECT_GE(r.drafter_ns, 0.0);
    }
  }
}

TEST(ReplayRecord, WrongDraftsAreRejectedAndTheUnknownAnswerNeverLeaks) {
  const TokenStream stream = make_synthetic(spec_of("periodic:6", 200, 1, 3)).front();
  // kUnknown is what the replay model answers after a rejected draft: drafting it must not
  // make a later draft look accepted.
  for (const Token token : {Token{0xF0000000u}, kUnknown}) {
    for (const std::size_t k : {std::size_t{1}, std::size_t{5}}) {
      SCOPED_TRACE("token " + std::to_string(token) + " k " + std::to_string(k));
      const RecordResult r = replay::replay_record(
          stream, k, [token](const TokenStream&, std::size_t) { return ConstantDrafter(token); }, 1);
      EXPECT_EQ(r.generated, 200u);
      EXPECT_EQ(r.passes, 200u);
      EXPECT_EQ(r.accepted, 0u);
      std::size_t drafted = 0;  // the last pass may draft only what is still to be emitted, minus one
      for (std::size_t left = 199; left >= 1; --left) drafted += std::min(left - 1, k);
      EXPECT_EQ(r.drafted, drafted);
    }
  }
}

TEST(RecordingDrafter, PassesCallsThroughAndRecordsThem) {
  replay::DrafterTrace trace;
  replay::RecordingDrafter<OracleDrafter> drafter(OracleDrafter({1, 2, 3, 4, 5, 6}), &trace);
  static_assert(Drafter<replay::RecordingDrafter<OracleDrafter>>);
  drafter.update(Token{1});
  const Tokens more = {2, 3};
  drafter.update(std::span<const Token>(more));
  Tokens out(5, 0);
  EXPECT_EQ(drafter.predict(out), 3u);
  EXPECT_EQ(out, (Tokens{4, 5, 6, 0, 0}));
  EXPECT_EQ(trace, (replay::DrafterTrace{1, 2, replay::kPredict | 5u}));
  drafter.reset();
  EXPECT_TRUE(trace.empty());
  EXPECT_EQ(drafter.predict(std::span<Token>(out).first(2)), 2u);
  EXPECT_EQ(out[0], 1u);
}

const std::vector<std::string> kDrafterNames = {"ngram",         "ngram:window=full", "prompt-lookup",
                                                "pld-specbench", "prompt-lookup-hf",  "ngram-cache"};

// Every registered drafter replays every kind of stream to exactly the recording (the runner
// throws otherwise), and its counters add up.
TEST(DrafterRegistry, EveryDrafterReplaysExactlyWithConsistentCounters) {
  std::vector<TokenStream> streams;
  for (const std::string text : {"periodic:24", "periodic:40:0.1", "random", "mixture:16"}) {
    for (TokenStream& s : make_synthetic(spec_of(text, 400, 2, 21))) streams.push_back(std::move(s));
  }
  for (const std::string& name : kDrafterNames) {
    const replay::DrafterEntry drafter = make_drafter(name, DrafterDefaults{});
    for (const TokenStream& stream : streams) {
      for (const std::size_t k : {std::size_t{1}, std::size_t{4}, std::size_t{8}}) {
        SCOPED_TRACE(name + " on " + stream.id + " (" + stream.category + ") k " + std::to_string(k));
        RecordResult r;
        ASSERT_NO_THROW(r = drafter.run(stream, k, 1, ngramspec::replay::HeapMeter{}));
        EXPECT_EQ(r.generated, stream.output.size());
        EXPECT_GE(r.passes, 1u);
        EXPECT_LE(r.passes, r.generated);
        EXPECT_LE(r.accepted, r.drafted);
        EXPECT_LE(r.drafted, k * (r.passes - 1));
        // Each pass emits its accepted drafts and the model's token, except that the last
        // may stop at the length limit on an accepted draft.
        EXPECT_LE(r.generated, r.passes + r.accepted);
        EXPECT_GE(r.generated + 1, r.passes + r.accepted);
      }
    }
  }
}

double mean_accepted_length(const replay::DrafterEntry& drafter, const std::vector<TokenStream>& streams,
                            std::size_t k) {
  std::size_t generated = 0;
  std::size_t passes = 0;
  for (const TokenStream& s : streams) {
    const RecordResult r = drafter.run(s, k, 1, ngramspec::replay::HeapMeter{});
    generated += r.generated;
    passes += r.passes;
  }
  return static_cast<double>(generated) / static_cast<double>(passes);
}

TEST(DrafterRegistry, AcceptedLengthIsOneOnRandomStreamsAndNearKPlusOneOnPeriodicOnes) {
  const std::vector<TokenStream> random = make_synthetic(spec_of("random", 1000, 2, 5));
  const std::vector<TokenStream> periodic = make_synthetic(spec_of("periodic:32", 1000, 2, 5));
  for (const std::string& name : kDrafterNames) {
    const replay::DrafterEntry drafter = make_drafter(name, DrafterDefaults{});
    for (const std::size_t k : {std::size_t{1}, std::size_t{4}, std::size_t{8}}) {
      SCOPED_TRACE(name + " k " + std::to_string(k));
      EXPECT_LT(mean_accepted_length(drafter, random, k), 1.005);
      // The two-period prompt already shows every context, so nearly every pass is full.
      EXPECT_GT(mean_accepted_length(drafter, periodic, k), 0.95 * static_cast<double>(k + 1));
    }
  }
}

TEST(DrafterRegistry, NamesDescribeTheConfiguration) {
  DrafterDefaults defaults;
  EXPECT_EQ(make_drafter("ngram", defaults).name, "ngram(w=512,2-4)");
  EXPECT_EQ(make_drafter("ngram:window=full", defaults).name, "ngram(w=full,2-4)");
  EXPECT_EQ(make_drafter("ngram:window=64,min=3,max=6", defaults).name, "ngram(w=64,3-6)");
  defaults.window = 128;
  defaults.max_order = 5;
  EXPECT_EQ(make_drafter("ngram", defaults).name, "ngram(w=128,2-5)");
  EXPECT_EQ(make_drafter("prompt-lookup", defaults).name, "prompt-lookup(1-4)");
  EXPECT_EQ(make_drafter("prompt-lookup:min=2,max=3,occurrence=latest", defaults).name, "prompt-lookup(2-3,latest)");
  EXPECT_EQ(make_drafter("prompt-lookup:occurrence=earliest", defaults).name, "prompt-lookup(1-4)");
  EXPECT_EQ(make_drafter("prompt-lookup-hf:max=3", defaults).name, "prompt-lookup-hf(1-3)");
  EXPECT_EQ(make_drafter("pld-specbench", defaults).name, "pld-specbench");
  EXPECT_EQ(make_drafter("ngram-cache", defaults).name, "ngram-cache(llama.cpp)");
}

TEST(DrafterRegistry, RejectsBadNamesParametersAndValuesNamingThem) {
  struct Case {
    std::string spec;
    std::vector<std::string> parts;  // what the message must name
  };
  const std::vector<Case> cases = {
      {"ngramz", {"unknown drafter 'ngramz'", "prompt-lookup", "ngram-cache"}},
      {"", {"unknown drafter ''"}},
      {"NGRAM", {"unknown drafter 'NGRAM'"}},
      {"ngram:windw=5", {"drafter 'ngram:windw=5'", "unknown parameter 'windw'"}},
      {"ngram:window=64,maxx=3", {"unknown parameter 'maxx'"}},
      {"pld-specbench:k=3", {"drafter 'pld-specbench:k=3'", "unknown parameter 'k'"}},
      {"ngram-cache:min=1", {"unknown parameter 'min'"}},
      {"prompt-lookup-hf:min=1", {"unknown parameter 'min'"}},
      {"prompt-lookup:occurrence=sideways", {"occurrence = 'sideways'", "earliest, latest"}},
      {"ngram:window=64,window=128", {"'window' is given twice"}},
      {"prompt-lookup-hf:eos=4294967296", {"eos = 4294967296"}},
      {"ngram:window=abc", {"drafter 'ngram:window=abc'", "window = 'abc' is not a whole number"}},
      {"ngram:window=", {"window = '' is not a whole number"}},
      {"ngram:window=-1", {"window = '-1' is not a whole number"}},
      {"ngram:window=5x", {"window = '5x' is not a whole number"}},
      {"ngram:min=two", {"min = 'two' is not a whole number"}},
      {"match:gate=0x1p-2", {"gate = '0x1p-2' is not a finite number"}},
      {"match:gate=+0.5", {"gate = '+0.5' is not a finite number"}},
      {"ngram:window", {"parameter 'window' is not key=value"}},
      {"ngram:=5", {"parameter '=5' is not key=value"}},
      {"ngram:window=64,,max=4", {"parameter '' is not key=value"}},
      {"ngram:window=1", {"window = 1 is invalid"}},
      {"ngram:window=0", {"window = 0 is invalid"}},
      {"ngram:window=16777217", {"window = 16777217 is invalid"}},
      {"ngram:min=1", {"min_order = 1 is invalid"}},
      {"ngram:min=5", {"max_order = 4 is invalid"}},
      {"ngram:max=9", {"max_order = 9 is invalid"}},
      {"ngram:window=full,max=9", {"max_order = 9 is invalid"}},
      {"prompt-lookup:min=0", {"min_n is 0"}},
      {"prompt-lookup:min=3,max=2", {"max_n = 2 is below min_n = 3"}},
      {"prompt-lookup-hf:max=0", {"max_n = 0 is below min_n = 1"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("drafter spec: '" + c.spec + "'");
    const std::string message =
        message_of<std::invalid_argument>([&] { (void)make_drafter(c.spec, DrafterDefaults{}); });
    for (const std::string& part : c.parts) EXPECT_NE(message.find(part), std::string::npos) << message;
  }
}

TEST(DrafterRegistry, BadDefaultsAreRejectedWhenTheDrafterIsMade) {
  DrafterDefaults defaults;
  defaults.window = 2;
  const std::string message = message_of<std::invalid_argument>([&] { (void)make_drafter("ngram", defaults); });
  EXPECT_NE(message.find("window = 2 is invalid"), std::string::npos) << message;
  // An explicit window overrides the bad default.
  EXPECT_NO_THROW((void)make_drafter("ngram:window=8", defaults));
}

// --- parse_replay_options ----------------------------------------------------------------

replay::ReplayOptions parse_args(std::vector<std::string_view> args) { return replay::parse_replay_options(args); }

TEST(ReplayOptions, TheDefaultDrafterIsTheLibrarysDefaultMatchDrafter) {
  EXPECT_EQ(parse_args({"--synthetic", "random"}).drafter_names, std::vector<std::string>{"match"});
  EXPECT_EQ(parse_args({"--synthetic", "random", "--drafter", "ngram"}).drafter_names,
            std::vector<std::string>{"ngram"});
  EXPECT_EQ(make_drafter("match", DrafterDefaults{}).name.rfind("match(", 0), 0u);
}

// A corpus file named is a file used: the default drafter reads it; which drafters read it is
// known, so the program can refuse a --drafter list that would leave it unused.
TEST(ReplayOptions, WithACorpusFileTheDefaultDrafterReadsIt) {
  EXPECT_EQ(parse_args({"--synthetic", "random", "--corpus-file", "c.ngc"}).drafter_names,
            std::vector<std::string>{"match:file=1"});
  EXPECT_EQ(parse_args({"--synthetic", "random", "--corpus-file", "c.ngc", "--drafter", "match"}).drafter_names,
            std::vector<std::string>{"match"});
  EXPECT_FALSE(make_drafter("match", DrafterDefaults{}).reads_corpus_file);
  EXPECT_FALSE(make_drafter("match:corpus=1", DrafterDefaults{}).reads_corpus_file);
  EXPECT_FALSE(make_drafter("ngram", DrafterDefaults{}).reads_corpus_file);
}

// Synthetic streams are bounded up front: --length, --samples and their product over the specs.
TEST(ReplayOptions, SyntheticSizesBeyondTheMostAreRefusedNamingValueAndLimit) {
  static_assert(replay::kMaxSyntheticTokens == std::size_t{1} << 24);
  EXPECT_EQ(message_of<std::invalid_argument>([] {
              (void)parse_args({"--synthetic", "random", "--length", "99999999999"});
            }),
            "--length: '99999999999' is out of range: it must be from 1 to 16777216");
  EXPECT_EQ(message_of<std::invalid_argument>([] {
              (void)parse_args({"--synthetic", "random", "--samples", "16777217"});
            }),
            "--samples: '16777217' is out of range: it must be from 1 to 16777216");
  EXPECT_EQ(message_of<std::invalid_argument>([] {
              (void)parse_args({"--synthetic", "random", "--synthetic", "periodic:4", "--length", "16777216",
                                "--samples", "16777216"});
            }),
            "--synthetic: 2 spec(s) x --samples 16777216 x --length 16777216 tokens is more than the most "
            "synthetic tokens, 16777216");
  const replay::ReplayOptions most = parse_args({"--synthetic", "random", "--length", "4194304", "--samples", "4"});
  EXPECT_EQ(most.length * most.samples, replay::kMaxSyntheticTokens);
}

// A live corpus larger than SharedCorpus holds is refused, not silently capped (and allocated).
TEST(DrafterRegistry, ACorpusBeyondTheLargestIsRefusedNamingValueAndLimit) {
  const std::string most = std::to_string(replay::max_corpus_mib());
  EXPECT_EQ(replay::max_corpus_mib(), (SharedCorpus::bytes_for(SharedCorpus::kMaxTokens) + (1u << 20) - 1) >> 20);
  for (const std::string& value : {std::string("999999999999"), std::to_string(replay::max_corpus_mib() + 1),
                                  std::string("18446744073709551615")}) {
    const std::string spec = "match:corpus=" + value;
    EXPECT_EQ(message_of<std::invalid_argument>([&] { (void)make_drafter(spec, DrafterDefaults{}); }),
              "drafter '" + spec + "': corpus = " + value + " MiB is more than the largest corpus, " + most +
                  " MiB (268435456 tokens)");
  }
}

// Every --k outside 1 .. kMaxDraftsPerPass, however far outside, names that range.
TEST(ReplayOptions, KOutOfRangeNamesTheAcceptedRange) {
  static_assert(kMaxDraftsPerPass == 1024);
  for (const std::string_view k : {"0", "1025", "2000", "4,2000", "18446744073709551615", "99999999999999999999"}) {
    SCOPED_TRACE(std::string("--k ") + std::string(k));
    const std::string message =
        message_of<std::invalid_argument>([&] { (void)parse_args({"--synthetic", "random", "--k", k}); });
    EXPECT_EQ(message.rfind("--k: '", 0), 0u) << message;
    EXPECT_NE(message.find("from 1 to 1024"), std::string::npos) << message;
    EXPECT_EQ(message.find("is more than"), std::string::npos) << message;
  }
  const std::string message =
      message_of<std::invalid_argument>([] { (void)parse_args({"--synthetic", "random", "--k", "x"}); });
  EXPECT_EQ(message, "--k: 'x' is not a whole number from 1 to 1024");
  EXPECT_EQ(parse_args({"--synthetic", "random", "--k", "1,1024"}).ks, (std::vector<std::size_t>{1, 1024}));
}

// --max-drafts is the one name of the most drafts per pass; --k, its old name, is read alike,
// and the two are one option.
TEST(ReplayOptions, MaxDraftsIsTheOneNameOfK) {
  EXPECT_EQ(parse_args({"--synthetic", "random", "--max-drafts", "1,16"}).ks, (std::vector<std::size_t>{1, 16}));
  EXPECT_EQ(parse_args({"--synthetic", "random", "--max-drafts", "8"}).ks,
            parse_args({"--synthetic", "random", "--k", "8"}).ks);
  for (const auto& [first, second] : {std::pair{"--k", "--max-drafts"}, std::pair{"--max-drafts", "--k"}}) {
    EXPECT_EQ(message_of<std::invalid_argument>([&] {
                (void)parse_args({"--synthetic", "random", first, "4", second, "8"});
              }),
              "--max-drafts is given twice (--k is its other name)");
  }
  EXPECT_EQ(message_of<std::invalid_argument>([] { (void)parse_args({"--synthetic", "random", "--max-drafts", "0"}); }),
            "--max-drafts: '0' is out of range: it must be from 1 to 1024");
}

// A family of drafters registered from elsewhere (as integrations/llama.cpp registers llama.cpp's):
// make_drafter builds its specs, --help lists it, and a second registration of its name is refused.
TEST(DrafterRegistry, ARegisteredFamilyBuildsItsSpecsAndIsListed) {
  std::vector<std::string> asked;
  register_drafter_family({"test-family",
                           [&asked](const std::string& spec) {
                             asked.push_back(spec);
                             return make_drafter("ngram", DrafterDefaults{});
                           },
                           "  test-family[:x=N]                    a family registered by a test\n"});
  EXPECT_EQ(make_drafter("test-family", DrafterDefaults{}).name, make_drafter("ngram", DrafterDefaults{}).name);
  static_cast<void>(make_drafter("test-family:x=1", DrafterDefaults{}));
  EXPECT_EQ(asked, (std::vector<std::string>{"test-family", "test-family:x=1"}));
  EXPECT_NE(drafter_names_help().find("test-family[:x=N]"), std::string::npos);
  // Only the family's name and NAME:... are its: a longer name is another drafter.
  EXPECT_EQ(message_of<std::invalid_argument>([] { (void)make_drafter("test-family2", DrafterDefaults{}); })
                .rfind("unknown drafter 'test-family2'", 0),
            0U);
  EXPECT_EQ(message_of<std::invalid_argument>([] {
              register_drafter_family({"test-family", [](const std::string&) { return DrafterEntry{}; }, ""});
            }),
            "register_drafter_family: drafter family 'test-family' is registered twice");
  EXPECT_EQ(message_of<std::invalid_argument>([] { register_drafter_family({"", {}, ""}); }),
            "register_drafter_family: a family needs a name and a make function");
  // Without the llama.cpp family (this build links none in), its specs say how to get it.
  EXPECT_NE(message_of<std::invalid_argument>([] { (void)make_drafter("llama.cpp:ngram-mod", DrafterDefaults{}); })
                .find("this ngramspec-replay was built without llama.cpp"),
            std::string::npos);
}

// --- the serving simulation: serve_records, DrafterEntry::serve and measure_rows ----------

using replay::Policy;
using replay::ServeRequest;
using replay::ServeResult;

// Short streams of every kind, several records per category.
std::vector<TokenStream> serving_streams(std::size_t length = 240, std::size_t samples = 3) {
  std::vector<TokenStream> streams;
  for (const std::string text : {"periodic:24", "periodic:40:0.1", "random", "mixture:16"}) {
    for (TokenStream& s : make_synthetic(spec_of(text, length, samples, 31))) streams.push_back(std::move(s));
  }
  return streams;
}

const std::vector<std::string> kServedDrafterNames = {
    "match", "match:gate=0", "match:corpus=1", "ngram",           "ngram:window=full",
    "prompt-lookup", "pld-specbench", "prompt-lookup-hf", "ngram-cache"};

ServeResult serve(const replay::DrafterEntry& drafter, const std::vector<TokenStream>& streams, std::size_t k,
                  std::size_t batch, Policy policy, const std::vector<VerifyCost>& prices = {replay::flat_cost()},
                  const VerifyCost* cost = nullptr) {
  return drafter.serve(streams, ServeRequest{.k = k, .batch = batch, .policy = policy, .cost = cost, .prices = prices});
}

// A batch of one is the single-sequence replay through SpeculativeDecoder, record by record:
// gate is the drafter as configured, fixed the drafter with its gate off.
TEST(ServeRecords, ABatchOfOneReproducesTheSingleSequenceReplayExactly) {
  const std::vector<TokenStream> streams = serving_streams();
  for (const std::string& name : kServedDrafterNames) {
    const replay::DrafterEntry drafter = make_drafter(name, DrafterDefaults{});
    for (const std::size_t k : {std::size_t{1}, std::size_t{4}, std::size_t{16}}) {
      for (const Policy policy : {Policy::gate, Policy::fixed}) {
        SCOPED_TRACE(name + " k " + std::to_string(k) + " " + to_string(policy));
        const ServeResult served = serve(drafter, streams, k, 1, policy);
        const replay::DrafterEntry::Run& run = policy == Policy::gate ? drafter.run : drafter.run_ungated;
        ASSERT_EQ(served.records.size(), streams.size());
        std::size_t decode_passes = 0;
        for (std::size_t i = 0; i < streams.size(); ++i) {
          const RecordResult single = run(streams[i], k, 1, replay::HeapMeter{});
          EXPECT_EQ(served.records[i].generated, single.generated) << streams[i].id;
          EXPECT_EQ(served.records[i].passes, single.passes) << streams[i].id;
          EXPECT_EQ(served.records[i].drafted, single.drafted) << streams[i].id;
          EXPECT_EQ(served.records[i].accepted, single.accepted) << streams[i].id;
          decode_passes += single.passes - 1;
        }
        // Alone in the batch, each record's decode passes are the batch's, each costing 1 when flat.
        EXPECT_EQ(served.decode_passes, decode_passes);
        ASSERT_EQ(served.simulated_cost.size(), 1u);
        EXPECT_DOUBLE_EQ(served.simulated_cost[0], static_cast<double>(decode_passes));
      }
    }
  }
  // The gate makes a difference where it is on, and none where it is off.
  const replay::DrafterEntry match = make_drafter("match", DrafterDefaults{});
  EXPECT_TRUE(match.has_gate);
  EXPECT_FALSE(make_drafter("match:gate=0", DrafterDefaults{}).has_gate);
  EXPECT_FALSE(make_drafter("ngram", DrafterDefaults{}).has_gate);
  std::size_t gated = 0;
  std::size_t ungated = 0;
  for (const TokenStream& s : streams) {
    gated += match.run(s, 8, 1, replay::HeapMeter{}).drafted;
    ungated += match.run_ungated(s, 8, 1, replay::HeapMeter{}).drafted;
  }
  EXPECT_LT(gated, ungated);
}

// Served N at a time, every record still decodes to its recording (serve_records checks it
// token for token and throws otherwise), and a drafter that reads nothing but its own record
// drafts the same whatever runs beside it.
TEST(ServeRecords, LargerBatchesDecodeEveryRecordExactly) {
  const std::vector<TokenStream> streams = serving_streams();
  for (const std::string& name : kServedDrafterNames) {
    const replay::DrafterEntry drafter = make_drafter(name, DrafterDefaults{});
    const ServeResult one = serve(drafter, streams, 4, 1, Policy::gate);
    for (const std::size_t batch : {std::size_t{2}, std::size_t{5}, std::size_t{64}}) {
      for (const Policy policy : {Policy::plain, Policy::fixed, Policy::gate, Policy::cost}) {
        SCOPED_TRACE(name + " batch " + std::to_string(batch) + " " + to_string(policy));
        ServeResult served;
        ASSERT_NO_THROW(served = serve(drafter, streams, 4, batch, policy));
        std::size_t passes = 0;
        for (std::size_t i = 0; i < streams.size(); ++i) {
          const replay::ServedRecord& r = served.records[i];
          EXPECT_EQ(r.generated, streams[i].output.size());
          EXPECT_LE(r.accepted, r.drafted);
          EXPECT_LE(r.drafted, 4 * (r.passes - 1));
          passes = std::max(passes, r.passes - 1);
          if (policy == Policy::plain) {
            EXPECT_EQ(r.passes, r.generated);
            EXPECT_EQ(r.drafted, 0u);
          }
          if (policy == Policy::gate && name.find("corpus") == std::string::npos) {
            EXPECT_EQ(r.passes, one.records[i].passes) << streams[i].id;
            EXPECT_EQ(r.drafted, one.records[i].drafted) << streams[i].id;
          }
        }
        // The batch's passes: at least the longest record's, at most one per record's pass.
        EXPECT_GE(served.decode_passes, passes);
        if (batch >= streams.size()) {
          EXPECT_EQ(served.decode_passes, passes);
        }
      }
    }
  }
}

// A drafter that always drafts wrong tokens (kUnknown among them, what the replay model
// answers after a rejected draft) and one that always drafts right, served together.
TEST(ServeRecords, RejectedDraftsRollBackAndOracleDraftsAreAllAccepted) {
  const std::vector<TokenStream> streams = serving_streams(200, 2);
  for (const Token token : {Token{0xF0000000u}, kUnknown}) {
    replay::ServeConfig config;
    config.k = 5;
    config.batch = 3;
    config.prices = {replay::flat_cost()};
    const ServeResult served =
        replay::serve_records(streams, config, [token] { return ConstantDrafter(token); });
    for (std::size_t i = 0; i < streams.size(); ++i) {
      EXPECT_EQ(served.records[i].generated, streams[i].output.size());
      EXPECT_EQ(served.records[i].accepted, 0u);
      EXPECT_EQ(served.records[i].passes, streams[i].output.size());
    }
  }
  // The oracle reads the longest record; each record gets its own at begin() through reset(),
  // so serve records that share one recording.
  std::vector<TokenStream> same(4, streams.front());
  for (std::size_t i = 0; i < same.size(); ++i) same[i].id = "copy-" + std::to_string(i);
  replay::ServeConfig config;
  config.k = 7;
  config.batch = 2;
  config.prices = {replay::flat_cost()};
  const Tokens sequence = whole_sequence(same.front());
  const ServeResult served = replay::serve_records(same, config, [&] { return OracleDrafter(sequence); });
  const std::size_t length = same.front().output.size();
  for (const replay::ServedRecord& r : served.records) {
    EXPECT_EQ(r.generated, length);
    EXPECT_EQ(r.passes, 1 + (length - 1 + 7) / 8);
    EXPECT_EQ(r.accepted, r.drafted);
  }
}

// Records of one output token finish at their prefill, and a batch larger than the records
// serves them all.
TEST(ServeRecords, RecordsThatFinishAtTheirPrefillLeaveNoDecodePass) {
  std::vector<TokenStream> streams = parse_text("a\tc\t1 2 3\t4\nb\tc\t5 6\t7\nc\tc\t8 9 8 9\t8 9 8\n");
  const replay::DrafterEntry drafter = make_drafter("match", DrafterDefaults{});
  for (const std::size_t batch : {std::size_t{1}, std::size_t{2}, std::size_t{100}}) {
    const ServeResult served = serve(drafter, streams, 4, batch, Policy::fixed);
    EXPECT_EQ(served.records[0].passes, 1u);
    EXPECT_EQ(served.records[1].passes, 1u);
    EXPECT_EQ(served.records[2].generated, 3u);
    EXPECT_GE(served.decode_passes, 1u);
  }
  streams.resize(2);
  const ServeResult served = serve(drafter, streams, 4, 2, Policy::fixed);
  EXPECT_EQ(served.decode_passes, 0u);
  EXPECT_EQ(served.simulated_cost[0], 0.0);
}

// Every decode pass is priced under every curve at cost(tokens in the pass). Each record is
// charged cost(B) / B a pass, B the batch (or the records, if fewer), and the drafts' part of
// the pass in proportion to its drafts: alone, the charges add up to the passes' cost.
TEST(ServeRecords, PassesArePricedByTheirTokensAndRecordsChargedForTheirOwnPassesAndDrafts) {
  const std::vector<TokenStream> streams = serving_streams(200, 2);
  const replay::DrafterEntry drafter = make_drafter("match:gate=0", DrafterDefaults{});
  const std::vector<VerifyCost> prices = {replay::flat_cost(), VerifyCost::parse("knee:4"),
                                          VerifyCost::parse("table:1=1,2=1.25,3=1.71,5=2.77,9=5.06")};
  for (const std::size_t batch : {std::size_t{1}, std::size_t{3}, std::size_t{8}}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const ServeResult served = serve(drafter, streams, 6, batch, Policy::fixed, prices);
    ASSERT_EQ(served.simulated_cost.size(), 3u);
    EXPECT_DOUBLE_EQ(served.simulated_cost[0], static_cast<double>(served.decode_passes));
    // Flat: a record's charge is 1 / B per pass it took part in, drafts costing nothing.
    for (const replay::ServedRecord& r : served.records) {
      EXPECT_NEAR(r.cost[0], static_cast<double>(r.passes - 1) / static_cast<double>(batch), 1e-9);
    }
    if (batch == 1) {
      for (std::size_t c = 0; c < prices.size(); ++c) {
        double charges = 0;
        for (const replay::ServedRecord& r : served.records) charges += r.cost[c];
        EXPECT_NEAR(charges, served.simulated_cost[c], 1e-9 * served.simulated_cost[c]);
      }
    }
    // Drafts cost under knee:4 once a pass carries more than 4 tokens, and always under the table.
    EXPECT_GE(served.simulated_cost[1], served.simulated_cost[0]);
    EXPECT_GT(served.simulated_cost[2], served.simulated_cost[0]);
  }
  // Plain decoding of N records at once: each pass costs cost(S), S the records still running,
  // and each record is charged cost(N) / N per pass, whoever runs beside it.
  const std::size_t n = streams.size();
  const ServeResult plain = serve(drafter, streams, 6, n, Policy::plain, prices);
  std::size_t longest = 0;
  for (const TokenStream& s : streams) longest = std::max(longest, s.output.size() - 1);
  EXPECT_EQ(plain.decode_passes, longest);
  EXPECT_DOUBLE_EQ(plain.simulated_cost[1], static_cast<double>(longest) * static_cast<double>(n) / 4.0);
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_DOUBLE_EQ(plain.records[i].cost[1], static_cast<double>(streams[i].output.size() - 1) / 4.0);
    EXPECT_NEAR(plain.records[i].cost[2],
                static_cast<double>(streams[i].output.size() - 1) * prices[2](n) / static_cast<double>(n), 1e-9);
  }
}

replay::ReplayOptions parse_measure_args(std::vector<std::string_view> args) {
  return replay::parse_replay_options(args);
}

const replay::Row& row_of(const std::vector<replay::Row>& rows, std::size_t batch, Policy policy, std::size_t k,
                          const std::string& category = "overall") {
  for (const replay::Row& row : rows) {
    if (row.batch == batch && row.policy == policy && (policy == Policy::plain || row.k == k) &&
        row.category == category) {
      return row;
    }
  }
  throw std::logic_error("no row for batch " + std::to_string(batch) + " " + to_string(policy) + " k " +
                         std::to_string(k) + " " + category);
}

std::vector<replay::Row> measure(const std::vector<std::string_view>& args) {
  const replay::ReplayOptions options = parse_measure_args(args);
  const std::vector<TokenStream> streams = replay::load_streams(options);
  std::vector<replay::DrafterEntry> drafters;
  for (const std::string& name : options.drafter_names) drafters.push_back(make_drafter(name, options.defaults));
  return replay::measure_rows(drafters, streams, options);
}

// Plain decoding is the yardstick: its speedup is exactly 1 in every row, category and cost.
// The rows come for each cost by batch, plain first (k 0), then by k and policy.
TEST(MeasureRows, PlainSpeedupIsExactlyOneAndEveryRowHasOne) {
  const std::vector<replay::Row> rows =
      measure({"--synthetic", "periodic:16", "--synthetic", "random", "--length", "150", "--samples", "2", "--k",
               "2,8", "--batch", "1,3", "--cost", "flat", "--cost", "table:1=1,2=1.25,3=1.71,5=2.77,9=5.06",
               "--timing-repeats", "1"});
  // 2 costs x 2 batches x (plain + 2 k x 3 policies) x (2 categories + overall)
  ASSERT_EQ(rows.size(), 2u * 2u * 7u * 3u);
  EXPECT_EQ(rows.front().policy, Policy::plain);
  EXPECT_EQ(rows.front().k, 0u);
  EXPECT_EQ(rows.front().cost, "flat");
  EXPECT_EQ(rows.back().cost, "table:1=1,2=1.25,3=1.71,5=2.77,9=5.06");
  EXPECT_EQ(rows.back().policy, Policy::cost);
  for (const replay::Row& row : rows) {
    SCOPED_TRACE(row.cost + " batch " + std::to_string(row.batch) + " " + to_string(row.policy) + " k " +
                 std::to_string(row.k) + " " + row.category);
    EXPECT_GT(row.speedup, 0.0);
    EXPECT_GT(row.totals.simulated_cost, 0.0);
    if (row.policy == Policy::plain) {
      EXPECT_EQ(row.speedup, 1.0);
      EXPECT_EQ(row.totals.passes, row.totals.generated);
      EXPECT_EQ(row.totals.drafter_ns, 0.0);
    } else {
      EXPECT_GT(row.totals.drafter_ns, 0.0);
    }
  }
  // Periodic text: speculation pays under a flat cost.
  const replay::Row& gate = row_of(rows, 3, Policy::gate, 8, "periodic-16");
  EXPECT_EQ(gate.cost, "flat");
  EXPECT_GT(gate.speedup, 3.0);
}

// Where nothing predicts the text, drafts only cost: the cost policy, weighing them, must not
// lose to plain decoding (within 1 %), whatever the batch and k; fixed drafts what little the
// drafter offers, and loses.
TEST(MeasureRows, CostPolicyIsNoSlowerThanPlainOnRandomStreamsUnderATableCost) {
  const std::vector<replay::Row> rows =
      measure({"--synthetic", "random", "--length", "400", "--samples", "4", "--k", "4,16", "--batch", "1,4",
               "--cost", "table:1=1,2=1.25,3=1.71,5=2.77,9=5.06", "--policy", "fixed,cost", "--timing-repeats", "1"});
  for (const std::size_t batch : {std::size_t{1}, std::size_t{4}}) {
    for (const std::size_t k : {std::size_t{4}, std::size_t{16}}) {
      SCOPED_TRACE("batch " + std::to_string(batch) + " k " + std::to_string(k));
      const double cost = row_of(rows, batch, Policy::cost, k, "random").speedup;
      const double fixed = row_of(rows, batch, Policy::fixed, k, "random").speedup;
      EXPECT_GE(cost, 0.99);
      EXPECT_LT(fixed, 1.0);
      EXPECT_GE(cost, fixed);
    }
  }
}

// A category is charged for its own passes and drafts, not for the batch emptying around it:
// random records outlast the periodic ones beside them, yet under a flat-then-linear cost the
// cost policy (which drafts only what pays) serves them exactly as plain decoding does.
TEST(MeasureRows, ACategoryIsChargedForItsOwnPassesNotForTheBatchDrainingAroundIt) {
  const std::vector<replay::Row> rows =
      measure({"--synthetic", "periodic:16", "--synthetic", "random", "--length", "300", "--samples", "3", "--k",
               "8", "--batch", "6,64", "--cost", "knee:64", "--timing-repeats", "1"});
  for (const std::size_t batch : {std::size_t{6}, std::size_t{64}}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    EXPECT_GE(row_of(rows, batch, Policy::cost, 8, "random").speedup, 0.99);
    EXPECT_GT(row_of(rows, batch, Policy::cost, 8, "periodic-16").speedup, 5.0);
    // Overall, the random records' passes bound the run: no policy beats plain by much.
    EXPECT_LT(row_of(rows, batch, Policy::cost, 8).speedup, 1.01);
    EXPECT_GE(row_of(rows, batch, Policy::cost, 8).speedup, row_of(rows, batch, Policy::fixed, 8).speedup);
  }
}

// With --cost the default policies are all four; without, gate alone, as before batches.
TEST(ReplayOptions, ServingOptionsAndTheirDefaults) {
  replay::ReplayOptions options = parse_args({"--synthetic", "random"});
  EXPECT_EQ(options.batches, std::vector<std::size_t>{1});
  EXPECT_EQ(options.policies, std::vector<Policy>{Policy::gate});
  EXPECT_TRUE(options.costs.empty());
  EXPECT_FALSE(options.categories);

  options = parse_args({"--synthetic", "random", "--cost", "knee:256", "--batch", "1,32,256", "--categories"});
  EXPECT_EQ(options.policies, (std::vector<Policy>{Policy::plain, Policy::fixed, Policy::gate, Policy::cost}));
  EXPECT_EQ(options.batches, (std::vector<std::size_t>{1, 32, 256}));
  ASSERT_EQ(options.costs.size(), 1u);
  EXPECT_EQ(options.costs[0].name, "knee:256");
  EXPECT_DOUBLE_EQ(options.costs[0].curve(512), 2.0);
  EXPECT_TRUE(options.categories);

  options = parse_args({"--synthetic", "random", "--policy", "cost,plain", "--cost", "flat", "--cost",
                        "table:1=1,2=1.25"});
  EXPECT_EQ(options.policies, (std::vector<Policy>{Policy::plain, Policy::cost}));
  ASSERT_EQ(options.costs.size(), 2u);
  EXPECT_EQ(options.costs[0].name, "flat");
  EXPECT_DOUBLE_EQ(options.costs[0].curve(1000), 1.0);
  EXPECT_EQ(options.costs[1].name, "table:1=1,2=1.25");
}

// Every bad --batch, --cost and --policy value is rejected with a message naming the option and
// the value.
TEST(ReplayOptions, BadBatchCostAndPolicyValuesNameTheValue) {
  struct Case {
    std::vector<std::string_view> args;
    std::string message;  // the whole message, or with a trailing '*' its beginning
  };
  const std::vector<Case> cases = {
      {{"--batch", "0"}, "--batch: '0' is out of range: it must be from 1 to 65536"},
      {{"--batch", "65537"}, "--batch: '65537' is out of range: it must be from 1 to 65536"},
      {{"--batch", "1,x"}, "--batch: 'x' is not a whole number from 1 to 65536"},
      {{"--batch", "1,"}, "--batch: '' is not a whole number from 1 to 65536"},
      {{"--batch", "-2"}, "--batch: '-2' is not a whole number from 1 to 65536"},
      {{"--batch"}, "--batch needs a value"},
      {{"--cost", "knee"}, "--cost: 'knee' is not a cost: knee needs its token count*"},
      {{"--cost", "knee:x"}, "--cost: 'knee:x' is not a cost: knee 'x' is not a whole number*"},
      {{"--cost", "knee:0"}, "--cost: 'knee:0' is not a cost*"},
      {{"--cost", "table:1=1,2=x"}, "--cost: 'table:1=1,2=x' is not a cost: cost 'x' is not a finite number*"},
      {{"--cost", "table:2=1,1=2"}, "--cost: 'table:2=1,1=2' is not a cost*"},
      {{"--cost", "linear"}, "--cost: 'linear' is not a cost: unknown form 'linear'*"},
      {{"--cost", "Flat"}, "--cost: 'Flat' is not a cost*"},
      {{"--cost", "knee:8", "--cost", "knee:8"}, "--cost: 'knee:8' is given twice (as 'knee:8')"},
      {{"--policy", "greedy"},
       "--policy: 'greedy' is not a policy: expected a comma-separated list of plain, fixed, gate and cost"},
      {{"--policy", "plain,,cost"}, "--policy: '' is not a policy*"},
      {{"--policy", "Gate"}, "--policy: 'Gate' is not a policy*"},
      {{"--policy", "gate,fixed,gate"}, "--policy: 'gate' is given twice"},
  };
  for (const Case& c : cases) {
    std::vector<std::string_view> args = {"--synthetic", "random"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    std::string trace;
    for (const std::string_view a : c.args) trace += std::string(a) + " ";
    SCOPED_TRACE(trace);
    const std::string message = message_of<std::invalid_argument>([&] { (void)parse_args(args); });
    if (!c.message.empty() && c.message.back() == '*') {
      EXPECT_EQ(message.rfind(c.message.substr(0, c.message.size() - 1), 0), 0u) << message;
      if (c.args[0] == "--cost") {
        EXPECT_NE(message.find("(expected flat, knee:N or table:"), std::string::npos) << message;
      }
    } else {
      EXPECT_EQ(message, c.message);
    }
  }
}

// An option that takes one value is refused when given twice (the first value would be dropped
// without a word), and so is a list that names an item twice (its rows would print twice); the
// repeatable options (--streams, --synthetic, --drafter, --cost) take several distinct values.
TEST(ReplayOptions, OptionsGivenTwiceAndListsNamingAnItemTwiceAreRefusedByName) {
  const std::vector<std::pair<std::vector<std::string_view>, std::string>> cases = {
      {{"--k", "4", "--k", "8"}, "--k is given twice"},
      {{"--tree-nodes", "4", "--tree-nodes", "8"}, "--tree-nodes is given twice"},
      {{"--batch", "1", "--batch", "2"}, "--batch is given twice"},
      {{"--policy", "gate", "--policy", "cost"}, "--policy is given twice"},
      {{"--length", "64", "--length", "64"}, "--length is given twice"},
      {{"--seed", "1", "--seed", "2"}, "--seed is given twice"},
      {{"--records", "0:1", "--records", "1:2"}, "--records is given twice"},
      {{"--corpus-file", "a", "--corpus-file", "b"}, "--corpus-file is given twice"},
      {{"--expect-al", "1", "--expect-al", "1"}, "--expect-al is given twice"},
      {{"--json", "--json"}, "--json is given twice"},
      {{"--categories", "--categories"}, "--categories is given twice"},
      {{"--k", "4,4"}, "--k: '4' is given twice"},
      {{"--k", "1,4,04"}, "--k: '04' is given twice"},
      {{"--tree-nodes", "64,64,64"}, "--tree-nodes: '64' is given twice"},
      {{"--batch", "1,32,1"}, "--batch: '1' is given twice"},
      {{"--drafter", "match", "--drafter", "ngram", "--drafter", "match"}, "--drafter: 'match' is given twice"},
      {{"--synthetic", "random"}, "--synthetic: 'random' is given twice"},
      {{"--streams", "a.tsv", "--streams", "a.tsv"}, "--streams: 'a.tsv' is given twice"},
  };
  for (const auto& [given, expected] : cases) {
    std::vector<std::string_view> args = {"--synthetic", "random"};
    args.insert(args.end(), given.begin(), given.end());
    SCOPED_TRACE(expected);
    EXPECT_EQ(message_of<std::invalid_argument>([&] { (void)parse_args(args); }), expected);
  }
  // Distinct values of the repeatable options are lists, as before.
  const replay::ReplayOptions options = parse_args({"--synthetic", "random", "--synthetic", "periodic:8", "--drafter",
                                                    "match", "--drafter", "ngram", "--cost", "knee:8", "--cost", "flat",
                                                    "--k", "1,4"});
  EXPECT_EQ(options.synthetic_specs.size(), 2u);
  EXPECT_EQ(options.drafter_names, (std::vector<std::string>{"match", "ngram"}));
  EXPECT_EQ(options.costs.size(), 2u);
  EXPECT_EQ(options.ks, (std::vector<std::size_t>{1, 4}));
}

// --- the report: costs, format_json, format_table ------------------------------

// Costs whose sums would overflow a double are refused before the replay, naming the cost.
// Costs are ratios: a table of huge costs decides as its normalized twin, and a ratio no pass can
// have is refused when the option is read, so no simulated sum can overflow.
TEST(ReplayCosts, HugeCostsAreRatiosAndImpossibleRatiosAreRefused) {
  const auto serve = [](std::string_view cost) {
    std::vector<std::string_view> args = {"--synthetic", "periodic:8", "--length", "96", "--samples", "2",
                                          "--k", "4", "--policy", "cost", "--cost", cost};
    const replay::ReplayOptions options = parse_args(args);
    return options.costs.front().curve.spec();
  };
  EXPECT_NO_THROW(serve("table:1=1e308,2=1e308"));
  const std::string message = message_of<std::invalid_argument>([&] { serve("table:1=1,2=1.79e308"); });
  EXPECT_EQ(message.rfind("--cost: ", 0), 0u) << message;
  EXPECT_NE(message.find("kMaxCost"), std::string::npos) << message;
}

replay::Row report_row(std::string drafter, std::size_t k, Policy policy, std::string cost, std::string category) {
  replay::Row row;
  row.drafter = std::move(drafter);
  row.k = k;
  row.policy = policy;
  row.cost = std::move(cost);
  row.category = std::move(category);
  row.totals.samples = 2;
  row.totals.passes = 10;
  row.totals.generated = 16;
  row.totals.drafted = 8;
  row.totals.accepted = 6;
  row.totals.simulated_cost = 8;
  row.speedup = 1.25;
  return row;
}

// JSON has no inf or nan: such a number is written as null, and the row names it.
TEST(FormatJson, NumbersThatAreNotFiniteAreNullAndNamed) {
  std::vector<replay::Row> rows = {report_row("m", 4, Policy::gate, "flat", "qa"),
                                   report_row("m\"\n", 4, Policy::gate, "flat", "qa")};
  rows[1].speedup = std::numeric_limits<double>::quiet_NaN();
  rows[1].totals.simulated_cost = std::numeric_limits<double>::infinity();
  const std::string json = replay::format_json(rows);
  EXPECT_EQ(json.find("nan"), std::string::npos) << json;
  EXPECT_EQ(json.find("inf"), std::string::npos) << json;
  EXPECT_NE(json.find("\"speedup\": 1.250000}"), std::string::npos) << json;
  EXPECT_NE(json.find("\"drafter\": \"m\\\"\\u000a\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"simulated_cost\": null, \"speedup\": null, \"not_finite\": [\"simulated_cost\", \"speedup\"]}"),
            std::string::npos)
      << json;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Compact: no blank line, columns named as docs/BENCHMARKS.md's tables name them, every line as wide,
// and a column whose value every row shares said once above instead.
TEST(FormatTable, CompactWithTheReadmesColumnNames) {
  const std::vector<replay::Row> rows = {report_row("ngram(w=512,2-4)", 4, Policy::gate, "flat", "qa"),
                                         report_row("ngram(w=512,2-4)", 16, Policy::gate, "flat", "qa"),
                                         report_row("match", 4, Policy::gate, "flat", "qa")};
  const std::vector<std::string> lines = lines_of(replay::format_table(rows, false));
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[0], "every row: batch 1, policy gate, cost flat, category qa");
  EXPECT_EQ(lines[1], "                                 tokens  acceptance  rejected drafts           "
                      "drafter ns         peak");
  EXPECT_EQ(lines[2], "drafter            k  samples  per pass        rate         per pass  speedup   "
                      "per token  drafter KiB");
  EXPECT_EQ(lines[3], "ngram(w=512,2-4)   4        2     1.600       0.750            0.250    1.250         "
                      "0.0          0.0");
  for (std::size_t i = 1; i < lines.size(); ++i) EXPECT_EQ(lines[i].size(), lines[1].size()) << lines[i];

  // Columns that differ between rows are shown; plain's k is "-".
  std::vector<replay::Row> served = rows;
  served[1].batch = 8;
  served[2].policy = Policy::plain;
  served[2].cost = "knee:4";
  const std::vector<std::string> more = lines_of(replay::format_table(served, false));
  ASSERT_EQ(more.size(), 6u);
  EXPECT_EQ(more[0], "every row: category qa");
  EXPECT_EQ(more[2].rfind("drafter            k  batch  policy  cost    samples", 0), 0u) << more[2];
  EXPECT_EQ(more[5].rfind("match              -      1  plain   knee:4        2", 0), 0u) << more[5];
}

// --- tree replay: --tree-nodes, serve_tree_records and DrafterEntry::serve_tree ----------

// A tree drafter that knows the recording: at the root, a decoy no stream holds (most probable,
// so a budget of 1 sends only it), then the recording's next tokens as a chain. It checks that
// the pass it observes is the tree it drafted.
struct OracleTreeDrafter {
  static constexpr Token kDecoy = 4000000000u;
  const TokenStream* stream = nullptr;
  std::size_t seen = 0;  // tokens observed: prompt + output so far
  std::size_t passes_observed = 0;
  std::size_t kept_total = 0;

  void reset() { seen = 0; }
  void update(std::span<const Token> tokens) { seen += tokens.size(); }
  std::size_t predict_tree(DraftTree& tree, std::size_t max_nodes, std::size_t max_depth, float = 0.0f) {
    tree.clear();
    if (max_nodes == 0 || max_depth == 0) return 0;
    tree.add(kTreeRoot, kDecoy, 0.9f);
    const std::size_t at = seen - stream->prompt.size();
    std::int32_t parent = kTreeRoot;
    for (std::size_t d = 0; d < max_depth && tree.size() < max_nodes && at + d < stream->output.size(); ++d) {
      parent = static_cast<std::int32_t>(tree.add(parent, stream->output[at + d], 0.05f));
    }
    return tree.size();
  }
  void observe_pass(const DraftTree& tree, std::span<const Token> fed, std::span<const Token> model_tokens,
                    std::span<const std::size_t> kept, std::span<const Token> top) {
    EXPECT_EQ(fed.size(), tree.size() + 1);
    EXPECT_EQ(model_tokens.size(), tree.size() + 1);
    EXPECT_TRUE(top.empty());
    ASSERT_FALSE(kept.empty());
    EXPECT_EQ(kept[0], 0u);
    // The decoy's entry (1) is off the recorded path: the model's token there is unknown.
    if (!tree.empty()) {
      EXPECT_EQ(model_tokens[1], ReplayModel::kUnknown);
    }
    for (std::size_t j = 1; j < kept.size(); ++j) EXPECT_EQ(kept[j], j + 1);  // the chain under the root
    ++passes_observed;
    kept_total += kept.size();
  }
};

std::vector<TokenStream> tree_streams() {
  std::vector<TokenStream> streams;
  for (const std::string text : {"periodic:24:0.1", "mixture:16", "random"}) {
    for (TokenStream& s : make_synthetic(spec_of(text, 300, 2, 7))) streams.push_back(std::move(s));
  }
  return streams;
}

// The walk follows the recording whichever sibling it is: the decoy first, the recording's
// chain beside it. Every node but the decoy is accepted, so each pass emits min(budget - 1,
// depth) + 1 tokens and wastes exactly one node; a budget of 1 sends the decoy alone.
TEST(ServeTreeRecords, TheAcceptedPathFollowsTheRecordingAndWastedIsNodesLessAccepted) {
  const std::vector<TokenStream> streams = tree_streams();
  for (const std::size_t nodes : {std::size_t{1}, std::size_t{2}, std::size_t{5}}) {
    for (const std::size_t batch : {std::size_t{1}, std::size_t{4}}) {
      SCOPED_TRACE("nodes " + std::to_string(nodes) + " batch " + std::to_string(batch));
      std::size_t made = 0;
      std::vector<std::unique_ptr<OracleTreeDrafter>> owned;
      const replay::TreeServeConfig config{.nodes = nodes, .batch = batch, .plan_cost = {}, .prices = {replay::flat_cost()}};
      // Each record gets a pooled drafter; the oracle needs its record, so it reads the recording
      // from the record whose prompt it was fed (every prompt here differs from the others).
      struct Handle {
        OracleTreeDrafter* d;
        const std::vector<TokenStream>* streams;
        void reset() { d->reset(); }
        void update(std::span<const Token> t) {
          if (d->seen == 0) {
            for (const TokenStream& s : *streams) {
              if (std::equal(t.begin(), t.end(), s.prompt.begin(), s.prompt.end())) d->stream = &s;
            }
          }
          d->update(t);
        }
        std::size_t predict_tree(DraftTree& tree, std::size_t n, std::size_t depth, float least = 0.0f) {
          return d->predict_tree(tree, n, depth, least);
        }
        void observe_pass(const DraftTree& tree, std::span<const Token> fed, std::span<const Token> model,
                          std::span<const std::size_t> kept, std::span<const Token> top) {
          d->observe_pass(tree, fed, model, kept, top);
        }
      };
      const replay::ServeResult served = replay::serve_tree_records(streams, config, [&] {
        owned.push_back(std::make_unique<OracleTreeDrafter>());
        ++made;
        return Handle{owned.back().get(), &streams};
      });
      EXPECT_EQ(made, std::min(batch, streams.size()));
      for (std::size_t i = 0; i < streams.size(); ++i) {
        const replay::ServedRecord& r = served.records[i];
        // The passes after the prefill: a tree no deeper than the tokens left allow (none when
        // one is left), the chain under it accepted, the model's token after it.
        std::size_t passes = 0;
        std::size_t sent = 0;
        std::size_t accepted = 0;
        std::size_t trees = 0;
        for (std::size_t left = streams[i].output.size() - 1; left > 0; ++passes) {
          const std::size_t depth = std::min(left - 1, nodes);
          const std::size_t chain = depth == 0 ? 0 : std::min(nodes - 1, depth);
          sent += depth == 0 ? 0 : 1 + chain;
          trees += depth == 0 ? 0 : 1;
          accepted += chain;
          left -= chain + 1;
        }
        EXPECT_EQ(r.generated, streams[i].output.size());
        EXPECT_EQ(r.passes, passes + 1);
        EXPECT_EQ(r.accepted, accepted);
        EXPECT_EQ(r.drafted, sent);
        EXPECT_EQ(r.drafted - r.accepted, trees) << "one wasted node (the decoy) a tree";
      }
    }
  }
}

std::vector<std::string_view> tree_args(std::vector<std::string_view> more) {
  std::vector<std::string_view> args = {"--synthetic", "periodic:24:0.1", "--synthetic", "mixture:16", "--length",
                                        "600", "--samples", "2", "--timing-repeats", "1"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

const replay::Row& tree_row_of(const std::vector<replay::Row>& rows, std::size_t batch, Policy policy,
                               std::size_t nodes, const std::string& category = "overall") {
  for (const replay::Row& row : rows) {
    if (row.tree && row.batch == batch && row.policy == policy && row.k == nodes && row.category == category) {
      return row;
    }
  }
  throw std::logic_error("no tree row for batch " + std::to_string(batch) + " " + to_string(policy) + " nodes " +
                         std::to_string(nodes) + " " + category);
}

// On repetitive text a tree of 16 or 64 nodes accepts at least what the k = 4 chain does, the
// same drafter's; the figures are a function of the input, and the counts agree with each other.
TEST(MeasureRows, TreeRowsReachTheK4ChainAndAreDeterministicAndConsistent) {
  const std::vector<replay::Row> rows = measure(tree_args({"--k", "4", "--tree-nodes", "1,16,64"}));
  const double chain = row_of(rows, 1, Policy::gate, 4).totals.mean_accepted_length();
  EXPECT_GT(chain, 1.5);
  for (const std::size_t nodes : {std::size_t{16}, std::size_t{64}}) {
    EXPECT_GE(tree_row_of(rows, 1, Policy::gate, nodes).totals.mean_accepted_length(), chain) << nodes;
  }
  EXPECT_GT(tree_row_of(rows, 1, Policy::gate, 64).totals.mean_accepted_length(),
            tree_row_of(rows, 1, Policy::gate, 1).totals.mean_accepted_length());

  const std::vector<replay::Row> again = measure(tree_args({"--k", "4", "--tree-nodes", "1,16,64"}));
  ASSERT_EQ(rows.size(), again.size());
  std::size_t trees = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const replay::Totals& t = rows[i].totals;
    SCOPED_TRACE((rows[i].tree ? "tree " : "chain ") + std::to_string(rows[i].k) + " " + rows[i].category);
    EXPECT_EQ(rows[i].tree, again[i].tree);
    EXPECT_EQ(t.passes, again[i].totals.passes);
    EXPECT_EQ(t.drafted, again[i].totals.drafted);
    EXPECT_EQ(t.accepted, again[i].totals.accepted);
    EXPECT_EQ(t.simulated_cost, again[i].totals.simulated_cost);
    if (!rows[i].tree) continue;
    ++trees;
    // Each pass emits its accepted nodes and the model's token (the depth limit keeps the last
    // pass from being cut), the prefill one token.
    EXPECT_EQ(t.generated, t.accepted + t.passes);
    EXPECT_EQ(t.samples, rows[i].category == "overall" ? 4u : 2u);
    EXPECT_LE(t.drafted_per_pass(), static_cast<double>(rows[i].k));
    EXPECT_DOUBLE_EQ(t.rejected_per_pass(),
                     t.drafted_per_pass() - static_cast<double>(t.accepted) / static_cast<double>(t.passes - t.samples));
    EXPECT_EQ(t.drafter_ns, 0.0);
  }
  EXPECT_EQ(trees, 3u * 3u);  // 3 budgets x (2 categories + overall)
}

// Served in batches, a record's tree replay does not depend on the records beside it (no
// corpus, whole trees); under a knee the whole trees of a batch overflow, the cost policy cuts
// them to what pays and is no slower.
TEST(MeasureRows, TreeRowsServedInBatchesAndUnderACost) {
  const std::vector<replay::Row> rows =
      measure(tree_args({"--k", "4", "--tree-nodes", "16", "--batch", "1,3", "--cost", "knee:16"}));
  for (const Policy policy : {Policy::fixed, Policy::gate}) {
    for (const std::string category : {"periodic-24-noise0.10", "mixture-16"}) {
      const replay::Totals& one = tree_row_of(rows, 1, policy, 16, category).totals;
      const replay::Totals& three = tree_row_of(rows, 3, policy, 16, category).totals;
      EXPECT_EQ(one.passes, three.passes) << category;
      EXPECT_EQ(one.drafted, three.drafted) << category;
    }
  }
  EXPECT_GE(tree_row_of(rows, 3, Policy::cost, 16).speedup, tree_row_of(rows, 3, Policy::fixed, 16).speedup);
  EXPECT_LT(tree_row_of(rows, 3, Policy::cost, 16).totals.drafted, tree_row_of(rows, 3, Policy::fixed, 16).totals.drafted);
  // No plain tree rows: plain decoding is the chain's.
  for (const replay::Row& row : rows) EXPECT_FALSE(row.tree && row.policy == Policy::plain);
}

// The spine drafts from the match drafter's corpus as the chain does: a record that repeats an
// earlier one (random tokens, which nothing else predicts) is drafted from it.
TEST(ServeTree, TheSpineReadsTheMatchDraftersCorpus) {
  std::vector<TokenStream> streams = make_synthetic(spec_of("random", 400, 1, 3));
  streams.push_back(streams[0]);
  streams[1].id += "-again";
  const std::vector<VerifyCost> prices = {replay::flat_cost()};
  const ServeRequest request{.k = 8, .batch = 1, .policy = Policy::gate, .cost = nullptr, .prices = prices};
  const ServeResult alone = make_drafter("match", DrafterDefaults{}).serve_tree(streams, request);
  const ServeResult shared = make_drafter("match:corpus=1", DrafterDefaults{}).serve_tree(streams, request);
  EXPECT_LT(alone.records[1].accepted, 40u);
  EXPECT_GT(shared.records[1].accepted, 300u);
  EXPECT_EQ(shared.records[0].accepted, alone.records[0].accepted);
  // Drafters that draft no trees have none to serve.
  EXPECT_FALSE(make_drafter("ngram", DrafterDefaults{}).serve_tree);
  EXPECT_FALSE(make_drafter("prompt-lookup", DrafterDefaults{}).serve_tree);
}

// Every bad --tree-nodes value, and every combination without sense, is refused naming the option.
TEST(ReplayOptions, BadTreeNodesAndCombinationsAreRefusedNamingThem) {
  static_assert(DraftTree::kMaxNodes == 1024);
  const std::vector<std::pair<std::vector<std::string_view>, std::string>> cases = {
      {{"--tree-nodes", "0"}, "--tree-nodes: '0' is out of range: it must be from 1 to 1024"},
      {{"--tree-nodes", "1025"}, "--tree-nodes: '1025' is out of range: it must be from 1 to 1024"},
      {{"--tree-nodes", "4,x"}, "--tree-nodes: 'x' is not a whole number from 1 to 1024"},
      {{"--tree-nodes", "4,"}, "--tree-nodes: '' is not a whole number from 1 to 1024"},
      {{"--tree-nodes", "-4"}, "--tree-nodes: '-4' is not a whole number from 1 to 1024"},
      {{"--tree-nodes"}, "--tree-nodes needs a value"},
      {{"--tree-nodes", "4", "--expect-al", "1.5"},
       "--expect-al: not with --tree-nodes: it checks one configuration, and the tree rows come beside the chain "
       "rows of --k"},
      {{"--tree-nodes", "4", "--policy", "plain"},
       "--tree-nodes: --policy plain alone sends no tree; add fixed, gate or cost"},
  };
  for (const auto& [more, expected] : cases) {
    std::vector<std::string_view> args = {"--synthetic", "random"};
    args.insert(args.end(), more.begin(), more.end());
    SCOPED_TRACE(expected);
    EXPECT_EQ(message_of<std::invalid_argument>([&] { (void)parse_args(args); }), expected);
  }
  EXPECT_EQ(parse_args({"--synthetic", "random", "--tree-nodes", "1,64,1024"}).tree_nodes,
            (std::vector<std::size_t>{1, 64, 1024}));
  EXPECT_TRUE(parse_args({"--synthetic", "random"}).tree_nodes.empty());
  EXPECT_EQ(message_of<std::invalid_argument>(
                [] { (void)measure({"--synthetic", "random", "--drafter", "ngram", "--tree-nodes", "4"}); }),
            "--tree-nodes: no --drafter drafts trees: trees grow from a match drafter's chain (TreeDrafter); add "
            "--drafter match[:...] or leave --drafter out");
}

// Tree rows get a table of their own, after the chain's, and their own JSON list.
TEST(FormatTable, TreeRowsFollowInATableOfTheirOwnAndJsonListsThemApart) {
  std::vector<replay::Row> rows = {report_row("match", 4, Policy::gate, "flat", "qa"),
                                   report_row("match", 16, Policy::gate, "flat", "qa")};
  rows[1].tree = true;
  const std::vector<std::string> lines = lines_of(replay::format_table(rows, false));
  ASSERT_EQ(lines.size(), 10u);
  EXPECT_EQ(lines[4], "");
  EXPECT_EQ(lines[5].rfind("trees (", 0), 0u) << lines[5];
  EXPECT_EQ(lines[6], "every row: batch 1, policy gate, cost flat, category qa");
  EXPECT_EQ(lines[7], "                           tokens              nodes  wasted nodes");
  EXPECT_EQ(lines[8], "drafter  nodes  samples  per pass  speedup  per pass      per pass");
  EXPECT_EQ(lines[9], "match       16        2     1.600    1.250     1.000         0.250");

  const std::string json = replay::format_json(rows);
  EXPECT_NE(json.find("{\"results\": [\n  {\"drafter\": \"match\", \"k\": 4,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"trees\": [\n  {\"drafter\": \"match\", \"nodes\": 16, \"category\": \"qa\", \"samples\": 2, "
                      "\"passes\": 10, \"decode_passes\": 8, \"generated\": 16, \"nodes_sent\": 8, \"accepted\": 6, "
                      "\"mean_accepted_length\": 1.600000, \"nodes_wasted\": 2, \"nodes_per_pass\": 1.000000, "
                      "\"wasted_per_pass\": 0.250000, \"batch\": 1,"),
            std::string::npos)
      << json;
  EXPECT_EQ(replay::format_json({rows[0]}).find("trees"), std::string::npos);
}

// --- --price and --cost learn -------------------------------------------------------------

TEST(PassPrice, ReadsACurveWithShapeNoiseAndDrift) {
  const replay::PassPrice plain = replay::PassPrice::parse("knee:4");
  EXPECT_EQ(plain.charge(0, 2, 0, 0), 1.0);
  EXPECT_EQ(plain.charge(5, 2, 6, 2), 2.0);  // 8 tokens of a knee at 4
  const replay::PassPrice shaped = replay::PassPrice::parse("table:1=1,2=1.5,4=2,shape=3");
  EXPECT_EQ(shaped.curve().spec(), "table:1=1,2=1.5,4=2");
  EXPECT_EQ(shaped.charge(1, 1, 1, 2), 1.5);      // as many tokens as the pass before: no change
  EXPECT_EQ(shaped.charge(1, 1, 1, 1), 1.5 + 3);  // one more: the change costs 3 one-token passes
  EXPECT_EQ(shaped.charge(0, 1, 1, 0), 1.5);      // no pass before
  const replay::PassPrice noisy = replay::PassPrice::parse("knee:8,noise=0.3");
  EXPECT_EQ(noisy.charge(7, 1, 0, 0), noisy.charge(7, 1, 0, 0)) << "seeded by the pass: every run alike";
  EXPECT_NE(noisy.charge(7, 1, 0, 0), noisy.charge(8, 1, 0, 0));
  double log_sum = 0, log_square = 0;
  for (std::size_t i = 0; i < 4000; ++i) {
    const double x = std::log(noisy.charge(i, 1, 0, 0));
    log_sum += x;
    log_square += x * x;
  }
  EXPECT_NEAR(log_sum / 4000, 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(log_square / 4000), 0.3, 0.02);
  // Another seed, another draw of the same noise; seed=1 is the default's.
  const replay::PassPrice reseeded = replay::PassPrice::parse("knee:8,noise=0.3,seed=2");
  EXPECT_NE(reseeded.charge(7, 1, 0, 0), noisy.charge(7, 1, 0, 0));
  EXPECT_EQ(replay::PassPrice::parse("knee:8,noise=0.3,seed=1").charge(7, 1, 0, 0), noisy.charge(7, 1, 0, 0));
  // After a drift the noise keeps the first part's seed unless the second part names its own.
  const replay::PassPrice drifting = replay::PassPrice::parse("knee:8,noise=0.3,seed=2,drift=5:knee:8,noise=0.3");
  EXPECT_EQ(drifting.charge(7, 1, 0, 0), reseeded.charge(7, 1, 0, 0));
  const replay::PassPrice drifting3 =
      replay::PassPrice::parse("knee:8,noise=0.3,seed=2,drift=5:knee:8,noise=0.3,seed=3");
  EXPECT_EQ(drifting3.charge(4, 1, 0, 0), reseeded.charge(4, 1, 0, 0));
  EXPECT_EQ(drifting3.charge(7, 1, 0, 0), replay::PassPrice::parse("knee:8,noise=0.3,seed=3").charge(7, 1, 0, 0));
  EXPECT_NE(drifting3.charge(7, 1, 0, 0), reseeded.charge(7, 1, 0, 0));
  // A quiet first part's seed serves the noisy part after the drift.
  const replay::PassPrice quiet_first = replay::PassPrice::parse("knee:8,seed=2,drift=5:knee:8,noise=0.3");
  EXPECT_EQ(quiet_first.charge(4, 1, 0, 0), 1.0);
  EXPECT_EQ(quiet_first.charge(7, 1, 0, 0), reseeded.charge(7, 1, 0, 0));
  const replay::PassPrice drift = replay::PassPrice::parse("knee:256,drift=10:knee:1,shape=1");
  EXPECT_EQ(drift.charge(9, 4, 12, 4), 1.0);
  EXPECT_EQ(drift.charge(10, 4, 12, 16), 16.0);
  EXPECT_EQ(drift.charge(10, 4, 12, 4), 17.0);
  EXPECT_EQ(drift.curve(10).spec(), "knee:1");
}

TEST(PassPrice, BadSpecsAreRefusedNamingThem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"knee:4,shape=x", "--price \"knee:4,shape=x\": shape = \"x\" is not a finite number of at least 0"},
      {"knee:4,noise=-1", "--price \"knee:4,noise=-1\": noise = \"-1\" is not a finite number of at least 0"},
      {"knee:4,speed=2", "--price \"knee:4,speed=2\": \"speed=2\" is not an option"},
      {"knee:4,seed=1.5", "--price \"knee:4,seed=1.5\": seed = \"1.5\" is not a whole number of at least 0"},
      {"knee:4,seed=-2", "--price \"knee:4,seed=-2\": seed = \"-2\" is not a whole number"},
      {"knee:4,seed=5000000000", "--price \"knee:4,seed=5000000000\": seed = \"5000000000\" is more than 4294967295"},
      {"knee:4,drift=1e30:flat", "--price \"knee:4,drift=1e30:flat\": drift = \"1e30\" is more than"},
      {"knee:4,seed=3", "--price \"knee:4,seed=3\": seed=3 seeds nothing: the price has no noise=S"},
      {"knee:4,noise=0,seed=3", "seed=3 seeds nothing"},
      {"knee:4,noise=0.1,drift=9:flat,seed=3", "--price \"flat,seed=3\": seed=3 seeds nothing"},
      {"knee:4,drift=1.5:flat", "--price \"knee:4,drift=1.5:flat\": drift = \"1.5\" is not a whole number"},
      {"knee:4,drift=flat", "--price \"knee:4,drift=flat\": drift=N:SPEC2 needs a pass number N"},
      {"knee:0", "--price \"knee:0\": "},
  };
  for (const auto& [spec, expected] : cases) {
    SCOPED_TRACE(spec);
    const std::string message = message_of<std::invalid_argument>([&] { (void)replay::PassPrice::parse(spec); });
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
}

TEST(ReplayOptions, ALearnedCostNeedsAPriceAndNoTrees) {
  EXPECT_EQ(message_of<std::invalid_argument>([] { (void)parse_args({"--synthetic", "random", "--cost", "learn"}); }),
            "--cost learn: a learned cost learns from what passes cost; give it --price SPEC");
  EXPECT_EQ(message_of<std::invalid_argument>([] {
              (void)parse_args({"--synthetic", "random", "--price", "knee:4", "--tree-nodes", "4"});
            }),
            "--price: trees are priced by --cost alone; leave --tree-nodes out");
  const replay::ReplayOptions o =
      parse_args({"--synthetic", "random", "--price", "knee:4,shape=1", "--cost", "learn", "--cost", "learn:knee:8"});
  ASSERT_TRUE(o.price.has_value());
  EXPECT_EQ(o.price->spec(), "knee:4,shape=1");
  ASSERT_EQ(o.costs.size(), 2u);
  EXPECT_TRUE(o.costs[0].learn);
  EXPECT_FALSE(o.costs[0].prior);
  EXPECT_EQ(o.costs[1].name, "learn:knee:8");
  EXPECT_TRUE(o.costs[1].prior);
}

// Served under a price, plain decoding is charged the price's curve; a learned cost sends the
// same outputs (checked against the recordings by serve_records) and, on a price flat for the
// drafts a pass can carry, learns to draft.
TEST(ServeRecords, ALearnedCostUnderAPriceDraftsWhatThePriceMakesWorthIt) {
  const std::vector<TokenStream> streams = serving_streams(300, 4);
  replay::ServeConfig plain;
  plain.k = 8;
  plain.batch = 2;
  plain.speculate = false;
  plain.prices = {replay::flat_cost()};
  plain.price = replay::PassPrice::parse("knee:64");
  const ServeResult base = replay::serve_records(streams, plain, [] { return MatchDrafter(); });
  EXPECT_DOUBLE_EQ(base.simulated_cost.front(), static_cast<double>(base.decode_passes));
  replay::ServeConfig learned = plain;
  learned.speculate = true;
  learned.learn_cost = true;
  const ServeResult served = replay::serve_records(streams, learned, [] { return MatchDrafter(); });
  std::size_t accepted = 0;
  for (const replay::ServedRecord& r : served.records) accepted += r.accepted;
  EXPECT_GT(accepted, 0u);
  EXPECT_LT(served.simulated_cost.front(), base.simulated_cost.front());
}


}  // namespace
}  // namespace ngramspec::test
