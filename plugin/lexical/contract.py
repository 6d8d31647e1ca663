"""The lexical index's contract: :class:`LexicalIndex` (what every lexical backend offers), the
types its methods take and return, and :class:`LexicalEngine`, the few statements that differ
between engines under the shared query module (:mod:`hybridsag.lexical.queries`).

The backends, one module each: FTS5 (:mod:`hybridsag.lexical.fts5`) and PostgreSQL's tsvector
rows (:mod:`hybridsag.lexical.postgres`), both in the store's own database
(:class:`~hybridsag.lexical.index.StoreLexicalIndex`); Milvus full-text search
(:mod:`hybridsag.lexical.milvus_fulltext`); tantivy (:mod:`hybridsag.lexical.tantivy_index`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from hybridsag.fusion.types import Hit
from hybridsag.records.filters import Filters
from hybridsag.lexical.tokenizer import Tokenizer

__all__ = [
    "ChunkTokens",
    "FilterScope",
    "LexicalEngine",
    "LexicalIndex",
    "LexicalQuery",
    "LexicalTables",
    "Ranked",
    "StoreStatements",
]

@dataclass(frozen=True, slots=True)
class ChunkTokens:
    """What one ``chunks_fts`` row holds: the space-joined tokens of the resource title, the
    heading path and the chunk text (built by
    :meth:`~hybridsag.lexical.queries.LexicalQueries.chunk_tokens`)."""

    title: str
    heading: str
    body: str


@dataclass(frozen=True, slots=True)
class LexicalQuery:
    """One query of :meth:`LexicalIndex.search_many`: quoted-OR ``terms``, every hit holding
    ``must`` (a term or a phrase) when it is given."""

    terms: tuple[str, ...]
    must: str | None = None


@dataclass(frozen=True, slots=True)
class Ranked:
    """One query's ranking as an engine returns it (:meth:`LexicalEngine.rank_chunks`): the
    ``rows`` ``(chunk_id, resource_id, score)`` the filters let through, best (lowest) score
    first, and ``complete``: the engine's own ranking ended before the depth asked for, so a
    deeper one would find no more rows (False when the engine cannot tell)."""

    rows: list[Any]
    complete: bool


@dataclass(frozen=True, slots=True)
class FilterScope:
    """What a query's ``filters`` let through, in the two forms an engine reads them: the
    :class:`~hybridsag.records.filters.Filters` themselves (for an engine that filters in its
    own language: a Milvus expression, a tantivy tenant term) and ``sql``, the fragment over the
    resources ``r`` they make, with its ``params`` (:meth:`of`). Built once a call by
    :class:`~hybridsag.lexical.queries.LexicalQueries` and handed to the engine.

    Example: ``FilterScope.of(Filters(tenant="t1"), store.backend).params`` -> ``("ready",
    "t1")``."""

    filters: Filters
    sql: str
    params: tuple[object, ...]

    @classmethod
    def of(cls, filters: Filters, dialect: Any) -> FilterScope:
        """``filters`` with their SQL in ``dialect`` (a store's ``Store.backend``), as
        :meth:`~hybridsag.records.filters.Filters.sql` writes it over the resources ``r``."""
        sql, params = filters.sql("r", dialect)
        return cls(filters, sql, tuple(params))


@runtime_checkable
class LexicalIndex(Protocol):
    """The lexical index: what the bm25, title and SAG2 paths read, what the write path and the
    reconciler write and audit, and how it describes and closes itself. Every backend (FTS5,
    PostgreSQL's tsvector rows, Milvus full-text search) implements all of it and runs the
    conformance suites (``tests/conformance/test_lexical_backends.py``,
    ``test_store_backends.py``).

    Reads: ``search`` returns at most ``limit`` hits of visible chunks (``filters`` applied in
    the query), rank 1 first, ``score`` higher-is-better, ``raw_score`` the engine's own number;
    ``query_terms`` never returns engine syntax (every term is quoted when searched);
    ``doc_freqs`` maps each known term to the number of chunks holding it.

    Writes take ``conn``, the connection of a write transaction the caller holds
    (``Store.atomic()``): the index's rows change in the same transaction as the chunk and
    resource rows they index (an engine outside the store writes there before the store commits,
    so a failure rolls the transaction back). ``chunk_tokens`` and ``title_tokens`` are pure:
    call them before taking the write lock.

    Audit (the reconciler): ``indexed_rowids`` is the snapshot of what is indexed, ``has_*``
    check one row, ``remove_orphan_*`` remove a row whose store row is gone.

    Every method raises :class:`~hybridsag.errors.LexicalError` when the engine fails.
    """

    tokenizer: Tokenizer

    # -- reads ----------------------------------------------------------------------------------

    def query_terms(self, query: str) -> list[str]:
        """The query's terms as the index tokenizer makes them (at most ``max_terms``), with
        the title-alias fix applied."""
        ...

    def search(
        self,
        terms: Sequence[str],
        *,
        limit: int,
        filters: Filters,
        must: str | None = None,
        path: str = "bm25",
    ) -> list[Hit]:
        """BM25 top ``limit`` for quoted-OR ``terms`` (all containing ``must`` when given), as
        hits of the path named ``path``."""
        ...

    def search_many(
        self,
        queries: Sequence[LexicalQuery],
        *,
        limit: int,
        filters: Filters,
        path: str = "bm25",
    ) -> list[list[Hit]]:
        """Several searches in one engine call, read from one state of the index: the hits
        :meth:`search` gives each query (``q.terms``, ``must=q.must``), in the order of
        ``queries``. What SAG2's expansion round asks (its next-hop queries together)."""
        ...

    def search_titles(
        self, terms: Sequence[str], *, limit: int, filters: Filters
    ) -> list[tuple[str, float]]:
        """``(resource key, score)`` of the resources whose title matches, best first (the
        score is FTS5's ``bm25()`` scale: lower is better)."""
        ...

    def best_chunks(self, resource_ids: Sequence[str], terms: Sequence[str]) -> dict[str, str]:
        """The best-matching chunk (current version) of each resource for ``terms``; resources
        with no matching chunk are absent."""
        ...

    def doc_freqs(self, terms: Sequence[str]) -> dict[str, int]:
        """Number of chunks holding each known term (all statuses), keyed by the term given."""
        ...

    def total_chunks(self) -> int:
        """Chunk rows in the index (the N of its IDF)."""
        ...

    def scoped_doc_freqs(
        self, terms: Sequence[str], filters: Filters
    ) -> tuple[dict[str, int], int]:
        """:meth:`doc_freqs` and :meth:`total_chunks` counted over the chunks ``filters`` lets
        through (current versions only)."""
        ...

    # -- writes (inside the caller's write transaction) -----------------------------------------

    def chunk_tokens(self, title: str, heading: str, body: str) -> ChunkTokens:
        """The tokens of one chunk's row (pure)."""
        ...

    def title_tokens(self, title: str) -> str:
        """The tokens of one resource's title row (pure)."""
        ...

    def add_chunks(self, conn: Any, rows: Iterable[tuple[int, ChunkTokens]]) -> None:
        """Index chunks: ``(chunks.id, tokens)`` each."""
        ...

    def remove_chunks(self, conn: Any, rowids: Iterable[int]) -> None:
        """Remove the rows of these ``chunks.id`` values (absent ones are ignored)."""
        ...

    def remove_resource_chunks(self, conn: Any, resource_id: str) -> None:
        """Remove the rows of every chunk row of the resource keyed ``resource_id`` (all
        versions)."""
        ...

    def add_titles(self, conn: Any, rows: Iterable[tuple[int, str]]) -> None:
        """Index titles: ``(resources.id, title tokens)`` each."""
        ...

    def remove_titles(self, conn: Any, rowids: Iterable[int]) -> None:
        """Remove the title rows of these ``resources.id`` values."""
        ...

    def remove_resource_title(self, conn: Any, resource_id: str) -> None:
        """Remove the title row of the resource keyed ``resource_id``."""
        ...

    def status_changed(self, conn: Any, resource_id: str) -> None:
        """The resource was disabled or enabled (an engine that filters on its own copy of the
        status writes it again; one that joins the store's rows has nothing to do)."""
        ...

    def flush(self) -> None:
        """Seal what a bulk ingest wrote (an engine whose write buffer searches more slowly
        than sealed segments); nothing to do elsewhere."""
        ...

    # -- audit (the reconciler) -----------------------------------------------------------------

    def indexed_rowids(self, conn: Any) -> tuple[set[int], set[int]]:
        """Every indexed ``(chunks.id set, resources.id set)``: a row of no store row is in it
        (an orphan), one the index holds wrongly is not (missing)."""
        ...

    def has_chunk(self, conn: Any, rowid: int) -> bool:
        """Whether chunk row ``rowid`` is indexed."""
        ...

    def has_title(self, conn: Any, rowid: int) -> bool:
        """Whether resource row ``rowid`` has its title row."""
        ...

    def remove_orphan_chunk(self, conn: Any, rowid: int) -> int:
        """Remove the row ``rowid`` if no chunk row has that id any more; returns 1 or 0."""
        ...

    def remove_orphan_title(self, conn: Any, rowid: int) -> int:
        """Remove the title row ``rowid`` if no resource has that id any more; returns 1 or 0."""
        ...

    # -- describe, close ------------------------------------------------------------------------

    def describe(self) -> str:
        """One line for ``doctor`` and ``/readyz``: the engine, where it is, its rows (an engine
        outside the store connects to say so)."""
        ...

    def close(self) -> None:
        """Release what the index holds apart from the store (which its owner closes); safe to
        call twice."""
        ...


@dataclass(frozen=True, slots=True)
class LexicalTables:
    """The store tables a lexical backend keeps its terms in, as the query skeleton reads them:
    ``chunks`` (one row per indexed chunk, keyed by ``id`` = ``chunks.id``), ``titles`` (one row
    per indexed title, keyed by ``id`` = ``resources.id``, its tokens in a ``title`` column) and
    ``matches``, the condition that a ``chunks`` row holds the term bound as ``?``."""

    chunks: str
    titles: str
    id: str
    matches: str


class LexicalEngine(Protocol):
    """The statements that differ between lexical backends;
    :class:`~hybridsag.lexical.queries.LexicalQueries` runs the rest of every query on them.
    Each raises the store's errors (``Store.errors``) or :class:`~hybridsag.errors.LexicalError`."""

    tables: LexicalTables

    def vocabulary(self, lexemes: list[str]) -> dict[str, int]:
        """How many chunk rows hold each of ``lexemes`` (folded; absent: none)."""
        ...

    def total_chunks(self) -> int:
        """Chunk rows in the index (the N of its IDF)."""
        ...

    def near_terms(self, prefix: str, shortest: int, longest: int) -> dict[str, int]:
        """The index's terms that start with ``prefix`` and have ``shortest`` to ``longest``
        characters, each with how many chunk rows hold it: the candidates of the spelling fix
        (:meth:`~hybridsag.lexical.queries.LexicalQueries.query_terms`). An engine that cannot
        list its terms in a range returns ``{}``, and its queries are not respelled."""
        ...

    def term_match(self, term: str) -> str:
        """The expression of one term, bound as ``?`` in ``tables.matches``."""
        ...

    def rank_chunks(
        self, queries: Sequence[LexicalQuery], scope: FilterScope, depth: int, limit: int
    ) -> list[Ranked]:
        """Each query's chunk ranking (quoted-OR ``terms``, all holding ``must`` when given; no
        query is empty): at most ``limit`` rows of its best ``depth`` that ``scope`` lets
        through (its ``sql`` a fragment over the resources ``r``; its ``filters`` for an engine
        that filters in its own language). An engine that can rank several queries in one call
        does; the others rank them one by one."""
        ...

    def title_rows(self, terms: Sequence[str], scope: FilterScope, limit: int) -> list[Any]:
        """``(resource key, score)`` rows of the titles matching ``terms`` that ``scope`` lets
        through, at most ``limit``, best (lowest) first."""
        ...

    def best_chunk_rows(self, resource_ids: Sequence[str], terms: Sequence[str]) -> list[Any]:
        """``(resource key, chunk_id)`` rows of these resources' current chunks matching
        ``terms``, best first."""
        ...


class StoreStatements(LexicalEngine, Protocol):
    """The statements of a lexical index whose rows live in the store's own database (FTS5 on
    SQLite, tsvector rows on PostgreSQL): the :class:`LexicalEngine` and how rows are added."""

    kind: str
    migrations: tuple[tuple[str, str], ...]

    def add_chunks(self, conn: Any, rows: Iterable[tuple[int, ChunkTokens]]) -> None: ...

    def add_titles(self, conn: Any, rows: Iterable[tuple[int, str]]) -> None: ...
