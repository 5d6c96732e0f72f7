"""Turning Python inputs into the C arrays the library reads, copying only when the layout differs.

Zero copy (the array's own memory is passed by pointer):
  tokens     a C-contiguous 1-D ``uint32`` or ``int32`` array (int32 is read as uint32, bit for bit)
  ids        a C-contiguous 1-D ``uint64`` or ``int64`` array (int64 read as uint64, bit for bit)
  offsets    a C-contiguous 1-D ``uintp`` (``uint64``) or ``int64`` array
Copied (converted once per call): lists, tuples and other sequences of ints, arrays of any other
integer type (after checking the values fit), and non-contiguous arrays.
"""

from __future__ import annotations

import operator
from typing import Any, Sequence, Union

import numpy as np
import numpy.typing as npt

__all__ = ["TokensLike", "IdsLike", "OffsetsLike", "Remembered", "tokens_arg", "ids_arg", "offsets_arg",
           "tokens_arg_remembered", "ids_arg_remembered", "offsets_arg_remembered", "out_tokens", "out_floats",
           "out_offsets", "size_arg", "sizes_arg", "whole_arg", "float32_arg"]

TokensLike = Union[Sequence[int], npt.NDArray[np.integer[Any]]]
IdsLike = Union[Sequence[int], npt.NDArray[np.integer[Any]]]
OffsetsLike = Union[Sequence[int], npt.NDArray[np.integer[Any]]]

_U32 = np.dtype(np.uint32)
_I32 = np.dtype(np.int32)
_U64 = np.dtype(np.uint64)
_I64 = np.dtype(np.int64)
_UINTP = np.dtype(np.uintp)
_F32 = np.dtype(np.float32)
_TOKEN_DTYPES = frozenset((_U32, _I32))
_WIDE_DTYPES = frozenset((_U64, _I64, _UINTP))
_NDARRAY = np.ndarray


def _integers(value: Any, what: str, limit: int, dtype: np.dtype[Any]) -> np.ndarray:
    """A C-contiguous 1-D array of `dtype` holding `value`'s integers, each checked to be in [0, limit]."""
    array = np.asarray(value)
    if array.dtype.kind in "fO" and not isinstance(value, np.ndarray) and array.ndim == 1:
        # A sequence of Python ints beyond int64 (uint64 ids) comes out as float or object.
        items = []
        for item in value:
            try:
                items.append(operator.index(item))
            except TypeError:
                raise TypeError(f"{what} must hold integers; it holds {item!r} ({type(item).__name__})") from None
        for item in items:
            if item < 0 or item > limit:
                raise ValueError(f"{what} holds {item}, outside 0..{limit}")
        return np.array(items, dtype)
    if array.ndim != 1:
        if array.ndim == 0:
            raise TypeError(f"{what} must be a sequence of ints or a 1-D integer array, not {type(value).__name__}")
        raise ValueError(f"{what} must be one-dimensional; it has shape {array.shape}")
    if array.size == 0:
        return np.empty(0, dtype)
    kind = array.dtype.kind
    if kind not in "iu":
        first = array.reshape(-1)[0]
        raise TypeError(f"{what} must hold integers; it holds {array.dtype} ({first!r}, ...)")
    if kind == "i" or array.dtype.itemsize > dtype.itemsize:
        low = int(array.min())
        high = int(array.max())
        if low < 0 or high > limit:
            bad = low if low < 0 else high
            raise ValueError(f"{what} holds {bad}, outside 0..{limit}")
    return np.ascontiguousarray(array, dtype=dtype)


def tokens_arg(tokens: TokensLike, what: str = "tokens") -> tuple[np.ndarray, int, int]:
    """(array to keep alive, its address, its length) for a token input; no copy for uint32/int32 arrays."""
    if type(tokens) is _NDARRAY and tokens.dtype in _TOKEN_DTYPES and tokens.ndim == 1 \
            and tokens.flags.c_contiguous:
        return tokens, tokens.ctypes.data, tokens.shape[0]
    array = _integers(tokens, what, 0xFFFFFFFF, _U32)
    return array, array.ctypes.data, array.shape[0]


def ids_arg(ids: IdsLike) -> tuple[np.ndarray, int, int]:
    """(array, address, length) for sequence ids; no copy for uint64/int64 arrays."""
    if type(ids) is _NDARRAY and ids.dtype in _WIDE_DTYPES and ids.ndim == 1 and ids.flags.c_contiguous:
        return ids, ids.ctypes.data, ids.shape[0]
    if isinstance(ids, (int, np.integer)):
        raise TypeError("ids must be a sequence of sequence ids (a list or a 1-D array), not a single int")
    array = _integers(ids, "ids", 0xFFFFFFFFFFFFFFFF, _U64)
    return array, array.ctypes.data, array.shape[0]


class Remembered:
    """The last array of one argument of a hot call, held, and its address: an engine that passes the
    same array step after step (its ids, its offsets) skips asking NumPy for the address, which costs
    more than the native call. Holding the array keeps its memory where it is (NumPy will not resize
    an array another object references), and its dtype, dimensions and contiguity are checked anew
    on every call."""

    __slots__ = ("array", "address")

    def __init__(self) -> None:
        self.array: np.ndarray | None = None
        self.address = 0

    def remember(self, array: np.ndarray) -> int:
        self.array = array
        self.address = array.ctypes.data
        return self.address


def ids_arg_remembered(ids: IdsLike, last: Remembered) -> tuple[np.ndarray, int, int]:
    """ids_arg, reusing the address of the array passed last time when it is the same array."""
    if type(ids) is _NDARRAY and ids.dtype in _WIDE_DTYPES and ids.ndim == 1 and ids.flags.c_contiguous:
        return ids, (last.address if ids is last.array else last.remember(ids)), ids.shape[0]
    return ids_arg(ids)


def tokens_arg_remembered(tokens: TokensLike, last: Remembered, what: str) -> tuple[np.ndarray, int, int]:
    """tokens_arg, reusing the address of the array passed last time when it is the same array."""
    if type(tokens) is _NDARRAY and tokens.dtype in _TOKEN_DTYPES and tokens.ndim == 1 \
            and tokens.flags.c_contiguous:
        return tokens, (last.address if tokens is last.array else last.remember(tokens)), tokens.shape[0]
    return tokens_arg(tokens, what)


def offsets_arg_remembered(offsets: OffsetsLike, expected: int, last: Remembered) -> tuple[np.ndarray, int]:
    """offsets_arg, reusing the address of the array passed last time when it is the same array."""
    if type(offsets) is _NDARRAY and offsets.dtype in _WIDE_DTYPES and offsets.ndim == 1 \
            and offsets.flags.c_contiguous and offsets.shape[0] == expected:
        return offsets, (last.address if offsets is last.array else last.remember(offsets))
    return offsets_arg(offsets, expected)


def offsets_arg(offsets: OffsetsLike, expected: int) -> tuple[np.ndarray, int]:
    """(array, address) for offsets that must have `expected` elements; no copy for uintp/int64 arrays."""
    if type(offsets) is _NDARRAY and offsets.dtype in _WIDE_DTYPES and offsets.ndim == 1 \
            and offsets.flags.c_contiguous:
        array = offsets
    else:
        array = _integers(offsets, "offsets", 0xFFFFFFFFFFFFFFFF, _UINTP)
    if array.shape[0] != expected:
        raise ValueError(f"offsets has {array.shape[0]} elements; it needs len(ids) + 1 = {expected}")
    return array, array.ctypes.data


def _writable(array: Any, what: str, dtypes: frozenset[np.dtype[Any]], names: str) -> np.ndarray:
    if type(array) is not _NDARRAY and not isinstance(array, np.ndarray):
        raise TypeError(f"{what} must be a NumPy array of {names}, not {type(array).__name__}")
    if array.dtype not in dtypes:
        raise TypeError(f"{what} must have dtype {names}; it has {array.dtype}")
    if not array.flags.c_contiguous:
        raise ValueError(f"{what} must be C-contiguous")
    if not array.flags.writeable:
        raise ValueError(f"{what} is read-only")
    return array


def out_tokens(array: Any, what: str = "out") -> np.ndarray:
    """A caller's output array for tokens: writable, C-contiguous, uint32 or int32."""
    return _writable(array, what, _TOKEN_DTYPES, "uint32 (or int32)")


def out_floats(array: Any, what: str = "probabilities") -> np.ndarray:
    """A caller's output array for probabilities: writable, C-contiguous, float32."""
    return _writable(array, what, frozenset((_F32,)), "float32")


def out_offsets(array: Any, what: str = "offsets") -> np.ndarray:
    """A caller's output array for offsets: writable, C-contiguous, uintp (uint64) or int64."""
    return _writable(array, what, _WIDE_DTYPES, "uintp (or uint64, int64)")


def sizes_arg(value: Any, what: str) -> np.ndarray:
    """A C-contiguous 1-D uintp array of `value`'s integers (offsets into another array): floats, negative
    values and other shapes are refused naming `what` and the value or shape, never truncated, wrapped or
    flattened."""
    return _integers(value, what, 0xFFFFFFFFFFFFFFFF, _UINTP)


_FLOAT32_TINY = float(np.nextafter(np.float32(0), np.float32(1)))  # 1.4e-45, the smallest positive
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def float32_arg(value: Any, what: str) -> float:
    """`value` as a float for a float32 field of the library: a finite value that float32 turns into 0 or inf
    would change its meaning without a word (a temperature of 1e-50 would become 0, greedy), so it is refused
    naming `what` and the value. Every value float32 holds means what it says (a temperature of 1.4e-45
    samples; it is not greedy)."""
    number = float(value)
    magnitude = abs(number)
    if (0 < magnitude < _FLOAT32_TINY) or (np.isfinite(number) and magnitude > _FLOAT32_MAX):
        raise ValueError(f"{what} = {number!r} is invalid: the library keeps it as a float32, whose positive values "
                         f"run from {_FLOAT32_TINY!r} to {_FLOAT32_MAX!r} (0 is its own value)")
    return number


def whole_arg(value: Any, what: str) -> int:
    """`value` as an int: an int, a NumPy integer, or a one-element integer array or tensor (what an engine
    hands over). A number that is not whole is a ValueError and a bool or anything else a TypeError, naming
    `what` and the value: int() would truncate 1.9 to 1."""
    item = value.tolist() if hasattr(value, "tolist") else value
    while isinstance(item, list) and len(item) == 1:
        item = item[0]
    if isinstance(item, bool) or not isinstance(item, (int, float)):
        raise TypeError(f"{what} = {value!r} is invalid: it must be an int, not {type(value).__name__}")
    if isinstance(item, float):
        raise ValueError(f"{what} = {value!r} is invalid: it must be a whole number (an int)")
    return item


def size_arg(value: Any, what: str) -> int:
    """A non-negative int for a size_t argument (ctypes would wrap a negative one silently)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    value = int(value)
    if value < 0:
        raise ValueError(f"{what} = {value} is invalid: it must be a non-negative integer")
    if value > 0xFFFFFFFFFFFFFFFF:
        raise ValueError(f"{what} = {value} is out of range: it must be from 0 to 2**64 - 1 (a size_t)")
    return value
