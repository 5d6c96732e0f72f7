#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ngramspec/argument_error.hpp"
#include "ngramspec/decode_step.hpp"
#include "ngramspec/detail/number_text.hpp"
#include "ngramspec/draft_distribution.hpp"
#include "ngramspec/drafter.hpp"
#include "ngramspec/token.hpp"
#include "ngramspec/verify_cost.hpp"

namespace ngramspec {

/// Configuration of a BestOfDrafter; validated by its constructor.
struct BestOfConfig {
  /// What drafting one token costs the first drafter, in one-token verify passes (0: free, as
  /// for the n-gram drafters, whose work is nanoseconds against a model's milliseconds).
  double first_draft_cost = 0.0;
  /// The same for the second (a draft model: about its parameters over the target's; the
  /// llama2 example's early exit of L of n layers costs about L / n).
  double second_draft_cost = 0.0;
  /// After this many passes in a row without it, the second drafter is tried once, so that its
  /// record follows the text (0: never); each try doubles the wait for the next, up to 1024
  /// passes, and a pass it wins on its record resets it. A draft model tried pays for every
  /// token it fell behind, so a try waits until that costs at most 16 passes (second_draft_cost
  /// times the tokens: at the start of a request, say), and is skipped when even all of its
  /// drafts accepted could not beat the first's choice under the cost (where no pass of drafts
  /// pays). Default 16.
  std::size_t explore_every = 16;
  /// Whether a pass may also send the first's drafts continued by the second (a second with
  /// continue_drafts(): ModelDrafter), when that promises more: the text's copy, then the
  /// model's guesses after it. Its record is kept apart from the second's own. Default true.
  bool continue_first = true;
};

/// A drafter that can continue another's drafts (ModelDrafter::continue_drafts).
template <class D>
concept ContinuingDrafter = requires(const D& d, std::span<const Token> given, std::span<Token> out,
                                     std::span<float> probabilities, DraftDistributions* q) {
  { d.continue_drafts(given, out, probabilities, q) } -> std::convertible_to<std::size_t>;
};

/// Each pass, the better of two drafters, by the tokens a pass is expected to emit per unit of
/// what it costs, drafting included: a text drafter beside a draft model, say, each sending
/// what it does best (a copy where the text repeats, the model's guesses elsewhere).
///
/// The first drafter is asked every pass (it should be the cheap one: MatchDrafter); its
/// estimates give the value of its best prefix, (1 + the sum of its estimates) over the pass's
/// cost (VerifyCost::pass, or one pass a token without a cost) plus first_draft_cost a draft.
/// The second is valued by its record (its drafts and accepted drafts per pass, averaged over
/// the passes it drafted, and optimistic until it has drafted; a pass of n of its drafts costs
/// it n + 1 rows, the last emitted token's and one a draft) and asked only when it wins, so a
/// draft model runs only on the passes it drafts for. The choice depends on the first's
/// drafts and on what happened before the pass, never on what the second would draw: a
/// drawn draft's presence may not depend on its own token (docs/SAMPLING.md, "What a decoder
/// may cut"), so rejection sampling stays exact.
///
/// A third choice, when the second can continue another's drafts (ContinuingDrafter) and
/// BestOfConfig::continue_first allows it: the first's drafts followed by the second's
/// continuation of them, valued as the first's full draft plus the chance that all of it is
/// accepted times what the continuations' record says they add (optimistic until one was sent
/// after a fully accepted text draft), its cost the pass's plus the second's rows (the tokens it
/// is behind, the first's drafts, one a continuation draft). It is tried on the same schedule as
/// the second when it keeps losing.
///
/// Both drafters observe every token (update, reset), so either can draft at any pass. Drafts
/// with distributions (DistributionDrafter): the chosen drafter's, or one-hot for one that
/// gives none (a continued pass: one-hot for the first's part, the second's for its own).
/// tally() says, per source, how many passes it drafted for, what it drafted and what was
/// accepted; a continued pass also says how much of that was the second's continuation, so
/// every accepted token is credited to the drafter that proposed it.
///
/// Both drafters are borrowed and must outlive this one. predict() is const in the Drafter
/// concept; it records which drafter drafted, for the next update(). Memory: one token a draft
/// of room, at construction; update() and predict() allocate nothing.
/// Thread safety: none; one per sequence.
template <EstimatingDrafter First, EstimatingDrafter Second>
class BestOfDrafter {
 public:
  /// Which drafter drafted a pass.
  enum class Source : std::uint8_t { none, first, second, continued };
  /// What one source did.
  struct Tally {
    std::uint64_t passes = 0;    ///< passes it drafted for
    std::uint64_t drafted = 0;   ///< drafts it proposed
    std::uint64_t accepted = 0;  ///< of them, accepted (the prefix the next tokens confirmed)
    std::uint64_t continuation_drafted = 0;   ///< continued: of the drafts, the second's continuation
    std::uint64_t continuation_accepted = 0;  ///< continued: of the accepted, the second's continuation
  };

  /// Throws std::invalid_argument naming the field and its value for a draft cost that is
  /// negative or not finite.
  BestOfDrafter(First& first, Second& second, std::optional<VerifyCost> cost = std::nullopt,
                BestOfConfig config = {})
      : first_(&first), second_(&second), cost_(std::move(cost)), config_(config) {
    const auto check = [](const char* field, double value) {
      if (!(value >= 0.0 && value < std::numeric_limits<double>::infinity())) {
        throw ArgumentError("ngramspec", std::string("BestOfConfig::") + field + " = " + detail::number_text(value) +
                                             " is invalid; it must be finite and >= 0");
      }
    };
    check("first_draft_cost", config_.first_draft_cost);
    check("second_draft_cost", config_.second_draft_cost);
    drafts_.resize(kMaxDraftsPerPass);
    probabilities_.resize(kMaxDraftsPerPass);
    second_tries_.wait = continued_tries_.wait = std::max<std::size_t>(config_.explore_every, 1);
  }

  void update(Token token) { update(std::span<const Token>(&token, 1)); }
  void update(std::span<const Token> tokens) {
    settle(tokens);
    behind_ += tokens.size();
    first_->update(tokens);
    second_->update(tokens);
  }
  void reset() {
    first_->reset();
    second_->reset();
    source_ = Source::none;
    given_ = 0;
    behind_ = 0;
  }

  [[nodiscard]] std::size_t predict(std::span<Token> out) const {
    return choose(out, std::span<float>(probabilities_).first(std::min(out.size(), probabilities_.size())), nullptr);
  }
  [[nodiscard]] std::size_t predict(std::span<Token> out, std::span<float> probabilities) const {
    return choose(out, probabilities, nullptr);
  }
  /// DistributionDrafter: the chosen drafter's distributions, one-hot for one that gives none.
  [[nodiscard]] std::size_t predict(std::span<Token> out, std::span<float> probabilities,
                                    DraftDistributions& q) const {
    return choose(out, probabilities, &q);
  }

  /// What each source did since construction (or reset_tally()).
  [[nodiscard]] const Tally& tally(Source source) const noexcept {
    return source == Source::second ? second_tally_ : source == Source::continued ? continued_tally_ : first_tally_;
  }
  void reset_tally() noexcept { first_tally_ = second_tally_ = continued_tally_ = {}; }
  /// The source of the last predict() (none before any, or when neither drafted).
  [[nodiscard]] Source last_source() const noexcept { return source_; }
  [[nodiscard]] const BestOfConfig& config() const noexcept { return config_; }
  /// The two drafters (to set a drawing drafter's seed per request, say).
  [[nodiscard]] First& first() noexcept { return *first_; }
  [[nodiscard]] Second& second() noexcept { return *second_; }

 private:
  // A pass of `drafts` drafts: its cost in one-token passes, drafting included.
  [[nodiscard]] double pass_cost(std::size_t drafts, double draft_cost, std::size_t made) const noexcept {
    const double verify = cost_ ? cost_->pass(1, drafts) : 1.0;
    return verify + draft_cost * static_cast<double>(made);
  }

  std::size_t choose(std::span<Token> out, std::span<float> probabilities, DraftDistributions* q) const {
    if (q != nullptr) q->clear();
    source_ = Source::none;
    given_ = 0;
    const std::size_t room = std::min({out.size(), probabilities.size(), drafts_.size()});
    if (room == 0) return 0;
    // The first's best prefix.
    const std::size_t made = std::min(first_->predict(out.first(room), probabilities.first(room)), room);
    double first_value = 1.0 / pass_cost(0, config_.first_draft_cost, made);
    double expected = 1.0;
    for (std::size_t n = 1; n <= made; ++n) {
      expected += static_cast<double>(probabilities[n - 1]);
      first_value = std::max(first_value, expected / pass_cost(n, config_.first_draft_cost, made));
    }
    // The second's record, optimistic (its room all accepted) until it has drafted. A draft
    // model asked for n drafts runs the rows it is behind (the tokens emitted since it last
    // drafted), then one a draft.
    double second_value = 0.0;
    if (second_passes_ == 0) {
      second_value = static_cast<double>(room + 1) / pass_cost(room, config_.second_draft_cost, room + behind_);
    } else {
      const double sent = second_drafted_ / second_passes_;
      const auto n = static_cast<std::size_t>(sent + 0.5);
      second_value =
          (1.0 + second_accepted_ / second_passes_) / pass_cost(n, config_.second_draft_cost, n + behind_);
    }
    // The first's whole draft continued by the second: what the text promises, plus the chance
    // it is all accepted times what continuations added after fully accepted text drafts (their
    // room, until one was). The second feeds the rows it is behind and the first's drafts.
    double continued_value = 0.0;
    const bool can_continue = ContinuingDrafter<Second> && config_.continue_first && made > 0 && made < room;
    if (can_continue) {
      const double room_left = static_cast<double>(room - made);
      const double sent = continued_passes_ == 0 ? room_left : std::min(room_left, continued_drafted_ / continued_passes_);
      const double gained = continued_passes_ == 0 ? room_left : continued_accepted_ / continued_passes_;
      const auto c = static_cast<std::size_t>(sent + 0.5);
      const double all = static_cast<double>(probabilities[made - 1]);
      continued_value = (expected + all * gained) / (pass_cost(made + c, config_.first_draft_cost, made) +
                                                     config_.second_draft_cost * static_cast<double>(behind_ + made + c));
    }
    Source choice = Source::first;
    if (second_value > first_value) choice = Source::second;
    if (continued_value > std::max(first_value, second_value)) choice = Source::continued;
    // The second (or a continuation) is tried now and then when it keeps losing, so that its
    // record follows the text (the first's estimates are read afresh every pass); each try
    // doubles the wait for the next and a pass it wins on its record resets it, and a try waits
    // until catching up costs at most kTryBudget passes (a new request's prompt, say), since it
    // feeds every token the second fell behind. A try is skipped when it could never win, not
    // even with every draft it adds accepted and nothing to catch up (a CPU where a pass of
    // drafts costs about a pass a token, say): it would spend the second's rows and the pass's
    // for nothing.
    const auto second_could_win = [&] {
      for (std::size_t k = 1; k <= room; ++k) {
        if (static_cast<double>(k + 1) / pass_cost(k, config_.second_draft_cost, k) > first_value) return true;
      }
      return false;
    };
    const auto continuation_could_win = [&] {
      const double all = static_cast<double>(probabilities[made - 1]);
      for (std::size_t c = 1; c <= room - made; ++c) {
        const double all_accepted =
            (expected + all * static_cast<double>(c)) /
            (pass_cost(made + c, config_.first_draft_cost, made) +
             config_.second_draft_cost * static_cast<double>(made + c));
        if (all_accepted > first_value) return true;
      }
      return false;
    };
    bool explored = false;
    if (choice == Source::first && config_.explore_every != 0) {
      if (second_tries_.idle >= second_tries_.wait &&
          config_.second_draft_cost * static_cast<double>(behind_) <= kTryBudget && second_could_win()) {
        choice = Source::second;
        explored = true;
      } else if (can_continue && continued_tries_.idle >= continued_tries_.wait &&
                 config_.second_draft_cost * static_cast<double>(behind_ + made) <= kTryBudget &&
                 continuation_could_win()) {
        choice = Source::continued;
        explored = true;
      }
    }
    std::size_t n = made;
    if (choice == Source::second) {
      if constexpr (DistributionDrafter<Second>) {
        if (q != nullptr) {
          n = std::min(second_->predict(out.first(room), probabilities.first(room), *q), room);
        } else {
          n = std::min(second_->predict(out.first(room), probabilities.first(room)), room);
        }
      } else {
        n = std::min(second_->predict(out.first(room), probabilities.first(room)), room);
      }
      source_ = Source::second;
      behind_ = 0;
      second_tries_.chosen(explored, config_.explore_every);
    } else if (choice == Source::continued) {
      if constexpr (ContinuingDrafter<Second>) {
        const std::size_t c = std::min(
            second_->continue_drafts(out.first(made), out.subspan(made, room - made),
                                     probabilities.subspan(made, room - made), q),
            room - made);
        // The continuation's estimates are given the text's draft: chances of the whole prefix.
        for (std::size_t i = made; i < made + c; ++i) probabilities[i] *= probabilities[made - 1];
        n = made + c;
        if (q != nullptr && q->size() != n) {
          q->clear();
          for (std::size_t i = 0; i < n; ++i) q->push_one_hot();
        }
        source_ = Source::continued;
        given_ = made;
        behind_ = 0;
        continued_tries_.chosen(explored, config_.explore_every);
      }
    } else {
      source_ = made > 0 ? Source::first : Source::none;
    }
    if (q != nullptr && source_ != Source::continued && (source_ != Source::second || !DistributionDrafter<Second>)) {
      for (std::size_t i = 0; i < n; ++i) q->push_one_hot();
    }
    std::copy_n(out.begin(), n, drafts_.begin());
    drafted_ = n;
    return n;
  }

  // The tokens after a pass: how many of the chosen source's drafts they confirmed.
  void settle(std::span<const Token> tokens) noexcept {
    const Source source = source_;
    source_ = Source::none;
    if (source != Source::second) ++second_tries_.idle;
    if (source != Source::continued) ++continued_tries_.idle;
    // A pass without drafts (or the prompt): the second sat it out.
    if (source == Source::none) return;
    std::size_t accepted = 0;
    while (accepted < drafted_ && accepted < tokens.size() && tokens[accepted] == drafts_[accepted]) ++accepted;
    Tally& t = source == Source::second ? second_tally_ : source == Source::continued ? continued_tally_ : first_tally_;
    ++t.passes;
    t.drafted += drafted_;
    t.accepted += accepted;
    // A record that follows the text: each pass weighs 1/16 once there are 16.
    const auto remember = [](double& passes, double& drafted, double& kept, double sent, double accepted_now) {
      const double keep = passes >= kMemory ? 1.0 - 1.0 / kMemory : 1.0;
      passes = passes * keep + 1.0;
      drafted = drafted * keep + sent;
      kept = kept * keep + accepted_now;
    };
    if (source == Source::second) {
      remember(second_passes_, second_drafted_, second_accepted_, static_cast<double>(drafted_),
               static_cast<double>(accepted));
      second_tries_.idle = 0;
    } else if (source == Source::continued) {
      const std::size_t continuation = drafted_ - given_;
      t.continuation_drafted += continuation;
      t.continuation_accepted += accepted > given_ ? accepted - given_ : 0;
      continued_tries_.idle = 0;
      // Only a fully accepted text draft tested the continuation.
      if (accepted >= given_ && continuation > 0) {
        remember(continued_passes_, continued_drafted_, continued_accepted_, static_cast<double>(continuation),
                 static_cast<double>(accepted - given_));
      }
    }
  }

  // When a source that keeps losing is tried: after `wait` passes in a row without it.
  struct TrySchedule {
    std::size_t idle = 0;  // passes in a row it did not draft for
    std::size_t wait = 0;  // passes it waits before a try
    // It drafts this pass: a try doubles the wait for the next (up to kMaxWait); a pass won on
    // its record resets it.
    void chosen(bool explored, std::size_t explore_every) noexcept {
      wait = explored ? std::min(2 * wait, kMaxWait) : std::max<std::size_t>(explore_every, 1);
    }
  };

  static constexpr double kMemory = 16.0;
  static constexpr std::size_t kMaxWait = 1024;
  static constexpr double kTryBudget = 16.0;  // one-token passes a try may spend catching up

  First* first_;
  Second* second_;
  std::optional<VerifyCost> cost_;
  BestOfConfig config_;
  mutable std::vector<Token> drafts_;  // the last pass's drafts
  mutable std::vector<float> probabilities_;
  mutable std::size_t drafted_ = 0;
  mutable Source source_ = Source::none;
  Tally first_tally_;
  Tally second_tally_;
  Tally continued_tally_;
  double second_passes_ = 0.0;  // the second's record, decayed
  double second_drafted_ = 0.0;
  double second_accepted_ = 0.0;
  double continued_passes_ = 0.0;  // the continuations' record after fully accepted text drafts
  double continued_drafted_ = 0.0;
  double continued_accepted_ = 0.0;
  mutable TrySchedule second_tries_;
  mutable TrySchedule continued_tries_;
  mutable std::size_t given_ = 0;   // a continued pass: the first's drafts leading it
  mutable std::size_t behind_ = 0;  // tokens observed since the second last drafted
};

}  // namespace ngramspec
