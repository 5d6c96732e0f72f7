// The C ABI's learned costs (ngramspec.h, "Learned verify costs"): a batch made with the cost
// "learn" or "learn:SPEC" learns from the passes it serves (timed, or reported by the engine) and
// emits what plain decoding does; bad input (a NaN time, a report without a pass, an unknown spec,
// settings out of range) is refused naming the value, nothing learned; the text and totals of what
// was learned come back through the caller's buffers; a learned cost on its own plans and observes.

#include "ngramspec/ngramspec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "support/c_api_checks.hpp"

namespace ngramspec::test {
namespace {

struct BatchFree {
  void operator()(ngramspec_batch* b) const noexcept { ngramspec_batch_free(b); }
};
struct LearnedFree {
  void operator()(ngramspec_learned_cost* c) const noexcept { ngramspec_learned_cost_free(c); }
};
using BatchPtr = std::unique_ptr<ngramspec_batch, BatchFree>;
using LearnedPtr = std::unique_ptr<ngramspec_learned_cost, LearnedFree>;

BatchPtr make_batch(const char* cost) {
  ngramspec_batch_config config = ngramspec_batch_config_default();
  config.max_sequences = 4;
  config.cost = cost;
  ngramspec_batch* out = nullptr;
  EXPECT_EQ(ngramspec_batch_create(&config, nullptr, &out), NGRAMSPEC_OK) << ngramspec_last_error();
  return BatchPtr(out);
}

// The model: the token after t is (t + 1) % 10, so a sequence repeats what it said and drafts are accepted.
ngramspec_token next_token(ngramspec_token t) { return (t + 1) % 10; }

std::string describe(const ngramspec_batch* batch) {
  std::size_t length = 0;
  EXPECT_EQ(ngramspec_batch_describe_cost(batch, nullptr, 0, &length), NGRAMSPEC_OK) << ngramspec_last_error();
  std::string text(length + 1, '\0');
  EXPECT_EQ(ngramspec_batch_describe_cost(batch, text.data(), text.size(), &length), NGRAMSPEC_OK);
  text.resize(length);
  return text;
}

// Serves `n_sequences` sequences of `new_tokens` tokens each to the end, every pass reported at
// `seconds(tokens)` when given; returns each sequence's output.
template <class Seconds>
std::vector<std::vector<ngramspec_token>> serve(ngramspec_batch* batch, std::size_t n_sequences,
                                                std::size_t new_tokens, Seconds seconds) {
  std::vector<ngramspec_token> prompt;
  for (ngramspec_token t = 0; t < 24; ++t) prompt.push_back(t % 10);
  ngramspec_sequence_options options = ngramspec_sequence_options_default();
  options.max_new_tokens = new_tokens;
  options.max_drafts = 8;
  std::vector<ngramspec_sequence_id> ids;
  std::vector<std::vector<ngramspec_token>> outputs(n_sequences);
  for (std::size_t i = 0; i < n_sequences; ++i) {
    ids.push_back(i);
    EXPECT_EQ(ngramspec_batch_begin(batch, i, prompt.data(), prompt.size(), &options), NGRAMSPEC_OK)
        << ngramspec_last_error();
  }
  std::vector<ngramspec_token> drafts(64 * n_sequences);
  std::vector<std::size_t> offsets(n_sequences + 1), model_offsets(n_sequences + 1);
  std::vector<ngramspec_token> model;
  std::vector<ngramspec_step> steps(n_sequences);
  while (!ids.empty()) {
    std::size_t n_drafts = 0;
    EXPECT_EQ(ngramspec_batch_propose(batch, ids.data(), ids.size(), drafts.data(), drafts.size(), offsets.data(), 0,
                                      &n_drafts),
              NGRAMSPEC_OK)
        << ngramspec_last_error();
    model.clear();
    model_offsets[0] = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::vector<ngramspec_token>& out = outputs[ids[i]];
      ngramspec_token last = out.empty() ? prompt.back() : out.back();
      model.push_back(next_token(last));
      for (std::size_t j = offsets[i]; j < offsets[i + 1]; ++j) model.push_back(next_token(drafts[j]));
      model_offsets[i + 1] = model.size();
    }
    if constexpr (!std::is_same_v<Seconds, std::nullptr_t>) {
      EXPECT_EQ(ngramspec_batch_report_pass_seconds(batch, seconds(ids.size() + n_drafts)), NGRAMSPEC_OK)
          << ngramspec_last_error();
    }
    EXPECT_EQ(ngramspec_batch_accept(batch, ids.data(), ids.size(), model.data(), model.size(), model_offsets.data(),
                                     steps.data()),
              NGRAMSPEC_OK)
        << ngramspec_last_error();
    std::vector<ngramspec_sequence_id> running;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      for (std::size_t j = 0; j < steps[i].emitted; ++j) outputs[ids[i]].push_back(model[model_offsets[i] + j]);
      if (steps[i].finished != 0) {
        EXPECT_EQ(ngramspec_batch_finish(batch, ids[i]), NGRAMSPEC_OK) << ngramspec_last_error();
      } else {
        running.push_back(ids[i]);
      }
    }
    ids = running;
  }
  return outputs;
}

std::vector<ngramspec_token> plain(std::size_t new_tokens) {
  std::vector<ngramspec_token> out;
  ngramspec_token last = 23 % 10;
  for (std::size_t i = 0; i < new_tokens; ++i) out.push_back(last = next_token(last));
  return out;
}

TEST(CApiLearnedCost, ABatchLearnsFromReportedPassesAndEmitsWhatPlainDecodingDoes) {
  for (const char* cost : {"learn", "learn:knee:256", "learn:table:1=1,2=1.5,4=2.5"}) {
    SCOPED_TRACE(cost);
    const BatchPtr batch = make_batch(cost);
    ASSERT_NE(batch, nullptr);
    EXPECT_EQ(ngramspec_batch_learns_cost(batch.get()), 1);
    EXPECT_EQ(describe(batch.get()), "");  // nothing served yet
    // A pass costs 1 ms plus 0.1 ms a token beyond the first: drafts that are accepted pay.
    const auto outputs =
        serve(batch.get(), 3, 400, [](std::size_t tokens) { return 1e-3 + 1e-4 * double(tokens - 1); });
    for (const auto& out : outputs) EXPECT_EQ(out, plain(400));
    ngramspec_learned_cost_stats stats{};
    ASSERT_C_OK(ngramspec_batch_learned_cost_stats(batch.get(), &stats, sizeof stats));
    ngramspec_batch_stats totals{};
    ASSERT_C_OK(ngramspec_batch_stats_get_sized(batch.get(), &totals, sizeof totals));
    EXPECT_EQ(stats.passes, totals.proposals);  // every pass observed once
    EXPECT_GT(stats.plain_passes, 0u);
    EXPECT_LT(stats.plain_passes, stats.passes);  // it learned to draft
    EXPECT_GT(totals.accepted, 0u);
    EXPECT_GT(stats.seconds, 0.0);
    EXPECT_LE(stats.exploration_seconds, 0.005 * stats.seconds + 1e-3 + 1e-9);  // the bound: plus one pass
    const std::string text = describe(batch.get());
    EXPECT_NE(text.find("sequences: "), std::string::npos) << text;
    EXPECT_NE(text.find(std::string(cost) == "learn" ? "no prior" : "prior"), std::string::npos) << text;
  }
}

TEST(CApiLearnedCost, ABatchTimesItsOwnPassesWithoutReports) {
  const BatchPtr batch = make_batch("learn");
  ASSERT_NE(batch, nullptr);
  const auto outputs = serve(batch.get(), 2, 200, nullptr);
  for (const auto& out : outputs) EXPECT_EQ(out, plain(200));
  ngramspec_learned_cost_stats stats{};
  ASSERT_C_OK(ngramspec_batch_learned_cost_stats(batch.get(), &stats, sizeof stats));
  ngramspec_batch_stats totals{};
  ASSERT_C_OK(ngramspec_batch_stats_get_sized(batch.get(), &totals, sizeof totals));
  EXPECT_EQ(stats.passes, totals.proposals);
}

TEST(CApiLearnedCost, ReportsAreCheckedAndABadOneChangesNothing) {
  const BatchPtr batch = make_batch("learn");
  ASSERT_NE(batch, nullptr);
  EXPECT_INVALID(ngramspec_batch_report_pass_seconds(batch.get(), 1e-3), "ngramspec_batch_report_pass_seconds: ",
                 "no pass proposed");
  EXPECT_INVALID(ngramspec_batch_report_pass_seconds(nullptr, 1e-3), "batch is NULL");
  const ngramspec_token prompt[] = {1, 2, 3};
  ASSERT_C_OK(ngramspec_batch_begin(batch.get(), 7, prompt, 3, nullptr));
  const ngramspec_sequence_id id = 7;
  ngramspec_token drafts[8];
  std::size_t offsets[2];
  std::size_t n = 0;
  ASSERT_C_OK(ngramspec_batch_propose(batch.get(), &id, 1, drafts, 8, offsets, 0, &n));
  for (const double bad : {std::nan(""), 0.0, -1.0, std::numeric_limits<double>::infinity()}) {
    EXPECT_INVALID(ngramspec_batch_report_pass_seconds(batch.get(), bad), "ngramspec_batch_report_pass_seconds: ",
                   "seconds = ", "must be finite and positive");
  }
  ASSERT_C_OK(ngramspec_batch_report_pass_seconds(batch.get(), 2e-3));
  const ngramspec_token model[] = {4};
  const std::size_t model_offsets[] = {0, 1};
  ngramspec_step step{};
  ASSERT_C_OK(ngramspec_batch_accept(batch.get(), &id, 1, model, 1, model_offsets, &step));
  ngramspec_learned_cost_stats stats{};
  ASSERT_C_OK(ngramspec_batch_learned_cost_stats(batch.get(), &stats, sizeof stats));
  EXPECT_EQ(stats.passes, 1u);
  EXPECT_DOUBLE_EQ(stats.seconds, 2e-3);  // the report, not the clock
  EXPECT_INVALID(ngramspec_batch_report_pass_seconds(batch.get(), 1e-3), "no pass proposed");  // accepted already
  EXPECT_INVALID(ngramspec_batch_learned_cost_stats(batch.get(), &stats, 12), "out_size = 12",
                 "ngramspec_learned_cost_stats");
  EXPECT_INVALID(ngramspec_batch_learned_cost_stats(batch.get(), nullptr, sizeof stats), "out is NULL");
}

TEST(CApiLearnedCost, ABatchWithAFixedCostOrNoneDoesNotLearn) {
  const BatchPtr fixed = make_batch("knee:256");
  const BatchPtr none = make_batch(nullptr);
  ASSERT_NE(fixed, nullptr);
  ASSERT_NE(none, nullptr);
  EXPECT_EQ(ngramspec_batch_learns_cost(fixed.get()), 0);
  EXPECT_EQ(ngramspec_batch_learns_cost(none.get()), 0);
  EXPECT_EQ(ngramspec_batch_learns_cost(nullptr), 0);
  EXPECT_EQ(describe(fixed.get()), "knee:256");
  EXPECT_EQ(describe(none.get()), "");
  const ngramspec_token prompt[] = {1, 2, 3};
  ASSERT_C_OK(ngramspec_batch_begin(fixed.get(), 1, prompt, 3, nullptr));
  const ngramspec_sequence_id id = 1;
  ngramspec_token drafts[8];
  std::size_t offsets[2];
  std::size_t n = 0;
  ASSERT_C_OK(ngramspec_batch_propose(fixed.get(), &id, 1, drafts, 8, offsets, 0, &n));
  EXPECT_INVALID(ngramspec_batch_report_pass_seconds(fixed.get(), 1e-3), "does not learn its cost");
  ngramspec_learned_cost_stats stats{};
  EXPECT_INVALID(ngramspec_batch_learned_cost_stats(fixed.get(), &stats, sizeof stats), "does not learn its cost");
}

TEST(CApiLearnedCost, AnUnknownCostSpecIsRefusedByName) {
  ngramspec_batch_config config = ngramspec_batch_config_default();
  ngramspec_batch* out = nullptr;
  config.cost = "learned";
  EXPECT_INVALID(ngramspec_batch_create(&config, nullptr, &out), "ngramspec_batch_create: ", "'learned' is not a cost",
                 "learn:SPEC");
  config.cost = "learn:kne:4";
  EXPECT_INVALID(ngramspec_batch_create(&config, nullptr, &out), "'learn:kne:4': its prior is not a cost", "'kne:4'");
  config.cost = "learn:";
  EXPECT_INVALID(ngramspec_batch_create(&config, nullptr, &out), "'learn:': its prior is not a cost");
  config.cost = "learn:learn";
  EXPECT_INVALID(ngramspec_batch_create(&config, nullptr, &out), "'learn:learn'");
  EXPECT_EQ(out, nullptr);
  ngramspec_verify_cost* fixed = nullptr;
  EXPECT_INVALID(ngramspec_verify_cost_create("learn:knee:4", &fixed), "ngramspec_verify_cost_create: ",
                 "spec = 'learn:knee:4' is not a fixed curve");
  EXPECT_EQ(fixed, nullptr);
}

TEST(CApiLearnedCost, DescribeWritesAsSnprintf) {
  const BatchPtr batch = make_batch("knee:256");
  ASSERT_NE(batch, nullptr);
  char small[5] = {'x', 'x', 'x', 'x', 'x'};
  std::size_t length = 0;
  ASSERT_C_OK(ngramspec_batch_describe_cost(batch.get(), small, sizeof small, &length));
  EXPECT_EQ(length, 8u);
  EXPECT_STREQ(small, "knee");
  EXPECT_INVALID(ngramspec_batch_describe_cost(batch.get(), small, sizeof small, nullptr), "length is NULL");
  EXPECT_INVALID(ngramspec_batch_describe_cost(batch.get(), nullptr, 4, &length), "out is NULL but capacity = 4");
  EXPECT_INVALID(ngramspec_batch_describe_cost(nullptr, small, sizeof small, &length), "batch is NULL");
}

TEST(CApiLearnedCost, ALearnedCostOnItsOwnRefusesBadSettingsByName) {
  ngramspec_learned_cost* out = nullptr;
  EXPECT_INVALID(ngramspec_learned_cost_create(nullptr, 1.5, 128, &out), "ngramspec_learned_cost_create: ",
                 "exploration = 1.5", "between 0 and 1");
  EXPECT_INVALID(ngramspec_learned_cost_create(nullptr, std::nan(""), 128, &out), "exploration = nan");
  EXPECT_INVALID(ngramspec_learned_cost_create(nullptr, 0.005, 1, &out), "plain_every = 1", "at least 2");
  EXPECT_INVALID(ngramspec_learned_cost_create("knee", 0.005, 128, &out),
                 "ngramspec_learned_cost_create: prior 'knee' is not a cost");
  EXPECT_INVALID(ngramspec_learned_cost_create("learn", 0.005, 128, &out), "prior = 'learn' is invalid");
  EXPECT_INVALID(ngramspec_learned_cost_create(nullptr, 0.005, 128, nullptr), "out is NULL");
  EXPECT_EQ(out, nullptr);
}

TEST(CApiLearnedCost, ALearnedCostOnItsOwnPlansPlainFirstThenWhatThePassesPay) {
  ngramspec_learned_cost* out = nullptr;
  ASSERT_C_OK(ngramspec_learned_cost_create("flat", 0.005, 128, &out));
  const LearnedPtr cost(out);
  std::vector<float> p(6, 0.9f);
  std::size_t count = 99;
  // Nothing measured: a plain pass, to learn what one costs.
  ASSERT_C_OK(ngramspec_learned_cost_plan(cost.get(), 1, 1, 1.0, p.data(), p.size(), &count));
  EXPECT_EQ(count, 0u);
  for (int i = 0; i < 3; ++i) ASSERT_C_OK(ngramspec_learned_cost_observe(cost.get(), 1, 1, 1e-3));
  // Every pass costs what a plain one does (the prior says so and the passes agree): all six drafts.
  for (int i = 0; i < 20; ++i) {
    std::fill(p.begin(), p.end(), 0.9f);
    ASSERT_C_OK(ngramspec_learned_cost_plan(cost.get(), 1, 1, 1.0, p.data(), p.size(), &count));
    ASSERT_C_OK(ngramspec_learned_cost_observe(cost.get(), 1, 1 + count, 1e-3));
  }
  EXPECT_EQ(count, 6u);
  ngramspec_learned_cost_stats stats{};
  ASSERT_C_OK(ngramspec_learned_cost_stats_get(cost.get(), &stats, sizeof stats));
  EXPECT_EQ(stats.passes, 23u);
  EXPECT_DOUBLE_EQ(stats.seconds, 23e-3);
  std::size_t length = 0;
  ASSERT_C_OK(ngramspec_learned_cost_describe(cost.get(), nullptr, 0, &length));
  std::string text(length + 1, '\0');
  ASSERT_C_OK(ngramspec_learned_cost_describe(cost.get(), text.data(), text.size(), &length));
  EXPECT_NE(text.find("1 sequences: 23 passes"), std::string::npos) << text;
  // Bad passes are refused by value, nothing learned.
  EXPECT_INVALID(ngramspec_learned_cost_observe(cost.get(), 0, 1, 1e-3), "ngramspec_learned_cost_observe: ",
                 "rows = 0");
  EXPECT_INVALID(ngramspec_learned_cost_observe(cost.get(), 4, 3, 1e-3), "tokens = 3 is below rows = 4");
  EXPECT_INVALID(ngramspec_learned_cost_observe(cost.get(), 1, 1, std::nan("")), "seconds = nan");
  EXPECT_INVALID(ngramspec_learned_cost_observe(nullptr, 1, 1, 1e-3), "cost is NULL");
  EXPECT_INVALID(ngramspec_learned_cost_plan(cost.get(), 1, 1, 0.0, p.data(), p.size(), &count), "base_expected = 0");
  EXPECT_INVALID(ngramspec_learned_cost_plan(cost.get(), 1, 1, 1.0, nullptr, 3, &count), "probabilities is NULL");
  ASSERT_C_OK(ngramspec_learned_cost_stats_get(cost.get(), &stats, sizeof stats));
  EXPECT_EQ(stats.passes, 23u);
  ngramspec_learned_cost_free(nullptr);  // does nothing
}

}  // namespace
}  // namespace ngramspec::test
