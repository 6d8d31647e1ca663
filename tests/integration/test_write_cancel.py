"""A write can be cancelled (issue 23 item 3): ``Writer.ingest_many(cancel=...)`` stops at its next
cancellation point, undoes the batch in flight as a failed one is undone, keeps the batches
committed before, and raises WriteCancelledError; the service's shutdown sets the event, so a
long ingest no longer holds SIGTERM until it ends. Real SQLite (lexical-only), and real Milvus
Lite with the packaged model for the compensation of written vectors; a real uvicorn server."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from hybridsag.consistency import Reconciler
from hybridsag.documents import IngestReport, make_document
from hybridsag.errors import WriteCancelledError
from hybridsag.search import HybridSearch
from hybridsag.service.server import build_server
from hybridsag.settings import Settings

from tests.consistency_support import check_consistent, make_settings, open_search
from tests.servicesupport import ADMIN, free_socket, wait_ready

DOCS = [make_document(f"doc{i}", f"Document {i} talks about lighthouse {i}.") for i in range(4)]


def _ids(hs: HybridSearch) -> list[str]:
    rows = hs.components.store.connection().execute(
        "SELECT resource_id, status, pending_version FROM resources ORDER BY resource_id"
    )
    return [r[0] for r in rows if r[1] == "ready" and r[2] is None]


def _clean(hs: HybridSearch) -> None:
    plan = Reconciler(hs.components).plan()
    assert plan.is_empty and not plan.pending_claims, plan.counts()
    journal = hs.components.store.connection().execute("SELECT count(*) FROM journal")
    assert journal.fetchone()[0] == 0


def test_a_cancel_set_mid_ingest_undoes_the_batch_in_flight_and_keeps_the_earlier_ones(
    hs: HybridSearch,
) -> None:
    cancel = threading.Event()
    done = []

    def progress(documents: int) -> None:
        done.append(documents)
        if sum(done) == 3:  # doc2 is chunked: the next document of its batch is not
            # the first batch is written while the second is staged (Writer._pipeline): the
            # cancel is meant for the second, so it waits for the first's commit
            deadline = time.monotonic() + 30
            while _ids(hs) != ["doc0", "doc1"] and time.monotonic() < deadline:
                time.sleep(0.01)
            cancel.set()

    with pytest.raises(WriteCancelledError) as info:
        hs.components.writer().ingest_many(DOCS, batch_size=2, progress=progress, cancel=cancel)
    assert "ingest cancelled while chunking" in str(info.value)
    assert "2 resource(s) committed before it stay indexed" in str(info.value)
    assert info.value.retriable
    report = info.value.report
    assert isinstance(report, IngestReport) and report.indexed == 2
    assert _ids(hs) == ["doc0", "doc1"]
    _clean(hs)
    assert {r.resource_id for r in hs.search("lighthouse", paths=["bm25"]).results} == {
        "doc0", "doc1"
    }
    # the same write sent again finishes, and skips what was committed
    again = hs.components.writer().ingest_many(DOCS, batch_size=2, cancel=threading.Event())
    assert (again.indexed, again.unchanged) == (2, 2)
    assert _ids(hs) == ["doc0", "doc1", "doc2", "doc3"]


def test_a_cancel_set_before_writes_nothing(hs: HybridSearch) -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(WriteCancelledError, match="0 resource"):
        hs.ingest_documents(DOCS, cancel=cancel)
    assert _ids(hs) == []
    _clean(hs)


def test_a_cancel_after_the_vectors_are_written_leaves_the_resource_as_it_was(
    tmp_path: Path,
) -> None:
    cancel = threading.Event()
    armed = threading.Event()

    def hook(step: str, resource_id: str) -> None:
        if armed.is_set() and step == "vectors":  # the claim stands, its vectors come next
            cancel.set()

    with open_search(make_settings(tmp_path / "data"), step_hook=hook) as hs:
        assert hs.ingest_documents(DOCS).indexed == 4
        before = hs.components.store.get_resource("doc1")
        newer = make_document("doc1", "Document 1 now talks about submarines.")
        armed.set()
        with pytest.raises(WriteCancelledError, match="before the commit"):
            hs.ingest_documents([newer], cancel=cancel)
        after = hs.components.store.get_resource("doc1")
        assert (after.version, after.content_sha256, after.pending_version) == (
            before.version, before.content_sha256, None
        )
        assert check_consistent(hs) == []  # the claim's vectors were removed again
        _clean(hs)
        assert not hs.search("submarines", paths=["bm25"]).results
        assert hs.search("lighthouse 1", paths=["dense"], top_k=1).results[0].resource_id == "doc1"


def test_the_service_shutdown_cancels_the_write_in_flight(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        embedding={"model": "none"},
        server={"token": ADMIN, "reconciler": False, "shutdown_timeout_s": 1},
    )
    steps: list[str] = []
    entered = threading.Event()
    holder: dict[str, object] = {}

    def hook(step: str, resource_id: str) -> None:
        if resource_id != "slow":
            return
        steps.append(step)
        if step == "claim":  # a long write: it holds the writer until the service stops
            entered.set()
            state = holder["state"]
            deadline = time.monotonic() + 60
            while state.ready and time.monotonic() < deadline:  # type: ignore[attr-defined]
                time.sleep(0.01)

    hs = HybridSearch(settings, step_hook=hook)
    server = build_server(settings, search=hs)
    holder["state"] = server.config.app.state.service
    sock = free_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    answers: list[object] = []

    def post() -> None:
        try:
            answers.append(httpx.post(
                f"{url}/v1/resources", json=[{"_id": "slow", "text": "A slow write."}],
                headers={"Authorization": f"Bearer {ADMIN}"}, timeout=120,
            ).status_code)
        except httpx.HTTPError as exc:  # the server closed the connection while stopping
            answers.append(type(exc).__name__)

    try:
        wait_ready(url)
        client = threading.Thread(target=post)
        client.start()
        assert entered.wait(60), "the write never started"
        server.should_exit = True  # what SIGTERM does
        thread.join(timeout=120)
        client.join(timeout=120)
        assert not thread.is_alive(), "the service did not stop"
        assert steps == ["claim"], steps  # cancelled after the claim: never committed
        assert hs.components.store.get_resource("slow") is None
        _clean(hs)
        assert answers and answers[0] != 200, answers
    finally:
        server.should_exit = True
        thread.join(timeout=120)
        sock.close()
        hs.close()
