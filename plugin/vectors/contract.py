"""The ``DenseIndex`` extension point: the contract every dense backend implements
(:class:`DenseIndex`), the rows it stores (:class:`VectorRow`), the visibility filter it applies
in its own query (:class:`DenseFilter`), how a backend is built (:class:`DenseIndexFactory`) and
what a vector must be (:func:`check_vector`). The backends: Milvus
(:mod:`hybridsag.vectors.milvus_dense`) and the exact in-process index
(:mod:`hybridsag.vectors.exact`); the registry is :mod:`hybridsag.vectors.index`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from hybridsag.errors import IndexMismatchError, InputError
from hybridsag.fusion.types import Hit

if TYPE_CHECKING:
    from hybridsag.settings import Settings

__all__ = [
    "PATH",
    "DenseFilter",
    "DenseIndex",
    "DenseIndexFactory",
    "VectorRow",
    "check_vector",
]

#: Path name every dense hit carries.
PATH = "dense"


@dataclass(frozen=True, slots=True)
class VectorRow:
    """One chunk's vector and the metadata the dense path filters on.

    ``resource_id`` is the resource's public id within ``tenant`` (its key is
    :func:`~hybridsag.records.store.resource_key` of the two); ``acl`` empty means public; ``tenant`` is
    compared exactly.
    """

    chunk_id: str
    resource_id: str
    version: int
    tenant: str
    acl: tuple[str, ...]
    vector: Sequence[float]


@dataclass(frozen=True, slots=True)
class DenseFilter:
    """Visibility filter applied inside the vector store's own query.

    - ``tenant``: only rows of this tenant (None: any tenant).
    - ``resource_ids``: only rows of these public ids (of ``tenant`` when it is set, of any
      tenant otherwise; None: any; an empty tuple: none at all).
    - ``exclude_resource_ids``: never rows of these public ids.
    - ``acl_any``: None means no ACL check; otherwise a row is visible when its ``acl`` is empty
      (public) or shares at least one tag with ``acl_any``.
    """

    tenant: str | None = None
    resource_ids: tuple[str, ...] | None = None
    exclude_resource_ids: tuple[str, ...] = ()
    acl_any: tuple[str, ...] | None = None


@runtime_checkable
class DenseIndex(Protocol):
    """A vector store for the dense path.

    Every method may raise :class:`~hybridsag.errors.DenseError`; its ``retriable`` flag is true
    for connection failures, timeouts and rate limits (the same call may work later) and false
    otherwise. Settings that cannot work raise :class:`~hybridsag.errors.ConfigError`; a store
    built for another embedder raises :class:`~hybridsag.errors.IndexMismatchError`.

    The contract is complete: identity (``collection``, ``index_id``), opening (``ensure``),
    writes, reads, the reconciler's audit (``iter_entries``, ``count``), ``describe`` and
    ``close``; every backend implements all of it and runs ``tests/conformance/test_dense_index.py``.
    """

    @property
    def collection(self) -> str:
        """The collection (or the engine's name for its table of vectors) this index reads."""
        ...

    @property
    def index_id(self) -> str | None:
        """The index (data dir) whose rows this index reads and writes; None for a team's
        collection, whose rows carry no index id."""
        ...

    def ensure(self, dimension: int, *, create: bool = True) -> None:
        """Open the store, create the collection if it is missing, this backend may and
        ``create`` is true (else DenseError: the caller knows vectors were written, so a missing
        collection was lost, not new), check that its vector field has ``dimension`` (else
        IndexMismatchError), and load it for search. Must be called before any other method;
        calling it again is cheap and re-checks. Several processes may ensure one new
        collection at once."""
        ...

    def upsert(self, rows: Sequence[VectorRow]) -> None:
        """Insert or replace rows by ``chunk_id``. Raises InputError for a row that cannot be
        stored (over-long id, too many ACL tags), IndexMismatchError for a vector of the wrong
        length, ConfigError where writes are not allowed."""
        ...

    def delete_ids(self, chunk_ids: Sequence[str]) -> None:
        """Delete rows by chunk id; unknown ids are ignored."""
        ...

    def flush(self) -> None:
        """Seal what was written into searchable segments (after a bulk write): Milvus Lite
        searches rows still in its memtable several times slower than sealed ones."""
        ...

    def delete_resource(self, resource_id: str) -> None:
        """Delete every row of the resource whose key (:func:`~hybridsag.records.store.resource_key`)
        is ``resource_id``; a resource with no rows is not an error."""
        ...

    def delete_resources(self, resource_ids: Sequence[str]) -> None:
        """Delete every row of several resources (by key) at once (the reconciler's
        batches)."""
        ...

    def search(
        self, vector: Sequence[float], *, limit: int, filter: DenseFilter | None = None
    ) -> list[Hit]:
        """The ``limit`` nearest visible rows, best first, as ``Hit(path="dense")`` with 1-based
        ranks, ``raw_score`` the engine's distance and ``score`` higher-is-better. Raises
        InputError for ``limit`` outside 1..16384, IndexMismatchError for a wrong-length vector."""
        ...

    def iter_entries(self, batch_size: int = 1000) -> Iterator[tuple[str, str, int]]:
        """Every stored ``(chunk_id, resource key, version)``, read with Strong consistency, in
        batches of ``batch_size``. Order is unspecified."""
        ...

    def count(self) -> int:
        """Number of stored rows, read with Strong consistency."""
        ...

    def describe(self) -> str:
        """One line for ``doctor``: the collection, whose it is and its rows (reads the count)."""
        ...

    def close(self) -> None:
        """Release the connection; safe to call twice. ``ensure`` opens it again."""
        ...


class DenseIndexFactory(Protocol):
    """Builds a dense index backend from the settings and the data dir's index id (None in
    attach mode)."""

    def __call__(self, settings: Settings, *, index_id: str | None = None) -> DenseIndex: ...


def check_vector(vector: Sequence[float], dimension: int, *, what: str) -> Any:
    """``vector`` as a float32 numpy array of ``dimension`` numbers: IndexMismatchError for
    another length, InputError for something that is not numbers or holds NaN or infinity
    (``what`` names it in the message)."""
    import numpy as np  # here, not at import: a bm25 search never loads numpy

    try:
        array = np.asarray(vector, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{what} is not a sequence of numbers: {exc}") from exc
    if array.ndim != 1 or array.shape[0] != dimension:
        raise IndexMismatchError(
            f"{what} has shape {array.shape}, but the dense index holds {dimension}-d vectors"
        )
    if not np.all(np.isfinite(array)):
        raise InputError(f"{what} contains NaN or infinity")
    return array
