"""Tree batches (experimental in the C ABI): a batch of TreeDrafters driven from Python through tree
passes emits exactly what plain greedy decoding emits, for every sequence, with sequences joining and
leaving, with and without a cost, a top-k table (shared or one per drafter), and passes that verify
only the first nodes; no tree pass needs a KV entry at or past max_context - 1, where a chain's
passes end; bad calls raise with the library's message."""

from __future__ import annotations

import random

import numpy as np
import pytest

from ngramspec import BatchSpeculator, StopReason
from test_greedy_property import greedy, make_model

VOCAB = 64  # the models' tokens are below 54


def path_of(entry: int, pass_parents: list[int], fed: list[int]) -> list[int]:
    """The tokens from the root to pass entry `entry` (entry 0 is the root, already in the context)."""
    path = []
    while entry != 0:
        path.append(fed[entry])
        entry = pass_parents[entry]
    return path[::-1]


def serve(seed: int, *, tree: bool | dict, cost: str | None, pool: int, total: int) -> tuple[int, int, int]:
    """Serves `total` random sequences through a tree batch; returns (sequences finished, nodes verified,
    sequences that ran into their max_context)."""
    rng = random.Random(seed)
    spec = BatchSpeculator(max_sequences=pool, cost=cost, tree=tree,
                           drafter={"index_capacity": 256, "count_window": 64, "min_confidence": 0.0})
    k = spec.top_k
    lanes: dict[int, dict] = {}
    started = finished = nodes_verified = context_full = 0
    while started < total or lanes:
        while len(lanes) < pool and started < total:
            model = make_model(rng.choice(["periodic", "looping", "mixed"]), rng.randrange(1000))
            motif = [rng.randrange(3, 20) for _ in range(rng.randrange(1, 6))]
            prompt = [motif[i % len(motif)] for i in range(rng.randrange(1, 30))]
            limits = dict(max_new_tokens=rng.randrange(1, 60), stop_tokens=[rng.randrange(3, 54)] if rng.random() < 0.3
                          else [], max_context=len(prompt) + rng.randrange(1, 50) if rng.random() < 0.5 else 0)
            seq_id = rng.getrandbits(64)
            spec.begin(seq_id, prompt, max_drafts=rng.randrange(1, 24), **limits)
            lanes[seq_id] = dict(model=model, context=list(prompt), output=[], max_context=limits["max_context"],
                                 reference=greedy(model, prompt, limits["max_new_tokens"], limits["stop_tokens"],
                                                  limits["max_context"])[0])
            started += 1
        ids = [i for i in lanes if rng.random() < 0.85] or [next(iter(lanes))]
        rng.shuffle(ids)
        tokens, parents, offsets = spec.propose_trees(ids)
        send_top = k > 0 and rng.random() < 0.7
        model_tokens: list[int] = []
        top: list[int] = []
        model_offsets = [0]
        for i, seq_id in enumerate(ids):
            lane = lanes[seq_id]
            start, n = int(offsets[i]), int(offsets[i + 1] - offsets[i])
            if not lane["output"]:
                assert n == 0  # the prefill
                fed, pass_parents = [lane["context"][-1]], [0]
                context = lane["context"][:-1]
            else:
                # The pass's entries, the root at the cache length then one per node, end where a chain's
                # would: below max_context - 1 (the last token a sequence may emit is never fed).
                cache_length = len(lane["context"]) - 1
                if lane["max_context"]:
                    assert cache_length + 1 + n <= lane["max_context"] - 1
                verified = rng.randrange(n + 1) if rng.random() < 0.1 else n
                fed = [lane["context"][-1]] + [int(t) for t in tokens[start:start + verified]]
                pass_parents = [0] + [int(p) + 1 for p in parents[start:start + verified]]
                assert all(0 <= pass_parents[e] < e for e in range(1, len(fed)))
                nodes_verified += verified
                context = lane["context"][:-1]
            for e in range(len(fed)):
                answer = lane["model"](context + [fed[0]] + path_of(e, pass_parents, fed))
                model_tokens.append(answer)
                top.extend((answer + r) % VOCAB for r in range(k))
            model_offsets.append(len(model_tokens))
            lane["pass"] = pass_parents
        steps, kept = spec.accept_trees(ids, np.array(model_tokens, np.uint32), model_offsets,
                                        top if send_top else None)
        for i, seq_id in enumerate(ids):
            lane = lanes[seq_id]
            at = model_offsets[i]
            path = [int(e) for e in kept[at:at + int(steps["emitted"][i])]]
            assert path[0] == 0 and all(lane["pass"][path[j]] == path[j - 1] for j in range(1, len(path)))
            emitted = [model_tokens[at + e] for e in path]
            lane["output"] += emitted
            lane["context"] += emitted
            assert lane["output"] == lane["reference"][:len(lane["output"])]
            if steps["finished"][i]:
                assert lane["output"] == lane["reference"]
                context_full += steps["stop_reason"][i] == StopReason.MAX_CONTEXT
                spec.finish(seq_id)
                del lanes[seq_id]
                finished += 1
    assert len(spec) == 0
    assert spec.stats.drafted == nodes_verified
    return finished, nodes_verified, context_full


@pytest.mark.parametrize("tree", [True, {"vocab_size": VOCAB, "top_k": 3},
                                  {"vocab_size": VOCAB, "top_k": 2, "shared_top_k": False, "max_children": 3,
                                   "carry_over": True, "enrich_counts": True}])
@pytest.mark.parametrize("cost", [None, "knee:8"])
def test_every_output_is_plain_greedy_decoding(tree: bool | dict, cost: str | None) -> None:
    finished = nodes = context_full = 0
    for seed in range(4):
        f, n, c = serve(seed, tree=tree, cost=cost, pool=1 + seed * 2, total=10)
        finished += f
        nodes += n
        context_full += c
    assert finished == 40
    assert nodes > 200, "the runs must speculate for the property to say anything"
    assert context_full > 0, "sequences must run into max_context for the bound to say anything"


def test_top_k_and_tree_properties() -> None:
    assert BatchSpeculator(max_sequences=1).top_k == 0
    assert not BatchSpeculator(max_sequences=1).tree
    spec = BatchSpeculator(max_sequences=1, tree={"vocab_size": 32, "top_k": 4})
    assert spec.tree and spec.top_k == 4
    assert BatchSpeculator(max_sequences=1, tree=True).top_k == 0


def test_bad_calls_are_errors_with_the_library_message() -> None:
    with pytest.raises(ValueError, match="the batch drafts chains"):
        BatchSpeculator(max_sequences=1).propose_trees([])
    with pytest.raises(TypeError, match="unknown tree setting 'depth'"):
        BatchSpeculator(max_sequences=1, tree={"depth": 3})
    with pytest.raises(TypeError, match="shared_top_k must be a bool"):
        BatchSpeculator(max_sequences=1, tree={"shared_top_k": 1})
    with pytest.raises(ValueError, match="max_children = 0"):
        BatchSpeculator(max_sequences=1, tree={"max_children": 0})
    spec = BatchSpeculator(max_sequences=2, tree={"vocab_size": 32, "top_k": 2})
    spec.begin(1, [5, 6, 5, 6, 5], max_drafts=8)
    spec.begin(2, [7, 8, 7, 8], max_drafts=8)
    tokens, parents, offsets = spec.propose_trees([1, 2])
    assert len(tokens) == 0 and list(offsets) == [0, 0, 0]
    with pytest.raises(ValueError, match="top has 3 tokens; it needs none or top_k\\(\\) = 2 per model token, 4"):
        spec.accept_trees([1, 2], [6, 7], [0, 1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="sequence 2: top\\[3\\] = 40 is outside the top-k table's vocabulary of 32"):
        spec.accept_trees([1, 2], [6, 7], [0, 1, 2], [1, 2, 3, 40])
    with pytest.raises(ValueError, match=r"sequence 2: top\[3\] = 9 is invalid: token 9 is also top\[2\], in the "
                                         r"same row \(entry 1\); a row lists 2 distinct tokens"):
        spec.accept_trees([1, 2], [6, 7], [0, 1, 2], [1, 2, 9, 9])
    with pytest.raises(ValueError, match="sequence 1 has 2 model tokens; it needs 1 to 1"):
        spec.accept_trees([1, 2], [6, 5, 7], [0, 2, 3])
    steps, kept = spec.accept_trees([1, 2], [6, 7], [0, 1, 2], [1, 2, 3, 4])
    assert list(steps["emitted"]) == [1, 1] and list(kept) == [0, 0]
    tokens, parents, offsets = spec.propose_trees([1, 2])
    assert len(tokens) > 0 and parents[0] == -1


def test_sizes_out_of_range_are_value_errors_naming_the_value_and_the_range() -> None:
    with pytest.raises(ValueError, match=r"tree setting vocab_size = 1180591620717411303424 is out of range: it must "
                                         r"be from 0 to 2\*\*64 - 1"):
        BatchSpeculator(max_sequences=1, tree={"vocab_size": 2**70})
    for vocab in (2**24 + 1, 200_000_000, 2**64 - 1):
        for shared in (True, False):
            with pytest.raises(ValueError, match=f"vocab_size = {vocab} is out of range: it must be 1 .. "
                                                 f"kMaxVocabSize = 16777216"):
                BatchSpeculator(max_sequences=2, tree={"vocab_size": vocab, "shared_top_k": shared})
    for pool in (2**20 + 1, 2**62, 2**64 - 1):
        for tree in (False, True):
            with pytest.raises(ValueError, match=f"max_sequences = {pool} is invalid: must be between 1 and 1048576"):
                BatchSpeculator(max_sequences=pool, tree=tree)
    with pytest.raises(ValueError, match=r"max_sequences = 1180591620717411303424 is out of range"):
        BatchSpeculator(max_sequences=2**70)


def test_every_call_on_a_closed_batch_says_it_is_closed() -> None:
    spec = BatchSpeculator(max_sequences=2, tree={"vocab_size": 32, "top_k": 2})
    spec.begin(1, [5, 6, 5, 6, 5], max_drafts=8)
    spec.close()
    assert spec.closed
    calls = {
        "begin": lambda: spec.begin(2, [1, 2]),
        "finish": lambda: spec.finish(1),
        "cancel": lambda: spec.cancel(1),
        "propose": lambda: spec.propose([1]),
        "propose_into": lambda: spec.propose_into([1], np.empty(8, np.uint32), np.empty(2, np.uintp)),
        "accept": lambda: spec.accept([1], [6], [0, 1]),
        "propose_trees": lambda: spec.propose_trees([1]),
        "accept_trees": lambda: spec.accept_trees([1], [6], [0, 1]),
        "stats": lambda: spec.stats,
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=f"^ngramspec.BatchSpeculator.{name}: the BatchSpeculator is closed$"):
            call()


def drawing_rows(vocab: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """A target's top k tokens after each token, best first, and their probabilities (the rest of
    the vocabulary keeps some mass)."""
    rng = np.random.default_rng(5)
    top = np.empty((vocab, k), np.uint32)
    probabilities = np.empty((vocab, k), np.float32)
    for t in range(vocab):
        weights = rng.random(vocab) + 0.05
        weights /= weights.sum()
        order = np.argsort(-weights, kind="stable")[:k]
        top[t] = order
        probabilities[t] = weights[order]
    return top, probabilities


def blend_overall(overall: dict[int, float], tokens, probabilities, k: int) -> dict[int, float]:
    """The table's overall row after one more recorded distribution (TopKTable::overall_row): the
    first replaces it, then each keeps 0.9 of its mass; the k most probable kept, ties to the lower id."""
    if not overall:
        merged = {int(t): float(p) for t, p in zip(tokens, probabilities)}
    else:
        merged = {t: 0.9 * m for t, m in overall.items()}
        for t, p in zip(tokens, probabilities):
            merged[int(t)] = merged.get(int(t), 0.0) + 0.1 * float(p)
    return dict(sorted(merged.items(), key=lambda item: (-item[1], item[0]))[:k])


def test_drawn_trees_give_each_node_its_q_from_the_recorded_probabilities() -> None:
    # Over random passes (a random model answer per entry): each node's q is empty (chosen) or a
    # support of tokens from the recorded row of its parent's token, with their recorded
    # probabilities, never one taken before it at its parent; where the parent's token has no
    # row yet, one node's support is from the overall row of every distribution recorded. Drawn nodes
    # appear once rows are recorded.
    vocab, k = 16, 4
    top_rows, p_rows = drawing_rows(vocab, k)
    spec = BatchSpeculator(max_sequences=3, tree={"vocab_size": vocab, "top_k": k, "draw_recycled": True,
                                                  "draw_seed": 9, "successor_slots": 64})
    rng = random.Random(3)
    drawn = 0
    drawn_overall = 0
    # The sequences share one table (shared_top_k), kept from request to request.
    recorded: set[int] = set()  # the tokens whose rows were recorded
    overall: dict[int, float] = {}
    for request in range(12):
        ids = [3 * request + s for s in range(3)]
        last = {}
        for seq_id in ids:
            prompt = [rng.randrange(vocab) for _ in range(rng.randrange(2, 8))]
            spec.begin(seq_id, prompt, max_new_tokens=20, max_drafts=8)
            last[seq_id] = prompt[-1]
        while ids:
            tokens, parents, offsets, q_offsets, q_tokens, q_probabilities = spec.propose_trees(ids, with_q=True)
            assert len(q_offsets) == len(tokens) + 1 and q_offsets[0] == 0 and q_offsets[-1] == len(q_tokens)
            model_tokens: list[int] = []
            model_offsets = [0]
            for i, seq_id in enumerate(ids):
                begin, end = int(offsets[i]), int(offsets[i + 1])
                taken: dict[int, set[int]] = {}
                from_overall: set[int] = set()  # parents with a node drawn from the overall row
                for n in range(begin, end):
                    up = int(parents[n])
                    parent_token = last[seq_id] if up == -1 else int(tokens[begin + up])
                    support = [int(t) for t in q_tokens[q_offsets[n]:q_offsets[n + 1]]]
                    siblings = taken.setdefault(up, set())
                    if support:
                        drawn += 1
                        assert int(tokens[n]) in support
                        assert not set(support) & siblings
                        supports = q_probabilities[q_offsets[n]:q_offsets[n + 1]]
                        if parent_token in recorded:
                            row = [int(t) for t in top_rows[parent_token]]
                            assert set(support) <= set(row)
                            for t, q in zip(support, supports):
                                assert q == pytest.approx(p_rows[parent_token][row.index(t)])
                        else:
                            drawn_overall += 1
                            assert up not in from_overall
                            from_overall.add(up)
                            assert set(support) <= set(overall)
                            for t, q in zip(support, supports):
                                assert q == pytest.approx(overall[t], rel=1e-5)
                    siblings.add(int(tokens[n]))
                model_tokens += [rng.randrange(vocab) for _ in range(end - begin + 1)]
                model_offsets.append(len(model_tokens))
            fed = []
            for i, seq_id in enumerate(ids):
                fed += [last[seq_id]] + [int(t) for t in tokens[offsets[i]:offsets[i + 1]]]
            top = top_rows[fed].reshape(-1)
            steps, kept = spec.accept_trees(ids, model_tokens, model_offsets, top,
                                            top_probabilities=p_rows[fed].reshape(-1))
            for token in fed:  # in the batch's order, each sequence's entries in turn
                recorded.add(token)
                overall = blend_overall(overall, top_rows[token], p_rows[token], k)
            still = []
            for i, seq_id in enumerate(ids):
                emitted = int(steps["emitted"][i])
                start = model_offsets[i]
                last[seq_id] = model_tokens[start + int(kept[start + emitted - 1])]
                if steps["finished"][i]:
                    spec.finish(seq_id)
                else:
                    still.append(seq_id)
            ids = still
    assert drawn > 50 and drawn_overall > 10


def test_drawing_calls_refuse_bad_arguments_by_name_and_value() -> None:
    with pytest.raises(TypeError, match="draw_recycled must be a bool"):
        BatchSpeculator(max_sequences=1, tree={"draw_recycled": 1})
    with pytest.raises(ValueError, match="tree setting draw_seed = -1 is invalid"):
        BatchSpeculator(max_sequences=1, tree={"draw_seed": -1})
    with pytest.raises(ValueError, match="tree->recycled_history = 1 is invalid: it must be in \\[0, 1\\)"):
        BatchSpeculator(max_sequences=1, tree={"recycled_history": 1.0, "draw_recycled": True})
    with pytest.raises(ValueError, match=r"tree setting recycled_history = 1e-50 is invalid: the library keeps it "
                                         r"as a float32"):  # float32 would make it 0 without a word
        BatchSpeculator(max_sequences=1, tree={"vocab_size": 32, "recycled_history": 1e-50, "draw_recycled": True})
    with pytest.raises(TypeError, match="recycled_history must be a number, not str"):
        BatchSpeculator(max_sequences=1, tree={"recycled_history": "0.5", "draw_recycled": True})
    with pytest.raises(ValueError, match="recycled_history weighs the distributions drawn from: it needs draw_recycled"):
        BatchSpeculator(max_sequences=1, tree={"vocab_size": 32, "recycled_history": 0.5})
    BatchSpeculator(max_sequences=1, tree={"vocab_size": 32, "draw_recycled": True, "recycled_history": 0})
    # Without a vocabulary there is no top-k table to draw from: refused, not drawing nothing with top_k 0.
    for shared in (True, False):
        with pytest.raises(ValueError, match=r"draw_recycled = 1 needs the top-k table, and tree->vocab_size = 0 "
                                             r"makes none: set tree->vocab_size to the model's vocabulary"):
            BatchSpeculator(max_sequences=1, tree={"draw_recycled": True, "shared_top_k": shared})
    for drawing in (False, True):
        spec = BatchSpeculator(max_sequences=1, tree={"vocab_size": 32, "top_k": 2, "draw_recycled": drawing})
        spec.begin(1, [5, 6, 5, 6, 5], max_drafts=8)
        tokens, parents, offsets, q_offsets, q_tokens, q_probabilities = spec.propose_trees([1], with_q=True)
        assert len(tokens) == 0 and list(q_offsets) == [0] and len(q_tokens) == len(q_probabilities) == 0
        with pytest.raises(ValueError, match="top_probabilities has 1 values; it needs one per token of top, 2"):
            spec.accept_trees([1], [6], [0, 1], [6, 7], top_probabilities=[0.5])
        with pytest.raises(ValueError, match="top_probabilities needs top"):
            spec.accept_trees([1], [6], [0, 1], top_probabilities=[0.5, 0.5])
        with pytest.raises(ValueError, match=r"top_probabilities must be one-dimensional, as top is; it has shape "
                                             r"\(1, 2\)"):
            spec.accept_trees([1], [6], [0, 1], [6, 7], top_probabilities=[[0.5, 0.5]])
        with pytest.raises(ValueError, match=r"sequence 1: top\[1\] = 6 is invalid: token 6 is also top\[0\]"):
            spec.accept_trees([1], [6], [0, 1], [6, 6], top_probabilities=[0.5, 0.5] if drawing else None)
        if not drawing:
            with pytest.raises(ValueError, match="sequence 1: its top-k table keeps no probabilities"):
                spec.accept_trees([1], [6], [0, 1], [6, 7], top_probabilities=[0.5, 0.5])
            continue
        for bad, index in (([1.5, 0.0], 0), ([0.5, -0.5], 1), ([0.0, 0.5], 0)):
            with pytest.raises(ValueError, match=f"sequence 1: top_probabilities\\[{index}\\] = "):
                spec.accept_trees([1], [6], [0, 1], [6, 7], top_probabilities=bad)
        # nothing changed: the pass is still pending, and a valid call decides it
        steps, kept = spec.accept_trees([1], [6], [0, 1], [6, 7], top_probabilities=[0.75, 0.25])
        assert int(steps["emitted"][0]) == 1
