"""BatchSpeculator: the step API, its buffers and inputs, and its errors."""

from __future__ import annotations

import numpy as np
import pytest

import ngramspec
from ngramspec import STEP_DTYPE, BatchSpeculator, StopReason

CYCLE = [3, 4, 5, 6, 7, 8, 9, 10]  # the toy model answers the next token of this cycle


def next_of(token: int) -> int:
    return CYCLE[(CYCLE.index(token) + 1) % len(CYCLE)] if token in CYCLE else CYCLE[0]


def answers_for(last: int, drafts: np.ndarray) -> list[int]:
    """A greedy model's tokens after [last, drafts...]: one more than the drafts."""
    fed = [last, *drafts.tolist()]
    return [next_of(t) for t in fed]


def test_one_sequence_from_prefill_to_finish() -> None:
    spec = BatchSpeculator(max_sequences=4)
    prompt = CYCLE * 3
    spec.begin(7, prompt, max_new_tokens=20)
    assert 7 in spec and 8 not in spec and len(spec) == 1
    drafts, offsets = spec.propose([7])
    assert len(drafts) == 0 and list(offsets) == [0, 0]  # the prefill pass drafts nothing
    steps = spec.accept([7], [next_of(prompt[-1])], [0, 1])
    assert steps.dtype == STEP_DTYPE and len(steps) == 1
    assert steps["emitted"][0] == 1 and steps["accepted"][0] == 0 and not steps["finished"][0]
    output = [next_of(prompt[-1])]
    passes = 1
    while True:
        drafts, offsets = spec.propose(np.array([7], np.uint64))
        assert offsets.dtype == np.uintp and len(drafts) == offsets[-1]
        answers = answers_for(output[-1], drafts)
        steps = spec.accept([7], np.array(answers, np.int32), np.array([0, len(answers)], np.uintp))
        step = steps[0]
        output += answers[: step["emitted"]]
        passes += 1
        assert step["rollback_to"] == len(prompt) + len(output) - 1
        if step["finished"]:
            assert step["stop_reason"] == StopReason.MAX_NEW_TOKENS
            break
    expected = []
    last = prompt[-1]
    for _ in range(20):
        last = next_of(last)
        expected.append(last)
    assert output == expected
    assert passes < 20  # the cycle was drafted
    stats = spec.stats
    assert stats.emitted == 20 and stats.accepted > 0 and stats.drafted >= stats.accepted
    assert stats.proposals == passes and 0 < stats.acceptance_rate <= 1
    with pytest.raises(ValueError, match="finished"):
        spec.propose([7])
    spec.finish(7)
    assert 7 not in spec and len(spec) == 0


def test_stop_tokens_and_max_context() -> None:
    spec = BatchSpeculator(max_sequences=4)
    spec.begin(1, CYCLE * 2, max_new_tokens=100, stop_tokens=[6])
    spec.begin(2, CYCLE * 2, max_new_tokens=100, max_context=len(CYCLE) * 2 + 5)
    spec.begin(3, CYCLE * 2, max_new_tokens=100, stop_tokens=np.array([9], np.int64), speculate=False)
    outputs: dict[int, list[int]] = {1: [], 2: [], 3: []}
    reasons = {}
    ids = [1, 2, 3]
    while ids:
        drafts, offsets = spec.propose(ids)
        tokens, model_offsets = [], [0]
        for i, seq in enumerate(ids):
            mine = drafts[offsets[i]:offsets[i + 1]]
            if seq == 3:
                assert len(mine) == 0  # speculate=False
            last = outputs[seq][-1] if outputs[seq] else CYCLE[-1]
            tokens += [next_of(last)] if not outputs[seq] else answers_for(last, mine)
            model_offsets.append(len(tokens))
        steps = spec.accept(ids, tokens, model_offsets)
        still = []
        for i, seq in enumerate(ids):
            outputs[seq] += tokens[model_offsets[i]:model_offsets[i] + int(steps["emitted"][i])]
            if steps["finished"][i]:
                reasons[seq] = StopReason(int(steps["stop_reason"][i]))
                spec.cancel(seq)
            else:
                still.append(seq)
        ids = still
    assert outputs[1] == [3, 4, 5, 6] and reasons[1] == StopReason.TOKEN
    assert outputs[2] == [3, 4, 5, 6, 7] and reasons[2] == StopReason.MAX_CONTEXT
    assert outputs[3] == [3, 4, 5, 6, 7, 8, 9] and reasons[3] == StopReason.TOKEN
    assert len(spec) == 0


def test_propose_and_accept_reuse_their_buffers() -> None:
    spec = BatchSpeculator(max_sequences=4)
    for seq in (1, 2):
        spec.begin(seq, CYCLE * 4, max_new_tokens=50)
    drafts1, offsets1 = spec.propose([1, 2])
    steps1 = spec.accept([1, 2], [3, 3], [0, 1, 2])
    drafts2, offsets2 = spec.propose([1, 2])
    steps2 = spec.accept([1, 2], [4, 4], [0, 1, 2])
    # The second call's results live where the first's did: copy what must outlive the next call.
    assert np.shares_memory(offsets1, offsets2) and np.shares_memory(steps1, steps2)
    assert drafts1.base is drafts2.base
    assert list(offsets1) == list(offsets2)


def test_an_empty_pass() -> None:
    spec = BatchSpeculator(max_sequences=2)
    drafts, offsets = spec.propose([])
    assert len(drafts) == 0 and list(offsets) == [0]
    assert len(spec.accept([], [], [0])) == 0
    assert spec.propose_into(np.empty(0, np.uint64), np.empty(0, np.uint32), np.zeros(1, np.uintp)) == 0


def test_a_large_batch_grows_the_buffers() -> None:
    spec = BatchSpeculator(max_sequences=100, drafter={"index_capacity": 256, "count_window": 256})  # small drafters
    ids = list(range(1000, 1100))
    for seq in ids:
        spec.begin(seq, CYCLE * 2, max_new_tokens=50, max_drafts=16)
    drafts, offsets = spec.propose(ids)
    steps = spec.accept(ids, [3] * 100, np.arange(101, dtype=np.uintp))
    assert len(steps) == 100 and all(steps["emitted"] == 1)
    drafts, offsets = spec.propose(ids)
    assert len(offsets) == 101 and len(drafts) == offsets[-1] == 100 * 16
    assert all(drafts[:16] == (CYCLE * 3)[1:17])


def test_propose_into_writes_the_callers_arrays() -> None:
    spec = BatchSpeculator(max_sequences=4)
    for seq in (10, 11):
        spec.begin(seq, CYCLE * 4, max_new_tokens=50, max_drafts=3)
    drafts = np.zeros(16, np.uint32)
    offsets = np.zeros(3, np.uintp)
    ids = np.array([10, 11], np.uint64)
    assert spec.propose_into(ids, drafts, offsets) == 0  # prefill
    spec.accept(ids, [3, 3], np.array([0, 1, 2], np.uintp))
    n = spec.propose_into(ids, drafts, offsets)
    assert n == offsets[-1] == 6  # max_drafts 3 each
    assert list(drafts[:3]) == [4, 5, 6] and list(drafts[3:6]) == [4, 5, 6]
    signed = np.zeros(16, np.int32)
    with pytest.raises(ValueError, match="len\\(ids\\) \\+ 1"):
        spec.propose_into(ids, signed, np.zeros(2, np.uintp))
    with pytest.raises(TypeError):
        spec.propose_into(ids, np.zeros(16, np.float32), offsets)
    small = np.zeros(2, np.uint32)  # the drafts array's size caps the pass's drafts
    spec.accept(ids, [4, 5, 6, 7, 4, 5, 6, 7], [0, 4, 8])
    assert spec.propose_into(ids, small, offsets) <= 2


def test_ids_tokens_and_offsets_as_every_accepted_type() -> None:
    spec = BatchSpeculator(max_sequences=4)
    for seq in (1, 2):
        spec.begin(seq, np.array(CYCLE * 4, np.int64), max_new_tokens=50)
    forms = [
        ([1, 2], [3, 3], [0, 1, 2]),
        ((1, 2), np.array([4, 4], np.uint32), np.array([0, 1, 2], np.int64)),
        (np.array([1, 2], np.int64), np.array([5, 5], np.int32), np.array([0, 1, 2], np.uintp)),
        (np.array([1, 2], np.uint64), np.array([6, 6], np.int64), np.array([0, 1, 2], np.uint32)),
    ]
    for ids, tokens, offsets in forms:
        spec.propose(ids)
        steps = spec.accept(ids, tokens, offsets)
        assert list(steps["emitted"]) == [1, 1]


def test_an_array_passed_again_is_read_again() -> None:
    # The speculator remembers the address of the arrays it was last given; their contents, shape
    # and dtype are still read on every call.
    spec = BatchSpeculator(max_sequences=4)
    for seq in (1, 2, 3):
        spec.begin(seq, CYCLE * 4, max_new_tokens=50, max_drafts=2)
    ids = np.array([1, 2], np.uint64)
    offsets = np.array([0, 1, 2], np.uintp)
    tokens = np.array([3, 3], np.uint32)
    spec.propose(ids)
    spec.accept(ids, tokens, offsets)
    ids[:] = [3, 2]  # the same array, other contents: sequence 3's prefill, sequence 2's step
    drafts, proposed = spec.propose(ids)
    assert list(proposed) == [0, 0, 2] and list(drafts) == [4, 5]
    tokens_2 = np.array([3, 4, 5, 6], np.uint32)
    steps = spec.accept(ids, tokens_2, np.array([0, 1, 4], np.uintp))
    assert list(steps["emitted"]) == [1, 3]
    with pytest.raises(ValueError, match="len\\(ids\\) \\+ 1 = 2"):
        spec.accept(ids[:1], tokens, offsets)  # the remembered offsets array, now the wrong length
    ids[:] = [1, 1]
    with pytest.raises(ValueError, match="listed twice"):
        spec.propose(ids)


def test_bad_configurations_are_value_errors_with_the_library_message() -> None:
    with pytest.raises(ValueError, match="max_sequences"):
        BatchSpeculator(max_sequences=0)
    with pytest.raises(ValueError, match="max_pass_tokens"):
        BatchSpeculator(max_pass_tokens=1)
    with pytest.raises(ValueError, match="knee:zero"):
        BatchSpeculator(cost="knee:zero")
    with pytest.raises(ValueError, match="table"):
        BatchSpeculator(cost="table:")
    with pytest.raises(ValueError, match="count_max_order"):
        BatchSpeculator(drafter={"count_max_order": 7})
    with pytest.raises(TypeError, match="colour"):
        BatchSpeculator(drafter={"colour": 1})
    with pytest.raises(TypeError):
        BatchSpeculator(cost=256)  # type: ignore[arg-type]
    BatchSpeculator(cost="knee:64", drafter={"min_confidence": 0.1, "index_capacity": 4096})


def test_bad_calls_are_value_errors_with_the_library_message() -> None:
    spec = BatchSpeculator(max_sequences=2)
    spec.begin(5, CYCLE)
    with pytest.raises(ValueError, match="sequence 5 is already running"):
        spec.begin(5, CYCLE)
    with pytest.raises(ValueError, match="empty"):
        spec.begin(6, [])
    with pytest.raises(ValueError, match="max_drafts"):
        spec.begin(6, CYCLE, max_drafts=5000)
    with pytest.raises(ValueError, match="max_context"):
        spec.begin(6, CYCLE, max_context=3)
    spec.begin(6, CYCLE)
    with pytest.raises(ValueError, match="max_sequences"):
        spec.begin(7, CYCLE)  # the pool of 2 is full
    with pytest.raises(ValueError, match="sequence 99"):
        spec.propose([5, 99])
    with pytest.raises(ValueError, match="sequence 5 is listed twice"):
        spec.propose([5, 5])
    spec.propose([5, 6])
    with pytest.raises(ValueError, match="offsets\\[2\\] = 5"):
        spec.accept([5, 6], [3, 3], [0, 1, 5])  # past the model tokens
    with pytest.raises(ValueError, match="offsets\\[2\\] = 0 are invalid"):
        spec.accept([5, 6], [3, 3], [0, 1, 0])  # decreasing, short of the model tokens
    with pytest.raises(ValueError, match="offsets\\[1\\] = 3 is invalid"):
        spec.accept([5, 6], [3, 3], [0, 3, 2])  # decreasing, past them
    with pytest.raises(ValueError, match="sequence 6 has 2 model tokens"):
        spec.accept([5, 6], [3, 3, 3], [0, 1, 3])  # a prefill takes one
    with pytest.raises(ValueError, match="len\\(ids\\) \\+ 1 = 3"):
        spec.accept([5, 6], [3, 3], [0, 2])
    with pytest.raises(ValueError, match="sequence 42 is not running"):
        spec.finish(42)
    with pytest.raises(ValueError, match="sequence 42 is not running"):
        spec.cancel(42)
    with pytest.raises(ValueError, match="-3"):
        spec.finish(-3)
    with pytest.raises(TypeError):
        spec.finish("5")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        spec.propose(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="-1"):
        spec.propose([5, -1])
    # Nothing changed: the pass still goes through.
    steps = spec.accept([5, 6], [3, 3], [0, 1, 2])
    assert list(steps["emitted"]) == [1, 1]
    assert -1 not in spec and "5" not in spec and 5 in spec


def test_a_sequence_that_may_emit_nothing_starts_finished() -> None:
    spec = BatchSpeculator(max_sequences=2)
    spec.begin(1, CYCLE, max_new_tokens=0)
    assert 1 in spec
    with pytest.raises(ValueError, match="finished"):
        spec.propose([1])
    spec.finish(1)


def test_finish_appends_to_the_corpus_and_cancel_does_not() -> None:
    corpus = ngramspec.SharedCorpus(1 << 20)
    spec = BatchSpeculator(max_sequences=2, corpus=corpus, max_record_tokens=64)
    for seq in (1, 2):
        spec.begin(seq, CYCLE, max_new_tokens=3, speculate=False)
    for _ in range(3):
        spec.propose([1, 2])
        steps = spec.accept([1, 2], [4, 4], [0, 1, 2])
    assert all(steps["finished"])
    spec.finish(1)
    spec.cancel(2)
    assert corpus.records == 1 and corpus.size >= 3


def test_memory_stats_and_close() -> None:
    small = BatchSpeculator(max_sequences=1)
    large = BatchSpeculator(max_sequences=8)
    assert 0 < small.memory_bytes < large.memory_bytes
    assert large.max_sequences == 8
    assert small.stats == ngramspec.BatchStats(0, 0, 0, 0)
    assert "BatchSpeculator" in repr(small)
    with BatchSpeculator(max_sequences=1) as spec:
        spec.begin(1, CYCLE)
    with pytest.raises(ValueError):
        spec.begin(2, CYCLE)
    with pytest.raises(ValueError):
        spec.propose([1])
    assert len(spec) == 0 and 1 not in spec and spec.memory_bytes == 0
    assert "closed" in repr(spec)


def test_stop_tokens_none_is_no_stop_tokens_and_a_non_iterable_is_named() -> None:
    spec = BatchSpeculator(max_sequences=2)
    spec.begin(1, CYCLE, max_new_tokens=3, stop_tokens=None)
    spec.propose([1])
    steps = spec.accept([1], [3], [0, 1])
    assert steps["emitted"][0] == 1 and not steps["finished"][0]
    with pytest.raises(TypeError, match=r"stop_tokens must be an iterable of token ids or None, not int \(5\)"):
        spec.begin(2, CYCLE, stop_tokens=5)  # type: ignore[arg-type]
    assert 2 not in spec


def test_accept_refuses_offsets_that_leave_model_tokens_out() -> None:
    spec = BatchSpeculator(max_sequences=2)
    spec.begin(1, [1, 2])
    spec.begin(2, [1, 2])
    spec.propose([1, 2])
    with pytest.raises(ValueError, match=r"offsets\[0\] = 1 and offsets\[2\] = 3 are invalid: they must be 0 and "
                                         r"the count of model tokens, 3"):
        spec.accept([1, 2], [5, 6, 7], [1, 2, 3])
    with pytest.raises(ValueError, match=r"offsets\[0\] = 0 and offsets\[2\] = 2 are invalid"):
        spec.accept([1, 2], [5, 6, 7], [0, 1, 2])
    steps = spec.accept([1, 2], [5, 6], [0, 1, 2])
    assert list(steps["emitted"]) == [1, 1]


def test_costs_share_verify_costs_grammar_and_only_ratios_matter() -> None:
    BatchSpeculator(max_sequences=1, cost="flat").close()
    with pytest.raises(ValueError, match="more than kMaxCost"):
        BatchSpeculator(max_sequences=1, cost="table:1=1,2=1.79e308")

    def drafts_under(cost: str) -> list[list[int]]:
        spec = BatchSpeculator(max_sequences=1, cost=cost)
        spec.begin(1, CYCLE * 4, max_new_tokens=40, max_drafts=16)
        spec.propose([1])
        spec.accept([1], [CYCLE[0]], [0, 1])
        passes = []
        last = CYCLE[0]
        for _ in range(4):
            drafts, _offsets = spec.propose([1])
            passes.append(drafts.tolist())
            answers = answers_for(last, drafts)
            steps = spec.accept([1], answers, [0, len(answers)])
            last = answers[int(steps["emitted"][0]) - 1]
            if steps["finished"][0]:
                break
        spec.close()
        return passes

    ones = drafts_under("table:1=1,2=1")
    assert any(ones), "a repeating context drafts under a flat cost"
    assert drafts_under("table:1=1e-308,2=1e-308") == ones
    assert drafts_under("table:1=1e308,2=1e308") == ones
    assert drafts_under("flat") == ones
