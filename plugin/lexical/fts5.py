"""The FTS5 engine: the one owner of every FTS5 statement (:class:`Fts5Statements`, a
:class:`~hybridsag.lexical.contract.StoreStatements` under
:class:`~hybridsag.lexical.index.StoreLexicalIndex` when the store is SQLite).

Every statement that creates, reads or writes the FTS5 tables lives here: the write path, the
title path and the reconciler call the index's methods instead of writing SQL of their own, so
how a row is built, searched or deleted is written once. What a statement reads of the record
tables (``chunks``, ``resources``: is a ranked chunk current, does its resource pass the
filters) is the records' (:class:`~hybridsag.records.index_reads.IndexReads`): an engine hands
its ranking in as a subquery and the records join it, in the same one statement. The tables:

``chunks_fts(title, heading, body)``
    one row per chunk (rowid = ``chunks.id``): the resource title, the heading path and the
    chunk text, each as space-joined :class:`~hybridsag.lexical.tokenizer.Tokenizer` tokens;
``titles_fts(title)``
    one row per committed resource (rowid = ``resources.id``): the title's tokens;
``chunks_vocab``
    the ``fts5vocab`` view of ``chunks_fts`` (document frequencies).

Ranking is FTS5 ``bm25()`` with column weights title/heading/body from ``lexical`` settings. The
top of the FTS5 ranking is taken in a subquery before the resource join and refilled with a deeper
subquery when filters leave too few rows, unless the ranking ended before the depth it was asked
for (then nothing deeper exists). Several queries
(:meth:`~hybridsag.lexical.contract.LexicalIndex.search_many`: SAG2's next-hop look-ups) are
ranked in one statement, a ``UNION ALL`` of their rankings, inside one read transaction. Where
the query's terms hold many postings (``lexical.prune``), that top comes from
:mod:`hybridsag.lexical.fts5_topk` instead: the same rows and scores, with the common terms'
postings never walked; where they hold few (:data:`_PARTS_MAX_POSTINGS`), it is the sum of its
phrases' ``bm25()`` parts, each phrase read once per committed state of the table
(:mod:`hybridsag.lexical.fts5_parts`: the same scores bit for bit). The statements are built by
pure functions (:func:`build_tops_sql`,
:func:`build_title_search_sql`, :func:`build_best_chunks_sql`) that tests assert on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from hybridsag.lexical.contract import (
    ChunkTokens,
    FilterScope,
    LexicalQuery,
    LexicalTables,
    Ranked,
)
from hybridsag.lexical.fts5_parts import Fts5Parts, phrase_lexemes, phrases_of, rank_by_parts
from hybridsag.lexical.fts5_topk import Fts5Stats, Fts5TopK
from hybridsag.lexical.queries import build_match, near_terms_in, rankings
from hybridsag.lexical.tokenizer import FTS_TOKENIZE
from hybridsag.records.index_reads import (
    IndexReads,
    best_chunks_sql,
    ranked_chunks_sql,
    ranked_titles_sql,
)
from hybridsag.records.store import Store
from hybridsag.settings import LexicalSettings

__all__ = [
    "FTS_MIGRATIONS",
    "Fts5Statements",
    "build_best_chunks_sql",
    "build_title_search_sql",
    "build_tops_sql",
]

#: Named migrations of the FTS5 tables (recorded in the store's ``migrations`` table; ``IF NOT
#: EXISTS`` because stores made before the tables moved here created them in ``0001_initial``).
FTS_MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "fts5_0001_tables",
        f"""
        CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
            title, heading, body, tokenize="{FTS_TOKENIZE}");
        CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vocab USING fts5vocab(chunks_fts, 'row');
        CREATE VIRTUAL TABLE IF NOT EXISTS titles_fts USING fts5(title, tokenize="{FTS_TOKENIZE}");
        """,
    ),
)


def build_tops_sql(n_queries: int, filter_sql: str) -> str:
    """The FTS5 rankings of ``n_queries`` MATCH expressions in one statement: each query's best
    ``depth`` rows by ``bm25()``, as rows ``(query position, chunks.id, score, chunk_id,
    resource_id, visible)``, where ``visible`` is 1 when the chunk is current and its resource
    passes ``filter_sql`` (a fragment over ``r``). Every ranked row comes back, visible or not, so
    the caller knows whether a ranking ended before its depth. Parameters: the filter
    parameters, then per query in order the three bm25 weights, the MATCH expression and the
    depth."""
    return ranked_chunks_sql(_fts5_tops(n_queries), filter_sql)


def _fts5_tops(n_queries: int) -> str:
    """The ranking of :func:`build_tops_sql`: rows ``(q, id, s)`` of ``n_queries`` FTS5 tops.
    Parameters: per query the three bm25 weights, the MATCH expression and the depth."""
    one = (
        "SELECT {i} AS q, id, s FROM (SELECT rowid AS id, bm25(chunks_fts, ?, ?, ?) AS s "
        "FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY s LIMIT ?)"
    )
    return " UNION ALL ".join(one.format(i=i) for i in range(n_queries))


#: The FTS5 title ranking (rows ``(resources.id, bm25 score)``). Parameter: the MATCH expression.
_FTS5_TITLES = "SELECT rowid AS id, bm25(titles_fts) AS s FROM titles_fts WHERE titles_fts MATCH ?"


def build_title_search_sql(filter_sql: str) -> str:
    """The title search statement (:func:`~hybridsag.records.index_reads.ranked_titles_sql` of
    the FTS5 title ranking). Parameters: the MATCH expression, the filter parameters, the
    limit. Returns ``(resource_id, bm25 score)`` rows, best first."""
    return ranked_titles_sql(_FTS5_TITLES, filter_sql)


def _fts5_best(rows: str) -> str:
    """The FTS5 ranking of the chunk rows ``rows`` (a subquery) matching an expression:
    rows ``(id, s)``. Parameters: the three bm25 weights, the MATCH expression, those of
    ``rows``."""
    return (
        "SELECT rowid AS id, bm25(chunks_fts, ?, ?, ?) AS s FROM chunks_fts "
        f"WHERE chunks_fts MATCH ? AND rowid IN ({rows})"
    )


def build_best_chunks_sql(n_resources: int) -> str:
    """The best chunk of each of ``n_resources`` resources for a MATCH expression, at the
    resources' current versions (:func:`~hybridsag.records.index_reads.best_chunks_sql` of the
    FTS5 ranking). Parameters: the three bm25 weights, the MATCH expression, the resource ids.
    Rows ``(resource_id, chunk_id)``, best first."""
    return best_chunks_sql(_fts5_best, n_resources)


#: the most postings a query's phrases may hold for it to be ranked by their kept parts
#: (:mod:`hybridsag.lexical.fts5_parts`); above it the phrases' rows are too many to read into
#: Python for one query, and the statement (or the bounded top k) ranks it
_PARTS_MAX_POSTINGS = 50_000
#: the deepest top the bounded ranking (:mod:`hybridsag.lexical.fts5_topk`) is asked for; a deeper
#: refill (filters left too few rows) runs the plain statement
_PRUNE_MAX_DEPTH = 2000


def _join_top(
    reads: IndexReads, top: Sequence[tuple[int, float]], scope: FilterScope, limit: int
) -> list[Any]:
    """``(chunk_id, resource_id, score)`` of the rows of a top already ranked that ``scope``
    lets through, by score, then chunk row, at most ``limit``."""
    scores = dict(top)
    rows = sorted(
        reads.visible_chunks(scores, scope.sql, scope.params).values(),
        key=lambda r: (scores[r.rowid], r.rowid),
    )
    return [(r.chunk_id, r.resource_key, scores[r.rowid]) for r in rows[:limit]]


class Fts5Statements:
    """The FTS5 tables' statements (:class:`StoreStatements`)."""

    kind = "FTS5"
    migrations = FTS_MIGRATIONS
    tables = LexicalTables("chunks_fts", "titles_fts", "rowid", "chunks_fts MATCH ?")

    def __init__(self, store: Store, settings: LexicalSettings) -> None:
        self.store = store
        self.settings = settings
        self._reads = IndexReads(store)
        self._topk = Fts5TopK("chunks_fts", "chunks_vocab")
        self._parts = Fts5Parts("chunks_fts")

    def vocabulary(self, lexemes: list[str]) -> dict[str, int]:
        """From the ``fts5vocab`` view, kept until the next write
        (:class:`~hybridsag.lexical.fts5_topk.Fts5TopK`)."""
        return self._topk.doc_freqs(self.store.connection(), lexemes)

    def near_terms(self, prefix: str, shortest: int, longest: int) -> dict[str, int]:
        """A range of the ``fts5vocab`` view (FTS5 walks its term index from ``prefix``)."""
        return near_terms_in(self.store.connection(), "chunks_vocab", prefix, shortest, longest)

    def total_chunks(self) -> int:
        """FTS5 keeps the count (the N of its IDF) in a record of its own, read without
        scanning a table."""
        return self._topk.stats(self.store.connection()).rows

    def term_match(self, term: str) -> str:
        return build_match([term])

    def rank_chunks(
        self, queries: Sequence[LexicalQuery], scope: FilterScope, depth: int, limit: int
    ) -> list[Ranked]:
        """See :meth:`LexicalEngine.rank_chunks`. Where the bounded ranking applies
        (``lexical.prune``, :mod:`~hybridsag.lexical.fts5_topk`) a query is ranked by it; the
        others are ranked together in one statement (:func:`build_tops_sql`), the FTS5 table's
        row count and document frequencies read once for all of them."""
        s = self.settings
        conn = self.store.connection()
        weights = (s.title_weight, s.heading_weight, s.body_weight)
        out: list[Ranked | None] = [None] * len(queries)
        with self.store.snapshot():  # every statement reads one state
            stats = self._topk.stats(conn)
            if s.prune and depth <= _PRUNE_MAX_DEPTH:
                for i, q in enumerate(queries):
                    top = self._topk.top(
                        conn, terms=q.terms, must=q.must, weights=weights, k=depth,
                        min_postings=s.prune_min_postings, build_match=build_match, stats=stats,
                    )
                    if top is not None:  # exactly ``depth`` rows: deeper ones may exist
                        out[i] = Ranked(_join_top(self._reads, top, scope, limit), False)
            plain = [i for i, r in enumerate(out) if r is None]
            if plain:
                summed = self._rank_by_parts(
                    conn, stats, [queries[i] for i in plain], weights, scope, depth, limit
                )
                for i, ranked in zip(plain, summed, strict=True):
                    out[i] = ranked
                plain = [i for i, r in enumerate(out) if r is None]
            if plain:
                args: list[object] = []
                for i in plain:
                    args += [*weights, build_match(queries[i].terms, must=queries[i].must), depth]
                rows = self._reads.ranked_chunks(
                    _fts5_tops(len(plain)), args, scope.sql, scope.params
                )
                for i, ranked in rankings(rows, plain, depth, limit).items():
                    out[i] = ranked
        return [r for r in out if r is not None]

    def _rank_by_parts(
        self,
        conn: Any,
        stats: Fts5Stats,
        queries: Sequence[LexicalQuery],
        weights: Sequence[float],
        scope: FilterScope,
        depth: int,
        limit: int,
    ) -> list[Ranked | None]:
        """When the call ranks several queries (SAG2's next-hop round names the question's
        phrases in each), or one after such a call kept parts in this state of the table (a warm
        process): the queries whose phrases hold at most :data:`_PARTS_MAX_POSTINGS` postings,
        ranked by their phrases' kept parts (:mod:`~hybridsag.lexical.fts5_parts`: the scores
        and order of :func:`build_tops_sql`'s ranking, each phrase read once per state of the
        table); None for the others. As the statement does, a query's rows are its visible
        rows among its top ``depth``, at most ``limit``; ``complete`` when nothing ranks
        below ``depth``. Call inside the read transaction of the ranking, with the table's
        ``stats`` read in it."""
        phrases = [phrases_of(q.terms, q.must) for q in queries]
        if len(queries) < 2 and not self._parts.warm(stats, weights):
            # a lone query before any ranking of several kept parts (a cold lexical command)
            # reads each phrase once either way: the statement does it without loading numpy
            return [None] * len(queries)
        tokens = {t for ps in phrases for p in ps for t in phrase_lexemes(p)}
        freqs = self._topk.doc_freqs(conn, sorted(tokens), stats)
        use = [self._parts.estimate(ps, freqs) <= _PARTS_MAX_POSTINGS for ps in phrases]
        out: list[Ranked | None] = [None] * len(queries)
        if not any(use):
            return out
        kept = self._parts.parts(
            conn, stats, [p for ps, ok in zip(phrases, use) if ok for p in ps], weights,
            build_match,
        )
        ranked = {
            i: rank_by_parts([kept[p] for p in phrases[i]], must=bool(queries[i].must))
            for i, ok in enumerate(use) if ok
        }
        # which rows are visible: each query's top ``limit`` first, deeper (to ``depth``) only
        # for a query the filters left short
        seen: dict[int, Any] = {}
        window = {i: min(limit, depth) for i in ranked}
        while window:
            ask = {int(r) for i, n in window.items() for r in ranked[i][0][:n]} - seen.keys()
            found = self._reads.visible_chunks(ask, scope.sql, scope.params) if ask else {}
            seen.update({r: found.get(r) for r in ask})
            deeper = {}
            for i, n in window.items():
                rows, scores = ranked[i]
                shown = [
                    (ref.chunk_id, ref.resource_key, float(s))
                    for r, s in zip(rows[:n].tolist(), scores[:n].tolist())
                    if (ref := seen[r]) is not None
                ]
                if len(shown) < limit and n < min(depth, len(rows)):
                    deeper[i] = depth
                else:
                    out[i] = Ranked(shown[:limit], len(rows) <= depth)
            window = deeper
        return out

    def title_rows(self, terms: Sequence[str], scope: FilterScope, limit: int) -> list[Any]:
        return self._reads.ranked_titles(
            _FTS5_TITLES, [build_match(terms)], scope.sql, scope.params, limit
        )

    def best_chunk_rows(self, resource_ids: Sequence[str], terms: Sequence[str]) -> list[Any]:
        s = self.settings
        weights = [s.title_weight, s.heading_weight, s.body_weight]
        return self._reads.best_chunks(_fts5_best, [*weights, build_match(terms)], resource_ids)

    def add_chunks(self, conn: Any, rows: Iterable[tuple[int, ChunkTokens]]) -> None:
        conn.executemany(
            "INSERT INTO chunks_fts(rowid, title, heading, body) VALUES (?, ?, ?, ?)",
            [(rowid, t.title, t.heading, t.body) for rowid, t in rows],
        )

    def add_titles(self, conn: Any, rows: Iterable[tuple[int, str]]) -> None:
        conn.executemany("INSERT INTO titles_fts(rowid, title) VALUES (?, ?)", list(rows))
