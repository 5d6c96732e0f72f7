"""The corpora drafters copy from: SharedCorpus (earlier requests' outputs, live) and MappedCorpus
(a corpus file mapped read-only)."""

from __future__ import annotations

import ctypes
import os
from typing import Callable, Literal, NamedTuple, Union

import numpy as np
import numpy.typing as npt

from ._closable import Closable
from ._arrays import TokensLike, size_arg, tokens_arg
from ._errors import raise_status
from ._native import lib

__all__ = ["SharedCorpus", "MappedCorpus", "CorpusDraft", "CorpusPreferenceName", "PathLike", "create_attached",
           "preference_arg"]

#: A file's path: a str, bytes (passed to the operating system as they are) or an os.PathLike.
PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

#: Which corpus drafts when a live corpus and a corpus file both match a sequence's end:
#: ``"longer_match"`` (the one whose match is longer; the live corpus on a tie), ``"live"`` (the
#: live corpus whenever it drafts) or ``"file"`` (the file whenever it matches).
CorpusPreferenceName = Literal["longer_match", "live", "file"]

_PREFERENCES = {"longer_match": 0, "live": 1, "file": 2}  # ngramspec_corpus_preference
_INT64 = (-(1 << 63), (1 << 63) - 1)


class CorpusDraft(NamedTuple):
    """What a corpus's :meth:`~SharedCorpus.draft` found."""

    #: The drafted tokens (a new uint32 array; empty when nothing matched).
    tokens: npt.NDArray[np.uint32]
    #: Tokens of the context that matched the corpus (0: no match).
    match_length: int


class _Attachable(Closable):
    """A native corpus that drafters and batches register with: :meth:`close` ends this object's use,
    and the native object is freed once none of them uses it any more."""

    _native: int | None = None  # the native handle, until freed
    _handle: int | None = None  # what this object's own calls pass: None once closed
    _kind = ""
    _noun = ""
    _free: Callable[[int], None]

    def _start(self, native: int) -> None:
        self._native = native
        self._handle = native
        self._users = 0
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Ends this object's use of the native object, which is freed now, or when the last drafter
        or batch using it is closed or collected. Calling it again does nothing."""
        self._closed = True
        self._handle = None
        self._release()

    def _draft(self, function: Callable[..., int], context: TokensLike, room: int) -> CorpusDraft:
        handle = self._live("draft")
        array, pointer, n = tokens_arg(context, "context")
        out = np.empty(size_arg(room, "room"), np.uint32)
        # Out-parameters of this call's own: threads may draft from one corpus at once.
        count = ctypes.c_size_t(0)
        length = ctypes.c_size_t(0)
        status = function(handle, pointer, n, out.ctypes.data, out.shape[0], ctypes.byref(count),
                          ctypes.byref(length))
        if status:
            raise_status(status)
        return CorpusDraft(out[: count.value], int(length.value))

    # Drafters and batches that read it register here, and free it with them.
    def _attach(self) -> int:
        if self._closed or self._native is None:
            raise ValueError(f"ngramspec.{self._kind}: the {self._noun} is closed")
        self._users += 1
        return self._native

    def _detach(self) -> None:
        self._users -= 1
        self._release()

    def _release(self) -> None:
        if getattr(self, "_closed", True) and getattr(self, "_users", 0) == 0 and self._native is not None:
            native, self._native = self._native, None
            type(self)._free(native)


def _path_arg(path: PathLike, what: str = "path") -> tuple[str, bytes]:
    """(the path as text, the bytes passed to the library) for a str, bytes or os.PathLike."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"{what} must be a str, bytes or os.PathLike, not {type(path).__name__}")
    native = os.fsencode(path)
    if b"\0" in native:
        raise ValueError(f"{what} {os.fsdecode(path)!r} contains a NUL character")
    return os.fsdecode(path), native


class SharedCorpus(_Attachable):
    """A bounded corpus of earlier requests' outputs that drafters consult (``ngramspec_corpus``).

    Give it to :class:`MatchDrafter` (``corpus=``) or :class:`BatchSpeculator` (``corpus=``): a
    batch appends each sequence's output to it on :meth:`BatchSpeculator.finish`, and every
    drafter reading it can copy text that an earlier request produced. Once full, appending evicts
    the oldest tokens. :meth:`save` writes it to a corpus file, which :meth:`load` reads back and
    :class:`MappedCorpus` maps read-only (into any number of processes).

    Threads: any number of threads may draft from it while one appends (the C++ SharedCorpus
    locks); the native calls release the GIL.

    Lifetime: drafters and batches that use the corpus hold a reference to it, and
    :meth:`close` (or leaving a ``with`` block) frees the native corpus only once none of them
    uses it any more; a closed corpus takes no more calls of its own.
    """

    _kind = "SharedCorpus"
    _noun = "corpus"
    _free = staticmethod(lib.ngramspec_corpus_free)

    def __init__(self, max_bytes: int) -> None:
        """A corpus of at most `max_bytes` of memory; its capacity is the largest power of two of
        tokens that fits. Raises ``ValueError`` (the library's message) when that is too small."""
        out = ctypes.c_void_p()
        status = lib.ngramspec_corpus_create(size_arg(max_bytes, "max_bytes"), ctypes.byref(out))
        if status:
            raise_status(status)
        self._start(out.value)

    def append(self, tokens: TokensLike, *, stamp: int | None = None) -> None:
        """Appends one record (a finished request's output). No copy for uint32/int32 arrays.

        `stamp`: the record's time, any int64 that orders records in time (None: the time now, in
        nanoseconds since the Unix epoch). Stamps only increase: one not above the last record's
        is raised to one more than it. An empty record changes nothing."""
        handle = self._live("append")
        array, pointer, count = tokens_arg(tokens)
        if stamp is None:
            status = lib.ngramspec_corpus_append(handle, pointer, count)
        else:
            status = lib.ngramspec_corpus_append_stamped(handle, pointer, count, _stamp_arg(stamp))
        if status:
            raise_status(status)

    def clear(self) -> None:
        """Removes every record."""
        status = lib.ngramspec_corpus_clear(self._live("clear"))
        if status:
            raise_status(status)

    def draft(self, context: TokensLike, room: int = 8) -> CorpusDraft:
        """What followed the most recent occurrence in the corpus of the last 3 tokens of `context`
        (else its last 2, else its last 1; a sequence's last tokens, oldest first; only the last 64
        are read): up to `room` tokens, and how many tokens of the context matched, measured
        backwards from that occurrence up to 64 (so more than 3). Finds nothing while another
        thread appends."""
        return self._draft(lib.ngramspec_corpus_draft, context, room)

    def save(self, path: PathLike) -> None:
        """Writes the records held, with their stamps, to a corpus file at `path`, replacing it
        atomically. Raises :class:`CorpusFileError` (naming the file and the problem) when the file
        cannot be written."""
        handle = self._live("save")
        _, native = _path_arg(path)
        status = lib.ngramspec_corpus_save(handle, native)
        if status:
            raise_status(status)

    def load(self, path: PathLike, *, verify_checksums: bool = True) -> None:
        """Replaces what the corpus holds with the records of the corpus file at `path` (the most
        recent that fit its capacity), stamps kept. Raises :class:`CorpusFileError` (naming the
        file, the section and the problem), the corpus unchanged, when the file cannot be read.
        Every section's checksum is verified first (every byte read once), so a file damaged since
        it was written is refused and a later :meth:`save` cannot write its damage out under fresh
        checksums; ``verify_checksums=False`` trusts the body (a file this process just wrote) and
        skips the checksums. Either way the records, and the tokens of the records kept, are checked
        as :meth:`MappedCorpus.verify` checks them, so a record table written wrong, or a token
        outside the file's vocabulary, under matching checksums is refused, naming it."""
        handle = self._live("load")
        if not isinstance(verify_checksums, bool):
            raise TypeError(f"verify_checksums must be a bool, not {type(verify_checksums).__name__}")
        _, native = _path_arg(path)
        load = lib.ngramspec_corpus_load if verify_checksums else lib.ngramspec_corpus_load_trusted
        status = load(handle, native)
        if status:
            raise_status(status)

    @property
    def size(self) -> int:
        """Tokens held (0 once closed)."""
        return int(lib.ngramspec_corpus_size(self._handle))

    @property
    def records(self) -> int:
        """Records appended since creation (or the last clear or load)."""
        return int(lib.ngramspec_corpus_records(self._handle))

    @property
    def last_stamp(self) -> int:
        """The stamp of the last record appended (0 when none)."""
        return int(lib.ngramspec_corpus_last_stamp(self._handle))

    @property
    def capacity_tokens(self) -> int:
        """The most tokens it holds before it evicts the oldest."""
        return int(lib.ngramspec_corpus_capacity_tokens(self._handle))

    @property
    def memory_bytes(self) -> int:
        """Bytes it holds."""
        return int(lib.ngramspec_corpus_memory_bytes(self._handle))

    def __repr__(self) -> str:
        if self._closed:
            return "<ngramspec.SharedCorpus closed>"
        return (f"<ngramspec.SharedCorpus {self.size}/{self.capacity_tokens} tokens, {self.records} records, "
                f"{self.memory_bytes} bytes>")


class MappedCorpus(_Attachable):
    """A corpus file mapped read-only (``ngramspec_corpus_file``): text built ahead of time (a code
    base, documentation, earlier outputs: :meth:`SharedCorpus.save` or the ``ngramspec-corpus``
    tool write it) that drafters consult beside, or instead of, a live :class:`SharedCorpus`.

    Give it to :class:`MatchDrafter` or :class:`BatchSpeculator` as ``corpus_file=``. Mapping reads
    the file's header and checks its structure, nothing more: it takes microseconds whatever the
    file's size, and any number of processes mapping one file share its pages. :meth:`verify`
    reads every byte. It drafts exactly what a live corpus holding the same records drafts.

    Threads: immutable; any number of threads may use it at once.

    Lifetime: as :class:`SharedCorpus`: drafters and batches that consult it keep the mapping
    until they are done with it. Writing a new file over the path (as :meth:`SharedCorpus.save`
    does, by a rename) leaves the mapping on the old contents.
    """

    _kind = "MappedCorpus"
    _noun = "corpus file"
    _free = staticmethod(lib.ngramspec_corpus_file_close)

    def __init__(self, path: PathLike) -> None:
        """Maps the corpus file at `path` (a str, bytes or os.PathLike). Raises
        :class:`CorpusFileError` naming the file, the section and the problem when it cannot be
        opened or is not a well-formed corpus file of this format version."""
        text, native = _path_arg(path)
        out = ctypes.c_void_p()
        status = lib.ngramspec_corpus_file_open(native, ctypes.byref(out))
        if status:
            raise_status(status)
        self._path = text
        self._start(out.value)

    def draft(self, context: TokensLike, room: int = 8) -> CorpusDraft:
        """As :meth:`SharedCorpus.draft`: what a live corpus holding the same records would draft."""
        return self._draft(lib.ngramspec_corpus_file_draft, context, room)

    def verify(self) -> None:
        """Reads every byte: each section's checksum, then the structure. Raises
        :class:`CorpusFileError` naming the section and what is wrong when the file was corrupted
        since it was written. About a second per GiB."""
        status = lib.ngramspec_corpus_file_verify(self._live("verify"))
        if status:
            raise_status(status)

    def verify_checksums(self) -> None:
        """Each section's checksum alone, every byte read once at memory speed (what
        :meth:`SharedCorpus.load` checks). Raises :class:`CorpusFileError` naming the section whose
        checksum does not match."""
        status = lib.ngramspec_corpus_file_verify_checksums(self._live("verify_checksums"))
        if status:
            raise_status(status)

    @property
    def vocab_size(self) -> int:
        """The vocabulary size the file records (0: unknown, as in a file of format version 1). A
        drafter or batch given another ``vocab_size`` refuses the file."""
        return int(lib.ngramspec_corpus_file_vocab_size(self._handle))

    @property
    def tokenizer_fingerprint(self) -> int:
        """The tokenizer fingerprint the file records (0: unset). A drafter or batch given another
        ``tokenizer_fingerprint`` refuses the file."""
        return int(lib.ngramspec_corpus_file_tokenizer_fingerprint(self._handle))

    @property
    def path(self) -> str:
        """The file mapped, as given (decoded with the file system's encoding)."""
        return self._path

    @property
    def size(self) -> int:
        """Tokens held (0 once closed)."""
        return int(lib.ngramspec_corpus_file_size(self._handle))

    def __len__(self) -> int:
        """Tokens held, as :attr:`size`."""
        return self.size

    @property
    def records(self) -> int:
        """Records held (the oldest may be the end of a longer one, cut by a byte cap)."""
        return int(lib.ngramspec_corpus_file_records(self._handle))

    @property
    def file_bytes(self) -> int:
        """The file's size in bytes."""
        return int(lib.ngramspec_corpus_file_bytes(self._handle))

    @property
    def first_stamp(self) -> int:
        """The stamp of the oldest record (0 when empty)."""
        return int(lib.ngramspec_corpus_file_first_stamp(self._handle))

    @property
    def last_stamp(self) -> int:
        """The stamp of the newest record (0 when empty)."""
        return int(lib.ngramspec_corpus_file_last_stamp(self._handle))

    def __repr__(self) -> str:
        if self._closed:
            return f"<ngramspec.MappedCorpus {self._path!r} closed>"
        return (f"<ngramspec.MappedCorpus {self._path!r}: {self.size} tokens, {self.records} records, "
                f"{self.file_bytes} bytes>")


def _stamp_arg(stamp: object) -> int:
    if isinstance(stamp, bool) or not isinstance(stamp, (int, np.integer)):
        raise TypeError(f"stamp must be an int, not {type(stamp).__name__}")
    value = int(stamp)
    if not _INT64[0] <= value <= _INT64[1]:
        raise ValueError(f"stamp = {value} is invalid: stamps are 64-bit signed integers")
    return value


def preference_arg(preference: object) -> int:
    """The ngramspec_corpus_preference for a corpus_preference keyword."""
    if not isinstance(preference, str):
        raise TypeError(f"corpus_preference must be a str ({', '.join(map(repr, _PREFERENCES))}), not "
                        f"{type(preference).__name__}")
    try:
        return _PREFERENCES[preference]
    except KeyError:
        raise ValueError(f"corpus_preference = {preference!r} is invalid: it must be "
                         f"{', '.join(map(repr, _PREFERENCES))}") from None


def create_attached(corpus: SharedCorpus | None, corpus_file: MappedCorpus | None,
                    create: Callable[[int | None, int | None, ctypes.c_void_p], int]) -> int:
    """Makes a native object that reads `corpus` and `corpus_file` (None: none): checks their types,
    registers the new user with them, and calls ``create(native_corpus, native_file, out)``, which
    returns the C status and writes the handle to `out`. A failed create unregisters again and
    raises its error; returns the handle."""
    if corpus is not None and not isinstance(corpus, SharedCorpus):
        raise TypeError(f"corpus must be a SharedCorpus or None, not {type(corpus).__name__}")
    if corpus_file is not None and not isinstance(corpus_file, MappedCorpus):
        raise TypeError(f"corpus_file must be a MappedCorpus or None, not {type(corpus_file).__name__}")
    native_corpus = corpus._attach() if corpus is not None else None
    try:
        native_file = corpus_file._attach() if corpus_file is not None else None
    except BaseException:
        if corpus is not None:
            corpus._detach()
        raise
    out = ctypes.c_void_p()
    status = create(native_corpus, native_file, out)
    if status:
        if corpus is not None:
            corpus._detach()
        if corpus_file is not None:
            corpus_file._detach()
        raise_status(status)
    return out.value
