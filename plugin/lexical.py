"""The lexical index: the one owner of every FTS5 statement, behind the ``LexicalIndex`` protocol.

Every statement that creates, reads or writes the FTS5 tables lives here: the write path, the
title path and the reconciler call these methods instead of writing SQL of their own, so how a
row is built, searched or deleted is written once. The tables:

``chunks_fts(title, heading, body)``
    one row per chunk (rowid = ``chunks.id``): the resource title, the heading path and the
    chunk text, each as space-joined :class:`~hybridsag.tokenizer.Tokenizer` tokens;
``titles_fts(title)``
    one row per committed resource (rowid = ``resources.id``): the title's tokens;
``chunks_vocab``
    the ``fts5vocab`` view of ``chunks_fts`` (document frequencies).

Query terms: the query goes through the index tokenizer (NFKC, lowercase, jieba search mode),
tokens without a letter or digit and stop words are dropped, the rest deduplicated, at most
``query.max_terms``; each is quoted (:func:`quote_term`, as sqlite-utils' ``quote_fts`` does) and
the terms are joined with ``OR``, so user text is never FTS5 syntax. A term with no hit in the
index is compared with the resource titles and replaced by a title spelling that differs from it
only by accents, ligatures or compatibility forms, when exactly one title token has that folded
form ("the title-alias fix").

Ranking is FTS5 ``bm25()`` with column weights title/heading/body from ``lexical`` settings. The
top of the FTS5 ranking is taken in a subquery before the resource join and refilled with a deeper
subquery when filters leave too few rows. The statements are built by pure functions
(:func:`build_search_sql`, :func:`build_title_search_sql`, :func:`build_best_chunks_sql`) that
tests assert on.
"""

from __future__ import annotations

import sqlite3
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from hybridsag.errors import LexicalError
from hybridsag.fusion.types import Hit
from hybridsag.settings import LexicalSettings
from hybridsag.store import Filters, Store, select_in
from hybridsag.tokenizer import FTS_TOKENIZE, Tokenizer

__all__ = [
    "FTS_MIGRATIONS",
    "ChunkTokens",
    "Fts5LexicalIndex",
    "LexicalIndex",
    "build_best_chunks_sql",
    "build_match",
    "build_search_sql",
    "build_title_search_sql",
    "fold_term",
    "quote_term",
    "strip_diacritics",
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


def quote_term(term: str) -> str:
    """An FTS5 string literal: the term between double quotes, inner quotes doubled."""
    return '"' + term.replace('"', '""') + '"'


def build_match(terms: Sequence[str], *, must: str | None = None) -> str:
    """``"a" OR "b" ...``; with ``must``, ``"must" AND ("a" OR "b" ...)``. Empty terms -> ''."""
    ors = " OR ".join(quote_term(t) for t in terms if t)
    if must:
        return f"{quote_term(must)} AND ({ors})" if ors else quote_term(must)
    return ors


def build_search_sql(filter_sql: str) -> str:
    """The chunk search statement. Parameters, in order: the three bm25 weights, the MATCH
    expression, the subquery depth, the filter parameters, the final limit."""
    return f"""
        SELECT c.chunk_id, c.resource_id, top.s
        FROM (
            SELECT rowid AS id, bm25(chunks_fts, ?, ?, ?) AS s
            FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY s LIMIT ?
        ) AS top
        JOIN chunks c ON c.id = top.id
        JOIN resources r ON r.resource_id = c.resource_id AND r.version = c.version
        WHERE {filter_sql}
        ORDER BY top.s, c.id
        LIMIT ?"""


def build_title_search_sql(filter_sql: str) -> str:
    """The title search statement. Parameters: the MATCH expression, the filter parameters, the
    limit. Returns ``(resource_id, bm25 score)`` rows, best first."""
    return f"""
        SELECT r.resource_id, bm25(titles_fts) AS s
        FROM titles_fts JOIN resources r ON r.id = titles_fts.rowid
        WHERE titles_fts MATCH ? AND {filter_sql}
        ORDER BY s, r.id LIMIT ?"""


def build_best_chunks_sql(n_resources: int) -> str:
    """The best chunk of each of ``n_resources`` resources for a MATCH expression, at the
    resources' current versions. Parameters: the MATCH expression, the resource ids, the three
    bm25 weights. Rows ``(resource_id, chunk_id)``, best first."""
    marks = ",".join("?" * n_resources)
    return f"""
        SELECT c.resource_id, c.chunk_id
        FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid
        JOIN resources r ON r.resource_id = c.resource_id AND r.version = c.version
        WHERE chunks_fts MATCH ? AND chunks_fts.rowid IN (
            SELECT id FROM chunks WHERE resource_id IN ({marks}))
        ORDER BY bm25(chunks_fts, ?, ?, ?), c.id"""


_LIGATURES = str.maketrans(
    {"æ": "ae", "œ": "oe", "ß": "ss", "ø": "o", "ł": "l", "đ": "d", "þ": "th", "ð": "d", "ı": "i"}
)


def strip_diacritics(term: str) -> str:
    """What FTS5's ``remove_diacritics 2`` does to a token: combining marks removed after
    canonical decomposition (ligatures such as ``ø`` and ``æ`` stay)."""
    if term.isascii():
        return term
    decomposed = unicodedata.normalize("NFD", term)
    return unicodedata.normalize(
        "NFC", "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    )


def fold_term(term: str) -> str:
    """Accents, ligatures and compatibility forms folded away (for the title-alias fix)."""
    decomposed = unicodedata.normalize("NFKD", term.lower().translate(_LIGATURES))
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


@dataclass(frozen=True, slots=True)
class ChunkTokens:
    """What one ``chunks_fts`` row holds: the space-joined tokens of the resource title, the
    heading path and the chunk text (built by :meth:`Fts5LexicalIndex.chunk_tokens`)."""

    title: str
    heading: str
    body: str


@runtime_checkable
class LexicalIndex(Protocol):
    """The lexical index the bm25, title and SAG2 paths read.

    Contract: ``search`` returns at most ``limit`` hits of visible chunks (``filters`` applied in
    the query), rank 1 first, ``score`` higher-is-better, ``raw_score`` the engine's own number;
    ``query_terms`` never returns engine syntax (every term is quoted when searched);
    ``doc_freqs`` maps each known term to the number of chunks holding it. Every method raises
    :class:`~hybridsag.errors.LexicalError` when the engine fails.
    """

    tokenizer: Tokenizer

    def query_terms(self, query: str) -> list[str]: ...

    def search(
        self,
        terms: Sequence[str],
        *,
        limit: int,
        filters: Filters,
        must: str | None = None,
        path: str = "bm25",
    ) -> list[Hit]: ...

    def search_titles(
        self, terms: Sequence[str], *, limit: int, filters: Filters
    ) -> list[tuple[str, float]]: ...

    def best_chunks(self, resource_ids: Sequence[str], terms: Sequence[str]) -> dict[str, str]: ...

    def doc_freqs(self, terms: Sequence[str]) -> dict[str, int]: ...

    def total_chunks(self) -> int: ...

    def scoped_doc_freqs(
        self, terms: Sequence[str], filters: Filters
    ) -> tuple[dict[str, int], int]: ...


class Fts5LexicalIndex:
    """SQLite FTS5 implementation of :class:`LexicalIndex`, over the store's database.

    Read methods use the calling thread's store connection. Write methods take ``conn``, the
    connection of a write transaction the caller holds (``Store.atomic()``), so FTS rows change
    in the same transaction as the chunk and resource rows they index.
    """

    def __init__(
        self, store: Store, tokenizer: Tokenizer, settings: LexicalSettings, *, max_terms: int = 80
    ) -> None:
        self.store = store
        self.tokenizer = tokenizer
        self.settings = settings
        self.max_terms = max_terms
        self._alias_lock = threading.Lock()
        self._alias_key: tuple[object, ...] | None = None
        self._alias: dict[str, set[str]] = {}
        store.migrate(FTS_MIGRATIONS)

    # -- terms --------------------------------------------------------------------------------

    def query_terms(self, query: str) -> list[str]:
        """Quoted-OR terms of a query, with the title-alias fix applied."""
        terms = self.tokenizer.query_terms(query, limit=self.max_terms)
        if not terms:
            return terms
        freqs = self.doc_freqs(terms)
        missing = [t for t in terms if not freqs.get(t)]
        if missing:
            aliases = self._title_aliases()
            fixed = []
            for term in terms:
                if term in missing:
                    spellings = aliases.get(fold_term(term), set()) - {term}
                    if len(spellings) == 1:
                        term = next(iter(spellings))
                fixed.append(term)
            terms = list(dict.fromkeys(fixed))
        return terms

    def doc_freqs(self, terms: Sequence[str]) -> dict[str, int]:
        """Number of chunks holding each term (FTS5 vocabulary, all statuses), keyed by the
        term as given. The vocabulary holds terms as FTS5 indexed them, with diacritics removed
        (:data:`~hybridsag.tokenizer.FTS_TOKENIZE`), so the lookup folds them the same way."""
        if not terms:
            return {}
        conn = self.store.connection()
        keys = {t: strip_diacritics(t) for t in dict.fromkeys(terms)}
        try:
            rows = select_in(conn, "SELECT term, doc FROM chunks_vocab", "term", keys.values())
        except sqlite3.Error as exc:
            raise LexicalError(f"reading the FTS5 vocabulary failed: {exc}") from exc
        found = {term: int(row[1]) for term, row in rows.items()}
        return {t: found[k] for t, k in keys.items() if k in found}

    def total_chunks(self) -> int:
        return int(self.store.connection().execute("SELECT count(*) FROM chunks").fetchone()[0])

    def scoped_doc_freqs(
        self, terms: Sequence[str], filters: Filters
    ) -> tuple[dict[str, int], int]:
        """:meth:`doc_freqs` and :meth:`total_chunks` counted over the chunks ``filters`` lets
        through (current versions only): statistics of a tenant's own documents, which say
        nothing about another tenant's. One count per term: meant for a query's few terms."""
        filter_sql, params = filters.sql("r")
        conn = self.store.connection()
        scope = (
            "FROM chunks c JOIN resources r ON r.resource_id = c.resource_id "
            f"AND r.version = c.version WHERE {filter_sql}"
        )
        try:
            total = int(conn.execute(f"SELECT count(*) {scope}", params).fetchone()[0])
            out: dict[str, int] = {}
            for term in dict.fromkeys(terms):
                match = build_match([term])
                if not match:
                    continue
                n = conn.execute(
                    "SELECT count(*) FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid "
                    "JOIN resources r ON r.resource_id = c.resource_id AND r.version = c.version "
                    f"WHERE chunks_fts MATCH ? AND {filter_sql}",
                    [match, *params],
                ).fetchone()[0]
                if n:
                    out[term] = int(n)
        except sqlite3.Error as exc:
            raise LexicalError(f"counting terms within the filters failed: {exc}") from exc
        return out, total

    def _title_aliases(self) -> dict[str, set[str]]:
        conn = self.store.connection()
        key = tuple(conn.execute("SELECT count(*), max(updated_at) FROM resources").fetchone())
        with self._alias_lock:
            if key != self._alias_key:
                aliases: dict[str, set[str]] = {}
                for (title,) in conn.execute("SELECT title FROM titles_fts"):
                    for token in title.split():
                        folded = fold_term(token)
                        if folded != token:
                            aliases.setdefault(folded, set()).add(token)
                self._alias, self._alias_key = aliases, key
            return self._alias

    # -- search -------------------------------------------------------------------------------

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
        match = build_match(terms, must=must)
        if not match or limit < 1:
            return []
        filter_sql, filter_params = filters.sql("r")
        sql = build_search_sql(filter_sql)
        s = self.settings
        conn = self.store.connection()
        depth = max(limit * 2, limit + 20)
        total = None
        while True:
            try:
                rows = conn.execute(
                    sql,
                    [s.title_weight, s.heading_weight, s.body_weight, match, depth]
                    + filter_params
                    + [limit],
                ).fetchall()
            except sqlite3.Error as exc:
                raise LexicalError(f"FTS5 search for {match!r:.200} failed: {exc}") from exc
            if len(rows) >= limit:
                break
            if total is None:
                total = self.total_chunks()
            if depth >= total:
                break
            depth *= 4
        return [
            Hit(
                chunk_id=chunk_id,
                path=path,
                rank=i,
                raw_score=float(score),
                score=-float(score),
                detail={"resource_id": resource_id},
            )
            for i, (chunk_id, resource_id, score) in enumerate(rows, start=1)
        ]

    def search_titles(
        self, terms: Sequence[str], *, limit: int, filters: Filters
    ) -> list[tuple[str, float]]:
        """``(resource_id, bm25 score)`` of the resources whose title matches quoted-OR
        ``terms``, best first (the score is FTS5's, lower-is-better)."""
        match = build_match(terms)
        if not match or limit < 1:
            return []
        filter_sql, params = filters.sql("r")
        try:
            rows = (
                self.store.connection()
                .execute(build_title_search_sql(filter_sql), [match, *params, limit])
                .fetchall()
            )
        except sqlite3.Error as exc:
            raise LexicalError(f"title search failed: {exc}") from exc
        return [(rid, float(score)) for rid, score in rows]

    def best_chunks(self, resource_ids: Sequence[str], terms: Sequence[str]) -> dict[str, str]:
        """The best-matching chunk (current version) of each resource for ``terms``; resources
        with no matching chunk are absent."""
        match = build_match(terms)
        if not match or not resource_ids:
            return {}
        s = self.settings
        best: dict[str, str] = {}
        try:
            rows = (
                self.store.connection()
                .execute(
                    build_best_chunks_sql(len(resource_ids)),
                    [match, *resource_ids, s.title_weight, s.heading_weight, s.body_weight],
                )
                .fetchall()
            )
        except sqlite3.Error as exc:
            raise LexicalError(f"title path chunk lookup failed: {exc}") from exc
        for rid, chunk_id in rows:
            best.setdefault(rid, chunk_id)
        return best

    # -- rows (inside the caller's write transaction) -------------------------------------------

    def chunk_tokens(self, title: str, heading: str, body: str) -> ChunkTokens:
        """The tokens of one chunk's FTS row (pure: call it before taking the write lock)."""
        tok = self.tokenizer.index_text
        return ChunkTokens(tok(title), tok(heading), tok(body))

    def title_tokens(self, title: str) -> str:
        """The tokens of one resource's title row."""
        return self.tokenizer.index_text(title)

    def add_chunks(self, conn: sqlite3.Connection, rows: Iterable[tuple[int, ChunkTokens]]) -> None:
        """Index chunks: ``(chunks.id, tokens)`` each."""
        conn.executemany(
            "INSERT INTO chunks_fts(rowid, title, heading, body) VALUES (?, ?, ?, ?)",
            [(rowid, t.title, t.heading, t.body) for rowid, t in rows],
        )

    def remove_chunks(self, conn: sqlite3.Connection, rowids: Iterable[int]) -> None:
        """Remove the rows of these ``chunks.id`` values (absent ones are ignored)."""
        conn.executemany("DELETE FROM chunks_fts WHERE rowid = ?", [(r,) for r in rowids])

    def remove_resource_chunks(self, conn: sqlite3.Connection, resource_id: str) -> None:
        """Remove the rows of every chunk row of ``resource_id`` (all versions)."""
        conn.execute(
            "DELETE FROM chunks_fts WHERE rowid IN (SELECT id FROM chunks WHERE resource_id = ?)",
            (resource_id,),
        )

    def remove_orphan_chunk(self, conn: sqlite3.Connection, rowid: int) -> int:
        """Remove the row ``rowid`` if no chunk row has that id any more; returns 1 or 0."""
        cur = conn.execute(
            "DELETE FROM chunks_fts WHERE rowid = ? AND NOT EXISTS "
            "(SELECT 1 FROM chunks WHERE id = ?)",
            (rowid, rowid),
        )
        return max(cur.rowcount, 0)

    def has_chunk(self, conn: sqlite3.Connection, rowid: int) -> bool:
        """Whether chunk row ``rowid`` is indexed."""
        row = conn.execute("SELECT 1 FROM chunks_fts WHERE rowid = ?", (rowid,)).fetchone()
        return row is not None

    def add_titles(self, conn: sqlite3.Connection, rows: Iterable[tuple[int, str]]) -> None:
        """Index titles: ``(resources.id, title tokens)`` each."""
        conn.executemany("INSERT INTO titles_fts(rowid, title) VALUES (?, ?)", list(rows))

    def remove_titles(self, conn: sqlite3.Connection, rowids: Iterable[int]) -> None:
        """Remove the title rows of these ``resources.id`` values."""
        conn.executemany("DELETE FROM titles_fts WHERE rowid = ?", [(r,) for r in rowids])

    def remove_resource_title(self, conn: sqlite3.Connection, resource_id: str) -> None:
        """Remove the title row of ``resource_id``."""
        conn.execute(
            "DELETE FROM titles_fts WHERE rowid IN "
            "(SELECT id FROM resources WHERE resource_id = ?)",
            (resource_id,),
        )

    def remove_orphan_title(self, conn: sqlite3.Connection, rowid: int) -> int:
        """Remove the title row ``rowid`` if no resource has that id any more; returns 1 or 0."""
        cur = conn.execute(
            "DELETE FROM titles_fts WHERE rowid = ? AND NOT EXISTS "
            "(SELECT 1 FROM resources WHERE id = ?)",
            (rowid, rowid),
        )
        return max(cur.rowcount, 0)

    def has_title(self, conn: sqlite3.Connection, rowid: int) -> bool:
        """Whether resource row ``rowid`` has its title row."""
        row = conn.execute("SELECT 1 FROM titles_fts WHERE rowid = ?", (rowid,)).fetchone()
        return row is not None

    def indexed_rowids(self, conn: sqlite3.Connection) -> tuple[set[int], set[int]]:
        """Every indexed ``(chunks.id set, resources.id set)`` (the reconciler's snapshot)."""
        chunks = {r[0] for r in conn.execute("SELECT rowid FROM chunks_fts")}
        titles = {r[0] for r in conn.execute("SELECT rowid FROM titles_fts")}
        return chunks, titles
