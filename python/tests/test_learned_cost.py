"""The learned cost through the package: BatchSpeculator(cost="learn"), report_pass_seconds, describe_cost and
learned_cost_stats; LearnedCost on its own; bad input refused naming the value."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ngramspec import BatchSpeculator, LearnedCost, LearnedCostStats


def next_of(token: int) -> int:
    """The model: the token after t is (t + 1) % 10, so text repeats and drafts are accepted."""
    return (int(token) + 1) % 10


def serve(spec: BatchSpeculator, n: int, new_tokens: int, report: bool) -> list[list[int]]:
    prompt = [t % 10 for t in range(24)]
    outputs: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        spec.begin(i, prompt, max_new_tokens=new_tokens, max_drafts=8)
    ids = list(range(n))
    while ids:
        drafts, offsets = spec.propose(ids)
        model, model_offsets = [], [0]
        for i, seq in enumerate(ids):
            last = outputs[seq][-1] if outputs[seq] else prompt[-1]
            model.append(next_of(last))
            model.extend(next_of(d) for d in drafts[offsets[i]:offsets[i + 1]])
            model_offsets.append(len(model))
        if report:
            # a pass costs 1 ms plus 0.1 ms a token beyond the first
            spec.report_pass_seconds(1e-3 + 1e-4 * (len(model) - 1))
        steps = spec.accept(ids, model, model_offsets)
        running = []
        for i, seq in enumerate(ids):
            outputs[seq].extend(model[model_offsets[i]:model_offsets[i] + int(steps["emitted"][i])])
            if steps["finished"][i]:
                spec.finish(seq)
            else:
                running.append(seq)
        ids = running
    return outputs


def plain(new_tokens: int) -> list[int]:
    out, last = [], 23 % 10
    for _ in range(new_tokens):
        last = next_of(last)
        out.append(last)
    return out


@pytest.mark.parametrize("cost", ["learn", "learn:knee:256", "learn:table:1=1,2=1.5,4=2.5"])
@pytest.mark.parametrize("report", [True, False])
def test_a_learning_batch_emits_what_plain_decoding_does_and_observes_every_pass(cost: str, report: bool) -> None:
    spec = BatchSpeculator(cost=cost, max_sequences=4)
    assert spec.learns_cost and spec.cost == cost
    assert spec.describe_cost() == ""
    assert serve(spec, 3, 300, report) == [plain(300)] * 3
    learned = spec.learned_cost_stats
    assert isinstance(learned, LearnedCostStats)
    assert learned.passes == spec.stats.proposals
    assert 0 < learned.plain_passes <= learned.passes and learned.seconds > 0
    text = spec.describe_cost()
    assert "sequences: " in text and ("no prior" if cost == "learn" else "prior") in text
    if report:
        assert learned.plain_passes < learned.passes and spec.stats.accepted > 0


def test_reports_are_checked_and_a_bad_one_learns_nothing() -> None:
    spec = BatchSpeculator(cost="learn", max_sequences=2)
    with pytest.raises(ValueError, match="no pass proposed"):
        spec.report_pass_seconds(1e-3)
    spec.begin(7, [1, 2, 3])
    spec.propose([7])
    for bad in (math.nan, 0.0, -1.0, math.inf):
        with pytest.raises(ValueError, match=r"seconds = .* is invalid: must be finite and positive"):
            spec.report_pass_seconds(bad)
    spec.report_pass_seconds(2e-3)
    spec.accept([7], [4], [0, 1])
    assert spec.learned_cost_stats.passes == 1 and spec.learned_cost_stats.seconds == pytest.approx(2e-3)
    with pytest.raises(ValueError, match="no pass proposed"):
        spec.report_pass_seconds(1e-3)


def test_a_fixed_cost_or_none_does_not_learn() -> None:
    fixed, none = BatchSpeculator(cost="knee:256"), BatchSpeculator()
    assert not fixed.learns_cost and not none.learns_cost
    assert fixed.describe_cost() == "knee:256" and none.describe_cost() == ""
    fixed.begin(1, [1, 2, 3])
    fixed.propose([1])
    with pytest.raises(ValueError, match="does not learn its cost"):
        fixed.report_pass_seconds(1e-3)
    with pytest.raises(ValueError, match="does not learn its cost"):
        fixed.learned_cost_stats


@pytest.mark.parametrize("cost, piece", [("learned", "'learned' is not a cost"),
                                         ("learn:kne:4", "'learn:kne:4': its prior is not a cost"),
                                         ("learn:", "its prior is not a cost")])
def test_an_unknown_spec_is_refused_by_name(cost: str, piece: str) -> None:
    with pytest.raises(ValueError, match=piece):
        BatchSpeculator(cost=cost)


def test_a_learned_cost_on_its_own_plans_plain_first_then_what_the_passes_pay() -> None:
    cost = LearnedCost("flat")
    assert cost.plan(np.full(6, 0.9, np.float32)) == 0  # nothing measured: a plain pass
    for _ in range(3):
        cost.observe(1, 1, 1e-3)
    count = 0
    for _ in range(20):
        count = cost.plan([0.9] * 6)
        cost.observe(1, 1 + count, 1e-3)
    assert count == 6  # every pass costs what a plain one does: all of them
    assert cost.stats.passes == 23 and cost.stats.seconds == pytest.approx(23e-3)
    assert "1 sequences: 23 passes" in cost.describe()
    with pytest.raises(ValueError, match="rows = 0"):
        cost.observe(0, 1, 1e-3)
    with pytest.raises(ValueError, match="tokens = 3 is below rows = 4"):
        cost.observe(4, 3, 1e-3)
    with pytest.raises(ValueError, match="seconds = nan"):
        cost.observe(1, 1, math.nan)
    assert cost.stats.passes == 23
    cost.close()
    with pytest.raises(ValueError, match="closed"):
        cost.plan([0.5])


@pytest.mark.parametrize("kwargs, piece", [({"exploration": 1.5}, "exploration = 1.5"),
                                           ({"plain_every": 1}, "plain_every = 1"),
                                           ({"prior": "knee"}, "'knee'"),
                                           ({"prior": "learn"}, "prior = 'learn' is invalid")])
def test_a_learned_cost_refuses_bad_settings_by_name(kwargs: dict, piece: str) -> None:
    with pytest.raises(ValueError, match=piece):
        LearnedCost(**kwargs)
