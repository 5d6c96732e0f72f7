"""ngramspec.adapters.hf, driven the way transformers' assisted generation drives a candidate generator.

``assisted_generate`` below follows ``GenerationMixin._assisted_decoding`` (transformers'
src/transformers/generation/utils.py; see the adapter's docstring for the version) for greedy
decoding, batch size 1, with a toy model in place of a network: the generator comes from
``model._get_candidate_generator(generation_config=..., input_ids=..., ...)``; each step calls
``get_candidates(input_ids)``, checks the stopping criteria on the candidates, runs the model over
them, takes the argmax of the last ``candidate_length + 1`` positions, counts the matches as
transformers does (``((~(candidates == selected[:, :-1])).cumsum(-1) < 1).sum()``, one fewer when
the candidates already stop and all match), appends ``selected[:, :n_matches + 1]`` and calls
``update_candidate_strategy(input_ids, new_logits, n_matches)``. The stopping criteria are
transformers' max length (``length >= max_length``) and EOS (the last token is an EOS id).
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Callable

import numpy as np
import pytest

from ngramspec.adapters.hf import NgramspecCandidateGenerator, use_ngramspec

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
    """A greedy 'model': logits one-hot on model(prefix) at every position. Counts its forwards."""

    def __init__(self, next_token: Callable[[list], int], backend) -> None:  # type: ignore[no-untyped-def]
        self.next_token = next_token
        self.backend = backend
        self.forwards = 0

    def logits(self, input_ids):  # type: ignore[no-untyped-def]
        self.forwards += 1
        tokens = [int(t) for t in input_ids[0]]
        out = self.backend.zeros((1, len(tokens), VOCAB))
        for i in range(len(tokens)):
            out[0, i, self.next_token(tokens[:i + 1])] = 1.0
        return out


def stopping(input_ids, max_length: int, eos: int) -> bool:  # type: ignore[no-untyped-def]
    return input_ids.shape[1] >= max_length or int(input_ids[0, -1]) == eos


def assisted_generate(model, input_ids, generation_config):  # type: ignore[no-untyped-def]
    """transformers' _assisted_decoding, greedy, batch size 1 (torch tensors)."""
    import torch

    candidate_generator = model._get_candidate_generator(
        generation_config=generation_config, input_ids=input_ids, inputs_tensor=input_ids,
        assistant_model=None, logits_processor=[], target_tokenizer=None, assistant_tokenizer=None,
        model_kwargs={})
    max_length, eos = generation_config.max_length, int(generation_config._eos_token_tensor[0])
    while True:
        cur_len = input_ids.shape[1]
        candidate_input_ids, candidate_logits = candidate_generator.get_candidates(input_ids)
        assert candidate_logits is None and candidate_input_ids.dtype == input_ids.dtype
        assert torch.equal(candidate_input_ids[:, :cur_len], input_ids)
        assert candidate_input_ids.shape[1] <= max_length - 1 or candidate_input_ids.shape[1] == cur_len
        candidate_length = candidate_input_ids.shape[1] - input_ids.shape[1]
        is_done_candidate = stopping(candidate_input_ids, max_length, eos)
        new_logits = model.logits(candidate_input_ids)[:, -candidate_length - 1:].to(dtype=torch.float32)
        selected_tokens = new_logits.argmax(dim=-1)
        candidate_new_tokens = candidate_input_ids[:, cur_len:]
        n_matches = ((~(candidate_new_tokens == selected_tokens[:, :-1])).cumsum(dim=-1) < 1).sum()
        if is_done_candidate and n_matches == candidate_length:
            n_matches -= 1
        valid_tokens = selected_tokens[:, : n_matches + 1]
        input_ids = torch.cat((input_ids, valid_tokens), dim=-1)
        candidate_generator.update_candidate_strategy(input_ids, new_logits, n_matches)
        if stopping(input_ids, max_length, eos):
            return input_ids, candidate_generator


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


def generation_config(torch, k: int, max_length: int, eos: int = EOS) -> SimpleNamespace:  # type: ignore[no-untyped-def]
    """The parts of a GenerationConfig that assisted generation reads here."""
    return SimpleNamespace(prompt_lookup_num_tokens=k, max_length=max_length,
                           _eos_token_tensor=torch.tensor([eos]), eos_token_id=eos, do_sample=False)


# ---- Tests ----------------------------------------------------------------------------------------


def test_assisted_generation_is_greedy_and_accepts_drafts_on_repetitive_text() -> None:
    torch = torch_or_skip()
    period = list(range(100, 119))  # a 19-token cycle, never EOS
    cases = [("repetitive", cycle_model(period), [100, 101, 102]),
             ("aperiodic", hashed_model(1), [5, 6, 7])]
    for name, next_token, prompt in cases:
        model = use_ngramspec(ToyLM(next_token, torch), max_drafts=99)
        input_ids = torch.tensor([prompt], dtype=torch.long)
        out, generator = assisted_generate(model, input_ids, generation_config(torch, 8, 150))
        assert out.tolist()[0] == plain_greedy(next_token, prompt, 150, EOS), name
        assert generator.num_output_tokens == 8  # prompt_lookup_num_tokens, not max_drafts
        plain_passes = 150 - len(prompt)
        assert generator.resets == 1
        if name == "repetitive":
            assert generator.accepted > 100 and model.forwards < 0.4 * plain_passes, (generator.accepted,
                                                                                     model.forwards)
        else:  # nothing repeats: few drafts, and never more passes than plain decoding
            assert generator.drafted < 0.5 * plain_passes and model.forwards <= plain_passes


def test_drafts_stop_at_eos_and_at_max_length() -> None:
    torch = torch_or_skip()
    period = list(range(100, 110)) + [EOS]  # the text ends with EOS each time round
    next_token = cycle_model(period)
    prompt = period * 2 + period[:3]  # EOS is in the prompt, so a copy of it reaches an EOS
    seen = []
    model = use_ngramspec(ToyLM(next_token, torch))

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
    out, _ = assisted_generate(model, torch.tensor([prompt]), generation_config(torch, 10, 200))
    assert out.tolist()[0] == plain_greedy(next_token, prompt, 200, EOS)
    assert out[0, -1] == EOS and len(out[0]) == len(prompt) + 8
    assert any(seen) and all(EOS not in drafts for drafts in seen)
    # max_length: the candidates stop one short of it, since the model adds a token after them.
    seen.clear()
    periodic = cycle_model(list(range(100, 119)))
    model.next_token = periodic
    out, _ = assisted_generate(model, torch.tensor([[100, 101]]), generation_config(torch, 10, 60))
    assert out.tolist()[0] == plain_greedy(periodic, [100, 101], 60, EOS) and out.shape[1] == 60


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


def test_the_readme_uses_this_adapter() -> None:
    from pathlib import Path

    readme = Path(__file__).resolve().parents[2] / "README.md"
    if not readme.is_file():
        pytest.skip("no README.md (the tests run outside the source tree)")
    section = readme.read_text().split("## vLLM and Hugging Face")[1].split("\n## ")[0]
    assert "from ngramspec.adapters.hf import use_ngramspec" in section
    assert "use_ngramspec(model)" in section and "prompt_lookup_num_tokens=" in section
    model = use_ngramspec(SimpleNamespace())
    generator = model._get_candidate_generator(
        generation_config=SimpleNamespace(prompt_lookup_num_tokens=8, max_length=300, eos_token_id=[2, 3]),
        input_ids=np.array([[1, 2, 3]]), inputs_tensor=None, assistant_model=None, logits_processor=[],
        target_tokenizer=None, assistant_tokenizer=None, model_kwargs={})
    assert isinstance(generator, NgramspecCandidateGenerator)
    assert (generator.num_output_tokens, generator.max_length, generator.eos_token_ids) == (8, 300, {2, 3})
