"""MatchDrafter and NGramPredictor: drafting, the probabilities, inputs without copies, errors."""

from __future__ import annotations

import numpy as np
import pytest

import ngramspec
from ngramspec import _arrays
from ngramspec._native import lib

DRAFTERS = [
    pytest.param(lambda: ngramspec.MatchDrafter(), id="MatchDrafter"),
    pytest.param(lambda: ngramspec.NGramPredictor(), id="NGramPredictor"),
]

PERIOD = list(range(40, 52))  # a 12-token cycle


@pytest.mark.parametrize("make", DRAFTERS)
def test_a_periodic_sequence_is_drafted_exactly(make) -> None:  # type: ignore[no-untyped-def]
    drafter = make()
    drafter.update(PERIOD * 3 + PERIOD[:5])
    drafts = drafter.predict(6)
    assert drafts.dtype == np.uint32
    assert list(drafts) == PERIOD[5:11]
    drafts, probabilities = drafter.predict_with_probabilities(6)
    assert list(drafts) == PERIOD[5:11]
    assert probabilities.dtype == np.float32 and len(probabilities) == len(drafts)
    assert np.all((probabilities >= 0) & (probabilities <= 1))
    assert np.all(np.diff(probabilities) <= 0)  # the chance that drafts 0..j are all accepted
    assert drafter.memory_bytes > 0
    drafter.reset()
    assert len(drafter.predict(6)) == 0
    assert len(drafter.predict(0)) == 0


@pytest.mark.parametrize("make", DRAFTERS)
def test_every_input_type_drafts_the_same(make) -> None:  # type: ignore[no-untyped-def]
    tokens = PERIOD * 3 + PERIOD[:3]
    expected = None
    for converted in (tokens, tuple(tokens), np.array(tokens, np.uint32), np.array(tokens, np.int32),
                      np.array(tokens, np.int64), np.array(tokens, np.uint16), np.repeat(np.array(tokens, np.uint32), 2)[::2]):
        drafter = make()
        drafter.update(converted)
        drafts = list(drafter.predict(4))
        expected = drafts if expected is None else expected
        assert drafts == expected == PERIOD[3:7]


def test_predict_into_fills_the_callers_arrays_in_place() -> None:
    drafter = ngramspec.MatchDrafter()
    drafter.update(PERIOD * 3)
    out = np.zeros(8, np.uint32)
    probabilities = np.full(8, -1.0, np.float32)
    address = out.ctypes.data
    n = drafter.predict_into(out, probabilities)
    assert out.ctypes.data == address
    assert n > 0 and list(out[:n]) == PERIOD[:n]
    assert np.all(probabilities[:n] > 0) and np.all(probabilities[n:] == -1)
    signed = np.zeros(4, np.int32)  # int32 is written in place too
    assert drafter.predict_into(signed) == 4 and list(signed) == PERIOD[:4]
    view = np.zeros(10, np.uint32)[2:6]  # a contiguous view: the base array is written
    assert drafter.predict_into(view) == 4 and list(view.base[2:6]) == PERIOD[:4]


def test_predict_into_rejects_arrays_it_cannot_write() -> None:
    drafter = ngramspec.MatchDrafter()
    drafter.update(PERIOD * 3)
    read_only = np.zeros(4, np.uint32)
    read_only.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        drafter.predict_into(read_only)
    with pytest.raises(ValueError, match="contiguous"):
        drafter.predict_into(np.zeros(8, np.uint32)[::2])
    with pytest.raises(TypeError, match="uint32"):
        drafter.predict_into(np.zeros(4, np.int64))
    with pytest.raises(TypeError):
        drafter.predict_into([0, 0, 0, 0])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="room"):
        drafter.predict_into(np.zeros(4, np.uint32), np.zeros(2, np.float32))
    with pytest.raises(TypeError, match="float32"):
        drafter.predict_into(np.zeros(4, np.uint32), np.zeros(4, np.float64))


def test_uint32_and_int32_tokens_are_passed_without_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    passed: list[int] = []
    native_update = ngramspec.MatchDrafter._update

    def recording_update(handle: int, pointer: int, count: int) -> int:
        passed.append(pointer)
        return native_update(handle, pointer, count)

    monkeypatch.setattr(ngramspec.MatchDrafter, "_update", staticmethod(recording_update))
    drafter = ngramspec.MatchDrafter()
    for dtype in (np.uint32, np.int32):
        tokens = np.tile(np.array(PERIOD, dtype=dtype), 3)
        tokens.setflags(write=False)  # read-only input is fine: the library only reads it
        drafter.reset()
        drafter.update(tokens)
        assert passed[-1] == tokens.ctypes.data  # the array's own memory, no copy
        assert list(drafter.predict(2)) == PERIOD[:2]
    # Everything else is converted first, into a new uint32 array.
    for converted in (list(range(10)), np.arange(10, dtype=np.int64), np.arange(20, dtype=np.uint32)[::2]):
        kept, address, _ = _arrays.tokens_arg(converted)
        assert kept is not converted and kept.dtype == np.uint32 and address == kept.ctypes.data
        drafter.update(converted)
        if isinstance(converted, np.ndarray):
            assert passed[-1] != converted.ctypes.data


def test_tokens_that_do_not_fit_are_value_errors() -> None:
    drafter = ngramspec.MatchDrafter()
    with pytest.raises(ValueError, match="-1"):
        drafter.update([1, -1])
    with pytest.raises(ValueError, match=str(1 << 32)):
        drafter.update(np.array([1 << 32], np.int64))
    with pytest.raises(TypeError):
        drafter.update([1.5, 2.5])
    with pytest.raises(TypeError):
        drafter.update(7)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one-dimensional"):
        drafter.update(np.zeros((2, 2), np.uint32))
    drafter.update([])  # nothing to observe is fine


def test_the_defaults_are_the_librarys() -> None:
    defaults = lib.ngramspec_match_config_default()
    drafter_defaults = ngramspec.MatchDrafter.__init__.__kwdefaults__
    for field in ("index_capacity", "copy_min_match", "count_max_order", "count_window"):
        assert drafter_defaults[field] == getattr(defaults, field), field
    assert drafter_defaults["min_confidence"] == pytest.approx(defaults.min_confidence)
    ngram_defaults = lib.ngramspec_ngram_config_default()
    predictor_defaults = ngramspec.NGramPredictor.__init__.__kwdefaults__
    for field in ("min_order", "max_order", "window"):
        assert predictor_defaults[field] == getattr(ngram_defaults, field), field


def test_cap_is_the_former_name_of_index_capacity() -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        capacity = int(rng.integers(4, 300))
        tokens = rng.integers(0, 6, size=int(rng.integers(1, 600))).astype(np.uint32)
        by_name = ngramspec.MatchDrafter(index_capacity=capacity, min_confidence=0)
        by_former = ngramspec.MatchDrafter(cap=capacity, min_confidence=0)
        by_both = ngramspec.MatchDrafter(index_capacity=capacity, cap=capacity, min_confidence=0)
        assert by_former.memory_bytes == by_name.memory_bytes == by_both.memory_bytes, capacity
        for drafter in (by_name, by_former, by_both):
            drafter.update(tokens)
        assert list(by_former.predict(8)) == list(by_name.predict(8)) == list(by_both.predict(8))
        batch_by_name = ngramspec.BatchSpeculator(max_sequences=1, drafter={"index_capacity": capacity})
        batch_by_former = ngramspec.BatchSpeculator(max_sequences=1, drafter={"cap": capacity})
        assert batch_by_former.memory_bytes == batch_by_name.memory_bytes, capacity
    assert ngramspec.MatchDrafter(cap=64).memory_bytes < ngramspec.MatchDrafter().memory_bytes  # it is not ignored
    with pytest.raises(ValueError, match="cap = 64 and index_capacity = 128 disagree"):
        ngramspec.MatchDrafter(index_capacity=128, cap=64)
    with pytest.raises(ValueError, match="cap = 64 and index_capacity = 128 disagree"):
        ngramspec.BatchSpeculator(max_sequences=1, drafter={"index_capacity": 128, "cap": 64})


def test_bad_settings_are_value_errors_with_the_library_message() -> None:
    with pytest.raises(ValueError, match="count_max_order"):
        ngramspec.MatchDrafter(count_max_order=1)
    with pytest.raises(ValueError, match="min_confidence"):
        ngramspec.MatchDrafter(min_confidence=1.5)
    with pytest.raises(ValueError, match="cap"):
        ngramspec.MatchDrafter(cap=-4)
    with pytest.raises(TypeError):
        ngramspec.MatchDrafter(cap="big")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window"):
        ngramspec.NGramPredictor(window=0)
    with pytest.raises(TypeError):
        ngramspec.MatchDrafter(8192)  # type: ignore[misc]  # keywords only


@pytest.mark.parametrize("make", DRAFTERS)
def test_a_closed_drafter_raises(make) -> None:  # type: ignore[no-untyped-def]
    with make() as drafter:
        drafter.update([1, 2, 3])
    drafter.close()  # again: nothing
    assert drafter.closed
    name = type(drafter).__name__
    calls = {
        "update": lambda: drafter.update([1, 2, 3]),
        "predict": lambda: drafter.predict(4),
        "predict_with_probabilities": lambda: drafter.predict_with_probabilities(4),
        "predict_into": lambda: drafter.predict_into(np.empty(4, np.uint32)),
        "reset": lambda: drafter.reset(),
    }
    for call_name, call in calls.items():
        with pytest.raises(ValueError, match=f"^ngramspec.{name}.{call_name}: the {name} is closed$"):
            call()
    assert "closed" in repr(drafter) and drafter.memory_bytes == 0


def test_a_gateless_drafter_drafts_more() -> None:
    tokens = list(np.random.default_rng(5).integers(3, 50, 400))
    gated = ngramspec.MatchDrafter()
    open_ = ngramspec.MatchDrafter(min_confidence=0.0)
    total_gated = total_open = 0
    for i in range(50, 400, 7):
        gated.update(tokens[i - 7:i] if i > 50 else tokens[:i])
        open_.update(tokens[i - 7:i] if i > 50 else tokens[:i])
        total_gated += len(gated.predict(4))
        total_open += len(open_.predict(4))
    assert total_open >= total_gated


def test_restart_forgets_the_sequence_and_keeps_the_calibration() -> None:
    noise = list(np.random.default_rng(5).integers(0, 6, 2000))
    nxt = [7, 8, 9, 10, 11] * 2 + [7, 8, 9]
    # Ungated, so the drafts are the same whatever the calibration; the chances say what it learned.
    restarted, reset, fresh = (ngramspec.MatchDrafter(min_confidence=0.0) for _ in range(3))
    restarted.update(noise)
    reset.update(noise)
    restarted.restart()
    reset.reset()
    for drafter in (restarted, reset, fresh):
        drafter.update(nxt)
    assert list(restarted.predict(4)) == list(fresh.predict(4)) == [10, 11, 7, 8]
    _, p_restarted = restarted.predict_with_probabilities(4)
    _, p_reset = reset.predict_with_probabilities(4)
    _, p_fresh = fresh.predict_with_probabilities(4)
    assert list(p_reset) == list(p_fresh)
    assert p_restarted[0] < p_fresh[0]  # the noise taught it that drafts fail
    restarted.close()
    with pytest.raises(ValueError, match="^ngramspec.MatchDrafter.restart: the MatchDrafter is closed$"):
        restarted.restart()
