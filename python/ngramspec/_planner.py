"""VerifyCost: what a verify pass costs, and the planner that sizes one sequence's drafts against it."""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ._closable import Closable
from ._arrays import size_arg
from ._errors import raise_status
from ._native import LearnedCostStats as _CLearnedCostStats
from ._native import lib

__all__ = ["VerifyCost", "LearnedCost", "LearnedCostStats"]


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
        array = _probabilities_arg(probabilities)
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


@dataclass(frozen=True)
class LearnedCostStats:
    """What a learned cost observed (``ngramspec_learned_cost_stats``)."""

    passes: int  #: passes observed
    seconds: float  #: their seconds
    plain_passes: int  #: passes with no drafts
    plain_seconds: float  #: their seconds
    #: passes that carried more drafts than had been measured, and what they cost above what the
    #: estimate said of them (negative: less; at most the exploration bound times `seconds`, plus one pass)
    exploring_passes: int
    exploration_seconds: float


def read_text(function: Any, handle: int) -> str:
    """The text a describe call writes, snprintf's way: asked for its length, then read."""
    length = ctypes.c_size_t(0)
    status = function(handle, None, 0, ctypes.byref(length))
    if status:
        raise_status(status)
    buffer = ctypes.create_string_buffer(length.value + 1)
    status = function(handle, buffer, len(buffer), ctypes.byref(length))
    if status:
        raise_status(status)
    return buffer.value.decode("utf-8")


def learned_stats(function: Any, handle: int) -> LearnedCostStats:
    out = _CLearnedCostStats()
    status = function(handle, ctypes.byref(out), ctypes.sizeof(out))
    if status:
        raise_status(status)
    return LearnedCostStats(int(out.passes), float(out.seconds), int(out.plain_passes), float(out.plain_seconds),
                            int(out.exploring_passes), float(out.exploration_seconds))


class LearnedCost(Closable):
    """What a verify pass costs, learned from the passes an engine serves (``ngramspec_learned_cost``; the
    C++ LearnedCost), for an engine that sizes one sequence's drafts itself and times its own passes:
    :meth:`plan` before each pass, :meth:`observe` after it. :class:`BatchSpeculator` with
    ``cost="learn"`` does the same for a whole batch.

    `prior`: a cost spec (``"knee:N"``, ``"table:..."``, :meth:`VerifyCost.measure`'s spec), believed
    until the passes disagree with it; None: a pessimistic start. `exploration`: the most that trying
    unmeasured draft lengths may lose, as a fraction of the time served (in [0, 1]). `plain_every`: a
    plain pass at least once in this many passes of a batch size (at least 2), so that the time of a
    plain pass follows the machine. Raises ValueError naming the spec or the value."""

    _handle: int | None = None

    def __init__(self, prior: str | None = None, *, exploration: float = 0.005, plain_every: int = 128) -> None:
        if prior is not None and not isinstance(prior, str):
            raise TypeError(f"prior must be a str such as 'knee:256', or None; not {type(prior).__name__}")
        out = ctypes.c_void_p()
        status = lib.ngramspec_learned_cost_create(None if prior is None else prior.encode("utf-8"),
                                                   float(exploration), size_arg(plain_every, "plain_every"),
                                                   ctypes.byref(out))
        if status:
            raise_status(status)
        self._handle = out.value
        self._prior = prior
        self._count = ctypes.c_size_t(0)
        self._count_address = ctypes.addressof(self._count)

    def plan(self, probabilities: Any, rows: int = 1, base_tokens: int = 1, base_expected: float = 1.0) -> int:
        """How many of one sequence's candidate drafts the next pass of `rows` sequences should carry,
        against what passes of that many sequences were seen to cost: :meth:`VerifyCost.plan`'s
        arguments and result otherwise. At first, and now and then after, it answers 0 (a plain pass:
        how the time of one is learned and followed)."""
        array = _probabilities_arg(probabilities)
        status = lib.ngramspec_learned_cost_plan(self._checked(), size_arg(rows, "rows"),
                                                 size_arg(base_tokens, "base_tokens"), float(base_expected),
                                                 array.ctypes.data, array.shape[0], self._count_address)
        if status:
            raise_status(status)
        return self._count.value

    def observe(self, rows: int, tokens: int, seconds: float) -> None:
        """One pass served: `rows` sequences, `tokens` tokens in all (at least one a sequence), in
        `seconds`. ValueError naming the value, nothing learned, when rows is 0, tokens is below rows or
        seconds is not finite and positive."""
        status = lib.ngramspec_learned_cost_observe(self._checked(), size_arg(rows, "rows"),
                                                    size_arg(tokens, "tokens"), float(seconds))
        if status:
            raise_status(status)

    def describe(self) -> str:
        """One line per batch size served: passes, plain-pass time, shape-change price, whether the
        prior is trusted, the ratios measured ("" before any pass)."""
        return read_text(lib.ngramspec_learned_cost_describe, self._checked())

    @property
    def stats(self) -> LearnedCostStats:
        """What it observed: passes, seconds, plain passes, exploration."""
        return learned_stats(lib.ngramspec_learned_cost_stats_get, self._checked())

    @property
    def prior(self) -> str | None:
        """The prior's spec as given, or None."""
        return self._prior

    def _checked(self) -> int:
        if self._handle is None:
            raise ValueError("this LearnedCost is closed")
        return self._handle

    def close(self) -> None:
        """Frees the native cost now (also done when the object is collected); later calls raise ValueError."""
        handle, self._handle = self._handle, None
        if handle is not None:
            lib.ngramspec_learned_cost_free(handle)

    def __repr__(self) -> str:
        if self._handle is None:
            return "<ngramspec.LearnedCost closed>"
        return f"<ngramspec.LearnedCost prior={self._prior!r}, {self.stats.passes} passes>"


def _probabilities_arg(probabilities: Any) -> Any:
    """A writable C-contiguous one-dimensional float32 array: `probabilities` itself when it is one."""
    array = probabilities
    if not (isinstance(array, np.ndarray) and array.dtype == np.float32 and array.flags.c_contiguous
            and array.flags.writeable and array.ndim == 1):
        array = np.array(probabilities, dtype=np.float32)
        if array.ndim != 1:
            raise ValueError(f"probabilities must be one-dimensional (one sequence's candidates); it has shape "
                             f"{array.shape}")
    return array
