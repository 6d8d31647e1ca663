"""The lexical index: the one owner of every FTS5 statement, behind the ``LexicalIndex`` protocol.

The contract (:class:`LexicalIndex`: reads, writes, the reconciler's audit, describe, close) is
implemented by :class:`StoreLexicalIndex`, whose rows live in the store's own database, and by
:class:`~hybridsag.lexical.milvus_fulltext.MilvusLexicalIndex`. Neither is a parent of the other: each
holds the query skeleton (:class:`LexicalQueries`: term analysis, the refilling search, titles,
best chunks) and answers the few statements that differ (:class:`LexicalEngine`).

With the store on PostgreSQL the index lives in PostgreSQL as well (:class:`PostgresStatements`:
tsvector rows ranked by the BM25 of FTS5, so both engines rank alike); what follows describes
FTS5 (:class:`Fts5Statements`), and PostgreSQL keeps every part of it but the tables and the
ranking statement.

Every statement that creates, reads or writes the FTS5 tables lives here: the write path, the
title path and the reconciler call these methods instead of writing SQL of their own, so how a
row is built, searched or deleted is written once. What a statement reads of the record tables
(``chunks``, ``resources``: is a ranked chunk current, does its resource pass the filters) is
the records' (:class:`~hybridsag.records.index_reads.IndexReads`): an engine hands its ranking
in as a subquery and the records join it, in the same one statement. The tables:

``chunks_fts(title, heading, body)``
    one row per chunk (rowid = ``chunks.id``): the resource title, the heading path and the
    chunk text, each as space-joined :class:`~hybridsag.lexical.tokenizer.Tokenizer` tokens;
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
subquery when filters leave too few rows, unless the ranking ended before the depth it was asked
for (then nothing deeper exists). Several queries (:meth:`LexicalIndex.search_many`: SAG2's
next-hop look-ups) are ranked in one statement, a ``UNION ALL`` of their rankings, inside one
read transaction. Where the query's terms hold many postings
(``lexical.prune``), that top comes from :mod:`hybridsag.lexical.fts5_topk` instead: the same rows and
scores, with the common terms' postings never walked. The statements are built by pure functions
(:func:`build_tops_sql`, :func:`build_title_search_sql`, :func:`build_best_chunks_sql`) that
tests assert on.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from hybridsag.errors import LexicalError
from hybridsag.lexical.fts5_topk import BM25_B, BM25_K1, Fts5TopK, strip_diacritics
from hybridsag.fusion.types import Hit
from hybridsag.settings import LexicalSettings
from hybridsag.records.index_reads import (
    IndexReads,
    RankedRow,
    best_chunks_sql,
    ranked_chunks_sql,
    ranked_titles_sql,
)
from hybridsag.records.store import Filters, Store
from hybridsag.lexical.spelling import respell, spelling_reach
from hybridsag.lexical.tokenizer import FTS_TOKENIZE, Tokenizer

__all__ = [
    "FTS_MIGRATIONS",
    "ChunkTokens",
    "Fts5Statements",
    "LexicalEngine",
    "LexicalIndex",
    "LexicalQueries",
    "LexicalQuery",
    "LexicalTables",
    "PG_LEXICAL_MIGRATIONS",
    "PostgresStatements",
    "Ranked",
    "StoreLexicalIndex",
    "StoreStatements",
    "build_best_chunks_sql",
    "build_match",
    "build_pg_bm25_sql",
    "build_tops_sql",
    "build_title_search_sql",
    "build_tsquery",
    "build_tsvector",
    "count_store_chunks",
    "fold_term",
    "near_terms_in",
    "quote_term",
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


#: the deepest top the bounded ranking (:mod:`hybridsag.lexical.fts5_topk`) is asked for; a deeper
#: refill (filters left too few rows) runs the plain statement
_PRUNE_MAX_DEPTH = 2000


def _join_top(
    reads: IndexReads,
    top: Sequence[tuple[int, float]],
    filter_sql: str,
    params: list[object],
    limit: int,
) -> list[Any]:
    """``(chunk_id, resource_id, score)`` of the rows of a top already ranked that the filters
    let through, by score, then chunk row, at most ``limit``."""
    scores = dict(top)
    rows = sorted(
        reads.visible_chunks(scores, filter_sql, params).values(),
        key=lambda r: (scores[r.rowid], r.rowid),
    )
    return [(r.chunk_id, r.resource_key, scores[r.rowid]) for r in rows[:limit]]


def _rankings(
    rows: Iterable[RankedRow], positions: Sequence[int], depth: int, limit: int
) -> dict[int, Ranked]:
    """The :class:`Ranked` of each query of a ranking read (:meth:`~hybridsag.records.
    index_reads.IndexReads.ranked_chunks`), keyed by ``positions[row.query]``: its visible
    rows by score, then chunk row, at most ``limit``, complete when the ranking held fewer
    than ``depth`` rows."""
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


@dataclass(frozen=True, slots=True)
class ChunkTokens:
    """What one ``chunks_fts`` row holds: the space-joined tokens of the resource title, the
    heading path and the chunk text (built by :meth:`LexicalQueries.chunk_tokens`)."""

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
    """The statements that differ between lexical backends; :class:`LexicalQueries` runs the
    rest of every query on them. Each raises the store's errors (``Store.errors``) or
    :class:`~hybridsag.errors.LexicalError`."""

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
        (:meth:`LexicalQueries.query_terms`). An engine that cannot list its terms in a range
        returns ``{}``, and its queries are not respelled."""
        ...

    def term_match(self, term: str) -> str:
        """The expression of one term, bound as ``?`` in ``tables.matches``."""
        ...

    def rank_chunks(
        self,
        queries: Sequence[LexicalQuery],
        filters: Filters,
        filter_sql: str,
        params: list[object],
        depth: int,
        limit: int,
    ) -> list[Ranked]:
        """Each query's chunk ranking (quoted-OR ``terms``, all holding ``must`` when given; no
        query is empty): at most ``limit`` rows of its best ``depth`` that ``filter_sql`` (a
        fragment over the resources ``r``, with ``params``) lets through. ``filters`` is what
        ``filter_sql`` is made from (for an engine that filters in its own language). An engine
        that can rank several queries in one call does; the others rank them one by one."""
        ...

    def title_rows(
        self,
        terms: Sequence[str],
        filter_sql: str,
        params: list[object],
        limit: int,
        filters: Filters,
    ) -> list[Any]:
        """``(resource key, score)`` rows of the titles matching ``terms``, best (lowest)
        first."""
        ...

    def best_chunk_rows(self, resource_ids: Sequence[str], terms: Sequence[str]) -> list[Any]:
        """``(resource key, chunk_id)`` rows of these resources' current chunks matching
        ``terms``, best first."""
        ...


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
        filter_sql, params = filters.sql("r", self.store.backend)
        t = self.engine.tables
        try:
            total = self.reads.count_chunks(filter_sql, params)
            out: dict[str, int] = {}
            for term in dict.fromkeys(terms):
                match = self.engine.term_match(term)
                if not match:
                    continue
                n = self.reads.count_matching(t.chunks, t.id, t.matches, match, filter_sql, params)
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
        filter_sql, filter_params = filters.sql("r", self.store.backend)
        depth = max(limit * 2, limit + 20)
        total = None
        try:
            with self.store.snapshot():  # one state of the index answers every query
                while todo:
                    ranked = self.engine.rank_chunks(
                        [queries[i] for i in todo], filters, filter_sql, filter_params,
                        depth, limit,
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
        filter_sql, params = filters.sql("r", self.store.backend)
        try:
            rows = self.engine.title_rows(terms, filter_sql, params, limit, filters)
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


class StoreStatements(LexicalEngine, Protocol):
    """The statements of a lexical index whose rows live in the store's own database (FTS5 on
    SQLite, tsvector rows on PostgreSQL): the :class:`LexicalEngine` and how rows are added."""

    kind: str
    migrations: tuple[tuple[str, str], ...]

    def add_chunks(self, conn: Any, rows: Iterable[tuple[int, ChunkTokens]]) -> None: ...

    def add_titles(self, conn: Any, rows: Iterable[tuple[int, str]]) -> None: ...


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
        self,
        queries: Sequence[LexicalQuery],
        filters: Filters,
        filter_sql: str,
        params: list[object],
        depth: int,
        limit: int,
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
            if s.prune and depth <= _PRUNE_MAX_DEPTH:
                stats = self._topk.stats(conn)
                for i, q in enumerate(queries):
                    top = self._topk.top(
                        conn, terms=q.terms, must=q.must, weights=weights, k=depth,
                        min_postings=s.prune_min_postings, build_match=build_match, stats=stats,
                    )
                    if top is not None:  # exactly ``depth`` rows: deeper ones may exist
                        out[i] = Ranked(
                            _join_top(self._reads, top, filter_sql, params, limit), False
                        )
            plain = [i for i, r in enumerate(out) if r is None]
            if plain:
                args: list[object] = []
                for i in plain:
                    args += [*weights, build_match(queries[i].terms, must=queries[i].must), depth]
                rows = self._reads.ranked_chunks(_fts5_tops(len(plain)), args, filter_sql, params)
                for i, ranked in _rankings(rows, plain, depth, limit).items():
                    out[i] = ranked
        return [r for r in out if r is not None]

    def title_rows(
        self,
        terms: Sequence[str],
        filter_sql: str,
        params: list[object],
        limit: int,
        filters: Filters,
    ) -> list[Any]:
        return self._reads.ranked_titles(
            _FTS5_TITLES, [build_match(terms)], filter_sql, params, limit
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


class StoreLexicalIndex:
    """:class:`LexicalIndex` in the store's own database: FTS5 on SQLite
    (:class:`Fts5Statements`), tsvector rows on PostgreSQL (:class:`PostgresStatements`), as
    the store's database is. It holds the query skeleton (:class:`LexicalQueries`) and the
    engine's statements; the row statements below are written once for both.

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
            PostgresStatements(store, settings) if store.is_postgres
            else Fts5Statements(store, settings)
        )
        store.migrate(engine.migrations)
        self._engine = engine
        self._reads = IndexReads(store)
        self._queries = LexicalQueries(
            store, tokenizer, engine, max_terms=max_terms, spelling=settings.spelling
        )

    # -- reads (the query skeleton's) -----------------------------------------------------------

    def query_terms(self, query: str) -> list[str]:
        return self._queries.query_terms(query)

    def search(
        self,
        terms: Sequence[str],
        *,
        limit: int,
        filters: Filters,
        must: str | None = None,
        path: str = "bm25",
    ) -> list[Hit]:
        return self._queries.search(terms, limit=limit, filters=filters, must=must, path=path)

    def search_many(
        self,
        queries: Sequence[LexicalQuery],
        *,
        limit: int,
        filters: Filters,
        path: str = "bm25",
    ) -> list[list[Hit]]:
        return self._queries.search_many(queries, limit=limit, filters=filters, path=path)

    def search_titles(
        self, terms: Sequence[str], *, limit: int, filters: Filters
    ) -> list[tuple[str, float]]:
        return self._queries.search_titles(terms, limit=limit, filters=filters)

    def best_chunks(self, resource_ids: Sequence[str], terms: Sequence[str]) -> dict[str, str]:
        return self._queries.best_chunks(resource_ids, terms)

    def doc_freqs(self, terms: Sequence[str]) -> dict[str, int]:
        return self._queries.doc_freqs(terms)

    def total_chunks(self) -> int:
        return self._engine.total_chunks()

    def scoped_doc_freqs(
        self, terms: Sequence[str], filters: Filters
    ) -> tuple[dict[str, int], int]:
        return self._queries.scoped_doc_freqs(terms, filters)

    # -- rows (inside the caller's write transaction) -------------------------------------------

    def chunk_tokens(self, title: str, heading: str, body: str) -> ChunkTokens:
        return self._queries.chunk_tokens(title, heading, body)

    def title_tokens(self, title: str) -> str:
        return self._queries.title_tokens(title)

    def add_chunks(self, conn: Any, rows: Iterable[tuple[int, ChunkTokens]]) -> None:
        self._engine.add_chunks(conn, rows)

    def add_titles(self, conn: Any, rows: Iterable[tuple[int, str]]) -> None:
        self._engine.add_titles(conn, rows)

    def remove_chunks(self, conn: Any, rowids: Iterable[int]) -> None:
        """Remove the rows of these ``chunks.id`` values (absent ones are ignored)."""
        t = self._engine.tables
        conn.executemany(
            f"DELETE FROM {t.chunks} WHERE {t.id} = ?", [(r,) for r in rowids]
        )

    def remove_resource_chunks(self, conn: Any, resource_id: str) -> None:
        """Remove the rows of every chunk row of ``resource_id`` (all versions)."""
        self.remove_chunks(conn, self._reads.chunk_rowids(conn, resource_id))

    def remove_orphan_chunk(self, conn: Any, rowid: int) -> int:
        """Remove the row ``rowid`` if no chunk row has that id any more; returns 1 or 0."""
        if self._reads.has_chunk_row(conn, rowid):
            return 0
        t = self._engine.tables
        cur = conn.execute(f"DELETE FROM {t.chunks} WHERE {t.id} = ?", (rowid,))
        return max(cur.rowcount, 0)

    def has_chunk(self, conn: Any, rowid: int) -> bool:
        """Whether chunk row ``rowid`` is indexed."""
        t = self._engine.tables
        row = conn.execute(
            f"SELECT 1 FROM {t.chunks} WHERE {t.id} = ?", (rowid,)
        ).fetchone()
        return row is not None

    def remove_titles(self, conn: Any, rowids: Iterable[int]) -> None:
        """Remove the title rows of these ``resources.id`` values."""
        t = self._engine.tables
        conn.executemany(
            f"DELETE FROM {t.titles} WHERE {t.id} = ?", [(r,) for r in rowids]
        )

    def remove_resource_title(self, conn: Any, resource_id: str) -> None:
        """Remove the title row of ``resource_id``."""
        rowid = self._reads.resource_rowid(conn, resource_id)
        if rowid is not None:
            self.remove_titles(conn, [rowid])

    def remove_orphan_title(self, conn: Any, rowid: int) -> int:
        """Remove the title row ``rowid`` if no resource has that id any more; returns 1 or 0."""
        if self._reads.has_resource_row(conn, rowid):
            return 0
        t = self._engine.tables
        cur = conn.execute(f"DELETE FROM {t.titles} WHERE {t.id} = ?", (rowid,))
        return max(cur.rowcount, 0)

    def has_title(self, conn: Any, rowid: int) -> bool:
        """Whether resource row ``rowid`` has its title row."""
        t = self._engine.tables
        row = conn.execute(
            f"SELECT 1 FROM {t.titles} WHERE {t.id} = ?", (rowid,)
        ).fetchone()
        return row is not None

    def describe(self) -> str:
        """See :meth:`LexicalIndex.describe`: ``FTS5 in the store, 120 chunks``."""
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


# -- PostgreSQL ---------------------------------------------------------------------------------

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
    (:class:`StoreStatements`: rows written in the caller's transaction like the FTS5 rows).

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
        self,
        queries: Sequence[LexicalQuery],
        filters: Filters,
        filter_sql: str,
        params: list[object],
        depth: int,
        limit: int,
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
                top, [lexemes, idf, *weights, query, depth], filter_sql, params
            )
            out.append(_rankings(rows, [0], depth, limit)[0])
        return out

    def title_rows(
        self,
        terms: Sequence[str],
        filter_sql: str,
        params: list[object],
        limit: int,
        filters: Filters,
    ) -> list[Any]:
        lexemes, idf = self._idf("titles_lex", terms)
        return self._reads.ranked_titles(
            build_pg_bm25_sql("titles_lex"),
            [lexemes, idf, 1.0, 1.0, 1.0, build_tsquery(terms)],
            filter_sql,
            params,
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
