"""hybridsag: a hybrid search plugin: SAG2 lexical-judge, dense (Milvus) and title paths, merged
by a per-query trust step and convex fusion (weighted RRF the alternative).

The public names below are imported on first use (PEP 562 module ``__getattr__``), so that
``import hybridsag`` (and every ``hybridsag.<module>`` import, which runs this file first) costs
nothing until a name is used: the CLI's ``--version`` never loads pydantic, and a BM25 search
never loads the dense side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybridsag.lazy import lazy_names

if TYPE_CHECKING:
    from hybridsag.errors import (
        ConfigError,
        ConsistencyError,
        DenseError,
        HybridSagError,
        IndexMismatchError,
        IngestError,
        InputError,
        JudgeError,
        JudgeResponseError,
        JudgeTimeoutError,
        LexicalError,
        QueryError,
        StoreError,
    )
    from hybridsag.fusion.types import FusedHit, Hit
    from hybridsag.request import SearchOptions
    from hybridsag.results import SearchResponse, SearchResult
    from hybridsag.search import HybridSearch
    from hybridsag.settings import Settings
    from hybridsag.records.filters import Filters

__version__ = "0.1.0"

#: module -> the public names it defines
_PUBLIC: dict[str, tuple[str, ...]] = {
    "hybridsag.errors": (
        "ConfigError",
        "ConsistencyError",
        "DenseError",
        "HybridSagError",
        "IndexMismatchError",
        "IngestError",
        "InputError",
        "JudgeError",
        "JudgeResponseError",
        "JudgeTimeoutError",
        "LexicalError",
        "QueryError",
        "StoreError",
    ),
    "hybridsag.fusion.types": ("FusedHit", "Hit"),
    "hybridsag.request": ("SearchOptions",),
    "hybridsag.results": ("SearchResponse", "SearchResult"),
    "hybridsag.search": ("HybridSearch",),
    "hybridsag.settings": ("Settings",),
    "hybridsag.records.filters": ("Filters",),
}

__all__ = sorted([*(name for names in _PUBLIC.values() for name in names), "__version__"])

__getattr__, __dir__ = lazy_names(__name__, globals(), _PUBLIC)
