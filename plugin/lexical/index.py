"""The lexical index in the store's own database (:class:`StoreLexicalIndex`: FTS5 on SQLite,
tsvector rows on PostgreSQL).

The lexical side, one module per job:

- :mod:`hybridsag.lexical.contract`: the :class:`~hybridsag.lexical.contract.LexicalIndex`
  contract (reads, writes, the reconciler's audit, describe, close), its types and
  :class:`~hybridsag.lexical.contract.LexicalEngine`, the few statements that differ between
  engines;
- :mod:`hybridsag.lexical.queries`: the shared query module every engine runs under
  (:class:`~hybridsag.lexical.queries.LexicalQueries`: term analysis with the spelling and
  title-alias fixes, the refilling search, titles, best chunks;
  :func:`~hybridsag.lexical.queries.bind_reads`, which gives each backend those reads);
- one module per engine: FTS5 (:mod:`hybridsag.lexical.fts5`, the one owner of every FTS5
  statement) and PostgreSQL's tsvector rows (:mod:`hybridsag.lexical.postgres`), both under
  :class:`StoreLexicalIndex` here; Milvus full-text search
  (:mod:`hybridsag.lexical.milvus_fulltext`); tantivy (:mod:`hybridsag.lexical.tantivy_index`).

The names this module held before that split (:data:`MOVED`) still import from here for one
release, with a :class:`DeprecationWarning` naming their new home.

No backend is a parent of another: each holds the query skeleton and answers the statements
that differ. What a statement reads of the record tables (``chunks``, ``resources``) is the
records' (:class:`~hybridsag.records.index_reads.IndexReads`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

# the engines as modules: their names are not attributes of this one (see MOVED)
from hybridsag.lexical import fts5, postgres, queries
from hybridsag.lexical.queries import bind_reads
from hybridsag.lazy import moved_names
from hybridsag.lexical.tokenizer import Tokenizer
from hybridsag.records.index_reads import IndexReads
from hybridsag.records.filters import Filters
from hybridsag.records.store import Store
from hybridsag.settings import LexicalSettings

if TYPE_CHECKING:
    from hybridsag.lexical.contract import ChunkTokens, StoreStatements

__all__ = ["StoreLexicalIndex"]

#: The names this module held before the lexical side was split by job (issue 41), each with
#: the module that owns it now. Imported from here they still work for one release, with a
#: :class:`DeprecationWarning` that names the new home.
MOVED: dict[str, str] = {
    **dict.fromkeys(
        ("ChunkTokens", "LexicalEngine", "LexicalIndex", "LexicalQuery", "LexicalTables",
         "Ranked", "StoreStatements"),
        "hybridsag.lexical.contract",
    ),
    **dict.fromkeys(
        ("LexicalQueries", "build_match", "count_store_chunks", "fold_term", "near_terms_in",
         "quote_term"),
        "hybridsag.lexical.queries",
    ),
    **dict.fromkeys(
        ("FTS_MIGRATIONS", "Fts5Statements", "build_best_chunks_sql", "build_title_search_sql",
         "build_tops_sql"),
        "hybridsag.lexical.fts5",
    ),
    **dict.fromkeys(
        ("PG_LEXICAL_MIGRATIONS", "PostgresStatements", "build_pg_bm25_sql", "build_tsquery",
         "build_tsvector"),
        "hybridsag.lexical.postgres",
    ),
}


__getattr__ = moved_names(__name__, MOVED)


@dataclass(frozen=True, slots=True)
class _Rows:
    """One table of the index's rows (``table``, keyed by ``key`` = the id of a store row) and
    whether the store still has the row of an id (``stored(conn, id)``): the delete, audit and
    orphan statements, written once for the chunk rows and the title rows."""

    table: str
    key: str
    stored: Callable[[Any, int], bool]

    def delete(self, conn: Any, rowids: Iterable[int]) -> None:
        """Delete the rows of these ids (absent ones ignored)."""
        conn.executemany(f"DELETE FROM {self.table} WHERE {self.key} = ?", [(r,) for r in rowids])

    def has(self, conn: Any, rowid: int) -> bool:
        """Whether the table holds the row of ``rowid``."""
        sql = f"SELECT 1 FROM {self.table} WHERE {self.key} = ?"
        return conn.execute(sql, (rowid,)).fetchone() is not None

    def remove_orphan(self, conn: Any, rowid: int) -> int:
        """Delete the row of ``rowid`` unless the store has its row; 1 or 0."""
        if self.stored(conn, rowid):
            return 0
        cur = conn.execute(f"DELETE FROM {self.table} WHERE {self.key} = ?", (rowid,))
        return max(cur.rowcount, 0)


class StoreLexicalIndex:
    """:class:`~hybridsag.lexical.contract.LexicalIndex` in the store's own database: FTS5 on
    SQLite (:class:`~hybridsag.lexical.fts5.Fts5Statements`), tsvector rows on PostgreSQL
    (:class:`~hybridsag.lexical.postgres.PostgresStatements`), as the store's database is. It
    holds the query skeleton (:class:`~hybridsag.lexical.queries.LexicalQueries`, whose reads
    it answers through :func:`~hybridsag.lexical.queries.bind_reads`) and the engine's
    statements; the row statements below are written once for both.

    Write methods take ``conn``, the connection of a write transaction the caller holds
    (``Store.atomic()``), so the index's rows change in the same transaction as the chunk and
    resource rows they index.
    """

    def __init__(
        self, store: Store, tokenizer: Tokenizer, settings: LexicalSettings, *, max_terms: int = 80
    ) -> None:
        self.store = store
        self.tokenizer = tokenizer
        self.settings = settings
        engine: StoreStatements = (
            postgres.PostgresStatements(store, settings) if store.is_postgres
            else fts5.Fts5Statements(store, settings)
        )
        store.migrate(engine.migrations)
        self._engine = engine
        self._reads = IndexReads(store)
        t = engine.tables
        self._chunk_rows = _Rows(t.chunks, t.id, self._reads.has_chunk_row)
        self._title_rows = _Rows(t.titles, t.id, self._reads.has_resource_row)
        self._queries = queries.LexicalQueries(
            store, tokenizer, engine, max_terms=max_terms, spelling=settings.spelling
        )
        bind_reads(self, self._queries)

    # -- reads (the query skeleton's are bound by bind_reads) ----------------------------------

    def total_chunks(self) -> int:
        return self._engine.total_chunks()

    def scoped_doc_freqs(
        self, terms: Sequence[str], filters: Filters
    ) -> tuple[dict[str, int], int]:
        return self._queries.scoped_doc_freqs(terms, filters)

    # -- rows (inside the caller's write transaction) -------------------------------------------

    def add_chunks(self, conn: Any, rows: Iterable[tuple[int, ChunkTokens]]) -> None:
        self._engine.add_chunks(conn, rows)

    def add_titles(self, conn: Any, rows: Iterable[tuple[int, str]]) -> None:
        self._engine.add_titles(conn, rows)

    def remove_chunks(self, conn: Any, rowids: Iterable[int]) -> None:
        """Remove the rows of these ``chunks.id`` values (absent ones are ignored)."""
        self._chunk_rows.delete(conn, rowids)

    def remove_resource_chunks(self, conn: Any, resource_id: str) -> None:
        """Remove the rows of every chunk row of ``resource_id`` (all versions)."""
        self.remove_chunks(conn, self._reads.chunk_rowids(conn, resource_id))

    def remove_orphan_chunk(self, conn: Any, rowid: int) -> int:
        """Remove the row ``rowid`` if no chunk row has that id any more; returns 1 or 0."""
        return self._chunk_rows.remove_orphan(conn, rowid)

    def has_chunk(self, conn: Any, rowid: int) -> bool:
        """Whether chunk row ``rowid`` is indexed."""
        return self._chunk_rows.has(conn, rowid)

    def remove_titles(self, conn: Any, rowids: Iterable[int]) -> None:
        """Remove the title rows of these ``resources.id`` values."""
        self._title_rows.delete(conn, rowids)

    def remove_resource_title(self, conn: Any, resource_id: str) -> None:
        """Remove the title row of ``resource_id``."""
        rowid = self._reads.resource_rowid(conn, resource_id)
        if rowid is not None:
            self.remove_titles(conn, [rowid])

    def remove_orphan_title(self, conn: Any, rowid: int) -> int:
        """Remove the title row ``rowid`` if no resource has that id any more; returns 1 or 0."""
        return self._title_rows.remove_orphan(conn, rowid)

    def has_title(self, conn: Any, rowid: int) -> bool:
        """Whether resource row ``rowid`` has its title row."""
        return self._title_rows.has(conn, rowid)

    def describe(self) -> str:
        """See :meth:`~hybridsag.lexical.contract.LexicalIndex.describe`: ``FTS5 in the store,
        120 chunks``."""
        return f"{self._engine.kind} in the store, {self.total_chunks()} chunks"

    def close(self) -> None:
        """Release what the index holds apart from the store (nothing: the store is closed by
        its owner)."""

    def flush(self) -> None:
        """Seal what a bulk ingest wrote: nothing to do in the store (Milvus Lite has a write
        buffer that searches more slowly than sealed segments)."""

    def status_changed(self, conn: Any, resource_id: str) -> None:
        """A resource was disabled or enabled: nothing to do here, the status lives in the
        store's rows, which every search joins (an engine that filters on its own copy of the
        status writes it again)."""

    def indexed_rowids(self, conn: Any) -> tuple[set[int], set[int]]:
        """Every indexed ``(chunks.id set, resources.id set)`` (the reconciler's snapshot)."""
        t = self._engine.tables
        chunks = {r[0] for r in conn.execute(f"SELECT {t.id} FROM {t.chunks}")}
        titles = {r[0] for r in conn.execute(f"SELECT {t.id} FROM {t.titles}")}
        return chunks, titles
