"""The lexical index on tantivy (``lexical.backend = "tantivy"``): an engine built for a BM25 top k.

Two tantivy indexes under ``<data_dir>/tantivy`` (``chunks`` and ``titles``) hold the rows FTS5
would hold, analysed alike: each row's text is the index tokenizer's tokens
(:class:`~hybridsag.lexical.tokenizer.Tokenizer`: NFKC, jieba search mode, lowercased), folded
as FTS5's ``remove_diacritics 2`` folds them, joined by spaces and split again by a whitespace
tokenizer with a lowercase filter, so both engines index the same terms. The column weights of
``lexical`` (title, heading, body) are kept by repeating each part that many times (rounded), as
the Milvus backend keeps them; the weights an index was built with are recorded beside it
(``settings.json``) and another set is refused (re-index into a new data dir).

Why tantivy: a search is a ``Should`` query of the terms (a must term: ``Must(term) AND
Must(Should(terms))``) collected into a top ``k`` without a count, which tantivy answers with
block-max WAND, so the common terms' postings are skipped block by block instead of scored;
its document frequencies and row count come from the index's own term dictionary
(``Searcher.doc_freq``, ``num_docs``), with no walk over postings for them. (Ding and Suel,
"Faster top-k document retrieval using block-max indexes", SIGIR 2011.) BM25 is tantivy's,
``k1 = 1.2``, ``b = 0.75`` (FTS5's too), with each term boosted from Lucene's IDF to FTS5's
(:meth:`_Side.scored_term`), so both engines weigh a common term alike; what still differs is
the row length (tantivy keeps it as a one-byte code, and the repeated title counts in it).
Document frequencies count a deleted row until tantivy merges its segment away (FTS5's are
exact).

The store stays the system of record: every hit is checked against the store's chunk and
resource rows (current version, status, tenant, ACL, resource ids, metadata; the filter SQL
of :class:`~hybridsag.records.store.Filters`), as the Milvus backend checks its hits; a tenant is also
a term of the row, so a tenant's search is narrowed in tantivy first. A row carries its
``chunks.id``, its chunk id's 64-bit hash (a fast field: a row under a reused id that holds
another chunk is never shown, and is found by the reconciler), its resource's store key and
tenant; a title row its ``resources.id`` and the version it was written for.

Writes run inside the store's write transaction, each call as one tantivy commit made before
the store commits (a writer is opened for the call and released after it, so any process that
holds the store's write lock can write). A tantivy failure raises
:class:`~hybridsag.errors.LexicalError`, which rolls the store back; a store commit that fails (or
a crash) after tantivy committed leaves rows the reconciler finds: :meth:`TantivyLexicalIndex.
indexed_rowids` reads the indexes, so a row of no chunk is an orphan (removed) and a chunk whose
row is missing or holds another chunk is missing (re-indexed). The title tokens are also kept in
the store (``tlex_titles``, written in the same transaction), for the title-alias fix.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from hybridsag.errors import ConfigError, LexicalError
from hybridsag.lexical.fts5_topk import strip_diacritics
from hybridsag.lexical.contract import (
    ChunkTokens,
    FilterScope,
    LexicalQuery,
    LexicalTables,
    Ranked,
)
from hybridsag.lexical.queries import LexicalQueries, bind_reads, deepening
from hybridsag.lexical.tokenizer import Tokenizer
from hybridsag.records.index_reads import IndexReads
from hybridsag.records.filters import Filters
from hybridsag.records.store import Store
from hybridsag.settings import LexicalSettings

__all__ = ["TANTIVY_LEXICAL_MIGRATIONS", "TantivyLexicalIndex", "chunk_hash", "compose_tokens"]

TANTIVY_LEXICAL_MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "tlex_0001_titles",
        "CREATE TABLE IF NOT EXISTS tlex_titles(id INTEGER PRIMARY KEY, title TEXT NOT NULL);",
    ),
)

#: the tantivy tokenizer name of the analysed fields: whitespace, lowercased
ANALYZER = "hybridsag_ws"
#: the writer's memory budget (tantivy wants at least 15 MB a thread), one indexing thread
WRITER_HEAP = 64_000_000
#: the deepest top k one search asks tantivy for (a filter that keeps fewer rows than this
#: leaves the rest to the store's check, as FTS5's refill does)
MAX_DEPTH = 1_000_000

F_ID, F_HASH, F_RESOURCE, F_TENANT, F_TEXT, F_VERSION = (
    "id", "chunk_hash", "resource", "tenant", "text", "version"
)


def chunk_hash(chunk_id: str) -> int:
    """A chunk id's signed 64-bit hash (blake2b), kept as a fast field of its row."""
    digest = hashlib.blake2b(chunk_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def compose_tokens(parts: Sequence[tuple[str, float]]) -> str:
    """One analysed field from weighted token strings: each part's tokens repeated
    ``round(weight)`` times, folded as FTS5 folds them, space-joined.

    >>> compose_tokens([("zürich", 2.0), ("", 2.0), ("a café", 1.0)])
    'zurich zurich a cafe'
    """
    # folding a space-joined string folds each token alike (a space has no marks to drop)
    out = [
        folded
        for tokens, weight in parts
        if tokens
        for folded in [strip_diacritics(" ".join(tokens.split()))] * max(0, round(weight))
    ]
    return " ".join(out)


_R = TypeVar("_R")


def _current(
    found: Sequence[tuple[float, list[Any]]],
    rows: Mapping[int, _R],
    holds: Callable[[_R, int], bool],
) -> list[tuple[float, _R]]:
    """The hits ``found`` (``(score, [id, stamp])`` of :meth:`_Side.top`) whose store row in
    ``rows`` is the one the hit was written for (``holds(row, stamp)``: the same chunk, the
    same version), as ``(score on FTS5's scale, row)`` in FTS5's order: score, then row id. A
    hit of a deleted, replaced or filtered-out row is dropped."""
    kept = []
    for score, (rowid, stamp) in found:
        row = rows.get(int(rowid))
        if row is not None and holds(row, int(stamp)):
            kept.append((-score, int(rowid), row))
    kept.sort(key=lambda r: (r[0], r[1]))
    return [(s, row) for s, _id, row in kept]


def _same_chunk(row: Any, digest: int) -> bool:
    """Whether a tantivy row of ``digest`` holds the chunk of store row ``row`` (not another
    one under a reused id)."""
    return chunk_hash(row.chunk_id) == digest


def _owner_fields(row: Any) -> dict[str, str]:
    """The resource (store key) and tenant fields of the row of a store row ``row`` (a chunk's
    or a resource's; None: a row of no store row, written with empty ones)."""
    if row is None:
        return {F_RESOURCE: "", F_TENANT: ""}
    return {F_RESOURCE: str(row.resource_key), F_TENANT: str(row.tenant or "")}


def _load_tantivy() -> Any:
    try:
        import tantivy
    except ImportError as exc:
        raise ConfigError(
            "lexical.backend = 'tantivy' needs the tantivy package: pip install "
            "'hybridsag[tantivy]' (or keep lexical.backend = 'fts5')"
        ) from exc
    return tantivy


class _Side:
    """One tantivy index (chunks or titles) under ``folder``: opened on first use, its reader
    reloaded when another commit changed it."""

    def __init__(self, tantivy: Any, folder: Path, kind: str) -> None:
        self.t = tantivy
        self.folder = folder
        self.kind = kind
        sb = tantivy.SchemaBuilder()
        sb.add_integer_field(F_ID, stored=True, indexed=True, fast=True)
        if kind == "chunks":
            sb.add_integer_field(F_HASH, stored=False, indexed=False, fast=True)
        else:
            sb.add_integer_field(F_VERSION, stored=False, indexed=False, fast=True)
        sb.add_text_field(F_RESOURCE, stored=False, tokenizer_name="raw", index_option="basic")
        sb.add_text_field(F_TENANT, stored=False, tokenizer_name="raw", index_option="basic")
        sb.add_text_field(F_TEXT, stored=False, tokenizer_name=ANALYZER, index_option="freq")
        self.schema = sb.build()
        folder.mkdir(parents=True, exist_ok=True)
        self.index = tantivy.Index(self.schema, path=str(folder))
        self.index.register_tokenizer(
            ANALYZER,
            tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace())
            .filter(tantivy.Filter.lowercase())
            .build(),
        )
        self._seen: tuple[int, int] | None = None
        self._lock = threading.Lock()

    def searcher(self) -> Any:
        """A searcher of the last commit (the reader reloaded when ``meta.json`` changed: a
        commit of this process or of another)."""
        try:
            st = os.stat(self.folder / "meta.json")
            seen = (st.st_mtime_ns, st.st_size)
        except OSError:
            seen = None
        if seen != self._seen:
            with self._lock:
                self.index.reload()
                self._seen = seen
        return self.index.searcher()

    def term(self, field: str, value: object) -> Any:
        option = "freq" if field == F_TEXT else "basic"
        return self.t.Query.term_query(self.schema, field, value, index_option=option)

    def scored_term(self, searcher: Any, term: str) -> Any:
        """The term's query on the text, its score carried to FTS5's IDF: tantivy scores
        ``idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))`` with Lucene's
        ``idf = ln(1 + (N - n + 0.5) / (n + 0.5))``; a boost of ``fts5_idf / idf`` makes it
        FTS5's ``ln((N - n + 0.5) / (n + 0.5))``, floored at 1e-6 (a term in more than half the
        rows adds almost nothing). ``N`` and ``n`` are the searcher's own (its live rows, the
        term's document frequency), so the boost cancels tantivy's IDF exactly."""
        query = self.term(F_TEXT, term)
        n = int(searcher.doc_freq(F_TEXT, term))
        total = int(searcher.num_docs)
        if not n or not total:
            return query
        ratio = (total - n + 0.5) / (n + 0.5)
        lucene = math.log1p(ratio)
        fts5 = math.log(ratio) if ratio > 1.0 else 0.0
        return self.t.Query.boost_query(query, max(fts5, 1e-6) / lucene)

    def text_query(self, terms: Sequence[str], must: str | None = None,
                   tenant: str | None = None, resources: Sequence[str] = ()) -> Any | None:
        """``Should`` of the folded terms, each scored with FTS5's IDF (:meth:`scored_term`);
        with ``must``, ``must AND (terms)``; narrowed to a tenant's rows and to resource keys
        when given. None when there is nothing to match."""
        folded = list(dict.fromkeys(strip_diacritics(t) for t in terms if t))
        occur = self.t.Occur
        searcher = self.searcher()
        clauses: list[tuple[Any, Any]] = []
        if must:
            clauses.append((occur.Must, self.scored_term(searcher, strip_diacritics(must))))
        if folded:
            clauses.append((occur.Must, self.t.Query.boolean_query(
                [(occur.Should, self.scored_term(searcher, t)) for t in folded])))
        if not clauses:
            return None
        if tenant is not None:
            clauses.append((occur.Must, self.term(F_TENANT, tenant)))
        if resources:
            clauses.append((occur.Must, self.t.Query.term_set_query(
                self.schema, F_RESOURCE, list(resources))))
        if len(clauses) == 1 and not must:
            return clauses[0][1]
        return self.t.Query.boolean_query(clauses)

    def top(self, query: Any, k: int, fields: Sequence[str]) -> list[tuple[float, list[Any]]]:
        """``(score, [field values])`` of the best ``k`` rows, best first (no count asked, so
        tantivy may skip blocks that cannot reach the top)."""
        searcher = self.searcher()
        hits = searcher.search(query, min(max(k, 1), MAX_DEPTH), count=False).hits
        if not hits:
            return []
        addresses = [a for _, a in hits]
        columns = [searcher.fast_field_values(f, addresses) for f in fields]
        return [(float(s), [c[i] for c in columns]) for i, (s, _a) in enumerate(hits)]

    def all_rows(self, fields: Sequence[str]) -> list[list[Any]]:
        """The field values of every live row."""
        searcher = self.searcher()
        n = searcher.num_docs
        if not n:
            return []
        hits = searcher.search(self.t.Query.all_query(), n, count=False).hits
        addresses = [a for _, a in hits]
        columns = [searcher.fast_field_values(f, addresses) for f in fields]
        return [[c[i] for c in columns] for i in range(len(addresses))]

    def put(self, what: str, rows: Sequence[tuple[int, dict[str, Any]]]) -> None:
        """Write ``rows`` (``(id, the row's other fields)`` each) as one commit
        (:meth:`write`), each replacing the row its id had."""
        doc = self.t.Document

        def write(writer: Any) -> None:
            for rowid, fields in rows:
                writer.delete_documents_by_term(F_ID, rowid)
                writer.add_document(doc(id=rowid, **fields))

        self.write(f"writing {len(rows)} {what} rows", write)

    def write(self, action: str, fn: Callable[[Any], None]) -> None:
        """Run ``fn(writer)`` and commit, as one tantivy commit (the writer released after it,
        its merges finished); LexicalError on any failure, nothing of it committed."""
        try:
            writer = self.index.writer(WRITER_HEAP, 1)
        except (ValueError, OSError, RuntimeError) as exc:
            raise LexicalError(
                f"{action} in the tantivy index {self.folder} failed: cannot open its writer "
                f"(another process writing without the store's write lock?): {exc}",
                retriable=True,
            ) from exc
        try:
            fn(writer)
            writer.commit()
        except LexicalError:
            writer.rollback()
            raise
        except Exception as exc:
            try:
                writer.rollback()
            except Exception:  # noqa: BLE001 - the first failure is the one to report
                pass
            raise LexicalError(f"{action} in the tantivy index {self.folder} failed: {exc}") from exc
        finally:
            try:
                writer.wait_merging_threads()
            except Exception:  # noqa: BLE001 - a writer that failed is dropped as it is
                pass
        with self._lock:
            self.index.reload()


class TantivyLexicalIndex:
    """:class:`~hybridsag.lexical.contract.LexicalIndex` on tantivy (see the module docstring).
    The indexes open on first use; reads are thread-safe, writes run under the store's write
    lock (one writer at a time, per call).

    It holds the query skeleton (:class:`~hybridsag.lexical.queries.LexicalQueries`, whose reads
    it answers through :func:`~hybridsag.lexical.queries.bind_reads`) and is its
    :class:`~hybridsag.lexical.contract.LexicalEngine`: tantivy ranks and counts, the store
    checks."""

    #: the store-side rows the query skeleton reads: the titles (for the title-alias fix); the
    #: chunk rows live in tantivy only (``scoped_doc_freqs`` is answered here, not by the
    #: skeleton's SQL)
    tables = LexicalTables("", "tlex_titles", "id", "")

    def __init__(
        self,
        store: Store,
        tokenizer: Tokenizer,
        settings: LexicalSettings,
        *,
        path: Path,
        max_terms: int = 80,
    ) -> None:
        self.store = store
        self.tokenizer = tokenizer
        self.settings = settings
        self.path = Path(path)
        store.migrate(TANTIVY_LEXICAL_MIGRATIONS)
        self._queries = LexicalQueries(
            store, tokenizer, self, max_terms=max_terms, spelling=settings.spelling
        )
        bind_reads(self, self._queries)
        self._weights = (settings.title_weight, settings.heading_weight, settings.body_weight)
        self._open_lock = threading.Lock()
        self._sides: tuple[_Side, _Side] | None = None
        # the hits' chunk rows drive the join to their resources (IndexReads.visible_chunks:
        # left to itself SQLite's planner may start from every resource a filter selects,
        # about 140 ms a search at 100k passages, against a few ms)
        self._reads = IndexReads(store)

    def __repr__(self) -> str:
        return f"TantivyLexicalIndex({str(self.path)!r})"

    # -- plumbing ---------------------------------------------------------------------------

    def _open(self) -> tuple[_Side, _Side]:
        if self._sides is not None:
            return self._sides
        with self._open_lock:
            if self._sides is None:
                tantivy = _load_tantivy()
                self._check_settings()
                try:
                    self._sides = (
                        _Side(tantivy, self.path / "chunks", "chunks"),
                        _Side(tantivy, self.path / "titles", "titles"),
                    )
                except (ValueError, OSError, RuntimeError) as exc:
                    raise LexicalError(f"opening the tantivy index at {self.path} failed: {exc}") from exc
            return self._sides

    def _check_settings(self) -> None:
        """Record the column weights the rows are written with; refuse other ones (the rows
        hold the weights as repeated tokens, so they cannot change in place)."""
        record = self.path / "settings.json"
        want = {"title_weight": self._weights[0], "heading_weight": self._weights[1],
                "body_weight": self._weights[2], "analyzer": ANALYZER}
        if record.is_file():
            have = json.loads(record.read_text("utf-8"))
            if have != want:
                raise ConfigError(
                    f"the tantivy index at {self.path} was built with {have}, these settings "
                    f"ask for {want}: put the old values back, or index into a new data dir"
                )
            return
        self.path.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(want, sort_keys=True) + "\n", "utf-8")

    @property
    def _chunks(self) -> _Side:
        return self._open()[0]

    @property
    def _titles(self) -> _Side:
        return self._open()[1]

    def _read(self, action: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except (LexicalError, ConfigError):
            raise
        except (ValueError, OSError, RuntimeError) as exc:
            raise LexicalError(f"{action} in the tantivy index at {self.path} failed: {exc}") from exc

    def describe(self) -> str:
        """One line for ``doctor``: ``tantivy at <path>: 120 chunks, 40 titles``."""
        chunks = self._read("counting", lambda: self._chunks.searcher().num_docs)
        titles = self._read("counting", lambda: self._titles.searcher().num_docs)
        return f"tantivy at {self.path}: {chunks} chunks, {titles} titles"

    def close(self) -> None:
        """Drop the open indexes (nothing is held between writes); safe to call twice."""
        with self._open_lock:
            self._sides = None

    def flush(self) -> None:
        """Nothing to seal: every write call is a commit whose merges finished."""

    # -- reads (the query skeleton's are bound by bind_reads) ----------------------------------

    def scoped_doc_freqs(
        self, terms: Sequence[str], filters: Filters
    ) -> tuple[dict[str, int], int]:
        """:meth:`doc_freqs` and the chunk count over the chunks ``filters`` lets through
        (current versions only): each term's rows (narrowed to the tenant in tantivy) counted
        in the store. One walk of a term's rows each: meant for a query's few terms."""
        scope = FilterScope.of(filters, self.store.backend)
        try:
            total = self._reads.count_chunks(scope.sql, scope.params)
            out: dict[str, int] = {}
            side = self._chunks
            for term in dict.fromkeys(terms):
                query = side.text_query([term], tenant=filters.tenant)
                if query is None:
                    continue
                n_rows = side.searcher().doc_freq(F_TEXT, strip_diacritics(term))
                if not n_rows:
                    continue
                rows = self._read("counting a term", lambda q=query, n=n_rows: side.top(
                    q, n, [F_ID, F_HASH]))
                hashes = {int(v[0]): int(v[1]) for _s, v in rows}
                current = self._reads.visible_chunks(hashes, scope.sql, scope.params)
                n = sum(
                    1 for rowid, row in current.items() if chunk_hash(row.chunk_id) == hashes[rowid]
                )
                if n:
                    out[term] = n
        except self.store.errors as exc:
            raise LexicalError(f"counting terms within the filters failed: {exc}") from exc
        return out, total

    # -- the engine: vocabulary -----------------------------------------------------------------

    def total_chunks(self) -> int:
        """Live chunk rows in the index (tantivy keeps the count)."""
        return int(self._read("counting", lambda: self._chunks.searcher().num_docs))

    def vocabulary(self, lexemes: list[str]) -> dict[str, int]:
        """Each lexeme's document frequency from tantivy's term dictionary (no postings walk)."""
        def count() -> dict[str, int]:
            searcher = self._chunks.searcher()
            got = {x: int(searcher.doc_freq(F_TEXT, x)) for x in lexemes if x}
            return {x: n for x, n in got.items() if n > 0}

        return self._read("reading document frequencies", count)

    def near_terms(self, prefix: str, shortest: int, longest: int) -> dict[str, int]:
        """None: tantivy's Python binding does not walk its term dictionary by range, so
        queries on this engine are not respelled."""
        return {}

    def term_match(self, term: str) -> str:
        return strip_diacritics(term)

    # -- the engine: search ---------------------------------------------------------------------

    def rank_chunks(
        self, queries: Sequence[LexicalQuery], scope: FilterScope, depth: int, limit: int
    ) -> list[Ranked]:
        """See :meth:`~hybridsag.lexical.contract.LexicalEngine.rank_chunks`: one tantivy top
        ``depth`` a query, its hits checked against the store; complete when tantivy had fewer
        rows than asked."""
        side = self._chunks
        out = []
        for q in queries:
            query = side.text_query(q.terms, must=q.must, tenant=scope.filters.tenant)
            if query is None:
                out.append(Ranked([], True))
                continue
            found = self._read(
                "BM25 search", lambda query=query: side.top(query, depth, [F_ID, F_HASH])
            )
            visible = self._reads.visible_chunks(
                [int(v[0]) for _s, v in found], scope.sql, scope.params
            )
            kept = _current(found, visible, _same_chunk)[:limit]
            shown = [(row.chunk_id, row.resource_key, s) for s, row in kept]
            out.append(Ranked(shown, len(found) < depth))
        return out

    def title_rows(self, terms: Sequence[str], scope: FilterScope, limit: int) -> list[Any]:
        """Tantivy's top of the titles, its hits checked against the store, deepened while the
        filters leave fewer than ``limit`` (:func:`~hybridsag.lexical.queries.deepening`)."""
        side = self._titles
        query = side.text_query(terms, tenant=scope.filters.tenant)
        if query is None:
            return []

        def read(depth: int) -> tuple[list[Any], int]:
            found = self._read("title search", lambda: side.top(query, depth, [F_ID, F_VERSION]))
            visible = self._reads.visible_titles(
                [int(v[0]) for _s, v in found], scope.sql, scope.params
            )
            kept = _current(found, visible, lambda row, version: int(row.version) == version)
            return [(row.resource_key, s) for s, row in kept], len(found)

        return deepening(limit, MAX_DEPTH, read)

    def best_chunk_rows(self, resource_ids: Sequence[str], terms: Sequence[str]) -> list[Any]:
        side = self._chunks
        query = side.text_query(terms, resources=list(resource_ids))
        if query is None:
            return []
        found = self._read("best chunks", lambda: side.top(
            query, max(100, 20 * len(resource_ids)), [F_ID, F_HASH]))
        current = self._reads.visible_chunks([int(v[0]) for _s, v in found])
        return [(r.resource_key, r.chunk_id) for _s, r in _current(found, current, _same_chunk)]

    # -- rows (inside the caller's write transaction) -------------------------------------------

    def add_chunks(self, conn: Any, rows: Iterable[tuple[int, ChunkTokens]]) -> None:
        """Index chunks ``(chunks.id, tokens)`` (their chunk id, resource and tenant read from
        the store rows); a chunk indexed before is replaced."""
        items = list(rows)
        if not items:
            return
        meta = self._reads.chunk_owners(conn, [rowid for rowid, _ in items])
        tw, hw, bw = self._weights
        self._chunks.put("chunk", [
            (int(rowid), {
                F_HASH: chunk_hash(row.chunk_id) if row else 0,
                **_owner_fields(row),
                F_TEXT: compose_tokens([(tok.title, tw), (tok.heading, hw), (tok.body, bw)]),
            })
            for rowid, tok in items
            for row in [meta.get(rowid)]
        ])

    def _delete(self, side: _Side, field: str, values: Sequence[object]) -> None:
        if not values:
            return

        def write(writer: Any) -> None:
            for value in values:
                writer.delete_documents_by_term(field, value)

        side.write(f"deleting {len(values)} rows", write)

    def remove_chunks(self, conn: Any, rowids: Iterable[int]) -> None:
        self._delete(self._chunks, F_ID, [int(r) for r in rowids])

    def remove_resource_chunks(self, conn: Any, resource_id: str) -> None:
        self._delete(self._chunks, F_RESOURCE, [resource_id])

    def remove_orphan_chunk(self, conn: Any, rowid: int) -> int:
        if self._reads.has_chunk_row(conn, rowid):
            return 0
        self._delete(self._chunks, F_ID, [int(rowid)])
        return 1

    def _row(self, side: _Side, rowid: int, field: str) -> list[int]:
        found = self._read("reading a row", lambda: side.top(
            side.term(F_ID, int(rowid)), 4, [field]))
        return [int(v[0]) for _s, v in found]

    def has_chunk(self, conn: Any, rowid: int) -> bool:
        """Whether chunk row ``rowid`` is indexed: a tantivy row of this id that holds this
        chunk (not another one under a reused id)."""
        row = self._reads.chunk_states(conn, [rowid]).get(rowid)
        if row is None:
            return False
        return chunk_hash(row.chunk_id) in self._row(self._chunks, rowid, F_HASH)

    def status_changed(self, conn: Any, resource_id: str) -> None:
        """Nothing to write: the status is checked in the store's rows on every hit."""

    def add_titles(self, conn: Any, rows: Iterable[tuple[int, str]]) -> None:
        items = list(rows)
        if not items:
            return
        conn.executemany("DELETE FROM tlex_titles WHERE id = ?", [(r,) for r, _ in items])
        conn.executemany("INSERT INTO tlex_titles(id, title) VALUES (?, ?)", items)
        meta = self._reads.resource_docs(conn, [r for r, _ in items])
        self._titles.put("title", [
            (int(rowid), {
                F_VERSION: int(row.version) if row else -1,
                **_owner_fields(row),
                F_TEXT: compose_tokens([(title, 1.0)]),
            })
            for rowid, title in items
            for row in [meta.get(rowid)]
        ])

    def remove_titles(self, conn: Any, rowids: Iterable[int]) -> None:
        ids = [int(r) for r in rowids]
        if not ids:
            return
        conn.executemany("DELETE FROM tlex_titles WHERE id = ?", [(r,) for r in ids])
        self._delete(self._titles, F_ID, ids)

    def remove_resource_title(self, conn: Any, resource_id: str) -> None:
        rowid = self._reads.resource_rowid(conn, resource_id)
        if rowid is not None:
            conn.execute("DELETE FROM tlex_titles WHERE id = ?", (rowid,))
        self._delete(self._titles, F_RESOURCE, [resource_id])

    def remove_orphan_title(self, conn: Any, rowid: int) -> int:
        if self._reads.has_resource_row(conn, rowid):
            return 0
        conn.execute("DELETE FROM tlex_titles WHERE id = ?", (rowid,))
        self._delete(self._titles, F_ID, [int(rowid)])
        return 1

    def has_title(self, conn: Any, rowid: int) -> bool:
        row = self._reads.title_states(conn, [rowid], kept_in="tlex_titles").get(rowid)
        if row is None or not row.kept:
            return False
        return row.version in self._row(self._titles, rowid, F_VERSION)

    # -- audit ------------------------------------------------------------------------------

    def indexed_rowids(self, conn: Any) -> tuple[set[int], set[int]]:
        """The ``(chunks.id, resources.id)`` ids the reconciler counts as indexed, read from
        tantivy: a row whose id has no store row is returned (an orphan, to remove); a row
        that holds another chunk (or version) than the store row of its id, or a title whose
        store-side tokens are missing, is left out (missing, to re-index)."""
        chunk_rows = {
            int(i): int(h) for i, h in self._read(
                "listing rows", lambda: self._chunks.all_rows([F_ID, F_HASH]))
        }
        title_rows = {
            int(i): int(v) for i, v in self._read(
                "listing rows", lambda: self._titles.all_rows([F_ID, F_VERSION]))
        }
        have_chunk = self._reads.chunk_states(conn, chunk_rows)
        have_title = self._reads.title_states(conn, title_rows, kept_in="tlex_titles")
        chunks = {
            rowid for rowid, digest in chunk_rows.items()
            if rowid not in have_chunk or chunk_hash(have_chunk[rowid].chunk_id) == digest
        }
        titles = {
            rowid for rowid, version in title_rows.items()
            if rowid not in have_title
            or (have_title[rowid].version == version and have_title[rowid].kept)
        }
        # store-side title rows of no resource (orphans too)
        titles |= self._reads.orphan_rows(conn, "tlex_titles", of="resources")
        return chunks, titles
