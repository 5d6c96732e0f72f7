"""ngramspec.TokenSampler: verifying one sequence's chain of drafts, or its tree, through the C ABI, greedy, exact
and by rejection sampling, with chi-square tests that the rejection mode keeps the target's distribution (a chain's
drafts from a draft model; an engine loop over a drawing tree batch, each tree verified by verify_tree)."""

from __future__ import annotations

import math
import os
import re

import numpy as np
import pytest

from ngramspec import MAX_SUPPORT, BatchSpeculator, TokenSampler

VOCAB = 5
RUNS = 10000
DRAFTS = 2


def argmax_prefix(logits: np.ndarray, drafts: np.ndarray) -> tuple[int, int]:
    """Greedy verification: drafts accepted while each is its row's argmax, then the next row's argmax."""
    accepted = 0
    while accepted < len(drafts) and drafts[accepted] == int(np.argmax(logits[accepted])):
        accepted += 1
    return accepted, int(np.argmax(logits[accepted]))


def test_greedy_accepts_the_argmax_prefix_in_either_mode_whatever_q_is() -> None:
    rng = np.random.default_rng(20261128)
    for trial in range(500):
        vocab = int(rng.integers(1, 10))
        mode = "exact" if trial % 2 else "rejection"
        sampler = TokenSampler(vocab, mode=mode, seed=int(rng.integers(0, 2**63)))
        n = int(rng.integers(0, 7))
        logits = rng.uniform(-3, 3, size=(n + 1, vocab)).astype(np.float32)
        drafts = np.array([int(np.argmax(logits[i])) if rng.random() < 0.7 else int(rng.integers(0, vocab))
                           for i in range(n)], dtype=np.uint32)
        q_tokens = rng.integers(0, vocab, size=(n, 3)).astype(np.int32)
        q_probabilities = rng.random((n, 3)).astype(np.float32) + 0.01
        expected = argmax_prefix(logits, drafts)
        assert sampler.verify_chain(logits, int(rng.integers(0, 1000)), drafts) == expected
        assert sampler.verify_chain(logits, 3, drafts, q_tokens, q_probabilities) == expected
        assert sampler.verify_chain(logits.astype(np.float64), 3, drafts.tolist()) == expected  # converted


def test_the_two_forms_of_q_verify_alike() -> None:
    """A (drafts, S) pair of arrays and a list of per-draft supports (empty: chosen) are the same q."""
    rng = np.random.default_rng(3)
    for trial in range(300):
        sampler = TokenSampler(VOCAB, temperature=1.0, mode="rejection", seed=trial)
        n = int(rng.integers(1, 5))
        logits = rng.uniform(-2, 2, size=(n + 1, VOCAB)).astype(np.float32)
        drafts = rng.integers(0, VOCAB, size=n).astype(np.uint32)
        q_tokens = rng.integers(0, VOCAB, size=(n, 2)).astype(np.uint32)
        q_probabilities = rng.random((n, 2)).astype(np.float32) + 0.01
        dense = sampler.verify_chain(logits, 10, drafts, q_tokens, q_probabilities)
        ragged = sampler.verify_chain(logits, 10, drafts, list(q_tokens), [row.tolist() for row in q_probabilities])
        assert dense == ragged
        # A padded column of probability 0 changes nothing.
        padded_tokens = np.concatenate([q_tokens, np.zeros((n, 1), np.uint32)], axis=1)
        padded_probabilities = np.concatenate([q_probabilities, np.zeros((n, 1), np.float32)], axis=1)
        assert sampler.verify_chain(logits, 10, drafts, padded_tokens, padded_probabilities) == dense
        # Empty supports are chosen drafts, as no q at all.
        empty = [np.empty(0, np.uint32)] * n
        assert sampler.verify_chain(logits, 10, drafts, empty, [[]] * n) == sampler.verify_chain(logits, 10, drafts)


def target_logits(last: int) -> np.ndarray:
    """The target's logits after `last`: log weights 2 .. 6, no row uniform (as the C test's)."""
    return np.log(np.array([2.0 + (3 * last + 2 * t + t * t * (last + 2)) % 5 for t in range(VOCAB)], np.float32))


def target_distribution(last: int, temperature: float, top_k: int) -> np.ndarray:
    w = np.exp(target_logits(last).astype(np.float64) / temperature)
    if top_k:
        order = sorted(range(VOCAB), key=lambda t: (-w[t], t))
        w[order[top_k:]] = 0.0
    return w / w.sum()


DRAFT_Q_PROBABILITIES = np.array([0.7, 0.3], np.float32)


def draft_support(last: int) -> np.ndarray:
    """The draft model's support after `last`: two tokens (the target has mass it lacks)."""
    return np.array([(last + 1) % VOCAB, (last + 3) % VOCAB], np.uint32)


def first_two_tokens(temperature: float, top_k: int, declared: str) -> tuple[np.ndarray, int]:
    """Counts of the first two tokens of RUNS requests after the prompt [0] and the drafts accepted, two drafts a
    pass drawn from the draft model's q; `declared`: "drawn" (that q), "chosen" (none) or "other" (swapped)."""
    counts = np.zeros(VOCAB * VOCAB, np.int64)
    accepted_total = 0
    sampler = TokenSampler(VOCAB, temperature=temperature, top_k=top_k, mode="rejection")
    rows = [target_logits(t) for t in range(VOCAB)]
    declared_probabilities = DRAFT_Q_PROBABILITIES[::-1].copy() if declared == "other" else DRAFT_Q_PROBABILITIES
    for run in range(RUNS):
        sampler.set_options(seed=run)
        drafter = np.random.default_rng(run + 10**9)  # the drafter's own randomness
        sequence = [0]
        while len(sequence) < 3:
            last, drafts, supports = sequence[-1], [], []
            for _ in range(DRAFTS):
                support = draft_support(last)
                last = int(support[0] if drafter.random() < DRAFT_Q_PROBABILITIES[0] else support[1])
                drafts.append(last)
                supports.append(support)
            logits = np.stack([rows[t] for t in [sequence[-1], *drafts]])
            if declared == "chosen":
                accepted, following = sampler.verify_chain(logits, len(sequence), drafts)
            else:
                accepted, following = sampler.verify_chain(logits, len(sequence), drafts, np.stack(supports),
                                                           np.stack([declared_probabilities] * DRAFTS))
            sequence += drafts[:accepted] + [following]
            accepted_total += accepted
        counts[sequence[1] * VOCAB + sequence[2]] += 1
    return counts, accepted_total


def chi_square(counts: np.ndarray, probabilities: np.ndarray) -> tuple[float, float]:
    """Pearson's statistic over the possible cells (an impossible cell observed: infinity), and the upper 0.001
    critical value by the Wilson-Hilferty approximation."""
    if counts[probabilities == 0].sum():
        return math.inf, 0.0
    possible = probabilities > 0
    expected = probabilities[possible] * counts.sum()
    assert expected.min() >= 5, "too few runs for the chi-square approximation"
    statistic = float((((counts[possible] - expected) ** 2) / expected).sum())
    df = int(possible.sum()) - 1
    c = 2.0 / (9.0 * df)
    return statistic, df * (1.0 - c + 3.090232306167813 * math.sqrt(c)) ** 3


def first_two_probabilities(temperature: float, top_k: int) -> np.ndarray:
    first = target_distribution(0, temperature, top_k)
    return np.concatenate([first[a] * target_distribution(a, temperature, top_k) for a in range(VOCAB)])


@pytest.mark.parametrize(("temperature", "top_k"), [(1.0, 0), (0.7, 3)])
def test_rejection_verification_keeps_the_targets_distribution(temperature: float, top_k: int) -> None:
    exact = first_two_probabilities(temperature, top_k)
    counts, accepted = first_two_tokens(temperature, top_k, "drawn")
    statistic, critical = chi_square(counts, exact)
    assert statistic < critical, f"chi-square {statistic:.2f} against the critical value {critical:.2f}"
    chosen_counts, chosen_accepted = first_two_tokens(temperature, top_k, "chosen")
    statistic, critical = chi_square(chosen_counts, exact)
    assert statistic < critical, f"chosen: chi-square {statistic:.2f} against the critical value {critical:.2f}"
    assert accepted > chosen_accepted * 1.1, "passing q should accept clearly more drafts"


def test_the_chi_square_test_fails_when_the_declared_q_is_not_the_drawn_one() -> None:
    counts, _ = first_two_tokens(1.0, 0, "other")
    statistic, critical = chi_square(counts, first_two_probabilities(1.0, 0))
    assert statistic > critical


def test_a_vocabulary_beyond_the_machines_memory_is_refused_before_allocating() -> None:
    # 2^32 tokens take 48 GiB of scratch (12 bytes a token); a machine with less memory refuses them up front,
    # naming the vocabulary and the memory, instead of running out of memory as the scratch is written.
    machine = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if machine >= 12 * 2**32:
        pytest.skip("this machine has the memory for 2^32 tokens' scratch")
    with pytest.raises(ValueError, match=r"TokenSampler: vocab_size = 4294967296 takes 51539607552 bytes of scratch "
                                         rf"\(12 per token\), more than this machine's memory \({machine} bytes\)"):
        TokenSampler(2**32)


def test_bad_arguments_raise_naming_the_value_and_change_nothing() -> None:
    with pytest.raises(ValueError, match="SamplingOptions::temperature = -1 is invalid"):
        TokenSampler(4, temperature=-1.0)
    with pytest.raises(ValueError, match="SamplingOptions::top_p = 1.5 is invalid"):
        TokenSampler(4, top_p=1.5)
    with pytest.raises(ValueError, match="mode = 'greedy' is invalid: it must be 'exact' or 'rejection'"):
        TokenSampler(4, mode="greedy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="the vocabulary size is 0"):
        TokenSampler(0)
    with pytest.raises(ValueError, match="top_k = -1 is invalid"):
        TokenSampler(4, top_k=-1)
    # The options are float32 in the library: a value it would turn into 0 or inf is refused, not made greedy.
    for name, value in (("temperature", 1e-50), ("min_p", 1e-46), ("top_p", 1e-60), ("temperature", 1e39)):
        with pytest.raises(ValueError, match=re.escape(f"{name} = {value!r} is invalid: the library keeps it as a "
                                                       "float32, ") +
                                             r"whose positive values run from 1\.401298464324817e-45 to "):
            TokenSampler(4, **{name: value})
    tiny = TokenSampler(4, temperature=1.401298464324817e-45)  # the smallest float32 temperature samples, among tied maxima
    ties = np.array([[3.0, 3.0, 0.0, 3.0]], np.float32)
    drawn = {tiny.verify_chain(ties, position, [])[1] for position in range(64)}
    assert drawn == {0, 1, 3}
    sampler = TokenSampler(4, temperature=1.0, mode="rejection", seed=9)
    with pytest.raises(ValueError, match="SamplingOptions::min_p = 1 is invalid"):
        sampler.set_options(min_p=1.0)
    with pytest.raises(TypeError, match="unknown option"):
        sampler.set_options(top_q=0.5)
    assert sampler.options == {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": 9,
                               "mode": "rejection"}
    logits = np.zeros((3, 4), np.float32)
    drafts = [1, 2]
    tokens = np.array([[1, 3], [2, 0]], np.uint32)
    probabilities = np.array([[0.5, 0.5], [1.0, 0.0]], np.float32)
    with pytest.raises(ValueError, match=r"logits has shape \(2, 4\); it needs \(len\(drafts\) \+ 1, vocab_size\) "
                                         r"= \(3, 4\)"):
        sampler.verify_chain(logits[:2], 0, drafts)
    with pytest.raises(ValueError, match="q_probabilities is None but the other is not"):
        sampler.verify_chain(logits, 0, drafts, tokens)
    with pytest.raises(ValueError, match="q_tokens has 1 rows; it needs one per draft, 2"):
        sampler.verify_chain(logits, 0, drafts, tokens[:1], probabilities[:1])
    with pytest.raises(ValueError, match=r"q_probabilities\[1\] = -0.5 \(draft 0, token 3\) is invalid: it must be "
                                         r"finite and >= 0"):
        sampler.verify_chain(logits, 0, drafts, tokens, np.array([[0.5, -0.5], [1.0, 0.0]], np.float32))
    with pytest.raises(ValueError, match=r"draft 1's probabilities q_probabilities\[2 .. 4\) sum to 0"):
        sampler.verify_chain(logits, 0, drafts, tokens, np.array([[0.5, 0.5], [0.0, 0.0]], np.float32))
    wide = np.ones((2, MAX_SUPPORT + 1), np.uint32)
    with pytest.raises(ValueError, match="has 33 tokens, more than NGRAMSPEC_MAX_SUPPORT = 32"):
        sampler.verify_chain(logits, 0, drafts, wide, np.ones(wide.shape, np.float32))
    bad = logits.copy()
    bad[0, 2] = np.nan
    with pytest.raises(ValueError, match="ngramspec_sampler_verify_chain: logit of token 2 at position 7 is NaN"):
        sampler.verify_chain(bad, 7, drafts)
    with pytest.raises(ValueError, match="position = -1 is invalid"):
        sampler.verify_chain(logits, -1, drafts)
    # After every refusal the sampler verifies as a fresh one does.
    fresh = TokenSampler(4, temperature=1.0, mode="rejection", seed=9)
    for position in range(50):
        assert sampler.verify_chain(logits, position, drafts, tokens, probabilities) == \
            fresh.verify_chain(logits, position, drafts, tokens, probabilities)
    sampler.close()
    with pytest.raises(ValueError, match="ngramspec.TokenSampler.verify_chain: the TokenSampler is closed"):
        sampler.verify_chain(logits, 0, drafts)


# ---- Trees ---------------------------------------------------------------------------------------------------------


def random_tree(rng: np.random.Generator, vocab: int) -> tuple[np.ndarray, list[int], np.ndarray]:
    """Rows of logits, tokens and parents (each the root, -1, or an earlier node) of a random tree of up to 8 nodes."""
    n = int(rng.integers(0, 9))
    logits = rng.uniform(-3, 3, size=(n + 1, vocab)).astype(np.float32)
    parents = [int(rng.integers(-1, j)) for j in range(n)]
    tokens = np.array([int(np.argmax(logits[parents[j] + 1])) if rng.random() < 0.7 else int(rng.integers(0, vocab))
                       for j in range(n)], dtype=np.uint32)
    return logits, parents, tokens


def argmax_path(logits: np.ndarray, parents: list[int], tokens: np.ndarray) -> list[int]:
    """Greedy verification of a tree: from the root, each row's argmax leads to the first child carrying it."""
    path = [0]
    while True:
        best = int(np.argmax(logits[path[-1]]))
        child = next((j for j in range(len(tokens)) if parents[j] + 1 == path[-1] and tokens[j] == best), None)
        if child is None:
            return path
        path.append(child + 1)


def test_greedy_verify_tree_walks_the_argmax_path_in_either_mode_whatever_q_is() -> None:
    rng = np.random.default_rng(20261206)
    walked = 0
    for trial in range(500):
        vocab = int(rng.integers(1, 10))
        sampler = TokenSampler(vocab, mode="exact" if trial % 2 else "rejection", seed=int(rng.integers(0, 2**63)))
        logits, parents, tokens = random_tree(rng, vocab)
        n = len(tokens)
        expected = argmax_path(logits, parents, tokens)
        q_tokens = rng.integers(0, vocab, size=(n, 3)).astype(np.uint32)
        q_probabilities = rng.random((n, 3)).astype(np.float32) + 0.01
        for path, following, model_tokens in (
                sampler.verify_tree(logits, int(rng.integers(0, 1000)), tokens, parents),
                sampler.verify_tree(logits, 3, tokens, np.array(parents, np.int64), q_tokens, q_probabilities),
                sampler.verify_tree(logits.astype(np.float64), 3, tokens.tolist(), parents)):  # converted
            assert path.tolist() == expected
            assert following == int(np.argmax(logits[expected[-1]]))
            assert [int(model_tokens[e]) for e in expected] == [int(np.argmax(logits[e])) for e in expected]
            assert all(int(model_tokens[e]) == following for e in range(n + 1) if e not in expected)
        walked += len(expected) - 1
    assert walked > 300


def test_verify_tree_takes_one_sequences_part_of_a_calls_q_as_it_is() -> None:
    """q_offsets into the call's flat supports (starting anywhere) verify as the sequence's own supports do."""
    rng = np.random.default_rng(11)
    for trial in range(300):
        sampler = TokenSampler(VOCAB, temperature=1.0, mode="rejection", seed=trial)
        logits, parents, tokens = random_tree(rng, VOCAB)
        n = len(tokens)
        supports = [rng.integers(0, VOCAB, size=int(rng.integers(0, 4))).astype(np.uint32) for _ in range(n)]
        masses = [rng.random(len(t)).astype(np.float32) + 0.01 for t in supports]
        before = int(rng.integers(0, 5))
        flat_tokens = np.concatenate([np.zeros(before, np.uint32), *supports, np.zeros(2, np.uint32)])
        flat_probabilities = np.concatenate([np.ones(before, np.float32), *masses, np.ones(2, np.float32)])
        q_offsets = before + np.concatenate([[0], np.cumsum([len(t) for t in supports], dtype=np.int64)])
        own = sampler.verify_tree(logits, 10, tokens, parents, supports, masses)
        part = sampler.verify_tree(logits, 10, tokens, parents, flat_tokens, flat_probabilities, q_offsets=q_offsets)
        assert own[0].tolist() == part[0].tolist() and own[1] == part[1] and own[2].tolist() == part[2].tolist()


def test_verify_tree_refuses_bad_arguments_naming_the_value() -> None:
    sampler = TokenSampler(4, temperature=1.0, mode="rejection", seed=9)
    logits = np.zeros((4, 4), np.float32)
    tokens = [1, 2, 3]
    with pytest.raises(ValueError, match=r"parents\[2\] = 2 is invalid: it must be NGRAMSPEC_TREE_ROOT \(-1\) or an "
                                         r"earlier node, 0 \.\. 1"):
        sampler.verify_tree(logits, 0, tokens, [-1, 0, 2])
    with pytest.raises(ValueError, match=r"parents\[0\] = 0 is invalid: node 0's parent must be NGRAMSPEC_TREE_ROOT"):
        sampler.verify_tree(logits, 0, tokens, [0, 0, 0])
    with pytest.raises(ValueError, match=r"parents has shape \(2,\); it needs one per node, \(3,\)"):
        sampler.verify_tree(logits, 0, tokens, [-1, 0])
    with pytest.raises(ValueError, match="parents holds 4294967296"):
        sampler.verify_tree(logits, 0, tokens, [-1, 0, 2**32])
    with pytest.raises(ValueError, match=r"logits has shape \(3, 4\); it needs \(len\(tokens\) \+ 1, vocab_size\) = "
                                         r"\(4, 4\)"):
        sampler.verify_tree(logits[:3], 0, tokens, [-1, 0, 1])
    with pytest.raises(ValueError, match=r"q_offsets has 3 entries; it needs len\(tokens\) \+ 1 = 4"):
        sampler.verify_tree(logits, 0, tokens, [-1, 0, 1], [1, 2], [0.5, 0.5], q_offsets=[0, 1, 2])
    with pytest.raises(ValueError, match=r"ngramspec_sampler_verify_tree: q_offsets\[3\] = 5 is invalid: it must be "
                                         r"from q_offsets\[2\] = 2 to n_q = 2"):
        sampler.verify_tree(logits, 0, tokens, [-1, 0, 1], [1, 2], [0.5, 0.5], q_offsets=[0, 1, 2, 5])
    with pytest.raises(ValueError, match=r"q_probabilities\[1\] = -0.5 \(node 1, token 2\) is invalid"):
        sampler.verify_tree(logits, 0, tokens, [-1, 0, 1], [1, 2], [0.5, -0.5], q_offsets=[0, 1, 2, 2])
    # Offsets are whole and non-negative, and arrays have the shape given: none is truncated, wrapped or flattened.
    with pytest.raises(TypeError, match=r"q_offsets must hold integers; it holds 1\.7 \(float\)"):
        sampler.verify_tree(logits, 0, tokens, [-1, 0, 1], [1, 2], [0.5, 0.5], q_offsets=[0, 1, 1.7, 2])
    with pytest.raises(TypeError, match=r"q_offsets must hold integers; it holds float64 \(0\.0, \.\.\.\)"):
        sampler.verify_tree(logits, 0, tokens, [-1, 0, 1], [1, 2], [0.5, 0.5],
                            q_offsets=np.array([0.0, 1.0, 2.0, 2.0]))
    with pytest.raises(ValueError, match=r"q_offsets holds -1, outside 0\.\.18446744073709551615"):
        sampler.verify_tree(logits, 0, tokens, [-1, 0, 1], [1, 2], [0.5, 0.5], q_offsets=[0, 1, -1, 2])
    with pytest.raises(ValueError, match=r"q_offsets must be one-dimensional; it has shape \(2, 2\)"):
        sampler.verify_tree(logits, 0, tokens, [-1, 0, 1], [1, 2], [0.5, 0.5], q_offsets=[[0, 1], [2, 2]])
    with pytest.raises(ValueError, match=r"q_probabilities must be one-dimensional; it has shape \(2, 1\)"):
        sampler.verify_tree(logits, 0, tokens, [-1, 0, 1], [1, 2], [[0.5], [0.5]], q_offsets=[0, 1, 2, 2])
    with pytest.raises(ValueError, match=r"q_probabilities\[0\] must be one-dimensional; it has shape \(1, 1\)"):
        sampler.verify_tree(logits, 0, tokens, [-1, 0, 1], [[1], [2], [3]], [[[1.0]], [1.0], [1.0]])
    bad = logits.copy()
    bad[0, 2] = np.nan
    with pytest.raises(ValueError, match="ngramspec_sampler_verify_tree: logit of token 2 at position 7 is NaN"):
        sampler.verify_tree(bad, 7, tokens, [-1, 0, 1])
    # After every refusal the sampler verifies as a fresh one does.
    fresh = TokenSampler(4, temperature=1.0, mode="rejection", seed=9)
    for position in range(20):
        a = sampler.verify_tree(logits, position, tokens, [-1, 0, -1])
        b = fresh.verify_tree(logits, position, tokens, [-1, 0, -1])
        assert a[0].tolist() == b[0].tolist() and a[1:2] == b[1:2] and a[2].tolist() == b[2].tolist()
    sampler.close()
    with pytest.raises(ValueError, match="ngramspec.TokenSampler.verify_tree: the TokenSampler is closed"):
        sampler.verify_tree(logits, 0, tokens, [-1, 0, 1])


TREE_RUNS = 2400
# Eight requests side by side: each draws its candidates apart from the others (a chi-square over them assumes
# independent requests, which pooled drafters drawing alike would break).
TREE_BATCH = 8
TREE_TOP_K = 4


def top_rows(temperature: float, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each token's TREE_TOP_K most likely successors under the sampling distribution, best first (ties to the lower
    id), and their probabilities (0 past the tokens the filter keeps)."""
    tokens = np.empty((VOCAB, TREE_TOP_K), np.uint32)
    probabilities = np.empty((VOCAB, TREE_TOP_K), np.float32)
    for last in range(VOCAB):
        p = target_distribution(last, temperature, top_k)
        order = sorted(range(VOCAB), key=lambda t: (-p[t], t))[:TREE_TOP_K]
        tokens[last] = order
        probabilities[last] = p[order]
    return tokens, probabilities


def tree_engine_first_two(temperature: float, top_k: int) -> tuple[np.ndarray, int]:
    """An engine's loop over a drawing tree batch: TREE_RUNS requests after the prompt [x, 0], TREE_BATCH at a time,
    every tree verified
    by verify_tree with the sequence's part of the call's q, its model tokens handed to accept_trees with the rows'
    top probabilities. Returns the counts of the first two tokens and the nodes accepted."""
    spec = BatchSpeculator(max_sequences=TREE_BATCH, tree={"vocab_size": VOCAB, "top_k": TREE_TOP_K,
                                                           "successor_slots": 16, "draw_recycled": True,
                                                           "draw_seed": 17})
    samplers = [TokenSampler(VOCAB, temperature=temperature, top_k=top_k, mode="rejection")
                for _ in range(TREE_BATCH)]
    rows = np.stack([target_logits(t) for t in range(VOCAB)])
    top_tokens, top_probabilities = top_rows(temperature, top_k)
    counts = np.zeros(VOCAB * VOCAB, np.int64)
    accepted = 0
    for first in range(0, TREE_RUNS, TREE_BATCH):
        sequences = {}
        for s in range(TREE_BATCH):
            samplers[s].set_options(seed=first + s)
            sequences[s] = [(first // TREE_BATCH + s) % VOCAB, 0]
            spec.begin(s, sequences[s], max_new_tokens=6, max_drafts=6)
        ids = list(range(TREE_BATCH))
        while ids:
            tokens, parents, offsets, q_offsets, q_tokens, q_probabilities = spec.propose_trees(ids, with_q=True)
            model_tokens, model_offsets, fed = [], [0], []
            for i, s in enumerate(ids):
                begin, end = int(offsets[i]), int(offsets[i + 1])
                entries = [sequences[s][-1], *tokens[begin:end].tolist()]
                path, _, answers = samplers[s].verify_tree(rows[entries], len(sequences[s]), tokens[begin:end],
                                                          parents[begin:end], q_tokens, q_probabilities,
                                                          q_offsets=q_offsets[begin:end + 1])
                accepted += len(path) - 1
                model_tokens += answers.tolist()
                model_offsets.append(len(model_tokens))
                fed += entries
            steps, kept = spec.accept_trees(ids, model_tokens, model_offsets, top_tokens[fed].reshape(-1),
                                            top_probabilities=top_probabilities[fed].reshape(-1))
            still = []
            for i, s in enumerate(ids):
                start = model_offsets[i]
                sequences[s] += [model_tokens[start + int(e)] for e in kept[start:start + int(steps["emitted"][i])]]
                if steps["finished"][i]:
                    spec.finish(s)
                else:
                    still.append(s)
            ids = still
        for sequence in sequences.values():
            counts[sequence[2] * VOCAB + sequence[3]] += 1
    return counts, accepted


@pytest.mark.parametrize(("temperature", "top_k"), [(1.0, 0), (0.7, 3)])
def test_an_engine_loop_verifying_drawn_trees_keeps_the_targets_distribution(temperature: float, top_k: int) -> None:
    counts, accepted = tree_engine_first_two(temperature, top_k)
    statistic, critical = chi_square(counts, first_two_probabilities(temperature, top_k))
    assert statistic < critical, f"chi-square {statistic:.2f} against the critical value {critical:.2f}"
    assert accepted > TREE_RUNS // 2, "the trees must carry accepted nodes for the test to say anything"
