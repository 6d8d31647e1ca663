"""The ledger: the one owner of the record's state machine.

Every statement that writes a resource's state (``resources``, ``chunks``, ``chunk_vectors``,
``tombstones``, ``journal``), and every read the write path and the reconciler make of them, is
here, behind named operations that both call:

- :meth:`Ledger.claim`: each resource gets ``pending_version`` one above anything it ever had
  (its version, an earlier claim, its tombstone), a new one an ``indexing`` row, each a journal
  row ``claimed``;
- :meth:`Ledger.commit`: the chunks, vectors and title of the claims that still stand replace
  the old ones; the version moves to the claimed one; tombstones and journal rows go;
- :meth:`Ledger.release`: a claim undone (compensation, an abandoned claim), and
  :meth:`Ledger.release_stuck`, the reconciler's, which also removes the claim's other journal
  rows;
- :meth:`Ledger.tombstone` and :meth:`Ledger.purge`: a delete's first and last steps;
- :meth:`Ledger.set_status` (disable, enable), :meth:`Ledger.refresh_stat` (a touched file),
  :meth:`Ledger.store_vectors` (a backfill) and :meth:`Ledger.drop_orphan_chunk`.

The lexical index's rows follow in the same transaction, through its own operations
(:mod:`hybridsag.lexical.index` owns their SQL). The caller holds the write lock. The SQL is written
once, in the common part of SQLite's and PostgreSQL's dialects; what differs (how a write
transaction starts, types, errors) is the store's :class:`~hybridsag.records.store.Backend`.
:mod:`hybridsag.records.store` keeps the schema, its migrations, ``meta`` and the reads a search makes.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hybridsag.records.owners import owner_dead, pid_alive, this_owner
from hybridsag.fusion.types import ChunkFacts
from hybridsag.records.dialect import select_in
from hybridsag.records.keys import chunk_id_for
from hybridsag.records.rows import facts_columns
from hybridsag.records.store import Store

if TYPE_CHECKING:
    from hybridsag.documents import Chunk
    from hybridsag.documents import Document
    from hybridsag.lexical.contract import ChunkTokens, LexicalIndex

__all__ = ["Ledger", "LedgerState", "Staged", "claim_abandoned", "read_claim_detail"]


def _claim_detail(chunks: int) -> str:
    """A claim's journal ``detail``: its owner (this process) and how many chunks it writes."""
    return json.dumps({"owner": this_owner(), "chunks": chunks})


def read_claim_detail(detail: str | None) -> tuple[str | None, int | None]:
    """(owner, chunk count) of a claim's journal ``detail``; None for what a row lacks (one
    written before owners were recorded has neither)."""
    try:
        data = json.loads(detail) if detail else None
    except ValueError:
        return None, None
    if not isinstance(data, dict):
        return None, None
    owner, chunks = data.get("owner"), data.get("chunks")
    return (
        owner if isinstance(owner, str) else None,
        chunks if isinstance(chunks, int) and chunks >= 0 else None,
    )


def claim_abandoned(pid: int, detail: str | None) -> bool:
    """Whether the process that wrote a claim's journal row is gone from this host: judged by
    the owner id in ``detail`` (:func:`hybridsag.records.owners.owner_dead`, safe across pid reuse,
    reboots and hosts), or for a row without one by its ``pid`` alone."""
    owner, _chunks = read_claim_detail(detail)
    if owner is not None:
        return owner_dead(owner)
    return not pid_alive(pid)


@dataclass(frozen=True, slots=True)
class Staged:
    """A document chunked and tokenized (and embedded, when ``vectors`` is set): what a claim
    and a commit write."""

    doc: Document
    chunks: tuple[Chunk, ...]
    title_tokens: str
    title_norm: str
    chunk_tokens: tuple[ChunkTokens, ...]
    #: each chunk's facts (:func:`hybridsag.fusion.facts.chunk_facts`), in chunk order
    chunk_facts: tuple[ChunkFacts, ...]
    vectors: Any = None  # numpy array (n_chunks, dim) or None


@dataclass(frozen=True, slots=True)
class LedgerState:
    """Every row of the record's state, read in one snapshot (the reconcile plan's reads):
    ``resources`` by key, ``chunks`` in rowid order, ``tombstones`` (key -> version) and
    ``journal`` rows in id order."""

    resources: dict[str, Mapping[str, Any]]
    chunks: list[Mapping[str, Any]]
    tombstones: dict[str, int]
    journal: list[Mapping[str, Any]]


class Ledger:
    """The record's state machine over ``store``, keeping ``lexical``'s rows in step.

    ``step`` is called with a step name and a key at each step (a test hook: it may raise, or
    kill the process, to prove a crash there is recoverable). Example:
    ``Ledger(store, lexical).set_status("notes", "disabled")``.
    """

    def __init__(
        self,
        store: Store,
        lexical: LexicalIndex,
        *,
        step: Callable[[str, str], None] | None = None,
    ) -> None:
        self.store = store
        self.lexical = lexical
        self._step = step if step is not None else (lambda _step, _key: None)

    # -- reads of the write path and the reconciler ----------------------------------------------

    @staticmethod
    def state(conn: Any) -> LedgerState:
        """Every resource, chunk, tombstone and journal row (``conn``: a snapshot)."""
        resources = {
            r["resource_id"]: r
            for r in conn.execute(
                "SELECT id, resource_id, status, version, pending_version, updated_at "
                "FROM resources"
            )
        }
        chunks = list(
            conn.execute("SELECT id, chunk_id, resource_id, version FROM chunks ORDER BY id")
        )
        tombstones = {
            r[0]: int(r[1]) for r in conn.execute("SELECT resource_id, version FROM tombstones")
        }
        journal = list(
            conn.execute(
                "SELECT id, op, resource_id, version, step, pid, started_at, updated_at, detail "
                "FROM journal ORDER BY id"
            )
        )
        return LedgerState(resources, chunks, tombstones, journal)

    @staticmethod
    def resource_states(conn: Any, keys: Iterable[str]) -> dict[str, Any]:
        """``resource_id, id, status, version, pending_version, title`` of these keys, by key."""
        return select_in(
            conn,
            "SELECT resource_id, id, status, version, pending_version, title FROM resources",
            "resource_id",
            keys,
        )

    @staticmethod
    def chunk_states(conn: Any, chunk_ids: Iterable[str]) -> dict[str, Any]:
        """``chunk_id, id, resource_id, version`` of these chunk ids, by chunk id."""
        return select_in(
            conn, "SELECT chunk_id, id, resource_id, version FROM chunks", "chunk_id", chunk_ids
        )

    def ingest_claims(self, keys: Sequence[str] | None = None) -> list[Any]:
        """The journal rows of ingest claims (``resource_id, id, version, pid, detail``) of
        ``keys``, or every one, in journal order."""
        conn = self.store.connection()
        select = "SELECT resource_id, id, version, pid, detail FROM journal WHERE op = 'ingest'"
        if keys is None:
            return list(conn.execute(select + " ORDER BY id"))
        found = select_in(conn, select + " AND", "resource_id", keys, many=True)
        return sorted((r for rs in found.values() for r in rs), key=lambda r: r["id"])

    def current_chunks(
        self, keys: Sequence[str] | None = None, *, after: int = 0, limit: int | None = None
    ) -> list[Any]:
        """The chunks of the current version of ready and disabled resources (of ``keys``),
        with their resource's ``title, tenant, acl`` and the chunk's row id ``id``, in row id
        order (what a backfill embeds): those whose row id is above ``after``, at most
        ``limit`` of them (None: all), so that a caller can read them a page at a time."""
        sql = """SELECT c.id, c.chunk_id, c.resource_id, c.version, c.heading_path, c.text,
                        r.title, r.tenant, r.acl
                 FROM chunks c JOIN resources r
                   ON r.resource_id = c.resource_id AND r.version = c.version
                 WHERE r.status IN ('ready', 'disabled') AND c.id > ?"""
        params: list[Any] = [after]
        if keys is not None:
            sql += f" AND c.resource_id IN ({','.join('?' * len(keys))})"
            params += list(keys)
        sql += " ORDER BY c.id"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return self.store.connection().execute(sql, params).fetchall()

    @staticmethod
    def live_chunk_text(conn: Any, rowid: int) -> Any:
        """``heading_path, text, title`` of chunk row ``rowid`` when it belongs to its
        resource's current version (not being deleted), else None."""
        return conn.execute(
            """SELECT c.heading_path, c.text, r.title FROM chunks c
               JOIN resources r ON r.resource_id = c.resource_id
                 AND r.version = c.version AND r.status != 'deleting'
               WHERE c.id = ?""",
            (rowid,),
        ).fetchone()

    @staticmethod
    def committed_title(conn: Any, rowid: int) -> str | None:
        """The title of resource row ``rowid`` when it was committed and is not being deleted."""
        row = conn.execute(
            "SELECT title FROM resources r WHERE id = ? AND version > 0 AND status != 'deleting'",
            (rowid,),
        ).fetchone()
        return None if row is None else row["title"]

    # -- ingest: claim, commit, release ---------------------------------------------------------

    def refresh_stat(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Record the stat and source hash of unchanged resources: ``rows`` of ``(mtime_ns,
        size, source_sha256, key, version)``, each written only while the resource is still at
        ``version`` with no claim."""
        with self.store.atomic() as conn:
            conn.executemany(
                "UPDATE resources SET source_mtime_ns = ?, source_size = ?, source_sha256 = ? "
                "WHERE resource_id = ? AND version = ? AND pending_version IS NULL",
                rows,
            )

    def claim(self, staged: Sequence[Staged]) -> dict[str, int]:
        """Claim a version for each of ``staged`` (one transaction); each claim's journal row
        records its owner (this process) and chunk count (:func:`read_claim_detail` reads them).
        Returns key -> version."""
        now = time.time()
        pid = os.getpid()
        keys = [s.doc.key for s in staged]
        claims: dict[str, int] = {}
        with self.store.atomic() as conn:
            rows = select_in(
                conn, "SELECT resource_id, version, pending_version FROM resources",
                "resource_id", keys,
            )
            tombs = select_in(
                conn, "SELECT resource_id, version FROM tombstones", "resource_id", keys
            )
            new_rows, bumps, journal = [], [], []
            for s in staged:
                detail = _claim_detail(len(s.chunks))
                d, key = s.doc, s.doc.key
                self._step("claim", key)
                row, tomb = rows.get(key), tombs.get(key)
                version = 1 + max(
                    row["version"] if row else 0,
                    (row["pending_version"] or 0) if row else 0,
                    tomb["version"] if tomb else 0,
                )
                if row is None:
                    new_rows.append(
                        (key, d.title, s.title_norm, d.source_uri, d.source_root, d.tenant,
                         d.acl_json, d.metadata_json, version, now, now)
                    )
                else:
                    bumps.append((version, now, key))
                journal.append((key, version, pid, now, now, detail))
                claims[key] = version
            conn.executemany(
                """INSERT INTO resources(resource_id, title, title_norm, source_uri,
                       source_root, content_sha256, tenant, acl, metadata, status, version,
                       pending_version, created_at, updated_at)
                   VALUES (?, ?, ?, ?, ?, '', ?, ?, ?, 'indexing', 0, ?, ?, ?)""",
                new_rows,
            )
            conn.executemany(
                "UPDATE resources SET pending_version = ?, updated_at = ? WHERE resource_id = ?",
                bumps,
            )
            conn.executemany(
                "INSERT INTO journal(op, resource_id, version, step, pid, started_at, updated_at,"
                " detail) VALUES ('ingest', ?, ?, 'claimed', ?, ?, ?, ?)",
                journal,
            )
        return claims

    def commit(
        self, staged: Sequence[Staged], claims: Mapping[str, int]
    ) -> tuple[set[str], set[str], list[str]]:
        """Commit the claims of ``staged`` that still stand (one transaction): their old chunks
        and lexical rows are replaced, the version moves to the claimed one, status ``ready``
        (``disabled`` stays), tombstone and journal row go. Returns (keys committed, keys whose
        claim was lost, the chunk ids of the replaced versions)."""
        now = time.time()
        lost: set[str] = set()
        with self.store.atomic() as conn:
            rows = select_in(
                conn,
                "SELECT resource_id, id, pending_version, status, version FROM resources",
                "resource_id",
                [s.doc.key for s in staged],
            )
            keep: list[Staged] = []
            for s in staged:
                key = s.doc.key
                self._step("commit", key)
                row = rows.get(key)
                standing = row is not None and row["pending_version"] == claims[key]
                if not standing or row["status"] == "deleting":
                    lost.add(key)
                else:
                    keep.append(s)
            kept = [s.doc.key for s in keep]
            old = select_in(
                conn, "SELECT resource_id, id, chunk_id FROM chunks", "resource_id", kept, many=True
            )
            old_ids = [r["chunk_id"] for rs in old.values() for r in rs]
            self.lexical.remove_chunks(conn, (r["id"] for rs in old.values() for r in rs))
            conn.executemany("DELETE FROM chunks WHERE resource_id = ?", [(r,) for r in old])
            conn.executemany(
                """UPDATE resources SET title = ?, title_norm = ?, source_uri = ?,
                       source_root = ?, source_mtime_ns = ?, source_size = ?,
                       source_sha256 = ?, content_sha256 = ?, tenant = ?,
                       acl = ?, metadata = ?,
                       status = CASE status WHEN 'disabled' THEN 'disabled' ELSE 'ready' END,
                       version = ?, pending_version = NULL, updated_at = ?, error = NULL
                   WHERE resource_id = ?""",
                [
                    (
                        s.doc.title, s.title_norm, s.doc.source_uri, s.doc.source_root,
                        s.doc.source_mtime_ns, s.doc.source_size, s.doc.source_sha256,
                        s.doc.content_sha256, s.doc.tenant, s.doc.acl_json, s.doc.metadata_json,
                        claims[s.doc.key], now, s.doc.key,
                    )
                    for s in keep
                ],
            )
            row_of = {s.doc.key: rows[s.doc.key] for s in keep}
            # only a resource committed before has a title row to replace
            self.lexical.remove_titles(conn, (r["id"] for r in row_of.values() if r["version"]))
            self.lexical.add_titles(conn, ((row_of[s.doc.key]["id"], s.title_tokens) for s in keep))
            self._add_chunks(conn, keep, claims)
            tombs = select_in(conn, "SELECT resource_id FROM tombstones", "resource_id", kept)
            conn.executemany("DELETE FROM tombstones WHERE resource_id = ?", [(r,) for r in tombs])
            conn.executemany(
                "DELETE FROM journal WHERE resource_id = ? AND version = ? AND op = 'ingest'",
                [(s.doc.key, claims[s.doc.key]) for s in staged],
            )
        return set(kept), lost, old_ids

    def _add_chunks(self, conn: Any, keep: Sequence[Staged], claims: Mapping[str, int]) -> None:
        """The chunk rows (with their lexical rows and stored vectors) of the claimed versions."""
        chunk_rows = []
        fts_tokens: list[ChunkTokens] = []
        for s in keep:
            key, version = s.doc.key, claims[s.doc.key]
            for c, tokens, facts in zip(s.chunks, s.chunk_tokens, s.chunk_facts, strict=True):
                chunk_rows.append(
                    (
                        chunk_id_for(key, version, c.ordinal), key, version, c.ordinal,
                        c.heading_path, c.text, c.start_line, c.end_line, c.byte_start,
                        c.byte_end, hashlib.sha256(c.text.encode("utf-8")).hexdigest(),
                        *facts_columns(facts),
                    )
                )
                fts_tokens.append(tokens)
        if not chunk_rows:
            return
        first = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM chunks").fetchone()[0]
        conn.executemany(
            """INSERT INTO chunks(id, chunk_id, resource_id, version, ordinal,
                   heading_path, text, start_line, end_line, byte_start, byte_end,
                   content_sha256, script, heading_only, shingles)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            [(first + i, *row) for i, row in enumerate(chunk_rows)],
        )
        self.lexical.add_chunks(conn, ((first + i, t) for i, t in enumerate(fts_tokens)))
        vectors = (v for s in keep for v in _vectors_of(s))
        conn.executemany(
            _UPSERT_VECTOR.format(source="VALUES (?, ?)"),
            [(first + i, _blob(v)) for i, v in enumerate(vectors) if v is not None],
        )

    def release(
        self,
        conn: Any,
        key: str,
        version: int | None,
        *,
        drop_uncommitted: bool = True,
        drop_title: bool = False,
    ) -> tuple[int, int]:
        """Release claim ``version`` of ``key`` inside the caller's write transaction (the
        caller has removed the vectors the claim may have written): the pending version is
        cleared where it is still ``version``, the claim's journal row is removed, and with
        ``drop_uncommitted`` a resource row that was never committed (``indexing``, version 0)
        and holds no other claim is dropped (with ``drop_title`` also a title row under its
        id, which only a commit writes). ``version`` None releases nothing and only drops such
        a row. The one release: a batch undoing itself, an abandoned claim and the
        reconciler's stuck claims (:meth:`release_stuck`) all come here. Returns (claims
        released, rows dropped)."""
        released = dropped = 0
        if version is not None:
            cur = conn.execute(
                "UPDATE resources SET pending_version = NULL WHERE resource_id = ? "
                "AND pending_version = ?",
                (key, version),
            )
            released = max(cur.rowcount, 0)
            conn.execute(
                "DELETE FROM journal WHERE resource_id = ? AND version = ? AND op = 'ingest'",
                (key, version),
            )
        if drop_uncommitted:
            row = conn.execute(
                "SELECT id FROM resources WHERE resource_id = ? AND status = 'indexing' "
                "AND version = 0 AND pending_version IS NULL",
                (key,),
            ).fetchone()
            if row is not None:
                if drop_title:
                    self.lexical.remove_titles(conn, [row[0]])
                conn.execute("DELETE FROM resources WHERE id = ?", (row[0],))
                dropped = 1
        return released, dropped

    def release_claims(self, claims: Mapping[str, int]) -> None:
        """:meth:`release` each of ``claims`` (key -> version), in one transaction."""
        with self.store.atomic() as conn:
            for key, version in claims.items():
                self.release(conn, key, version)

    def release_stuck(
        self,
        key: str,
        version: int | None,
        journal_ids: Iterable[int],
        *,
        drop_uncommitted: bool,
    ) -> tuple[int, int, int]:
        """The reconciler's release of a stuck claim (one transaction): :meth:`release`, then
        the journal rows ``journal_ids`` go, except the row of a claim that stands now.
        Returns (claims released, rows dropped, journal rows deleted)."""
        with self.store.atomic() as conn:
            released, dropped = self.release(
                conn, key, version, drop_uncommitted=drop_uncommitted, drop_title=True
            )
            current = conn.execute(
                "SELECT pending_version FROM resources WHERE resource_id = ?", (key,)
            ).fetchone()
            standing = None if current is None else current[0]
            deleted = 0
            for jid in journal_ids:
                cur = conn.execute(
                    "DELETE FROM journal WHERE id = ? AND NOT (op = 'ingest' AND version = ?)",
                    (jid, -1 if standing is None else standing),
                )
                deleted += cur.rowcount
        return released, dropped, deleted

    def store_vectors(self, pairs: Iterable[tuple[str, Any]]) -> None:
        """Store the passage vectors of ``(chunk_id, vector)`` pairs beside their chunks."""
        with self.store.atomic() as conn:
            conn.executemany(
                _UPSERT_VECTOR.format(source="SELECT id, ? FROM chunks WHERE chunk_id = ?"),
                [(_blob(vector), chunk_id) for chunk_id, vector in pairs],
            )

    # -- delete, disable, enable ----------------------------------------------------------------

    @staticmethod
    def delete_target(conn: Any, key: str) -> Any:
        """``version, pending_version, source_uri, source_root, tenant, acl`` of ``key`` (what a
        delete needs), or None."""
        return conn.execute(
            "SELECT version, pending_version, source_uri, source_root, tenant, acl "
            "FROM resources WHERE resource_id = ?",
            (key,),
        ).fetchone()

    @staticmethod
    def tombstone(conn: Any, key: str, version: int, now: float) -> None:
        """A delete's first step, inside the caller's transaction: status ``deleting``, a
        tombstone at ``version`` and a journal row ``tombstoned``."""
        conn.execute(
            "UPDATE resources SET status = 'deleting', updated_at = ? WHERE resource_id = ?",
            (now, key),
        )
        conn.execute(
            "INSERT INTO tombstones(resource_id, version, deleted_at) VALUES (?, ?, ?) "
            "ON CONFLICT(resource_id) DO UPDATE SET version = excluded.version, "
            "deleted_at = excluded.deleted_at",
            (key, version, now),
        )
        conn.execute(
            "INSERT INTO journal(op, resource_id, version, step, pid, started_at, updated_at) "
            "VALUES ('delete', ?, ?, 'tombstoned', ?, ?, ?)",
            (key, version, os.getpid(), now, now),
        )

    def purge(self, key: str) -> None:
        """A delete's last step: the chunks, lexical rows, row and journal rows of the
        tombstoned resource ``key`` (the tombstone stays)."""
        with self.store.atomic() as conn:
            self._step("purge", key)
            self.lexical.remove_resource_chunks(conn, key)
            conn.execute("DELETE FROM chunks WHERE resource_id = ?", (key,))
            self.lexical.remove_resource_title(conn, key)
            conn.execute(
                "DELETE FROM resources WHERE resource_id = ? AND status = 'deleting'", (key,)
            )
            conn.execute("DELETE FROM journal WHERE resource_id = ?", (key,))

    def set_status(self, key: str, status: str, *, only_from: Sequence[str]) -> str | None:
        """Set the status of ``key`` to ``status`` when it is one of ``only_from`` (one
        transaction). Returns the status it had (None: no such resource); unchanged when
        that was not one of ``only_from``."""
        with self.store.atomic() as conn:
            row = conn.execute(
                "SELECT status FROM resources WHERE resource_id = ?", (key,)
            ).fetchone()
            if row is None or row[0] not in only_from:
                return None if row is None else str(row[0])
            conn.execute(
                "UPDATE resources SET status = ?, updated_at = ? WHERE resource_id = ?",
                (status, time.time(), key),
            )
            self.lexical.status_changed(conn, key)
            return str(row[0])

    # -- the reconciler's repairs -----------------------------------------------------------------

    def drop_orphan_chunk(self, conn: Any, rowid: int, chunk_id: str | None) -> int:
        """Delete chunk row ``rowid`` (and its lexical row) inside the caller's transaction when
        it is still an orphan: no longer of its resource's current version, or of a resource
        being deleted or gone. ``chunk_id``, when given, must still be the row's. Returns 1
        when it was deleted, else 0."""
        row = conn.execute(
            "SELECT chunk_id, resource_id, version FROM chunks WHERE id = ?", (rowid,)
        ).fetchone()
        if row is None or (chunk_id is not None and row["chunk_id"] != chunk_id):
            return 0
        r = conn.execute(
            "SELECT status, version FROM resources WHERE resource_id = ?", (row["resource_id"],)
        ).fetchone()
        if r is not None and r["status"] != "deleting" and r["version"] == row["version"]:
            return 0  # live again (cannot happen with forward-only versions; kept as a guard)
        self.lexical.remove_chunks(conn, [rowid])
        conn.execute("DELETE FROM chunks WHERE id = ?", (rowid,))
        return 1


#: A stored passage vector, written or replaced (``source``: its VALUES or SELECT).
_UPSERT_VECTOR = (
    "INSERT INTO chunk_vectors(id, vector) {source} "
    "ON CONFLICT(id) DO UPDATE SET vector = excluded.vector"
)


def _vectors_of(s: Staged) -> Iterator[Any]:
    """One vector (or None) per chunk of a staged document, in chunk order."""
    return iter(list(s.vectors) if s.vectors is not None else [None] * len(s.chunks))


def _blob(vector: Any) -> bytes:
    import numpy as np

    return np.asarray(vector, dtype=np.float32).tobytes()
