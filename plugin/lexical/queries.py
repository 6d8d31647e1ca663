"""The shared query module every lexical engine runs under: term analysis, the spelling and
title-alias fixes, document frequencies, the search that refills deeper when filters leave too
few rows, the title search, the best chunk per resource and the tokens of a row
(:class:`LexicalQueries`); what differs between engines is asked of a
:class:`~hybridsag.lexical.contract.LexicalEngine`. A backend holds a :class:`LexicalQueries`
and answers the reads of :class:`~hybridsag.lexical.contract.LexicalIndex` with it
(:func:`bind_reads`).

Query terms: the query goes through the index tokenizer (NFKC, lowercase, jieba search mode),
tokens without a letter or digit and stop words are dropped, the rest deduplicated, at most
``query.max_terms``; each is quoted (:func:`quote_term`, as sqlite-utils' ``quote_fts`` does) and
the terms are joined with ``OR``, so user text is never engine syntax. A term with no hit in the
index is compared with the resource titles and replaced by a title spelling that differs from it
only by accents, ligatures or compatibility forms, when exactly one title token has that folded
form ("the title-alias fix").
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from hybridsag.errors import LexicalError
from hybridsag.lexical.contract import (
    ChunkTokens,
    FilterScope,
    LexicalEngine,
    LexicalQuery,
    Ranked,
)
from hybridsag.lexical.fts5_topk import strip_diacritics
from hybridsag.fusion.types import Hit
from hybridsag.records.index_reads import IndexReads, RankedRow
from hybridsag.records.filters import Filters
from hybridsag.records.store import Store
from hybridsag.lexical.spelling import respell, spelling_reach
from hybridsag.lexical.tokenizer import Tokenizer

__all__ = [
    "LexicalQueries",
    "bind_reads",
    "build_match",
    "count_store_chunks",
    "deepening",
    "first_depth",
    "fold_term",
    "near_terms_in",
    "quote_term",
    "rankings",
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


T = TypeVar("T")


def first_depth(limit: int) -> int:
    """How deep a ranking is first asked for ``limit`` rows: ``max(2 limit, limit + 20)``, room
    for the rows the filters drop."""
    return max(limit * 2, limit + 20)


def deepening(limit: int, deepest: int, read: Callable[[int], tuple[list[T], int]]) -> list[T]:
    """At most ``limit`` rows of ``read(depth)``, which ranks ``depth`` deep and returns ``(the
    rows the filters let through, best first; how many rows it ranked)``: asked
    :func:`first_depth` deep, then again four times deeper (never past ``deepest``) while fewer
    than ``limit`` rows come through, the ranking was as deep as asked (deeper rows may exist)
    and ``depth`` is short of ``deepest``. What an engine that filters its hits after ranking
    them (Milvus, tantivy) does for a title search.

    Example: ``deepening(10, 1000, lambda depth: (rows[:depth], min(depth, len(rows))))``."""
    depth = first_depth(limit)
    while True:
        rows, ranked = read(depth)
        if len(rows) >= limit or ranked < depth or depth >= deepest:
            return rows[:limit]
        depth = min(depth * 4, deepest)


def rankings(
    rows: Iterable[RankedRow], positions: Sequence[int], depth: int, limit: int
) -> dict[int, Ranked]:
    """The :class:`~hybridsag.lexical.contract.Ranked` of each query of a ranking read
    (:meth:`~hybridsag.records.index_reads.IndexReads.ranked_chunks`), keyed by
    ``positions[row.query]``: its visible rows by score, then chunk row, at most ``limit``,
    complete when the ranking held fewer than ``depth`` rows (what the FTS5 and PostgreSQL
    engines' rankings read)."""
    ranked: dict[int, list[RankedRow]] = {i: [] for i in positions}
    for row in rows:
        ranked[positions[row.query]].append(row)
    out = {}
    for i, found in ranked.items():
        found.sort(key=lambda r: (r.score, r.rowid))
        shown = [(r.chunk_id, r.resource_key, r.score) for r in found if r.visible]
        out[i] = Ranked(shown[:limit], len(found) < depth)
    return out


_LIGATURES = str.maketrans(
    {"æ": "ae", "œ": "oe", "ß": "ss", "ø": "o", "ł": "l", "đ": "d", "þ": "th", "ð": "d", "ı": "i"}
)


def fold_term(term: str) -> str:
    """Accents, ligatures and compatibility forms folded away (for the title-alias fix)."""
    decomposed = unicodedata.normalize("NFKD", term.lower().translate(_LIGATURES))
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def _whole_word(term: str, text: str) -> bool:
    """Whether ``term`` stands in ``text`` as a whole word (not a piece of a longer one)."""
    return re.search(rf"(?<!\w){re.escape(term)}(?!\w)", text) is not None


#: Terms held by no chunk that the spelling fix remembers (per index version) before it starts
#: again: a bound on memory, not a tuning knob.
_RESPELL_CACHE = 4096



def _hits(rows: Sequence[Any], path: str) -> list[Hit]:
    """Ranked rows ``(chunk_id, resource_id, engine score)`` as hits of ``path`` (the engines'
    scores are FTS5's, lower is better: a hit's ``score`` is their negation)."""
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


class LexicalQueries:
    """The query skeleton every lexical backend holds: term analysis with the title-alias fix,
    document frequencies (whole index and within filters), the search that refills deeper when
    filters leave too few rows, the title search, the best chunk per resource, and the tokens of
    a row. What differs between engines is asked of the :class:`LexicalEngine` it is given.

    Reads use the calling thread's store connection.
    """

    def __init__(
        self,
        store: Store,
        tokenizer: Tokenizer,
        engine: LexicalEngine,
        *,
        max_terms: int = 80,
        spelling: bool = True,
    ) -> None:
        self.store = store
        self.reads = IndexReads(store)
        self.tokenizer = tokenizer
        self.engine = engine
        self.max_terms = max_terms
        self.spelling = spelling
        self._alias_lock = threading.Lock()
        self._alias_key: tuple[object, ...] | None = None
        self._alias: dict[str, set[str]] = {}
        self._respelled: dict[str, str | None] = {}

    # -- terms --------------------------------------------------------------------------------

    def query_terms(self, query: str) -> list[str]:
        """Quoted-OR terms of a query. A term no chunk holds is replaced by the title spelling
        that differs from it only by accents (the title-alias fix), else, with ``spelling`` and
        where the query wrote it as a whole word, by the index term nearest to it (:mod:`~hybridsag.lexical.spelling`): "windos" is searched
        as "windows"."""
        terms = self.tokenizer.query_terms(query, limit=self.max_terms)
        if not terms:
            return terms
        freqs = self.doc_freqs(terms)
        missing = [t for t in terms if not freqs.get(t)]
        if missing:
            aliases = self._title_aliases()
            fixed = []
            lowered = query.lower()
            for term in terms:
                if term in missing:
                    spellings = aliases.get(fold_term(term), set()) - {term}
                    if len(spellings) == 1:
                        term = next(iter(spellings))
                    elif self.spelling and _whole_word(term, lowered):
                        term = self._respell(term)
                fixed.append(term)
            terms = list(dict.fromkeys(fixed))
        return terms

    def _respell(self, term: str) -> str:
        """``term`` (held by no chunk) respelled as :func:`~hybridsag.lexical.spelling.respell`
        finds it, remembered until
        the index changes (:meth:`_title_aliases` reads the change first)."""
        with self._alias_lock:
            if term in self._respelled:
                return self._respelled[term] or term
        found: str | None = None
        reach = spelling_reach(term)
        if reach:
            try:
                near = self.engine.near_terms(term[0], len(term) - reach, len(term) + reach)
            except self.store.errors as exc:
                raise LexicalError(f"listing the lexical vocabulary failed: {exc}") from exc
            found = respell(term, near)
        with self._alias_lock:
            if len(self._respelled) >= _RESPELL_CACHE:
                self._respelled.clear()
            self._respelled[term] = found
        return found or term

    def doc_freqs(self, terms: Sequence[str]) -> dict[str, int]:
        """Number of chunks holding each term (all statuses), keyed by the term as given. The
        engines hold terms with diacritics removed (:data:`~hybridsag.lexical.tokenizer.FTS_TOKENIZE`),
        so the lookup folds them the same way."""
        if not terms:
            return {}
        keys = {t: strip_diacritics(t) for t in dict.fromkeys(terms)}
        try:
            found = self.engine.vocabulary(list(dict.fromkeys(keys.values())))
        except self.store.errors as exc:
            raise LexicalError(f"reading the lexical vocabulary failed: {exc}") from exc
        return {t: found[k] for t, k in keys.items() if found.get(k)}

    def scoped_doc_freqs(
        self, terms: Sequence[str], filters: Filters
    ) -> tuple[dict[str, int], int]:
        """:meth:`doc_freqs` and the chunk count over the chunks ``filters`` lets through
        (current versions only): statistics of a tenant's own documents, which say nothing
        about another tenant's. One count per term: meant for a query's few terms."""
        scope = FilterScope.of(filters, self.store.backend)
        t = self.engine.tables
        try:
            total = self.reads.count_chunks(scope.sql, scope.params)
            out: dict[str, int] = {}
            for term in dict.fromkeys(terms):
                match = self.engine.term_match(term)
                if not match:
                    continue
                n = self.reads.count_matching(
                    t.chunks, t.id, t.matches, match, scope.sql, scope.params
                )
                if n:
                    out[term] = n
        except self.store.errors as exc:
            raise LexicalError(f"counting terms within the filters failed: {exc}") from exc
        return out, total

    def _title_aliases(self) -> dict[str, set[str]]:
        conn = self.store.connection()
        key = self.reads.resources_stamp()
        with self._alias_lock:
            if key != self._alias_key:
                aliases: dict[str, set[str]] = {}
                for (title,) in conn.execute(f"SELECT title FROM {self.engine.tables.titles}"):
                    for token in title.split():
                        folded = fold_term(token)
                        if folded != token:
                            aliases.setdefault(folded, set()).add(token)
                self._alias, self._alias_key = aliases, key
                self._respelled = {}
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
        return self.search_many(
            [LexicalQuery(tuple(terms), must)], limit=limit, filters=filters, path=path
        )[0]

    def search_many(
        self,
        queries: Sequence[LexicalQuery],
        *,
        limit: int,
        filters: Filters,
        path: str = "bm25",
    ) -> list[list[Hit]]:
        """:meth:`search` of each query, asked of the engine together
        (:meth:`LexicalEngine.rank_chunks`) inside one read transaction of the store. Each
        ranking starts ``max(2 limit, limit + 20)`` deep; one that the filters left short of
        ``limit`` rows is asked again four times deeper, unless the engine's ranking was
        complete (no deeper rows) or already as deep as the index."""
        out: list[list[Hit]] = [[] for _ in queries]
        todo = [i for i, q in enumerate(queries) if build_match(q.terms, must=q.must)]
        if limit < 1 or not todo:
            return out
        scope = FilterScope.of(filters, self.store.backend)
        depth = first_depth(limit)
        total = None
        try:
            with self.store.snapshot():  # one state of the index answers every query
                while todo:
                    ranked = self.engine.rank_chunks(
                        [queries[i] for i in todo], scope, depth, limit
                    )
                    short = []
                    for i, r in zip(todo, ranked, strict=True):
                        out[i] = _hits(r.rows, path)
                        if len(r.rows) < limit and not r.complete:
                            short.append(i)
                    if not short:
                        break
                    if total is None:
                        total = self.engine.total_chunks()
                    if depth >= total:
                        break
                    depth *= 4
                    todo = short
        except self.store.errors as exc:
            first = build_match(queries[todo[0]].terms, must=queries[todo[0]].must)
            what = f"{first!r:.200}" + (f" (and {len(todo) - 1} more)" if len(todo) > 1 else "")
            raise LexicalError(f"lexical search for {what} failed: {exc}") from exc
        return out

    def search_titles(
        self, terms: Sequence[str], *, limit: int, filters: Filters
    ) -> list[tuple[str, float]]:
        """``(resource_id, bm25 score)`` of the resources whose title matches quoted-OR
        ``terms``, best first (the score is FTS5's, lower-is-better)."""
        match = build_match(terms)
        if not match or limit < 1:
            return []
        scope = FilterScope.of(filters, self.store.backend)
        try:
            rows = self.engine.title_rows(terms, scope, limit)
        except self.store.errors as exc:
            raise LexicalError(f"title search failed: {exc}") from exc
        return [(rid, float(score)) for rid, score in rows]

    def best_chunks(self, resource_ids: Sequence[str], terms: Sequence[str]) -> dict[str, str]:
        """The best-matching chunk (current version) of each resource for ``terms``; resources
        with no matching chunk are absent."""
        match = build_match(terms)
        if not match or not resource_ids:
            return {}
        best: dict[str, str] = {}
        try:
            rows = self.engine.best_chunk_rows(resource_ids, terms)
        except self.store.errors as exc:
            raise LexicalError(f"title path chunk lookup failed: {exc}") from exc
        for rid, chunk_id in rows:
            best.setdefault(rid, chunk_id)
        return best

    # -- tokens of a row (pure: call them before taking the write lock) ------------------------

    def chunk_tokens(self, title: str, heading: str, body: str) -> ChunkTokens:
        """The tokens of one chunk's row."""
        tok = self.tokenizer.index_text
        return ChunkTokens(tok(title), tok(heading), tok(body))

    def title_tokens(self, title: str) -> str:
        """The tokens of one resource's title row."""
        return self.tokenizer.index_text(title)



def bind_reads(index: Any, queries: LexicalQueries) -> None:
    """Give ``index`` (a backend of :class:`~hybridsag.lexical.contract.LexicalIndex`) the reads
    every backend answers with the query skeleton it holds: ``query_terms``, ``search``,
    ``search_many``, ``search_titles``, ``best_chunks``, ``doc_freqs``, ``chunk_tokens`` and
    ``title_tokens`` become ``queries``' own bound methods. Written once here instead of as the
    same forwarding methods in each backend, and composed, not inherited (no backend has a base
    class): what differs between engines is the
    :class:`~hybridsag.lexical.contract.LexicalEngine` that ``queries`` was given.
    ``total_chunks`` and ``scoped_doc_freqs`` stay each backend's own (they differ).

    Example: ``bind_reads(self, self._queries)`` at the end of a backend's constructor.
    """
    index.query_terms = queries.query_terms
    index.search = queries.search
    index.search_many = queries.search_many
    index.search_titles = queries.search_titles
    index.best_chunks = queries.best_chunks
    index.doc_freqs = queries.doc_freqs
    index.chunk_tokens = queries.chunk_tokens
    index.title_tokens = queries.title_tokens

def near_terms_in(
    conn: Any, table: str, prefix: str, shortest: int, longest: int
) -> dict[str, int]:
    """:meth:`LexicalEngine.near_terms` from a ``(term, doc)`` table ordered by term (FTS5's
    ``fts5vocab`` row view, the Milvus engine's ``mlex_vocab``): the rows from ``prefix`` up to
    the next prefix."""
    after = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    rows = conn.execute(
        f"SELECT term, doc FROM {table} WHERE term >= ? AND term < ? "
        "AND length(term) BETWEEN ? AND ?",
        [prefix, after, shortest, longest],
    )
    return {str(term): int(doc) for term, doc in rows if doc}


def count_store_chunks(store: Store) -> int:
    """Chunk rows in the store (the N of an engine that keeps no count of its own)."""
    return IndexReads(store).count_chunks()
