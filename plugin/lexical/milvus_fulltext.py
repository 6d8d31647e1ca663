"""The lexical index on Milvus full-text search (``lexical.backend = "milvus"``).

The chunk and title text lives in two Milvus collections of this data dir's index
(``hybridsag_<index id>_lexchunks`` and ``..._lextitles``), each with a BM25 ``Function`` that
turns an analysed text field into a sparse vector, searched with the ``BM25`` metric. Milvus
ranks; the store stays the system of record: every hit is checked against the store's chunk and
resource rows (current version, status, tenant, ACL, metadata) before it is returned, exactly as
the dense path checks its vectors, so a row Milvus still holds for a deleted or replaced chunk is
never shown.

Analyzers (``lexical.milvus_analyzer``; Milvus Lite 3.2 has the ``standard`` and ``jieba``
tokenizers): ``auto`` indexes every row's text with the standard tokenizer (lowercased, accents
folded) in ``text`` and, for a row with CJK text, with jieba in ``text_cjk``; a query with CJK
characters searches ``text_cjk``, any other query ``text``. ``standard`` and ``jieba`` use that
one analyzer for every row and query. The column weights of ``lexical`` (title, heading, body)
are kept by repeating each part of the text that many times (rounded), the usual way to give a
single-field BM25 field weights.

A row carries its resource's public id and tenant (``resource_id``, ``tenant``); a resource named
alone is named by its store key, turned into both by :func:`hybridsag.milvus_client.resources_expression`.

Rows are written and deleted by the same write path as the FTS5 rows: the ``add_*``/``remove_*``
methods run inside the store's write transaction and write to Milvus before it commits. A Milvus
failure raises :class:`~hybridsag.errors.LexicalError`, which rolls the transaction back (the
writer's compensation then removes the vectors); a commit that fails after Milvus was written
leaves rows the reconciler finds: :meth:`MilvusLexicalIndex.indexed_rowids` reads the
collections, so a row of no chunk is an orphan (removed) and a chunk whose row is missing or
holds another version's text is missing (re-indexed).

What Milvus cannot answer cheaply stays in the store, written in the same transaction:
``mlex_chunks(id, terms)`` (each chunk's distinct index-tokenizer terms), ``mlex_vocab(term,
doc)`` (document frequencies, for query analysis, the SAG2 expansion IDF and the trust step) and
``mlex_titles(id, title)`` (title tokens, for the title-alias fix). Milvus needs 2.5 or newer for
full-text search: :meth:`MilvusLexicalIndex.ensure` checks a server's version and says so.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from hybridsag.documents import MAX_CHUNK_ID_BYTES, MAX_TENANT_BYTES, RESOURCE_ID_FIELD_BYTES
from hybridsag.errors import ConfigError, LexicalError
from hybridsag.lexical.fts5_topk import strip_diacritics
from hybridsag.lexical.contract import (
    ChunkTokens,
    FilterScope,
    LexicalQuery,
    LexicalTables,
    Ranked,
)
from hybridsag.lexical.queries import LexicalQueries, bind_reads, deepening, near_terms_in
from hybridsag.milvus_client import (
    F_ACL,
    F_RESOURCE,
    F_TENANT,
    MAX_LIMIT,
    MAX_VARCHAR_BYTES,
    add_acl_field,
    connect_milvus,
    create_or_join,
    iterate_rows,
    milvus_call,
    milvus_where,
    quote_list,
    release_milvus,
    resources_expression,
    visibility_expression,
)
from hybridsag.settings import LexicalSettings, Settings
from hybridsag.records.index_reads import ChunkDoc, IndexReads, ResourceDoc
from hybridsag.records.dialect import select_in
from hybridsag.records.filters import Filters
from hybridsag.records.keys import split_key
from hybridsag.records.store import Store
from hybridsag.lexical.tokenizer import Tokenizer, has_cjk

if TYPE_CHECKING:
    from pymilvus import MilvusClient

__all__ = [
    "MILVUS_LEXICAL_MIGRATIONS",
    "MIN_SERVER_VERSION",
    "MilvusLexicalIndex",
    "check_server_version",
    "compose_text",
    "lexical_collections",
]

MILVUS_LEXICAL_MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "mlex_0001_tables",
        """
        CREATE TABLE IF NOT EXISTS mlex_chunks(id INTEGER PRIMARY KEY, terms TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS mlex_titles(id INTEGER PRIMARY KEY, title TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS mlex_vocab(term TEXT PRIMARY KEY, doc INTEGER NOT NULL);
        """,
    ),
)

#: The oldest Milvus with full-text search (the BM25 Function and the BM25 metric).
MIN_SERVER_VERSION = (2, 5)
#: Milvus' VARCHAR limit, in bytes: longer text is cut at a character boundary.
MAX_TEXT_BYTES = MAX_VARCHAR_BYTES
#: Rows per upsert call.
WRITE_BATCH = 500

F_ID, F_CHUNK, F_VERSION, F_STATUS = "id", "chunk_id", "version", "status"
F_TEXT, F_TEXT_CJK, F_SPARSE, F_SPARSE_CJK = "text", "text_cjk", "sparse", "sparse_cjk"

ANALYZERS: dict[str, dict[str, Any]] = {
    "standard": {"tokenizer": "standard", "filter": ["lowercase", "asciifolding"]},
    "jieba": {"tokenizer": "jieba", "filter": ["lowercase", "asciifolding"]},
}

_VERSION = re.compile(r"(\d+)\.(\d+)")


def lexical_collections(index_id: str) -> tuple[str, str]:
    """The chunk and title collections of an index: ``hybridsag_<id>_lexchunks`` and
    ``hybridsag_<id>_lextitles``."""
    return f"hybridsag_{index_id}_lexchunks", f"hybridsag_{index_id}_lextitles"


def _cut(text: str, limit: int = MAX_TEXT_BYTES) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    return raw[:limit].decode("utf-8", "ignore")


def compose_text(parts: Sequence[tuple[str, float]]) -> str:
    """One analysed field from weighted parts: each part repeated ``round(weight)`` times,
    newline-separated, cut to Milvus' 65,535 bytes.

    >>> compose_text([("Paris", 2.0), ("", 2.0), ("capital of France", 1.0)])
    'Paris\\nParis\\ncapital of France'
    """
    pieces = [p for text, weight in parts if text for p in [text] * max(0, round(weight))]
    return _cut("\n".join(pieces))


def check_server_version(version: str, where: str) -> None:
    """Refuse a Milvus older than :data:`MIN_SERVER_VERSION` (ConfigError naming both); a
    version string that cannot be read passes (creating the collection then says more)."""
    match = _VERSION.search(version or "")
    if match and (int(match[1]), int(match[2])) < MIN_SERVER_VERSION:
        need = ".".join(map(str, MIN_SERVER_VERSION))
        raise ConfigError(
            f"lexical.backend = 'milvus' needs Milvus {need} or newer (full-text search with a "
            f"BM25 Function); {where} runs {version}. Upgrade the server, or keep "
            "lexical.backend = 'fts5'"
        )


def _like_term(term: str) -> str:
    """The ``LIKE`` pattern of one whole term in a space-padded term list."""
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"% {escaped} %"


_Row = TypeVar("_Row", ChunkDoc, ResourceDoc)
_Tokens = TypeVar("_Tokens")


def _store_rows(
    meta: Mapping[int, _Row],
    tokens: Mapping[int, _Tokens | None],
    of_tokens: Callable[[int, _Tokens], _Row],
) -> Iterator[tuple[int, _Row]]:
    """Each id of ``tokens`` with its store row in ``meta``; for an id whose store row is gone
    (the reconciler's orphans), the row ``of_tokens`` makes of its tokens, so that it is indexed
    as FTS5 would index it; an id with neither is skipped."""
    for rowid, tok in tokens.items():
        row = meta.get(rowid)
        if row is None:
            if tok is None:
                continue
            row = of_tokens(rowid, tok)
        yield rowid, row


def _chunk_of_tokens(rowid: int, tokens: ChunkTokens) -> ChunkDoc:
    """What a chunk whose store rows are gone is indexed as: its tokens, no owner."""
    return ChunkDoc(rowid, "", "", tokens.heading, tokens.body, tokens.title, "", "[]", "")


def _title_of_tokens(rowid: int, title: str) -> ResourceDoc:
    """What a title whose resource row is gone is indexed as: its tokens, no owner."""
    return ResourceDoc(rowid, "", -1, title, "", "[]", "")


def _owner_fields(row: ChunkDoc | ResourceDoc) -> dict[str, Any]:
    """The fields a Milvus filter reads of a store row's Milvus row: its resource's public id,
    tenant, ACL tags and status."""
    return {
        F_RESOURCE: split_key(row.resource_key)[1],
        F_TENANT: row.tenant,
        F_ACL: list(json.loads(row.acl or "[]")),
        F_STATUS: row.status,
    }


def _terms_of(tokens: ChunkTokens) -> list[str]:
    """The distinct terms of a chunk row, folded as :meth:`LexicalQueries.doc_freqs` folds."""
    words = f"{tokens.title} {tokens.heading} {tokens.body}".split()
    return list(dict.fromkeys(strip_diacritics(w) for w in words))


class MilvusLexicalIndex:
    """:class:`~hybridsag.lexical.contract.LexicalIndex` on Milvus full-text search (see the module
    docstring). Nothing connects until the first search or write; thread-safe like the dense
    index (one client, opened under a lock).

    It holds the query skeleton (:class:`~hybridsag.lexical.queries.LexicalQueries`, whose reads
    it answers through :func:`~hybridsag.lexical.queries.bind_reads`) and is its
    :class:`~hybridsag.lexical.contract.LexicalEngine`: Milvus ranks, the store's ``mlex_*``
    rows count."""

    #: the store-side rows the query skeleton reads (terms, titles) and how a term matches
    tables = LexicalTables(
        "mlex_chunks", "mlex_titles", "id", "(' ' || mlex_chunks.terms || ' ') LIKE ? ESCAPE '\\'"
    )

    def __init__(
        self,
        store: Store,
        tokenizer: Tokenizer,
        settings: LexicalSettings,
        *,
        all_settings: Settings,
        index_id: str | None,
        max_terms: int = 80,
    ) -> None:
        if index_id is None:
            raise ConfigError(
                "lexical.backend = 'milvus' needs this data dir's index id, and its vectors were "
                "written by an older build; run `hybridsag rebuild-vectors` first"
            )
        self.store = store
        self._reads = IndexReads(store)
        self.tokenizer = tokenizer
        self.settings = settings
        store.migrate(MILVUS_LEXICAL_MIGRATIONS)
        self._queries = LexicalQueries(
            store, tokenizer, self, max_terms=max_terms, spelling=settings.spelling
        )
        bind_reads(self, self._queries)
        self._all = all_settings
        self._analyzer: Literal["auto", "standard", "jieba"] = settings.milvus_analyzer
        self._chunks_coll, self._titles_coll = lexical_collections(index_id)
        self._timeout = all_settings.milvus.timeout_s
        self._open_lock = threading.Lock()
        self._client: MilvusClient | None = None
        self._lite_key: str | None = None
        self._where = milvus_where(all_settings)

    def __repr__(self) -> str:
        return f"MilvusLexicalIndex({self._where}, {self._chunks_coll!r}, {self._titles_coll!r})"

    # -- plumbing ---------------------------------------------------------------------------

    def _call(self, action: str, fn: Callable[[], Any]) -> Any:
        where = f"{action} in the Milvus lexical index ({self._where}) failed"
        return milvus_call(
            fn,
            ours=(ConfigError, LexicalError),
            error=lambda msg, retriable: LexicalError(f"{where}: {msg}", retriable=retriable),
        )

    def _lost(self, what: str) -> LexicalError:
        return LexicalError(
            f"{what}: the Milvus lexical index ({self._where}) is gone; run `hybridsag "
            "reconcile --apply` to re-index every chunk into a new one"
        )

    def client(self) -> MilvusClient:
        """The Milvus client, connected and both collections ensured (created when missing,
        then loaded) on first use."""
        if self._client is not None:
            return self._client
        with self._open_lock:
            if self._client is None:
                client, key = connect_milvus(
                    self._all, create=True, call=self._call, lost=self._lost
                )
                try:
                    self._ensure(client)
                except BaseException:
                    release_milvus(client, key)
                    raise
                self._client, self._lite_key = client, key
            return self._client

    def ensure(self) -> None:
        """Connect and create the collections now (``doctor``; a service at start-up)."""
        self.client()

    def describe(self) -> str:
        """One line for ``doctor``: where, the server version, the collections and their rows
        (connects and creates the collections when missing)."""
        client = self.client()
        version = ""
        if self._all.milvus.uri is not None:
            version = f" {self._call('get_server_version', client.get_server_version)}"
        counts = []
        for name in (self._chunks_coll, self._titles_coll):
            got = self._call(
                "count",
                lambda n=name: client.query(
                    n, filter="", output_fields=["count(*)"], consistency_level="Strong"
                ),
            )
            counts.append(f"{name} ({int(got[0]['count(*)'])} rows)")
        return (
            f"Milvus full-text search at {self._where}{version}, analyzer {self._analyzer}: "
            + ", ".join(counts)
        )

    def _ensure(self, client: MilvusClient) -> None:
        if self._all.milvus.uri is not None:
            version = self._call("get_server_version", client.get_server_version)
            check_server_version(str(version), self._where)
        for name, kind in ((self._chunks_coll, "chunks"), (self._titles_coll, "titles")):
            if not self._call("has_collection", lambda n=name: client.has_collection(n)):
                self._create(client, name, kind)
            self._call("load_collection", lambda n=name: client.load_collection(n))

    def _create(self, client: MilvusClient, name: str, kind: str) -> None:
        from pymilvus import DataType, Function, FunctionType, MilvusClient

        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field(F_ID, DataType.INT64, is_primary=True)
        if kind == "chunks":
            schema.add_field(F_CHUNK, DataType.VARCHAR, max_length=MAX_CHUNK_ID_BYTES)
        else:
            schema.add_field(F_VERSION, DataType.INT64)
        schema.add_field(F_RESOURCE, DataType.VARCHAR, max_length=RESOURCE_ID_FIELD_BYTES)
        schema.add_field(F_TENANT, DataType.VARCHAR, max_length=MAX_TENANT_BYTES)
        schema.add_field(F_STATUS, DataType.VARCHAR, max_length=32)
        add_acl_field(schema)
        index_params = client.prepare_index_params()
        for text, sparse, analyzer in self._fields():
            schema.add_field(
                text,
                DataType.VARCHAR,
                max_length=MAX_TEXT_BYTES,
                enable_analyzer=True,
                analyzer_params=ANALYZERS[analyzer],
            )
            schema.add_field(sparse, DataType.SPARSE_FLOAT_VECTOR)
            schema.add_function(
                Function(
                    name=f"bm25_{text}",
                    function_type=FunctionType.BM25,
                    input_field_names=[text],
                    output_field_names=[sparse],
                )
            )
            index_params.add_index(
                field_name=sparse, index_type="SPARSE_INVERTED_INDEX", metric_type="BM25"
            )
        create_or_join(
            lambda: self._call(
                f"creating collection {name!r}",
                lambda: client.create_collection(
                    name,
                    schema=schema,
                    index_params=index_params,
                    consistency_level="Strong",
                    timeout=self._timeout,
                ),
            ),
            lambda: self._call("has_collection", lambda: client.has_collection(name)),
            LexicalError,
        )

    def _fields(self) -> list[tuple[str, str, str]]:
        """``(text field, sparse field, analyzer)`` of each analysed field this index keeps."""
        if self._analyzer == "auto":
            return [(F_TEXT, F_SPARSE, "standard"), (F_TEXT_CJK, F_SPARSE_CJK, "jieba")]
        return [(F_TEXT, F_SPARSE, self._analyzer)]

    def _text_fields(self, text: str) -> dict[str, str]:
        if self._analyzer != "auto":
            return {F_TEXT: text}
        return {F_TEXT: text, F_TEXT_CJK: text if has_cjk(text) else ""}

    def _query_field(self, query: str) -> str:
        return F_SPARSE_CJK if self._analyzer == "auto" and has_cjk(query) else F_SPARSE

    def flush(self) -> None:
        """Seal both collections' new rows: Milvus Lite searches rows still in its write buffer
        many times slower (a cmrc2018 SAG2 search took seconds instead of 0.3 s)."""
        client = self.client()
        for name in (self._chunks_coll, self._titles_coll):
            self._call(f"flushing {name!r}", lambda n=name: client.flush(collection_name=n))

    def close(self) -> None:
        """Release the connection; safe to call twice."""
        with self._open_lock:
            client, self._client = self._client, None
            key, self._lite_key = self._lite_key, None
        if client is not None:
            release_milvus(client, key)

    # -- reads (the query skeleton's are bound by bind_reads) ----------------------------------

    def scoped_doc_freqs(
        self, terms: Sequence[str], filters: Filters
    ) -> tuple[dict[str, int], int]:
        return self._queries.scoped_doc_freqs(terms, filters)

    # -- the engine: vocabulary ------------------------------------------------------------------

    def total_chunks(self) -> int:
        return self._reads.count_chunks()

    def vocabulary(self, lexemes: list[str]) -> dict[str, int]:
        rows = select_in(
            self.store.connection(), "SELECT term, doc FROM mlex_vocab", "term", lexemes
        )
        return {term: int(row[1]) for term, row in rows.items() if int(row[1]) > 0}

    def near_terms(self, prefix: str, shortest: int, longest: int) -> dict[str, int]:
        """A range of ``mlex_vocab`` (its primary key is the term)."""
        return near_terms_in(self.store.connection(), "mlex_vocab", prefix, shortest, longest)

    def term_match(self, term: str) -> str:
        return _like_term(strip_diacritics(term))

    # -- the engine: search ---------------------------------------------------------------------

    def _expression(self, filters: Filters) -> str:
        """Tenant, ACL, resource ids and status of ``filters`` as a Milvus filter expression
        (metadata is checked in the store, with everything else, on the hits)."""
        expr = visibility_expression(
            tenant=filters.tenant, resource_ids=filters.resource_ids, acl_any=filters.acl
        )
        statuses = f"{F_STATUS} in {quote_list(filters.statuses)}"
        return f"({expr}) and ({statuses})" if expr else statuses

    def _bm25(
        self, collection: str, query: str, *, limit: int, expr: str, output: list[str]
    ) -> list[tuple[int, float, dict[str, Any]]]:
        """``(id, score, entity)`` of the best ``limit`` rows, best first (``score`` the BM25
        score, higher is better: Milvus Lite returns it negated, a server as is)."""
        if not query.strip():
            return []
        client = self.client()
        field = self._query_field(query)
        result = self._call(
            "BM25 search",
            lambda: client.search(
                collection,
                data=[query],
                anns_field=field,
                limit=min(limit, MAX_LIMIT),
                filter=expr,
                output_fields=output,
                search_params={"metric_type": "BM25"},
                timeout=self._timeout,
            ),
        )
        rows = []
        for hit in result[0] if result else []:
            entity = hit.get("entity", {}) or {}
            rows.append((int(hit.get(F_ID, hit.get("id"))), abs(float(hit["distance"])), entity))
        return rows

    def rank_chunks(
        self, queries: Sequence[LexicalQuery], scope: FilterScope, depth: int, limit: int
    ) -> list[Ranked]:
        """See :meth:`~hybridsag.lexical.contract.LexicalEngine.rank_chunks`: one Milvus search a
        query, its hits checked against the store; complete when Milvus had fewer rows than
        asked (or was asked its most, ``MAX_LIMIT``)."""
        expr = self._expression(scope.filters)
        return [self._rank_one(q.terms, q.must, expr, scope, depth, limit) for q in queries]

    def _rank_one(
        self,
        terms: Sequence[str],
        must: str | None,
        expr: str,
        scope: FilterScope,
        depth: int,
        limit: int,
    ) -> Ranked:
        query = " ".join([must, *terms] if must else terms)
        must_sql = ""
        must_params: list[object] = []
        if must:
            # checked in the store, on the term as the index tokenizer made it (a text_match
            # in the Milvus filter would prune first, but Milvus Lite evaluates it row by row,
            # about 0.1 to 0.3 s a term on 2wiki, and cannot match CJK text with it)
            holds = self.tables.matches.replace("mlex_chunks.", "m.")
            must_sql = f"EXISTS (SELECT 1 FROM mlex_chunks m WHERE m.id = c.id AND {holds})"
            must_params = [self.term_match(must)]
        found = self._bm25(self._chunks_coll, query, limit=depth, expr=expr, output=[F_CHUNK])
        complete = len(found) < min(depth, MAX_LIMIT) or depth >= MAX_LIMIT
        if not found:
            return Ranked([], complete)
        visible = self._reads.visible_chunks(
            [f[0] for f in found], scope.sql, scope.params,
            condition=must_sql, condition_params=must_params,
        )
        rows = []
        for rowid, score, entity in found:
            row = visible.get(rowid)
            if row is None or row.chunk_id != entity.get(F_CHUNK):
                continue  # a row of a deleted, replaced or filtered-out chunk
            rows.append((row.chunk_id, row.resource_key, -score))
            if len(rows) >= limit:
                break
        return Ranked(rows, complete)

    def title_rows(self, terms: Sequence[str], scope: FilterScope, limit: int) -> list[Any]:
        """Milvus' top of the titles, its hits checked against the store, deepened while the
        filters leave fewer than ``limit`` (:func:`~hybridsag.lexical.queries.deepening`)."""
        query = " ".join(terms)
        expr = self._expression(scope.filters)

        def read(depth: int) -> tuple[list[Any], int]:
            found = self._bm25(self._titles_coll, query, limit=depth, expr=expr,
                               output=[F_VERSION])
            visible = self._reads.visible_titles([f[0] for f in found], scope.sql, scope.params)
            rows = []
            for rowid, score, entity in found:
                row = visible.get(rowid)
                if row is None or int(row.version) != int(entity.get(F_VERSION, -1)):
                    continue
                rows.append((row.resource_key, -score))
                if len(rows) >= limit:
                    break
            return rows, len(found)

        return deepening(limit, MAX_LIMIT, read)

    def best_chunk_rows(self, resource_ids: Sequence[str], terms: Sequence[str]) -> list[Any]:
        expr = resources_expression(resource_ids)
        found = self._bm25(
            self._chunks_coll,
            " ".join(terms),
            limit=max(100, 20 * len(resource_ids)),
            expr=expr,
            output=[F_CHUNK],
        )
        current = self._reads.visible_chunks([f[0] for f in found])
        rows = []
        for rowid, _score, entity in found:
            row = current.get(rowid)
            if row is not None and row.chunk_id == entity.get(F_CHUNK):
                rows.append((row.resource_key, row.chunk_id))
        return rows

    # -- rows (inside the caller's write transaction) -------------------------------------------

    def _upsert(self, collection: str, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        client = self.client()
        for start in range(0, len(rows), WRITE_BATCH):
            batch = rows[start : start + WRITE_BATCH]
            self._call(
                f"writing {len(batch)} rows to {collection!r}",
                lambda batch=batch: client.upsert(collection, batch, timeout=self._timeout),
            )

    def _delete(self, collection: str, *, ids: Sequence[int] = (), expr: str = "") -> None:
        client = self.client()
        if ids:
            for start in range(0, len(ids), WRITE_BATCH):
                part = list(ids[start : start + WRITE_BATCH])
                self._call(
                    f"deleting {len(part)} rows from {collection!r}",
                    lambda part=part: client.delete(collection, ids=part, timeout=self._timeout),
                )
        if expr:
            self._call(
                f"deleting rows from {collection!r}",
                lambda: client.delete(collection, filter=expr, timeout=self._timeout),
            )

    def _delete_resource(self, collection: str, resource_id: str) -> None:
        """Delete every row of one resource (its store key; all versions, orphans too) from
        ``collection``."""
        self._delete(collection, expr=resources_expression([resource_id]))

    def add_chunks(self, conn: Any, rows: Iterable[tuple[int, ChunkTokens]]) -> None:
        """Index chunks ``(chunks.id, tokens)``: the terms and vocabulary in the store, the text
        (read from the chunk and resource rows) in Milvus. A chunk indexed before is replaced."""
        items = list(rows)
        if not items:
            return
        ids = [rowid for rowid, _ in items]
        self._forget_chunks(conn, ids)
        vocab: Counter[str] = Counter()
        mirror = []
        for rowid, tokens in items:
            terms = _terms_of(tokens)
            vocab.update(terms)
            mirror.append((rowid, " ".join(terms)))
        conn.executemany("INSERT INTO mlex_chunks(id, terms) VALUES (?, ?)", mirror)
        conn.executemany(
            "INSERT INTO mlex_vocab(term, doc) VALUES (?, ?) ON CONFLICT(term) "
            "DO UPDATE SET doc = mlex_vocab.doc + excluded.doc",
            sorted(vocab.items()),
        )
        self._upsert(self._chunks_coll, self._chunk_docs(conn, dict(items)))

    def _chunk_docs(self, conn: Any, tokens: Mapping[int, ChunkTokens | None]) -> list[dict]:
        """The Milvus rows of these chunk ids, read from the chunk and resource rows. A chunk
        row of no resource row (the reconciler's orphans) is indexed from its tokens, as FTS5
        would index it: a search never shows it, the reconciler removes it."""
        meta = self._reads.chunk_docs(conn, tokens)
        s = self.settings
        docs = []
        for rowid, row in _store_rows(meta, tokens, _chunk_of_tokens):
            text = compose_text(
                [(row.title, s.title_weight), (row.heading_path, s.heading_weight),
                 (row.text, s.body_weight)]
            )
            fields = {F_ID: rowid, F_CHUNK: row.chunk_id, **_owner_fields(row)}
            docs.append({**fields, **self._text_fields(text)})
        return docs

    def _title_docs(self, conn: Any, tokens: Mapping[int, str | None]) -> list[dict]:
        """The Milvus rows of these resource ids' titles (a resource row that is gone: from
        its tokens, as for :meth:`_chunk_docs`)."""
        meta = self._reads.resource_docs(conn, tokens)
        return [
            {
                F_ID: rowid,
                F_VERSION: int(row.version),
                **_owner_fields(row),
                **self._text_fields(_cut(row.title)),
            }
            for rowid, row in _store_rows(meta, tokens, _title_of_tokens)
        ]

    def status_changed(self, conn: Any, resource_id: str) -> None:
        """The resource was disabled or enabled (in the caller's write transaction): its rows
        are written again with the new status, which the Milvus filter reads."""
        chunk_ids = self._reads.chunk_rowids(conn, resource_id)
        self._upsert(self._chunks_coll, self._chunk_docs(conn, dict.fromkeys(chunk_ids)))
        rowid = self._reads.resource_rowid(conn, resource_id)
        kept = {} if rowid is None else self._reads.title_states(conn, [rowid], kept_in="mlex_titles")
        title = [r for r, state in kept.items() if state.kept]
        self._upsert(self._titles_coll, self._title_docs(conn, dict.fromkeys(title)))

    def _forget_chunks(self, conn: Any, rowids: Sequence[int]) -> list[int]:
        """Drop the store-side rows of these chunk ids (terms and their counts); returns the
        ids that had one."""
        had = select_in(conn, "SELECT id, terms FROM mlex_chunks", "id", rowids)
        if not had:
            return []
        vocab: Counter[str] = Counter()
        for _rowid, terms in had.values():
            vocab.update(terms.split())
        conn.executemany(
            "UPDATE mlex_vocab SET doc = doc - ? WHERE term = ?",
            [(n, term) for term, n in sorted(vocab.items())],
        )
        conn.executemany(
            "DELETE FROM mlex_vocab WHERE term = ? AND doc <= 0", [(t,) for t in sorted(vocab)]
        )
        conn.executemany("DELETE FROM mlex_chunks WHERE id = ?", [(r,) for r in had])
        return list(had)

    def remove_chunks(self, conn: Any, rowids: Iterable[int]) -> None:
        ids = list(rowids)
        if not ids:
            return
        self._forget_chunks(conn, ids)
        self._delete(self._chunks_coll, ids=ids)

    def remove_resource_chunks(self, conn: Any, resource_id: str) -> None:
        ids = self._reads.chunk_rowids(conn, resource_id)
        self._forget_chunks(conn, ids)
        self._delete_resource(self._chunks_coll, resource_id)

    def remove_orphan_chunk(self, conn: Any, rowid: int) -> int:
        if self._reads.has_chunk_row(conn, rowid):
            return 0
        self._forget_chunks(conn, [rowid])
        self._delete(self._chunks_coll, ids=[rowid])
        return 1

    def has_chunk(self, conn: Any, rowid: int) -> bool:
        """Whether chunk row ``rowid`` is indexed: its store-side terms and a Milvus row that
        holds this chunk (not another version's under a reused id) with its status."""
        row = self._reads.chunk_states(conn, [rowid], kept_in="mlex_chunks").get(rowid)
        if row is None or not row.kept:
            return False
        got = self._query(self._chunks_coll, f"{F_ID} == {int(rowid)}", [F_CHUNK, F_STATUS])
        return any((g.get(F_CHUNK), g.get(F_STATUS)) == (row.chunk_id, row.status) for g in got)

    def add_titles(self, conn: Any, rows: Iterable[tuple[int, str]]) -> None:
        items = list(rows)
        if not items:
            return
        conn.executemany("DELETE FROM mlex_titles WHERE id = ?", [(r,) for r, _ in items])
        conn.executemany("INSERT INTO mlex_titles(id, title) VALUES (?, ?)", items)
        self._upsert(self._titles_coll, self._title_docs(conn, dict(items)))

    def remove_titles(self, conn: Any, rowids: Iterable[int]) -> None:
        ids = list(rowids)
        if not ids:
            return
        conn.executemany("DELETE FROM mlex_titles WHERE id = ?", [(r,) for r in ids])
        self._delete(self._titles_coll, ids=ids)

    def remove_resource_title(self, conn: Any, resource_id: str) -> None:
        rowid = self._reads.resource_rowid(conn, resource_id)
        if rowid is not None:
            conn.execute("DELETE FROM mlex_titles WHERE id = ?", (rowid,))
        self._delete_resource(self._titles_coll, resource_id)

    def remove_orphan_title(self, conn: Any, rowid: int) -> int:
        if self._reads.has_resource_row(conn, rowid):
            return 0
        conn.execute("DELETE FROM mlex_titles WHERE id = ?", (rowid,))
        self._delete(self._titles_coll, ids=[rowid])
        return 1

    def has_title(self, conn: Any, rowid: int) -> bool:
        row = self._reads.title_states(conn, [rowid], kept_in="mlex_titles").get(rowid)
        if row is None or not row.kept:
            return False
        got = self._query(self._titles_coll, f"{F_ID} == {int(rowid)}", [F_VERSION, F_STATUS])
        return any(
            (int(g.get(F_VERSION, -1)), g.get(F_STATUS)) == (row.version, row.status) for g in got
        )

    def _query(self, collection: str, expr: str, output: list[str]) -> list[dict[str, Any]]:
        client = self.client()
        return list(
            self._call(
                "query",
                lambda: client.query(
                    collection,
                    filter=expr,
                    output_fields=output,
                    consistency_level="Strong",
                    timeout=self._timeout,
                ),
            )
        )

    def _iter_rows(self, collection: str, output: list[str]) -> Iterable[dict[str, Any]]:
        return iterate_rows(self.client(), self._call, collection, "", output,
                            timeout=self._timeout)

    def indexed_rowids(self, conn: Any) -> tuple[set[int], set[int]]:
        """The ``(chunks.id, resources.id)`` ids the reconciler counts as indexed, read from
        Milvus: a row whose id has no store row is returned (an orphan, to remove); a row
        that holds another version's text than the store row of its id, or whose store-side
        terms are missing, is left out (missing, to re-index)."""
        chunk_rows = {
            int(r[F_ID]): (str(r.get(F_CHUNK)), r.get(F_STATUS))
            for r in self._iter_rows(self._chunks_coll, [F_CHUNK, F_STATUS])
        }
        title_rows = {
            int(r[F_ID]): (int(r.get(F_VERSION, -1)), r.get(F_STATUS))
            for r in self._iter_rows(self._titles_coll, [F_VERSION, F_STATUS])
        }
        have_chunk = self._reads.chunk_states(conn, chunk_rows, kept_in="mlex_chunks")
        have_title = self._reads.title_states(conn, title_rows, kept_in="mlex_titles")
        # indexed: a row of no store row (an orphan), or one that matches its store row (the
        # same chunk id or version, the same status) and has its store-side terms
        chunks = {
            rowid
            for rowid, got in chunk_rows.items()
            if rowid not in have_chunk
            or ((have_chunk[rowid].chunk_id, have_chunk[rowid].status) == got
                and have_chunk[rowid].kept)
        }
        titles = {
            rowid
            for rowid, (version, status) in title_rows.items()
            if rowid not in have_title
            or (
                (have_title[rowid].version, have_title[rowid].status) == (version, status)
                and have_title[rowid].kept
            )
        }
        # store-side rows of no chunk (a rolled-back write cannot leave them; a crash between
        # two statements of an older build could): orphans too
        chunks |= self._reads.orphan_rows(conn, "mlex_chunks", of="chunks")
        titles |= self._reads.orphan_rows(conn, "mlex_titles", of="resources")
        return chunks, titles

