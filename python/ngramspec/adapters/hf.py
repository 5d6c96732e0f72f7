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
sampling compares the sampled tokens with the drafts.

transformers has no public argument for a custom candidate generator; :func:`use_ngramspec`
replaces the private ``_get_candidate_generator`` of one model instance, and
``prompt_lookup_num_tokens`` (the most drafts a step) selects assisted generation::

    from ngramspec.adapters.hf import use_ngramspec
    use_ngramspec(model)                      # this model's assisted generation drafts with ngramspec
    out = model.generate(**inputs, prompt_lookup_num_tokens=8, max_new_tokens=256, do_sample=False)

The interface followed (no transformers code is used or copied here), from
https://github.com/huggingface/transformers:

- ``src/transformers/generation/candidate_generator.py`` (commit 00a11b6a0745b442473aef0221e098d022b8158c):
  ``CandidateGenerator.get_candidates(input_ids, **kwargs)`` and
  ``update_candidate_strategy(input_ids, scores, num_matches)``; ``PromptLookupCandidateGenerator``
  (``eos_token_id``, ``num_output_tokens``, ``max_length``): no candidates when
  ``max_length == length + 1``, candidates cut at the first EOS, ``(input_ids, None)`` when none.
- ``src/transformers/generation/utils.py`` (commit 000034a44ef887621d9b36001a5eb7c46e64cb3f):
  ``_assisted_decoding`` (batch size 1 only) gets its generator from
  ``self._get_candidate_generator(generation_config=..., input_ids=..., inputs_tensor=...,
  assistant_model=..., logits_processor=..., target_tokenizer=..., assistant_tokenizer=...,
  model_kwargs=...)`` and calls it as described above; ``prompt_lookup_num_tokens`` makes
  ``_get_candidate_generator`` build a ``PromptLookupCandidateGenerator`` with
  ``num_output_tokens=prompt_lookup_num_tokens`` and ``max_length=generation_config.max_length``.

Importing this module imports neither transformers nor torch: tensors are handled through their
own methods, and NumPy arrays work the same way (what the tests without torch use).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .._corpus import SharedCorpus
from .._drafters import MatchDrafter

__all__ = ["NgramspecCandidateGenerator", "use_ngramspec"]


class NgramspecCandidateGenerator:
    """A transformers candidate generator (``get_candidates`` / ``update_candidate_strategy``) that
    drafts with a :class:`ngramspec.MatchDrafter` over the sequence being generated (and `corpus`).

    `num_output_tokens`: the most drafts a step; `max_length`: the generation's max_length (prompt
    included), past which nothing is drafted; `eos_token_id`: an id or ids (int, list, tensor) at
    which the drafts stop; `corpus`: a :class:`ngramspec.SharedCorpus` the drafter copies from;
    `drafter`: MatchDrafter keyword settings.

    The drafter follows ``input_ids``: each call it reads the tokens added since the last one. When
    ``input_ids`` no longer extends what it read (a new generation), it starts over.
    """

    def __init__(self, input_ids: Any = None, *, num_output_tokens: int = 10, max_length: int | None = None,
                 eos_token_id: Any = None, corpus: SharedCorpus | None = None,
                 drafter: Mapping[str, Any] | None = None) -> None:
        if int(num_output_tokens) < 1:
            raise ValueError(f"num_output_tokens must be at least 1, got {num_output_tokens}")
        self.num_output_tokens = int(num_output_tokens)
        self.max_length = None if max_length is None else int(max_length)
        self.eos_token_ids = frozenset(_ints(eos_token_id))
        self.drafter = MatchDrafter(corpus=corpus, **dict(drafter or {}))
        self._seen = 0  # tokens of the sequence the drafter has read
        self._head = np.empty(0, np.int64)  # the first of them
        self._tail = np.empty(0, np.int64)  # the last of them
        self._out = np.empty(self.num_output_tokens, np.uint32)
        self.calls = 0  #: get_candidates calls
        self.resets = 0  #: times the drafter started over (a sequence that did not extend the last)
        self.drafted = 0  #: draft tokens returned
        self.accepted = 0  #: drafts accepted, from update_candidate_strategy's num_matches
        if input_ids is not None:
            self._follow(input_ids)

    def get_candidates(self, input_ids: Any, **kwargs: Any) -> tuple[Any, None]:
        """``(input_ids with the drafts appended, None)``, or ``(input_ids, None)`` when there are none.
        `input_ids`: shape (1, length), a torch tensor or a NumPy array; the result is of the same kind,
        dtype and device."""
        self.calls += 1
        length = self._follow(input_ids)
        room = self.num_output_tokens
        if self.max_length is not None:  # the model adds one token after the candidates
            room = min(room, self.max_length - length - 1)
        if room <= 0:
            return input_ids, None
        n = self.drafter.predict_into(self._out[:room])
        drafts = self._out[:n].tolist()
        for i, token in enumerate(drafts):  # past an EOS the model could "accept" what follows it
            if token in self.eos_token_ids:
                drafts = drafts[:i]
                break
        if not drafts:
            return input_ids, None
        self.drafted += len(drafts)
        return _append(input_ids, drafts), None

    def update_candidate_strategy(self, input_ids: Any, scores: Any, num_matches: Any) -> None:
        """Counts the accepted drafts; the drafter reads the new tokens at the next get_candidates."""
        self.accepted += int(num_matches)

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


def use_ngramspec(model: Any, *, corpus: SharedCorpus | None = None, drafter: Mapping[str, Any] | None = None,
                  max_drafts: int = 10) -> Any:
    """Makes `model`'s assisted generation draft with :class:`NgramspecCandidateGenerator`: replaces the
    model instance's ``_get_candidate_generator`` (transformers' private hook) with one that builds an
    ngramspec generator for each generate call, with ``prompt_lookup_num_tokens`` (else `max_drafts`)
    drafts at most and the call's max_length and EOS ids. Generate with
    ``prompt_lookup_num_tokens=K`` (which selects assisted generation; batch size 1). `corpus`: a
    :class:`ngramspec.SharedCorpus` shared by the generations (append outputs to it yourself);
    `drafter`: MatchDrafter settings. Returns `model`."""

    def _get_candidate_generator(generation_config: Any = None, input_ids: Any = None, **kwargs: Any) -> Any:
        k = getattr(generation_config, "prompt_lookup_num_tokens", None) or max_drafts
        eos = getattr(generation_config, "_eos_token_tensor", None)
        if eos is None:
            eos = getattr(generation_config, "eos_token_id", None)
        return NgramspecCandidateGenerator(input_ids, num_output_tokens=k,
                                           max_length=getattr(generation_config, "max_length", None),
                                           eos_token_id=eos, corpus=corpus, drafter=drafter)

    model._get_candidate_generator = _get_candidate_generator
    return model


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
        return [int(v) for v in value]
    return [int(value)]
