#include "ngramspec/tree_drafter.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "ngramspec/detail/fnv1a.hpp"

namespace ngramspec {

namespace {

// Classes of the estimates: the spine; the text by (order, rank); the model's top-k by rank.
constexpr std::uint8_t text_class(std::size_t order, std::size_t rank) noexcept {
  return static_cast<std::uint8_t>(1 + (order - 1) * 4 + rank);
}
constexpr std::uint8_t top_k_class(std::size_t rank) noexcept { return static_cast<std::uint8_t>(13 + rank); }

// Priors, as (hits, trials): what a class starts from before the sequence has said anything.
// A longer context and a better rank are likelier; the model's top-1 after a token is about
// as good a guess as a 2-token context's most frequent continuation (stories260K and the
// Spec-Bench streams, docs/ALGORITHM.md "Trees"). The weight (2 trials) lets a few passes
// overrule them.
constexpr float kPriorTrials = 2.0f;
float prior(std::size_t c) noexcept {
  if (c == 0) return 0.5f;
  if (c < 13) {
    const std::size_t order = (c - 1) / 4 + 1;
    const std::size_t rank = (c - 1) % 4;
    const float first = order == 3 ? 0.6f : order == 2 ? 0.5f : 0.35f;
    return first / static_cast<float>(1U << (2 * rank));
  }
  const std::size_t rank = c - 13;
  return 0.45f / static_cast<float>((rank + 1) * (rank + 1));
}
// Calibration forgets: counts halve once a class has this many trials, so it follows the
// sequence rather than its distant past.
constexpr float kMaxTrials = 256.0f;

std::uint64_t context_key(const std::array<Token, 3>& tokens, std::size_t order) noexcept {
  std::uint64_t hash = detail::kFnvOffsetBasis;
  for (std::size_t i = 3 - order; i < 3; ++i) hash = detail::fnv1a_step(hash, tokens[i]);
  return hash | 1U;  // never 0, the empty slot's key
}

}  // namespace

TreeDrafter::TreeDrafter(TreeConfig config, TopKTable* top_k, const SharedCorpus* corpus, const MappedCorpus* file)
    : config_(config), chain_(config.chain, corpus, file) {
  const std::size_t slots = config_.successor_slots;
  if (slots == 0 || (slots & (slots - 1)) != 0 || slots > (std::size_t{1} << 24)) {
    throw std::invalid_argument("ngramspec: TreeConfig::successor_slots = " + std::to_string(slots) +
                                "; it must be a power of two from 1 to 16777216");
  }
  if (config_.max_children == 0 || config_.max_children > kMaxChildren) {
    throw std::invalid_argument("ngramspec: TreeConfig::max_children = " + std::to_string(config_.max_children) +
                                "; it must be 1 .. " + std::to_string(kMaxChildren));
  }
  if (config_.top_k == 0 || config_.top_k > TopKTable::kMaxK) {
    throw std::invalid_argument("ngramspec: TreeConfig::top_k = " + std::to_string(config_.top_k) +
                                "; it must be 1 .. " + std::to_string(TopKTable::kMaxK));
  }
  if (top_k != nullptr) {
    table_ = top_k;
  } else if (config_.vocab_size != 0) {
    own_table_ = std::make_unique<TopKTable>(config_.vocab_size, config_.top_k);
    table_ = own_table_.get();
  }
  for (auto& table : successors_) table.assign(slots, Successors{});
  successor_mask_ = slots - 1;
  contexts_.resize(DraftTree::kMaxNodes + 1);
  candidates_.resize((DraftTree::kMaxNodes + 1) * kMaxChildren);
  candidate_counts_.resize(DraftTree::kMaxNodes + 1);
  heap_.reserve(2 * DraftTree::kMaxNodes + 2);
  on_path_.resize(DraftTree::kMaxNodes + 1);
  reset_learning();
}

TreeDrafter::TreeDrafter(const TreeDrafter& other)
    : config_(other.config_),
      chain_(other.chain_),
      own_table_(other.own_table_ ? std::make_unique<TopKTable>(*other.own_table_) : nullptr),
      table_(other.own_table_ ? own_table_.get() : other.table_),
      successors_(other.successors_),
      successor_mask_(other.successor_mask_),
      recent_(other.recent_),
      seen_(other.seen_),
      hits_(other.hits_),
      trials_(other.trials_),
      contexts_(other.contexts_.size()),
      candidates_(other.candidates_.size()),
      candidate_counts_(other.candidate_counts_.size()),
      on_path_(other.on_path_.size()) {
  heap_.reserve(other.heap_.capacity());
}

TreeDrafter& TreeDrafter::operator=(const TreeDrafter& other) {
  if (this != &other) *this = TreeDrafter(other);
  return *this;
}

void TreeDrafter::reset_learning() noexcept {
  for (std::size_t c = 0; c < kClasses; ++c) {
    hits_[c] = prior(c) * kPriorTrials;
    trials_[c] = kPriorTrials;
  }
}

float TreeDrafter::class_estimate(std::size_t c) const noexcept {
  return c < kClasses ? hits_[c] / trials_[c] : 0.0f;
}

std::size_t TreeDrafter::memory_bytes() const noexcept {
  std::size_t bytes = sizeof(*this) + chain_.memory_bytes();
  for (const auto& table : successors_) bytes += table.capacity() * sizeof(Successors);
  bytes += contexts_.capacity() * sizeof(Context) + candidates_.capacity() * sizeof(Candidate) +
           candidate_counts_.capacity() + heap_.capacity() * sizeof(Frontier) + on_path_.capacity();
  if (own_table_) bytes += own_table_->memory_bytes();
  return bytes;
}

void TreeDrafter::learn(Token token) noexcept {
  const std::size_t known = static_cast<std::size_t>(std::min<std::uint64_t>(seen_, kOrders));
  for (std::size_t order = 1; order <= known; ++order) {
    const std::uint64_t key = context_key(recent_, order);
    Successors& entry = successors_[order - 1][key & successor_mask_];
    if (entry.key != key) {
      entry = Successors{};
      entry.key = key;
    }
    std::size_t at = kSlotsPerContext;
    for (std::size_t s = 0; s < kSlotsPerContext; ++s) {
      if (entry.counts[s] != 0 && entry.tokens[s] == token) {
        at = s;
        break;
      }
    }
    if (at == kSlotsPerContext) {  // new: replaces the least frequent (the newest on ties)
      at = kSlotsPerContext - 1;
      entry.tokens[at] = token;
      entry.counts[at] = 0;
    }
    if (entry.counts[at] < UINT16_MAX) ++entry.counts[at];
    // Most frequent first; the token just seen goes ahead of those it ties.
    while (at > 0 && entry.counts[at - 1] <= entry.counts[at]) {
      std::swap(entry.tokens[at - 1], entry.tokens[at]);
      std::swap(entry.counts[at - 1], entry.counts[at]);
      --at;
    }
  }
  recent_[0] = recent_[1];
  recent_[1] = recent_[2];
  recent_[2] = token;
  ++seen_;
}

void TreeDrafter::update(Token token) noexcept {
  chain_.update(token);
  learn(token);
}

void TreeDrafter::update(std::span<const Token> tokens) noexcept {
  chain_.update(tokens);
  for (const Token token : tokens) learn(token);
}

void TreeDrafter::reset() noexcept {
  chain_.reset();
  seen_ = 0;
  recent_ = {};
  if (config_.carry_over) return;
  for (auto& table : successors_) std::fill(table.begin(), table.end(), Successors{});
  if (own_table_) own_table_->clear();
  reset_learning();
}

// The candidates after a node with last tokens `context`, merged by token, best first, their
// estimates summing to at most 1. Returns how many (at most config_.max_children).
std::size_t TreeDrafter::expand(const Context& context, std::size_t spine_made, Candidate* out) const noexcept {
  std::array<Candidate, kMaxChildren + kOrders * kSlotsPerContext + TopKTable::kMaxK> found;
  std::size_t n = 0;
  const auto offer = [&](Token token, float probability, std::uint8_t source_class) {
    for (std::size_t i = 0; i < n; ++i) {
      if (found[i].token == token) {
        if (probability > found[i].probability) found[i] = Candidate{token, probability, source_class};
        return;
      }
    }
    found[n++] = Candidate{token, probability, source_class};
  };
  const std::size_t next_spine = static_cast<std::size_t>(context.spine + 1);
  if (next_spine < spine_made) offer(spine_[next_spine], spine_conditional_[next_spine], kSpineClass);
  for (std::size_t order = std::min<std::size_t>(context.known, kOrders); order >= 1; --order) {
    const std::uint64_t key = context_key(context.tokens, order);
    const Successors& entry = successors_[order - 1][key & successor_mask_];
    if (entry.key != key) continue;
    for (std::size_t s = 0; s < kSlotsPerContext && entry.counts[s] != 0; ++s) {
      const std::uint8_t c = text_class(order, s);
      offer(entry.tokens[s], class_estimate(c), c);
    }
  }
  if (table_ != nullptr && context.known > 0) {
    const std::span<const Token> row = table_->row(context.tokens[kOrders - 1]);
    for (std::size_t r = 0; r < row.size(); ++r) {
      const std::uint8_t c = top_k_class(r);
      offer(row[r], class_estimate(c), c);
    }
  }
  // Best first (insertion sort: a handful of candidates), keep the best max_children, and
  // scale them to sum to at most 1: one token follows, so the events exclude each other.
  for (std::size_t i = 1; i < n; ++i) {
    const Candidate item = found[i];
    std::size_t j = i;
    while (j > 0 && found[j - 1].probability < item.probability) {
      found[j] = found[j - 1];
      --j;
    }
    found[j] = item;
  }
  n = std::min(n, config_.max_children);
  float sum = 0.0f;
  for (std::size_t i = 0; i < n; ++i) sum += found[i].probability;
  const float scale = sum > 1.0f ? 1.0f / sum : 1.0f;
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = found[i];
    out[i].probability *= scale;
  }
  return n;
}

std::size_t TreeDrafter::predict_tree(DraftTree& tree, std::size_t max_nodes, std::size_t max_depth,
                                      float min_path_probability) noexcept {
  tree.clear();
  const std::size_t budget = std::min({max_nodes, tree.capacity(), DraftTree::kMaxNodes});
  if (budget == 0 || max_depth == 0) return 0;

  // The spine: the chain and its conditional estimates.
  std::array<float, kMaxSpine> path{};
  const std::size_t spine_made = chain_.predict(std::span<Token>(spine_).first(std::min(kMaxSpine, max_depth)),
                                                std::span<float>(path).first(std::min(kMaxSpine, max_depth)));
  for (std::size_t j = 0; j < spine_made; ++j) {
    const float before = j == 0 ? 1.0f : path[j - 1];
    spine_conditional_[j] = before > 0.0f ? std::min(1.0f, path[j] / before) : 0.0f;
  }

  // The root's entry sits after the nodes' (index kMaxNodes).
  constexpr std::size_t kRoot = DraftTree::kMaxNodes;
  Context& root = contexts_[kRoot];
  root.tokens = recent_;
  root.known = static_cast<std::uint32_t>(std::min<std::uint64_t>(seen_, kOrders));
  root.spine = -1;
  candidate_counts_[kRoot] =
      static_cast<std::uint8_t>(expand(root, spine_made, candidates_.data() + kRoot * kMaxChildren));

  // A max-heap by path probability of each expanded node's next unused candidate.
  heap_.clear();
  const auto better = [](const Frontier& a, const Frontier& b) { return a.path_probability < b.path_probability; };
  const auto push = [&](std::int32_t parent, std::uint32_t child) {
    const std::size_t owner = parent == kTreeRoot ? kRoot : static_cast<std::size_t>(parent);
    if (child >= candidate_counts_[owner]) return;
    const float base = parent == kTreeRoot ? 1.0f : tree.path_probabilities()[static_cast<std::size_t>(parent)];
    heap_.push_back(Frontier{base * candidates_[owner * kMaxChildren + child].probability, parent, child});
    std::push_heap(heap_.begin(), heap_.end(), better);
  };
  push(kTreeRoot, 0);
  while (!heap_.empty() && tree.size() < budget) {
    std::pop_heap(heap_.begin(), heap_.end(), better);
    const Frontier best = heap_.back();
    heap_.pop_back();
    if (best.path_probability < min_path_probability) break;  // and so is every later one
    const std::size_t owner = best.parent == kTreeRoot ? kRoot : static_cast<std::size_t>(best.parent);
    const Candidate& chosen = candidates_[owner * kMaxChildren + best.child];
    const std::size_t node = tree.push(best.parent, chosen.token, chosen.probability, chosen.source_class);
    push(best.parent, best.child + 1);  // its next sibling

    const Context& up = contexts_[owner];
    Context& here = contexts_[node];
    here.tokens = {up.tokens[1], up.tokens[2], chosen.token};
    here.known = std::min<std::uint32_t>(up.known + 1, kOrders);
    // On the spine when it is the spine's next token, whichever source offered it best.
    const std::size_t next_spine = static_cast<std::size_t>(up.spine + 1);
    here.spine = up.spine >= -1 && next_spine < spine_made && spine_[next_spine] == chosen.token ? up.spine + 1 : -2;
    if (tree.depths()[node] + 1 < max_depth) {
      candidate_counts_[node] =
          static_cast<std::uint8_t>(expand(here, spine_made, candidates_.data() + node * kMaxChildren));
      push(static_cast<std::int32_t>(node), 0);
    }
  }
  return tree.size();
}

void TreeDrafter::observe_pass(const DraftTree& tree, std::span<const Token> fed, std::span<const Token> model_tokens,
                               std::span<const std::size_t> kept, std::span<const Token> top) noexcept {
  const std::size_t n = tree.size();
  if (fed.size() != n + 1 || model_tokens.size() != n + 1 || kept.empty() || kept.size() > n + 1) return;
  for (const std::size_t e : kept) {
    if (e > n) return;
  }
  std::fill_n(on_path_.begin(), n + 1, std::uint8_t{0});
  for (const std::size_t e : kept) on_path_[e] = 1;
  const std::span<const std::int32_t> parents = tree.parents();
  const std::span<const std::uint8_t> classes = tree.source_classes();
  const std::span<const Token> tokens = tree.tokens();
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t parent_entry = static_cast<std::size_t>(parents[i] + 1);
    if (on_path_[parent_entry] == 0) continue;
    const std::size_t c = classes[i];
    if (c >= kClasses) continue;
    trials_[c] += 1.0f;
    if (tokens[i] == model_tokens[parent_entry]) hits_[c] += 1.0f;
    if (trials_[c] >= kMaxTrials) {
      trials_[c] *= 0.5f;
      hits_[c] *= 0.5f;
    }
  }
  if (table_ != nullptr && !top.empty() && top.size() == fed.size() * table_->k()) {
    for (const Token token : fed) {
      if (token >= table_->vocab_size()) return;
    }
    for (const Token token : top) {
      if (token >= table_->vocab_size()) return;
    }
    table_->record_unchecked(fed, top);
  }
}

}  // namespace ngramspec
