"""The system of record: one SQLite database (WAL) under the data dir, or a PostgreSQL database
(``store.url = "postgresql://..."``, :mod:`hybridsag.records.postgres`) that several processes and hosts
share.

Tables (named migrations in :data:`MIGRATIONS`): ``resources``, ``chunks``, ``chunk_vectors``,
``tombstones``, ``journal`` (what the write path was doing, for crash recovery), ``meta`` (schema,
tokenizer, embedder), ``reconcile_lease`` and ``exclusions`` (folder files deleted by hand while
they still exist: :class:`Exclusion`, kept out of their folder until lifted). The lexical
index's own tables (FTS5) are created by
:mod:`hybridsag.lexical.index` through :meth:`Store.migrate`, which owns every statement on them.

Every write goes through :meth:`Store.atomic` (``BEGIN IMMEDIATE`` .. ``COMMIT``; a nested
``atomic()`` is a SAVEPOINT). Connections are per thread. A resource is visible only when
``status = 'ready'``; every read path filters on it.

Resource identity is ``(tenant, resource_id)``: two tenants may each hold ``notes``, and a caller
scoped to a tenant addresses only that tenant's ids (another tenant's id is simply not in its
namespace). Every table keys a resource by one string, its *key* (:func:`resource_key`): the id
itself in the un-tenanted namespace ``""`` (so an index without tenants, every benchmark set
among them, stores exactly what it always stored), else ``tenant + KEY_SEP + id``, where
:data:`KEY_SEP` is the control character U+001F, which no tenant and no id may hold
(:func:`hybridsag.documents.make_document` refuses control characters), so the pair is always
recovered (:func:`split_key`) and no tenant's key equals an un-tenanted id. The column
``resource_id`` of ``resources``, ``chunks``, ``tombstones`` and ``journal`` holds the key; the
records (:class:`ResourceRecord`, :class:`ChunkRecord`) give the public id and the tenant, and
their ``key``. The reconciler, the write path and the lexical index work on keys alone.

Chunk ids are shown to users, so they stay printable: ``<id>@<version>#<ordinal>`` in tenant
``""`` and ``<id>@<version>#<ordinal>@<tenant>`` otherwise, with ``%``, ``@`` and ``#`` of the
tenant written ``%25``, ``%40``, ``%23`` (:func:`chunk_id_for`). The two forms never meet: an
un-tenanted chunk id ends in ``#<digits>``, a tenant's in ``@<tenant>`` with no ``#`` after the
ordinal; and a tenant's id is read back from the right (the tenant after the last ``@``).

The vector and full-text rows in Milvus carry the public id and the tenant as two fields, as
they always did; :mod:`hybridsag.vectors.index` turns a key into both (and back, when it lists its rows).
An index written before identity was per tenant (the key of every resource was its id) is
rewritten by the migration ``0005_tenant_keys``: the keys of tenant resources in ``resources``,
``chunks``, ``journal`` and ``tombstones`` become ``tenant + KEY_SEP + id``; chunk ids are kept
(a chunk id names one chunk for its life: its Milvus primary key, A/B events that name it), so
nothing in Milvus moves; and a tombstone at the old key keeps the highest version it reached, so
that a resource ``""``/``notes`` made later never reuses one of those chunk ids.

One set of store operations serves both databases. The SQL is written once, in the common part of
SQLite's and PostgreSQL's dialects (``?`` placeholders, ``INSERT .. ON CONFLICT``); a
:class:`Backend` supplies what differs: connections, how a write transaction starts (SQLite's
``BEGIN IMMEDIATE``; on PostgreSQL ``BEGIN`` and a transaction-level advisory lock, so write
transactions serialise as they do on SQLite), a read snapshot, the column types of the schema
migrations, the JSON filter fragments and the database's exception types.

The records package, one module per job: identity (:mod:`hybridsag.records.keys`), the schema
and its migrations (:mod:`hybridsag.records.schema`), the records a read returns
(:mod:`hybridsag.records.rows`), who may see what (:mod:`hybridsag.records.filters`), what
differs between the databases and the SQL helpers (:mod:`hybridsag.records.dialect`,
:mod:`hybridsag.records.postgres`); this module holds the :class:`Store` (connections,
transactions, migrations, meta, and the reads a search and the faces make), and its names
below are still imported from here as they always were. The record's state is written by the
ledger (:mod:`hybridsag.records.ledger`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from hybridsag.fusion.facts import chunk_facts
from hybridsag.fusion.types import ChunkView
from hybridsag.errors import IndexMismatchError, StoreError
from hybridsag.records.dialect import (  # noqa: F401  (SQLITE_MAGIC: importable here as before)
    SQLITE_MAGIC,
    Backend,
    SqliteBackend,
    check_store_file,
    is_postgres_url,
    placeholders,
    select_in,
)
from hybridsag.records.filters import (  # noqa: F401  (the bounds: importable here as before)
    MAX_FILTER_CHARS,
    MAX_FILTER_IDS,
    MAX_FILTER_TAGS,
    Filters,
)
from hybridsag.records.keys import (
    KEY_SEP,
    chunk_id_for,
    chunk_id_suffix,
    public_id_sql,
    resource_key,
    split_key,
)
from hybridsag.records.rows import ChunkRecord, Exclusion, ResourceRecord, facts_columns, facts_of
from hybridsag.records.schema import (
    BACKFILL_BATCH,
    BACKFILL_META,
    MIGRATIONS,
    MIGRATIONS_TABLE,
    SEARCHABLE_STATUSES,  # noqa: F401  (importable here as before)
    STATUSES,
)

__all__ = [
    "BACKFILL_META",
    "Backend",
    "ChunkRecord",
    "Exclusion",
    "Filters",
    "KEY_SEP",
    "MIGRATIONS",
    "ResourceRecord",
    "STATUSES",
    "SqliteBackend",
    "Store",
    "check_store_file",
    "chunk_id_for",
    "facts_columns",
    "chunk_id_suffix",
    "is_postgres_url",
    "placeholders",
    "public_id_sql",
    "resource_key",
    "select_in",
    "split_key",
]

log = logging.getLogger(__name__)

#: A chunk joined with its resource at the resource's current version (ChunkRecord's columns).
_CHUNK_SELECT = """SELECT c.chunk_id, c.resource_id, c.version, c.ordinal, c.heading_path, c.text,
       c.start_line, c.end_line, c.byte_start, c.byte_end, c.content_sha256,
       r.title, r.source_uri, r.tenant, r.status
FROM chunks c JOIN resources r ON r.resource_id = c.resource_id AND r.version = c.version"""

#: What fusion reads of a visible chunk (:meth:`Store.chunk_views`): no JSON, no resource record.
#: ``CROSS JOIN`` keeps SQLite's planner on the chunk ids: with a filter on the resources
#: (``status IN (..)``) it would otherwise walk every ready resource's chunks by the status
#: index (12 ms against 2.4 for 219 ids on 2wiki); PostgreSQL plans it as the inner join.
_VIEW_SELECT = """SELECT c.chunk_id, c.resource_id, c.ordinal, c.heading_path, c.text,
       r.title, r.title_norm, c.script, c.heading_only, c.shingles
FROM chunks c CROSS JOIN resources r
WHERE r.resource_id = c.resource_id AND r.version = c.version AND"""

_UPSERT_META = (
    "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value"
)


class _Held:
    """A thread's connection; when the thread ends (its thread-local data goes), the finalizer
    hands the connection back to the store's backend."""

    def __init__(self, conn: Any, store: Store) -> None:
        self.conn = conn
        self.finalizer = weakref.finalize(self, store._forget, conn)


class Store:
    """The store over one database. Thread-safe: one connection per thread, writes through
    :meth:`atomic`.

    ``location`` is a SQLite file path, or a ``postgresql://`` URL (needs the ``postgres`` extra;
    ``pool_size`` bounds its connections). Example: ``Store(Path("d/x.sqlite3"),
    tokenizer_fingerprint=tok.fingerprint())``.

    A new SQLite store is made whole under a temporary name (WAL mode, the migrations table)
    and linked into place, so processes opening a new data dir at once never see a half-made
    file, and a file that is empty, truncated or not SQLite is refused. Opening a store
    written before the chunks kept their facts fills them in
    (:meth:`backfill_chunk_facts`, once).

    Raises:
        CorruptStoreError: the SQLite file is empty, truncated or not an SQLite database.
        StoreError: the database cannot be opened or migrated (a lock held past the busy
            timeout). IndexMismatchError: it was built with another tokenizer.
    """

    def __init__(
        self,
        location: Path | str,
        *,
        tokenizer_fingerprint: str,
        busy_timeout_s: float = 30.0,
        pool_size: int = 64,
    ):
        self.backend: Backend
        if is_postgres_url(location):
            from hybridsag.records.postgres import PostgresBackend

            self.backend = PostgresBackend(
                str(location), pool_size=pool_size, timeout_s=busy_timeout_s
            )
            self.path: Path | None = None
        else:
            self.backend = SqliteBackend(Path(location), busy_timeout_s=busy_timeout_s)
            self.path = self.backend.path
        #: where the store is, for messages (a URL without its password)
        self.name = self.backend.name
        self.errors = self.backend.errors
        self._local = threading.local()
        self._all: list[Any] = []
        self._finalizers: list[weakref.finalize] = []  # type: ignore[type-arg]
        self._all_lock = threading.Lock()
        self._closed = False
        try:
            self.migrate()
            self._check_tokenizer(tokenizer_fingerprint)
            self.backfill_chunk_facts()
        except self.errors as exc:
            self.close()
            raise self.backend.error("opening", exc) from exc
        except BaseException:
            self.close()  # a refused store leaves no open connection behind
            raise

    @property
    def is_postgres(self) -> bool:
        return self.path is None

    # -- connections -------------------------------------------------------------------------

    def connection(self) -> Any:
        """This thread's connection (created on first use; handed back to the backend, a pool
        on PostgreSQL, when the thread ends or the store closes)."""
        if self._closed:
            raise StoreError(f"store {self.name} is closed")
        held = getattr(self._local, "held", None)
        if held is not None and getattr(held.conn, "broken", False):
            self._forget(held.conn)  # PostgreSQL went away and came back: reconnect
            held.finalizer.detach()
            held = None
        if held is None:
            conn = self.backend.connect()
            with self._all_lock:
                self._all.append(conn)
            held = _Held(conn, self)
            self._finalizers = [f for f in self._finalizers if f.alive] + [held.finalizer]
            self._local.held = held
        return held.conn

    def _forget(self, conn: Any) -> None:
        """Hand ``conn`` back to the backend (its thread ended, or it broke)."""
        with self._all_lock:
            if conn not in self._all:
                return  # the store closed it already
            self._all.remove(conn)
        self.backend.release(conn)

    @contextlib.contextmanager
    def atomic(self) -> Iterator[Any]:
        """One write transaction (``BEGIN IMMEDIATE``; on PostgreSQL ``BEGIN`` plus a
        transaction-level advisory lock, so write transactions of every process take turns);
        rolls back on any exception. Nested in another ``atomic()`` of the same thread it is a
        SAVEPOINT: an exception inside rolls back only the nested part, and the outer
        transaction goes on."""
        conn = self.connection()
        if conn.in_transaction:
            depth = getattr(self._local, "savepoints", 0) + 1
            self._local.savepoints = depth
            name = f"hs_sp{depth}"
            conn.execute(f"SAVEPOINT {name}")
            try:
                yield conn
            except BaseException:
                conn.execute(f"ROLLBACK TO SAVEPOINT {name}")
                conn.execute(f"RELEASE SAVEPOINT {name}")
                raise
            else:
                conn.execute(f"RELEASE SAVEPOINT {name}")
            finally:
                self._local.savepoints = depth - 1
            return
        try:
            self.backend.begin_write(conn)
        except self.errors as exc:
            self._rollback(conn)
            raise self.backend.error("starting a write on", exc) from exc
        try:
            yield conn
        except BaseException:
            self._rollback(conn)
            raise
        else:
            try:
                conn.execute("COMMIT")
            except self.errors as exc:
                self._rollback(conn)
                raise self.backend.error("committing to", exc) from exc

    def _rollback(self, conn: Any) -> None:
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except self.errors:  # a dead connection: the database rolled back already
            pass

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Any]:
        """A read-only transaction: every read inside sees one snapshot of the database
        (reused as is when this thread is already inside a transaction)."""
        conn = self.connection()
        if conn.in_transaction:
            yield conn
            return
        self.backend.begin_snapshot(conn)
        try:
            yield conn
        finally:
            self._rollback(conn)

    def close(self) -> None:
        self._closed = True
        for finalizer in self._finalizers:  # nothing is handed back after close
            finalizer.detach()
        self._finalizers.clear()
        with self._all_lock:
            for conn in self._all:
                with contextlib.suppress(Exception):
                    self.backend.release(conn)
            self._all.clear()
        self._closed = True
        self.backend.close()

    # -- schema and meta ---------------------------------------------------------------------

    def migrate(self, migrations: Sequence[tuple[str, str]] = MIGRATIONS) -> list[str]:
        """Apply the pending ones of ``migrations`` (named SQL scripts, written in SQLite's
        column types and rewritten by the backend; the store's own by default, a backend's own
        such as the lexical index's otherwise); return the names applied. Safe under
        concurrency: the check and the scripts run in one write transaction, so several
        processes opening a new store at once apply each migration once."""
        applied: list[str] = []
        with self.atomic() as c:
            c.execute(self.backend.schema(MIGRATIONS_TABLE))
            done = {r[0] for r in c.execute("SELECT name FROM migrations")}
            for name, sql in migrations:
                if name in done:
                    continue
                for statement in _split_sql(self.backend.schema(sql)):
                    c.execute(statement)
                c.execute("INSERT INTO migrations VALUES (?, ?)", (name, time.time()))
                applied.append(name)
            if applied and migrations is MIGRATIONS:
                c.execute(_UPSERT_META, ("schema_version", MIGRATIONS[-1][0]))
        return applied

    def get_meta(self, key: str) -> str | None:
        row = self.connection().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        with self.atomic() as conn:
            conn.execute(_UPSERT_META, (key, value))

    def init_meta(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Record each ``(key, value)`` whose key holds nothing yet (one transaction; the first
        process to record a key wins)."""
        with self.atomic() as conn:
            for key, value in pairs:
                conn.execute(
                    "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO NOTHING",
                    (key, value),
                )

    def _check_tokenizer(self, fingerprint: str) -> None:
        stored = self.get_meta("tokenizer")
        if stored is None:
            self.set_meta("tokenizer", fingerprint)
        elif stored != fingerprint:
            raise IndexMismatchError(
                f"the index at {self.name} was built with tokenizer {stored!r}, this build uses "
                f"{fingerprint!r}: rebuild it ("
                + (f"delete {self.path.parent}" if self.path else "drop its tables")
                + " and index again)"
            )

    # -- reads ----------------------------------------------------------------------------------

    def get_resource(self, resource_id: str, *, tenant: str = "") -> ResourceRecord | None:
        """The resource ``resource_id`` of ``tenant`` (any status), or None."""
        row = (
            self.connection()
            .execute(
                "SELECT * FROM resources WHERE resource_id = ?",
                (resource_key(resource_id, tenant),),
            )
            .fetchone()
        )
        return None if row is None else ResourceRecord.from_row(row)

    def resources(self, keys: Iterable[str]) -> dict[str, ResourceRecord]:
        """The resources of these keys (:func:`resource_key`) that exist, by key."""
        rows = select_in(
            self.connection(), "SELECT resource_id, * FROM resources", "resource_id", keys
        )
        return {key: ResourceRecord.from_row(row) for key, row in rows.items()}

    def chunks(self, chunk_ids: Iterable[str]) -> dict[str, ChunkRecord]:
        """Chunk records (with title, tenant and status of their resource) by chunk id, for the
        chunks that exist and belong to their resource's current version."""
        rows = select_in(self.connection(), _CHUNK_SELECT, "c.chunk_id", chunk_ids)
        return {cid: ChunkRecord.from_row(row) for cid, row in rows.items()}

    def chunk_views(self, chunk_ids: Iterable[str], filters: Filters) -> dict[str, ChunkView]:
        """What fusion reads of each of these chunks that is visible under ``filters`` (the
        test of :meth:`Filters.sql`, in the same statement) and belongs to its resource's
        current version, by chunk id: one row each, no resource record built and no JSON
        read. A view's ``resource_id`` is the resource's key (:func:`resource_key`), its
        ``title_norm`` the resource's and its ``facts`` the chunk's stored ones (``None``
        for a chunk whose facts the backfill has not reached)."""
        rows = self._visible_rows(_VIEW_SELECT, chunk_ids, filters)
        return {
            cid: ChunkView(cid, row[1], row[5], row[3], row[4], row[2], row[6],
                           facts_of(row[7], row[8], row[9]))
            for cid, row in rows.items()
        }  # fmt: skip

    def visible_chunk_ids(self, chunk_ids: Iterable[str], filters: Filters) -> set[str]:
        """The ids among ``chunk_ids`` of the chunks :meth:`chunk_views` would give (current
        version, resource visible under ``filters``), read in the same statement without
        their rows: what a path that only needs to know which of its hits a search may show
        reads."""
        select = f"SELECT c.chunk_id {_VIEW_SELECT[_VIEW_SELECT.index('FROM'):]}"
        return set(self._visible_rows(select, chunk_ids, filters))

    def _visible_rows(
        self, select: str, chunk_ids: Iterable[str], filters: Filters
    ) -> dict[str, Any]:
        """Rows of ``select`` (over ``c`` and ``r``, its WHERE open for an AND) of the chunks
        among ``chunk_ids`` visible under ``filters``, by chunk id."""
        filter_sql, params = filters.sql("r", self.backend)
        return select_in(
            self.connection(), f"{select} {filter_sql} AND", "c.chunk_id", chunk_ids,
            params=params,
        )

    def backfill_chunk_facts(self, *, batch: int = BACKFILL_BATCH) -> int:
        """Compute and store the facts (:func:`hybridsag.fusion.facts.chunk_facts`) of every
        chunk that has none (written before the migration ``0008_chunk_facts``), ``batch``
        chunks a write transaction, in rowid order; then remove the meta key
        :data:`BACKFILL_META`. Returns how many chunks it filled in. A store whose meta key is
        gone returns 0 at once (one read). Safe beside writers and other backfills: a chunk's
        text never changes, a row is only written while its facts are still NULL, and a row
        deleted meanwhile is simply not written."""
        if self.get_meta(BACKFILL_META) is None:
            return 0
        done = 0
        last = 0
        t0 = time.perf_counter()
        while True:
            rows = self.connection().execute(
                "SELECT id, text FROM chunks WHERE id > ? AND shingles IS NULL ORDER BY id "
                "LIMIT ?",
                (last, batch),
            ).fetchall()
            if not rows:
                break
            if not done:
                log.info("%s: storing the fusion facts of the chunks written before "
                         "0008_chunk_facts (once)", self.name)  # fmt: skip
            last = rows[-1][0]
            values = [(*facts_columns(chunk_facts(row[1])), row[0]) for row in rows]
            with self.atomic() as conn:
                conn.executemany(
                    "UPDATE chunks SET script = ?, heading_only = ?, shingles = ? "
                    "WHERE id = ? AND shingles IS NULL",
                    values,
                )
            done += len(values)
        with self.atomic() as conn:
            conn.execute("DELETE FROM meta WHERE key = ?", (BACKFILL_META,))
        if done:
            log.info(
                "%s: stored the fusion facts of %d chunks written before 0008_chunk_facts "
                "(%.1f s)", self.name, done, time.perf_counter() - t0,
            )  # fmt: skip
        return done

    def resource_chunks(self, resource_id: str, *, tenant: str = "") -> list[ChunkRecord]:
        """The chunks of the current version of ``resource_id`` of ``tenant``, in order."""
        rows = self.connection().execute(
            f"{_CHUNK_SELECT} WHERE c.resource_id = ? ORDER BY c.ordinal",
            (resource_key(resource_id, tenant),),
        )
        return [ChunkRecord.from_row(row) for row in rows]

    def resources_by_title(self, title_norm: str, filters: Filters, *, limit: int) -> list[str]:
        """Keys of the resources visible under ``filters`` whose normalised title is
        ``title_norm``, oldest first, at most ``limit``."""
        filter_sql, params = filters.sql("r")
        rows = self.connection().execute(
            f"SELECT r.resource_id FROM resources r WHERE r.title_norm = ? AND {filter_sql} "
            "ORDER BY r.id LIMIT ?",
            [title_norm, *params, limit],
        )
        return [row[0] for row in rows]

    def first_chunks(self, resource_ids: Sequence[str]) -> dict[str, tuple[str, int]]:
        """Each resource's first chunk (current version) and how many chunks it has, by key:
        ``{key: (chunk_id, count)}``; resources without chunks are absent."""
        out: dict[str, tuple[str, int]] = {}
        if not resource_ids:
            return out
        marks = ",".join("?" * len(resource_ids))
        for rid, chunk_id, n in self.connection().execute(
            f"""SELECT c.resource_id, c.chunk_id, count(*) OVER (PARTITION BY c.resource_id)
                FROM chunks c JOIN resources r
                  ON r.resource_id = c.resource_id AND r.version = c.version
                WHERE c.resource_id IN ({marks}) ORDER BY c.resource_id, c.ordinal""",
            list(resource_ids),
        ):
            out.setdefault(rid, (chunk_id, int(n)))
        return out

    def chunk_vectors(self, chunk_ids: Iterable[str]) -> dict[str, bytes]:
        """Stored float32 passage vectors (raw bytes) by chunk id, where present."""
        rows = select_in(
            self.connection(),
            "SELECT c.chunk_id, v.vector FROM chunks c JOIN chunk_vectors v ON v.id = c.id",
            "c.chunk_id",
            chunk_ids,
        )
        return {cid: row[1] for cid, row in rows.items()}

    def vector_count(self) -> int:
        """How many passage vectors the store holds."""
        return int(self.connection().execute("SELECT count(*) FROM chunk_vectors").fetchone()[0])

    def vector_rows(self) -> Iterator[tuple[str, str, int, str, tuple[str, ...], bytes]]:
        """Every stored passage vector with what the dense index keeps beside it: ``(chunk_id,
        public resource id, version, tenant, acl, float32 bytes)`` of each chunk row (any
        status) whose vector the store holds, the rows the write path wrote to the dense
        index. Read as they are iterated, in one read transaction."""
        with self.snapshot() as conn:
            for chunk_id, key, version, acl, blob in conn.execute(
                "SELECT c.chunk_id, c.resource_id, c.version, r.acl, v.vector "
                "FROM chunk_vectors v JOIN chunks c ON c.id = v.id "
                "JOIN resources r ON r.resource_id = c.resource_id"
            ):
                tenant, resource_id = split_key(key)
                yield (chunk_id, resource_id, int(version), tenant, tuple(json.loads(acl)),
                       bytes(blob))

    def counts(self) -> dict[str, int]:
        conn = self.connection()
        out = {"resources": 0, "chunks": 0}
        for status, n in conn.execute("SELECT status, count(*) FROM resources GROUP BY status"):
            out[f"resources_{status}"] = n
            out["resources"] += n
        out["chunks"] = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        out["tombstones"] = conn.execute("SELECT count(*) FROM tombstones").fetchone()[0]
        return out

    def bytes_on_disk(self) -> int:
        """The size of the database (SQLite: the file and its WAL; PostgreSQL: the tables)."""
        return self.backend.bytes_on_disk(self.connection())

    def folder_roots(self, *, tenant: str = "") -> list[str]:
        """The folders whose files' ids are relative to them (``source_root`` of any resource
        of ``tenant``)."""
        rows = self.connection().execute(
            "SELECT DISTINCT source_root FROM resources WHERE source_root IS NOT NULL "
            "AND tenant = ?",
            (tenant,),
        )
        return sorted(row[0] for row in rows)

    def source_roots(self) -> list[tuple[str, str]]:
        """``(tenant, source_root)`` of every folder any resource was indexed from, sorted."""
        rows = self.connection().execute(
            "SELECT DISTINCT tenant, source_root FROM resources WHERE source_root IS NOT NULL"
        )
        return sorted((row[0], row[1]) for row in rows)

    def folder_resources(self, folder: str, *, tenant: str = "") -> list[ResourceRecord]:
        """Resources of ``tenant`` indexed from a folder (``source_root`` set) whose source
        file lies under ``folder`` (an absolute path), in any status."""
        prefix = folder.rstrip("/") + "/"
        rows = self.connection().execute(
            "SELECT * FROM resources WHERE source_root IS NOT NULL AND tenant = ? "
            "AND substr(source_uri, 1, ?) = ? ORDER BY id",
            (tenant, len(prefix), prefix),
        )
        return [ResourceRecord.from_row(row) for row in rows]

    # -- exclusions (folder files deleted by hand) ----------------------------------------------

    def exclusions(
        self, *, tenant: str | None = None, resource_id: str | None = None
    ) -> list[Exclusion]:
        """The folder files kept out of their folders (:class:`Exclusion`), oldest first; of
        exact ``tenant`` and id ``resource_id`` when given."""
        where, params = ["1 = 1"], []
        if tenant is not None:
            where.append("tenant = ?")
            params.append(tenant)
        if resource_id is not None:
            where.append("path = ?")
            params.append(resource_id)
        rows = self.connection().execute(
            f"SELECT * FROM exclusions WHERE {' AND '.join(where)} "
            "ORDER BY excluded_at, tenant, source_root, path",
            params,
        )
        return [Exclusion.from_row(row) for row in rows]

    def excluded_paths(self, *, tenant: str = "") -> set[tuple[str, str]]:
        """``(source_root, path)`` of every folder file of ``tenant`` kept out of its folder."""
        rows = self.connection().execute(
            "SELECT source_root, path FROM exclusions WHERE tenant = ?", (tenant,)
        )
        return {(row[0], row[1]) for row in rows}

    @staticmethod
    def add_exclusion(
        conn: Any, *, tenant: str, source_root: str, path: str, acl_json: str, now: float
    ) -> None:
        """Record (inside the caller's write transaction ``conn``) that the folder file
        ``path`` under ``source_root`` of ``tenant`` stays out of its folder."""
        conn.execute(
            "INSERT INTO exclusions(tenant, source_root, path, acl, excluded_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT(tenant, source_root, path) DO UPDATE SET "
            "acl = excluded.acl, excluded_at = excluded.excluded_at",
            (tenant, source_root, path, acl_json, now),
        )

    def remove_exclusions(self, resource_id: str, *, tenant: str = "") -> list[Exclusion]:
        """Lift the exclusions of the id ``resource_id`` of ``tenant`` (one per root that held
        it); returns them."""
        with self.atomic() as conn:
            rows = conn.execute(
                "SELECT * FROM exclusions WHERE tenant = ? AND path = ? ORDER BY excluded_at",
                (tenant, resource_id),
            ).fetchall()
            conn.execute(
                "DELETE FROM exclusions WHERE tenant = ? AND path = ?", (tenant, resource_id)
            )
        return [Exclusion.from_row(row) for row in rows]

    def list_resources(
        self,
        *,
        tenant: str | None = None,
        statuses: Sequence[str] | None = None,
        prefix: str | None = None,
        limit: int | None = None,
    ) -> list[tuple[ResourceRecord, int]]:
        """Resources (oldest first) with their current version's chunk count, filtered by
        exact ``tenant``, ``statuses`` and an id ``prefix`` (of the public ids); at most
        ``limit``."""
        rows, _ = self.resource_page(tenant=tenant, statuses=statuses, prefix=prefix, limit=limit)
        return rows

    def resource_page(
        self,
        *,
        tenant: str | None = None,
        statuses: Sequence[str] | None = None,
        prefix: str | None = None,
        acl: Sequence[str] | None = None,
        after: int | None = None,
        limit: int | None = None,
    ) -> tuple[list[tuple[ResourceRecord, int]], int | None]:
        """One page of :meth:`list_resources`: the resources after the row ``after`` (None:
        from the first), also filtered by ``acl`` as a search is (a resource with ACL tags
        only when it shares one, a public one always), and the row to continue after (None
        when this page ended the list). Keyset paging on the row's insertion order: a
        resource written or deleted between pages never shifts another one."""
        where: list[str] = ["1 = 1"]
        params: list[Any] = []
        if tenant is not None:
            where.append("r.tenant = ?")
            params.append(tenant)
        if statuses:
            where.append(f"r.status IN ({','.join('?' * len(statuses))})")
            params.extend(statuses)
        if prefix:
            where.append(f"substr({public_id_sql('r')}, 1, ?) = ?")
            params.extend((len(prefix), prefix))
        if acl is not None:
            where.append(f"(r.acl = '[]' OR {self.backend.acl_any_sql('r', len(acl))})")
            params.extend(acl)
        if after is not None:
            where.append("r.id > ?")
            params.append(after)
        sql = (
            "SELECT r.*, (SELECT count(*) FROM chunks c WHERE c.resource_id = r.resource_id "
            "AND c.version = r.version) AS n_chunks FROM resources r WHERE "
            + " AND ".join(where)
            + " ORDER BY r.id"
        )
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit + 1)  # one more: whether another page follows
        rows = list(self.connection().execute(sql, params))
        more = limit is not None and len(rows) > limit
        rows = rows[:limit] if limit is not None else rows
        out = [(ResourceRecord.from_row(row), int(row["n_chunks"])) for row in rows]
        return out, (int(rows[-1]["id"]) if more else None)

    def iter_resource_ids(self, statuses: Sequence[str] | None = None) -> Iterator[str]:
        """The keys of every resource (of ``statuses``), oldest first."""
        sql = "SELECT resource_id FROM resources"
        params: list[Any] = []
        if statuses:
            sql += f" WHERE status IN ({','.join('?' * len(statuses))})"
            params = list(statuses)
        for row in self.connection().execute(sql + " ORDER BY id", params):
            yield row[0]


def _split_sql(script: str) -> list[str]:
    """Split a migration script on ``;`` at line ends (no semicolons inside our statements)."""
    return [s.strip() for s in script.split(";\n") if s.strip()]
