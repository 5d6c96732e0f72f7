#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "ngramspec/draft_distribution.hpp"
#include "ngramspec/draft_tree.hpp"
#include "ngramspec/match_drafter.hpp"
#include "ngramspec/position_random.hpp"
#include "ngramspec/top_k_table.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec {

/// Configuration of a TreeDrafter; validated once, by the constructor.
struct TreeConfig {
  /// The chain that forms the tree's spine: MatchDrafter's copies and counts, and its gate's
  /// calibrated estimates.
  MatchConfig chain{};
  /// Contexts of 1, 2 and 3 tokens whose continuations the text offers as alternatives, per
  /// order (a power of two; a context hashes to one slot, and a newer context takes it over).
  std::size_t successor_slots = 4096;
  /// Vocabulary of the model, for a top-k table of the drafter's own (0: none; recycling then
  /// needs a shared table passed to the constructor); at most TopKTable::kMaxVocabSize. When
  /// chain.vocab_size is 0 it also bounds the spine (MatchConfig::vocab_size); the two may not disagree.
  std::size_t vocab_size = 0;
  /// Tokens per row of the drafter's own top-k table: how many of the model's top tokens after
  /// each token it keeps (1 .. TopKTable::kMaxK).
  std::size_t top_k = 8;
  /// Most children one node offers (1 .. kMaxChildren): the best of the spine, the text's
  /// alternatives and the recycled top-k.
  std::size_t max_children = 8;
  /// Whether reset() keeps what the drafter learnt of the model and the text (the successor
  /// counts, its own top-k table, the calibration) for the next request, as a server that
  /// serves one domain would; the spine's MatchDrafter is reset either way.
  bool carry_over = false;
  /// Whether the model's top-1 after every token a pass carried also counts as a continuation of
  /// that token in the text's counts (NASD's enrichment of its n-gram storage with the target's
  /// top-k). Off by default: it adds little to what the recycled top-k gives
  /// (docs/BENCHMARKS.md#trees measures it), for a count update per pass entry, and it needs the
  /// top-k the recycling asks for.
  bool enrich_counts = false;
  /// Whether the model's candidates are drawn from the distribution the table recorded with
  /// them (a TopKTable with probabilities, filled by SamplingModel::set_distribution_table)
  /// instead of taken best first, each node saying what it was drawn from (predict_tree with
  /// a DraftDistributions): for SamplingMode::rejection at temperature > 0, where a draft
  /// drawn from a distribution near the model's is accepted with probability
  /// sum min(p, q) instead of p(x). Where a node's token has no row yet, one candidate is drawn
  /// from the table's overall row (TopKTable::overall_row()) instead of none, calibrated as a
  /// class of its own (kOverallClass). Off by default: greedy decoding and the exact mode accept
  /// the model's best candidates more often than drawn ones. Rows recorded without
  /// probabilities are taken best first either way. Needs a top-k table: vocab_size, or a
  /// TopKTable passed to the drafter (refused without one).
  bool draw_recycled = false;
  /// Seed of those draws (their randomness is the drafter's own, apart from the verifier's).
  /// The draws also number every tree built since construction or set_draw_seed(), so requests
  /// that share a seed still draw afresh; set_draw_seed() per request makes them reproducible
  /// (and BatchSpeculator keys each request's draws apart: set_draw_stream()).
  std::uint64_t draw_seed = 0;
  /// With draw_recycled, what the drafter's own top-k table keeps of a row's earlier
  /// distributions when the model's next one after that token is recorded
  /// (TopKTable::history_weight(); 0: the last distribution alone), in [0, 1). A shared table
  /// keeps its own.
  float recycled_history = TopKTable::kDefaultHistoryWeight;
};

/// Drafts trees: the MatchDrafter chain as the spine, and at every node the alternatives the
/// text and the model's own recent predictions offer, expanded best-first.
///
/// Each node's children are candidates from three sources, merged by token:
/// - the spine: the next token of MatchDrafter's chain, with the conditional estimate of its
///   gate (the ratio of successive path estimates);
/// - the text: the continuations seen after the node's last 3, 2 and 1 tokens (counts over
///   everything observed, most frequent first, ties to the most recent);
/// - the model: the top-k it predicted after the node's token the last time it verified that
///   token (a TopKTable, fed by observe_pass()); when drawing (TreeConfig::draw_recycled) and
///   that token has no row yet, one candidate drawn from the table's overall row
///   (TopKTable::overall_row(), what the model tends to say next anywhere of late).
/// A text candidate's estimate is its share of its context's counts times its context order's
/// scale, and a model candidate's the acceptance rate of its rank; scales and rates are
/// measured online on every node whose parent the pass accepted (the only nodes whose fate
/// says what acceptance given the parent is), starting from priors. Siblings are mutually
/// exclusive (one token follows), so their estimates are made to sum to at most 1 (a spine
/// that is the best child keeps its own, calibrated on the sequence).
/// docs/ALGORITHM.md ("Trees") derives this.
///
/// predict_tree() pops candidates best-first by path probability, so the tree holds the
/// nodes with the highest path probabilities reachable under the budget, in non-increasing
/// order; any prefix is the best tree of its size, and the planner sizes a pass by cutting it.
///
/// Memory is fixed at construction (memory_bytes()); update(), predict_tree() and
/// observe_pass() never allocate (unless observe_pass() throws). Thread safety: none; one
/// drafter per sequence. A shared TopKTable must outlive the drafter and be used from one
/// thread at a time.
class TreeDrafter {
 public:
  /// Most children a node may offer.
  static constexpr std::size_t kMaxChildren = 16;
  /// Longest spine taken from the chain.
  static constexpr std::size_t kMaxSpine = 64;
  /// Longest context of the text's alternatives, in tokens.
  static constexpr std::size_t kOrders = 3;
  /// Continuations kept per context of the text: its ranks.
  static constexpr std::size_t kSlotsPerContext = 4;

  /// The calibration classes, by which DraftTree::source_classes() says where each node came
  /// from and class_estimate() reads the estimates: the spine first, then the text by context
  /// order and rank (text_class), then the model's top-k by rank (top_k_class); kClasses in all.
  static constexpr std::uint8_t kSpineClass = 0;
  /// The first text class, that of rank 0 after a context of 1 token.
  static constexpr std::size_t kFirstTextClass = 1;
  /// The first top-k class, that of rank 0: after every text class.
  static constexpr std::size_t kFirstTopKClass = kFirstTextClass + kOrders * kSlotsPerContext;
  /// The class of a candidate drawn from the table's overall row where the node's token has no
  /// row (draw_recycled): after every top-k rank.
  static constexpr std::uint8_t kOverallClass = kFirstTopKClass + TopKTable::kMaxK;
  /// Classes in all: room for every top-k rank.
  static constexpr std::size_t kClasses = 48;
  static_assert(kOverallClass < kClasses, "a class for every top-k rank and the overall row");
  /// The class of the text's rank-`rank` continuation after a context of `order` (1 .. kOrders) tokens.
  [[nodiscard]] static constexpr std::uint8_t text_class(std::size_t order, std::size_t rank) noexcept {
    return static_cast<std::uint8_t>(kFirstTextClass + (order - 1) * kSlotsPerContext + rank);
  }
  /// The class of the model's rank-`rank` top-k candidate.
  [[nodiscard]] static constexpr std::uint8_t top_k_class(std::size_t rank) noexcept {
    return static_cast<std::uint8_t>(kFirstTopKClass + rank);
  }

  /// Throws std::invalid_argument naming the field and its value when `config` is invalid (and
  /// CorpusFileError as MatchDrafter's constructor does, for a file of another vocabulary).
  /// `top_k`, when given, is the table recycled (shared; then the drafter keeps none of its
  /// own); `corpus` and `file` go to the spine's MatchDrafter. All must outlive the drafter.
  explicit TreeDrafter(TreeConfig config = {}, TopKTable* top_k = nullptr, const SharedCorpus* corpus = nullptr,
                       const MappedCorpus* file = nullptr);

  TreeDrafter(const TreeDrafter& other);
  TreeDrafter& operator=(const TreeDrafter& other);
  TreeDrafter(TreeDrafter&&) noexcept = default;
  TreeDrafter& operator=(TreeDrafter&&) noexcept = default;
  ~TreeDrafter() = default;

  /// Observes one token, appended to the sequence.
  void update(Token token) noexcept;
  /// Observes several tokens in order.
  void update(std::span<const Token> tokens) noexcept;
  /// The spine alone, as a chain (the Drafter contract: a TreeDrafter drafts chains for models
  /// that verify only chains).
  [[nodiscard]] std::size_t predict(std::span<Token> out) const noexcept { return chain_.predict(out); }
  [[nodiscard]] std::size_t predict(std::span<Token> out, std::span<float> probabilities) const noexcept {
    return chain_.predict(out, probabilities);
  }

  /// Clears `tree` and fills it best-first with up to min(max_drafts, tree.capacity()) nodes
  /// of depth below max_depth (the longest path holds max_depth drafts), stopping at the first
  /// node whose path probability is below `min_path_probability` (what a pass's cost makes a
  /// node worth; the decoders pass it so as not to build what the planner would cut). Returns
  /// the size.
  std::size_t predict_tree(DraftTree& tree, std::size_t max_drafts, std::size_t max_depth,
                           float min_path_probability = 0.0f) noexcept;
  /// DistributionTreeDrafter: as above, and q's entries replaced by one per node: what a drawn
  /// candidate (TreeConfig::draw_recycled) was drawn from (its row's tokens not taken before it
  /// at its node, by their recorded probabilities), one-hot for the rest. A node's presence
  /// never depends on its own drawn token (its estimate is its draw rank's), which is what
  /// keeps rejection sampling exact; so the decoders must not cut such a tree by what follows
  /// a node (they cut it by min_path_probability alone). q must have room for max_drafts entries
  /// of top_k tokens (reserve()) for the call to allocate nothing.
  std::size_t predict_tree(DraftTree& tree, std::size_t max_drafts, std::size_t max_depth, float min_path_probability,
                           DraftDistributions& q);

  /// Learns from a verified tree pass: `fed` the pass's tokens (the root, then the tree's
  /// nodes), `model_tokens` the model's token after each, `kept` the entries accept_tree()
  /// kept (the accepted path from the root), `top` the model's top tokens after each fed
  /// token (top.size() = fed.size() × the table's k; empty: none). Calibrates the estimates on
  /// the nodes whose parent was accepted and records the top-k rows; `tree` is the one
  /// predict_tree() built last. Throws std::invalid_argument naming the value, learning
  /// nothing, when the sizes disagree with the tree, `kept` is not a root path of it, or a fed
  /// or top-k token is outside the top-k table's vocabulary.
  void observe_pass(const DraftTree& tree, std::span<const Token> fed, std::span<const Token> model_tokens,
                    std::span<const std::size_t> kept, std::span<const Token> top);

  /// Forgets the sequence (keeping what carry_over keeps); keeps the memory.
  void reset() noexcept;
  /// Seeds the draws of draw_recycled anew (TreeConfig::draw_seed) and restarts their
  /// numbering: the next request draws as a drafter constructed with this seed would.
  void set_draw_seed(std::uint64_t seed) noexcept {
    config_.draw_seed = seed;
    draw_key_ = seed;
    trees_built_ = 0;
  }
  /// Keys the draws by `stream` besides the seed, and restarts their numbering: drafters that
  /// share a seed but not a stream draw apart. BatchSpeculator::begin gives each request the
  /// number of requests begun before it, so sequences decoded side by side (parallel samples
  /// of one prompt, say) draw independently; set_draw_seed() after begin() overrides it.
  void set_draw_stream(std::uint64_t stream) noexcept {
    draw_key_ = detail::mix64(config_.draw_seed ^ detail::mix64(stream + 1));
    trees_built_ = 0;
  }

  [[nodiscard]] const TreeConfig& config() const noexcept { return config_; }
  /// The spine's drafter.
  [[nodiscard]] const MatchDrafter& chain() const noexcept { return chain_; }
  /// Spine tokens dropped for lying outside the vocabulary (MatchDrafter::out_of_vocabulary_drafts()).
  [[nodiscard]] std::uint64_t out_of_vocabulary_drafts() const noexcept { return chain_.out_of_vocabulary_drafts(); }
  /// The top-k table recycled (the drafter's own or the shared one), or nullptr.
  [[nodiscard]] const TopKTable* top_k_table() const noexcept { return table_; }
  /// The same, for the model that records its distributions into it (with draw_recycled the
  /// drafter's own table keeps probabilities: SamplingModel::set_distribution_table(drafter.top_k_table())).
  [[nodiscard]] TopKTable* top_k_table() noexcept { return table_; }
  /// The best estimate a recycled top-k candidate can get now: the decoders ask the model for its
  /// top-k only when a pass's cost lets nodes this likely in.
  [[nodiscard]] float top_k_ceiling() const noexcept;
  /// The current estimate of class `c` (< kClasses).
  [[nodiscard]] float class_estimate(std::size_t c) const noexcept;
  /// Bytes held; fixed at construction (a shared top-k table is not counted).
  [[nodiscard]] std::size_t memory_bytes() const noexcept;

 private:
  // Continuations of one context: up to 4 tokens, most frequent first.
  struct Successors {
    std::uint64_t key = 0;
    std::array<Token, kSlotsPerContext> tokens{};
    std::array<std::uint16_t, kSlotsPerContext> counts{};
  };
  static constexpr std::uint32_t kNotDrawn = 0xffffffffu;
  struct Candidate {
    Token token;
    float probability;
    std::uint8_t source_class;
    float base;  // the estimate before its class's scale: a text share, else 1
    // Drawn from the node's row (draw_recycled): the row positions it could not be (taken
    // before it); kNotDrawn when it was not drawn.
    std::uint32_t excluded = kNotDrawn;
  };
  // Context::spine of a node off the spine: its children are off it too (the root's -1 says
  // that its next spine token is the first).
  static constexpr std::int32_t kOffSpine = -2;
  // A node's last (up to) 3 tokens, oldest first, and how many are known.
  struct Context {
    std::array<Token, kOrders> tokens;
    std::uint32_t known;
    std::int32_t spine;  // index of the spine token this node is; -1 for the root, kOffSpine off the spine
    // Where its candidates are (locate()): the longest seen context's counts and the model's row.
    const Successors* text;
    std::uint32_t text_order;
    std::uint32_t row_size;
    const Token* row;
    const float* row_probabilities;  // the row's, when it has them and draw_recycled is on; else nullptr
    bool overall;  // the row is the table's overall row (the token has none): one candidate, kOverallClass
  };
  // One entry of predict_tree's heap, in one integer, so that comparing and moving entries is
  // one instruction: the path probability's bits on top (a non-negative float orders as its
  // bits do), then the parent (tree index + 1, 0 for the root) and the child (index in the
  // parent's candidate list, or kExpand: expand the parent). On a tie a candidate comes before
  // an expansion, and a later child before an earlier one.
  using HeapEntry = std::uint64_t;
  static constexpr std::uint32_t kExpand = 0xff;

  // The calibration class of the rank-`rank` candidate of a node's row: its top-k rank's, or the
  // overall row's.
  [[nodiscard]] static std::uint8_t row_class(const Context& context, std::size_t rank) noexcept {
    return context.overall ? kOverallClass : top_k_class(rank);
  }
  void learn(Token token) noexcept;
  void check_pass(const DraftTree& tree, std::span<const Token> fed, std::span<const Token> model_tokens,
                  std::span<const std::size_t> kept, std::span<const Token> top) const;
  // Counts `token` as a continuation of the last `order` tokens of `context`.
  void count(const std::array<Token, kOrders>& context, std::size_t order, Token token) noexcept;
  [[nodiscard]] static float share(const Successors& entry, std::size_t slot) noexcept;
  // Finds a node's candidate lists and returns the best estimate among them (0: none).
  float locate(Context& context, std::size_t spine_made) const noexcept;
  std::size_t expand(const Context& context, std::size_t spine_made, std::size_t owner, std::size_t depth,
                     Candidate* out) const noexcept;
  // Draws the row candidates of out[0 .. n) (draw_recycled): their tokens, each from the row's
  // positions not yet taken; drops those the row has no token left for. Returns the new n.
  std::size_t draw_row(const Context& context, std::size_t owner, std::size_t depth, Candidate* out,
                       std::size_t n) const noexcept;
  std::size_t build_tree(DraftTree& tree, std::size_t max_drafts, std::size_t max_depth, float min_path_probability,
                         DraftDistributions* q);
  void reset_learning() noexcept;

  TreeConfig config_;
  MatchDrafter chain_;
  std::unique_ptr<TopKTable> own_table_;
  TopKTable* table_ = nullptr;
  std::array<std::vector<Successors>, kOrders> successors_;
  std::size_t successor_mask_ = 0;
  std::array<Token, kOrders> recent_{};  // the last 3 tokens, oldest first
  std::uint64_t seen_ = 0;
  alignas(64) std::array<float, kClasses> hits_{};  // on a cache line of its own, the three after it too
  std::array<float, kClasses> trials_{};
  std::array<float, kClasses> expected_{};   // the trials' bases summed
  std::array<float, kClasses> estimates_{};  // hits_ / expected_: the class's scale

  // predict_tree's scratch, sized for DraftTree::kMaxNodes nodes.
  std::array<Token, kMaxSpine> spine_{};
  std::array<float, kMaxSpine> spine_conditional_{};
  std::vector<Context> contexts_;                 // per node, plus the root at the end
  std::vector<float> bases_;                      // per node of the last tree built: its candidate's base
  std::size_t built_ = 0;                         // nodes of the last tree built
  std::vector<Candidate> candidates_;             // per node (and the root), kMaxChildren each
  std::vector<std::uint8_t> candidate_counts_;
  std::vector<HeapEntry> heap_;
  std::vector<std::uint8_t> on_path_;             // observe_pass: per pass entry
  std::uint64_t trees_built_ = 0;                 // numbers each tree's draws apart
  std::uint64_t draw_key_ = 0;                    // the draws' seed: config_.draw_seed, or it keyed by a stream
};

}  // namespace ngramspec
