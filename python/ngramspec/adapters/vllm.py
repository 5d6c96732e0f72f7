"""ngramspec drafts for vLLM's speculative decoding: a proposer for ``method="custom_class"``.

vLLM's engine verifies drafts itself (rejection sampling on the GPU) and asks its proposer only for
the next drafts of every running request. With ``method="custom_class"`` it loads the proposer
class named by ``speculative_config.model``::

    from vllm import LLM
    llm = LLM(model="meta-llama/Llama-3.1-8B-Instruct",
              speculative_config={"method": "custom_class",
                                  "model": "ngramspec.adapters.vllm.NgramspecProposer",
                                  "num_speculative_tokens": 4})

The interface followed: vLLM ``main`` at commit f7490e78408ff2ca158d93d61c012ba5bd2c1f54 of
``vllm/v1/spec_decode/custom_class_proposer.py`` (no vLLM code is used or copied here), from these
files of https://github.com/vllm-project/vllm:

- ``vllm/v1/spec_decode/custom_class_proposer.py`` (commit f7490e78408ff2ca158d93d61c012ba5bd2c1f54):
  ``create_custom_proposer(vllm_config)`` imports the class at the dotted path
  ``speculative_config.model``, constructs it with the ``VllmConfig`` alone, requires a callable
  ``propose`` and returns the instance itself, which the model runner calls directly. Another form
  of the file (commit 71f7afb3f9fc8525ae50e0b9ea2d2072faba49a7) wraps the class in a
  ``CustomClassProposer`` that reads the path from ``speculative_config.custom_proposer_backend``,
  calls ``propose`` by keyword (``sampled_token_ids=``, ``num_tokens_no_spec=``,
  ``token_ids_cpu=`` as a torch tensor, ``slot_mappings=``) and forwards ``load_model``; this
  class answers both (its parameters have those names, and a tensor is read through ``.numpy()``).
- ``vllm/config/speculative.py`` (commit 002e77c1f0ef9b19cff8b9e21cfbd6feb3d6b443): ``"custom_class"``
  is one of the ``SpeculativeMethod`` values; it needs ``model`` to be that dotted path (a dotted
  ``model`` without ``method`` selects it too) and loads no draft model.
- ``vllm/v1/worker/gpu_model_runner.py`` (commit 000fc94b754f66aeb60ef5acf1ea2e94cdc65164),
  ``GPUModelRunner.propose_draft_token_ids``: after each step's bookkeeping it calls
  ``drafter.propose(sampled_token_ids, input_batch.num_tokens_no_spec, input_batch.token_ids_cpu,
  slot_mappings=...)`` and uses the returned ``list[list[int]]`` as the drafts of the batch's rows,
  in row order; ``load_model`` is called at start-up when the proposer has one.
- ``vllm/v1/worker/gpu_input_batch.py`` (``InputBatch``, read at commit
  000794d26b9092663ad2c6a9e95bf8bd846a5f68) and the runner's bookkeeping: ``token_ids_cpu`` is an int32 NumPy array
  of ``max_num_reqs x max_model_len``, one row per running request, and ``num_tokens_no_spec`` an
  int32 array of ``max_num_reqs``: how many tokens of each row are the request's (prompt and output
  so far). ``sampled_token_ids[i]`` holds the tokens row i gained this step (accepted drafts and the
  bonus token), already written into its row; it is empty for a row that sampled nothing (a chunk
  of a prefill, a discarded request). Rows are reused: a request that finishes or is preempted
  frees its row (``remove_request``, which does not clear it), a new or resumed request takes a
  free row (``add_request`` writes its tokens from position 0), and ``condense`` moves requests
  from the end into holes. The runner passes no request ids.

So this proposer recognizes requests by their rows' contents. It keeps, per request, a
:class:`ngramspec.MatchDrafter` and what it has read of its row: the count and a fingerprint (the
first tokens, tokens spread over the prefix, the last tokens read). Each call, a row whose
fingerprint still matches and whose count did not shrink is the same request: the drafter reads the
tokens added since. A row that does not match is looked up among the other requests (one that
``condense`` moved, or one back after being preempted or left unscheduled); failing that it is a
new request, and a fresh drafter reads the whole row. A request absent for ``patience`` calls has finished: its output (the
tokens produced after it was first seen) goes into a :class:`ngramspec.SharedCorpus` that every
drafter copies from, and its drafter is reused. A fingerprint can only be fooled by a different row
that equals the old one at every position checked; then drafts are worse, never the output: vLLM
verifies every draft. A negative id in a row (the placeholder that asynchronous scheduling writes
for a token not known yet) stops the reading there until the token is filled in.

Settings are class attributes; subclass to change them (vLLM constructs the class itself)::

    class MyProposer(NgramspecProposer):       # speculative_config "model": "my_module.MyProposer"
        drafter_settings = {"index_capacity": 32768}  # MatchDrafter keywords
        corpus_bytes = 0                             # no corpus of earlier outputs
        cost = "learn:knee:256"                      # the learned cost's prior; "knee:256": that curve, fixed;
                                                     # None: no cost, each drafter's gate alone

Drafts sized by cost. By default (``cost = "learn"``) every row's drafts are sized by what a pass is
learned to cost (:class:`ngramspec.LearnedCost`), rows in turn, each priced with the drafts of the rows
before it: the model runner hands the proposer no timing, so each call times the step since the last
call (its forward, sampling and bookkeeping: what a step with those drafts cost), and leaves out a step
that began a request or carried a prefill chunk (tokens the proposer cannot count). The drafters then
do not gate (``min_confidence`` 0, unless ``drafter_settings`` sets it).

MatchDrafter copies from the first ``index_capacity`` tokens of a request (8192 by default, about
0.9 MiB a request); for longer contexts set ``drafter_settings = {"index_capacity": 32768}`` (100
bytes a token more; ``"cap"``, its former name, is still accepted).

The proposer needs no GPU and imports neither vLLM nor torch (a torch tensor handed in is read
through ``.numpy()``). One thread calls it, as the model runner does. A call's work grows with the
rows it proposes for, and a new request's with the row its drafter reads first (its drafter's first
allocation included).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Mapping, Sequence

import numpy as np

from .._arrays import whole_arg
from .._corpus import SharedCorpus
from .._drafters import MatchDrafter
from .._planner import LearnedCost, VerifyCost

__all__ = ["NgramspecProposer", "ProposerStats"]


@dataclasses.dataclass
class ProposerStats:
    """What a :class:`NgramspecProposer` has done since it was made."""

    calls: int = 0  #: propose calls
    begun: int = 0  #: requests recognized as new (a fresh drafter read the whole row)
    moved: int = 0  #: requests found in another row than before (condense, swaps)
    retired: int = 0  #: requests considered finished (absent for `patience` calls)
    corpus_records: int = 0  #: outputs appended to the corpus
    drafted: int = 0  #: draft tokens returned
    withheld: int = 0  #: draft tokens the drafters proposed that the cost found not worth their pass
    timed: int = 0  #: steps the learned cost observed


class _Request:
    """One request's drafter and what it has read of its row (the fingerprint as bytes: comparing
    bytes is what keeps a call at a few microseconds a row)."""

    __slots__ = ("drafter", "seen", "head", "marks", "marked", "tail", "output", "absent")

    def __init__(self, drafter: MatchDrafter) -> None:
        self.drafter = drafter
        self.seen = 0  # tokens of the row the drafter has read
        self.head = b""  # the row's first tokens
        self.marks: np.ndarray | None = None  # positions spread over the prefix read when begun
        self.marked = b""  # the tokens there
        self.tail = b""  # the last tokens read, row[seen - f:seen]
        self.output: list[int] = []  # tokens the request produced since it was begun, for the corpus
        self.absent = 0  # consecutive calls without its row


class NgramspecProposer:
    """Drafts for vLLM (``method="custom_class"``) from one :class:`ngramspec.MatchDrafter` per request,
    with a :class:`ngramspec.SharedCorpus` of finished requests' outputs (see the module's docstring).

    ``propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None)`` returns
    one list of draft tokens per row of ``sampled_token_ids``: up to ``num_speculative_tokens``, none
    for a row that sampled nothing this step or has reached ``max_model_len``.
    """

    #: MatchDrafter keyword settings (index_capacity, copy_min_match, count_max_order, count_window,
    #: min_confidence; cap, the former name of index_capacity, still accepted); those left out take
    #: MatchDrafter's defaults.
    drafter_settings: Mapping[str, Any] = {}
    #: Bytes of the corpus of finished requests' outputs; 0: no corpus.
    corpus_bytes: int = 64 << 20
    #: Output tokens of a request kept for the corpus.
    max_record_tokens: int = 8192
    #: Calls a request may be absent (unscheduled, preempted) before it counts as finished.
    patience: int = 4
    #: Tokens compared at the head and at the tail of a row, and positions sampled in between.
    fingerprint_tokens: int = 8
    #: What a verify pass costs, which sizes every row's drafts (the drafters then do not gate, unless
    #: drafter_settings sets min_confidence): ``"learn"`` (the default), learned from the steps served,
    #: each timed from the end of one propose call to the start of the next (the engine's step: its
    #: forward, sampling and bookkeeping; a step that also prefilled, or began a request, is not
    #: timed); ``"learn:SPEC"``, learned with the curve SPEC as prior; a fixed curve, ``"knee:N"`` or
    #: ``"table:..."``; None: no cost, each drafter's gate alone sizes its drafts.
    cost: str | None = "learn"

    def __init__(self, vllm_config: Any = None, *, num_speculative_tokens: int | None = None,
                 max_model_len: int | None = None, max_num_seqs: int | None = None) -> None:
        """Reads ``speculative_config.num_speculative_tokens``, ``model_config.max_model_len`` and
        ``scheduler_config.max_num_seqs`` from vLLM's ``VllmConfig``; the keywords override them (or
        stand in for a config, outside vLLM)."""
        spec = getattr(vllm_config, "speculative_config", None)
        model = getattr(vllm_config, "model_config", None)
        scheduler = getattr(vllm_config, "scheduler_config", None)
        k = num_speculative_tokens if num_speculative_tokens is not None else getattr(spec, "num_speculative_tokens", None)
        length = max_model_len if max_model_len is not None else getattr(model, "max_model_len", None)
        if k is None or whole_arg(k, "num_speculative_tokens") < 1:
            raise ValueError(f"NgramspecProposer needs num_speculative_tokens >= 1 (speculative_config); got {k!r}")
        self.k = whole_arg(k, "num_speculative_tokens")
        self.max_model_len = whole_arg(length, "max_model_len") if length is not None else None
        seqs = max_num_seqs if max_num_seqs is not None else getattr(scheduler, "max_num_seqs", None)
        self.max_num_seqs = whole_arg(seqs, "max_num_seqs") if seqs is not None else 256
        self.corpus = SharedCorpus(self.corpus_bytes) if self.corpus_bytes > 0 else None
        self.stats = ProposerStats()
        self._rows: dict[int, _Request] = {}  # row -> the request that held it at the last call
        self._absent: list[_Request] = []  # requests not seen at the last call, oldest first
        self._free: list[MatchDrafter] = []  # drafters of retired requests, reset, for reuse
        self._out = np.empty(self.k, np.uint32)
        self._probabilities = np.empty(self.k, np.float32)
        self._cost: LearnedCost | VerifyCost | None = None
        if self.cost is not None:
            if not isinstance(self.cost, str):
                raise TypeError(f"NgramspecProposer.cost must be a str such as 'learn' or 'knee:64', or None; not "
                                f"{type(self.cost).__name__}")
            if self.cost == "learn":
                self._cost = LearnedCost()
            elif self.cost.startswith("learn:"):
                self._cost = LearnedCost(self.cost[len("learn:"):])
            else:
                self._cost = VerifyCost(self.cost)
        self._settings = dict(self.drafter_settings)
        if self._cost is not None:
            self._settings.setdefault("min_confidence", 0.0)  # the cost decides, not the gate
        self._pass: tuple[int, int, float] | None = None  # the last call's rows, tokens and end, for timing

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to load (the model runner calls this at start-up)."""

    # ---- The call vLLM makes every step -------------------------------------------------------

    def propose(self, sampled_token_ids: Sequence[Sequence[int]], num_tokens_no_spec: Any, token_ids_cpu: Any,
                slot_mappings: Any = None, **kwargs: Any) -> list[list[int]]:
        """Drafts for every row: ``sampled_token_ids[i]`` are the tokens row i gained this step
        (already in ``token_ids_cpu[i]``), ``num_tokens_no_spec[i]`` how many tokens the row holds."""
        began = time.perf_counter()
        tokens = _numpy(token_ids_cpu)
        counts = _numpy(num_tokens_no_spec)
        self.stats.calls += 1
        rows = len(sampled_token_ids)
        timed, self._pass = self._pass, None
        begun = self.stats.begun
        previous, self._rows = self._rows, {}
        unmatched: list[int] = []
        for row in range(rows):
            if not len(sampled_token_ids[row]):
                timed = None  # a prefill chunk, or a discarded request, was in the step: not a pass to learn from
                continue  # nothing sampled: it drafts nothing
            request = previous.get(row)
            if request is not None and self._matches(request, tokens[row], int(counts[row])):
                del previous[row]
                self._rows[row] = request
            else:
                unmatched.append(row)
        # Rows that changed hands: a request moved here (condense), one back after being absent
        # (preempted, unscheduled), or a new one. A request read its row up to `seen`; here that
        # is n minus what the row sampled this step, so the requests are indexed by where their
        # reading stopped and the tokens just before: one lookup a row.
        candidates = list(previous.values()) + self._absent
        index: dict[tuple[int, bytes], list[_Request]] = {}
        for request in candidates:
            index.setdefault((request.seen, request.tail), []).append(request)
        taken: set[int] = set()
        for row in unmatched:
            n, row_tokens = int(counts[row]), tokens[row]
            before = n - len(sampled_token_ids[row])
            key = (before, row_tokens[max(0, before - self.fingerprint_tokens):max(before, 0)].tobytes())
            found = next((r for r in index.get(key, ()) if id(r) not in taken and self._matches(r, row_tokens, n)),
                         None)
            if found is None:  # absent longer, or stopped reading earlier (a placeholder): look through them
                found = next((r for r in self._absent if id(r) not in taken and self._matches(r, row_tokens, n)),
                             None)
            if found is not None:
                taken.add(id(found))
                self.stats.moved += 1
            else:
                found = self._begin(row_tokens, n, len(sampled_token_ids[row]))
            self._rows[row] = found
        self._age([r for r in candidates if id(r) not in taken])

        cost = self._cost
        if isinstance(cost, LearnedCost) and timed is not None and self.stats.begun == begun:
            # The step since the last call verified its drafts: a pass of `timed` rows and tokens (a step
            # that began a request also ran its prefill, which is not in the count: left out).
            cost.observe(timed[0], timed[1], max(began - timed[2], 1e-9))
            self.stats.timed += 1
        drafts: list[list[int]] = [[] for _ in range(rows)]
        passing = len(self._rows)  # the rows the next step verifies, one token each before the drafts
        sent, expected = 0, float(passing)
        for row, request in self._rows.items():
            n = int(counts[row])
            self._read(request, tokens[row], n)
            limit = self.k if self.max_model_len is None else min(self.k, self.max_model_len - n)
            if limit > 0 and request.seen == n:
                drafted = request.drafter.predict_into(self._out[:limit], self._probabilities[:limit])
                if cost is not None and drafted:
                    # Each row in turn, the pass priced with the drafts of the rows before it.
                    probabilities = self._probabilities[:drafted]
                    if isinstance(cost, LearnedCost):
                        keep = cost.plan(probabilities, passing, passing + sent, expected)
                    else:
                        keep = cost.plan(probabilities, passing + sent, expected)
                    self.stats.withheld += drafted - keep
                    expected += float(probabilities[:keep].sum())
                    drafted = keep
                drafts[row] = self._out[:drafted].tolist()
                self.stats.drafted += drafted
                sent += drafted
        if passing:
            self._pass = (passing, passing + sent, time.perf_counter())
        return drafts

    # ---- Requests -------------------------------------------------------------------------------

    def _matches(self, request: _Request, row: np.ndarray, n: int) -> bool:
        """Whether `row` (n tokens) still holds what `request` read: never fewer tokens, the same tokens
        at the end of what was read, the same first tokens and the same at the marked positions."""
        seen = request.seen
        if n < seen or row[seen - len(request.tail) // row.itemsize:seen].tobytes() != request.tail:
            return False
        if row[:len(request.head) // row.itemsize].tobytes() != request.head:
            return False
        return request.marks is None or row[request.marks].tobytes() == request.marked

    def _begin(self, row: np.ndarray, n: int, sampled: int) -> _Request:
        """A new request in `row`: a fresh drafter reads its n tokens; the last `sampled` are output."""
        self.stats.begun += 1
        drafter = self._free.pop() if self._free else MatchDrafter(corpus=self.corpus, **self._settings)
        request = _Request(drafter)
        f = self.fingerprint_tokens
        prompt = max(0, n - sampled)
        request.head = row[:min(f, n)].tobytes()
        if prompt > 2 * f:  # a long prompt: also tokens spread over it
            request.marks = np.linspace(f, prompt - f - 1, num=f, dtype=np.intp)
            request.marked = row[request.marks].tobytes()
        self._read(request, row, prompt)  # the prompt (or, resumed, everything before this step)
        return request

    def _read(self, request: _Request, row: np.ndarray, n: int) -> None:
        """Feeds the drafter row[seen:n], stopping before a negative id (a placeholder the runner fills
        in later)."""
        seen = request.seen
        if n <= seen:
            return
        new = row[seen:n]
        tokens = new.tolist()
        if min(tokens) < 0:
            stop = next(i for i, t in enumerate(tokens) if t < 0)
            new, tokens = new[:stop], tokens[:stop]
            if not tokens:
                return
        request.drafter.update(new)
        request.seen = seen + len(tokens)
        request.tail = row[max(0, request.seen - self.fingerprint_tokens):request.seen].tobytes()
        if seen > 0 or request.output:  # tokens after the first read are the request's output
            room = self.max_record_tokens - len(request.output)
            if room > 0:
                request.output.extend(tokens[:room])

    def _age(self, absent: list[_Request]) -> None:
        """Requests without a row this call: kept `patience` calls in case they come back (preempted,
        unscheduled), then retired: output to the corpus, drafter back to the free list."""
        kept = []
        for request in absent:
            request.absent += 1
            if request.absent > self.patience:
                self._retire(request)
            else:
                kept.append(request)
        # At most max_num_seqs waiting: the oldest go first.
        while len(kept) > self.max_num_seqs:
            self._retire(kept.pop(0))
        self._absent = kept

    def _retire(self, request: _Request) -> None:
        self.stats.retired += 1
        if self.corpus is not None and request.output:
            self.corpus.append(np.asarray(request.output, np.uint32))
            self.stats.corpus_records += 1
        request.drafter.reset()
        self._free.append(request.drafter)

    def close(self) -> None:
        """Retires every request now (their outputs go to the corpus) and frees the drafters."""
        for request in list(self._rows.values()) + self._absent:
            self._retire(request)
        self._rows, self._absent = {}, []
        for drafter in self._free:
            drafter.close()
        self._free = []


def _numpy(array: Any) -> np.ndarray:
    """A NumPy view of vLLM's arrays (NumPy already; a CPU torch tensor is viewed through .numpy())."""
    if isinstance(array, np.ndarray):
        return array
    if hasattr(array, "numpy"):
        return array.numpy()
    return np.asarray(array)
