"""ngramspec drafts for Hugging Face transformers' assisted generation.

transformers verifies candidate tokens in ``GenerationMixin._assisted_decoding``: each step it asks
a candidate generator for ``candidate_input_ids, candidate_logits = get_candidates(input_ids)``
(``input_ids`` of shape ``(1, length)``; the candidates are ``input_ids`` with the drafts appended,
or ``input_ids`` itself when there are none), runs the model once over the candidates, keeps the
drafts that match the model's choices plus the model's next token, and then calls
``update_candidate_strategy(input_ids, scores, num_matches)`` with the extended ``input_ids``.
:class:`NgramspecCandidateGenerator` has that shape (it is ``PromptLookupCandidateGenerator``'s
role, with ngramspec's :class:`~ngramspec.MatchDrafter` in place of the scan of the prompt) and
returns no candidate logits, as prompt lookup does: greedy decoding keeps its output exactly, and
sampling compares the tokens it samples at every position with the drafts (a draft is accepted with
the model's probability of it, so far fewer are than under greedy decoding).

transformers has no public argument for a custom candidate generator; :func:`use_ngramspec`
replaces the private ``_get_candidate_generator`` of one model instance, and
``prompt_lookup_num_tokens`` (the most drafts a step) selects assisted generation::

    from ngramspec.adapters.hf import use_ngramspec
    use_ngramspec(model)                      # this model's assisted generation drafts with ngramspec
    out = model.generate(**inputs, prompt_lookup_num_tokens=10, max_new_tokens=256, do_sample=False)

Drafts sized by cost. A draft is worth sending only when the tokens it is expected to add are worth
what it adds to the verify pass. By default (``cost="measure"``) the first generate call times this
model's forward on its device (passes of 1 up to ``prompt_lookup_num_tokens + 1`` tokens after the
prompt, the KV cache cropped back after each) and every step then sends the number of the drafter's
candidates that maximizes expected tokens per unit of pass cost (:meth:`ngramspec.VerifyCost.plan`,
the planner BatchSpeculator uses), none when no draft is worth its cost. That curve is the prior of
a cost learned from the passes served (:class:`ngramspec.LearnedCost`: each step is timed from
``get_candidates`` to ``update_candidate_strategy``, the forward between them), kept across generate
calls, so that a machine that gets busy, or a device whose wider passes cost more than the start-up
timing said, is followed; ``fixed_cost=True`` plans against the curve as it is. The drafter's estimates are
calibrated by what the model accepts (:class:`AcceptanceCalibration`, one per decoding setting of
the model: greedy, and each sampling temperature / top-k / top-p), so under sampling, where far
fewer drafts are accepted than the estimates say, the planner learns to send fewer, or none.

The interface followed (no transformers code is used or copied here), from
https://github.com/huggingface/transformers:

- transformers 4.4x-4.5x, ``src/transformers/generation/utils.py`` (commit
  000034a44ef887621d9b36001a5eb7c46e64cb3f): ``_assisted_decoding`` (batch size 1 only) gets its
  generator from ``self._get_candidate_generator(generation_config=..., input_ids=...,
  inputs_tensor=..., assistant_model=..., logits_processor=..., target_tokenizer=...,
  assistant_tokenizer=..., model_kwargs=...)``; each step calls ``get_candidates(input_ids)``,
  checks the stopping criteria on the candidates, runs the model over them, takes the argmax (or,
  sampling, a multinomial sample) at the last ``candidate_length + 1`` positions, counts the
  leading matches (one fewer when the candidates already stop and all match), appends the matches
  and the next token, crops the cache and calls ``update_candidate_strategy(input_ids, new_logits,
  n_matches)`` (``n_matches`` a 0-d tensor). ``prompt_lookup_num_tokens`` makes
  ``_get_candidate_generator`` build a ``PromptLookupCandidateGenerator`` with
  ``num_output_tokens=prompt_lookup_num_tokens`` and ``max_length=generation_config.max_length``.
- transformers 5.x, ``src/transformers/generation/candidate_generator.py`` (commit
  00a11b6a0745b442473aef0221e098d022b8158c): ``CandidateGenerator`` declares the class attribute
  ``requires_model_outputs`` (False), which ``_assisted_decoding`` reads from the generator it gets;
  generators that set it True also declare ``model_kwargs_overrides`` (keyword arguments for the
  model's forward) and take the model's outputs in ``get_candidates(input_ids, **kwargs)``. This
  generator needs no model outputs: ``requires_model_outputs = False``. ``PromptLookupCandidateGenerator``
  (``eos_token_id``, ``num_output_tokens``, ``max_length``): no candidates when
  ``max_length == length + 1``, candidates cut at the first EOS, ``(input_ids, None)`` when none.

Both methods take (and ignore) keyword arguments beyond those, as the base class's ``get_candidates``
does. Importing this module imports neither transformers nor torch: tensors are handled through
their own methods, and NumPy arrays work the same way (what the tests without torch use); measuring a
model's cost imports both.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

import numpy as np

from .._arrays import whole_arg
from .._corpus import SharedCorpus
from .._drafters import MatchDrafter
from .._planner import LearnedCost, VerifyCost

__all__ = ["NgramspecCandidateGenerator", "AcceptanceCalibration", "use_ngramspec", "measure_model_cost"]

_MAX_DRAFTS = 1024  # the most drafts a step, as for a BatchSpeculator sequence (its max_drafts)


class AcceptanceCalibration:
    """What the model accepts against what the drafter estimated: the factor by which
    :class:`NgramspecCandidateGenerator` scales the drafter's estimates before the planner sees them.

    The drafter estimates P[j], the chance that drafts 0..j are all accepted, so P[j] / P[j - 1] is
    its chance that draft j is accepted once the drafts before it were. Every draft the model tested
    (those accepted and the first rejected) adds that conditional estimate to `estimated` and its
    outcome (1 or 0) to `hits`; the factor is ``(hits + prior) / (estimated + prior)``, one for all
    positions (sampling lowers every draft's chance alike: a draft is accepted with the model's
    probability of it), and the calibrated P[j] is the product over i <= j of
    ``min(1, factor * P[i] / P[i - 1])``. Old steps fade by `memory` a step (0 < memory <= 1; 1: never);
    `prior` (> 0) is the weight of the starting belief that the estimates are right (factor 1).
    Under greedy decoding with a good drafter the factor stays near 1; under sampling it falls to
    about the model's probability of a drafted token, so the planner sends fewer drafts, or none.
    While fewer than `probes` drafts have been tested (faded alike), a step whose plan sends none
    sends its first candidate anyway (:attr:`probing`): a few unlucky steps at the start must not
    stop the learning for good. Defaults: prior 0.5, memory 0.99, probes 8."""

    def __init__(self, *, prior: float = 0.5, memory: float = 0.99, probes: int = 8) -> None:
        if not (np.isfinite(prior) and prior > 0):
            raise ValueError(f"prior must be finite and positive, got {prior}")
        if not (0 < memory <= 1):
            raise ValueError(f"memory must be in (0, 1], got {memory}")
        probes = whole_arg(probes, "probes")
        if probes < 0:
            raise ValueError(f"probes must be at least 0, got {probes}")
        self.prior = float(prior)
        self.memory = float(memory)
        self.probes = probes
        self.tested = 0.0  #: drafts the model tested, faded
        self.estimated = 0.0  #: the drafter's conditional estimates of the drafts tested, faded
        self.hits = 0.0  #: the drafts accepted among them, faded
        self.steps = 0  #: steps observed (those that sent drafts)

    @property
    def probing(self) -> bool:
        """Whether fewer than `probes` drafts have been tested: a step that would send none sends one."""
        return self.tested < self.probes

    @property
    def factor(self) -> float:
        """(hits + prior) / (estimated + prior): 1 before any step."""
        return (self.hits + self.prior) / (self.estimated + self.prior)

    def calibrate(self, estimates: np.ndarray, out: np.ndarray) -> None:
        """Writes to `out` (float32, as long as `estimates`) the calibrated chances that drafts 0..j are
        all accepted, from the drafter's `estimates` of them."""
        conditional = _conditional(estimates)
        np.multiply(conditional, self.factor, out=conditional)
        np.minimum(conditional, 1.0, out=conditional)
        np.cumprod(conditional, out=out)

    def observe(self, estimates: np.ndarray, accepted: int) -> None:
        """One step: drafts with the drafter's `estimates` were sent (one per draft, in order) and the
        model accepted the first `accepted` of them (and tested the one after, when there is one)."""
        n = len(estimates)
        if n == 0:
            return
        accepted = max(0, min(int(accepted), n))
        tested = min(accepted + 1, n)
        self.tested = self.memory * self.tested + tested
        self.estimated = self.memory * self.estimated + float(_conditional(estimates[:tested]).sum())
        self.hits = self.memory * self.hits + accepted
        self.steps += 1


def _conditional(estimates: np.ndarray) -> np.ndarray:
    """P[j] / P[j - 1] (P[-1] = 1; 0 where P[j - 1] is 0) of chances P that drafts 0..j are all accepted."""
    p = np.clip(np.nan_to_num(np.asarray(estimates, np.float64)), 0.0, 1.0)
    previous = np.concatenate(([1.0], p[:-1]))
    return np.divide(p, previous, out=np.zeros_like(p), where=previous > 0)


class NgramspecCandidateGenerator:
    """A transformers candidate generator (``get_candidates`` / ``update_candidate_strategy``) that
    drafts with a :class:`ngramspec.MatchDrafter` over the sequence being generated (and `corpus`).

    `num_output_tokens`: the most drafts a step (1..1024); `max_length`: the generation's max_length
    (prompt included), past which nothing is drafted; `eos_token_id`: an id or ids (int, list, tensor)
    at which the drafts stop; `corpus`: a :class:`ngramspec.SharedCorpus` the drafter copies from;
    `drafter`: MatchDrafter keyword settings (None: MatchDrafter's defaults, without its gate when
    there is a cost: the planner decides instead). `cost`: the model's verify cost (a
    :class:`ngramspec.VerifyCost` or its spec, a fixed curve; or a :class:`ngramspec.LearnedCost`, or
    ``"learn"`` / ``"learn:SPEC"`` for a new one, learned from the passes this generator serves, each
    timed from get_candidates to update_candidate_strategy, the prefill's first pass left out); each
    step then sends the number of candidates that maximizes expected tokens per unit of pass cost,
    from the drafter's estimates scaled by `calibration` (an :class:`AcceptanceCalibration`; None: one
    of its own). None (the default): every candidate the drafter proposes, up to num_output_tokens.

    The drafter follows ``input_ids``: each call it reads the tokens added since the last one. When
    ``input_ids`` no longer extends what it read (a new generation), it starts over.
    """

    #: transformers 5 reads it from every candidate generator: this one needs none of the model's outputs.
    requires_model_outputs: bool = False

    def __init__(self, input_ids: Any = None, *, num_output_tokens: int = 10, max_length: int | None = None,
                 eos_token_id: Any = None, corpus: SharedCorpus | None = None,
                 drafter: Mapping[str, Any] | None = None, cost: VerifyCost | LearnedCost | str | None = None,
                 calibration: AcceptanceCalibration | None = None) -> None:
        num_output_tokens = whole_arg(num_output_tokens, "num_output_tokens")
        if not 1 <= num_output_tokens <= _MAX_DRAFTS:
            raise ValueError(f"num_output_tokens must be in 1..{_MAX_DRAFTS}, got {num_output_tokens}")
        self.num_output_tokens = num_output_tokens
        self.max_length = None if max_length is None else whole_arg(max_length, "max_length")
        self.eos_token_ids = frozenset(_ints(eos_token_id))
        self.cost = _cost_arg(cost)
        settings = dict(drafter or {})
        if drafter is None and self.cost is not None:
            settings["min_confidence"] = 0.0
        self.drafter = MatchDrafter(corpus=corpus, **settings)
        self.calibration = calibration if calibration is not None else AcceptanceCalibration()
        self._seen = 0  # tokens of the sequence the drafter has read
        self._head = np.empty(0, np.int64)  # the first of them
        self._tail = np.empty(0, np.int64)  # the last of them
        self._out = np.empty(self.num_output_tokens, np.uint32)
        self._estimates = np.empty(self.num_output_tokens, np.float32)  # the drafter's, for calibration
        self._planned = np.empty(self.num_output_tokens, np.float32)  # calibrated, for the planner
        self._sent = 0  # drafts the last get_candidates sent
        self.calls = 0  #: get_candidates calls
        self.resets = 0  #: times the drafter started over (a sequence that did not extend the last)
        self.drafted = 0  #: draft tokens returned
        self.withheld = 0  #: candidates the planner did not send (not worth their cost)
        self.accepted = 0  #: drafts accepted, from update_candidate_strategy's num_matches
        self._pass_tokens = 0  # the tokens of the pass get_candidates handed out (0: none to time)
        self._pass_start = 0.0
        if input_ids is not None:
            self._follow(input_ids)

    def get_candidates(self, input_ids: Any, **kwargs: Any) -> tuple[Any, None]:
        """``(input_ids with the drafts appended, None)``, or ``(input_ids, None)`` when there are none.
        `input_ids`: shape (1, length), a torch tensor or a NumPy array; the result is of the same kind,
        dtype and device. Other keyword arguments (model outputs) are not used."""
        self.calls += 1
        self._sent = 0
        self._pass_tokens = 0
        candidates = self._candidates(input_ids)
        if isinstance(self.cost, LearnedCost) and self.calls > 1:  # the first pass is the prefill's: not timed
            self._pass_tokens = 1 + self._sent
            self._pass_start = time.perf_counter()
        return candidates

    def _candidates(self, input_ids: Any) -> tuple[Any, None]:
        length = self._follow(input_ids)
        room = self.num_output_tokens
        if self.max_length is not None:  # the model adds one token after the candidates
            room = min(room, self.max_length - length - 1)
        if room <= 0:
            return input_ids, None
        n = self.drafter.predict_into(self._out[:room], self._estimates[:room])
        if self.cost is not None and n:
            planned = self._planned[:n]
            self.calibration.calibrate(self._estimates[:n], planned)
            sent = self.cost.plan(planned)
            if sent == 0 and self.calibration.probing:
                sent = 1
            self.withheld += n - sent
            n = sent
        drafts = self._out[:n].tolist()
        for i, token in enumerate(drafts):  # past an EOS the model could "accept" what follows it
            if token in self.eos_token_ids:
                drafts = drafts[:i]
                break
        if not drafts:
            return input_ids, None
        self._sent = len(drafts)
        self.drafted += len(drafts)
        return _append(input_ids, drafts), None

    def update_candidate_strategy(self, input_ids: Any, scores: Any, num_matches: Any, **kwargs: Any) -> None:
        """Counts the accepted drafts and calibrates the estimates with them; the drafter reads the new
        tokens at the next get_candidates."""
        matches = whole_arg(num_matches, "update_candidate_strategy: num_matches")
        if not 0 <= matches <= self._sent:
            # The model accepts a prefix of the drafts the last get_candidates sent: more, or fewer than none,
            # would count drafts that were never sent and calibrate on them.
            raise ValueError(f"update_candidate_strategy: num_matches = {matches} is invalid: it must be from 0 to "
                             f"the {self._sent} drafts the last get_candidates sent")
        self.accepted += matches
        self.calibration.observe(self._estimates[:self._sent], matches)
        self._sent = 0
        if self._pass_tokens and isinstance(self.cost, LearnedCost):  # the pass's time, for the learned cost
            self.cost.observe(1, self._pass_tokens, max(time.perf_counter() - self._pass_start, 1e-9))
        self._pass_tokens = 0

    def _follow(self, input_ids: Any) -> int:
        """Makes the drafter have read exactly the sequence of `input_ids`: the tokens added since the last
        call when it extends what was read (its first and last tokens read are where they were), else
        all of it after a reset. Copies only those tokens off the device. Returns the sequence's length."""
        length = _length(input_ids)
        seen, f = self._seen, _FINGERPRINT
        if 0 < seen <= length:
            recent = _tokens(input_ids, max(0, seen - f), length)
            if (np.array_equal(recent[:min(f, seen)], self._tail)
                    and np.array_equal(_tokens(input_ids, 0, len(self._head)), self._head)):
                self._take(recent[min(f, seen):], length)
                return length
        self.drafter.reset()
        self.resets += 1
        everything = _tokens(input_ids, 0, length)
        self._seen, self._head, self._tail = 0, everything[:f].copy(), everything[:0]
        self._take(everything, length)
        return length

    def _take(self, new: np.ndarray, length: int) -> None:
        """The drafter reads `new`, the tokens up to `length`."""
        if len(new):
            self.drafter.update(new)
            self._tail = np.concatenate([self._tail, new])[-_FINGERPRINT:]
        self._seen = length


def measure_model_cost(model: Any, input_ids: Any, max_tokens: int, repeats: int = 5) -> VerifyCost:
    """The verify cost of `model` (a transformers causal LM) on its device: times its forward of n
    tokens after `input_ids` (shape (1, length), on the model's device), n from 1 to `max_tokens`
    (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, ... and `max_tokens`), through a ``DynamicCache``
    cropped back to the context after each pass, synchronizing a CUDA device; see
    :meth:`ngramspec.VerifyCost.measure`. Imports torch and transformers."""
    import torch
    from transformers import DynamicCache

    if whole_arg(max_tokens, "max_tokens") < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    counts = sorted({n for n in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
                     if n < max_tokens} | {int(max_tokens)})
    context = input_ids.shape[1]
    last = input_ids[:, -1:]
    synchronize = torch.cuda.synchronize if input_ids.is_cuda else (lambda: None)
    with torch.no_grad():
        cache = DynamicCache()
        model(input_ids=input_ids, past_key_values=cache, use_cache=True)

        def run_pass(n: int) -> None:
            model(input_ids=last.expand(1, n).contiguous(), past_key_values=cache, use_cache=True,
                  cache_position=torch.arange(context, context + n, device=input_ids.device))
            cache.crop(context)
            synchronize()

        return VerifyCost.measure(run_pass, counts, repeats)


def use_ngramspec(model: Any, *, corpus: SharedCorpus | None = None, drafter: Mapping[str, Any] | None = None,
                  max_drafts: int = 10, cost: VerifyCost | LearnedCost | str | None = "measure",
                  fixed_cost: bool = False, measure: Callable[[Any, Any, int], VerifyCost] | None = None) -> Any:
    """Makes `model`'s assisted generation draft with :class:`NgramspecCandidateGenerator`: replaces the
    model instance's ``_get_candidate_generator`` (transformers' private hook) with one that builds an
    ngramspec generator for each generate call, with ``prompt_lookup_num_tokens`` (else `max_drafts`)
    drafts at most and the call's max_length and EOS ids. Generate with
    ``prompt_lookup_num_tokens=K`` (which selects assisted generation; batch size 1). `corpus`: a
    :class:`ngramspec.SharedCorpus` shared by the generations (append outputs to it yourself);
    `drafter`: MatchDrafter settings.

    `cost`: ``"measure"`` (the default): at the first generate call, time this model's forward with
    `measure` (default :func:`measure_model_cost`) on passes of up to K + 1 tokens after that call's
    prompt, and size every step's drafts against that curve (measured again when a later call allows
    more drafts than were measured); a :class:`ngramspec.VerifyCost` or its spec: that curve; ``"learn"``:
    no curve (a pessimistic start); a :class:`ngramspec.LearnedCost` (``"learn:SPEC"``: a new one from
    SPEC): that one; None: every candidate the drafter proposes, up to K. The curve, measured or given,
    is the prior of a :class:`ngramspec.LearnedCost` that every generate call of this model plans with
    and learns in (each step timed from get_candidates to update_candidate_strategy; measured again:
    a new one), unless `fixed_cost` (True: every step is planned against the curve as it is).
    Acceptance is calibrated per decoding setting (``do_sample``, ``temperature``, ``top_k``,
    ``top_p``): one :class:`AcceptanceCalibration` for each, kept across generate calls. The curve
    (``"cost"``), the learned cost (``"learned"``; None with a fixed cost), the calibrations and the last
    generator made (its counters: drafted, withheld, accepted) are in ``model._ngramspec_state``.
    Returns `model`."""
    if cost is not None and not isinstance(cost, (VerifyCost, LearnedCost, str)):
        raise TypeError(f"cost must be 'measure', 'learn', a VerifyCost, a LearnedCost, a cost spec or None, not "
                        f"{type(cost).__name__}")
    state: dict[str, Any] = {"cost": None, "learned": None, "measured_tokens": 0, "calibrations": {}}
    if cost != "measure":
        given = _cost_arg(cost)
        if isinstance(given, LearnedCost):
            if fixed_cost:
                raise ValueError(f"cost = {cost!r} is learned, and fixed_cost=True plans against a fixed curve: give "
                                 f"a curve (a VerifyCost or its spec), or leave fixed_cost out")
            state["learned"] = given
        elif given is not None:
            state["cost"] = given
            if not fixed_cost:
                state["learned"] = LearnedCost(given.spec)
    measure = measure or measure_model_cost

    def _get_candidate_generator(generation_config: Any = None, input_ids: Any = None, **kwargs: Any) -> Any:
        k = getattr(generation_config, "prompt_lookup_num_tokens", None) or max_drafts
        eos = getattr(generation_config, "_eos_token_tensor", None)
        if eos is None:
            eos = getattr(generation_config, "eos_token_id", None)
        if cost == "measure" and state["measured_tokens"] < k + 1:
            state["cost"] = measure(model, input_ids, k + 1)
            state["measured_tokens"] = k + 1
            if not fixed_cost:
                state["learned"] = LearnedCost(state["cost"].spec)
        setting = tuple(getattr(generation_config, name, None) for name in ("do_sample", "temperature", "top_k",
                                                                             "top_p"))
        calibration = state["calibrations"].setdefault(setting, AcceptanceCalibration())
        state["generator"] = NgramspecCandidateGenerator(input_ids, num_output_tokens=k,
                                           max_length=getattr(generation_config, "max_length", None),
                                           eos_token_id=eos, corpus=corpus, drafter=drafter,
                                           cost=state["learned"] if state["learned"] is not None else state["cost"],
                                           calibration=calibration)
        return state["generator"]

    model._get_candidate_generator = _get_candidate_generator
    model._ngramspec_state = state
    return model


def _cost_arg(cost: VerifyCost | LearnedCost | str | None) -> VerifyCost | LearnedCost | None:
    """A cost as the generator takes it: ``"learn"`` / ``"learn:SPEC"`` a new LearnedCost, another spec a
    VerifyCost, a cost object or None as it is."""
    if not isinstance(cost, str):
        return cost
    if cost == "learn":
        return LearnedCost()
    if cost.startswith("learn:"):
        return LearnedCost(cost[len("learn:"):])
    return VerifyCost(cost)


_FINGERPRINT = 8  # tokens compared at each end of what was read, to tell a continuation from a new sequence


def _length(input_ids: Any) -> int:
    shape = tuple(input_ids.shape)
    if len(shape) != 2 or shape[0] != 1:
        raise ValueError(f"input_ids must have shape (1, length) (assisted generation runs batch size 1), "
                         f"got {shape}")
    return int(shape[1])


def _tokens(input_ids: Any, start: int, stop: int) -> np.ndarray:
    """input_ids[0, start:stop] as int64 NumPy on the CPU (only that slice leaves the device)."""
    part = input_ids[0, start:stop]
    if hasattr(part, "detach"):  # a torch tensor
        part = part.detach().cpu().numpy()
    return np.asarray(part).astype(np.int64, copy=False)


def _append(input_ids: Any, drafts: list) -> Any:
    """`input_ids` with `drafts` appended along the sequence, of the same kind, dtype and device."""
    if hasattr(input_ids, "new_tensor"):  # a torch tensor: so torch is installed
        import torch

        return torch.cat((input_ids, input_ids.new_tensor([drafts])), dim=1)
    return np.concatenate([input_ids, np.asarray([drafts], dtype=input_ids.dtype)], axis=1)


def _ints(value: Any) -> list:
    """An id, a list of ids or a tensor or array of them, as ints; None: none."""
    if value is None:
        return []
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [whole_arg(v, "eos_token_id") for v in value]
    return [whole_arg(value, "eos_token_id")]
