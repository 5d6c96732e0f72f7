#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ngramspec/argument_error.hpp"
#include "ngramspec/decode_options.hpp"
#include "ngramspec/decode_step.hpp"
#include "ngramspec/detail/batch_checks.hpp"
#include "ngramspec/detail/draft_estimates.hpp"
#include "ngramspec/detail/open_table.hpp"
#include "ngramspec/draft_tree.hpp"
#include "ngramspec/drafter.hpp"
#include "ngramspec/token.hpp"

namespace ngramspec::detail {

/// One sequence of a BatchSpeculator<D>: its drafter (pooled: kept, reset, from one sequence
/// to the next), where it stands, its options, the drafts proposed since its last step, its
/// record for the corpus and, with a tree drafter, the tree proposed since its last step and
/// the token its next pass feeds first (the root), which observe_pass() is told.
template <Drafter D>
struct SequenceSlot {
  static constexpr bool kTrees = TreeDraftingDrafter<D>;
  struct TreeState {
    DraftTree tree;
    Token last = 0;
  };
  struct NoTrees {};

  explicit SequenceSlot(D d) : drafter(std::move(d)) {}

  /// Runs a new sequence after `prompt` under `options` from `started` (start_sequence()'s);
  /// feeds the prompt to the drafter when it speculates. Allocates only to hold more stop
  /// tokens, or a larger max_drafts, than the slot held before.
  void start(std::span<const Token> prompt, const DecodeOptions& options, const SequenceState& started) {
    if constexpr (kTrees) {
      trees.tree.reserve(options.max_drafts);
      trees.tree.clear();
      trees.last = prompt.back();
    }
    this->options.max_new_tokens = options.max_new_tokens;
    this->options.stop_tokens.assign(options.stop_tokens.begin(), options.stop_tokens.end());
    this->options.max_context = options.max_context;
    this->options.speculate = options.speculate;
    this->options.max_drafts = options.max_drafts;
    if (pending.size() < options.max_drafts) pending.resize(options.max_drafts);
    state = started;
    pending_count = 0;
    stamp = 0;
    rate.reset();
    record.clear();
    drafter.reset();
    if (options.speculate) drafter.update(prompt);
  }

  /// Bytes the slot holds: itself, its buffers and its drafter's (when D reports memory_bytes()).
  [[nodiscard]] std::size_t memory_bytes() const noexcept {
    std::size_t bytes = sizeof(SequenceSlot) + record.capacity() * sizeof(Token) + pending.capacity() * sizeof(Token) +
                        options.stop_tokens.capacity() * sizeof(Token);
    if constexpr (requires(const D& d) { d.memory_bytes(); }) bytes += drafter.memory_bytes() - sizeof(D);
    if constexpr (kTrees) bytes += trees.tree.capacity() * kTreeNodeBytes;
    return bytes;
  }

  D drafter;
  SequenceState state;
  DecodeOptions options;
  std::vector<Token> pending;  // drafts proposed since the last step: the first pending_count
  std::size_t pending_count = 0;
  std::uint64_t stamp = 0;  // the last call that named it, to find an id listed twice
  AcceptanceRate rate;
  std::vector<Token> record;  // output kept for the corpus
  [[no_unique_address]] std::conditional_t<kTrees, TreeState, NoTrees> trees;

 private:
  // What a DraftTree holds per node: token, parent, two estimates, depth, source class.
  static constexpr std::size_t kTreeNodeBytes =
      sizeof(Token) + sizeof(std::int32_t) + 2 * sizeof(float) + sizeof(std::uint32_t) + 1;
};

/// BatchSpeculator's sequences: a pool of slots made at construction, named by the engine's
/// ids (an open table from id to slot), and the slots of the call in progress. `Slot` has a
/// SequenceState `state` and a std::uint64_t `stamp`. Nothing allocates after construction.
template <class Slot>
class SequencePool {
 public:
  /// Room for `size` slots, none made yet: add() them, then open().
  explicit SequencePool(std::size_t size) : ids_(size) {
    slots_.reserve(size);
    call_slots_.resize(size);
    free_.reserve(size);
  }
  /// Adds a slot, made from `args`; returns it.
  template <class... Args>
  Slot& add(Args&&... args) {
    return slots_.emplace_back(std::forward<Args>(args)...);
  }
  /// Every slot added is free.
  void open() {
    for (std::size_t i = slots_.size(); i-- > 0;) free_.push_back(static_cast<std::uint32_t>(i));
  }

  /// The slot a new sequence `id` takes (take() it once it is set up). Throws
  /// std::invalid_argument naming `where` when the id is running or every slot is taken.
  [[nodiscard]] Slot& next_free(const char* where, std::uint64_t id) {
    if (contains(id)) throw ArgumentError(where, sequence_name(id) + " is already running");
    if (free_.empty()) {
      throw ArgumentError(where, sequence_name(id) + ": all " + std::to_string(slots_.size()) +
                                     " sequences of the pool (BatchConfig::max_sequences) are running");
    }
    return slots_[free_.back()];
  }
  /// next_free()'s slot runs sequence `id`.
  void take(std::uint64_t id) noexcept {
    const std::uint32_t index = free_.back();
    free_.pop_back();
    ids_.find_or_insert(id).slot_tag = index + 1;
  }
  /// Sequence `id`'s slot returns to the pool. Precondition: `id` is running.
  void release(std::uint64_t id) noexcept {
    Entry* entry = ids_.find(id);
    const std::uint32_t index = entry->slot_tag - 1;
    ids_.erase(*entry);
    free_.push_back(index);
  }

  [[nodiscard]] bool contains(std::uint64_t id) const noexcept { return ids_.find(id) != nullptr; }
  /// Sequence `id`'s slot; throws std::invalid_argument naming `where` when it is not running.
  [[nodiscard]] Slot& slot_of(const char* where, std::uint64_t id) {
    const Entry* entry = ids_.find(id);
    if (entry == nullptr) throw ArgumentError(where, sequence_name(id) + " is not running");
    return slots_[entry->slot_tag - 1];
  }

  /// Starts a call that names sequences; returns its stamp, for claim_for_call().
  [[nodiscard]] std::uint64_t next_call() noexcept { return ++calls_; }
  /// ids[i]'s slot, checked: running, not finished, not named before in the call of `stamp`;
  /// it becomes the call's slot i. Throws std::invalid_argument naming `where` otherwise.
  Slot& claim_for_call(const char* where, std::span<const std::uint64_t> ids, std::size_t i, std::uint64_t stamp) {
    Slot& slot = slot_of(where, ids[i]);
    if (slot.state.finished) {
      throw ArgumentError(where, sequence_name(ids[i]) + " (ids[" + std::to_string(i) + "]) is finished (" +
                                     to_string(slot.state.stop_reason) + "); finish() or cancel() it");
    }
    if (slot.stamp == stamp) {
      throw ArgumentError(where, sequence_name(ids[i]) + " is listed twice (ids[" + std::to_string(i) + "])");
    }
    slot.stamp = stamp;
    call_slots_[i] = &slot;
    return slot;
  }
  /// The call's slot i, found by claim_for_call().
  [[nodiscard]] Slot& of_call(std::size_t i) const noexcept { return *call_slots_[i]; }

  /// Sequences running.
  [[nodiscard]] std::size_t size() const noexcept { return slots_.size() - free_.size(); }
  [[nodiscard]] std::span<Slot> slots() noexcept { return slots_; }
  [[nodiscard]] std::span<const Slot> slots() const noexcept { return slots_; }
  /// Bytes of the pool's own tables (the slots' own memory is the caller's to count).
  [[nodiscard]] std::size_t table_bytes() const noexcept {
    return free_.capacity() * sizeof(std::uint32_t) + ids_.memory_bytes() + call_slots_.capacity() * sizeof(Slot*);
  }

 private:
  struct Entry {
    std::uint64_t key = 0;
    std::uint32_t slot_tag = 0;  // the slot's index + 1; 0: an empty entry
    [[nodiscard]] bool empty() const noexcept { return slot_tag == 0; }
  };

  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_;  // slots not running, the next to use last
  // The slots of the ids of the call in progress, found once while checking them. A call names
  // distinct running sequences, so at most the pool's size: a longer list fails its check first.
  std::vector<Slot*> call_slots_;
  OpenTable<Entry> ids_;
  std::uint64_t calls_ = 0;
};

}  // namespace ngramspec::detail
