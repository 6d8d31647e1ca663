"""An exact in-memory search engine for an embedded Milvus Lite collection.

Milvus Lite 3.x runs inside this process as Python threads: its HNSW search costs 10 to 25 ms of
CPU on 6,000 rows and grows with the rows (60 ms at 100,000, docs/benchmarks.md), and on 2wiki
its top 10 misses one of the true nearest passages for about one query in seven (ef = 64). The
same rows searched exactly, one matrix-vector product over them, take about 1 ms at 6,000 rows.

:class:`ExactDenseIndex` is a :class:`~hybridsag.vectors.contract.DenseIndex` over a
:class:`~hybridsag.vectors.milvus_dense.MilvusDenseIndex`, which stays the system of record: every
write goes to Milvus first and, once Milvus took it, to an in-memory copy of the rows
(:class:`VectorTable`); reads of the reconciler (``iter_entries``, ``count``) are Milvus'. A
search is exact over the copy: every row's score by the collection's metric (cosine on unit
rows, inner product, or squared L2, as Milvus scores them), the ``limit`` best that pass the
filter, ties by chunk id. The filter is the one
:func:`~hybridsag.vectors.milvus_dense.filter_expression` writes for Milvus, evaluated on the
rows' own fields: the tenant, the public resource ids (of the tenant when it is set), the
excluded ids, and the ACL (an empty one is public, else it must share a tag).

The copy is loaded once per process and collection, when the first index of it is ensured: from
the passage vectors the store keeps (``rows``: the composition root passes the store's, which
is what the write path wrote to Milvus) or, without it, from Milvus itself. Every index object
of one collection in this process shares the copy, so a write through any of them is seen by
all; another process cannot write the collection (a Milvus Lite data dir is one process's).
A write that Milvus refused leaves the copy as it was.

The composition root uses it for hybridsag's own collection in an embedded Milvus Lite store
(no ``milvus.uri``, not attach mode) holding at most ``milvus.exact_search_max_rows`` vectors
when the process opens it. The trade-off: the copy costs the vectors' bytes again in memory
(1.5 KB a 384-d row: 9 MB for 6,000 rows, 150 MB for 100,000) and the load at open (a read of
the store's vectors); the search is exact, so its top k is Milvus' or better, never worse.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from hybridsag.errors import DenseError, InputError
from hybridsag.fusion.types import Hit
from hybridsag.milvus_client import MAX_LIMIT
from hybridsag.records.keys import split_key
from hybridsag.records.store import Store
from hybridsag.vectors.contract import DenseFilter, VectorRow, check_vector
from hybridsag.vectors.milvus_dense import MilvusDenseIndex

__all__ = ["ExactDenseIndex", "VectorTable", "store_rows"]

#: a table compacts its matrix when more than this share of its rows are dead (replaced or
#: deleted), and it holds at least :data:`_COMPACT_MIN` of them
_COMPACT_SHARE = 0.5
_COMPACT_MIN = 1024


class VectorTable:
    """The rows of one collection in memory: a float32 matrix (rows of norm 1 for ``COSINE``)
    and, per row, its chunk id, public resource id, version, tenant and ACL. A replaced or
    deleted row is marked dead until the table compacts. Thread-safe: writes take the lock; a
    search takes it only to read the rows it scores (a write never changes a row in place)."""

    def __init__(self, dimension: int, metric: str) -> None:
        if metric not in ("COSINE", "IP", "L2"):
            raise InputError(f"metric {metric!r}: the exact search knows COSINE, IP and L2")
        self.dimension = dimension
        self.metric = metric
        self._lock = threading.Lock()
        self._n = 0
        self._vectors = np.zeros((0, dimension), dtype=np.float32)
        self._square = np.zeros(0, dtype=np.float32)  # squared norms (L2)
        self._live = np.zeros(0, dtype=bool)
        self._public = np.zeros(0, dtype=bool)  # no ACL tag
        self._tenant = np.zeros(0, dtype=np.int32)  # codes of self._tenants
        self._resource = np.zeros(0, dtype=np.int32)  # codes of self._resources (public ids)
        self._tenants: dict[str, int] = {}
        self._resources: dict[str, int] = {}
        self._tags: dict[str, list[int]] = {}  # ACL tag -> rows holding it
        self._ids: list[str] = []
        self._meta: list[tuple[str, int]] = []  # (public resource id, version) per row
        self._keys: list[tuple[str, str]] = []  # (tenant, public resource id) per row
        self._row: dict[str, int] = {}  # chunk id -> its live row
        self._by_key: dict[tuple[str, str], set[int]] = {}  # (tenant, id) -> live rows
        self._dead = 0

    def __len__(self) -> int:
        return len(self._row)

    # -- writes ------------------------------------------------------------------------------

    def upsert(self, rows: Iterable[VectorRow]) -> None:
        """Insert or replace rows by chunk id (a repeated id keeps its last row)."""
        unique = {r.chunk_id: r for r in rows}
        if not unique:
            return
        matrix = np.asarray([r.vector for r in unique.values()], dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[1] != self.dimension:
            raise InputError(
                f"vectors of shape {matrix.shape}: the table holds {self.dimension}-d rows"
            )
        self._append(list(unique.values()), matrix)

    def load(self, rows: Iterable[tuple[VectorRow, np.ndarray]], count: int) -> None:
        """Add ``count`` rows whose vectors are ready float32 arrays (a load at open), in
        slices so that the rows never sit in memory twice as Python floats."""
        batch: list[VectorRow] = []
        arrays: list[np.ndarray] = []
        self._reserve(count)
        for row, vector in rows:
            batch.append(row)
            arrays.append(vector)
            if len(batch) >= 4096:
                self._append(batch, np.vstack(arrays))
                batch, arrays = [], []
        if batch:
            self._append(batch, np.vstack(arrays))

    def delete_ids(self, chunk_ids: Iterable[str]) -> None:
        """Delete rows by chunk id; unknown ids are ignored."""
        with self._lock:
            for chunk_id in chunk_ids:
                self._kill(self._row.get(chunk_id))
            self._maybe_compact()

    def delete_keys(self, keys: Iterable[str]) -> None:
        """Delete every row of the resources with these store keys."""
        with self._lock:
            for key in keys:
                for i in list(self._by_key.get(split_key(key), ())):
                    self._kill(i)
            self._maybe_compact()

    def _reserve(self, more: int) -> None:
        with self._lock:
            self._grow(self._n + more)

    def _grow(self, need: int) -> None:
        """Capacity for ``need`` rows (the arrays are replaced, never resized in place: a
        search reading the old ones keeps a consistent view)."""
        have = self._vectors.shape[0]
        if need <= have:
            return
        size = max(need, 2 * have, 64)

        def grown(a: np.ndarray) -> np.ndarray:
            out = np.zeros((size, *a.shape[1:]), dtype=a.dtype)
            out[: self._n] = a[: self._n]
            return out

        self._vectors = grown(self._vectors)
        self._square = grown(self._square)
        self._live = grown(self._live)
        self._public = grown(self._public)
        self._tenant = grown(self._tenant)
        self._resource = grown(self._resource)

    def _append(self, rows: Sequence[VectorRow], matrix: np.ndarray) -> None:
        square = np.einsum("ij,ij->i", matrix, matrix)
        if self.metric == "COSINE":  # Milvus' cosine: the inner product of unit vectors
            norms = np.sqrt(square)
            matrix = matrix / np.where(norms > 0, norms, 1.0)[:, None]
        with self._lock:
            for r in rows:
                self._kill(self._row.get(r.chunk_id))
            start = self._n
            self._grow(start + len(rows))
            end = start + len(rows)
            self._vectors[start:end] = matrix
            self._square[start:end] = square
            self._live[start:end] = True
            for i, r in enumerate(rows, start=start):
                self._public[i] = not r.acl
                self._tenant[i] = self._tenants.setdefault(r.tenant, len(self._tenants))
                self._resource[i] = self._resources.setdefault(
                    r.resource_id, len(self._resources)
                )
                for tag in dict.fromkeys(r.acl):
                    self._tags.setdefault(tag, []).append(i)
                self._ids.append(r.chunk_id)
                self._meta.append((r.resource_id, int(r.version)))
                key = (r.tenant, r.resource_id)
                self._keys.append(key)
                self._row[r.chunk_id] = i
                self._by_key.setdefault(key, set()).add(i)
            self._n = end

    def _kill(self, i: int | None) -> None:
        if i is None or not self._live[i]:
            return
        self._live[i] = False
        self._dead += 1
        chunk_id = self._ids[i]
        if self._row.get(chunk_id) == i:
            del self._row[chunk_id]
        rows = self._by_key.get(self._keys[i])
        if rows is not None:
            rows.discard(i)
            if not rows:
                del self._by_key[self._keys[i]]

    def _maybe_compact(self) -> None:
        if self._dead < _COMPACT_MIN or self._dead < _COMPACT_SHARE * self._n:
            return
        keep = np.flatnonzero(self._live[: self._n])
        old_ids, old_meta, old_keys, old_tags = self._ids, self._meta, self._keys, self._tags
        self._vectors = self._vectors[keep]
        self._square = self._square[keep]
        self._live = self._live[keep]
        self._public = self._public[keep]
        self._tenant = self._tenant[keep]
        self._resource = self._resource[keep]
        new_row = {int(old): new for new, old in enumerate(keep)}
        self._ids = [old_ids[i] for i in keep]
        self._meta = [old_meta[i] for i in keep]
        self._keys = [old_keys[i] for i in keep]
        self._tags = {}
        for tag, rows in old_tags.items():
            moved = [new_row[i] for i in rows if i in new_row]
            if moved:
                self._tags[tag] = moved
        self._row = {chunk_id: i for i, chunk_id in enumerate(self._ids)}
        self._by_key = {}
        for i, key in enumerate(self._keys):
            self._by_key.setdefault(key, set()).add(i)
        self._n = len(keep)
        self._dead = 0

    # -- search ------------------------------------------------------------------------------

    def _mask(self, flt: DenseFilter | None) -> np.ndarray:
        """The live rows ``flt`` lets through (call with the lock held)."""
        n = self._n
        mask = self._live[:n].copy()
        if flt is None:
            return mask
        if flt.tenant is not None:
            code = self._tenants.get(flt.tenant)
            if code is None:
                return np.zeros(n, dtype=bool)
            mask &= self._tenant[:n] == code
        if flt.resource_ids is not None:
            codes = [self._resources[r] for r in flt.resource_ids if r in self._resources]
            mask &= np.isin(self._resource[:n], np.asarray(codes, dtype=np.int32))
        if flt.exclude_resource_ids:
            codes = [self._resources[r] for r in flt.exclude_resource_ids if r in self._resources]
            mask &= ~np.isin(self._resource[:n], np.asarray(codes, dtype=np.int32))
        if flt.acl_any is not None:
            allowed = self._public[:n].copy()
            for tag in dict.fromkeys(flt.acl_any):
                allowed[self._tags.get(tag, [])] = True
            mask &= allowed
        return mask

    def search(
        self, query: np.ndarray, limit: int, flt: DenseFilter | None
    ) -> list[tuple[str, float, str, int]]:
        """The ``limit`` best rows ``flt`` lets through as ``(chunk_id, Milvus distance,
        public resource id, version)``, best first (by distance: higher for COSINE and IP, lower
        for L2), ties by chunk id."""
        with self._lock:
            n = self._n
            rows = np.flatnonzero(self._mask(flt))
            vectors, square = self._vectors, self._square  # replaced, never changed, by writes
            ids, meta = self._ids, self._meta
        if not len(rows):
            return []
        picked = vectors[:n] if len(rows) == n else vectors[rows]
        # einsum: one thread, no BLAS pool (whose spinning threads cost a loaded host more CPU
        # than the product itself)
        dots = np.einsum("ij,j->i", picked, query)
        if self.metric == "L2":  # Milvus' L2 is the squared distance
            distance = square[rows] - 2.0 * dots + np.float32(np.dot(query, query))
            order_key = distance
        else:
            distance = dots
            order_key = -dots
        k = min(limit, len(rows))
        if k < len(rows):  # every row tied with the k-th stays in, then ties go by chunk id
            kth = np.partition(order_key, k - 1)[k - 1]
            best = np.flatnonzero(order_key <= kth)
        else:
            best = np.arange(len(rows))
        chosen = sorted(best.tolist(), key=lambda j: (float(order_key[j]), ids[rows[j]]))[:k]
        return [
            (ids[rows[j]], float(distance[j]), *meta[rows[j]])
            for j in chosen
        ]


def store_rows(store: Store) -> tuple[Iterator[tuple[VectorRow, np.ndarray]], int]:
    """The rows of this data dir's collection as the store keeps them
    (:meth:`~hybridsag.records.store.Store.vector_rows`), each with its float32 vector, and
    their count (what :class:`ExactDenseIndex` loads)."""

    def pairs() -> Iterator[tuple[VectorRow, np.ndarray]]:
        for chunk_id, resource_id, version, tenant, acl, blob in store.vector_rows():
            row = VectorRow(chunk_id, resource_id, version, tenant, acl, ())
            yield row, np.frombuffer(blob, dtype=np.float32)

    return pairs(), store.vector_count()


#: One table per embedded collection in this process: ``(Milvus Lite folder, collection)`` ->
#: ``[table, users]``.
_TABLES: dict[tuple[str, str], list[Any]] = {}
_TABLES_LOCK = threading.Lock()


class ExactDenseIndex:
    """:class:`~hybridsag.vectors.contract.DenseIndex` over ``inner`` (the system of record:
    hybridsag's own collection in Milvus Lite at ``where``), searched exactly in memory (module
    docstring).

    ``rows`` gives the collection's rows when the copy is first loaded: ``(row, float32 vector)``
    pairs and their count; None reads them from Milvus. Example::

        inner = MilvusDenseIndex(settings, index_id="5f0c9a")
        index = ExactDenseIndex(inner, where="/d/milvus.db")
        index.ensure(384)
        index.search(query_vec, limit=10)
    """

    def __init__(
        self,
        inner: MilvusDenseIndex,
        *,
        where: str,
        rows: Callable[[], tuple[Iterable[tuple[VectorRow, np.ndarray]], int]] | None = None,
    ) -> None:
        if inner.index_id is None:
            raise InputError("the exact search serves hybridsag's own collection, not attach mode")
        self._inner = inner
        self._key = (where, inner.collection)
        self._rows = rows
        self._table: VectorTable | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ExactDenseIndex({self._inner!r})"

    @property
    def collection(self) -> str:
        """See :attr:`DenseIndex.collection` (the Milvus collection's)."""
        return self._inner.collection

    @property
    def index_id(self) -> str | None:
        """See :attr:`DenseIndex.index_id`."""
        return self._inner.index_id

    def ensure(self, dimension: int, *, create: bool = True) -> None:
        """See :meth:`DenseIndex.ensure`; the first ensure of the collection in this process
        loads its rows into memory."""
        self._inner.ensure(dimension, create=create)
        with self._lock:
            if self._table is None:
                self._table = self._acquire(dimension)

    def _acquire(self, dimension: int) -> VectorTable:
        with _TABLES_LOCK:
            held = _TABLES.get(self._key)
            if held is not None and held[0].dimension == dimension:
                held[1] += 1
                return held[0]
            table = VectorTable(dimension, self._inner.metric)
            pairs, count = self._rows() if self._rows is not None else self._milvus_rows()
            table.load(pairs, count)
            _TABLES[self._key] = [table, 1]
            return table

    def _milvus_rows(self) -> tuple[Iterator[tuple[VectorRow, np.ndarray]], int]:
        rows = self._inner.vector_rows()
        return ((r, np.asarray(r.vector, dtype=np.float32)) for r in rows), 0

    def _ready(self) -> VectorTable:
        table = self._table
        if table is None:
            raise DenseError(
                f"ExactDenseIndex for {self.collection!r}: call ensure(dimension) first"
            )
        return table

    # -- writes: Milvus first, then the copy -------------------------------------------------

    def upsert(self, rows: Sequence[VectorRow]) -> None:
        """See :meth:`DenseIndex.upsert`."""
        table = self._ready()
        self._inner.upsert(rows)
        table.upsert(rows)

    def delete_ids(self, chunk_ids: Sequence[str]) -> None:
        """See :meth:`DenseIndex.delete_ids`."""
        table = self._ready()
        self._inner.delete_ids(chunk_ids)
        table.delete_ids(chunk_ids)

    def delete_resource(self, resource_id: str) -> None:
        """See :meth:`DenseIndex.delete_resource`."""
        self.delete_resources([resource_id])

    def delete_resources(self, resource_ids: Sequence[str]) -> None:
        """See :meth:`DenseIndex.delete_resources`."""
        table = self._ready()
        self._inner.delete_resources(resource_ids)
        table.delete_keys(resource_ids)

    def flush(self) -> None:
        """See :meth:`DenseIndex.flush` (Milvus' segments; the copy has none)."""
        self._inner.flush()

    # -- reads -------------------------------------------------------------------------------

    def search(
        self, vector: Sequence[float], *, limit: int, filter: DenseFilter | None = None
    ) -> list[Hit]:
        """See :meth:`DenseIndex.search`: exact over the copy (module docstring)."""
        table = self._ready()
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise InputError(f"search limit={limit!r} must be an int in 1..{MAX_LIMIT}")
        query = check_vector(vector, table.dimension, what="query vector")
        if filter is not None and filter.resource_ids is not None and not filter.resource_ids:
            return []  # "only these resources" with none listed: nothing is visible
        if table.metric == "COSINE":
            norm = float(np.linalg.norm(query))
            query = query / norm if norm > 0 else query
        found = table.search(query, limit, filter)
        return [
            Hit(
                chunk_id=chunk_id,
                path="dense",
                rank=rank,
                raw_score=distance,
                score=-distance if table.metric == "L2" else distance,
                detail={"resource_id": resource_id, "version": version},
            )
            for rank, (chunk_id, distance, resource_id, version) in enumerate(found, start=1)
        ]

    def iter_entries(self, batch_size: int = 1000) -> Iterator[tuple[str, str, int]]:
        """See :meth:`DenseIndex.iter_entries` (Milvus', the system of record)."""
        return self._inner.iter_entries(batch_size)

    def count(self) -> int:
        """See :meth:`DenseIndex.count` (Milvus')."""
        return self._inner.count()

    def describe(self) -> str:
        """See :meth:`DenseIndex.describe`: Milvus' line, and that searches are exact here."""
        return f"{self._inner.describe()}, searched exactly in memory"

    def close(self) -> None:
        """See :meth:`DenseIndex.close`; the last index of the collection to close frees the
        copy."""
        with self._lock:
            table, self._table = self._table, None
        if table is not None:
            with _TABLES_LOCK:
                held = _TABLES.get(self._key)
                if held is not None and held[0] is table:
                    held[1] -= 1
                    if held[1] <= 0:
                        del _TABLES[self._key]
        self._inner.close()
