"""Several ``hybridsag serve`` replicas on one PostgreSQL store and one Milvus.

Two real service processes (the ``serve`` path of ``tests/service_child.py``), each with a data
dir of its own, share a PostgreSQL database (started from the machine's binaries) and a Milvus
Lite server (``milvus-lite server``); the test drives them over HTTP only:

- the race of the consistency tests, its writers and searchers spread over both replicas and a
  reconcile through either every few tenths of a second: no search returns a resource deleted
  before it began, and a final reconcile leaves no orphan in any store;
- the reconcile lease keeps every replica's reconcile out while another owner holds it;
- a replica SIGKILLed in the middle of a write: the other keeps serving and writing (the advisory
  lock died with the killed process's connection), and its reconcile repairs what was left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hybridsag.client import ServiceClient
from hybridsag.consistency import Lease
from hybridsag.errors import ConsistencyError, NotFoundError
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings

from tests.consistency_race import RaceResult, run_race, summarize
from tests.milvusliteserver import milvus_lite_server  # noqa: F401 - the session's server
from tests.servicesupport import ADMIN, service_process

pytestmark = pytest.mark.slow


class Replica:
    """One service replica as the race drives it: :class:`HybridSearch`'s ``ingest``,
    ``delete`` and ``search``, over HTTP."""

    def __init__(self, url: str) -> None:
        self.client = ServiceClient(url, token=ADMIN, timeout=120)

    def ingest(self, resource_id: str, text: str, *, title: str = "") -> SimpleNamespace:
        report = self.client.ingest([{"_id": resource_id, "text": text, "title": title}])
        if report["errors"]:
            raise ConsistencyError(f"ingest of {resource_id} failed: {report['errors']}")
        return SimpleNamespace(indexed=report["indexed"], unchanged=report["unchanged"])

    def delete(self, resource_id: str) -> bool:
        try:
            self.client.delete(resource_id)
        except NotFoundError:
            return False
        return True

    def search(self, query: str, *, top_k: int) -> SimpleNamespace:
        data = self.client.search(query, top_k=top_k, explain=False)
        return SimpleNamespace(
            results=[SimpleNamespace(resource_id=r["resource_id"]) for r in data["results"]]
        )

    def close(self) -> None:
        self.client.close()


def _start(
    data: Path, url: str, milvus: str, collection: str, *args: str, lexical: str = "fts5"
) -> tuple[subprocess.Popen[bytes], str]:
    data.parent.mkdir(parents=True)
    return service_process(
        data,
        *args,
        HYBRIDSAG_SERVER__TOKEN=ADMIN,
        HYBRIDSAG_STORE__URL=url,
        HYBRIDSAG_LEXICAL__BACKEND=lexical,
        HYBRIDSAG_MILVUS__URI=milvus,
        HYBRIDSAG_MILVUS__COLLECTION=collection,
        HYBRIDSAG_CONSISTENCY__INDEXING_TIMEOUT_S="1",
        HYBRIDSAG_CONSISTENCY__BACKOFF_S="0.01",
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def replicas(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    postgres_url: str,
    milvus_lite_server: str,  # noqa: F811 - the fixture
) -> Iterator[tuple[list[subprocess.Popen[bytes]], list[Replica], Settings]]:
    """Two service processes (the second holds a write of ``victim`` at its commit step), their
    clients, and settings over the same store and collection for the test's own checks. The
    lexical index is in PostgreSQL, or on the Milvus server (full-text search) for a test
    parametrized ``replicas="milvus"`` (indirect)."""
    collection = f"replicas_{os.getpid()}_{tmp_path.name[-12:].replace('-', '_')}"
    procs: list[subprocess.Popen[bytes]] = []
    clients: list[Replica] = []
    try:
        for name, args in (("one", ()), ("two", ("--hold", "victim"))):
            proc, url = _start(tmp_path / name / "data", postgres_url, milvus_lite_server,
                               collection, *args,
                               lexical=getattr(request, "param", "fts5"))
            procs.append(proc)
            clients.append(Replica(url))
        # the test's own view of the store, without Milvus: the test process holds no Milvus
        # connection (pymilvus keeps an idle shared one, which milvus-lite's server cuts off);
        # what Milvus holds is read through the replicas' reconcile plans
        settings = Settings(
            data_dir=tmp_path / "view" / "data",
            store={"url": postgres_url},
            embedding={"model": "none"},
        )
        yield procs, clients, settings
    finally:
        for client in clients:
            client.close()
        for proc in procs:
            _stop(proc)


#: The race over both replicas: at least this many operations, and on until each race window
#: (:meth:`RaceResult.windows`; the replicas inject no faults) was hit this often. The long run
#: is benchmarks/backends.py.
REPLICA_OPERATIONS = 160
REPLICA_WINDOWS = {
    "searches_during_deletes": 10,
    "overlapping_writes": 20,
    "reconciles_during_writes": 3,
}


@pytest.mark.parametrize(
    "replicas", ["fts5", "milvus"], ids=["lexical-in-postgres", "lexical-in-milvus"], indirect=True
)
def test_two_replicas_race_without_showing_deleted_resources(replicas) -> None:
    procs, clients, settings = replicas
    turn = iter(range(1_000_000))

    def reconcile() -> dict[str, Any]:  # through either replica in turn
        client = clients[next(turn) % 2].client
        return client.reconcile(dry_run=False, force=True)

    def enough(r: RaceResult) -> bool:
        hit = r.windows()
        return all(hit[name] >= n for name, n in REPLICA_WINDOWS.items())

    result = run_race(
        None, replicas=clients, reconcile=reconcile, operations=REPLICA_OPERATIONS, writers=4,
        reconcile_interval_s=0.5, until=enough, max_operations=4 * REPLICA_OPERATIONS,
    )
    summary = summarize(result)
    print("race summary:", summary)  # shown with -rP
    assert result.thread_errors == [], "\n".join([str(summary), *result.thread_errors])
    assert len(result.ops) >= REPLICA_OPERATIONS, summary
    assert result.search_errors == [], (summary, result.search_errors[:3])
    assert result.reconcile_errors == [], (summary, result.reconcile_errors[:3])
    hit = result.windows()
    for name, n in REPLICA_WINDOWS.items():  # the race windows really were hit
        assert hit[name] >= n, (name, summary)
    violations = result.visibility_violations()
    assert violations == [], "\n".join([str(summary), *violations[:10]])

    report = clients[0].client.reconcile(dry_run=False, force=True)
    assert report["ok"], report
    assert not any(report["counts_after"].values()), report
    # a fresh plan through the other replica: no orphan in PostgreSQL or Milvus
    again = clients[1].client.reconcile(dry_run=True)
    assert not any(again["counts_before"].values()), again
    with HybridSearch(settings) as view:
        assert _unfinished(view) == []
        problems, checked = result.final_state_problems(view)
        assert problems == [], "\n".join([str(summary), *problems[:10]])
        assert checked >= 5, summary


def _unfinished(view: HybridSearch) -> list[str]:
    """Claims, journal rows and resources left mid-write in the shared store."""
    conn = view.components.store.connection()
    rows = conn.execute(
        "SELECT resource_id, status, pending_version FROM resources "
        "WHERE status NOT IN ('ready', 'disabled') OR pending_version IS NOT NULL"
    ).fetchall()
    journal = conn.execute("SELECT op, resource_id FROM journal").fetchall()
    return [f"resource {tuple(r)}" for r in rows] + [f"journal {tuple(j)}" for j in journal]


def test_the_lease_keeps_every_replicas_reconcile_out(replicas) -> None:
    procs, clients, settings = replicas
    clients[0].ingest("kept", "a resource both replicas see", title="Kept")
    with HybridSearch(settings) as local:
        lease = Lease(local.components.store, ttl_s=300, owner="test-holder")
        with lease.held():
            for client in clients:
                with pytest.raises(ConsistencyError, match="test-holder"):
                    client.client.reconcile(dry_run=False)
        report = clients[1].client.reconcile(dry_run=False)
        assert report["ok"], report


def test_a_replica_killed_mid_write_leaves_the_other_serving(replicas, tmp_path: Path) -> None:
    procs, (one, two), settings = replicas
    one.ingest("steady", "the steady resource stays searchable", title="Steady")
    held = Path(f"{tmp_path / 'two' / 'data'}.held")
    answers: list[object] = []

    def write() -> None:  # held at its commit step, then killed with its replica
        try:
            answers.append(two.ingest("victim", "written when the replica dies", title="Victim"))
        except Exception as exc:  # noqa: BLE001 - the connection dies with the replica
            answers.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    deadline = time.monotonic() + 120
    while not held.exists():
        assert time.monotonic() < deadline, "the write never reached its commit step"
        time.sleep(0.01)
    procs[1].send_signal(signal.SIGKILL)
    procs[1].wait(timeout=60)
    writer.join(timeout=120)
    assert answers and isinstance(answers[0], Exception), answers

    # the survivor serves searches and takes writes (the killed one's lock went with it)
    assert one.search("steady resource", top_k=5).results[0].resource_id == "steady"
    one.ingest("after", "written after the other replica died", title="After")
    assert one.search("written after", top_k=5).results[0].resource_id == "after"
    # never committed: a claim (status indexing) that no search shows
    assert one.client.resource("victim")["status"] == "indexing"
    assert all(r.resource_id != "victim" for r in one.search("replica dies", top_k=10).results)

    # force: the killed claim's vector is 1 of 3, over the mass-delete guard's 20% share
    report = one.client.reconcile(dry_run=False, force=True)
    assert report["ok"], report
    assert report["counts_before"]["stuck_indexing"] == 1, report  # the killed claim
    assert not any(report["counts_after"].values()), report
    with HybridSearch(settings) as view:
        assert _unfinished(view) == []
        assert view.components.store.get_resource("victim") is None
    assert one.client.ready()
