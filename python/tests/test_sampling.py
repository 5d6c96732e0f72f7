"""ngramspec.TokenSampler: verifying one sequence's chain of drafts through the C ABI, greedy, exact and by
rejection sampling, with a chi-square test that the rejection mode keeps the target's distribution."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ngramspec import MAX_SUPPORT, TokenSampler

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


def test_bad_arguments_raise_naming_the_value_and_change_nothing() -> None:
    with pytest.raises(ValueError, match="SamplingOptions::temperature = -1.000000 is invalid"):
        TokenSampler(4, temperature=-1.0)
    with pytest.raises(ValueError, match="SamplingOptions::top_p = 1.500000 is invalid"):
        TokenSampler(4, top_p=1.5)
    with pytest.raises(ValueError, match="mode = 'greedy' is invalid: it must be 'exact' or 'rejection'"):
        TokenSampler(4, mode="greedy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="the vocabulary size is 0"):
        TokenSampler(0)
    with pytest.raises(ValueError, match="top_k = -1 is invalid"):
        TokenSampler(4, top_k=-1)
    sampler = TokenSampler(4, temperature=1.0, mode="rejection", seed=9)
    with pytest.raises(ValueError, match="SamplingOptions::min_p = 1.000000 is invalid"):
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
