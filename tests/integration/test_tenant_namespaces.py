"""Resource ids are scoped by tenant: a resource is ``(tenant, resource_id)``.

Two tenants each hold ``notes``; each reads, searches, disables and deletes only its own; an id
that only another tenant holds is, to a tenant, exactly a missing id (over HTTP: the same status
and the same error body, the id apart), and an ingest of it makes the tenant's own resource
(issue 23 item 7: before, a write token learnt which ids another tenant held from a 403 "held by
another tenant", and could take ids before their owner did). A reconcile afterwards finds
nothing to do.

Real parts: SQLite (or PostgreSQL, or Milvus full-text as the lexical index), Milvus Lite and
the packaged model in process; a real uvicorn service with two tenants' write tokens over HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from hybridsag.consistency import Reconciler
from hybridsag.vectors.contract import VectorRow
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from hybridsag.records.keys import chunk_id_suffix, split_key
from hybridsag.records.schema import MIGRATIONS

from tests.consistency_support import check_consistent, make_settings, open_search
from tests.servicesupport import ADMIN, running_service
from tests.settings_support import clean_env_settings

NOTES = {
    "a": "The zebra of the north field grazes at dawn.",
    "b": "The zebra of the south barn sleeps all day.",
}
#: what each tenant's search may return (tenant, id): its notes, and b's own other resource
VISIBLE = {"a": {("a", "notes")}, "b": {("b", "notes"), ("b", "only-b")}}


def _found(hs: HybridSearch, paths: list[str] | None, **filters: Any) -> set[tuple[str, str]]:
    resp = hs.search("zebra notes", paths=paths, filters=filters, top_k=20)
    assert not resp.degraded, resp.reasons
    copies = {(a["tenant"], a["resource_id"]) for r in resp.results for a in r.also_in}
    return {(r.tenant, r.resource_id) for r in resp.results} | copies  # a copy is shown too


def _reconcile_finds_nothing(hs: HybridSearch) -> None:
    report = Reconciler(hs.components).run(dry_run=True)
    assert not any(report["counts_before"].values()), report["counts_before"]
    assert check_consistent(hs) == []


@pytest.fixture
def two_notes(
    tmp_path: Path, index_backends: tuple[str | None, str]
) -> Iterator[HybridSearch]:
    store_url, lexical = index_backends
    with open_search(make_settings(tmp_path / "data", store_url, lexical=lexical)) as hs:
        for tenant, text in NOTES.items():
            assert hs.ingest("notes", text, title="Zebra notes", tenant=tenant).indexed == 1
        assert hs.ingest("only-b", "A zebra that only b holds.", tenant="b").indexed == 1
        yield hs


def test_two_tenants_each_hold_their_own_notes(two_notes: HybridSearch) -> None:
    hs = two_notes
    for tenant, text in NOTES.items():
        record = hs.resource("notes", tenant=tenant)
        assert record is not None and (record.resource_id, record.tenant) == ("notes", tenant)
        assert [c.text for c in hs.resource_chunks("notes", tenant=tenant)] == [text]
        detail = hs.get_resource("notes", tenant=tenant)
        assert detail is not None and detail.record.tenant == tenant
    # chunk ids stay printable, and say whose they are
    assert [c.chunk_id for c in hs.resource_chunks("notes", tenant="a")] == ["notes@1#0@a"]
    assert hs.resource("notes") is None and hs.get_resource("notes") is None  # no un-tenanted
    assert hs.resource("only-b", tenant="a") is None
    assert not hs.resource_chunks("only-b", tenant="a")
    assert {(s.record.tenant, s.record.resource_id) for s in hs.list_resources()} == (
        VISIBLE["a"] | VISIBLE["b"]
    )

    for tenant in NOTES:
        assert _found(hs, None, tenant=tenant) == VISIBLE[tenant]
        for paths in (["bm25"], ["dense"]):
            assert _found(hs, paths, tenant=tenant) == VISIBLE[tenant], paths
        assert _found(hs, ["title"], tenant=tenant) == {(tenant, "notes")}
        assert (tenant, "notes") in _found(hs, ["sag2"], tenant=tenant) <= VISIBLE[tenant]
        # a tenant's resource_ids filter names its own ids only
        assert _found(hs, None, tenant=tenant, resource_ids=["notes", "only-b"]) == VISIBLE[tenant]
    # unscoped (the operator's view): both notes, told apart by their tenant
    both = {("a", "notes"), ("b", "notes")}
    assert _found(hs, None) == VISIBLE["a"] | VISIBLE["b"]
    for paths in (["bm25"], ["dense"], ["title"], None):
        assert _found(hs, paths, resource_ids=["notes"]) == both, paths
    assert _found(hs, ["bm25"], resource_ids=["only-b"]) == {("b", "only-b")}


def test_each_tenant_disables_and_deletes_only_its_own(two_notes: HybridSearch) -> None:
    hs = two_notes
    assert hs.disable("notes", tenant="a")
    assert _found(hs, None, tenant="a") == set()
    assert _found(hs, None, tenant="b") == VISIBLE["b"]
    assert hs.enable("notes", tenant="a")
    assert not hs.disable("only-b", tenant="a") and not hs.enable("only-b", tenant="a")
    assert not hs.delete("only-b", tenant="a")  # b's, so a has none
    assert hs.resource("only-b", tenant="b") is not None

    assert hs.delete("notes", tenant="a")
    assert not hs.delete("notes", tenant="a")
    assert hs.resource("notes", tenant="a") is None
    assert [c.text for c in hs.resource_chunks("notes", tenant="b")] == [NOTES["b"]]
    for paths in (["bm25"], ["dense"], ["title"]):
        assert _found(hs, paths, resource_ids=["notes"]) == {("b", "notes")}, paths
    _reconcile_finds_nothing(hs)

    # the same id again in a: a new resource of a (its versions go on from the deleted one's)
    assert hs.ingest("notes", "A zebra returns to the north.", tenant="a").indexed == 1
    assert [c.chunk_id for c in hs.resource_chunks("notes", tenant="a")] == ["notes@2#0@a"]
    assert hs.resource("notes", tenant="b").version == 1
    _reconcile_finds_nothing(hs)


def test_a_tenant_id_never_addresses_another_namespace(hs: HybridSearch) -> None:
    """Ids and tenants never hold the key separator, so no id of tenant "" is another tenant's
    key."""
    hs.ingest("notes", "kept", tenant="a")
    for call in (hs.resource, hs.delete, hs.disable):
        with pytest.raises(Exception, match="control character"):
            call("a\x1fnotes")
    assert hs.resource("notes", tenant="a") is not None


def test_tenants_index_folders_with_the_same_relative_paths(
    hs: HybridSearch, tmp_path: Path
) -> None:
    for tenant in ("a", "b"):
        root = tmp_path / tenant
        (root / "kms").mkdir(parents=True)
        (root / "README.md").write_text(f"# Readme\n\nThe okapi of {tenant}.\n", "utf-8")
        (root / "kms" / "keys.md").write_text(f"The keys of {tenant}.\n", "utf-8")
        report = hs.ingest_folder(root, tenant=tenant)
        assert (report.indexed, report.errors, report.root) == (2, {}, str(root.resolve()))
    for tenant in ("a", "b"):
        record = hs.resource("README.md", tenant=tenant)
        assert record is not None and record.source_uri == str(tmp_path / tenant / "README.md")
        assert hs.resource_chunks("kms/keys.md", tenant=tenant)[0].text == f"The keys of {tenant}."
    # the un-tenanted namespace has folders of its own: b's root is not its root
    report = hs.ingest_folder(tmp_path / "b" / "kms")
    assert report.root == str((tmp_path / "b" / "kms").resolve()) and report.indexed == 1
    assert hs.resource("keys.md") is not None and hs.resource("kms/keys.md") is None
    # a's prune removes a's resource of a file gone, nobody else's
    (tmp_path / "a" / "kms" / "keys.md").unlink()
    assert hs.ingest_folder(tmp_path / "a", tenant="a").pruned == ["kms/keys.md"]
    assert hs.resource("kms/keys.md", tenant="a") is None
    assert hs.resource("kms/keys.md", tenant="b") is not None
    assert hs.ingest_folder(tmp_path / "b", tenant="b").pruned == []
    assert {(s.record.tenant, s.record.resource_id) for s in hs.list_resources()} == {
        ("a", "README.md"), ("b", "README.md"), ("b", "kms/keys.md"), ("", "keys.md")
    }


# -- an index of the layout before: every key was the plain id ----------------------------------


def _to_old_layout(hs: HybridSearch) -> None:
    """Rewrite an index to what builds before identity was per tenant wrote (the rows written
    here with SQL, the vector rows with the adapter's own upsert, which writes the fields it
    always wrote): a tenant's resource keyed by its id in every table, its chunk ids
    ``<id>@<version>#<ordinal>``, and migration ``0005_tenant_keys`` not applied."""
    parts = hs.components
    dense = parts.dense_index()
    with parts.store.atomic() as conn:
        chunks = conn.execute(
            "SELECT c.id, c.chunk_id, r.tenant, r.acl, c.version, v.vector FROM chunks c "
            "JOIN resources r ON r.resource_id = c.resource_id "
            "JOIN chunk_vectors v ON v.id = c.id WHERE r.tenant <> ''"
        ).fetchall()
        moved = []
        for rowid, chunk_id, tenant, acl, version, vector in chunks:
            old_id = chunk_id[: -len(chunk_id_suffix(tenant))]
            conn.execute("UPDATE chunks SET chunk_id = ? WHERE id = ?", (old_id, rowid))
            moved.append((chunk_id, old_id, tenant, json.loads(acl), version, bytes(vector)))
        for table in ("tombstones", "journal", "chunks", "resources"):
            keys = [r[0] for r in conn.execute(f"SELECT DISTINCT resource_id FROM {table}")]
            for key in keys:
                if split_key(key)[0]:
                    conn.execute(
                        f"UPDATE {table} SET resource_id = ? WHERE resource_id = ?",
                        (split_key(key)[1], key),
                    )
        for key in [r[0] for r in conn.execute("SELECT resource_id FROM resources")]:
            parts.lexical.status_changed(conn, key)  # Milvus full-text rows name chunk ids
        conn.execute("DELETE FROM migrations WHERE name = '0005_tenant_keys'")
        conn.execute("UPDATE meta SET value = '0004_source_root' WHERE key = 'schema_version'")
    dense.upsert(
        [
            VectorRow(old_id, old_id.rsplit("@", 1)[0], version, tenant, tuple(acl),
                      np.frombuffer(vector, dtype=np.float32).tolist())
            for _new, old_id, tenant, acl, version, vector in moved
        ]
    )
    dense.delete_ids([new for new, *_ in moved])


def _plain_rows(hs: HybridSearch) -> list[Any]:
    """Every stored row of the un-tenanted resource ``plain`` (and its vector entries)."""
    conn = hs.components.store.connection()
    rows: list[Any] = [tuple(conn.execute("SELECT * FROM resources WHERE resource_id = 'plain'")
                             .fetchone())]
    rows += [tuple(r) for r in conn.execute(
        "SELECT c.*, v.vector FROM chunks c JOIN chunk_vectors v ON v.id = c.id "
        "WHERE c.resource_id = 'plain' ORDER BY c.id")]
    rows += sorted(e for e in hs.components.dense_index().iter_entries() if e[1] == "plain")
    return rows


def test_an_index_of_the_old_layout_is_migrated_and_nothing_in_milvus_moves(
    tmp_path: Path, index_backends: tuple[str | None, str]
) -> None:
    store_url, lexical = index_backends
    if lexical == "tantivy":
        pytest.skip("the tantivy backend came after migration 0005: no index of the old layout "
                    "has tantivy rows to keep")
    settings = make_settings(tmp_path / "data", store_url, lexical=lexical)
    with open_search(settings) as hs:
        for tenant, text in NOTES.items():
            hs.ingest(f"notes-{tenant}", text, title="Zebra notes", tenant=tenant)
        hs.ingest("notes", NOTES["a"], title="Zebra notes", tenant="a")
        hs.ingest("gone", "A zebra that b deleted.", tenant="b")
        assert hs.delete("gone", tenant="b")
        hs.ingest("plain", "An un-tenanted zebra.", title="Plain")
        _to_old_layout(hs)
        old_chunk = hs.components.store.connection().execute(
            "SELECT chunk_id FROM chunks WHERE resource_id = 'notes'"
        ).fetchone()[0]
        assert old_chunk == "notes@1#0"  # the old layout: no tenant in the key nor the chunk id
        plain = _plain_rows(hs)
        entries_before = sorted(hs.components.dense_index().iter_entries())

    with open_search(settings) as hs:  # the new code opens it: 0005 runs
        store = hs.components.store
        assert store.get_meta("schema_version") == MIGRATIONS[-1][0]  # 0005 and any after
        assert _plain_rows(hs) == plain  # the un-tenanted resource: every row as it was
        # chunk ids and the Milvus rows stay: the rows already carried the id and the tenant
        assert sorted(hs.components.dense_index().iter_entries()) == entries_before
        assert ("notes@1#0", "a\x1fnotes", 1) in entries_before
        record = hs.resource("notes", tenant="a")
        assert record is not None and hs.resource("notes") is None
        assert [c.chunk_id for c in hs.resource_chunks("notes", tenant="a")] == [old_chunk]
        for paths in (["bm25"], ["dense"], ["title"]):
            assert ("a", "notes") in _found(hs, paths, tenant="a"), paths
            assert _found(hs, paths, tenant="b") == {("b", "notes-b")}, paths
        _reconcile_finds_nothing(hs)

        # an un-tenanted notes now: its versions start above the old key's, so its chunk ids
        # never meet the kept ones of a's notes
        assert hs.ingest("notes", "An un-tenanted zebra note.").indexed == 1
        assert [c.chunk_id for c in hs.resource_chunks("notes")] == ["notes@2#0"]
        # a's notes, indexed again, gets the new chunk ids; its old vector goes
        assert hs.ingest("notes", "The zebra moved east.", tenant="a").indexed == 1
        assert [c.chunk_id for c in hs.resource_chunks("notes", tenant="a")] == ["notes@2#0@a"]
        assert old_chunk not in {cid for cid, _, _ in hs.components.dense_index().iter_entries()}
        assert hs.delete("notes-b", tenant="b")
        assert _found(hs, ["bm25"], resource_ids=["notes"]) == {("a", "notes"), ("", "notes")}
        _reconcile_finds_nothing(hs)


# -- over HTTP --------------------------------------------------------------------------------

TOKENS = {
    "a": {"name": "a-write", "token": "tenant-a-write-0123456789", "role": "write", "tenant": "a"},
    "b": {"name": "b-write", "token": "tenant-b-write-0123456789", "role": "write", "tenant": "b"},
}


def _client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("namespaces") / "data"
    settings: Settings = clean_env_settings(
        data_dir=data,
        embedding={"model": "none"},
        server={"token": ADMIN, "tokens": list(TOKENS.values()), "reconciler": False},
    )
    with running_service(settings) as base:
        yield base


def _answer(r: httpx.Response, rid: str) -> tuple[int, str, str]:
    """What a client sees of an answer, with the id it echoes taken out."""
    return r.status_code, r.headers.get("content-type", ""), r.text.replace(repr(rid), "ID")


def test_over_http_each_tenant_holds_reads_searches_and_deletes_its_own(url: str) -> None:
    a, b = _client(url, TOKENS["a"]["token"]), _client(url, TOKENS["b"]["token"])
    admin = _client(url, ADMIN)
    with a, b, admin:
        for c, tenant in ((a, "a"), (b, "b")):
            body = [{"_id": "notes", "title": "Zebra", "text": NOTES[tenant]}]
            r = c.post("/v1/resources", json=body)
            assert r.status_code == 200 and r.json()["indexed"] == 1, r.text
        r = b.post("/v1/resources", json=[{"_id": "only-b", "text": "b's zebra"}])
        assert r.status_code == 200

        for c, tenant in ((a, "a"), (b, "b")):
            got = c.get("/v1/resources/notes").json()
            assert got["tenant"] == tenant and [x["text"] for x in got["chunks"]] == [NOTES[tenant]]
            results = c.post("/v1/search", json={"query": "zebra", "top_k": 10}).json()["results"]
            assert {(x["tenant"], x["resource_id"]) for x in results} == VISIBLE[tenant]
        # the admin addresses each tenant's notes by naming the tenant
        for tenant in NOTES:
            r = admin.get("/v1/resources/notes", params={"tenant": tenant})
            assert r.status_code == 200 and r.json()["tenant"] == tenant
        assert admin.get("/v1/resources/notes").status_code == 404  # no un-tenanted notes
        # a tenant token names its own tenant only
        r = a.get("/v1/resources/only-b", params={"tenant": "b"})
        assert r.status_code == 403 and r.json()["detail"][0]["loc"] == ["query", "tenant"]

        # an id only b holds is, to a, a missing id: status and body alike, the id apart
        calls = (("GET", ""), ("DELETE", ""), ("POST", "/disable"), ("POST", "/enable"))
        for method, suffix in calls:
            held = a.request(method, f"/v1/resources/only-b{suffix}")
            missing = a.request(method, f"/v1/resources/never-held{suffix}")
            assert held.status_code == 404, (method, suffix, held.text)
            assert _answer(held, "only-b") == _answer(missing, "never-held"), (method, suffix)
        # and an ingest of it is a's own resource, as for a fresh id
        reports = []
        for rid in ("only-b", "fresh"):
            r = a.post("/v1/resources", json=[{"_id": rid, "text": "a's own zebra"}])
            assert r.status_code == 200, r.text
            reports.append({k: v for k, v in r.json().items() if k != "seconds"})
        assert reports[0] == reports[1] and reports[0]["indexed"] == 1
        assert a.get("/v1/resources/only-b").json()["chunks"][0]["text"] == "a's own zebra"
        assert b.get("/v1/resources/only-b").json()["chunks"][0]["text"] == "b's zebra"

        # each deletes its own notes; the other's stays
        assert a.delete("/v1/resources/notes").json() == {
            "resource_id": "notes", "done": True, "action": "deleted"
        }
        assert a.get("/v1/resources/notes").status_code == 404
        assert b.get("/v1/resources/notes").json()["chunks"][0]["text"] == NOTES["b"]
        assert admin.delete("/v1/resources/notes", params={"tenant": "b"}).status_code == 200
        assert b.get("/v1/resources/notes").status_code == 404
        for c in (a, b):
            c.delete("/v1/resources/only-b")
        assert a.delete("/v1/resources/fresh").status_code == 200
        report = admin.post("/v1/reconcile", json={}).json()  # a dry run
        assert report["dry_run"] and not any(report["counts_before"].values()), report
        listed = admin.get("/openapi.json").json()["paths"]["/v1/resources/{resource_id}"]
        params = listed["get"]["parameters"]
        assert any(p["name"] == "tenant" and p["in"] == "query" for p in params)
