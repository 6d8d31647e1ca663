"""The ``title`` path: exact and near-exact matches on resource titles, which dense vectors of
the body never see (a record titled "我的喜好" whose body is "爱吃鱼")."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hybridsag.fusion.text import normalize_title
from hybridsag.fusion.types import Hit
from hybridsag.lexical.contract import LexicalIndex
from hybridsag.paths.base import PathResult, Peers, elapsed_ms
from hybridsag.records.filters import Filters
from hybridsag.records.store import Store

if TYPE_CHECKING:
    from hybridsag.parts import Parts

__all__ = ["TitleRetriever", "build"]


class TitleRetriever:
    """Exact normalised-title matches first, then title full-text matches. A resource whose
    title is the query is represented by its lead chunk (its first: the introduction), one
    matched by title words by its best body chunk for the query, else its first chunk."""

    name = "title"

    def __init__(self, store: Store, lexical: LexicalIndex, *, depth: int = 20) -> None:
        self.store = store
        self.lexical = lexical
        self.depth = depth

    def retrieve(
        self, query: str, *, limit: int, filters: Filters, peers: Peers | None = None
    ) -> PathResult:
        t0 = time.perf_counter()
        matched: dict[str, tuple[str, float]] = {}  # resource_id -> (rule, raw score)
        norm = normalize_title(query)
        if norm:
            for rid in self.store.resources_by_title(norm, filters, limit=limit):
                matched[rid] = ("exact_title", 0.0)
        terms = self.lexical.query_terms(query)
        if terms and len(matched) < limit:
            found = self.lexical.search_titles(
                terms, limit=min(self.depth, limit) + len(matched), filters=filters
            )
            for rid, score in found:
                matched.setdefault(rid, ("title_fts", score))
        t1 = time.perf_counter()
        rids = list(matched)[:limit]
        exact = {rid for rid in rids if matched[rid][0] == "exact_title"}
        best = self._best_chunks(rids, terms, lead=exact)
        hits = []
        for rid in rids:
            chunk_id = best.get(rid)
            if chunk_id is None:
                continue
            rule, raw = matched[rid]
            hits.append(
                Hit(
                    chunk_id=chunk_id,
                    path=self.name,
                    rank=len(hits) + 1,
                    raw_score=raw,
                    score=1.0 if rule == "exact_title" else -raw,
                    detail={"resource_id": rid, "rule": rule},
                )
            )
        return PathResult(
            hits=hits,
            timings={"titles_ms": round((t1 - t0) * 1000, 3), "chunks_ms": elapsed_ms(t1)},
        )

    def _best_chunks(
        self, rids: Sequence[str], terms: Sequence[str], *, lead: set[str]
    ) -> dict[str, str]:
        """Each resource's first chunk for those in ``lead``; for the others their best body
        chunk for the query terms, else their first chunk."""
        first = self.store.first_chunks(rids)
        several = [rid for rid, (_chunk_id, n) in first.items() if n > 1 and rid not in lead]
        best = self.lexical.best_chunks(several, terms) if terms and several else {}
        return {rid: best.get(rid, chunk_id) for rid, (chunk_id, _n) in first.items()}


def build(parts: Parts) -> TitleRetriever:
    """Registry factory."""
    return TitleRetriever(parts.store, parts.lexical, depth=parts.settings.title.depth)
