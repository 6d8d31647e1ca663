"""The ``dense`` path: the query's embedding searched in the dense index (Milvus)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from hybridsag.fusion.types import Hit
from hybridsag.paths.base import PathResult, Peers, elapsed_ms
from hybridsag.store import Filters, Store

if TYPE_CHECKING:
    from hybridsag.dense import DenseIndex
    from hybridsag.embedder import Embedder
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

    def __init__(self, store: Store, embedder: Embedder, index: DenseIndex) -> None:
        self.store = store
        self.embedder = embedder
        self.index = index

    def retrieve(
        self, query: str, *, limit: int, filters: Filters, peers: Peers | None = None
    ) -> PathResult:
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
        """The hits whose chunk is current and whose resource passes ``filters`` now, re-ranked.
        A resource deleted between the two store reads is simply left out."""
        chunks = self.store.chunks(h.chunk_id for h in raw)
        records = self.store.resources(c.key for c in chunks.values())
        hits: list[Hit] = []
        for h in raw:
            chunk = chunks.get(h.chunk_id)
            record = records.get(chunk.key) if chunk is not None else None
            if record is None or not filters.allows(record):
                continue
            hits.append(Hit(h.chunk_id, self.name, len(hits) + 1, h.raw_score, h.score, h.detail))
            if len(hits) >= limit:
                break
        return hits


def build(parts: Parts) -> DenseRetriever:
    """Registry factory (the embedder and the dense index are built here, once). The index
    opens first: when Milvus cannot be opened the path fails without loading the model."""
    index = parts.dense_index()
    return DenseRetriever(parts.store, parts.embedder(), index)
