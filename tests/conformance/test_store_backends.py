"""The store backends' conformance suite: SQLite (FTS5) and PostgreSQL (tsvector rows ranked by
FTS5's BM25) pass the same tests, and PostgreSQL's own promises hold across processes.

Real parts throughout: SQLite files, a PostgreSQL server started from the machine's binaries
(``tests/pgserver.py``; the PostgreSQL cases skip, saying why, where it cannot start). The
consistency suites (``tests/integration/test_consistency*.py``) run on both backends as well.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hybridsag.consistency import Lease
from hybridsag.documents import make_document
from hybridsag.errors import ConsistencyError, IndexMismatchError, StoreError
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from hybridsag.fusion import chunk_facts, normalize_title
from hybridsag.records.filters import Filters
from hybridsag.records.keys import resource_key, split_key
from hybridsag.records.schema import BACKFILL_META
from hybridsag.records.store import Store

WORDS = (
    "apple orchard river stone lantern copper meadow falcon harbor violet ember quartz willow "
    "summit canyon breeze glacier thunder pebble marble cedar maple aspen birch coral delta "
    "zürich café naïve 北京 喜好 读书"
).split()


def _corpus(n: int = 60, seed: int = 7) -> list:
    """``n`` documents of Zipf-like word draws (seeded), with titles, tenants, ACLs, metadata."""
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) for i in range(len(WORDS))]
    docs = []
    for i in range(n):
        paragraphs = [
            " ".join(rng.choices(WORDS, weights, k=rng.randint(8, 40))) + "."
            for _ in range(rng.randint(1, 3))
        ]
        text = f"# {rng.choice(WORDS)} section\n\n" + "\n\n".join(paragraphs)
        docs.append(
            make_document(
                f"doc-{i:03d}",
                text,
                title=" ".join(rng.sample(WORDS, 2)),
                tenant=("red", "blue")[i % 2],
                acl=("team-a",) if i % 3 == 0 else (),
                metadata={"n": i % 4, "even": i % 2 == 0, "kind": ("x", "y")[i % 2]},
            )
        )
    return docs


@contextlib.contextmanager
def indexed_twice(
    first: Settings, second: Settings, docs: list
) -> Iterator[tuple[HybridSearch, HybridSearch]]:
    """Two searches, over ``first`` and ``second``, each with ``docs`` indexed (every one)."""
    with HybridSearch(first) as a, HybridSearch(second) as b:
        for search in (a, b):
            assert search.ingest_documents(docs).indexed == len(docs)
        yield a, b


def _settings(data: Path, store_url: str | None, lexical: str = "fts5") -> Settings:
    return Settings(
        data_dir=data,
        embedding={"model": "none"},
        store={"url": store_url},
        lexical={"backend": lexical},
    )


@pytest.fixture
def hs(tmp_path: Path, index_backends: tuple[str | None, str]) -> Iterator[HybridSearch]:
    with HybridSearch(_settings(tmp_path / "data", *index_backends)) as search:
        report = search.ingest_documents(_corpus())
        assert report.indexed == 60, report.errors
        yield search


# -- the same behaviour on both backends --------------------------------------------------------


def test_migrations_apply_once_and_a_reopen_applies_none(tmp_path: Path, store_url: str | None) -> None:
    where = store_url or str(tmp_path / "s.sqlite3")
    first = Store(where, tokenizer_fingerprint="tok/1")
    try:
        names = [r[0] for r in first.connection().execute("SELECT name FROM migrations ORDER BY name")]
        assert names == [
            "0001_initial",
            "0002_chunk_vectors",
            "0003_reconcile_lease",
            "0004_source_root",
            "0005_tenant_keys",
            "0006_exclusions",
            "0007_source_sha256",
            "0008_chunk_facts",
        ]
        assert first.get_meta("schema_version") == "0008_chunk_facts"
        assert first.get_meta(BACKFILL_META) is None  # a new store has nothing to fill in
    finally:
        first.close()
    again = Store(where, tokenizer_fingerprint="tok/1")
    try:
        assert again.migrate() == []
    finally:
        again.close()
    with pytest.raises(IndexMismatchError, match="tok/1"):
        Store(where, tokenizer_fingerprint="tok/2")


def test_a_resource_is_unique_by_tenant_and_id(tmp_path: Path, store_url: str | None) -> None:
    """Two tenants (and the un-tenanted namespace) each hold ``notes``; each is written, read
    and deleted alone, and the database itself refuses a second row of one (tenant, id)."""
    with HybridSearch(_settings(tmp_path / "data", store_url)) as search:
        for tenant in ("red", "blue", ""):
            search.ingest("notes", f"the {tenant or 'plain'} lantern note", tenant=tenant)
        store = search.components.store
        records = {t: store.get_resource("notes", tenant=t) for t in ("red", "blue", "")}
        assert {t: (r.resource_id, r.tenant, r.version) for t, r in records.items()} == {
            t: ("notes", t, 1) for t in ("red", "blue", "")
        }
        search.ingest("notes", "the red lantern note, again", tenant="red")
        assert [store.get_resource("notes", tenant=t).version for t in ("red", "blue", "")] == [
            2, 1, 1
        ]
        hits = search.search("lantern", paths=["bm25"], filters={"resource_ids": ["notes"]})
        assert sorted((r.tenant, r.chunk_id) for r in hits.results) == [
            ("", "notes@1#0"), ("blue", "notes@1#0@blue"), ("red", "notes@2#0@red")
        ]
        with pytest.raises(store.errors), store.atomic() as conn:
            conn.execute(
                "INSERT INTO resources(resource_id, tenant, status, created_at, updated_at) "
                "VALUES (?, 'red', 'ready', 0, 0)",
                (records["red"].key,),
            )
        assert search.delete("notes", tenant="blue")
        assert store.get_resource("notes", tenant="blue") is None
        assert store.get_resource("notes", tenant="red") is not None
        assert store.get_resource("notes") is not None


def test_the_tenant_keys_migration_rewrites_only_tenant_rows(
    tmp_path: Path, store_url: str | None
) -> None:
    """Rows written as builds before 0005 wrote them (a tenant's resource keyed by its id),
    then the migration: the tenant's keys move in every table, its chunk ids stay, the old key
    keeps a tombstone at the highest version it reached; the un-tenanted rows are untouched."""
    where = store_url or str(tmp_path / "s.sqlite3")
    store = Store(where, tokenizer_fingerprint="tok/1")
    try:
        with store.atomic() as conn:
            conn.execute(
                "INSERT INTO resources(id, resource_id, tenant, status, version, pending_version,"
                " created_at, updated_at) VALUES (1, 'notes', 'a', 'ready', 3, 4, 0, 5), "
                "(2, 'plain', '', 'ready', 1, NULL, 0, 0), "
                "(3, 'going', 'b', 'deleting', 2, NULL, 0, 6)"
            )
            conn.execute(
                "INSERT INTO chunks(id, chunk_id, resource_id, version, ordinal, text, start_line,"
                " end_line, byte_start, byte_end, content_sha256) VALUES "
                "(1, 'notes@3#0', 'notes', 3, 0, 'x', 0, 0, 0, 0, ''), "
                "(2, 'plain@1#0', 'plain', 1, 0, 'y', 0, 0, 0, 0, '')"
            )
            conn.execute(
                "INSERT INTO tombstones VALUES ('notes', 2, 1), ('going', 2, 6), ('gone', 7, 2)"
            )
            conn.execute(
                "INSERT INTO journal(op, resource_id, version, step, pid, started_at, updated_at) "
                "VALUES ('ingest', 'notes', 4, 'claimed', 1, 0, 0), "
                "('delete', 'going', 2, 'tombstoned', 1, 0, 0)"
            )
            conn.execute("DELETE FROM migrations WHERE name = '0005_tenant_keys'")
        plain_before = tuple(store.connection().execute(
            "SELECT * FROM resources WHERE id = 2").fetchone())
    finally:
        store.close()
    store = Store(where, tokenizer_fingerprint="tok/1")
    try:
        conn = store.connection()
        rows = conn.execute("SELECT id, resource_id, tenant FROM resources ORDER BY id").fetchall()
        assert [tuple(r) for r in rows] == [
            (1, "a\x1fnotes", "a"), (2, "plain", ""), (3, "b\x1fgoing", "b")
        ]
        assert tuple(conn.execute("SELECT * FROM resources WHERE id = 2").fetchone()) == (
            plain_before
        )
        chunks = conn.execute("SELECT chunk_id, resource_id FROM chunks ORDER BY id").fetchall()
        assert [tuple(c) for c in chunks] == [("notes@3#0", "a\x1fnotes"), ("plain@1#0", "plain")]
        tombs = conn.execute("SELECT resource_id, version FROM tombstones ORDER BY resource_id")
        assert sorted(tuple(t) for t in tombs) == [
            ("a\x1fnotes", 2), ("b\x1fgoing", 2), ("going", 2), ("gone", 7), ("notes", 4)
        ]
        journal = conn.execute("SELECT op, resource_id FROM journal ORDER BY id").fetchall()
        assert [tuple(j) for j in journal] == [("ingest", "a\x1fnotes"), ("delete", "b\x1fgoing")]
        record = store.get_resource("notes", tenant="a")
        assert record is not None and (record.resource_id, record.key) == ("notes", "a\x1fnotes")
        assert store.get_resource("notes") is None
    finally:
        store.close()


def test_chunk_views_read_the_facts_the_write_path_stored(
    tmp_path: Path, store_url: str | None
) -> None:
    """Every chunk the write path stores carries its facts (computed once, from its text),
    read back with its view; the resource's normalised title comes with it, and the filters
    apply inside the same statement exactly as :meth:`Filters.allows` reads a record."""
    with HybridSearch(_settings(tmp_path / "data", store_url)) as search:
        assert search.ingest_documents(_corpus()).indexed == 60
        store = search.components.store
        conn = store.connection()
        ids = [r[0] for r in conn.execute("SELECT chunk_id FROM chunks ORDER BY id")]
        views = store.chunk_views(ids, Filters())
        assert sorted(views) == sorted(ids)
        for cid, view in views.items():
            record = store.chunks([cid])[cid]
            assert (view.resource_id, view.title, view.heading_path, view.text, view.ordinal) == (
                record.key, record.title, record.heading_path, record.text, record.ordinal
            )
            assert view.title_norm == normalize_title(record.title)
            assert view.facts == chunk_facts(record.text)
        scripts = {v.facts.script for v in views.values()}
        assert "LATIN" in scripts  # the corpus is mostly Latin words: read back as written
        resources = store.resources(v.resource_id for v in views.values())
        for flt in (
            Filters(tenant="red"),
            Filters(acl=("team-a",)),
            Filters(acl=("nobody",)),
            Filters(metadata={"even": True}),
            Filters(metadata={"n": 2}),
            Filters(tenant="blue", resource_ids=("doc-001", "doc-003")),
        ):
            seen = store.chunk_views(ids, flt)
            assert set(seen) == {c for c, v in views.items() if flt.allows(resources[v.resource_id])}
        assert len(store.chunk_views(ids, Filters(tenant="red"))) < len(ids)


def test_a_store_written_before_the_facts_is_migrated_and_filled_in(
    tmp_path: Path, store_url: str | None
) -> None:
    """A store as builds before ``0008_chunk_facts`` left it (no facts columns, chunk rows
    written by their INSERT) gets the columns, and its chunks their facts, when it opens; a
    search reads them from then on. The backfill goes in batches, writes only what is still
    missing, and says when there is nothing left."""
    where = store_url or str(tmp_path / "s.sqlite3")
    texts = ["How do I install it on Linux?", "在 Linux 上安装", "# Only a heading", "42 17 99 " * 9]
    store = Store(where, tokenizer_fingerprint="tok/1")
    try:
        with store.atomic() as conn:
            for column in ("script", "heading_only", "shingles"):
                conn.execute(f"ALTER TABLE chunks DROP COLUMN {column}")
            conn.execute("DELETE FROM migrations WHERE name = '0008_chunk_facts'")
            conn.execute("UPDATE meta SET value = '0007_source_sha256' WHERE key = 'schema_version'")
            conn.execute(
                "INSERT INTO resources(id, resource_id, title, title_norm, tenant, status, "
                "version, created_at, updated_at) VALUES (1, 'notes', 'Set-up Notes!', "
                "'setupnotes', '', 'ready', 1, 0, 0)"
            )
            for i, text in enumerate(texts):
                conn.execute(
                    "INSERT INTO chunks(id, chunk_id, resource_id, version, ordinal, "
                    "heading_path, text, start_line, end_line, byte_start, byte_end, "
                    "content_sha256) VALUES (?, ?, 'notes', 1, ?, '', ?, 0, 0, 0, 0, '')",
                    (i + 1, f"notes@1#{i}", i, text),
                )
    finally:
        store.close()
    store = Store(where, tokenizer_fingerprint="tok/1")  # migrates and fills in
    try:
        assert store.get_meta("schema_version") == "0008_chunk_facts"
        assert store.get_meta(BACKFILL_META) is None
        ids = [f"notes@1#{i}" for i in range(len(texts))]
        views = store.chunk_views(ids, Filters())
        assert [views[c].facts for c in ids] == [chunk_facts(t) for t in texts]
        assert [views[c].facts.script for c in ids] == ["LATIN", "CJK", "LATIN", None]
        assert [views[c].facts.heading_only for c in ids] == [False, False, True, False]
        assert {views[c].title_norm for c in ids} == {"setupnotes"}
        # a chunk still without facts reads as None (fusion then reads its text) until filled
        with store.atomic() as conn:
            conn.execute("UPDATE chunks SET script = NULL, heading_only = NULL, shingles = NULL "
                         "WHERE id IN (1, 3, 4)")  # fmt: skip
            conn.execute(f"INSERT INTO meta(key, value) VALUES ('{BACKFILL_META}', 'pending')")
        assert [store.chunk_views(ids, Filters())[c].facts is None for c in ids] == [
            True, False, True, True
        ]
        assert store.backfill_chunk_facts(batch=2) == 3
        assert store.backfill_chunk_facts() == 0  # the meta key is gone: one read
        assert [store.chunk_views(ids, Filters())[c].facts for c in ids] == [
            chunk_facts(t) for t in texts
        ]
    finally:
        store.close()


def test_a_nested_atomic_rolls_back_only_its_own_part(tmp_path: Path, store_url: str | None) -> None:
    store = Store(store_url or str(tmp_path / "s.sqlite3"), tokenizer_fingerprint="tok/1")
    try:
        with store.atomic() as conn:
            conn.execute("INSERT INTO meta(key, value) VALUES ('outer', '1')")
            with pytest.raises(RuntimeError), store.atomic() as inner:
                inner.execute("INSERT INTO meta(key, value) VALUES ('inner', '1')")
                raise RuntimeError("undo the inner part")
        assert store.get_meta("outer") == "1" and store.get_meta("inner") is None
        with pytest.raises(RuntimeError), store.atomic() as conn:
            conn.execute("INSERT INTO meta(key, value) VALUES ('gone', '1')")
            raise RuntimeError("undo everything")
        assert store.get_meta("gone") is None
        store.set_meta("outer", "2")  # an upsert
        assert store.get_meta("outer") == "2"
    finally:
        store.close()


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"tenant": "red"}, lambda i: i % 2 == 0),
        ({"acl": ["team-a"]}, lambda i: True),  # tagged ones share the tag, the rest are public
        ({"acl": ["nobody"]}, lambda i: i % 3 != 0),
        ({"metadata": {"n": 2}}, lambda i: i % 4 == 2),
        ({"metadata": {"n": 2.0}}, lambda i: i % 4 == 2),
        ({"metadata": {"even": True}}, lambda i: i % 2 == 0),
        ({"metadata": {"n": True}}, lambda i: False),  # true never equals 1
        ({"metadata": {"kind": "y"}}, lambda i: i % 2 == 1),
        ({"resource_ids": ["doc-001", "doc-004"]}, lambda i: i in (1, 4)),
    ],
    ids=["tenant", "acl-shared", "acl-other", "meta-int", "meta-float", "meta-bool",
         "meta-bool-vs-int", "meta-str", "ids"],
)
def test_filters_apply_inside_the_lexical_query(hs: HybridSearch, filters: dict, expected) -> None:
    lexical = hs.components.lexical
    terms = lexical.query_terms("apple orchard river stone lantern")
    hits = lexical.search(terms, limit=100, filters=Filters.from_mapping(filters))
    got = {split_key(h.detail["resource_id"])[1] for h in hits}  # a hit names the resource key
    everything = {
        split_key(h.detail["resource_id"])[1]
        for h in lexical.search(terms, limit=100, filters=Filters())
    }
    want = {rid for rid in everything if expected(int(rid.split("-")[1]))}
    assert got == want
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))


def test_delete_reingest_disable_on_every_lexical_path(hs: HybridSearch) -> None:
    store = hs.components.store
    title = store.get_resource("doc-005", tenant="blue").title
    assert any(r.resource_id == "doc-005" for r in hs.search(title, paths=["title"]).results)
    assert hs.delete("doc-005", tenant="blue")
    assert store.get_resource("doc-005", tenant="blue") is None
    assert store.counts()["tombstones"] == 1
    assert all(r.resource_id != "doc-005" for r in hs.search(title, paths=["title", "bm25"]).results)
    assert not store.resource_chunks("doc-005", tenant="blue")
    # a re-ingest replaces the text: the old words are gone, the new ones found
    hs.ingest("doc-006", "brandnewword appears here once", title="Fresh", tenant="red")
    assert hs.search("brandnewword", paths=["bm25"]).results[0].resource_id == "doc-006"
    assert store.get_resource("doc-006", tenant="red").version == 2
    assert [c.version for c in store.resource_chunks("doc-006", tenant="red")] == [2]
    # disabled: invisible, kept; enabled: back
    assert hs.disable("doc-006", tenant="red")
    assert not hs.search("brandnewword", paths=["bm25"]).results
    assert hs.enable("doc-006", tenant="red")
    assert hs.search("brandnewword", paths=["bm25"]).results[0].resource_id == "doc-006"


# -- PostgreSQL ranks as FTS5 ranks ---------------------------------------------------------------


def test_postgres_ranks_and_scores_like_fts5(tmp_path: Path, postgres_url: str) -> None:
    docs = _corpus(120, seed=11)
    assert len(docs) == 120
    with indexed_twice(
        _settings(tmp_path / "lite", None), _settings(tmp_path / "pg", postgres_url), docs
    ) as (lite, pg):
        a, b = lite.components.lexical, pg.components.lexical
        rng = random.Random(3)
        queries = [" ".join(rng.sample(WORDS, rng.randint(1, 4))) for _ in range(40)]
        queries += ["zurich cafe naive", "Zürich", "北京 读书"]
        compared = 0
        for query in queries:
            terms = a.query_terms(query)
            assert terms == b.query_terms(query)
            assert a.doc_freqs(terms) == b.doc_freqs(terms)
            for must in (None, terms[0]):
                ha = a.search(terms, limit=15, filters=Filters(), must=must)
                hb = b.search(terms, limit=15, filters=Filters(), must=must)
                assert [h.chunk_id for h in ha] == [h.chunk_id for h in hb], query
                assert [h.raw_score for h in ha] == pytest.approx([h.raw_score for h in hb], rel=1e-9)
                compared += len(ha)
            ta = a.search_titles(terms, limit=10, filters=Filters())
            tb = b.search_titles(terms, limit=10, filters=Filters())
            assert [r for r, _ in ta] == [r for r, _ in tb], query
            assert [s for _, s in ta] == pytest.approx([s for _, s in tb], rel=1e-9)
            keys = [resource_key(f"doc-{i:03d}", ("red", "blue")[i % 2]) for i in range(0, 120, 7)]
            best = a.best_chunks(keys, terms)
            assert best == b.best_chunks(keys, terms) and best
        assert compared > 300  # the queries really matched


# -- several processes on one PostgreSQL ------------------------------------------------------------


def test_two_replicas_see_each_others_writes_and_deletes(tmp_path: Path, postgres_url: str) -> None:
    with HybridSearch(_settings(tmp_path / "one", postgres_url)) as one, HybridSearch(
        _settings(tmp_path / "two", postgres_url)
    ) as two:
        one.ingest("shared", "the lighthouse keeper logs every ship", title="Lighthouse")
        assert two.search("lighthouse keeper", paths=["bm25"]).results[0].resource_id == "shared"
        assert two.search("Lighthouse", paths=["title"]).results[0].resource_id == "shared"
        assert two.delete("shared")
        # acknowledged by two: invisible through one from now on
        assert not one.search("lighthouse keeper", paths=["bm25", "title"]).results
        assert one.components.store.get_resource("shared") is None


def _waiting_advisory_locks(store: Store) -> int:
    row = store.connection().execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    ).fetchone()
    return int(row[0])


def test_the_write_path_lock_serialises_replicas(tmp_path: Path, postgres_url: str) -> None:
    with HybridSearch(_settings(tmp_path / "one", postgres_url)) as one, HybridSearch(
        _settings(tmp_path / "two", postgres_url)
    ) as two:
        order: list[str] = []
        with one.components.lock.hold():
            order.append("one holds")
            def second() -> None:
                with two.components.lock.hold():
                    order.append("two holds")

            worker = threading.Thread(target=second)
            worker.start()
            deadline = time.monotonic() + 60
            while _waiting_advisory_locks(one.components.store) == 0:  # two is blocked
                assert time.monotonic() < deadline, "the second replica never waited"
                time.sleep(0.02)
            order.append("one releases")
        worker.join(timeout=60)
        assert order == ["one holds", "one releases", "two holds"]


def test_a_write_transaction_waits_for_another_replicas(tmp_path: Path, postgres_url: str) -> None:
    first = Store(postgres_url, tokenizer_fingerprint="tok/1")
    second = Store(postgres_url, tokenizer_fingerprint="tok/1")
    try:
        order: list[str] = []
        with first.atomic() as conn:
            conn.execute("INSERT INTO meta(key, value) VALUES ('k', 'first')")

            def write() -> None:
                with second.atomic() as c:
                    row = c.execute("SELECT value FROM meta WHERE key = 'k'").fetchone()
                    order.append(f"second read {row[0] if row else None}")

            worker = threading.Thread(target=write)
            worker.start()
            deadline = time.monotonic() + 60
            while _waiting_advisory_locks(first) == 0:
                assert time.monotonic() < deadline, "the second transaction never waited"
                time.sleep(0.02)
            order.append("first commits")
        worker.join(timeout=60)
        # the second began after the first committed, so it read the first's write
        assert order == ["first commits", "second read first"]
    finally:
        first.close()
        second.close()


def test_the_reconcile_lease_is_single_flight_across_replicas(postgres_url: str) -> None:
    first = Store(postgres_url, tokenizer_fingerprint="tok/1")
    second = Store(postgres_url, tokenizer_fingerprint="tok/1")
    try:
        a = Lease(first, ttl_s=60, owner="replica-a")
        b = Lease(second, ttl_s=60, owner="replica-b")
        with a.held():
            with pytest.raises(ConsistencyError, match="replica-a"):
                b.acquire()
        b.acquire()  # released: the other replica may take it
        assert a.holder()["owner"] == "replica-b"
    finally:
        first.close()
        second.close()


def test_an_unreachable_postgres_is_a_clear_store_error_without_the_password() -> None:
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    with pytest.raises(StoreError, match=r"cannot connect to postgresql://hs@127\.0\.0\.1:1/x") as err:
        Store("postgresql://hs:secret@127.0.0.1:1/x", tokenizer_fingerprint="t", busy_timeout_s=2)
    assert "secret" not in str(err.value)


def test_threads_hand_their_connections_back(tmp_path: Path, store_url: str | None) -> None:
    """More threads than the pool holds, one after another: each thread's connection goes back
    when it ends, so none waits for a free one (a leak would fail after busy_timeout_s)."""
    store = Store(
        store_url or str(tmp_path / "s.sqlite3"), tokenizer_fingerprint="tok/1", pool_size=2,
        busy_timeout_s=5,
    )
    try:
        counts: list[dict[str, int]] = []
        for _ in range(12):
            worker = threading.Thread(target=lambda: counts.append(store.counts()))
            worker.start()
            worker.join()
        assert counts == [{"resources": 0, "chunks": 0, "tombstones": 0}] * 12
    finally:
        store.close()


def test_store_url_is_checked_and_never_shown() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="store.url must start with postgresql://"):
        Settings(store={"url": "mysql://root:pw@db/x"})
    s = Settings(store={"url": "postgresql://app:hunter2@db.internal:5432/hs"})
    assert s.store_display == "postgresql://app@db.internal:5432/hs"
    assert "hunter2" not in str(s.public_dict()) and "hunter2" not in repr(s)


def test_a_deleted_folder_file_stays_out_of_its_folder(tmp_path: Path, store_url: str | None) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("keep.md", "drop.md"):
        (docs / name).write_text(f"# {name}\n\nThe okapi of {name}.\n", "utf-8")
    with HybridSearch(_settings(tmp_path / "data", store_url)) as search:
        assert search.ingest_folder(docs, tenant="red", acl=("team-a",)).indexed == 2
        assert search.delete("drop.md", tenant="red")
        [ex] = search.exclusions()
        assert (ex.tenant, ex.source_root, ex.path, ex.acl) == (
            "red", str(docs.resolve()), "drop.md", ("team-a",)
        )
        again = search.ingest_folder(docs, tenant="red", acl=("team-a",))
        assert (again.indexed, again.unchanged, again.excluded) == (0, 1, ["drop.md"])
        assert search.resource("drop.md", tenant="red") is None
        assert search.include("drop.md", tenant="red").indexed == 1
        record = search.resource("drop.md", tenant="red")
        assert record is not None and record.acl == ("team-a",) and search.exclusions() == []
