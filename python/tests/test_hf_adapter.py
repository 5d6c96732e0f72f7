"""ngramspec.adapters.hf, driven the way transformers' assisted generation drives a candidate generator.

Two emulations of ``GenerationMixin._assisted_decoding``, batch size 1, greedy or sampling, with a toy
model in place of a network, each reading from the candidate generator what that version reads (see
the adapter's docstring for the files and commits):

- ``assisted_decoding_v4`` (transformers 4.4x-4.5x): the generator comes from
  ``model._get_candidate_generator(generation_config=..., input_ids=..., inputs_tensor=...,
  assistant_model=..., logits_processor=..., target_tokenizer=..., assistant_tokenizer=...,
  model_kwargs=...)``; each step calls ``get_candidates(input_ids)``, checks the stopping criteria
  on the candidates, runs the model over them, takes the argmax (sampling: one multinomial sample
  per position) of the last ``candidate_length + 1`` positions, counts the leading matches (one
  fewer when the candidates already stop and all match), appends ``selected[:, :n_matches + 1]``
  and calls ``update_candidate_strategy(input_ids, new_logits, n_matches)`` with ``n_matches`` a
  0-d tensor.
- ``assisted_decoding_v5`` (transformers 5.x): the same loop, and it reads the generator's
  ``requires_model_outputs`` (a plain attribute access: a generator without it fails, as on
  transformers 5.17); a generator that requires them also has its ``model_kwargs_overrides`` read
  and gets the model's outputs in ``get_candidates``.

The stopping criteria are transformers' max length (``length >= max_length``) and EOS (the last
token is an EOS id). Each emulation returns the output and the candidate length of every pass, so
a test can price the passes with a verify cost.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Callable

import numpy as np
import pytest

from ngramspec import LearnedCost, VerifyCost
from ngramspec.adapters.hf import AcceptanceCalibration, NgramspecCandidateGenerator, use_ngramspec

VOCAB = 512
EOS = 2


def cycle_model(period: list) -> Callable[[list], int]:
    """Repeating text: the token after t is the one after t in `period` (cyclically)."""
    successor = {t: period[(i + 1) % len(period)] for i, t in enumerate(period)}
    return lambda tokens: successor.get(int(tokens[-1]), period[0])


def hashed_model(salt: int = 0) -> Callable[[list], int]:
    def next_token(tokens: list) -> int:
        h = salt
        for t in tokens[-3:]:
            h = (h * 1000003 + int(t) + 7) % (1 << 31)
        return 10 + h % (VOCAB - 10)
    return next_token


class ToyLM:
    """A 'model': at every position, logits that put probability `top` on model(prefix) and spread the
    rest evenly (top 1: one-hot, greedy and sampling alike). Counts its forwards."""

    def __init__(self, next_token: Callable[[list], int], backend, top: float = 1.0) -> None:  # type: ignore[no-untyped-def]
        self.next_token = next_token
        self.backend = backend
        self.top = top
        self.forwards = 0

    def logits(self, input_ids):  # type: ignore[no-untyped-def]
        self.forwards += 1
        tokens = [int(t) for t in input_ids[0]]
        if self.top >= 1.0:
            out = self.backend.zeros((1, len(tokens), VOCAB))
            for i in range(len(tokens)):
                out[0, i, self.next_token(tokens[:i + 1])] = 1.0
            return out
        rest = float(np.log((1 - self.top) / (VOCAB - 1)))
        out = self.backend.full((1, len(tokens), VOCAB), rest)
        for i in range(len(tokens)):
            out[0, i, self.next_token(tokens[:i + 1])] = float(np.log(self.top))
        return out


def stopping(input_ids, max_length: int, eos: int) -> bool:  # type: ignore[no-untyped-def]
    return input_ids.shape[1] >= max_length or int(input_ids[0, -1]) == eos


def _get_generator(model, input_ids, generation_config):  # type: ignore[no-untyped-def]
    return model._get_candidate_generator(
        generation_config=generation_config, input_ids=input_ids, inputs_tensor=input_ids,
        assistant_model=None, logits_processor=[], target_tokenizer=None, assistant_tokenizer=None,
        model_kwargs={})


def _assisted_loop(model, input_ids, generation_config, candidate_generator, candidates_kwargs):  # type: ignore[no-untyped-def]
    """The loop both versions share; `candidates_kwargs()` gives get_candidates' keyword arguments."""
    import torch

    max_length, eos = generation_config.max_length, int(generation_config._eos_token_tensor[0])
    rng = torch.Generator().manual_seed(generation_config.seed)
    passes = []
    while True:
        cur_len = input_ids.shape[1]
        candidate_input_ids, candidate_logits = candidate_generator.get_candidates(input_ids, **candidates_kwargs())
        assert candidate_logits is None and candidate_input_ids.dtype == input_ids.dtype
        assert torch.equal(candidate_input_ids[:, :cur_len], input_ids)
        assert candidate_input_ids.shape[1] <= max_length - 1 or candidate_input_ids.shape[1] == cur_len
        candidate_length = candidate_input_ids.shape[1] - input_ids.shape[1]
        passes.append(candidate_length)
        is_done_candidate = stopping(candidate_input_ids, max_length, eos)
        new_logits = model.logits(candidate_input_ids)[:, -candidate_length - 1:].to(dtype=torch.float32)
        if generation_config.do_sample:
            probs = new_logits.softmax(dim=-1)
            selected_tokens = torch.multinomial(probs[0, :, :], num_samples=1, generator=rng).squeeze(1)[None, :]
        else:
            selected_tokens = new_logits.argmax(dim=-1)
        candidate_new_tokens = candidate_input_ids[:, cur_len:]
        n_matches = ((~(candidate_new_tokens == selected_tokens[:, :-1])).cumsum(dim=-1) < 1).sum()
        if is_done_candidate and n_matches == candidate_length:
            n_matches -= 1
        valid_tokens = selected_tokens[:, : n_matches + 1]
        input_ids = torch.cat((input_ids, valid_tokens), dim=-1)
        candidate_generator.update_candidate_strategy(input_ids, new_logits, n_matches)
        if stopping(input_ids, max_length, eos):
            return input_ids, passes


def assisted_decoding_v4(model, input_ids, generation_config):  # type: ignore[no-untyped-def]
    """transformers 4.4x-4.5x's _assisted_decoding (torch tensors): (output, candidates per pass)."""
    candidate_generator = _get_generator(model, input_ids, generation_config)
    return _assisted_loop(model, input_ids, generation_config, candidate_generator, dict)


def assisted_decoding_v5(model, input_ids, generation_config):  # type: ignore[no-untyped-def]
    """transformers 5.x's _assisted_decoding (torch tensors): reads requires_model_outputs."""
    candidate_generator = _get_generator(model, input_ids, generation_config)
    if candidate_generator.requires_model_outputs:
        overrides = dict(candidate_generator.model_kwargs_overrides)
        return _assisted_loop(model, input_ids, generation_config, candidate_generator,
                              lambda: {"model_outputs": SimpleNamespace(**overrides)})
    return _assisted_loop(model, input_ids, generation_config, candidate_generator, dict)


EMULATIONS = {"transformers-4": assisted_decoding_v4, "transformers-5": assisted_decoding_v5}


def assisted_generate_numpy(model, input_ids, max_length: int, eos: int, k: int):  # type: ignore[no-untyped-def]
    """The same loop on NumPy arrays (the adapter is duck-typed), for machines without torch."""
    candidate_generator = NgramspecCandidateGenerator(input_ids, num_output_tokens=k, max_length=max_length,
                                                      eos_token_id=eos)
    while True:
        cur_len = input_ids.shape[1]
        candidate_input_ids, _ = candidate_generator.get_candidates(input_ids)
        candidate_length = candidate_input_ids.shape[1] - cur_len
        is_done_candidate = stopping(candidate_input_ids, max_length, eos)
        new_logits = model.logits(candidate_input_ids)[:, -candidate_length - 1:]
        selected_tokens = new_logits.argmax(axis=-1)
        candidate_new_tokens = candidate_input_ids[:, cur_len:]
        n_matches = int((np.cumsum(~(candidate_new_tokens == selected_tokens[:, :-1]), axis=-1) < 1).sum())
        if is_done_candidate and n_matches == candidate_length:
            n_matches -= 1
        input_ids = np.concatenate((input_ids, selected_tokens[:, : n_matches + 1]), axis=-1)
        candidate_generator.update_candidate_strategy(input_ids, new_logits, n_matches)
        if stopping(input_ids, max_length, eos):
            return input_ids, candidate_generator


def plain_greedy(next_token: Callable[[list], int], prompt: list, max_length: int, eos: int) -> list:
    tokens = list(prompt)
    while len(tokens) < max_length:
        tokens.append(next_token(tokens))
        if tokens[-1] == eos:
            break
    return tokens


def torch_or_skip():  # type: ignore[no-untyped-def]
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("torch is not loaded into an AddressSanitizer process")
    return pytest.importorskip("torch", reason="torch is not installed (the NumPy test covers the adapter)")


def generation_config(torch, k: int, max_length: int, eos: int = EOS, do_sample: bool = False,  # type: ignore[no-untyped-def]
                      seed: int = 0) -> SimpleNamespace:
    """The parts of a GenerationConfig that assisted generation reads here (and the sampling seed)."""
    return SimpleNamespace(prompt_lookup_num_tokens=k, max_length=max_length, _eos_token_tensor=torch.tensor([eos]),
                           eos_token_id=eos, do_sample=do_sample, temperature=1.0, top_k=None, top_p=None,
                           seed=seed)


def priced(passes: list, cost: VerifyCost) -> float:
    """The time of the passes (candidates per pass), a one-token pass taking 1."""
    return sum(cost(1 + n) for n in passes)


GPU_LIKE = "table:1=1,2=1.2,64=1.25"  # batch 1 on a large GPU: any pass of 2..64 tokens about 1.2 one-token passes
STEEP = "table:1=1,2=1.5,4=2.5,16=8"  # a CPU: every token adds most of a pass


# ---- Tests ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("emulation", sorted(EMULATIONS))
def test_transformers_5_reads_requires_model_outputs_and_the_generator_needs_none(emulation: str) -> None:
    torch = torch_or_skip()
    assert NgramspecCandidateGenerator.requires_model_outputs is False
    next_token = cycle_model(list(range(100, 119)))
    model = use_ngramspec(ToyLM(next_token, torch), cost=None)
    out, passes = EMULATIONS[emulation](model, torch.tensor([[100, 101]]), generation_config(torch, 8, 100))
    assert out.tolist()[0] == plain_greedy(next_token, [100, 101], 100, EOS)
    assert len(passes) < 30


@pytest.mark.parametrize("emulation", sorted(EMULATIONS))
def test_greedy_output_is_plain_greedy_decoding_for_any_model_drafts_and_cost(emulation: str) -> None:
    torch = torch_or_skip()
    rng = np.random.default_rng(28)
    accepted = 0
    for trial in range(24):
        kind = trial % 3
        if kind == 0:
            period = [int(t) for t in rng.choice(np.arange(10, VOCAB), size=int(rng.integers(2, 40)), replace=False)]
            next_token = cycle_model(period)
            prompt = period[:int(rng.integers(1, len(period) + 1))]
        elif kind == 1:
            next_token, prompt = hashed_model(trial), [int(t) for t in rng.integers(10, VOCAB, size=5)]
        else:  # a cycle that a hash breaks now and then
            period = list(range(200, 200 + int(rng.integers(3, 30))))
            cyc, hashed = cycle_model(period), hashed_model(trial)
            next_token = (lambda c, h: lambda tokens: h(tokens) if len(tokens) % 17 == 0 else c(tokens))(cyc, hashed)
            prompt = period[:3]
        cost = [None, "flat", GPU_LIKE, STEEP][trial % 4]
        k, max_length = int(rng.integers(1, 17)), len(prompt) + int(rng.integers(1, 120))
        model = use_ngramspec(ToyLM(next_token, torch), cost=cost, max_drafts=99)
        out, passes = EMULATIONS[emulation](model, torch.tensor([prompt]), generation_config(torch, k, max_length))
        assert out.tolist()[0] == plain_greedy(next_token, prompt, max_length, EOS), (trial, cost, k)
        generator = model._ngramspec_state["generator"]
        assert generator.num_output_tokens == k and generator.resets == 1  # prompt_lookup_num_tokens, not max_drafts
        assert max(passes) <= k and len(passes) <= max_length - len(prompt)
        accepted += generator.accepted
    assert accepted > 300


@pytest.mark.parametrize("emulation", sorted(EMULATIONS))
def test_drafts_stop_at_eos_and_at_max_length(emulation: str) -> None:
    torch = torch_or_skip()
    assisted = EMULATIONS[emulation]
    period = list(range(100, 110)) + [EOS]  # the text ends with EOS each time round
    next_token = cycle_model(period)
    prompt = period * 2 + period[:3]  # EOS is in the prompt, so a copy of it reaches an EOS
    seen = []
    model = use_ngramspec(ToyLM(next_token, torch), cost=None)

    real = model._get_candidate_generator

    def recording(**kwargs):  # type: ignore[no-untyped-def]
        generator = real(**kwargs)
        get = generator.get_candidates

        def get_candidates(input_ids, **kw):  # type: ignore[no-untyped-def]
            candidates, logits = get(input_ids, **kw)
            seen.append(candidates[0, input_ids.shape[1]:].tolist())
            return candidates, logits
        generator.get_candidates = get_candidates
        return generator
    model._get_candidate_generator = recording
    out, _ = assisted(model, torch.tensor([prompt]), generation_config(torch, 10, 200))
    assert out.tolist()[0] == plain_greedy(next_token, prompt, 200, EOS)
    assert out[0, -1] == EOS and len(out[0]) == len(prompt) + 8
    assert any(seen) and all(EOS not in drafts for drafts in seen)
    # max_length: the candidates stop one short of it, since the model adds a token after them.
    seen.clear()
    periodic = cycle_model(list(range(100, 119)))
    model.next_token = periodic
    out, _ = assisted(model, torch.tensor([[100, 101]]), generation_config(torch, 10, 60))
    assert out.tolist()[0] == plain_greedy(periodic, [100, 101], 60, EOS) and out.shape[1] == 60


@pytest.mark.parametrize("emulation", sorted(EMULATIONS))
def test_passes_priced_by_the_cost_are_never_dearer_than_plain_decoding_sampling_included(emulation: str) -> None:
    """Plain decoding runs one one-token pass a token. With the cost, the drafts a step sends are worth
    what they add to the pass, as far as the calibrated estimates know: the passes cost no more than
    plain decoding's (up to what learning the calibration costs), under greedy decoding and sampling,
    on a GPU-like and a steep curve; sending every candidate (no cost) is far dearer when sampling."""
    torch = torch_or_skip()
    assisted = EMULATIONS[emulation]
    prompt = list(range(100, 119)) * 2
    fixed_k_ratios = []
    for spec in (GPU_LIKE, STEEP):
        cost = VerifyCost(spec)
        for top, do_sample in ((1.0, False), (0.9, True), (0.5, True), (0.2, True)):
            for seed in range(2):
                model = use_ngramspec(ToyLM(cycle_model(list(range(100, 119))), torch, top=top), cost=spec,
                                      fixed_cost=True)  # priced by the curve the planner plans with
                config = generation_config(torch, 10, len(prompt) + 200, do_sample=do_sample, seed=seed)
                out, passes = assisted(model, torch.tensor([prompt]), config)
                plain = out.shape[1] - len(prompt)
                assert priced(passes, cost) <= 1.02 * plain + 8, (spec, top, seed, priced(passes, cost), plain)
                if top == 1.0:  # repetitive text, greedy: the drafts pay
                    assert priced(passes, cost) < 0.6 * plain
                everything = use_ngramspec(ToyLM(cycle_model(list(range(100, 119))), torch, top=top), cost=None)
                out, passes = assisted(everything, torch.tensor([prompt]), config)
                fixed_k_ratios.append((spec, top, priced(passes, cost) / (out.shape[1] - len(prompt))))
    assert all(ratio > 1.3 for spec, top, ratio in fixed_k_ratios if spec == STEEP and top <= 0.5), fixed_k_ratios


def test_the_calibration_scales_each_drafts_chance_by_what_the_model_accepts() -> None:
    calibration = AcceptanceCalibration(prior=0.5, memory=1.0, probes=8)
    estimates = np.array([0.9, 0.72, 0.36], np.float32)  # conditional chances 0.9, 0.8, 0.5
    out = np.empty(3, np.float32)
    calibration.calibrate(estimates, out)
    assert np.allclose(out, estimates) and calibration.factor == 1.0  # no step yet: the estimates stand
    for step in range(50):  # the first draft accepted, the second rejected: 1 hit in 1.7 estimated
        assert calibration.probing == (step < 4)  # two drafts tested a step
        calibration.observe(estimates, 1)
    calibration.observe(np.array([], np.float32), 0)  # nothing sent: nothing learnt
    assert calibration.steps == 50 and calibration.tested == 100
    factor = (50 + 0.5) / (50 * 1.7 + 0.5)
    assert abs(calibration.factor - factor) < 1e-6  # the estimates are float32
    calibration.calibrate(estimates, out)
    assert np.allclose(out, np.cumprod(np.minimum(1.0, factor * np.array([0.9, 0.8, 0.5]))), atol=1e-6)
    calibration.calibrate(np.array([0.9, 0.0, 0.0, 0.5], np.float32), out := np.empty(4, np.float32))
    assert out[1] == 0 and out[2] == 0 and out[3] == 0  # nothing follows a draft that cannot be accepted
    forgetting = AcceptanceCalibration(memory=0.5)
    for _ in range(20):
        forgetting.observe(np.array([0.5], np.float32), 0)
    for _ in range(20):
        forgetting.observe(np.array([0.5], np.float32), 1)
    assert forgetting.factor > 1.5  # recent hits outweigh forgotten misses: the drafter underestimated
    for bad in ({"prior": 0.0}, {"prior": float("nan")}, {"memory": 0.0}, {"memory": 1.5}, {"probes": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            AcceptanceCalibration(**bad)


def test_use_ngramspec_measures_the_cost_once_per_draft_count_and_calibrates_per_setting() -> None:
    torch = torch_or_skip()
    measured = []

    def measure(model, input_ids, tokens):  # type: ignore[no-untyped-def]
        measured.append((input_ids.shape[1], tokens))
        return VerifyCost(GPU_LIKE)
    next_token = cycle_model(list(range(100, 119)))
    model = use_ngramspec(ToyLM(next_token, torch), measure=measure)
    assert model._ngramspec_state["cost"] is None and measured == []  # measured at first use
    for k, do_sample, seed in ((8, False, 0), (8, False, 1), (4, True, 0), (12, True, 1), (12, True, 2)):
        assisted_decoding_v4(model, torch.tensor([[100, 101, 102]]),
                             generation_config(torch, k, 80, do_sample=do_sample, seed=seed))
    assert measured == [(3, 9), (3, 13)]  # again only when more drafts are allowed than were measured
    assert model._ngramspec_state["cost"].spec == VerifyCost(GPU_LIKE).spec
    calibrations = model._ngramspec_state["calibrations"]
    assert sorted(key[0] for key in calibrations) == [False, True]  # greedy and sampling apart
    assert all(c.steps > 0 for c in calibrations.values())
    generator = model._ngramspec_state["generator"]
    learned = model._ngramspec_state["learned"]  # by default the measured curve is a learned cost's prior
    assert isinstance(learned, LearnedCost) and learned.prior == VerifyCost(GPU_LIKE).spec
    assert generator.cost is learned and generator.calibration is calibrations[(True, 1.0, None, None)]
    assert learned.stats.passes > 0  # the passes since it was made (measured again for 12 drafts), prefills left out
    fixed = use_ngramspec(ToyLM(next_token, torch), measure=measure, fixed_cost=True)
    assisted_decoding_v4(fixed, torch.tensor([[100, 101, 102]]), generation_config(torch, 8, 80))
    assert fixed._ngramspec_state["learned"] is None
    assert fixed._ngramspec_state["generator"].cost is fixed._ngramspec_state["cost"]
    given = use_ngramspec(ToyLM(next_token, torch), cost=None)
    assisted_decoding_v4(given, torch.tensor([[100, 101]]), generation_config(torch, 8, 60))
    assert given._ngramspec_state["generator"].withheld == 0 and given._ngramspec_state["generator"].cost is None
    with pytest.raises(ValueError, match="'steep'"):
        use_ngramspec(ToyLM(next_token, torch), cost="steep")
    with pytest.raises(TypeError, match="cost must be"):
        use_ngramspec(ToyLM(next_token, torch), cost=3)  # type: ignore[arg-type]


def test_a_new_generation_starts_the_drafter_over() -> None:
    generator = NgramspecCandidateGenerator(num_output_tokens=4)
    period = list(range(100, 112))
    first = np.array([period * 3], dtype=np.int64)
    candidates, _ = generator.get_candidates(first)
    assert candidates[0, first.shape[1]:].tolist() == period[:4]
    other = np.array([[7, 8, 9, 100, 101]], dtype=np.int64)  # not an extension of what it read
    candidates, _ = generator.get_candidates(other)
    assert candidates is other  # a fresh drafter: "100 101" occurs once, nothing to copy
    assert generator.resets == 2
    longer = np.concatenate([other, np.array([[102, 7, 8, 9]])], axis=1)
    candidates, _ = generator.get_candidates(longer)
    assert candidates[0, longer.shape[1]:].tolist()[:3] == [100, 101, 102]  # its own text, read on
    assert generator.resets == 2
    # The same length, other tokens at the end of what was read: a new sequence too.
    changed = longer.copy()
    changed[0, -2] = 55
    generator.get_candidates(changed)
    assert generator.resets == 3


def test_numpy_inputs_work_without_torch() -> None:
    class NumpyBackend:
        @staticmethod
        def zeros(shape):  # type: ignore[no-untyped-def]
            return np.zeros(shape, np.float32)
    period = list(range(100, 119))
    next_token = cycle_model(period)
    model = ToyLM(next_token, NumpyBackend)
    out, generator = assisted_generate_numpy(model, np.array([[100, 101]], dtype=np.int64), 120, EOS, 6)
    assert out.dtype == np.int64 and out[0].tolist() == plain_greedy(next_token, [100, 101], 120, EOS)
    assert generator.accepted > 60 and model.forwards < 50
    assert generator.resets == 1  # it read the prompt once, then each step's new tokens
    with pytest.raises(ValueError, match="batch size 1"):
        generator.get_candidates(np.zeros((2, 5), np.int64))


def test_the_integrations_doc_uses_this_adapter() -> None:
    from pathlib import Path

    doc = Path(__file__).resolve().parents[2] / "docs" / "INTEGRATIONS.md"
    if not doc.is_file():
        pytest.skip("no docs/INTEGRATIONS.md (the tests run outside the source tree)")
    section = doc.read_text().split("\n## Hugging Face transformers\n")[1].split("\n## ")[0]
    assert "from ngramspec.adapters.hf import use_ngramspec" in section
    assert "use_ngramspec(model)" in section and "prompt_lookup_num_tokens=" in section
    model = use_ngramspec(SimpleNamespace(), cost="flat")
    generator = model._get_candidate_generator(
        generation_config=SimpleNamespace(prompt_lookup_num_tokens=8, max_length=300, eos_token_id=[2, 3]),
        input_ids=np.array([[1, 2, 3]]), inputs_tensor=None, assistant_model=None, logits_processor=[],
        target_tokenizer=None, assistant_tokenizer=None, model_kwargs={})
    assert isinstance(generator, NgramspecCandidateGenerator)
    assert (generator.num_output_tokens, generator.max_length, generator.eos_token_ids) == (8, 300, {2, 3})
    for bad in (0, 1025):
        with pytest.raises(ValueError, match=f"num_output_tokens must be in 1..1024, got {bad}"):
            NgramspecCandidateGenerator(num_output_tokens=bad)


def test_whole_numbers_are_refused_when_fractional_and_matches_beyond_the_drafts_sent() -> None:
    # int() would truncate each of these silently: 1.9 drafts would become 1, token 2.7 token 2.
    with pytest.raises(ValueError, match=r"num_output_tokens = 1\.9 is invalid: it must be a whole number"):
        NgramspecCandidateGenerator(num_output_tokens=1.9)
    with pytest.raises(ValueError, match=r"eos_token_id = 2\.7 is invalid: it must be a whole number"):
        NgramspecCandidateGenerator(eos_token_id=2.7)
    with pytest.raises(ValueError, match=r"eos_token_id = 3\.5 is invalid"):
        NgramspecCandidateGenerator(eos_token_id=[2, 3.5])
    with pytest.raises(ValueError, match=r"max_length = 99\.5 is invalid"):
        NgramspecCandidateGenerator(max_length=99.5)
    with pytest.raises(TypeError, match=r"probes = True is invalid: it must be an int"):
        AcceptanceCalibration(probes=True)
    generator = NgramspecCandidateGenerator(num_output_tokens=4, eos_token_id=np.array([2]))
    assert generator.eos_token_ids == {2}
    period = np.array([[5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7]], np.int64)
    out, _ = generator.get_candidates(period)
    sent = out.shape[1] - period.shape[1]
    assert sent > 0
    for bad in (sent + 1, -1):
        with pytest.raises(ValueError, match=f"update_candidate_strategy: num_matches = {bad} is invalid: it must be "
                                             f"from 0 to the {sent} drafts the last get_candidates sent"):
            generator.update_candidate_strategy(out, None, bad)
    with pytest.raises(ValueError, match=r"num_matches = 1\.5 is invalid"):
        generator.update_candidate_strategy(out, None, 1.5)
    assert generator.accepted == 0  # nothing was counted from the refused calls
    generator.update_candidate_strategy(out, None, np.int64(sent))  # a NumPy integer, as an engine may pass
    assert generator.accepted == sent


@pytest.mark.parametrize("emulation", sorted(EMULATIONS))
def test_a_learned_cost_times_every_step_but_the_prefill_and_keeps_greedy_output(emulation: str) -> None:
    """cost="learn" / "learn:SPEC" / a LearnedCost: each step after the first (the prefill's) is one pass
    observed, of 1 + the drafts sent tokens; the output is plain greedy decoding's whatever was learned."""
    torch = torch_or_skip()
    assisted = EMULATIONS[emulation]
    next_token = cycle_model(list(range(100, 119)))
    for cost in ("learn", "learn:" + GPU_LIKE, LearnedCost(STEEP)):
        model = use_ngramspec(ToyLM(next_token, torch), cost=cost)
        out, passes = assisted(model, torch.tensor([[100, 101]]), generation_config(torch, 10, 120))
        assert out.tolist()[0] == plain_greedy(next_token, [100, 101], 120, EOS), cost
        learned = model._ngramspec_state["learned"]
        assert model._ngramspec_state["generator"].cost is learned
        assert learned.stats.passes == len(passes) - 1, (cost, learned.stats, len(passes))
        if isinstance(cost, LearnedCost):
            assert learned is cost
    with pytest.raises(ValueError, match="fixed_cost=True plans against a fixed curve"):
        use_ngramspec(ToyLM(next_token, torch), cost="learn", fixed_cost=True)
    with pytest.raises(ValueError, match="prior 'steep' is not a cost"):
        use_ngramspec(ToyLM(next_token, torch), cost="learn:steep")
