"""The ``dense`` path: the query's embedding searched in the dense index (Milvus).

In attach mode (``milvus.attach = true``: a team's own collection, its vectors made by the
team's embedding model or endpoint) the team's rows are not hybridsag's chunks: a row is mapped
to the chunk of the same id when the store holds one (a team that indexed with hybridsag's
ids), else to a chunk of the resource the row names (``milvus.fields.resource_id``; the team
indexes the same documents into hybridsag, under the same resource ids, for the lexical and
title paths): the resource's only chunk, or the one whose words overlap the row's text
(``milvus.fields.text``) most, or its first. Two rows on one chunk count once, at the better
rank; a row whose resource hybridsag does not hold (or may not show) is left out. The hit's
``detail["team_id"]`` keeps the row's own id.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

from hybridsag.fusion.types import Hit
from hybridsag.paths.base import PathResult, Peers, elapsed_ms
from hybridsag.records.filters import Filters
from hybridsag.records.rows import ChunkRecord
from hybridsag.records.store import Store

if TYPE_CHECKING:
    from hybridsag.vectors.contract import DenseIndex
    from hybridsag.vectors.embedder import Embedder
    from hybridsag.parts import Parts

__all__ = ["MAX_DENSE_ASK", "DenseRetriever", "build"]

#: The most rows one dense search may ask for (Milvus caps ``limit`` at 16,384).
MAX_DENSE_ASK = 16_384
#: The first ask is ``limit * ASK_FACTOR + ASK_EXTRA`` rows; each refill asks ``REFILL_FACTOR``
#: times more, because status and metadata are checked against the store after the search.
ASK_FACTOR, ASK_EXTRA, REFILL_FACTOR = 2, 10, 4


class DenseRetriever:
    """The query's embedding searched in the dense index; tenant, ACL and resource ids go into
    the index's own filter, status and metadata are checked against the store."""

    name = "dense"

    def __init__(
        self, store: Store, embedder: Embedder, index: DenseIndex, *, attached: bool = False
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.index = index
        #: the index is a team's collection (attach mode): rows are mapped to chunks
        self.attached = attached

    def retrieve(
        self, query: str, *, limit: int, filters: Filters, peers: Peers | None = None
    ) -> PathResult:
        from hybridsag.vectors.contract import DenseFilter

        t0 = time.perf_counter()
        vector = self.embedder.encode([query], kind="query")[0]
        t1 = time.perf_counter()
        dfilter = DenseFilter(
            tenant=filters.tenant,
            resource_ids=filters.resource_ids,
            acl_any=filters.acl,
        )
        qvec = [float(x) for x in vector]
        ask = limit * ASK_FACTOR + ASK_EXTRA
        while True:
            raw = self.index.search(qvec, limit=ask, filter=dfilter)
            t2 = time.perf_counter()
            hits = self._visible(raw, filters, limit)
            if len(hits) >= limit or len(raw) < ask or ask >= MAX_DENSE_ASK:
                break
            ask = min(ask * REFILL_FACTOR, MAX_DENSE_ASK)
        return PathResult(
            hits=hits,
            timings={
                "embed_ms": round((t1 - t0) * 1000, 3),
                "milvus_ms": round((t2 - t1) * 1000, 3),
                "store_ms": elapsed_ms(t2),
            },
        )

    def _visible(self, raw: list[Hit], filters: Filters, limit: int) -> list[Hit]:
        """The hits whose chunk is current and whose resource passes ``filters`` now (one
        statement, :meth:`Store.visible_chunk_ids`), re-ranked."""
        if self.attached:
            raw = self._team_rows_as_chunks(raw)
        visible = self.store.visible_chunk_ids((h.chunk_id for h in raw), filters)
        hits: list[Hit] = []
        for h in raw:
            if h.chunk_id not in visible:
                continue
            hits.append(Hit(h.chunk_id, self.name, len(hits) + 1, h.raw_score, h.score, h.detail))
            if len(hits) >= limit:
                break
        return hits

    def _team_rows_as_chunks(self, raw: list[Hit]) -> list[Hit]:
        """Attach mode: each team row as the chunk it stands for (module docstring), in rank
        order, each chunk once; rows that stand for no chunk of the store are dropped."""
        own = self.store.chunks(h.chunk_id for h in raw)
        wanted = sorted(
            {str(h.detail.get("resource_id")) for h in raw if h.chunk_id not in own}
            - {"None"}
        )
        firsts = self.store.first_chunks(wanted)
        several: dict[str, list[ChunkRecord]] = {}
        out: list[Hit] = []
        seen: set[str] = set()
        for h in raw:
            if h.chunk_id in own:
                chunk_id: str | None = h.chunk_id
            else:
                rid = str(h.detail.get("resource_id"))
                first = firsts.get(rid)
                if first is None:
                    continue
                chunk_id, count = first
                text = h.detail.get("text")
                if count > 1 and isinstance(text, str) and text:
                    if rid not in several:
                        several[rid] = self.store.resource_chunks(rid)
                    chunk_id = _closest(text, several[rid]) or chunk_id
            if chunk_id is None or chunk_id in seen:
                continue
            seen.add(chunk_id)
            detail = {"resource_id": h.detail.get("resource_id"), "team_id": h.chunk_id}
            out.append(Hit(chunk_id, h.path, h.rank, h.raw_score, h.score, detail))
        return out


_WORDS = re.compile(r"\w+")


def _closest(text: str, chunks: list[ChunkRecord]) -> str | None:
    """The chunk whose words overlap ``text``'s most (Jaccard; the first on a tie)."""
    words = set(_WORDS.findall(text.lower()))
    best, best_share = None, -1.0
    for chunk in chunks:
        theirs = set(_WORDS.findall(chunk.text.lower()))
        union = len(words | theirs)
        share = len(words & theirs) / union if union else 0.0
        if share > best_share:
            best, best_share = chunk.chunk_id, share
    return best


def build(parts: Parts) -> DenseRetriever:
    """Registry factory (the embedder and the dense index are built here, once). The index
    opens first: when Milvus cannot be opened the path fails without loading the model."""
    index = parts.dense_index()
    return DenseRetriever(
        parts.store, parts.embedder(), index, attached=parts.settings.milvus.attach
    )
