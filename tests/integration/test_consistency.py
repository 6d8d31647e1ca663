"""The reconciler: plan classes, apply, idempotence, the mass-delete guard, the lease, attach mode,
audit reports and the ``reconcile``/``audit`` CLI commands.

Real SQLite, real Milvus Lite and the real packaged embedding model throughout. Inconsistent
states are made the way a crash or a failed call leaves them: rows and vectors written or
removed directly in SQLite and Milvus (the crash tests make them through the write path itself).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hybridsag.consistency import (
    CLASSES,
    Lease,
    Reconciler,
    apply_plan,
    build_plan,
    latest_report,
    list_reports,
)
from hybridsag.vectors.contract import VectorRow
from hybridsag.documents import make_document
from hybridsag.errors import ConsistencyError
from hybridsag.search import HybridSearch
from hybridsag.settings import (
    ConsistencySettings,
    EmbeddingSettings,
    MilvusFieldMap,
    MilvusSettings,
    Settings,
)

from tests.consistency_support import (
    check_consistent,
    make_settings,
    open_search,
    shared_embedder,
)
from tests.teamcollection import create_team_collection

CORPUS = {
    name: f"The {name} page says that {name}word is kept in drawer number {n}."
    for n, name in enumerate(
        ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
    )
}


def _index(hs: HybridSearch, texts: dict[str, str] = CORPUS) -> None:
    report = hs.ingest_documents([make_document(r, t, title=r.title()) for r, t in texts.items()])
    assert report.indexed == len(texts)


@pytest.fixture
def hs(tmp_path: Path, index_backends: tuple[str | None, str]) -> Iterator[HybridSearch]:
    """An indexed search over each backend in turn (SQLite, PostgreSQL, Milvus full-text)."""
    store_url, lexical = index_backends
    with open_search(make_settings(tmp_path / "data", store_url, lexical=lexical)) as search:
        _index(search)
        yield search


def _vec(seed: int) -> list[float]:
    return [float(x) for x in shared_embedder().encode([f"stray vector {seed}"])[0]]


def _chunk_id(hs: HybridSearch, rid: str) -> tuple[int, str]:
    row = hs.components.store.connection().execute(
        "SELECT id, chunk_id FROM chunks WHERE resource_id = ?", (rid,)
    ).fetchone()
    return row[0], row[1]


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_clean_index_has_an_empty_plan(hs: HybridSearch) -> None:
    plan = build_plan(hs.components.store, hs.components.lexical, hs.components.dense_index(), hs.settings)
    assert plan.is_empty
    assert plan.counts() == dict.fromkeys(CLASSES, 0)
    assert plan.collection_size == len(CORPUS)
    assert plan.resources == len(CORPUS) and plan.chunks == len(CORPUS)
    assert not plan.store_empty and plan.dense_checked


def test_every_class_is_found_fixed_and_the_fix_is_idempotent(hs: HybridSearch) -> None:
    dense = hs.components.dense_index()
    now = time.time()
    eps_rowid, _ = _chunk_id(hs, "epsilon")
    _, theta_cid = _chunk_id(hs, "theta")
    zeta_id = hs.components.store.connection().execute(
        "SELECT id FROM resources WHERE resource_id = 'zeta'"
    ).fetchone()[0]
    dense.upsert(
        [
            VectorRow("ghost@1#0", "ghost", 1, "", (), _vec(1)),  # resource never existed
            VectorRow("alpha@0#0", "alpha", 0, "", (), _vec(2)),  # older version of alpha
            VectorRow("gone@2#0", "gone", 2, "", (), _vec(3)),  # tombstoned at version 2
            VectorRow("eta@2#0", "eta", 2, "", (), _vec(4)),  # the crashed claim's vector
            VectorRow("iota@2#0", "iota", 2, "", (), _vec(5)),  # a timed-out claim's vector
        ]
    )
    dense.delete_ids([theta_cid])  # theta lost its vector
    with hs.components.store.atomic() as c:
        c.execute("INSERT INTO tombstones VALUES ('gone', 2, ?)", (now,))
        # delta: crashed right after its tombstone (status deleting, journal row)
        c.execute("UPDATE resources SET status = 'deleting' WHERE resource_id = 'delta'")
        c.execute("INSERT INTO tombstones VALUES ('delta', 1, ?)", (now,))
        c.execute(
            "INSERT INTO journal(op, resource_id, version, step, pid, started_at, updated_at) "
            "VALUES ('delete', 'delta', 1, 'tombstoned', ?, ?, ?)",
            (_dead_pid(), now, now),
        )
        # eta: a re-ingest claim whose process died; iota: a claim of this process, 2 h old
        c.execute("UPDATE resources SET pending_version = 2 WHERE resource_id IN ('eta', 'iota')")
        c.execute(
            "INSERT INTO journal(op, resource_id, version, step, pid, started_at, updated_at) "
            "VALUES ('ingest', 'eta', 2, 'claimed', ?, ?, ?)",
            (_dead_pid(), now, now),
        )
        c.execute(
            "INSERT INTO journal(op, resource_id, version, step, pid, started_at, updated_at) "
            "VALUES ('ingest', 'iota', 2, 'claimed', ?, ?, ?)",
            (os.getpid(), now - 7200, now - 7200),
        )
        # a new resource claimed by a dead process, never committed (no vectors yet)
        c.execute(
            "INSERT INTO resources(resource_id, status, version, pending_version, created_at, "
            "updated_at) VALUES ('newbie', 'indexing', 0, 1, ?, ?)",
            (now, now),
        )
        c.execute(
            "INSERT INTO journal(op, resource_id, version, step, pid, started_at, updated_at) "
            "VALUES ('ingest', 'newbie', 1, 'claimed', ?, ?, ?)",
            (_dead_pid(), now, now),
        )
        # a chunk row (and its FTS row) of no resource; FTS rows of nothing
        c.execute(
            "INSERT INTO chunks(id, chunk_id, resource_id, version, ordinal, text, start_line, "
            "end_line, byte_start, byte_end, content_sha256) "
            "VALUES (500, 'nobody@1#0', 'nobody', 1, 0, 'x', 1, 1, 0, 1, '')"
        )
        lexical = hs.components.lexical
        lexical.add_chunks(c, [(500, lexical.chunk_tokens("", "", "x"))])
        lexical.add_chunks(c, [(900, lexical.chunk_tokens("", "", "y"))])
        lexical.add_titles(c, [(800, lexical.title_tokens("stray"))])
        # epsilon's chunk lost its lexical row, zeta its title row
        lexical.remove_chunks(c, [eps_rowid])
        lexical.remove_titles(c, [zeta_id])
    assert not hs.search("epsilonword", paths=["bm25"]).results  # broken before

    plan = build_plan(hs.components.store, hs.components.lexical, dense, hs.settings)
    assert plan.counts() == {
        "tombstoned_leftovers": 2,  # delta (deleting), gone (tombstoned vector)
        "stuck_indexing": 3,  # eta (owner gone), iota (timeout), newbie (owner gone)
        "stale_versions": 1,
        "orphan_vectors": 1,
        "orphan_chunks": 1,
        "orphan_fts_rows": 2,
        "missing_fts_rows": 2,
        "missing_vectors": 1,
        "source_deleted": 0,  # no folder resource: no source drift
        "source_changed": 0,
        "source_new": 0,
    }
    samples = plan.samples()
    assert samples["orphan_vectors"] == ["ghost@1#0"]
    assert samples["stale_versions"] == ["alpha@0#0"]
    assert samples["tombstoned_leftovers"] == ["delta", "gone"]
    assert samples["missing_vectors"] == [theta_cid]
    assert samples["orphan_fts_rows"] == ["chunks_fts:900", "titles_fts:800"]
    reasons = {c.resource_id: c.reason for c in plan.stuck_indexing}
    assert reasons == {"eta": "owner gone", "iota": "timeout", "newbie": "owner gone"}
    # ghost + alpha@0 + gone@2 + delta's vector + eta@2 + iota@2
    assert plan.vectors_to_delete == 6

    report = apply_plan(plan, hs.components.store, dense, hs.components.writer(), hs.settings, force=True)
    assert report.ok, report.errors
    assert report.totals == {
        "deleted_vectors": 6,
        "purged_resources": 2,
        "released_claims": 3,
        "dropped_rows": 1,
        "deleted_chunks": 1,
        "deleted_fts_rows": 2,
        "repaired_fts_rows": 2,
        "backfilled_vectors": 1,
    }
    assert check_consistent(hs) == []
    assert build_plan(hs.components.store, hs.components.lexical, dense, hs.settings).is_empty
    # nothing live was lost; the broken things work again
    assert hs.components.store.get_resource("delta") is None
    assert hs.components.store.get_resource("newbie") is None
    for rid in ("eta", "iota", "theta", "epsilon", "zeta"):
        rec = hs.components.store.get_resource(rid)
        assert rec is not None and rec.status == "ready" and rec.version == 1
        assert rec.pending_version is None
    assert dense.count() == len(CORPUS) - 1  # all but delta
    assert hs.search("epsilonword", paths=["bm25"]).results[0].resource_id == "epsilon"
    assert hs.search("Zeta", paths=["title"]).results[0].resource_id == "zeta"
    assert hs.search("thetaword", paths=["dense"]).results[0].resource_id == "theta"

    # idempotent: the same (now stale) plan again changes nothing; a fresh plan finds nothing
    entries = sorted(dense.iter_entries())
    again = apply_plan(plan, hs.components.store, dense, hs.components.writer(), hs.settings, force=True)
    assert again.ok
    assert sorted(dense.iter_entries()) == entries
    assert check_consistent(hs) == []
    fresh = build_plan(hs.components.store, hs.components.lexical, dense, hs.settings)
    assert fresh.is_empty
    assert apply_plan(fresh, hs.components.store, dense, hs.components.writer(), hs.settings).totals == {}


def test_a_claim_in_progress_is_left_alone(hs: HybridSearch) -> None:
    dense = hs.components.dense_index()
    now = time.time()
    dense.upsert([VectorRow("kappa@2#0", "kappa", 2, "", (), _vec(9))])
    with hs.components.store.atomic() as c:
        c.execute("UPDATE resources SET pending_version = 2 WHERE resource_id = 'kappa'")
        c.execute(
            "INSERT INTO journal(op, resource_id, version, step, pid, started_at, updated_at) "
            "VALUES ('ingest', 'kappa', 2, 'claimed', ?, ?, ?)",
            (os.getpid(), now, now),
        )
    rec = Reconciler(hs.components)
    plan = rec.plan()
    assert plan.is_empty
    assert [c.resource_id for c in plan.pending_claims] == ["kappa"]
    rec.run()
    assert ("kappa@2#0", "kappa", 2) in set(dense.iter_entries())
    assert hs.components.store.get_resource("kappa").pending_version == 2


def test_a_plan_made_stale_by_a_later_write_deletes_nothing_live(hs: HybridSearch) -> None:
    dense = hs.components.dense_index()
    dense.upsert([VectorRow("lambda@1#0", "lambda", 1, "", (), _vec(7))])
    plan = build_plan(hs.components.store, hs.components.lexical, dense, hs.settings)
    assert [v.chunk_id for v in plan.orphan_vectors] == ["lambda@1#0"]
    # the resource is ingested after the plan: its vector id is now live
    hs.ingest("lambda", "The lambda page says that lambdaword is new.", title="Lambda")
    report = apply_plan(plan, hs.components.store, dense, hs.components.writer(), hs.settings, force=True)
    assert report.totals.get("deleted_vectors", 0) == 0
    assert report.batches[0].skipped == 1
    assert ("lambda@1#0", "lambda", 1) in set(dense.iter_entries())
    assert check_consistent(hs) == []


# -- the mass-delete guard -------------------------------------------------------------------


def test_guard_refuses_a_large_share_unless_forced(hs: HybridSearch) -> None:
    dense = hs.components.dense_index()
    dense.upsert([VectorRow(f"ghost{i}@1#0", f"ghost{i}", 1, "", (), _vec(i)) for i in range(4)])
    rec = Reconciler(hs.components)
    with pytest.raises(ConsistencyError, match=r"4 of 14 vectors .*max_delete_share=0.2"):
        rec.run()
    assert dense.count() == 14
    refused = rec.latest_report()
    assert refused is not None and refused["refused"] and not refused["ok"]
    assert refused["counts_before"]["orphan_vectors"] == 4
    report = rec.run(force=True)
    assert report["ok"] and report["force"]
    assert dense.count() == 10


def test_guard_refuses_more_than_the_count(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", max_delete_share=1.0, max_delete_count=2)
    with open_search(settings) as hs:
        _index(hs)
        hs.components.dense_index().upsert(
            [VectorRow(f"ghost{i}@1#0", f"ghost{i}", 1, "", (), _vec(i)) for i in range(3)]
        )
        with pytest.raises(ConsistencyError, match="max_delete_count=2"):
            Reconciler(hs.components).run()
        assert hs.components.dense_index().count() == 13


def test_a_wrong_resource_table_is_refused(hs: HybridSearch) -> None:
    with hs.components.store.atomic() as c:  # half the resource rows vanish (a restored old backup, say)
        c.execute(
            "DELETE FROM resources WHERE resource_id IN ('alpha','beta','gamma','delta','eta')"
        )
    plan = Reconciler(hs.components).plan()
    assert plan.counts()["orphan_vectors"] == 5 and plan.counts()["orphan_chunks"] == 5
    with pytest.raises(ConsistencyError, match="mass-delete guard"):
        Reconciler(hs.components).run()
    assert hs.components.dense_index().count() == 10
    assert hs.components.store.counts()["chunks"] == 10


def test_an_empty_store_never_wipes_the_collection(tmp_path: Path) -> None:
    full = tmp_path / "full"
    with open_search(make_settings(full)) as hs:
        _index(hs)
    empty = tmp_path / "empty"
    # the same index and collection, seen from a data dir whose store lost every row (a copy
    # emptied by hand, an old backup): its meta still names the index that owns the vectors
    shutil.copytree(full, empty)
    with open_search(make_settings(empty)) as hs:
        with hs.components.store.atomic() as c:
            for table in ("chunks_fts", "titles_fts", "chunk_vectors", "chunks", "resources"):
                c.execute(f"DELETE FROM {table}")
        rec = Reconciler(hs.components)
        plan = rec.plan()
        assert plan.store_empty and plan.collection_size == 10
        assert plan.counts()["orphan_vectors"] == 10
        for force in (False, True):
            with pytest.raises(ConsistencyError, match="never wipes"):
                rec.run(force=force)
        assert hs.components.dense_index().count() == 10


# -- the lease ---------------------------------------------------------------------------------


def test_lease_single_flight_and_expiry(hs: HybridSearch) -> None:
    clock = [1000.0]
    a = Lease(hs.components.store, ttl_s=10, owner="host-a:1:aaaa", clock=lambda: clock[0])
    b = Lease(hs.components.store, ttl_s=10, owner="host-b:2:bbbb", clock=lambda: clock[0])
    a.acquire()
    clock[0] = 1005.0
    with pytest.raises(ConsistencyError, match="host-a:1:aaaa"):
        b.acquire()
    a.renew()  # the holder may extend: now until 1015
    clock[0] = 1012.0
    with pytest.raises(ConsistencyError, match="lease"):
        b.acquire()
    clock[0] = 1016.0  # a crashed holder's lease has expired: it may be taken
    assert b.holder()["expired"] is True
    b.acquire()
    assert b.holder()["owner"] == "host-b:2:bbbb"
    with pytest.raises(ConsistencyError, match="was lost"):
        a.renew()
    a.release()  # not the holder: no effect
    assert b.holder()["owner"] == "host-b:2:bbbb"
    b.release()
    assert b.holder() is None


def test_a_held_lease_refuses_a_run_until_it_expires(hs: HybridSearch) -> None:
    crashed = Lease(hs.components.store, ttl_s=0.5, owner="crashed:1:dead")
    crashed.acquire()  # and never released
    with pytest.raises(ConsistencyError, match="crashed:1:dead"):
        Reconciler(hs.components).run()
    time.sleep(0.6)
    report = Reconciler(hs.components).run()
    assert report["ok"]
    assert Lease(hs.components.store, ttl_s=1).holder() is None  # released after the run


# -- attach mode ---------------------------------------------------------------------------------


def _team_collection(settings: Settings, rows: int) -> None:
    create_team_collection(
        settings,
        [
            {"id": f"t{i}", "resource_id": f"team{i}", "text": f"team text {i}",
             "title": f"Team {i}", "vector": _vec(100 + i)}
            for i in range(rows)
        ],
        dim=384,
    )  # fmt: skip


def test_attach_mode_refuses_apply_unless_writes_are_allowed(tmp_path: Path) -> None:
    base = make_settings(tmp_path / "data")
    _team_collection(base, 3)

    def attached(allow: bool) -> Settings:
        return base.model_copy(
            update={
                "milvus": MilvusSettings(
                    attach=True, allow_writes=allow, collection="team_docs",
                    fields=MilvusFieldMap(tenant=None),
                )
            }
        )

    with open_search(attached(False)) as hs:
        rec = Reconciler(hs.components)
        dry = rec.run(dry_run=True)  # reading is fine
        assert dry["dry_run"] and dry["counts_before"]["orphan_vectors"] == 3
        with pytest.raises(ConsistencyError, match="allow_writes"):
            rec.run(force=True)
        assert hs.components.dense_index().count() == 3
    with open_search(attached(True)) as hs:
        # writes allowed, but this data dir holds nothing: the team's vectors are not ours
        with pytest.raises(ConsistencyError, match="never wipes"):
            Reconciler(hs.components).run(force=True)
        assert hs.components.dense_index().count() == 3


# -- audit reports -------------------------------------------------------------------------------


def test_reports_are_written_rotated_and_read_back(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", keep_reports=2)
    assert latest_report(settings.reports_dir) is None
    with open_search(settings) as hs:
        _index(hs, {"alpha": CORPUS["alpha"]})
        rec = Reconciler(hs.components)
        first = rec.run(dry_run=True)
        hs.components.dense_index().upsert([VectorRow("ghost@1#0", "ghost", 1, "", (), _vec(1))])
        second = rec.run(force=True)
        third = rec.run()
    files = list_reports(settings.reports_dir)
    assert [str(p) for p in files] == [second["path"], third["path"]]
    assert not Path(first["path"]).exists()
    latest = latest_report(settings.reports_dir)
    assert latest is not None and latest["path"] == third["path"]
    assert set(latest["counts_before"]) == set(CLASSES)
    data = json.loads(Path(second["path"]).read_text())
    assert data["dry_run"] is False and data["force"] is True and data["ok"] is True
    assert data["counts_before"]["orphan_vectors"] == 1
    assert data["counts_after"]["orphan_vectors"] == 0
    assert data["samples_before"]["orphan_vectors"] == ["ghost@1#0"]
    assert data["apply"]["totals"] == {"deleted_vectors": 1}
    assert [b["kind"] for b in data["apply"]["batches"]] == ["orphan_vectors"]
    assert set(data["durations"]) == {"plan_s", "apply_s", "replan_s", "total_s"}
    assert data["settings"]["data_dir"] == str(settings.data_dir)
    assert data["settings"]["consistency"]["keep_reports"] == 2
    assert first["dry_run"] is True and first["apply"] is None


# -- the CLI ---------------------------------------------------------------------------------------


def _cli(*argv: str) -> tuple[int, str]:
    from hybridsag.cli import main

    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def test_cli_reconcile_and_audit(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with open_search(make_settings(data)) as hs:
        _index(hs, {"alpha": CORPUS["alpha"], "beta": CORPUS["beta"]})
        hs.components.dense_index().upsert([VectorRow("ghost@1#0", "ghost", 1, "", (), _vec(1))])
    code, out = _cli("--data-dir", str(data), "audit", "--json")
    assert code == 1 and out == ""

    code, out = _cli("--data-dir", str(data), "reconcile", "--dry-run", "--json")
    assert code == 1  # the plan has work (an orphan vector): cron hears of it
    dry = json.loads(out)
    assert dry["dry_run"] is True and dry["counts_before"]["orphan_vectors"] == 1
    assert dry["samples_before"]["orphan_vectors"] == ["ghost@1#0"]

    code, out = _cli("--data-dir", str(data), "reconcile", "--force")
    assert code == 0
    assert "orphan_vectors" in out and "deleted_vectors 1" in out

    code, out = _cli("--data-dir", str(data), "audit", "--json")
    assert code == 0
    latest = json.loads(out)
    assert latest["force"] is True and latest["counts_after"]["orphan_vectors"] == 0

    code, _ = _cli("--data-dir", str(data), "reconcile", "--schedule", "--dry-run")
    assert code == 2


def test_cli_exit_code_2_when_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with open_search(make_settings(data)) as hs:
        _index(hs, {"alpha": CORPUS["alpha"]})
        Lease(hs.components.store, ttl_s=600, owner="other:1:held").acquire()
    code, _ = _cli("--data-dir", str(data), "reconcile")
    assert code == 2
    settings = Settings(data_dir=data, consistency=ConsistencySettings(),
                        embedding=EmbeddingSettings())
    report = latest_report(settings.reports_dir)
    assert report is not None and "other:1:held" in report["refused"]
