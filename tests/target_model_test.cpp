#include "ngramspec/target_model.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ngramspec/drafter.hpp"
#include "ngramspec/ngram_predictor.hpp"
#include "ngramspec/speculative_decoder.hpp"
#include "support/mock_models.hpp"
#include "support/test_drafters.hpp"

namespace ngramspec::test {
namespace {

using ::testing::_;
using ::testing::ElementsAre;
using ::testing::InSequence;
using ::testing::IsEmpty;
using ::testing::Return;
using ::testing::SizeIs;
using ::testing::StrictMock;

// --- The TargetModel concept -------------------------------------------------------------

static_assert(TargetModel<AbstractTargetModel>);
static_assert(TargetModel<GreedyModel>);
static_assert(TargetModel<VirtualGreedyModel>);
static_assert(TargetModel<MockTargetModel>);
static_assert(TargetModel<StrictMock<MockTargetModel>>);
static_assert(std::is_abstract_v<AbstractTargetModel>);
static_assert(std::has_virtual_destructor_v<AbstractTargetModel>);
static_assert(!TargetModel<int>);

struct NoRollback {
  void forward(std::size_t, std::span<const Token>, std::span<Token>) {}
  [[nodiscard]] std::size_t max_batch() const { return 1; }
};
struct NoForward {
  void rollback(std::size_t) {}
  [[nodiscard]] std::size_t max_batch() const { return 1; }
};
struct NoMaxBatch {
  void forward(std::size_t, std::span<const Token>, std::span<Token>) {}
  void rollback(std::size_t) {}
};
struct MutableMaxBatch {  // max_batch() must be callable on a const model
  void forward(std::size_t, std::span<const Token>, std::span<Token>) {}
  void rollback(std::size_t) {}
  [[nodiscard]] std::size_t max_batch() { return 1; }
};
struct VoidMaxBatch {
  void forward(std::size_t, std::span<const Token>, std::span<Token>) {}
  void rollback(std::size_t) {}
  void max_batch() const {}
};
struct StringMaxBatch {
  void forward(std::size_t, std::span<const Token>, std::span<Token>) {}
  void rollback(std::size_t) {}
  [[nodiscard]] std::string max_batch() const { return "1"; }
};
struct VectorForward {  // the decoder hands out spans, not vectors
  void forward(std::size_t, const std::vector<Token>&, std::vector<Token>&) {}
  void rollback(std::size_t) {}
  [[nodiscard]] std::size_t max_batch() const { return 1; }
};
struct WritesItsInput {  // the fed tokens are read-only
  void forward(std::size_t, std::span<Token>, std::span<Token>) {}
  void rollback(std::size_t) {}
  [[nodiscard]] std::size_t max_batch() const { return 1; }
};

static_assert(!TargetModel<NoRollback>);
static_assert(!TargetModel<NoForward>);
static_assert(!TargetModel<NoMaxBatch>);
static_assert(!TargetModel<MutableMaxBatch>);
static_assert(!TargetModel<VoidMaxBatch>);
static_assert(!TargetModel<StringMaxBatch>);
static_assert(!TargetModel<VectorForward>);
static_assert(!TargetModel<WritesItsInput>);

/// A model whose max_batch() returns int: convertible to std::size_t, so it qualifies.
class IntBatchModel {
 public:
  explicit IntBatchModel(NextTokenRule rule) : inner_(std::move(rule), 3) {}
  void forward(std::size_t pos, std::span<const Token> tokens, std::span<Token> next) {
    inner_.forward(pos, tokens, next);
  }
  void rollback(std::size_t pos) { inner_.rollback(pos); }
  [[nodiscard]] int max_batch() const { return 3; }
  [[nodiscard]] const GreedyModel& inner() const { return inner_; }

 private:
  GreedyModel inner_;
};
static_assert(TargetModel<IntBatchModel>);

// --- The Drafter concept -------------------------------------------------------------------

static_assert(Drafter<NGramPredictor>);
static_assert(Drafter<SilentDrafter>);
static_assert(Drafter<OracleDrafter>);
static_assert(Drafter<AnyDrafter>);
static_assert(!Drafter<int>);

struct DrafterNoReset {
  void update(Token) {}
  void update(std::span<const Token>) {}
  [[nodiscard]] std::size_t predict(std::span<Token>) const { return 0; }
};
struct DrafterMutablePredict {  // proposing must not change the drafter
  void update(Token) {}
  void update(std::span<const Token>) {}
  [[nodiscard]] std::size_t predict(std::span<Token>) { return 0; }
  void reset() {}
};
struct DrafterVoidPredict {
  void update(Token) {}
  void update(std::span<const Token>) {}
  void predict(std::span<Token>) const {}
  void reset() {}
};
struct DrafterOnlyTokenUpdate {
  void update(Token) {}
  [[nodiscard]] std::size_t predict(std::span<Token>) const { return 0; }
  void reset() {}
};
struct DrafterOnlySpanUpdate {
  void update(std::span<const Token>) {}
  [[nodiscard]] std::size_t predict(std::span<Token>) const { return 0; }
  void reset() {}
};
struct DrafterVectorPredict {
  void update(Token) {}
  void update(std::span<const Token>) {}
  [[nodiscard]] std::size_t predict(std::vector<Token>&) const { return 0; }
  void reset() {}
};
struct DrafterIntPredict {  // a count convertible to std::size_t is fine
  void update(Token) {}
  void update(std::span<const Token>) {}
  [[nodiscard]] int predict(std::span<Token>) const { return 0; }
  void reset() {}
};

static_assert(!Drafter<DrafterNoReset>);
static_assert(!Drafter<DrafterMutablePredict>);
static_assert(!Drafter<DrafterVoidPredict>);
static_assert(!Drafter<DrafterOnlyTokenUpdate>);
static_assert(!Drafter<DrafterOnlySpanUpdate>);
static_assert(!Drafter<DrafterVectorPredict>);
static_assert(Drafter<DrafterIntPredict>);

// --- Deduction ---------------------------------------------------------------------------

TEST(SpeculativeDecoderDeduction, DeducesModelAndDrafterTypes) {
  GreedyModel model(AffineRule{}, 4);
  SpeculativeDecoder decoder(model);
  static_assert(std::is_same_v<decltype(decoder), SpeculativeDecoder<GreedyModel, MatchDrafter>>);
  EXPECT_EQ(&decoder.model(), &model);

  VirtualGreedyModel concrete(AffineRule{}, 4);
  AbstractTargetModel& base = concrete;
  SpeculativeDecoder dynamic(base);
  static_assert(std::is_same_v<decltype(dynamic), SpeculativeDecoder<AbstractTargetModel, MatchDrafter>>);
  EXPECT_EQ(&dynamic.model(), &base);

  SpeculativeDecoder oracle(model, OracleDrafter(AffineRule{}));
  static_assert(std::is_same_v<decltype(oracle), SpeculativeDecoder<GreedyModel, OracleDrafter>>);

  SpeculativeDecoder configured(model, NGramPredictor(NGramConfig{.min_order = 2, .max_order = 3, .max_drafts = 2}));
  EXPECT_EQ(configured.drafter().config().max_drafts, 2U);
  EXPECT_EQ(std::as_const(configured).drafter().config().max_order, 3U);
}

// --- Run-time polymorphism -----------------------------------------------------------------

TEST(AbstractTargetModel, DecoderOverBaseReferenceMatchesTheConcreteInstantiation) {
  for (std::uint64_t seed = 300'000; seed < 300'000 + 120; ++seed) {
    const DecodeCase c = random_decode_case(seed);
    SCOPED_TRACE(c.describe());

    VirtualGreedyModel behind_base(c.rule.rule, c.max_batch);
    AbstractTargetModel& base = behind_base;
    SpeculativeDecoder<AbstractTargetModel, AnyDrafter> dynamic(base, make_any_drafter(c));
    const DecodeResult via_base = dynamic.generate(c.prompt, c.options);

    VirtualGreedyModel concrete(c.rule.rule, c.max_batch);
    SpeculativeDecoder<VirtualGreedyModel, AnyDrafter> direct(concrete, make_any_drafter(c));
    const DecodeResult via_concrete = direct.generate(c.prompt, c.options);

    GreedyModel plain(c.rule.rule, c.max_batch);
    SpeculativeDecoder<GreedyModel, AnyDrafter> non_virtual(plain, make_any_drafter(c));
    const DecodeResult via_template = non_virtual.generate(c.prompt, c.options);

    ASSERT_EQ(via_base.tokens, plain_greedy(c.rule.rule, c.prompt, c.options).tokens);
    EXPECT_EQ(via_base.tokens, via_concrete.tokens);
    EXPECT_EQ(via_base.tokens, via_template.tokens);
    EXPECT_EQ(via_base.stop_reason, via_template.stop_reason);
    EXPECT_EQ(via_base.stats.decode_passes, via_template.stats.decode_passes);
    EXPECT_EQ(via_base.stats.accepted_at, via_template.stats.accepted_at);
    // The calls reached the subclass, the same calls the template made.
    EXPECT_EQ(behind_base.inner().forward_calls(), plain.forward_calls());
    EXPECT_EQ(behind_base.inner().rollback_calls(), plain.rollback_calls());
    EXPECT_EQ(behind_base.inner().history(), plain.history());
    EXPECT_THAT(behind_base.inner().violations(), IsEmpty());
    if (::testing::Test::HasFailure()) break;
  }
}

TEST(AbstractTargetModel, GoogleMockSubclassIsDrivenThroughTheBase) {
  StrictMock<MockTargetModel> mock;
  AbstractTargetModel& base = mock;
  SpeculativeDecoder decoder(base, SilentDrafter{});
  EXPECT_CALL(mock, max_batch()).WillRepeatedly(Return(4));
  {
    InSequence in_order;
    EXPECT_CALL(mock, rollback(0));
    EXPECT_CALL(mock, forward(0, TokensAre(ElementsAre(1, 2)), SizeIs(2))).WillOnce(WriteNext({0, 3}));
    EXPECT_CALL(mock, forward(2, TokensAre(ElementsAre(3)), _)).WillOnce(WriteNext({4}));
  }
  DecodeOptions options;
  options.max_new_tokens = 2;
  const std::vector<Token> prompt = {1, 2};
  EXPECT_EQ(decoder.generate(prompt, options).tokens, (std::vector<Token>{3, 4}));
}

TEST(TargetModelConcept, IntMaxBatchModelDecodes) {
  const HashRule rule{10, 2, 7, true};
  IntBatchModel model(rule);
  SpeculativeDecoder decoder(model);
  DecodeOptions options;
  options.max_new_tokens = 40;
  const std::vector<Token> prompt = {1, 2, 3, 4, 5, 6, 7};
  const DecodeResult result = decoder.generate(prompt, options);
  EXPECT_EQ(result.tokens, plain_greedy(rule, prompt, 40));
  EXPECT_EQ(result.stats.prefill_passes, 3U);
  EXPECT_THAT(model.inner().violations(), IsEmpty());
}

}  // namespace
}  // namespace ngramspec::test
