"""What every object that owns a native handle shares: close() at the end of a with block and
when the object is collected, and one error for a call after close()."""

from __future__ import annotations

from types import TracebackType
from typing import TypeVar

_Self = TypeVar("_Self", bound="Closable")


class Closable:
    """A base for objects with a close() method: a context manager, closed when collected."""

    _handle: int | None = None  # the native handle its calls pass; None once closed

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._handle is None

    def _live(self, call: str) -> int:
        """The native handle for the method `call`; ValueError naming the call once closed (the C
        text for a null handle would name no Python call)."""
        handle = self._handle
        if handle is None:
            name = type(self).__name__
            raise ValueError(f"ngramspec.{name}.{call}: the {name} is closed")
        return handle

    def close(self) -> None:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the module's globals may be gone
            pass
