"""ngramspec.VerifyCost: the verify cost and the planner of one sequence's drafts, through the C ABI."""

from __future__ import annotations

import re

import numpy as np
import pytest

from ngramspec import VerifyCost


def best_count(cost: VerifyCost, p: np.ndarray, base_tokens: int, base_expected: float) -> int:
    """The n with the most (base_expected + p[0] + ... + p[n - 1]) / cost.of_pass(base_tokens, n), ties to fewer."""
    best_n, best = 0, base_expected / cost.of_pass(base_tokens, 0)
    expected = base_expected
    for j, pj in enumerate(p):
        expected += float(pj)
        rate = expected / cost.of_pass(base_tokens, j + 1)
        if rate > best * (1 + 1e-12):
            best_n, best = j + 1, rate
    return best_n


def test_plan_sends_the_count_with_the_best_expected_tokens_per_cost() -> None:
    rng = np.random.default_rng(7)
    sent = []
    for _ in range(400):
        points, tokens, value = [], 0, 0.5 + rng.random()
        for _ in range(int(rng.integers(1, 6))):
            tokens += int(rng.integers(1, 10))
            value += float(rng.random()) * float(rng.choice([0.05, 1.0]))
            points.append(f"{tokens}={value:.4f}")
        cost = VerifyCost(str(rng.choice(["flat", f"knee:{int(rng.integers(1, 30))}", "table:" + ",".join(points)])))
        p = np.cumprod(rng.random(int(rng.integers(0, 20)))).astype(np.float32)
        base_tokens, base_expected = int(rng.integers(0, 3)), float(rng.integers(1, 3))
        expected = best_count(cost, p, base_tokens, base_expected)
        assert cost.plan(p.tolist(), base_tokens, base_expected) == expected  # a list is converted
        assert cost.plan(p, base_tokens, base_expected) == expected  # a float32 array is planned in place
        sent.append(expected)
    assert sum(n == 0 for n in sent) > 10 and sum(n > 0 for n in sent) > 100


def test_plan_repairs_bad_estimates_in_place_and_rejects_a_bad_base() -> None:
    cost = VerifyCost("flat")
    p = np.array([0.5, np.nan, 0.7, -1.0, 2.0], np.float32)
    assert cost.plan(p) == 1  # a flat cost: every draft with a chance goes (ties to fewer)
    assert p.tolist() == [0.5, 0.0, 0.0, 0.0, 0.0]  # NaN and negatives to 0, each at most the one before
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="base_expected"):
            cost.plan([0.5], base_expected=bad)
    with pytest.raises(TypeError, match="base_tokens"):
        cost.plan([0.5], base_tokens=1.5)  # type: ignore[arg-type]


def test_costs_read_the_batch_grammar_normalized() -> None:
    table = VerifyCost("table:1=2,3=3,5=5")
    assert (table(0), table(1), table(2), table(7)) == (1.0, 1.0, 1.25, 3.5)
    again = VerifyCost(table.spec)
    assert [again(t) for t in range(12)] == [table(t) for t in range(12)]
    assert VerifyCost("knee:4").spec == "knee:4" and VerifyCost("knee:4")(8) == 2.0
    for bad, named in (("steep", "'steep'"), ("knee:0", "knee:0"), ("table:2=1,1=2", "table:2=1,1=2")):
        with pytest.raises(ValueError, match=named):
            VerifyCost(bad)
    with pytest.raises(TypeError, match="spec must be a str"):
        VerifyCost(4)  # type: ignore[arg-type]


def test_measure_times_each_count_and_never_lowers_the_cost_for_more_tokens() -> None:
    calls = []
    work = {1: 0.0, 2: 0.002, 4: 0.001, 8: 0.004}  # 4 tokens "faster" than 2: noise, raised to it

    def run_pass(n: int) -> None:
        calls.append(n)
        end = __import__("time").perf_counter() + work[n]
        while __import__("time").perf_counter() < end:
            pass
    cost = VerifyCost.measure(run_pass, [1, 2, 4, 8], repeats=3)
    assert calls == [1, 2, 4, 8] * 4  # a warm-up round, then rounds interleaved
    assert cost(1) == 1.0 and cost(2) <= cost(4) <= cost(8) and cost(8) > cost(1)
    for counts in ([], [0, 1], [2, 2], [3, 1]):
        with pytest.raises(ValueError, match="token_counts"):
            VerifyCost.measure(run_pass, counts)
    with pytest.raises(ValueError, match="repeats"):
        VerifyCost.measure(run_pass, [1], repeats=0)


def test_a_closed_cost_refuses_every_call() -> None:
    cost = VerifyCost("knee:8")
    with cost:
        assert cost(16) == 2.0
    assert repr(cost) == "<ngramspec.VerifyCost closed>"
    for call in (lambda: cost(1), lambda: cost.of_pass(1, 1), lambda: cost.plan([0.5]), lambda: cost.spec):
        with pytest.raises(ValueError, match="closed"):
            call()
    cost.close()  # twice: nothing


def test_a_table_prices_a_pass_below_its_first_point_in_proportion_and_drafts_over_it() -> None:
    cost = VerifyCost("table:8=1,9=5,16=6")
    assert cost.of_pass(2, 0) == 0.25 and cost(2) == 1.0  # the table alone is flat below 8
    assert cost.of_pass(2, 1) == 4.25  # the step of a pass with drafts, at any base
    assert cost.of_pass(8, 8) == 6.0
    assert cost.plan([0.9, 0.8], base_tokens=2, base_expected=2.0) == 0  # 3.7 tokens for 5.25: not worth it
    with pytest.raises(ValueError, match="drafts"):
        cost.of_pass(1, -1)


def test_a_pass_of_any_count_never_costs_less_for_more_tokens() -> None:
    # Counts up to 2**64 - 1: base + drafts past it must not wrap and price a huge pass as a small one.
    rng = np.random.default_rng(37)
    top = 2**64 - 1

    def count() -> int:
        kind = int(rng.integers(0, 3))
        return int(rng.integers(1, 64)) if kind == 0 else top - int(rng.integers(0, 64)) if kind == 1 else \
            int(rng.integers(1, 2**63)) * 2
    for _ in range(2000):
        cost = VerifyCost(str(rng.choice(["flat", "knee:1", f"knee:{count()}", "table:5=3,10=6",
                                          f"table:1=1,{min(count(), top - 1) + 1}=9"])))
        base, drafts = count(), count()
        more = drafts + min(count(), top - drafts)
        assert cost.of_pass(base, drafts) >= cost.of_pass(base, 0), (cost.spec, base, drafts)
        assert cost.of_pass(base, more) >= cost.of_pass(base, drafts), (cost.spec, base, drafts, more)
    assert VerifyCost("knee:1").of_pass(top, 2) > 1e19
    assert VerifyCost("table:5=3,10=6").of_pass(3, top) > 3e18
    # Every token costs a pass: a batch of 2**64 - 1 sequences gains nothing from drafts of 0.9.
    assert VerifyCost("knee:1").plan([0.9] * 5, base_tokens=top, base_expected=float(top)) == 0


@pytest.mark.parametrize("cost", ["0x1p1", "inf", "+2", " 2", "2f"])
def test_a_cost_is_read_in_decimal_as_every_number(cost: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"cost '{cost}' is not a finite number in decimal")):
        VerifyCost(f"table:1=1,2={cost}")


def test_plan_takes_one_sequence_of_probabilities_and_refuses_other_shapes() -> None:
    with pytest.raises(ValueError, match=r"probabilities must be one-dimensional \(one sequence's candidates\); it "
                                         r"has shape \(2, 2\)"):
        VerifyCost("knee:4").plan([[0.9, 0.8], [0.7, 0.6]])
