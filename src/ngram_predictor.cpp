#include "ngramspec/ngram_predictor.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>

#include "ngramspec/argument_error.hpp"
#include "ngramspec/detail/fnv1a.hpp"

namespace ngramspec {
namespace {

[[noreturn]] void invalid(const char* field, std::size_t value, const std::string& requirement) {
  throw ArgumentError("ngramspec::NGramConfig", std::string(field) + " = " + std::to_string(value) + " is invalid: " + requirement);
}

NGramConfig validated(NGramConfig config) {
  if (config.min_order < 2) invalid("min_order", config.min_order, "must be at least 2 (a bigram)");
  if (config.max_order < config.min_order) {
    invalid("max_order", config.max_order, "must be at least min_order (" + std::to_string(config.min_order) + ")");
  }
  if (config.max_order > NGramPredictor::kMaxSupportedOrder) {
    invalid("max_order", config.max_order, "must be at most " + std::to_string(NGramPredictor::kMaxSupportedOrder));
  }
  if (config.max_drafts == 0) invalid("max_drafts", config.max_drafts, "must be at least 1");
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


void NGramPredictor::copy_hashes(std::uint64_t* to, const std::uint64_t* from, std::size_t count) noexcept {
  // At most kMaxSupportedOrder + 1 hashes: unrolled, as a loop of so few would become a call
  // to memcpy.
  static_assert(kMaxSupportedOrder + 1 == 9);
  switch (count) {
    case 9: to[8] = from[8]; [[fallthrough]];
    case 8: to[7] = from[7]; [[fallthrough]];
    case 7: to[6] = from[6]; [[fallthrough]];
    case 6: to[5] = from[5]; [[fallthrough]];
    case 5: to[4] = from[4]; [[fallthrough]];
    case 4: to[3] = from[3]; [[fallthrough]];
    case 3: to[2] = from[2]; [[fallthrough]];
    case 2: to[1] = from[1]; [[fallthrough]];
    case 1: to[0] = from[0]; [[fallthrough]];
    default: break;
  }
}

template <std::size_t kMinOrder, std::size_t kMaxOrder>
void NGramPredictor::record(std::size_t order, std::size_t end_slot, std::uint32_t end_position) noexcept {
  // Records the occurrence whose n-gram of this order ends at end_slot, then, while its
  // context has had two continuations, the same occurrence one order up. Occurrences of one
  // context are recorded oldest first, so the latest one is always the one recorded last.
  // Every order shares the token, the slots and the rows of kept hashes, read once.
  const std::size_t min_order = kMinOrder != 0 ? kMinOrder : config_.min_order;
  const std::size_t max_order = kMaxOrder != 0 ? kMaxOrder : config_.max_order;
  const std::size_t orders = max_order - min_order + 1;
  const std::size_t stride = orders + 1;  // hash_stride_
  const std::size_t context_slot = end_slot == 0 ? config_.window - 1 : end_slot - 1;
  // Row entry i holds the hash of min_order - 1 + i tokens: at the context's slot, the context
  // of order min_order + i; at the end slot, the whole n-gram of order min_order + i - 1.
  const std::uint64_t* const context_keys = &hashes_[context_slot * stride];
  const std::uint64_t* const ngram_keys = &hashes_[end_slot * stride + 1];
  std::uint32_t* const previous = &previous_[end_slot * orders];
  OrderSet& recorded = recorded_[end_slot];
  const Token token = tokens_[end_slot];
  for (;;) {
    const std::size_t index = order - min_order;
    OrderTables& tables = tables_[index];
    const std::uint64_t context_key = context_keys[index];
    ContextStats& context = tables.contexts.find_or_insert(context_key);
    const std::uint32_t before_total = context.total;
    const std::uint32_t before_last = context.last;
    previous[index] = before_last;
    recorded = with(recorded, index);
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
      NGramCount& ngram = tables.ngrams.find_or_insert(ngram_keys[index]);
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

    if (order == max_order || context.best_count == 0) return;
    // The context has had two continuations: every occurrence of it is recorded one order up,
    // the earlier ones now, when the second continuation has just appeared.
    if (second_continuation) record_all(order + 1, before_last, before_total);  // rare: not specialized
    if (!in_window(order + 1, end_position)) return;
    ++order;
  }
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
    if (!contains(recorded_[slot], index) && in_window(order, ends[i])) record(order, slot, ends[i]);
  }
}

template <std::size_t kMinOrder>
void NGramPredictor::remove(std::size_t order, std::size_t end_slot) noexcept {
  // Precondition: the n-gram ending at end_slot is recorded at this order.
  const std::size_t min_order = kMinOrder != 0 ? kMinOrder : config_.min_order;
  const std::size_t index = order - min_order;
  recorded_[end_slot] = without(recorded_[end_slot], index);
  OrderTables& tables = tables_[index];
  const std::size_t context_slot = end_slot == 0 ? config_.window - 1 : end_slot - 1;
  // Row entry i holds the hash of min_order - 1 + i tokens (see record).
  ContextStats* const context = tables.contexts.find(hashes_[context_slot * hash_stride_ + index]);
  if (context->best_count == 0) {
    if (--context->total == 0) tables.contexts.erase(*context);
    return;
  }
  NGramCount* const ngram = tables.ngrams.find(hashes_[end_slot * hash_stride_ + index + 1]);
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
  SuffixHashes next;
  next_suffix(token, next);
  update(token, next);
}

void NGramPredictor::update(Token token, const SuffixHashes& next) noexcept {
  // The common shapes get loops of known length; any other runs the same code on config_.
  if (config_.min_order == 2 && config_.max_order == 3) {
    update_orders<2, 3>(token, next);
  } else if (config_.min_order == 2 && config_.max_order == 4) {
    update_orders<2, 4>(token, next);
  } else {
    update_orders<0, 0>(token, next);
  }
}

template <std::size_t kMinOrder, std::size_t kMaxOrder>
void NGramPredictor::update_orders(Token token, const SuffixHashes& next) noexcept {
  const std::size_t min_order = kMinOrder != 0 ? kMinOrder : config_.min_order;
  const std::size_t max_order = kMaxOrder != 0 ? kMaxOrder : config_.max_order;
  const std::size_t stride = max_order - min_order + 2;  // hash_stride_

  // The token leaving the window takes every n-gram that starts at it. Its slot is the new
  // token's, and an n-gram's hash sits in the slot where it ends, order - 1 slots on.
  if (seen_ >= config_.window) {
    for (std::size_t n = min_order; n <= max_order; ++n) {
      const std::size_t end = wrap(head_ + n - 1);
      if (contains(recorded_[end], n - min_order)) remove<kMinOrder>(n, end);
    }
  }

  if constexpr (kMaxOrder != 0) {  // fixed lengths: unrolled moves
    for (std::size_t j = 1; j <= kMaxOrder; ++j) suffix_[j] = next[j];
    std::uint64_t* const row = &hashes_[head_ * stride];
    for (std::size_t i = 0; i < stride; ++i) row[i] = next[min_order - 1 + i];
  } else {
    copy_hashes(&suffix_[1], &next[1], max_order);
    copy_hashes(&hashes_[head_ * stride], &next[min_order - 1], stride);
  }
  tokens_[head_] = token;
  recorded_[head_] = OrderSet{};
  if (seen_ >= min_order - 1) record<kMinOrder, kMaxOrder>(min_order, head_, static_cast<std::uint32_t>(seen_));

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
  const std::size_t limit = std::min(out.size(), config_.max_drafts);
  const std::size_t keep = config_.max_order - 1;  // context tokens of the longest order

  // Each draft extends the context of the next step as if its predecessors were accepted.
  SuffixHashes suffix = suffix_;
  std::size_t have = static_cast<std::size_t>(std::min<std::uint64_t>(seen_, keep));
  std::size_t made = 0;
  while (made < limit) {
    const ContextStats* const found = answering_context(suffix, have);
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
  std::size_t bytes = sizeof(*this) + tokens_.capacity() * sizeof(Token) + recorded_.capacity() * sizeof(OrderSet) +
                      (previous_.capacity() + scratch_.capacity()) * sizeof(std::uint32_t) +
                      hashes_.capacity() * sizeof(std::uint64_t) + tables_.capacity() * sizeof(OrderTables);
  for (const OrderTables& tables : tables_) bytes += tables.ngrams.memory_bytes() + tables.contexts.memory_bytes();
  return bytes;
}

}  // namespace ngramspec
