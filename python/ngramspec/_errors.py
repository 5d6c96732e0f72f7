"""The exceptions a failing C call becomes."""

from __future__ import annotations

from typing import NoReturn

from ._native import lib

__all__ = ["NgramspecError", "CorpusFileError", "raise_status"]

_INVALID_ARGUMENT = 1
_OUT_OF_MEMORY = 2
_CORPUS_FILE = 4


class NgramspecError(RuntimeError):
    """An internal error of the native library (NGRAMSPEC_ERROR_INTERNAL); the message says what.

    Bad arguments raise ``ValueError`` (or ``TypeError`` for a wrong type) and a failed allocation
    ``MemoryError``, each carrying the library's message, which names the argument and its value.
    A corpus file that cannot be read or written raises :class:`CorpusFileError`, a subclass.
    """


class CorpusFileError(NgramspecError):
    """A corpus file could not be read or written (NGRAMSPEC_ERROR_CORPUS_FILE): it is missing,
    truncated, corrupted, of another format version or byte order, or the disk failed.

    The message names the call, the file, the section at fault (when one is) and the problem, e.g.
    ``ngramspec_corpus_file_open: corpus file 'c.ngc', section header: checksum mismatch: ...``.
    """


def raise_status(status: int) -> NoReturn:
    """Raises the exception for a failing status, with the calling thread's last error message."""
    message = (lib.ngramspec_last_error() or b"").decode("utf-8", "replace")
    if not message:
        message = (lib.ngramspec_status_name(status) or b"unknown status").decode("utf-8", "replace")
    if status == _INVALID_ARGUMENT:
        raise ValueError(message)
    if status == _OUT_OF_MEMORY:
        raise MemoryError(message)
    if status == _CORPUS_FILE:
        raise CorpusFileError(message)
    raise NgramspecError(message)
