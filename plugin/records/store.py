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
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import sqlite3
import threading
import time
import unicodedata
import uuid
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from hybridsag.fusion.facts import chunk_facts, decode_shingles, encode_shingles
from hybridsag.fusion.types import ChunkFacts, ChunkView
from hybridsag.errors import (
    CorruptStoreError,
    IndexMismatchError,
    InputError,
    QueryError,
    StoreError,
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

#: Between the tenant and the id in a resource key (see the module docstring): U+001F, a
#: control character, which no tenant and no id may hold.
KEY_SEP = "\x1f"
#: What a tenant's characters become in its chunk ids (``%`` first, so the escape is reversible).
_CHUNK_ID_ESCAPES = (("%", "%25"), ("@", "%40"), ("#", "%23"))


def resource_key(resource_id: str, tenant: str = "") -> str:
    """The key the store keys a resource by: ``resource_id`` in tenant ``""``, else
    ``tenant + KEY_SEP + resource_id``. Example: ``resource_key("notes", "acme")`` ->
    ``"acme\\x1fnotes"``; ``resource_key("notes")`` -> ``"notes"``. InputError for an id or a
    tenant holding :data:`KEY_SEP` (no stored one does: such a key could name another
    tenant's resource)."""
    if KEY_SEP in resource_id or KEY_SEP in tenant:
        what = "resource id" if KEY_SEP in resource_id else "tenant"
        value = resource_id if KEY_SEP in resource_id else tenant
        raise InputError(f"{what} {value!r:.80} holds control character {KEY_SEP!r}")
    return f"{tenant}{KEY_SEP}{resource_id}" if tenant else resource_id


def split_key(key: str) -> tuple[str, str]:
    """``(tenant, resource_id)`` of a resource key (:func:`resource_key` undone)."""
    tenant, sep, resource_id = key.partition(KEY_SEP)
    return (tenant, resource_id) if sep else ("", key)


def chunk_id_suffix(tenant: str) -> str:
    """What a chunk id of ``tenant`` ends with after its ordinal: ``""`` for tenant ``""``,
    else ``@`` and the tenant with ``%``, ``@`` and ``#`` percent-escaped."""
    for char, escaped in _CHUNK_ID_ESCAPES:
        tenant = tenant.replace(char, escaped)
    return f"@{tenant}" if tenant else ""


def chunk_id_for(key: str, version: int, ordinal: int) -> str:
    """The id of chunk ``ordinal`` of version ``version`` of the resource ``key``:
    ``<id>@<version>#<ordinal>`` in tenant ``""``, ``<id>@<version>#<ordinal>@<tenant>``
    otherwise (see the module docstring). Chunk ids carry the version, so a stale vector can
    never pass for a current one. Example: ``chunk_id_for(resource_key("a@b", "t#1"), 2, 0)``
    -> ``"a@b@2#0@t%231"``."""
    tenant, resource_id = split_key(key)
    return f"{resource_id}@{version}#{ordinal}{chunk_id_suffix(tenant)}"


def public_id_sql(alias: str) -> str:
    """The SQL of the public id of the resources row aliased ``alias`` (its key without the
    tenant; the same text in SQLite and PostgreSQL)."""
    return (
        f"(CASE WHEN {alias}.tenant = '' THEN {alias}.resource_id "
        f"ELSE substr({alias}.resource_id, length({alias}.tenant) + 2) END)"
    )


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
    (
        # Identity becomes (tenant, resource_id) (see the module docstring). A tenant's
        # resource was keyed by its id; it is keyed by tenant + KEY_SEP + id from now on, in
        # every table. Its tombstone (a delete in flight) is copied to the new key. The old key
        # keeps a tombstone at the highest version the resource reached, so a resource of
        # tenant "" with that id never makes one of its chunk ids again (chunk ids are kept, as
        # are the Milvus rows, which already carry the id and the tenant apart). Rows of tenant
        # "" are left as they are.
        "0005_tenant_keys",
        f"""
        INSERT INTO tombstones(resource_id, version, deleted_at)
            SELECT r.tenant || '{KEY_SEP}' || t.resource_id, t.version, t.deleted_at
            FROM tombstones t JOIN resources r ON r.resource_id = t.resource_id
            WHERE r.tenant <> '';
        UPDATE tombstones SET version = (
                SELECT CASE WHEN r.pending_version > r.version THEN r.pending_version
                            ELSE r.version END
                FROM resources r WHERE r.resource_id = tombstones.resource_id)
            WHERE EXISTS (
                SELECT 1 FROM resources r
                WHERE r.resource_id = tombstones.resource_id AND r.tenant <> ''
                  AND (r.version > tombstones.version OR r.pending_version > tombstones.version));
        INSERT INTO tombstones(resource_id, version, deleted_at)
            SELECT r.resource_id,
                   CASE WHEN r.pending_version > r.version THEN r.pending_version
                        ELSE r.version END,
                   r.updated_at
            FROM resources r
            WHERE r.tenant <> ''
              AND NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.resource_id = r.resource_id);
        UPDATE journal SET resource_id = (
                SELECT r.tenant || '{KEY_SEP}' || r.resource_id FROM resources r
                WHERE r.resource_id = journal.resource_id)
            WHERE resource_id IN (SELECT resource_id FROM resources WHERE tenant <> '');
        UPDATE chunks SET resource_id = (
                SELECT r.tenant || '{KEY_SEP}' || r.resource_id FROM resources r
                WHERE r.resource_id = chunks.resource_id)
            WHERE resource_id IN (SELECT resource_id FROM resources WHERE tenant <> '');
        UPDATE resources SET resource_id = tenant || '{KEY_SEP}' || resource_id
            WHERE tenant <> '';
        """,
    ),
    (
        # Deletes that stay: a folder file deleted by hand while it still exists is excluded
        # from its folder (tenant, the root its id is relative to, that id), so the next index,
        # sync, watch or reconcile of the folder leaves it out; the resource's ACL is kept for
        # the day the exclusion is lifted (hybridsag include).
        "0006_exclusions",
        """
        CREATE TABLE exclusions(
            tenant TEXT NOT NULL,
            source_root TEXT NOT NULL,
            path TEXT NOT NULL,
            acl TEXT NOT NULL DEFAULT '[]',
            excluded_at REAL NOT NULL,
            PRIMARY KEY (tenant, source_root, path)
        );
        """,
    ),
    (
        # The SHA-256 of a folder resource's source file as it was read (its bytes, before
        # decoding or conversion; NULL: API or JSONL ingest, or indexed before this), so that a
        # folder sync through the service (hybridsag.ingest.manifest) asks only for files whose bytes
        # it does not hold, and an audit can tell a changed file from a touched one.
        "0007_source_sha256",
        """
        ALTER TABLE resources ADD COLUMN source_sha256 TEXT;
        """,
    ),
    (
        # What fusion reads of a chunk's text, computed once when it is written
        # (hybridsag.fusion.facts.chunk_facts): the script of its prose ('' when none
        # dominates), whether it is only headings (0/1) and its word shingles (sorted uint32,
        # little-endian). NULL until computed: the chunks of an index written before this are
        # filled in by Store.backfill_chunk_facts when the store opens (meta key
        # chunk_facts_backfill says it is still to do); a search reads a NULL row's facts
        # from its text meanwhile.
        "0008_chunk_facts",
        """
        ALTER TABLE chunks ADD COLUMN script TEXT;
        ALTER TABLE chunks ADD COLUMN heading_only INTEGER;
        ALTER TABLE chunks ADD COLUMN shingles BLOB;
        INSERT INTO meta(key, value) VALUES ('chunk_facts_backfill', 'pending')
            ON CONFLICT(key) DO NOTHING;
        """,
    ),
)

#: The meta key that says chunks written before ``0008_chunk_facts`` may still lack their
#: facts (:meth:`Store.backfill_chunk_facts` removes it when none does).
BACKFILL_META = "chunk_facts_backfill"
#: Chunks whose facts one backfill transaction writes.
BACKFILL_BATCH = 1000

_MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS migrations(name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
)

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

_META_KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
#: Bounds on one filter: characters of a tenant, tag or id; tags or metadata keys; resource ids.
MAX_FILTER_CHARS = 1024
MAX_FILTER_TAGS = 256
MAX_FILTER_IDS = 10_000
#: SQLite's INTEGER range (a larger int cannot be bound as a parameter).
_INT64 = (-(2**63), 2**63 - 1)


def _check_filter_text(name: str, value: object, *, allow_empty: bool) -> None:
    """A filter string that can be bound and compared: a str of at most
    :data:`MAX_FILTER_CHARS` characters without control characters or lone surrogates (no
    stored tenant, tag or id holds them, and SQLite cannot bind a lone surrogate)."""
    if not isinstance(value, str):
        raise QueryError(f"{name} must be a string, got {type(value).__name__}: {value!r:.80}")
    if not allow_empty and not value:
        raise QueryError(f"{name} must not be empty, got {value!r}")
    if len(value) > MAX_FILTER_CHARS:
        raise QueryError(f"{name} is {len(value)} characters; at most {MAX_FILTER_CHARS}")
    _check_text_chars(name, value)


def _check_text_chars(name: str, value: str) -> None:
    for pos, ch in enumerate(value):
        kind = unicodedata.category(ch)
        if kind == "Cc":
            raise QueryError(f"{name} {value!r:.80} holds control character {ch!r} at {pos}")
        if kind == "Cs":
            raise QueryError(
                f"{name} {value!r:.80} holds a lone surrogate {ch!r} at {pos} (not valid UTF-8)"
            )


def _check_count(name: str, values: Sized, limit: int) -> None:
    if len(values) > limit:
        raise QueryError(f"{name} holds {len(values)} entries; at most {limit}")


def _check_meta_value(key: str, value: object) -> None:
    """A metadata filter value: a str (as filter text), a bool, an int in SQLite's range or a
    finite float."""
    where = f"filters.metadata[{key!r}]"
    if isinstance(value, str):
        if len(value) > MAX_FILTER_CHARS:
            raise QueryError(f"{where} is {len(value)} characters; at most {MAX_FILTER_CHARS}")
        _check_text_chars(where, value)
    elif isinstance(value, bool):
        return
    elif isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise QueryError(f"{where}={value!r:.40} is outside the 64-bit integer range")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise QueryError(f"{where}={value!r} must be a finite number")
    else:
        raise QueryError(f"{where}={value!r:.80}: only str, int, float, bool compare")


@dataclass(frozen=True, slots=True)
class ResourceRecord:
    """A stored resource: ``resource_id`` is its public id within ``tenant`` (:attr:`key` is
    what the store keys it by)."""

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
    #: SHA-256 of the source file's bytes as read (``None``: API or JSONL ingest)
    source_sha256: str | None = None

    @property
    def key(self) -> str:
        """The store's key of this resource (:func:`resource_key`)."""
        return resource_key(self.resource_id, self.tenant)

    @classmethod
    def from_row(cls, row: Any) -> ResourceRecord:
        return cls(
            resource_id=split_key(row["resource_id"])[1],
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
            source_sha256=row["source_sha256"],
        )


@dataclass(frozen=True, slots=True)
class Exclusion:
    """A folder file kept out of its folder's index: the resource ``path`` (its id, relative to
    ``source_root``) of ``tenant`` was deleted by hand while its file still existed. ``acl`` is
    the deleted resource's, given back when the exclusion is lifted."""

    tenant: str
    source_root: str
    path: str
    acl: tuple[str, ...]
    excluded_at: float

    @property
    def resource_id(self) -> str:
        return self.path

    @property
    def source_uri(self) -> str:
        """Where the file is (the root joined with the path)."""
        return f"{self.source_root.rstrip('/')}/{self.path}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "resource_id": self.path,
            "tenant": self.tenant,
            "status": "excluded",
            "source_root": self.source_root,
            "source_uri": self.source_uri,
            "acl": list(self.acl),
            "excluded_at": self.excluded_at,
        }

    @classmethod
    def from_row(cls, row: Any) -> Exclusion:
        return cls(
            tenant=row["tenant"],
            source_root=row["source_root"],
            path=row["path"],
            acl=tuple(json.loads(row["acl"])),
            excluded_at=row["excluded_at"],
        )


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """A stored chunk joined with its resource: everything a result shows (``resource_id``
    the public id within ``tenant``; :attr:`key` the store's key of the resource)."""

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

    @property
    def key(self) -> str:
        """The store's key of this chunk's resource (:func:`resource_key`)."""
        return resource_key(self.resource_id, self.tenant)

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> ChunkRecord:
        """A record from a row of ``_CHUNK_SELECT`` (whose ``resource_id`` is the key)."""
        values = list(row)
        values[1] = split_key(values[1])[1]
        return cls(*values)


@dataclass(frozen=True, slots=True)
class Filters:
    """Who may see what, applied inside every path's own query and again after fusion.

    Attributes:
        tenant: Only that tenant's resources; None: every tenant's.
        acl: The caller's tags; a resource with tags is visible only when it shares one, a
            resource without tags is public. None: no ACL check.
        metadata: Equality on top-level metadata keys.
        resource_ids: Only these public ids, of ``tenant`` when it is set, of any tenant
            otherwise; None: any id.
        statuses: ``("ready",)`` unless a caller also asks for ``disabled`` ones.

    Raises:
        QueryError: a value of the wrong type, too many tags, ids or keys, or text that cannot
            be stored (the message names it).
    """

    tenant: str | None = None
    acl: tuple[str, ...] | None = None
    metadata: Mapping[str, str | int | float | bool] = field(default_factory=dict)
    resource_ids: tuple[str, ...] | None = None
    statuses: tuple[str, ...] = ("ready",)

    def __post_init__(self) -> None:
        for name in ("acl", "resource_ids", "statuses"):
            value = getattr(self, name)
            if isinstance(value, list | set | frozenset):
                object.__setattr__(self, name, tuple(value))
            elif value is not None and not isinstance(value, tuple):
                # a str would be read as a sequence of characters, a dict as its keys
                raise QueryError(
                    f"filters.{name} must be a tuple of strings, got {type(value).__name__}: "
                    f"{value!r:.80}"
                )
        if self.tenant is not None:
            _check_filter_text("filters.tenant", self.tenant, allow_empty=True)
        if self.acl is not None:
            _check_count("filters.acl", self.acl, MAX_FILTER_TAGS)
            for tag in self.acl:
                _check_filter_text("filters.acl tag", tag, allow_empty=False)
        if not isinstance(self.metadata, Mapping):
            raise QueryError(
                f"filters.metadata must be a mapping, got {type(self.metadata).__name__}: "
                f"{self.metadata!r:.80}"
            )
        _check_count("filters.metadata", self.metadata, MAX_FILTER_TAGS)
        for key, value in self.metadata.items():
            if not isinstance(key, str) or not _META_KEY.match(key):
                raise QueryError(
                    f"filters.metadata key {key!r:.80} is not allowed (1 to 128 of letters, "
                    "digits, _ . -)"
                )
            _check_meta_value(key, value)
        if self.resource_ids is not None:
            _check_count("filters.resource_ids", self.resource_ids, MAX_FILTER_IDS)
            for rid in self.resource_ids:
                _check_filter_text("filters.resource_ids entry", rid, allow_empty=False)
        if not self.statuses:
            raise QueryError("filters.statuses must not be empty")
        for status in self.statuses:
            if not isinstance(status, str) or status not in SEARCHABLE_STATUSES:
                raise QueryError(
                    f"filters.statuses: {status!r:.80} is not searchable; valid: "
                    f"{SEARCHABLE_STATUSES}"
                )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | Filters | None) -> Filters:
        """Build from a plain mapping (API/CLI/HTTP). Unknown keys, a value of the wrong type
        (``filters=['tenant']``, ``{"acl": 5}``) and text that cannot be stored (lone
        surrogates, control characters) are a :class:`~hybridsag.errors.QueryError` naming it.

        Args:
            data: A mapping of the keys above (a str for ``acl``, ``resource_ids`` or
                ``statuses`` is one item); a ``Filters`` is returned as is; None: the default.
        """
        if data is None:
            return cls()
        if isinstance(data, Filters):
            return data
        if not isinstance(data, Mapping):
            raise QueryError(
                f"filters must be a mapping such as {{'tenant': 't1'}}, got "
                f"{type(data).__name__}: {data!r:.80}"
            )
        allowed = {"tenant", "acl", "metadata", "resource_ids", "statuses"}
        unknown = [k for k in data if k not in allowed]
        if unknown:
            names = sorted(repr(k)[:80] for k in unknown)
            raise QueryError(f"unknown filter [{', '.join(names)}]; valid: {sorted(allowed)}")
        kwargs: dict[str, Any] = dict(data)
        for key in ("acl", "resource_ids", "statuses"):
            if key in kwargs and kwargs[key] is not None:
                if isinstance(kwargs[key], str):
                    kwargs[key] = (kwargs[key],)
                if not isinstance(kwargs[key], list | tuple | set | frozenset):
                    raise QueryError(
                        f"filters.{key} must be a list of strings, got "
                        f"{type(kwargs[key]).__name__}: {kwargs[key]!r:.80}"
                    )
                kwargs[key] = tuple(kwargs[key])
        if "statuses" in kwargs and kwargs["statuses"] is None:
            del kwargs["statuses"]
        if kwargs.get("metadata") is None:
            kwargs.pop("metadata", None)
        return cls(**kwargs)

    def sql(self, alias: str = "r", dialect: Backend | None = None) -> tuple[str, list[Any]]:
        """A WHERE fragment over the resources table aliased ``alias``, and its parameters, in
        the SQL of ``dialect`` (a store's :attr:`Store.backend`; default SQLite).

        Args:
            alias: The resources table's alias in the statement.
            dialect: The store's SQL dialect; None: SQLite.
        """
        d: Any = dialect if dialect is not None else SqliteBackend
        parts = [f"{alias}.status IN ({','.join('?' * len(self.statuses))})"]
        params: list[Any] = list(self.statuses)
        if self.tenant is not None:
            parts.append(f"{alias}.tenant = ?")
            params.append(self.tenant)
        if self.acl is not None:
            parts.append(f"({alias}.acl = '[]' OR {d.acl_any_sql(alias, len(self.acl))})")
            params.extend(self.acl)
        for key, value in sorted(self.metadata.items()):
            # the JSON type as well as the value, so that true never equals 1, nor the string
            # '["x"]' a stored list: the same test as :meth:`allows`.
            fragment, values = d.metadata_eq_sql(alias, key, value)
            parts.append(fragment)
            params.extend(values)
        if self.resource_ids is not None:
            marks = placeholders(len(self.resource_ids))
            if self.tenant is not None:  # the keys of that tenant's ids: the unique index
                parts.append(f"{alias}.resource_id IN ({marks})")
                params.extend(resource_key(rid, self.tenant) for rid in self.resource_ids)
            else:  # those ids in any tenant
                parts.append(f"{public_id_sql(alias)} IN ({marks})")
                params.extend(self.resource_ids)
        return " AND ".join(parts), params

    def allows(self, record: ResourceRecord) -> bool:
        """The same test as :meth:`sql`, in Python (the post-fusion check).

        Args:
            record: The resource to test.
        """
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


def facts_columns(facts: ChunkFacts) -> tuple[str, int, bytes]:
    """The ``chunks`` columns ``script, heading_only, shingles`` of ``facts`` (the script ``''``
    when none dominates)."""
    return facts.script or "", int(facts.heading_only), encode_shingles(facts.shingles)


def _facts(script: str | None, heading_only: int | None, blob: bytes | None) -> ChunkFacts | None:
    """:func:`facts_columns` undone; ``None`` for a row whose facts are not computed yet."""
    if blob is None or script is None or heading_only is None:
        return None
    return ChunkFacts(script or None, decode_shingles(bytes(blob)), bool(heading_only))


def placeholders(n: int) -> str:
    """``?,?,..`` for ``n`` parameters of an ``IN (..)`` list (``NULL`` for none, which matches
    nothing)."""
    return ",".join("?" * n) or "NULL"


def is_postgres_url(location: object) -> bool:
    """Whether ``location`` names a PostgreSQL store (``postgresql://`` or ``postgres://``)."""
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


@runtime_checkable
class Backend(Protocol):
    """What one database supplies to :class:`Store`; the store's SQL is shared.

    Contract: ``connect()`` returns a new connection with ``execute(sql, params)`` (``?``
    placeholders; rows readable by index and by column name), ``executemany``, ``in_transaction``
    and ``close()``, in autocommit mode (transactions are opened by the ``begin_*`` methods);
    ``errors`` are the database's exception types; ``schema(sql)`` rewrites a migration script
    into the database's column types. Failures to connect raise
    :class:`~hybridsag.errors.StoreError`.
    """

    name: str
    errors: tuple[type[BaseException], ...]

    def connect(self) -> Any: ...

    def release(self, conn: Any) -> None: ...

    def begin_write(self, conn: Any) -> None: ...

    def begin_snapshot(self, conn: Any) -> None: ...

    def schema(self, sql: str) -> str: ...

    def acl_any_sql(self, alias: str, n: int) -> str: ...

    def metadata_eq_sql(self, alias: str, key: str, value: object) -> tuple[str, list[Any]]: ...

    def is_retriable(self, exc: BaseException) -> bool: ...

    def error(self, doing: str, exc: BaseException) -> StoreError: ...

    def bytes_on_disk(self, conn: Any) -> int: ...

    def close(self) -> None: ...


class SqliteBackend:
    """SQLite in WAL mode: one file, ``BEGIN IMMEDIATE`` write transactions (the default)."""

    errors: tuple[type[BaseException], ...] = (sqlite3.Error,)

    def __init__(self, path: Path, *, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.name = str(self.path)
        self._busy_timeout_s = busy_timeout_s
        if not check_store_file(self.path):
            _create_store_file(self.path, busy_timeout_s)

    def connect(self) -> sqlite3.Connection:
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
        try:
            # WAL is set once, when the file is made (_create_store_file); switching a
            # store of an older build here takes a lock that may be busy: then retried
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                _set_wal(conn, self._busy_timeout_s)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            conn.close()
            raise _store_error(self.path, "opening", exc) from exc
        return conn

    def error(self, doing: str, exc: BaseException) -> StoreError:
        return _store_error(self.path, doing, exc)  # type: ignore[arg-type]

    def release(self, conn: Any) -> None:
        with contextlib.suppress(sqlite3.Error):
            conn.close()

    def begin_write(self, conn: Any) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def begin_snapshot(self, conn: Any) -> None:
        conn.execute("BEGIN")  # WAL: the first read fixes the snapshot

    def schema(self, sql: str) -> str:
        return sql

    @staticmethod
    def acl_any_sql(alias: str, n: int) -> str:
        return (
            f"EXISTS (SELECT 1 FROM json_each({alias}.acl) "
            f"WHERE json_each.value IN ({placeholders(n)}))"
        )

    @staticmethod
    def metadata_eq_sql(alias: str, key: str, value: object) -> tuple[str, list[Any]]:
        path = f'$."{key}"'
        if isinstance(value, bool):
            return f"json_type({alias}.metadata, ?) = ?", [path, "true" if value else "false"]
        kinds = "('text')" if isinstance(value, str) else "('integer', 'real')"
        return (
            f"json_type({alias}.metadata, ?) IN {kinds} AND json_extract({alias}.metadata, ?) = ?",
            [path, path, value],
        )

    @staticmethod
    def is_retriable(exc: BaseException) -> bool:
        text = str(exc).lower()
        return "locked" in text or "busy" in text

    def bytes_on_disk(self, conn: Any) -> int:
        total = 0
        for suffix in ("", "-wal", "-shm"):
            p = Path(str(self.path) + suffix)
            if p.exists():
                total += p.stat().st_size
        return total

    def close(self) -> None:
        pass


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
            c.execute(self.backend.schema(_MIGRATIONS_TABLE))
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
        filter_sql, params = filters.sql("r", self.backend)
        rows = select_in(
            self.connection(),
            f"{_VIEW_SELECT} {filter_sql} AND",
            "c.chunk_id",
            chunk_ids,
            params=params,
        )
        return {
            cid: ChunkView(cid, row[1], row[5], row[3], row[4], row[2], row[6],
                           _facts(row[7], row[8], row[9]))
            for cid, row in rows.items()
        }  # fmt: skip

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


#: The first 16 bytes of every SQLite 3 database file.
SQLITE_MAGIC = b"SQLite format 3\x00"
_HEADER_BYTES = 100


def check_store_file(path: Path) -> bool:
    """Whether a store file exists at ``path``; if one does, that it looks whole.

    Cheap checks of the 100-byte SQLite header, no page is read: a zero-length file (a store
    is never empty once made), a file shorter than the header or without the SQLite magic, and
    a file shorter than the page count its header records (unless a write-ahead log that may
    hold the missing pages is beside it).

    Raises:
        CorruptStoreError: naming the file and what is wrong with it.
    """
    try:
        with open(path, "rb") as fh:
            header = fh.read(_HEADER_BYTES)
            size = os.fstat(fh.fileno()).st_size
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StoreError(f"cannot read the store {path}: {exc}") from exc
    advice = (
        "restore it from a backup, or move it away and index again to start a new store"
    )
    if size == 0:
        raise CorruptStoreError(
            f"the store {path} is an empty file (0 bytes), not a hybridsag store: {advice}"
        )
    if len(header) < _HEADER_BYTES or not header.startswith(SQLITE_MAGIC):
        raise CorruptStoreError(
            f"the store {path} is not an SQLite database ({size} bytes, no SQLite header): "
            f"{advice}"
        )
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    valid = header[24:28] == header[92:96]  # the in-header size is current
    wal = Path(f"{path}-wal")
    wal_size = wal.stat().st_size if wal.exists() else 0
    if valid and pages * page_size > size and wal_size == 0:
        raise CorruptStoreError(
            f"the store {path} is truncated: its header records {pages} pages of {page_size} "
            f"bytes ({pages * page_size} bytes) but the file holds {size}: {advice}"
        )
    return True


def _create_store_file(path: Path, busy_timeout_s: float) -> None:
    """Make a new store file at ``path``: built under a temporary name (WAL mode set, the
    migrations table made, so its header is whole) and hard-linked into place. When another
    process linked first, its file is used and this one dropped."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.new")
    try:
        conn = sqlite3.connect(tmp, timeout=busy_timeout_s, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(_MIGRATIONS_TABLE)
        finally:
            conn.close()  # the last connection checkpoints and removes tmp's -wal and -shm
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process made the store first
        except OSError:  # a filesystem without hard links: no other opener to race with
            os.replace(tmp, path)
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"cannot create the store {path}: {exc}") from exc
    finally:
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            with contextlib.suppress(OSError):
                leftover.unlink()


def _set_wal(conn: sqlite3.Connection, busy_timeout_s: float) -> None:
    """Switch a store of an older build to WAL; SQLite does not wait on a busy lock for
    this, so it is retried until ``busy_timeout_s``."""
    deadline = time.monotonic() + busy_timeout_s
    delay = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


def _store_error(path: Path, doing: str, exc: sqlite3.Error) -> StoreError:
    """A :class:`StoreError` for ``exc``: :class:`CorruptStoreError` when SQLite found the file
    damaged or not a database, a retriable one when it was busy or locked."""
    name = getattr(exc, "sqlite_errorname", "")
    if name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or (
        type(exc) is sqlite3.DatabaseError and "malformed" in str(exc)
    ):
        return CorruptStoreError(
            f"the store {path} is damaged ({exc}): restore it from a backup, or move it away "
            "and index again to start a new store"
        )
    busy = name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(exc)
    return StoreError(f"{doing} the store {path} failed: {exc}", retriable=busy)


def select_in(
    conn: Any,
    select: str,
    column: str,
    values: Iterable[Any],
    *,
    many: bool = False,
    batch: int = 500,
    params: Sequence[object] = (),
) -> dict[Any, Any]:
    """Rows of ``select`` (a statement ending in its FROM/JOIN/WHERE part, with no ``WHERE``
    or with a ``WHERE ... AND`` left open) whose ``column`` is one of ``values``, keyed by the
    row's first column; with ``many`` each key maps to a list of rows. Values go in batches of
    ``batch`` parameters (SQLite's limit on bound parameters); ``params`` are bound before them
    (those of the conditions ``select`` already has)."""
    out: dict[Any, Any] = {}
    ids = list(dict.fromkeys(values))
    joiner = " " if select.rstrip().upper().endswith(("WHERE", "AND")) else " WHERE "
    for start in range(0, len(ids), batch):
        part = ids[start : start + batch]
        sql = f"{select}{joiner}{column} IN ({','.join('?' * len(part))})"
        for row in conn.execute(sql, [*params, *part]):
            if many:
                out.setdefault(row[0], []).append(row)
            else:
                out[row[0]] = row
    return out


def _split_sql(script: str) -> list[str]:
    """Split a migration script on ``;`` at line ends (no semicolons inside our statements)."""
    return [s.strip() for s in script.split(";\n") if s.strip()]
