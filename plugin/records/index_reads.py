"""The reads a lexical index makes of the record tables, offered by the records.

A lexical engine (FTS5 and PostgreSQL's rows in the store, Milvus full-text search, tantivy)
ranks in its own tables and checks what it ranked against ``chunks`` and ``resources``: a hit is
shown only when its chunk is current and its resource passes the caller's filters. Every
statement on those two tables that an engine needs is here, behind :class:`IndexReads`, so the
engines hold no SQL on the record tables (``tests/unit/test_layering.py`` checks it) and a
change to the records' columns is made in one package.

What an engine hands in is its own: a *ranking* (a subquery over its tables giving rows
``(q, id, s)`` or ``(id, s)``: query position, ``chunks.id`` or ``resources.id``, score, lower is
better), a condition over the chunk row ``c`` naming its table, or the name of its table keyed by
the record's ``id``. The statement that joins them is built here by a pure function
(:func:`ranked_chunks_sql`, :func:`ranked_titles_sql`, :func:`best_chunks_sql`) that tests
assert on. Each read is one statement, as the engines' own SQL was (a list of row ids: one
statement on SQLite, one per 500 ids on PostgreSQL).

Search reads use the calling thread's store connection (inside the caller's
:meth:`~hybridsag.records.store.Store.snapshot` when it holds one); write-path and audit reads
take ``conn``, the connection of the caller's write transaction. Errors are the store's
(``Store.errors``): the engine that asked names what failed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, NamedTuple

from hybridsag.records.dialect import placeholders, select_in
from hybridsag.records.store import Store

__all__ = [
    "ChunkDoc",
    "ChunkOwner",
    "ChunkRef",
    "ChunkState",
    "IndexReads",
    "RankedRow",
    "RankedTitle",
    "ResourceDoc",
    "TitleRef",
    "TitleState",
    "best_chunks_sql",
    "ranked_chunks_sql",
    "ranked_titles_sql",
]

#: the chunk row's current version: its resource row at that version
_CURRENT = "r.resource_id = c.resource_id AND r.version = c.version"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ChunkRef(NamedTuple):
    """A current chunk: its row (``chunks.id``), chunk id and resource key."""

    rowid: int
    chunk_id: str
    resource_key: str


class RankedRow(NamedTuple):
    """One ranked row of :meth:`IndexReads.ranked_chunks`: the ranking's query position, row and
    score, the chunk (None where no chunk row has that id any more) and ``visible``, truthy
    (1 or True) when the chunk is current and its resource passes the filters."""

    query: int
    rowid: int
    score: float
    chunk_id: str | None
    resource_key: str | None
    visible: int


class RankedTitle(NamedTuple):
    """A resource whose title ranked: its key and the ranking's score (lower is better)."""

    resource_key: str
    score: float


class TitleRef(NamedTuple):
    """A resource row a filter lets through: its row (``resources.id``), key and version."""

    rowid: int
    resource_key: str
    version: int


class ChunkState(NamedTuple):
    """What the audit compares an index row with: the chunk id at this row, its resource's
    status (None: no resource row has its key) and whether the engine's own table named in the
    read keeps a row of it (True when none was named)."""

    chunk_id: str
    status: str | None
    kept: bool


class TitleState(NamedTuple):
    """A resource row's version and status, and whether the engine's own table named in the
    read keeps a row of it (True when none was named)."""

    version: int
    status: str
    kept: bool


class ChunkOwner(NamedTuple):
    """A chunk row and its resource's tenant (None: no resource row has its key)."""

    rowid: int
    chunk_id: str
    resource_key: str
    tenant: str | None


class ChunkDoc(NamedTuple):
    """A chunk row with what a document of it holds, from its resource row."""

    rowid: int
    chunk_id: str
    resource_key: str
    heading_path: str
    text: str
    title: str
    tenant: str
    acl: str
    status: str


class ResourceDoc(NamedTuple):
    """A resource row with what a document of its title holds."""

    rowid: int
    resource_key: str
    version: int
    title: str
    tenant: str
    acl: str
    status: str


def ranked_chunks_sql(ranking: str, filter_sql: str) -> str:
    """Each row of ``ranking`` (rows ``(q, id, s)``, ``id`` a ``chunks.id``) with its chunk and
    whether it is visible: rows ``(q, id, s, chunk_id, resource key, visible)``, every ranked
    row, visible or not, so the caller knows whether a ranking ended before its depth.
    ``filter_sql`` is a condition over the resource ``r``. Parameters: those of ``filter_sql``,
    then those of ``ranking``."""
    # the chunk by key for each ranked row, its resource in a correlated test: the planner
    # never starts from the resources a filter selects (all of them, for a tenant's filter)
    return f"""
        SELECT top.q, top.id, top.s, c.chunk_id, c.resource_id, EXISTS(
            SELECT 1 FROM resources r
            WHERE {_CURRENT} AND {filter_sql})
        FROM ({ranking}) AS top LEFT JOIN chunks c ON c.id = top.id"""


def ranked_titles_sql(ranking: str, filter_sql: str) -> str:
    """The resources of ``ranking`` (rows ``(id, s)``, ``id`` a ``resources.id``) that
    ``filter_sql`` (over ``r``) lets through: rows ``(resource key, s)``, best (lowest) first,
    then by row. Parameters: those of ``ranking``, of ``filter_sql``, then the limit."""
    return f"""
        SELECT r.resource_id, top.s
        FROM ({ranking}) AS top JOIN resources r ON r.id = top.id
        WHERE {filter_sql}
        ORDER BY top.s, r.id LIMIT ?"""


def best_chunks_sql(ranking: Callable[[str], str], n_resources: int) -> str:
    """The current chunks that ``ranking(rows)`` ranks (rows ``(id, s)``, ``id`` a
    ``chunks.id``), where ``rows`` is the subquery of the chunk rows of ``n_resources``
    resources, for the ranking to restrict its own rows to: rows ``(resource key, chunk_id)``,
    best first, then by chunk row. Parameters: those of the ranking, with the resource keys
    as the last ones (``rows`` stands after its other placeholders)."""
    rows = f"SELECT id FROM chunks WHERE resource_id IN ({placeholders(n_resources)})"
    return f"""
        SELECT c.resource_id, c.chunk_id
        FROM ({ranking(rows)}) AS top JOIN chunks c ON c.id = top.id
        JOIN resources r ON {_CURRENT}
        ORDER BY top.s, c.id"""


def _table(name: str) -> str:
    """``name`` when it is a plain SQL identifier (an engine's table), else ValueError."""
    if not _IDENTIFIER.fullmatch(name):
        raise ValueError(f"not a table name: {name!r}")
    return name


class IndexReads:
    """The reads of ``chunks`` and ``resources`` a lexical index makes (see the module
    docstring). Stateless apart from the store; cheap to make. Example::

        reads = IndexReads(store)
        shown = reads.visible_chunks([12, 40], "r.status = ?", ["ready"])  # {12: ChunkRef(..)}
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    # -- a search's reads -------------------------------------------------------------------------

    def ranked_chunks(
        self,
        ranking: str,
        ranking_params: Sequence[object],
        filter_sql: str,
        filter_params: Sequence[object],
    ) -> list[RankedRow]:
        """The rows of :func:`ranked_chunks_sql`, in the statement's order (none given)."""
        rows = self.store.connection().execute(
            ranked_chunks_sql(ranking, filter_sql), [*filter_params, *ranking_params]
        )
        return list(map(RankedRow._make, rows))

    def ranked_titles(
        self,
        ranking: str,
        ranking_params: Sequence[object],
        filter_sql: str,
        filter_params: Sequence[object],
        limit: int,
    ) -> list[RankedTitle]:
        """The rows of :func:`ranked_titles_sql`, at most ``limit``, best first."""
        rows = self.store.connection().execute(
            ranked_titles_sql(ranking, filter_sql), [*ranking_params, *filter_params, limit]
        )
        return list(map(RankedTitle._make, rows))

    def best_chunks(
        self,
        ranking: Callable[[str], str],
        ranking_params: Sequence[object],
        resource_keys: Sequence[str],
    ) -> list[tuple[str, str]]:
        """``(resource key, chunk_id)`` rows of :func:`best_chunks_sql` for these resources,
        best first."""
        sql = best_chunks_sql(ranking, len(resource_keys))
        return [
            (str(key), str(chunk_id))
            for key, chunk_id in self.store.connection().execute(
                sql, [*ranking_params, *resource_keys]
            )
        ]

    def visible_chunks(
        self,
        rowids: Iterable[int],
        filter_sql: str | None = None,
        params: Sequence[object] = (),
        *,
        condition: str = "",
        condition_params: Sequence[object] = (),
    ) -> dict[int, ChunkRef]:
        """The current chunks among ``rowids`` (``chunks.id``) whose resource passes
        ``filter_sql`` (over ``r``; None: any resource) and that meet ``condition`` (over the
        chunk row ``c``, an engine's own table named in it; its parameters follow), keyed by
        row. Each chunk is looked up by key and its resource after it (SQLite: ``json_each``
        and ``CROSS JOIN``, one statement), never the resources a filter selects first."""
        ids = list(dict.fromkeys(int(r) for r in rowids))
        if not ids:
            return {}
        where = " AND ".join(w for w in (filter_sql, condition) if w)
        conn = self.store.connection()
        if self.store.is_postgres:
            select = f"SELECT c.id, c.chunk_id, c.resource_id FROM chunks c JOIN resources r ON {_CURRENT}"
            found = select_in(
                conn, f"{select} WHERE {where} AND" if where else select, "c.id", ids,
                params=[*params, *condition_params],
            )
            return {rowid: ChunkRef._make(row) for rowid, row in found.items()}
        rows = conn.execute(
            "SELECT c.id, c.chunk_id, c.resource_id FROM json_each(?) AS top "
            "CROSS JOIN chunks c ON c.id = top.value "
            f"CROSS JOIN resources r ON {_CURRENT}" + (f" WHERE {where}" if where else ""),
            [json.dumps(ids), *params, *condition_params],
        )
        return {row[0]: ChunkRef._make(row) for row in rows}

    def visible_titles(
        self, rowids: Iterable[int], filter_sql: str, params: Sequence[object]
    ) -> dict[int, TitleRef]:
        """The resource rows among ``rowids`` (``resources.id``) that ``filter_sql`` (over
        ``r``) lets through, keyed by row."""
        found = select_in(
            self.store.connection(),
            f"SELECT r.id, r.resource_id, r.version FROM resources r WHERE {filter_sql} AND",
            "r.id",
            rowids,
            params=params,
        )
        return {rowid: TitleRef._make(row) for rowid, row in found.items()}

    def count_chunks(self, filter_sql: str | None = None, params: Sequence[object] = ()) -> int:
        """Chunk rows in the store (``filter_sql`` None), or the current chunks whose resource
        passes ``filter_sql`` (over ``r``)."""
        if filter_sql is None:
            sql = "SELECT count(*) FROM chunks"
        else:
            sql = f"SELECT count(*) FROM chunks c JOIN resources r ON {_CURRENT} WHERE {filter_sql}"
        return int(self.store.connection().execute(sql, list(params)).fetchone()[0])

    def count_matching(
        self,
        table: str,
        id_column: str,
        matches: str,
        match: object,
        filter_sql: str,
        params: Sequence[object],
    ) -> int:
        """The current chunks, of resources ``filter_sql`` (over ``r``) lets through, whose row
        of the engine's ``table`` (keyed ``id_column`` = ``chunks.id``) meets ``matches`` (a
        condition with one parameter, ``match``)."""
        table, id_column = _table(table), _table(id_column)
        sql = (
            f"SELECT count(*) FROM {table} JOIN chunks c ON c.id = {table}.{id_column} "
            f"JOIN resources r ON {_CURRENT} WHERE {matches} AND {filter_sql}"
        )
        return int(self.store.connection().execute(sql, [match, *params]).fetchone()[0])

    def resources_stamp(self) -> tuple[int, float | None]:
        """``(resource rows, newest updated_at)``: it changes whenever a title may have."""
        n, newest = self.store.connection().execute(
            "SELECT count(*), max(updated_at) FROM resources"
        ).fetchone()
        return int(n), newest

    # -- the write path's and the audit's reads (in the caller's transaction) --------------------

    def chunk_rowids(self, conn: Any, resource_key: str) -> list[int]:
        """The chunk rows of the resource keyed ``resource_key`` (all versions)."""
        rows = conn.execute("SELECT id FROM chunks WHERE resource_id = ?", (resource_key,))
        return [int(r[0]) for r in rows]

    def resource_rowid(self, conn: Any, resource_key: str) -> int | None:
        """The row (``resources.id``) of the resource keyed ``resource_key``, or None."""
        row = conn.execute(
            "SELECT id FROM resources WHERE resource_id = ?", (resource_key,)
        ).fetchone()
        return None if row is None else int(row[0])

    def has_chunk_row(self, conn: Any, rowid: int) -> bool:
        """Whether a chunk row has the id ``rowid``."""
        return conn.execute("SELECT 1 FROM chunks WHERE id = ?", (rowid,)).fetchone() is not None

    def has_resource_row(self, conn: Any, rowid: int) -> bool:
        """Whether a resource row has the id ``rowid``."""
        row = conn.execute("SELECT 1 FROM resources WHERE id = ?", (rowid,)).fetchone()
        return row is not None

    def chunk_owners(self, conn: Any, rowids: Iterable[int]) -> dict[int, ChunkOwner]:
        """The chunk rows among ``rowids`` with their resource's tenant, keyed by row."""
        found = select_in(
            conn,
            "SELECT c.id, c.chunk_id, c.resource_id, r.tenant FROM chunks c "
            "LEFT JOIN resources r ON r.resource_id = c.resource_id WHERE",
            "c.id",
            rowids,
        )
        return {rowid: ChunkOwner._make(row) for rowid, row in found.items()}

    def chunk_docs(self, conn: Any, rowids: Iterable[int]) -> dict[int, ChunkDoc]:
        """The chunk rows among ``rowids`` that have a resource row, with its title, tenant,
        ACL and status, keyed by row."""
        found = select_in(
            conn,
            "SELECT c.id, c.chunk_id, c.resource_id, c.heading_path, c.text, r.title, r.tenant, "
            "r.acl, r.status FROM chunks c JOIN resources r ON r.resource_id = c.resource_id "
            "WHERE",
            "c.id",
            rowids,
        )
        return {rowid: ChunkDoc._make(row) for rowid, row in found.items()}

    def resource_docs(self, conn: Any, rowids: Iterable[int]) -> dict[int, ResourceDoc]:
        """The resource rows among ``rowids``, keyed by row."""
        found = select_in(
            conn,
            "SELECT id, resource_id, version, title, tenant, acl, status FROM resources",
            "id",
            rowids,
        )
        return {rowid: ResourceDoc._make(row) for rowid, row in found.items()}

    def chunk_states(
        self, conn: Any, rowids: Iterable[int], *, kept_in: str | None = None
    ) -> dict[int, ChunkState]:
        """The chunk rows among ``rowids``, keyed by row, with their resource's status and
        whether the engine's table ``kept_in`` (keyed ``id`` = ``chunks.id``) has a row of
        each."""
        kept = f"m.id IS NOT NULL FROM chunks c LEFT JOIN {_table(kept_in)} m ON m.id = c.id" \
            if kept_in else "1 FROM chunks c"
        found = select_in(
            conn,
            f"SELECT c.id, c.chunk_id, r.status, {kept} "
            "LEFT JOIN resources r ON r.resource_id = c.resource_id",
            "c.id",
            rowids,
        )
        return {
            rowid: ChunkState(row[1], row[2], bool(row[3])) for rowid, row in found.items()
        }

    def title_states(
        self, conn: Any, rowids: Iterable[int], *, kept_in: str | None = None
    ) -> dict[int, TitleState]:
        """The resource rows among ``rowids``, keyed by row, with whether the engine's table
        ``kept_in`` (keyed ``id`` = ``resources.id``) has a row of each."""
        kept = f"m.id IS NOT NULL FROM resources r LEFT JOIN {_table(kept_in)} m ON m.id = r.id" \
            if kept_in else "1 FROM resources r"
        found = select_in(conn, f"SELECT r.id, r.version, r.status, {kept}", "r.id", rowids)
        return {
            rowid: TitleState(int(row[1]), row[2], bool(row[3])) for rowid, row in found.items()
        }

    def orphan_rows(
        self, conn: Any, table: str, *, of: Literal["chunks", "resources"]
    ) -> set[int]:
        """The ``id`` of every row of the engine's ``table`` that no row of ``of`` has."""
        owner = {"chunks": "chunks", "resources": "resources"}[of]
        rows = conn.execute(
            f"SELECT m.id FROM {_table(table)} m LEFT JOIN {owner} o ON o.id = m.id "
            "WHERE o.id IS NULL"
        )
        return {int(r[0]) for r in rows}
