"""An ingest of several batches embeds the next batch while the current one is written (issue
39 item 5): ``Writer.ingest_many`` stages (chunks, tokenizes, embeds) batch N+1 in a thread
while batch N holds the write lock. Real SQLite, real Milvus Lite, the packaged model (wrapped
only to see when a batch's embedding starts); the write path's own step hook marks the moment
a batch's vectors are written."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from hybridsag.documents import make_document
from hybridsag.errors import IngestError
from hybridsag.search import HybridSearch
from hybridsag.vectors.embedder_common import Kind

from tests.consistency_support import check_consistent, make_settings, shared_embedder

#: Bound on waiting for the other side of the pipeline; only a failing run waits this long.
WAIT_S = 30.0


class _Watched:
    """The shared embedder, telling which documents' passages it has started to embed."""

    def __init__(self) -> None:
        self.inner = shared_embedder()
        self.name = self.inner.name
        self.fingerprint = self.inner.fingerprint
        self.started: list[str] = []
        self.changed = threading.Condition()

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def encode(self, texts: Sequence[str], *, kind: Kind = "passage") -> np.ndarray:
        if kind == "passage":
            with self.changed:
                self.started.extend(texts)
                self.changed.notify_all()
        return self.inner.encode(texts, kind=kind)

    def saw(self, word: str) -> bool:
        return any(word in text for text in self.started)


def _docs(n: int, word: str = "lighthouse") -> list:
    return [make_document(f"doc{i}", f"Document {i} talks about {word} number{i}.") for i in range(n)]


def test_the_next_batch_is_embedded_while_this_one_is_written(tmp_path: Path) -> None:
    embedder = _Watched()
    overlapped: list[bool] = []

    def hook(step: str, resource_id: str) -> None:
        # batch 1's vectors are about to be written: with the pipeline, batch 2 (doc2, doc3)
        # is being embedded by now; written one batch after the other, it never is
        if step == "vectors" and resource_id == "doc0":
            with embedder.changed:
                overlapped.append(
                    embedder.changed.wait_for(lambda: embedder.saw("number2"), timeout=WAIT_S)
                )

    settings = make_settings(tmp_path / "data")
    with HybridSearch(settings, embedder=embedder, step_hook=hook) as hs:
        report = hs.components.writer().ingest_many(_docs(4), batch_size=2)
        assert overlapped == [True]
        assert (report.indexed, report.chunks, report.vectors) == (4, 4, 4)
        assert check_consistent(hs) == []
        hit = hs.search("lighthouse number3", paths=["dense"], top_k=1).results[0]
        assert hit.resource_id == "doc3"


def test_a_failed_write_stops_the_staging_and_keeps_the_batches_before(tmp_path: Path) -> None:
    def hook(step: str, resource_id: str) -> None:
        if step == "vectors" and resource_id == "doc2":
            raise IngestError("the second batch's vectors fail")

    settings = make_settings(tmp_path / "data")
    before = {t.name for t in threading.enumerate()}
    with HybridSearch(settings, embedder=shared_embedder(), step_hook=hook) as hs:
        with pytest.raises(IngestError, match="second batch"):
            hs.components.writer().ingest_many(_docs(6), batch_size=2)
        ready = hs.components.store.connection().execute(
            "SELECT resource_id FROM resources WHERE status = 'ready' ORDER BY resource_id"
        )
        assert [r[0] for r in ready] == ["doc0", "doc1"]  # batch 1 stays; 2 undone; 3 never
        assert check_consistent(hs) == []
        assert "hybridsag-ingest-stage" not in {t.name for t in threading.enumerate()} - before


def test_a_resource_in_two_batches_ends_as_its_last_copy(tmp_path: Path) -> None:
    """Batch 2 holds doc0 again, as it was before batch 1 changed it: its unchanged check
    waits for batch 1's commit, so doc0 ends as its last copy, not as batch 1's."""
    settings = make_settings(tmp_path / "data", model="none")
    old = make_document("doc0", "Document 0 talks about lighthouses.")
    new = make_document("doc0", "Document 0 now talks about submarines.")
    with HybridSearch(settings) as hs:
        writer = hs.components.writer()
        assert writer.ingest_many([old]).indexed == 1
        # batch 1: doc0 (new) and doc1; batch 2: doc2 and doc0 (old again)
        docs = [new, *_docs(3)[1:], old]
        report = writer.ingest_many(docs, batch_size=2)
        assert (report.indexed, report.unchanged) == (4, 0)
        assert {r.resource_id for r in hs.search("lighthouses", paths=["bm25"]).results} == {"doc0"}
        assert not hs.search("submarines", paths=["bm25"]).results


def test_a_backfill_reads_the_chunks_a_page_at_a_time(tmp_path: Path) -> None:
    """``rebuild-vectors`` / the reconciler's backfill reads the current chunks a page of
    ``batch_size`` at a time (row id after the last page's), not every chunk of the index at
    once, and writes every vector."""
    settings = make_settings(tmp_path / "data")
    with HybridSearch(settings, embedder=shared_embedder()) as hs:
        writer = hs.components.writer()
        assert writer.ingest_many(_docs(5)).indexed == 5
        ledger = writer.ledger
        pages, after = [], 0
        while page := ledger.current_chunks(after=after, limit=2):
            pages.append([r["chunk_id"] for r in page])
            after = page[-1]["id"]
        assert [len(p) for p in pages] == [2, 2, 1]
        assert [c for p in pages for c in p] == [r["chunk_id"] for r in ledger.current_chunks()]
        hs.components.dense_index().delete_ids([c for p in pages for c in p])
        assert writer.backfill_vectors(batch_size=2) == 5
        assert check_consistent(hs) == []
        hit = hs.search("lighthouse number4", paths=["dense"], top_k=1).results[0]
        assert hit.resource_id == "doc4"
