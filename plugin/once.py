"""A value built at most once, on first use, under a lock: what the composition root
(:class:`hybridsag.components.Components`) keeps each lazy part in, and what a local model
(:class:`hybridsag.vectors.embedder.SentenceTransformerEmbedder`,
:class:`hybridsag.vectors.onnx_embedder.OnnxEmbedder`,
:class:`hybridsag.judges.cross_encoder.CrossEncoderJudge`) keeps its loaded weights in.

Example::

    model = Once(load_model)   # nothing loaded yet
    model.get()                # loads (once, even from many threads at once), then returns it
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar, runtime_checkable

__all__ = ["Closeable", "Once", "close_part"]

T = TypeVar("T")


@runtime_checkable
class Closeable(Protocol):
    """The optional part of the embedder and judge contracts
    (:class:`~hybridsag.vectors.embedder.Embedder`, :class:`~hybridsag.judges.base.Judge`) a
    part that holds a resource offers (a remote model's HTTP client): ``close()`` lets it go;
    a part that holds none need not define it."""

    def close(self) -> None: ...


def close_part(part: object) -> None:
    """``part.close()`` when ``part`` is :class:`Closeable`; nothing otherwise."""
    if isinstance(part, Closeable):
        part.close()


class Once(Generic[T]):
    """A value built at most once, on first :meth:`get`, under a lock (double-checked); a
    build that raises leaves nothing behind, so the next call tries again."""

    def __init__(self, build: Callable[[], T], value: T | None = None) -> None:
        self._build = build
        self._value = value
        self._lock = threading.Lock()

    @property
    def built(self) -> bool:
        return self._value is not None

    def peek(self) -> T | None:
        """The value if it was built (or given), else None; never builds."""
        return self._value

    def get(self) -> T:
        value = self._value
        if value is not None:
            return value
        with self._lock:
            if self._value is None:
                self._value = self._build()
            return self._value
