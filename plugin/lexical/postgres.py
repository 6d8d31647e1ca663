"""The PostgreSQL engine: the lexical index's rows in PostgreSQL, for a store on PostgreSQL
(:class:`PostgresStatements`, a :class:`~hybridsag.lexical.contract.StoreStatements` under
:class:`~hybridsag.lexical.index.StoreLexicalIndex`): tsvector rows ranked by the BM25 of FTS5,
so both engines rank alike. It keeps every part of the FTS5 engine
(:mod:`hybridsag.lexical.fts5`) but the tables and the ranking statement; the statements are
built by pure functions (:func:`build_tsvector`, :func:`build_tsquery`,
:func:`build_pg_bm25_sql`) that tests assert on.
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
from hybridsag.lexical.fts5_topk import BM25_B, BM25_K1, strip_diacritics
from hybridsag.lexical.queries import rankings
from hybridsag.records.index_reads import IndexReads
from hybridsag.records.store import Store
from hybridsag.settings import LexicalSettings

__all__ = [
    "PG_LEXICAL_MIGRATIONS",
    "PostgresStatements",
    "build_pg_bm25_sql",
    "build_tsquery",
    "build_tsvector",
]

#: tsvector limits (PostgreSQL docs, "Text Search Types"): a lexeme takes at most 2,046 bytes,
#: a position is at most 16,383 and a lexeme keeps at most 256 positions.
_PG_MAX_LEXEME_BYTES = 2046
_PG_MAX_POSITION = 16383
_PG_MAX_POSITIONS = 256

PG_LEXICAL_MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "pg_lexical_0001_tables",
        """
        CREATE TABLE IF NOT EXISTS chunks_lex(
            id INTEGER PRIMARY KEY, n_tokens INTEGER NOT NULL, tsv tsvector NOT NULL);
        CREATE INDEX IF NOT EXISTS chunks_lex_tsv ON chunks_lex USING gin(tsv);
        CREATE TABLE IF NOT EXISTS titles_lex(
            id INTEGER PRIMARY KEY, title TEXT NOT NULL, n_tokens INTEGER NOT NULL,
            tsv tsvector NOT NULL);
        CREATE INDEX IF NOT EXISTS titles_lex_tsv ON titles_lex USING gin(tsv);
        """,
    ),
)


def _pg_quote(lexeme: str) -> str:
    """A quoted tsvector/tsquery lexeme (quotes doubled, backslashes escaped)."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def build_tsvector(columns: Sequence[tuple[str, str]]) -> tuple[str, int]:
    """The tsvector literal of space-joined token columns ``(tokens, weight letter)`` and their
    token count. Each token is one lexeme, folded as FTS5's ``remove_diacritics 2`` folds it
    (:func:`strip_diacritics`), with its positions and the column's weight; PostgreSQL's own
    parser and dictionaries are not used, so both engines index the same terms.

    Example: ``build_tsvector([("a b a", "A")])`` -> ``("'a':1A,3A 'b':2A", 3)``."""
    positions: dict[str, list[str]] = {}
    n = 0
    for tokens, weight in columns:
        for token in tokens.split():
            n += 1
            lexeme = strip_diacritics(token)
            if len(lexeme.encode("utf-8")) > _PG_MAX_LEXEME_BYTES:
                continue
            at = positions.setdefault(lexeme, [])
            if len(at) < _PG_MAX_POSITIONS:
                at.append(f"{min(n, _PG_MAX_POSITION)}{weight}")
    return " ".join(f"{_pg_quote(lex)}:{','.join(at)}" for lex, at in positions.items()), n


def build_tsquery(terms: Sequence[str], *, must: str | None = None) -> str:
    """``'a' | 'b' ...``; with ``must``, ``'must' & ('a' | 'b' ...)`` (terms folded as
    :func:`build_tsvector` folds them). Empty terms -> ''."""
    ors = " | ".join(_pg_quote(strip_diacritics(t)) for t in terms if t)
    if must:
        head = _pg_quote(strip_diacritics(must))
        return f"{head} & ({ors})" if ors else head
    return ors


def build_pg_bm25_sql(table: str, where: str = "") -> str:
    """Rows ``(id, score)`` of ``table`` (``chunks_lex``/``titles_lex``) matching a tsquery,
    scored as FTS5's ``bm25()`` scores (negative, lower is better): for each query term,
    ``idf * f * (k1 + 1) / (f + k1 * (1 - b + b * |D| / avgdl))`` with ``f`` the term's
    occurrences weighted by column and ``|D|`` the row's token count (Robertson and Zaragoza,
    "The Probabilistic Relevance Framework: BM25 and Beyond", 2009). Parameters: the terms
    (text[]), their idf (float8[]), the weights of columns A, B and C, the tsquery, then those
    of ``where`` (an ``AND ...`` fragment over ``l``)."""
    k1, b = BM25_K1, BM25_B  # FTS5's, so both engines rank alike
    return f"""
        SELECT l.id, -sum(q.idf * f.f * {k1 + 1} / (f.f + {k1} * ({1 - b} + {b} * l.n_tokens
                   / greatest(st.avgdl, 1e-9)))) AS s
        FROM {table} l
        CROSS JOIN (SELECT coalesce(avg(n_tokens), 0)::float8 AS avgdl FROM {table}) st
        CROSS JOIN LATERAL unnest(l.tsv) AS u(lexeme, positions, weights)
        JOIN unnest(?::text[], ?::float8[]) AS q(term, idf) ON q.term = u.lexeme
        CROSS JOIN LATERAL (
            SELECT sum(CASE w WHEN 'A' THEN ?::float8 WHEN 'B' THEN ?::float8
                       ELSE ?::float8 END) AS f
            FROM unnest(u.weights) AS w) f
        WHERE l.tsv @@ ?::tsquery {where}
        GROUP BY l.id"""


class PostgresStatements:
    """The lexical index's statements in PostgreSQL, for a store on PostgreSQL
    (:class:`~hybridsag.lexical.contract.StoreStatements`: rows written in the caller's
    transaction like the FTS5 rows).

    ``chunks_lex(id, n_tokens, tsv)`` and ``titles_lex(id, title, n_tokens, tsv)`` hold one
    tsvector per row built from the index tokenizer's tokens (:func:`build_tsvector`; title,
    heading and body as weights A, B and C), searched through GIN indexes and ranked by the
    BM25 of FTS5 (:func:`build_pg_bm25_sql`), with the document frequencies counted over the
    same rows. Differences from FTS5: a lexeme over 2,046 bytes is not indexed, and a term
    counts at most 256 times in a row.
    """

    kind = "PostgreSQL tsvector rows"
    migrations = PG_LEXICAL_MIGRATIONS
    tables = LexicalTables("chunks_lex", "titles_lex", "id", "chunks_lex.tsv @@ ?::tsquery")

    def __init__(self, store: Store, settings: LexicalSettings) -> None:
        self.store = store
        self.settings = settings
        self._reads = IndexReads(store)

    def total_chunks(self) -> int:
        return self._reads.count_chunks()

    def term_match(self, term: str) -> str:
        return build_tsquery([term])

    def near_terms(self, prefix: str, shortest: int, longest: int) -> dict[str, int]:
        """None: listing a tsvector column's terms reads every row (``ts_stat``), so queries
        on PostgreSQL are not respelled."""
        return {}

    def vocabulary(self, lexemes: list[str]) -> dict[str, int]:
        rows = self.store.connection().execute(
            "SELECT q.t, (SELECT count(*) FROM chunks_lex WHERE tsv @@ q.tq::tsquery) "
            "FROM unnest(?::text[], ?::text[]) AS q(t, tq)",
            [lexemes, [_pg_quote(x) for x in lexemes]],
        )
        return {t: int(n) for t, n in rows if n}

    def _idf(self, table: str, terms: Sequence[str]) -> tuple[list[str], list[float]]:
        """The folded terms and their FTS5 idf, ``log((N - n + 0.5) / (n + 0.5))`` floored at
        1e-6 (N rows, n of them holding the term)."""
        import math

        lexemes = [strip_diacritics(t) for t in terms if t]
        conn = self.store.connection()
        rows = conn.execute(
            f"SELECT (SELECT count(*) FROM {table}), q.t, "
            f"(SELECT count(*) FROM {table} WHERE tsv @@ q.tq::tsquery) "
            "FROM unnest(?::text[], ?::text[]) AS q(t, tq)",
            [lexemes, [_pg_quote(x) for x in lexemes]],
        ).fetchall()
        idf = []
        for total, _term, n in rows:
            value = math.log((total - n + 0.5) / (n + 0.5))
            idf.append(value if value > 0 else 1e-6)
        return lexemes, idf

    def rank_chunks(
        self, queries: Sequence[LexicalQuery], scope: FilterScope, depth: int, limit: int
    ) -> list[Ranked]:
        """See :meth:`LexicalEngine.rank_chunks`: one statement a query (its IDFs are counted
        for its own terms), every ranked row returned with whether it is visible."""
        s = self.settings
        weights = [s.title_weight, s.heading_weight, s.body_weight]
        bm25 = build_pg_bm25_sql("chunks_lex")
        top = f"SELECT 0 AS q, b.id, b.s FROM ({bm25} ORDER BY s, l.id LIMIT ?) AS b"
        out = []
        for q in queries:
            lexemes, idf = self._idf("chunks_lex", [q.must, *q.terms] if q.must else q.terms)
            query = build_tsquery(q.terms, must=q.must)
            rows = self._reads.ranked_chunks(
                top, [lexemes, idf, *weights, query, depth], scope.sql, scope.params
            )
            out.append(rankings(rows, [0], depth, limit)[0])
        return out

    def title_rows(self, terms: Sequence[str], scope: FilterScope, limit: int) -> list[Any]:
        lexemes, idf = self._idf("titles_lex", terms)
        return self._reads.ranked_titles(
            build_pg_bm25_sql("titles_lex"),
            [lexemes, idf, 1.0, 1.0, 1.0, build_tsquery(terms)],
            scope.sql,
            scope.params,
            limit,
        )

    def best_chunk_rows(self, resource_ids: Sequence[str], terms: Sequence[str]) -> list[Any]:
        s = self.settings
        lexemes, idf = self._idf("chunks_lex", terms)
        weights = [s.title_weight, s.heading_weight, s.body_weight]
        return self._reads.best_chunks(
            lambda rows: build_pg_bm25_sql("chunks_lex", f"AND l.id IN ({rows})"),
            [lexemes, idf, *weights, build_tsquery(terms)],
            resource_ids,
        )

    def add_chunks(self, conn: Any, rows: Iterable[tuple[int, ChunkTokens]]) -> None:
        values = []
        for rowid, t in rows:
            tsv, n = build_tsvector([(t.title, "A"), (t.heading, "B"), (t.body, "C")])
            values.append((rowid, n, tsv))
        conn.executemany(
            "INSERT INTO chunks_lex(id, n_tokens, tsv) VALUES (?, ?, ?::tsvector)", values
        )

    def add_titles(self, conn: Any, rows: Iterable[tuple[int, str]]) -> None:
        values = []
        for rowid, title in rows:
            tsv, n = build_tsvector([(title, "A")])
            values.append((rowid, title, n, tsv))
        conn.executemany(
            "INSERT INTO titles_lex(id, title, n_tokens, tsv) VALUES (?, ?, ?, ?::tsvector)",
            values,
        )
