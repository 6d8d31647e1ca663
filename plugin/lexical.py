"""The lexical path: all FTS5 code in one adapter, behind the ``LexicalIndex`` protocol.

Query terms (ARCHITECTURE.md, SAG-Wiki): the query goes through the index tokenizer (NFKC,
lowercase, jieba search mode), tokens without a letter or digit and stop words are dropped, the
rest deduplicated, at most ``query.max_terms`` (80); each is quoted and the terms are joined with
``OR``, so user text is never FTS5 syntax. A term with no hit in the index is compared with the
resource titles and replaced by a title spelling that differs from it only by accents, ligatures
or compatibility forms, when exactly one title token has that folded form ("the title-alias fix").

Ranking is FTS5 ``bm25()`` with column weights title/heading/body = 2/2/1 (settings). The top of
the FTS5 ranking is taken in a subquery before the resource join (PLATFORM.md: a naive join costs
about 3x) and refilled with a deeper subquery when filters leave too few rows.
"""

from __future__ import annotations

import sqlite3
import threading
import unicodedata
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from hybridsag.errors import LexicalError
from hybridsag.fusion.types import Hit
from hybridsag.settings import LexicalSettings
from hybridsag.store import Filters, Store, select_in
from hybridsag.tokenizer import Tokenizer

__all__ = [
    "Fts5LexicalIndex",
    "LexicalIndex",
    "build_match",
    "build_search_sql",
    "fold_term",
    "quote_term",
    "strip_diacritics",
]


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
    """The search statement. Parameters, in order: the three bm25 weights, the MATCH
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


@runtime_checkable
class LexicalIndex(Protocol):
    """Contract: ``search`` returns at most ``limit`` hits of visible chunks (filters applied in
    the query), rank 1 first, ``score`` higher-is-better; raises :class:`LexicalError`."""

    def query_terms(self, query: str) -> list[str]: ...

    def search(
        self, terms: Sequence[str], *, limit: int, filters: Filters, must: str | None = None
    ) -> list[Hit]: ...

    def doc_freqs(self, terms: Sequence[str]) -> dict[str, int]: ...

    def total_chunks(self) -> int: ...


class Fts5LexicalIndex:
    """SQLite FTS5 implementation of :class:`LexicalIndex`."""

    path_name = "bm25"

    def __init__(
        self, store: Store, tokenizer: Tokenizer, settings: LexicalSettings, *, max_terms: int = 80
    ) -> None:
        self.store = store
        self.tokenizer = tokenizer
        self.settings = settings
        self.max_terms = max_terms
        self._alias_lock = threading.Lock()
        self._alias_key: tuple[int, float] | None = None
        self._alias: dict[str, set[str]] = {}

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
                self._alias, self._alias_key = aliases, key  # type: ignore[assignment]
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
        """BM25 top ``limit`` for quoted-OR ``terms`` (all containing ``must`` when given)."""
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
