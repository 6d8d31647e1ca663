"""The system of record: one SQLite database (WAL) under the data dir.

Tables (named migrations in :data:`MIGRATIONS`): ``resources``, ``chunks``, ``chunk_vectors``,
``tombstones``, ``journal`` (what the write path was doing, for crash recovery), ``meta`` (schema,
tokenizer, embedder) and ``reconcile_lease``. The lexical index's own tables (FTS5) are created by
:mod:`hybridsag.lexical` through :meth:`Store.migrate`, which owns every statement on them.

Every write goes through :meth:`Store.atomic` (``BEGIN IMMEDIATE`` .. ``COMMIT``; a nested
``atomic()`` is a SAVEPOINT). Connections are per thread. A resource is visible only when
``status = 'ready'``; every read path filters on it.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybridsag.errors import IndexMismatchError, QueryError, StoreError

__all__ = [
    "ChunkRecord",
    "Filters",
    "MIGRATIONS",
    "ResourceRecord",
    "STATUSES",
    "Store",
    "select_in",
]

STATUSES = ("indexing", "ready", "failed", "disabled", "deleting")
#: Statuses a caller may ask to search; ``indexing``/``failed``/``deleting`` never are.
SEARCHABLE_STATUSES = ("ready", "disabled")

MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "0001_initial",
        f"""
        CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE resources(
            id INTEGER PRIMARY KEY,
            resource_id TEXT NOT NULL UNIQUE,
            title TEXT NOT NULL DEFAULT '',
            title_norm TEXT NOT NULL DEFAULT '',
            source_uri TEXT,
            source_mtime_ns INTEGER,
            source_size INTEGER,
            content_sha256 TEXT NOT NULL DEFAULT '',
            tenant TEXT NOT NULL DEFAULT '',
            acl TEXT NOT NULL DEFAULT '[]',
            metadata TEXT NOT NULL DEFAULT '{{}}',
            status TEXT NOT NULL CHECK (status IN {STATUSES!r}),
            version INTEGER NOT NULL DEFAULT 0,
            pending_version INTEGER,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            error TEXT
        );
        CREATE INDEX resources_title_norm ON resources(title_norm);
        CREATE INDEX resources_status ON resources(status, tenant);
        CREATE TABLE chunks(
            id INTEGER PRIMARY KEY,
            chunk_id TEXT NOT NULL UNIQUE,
            resource_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            ordinal INTEGER NOT NULL,
            heading_path TEXT NOT NULL DEFAULT '',
            text TEXT NOT NULL,
            start_line INTEGER NOT NULL,
            end_line INTEGER NOT NULL,
            byte_start INTEGER NOT NULL,
            byte_end INTEGER NOT NULL,
            content_sha256 TEXT NOT NULL
        );
        CREATE INDEX chunks_resource ON chunks(resource_id, version, ordinal);
        CREATE TABLE tombstones(
            resource_id TEXT PRIMARY KEY,
            version INTEGER NOT NULL,
            deleted_at REAL NOT NULL
        );
        CREATE TABLE journal(
            id INTEGER PRIMARY KEY,
            op TEXT NOT NULL,
            resource_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            step TEXT NOT NULL,
            pid INTEGER NOT NULL,
            started_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            detail TEXT
        );
        CREATE INDEX journal_resource ON journal(resource_id);
        """,
    ),
    (
        # Passage vectors beside the chunks, so the offline judge reads a candidate's vector
        # with one SQL query instead of a Milvus round trip; deleted with their chunk.
        "0002_chunk_vectors",
        """
        CREATE TABLE chunk_vectors(
            id INTEGER PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
            vector BLOB NOT NULL
        );
        """,
    ),
    (
        # Single-flight lease of the reconciler (hybridsag.consistency): one row per lease name,
        # held by ``owner`` until ``expires_at`` (epoch seconds); an expired lease may be taken.
        "0003_reconcile_lease",
        """
        CREATE TABLE reconcile_lease(
            name TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            acquired_at REAL NOT NULL,
            expires_at REAL NOT NULL
        );
        """,
    ),
    (
        # The folder a folder resource's id is relative to (NULL: API or JSONL ingest), so a
        # re-index prunes only its own folder's resources. Resources indexed from a folder
        # before (a source file recorded with its stat) get it from their source path, which
        # is that folder joined with their id.
        "0004_source_root",
        """
        ALTER TABLE resources ADD COLUMN source_root TEXT;
        UPDATE resources SET source_root = substr(source_uri, 1,
                length(source_uri) - length(resource_id) - 1)
            WHERE source_mtime_ns IS NOT NULL AND source_uri IS NOT NULL
              AND length(source_uri) > length(resource_id) + 1
              AND substr(source_uri, length(source_uri) - length(resource_id)) = '/' || resource_id;
        CREATE INDEX resources_source_root ON resources(source_root);
        """,
    ),
)

#: A chunk joined with its resource at the resource's current version (ChunkRecord's columns).
_CHUNK_SELECT = """SELECT c.chunk_id, c.resource_id, c.version, c.ordinal, c.heading_path, c.text,
       c.start_line, c.end_line, c.byte_start, c.byte_end, c.content_sha256,
       r.title, r.source_uri, r.tenant, r.status
FROM chunks c JOIN resources r ON r.resource_id = c.resource_id AND r.version = c.version"""

_META_KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")


@dataclass(frozen=True, slots=True)
class ResourceRecord:
    resource_id: str
    title: str
    title_norm: str
    source_uri: str | None
    source_mtime_ns: int | None
    source_size: int | None
    content_sha256: str
    tenant: str
    acl: tuple[str, ...]
    metadata: Mapping[str, Any]
    status: str
    version: int
    pending_version: int | None
    created_at: float
    updated_at: float
    error: str | None
    #: the folder the id of a folder resource is relative to (``None``: API or JSONL ingest)
    source_root: str | None = None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> ResourceRecord:
        return cls(
            resource_id=row["resource_id"],
            title=row["title"],
            title_norm=row["title_norm"],
            source_uri=row["source_uri"],
            source_mtime_ns=row["source_mtime_ns"],
            source_size=row["source_size"],
            content_sha256=row["content_sha256"],
            tenant=row["tenant"],
            acl=tuple(json.loads(row["acl"])),
            metadata=json.loads(row["metadata"]),
            status=row["status"],
            version=row["version"],
            pending_version=row["pending_version"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            error=row["error"],
            source_root=row["source_root"],
        )


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """A stored chunk joined with its resource: everything a result shows."""

    chunk_id: str
    resource_id: str
    version: int
    ordinal: int
    heading_path: str
    text: str
    start_line: int
    end_line: int
    byte_start: int
    byte_end: int
    content_sha256: str
    title: str
    source_uri: str | None
    tenant: str
    status: str


@dataclass(frozen=True, slots=True)
class Filters:
    """Who may see what, applied inside every path's own query and again after fusion.

    ``tenant``: only that tenant's resources. ``acl``: the caller's tags; a resource with tags is
    visible only when it shares one, a resource without tags is public. ``metadata``: equality on
    top-level metadata keys. ``resource_ids``: only these. ``statuses``: ``("ready",)`` unless a
    caller also asks for ``disabled`` ones.
    """

    tenant: str | None = None
    acl: tuple[str, ...] | None = None
    metadata: Mapping[str, str | int | float | bool] = field(default_factory=dict)
    resource_ids: tuple[str, ...] | None = None
    statuses: tuple[str, ...] = ("ready",)

    def __post_init__(self) -> None:
        for name in ("acl", "resource_ids", "statuses"):
            value = getattr(self, name)
            if isinstance(value, str):  # would be read as a sequence of characters
                raise QueryError(f"filters.{name} must be a tuple of strings, got {value!r}")
        if self.tenant is not None and not isinstance(self.tenant, str):
            raise QueryError(f"filters.tenant must be a string, got {self.tenant!r}")
        if self.acl is not None and not all(isinstance(t, str) and t for t in self.acl):
            raise QueryError(f"filters.acl must be non-empty strings, got {self.acl!r}")
        for key, value in self.metadata.items():
            if not _META_KEY.match(str(key)):
                raise QueryError(
                    f"filters.metadata key {key!r} is not allowed (letters, digits, _ . -)"
                )
            if not isinstance(value, str | int | float | bool):
                raise QueryError(
                    f"filters.metadata[{key!r}]={value!r}: only str, int, float, bool compare"
                )
        if self.resource_ids is not None and not all(
            isinstance(r, str) for r in self.resource_ids
        ):
            raise QueryError(f"filters.resource_ids must be strings, got {self.resource_ids!r}")
        if not self.statuses:
            raise QueryError("filters.statuses must not be empty")
        for status in self.statuses:
            if status not in SEARCHABLE_STATUSES:
                raise QueryError(
                    f"filters.statuses: {status!r} is not searchable; valid: {SEARCHABLE_STATUSES}"
                )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | Filters | None) -> Filters:
        """Build from a plain mapping (API/CLI/HTTP); unknown keys are an error."""
        if data is None:
            return cls()
        if isinstance(data, Filters):
            return data
        allowed = {"tenant", "acl", "metadata", "resource_ids", "statuses"}
        unknown = set(data) - allowed
        if unknown:
            raise QueryError(f"unknown filter {sorted(unknown)}; valid: {sorted(allowed)}")
        kwargs: dict[str, Any] = dict(data)
        for key in ("acl", "resource_ids", "statuses"):
            if key in kwargs and kwargs[key] is not None:
                if isinstance(kwargs[key], str):
                    kwargs[key] = (kwargs[key],)
                if not isinstance(kwargs[key], list | tuple | set | frozenset):
                    raise QueryError(
                        f"filters.{key} must be a list of strings, got {kwargs[key]!r}"
                    )
                kwargs[key] = tuple(kwargs[key])
        if "metadata" in kwargs and not isinstance(kwargs["metadata"], Mapping):
            raise QueryError(f"filters.metadata must be a mapping, got {kwargs['metadata']!r}")
        return cls(**kwargs)

    def sql(self, alias: str = "r") -> tuple[str, list[Any]]:
        """A WHERE fragment over the resources table aliased ``alias``, and its parameters."""
        parts = [f"{alias}.status IN ({','.join('?' * len(self.statuses))})"]
        params: list[Any] = list(self.statuses)
        if self.tenant is not None:
            parts.append(f"{alias}.tenant = ?")
            params.append(self.tenant)
        if self.acl is not None:
            marks = ",".join("?" * len(self.acl)) or "NULL"
            parts.append(
                f"({alias}.acl = '[]' OR EXISTS (SELECT 1 FROM json_each({alias}.acl) "
                f"WHERE json_each.value IN ({marks})))"
            )
            params.extend(self.acl)
        for key, value in sorted(self.metadata.items()):
            # json_type as well as the value, so that true never equals 1, nor the string
            # '["x"]' a stored list: the same test as :meth:`allows`.
            path = f'$."{key}"'
            if isinstance(value, bool):
                parts.append(f"json_type({alias}.metadata, ?) = ?")
                params.extend((path, "true" if value else "false"))
            else:
                kinds = "('text')" if isinstance(value, str) else "('integer', 'real')"
                parts.append(
                    f"json_type({alias}.metadata, ?) IN {kinds} "
                    f"AND json_extract({alias}.metadata, ?) = ?"
                )
                params.extend((path, path, value))
        if self.resource_ids is not None:
            marks = ",".join("?" * len(self.resource_ids)) or "NULL"
            parts.append(f"{alias}.resource_id IN ({marks})")
            params.extend(self.resource_ids)
        return " AND ".join(parts), params

    def allows(self, record: ResourceRecord) -> bool:
        """The same test as :meth:`sql`, in Python (the post-fusion check)."""
        if record.status not in self.statuses:
            return False
        if self.tenant is not None and record.tenant != self.tenant:
            return False
        if self.acl is not None and record.acl and not set(record.acl) & set(self.acl):
            return False
        for key, value in self.metadata.items():
            if key not in record.metadata or record.metadata[key] != value:
                return False
            if isinstance(value, bool) != isinstance(record.metadata[key], bool):
                return False
        if self.resource_ids is not None and record.resource_id not in self.resource_ids:
            return False
        return True


class Store:
    """SQLite store. Thread-safe: one connection per thread, writes through :meth:`atomic`."""

    def __init__(self, path: Path, *, tokenizer_fingerprint: str, busy_timeout_s: float = 30.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self._closed = False
        try:
            self.migrate()
            self._check_tokenizer(tokenizer_fingerprint)
        except BaseException:
            self.close()  # a refused store leaves no open connection behind
            raise

    # -- connections -------------------------------------------------------------------------

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (created on first use)."""
        if self._closed:
            raise StoreError(f"store {self.path} is closed")
        conn = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(
                    self.path,
                    timeout=self._busy_timeout_s,
                    isolation_level=None,
                    check_same_thread=False,
                )
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open {self.path}: {exc}") from exc
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    @contextlib.contextmanager
    def atomic(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``); rolls back on any exception. Nested in
        another ``atomic()`` of the same thread it is a SAVEPOINT: an exception inside rolls back
        only the nested part, and the outer transaction goes on."""
        conn = self.connection()
        if conn.in_transaction:
            depth = getattr(self._local, "savepoints", 0) + 1
            self._local.savepoints = depth
            name = f"hs_sp{depth}"
            conn.execute(f"SAVEPOINT {name}")
            try:
                yield conn
            except BaseException:
                conn.execute(f"ROLLBACK TO {name}")
                conn.execute(f"RELEASE {name}")
                raise
            else:
                conn.execute(f"RELEASE {name}")
            finally:
                self._local.savepoints = depth - 1
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot start a write on {self.path}: {exc}", retriable=True) from exc
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        else:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                conn.execute("ROLLBACK")
                raise StoreError(f"commit failed on {self.path}: {exc}", retriable=True) from exc

    def close(self) -> None:
        with self._all_lock:
            for conn in self._all:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            self._all.clear()
        self._closed = True

    # -- schema and meta ---------------------------------------------------------------------

    def migrate(self, migrations: Sequence[tuple[str, str]] = MIGRATIONS) -> list[str]:
        """Apply the pending ones of ``migrations`` (named SQL scripts; the store's own by
        default, a backend's own such as the lexical index's otherwise); return the names
        applied. Safe under concurrency: the check and the scripts run in one write transaction,
        so several processes opening a new data dir at once apply each migration once."""
        applied: list[str] = []
        with self.atomic() as c:
            c.execute(
                "CREATE TABLE IF NOT EXISTS migrations("
                "name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
            )
            done = {r[0] for r in c.execute("SELECT name FROM migrations")}
            for name, sql in migrations:
                if name in done:
                    continue
                for statement in _split_sql(sql):
                    c.execute(statement)
                c.execute("INSERT INTO migrations VALUES (?, ?)", (name, time.time()))
                applied.append(name)
            if applied and migrations is MIGRATIONS:
                c.execute(
                    "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (MIGRATIONS[-1][0],)
                )
        return applied

    def get_meta(self, key: str) -> str | None:
        row = self.connection().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        with self.atomic() as conn:
            conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def _check_tokenizer(self, fingerprint: str) -> None:
        stored = self.get_meta("tokenizer")
        if stored is None:
            self.set_meta("tokenizer", fingerprint)
        elif stored != fingerprint:
            raise IndexMismatchError(
                f"the index at {self.path} was built with tokenizer {stored!r}, this build uses "
                f"{fingerprint!r}: rebuild it (delete {self.path.parent} and index again)"
            )

    # -- reads ----------------------------------------------------------------------------------

    def get_resource(self, resource_id: str) -> ResourceRecord | None:
        row = (
            self.connection()
            .execute("SELECT * FROM resources WHERE resource_id = ?", (resource_id,))
            .fetchone()
        )
        return None if row is None else ResourceRecord.from_row(row)

    def resources(self, resource_ids: Iterable[str]) -> dict[str, ResourceRecord]:
        rows = select_in(
            self.connection(), "SELECT resource_id, * FROM resources", "resource_id", resource_ids
        )
        return {rid: ResourceRecord.from_row(row) for rid, row in rows.items()}

    def chunks(self, chunk_ids: Iterable[str]) -> dict[str, ChunkRecord]:
        """Chunk records (with title, tenant and status of their resource) by chunk id, for the
        chunks that exist and belong to their resource's current version."""
        rows = select_in(self.connection(), _CHUNK_SELECT, "c.chunk_id", chunk_ids)
        return {cid: ChunkRecord(*row) for cid, row in rows.items()}

    def resource_chunks(self, resource_id: str) -> list[ChunkRecord]:
        rows = self.connection().execute(
            f"{_CHUNK_SELECT} WHERE c.resource_id = ? ORDER BY c.ordinal", (resource_id,)
        )
        return [ChunkRecord(*row) for row in rows]

    def resources_by_title(self, title_norm: str, filters: Filters, *, limit: int) -> list[str]:
        """Ids of the resources visible under ``filters`` whose normalised title is
        ``title_norm``, oldest first, at most ``limit``."""
        filter_sql, params = filters.sql("r")
        rows = self.connection().execute(
            f"SELECT r.resource_id FROM resources r WHERE r.title_norm = ? AND {filter_sql} "
            "ORDER BY r.id LIMIT ?",
            [title_norm, *params, limit],
        )
        return [row[0] for row in rows]

    def first_chunks(self, resource_ids: Sequence[str]) -> dict[str, tuple[str, int]]:
        """Each resource's first chunk (current version) and how many chunks it has:
        ``{resource_id: (chunk_id, count)}``; resources without chunks are absent."""
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
        total = 0
        for suffix in ("", "-wal", "-shm"):
            p = Path(str(self.path) + suffix)
            if p.exists():
                total += p.stat().st_size
        return total

    def folder_roots(self) -> list[str]:
        """The folders whose files' ids are relative to them (``source_root`` of any resource)."""
        rows = self.connection().execute(
            "SELECT DISTINCT source_root FROM resources WHERE source_root IS NOT NULL"
        )
        return sorted(row[0] for row in rows)

    def folder_resources(self, folder: str) -> list[ResourceRecord]:
        """Resources indexed from a folder (``source_root`` set) whose source file lies under
        ``folder`` (an absolute path), in any status."""
        prefix = folder.rstrip("/") + "/"
        rows = self.connection().execute(
            "SELECT * FROM resources WHERE source_root IS NOT NULL "
            "AND substr(source_uri, 1, ?) = ? ORDER BY id",
            (len(prefix), prefix),
        )
        return [ResourceRecord.from_row(row) for row in rows]

    def list_resources(
        self,
        *,
        tenant: str | None = None,
        statuses: Sequence[str] | None = None,
        prefix: str | None = None,
        limit: int | None = None,
    ) -> list[tuple[ResourceRecord, int]]:
        """Resources (oldest first) with their current version's chunk count, filtered by
        exact ``tenant``, ``statuses`` and an id ``prefix``; at most ``limit``."""
        where, params = ["1 = 1"], []
        if tenant is not None:
            where.append("r.tenant = ?")
            params.append(tenant)
        if statuses:
            where.append(f"r.status IN ({','.join('?' * len(statuses))})")
            params.extend(statuses)
        if prefix:
            where.append("substr(r.resource_id, 1, ?) = ?")
            params.extend((len(prefix), prefix))
        sql = (
            "SELECT r.*, (SELECT count(*) FROM chunks c WHERE c.resource_id = r.resource_id "
            "AND c.version = r.version) AS n_chunks FROM resources r WHERE "
            + " AND ".join(where)
            + " ORDER BY r.id"
        )
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        rows = self.connection().execute(sql, params)
        return [(ResourceRecord.from_row(row), int(row["n_chunks"])) for row in rows]

    def iter_resource_ids(self, statuses: Sequence[str] | None = None) -> Iterator[str]:
        sql = "SELECT resource_id FROM resources"
        params: list[Any] = []
        if statuses:
            sql += f" WHERE status IN ({','.join('?' * len(statuses))})"
            params = list(statuses)
        for row in self.connection().execute(sql + " ORDER BY id", params):
            yield row[0]


def select_in(
    conn: sqlite3.Connection,
    select: str,
    column: str,
    values: Iterable[Any],
    *,
    many: bool = False,
    batch: int = 500,
) -> dict[Any, Any]:
    """Rows of ``select`` (a statement ending in its FROM/JOIN/WHERE part, with no ``WHERE``
    or with a ``WHERE ... AND`` left open) whose ``column`` is one of ``values``, keyed by the
    row's first column; with ``many`` each key maps to a list of rows. Values go in batches of
    ``batch`` parameters (SQLite's limit on bound parameters)."""
    out: dict[Any, Any] = {}
    ids = list(dict.fromkeys(values))
    joiner = " " if select.rstrip().upper().endswith(("WHERE", "AND")) else " WHERE "
    for start in range(0, len(ids), batch):
        part = ids[start : start + batch]
        sql = f"{select}{joiner}{column} IN ({','.join('?' * len(part))})"
        for row in conn.execute(sql, part):
            if many:
                out.setdefault(row[0], []).append(row)
            else:
                out[row[0]] = row
    return out


def _split_sql(script: str) -> list[str]:
    """Split a migration script on ``;`` at line ends (no semicolons inside our statements)."""
    return [s.strip() for s in script.split(";\n") if s.strip()]
