"""The ``Retriever`` extension point every recall path implements, and what it returns.

Every path applies the caller's :class:`~hybridsag.records.store.Filters` in its own query and returns
frozen :class:`~hybridsag.fusion.Hit` values, rank 1 first, score higher-is-better.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from hybridsag.fusion.types import Hit
from hybridsag.records.filters import Filters

__all__ = ["PathResult", "Peers", "Retriever", "elapsed_ms"]

#: The hits of the other paths of the same search that a path declared it joins
#: (:attr:`hybridsag.paths.PathSpec.joins`), by path name. Calling one waits for that path and
#: returns its hits, or raises its error (a :class:`~hybridsag.errors.HybridSagError`).
Peers = Mapping[str, Callable[[], Sequence[Hit]]]


@dataclass(frozen=True, slots=True)
class PathResult:
    """One path's answer: hits, timings (ms by stage), usage (judge calls, tokens) and, when
    the path went on without part of itself, ``degraded`` with the reason."""

    hits: Sequence[Hit]
    timings: Mapping[str, float] = field(default_factory=dict)
    usage: Mapping[str, Any] = field(default_factory=dict)
    degraded: str | None = None


@runtime_checkable
class Retriever(Protocol):
    """A recall path.

    Contract: ``retrieve`` returns at most ``limit`` hits visible under ``filters``, each with
    ``path == name``, ranks 1..n, ``score`` higher-is-better; ``peers`` holds the hits of the
    paths it joins when they run in the same search (empty when it runs alone). It raises a
    :class:`~hybridsag.errors.HybridSagError` subclass on failure and nothing else: the search
    then goes on without this path and says why. A resource deleted while the path runs is
    simply not returned.
    """

    name: str

    def retrieve(
        self, query: str, *, limit: int, filters: Filters, peers: Peers | None = None
    ) -> PathResult: ...


def elapsed_ms(since: float) -> float:
    """Milliseconds since ``since`` (a ``time.perf_counter()`` value), rounded to µs."""
    return round((time.perf_counter() - since) * 1000.0, 3)
