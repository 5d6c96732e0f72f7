"""The property that matters: a batch driven from Python emits exactly what plain greedy decoding
emits, for every sequence, with sequences joining and leaving, passes that verify fewer drafts
than proposed, and every input type."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

import ngramspec
from ngramspec import BatchSpeculator, StopReason

Model = Callable[[list[int]], int]


def mix(*values: int) -> int:
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = ((h ^ v) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 31
    return h


def make_model(kind: str, seed: int) -> Model:
    """A toy greedy model: the next token is a function of the last tokens."""
    if kind == "periodic":  # a cycle of `period` tokens
        period = 5 + seed % 40
        return lambda ctx: 3 + (ctx[-1] - 3 + 1) % period if 3 <= ctx[-1] < 3 + period else 3
    if kind == "random":  # pseudo-random over a vocabulary of 30000: nothing repeats
        return lambda ctx: 3 + mix(seed, ctx[-1], ctx[-2] if len(ctx) > 1 else 0) % 30000
    if kind == "looping":  # pseudo-random over 12 tokens from the last two: falls into loops
        return lambda ctx: 3 + mix(seed, ctx[-1], ctx[-2] if len(ctx) > 1 else 0) % 12
    if kind == "mixed":  # mostly a cycle, now and then a jump that depends on the last three tokens
        def model(ctx: list[int]) -> int:
            if mix(seed, *ctx[-3:]) % 7 == 0:
                return 3 + mix(seed + 1, *ctx[-3:]) % 50
            return 3 + (ctx[-1] - 3 + 1) % 50
        return model
    raise ValueError(kind)


def greedy(model: Model, prompt: list[int], max_new_tokens: int, stop_tokens: list[int],
           max_context: int) -> tuple[list[int], StopReason]:
    """Plain greedy decoding under the same limits."""
    context = list(prompt)
    output: list[int] = []
    limit = max_new_tokens if max_context == 0 else min(max_new_tokens, max_context - len(prompt))
    while len(output) < limit:
        token = model(context)
        context.append(token)
        output.append(token)
        if token in stop_tokens:
            return output, StopReason.TOKEN
    return output, StopReason.MAX_NEW_TOKENS if len(output) == max_new_tokens else StopReason.MAX_CONTEXT


@dataclass
class Sequence:
    seq_id: int
    model: Model
    prompt: list[int]
    max_new_tokens: int
    stop_tokens: list[int]
    max_context: int
    max_drafts: int
    speculate: bool
    arrives: int
    output: list[int] = field(default_factory=list)
    expected: list[int] = field(default_factory=list)  # plain greedy decoding's output
    reason: StopReason = StopReason.MAX_NEW_TOKENS


def make_sequences(rng: random.Random, count: int) -> list[Sequence]:
    kinds = ["periodic", "random", "looping", "mixed"]
    sequences = []
    for i in range(count):
        kind = kinds[i % len(kinds)]
        model = make_model(kind, rng.randrange(1 << 30))
        prompt = [rng.randrange(3, 60) for _ in range(rng.randrange(1, 40))]
        for _ in range(rng.randrange(0, 60)):  # a prompt that already follows the model, often
            prompt.append(model(prompt))
        stops = [rng.randrange(3, 15)] if rng.random() < 0.3 else []
        max_context = len(prompt) + rng.randrange(1, 200) if rng.random() < 0.2 else 0
        sequences.append(Sequence(
            seq_id=rng.randrange(1 << 64), model=model, prompt=prompt, max_new_tokens=rng.randrange(1, 160),
            stop_tokens=stops, max_context=max_context, max_drafts=rng.choice([1, 2, 4, 8, 16]),
            speculate=rng.random() < 0.9, arrives=rng.randrange(0, 60)))
        s = sequences[-1]
        s.expected, s.reason = greedy(model, prompt, s.max_new_tokens, stops, max_context)
    return sequences


def as_ids(rng: random.Random, ids: list[int]) -> object:
    return rng.choice([lambda: ids, lambda: tuple(ids), lambda: np.array(ids, np.uint64)])()


def as_tokens(rng: random.Random, tokens: list[int]) -> object:
    return rng.choice([lambda: tokens, lambda: np.array(tokens, np.uint32), lambda: np.array(tokens, np.int32),
                       lambda: np.array(tokens, np.int64)])()


def as_offsets(rng: random.Random, offsets: list[int]) -> object:
    return rng.choice([lambda: offsets, lambda: np.array(offsets, np.uintp), lambda: np.array(offsets, np.int64)])()


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("setup", ["plain", "cost", "corpus", "drafter"])
def test_a_batch_emits_exactly_greedy_decoding(seed: int, setup: str) -> None:
    rng = random.Random(seed * 1000 + len(setup))
    corpus = ngramspec.SharedCorpus(1 << 20) if setup == "corpus" else None
    spec = BatchSpeculator(
        max_sequences=6,
        cost="knee:24" if setup == "cost" else None,
        max_pass_tokens=64 if setup == "cost" else 0,
        drafter={"min_confidence": 0.0, "count_max_order": 4} if setup == "drafter" else None,
        corpus=corpus)
    waiting = sorted(make_sequences(rng, 24), key=lambda s: s.arrives)
    running: list[Sequence] = []
    done = 0
    passes = 0
    total_emitted = total_accepted = 0
    step = 0
    while waiting or running:
        while waiting and waiting[0].arrives <= step and len(running) < spec.max_sequences:
            s = waiting.pop(0)
            spec.begin(s.seq_id, as_tokens(rng, s.prompt), max_new_tokens=s.max_new_tokens,
                       stop_tokens=s.stop_tokens, max_context=s.max_context, speculate=s.speculate,
                       max_drafts=s.max_drafts)
            assert s.seq_id in spec
            running.append(s)
        step += 1
        if not running:
            continue
        # Some passes carry only part of the batch, in any order.
        stepped = running if rng.random() < 0.7 else rng.sample(running, rng.randrange(1, len(running) + 1))
        ids = [s.seq_id for s in stepped]
        drafts, offsets = spec.propose(as_ids(rng, ids), extra_tokens=rng.choice([0, 0, 7]))
        assert len(offsets) == len(ids) + 1 and len(drafts) == offsets[-1]
        tokens: list[int] = []
        model_offsets = [0]
        verified = []
        for i, s in enumerate(stepped):
            mine = drafts[offsets[i]:offsets[i + 1]].tolist()
            assert len(mine) <= s.max_drafts
            if not s.output:  # the prefill: one token, after the prompt
                assert mine == []
                answers = [s.model(s.prompt)]
            else:
                # An engine may verify fewer drafts than proposed: the first ones count.
                n = len(mine) if rng.random() < 0.8 else rng.randrange(0, len(mine) + 1)
                context = s.prompt + s.output
                answers = []
                for j in range(n + 1):
                    answers.append(s.model(context))
                    if j < n:
                        context = context + [mine[j]]
            verified.append(len(answers) - 1)
            tokens += answers
            model_offsets.append(len(tokens))
        steps = spec.accept(as_ids(rng, ids), as_tokens(rng, tokens), as_offsets(rng, model_offsets))
        passes += 1
        still = []
        for i, s in enumerate(stepped):
            emitted = int(steps["emitted"][i])
            accepted = int(steps["accepted"][i])
            assert 1 <= emitted <= verified[i] + 1 and accepted <= min(emitted, verified[i])
            cache = len(s.prompt) + len(s.output) - (1 if s.output else 0)
            pass_end = len(s.prompt) if not s.output else cache + verified[i] + 1
            s.output += tokens[model_offsets[i]:model_offsets[i] + emitted]
            assert steps["rollback_to"][i] == len(s.prompt) + len(s.output) - 1
            assert steps["discarded"][i] == pass_end - steps["rollback_to"][i]
            total_emitted += emitted
            total_accepted += accepted
            if steps["finished"][i]:
                assert s.output == s.expected, f"sequence {s.seq_id}"
                assert steps["stop_reason"][i] == s.reason
                if rng.random() < 0.5:
                    spec.finish(s.seq_id)
                else:
                    spec.cancel(s.seq_id)
                assert s.seq_id not in spec
                done += 1
            else:
                assert s.output == s.expected[:len(s.output)], f"sequence {s.seq_id}"
        running = [s for s in running if s.seq_id in spec]
        assert len(spec) == len(running)
    assert done == 24
    stats = spec.stats
    assert stats.emitted == total_emitted and stats.accepted == total_accepted and stats.proposals == passes
    assert total_accepted > 0  # the periodic and looping sequences were drafted
    assert passes < total_emitted
    if corpus is not None:
        assert corpus.records > 0
