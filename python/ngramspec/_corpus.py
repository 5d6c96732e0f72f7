"""SharedCorpus: the outputs of earlier requests, which drafters copy from."""

from __future__ import annotations

import ctypes
from typing import Callable

from ._closable import Closable
from ._arrays import TokensLike, size_arg, tokens_arg
from ._errors import raise_status
from ._native import lib

__all__ = ["SharedCorpus"]


class SharedCorpus(Closable):
    """A bounded corpus of earlier requests' outputs that drafters consult (``ngramspec_corpus``).

    Give it to :class:`MatchDrafter` (``corpus=``) or :class:`BatchSpeculator` (``corpus=``): a
    batch appends each sequence's output to it on :meth:`BatchSpeculator.finish`, and every
    drafter reading it can copy text that an earlier request produced. Once full, appending evicts
    the oldest tokens.

    Threads: any number of threads may draft from it while one appends (the C++ SharedCorpus
    locks); the native calls release the GIL.

    Lifetime: drafters and batches that use the corpus hold a reference to it, and
    :meth:`close` (or leaving a ``with`` block) frees the native corpus only once none of them
    uses it any more; a closed corpus takes no more calls of its own.
    """

    _native: int | None = None  # the ngramspec_corpus*, until freed
    _handle: int | None = None  # what this object's own calls pass: None once closed

    def __init__(self, max_bytes: int) -> None:
        """A corpus of at most `max_bytes` of memory; its capacity is the largest power of two of
        tokens that fits. Raises ``ValueError`` (the library's message) when that is too small."""
        out = ctypes.c_void_p()
        status = lib.ngramspec_corpus_create(size_arg(max_bytes, "max_bytes"), ctypes.byref(out))
        if status:
            raise_status(status)
        self._native = out.value
        self._handle = out.value
        self._users = 0
        self._closed = False

    def append(self, tokens: TokensLike) -> None:
        """Appends one record (a finished request's output). No copy for uint32/int32 arrays."""
        array, pointer, count = tokens_arg(tokens)
        status = lib.ngramspec_corpus_append(self._handle, pointer, count)
        if status:
            raise_status(status)

    def clear(self) -> None:
        """Removes every record."""
        status = lib.ngramspec_corpus_clear(self._handle)
        if status:
            raise_status(status)

    @property
    def size(self) -> int:
        """Tokens held (0 once closed)."""
        return int(lib.ngramspec_corpus_size(self._handle))

    @property
    def records(self) -> int:
        """Records appended since creation (or the last clear)."""
        return int(lib.ngramspec_corpus_records(self._handle))

    @property
    def capacity_tokens(self) -> int:
        """The most tokens it holds before it evicts the oldest."""
        return int(lib.ngramspec_corpus_capacity_tokens(self._handle))

    @property
    def memory_bytes(self) -> int:
        """Bytes it holds."""
        return int(lib.ngramspec_corpus_memory_bytes(self._handle))

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Ends this object's use of the corpus; the native corpus is freed now, or when the last
        drafter or batch using it is closed or collected. Calling it again does nothing."""
        self._closed = True
        self._handle = None
        self._release()

    # Drafters and batches that read the corpus register here, and free it with them.
    def _attach(self) -> int:
        if self._closed or self._native is None:
            raise ValueError("ngramspec.SharedCorpus: the corpus is closed")
        self._users += 1
        return self._native

    def _detach(self) -> None:
        self._users -= 1
        self._release()

    def _release(self) -> None:
        if self._closed and self._users == 0 and self._native is not None:
            native, self._native = self._native, None
            lib.ngramspec_corpus_free(native)

    def __repr__(self) -> str:
        if self._closed:
            return "<ngramspec.SharedCorpus closed>"
        return (f"<ngramspec.SharedCorpus {self.size}/{self.capacity_tokens} tokens, {self.records} records, "
                f"{self.memory_bytes} bytes>")


def create_attached(corpus: SharedCorpus | None, create: Callable[[int | None, ctypes.c_void_p], int]) -> int:
    """Makes a native object that reads `corpus` (None: none): checks its type, registers the new
    user with it, and calls ``create(native_corpus, out)``, which returns the C status and writes
    the handle to `out`. A failed create unregisters again and raises its error; returns the handle."""
    if corpus is not None and not isinstance(corpus, SharedCorpus):
        raise TypeError(f"corpus must be a SharedCorpus or None, not {type(corpus).__name__}")
    native_corpus = corpus._attach() if corpus is not None else None
    out = ctypes.c_void_p()
    status = create(native_corpus, out)
    if status:
        if corpus is not None:
            corpus._detach()
        raise_status(status)
    return out.value
