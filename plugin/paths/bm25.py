"""The ``bm25`` path: the plain lexical path (no judge), quoted-OR query terms ranked by BM25."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from hybridsag.lexical.contract import LexicalIndex
from hybridsag.paths.base import PathResult, Peers, elapsed_ms
from hybridsag.records.filters import Filters

if TYPE_CHECKING:
    from hybridsag.parts import Parts

__all__ = ["Bm25Retriever", "build"]


class Bm25Retriever:
    """Quoted-OR query terms ranked by the lexical index's BM25."""

    name = "bm25"

    def __init__(self, lexical: LexicalIndex) -> None:
        self.lexical = lexical

    def retrieve(
        self, query: str, *, limit: int, filters: Filters, peers: Peers | None = None
    ) -> PathResult:
        t0 = time.perf_counter()
        terms = self.lexical.query_terms(query)
        t1 = time.perf_counter()
        hits = self.lexical.search(terms, limit=limit, filters=filters, path=self.name)
        return PathResult(
            hits=hits,
            timings={"terms_ms": round((t1 - t0) * 1000, 3), "fts_ms": elapsed_ms(t1)},
            usage={"terms": len(terms)},
        )


def build(parts: Parts) -> Bm25Retriever:
    """Registry factory."""
    return Bm25Retriever(parts.lexical)
