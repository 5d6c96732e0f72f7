#include "ngramspec/ngram_predictor.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>

#include "ngramspec/detail/fnv1a.hpp"

namespace ngramspec {
namespace {

[[noreturn]] void invalid(const char* field, std::size_t value, const std::string& requirement) {
  throw std::invalid_argument(std::string("ngramspec::NGramConfig: ") + field + " = " + std::to_string(value) +
                              " is invalid: " + requirement);
}

NGramConfig validated(NGramConfig config) {
  if (config.min_order < 2) invalid("min_order", config.min_order, "must be at least 2 (a bigram)");
  if (config.max_order < config.min_order) {
    invalid("max_order", config.max_order, "must be at least min_order (" + std::to_string(config.min_order) + ")");
  }
  if (config.max_order > NGramPredictor::kMaxSupportedOrder) {
    invalid("max_order", config.max_order, "must be at most " + std::to_string(NGramPredictor::kMaxSupportedOrder));
  }
  if (config.draft_count == 0) invalid("draft_count", config.draft_count, "must be at least 1");
  if (config.window < config.max_order) {
    invalid("window", config.window, "must be at least max_order (" + std::to_string(config.max_order) + ")");
  }
  if (config.window > NGramPredictor::kMaxWindow) {
    invalid("window", config.window, "must be at most " + std::to_string(NGramPredictor::kMaxWindow));
  }
  return config;
}

}  // namespace

NGramPredictor::NGramPredictor(NGramConfig config)
    : config_(validated(config)),
      tokens_(config_.window),
      recorded_(config_.window),
      previous_(config_.window * (config_.max_order - config_.min_order + 1)),
      scratch_(config_.window * (config_.max_order - config_.min_order + 1)),
      hash_stride_(config_.max_order - config_.min_order + 2),
      hashes_(hash_stride_ * config_.window),
      tables_(config_.max_order - config_.min_order + 1) {
  // A window of W tokens holds at most W n-grams of each order, hence at most W distinct
  // n-grams and W distinct contexts: the tables never grow.
  for (OrderTables& tables : tables_) {
    tables.ngrams = detail::OpenTable<NGramCount>(config_.window);
    tables.contexts = detail::OpenTable<ContextStats>(config_.window);
  }
  reset();
}

void NGramPredictor::reset() noexcept {
  for (OrderTables& tables : tables_) {
    tables.ngrams.clear();
    tables.contexts.clear();
  }
  suffix_.fill(detail::kFnvOffsetBasis);
  head_ = 0;
  seen_ = 0;
}

bool NGramPredictor::in_window(std::size_t order, std::uint32_t end_position) const noexcept {
  // During update() of the token at seen_, after the n-grams starting at seen_ - window
  // left: an n-gram counts if it starts at or after max(0, seen_ - window + 1).
  const std::uint64_t age = static_cast<std::uint32_t>(static_cast<std::uint32_t>(seen_) - end_position);
  return age + order <= config_.window && age + order - 1 <= seen_;
}

void NGramPredictor::record(std::size_t order, std::size_t end_slot, std::uint32_t end_position) noexcept {
  // Records the occurrence whose n-gram of this order ends at end_slot, then, if its context
  // has had two continuations, the same occurrence one order up. Occurrences of one context
  // are recorded oldest first, so the latest one is always the one recorded last.
  const std::size_t index = order - config_.min_order;
  OrderTables& tables = tables_[index];
  const std::size_t context_slot = end_slot == 0 ? config_.window - 1 : end_slot - 1;
  const std::uint64_t context_key = hash_at(order - 1, context_slot);
  const Token token = tokens_[end_slot];
  ContextStats& context = tables.contexts.find_or_insert(context_key);
  const std::uint32_t before_total = context.total;
  const std::uint32_t before_last = context.last;
  previous_[end_slot * tables_.size() + index] = before_last;
  recorded_[end_slot] |= order_bit(index);
  context.last = end_position;

  bool second_continuation = false;
  if (before_total == 0) {
    context.total = 1;
    context.best = token;
    context.best_count = 0;
    context.runner_up = 0;
  } else if (context.best_count == 0 && token == context.best) {
    ++context.total;
  } else {
    if (context.best_count == 0) {
      // A second continuation: from now on continuations are counted one by one.
      NGramCount& first = tables.ngrams.find_or_insert(detail::fnv1a_step(context_key, context.best));
      first.count = context.total;
      first.last = before_last;
      context.best_count = context.total;
      context.runner_up = 0;
      second_continuation = true;
    }
    NGramCount& ngram = tables.ngrams.find_or_insert(hash_at(order, end_slot));
    ++ngram.count;
    ngram.last = end_position;
    ++context.total;
    // The continuation just recorded is the most recent one, so it wins every tie.
    if (ngram.count >= context.best_count) {
      if (token != context.best) context.runner_up = context.best_count;
      context.best = token;
      context.best_count = ngram.count;
    } else {
      context.runner_up = std::max(context.runner_up, ngram.count);
    }
  }

  if (order == config_.max_order || context.best_count == 0) return;
  // The context has had two continuations: every occurrence of it is recorded one order up,
  // the earlier ones now, when the second continuation has just appeared.
  if (second_continuation) record_all(order + 1, before_last, before_total);
  if (in_window(order + 1, end_position)) record(order + 1, end_slot, end_position);
}

void NGramPredictor::record_all(std::size_t order, std::uint32_t newest_end, std::uint32_t count) noexcept {
  // The `count` occurrences ending at newest_end and before it (a chain one order down) are
  // recorded at `order`, oldest first, those whose n-gram of this order lies in the window.
  const std::size_t index = order - config_.min_order;
  const std::size_t chain = index - 1;  // the chain of the context one order down
  std::uint32_t* const ends = &scratch_[index * config_.window];
  std::uint32_t end = newest_end;
  for (std::uint32_t i = 0; i < count; ++i) {
    ends[i] = end;
    end = previous_[slot_of(end) * tables_.size() + chain];
  }
  for (std::uint32_t i = count; i-- > 0;) {
    const std::size_t slot = slot_of(ends[i]);
    if ((recorded_[slot] & order_bit(index)) == 0 && in_window(order, ends[i])) record(order, slot, ends[i]);
  }
}

void NGramPredictor::remove(std::size_t order, std::size_t end_slot) noexcept {
  // Precondition: the n-gram ending at end_slot is recorded at this order.
  recorded_[end_slot] &= static_cast<std::uint8_t>(~order_bit(order - config_.min_order));
  OrderTables& tables = tables_[order - config_.min_order];
  const std::size_t context_slot = end_slot == 0 ? config_.window - 1 : end_slot - 1;
  ContextStats* const context = tables.contexts.find(hash_at(order - 1, context_slot));
  if (context->best_count == 0) {
    if (--context->total == 0) tables.contexts.erase(*context);
    return;
  }
  NGramCount* const ngram = tables.ngrams.find(hash_at(order, end_slot));
  const std::uint32_t count = --ngram->count;
  if (count == 0) tables.ngrams.erase(*ngram);
  if (--context->total == 0) {
    tables.contexts.erase(*context);
    return;
  }
  if (context->best != tokens_[end_slot]) return;  // runner_up stays an upper bound
  // The window drops the oldest occurrence, so the latest occurrence of what stays does not
  // change: only the winner losing one can change the winner, and only if no longer ahead of
  // every other continuation (of which none has more than runner_up, nor than the rest).
  context->best_count = count;
  if (count <= std::min(context->runner_up, context->total - count)) rescan_best(order, *context);
}

void NGramPredictor::rescan_best(std::size_t order, ContextStats& context) noexcept {
  // Walks the context's counted occurrences, newest first: the chain from `last` through
  // previous_ holds exactly `total` of them, as evictions drop the oldest.
  const std::size_t index = order - config_.min_order;
  const std::size_t orders = tables_.size();
  const OrderTables& tables = tables_[index];
  const auto now = static_cast<std::uint32_t>(seen_);
  Token best = 0;
  std::uint32_t best_count = 0;
  std::uint32_t best_age = 0;
  std::uint32_t runner_up = 0;
  std::uint32_t end_position = context.last;
  for (std::uint32_t i = 0; i < context.total; ++i) {
    const std::size_t end = slot_of(end_position);
    end_position = previous_[end * orders + index];
    const Token token = tokens_[end];
    if (best_count != 0 && token == best) continue;
    const NGramCount* ngram = tables.ngrams.find(hash_at(order, end));
    const std::uint32_t age = now - ngram->last;
    if (ngram->count > best_count || (ngram->count == best_count && age < best_age)) {
      runner_up = std::max(runner_up, best_count);
      best = token;
      best_count = ngram->count;
      best_age = age;
    } else {
      runner_up = std::max(runner_up, ngram->count);
    }
  }
  context.best = best;
  context.best_count = best_count;
  context.runner_up = runner_up;
}

void NGramPredictor::update(Token token) noexcept {
  const std::size_t min_order = config_.min_order;
  const std::size_t max_order = config_.max_order;

  // The token leaving the window takes every n-gram that starts at it. Its slot is the new
  // token's, and an n-gram's hash sits in the slot where it ends, order - 1 slots on.
  if (seen_ >= config_.window) {
    for (std::size_t n = min_order; n <= max_order; ++n) {
      const std::size_t end = wrap(head_ + n - 1);
      if ((recorded_[end] & order_bit(n - min_order)) != 0) remove(n, end);
    }
  }

  // The hash of the last j tokens after this one extends that of the last j - 1 before it.
  SuffixHashes next;
  next[0] = detail::kFnvOffsetBasis;
  for (std::size_t j = 1; j <= max_order; ++j) next[j] = detail::fnv1a_step(suffix_[j - 1], token);

  tokens_[head_] = token;
  recorded_[head_] = 0;
  std::uint64_t* const kept = &hash_at(min_order - 1, head_);
  for (std::size_t j = min_order - 1; j <= max_order; ++j) kept[j - (min_order - 1)] = next[j];
  if (seen_ >= min_order - 1) record(min_order, head_, static_cast<std::uint32_t>(seen_));

  suffix_ = next;
  head_ = wrap(head_ + 1);
  ++seen_;
}

void NGramPredictor::update(std::span<const Token> tokens) noexcept {
  for (const Token token : tokens) update(token);
}

std::size_t NGramPredictor::predict(std::span<Token> out) const noexcept {
  return predict_chain(out, [](std::size_t, std::uint32_t, std::uint32_t) {});
}

std::size_t NGramPredictor::predict(std::span<Token> out, std::span<DraftEvidence> evidence) const noexcept {
  return predict_chain(out.first(std::min(out.size(), evidence.size())),
                       [evidence](std::size_t j, std::uint32_t count, std::uint32_t total) {
                         evidence[j] = DraftEvidence{count, total};
                       });
}

std::size_t NGramPredictor::predict(std::span<Token> out, std::span<float> probabilities) const noexcept {
  // The rule of succession's estimate of each draft given its context, count / (total + 1):
  // a context seen once says 1/2, one whose 9 occurrences agreed says 9/10; chained, as a
  // draft is accepted only when every draft before it is.
  double chance = 1;
  return predict_chain(out.first(std::min(out.size(), probabilities.size())),
                       [probabilities, &chance](std::size_t j, std::uint32_t count, std::uint32_t total) {
                         chance *= static_cast<double>(count) / (static_cast<double>(total) + 1);
                         probabilities[j] = static_cast<float>(chance);
                       });
}

template <class OnDraft>
std::size_t NGramPredictor::predict_chain(std::span<Token> out, const OnDraft& on_draft) const noexcept {
  const std::size_t limit = std::min(out.size(), config_.draft_count);
  const std::size_t min_order = config_.min_order;
  const std::size_t keep = config_.max_order - 1;  // context tokens of the longest order

  // Each draft extends the context of the next step as if its predecessors were accepted.
  SuffixHashes suffix = suffix_;
  std::size_t have = static_cast<std::size_t>(std::min<std::uint64_t>(seen_, keep));
  std::size_t made = 0;
  while (made < limit) {
    // The longest context seen answers. Shortest first is the same search made cheaper: a
    // context never seen has no longer context seen either, and one with a single
    // continuation speaks for all its longer contexts (they are recorded only once it has had
    // two). So climb while the context has had two continuations and a longer one was seen.
    const ContextStats* found = nullptr;
    for (std::size_t n = min_order; n <= have + 1; ++n) {
      const ContextStats* const context = tables_[n - min_order].contexts.find(suffix[n - 1]);
      if (context == nullptr) break;
      found = context;
      if (context->best_count == 0) break;
    }
    if (found == nullptr) break;
    const Token proposal = found->best;
    on_draft(made, found->best_count == 0 ? found->total : found->best_count, found->total);
    out[made++] = proposal;
    for (std::size_t j = keep; j >= 1; --j) suffix[j] = detail::fnv1a_step(suffix[j - 1], proposal);
    if (have < keep) ++have;
  }
  return made;
}

std::size_t NGramPredictor::size() const noexcept {
  std::size_t entries = 0;
  for (const OrderTables& tables : tables_) entries += tables.ngrams.size() + tables.contexts.size();
  return entries;
}

std::size_t NGramPredictor::max_size() const noexcept { return 2 * tables_.size() * config_.window; }

std::size_t NGramPredictor::memory_bytes() const noexcept {
  std::size_t bytes = sizeof(*this) + tokens_.capacity() * sizeof(Token) + recorded_.capacity() +
                      (previous_.capacity() + scratch_.capacity()) * sizeof(std::uint32_t) +
                      hashes_.capacity() * sizeof(std::uint64_t) + tables_.capacity() * sizeof(OrderTables);
  for (const OrderTables& tables : tables_) bytes += tables.ngrams.memory_bytes() + tables.contexts.memory_bytes();
  return bytes;
}

}  // namespace ngramspec
