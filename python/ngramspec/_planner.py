"""VerifyCost: what a verify pass costs, and the planner that sizes one sequence's drafts against it."""

from __future__ import annotations

import ctypes
import time
from typing import Any, Callable, Sequence

import numpy as np

from ._closable import Closable
from ._arrays import size_arg
from ._errors import raise_status
from ._native import lib

__all__ = ["VerifyCost"]


class VerifyCost(Closable):
    """What a verify pass costs against the tokens it carries (``ngramspec_verify_cost``; experimental in
    the C ABI), and the planner that chooses how many of a sequence's drafts a pass should carry.

    `spec`: ``"flat"``, ``"knee:N"`` or ``"table:T=C,..."``, the grammar of
    :class:`BatchSpeculator`'s `cost` (the C++ VerifyCost::parse); only ratios matter, and the costs are
    normalized so that the first point costs 1. Raises ValueError naming the spec and what is wrong.

    An engine that runs its own loop for one sequence (a candidate generator, a decoder) asks
    :meth:`plan` how many of its drafter's candidates to send; :class:`BatchSpeculator` does the same for
    a whole batch inside ``propose`` when it has a cost. :meth:`measure` times an engine's own forward
    and returns its curve."""

    _handle: int | None = None

    def __init__(self, spec: str) -> None:
        if not isinstance(spec, str):
            raise TypeError(f"spec must be a str such as 'knee:256', not {type(spec).__name__}")
        out = ctypes.c_void_p()
        status = lib.ngramspec_verify_cost_create(spec.encode("utf-8"), ctypes.byref(out))
        if status:
            raise_status(status)
        self._handle = out.value
        self._count = ctypes.c_size_t(0)
        self._count_address = ctypes.addressof(self._count)

    @classmethod
    def measure(cls, run_pass: Callable[[int], Any], token_counts: Sequence[int] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32),
                repeats: int = 5) -> "VerifyCost":
        """Times ``run_pass(n)``, one verify pass of n tokens through the engine's own forward (it must
        leave the engine as it found it, and return only once the pass is done: synchronize a GPU),
        for each n of `token_counts` (at least 1, strictly increasing), and returns the curve as a
        table: each count's median of `repeats` runs after one warm-up run, counts interleaved so that
        a slow spell spreads over all of them, a time below the one before it raised to it (a pass
        never costs less for carrying more)."""
        counts = [size_arg(n, "token_counts[]") for n in token_counts]
        if not counts or any(n == 0 or (i and n <= counts[i - 1]) for i, n in enumerate(counts)):
            raise ValueError(f"token_counts must be at least 1 and strictly increasing, got {list(token_counts)}")
        if size_arg(repeats, "repeats") == 0:
            raise ValueError("repeats = 0; it must be at least 1")
        for n in counts:
            run_pass(n)
        seconds: list[list[float]] = [[] for _ in counts]
        for _ in range(repeats):
            for times, n in zip(seconds, counts):
                start = time.perf_counter()
                run_pass(n)
                times.append(time.perf_counter() - start)
        floor, points = 0.0, []
        for times, n in zip(seconds, counts):
            floor = max(floor, float(np.median(times)), 1e-12)
            points.append(f"{n}={floor:.6g}")
        return cls("table:" + ",".join(points))

    @property
    def spec(self) -> str:
        """The spec that reads back into an equal cost, normalized: ``"flat"``, ``"knee:N"`` or
        ``"table:..."`` with the first point costing 1."""
        return lib.ngramspec_verify_cost_spec(self._checked()).decode("utf-8")

    def __call__(self, tokens: int) -> float:
        """What a pass of `tokens` tokens costs, a one-token pass costing 1 (0 tokens cost what 1 does)."""
        return float(lib.ngramspec_verify_cost_of(self._checked(), size_arg(tokens, "tokens")))

    def of_pass(self, base_tokens: int, drafts: int) -> float:
        """What a pass of `base_tokens` tokens carrying `drafts` drafts more costs, as the planner
        prices it: ``cost(base_tokens + drafts)``, except below the first point N of a table
        (measured on N sequences, it says nothing of fewer): a plain pass there costs the first
        point's cost times ``base_tokens / N``, and drafts add what they add over N. A sum past 2**64 - 1
        is priced on the curve's tail, never wrapped."""
        return float(lib.ngramspec_verify_cost_of_pass(self._checked(), size_arg(base_tokens, "base_tokens"),
                                                       size_arg(drafts, "drafts")))

    def plan(self, probabilities: Any, base_tokens: int = 1, base_expected: float = 1.0) -> int:
        """How many of one sequence's candidate drafts its pass should carry: the n that maximizes
        ``(base_expected + p[0] + ... + p[n - 1]) / cost.of_pass(base_tokens, n)`` (ties to fewer), where
        ``probabilities[j]`` is the estimated chance that drafts 0..j are all accepted (a drafter's
        predict), `base_tokens` what the pass carries besides them (its last token: 1) and
        `base_expected` what it emits without them (its model token: 1). A writable C-contiguous
        float32 array is made valid in place (NaN and negatives to 0, above 1 to 1, each lowered to
        the one before it); anything else is converted first. Allocates nothing for such an array."""
        array = probabilities
        if not (isinstance(array, np.ndarray) and array.dtype == np.float32 and array.flags.c_contiguous
                and array.flags.writeable and array.ndim == 1):
            array = np.array(probabilities, dtype=np.float32)
            if array.ndim != 1:
                raise ValueError(f"probabilities must be one-dimensional (one sequence's candidates); it has shape "
                                 f"{array.shape}")
        status = lib.ngramspec_plan_drafts(self._checked(), size_arg(base_tokens, "base_tokens"),
                                           float(base_expected), array.ctypes.data, array.shape[0],
                                           self._count_address)
        if status:
            raise_status(status)
        return self._count.value

    def _checked(self) -> int:
        if self._handle is None:
            raise ValueError("this VerifyCost is closed")
        return self._handle

    def close(self) -> None:
        """Frees the native cost now (also done when the object is collected); later calls raise ValueError."""
        handle, self._handle = self._handle, None
        if handle is not None:
            lib.ngramspec_verify_cost_free(handle)

    def __repr__(self) -> str:
        if self._handle is None:
            return "<ngramspec.VerifyCost closed>"
        return f"<ngramspec.VerifyCost {self.spec}>"
