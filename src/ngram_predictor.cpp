#include "ngramspec/ngram_predictor.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>

#include "ngramspec/detail/fnv1a.hpp"

namespace ngramspec {
namespace {

[[noreturn]] void invalid(const char* field, std::size_t value, const char* requirement) {
  throw std::invalid_argument(std::string("ngramspec::NGramConfig: ") + field + " = " +
                              std::to_string(value) + " is invalid: " + requirement);
}

NGramConfig validated(NGramConfig config) {
  if (config.min_order < 2) invalid("min_order", config.min_order, "must be at least 2 (a bigram)");
  if (config.max_order < config.min_order) {
    invalid("max_order", config.max_order,
            ("must be at least min_order (" + std::to_string(config.min_order) + ")").c_str());
  }
  if (config.max_order > NGramPredictor::kMaxSupportedOrder) {
    invalid("max_order", config.max_order,
            ("must be at most " + std::to_string(NGramPredictor::kMaxSupportedOrder)).c_str());
  }
  if (config.draft_count == 0) invalid("draft_count", config.draft_count, "must be at least 1");
  if (config.window < config.max_order) {
    invalid("window", config.window,
            ("must be at least max_order (" + std::to_string(config.max_order) + ")").c_str());
  }
  if (config.window > NGramPredictor::kMaxWindow) {
    invalid("window", config.window,
            ("must be at most " + std::to_string(NGramPredictor::kMaxWindow)).c_str());
  }
  return config;
}

}  // namespace

NGramPredictor::NGramPredictor(NGramConfig config)
    : config_(validated(config)),
      orders_(config_.max_order - config_.min_order + 1),
      ring_(config_.window),
      ring_keys_(config_.window * orders_),
      tables_(orders_) {
  // A window of W tokens holds at most W n-grams of each order, so W contexts and W
  // distinct continuations per order is a hard bound: the pools never grow.
  for (OrderTables& tables : tables_) {
    tables.context_index = detail::IndexTable(config_.window);
    tables.continuation_index = detail::IndexTable(config_.window);
    tables.contexts.resize(config_.window);
    tables.continuations.resize(config_.window);
  }
  reset();
}

void NGramPredictor::reset() noexcept {
  for (OrderTables& tables : tables_) {
    tables.context_index.clear();
    tables.continuation_index.clear();
    const auto n = static_cast<std::uint32_t>(config_.window);
    for (std::uint32_t i = 0; i < n; ++i) {
      tables.contexts[i] = Context{};
      tables.contexts[i].head = i + 1 < n ? i + 1 : kNone;
      tables.continuations[i] = Continuation{};
      tables.continuations[i].next = i + 1 < n ? i + 1 : kNone;
    }
    tables.free_context = 0;
    tables.free_continuation = 0;
  }
  head_ = 0;
  seen_ = 0;
}

std::size_t NGramPredictor::slot_back(std::size_t distance) const noexcept {
  // Slot of the token `distance` places before the next one; distance <= window.
  return head_ >= distance ? head_ - distance : head_ + config_.window - distance;
}

bool NGramPredictor::better(const Continuation& a, const Continuation& b) noexcept {
  return a.count > b.count || (a.count == b.count && a.last_seen > b.last_seen);
}

void NGramPredictor::add(OrderTables& tables, std::uint64_t context_key, Token token,
                         std::uint64_t position) noexcept {
  std::uint32_t c = tables.context_index.find(context_key);
  if (c == kNone) {
    c = tables.free_context;
    tables.free_context = tables.contexts[c].head;
    tables.contexts[c] = Context{};
    tables.context_index.insert(context_key, c);
  }
  Context& context = tables.contexts[c];

  const std::uint64_t key = detail::fnv1a_step(context_key, token);
  std::uint32_t k = tables.continuation_index.find(key);
  if (k == kNone) {
    k = tables.free_continuation;
    tables.free_continuation = tables.continuations[k].next;
    Continuation& fresh = tables.continuations[k];
    fresh = Continuation{};
    fresh.token = token;
    fresh.context = c;
    fresh.next = context.head;
    if (context.head != kNone) tables.continuations[context.head].prev = k;
    context.head = k;
    tables.continuation_index.insert(key, k);
  }
  Continuation& continuation = tables.continuations[k];
  ++continuation.count;
  continuation.last_seen = position;
  ++context.total;
  // The continuation just seen is the most recent one, so it wins every tie.
  if (context.best == kNone || continuation.count >= tables.continuations[context.best].count) {
    context.best = k;
  }
}

void NGramPredictor::remove(OrderTables& tables, std::uint64_t context_key, Token token) noexcept {
  const std::uint64_t key = detail::fnv1a_step(context_key, token);
  const std::uint32_t k = tables.continuation_index.find(key);
  Continuation& continuation = tables.continuations[k];
  const std::uint32_t c = continuation.context;
  Context& context = tables.contexts[c];
  --continuation.count;
  --context.total;
  if (continuation.count == 0) {
    if (continuation.prev != kNone) tables.continuations[continuation.prev].next = continuation.next;
    else context.head = continuation.next;
    if (continuation.next != kNone) tables.continuations[continuation.next].prev = continuation.prev;
    tables.continuation_index.erase(key);
    continuation.next = tables.free_continuation;
    tables.free_continuation = k;
  }
  if (context.total == 0) {
    tables.context_index.erase(context_key);
    context.head = tables.free_context;
    tables.free_context = c;
    return;
  }
  // The window drops its oldest occurrence, so last_seen of what stays is unchanged and only
  // losing the best one can change the winner. A strict majority still beats every other.
  if (context.best == k && (continuation.count == 0 || 2 * continuation.count <= context.total)) {
    rescan_best(tables, context);
  }
}

void NGramPredictor::rescan_best(OrderTables& tables, Context& context) noexcept {
  std::uint32_t best = context.head;
  for (std::uint32_t k = context.head; k != kNone; k = tables.continuations[k].next) {
    if (better(tables.continuations[k], tables.continuations[best])) best = k;
  }
  context.best = best;
}

void NGramPredictor::update(Token token) noexcept {
  const std::size_t window = config_.window;
  const std::size_t min_order = config_.min_order;
  const std::uint64_t position = seen_;

  // The token leaving the window takes every n-gram that starts at it; each such n-gram
  // ends inside the window, where its context hash was kept when it was added.
  if (position >= window) {
    for (std::size_t n = min_order; n <= config_.max_order; ++n) {
      const std::size_t end = slot_back(window - (n - 1));
      remove(tables_[n - min_order], ring_keys_[end * orders_ + (n - min_order)], ring_[end]);
    }
  }

  // Context tokens of the n-grams that end at the new token, oldest first.
  std::array<Token, kMaxSupportedOrder - 1> context{};
  const std::size_t have = static_cast<std::size_t>(
      std::min<std::uint64_t>(position, config_.max_order - 1));
  for (std::size_t i = 0; i < have; ++i) context[i] = ring_[slot_back(have - i)];

  const std::size_t slot = head_;
  ring_[slot] = token;
  for (std::size_t n = min_order; n <= config_.max_order; ++n) {
    if (have < n - 1) break;
    const std::uint64_t context_key =
        detail::fnv1a(std::span<const Token>(context.data() + have - (n - 1), n - 1));
    ring_keys_[slot * orders_ + (n - min_order)] = context_key;
    add(tables_[n - min_order], context_key, token, position);
  }
  head_ = head_ + 1 == window ? 0 : head_ + 1;
  ++seen_;
}

void NGramPredictor::update(std::span<const Token> tokens) noexcept {
  for (const Token token : tokens) update(token);
}

std::size_t NGramPredictor::predict(std::span<Token> out) const noexcept {
  const std::size_t limit = std::min(out.size(), config_.draft_count);
  if (limit == 0) return 0;

  // The most recent max_order - 1 tokens, oldest first; drafts are appended as they are
  // made, so each step sees the context as if its predecessors had been accepted.
  constexpr std::size_t kKeep = kMaxSupportedOrder - 1;
  std::array<Token, kKeep> recent{};
  const std::size_t keep = config_.max_order - 1;
  std::size_t have = static_cast<std::size_t>(std::min<std::uint64_t>(seen_, keep));
  for (std::size_t i = 0; i < have; ++i) recent[i] = ring_[slot_back(have - i)];

  std::size_t made = 0;
  while (made < limit) {
    Token proposal = 0;
    bool found = false;
    for (std::size_t n = config_.max_order; n >= config_.min_order && !found; --n) {
      if (have < n - 1) continue;
      const OrderTables& tables = tables_[n - config_.min_order];
      const std::uint64_t key =
          detail::fnv1a(std::span<const Token>(recent.data() + have - (n - 1), n - 1));
      const std::uint32_t c = tables.context_index.find(key);
      if (c != kNone) {
        proposal = tables.continuations[tables.contexts[c].best].token;
        found = true;
      }
    }
    if (!found) break;
    out[made++] = proposal;
    if (have == keep) {
      std::copy(recent.begin() + 1, recent.begin() + static_cast<std::ptrdiff_t>(keep), recent.begin());
      recent[keep - 1] = proposal;
    } else {
      recent[have++] = proposal;
    }
  }
  return made;
}

std::size_t NGramPredictor::size() const noexcept {
  std::size_t entries = 0;
  for (const OrderTables& tables : tables_) {
    entries += tables.context_index.size() + tables.continuation_index.size();
  }
  return entries;
}

std::size_t NGramPredictor::max_size() const noexcept { return 2 * orders_ * config_.window; }

std::size_t NGramPredictor::memory_bytes() const noexcept {
  std::size_t bytes = sizeof(*this) + ring_.capacity() * sizeof(Token) +
                      ring_keys_.capacity() * sizeof(std::uint64_t) +
                      tables_.capacity() * sizeof(OrderTables);
  for (const OrderTables& tables : tables_) {
    bytes += tables.context_index.memory_bytes() + tables.continuation_index.memory_bytes() +
             tables.contexts.capacity() * sizeof(Context) +
             tables.continuations.capacity() * sizeof(Continuation);
  }
  return bytes;
}

}  // namespace ngramspec
