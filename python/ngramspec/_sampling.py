"""TokenSampler: the tokens of one sequence's verify pass from the target's logits, by plain sampling's
draws or by rejection sampling of drafts drawn from a distribution."""

from __future__ import annotations

import ctypes
from typing import Any, Literal, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

from ._arrays import OffsetsLike, TokensLike, float32_arg, size_arg, sizes_arg, tokens_arg
from ._closable import Closable
from ._errors import raise_status
from ._native import SamplingOptions, lib

__all__ = ["TokenSampler", "SamplingModeName", "MAX_SUPPORT"]

#: How a sampler verifies drafts: ``"exact"`` or ``"rejection"`` (see :class:`TokenSampler`).
SamplingModeName = Literal["exact", "rejection"]
_MODES = {"exact": 0, "rejection": 1}

#: Most tokens in one draft's support (NGRAMSPEC_MAX_SUPPORT).
MAX_SUPPORT = 32

_F32 = np.dtype(np.float32)
SupportsLike = Union[npt.NDArray[Any], Sequence[Any], None]


class TokenSampler(Closable):
    """Chooses the tokens of one sequence's verify pass from the target model's logits (``ngramspec_sampler``,
    the C++ TokenSampler), for an engine that verifies drafts itself: a draft model's drafts with the
    distributions they were drawn from, or any drafts by plain sampling's own tokens.

    `vocab_size`: the target's vocabulary (each row of logits has this many). The options, each with its
    default: `temperature` 0.0 (greedy: the argmax, ties to the lowest id; otherwise > 0 and finite),
    `top_k` 0 (off), `top_p` 1.0 (off; in (0, 1]), `min_p` 0.0 (off; in [0, 1)), applied in that order;
    `seed` 0 (the draws at position p depend only on (seed, p): give each request its own); `mode`
    ``"exact"`` (each token is plain sampling's at its position for the seed, so the text is plain
    decoding's; a draft is accepted when it equals it) or ``"rejection"`` (speculative sampling: a draft x
    drawn from q is accepted with probability min(1, p(x) / q(x)), otherwise the token is drawn from the
    residual max(0, p - q); the tokens keep the target's distribution p, and more drafts are accepted when
    q is near p). Raises ValueError naming the option and its value, or naming `vocab_size` and the machine's
    memory when the scratch would not fit in it (refused before anything is allocated).

    One sampler per thread; its scratch (about 12 bytes a vocabulary token) is allocated here, and
    :meth:`verify_chain` and :meth:`verify_tree` allocate nothing natively once warm."""

    _handle: int | None = None

    def __init__(self, vocab_size: int, *, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                 min_p: float = 0.0, seed: int = 0, mode: SamplingModeName = "exact") -> None:
        options = _options(temperature, top_k, top_p, min_p, seed, mode)
        out = ctypes.c_void_p()
        status = lib.ngramspec_sampler_create(ctypes.byref(options), size_arg(vocab_size, "vocab_size"),
                                              ctypes.byref(out))
        if status:
            raise_status(status)
        self._handle = out.value
        self._vocab_size = int(vocab_size)
        self._options = options
        self._accepted = ctypes.c_size_t(0)
        self._next = ctypes.c_uint32(0)
        self._accepted_address = ctypes.addressof(self._accepted)
        self._next_address = ctypes.addressof(self._next)

    @property
    def vocab_size(self) -> int:
        """The vocabulary every row of logits covers."""
        return self._vocab_size

    @property
    def options(self) -> dict[str, Any]:
        """The options in use: temperature, top_k, top_p, min_p, seed and mode."""
        o = self._options
        mode = next(name for name, value in _MODES.items() if value == o.mode)
        return {"temperature": float(o.temperature), "top_k": int(o.top_k), "top_p": float(o.top_p),
                "min_p": float(o.min_p), "seed": int(o.seed), "mode": mode}

    def set_options(self, **changes: Any) -> None:
        """Replaces some options (keywords as the constructor's), keeping the others: a new ``seed`` for
        each request, say. Invalid options raise ValueError and change nothing."""
        unknown = set(changes) - {"temperature", "top_k", "top_p", "min_p", "seed", "mode"}
        if unknown:
            raise TypeError(f"set_options: unknown option(s) {sorted(unknown)}; the options are temperature, top_k, "
                            f"top_p, min_p, seed and mode")
        merged = {**self.options, **changes}
        options = _options(merged["temperature"], merged["top_k"], merged["top_p"], merged["min_p"], merged["seed"],
                           merged["mode"])
        status = lib.ngramspec_sampler_set_options(self._live("set_options"), ctypes.byref(options))
        if status:
            raise_status(status)
        self._options = options

    def verify_chain(self, logits: npt.ArrayLike, position: int, drafts: TokensLike,
                     q_tokens: SupportsLike = None, q_probabilities: SupportsLike = None) -> tuple[int, int]:
        """Verifies one sequence's chain of drafts; returns ``(accepted, next_token)``: the sequence goes on
        with ``drafts[:accepted]`` and then `next_token`.

        `logits`: the target's pass over the sequence's last token and the drafts, shape
        ``(len(drafts) + 1, vocab_size)`` (float32 and C-contiguous are read in place, anything else is
        converted): row i is the distribution of the token after ``drafts[:i]``, drawn at absolute
        position ``position + i`` (`position`: the sequence's length before the pass). -inf masks a token.

        `q_tokens` and `q_probabilities`: what each draft was drawn from, given the drafts before it.
        Either two arrays of shape ``(len(drafts), S)``, row i draft i's support of S tokens
        (S <= MAX_SUPPORT) and their probabilities (read normalized; pad a row with probability 0), or two
        sequences of ``len(drafts)`` 1-D arrays (an empty one: that draft was chosen, not drawn), or None
        for both (every draft chosen: q one-hot on it). A support that gives the draft's own token no
        probability also reads it as chosen. In the ``"exact"`` mode q is checked but not read. A draft
        outside the vocabulary is rejected.

        Raises ValueError naming the argument and its value (shapes, offsets, a probability negative or
        not finite, a support summing to 0, a NaN or +inf logit with its token and position)."""
        handle = self._live("verify_chain")
        draft_array, draft_pointer, n_drafts = tokens_arg(drafts, "drafts")  # the arrays live until the call returns
        rows = np.asarray(logits)
        if rows.dtype != _F32 or not rows.flags.c_contiguous:
            rows = np.ascontiguousarray(rows, dtype=_F32)
        if rows.shape != (n_drafts + 1, self._vocab_size):
            raise ValueError(f"logits has shape {rows.shape}; it needs (len(drafts) + 1, vocab_size) = "
                             f"({n_drafts + 1}, {self._vocab_size})")
        supports = _supports(q_tokens, q_probabilities, n_drafts)
        if supports is None:
            offsets_pointer = tokens_pointer = probabilities_pointer = None
            n_q = 0
        else:
            offsets, tokens, probabilities = supports
            offsets_pointer, tokens_pointer = offsets.ctypes.data, tokens.ctypes.data
            probabilities_pointer, n_q = probabilities.ctypes.data, tokens.shape[0]
        status = lib.ngramspec_sampler_verify_chain(handle, rows.ctypes.data, rows.size, size_arg(position, "position"),
                                                    draft_pointer, n_drafts, offsets_pointer, tokens_pointer,
                                                    probabilities_pointer, n_q, self._accepted_address,
                                                    self._next_address)
        if status:
            raise_status(status)
        return int(self._accepted.value), int(self._next.value)

    def verify_tree(self, logits: npt.ArrayLike, position: int, tokens: TokensLike, parents: npt.ArrayLike,
                    q_tokens: SupportsLike = None, q_probabilities: SupportsLike = None, *,
                    q_offsets: OffsetsLike | None = None) -> tuple[npt.NDArray[np.uintp], int, npt.NDArray[np.uint32]]:
        """Verifies one sequence's tree pass (``ngramspec_sampler_verify_tree``); returns ``(path, next_token,
        model_tokens)``.

        The walk: from the root (entry 0, the sequence's last token), at entry e (node j is entry j + 1)
        and depth d, the token is chosen from row e at absolute position ``position + d`` (`position`: the
        sequence's length before the pass), verifying e's children in index order in the ``"rejection"``
        mode (each against its q, as :meth:`verify_chain` verifies a draft; the tokens keep the target's
        distribution p), plain sampling's token at that position in the ``"exact"`` mode; the walk goes
        on to the first child that carries the token and ends where none does. At temperature 0 it is the
        argmax path. Rows off the walk are not read.

        `path`: the entries walked (uintp), ``path[0] = 0``; ``len(path) - 1`` nodes were accepted,
        ``tokens[path[1:] - 1]``, and the sequence goes on with them and `next_token`, the token chosen at
        the last entry (``model_tokens[path]`` are all of them). `model_tokens` (uint32, one per entry):
        the token chosen after each entry walked, `next_token` at every other: the sequence's part of
        :meth:`BatchSpeculator.accept_trees`' `model_tokens`, whose `kept` is then `path` (as far as
        stops and max_new_tokens allow).

        `logits`: the target's tree pass, shape ``(len(tokens) + 1, vocab_size)`` (float32 and
        C-contiguous are read in place), row 0 the root's, row j + 1 node j's. `tokens` and `parents`: the
        nodes as :meth:`BatchSpeculator.propose_trees` gives one sequence's (``tokens[offsets[i]:offsets[i +
        1]]`` and the same range of `parents`): -1 for a child of the root, else an earlier node's index.

        q: what each node was drawn from, as :meth:`verify_chain` takes it (`q_tokens` and
        `q_probabilities` a ``(len(tokens), S)`` pair, or per-node sequences, or both None: every node
        chosen); or, with `q_offsets`, flat arrays as ``propose_trees(ids, with_q=True)`` returns them,
        node j's support ``q_tokens[q_offsets[j]:q_offsets[j + 1]]``: pass sequence i's part,
        ``q_offsets=q_offsets[offsets[i]:offsets[i + 1] + 1]``, with the call's whole `q_tokens` and
        `q_probabilities`.

        Raises ValueError naming the argument and its value (shapes, a parent that is neither -1 nor an
        earlier node, offsets, a probability negative or not finite, a support summing to 0, a NaN or +inf
        logit with its token and position)."""
        handle = self._live("verify_tree")
        node_array, node_pointer, n_nodes = tokens_arg(tokens, "tokens")  # the arrays live until the call returns
        parent_array = _parents(parents, n_nodes)
        rows = np.asarray(logits)
        if rows.dtype != _F32 or not rows.flags.c_contiguous:
            rows = np.ascontiguousarray(rows, dtype=_F32)
        if rows.shape != (n_nodes + 1, self._vocab_size):
            raise ValueError(f"logits has shape {rows.shape}; it needs (len(tokens) + 1, vocab_size) = "
                             f"({n_nodes + 1}, {self._vocab_size})")
        if q_offsets is not None:
            if q_tokens is None or q_probabilities is None:
                raise ValueError("q_offsets needs q_tokens and q_probabilities: the flat supports it indexes")
            offsets = sizes_arg(q_offsets, "q_offsets")
            if offsets.shape[0] != n_nodes + 1:
                raise ValueError(f"q_offsets has {offsets.shape[0]} entries; it needs len(tokens) + 1 = {n_nodes + 1}")
            flat_tokens = tokens_arg(q_tokens, "q_tokens")[0]  # type: ignore[arg-type]
            flat_probabilities = _floats_1d(q_probabilities, "q_probabilities")
            if flat_probabilities.shape[0] != flat_tokens.shape[0]:
                raise ValueError(f"q_probabilities has {flat_probabilities.shape[0]} values; it needs one per token of "
                                 f"q_tokens, {flat_tokens.shape[0]}")
            supports: Optional[tuple[np.ndarray, np.ndarray, np.ndarray]] = (offsets, flat_tokens, flat_probabilities)
        else:
            supports = _supports(q_tokens, q_probabilities, n_nodes)
        if supports is None:
            offsets_pointer = tokens_pointer = probabilities_pointer = None
            n_q = 0
        else:
            offsets, q_flat, probabilities = supports
            offsets_pointer, tokens_pointer = offsets.ctypes.data, q_flat.ctypes.data
            probabilities_pointer, n_q = probabilities.ctypes.data, q_flat.shape[0]
        model_tokens = np.empty(n_nodes + 1, np.uint32)
        path = np.empty(n_nodes + 1, np.uintp)
        status = lib.ngramspec_sampler_verify_tree(handle, rows.ctypes.data, rows.size, size_arg(position, "position"),
                                                   node_pointer, parent_array.ctypes.data, n_nodes, offsets_pointer,
                                                   tokens_pointer, probabilities_pointer, n_q,
                                                   model_tokens.ctypes.data, path.ctypes.data, self._accepted_address,
                                                   self._next_address)
        if status:
            raise_status(status)
        return path[: self._accepted.value + 1].copy(), int(self._next.value), model_tokens

    def close(self) -> None:
        """Frees the native sampler now (also done when the object is collected); later calls raise ValueError."""
        handle, self._handle = self._handle, None
        if handle is not None:
            lib.ngramspec_sampler_free(handle)


def _options(temperature: float, top_k: int, top_p: float, min_p: float, seed: int,
             mode: SamplingModeName) -> SamplingOptions:
    """The C options; the library checks the values (and names them), Python the types and the mode."""
    if mode not in _MODES:
        raise ValueError(f"mode = {mode!r} is invalid: it must be 'exact' or 'rejection'")
    options = SamplingOptions()
    status = lib.ngramspec_sampling_options_init(ctypes.byref(options), ctypes.sizeof(options))
    if status:
        raise_status(status)
    for name, value in (("temperature", temperature), ("top_p", top_p), ("min_p", min_p)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name} must be a number, not {type(value).__name__}")
        float32_arg(value, name)
    options.temperature = float(temperature)
    options.top_k = size_arg(top_k, "top_k")
    options.top_p = float(top_p)
    options.min_p = float(min_p)
    options.seed = size_arg(seed, "seed")
    options.mode = _MODES[mode]
    return options


def _floats_1d(values: Any, what: str) -> np.ndarray:
    """`values` as a C-contiguous 1-D float32 array; another shape is refused by name, not flattened."""
    array = np.ascontiguousarray(values, dtype=_F32)
    if array.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional; it has shape {array.shape}")
    return array


def _parents(parents: npt.ArrayLike, n_nodes: int) -> np.ndarray:
    """The parents as the int32 array the library reads; the library names a value that makes no tree."""
    array = np.asarray(parents)
    if array.ndim != 1 or array.shape[0] != n_nodes:
        raise ValueError(f"parents has shape {array.shape}; it needs one per node, ({n_nodes},)")
    if n_nodes == 0:
        return np.empty(0, np.int32)
    if array.dtype.kind not in "iu":
        raise TypeError(f"parents must hold integers; it holds {array.dtype}")
    low, high = int(array.min()), int(array.max())
    if low < -(2**31) or high >= 2**31:
        bad = low if low < -(2**31) else high
        raise ValueError(f"parents holds {bad}; a parent is -1 (the root) or an earlier node's index")
    return np.ascontiguousarray(array, dtype=np.int32)


def _supports(q_tokens: SupportsLike, q_probabilities: SupportsLike,
              n_drafts: int) -> Optional[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(offsets, tokens, probabilities) as verify_chain passes them, or None when every draft is chosen."""
    if q_tokens is None and q_probabilities is None:
        return None
    if q_tokens is None or q_probabilities is None:
        missing = "q_tokens" if q_tokens is None else "q_probabilities"
        raise ValueError(f"{missing} is None but the other is not; give both (each draft's support and its "
                         f"probabilities) or neither (every draft chosen)")
    tokens_2d = np.asarray(q_tokens) if isinstance(q_tokens, np.ndarray) else None
    if tokens_2d is not None and tokens_2d.ndim == 2:
        probabilities = np.ascontiguousarray(q_probabilities, dtype=_F32)
        if probabilities.shape != tokens_2d.shape:
            raise ValueError(f"q_probabilities has shape {probabilities.shape}; it needs q_tokens' {tokens_2d.shape}")
        if tokens_2d.shape[0] != n_drafts:
            raise ValueError(f"q_tokens has {tokens_2d.shape[0]} rows; it needs one per draft, {n_drafts}")
        width = tokens_2d.shape[1]
        tokens = tokens_arg(np.ascontiguousarray(tokens_2d).reshape(-1), "q_tokens")[0]
        offsets = np.arange(n_drafts + 1, dtype=np.uintp) * np.uintp(width)
        return offsets, tokens, probabilities.reshape(-1)
    token_rows, probability_rows = list(q_tokens), list(q_probabilities)
    if len(token_rows) != n_drafts or len(probability_rows) != n_drafts:
        raise ValueError(f"q_tokens and q_probabilities have {len(token_rows)} and {len(probability_rows)} "
                         f"supports; they need one per draft, {n_drafts}")
    token_parts = [tokens_arg(t, f"q_tokens[{i}]")[0] for i, t in enumerate(token_rows)]
    probability_parts = [_floats_1d(p, f"q_probabilities[{i}]") for i, p in enumerate(probability_rows)]
    for i, (t, p) in enumerate(zip(token_parts, probability_parts)):
        if t.shape[0] != p.shape[0]:
            raise ValueError(f"q_tokens[{i}] has {t.shape[0]} tokens and q_probabilities[{i}] {p.shape[0]} "
                             f"probabilities; they need as many")
    offsets = np.zeros(n_drafts + 1, dtype=np.uintp)
    for i, t in enumerate(token_parts):
        offsets[i + 1] = offsets[i] + t.shape[0]
    tokens = np.concatenate([t.astype(np.uint32, copy=False) for t in token_parts]) if token_parts \
        else np.empty(0, np.uint32)
    probabilities = np.concatenate(probability_parts) if probability_parts else np.empty(0, _F32)
    return offsets, np.ascontiguousarray(tokens), np.ascontiguousarray(probabilities)
