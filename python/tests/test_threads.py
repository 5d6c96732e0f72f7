"""The native calls release the GIL (ctypes.CDLL does for every foreign call), so threads that drive
separate drafters run their native work in parallel with each other and with Python code."""

from __future__ import annotations

import threading
import time

import numpy as np

import ngramspec

LONG_INPUT = np.random.default_rng(7).integers(3, 32000, 1 << 20).astype(np.uint32)  # a long native update


def test_python_code_runs_during_a_native_call() -> None:
    """A thread counting in Python keeps counting while the main thread is inside one long native call:
    it could not if the call held the GIL (a thread holding the GIL in C never offers it)."""
    drafter = ngramspec.MatchDrafter()
    ticks: list[float] = []
    stop = threading.Event()

    def count() -> None:
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0)

    counter = threading.Thread(target=count)
    counter.start()
    try:
        while len(ticks) < 10:  # the counter is running
            time.sleep(0.001)
        begin = time.perf_counter()
        drafter.update(LONG_INPUT)
        end = time.perf_counter()
    finally:
        stop.set()
        counter.join()
    middle = [t for t in ticks if begin + 0.25 * (end - begin) < t < begin + 0.75 * (end - begin)]
    assert end - begin > 0.002, "the native call was too short to tell"
    assert middle, f"no Python ran during the middle half of a {1e3 * (end - begin):.1f} ms native call"


def test_two_threads_each_driving_their_own_drafter() -> None:
    """Separate drafters on separate threads draft what each would draft alone."""
    rng = np.random.default_rng(11)
    streams = [rng.integers(3, 200, 20000).astype(np.uint32) for _ in range(2)]

    def drive(stream: np.ndarray) -> list[int]:
        drafter = ngramspec.MatchDrafter()
        drafts: list[int] = []
        out = np.empty(4, np.uint32)
        for i in range(0, len(stream), 50):
            drafter.update(stream[i:i + 50])
            drafts += out[: drafter.predict_into(out)].tolist()
        return drafts

    alone = [drive(stream) for stream in streams]
    together: list[list[int]] = [[], []]

    def run(i: int) -> None:
        together[i] = drive(streams[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert together == alone
