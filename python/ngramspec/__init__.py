"""ngramspec: n-gram speculative decoding for LLM inference engines, from Python.

A thin layer over the library's C ABI (``libngramspec.so``, ``ngramspec.h``) through ctypes and
NumPy: no compiler or Python headers are needed, only the shared library, found as
:mod:`ngramspec._native` describes (``NGRAMSPEC_LIBRARY``, then beside the package, then the
repository's build trees, then the system's library path).

Classes: :class:`BatchSpeculator` (every running sequence of an engine: begin, propose, accept,
finish), :class:`MatchDrafter` and :class:`NGramPredictor` (one sequence's drafter),
:class:`SharedCorpus` (earlier requests' outputs, which drafters copy from; saved to and loaded
from corpus files) and :class:`MappedCorpus` (a corpus file mapped read-only, which drafters
consult beside or instead of the live corpus), :class:`VerifyCost` (what a verify pass costs, and
the planner that sizes one sequence's drafts against it), and :class:`TokenSampler` (the tokens of one
sequence's verify pass from the target's logits: plain sampling's, or rejection sampling of drafts drawn
from a distribution).

Errors: ``ValueError`` with the library's message for a bad argument, ``MemoryError`` when an
allocation fails, :class:`CorpusFileError` when a corpus file cannot be read or written, and
:class:`NgramspecError` (its base) for anything else.

The GIL: every native call is made through ``ctypes.CDLL``, which releases the GIL for the length
of the call, so threads that drive separate drafters or speculators run their native work in
parallel. One object is driven by one thread at a time.
"""

from __future__ import annotations

from ._native import lib as _lib
from ._native import library_path
from ._errors import CorpusFileError, NgramspecError
from ._corpus import CorpusDraft, CorpusPreferenceName, MappedCorpus, SharedCorpus
from ._drafters import MatchDrafter, NGramPredictor
from ._batch import STEP_DTYPE, BatchSpeculator, BatchStats, StopReason
from ._planner import LearnedCost, LearnedCostStats, VerifyCost
from ._sampling import MAX_SUPPORT, SamplingModeName, TokenSampler

__all__ = [
    "__version__",
    "version",
    "library_path",
    "NgramspecError",
    "CorpusFileError",
    "SharedCorpus",
    "MappedCorpus",
    "CorpusDraft",
    "CorpusPreferenceName",
    "MatchDrafter",
    "NGramPredictor",
    "BatchSpeculator",
    "BatchStats",
    "StopReason",
    "STEP_DTYPE",
    "VerifyCost",
    "LearnedCost",
    "LearnedCostStats",
    "TokenSampler",
    "SamplingModeName",
    "MAX_SUPPORT",
]

#: The version of the native library in use, "MAJOR.MINOR.PATCH" (ngramspec_version_string).
__version__: str = _lib.ngramspec_version_string().decode("ascii")


def version() -> str:
    """The version of the native library in use, "MAJOR.MINOR.PATCH" (the same as ``__version__``)."""
    return __version__
