"""The drafters: MatchDrafter (the default) and NGramPredictor, one sequence each."""

from __future__ import annotations

import ctypes
from typing import Any, Callable

import numpy as np
import numpy.typing as npt

from ._closable import Closable
from ._arrays import TokensLike, out_floats, out_tokens, size_arg, tokens_arg
from ._corpus import CorpusPreferenceName, MappedCorpus, SharedCorpus, create_attached, preference_arg
from ._errors import raise_status
from ._native import MatchConfig, NgramConfig, lib

__all__ = ["MatchDrafter", "NGramPredictor"]

# MatchConfig::index_capacity's default (test_drafters checks it is the library's).
_DEFAULT_INDEX_CAPACITY = 8192


class _Drafter(Closable):
    """What both drafters share: a native handle, update/predict/reset, and freeing."""

    _handle: int | None = None
    _corpus: SharedCorpus | None = None
    _corpus_file: MappedCorpus | None = None
    _name = ""
    _free: Callable[[int], None]
    _update: Callable[..., int]
    _predict: Callable[..., int]
    _reset: Callable[[int | None], int]
    _memory: Callable[[int | None], int]

    def _start(self, handle: int) -> None:
        self._handle = handle
        self._count = ctypes.c_size_t(0)
        self._count_address = ctypes.addressof(self._count)

    def update(self, tokens: TokensLike) -> None:
        """Observes `tokens` in order (a prompt, or the tokens a pass emitted).

        A C-contiguous uint32 or int32 array is read in place; lists and other arrays are
        converted first."""
        array, pointer, count = tokens_arg(tokens)
        status = self._update(self._live("update"), pointer, count)
        if status:
            raise_status(status)

    def predict(self, max_drafts: int = 4) -> npt.NDArray[np.uint32]:
        """Up to `max_drafts` drafted tokens to follow what it observed (a new uint32 array; may be empty)."""
        out = np.empty(size_arg(max_drafts, "max_drafts"), np.uint32)
        status = self._predict(self._live("predict"), out.ctypes.data, out.shape[0], None, self._count_address)
        if status:
            raise_status(status)
        return out[: self._count.value]

    def predict_with_probabilities(self, max_drafts: int = 4) -> tuple[npt.NDArray[np.uint32],
                                                                        npt.NDArray[np.float32]]:
        """(drafts, probabilities): up to `max_drafts` drafts and, for each j, the estimated chance
        that drafts 0..j are all accepted (non-increasing). New arrays of equal length."""
        capacity = size_arg(max_drafts, "max_drafts")
        out = np.empty(capacity, np.uint32)
        probabilities = np.empty(capacity, np.float32)
        status = self._predict(self._live("predict_with_probabilities"), out.ctypes.data, capacity,
                               probabilities.ctypes.data, self._count_address)
        if status:
            raise_status(status)
        n = self._count.value
        return out[:n], probabilities[:n]

    def predict_into(self, out: npt.NDArray[Any], probabilities: npt.NDArray[np.float32] | None = None) -> int:
        """Writes up to ``out.size`` drafts into `out` (uint32 or int32, C-contiguous, writable) and,
        when given, their probabilities into `probabilities` (float32, at least ``out.size`` long);
        returns how many it wrote. No copy and no allocation: the arrays are filled in place."""
        out = out_tokens(out)
        capacity = out.size
        if probabilities is None:
            probability_pointer = None
        else:
            probabilities = out_floats(probabilities)
            if probabilities.size < capacity:
                raise ValueError(f"probabilities has room for {probabilities.size} values; out has {capacity}")
            probability_pointer = probabilities.ctypes.data
        status = self._predict(self._live("predict_into"), out.ctypes.data, capacity, probability_pointer,
                               self._count_address)
        if status:
            raise_status(status)
        return self._count.value

    def reset(self) -> None:
        """Forgets everything observed (its memory stays allocated, for the next sequence)."""
        status = self._reset(self._live("reset"))
        if status:
            raise_status(status)

    @property
    def memory_bytes(self) -> int:
        """Bytes it holds (fixed at creation; 0 once closed)."""
        return int(self._memory(self._handle))

    @property
    def corpus(self) -> SharedCorpus | None:
        """The corpus it consults, or None."""
        return self._corpus

    @property
    def corpus_file(self) -> MappedCorpus | None:
        """The corpus file it consults, or None."""
        return self._corpus_file

    def close(self) -> None:
        """Frees the native drafter now (also done when the object is collected); later calls raise ValueError."""
        handle, self._handle = self._handle, None
        if handle is not None:
            type(self)._free(handle)
            corpus, self._corpus = self._corpus, None
            if corpus is not None:
                corpus._detach()
            corpus_file, self._corpus_file = self._corpus_file, None
            if corpus_file is not None:
                corpus_file._detach()

    def __repr__(self) -> str:
        if self._handle is None:
            return f"<ngramspec.{self._name} closed>"
        return f"<ngramspec.{self._name} {self.memory_bytes} bytes>"


class MatchDrafter(_Drafter):
    """The default drafter (``ngramspec_match_drafter``): copies the continuation of the longest
    earlier match of the recent tokens anywhere in the context (and the corpus, when given), else
    drafts from n-gram counts over a sliding window; a confidence gate drops unlikely drafts.

    One drafter follows one sequence: :meth:`update` it with the prompt, then with the tokens each
    pass emits, and :meth:`predict` the next drafts. Drive it from one thread at a time; separate
    drafters run in parallel on separate threads (each native call releases the GIL).
    """

    _name = "MatchDrafter"
    _free = staticmethod(lib.ngramspec_match_drafter_free)
    _update = staticmethod(lib.ngramspec_match_drafter_update)
    _predict = staticmethod(lib.ngramspec_match_drafter_predict)
    _reset = staticmethod(lib.ngramspec_match_drafter_reset)
    _memory = staticmethod(lib.ngramspec_match_drafter_memory_bytes)

    def __init__(self, *, index_capacity: int = _DEFAULT_INDEX_CAPACITY, copy_min_match: int = 2,
                 count_max_order: int = 3, count_window: int = 2048, min_confidence: float = 0.03,
                 corpus: SharedCorpus | None = None, corpus_file: MappedCorpus | None = None,
                 corpus_preference: CorpusPreferenceName = "longer_match", vocab_size: int = 0,
                 tokenizer_fingerprint: int = 0, cap: int | None = None) -> None:
        """A drafter whose match index holds at most `index_capacity` tokens (the sequence's first);
        it copies after a match of at least `copy_min_match` tokens, else counts n-grams of orders
        2..`count_max_order` (2 to 4) over the last `count_window` tokens (0: index_capacity), and
        drafts only while the estimated chance of acceptance is at least `min_confidence` (in
        [0, 1); 0: no gate). With `corpus` it also
        copies from earlier requests' outputs, and with `corpus_file` from a corpus file; when both
        match, `corpus_preference` chooses: ``"longer_match"`` (the longer match; the live corpus on
        a tie), ``"live"`` or ``"file"``. `vocab_size`: the model's vocabulary (0, the default:
        unknown); drafts are cut at their first token not below it, the tokens cut counted in
        :attr:`out_of_vocabulary`, and a `corpus_file` that records another vocabulary size is
        refused. `tokenizer_fingerprint` (0, the default: unset): a number naming the tokenizer; a
        `corpus_file` that records another is refused. `cap` (None, the default: not given) is the
        former name of `index_capacity`, still accepted: it gives the value when `index_capacity` is
        left at its default, and the two given different values are a ValueError. Raises ValueError
        (the library's message) for an invalid setting, :class:`CorpusFileError` naming the file and
        both values for a file of another vocabulary."""
        # The former name gives the value unless index_capacity is off its default too.
        capacity: dict[str, Any] = {"index_capacity": index_capacity}
        if cap is not None:
            capacity = {"cap": cap} if index_capacity == _DEFAULT_INDEX_CAPACITY else {**capacity, "cap": cap}
        config = match_config(**capacity, copy_min_match=copy_min_match, count_max_order=count_max_order,
                              count_window=count_window, min_confidence=min_confidence)
        preference = preference_arg(corpus_preference)
        vocab = size_arg(vocab_size, "vocab_size")
        fingerprint = size_arg(tokenizer_fingerprint, "tokenizer_fingerprint")
        handle = create_attached(corpus, corpus_file, lambda native_corpus, native_file, out:
                                 lib.ngramspec_match_drafter_create_vocab(ctypes.byref(config), native_corpus,
                                                                          native_file, preference, vocab, fingerprint,
                                                                          ctypes.byref(out)))
        self._corpus = corpus
        self._corpus_file = corpus_file
        self._corpus_preference = corpus_preference
        self._start(handle)

    @property
    def corpus_preference(self) -> CorpusPreferenceName:
        """Which corpus drafts when the live corpus and the corpus file both match."""
        return self._corpus_preference

    @property
    def out_of_vocabulary(self) -> int:
        """Draft tokens dropped since creation for lying outside `vocab_size` (the first such token
        of a draft and every one after it)."""
        return int(lib.ngramspec_match_drafter_out_of_vocabulary(self._handle))

    def restart(self) -> None:
        """Begins a new sequence of the same workload (a slot's next request): forgets the sequence as
        ``reset()`` does, but keeps how the gate's estimates have fared on the text served."""
        status = lib.ngramspec_match_drafter_restart(self._live("restart"))
        if status != 0:
            raise_status(status)


class NGramPredictor(_Drafter):
    """A drafter from n-gram counts over a sliding window of recent tokens (``ngramspec_ngram_predictor``):
    the most frequent continuation of the longest context seen, from `max_order` down to
    `min_order`. Same methods as :class:`MatchDrafter`; one thread at a time per predictor.
    """

    _name = "NGramPredictor"
    _free = staticmethod(lib.ngramspec_ngram_predictor_free)
    _update = staticmethod(lib.ngramspec_ngram_predictor_update)
    _predict = staticmethod(lib.ngramspec_ngram_predictor_predict)
    _reset = staticmethod(lib.ngramspec_ngram_predictor_reset)
    _memory = staticmethod(lib.ngramspec_ngram_predictor_memory_bytes)

    def __init__(self, *, min_order: int = 2, max_order: int = 4, window: int = 512) -> None:
        """A predictor of n-grams of `min_order` to `max_order` tokens (the predicted one included)
        over the last `window` tokens. Raises ValueError (the library's message) for an invalid
        setting."""
        config = NgramConfig(size_arg(min_order, "min_order"), size_arg(max_order, "max_order"),
                             size_arg(window, "window"))
        out = ctypes.c_void_p()
        status = lib.ngramspec_ngram_predictor_create(ctypes.byref(config), ctypes.byref(out))
        if status:
            raise_status(status)
        self._start(out.value)


_MATCH_KEYS = ("index_capacity", "copy_min_match", "count_max_order", "count_window", "min_confidence")
# Former names still accepted, and the settings they name.
_MATCH_FORMER_KEYS = {"cap": "index_capacity"}


def match_config(**settings: Any) -> MatchConfig:
    """An ngramspec_match_config: the library's defaults with `settings` (MatchDrafter's keywords) over them.
    A former name (``cap`` for ``index_capacity``) stands for its setting; the two given different
    values are a ValueError naming both."""
    unknown = sorted(set(settings) - set(_MATCH_KEYS) - set(_MATCH_FORMER_KEYS))
    if unknown:
        raise TypeError(f"unknown MatchDrafter setting {unknown[0]!r}; the settings are {', '.join(_MATCH_KEYS)} "
                        f"(and {', '.join(f'{old} for {new}' for old, new in _MATCH_FORMER_KEYS.items())})")
    for former, key in _MATCH_FORMER_KEYS.items():
        if former not in settings:
            continue
        value = size_arg(settings.pop(former), former)
        if key in settings and settings[key] != value:
            raise ValueError(f"MatchDrafter: {former} = {value} and {key} = {settings[key]!r} disagree: "
                             f"{former} is the former name of {key}; give one of them")
        settings[key] = value
    config = lib.ngramspec_match_config_default()
    for key, value in settings.items():
        if key == "min_confidence":
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
                raise TypeError(f"min_confidence must be a float, not {type(value).__name__}")
            config.min_confidence = float(value)
        else:
            setattr(config, key, size_arg(value, key))
    return config
