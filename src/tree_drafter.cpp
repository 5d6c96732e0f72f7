#include "ngramspec/tree_drafter.hpp"

#include <algorithm>
#include <bit>
#include <stdexcept>
#include <string>

#include "ngramspec/argument_error.hpp"
#include "ngramspec/detail/number_text.hpp"
#include "ngramspec/detail/top_k_select.hpp"
#include "ngramspec/position_random.hpp"

namespace ngramspec {

namespace {

// Priors: what a class's scale starts from before the sequence has said anything, worth 2
// trials, so that a few passes overrule them. A text candidate's estimate is its share of its
// context's counts times its order's scale (a continuation seen after a 3-token context is
// worth more than one seen after a single token); a top-k candidate's is its rank's rate (the
// model's top-1 after a token is right about as often as a 2-token context's majority
// continuation on stories260K and the Spec-Bench streams, docs/ALGORITHM.md "Trees"); a draw
// from the overall row, which knows nothing of the node's token, starts well below rank 0.
constexpr float kPriorTrials = 2.0f;
float prior(std::size_t c) noexcept {
  if (c == TreeDrafter::kSpineClass) return 0.5f;
  if (c == TreeDrafter::kOverallClass) return 0.15f;
  if (c < TreeDrafter::kFirstTopKClass) {
    const std::size_t order = (c - TreeDrafter::kFirstTextClass) / TreeDrafter::kSlotsPerContext + 1;
    return order == 3 ? 0.9f : order == 2 ? 0.8f : 0.6f;
  }
  const std::size_t rank = c - TreeDrafter::kFirstTopKClass;
  return 0.45f / static_cast<float>((rank + 1) * (rank + 1));
}
// Calibration forgets: counts halve once a class has this many trials, so it follows the
// sequence rather than its distant past.
constexpr float kMaxTrials = 256.0f;

// The successor tables' key of a context of `order` tokens (the last `order` of `tokens`): one
// multiply a token, mixed so that its low bits, which pick the slot, depend on every token.
std::uint64_t context_key(const std::array<Token, TreeDrafter::kOrders>& tokens, std::size_t order) noexcept {
  std::uint64_t hash = order * 0x9e3779b97f4a7c15ULL;
  for (std::size_t i = tokens.size() - order; i < tokens.size(); ++i) hash = (hash ^ tokens[i]) * 0xff51afd7ed558ccdULL;
  return (hash ^ (hash >> 32)) | 1U;  // never 0, the empty slot's key
}

// The spine's configuration: the chain's, bounded by the model's vocabulary when the tree
// knows it and the chain does not (one vocabulary; two different ones are refused).
MatchConfig spine_config(const TreeConfig& config) {
  // The table's rule first: a vocabulary too large for a top-k table is named as such, not as
  // the spine's (whose bound, 2^32, is looser).
  TopKTable::check_vocab_size(config.vocab_size);
  MatchConfig chain = config.chain;
  if (chain.vocab_size != 0 && config.vocab_size != 0 && chain.vocab_size != config.vocab_size) {
    throw ArgumentError("ngramspec", "TreeConfig::chain.vocab_size = " + std::to_string(chain.vocab_size) +
                                         " and TreeConfig::vocab_size = " + std::to_string(config.vocab_size) +
                                         " disagree; both are the model's vocabulary");
  }
  if (chain.vocab_size == 0) chain.vocab_size = config.vocab_size;
  return chain;
}

}  // namespace

TreeDrafter::TreeDrafter(TreeConfig config, TopKTable* top_k, const SharedCorpus* corpus, const MappedCorpus* file)
    : config_(config), chain_(spine_config(config), corpus, file), draw_key_(config.draw_seed) {
  const std::size_t slots = config_.successor_slots;
  if (slots == 0 || (slots & (slots - 1)) != 0 || slots > (std::size_t{1} << 24)) {
    throw ArgumentError("ngramspec", "TreeConfig::successor_slots = " + std::to_string(slots) +
                                         "; it must be a power of two from 1 to 16777216");
  }
  if (config_.max_children == 0 || config_.max_children > kMaxChildren) {
    throw ArgumentError("ngramspec", "TreeConfig::max_children = " + std::to_string(config_.max_children) +
                                         "; it must be 1 .. " + std::to_string(kMaxChildren));
  }
  if (config_.top_k == 0 || config_.top_k > TopKTable::kMaxK) {
    throw ArgumentError("ngramspec", "TreeConfig::top_k = " + std::to_string(config_.top_k) + "; it must be 1 .. " +
                                         std::to_string(TopKTable::kMaxK));
  }
  if (!(config_.recycled_history >= 0.0f && config_.recycled_history < 1.0f)) {
    throw ArgumentError("ngramspec", "TreeConfig::recycled_history = " + detail::number_text(config_.recycled_history) +
                                         "; it must be in [0, 1)");
  }
  if (top_k != nullptr) {
    table_ = top_k;
  } else if (config_.vocab_size != 0) {
    own_table_ = std::make_unique<TopKTable>(config_.vocab_size, config_.top_k, config_.draw_recycled,
                                             config_.recycled_history);
    table_ = own_table_.get();
  }
  if (config_.draw_recycled && table_ == nullptr) {
    // Drawing would be off without a word: there are no rows to draw from.
    throw ArgumentError("ngramspec", "TreeConfig::draw_recycled = true needs a top-k table to draw from, and "
                                     "TreeConfig::vocab_size = 0 makes none: set vocab_size (the drafter's own "
                                     "table) or pass a TopKTable");
  }
  for (auto& table : successors_) table.assign(slots, Successors{});
  successor_mask_ = slots - 1;
  contexts_.resize(DraftTree::kMaxNodes + 1);
  bases_.resize(DraftTree::kMaxNodes);
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
      expected_(other.expected_),
      estimates_(other.estimates_),
      contexts_(other.contexts_.size()),
      bases_(other.bases_.size()),
      candidates_(other.candidates_.size()),
      candidate_counts_(other.candidate_counts_.size()),
      on_path_(other.on_path_.size()),
      draw_key_(other.draw_key_) {
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
    expected_[c] = kPriorTrials;
    estimates_[c] = hits_[c] / expected_[c];
  }
}

float TreeDrafter::top_k_ceiling() const noexcept {
  if (table_ == nullptr) return 0.0f;
  float best = 0.0f;
  for (std::size_t r = 0; r < table_->k(); ++r) best = std::max(best, std::min(1.0f, estimates_[top_k_class(r)]));
  return best;
}

float TreeDrafter::class_estimate(std::size_t c) const noexcept { return c < kClasses ? estimates_[c] : 0.0f; }

std::size_t TreeDrafter::memory_bytes() const noexcept {
  std::size_t bytes = sizeof(*this) + chain_.memory_bytes();
  for (const auto& table : successors_) bytes += table.capacity() * sizeof(Successors);
  bytes += contexts_.capacity() * sizeof(Context) + candidates_.capacity() * sizeof(Candidate) +
           candidate_counts_.capacity() + heap_.capacity() * sizeof(HeapEntry) + on_path_.capacity();
  if (own_table_) bytes += own_table_->memory_bytes();
  return bytes;
}

void TreeDrafter::count(const std::array<Token, kOrders>& context, std::size_t order, Token token) noexcept {
  const std::uint64_t key = context_key(context, order);
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

void TreeDrafter::learn(Token token) noexcept {
  const std::size_t known = static_cast<std::size_t>(std::min<std::uint64_t>(seen_, kOrders));
  for (std::size_t order = 1; order <= known; ++order) count(recent_, order, token);
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
// A continuation's share of its context's kept counts.
float TreeDrafter::share(const Successors& entry, std::size_t slot) noexcept {
  std::uint32_t total = 0;
  for (const std::uint16_t count : entry.counts) total += count;
  return total == 0 ? 0.0f : static_cast<float>(entry.counts[slot]) / static_cast<float>(total);
}

float TreeDrafter::locate(Context& context, std::size_t spine_made) const noexcept {
  context.text = nullptr;
  context.text_order = 0;
  for (std::size_t order = std::min<std::size_t>(context.known, kOrders); order >= 1; --order) {
    const std::uint64_t key = context_key(context.tokens, order);
    const Successors& entry = successors_[order - 1][key & successor_mask_];
    if (entry.key == key) {
      context.text = &entry;
      context.text_order = static_cast<std::uint32_t>(order);
      break;
    }
  }
  const std::span<const Token> row =
      table_ != nullptr && context.known > 0 ? table_->row(context.tokens[kOrders - 1]) : std::span<const Token>();
  context.row = row.data();
  context.row_size = static_cast<std::uint32_t>(row.size());
  context.row_probabilities = nullptr;
  context.overall = false;
  if (config_.draw_recycled && !row.empty()) {
    context.row_probabilities = table_->row_probabilities(context.tokens[kOrders - 1]).data();
  } else if (config_.draw_recycled && table_ != nullptr) {
    // No row for the token: one candidate drawn from the overall row, when there is one.
    const std::span<const Token> overall = table_->overall_row();
    context.overall = !overall.empty();
    if (context.overall) {
      context.row = overall.data();
      context.row_size = static_cast<std::uint32_t>(overall.size());
      context.row_probabilities = table_->overall_row_probabilities().data();
    }
  }
  // Beside a drawn row the text speaks only after 2 or 3 tokens: after the one token the row
  // also follows, the model's own distribution drawn from is accepted more often than the text's
  // counts taken whole (docs/BENCHMARKS.md#sampling), while longer contexts know more than it.
  if (context.row_probabilities != nullptr && !context.overall && context.text_order < 2) {
    context.text = nullptr;
    context.text_order = 0;
  }
  float best = 0.0f;
  const auto next_spine = static_cast<std::size_t>(context.spine + 1);
  if (next_spine < spine_made) best = spine_conditional_[next_spine];
  if (context.text != nullptr) {
    best = std::max(best, std::min(1.0f, share(*context.text, 0) * estimates_[text_class(context.text_order, 0)]));
  }
  if (context.row_size != 0) best = std::max(best, std::min(1.0f, estimates_[row_class(context, 0)]));
  return best;
}

std::size_t TreeDrafter::expand(const Context& context, std::size_t spine_made, std::size_t owner, std::size_t depth,
                                Candidate* out) const noexcept {
  // Three lists, each best first: the spine's next token; the longest seen context's
  // continuations (the counts' back-off: it speaks for the text); the model's top-k after the
  // node's token. Within a list a later rank never gets a higher estimate than an earlier one.
  const std::size_t next_spine = static_cast<std::size_t>(context.spine + 1);
  const bool has_spine = next_spine < spine_made;
  const Successors* const text = context.text;
  const std::size_t text_order = context.text_order;
  const std::span<const Token> row(context.row, context.row_size);
  // Drawn rows: the row's slots are placed by their ranks' estimates alone and get their tokens
  // afterwards (draw_row), so that where a drawn candidate sits never depends on its token.
  const bool drawn = context.row_probabilities != nullptr;

  // Merged best first, each token once (its best offer), up to max_children.
  std::size_t n = 0;
  std::size_t t = 0;  // next text slot
  std::size_t r = 0;  // next top-k rank
  bool spine_left = has_spine;
  float text_cap = 1.0f;
  float row_cap = 1.0f;
  std::uint64_t seen = 0;  // bit (token & 63) set: the token may already be out
  while (n < config_.max_children) {
    const bool text_left = text != nullptr && t < kSlotsPerContext && text->counts[t] != 0;
    // The overall row offers one draw; a token's row, every rank.
    const bool row_left = r < (context.overall ? std::min<std::size_t>(1, row.size()) : row.size());
    const float text_p =
        text_left ? std::min({text_cap, 1.0f, share(*text, t) * estimates_[text_class(text_order, 0)]}) : -1.0f;
    const float row_p = row_left ? std::min(row_cap, estimates_[row_class(context, r)]) : -1.0f;
    const float spine_p = spine_left ? spine_conditional_[next_spine] : -1.0f;
    Candidate next;
    if (spine_p >= text_p && spine_p >= row_p && spine_left) {
      next = Candidate{spine_[next_spine], spine_p, kSpineClass, 1.0f};
      spine_left = false;
    } else if (text_p >= row_p && text_left) {
      next = Candidate{text->tokens[t], text_p, text_class(text_order, 0), share(*text, t)};
      text_cap = text_p;
      ++t;
    } else if (row_left) {
      next = Candidate{row[r], row_p, row_class(context, r), 1.0f};
      row_cap = row_p;
      ++r;
      if (drawn) {
        next.excluded = 0;  // a slot; its token comes from draw_row
        out[n++] = next;
        continue;
      }
    } else {
      break;
    }
    const std::uint64_t bit = std::uint64_t{1} << (next.token & 63U);
    if ((seen & bit) != 0) {
      bool again = false;
      for (std::size_t i = 0; i < n && !again; ++i) again = out[i].excluded == kNotDrawn && out[i].token == next.token;
      if (again) continue;
    }
    seen |= bit;
    out[n++] = next;
  }
  if (drawn) n = draw_row(context, owner, depth, out, n);
  float sum = 0.0f;
  for (std::size_t i = 0; i < n; ++i) sum += out[i].probability;
  // One token follows, so the children's events exclude each other: their estimates may not
  // sum to more than 1. The spine's estimate is calibrated on this very sequence (MatchDrafter's
  // gate), so when it is the best it keeps it (a copy at 0.95 stays 0.95 instead of paying, at
  // every depth, for the priors of the alternatives beside it) and the others share what is
  // left in proportion; otherwise all are scaled alike.
  if (sum > 1.0f) {
    const bool spine_first = out[0].source_class == kSpineClass;
    const float fixed = spine_first ? out[0].probability : 0.0f;
    const float rest = sum - fixed;
    const float scale = rest > 0.0f ? std::max(0.0f, 1.0f - fixed) / rest : 0.0f;
    for (std::size_t i = spine_first ? 1 : 0; i < n; ++i) out[i].probability *= scale;
  }
  return n;
}

std::size_t TreeDrafter::draw_row(const Context& context, std::size_t owner, std::size_t depth, Candidate* out,
                                  std::size_t n) const noexcept {
  const std::span<const Token> row(context.row, context.row_size);
  const float* const mass = context.row_probabilities;
  // The row positions no draw may give: tokens another source offers here, and tokens of no
  // probability (a draw could not give them).
  std::uint32_t taken = 0;
  for (std::size_t p = 0; p < row.size(); ++p) {
    bool offered = !(mass[p] > 0.0f);
    for (std::size_t i = 0; i < n && !offered; ++i) offered = out[i].excluded == kNotDrawn && out[i].token == row[p];
    if (offered) taken |= std::uint32_t{1} << p;
  }
  // The draws, in the slots' order (that of their ranks), without replacement: each from the
  // positions left, by their probabilities. The node's token sits at position seen_ + depth;
  // the stream numbers the tree, the node and the slot, so no draw is used twice.
  const std::uint64_t position = seen_ + depth;
  std::size_t kept = 0;
  std::size_t slot = 0;
  for (std::size_t i = 0; i < n; ++i) {
    Candidate c = out[i];
    if (c.excluded == kNotDrawn) {
      out[kept++] = c;
      continue;
    }
    double total = 0.0;
    for (std::size_t p = 0; p < row.size(); ++p) {
      if ((taken >> p & 1U) == 0) total += mass[p];
    }
    if (!(total > 0.0)) continue;  // the row has nothing left: this slot and every later one go
    const std::uint64_t stream = (std::uint64_t{1} << 63) | (trees_built_ << 24) | (owner << 8) | slot++;
    const double target = position_uniform(draw_key_, position, stream) * total;
    double cumulative = 0.0;
    std::size_t pick = row.size();
    for (std::size_t p = 0; p < row.size(); ++p) {
      if ((taken >> p & 1U) != 0) continue;
      pick = p;
      cumulative += mass[p];
      if (target < cumulative) break;
    }
    c.token = row[pick];
    c.excluded = taken;
    taken |= std::uint32_t{1} << pick;
    out[kept++] = c;
  }
  return kept;
}

std::size_t TreeDrafter::predict_tree(DraftTree& tree, std::size_t max_drafts, std::size_t max_depth,
                                      float min_path_probability) noexcept {
  return build_tree(tree, max_drafts, max_depth, min_path_probability, nullptr);
}

std::size_t TreeDrafter::predict_tree(DraftTree& tree, std::size_t max_drafts, std::size_t max_depth,
                                      float min_path_probability, DraftDistributions& q) {
  q.clear();
  return build_tree(tree, max_drafts, max_depth, min_path_probability, &q);
}

std::size_t TreeDrafter::build_tree(DraftTree& tree, std::size_t max_drafts, std::size_t max_depth,
                                    float min_path_probability, DraftDistributions* q) {
  tree.clear();
  ++trees_built_;
  const std::size_t budget = std::min({max_drafts, tree.capacity(), DraftTree::kMaxNodes});
  if (budget == 0 || max_depth == 0) return 0;

  // The spine: the chain and its conditional estimates.
  // A spine longer than the budget could never be used.
  std::array<float, kMaxSpine> path{};
  const std::size_t spine_room = std::min({kMaxSpine, max_depth, budget});
  const std::size_t spine_made =
      chain_.predict(std::span<Token>(spine_).first(spine_room), std::span<float>(path).first(spine_room));
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
  static_cast<void>(locate(root, spine_made));
  candidate_counts_[kRoot] =
      static_cast<std::uint8_t>(expand(root, spine_made, kRoot, 0, candidates_.data() + kRoot * kMaxChildren));

  // A max-heap by path probability of each expanded node's next unused candidate, and of the
  // nodes not yet expanded, keyed by their best child's estimate times their path probability
  // (an upper bound: merging and scaling only lower it). A node is expanded only when that
  // bound comes first, so the leaves of the tree, about half its nodes, never are; the nodes
  // still come out in non-increasing order.
  heap_.clear();
  const auto entry = [](float path_probability, std::int32_t parent, std::uint32_t child) -> HeapEntry {
    // Stored as child + 1 (wrapping kExpand to 0), so that a tie goes to a candidate.
    return std::uint64_t{std::bit_cast<std::uint32_t>(path_probability)} << 32 |
           std::uint64_t{static_cast<std::uint32_t>(parent + 1)} << 8 | ((child + 1) & 0xffU);
  };
  const auto push = [&](std::int32_t parent, std::uint32_t child) {
    const std::size_t owner = parent == kTreeRoot ? kRoot : static_cast<std::size_t>(parent);
    if (child >= candidate_counts_[owner]) return;
    const float base = parent == kTreeRoot ? 1.0f : tree.path_probabilities()[static_cast<std::size_t>(parent)];
    heap_.push_back(entry(base * candidates_[owner * kMaxChildren + child].probability, parent, child));
    std::push_heap(heap_.begin(), heap_.end());
  };
  push(kTreeRoot, 0);
  while (!heap_.empty() && tree.size() < budget) {
    std::pop_heap(heap_.begin(), heap_.end());
    const HeapEntry top = heap_.back();
    heap_.pop_back();
    struct {
      float path_probability;
      std::int32_t parent;
      std::uint32_t child;
    } const best{std::bit_cast<float>(static_cast<std::uint32_t>(top >> 32)),
                 static_cast<std::int32_t>((top >> 8) & 0xffffffU) - 1, static_cast<std::uint32_t>((top - 1) & 0xffU)};
    if (best.path_probability < min_path_probability) break;  // and so is every later one
    if (best.child == kExpand) {
      const auto node = static_cast<std::size_t>(best.parent);
      candidate_counts_[node] = static_cast<std::uint8_t>(expand(contexts_[node], spine_made, node,
                                                                 tree.depths()[node] + 1,
                                                                 candidates_.data() + node * kMaxChildren));
      push(best.parent, 0);
      continue;
    }
    const std::size_t owner = best.parent == kTreeRoot ? kRoot : static_cast<std::size_t>(best.parent);
    const Candidate& chosen = candidates_[owner * kMaxChildren + best.child];
    const std::size_t node = tree.push(best.parent, chosen.token, chosen.probability, chosen.source_class);
    bases_[node] = chosen.base;
    push(best.parent, best.child + 1);  // its next sibling

    const Context& up = contexts_[owner];
    if (q != nullptr) {
      if (chosen.excluded == kNotDrawn) {
        q->push_one_hot();
      } else {
        // What it was drawn from: its row's positions not taken before it.
        std::array<Token, TopKTable::kMaxK> support{};
        std::array<float, TopKTable::kMaxK> mass{};
        std::size_t m = 0;
        for (std::size_t p = 0; p < up.row_size; ++p) {
          if ((chosen.excluded >> p & 1U) != 0) continue;
          support[m] = up.row[p];
          mass[m++] = up.row_probabilities[p];
        }
        q->push_unchecked(std::span<const Token>(support).first(m), std::span<const float>(mass).first(m));
      }
    }
    Context& here = contexts_[node];
    here.tokens = {up.tokens[1], up.tokens[2], chosen.token};
    here.known = std::min<std::uint32_t>(up.known + 1, kOrders);
    // On the spine when it is the spine's next token, whichever source offered it best.
    const std::size_t next_spine = static_cast<std::size_t>(up.spine + 1);
    const bool on_spine = up.spine != kOffSpine && next_spine < spine_made && spine_[next_spine] == chosen.token;
    here.spine = on_spine ? up.spine + 1 : kOffSpine;
    if (tree.depths()[node] + 1 < max_depth) {
      const float bound = locate(here, spine_made);
      if (bound <= 0.0f) continue;  // nothing to offer under it
      heap_.push_back(entry(tree.path_probabilities()[node] * bound, static_cast<std::int32_t>(node), kExpand));
      std::push_heap(heap_.begin(), heap_.end());
    }
  }
  built_ = tree.size();
  return tree.size();
}

void TreeDrafter::check_pass(const DraftTree& tree, std::span<const Token> fed, std::span<const Token> model_tokens,
                             std::span<const std::size_t> kept, std::span<const Token> top) const {
  const std::size_t n = tree.size();
  const auto refuse = [](const std::string& what) {
    throw ArgumentError("ngramspec", "TreeDrafter::observe_pass: " + what);
  };
  if (fed.size() != n + 1 || model_tokens.size() != n + 1) {
    refuse(std::to_string(fed.size()) + " fed and " + std::to_string(model_tokens.size()) +
           " model tokens for a tree of " + std::to_string(n) + " nodes; it needs " + std::to_string(n + 1) + " each");
  }
  if (kept.empty() || kept.size() > n + 1 || kept[0] != 0) {
    refuse("kept must start at the root (entry 0) and hold at most " + std::to_string(n + 1) + " entries; got " +
           std::to_string(kept.size()) + (kept.empty() ? "" : " starting at " + std::to_string(kept[0])));
  }
  for (std::size_t j = 1; j < kept.size(); ++j) {
    if (kept[j] == 0 || kept[j] > n || static_cast<std::size_t>(tree.parents()[kept[j] - 1] + 1) != kept[j - 1]) {
      refuse("kept[" + std::to_string(j) + "] = " + std::to_string(kept[j]) + " does not follow entry " +
             std::to_string(kept[j - 1]) + " in the tree");
    }
  }
  if (top.empty()) return;
  if (table_ != nullptr ? top.size() != fed.size() * table_->k() : top.size() % fed.size() != 0) {
    refuse(std::to_string(top.size()) + " top-k tokens for " + std::to_string(fed.size()) + " fed tokens; it needs " +
           (table_ != nullptr ? std::to_string(table_->k()) : std::string("the same number of")) + " for each");
  }
  if (table_ == nullptr) return;
  const auto check_vocabulary = [&](std::span<const Token> tokens, const char* what) {
    for (const Token token : tokens) {
      if (token >= table_->vocab_size()) {
        refuse(std::string(what) + " " + std::to_string(token) + " is outside the top-k table's vocabulary of " +
               std::to_string(table_->vocab_size()));
      }
    }
  };
  check_vocabulary(fed, "a fed token");
  check_vocabulary(top, "a top-k token");
  // The rows it records (below): a token twice in one would come back as twin siblings. In a
  // vocabulary of fewer than k tokens, a row's tokens past the vocabulary's size can only repeat.
  if (config_.draw_recycled && table_->has_probabilities()) return;
  const std::size_t k = table_->k();
  if (const auto repeat = detail::first_repeated_top_token(top, k, table_->vocab_size())) {
    refuse(detail::repeated_top_token_text(top, *repeat, 0, k));
  }
}

void TreeDrafter::observe_pass(const DraftTree& tree, std::span<const Token> fed, std::span<const Token> model_tokens,
                               std::span<const std::size_t> kept, std::span<const Token> top) {
  check_pass(tree, fed, model_tokens, kept, top);
  const std::size_t n = tree.size();
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
    // What the estimate was before its class's scale: a text node's share (when this is the
    // tree predict_tree built last), 1 otherwise.
    const float base = i < built_ ? bases_[i] : 1.0f;
    trials_[c] += 1.0f;
    expected_[c] += base;
    if (tokens[i] == model_tokens[parent_entry]) hits_[c] += 1.0f;
    if (trials_[c] >= kMaxTrials) {
      trials_[c] *= 0.5f;
      expected_[c] *= 0.5f;
      hits_[c] *= 0.5f;
    }
    estimates_[c] = expected_[c] > 0.0f ? hits_[c] / expected_[c] : 0.0f;
  }
  // A table the model records its distributions into is left to it: ranks alone would
  // overwrite the probabilities the draws need.
  if (table_ != nullptr && !top.empty() && !(config_.draw_recycled && table_->has_probabilities())) {
    table_->record_unchecked(fed, top);
  }
  // NASD's enrichment: the model's top-1 after each fed token also counts as a continuation of
  // that token (a 1-token context), as if the text had shown it.
  if (config_.enrich_counts && !top.empty()) {
    const std::size_t k = top.size() / fed.size();
    for (std::size_t e = 0; e < fed.size(); ++e) count({0, 0, fed[e]}, 1, top[e * k]);
  }
}

}  // namespace ngramspec
