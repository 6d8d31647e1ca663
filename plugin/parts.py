"""``Parts``: what the factory of a recall path or a judge may ask the composition root for.

:class:`~hybridsag.components.Components` provides it; the factories registered in
:mod:`hybridsag.paths` and :mod:`hybridsag.judges` are typed against this protocol, so the
registries never depend on the root that calls them (no import cycle, not even for types).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from hybridsag.vectors.contract import DenseIndex
    from hybridsag.vectors.embedder import Embedder
    from hybridsag.judges.base import Judge
    from hybridsag.lexical.contract import LexicalIndex
    from hybridsag.settings import Settings
    from hybridsag.records.store import Store
    from hybridsag.lexical.tokenizer import Tokenizer

__all__ = ["Parts"]


class Parts(Protocol):
    """The built parts of one data dir. ``embedder()``, ``dense_index()`` and ``judge()`` build
    on first use (once); they raise :class:`~hybridsag.errors.ConfigError` when the part is off
    or cannot be built."""

    settings: Settings
    store: Store
    tokenizer: Tokenizer
    lexical: LexicalIndex

    @property
    def dense_enabled(self) -> bool: ...

    def embedder(self) -> Embedder: ...

    def dense_index(self) -> DenseIndex: ...

    def judge(self) -> Judge: ...
