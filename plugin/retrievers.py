"""The retrieval paths behind one ``Retriever`` protocol, and the registry that names them.

Every path applies the caller's :class:`~hybridsag.store.Filters` in its own query and returns
frozen :class:`~hybridsag.fusion.Hit` values, rank 1 first, score higher-is-better.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from hybridsag.errors import LexicalError
from hybridsag.fusion.text import normalize_title
from hybridsag.fusion.types import Hit
from hybridsag.lexical import Fts5LexicalIndex, build_match
from hybridsag.store import Filters, Store

if TYPE_CHECKING:
    from hybridsag.dense import DenseIndex
    from hybridsag.embedder import Embedder

__all__ = [
    "Bm25Retriever",
    "DenseRetriever",
    "PathResult",
    "Retriever",
    "TitleRetriever",
]


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
    """Contract: ``retrieve`` returns at most ``limit`` hits visible under ``filters``; raises a
    :class:`~hybridsag.errors.HybridSagError` subclass on failure (the caller decides whether
    the search goes on without this path)."""

    name: str

    def retrieve(self, query: str, *, limit: int, filters: Filters) -> PathResult: ...


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000.0, 3)


class Bm25Retriever:
    """The plain lexical path: quoted-OR query terms ranked by FTS5 ``bm25()``."""

    name = "bm25"

    def __init__(self, lexical: Fts5LexicalIndex) -> None:
        self.lexical = lexical

    def retrieve(self, query: str, *, limit: int, filters: Filters) -> PathResult:
        t0 = time.perf_counter()
        terms = self.lexical.query_terms(query)
        t1 = time.perf_counter()
        hits = self.lexical.search(terms, limit=limit, filters=filters)
        return PathResult(
            hits=hits,
            timings={"terms_ms": round((t1 - t0) * 1000, 3), "fts_ms": _ms(t1)},
            usage={"terms": len(terms)},
        )


class TitleRetriever:
    """Exact normalised-title matches first, then title FTS; each matched resource is
    represented by its best body chunk for the query, else its first chunk."""

    name = "title"

    def __init__(self, store: Store, lexical: Fts5LexicalIndex, *, depth: int = 20) -> None:
        self.store = store
        self.lexical = lexical
        self.depth = depth

    def retrieve(self, query: str, *, limit: int, filters: Filters) -> PathResult:
        t0 = time.perf_counter()
        conn = self.store.connection()
        filter_sql, params = filters.sql("r")
        matched: dict[str, tuple[str, float]] = {}  # resource_id -> (rule, raw score)
        norm = normalize_title(query)
        if norm:
            for (rid,) in conn.execute(
                f"SELECT r.resource_id FROM resources r WHERE r.title_norm = ? AND {filter_sql} "
                "ORDER BY r.id LIMIT ?",
                [norm, *params, limit],
            ):
                matched[rid] = ("exact_title", 0.0)
        terms = self.lexical.query_terms(query)
        if terms and len(matched) < limit:
            try:
                rows = conn.execute(
                    f"""SELECT r.resource_id, bm25(titles_fts) AS s
                        FROM titles_fts JOIN resources r ON r.id = titles_fts.rowid
                        WHERE titles_fts MATCH ? AND {filter_sql}
                        ORDER BY s, r.id LIMIT ?""",
                    [build_match(terms), *params, min(self.depth, limit) + len(matched)],
                ).fetchall()
            except sqlite3.Error as exc:
                raise LexicalError(f"title search failed: {exc}") from exc
            for rid, score in rows:
                matched.setdefault(rid, ("title_fts", float(score)))
        t1 = time.perf_counter()
        rids = list(matched)[:limit]
        best = self._best_chunks(rids, terms)
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
        return PathResult(hits=hits, timings={"titles_ms": round((t1 - t0) * 1000, 3), "chunks_ms": _ms(t1)})

    def _best_chunks(self, rids: Sequence[str], terms: Sequence[str]) -> dict[str, str]:
        """Each resource's best body chunk for the query terms, else its first chunk."""
        if not rids:
            return {}
        conn = self.store.connection()
        marks = ",".join("?" * len(rids))
        first: dict[str, str] = {}
        several: list[str] = []
        for rid, chunk_id, n in conn.execute(
            f"""SELECT c.resource_id, c.chunk_id, count(*) OVER (PARTITION BY c.resource_id)
                FROM chunks c JOIN resources r
                  ON r.resource_id = c.resource_id AND r.version = c.version
                WHERE c.resource_id IN ({marks}) ORDER BY c.resource_id, c.ordinal""",
            list(rids),
        ):
            if rid not in first:
                first[rid] = chunk_id
                if n > 1:
                    several.append(rid)
        best: dict[str, str] = {}
        if terms and several:
            s = self.lexical.settings
            try:
                rows = conn.execute(
                    f"""SELECT c.resource_id, c.chunk_id
                        FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid
                        JOIN resources r ON r.resource_id = c.resource_id AND r.version = c.version
                        WHERE chunks_fts MATCH ? AND chunks_fts.rowid IN (
                            SELECT id FROM chunks WHERE resource_id IN ({",".join("?" * len(several))}))
                        ORDER BY bm25(chunks_fts, ?, ?, ?), c.id""",
                    [build_match(terms), *several, s.title_weight, s.heading_weight, s.body_weight],
                ).fetchall()
            except sqlite3.Error as exc:
                raise LexicalError(f"title path chunk lookup failed: {exc}") from exc
            for rid, chunk_id in rows:
                best.setdefault(rid, chunk_id)
        return {rid: best.get(rid, chunk_id) for rid, chunk_id in first.items()}


#: The most rows one Milvus search may ask for (Milvus caps ``limit`` at 16,384).
MAX_DENSE_ASK = 16_384


class DenseRetriever:
    """The query's embedding searched in the dense index; tenant, ACL and resource ids go into
    the index's own filter, status and metadata are checked against the store."""

    name = "dense"

    def __init__(self, store: Store, embedder: Embedder, index: DenseIndex) -> None:
        self.store = store
        self.embedder = embedder
        self.index = index

    def retrieve(self, query: str, *, limit: int, filters: Filters) -> PathResult:
        from hybridsag.dense import DenseFilter

        t0 = time.perf_counter()
        vector = self.embedder.encode([query], kind="query")[0]
        t1 = time.perf_counter()
        dfilter = DenseFilter(
            tenant=filters.tenant,
            resource_ids=filters.resource_ids,
            acl_any=filters.acl,
        )
        qvec = [float(x) for x in vector]
        ask = limit * 2 + 10
        while True:  # refill: status and metadata are checked against the store afterwards
            raw = self.index.search(qvec, limit=ask, filter=dfilter)
            t2 = time.perf_counter()
            visible = self.store.chunks(h.chunk_id for h in raw)
            records = self.store.resources(c.resource_id for c in visible.values())
            hits: list[Hit] = []
            for h in raw:
                chunk = visible.get(h.chunk_id)
                if chunk is None or not filters.allows(records[chunk.resource_id]):
                    continue
                hits.append(
                    Hit(h.chunk_id, self.name, len(hits) + 1, h.raw_score, h.score, h.detail)
                )
                if len(hits) >= limit:
                    break
            if len(hits) >= limit or len(raw) < ask or ask >= MAX_DENSE_ASK:
                break
            ask = min(ask * 4, MAX_DENSE_ASK)
        return PathResult(
            hits=hits,
            timings={
                "embed_ms": round((t1 - t0) * 1000, 3),
                "milvus_ms": round((t2 - t1) * 1000, 3),
                "store_ms": _ms(t2),
            },
        )


RetrieverFactory = Callable[..., Retriever]
