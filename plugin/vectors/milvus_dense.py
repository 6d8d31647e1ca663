"""The Milvus adapter of the ``DenseIndex`` extension point (:mod:`hybridsag.vectors.contract`).

:class:`MilvusDenseIndex` is a narrow adapter over ``pymilvus.MilvusClient``: every call passes
explicit arguments, nothing is forwarded as ``**kwargs``. The same code serves three set-ups:

- ``milvus.uri`` unset: an embedded Milvus Lite store under the data dir
  (``Settings.milvus_lite_path`` with a ``.db`` suffix, which Milvus Lite requires; it becomes a
  folder). One process at a time may open it.
- ``milvus.uri`` set: a Milvus server (standalone or distributed), with ``milvus.token``.
- ``milvus.attach = true``: a collection the team already has, read through the field names in
  ``milvus.fields``; hybridsag never creates, alters, writes or deletes there unless
  ``milvus.allow_writes`` is true.

hybridsag's own collection (tried on Milvus Lite 3.2.2 and Milvus standalone 2.3.5)::

    chunk_id     VARCHAR(512)  primary key
    index_id     VARCHAR(64)   the index (data dir) that owns the row
    resource_id  VARCHAR(1024)
    version      INT64
    tenant       VARCHAR(256)
    acl          ARRAY<VARCHAR(256)>, capacity 256   (empty = public)
    vector       FLOAT_VECTOR(dim), HNSW (M=16, efConstruction=200), metric from milvus.metric

Index identity: every data dir has an index id (random, made once, in its store's meta; see
:class:`~hybridsag.components.Components`). Its own collection is named ``hybridsag_<index id>``
unless ``milvus.collection`` names one, carries the id in the collection property
:data:`OWNER_PROPERTY`, and every row carries it in ``index_id``. A collection owned by another
index is refused (:class:`~hybridsag.errors.ConfigError`: two data dirs never share one, so
their chunk ids never collide); one made by an older build, without ``index_id``, is refused too
(:class:`~hybridsag.errors.IndexMismatchError`). Every search, scan, count and delete by resource
is filtered on the id as well, so even a row planted under another id is never seen, planned over
nor deleted by this data dir.

Resources: a row carries a resource's public id and its tenant in two fields (``resource_id``,
``tenant``), as rows always did. Where a resource is named alone (``delete_resource(s)``,
``iter_entries``) it is named by the store's key (:func:`~hybridsag.records.store.resource_key`: the id
in tenant ``""``, else tenant and id), which
:func:`~hybridsag.milvus_client.resources_expression` turns into both fields,
so two tenants' ``notes`` are never confused. In attach mode the team's ``milvus.fields.tenant``
field plays the tenant (a team collection without one holds tenant ``""`` only).

Filters become a Milvus boolean expression built by :func:`filter_expression`; every string is
written as a double-quoted literal (:func:`~hybridsag.milvus_client.quote_literal`), so no user
string can change the expression's structure. Connecting, the Milvus Lite store this process
shares with the lexical index, reading every row and the retriable failures are
:mod:`hybridsag.milvus_client`'s. Scores: ``raw_score`` is the Milvus distance; ``score`` is higher-is-better
(COSINE and IP as they are, L2 negated; Milvus' L2 is the squared distance).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from hybridsag.documents import (
    MAX_ACL_TAG_BYTES,
    MAX_ACL_TAGS,
    MAX_CHUNK_ID_BYTES,
    MAX_TENANT_BYTES,
    RESOURCE_ID_FIELD_BYTES,
)
from hybridsag.errors import ConfigError, DenseError, IndexMismatchError, InputError
from hybridsag.fusion.types import Hit
from hybridsag.milvus_client import (
    F_ACL,
    F_RESOURCE,
    F_TENANT,
    MAX_LIMIT,
    add_acl_field,
    connect_milvus,
    create_or_join,
    iterate_rows,
    milvus_call,
    milvus_where,
    quote_literal,
    release_lite,
    resources_expression,
    visibility_expression,
)
from hybridsag.settings import Settings
from hybridsag.records.keys import resource_key
from hybridsag.vectors.contract import PATH, DenseFilter, VectorRow, check_vector

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pymilvus import MilvusClient

__all__ = [
    "LEGACY_COLLECTION",
    "MilvusDenseIndex",
    "OWNER_PROPERTY",
    "default_collection",
    "filter_expression",
]

T = TypeVar("T")

# Field names and sizes of hybridsag's own collection (the resource, tenant and ACL fields are
# named in hybridsag.milvus_client, as in every collection of hybridsag's). Milvus limits VARCHAR
# max_length to 65,535 bytes and ARRAY capacity to 4,096; these are sized for ids, tenants and
# ACL tags.
F_ID, F_INDEX, F_VERSION, F_VECTOR = "chunk_id", "index_id", "version", "vector"
#: The collection property naming the index that owns a collection of hybridsag's own schema.
OWNER_PROPERTY = "hybridsag.index_id"
#: The name every data dir used before collections were per index (older builds' default).
LEGACY_COLLECTION = "hybridsag_chunks"
MAX_INDEX_ID_BYTES = 64

# HNSW build parameters: hnswlib's defaults (M=16, ef_construction=200).
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 200
# Search-time ef: Milvus requires ef >= limit; 64 keeps recall high for small limits.
HNSW_MIN_EF = 64
# Rows per write call: keeps one gRPC message far below Milvus' 64 MiB default limit.
WRITE_BATCH_BYTES = 16 * 1024 * 1024
DELETE_BATCH = 1_000

_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INDEX_ID = re.compile(r"^[A-Za-z0-9_]{1,64}$")


def default_collection(index_id: str) -> str:
    """The collection of an index whose ``milvus.collection`` is unset: ``hybridsag_<id>``."""
    return f"hybridsag_{index_id}"


def filter_expression(
    flt: DenseFilter | None,
    *,
    resource_field: str = F_RESOURCE,
    tenant_field: str | None = F_TENANT,
    acl_field: str | None = F_ACL,
) -> str:
    """The Milvus boolean expression for ``flt`` ("" when nothing is filtered), written by
    :func:`~hybridsag.milvus_client.visibility_expression` (the field arguments are its own).

    >>> filter_expression(DenseFilter(tenant="t1", exclude_resource_ids=("r9",)))
    '(tenant == "t1") and (resource_id not in ["r9"])'
    """
    if flt is None:
        return ""
    return visibility_expression(
        tenant=flt.tenant,
        resource_ids=flt.resource_ids,
        exclude_resource_ids=flt.exclude_resource_ids,
        acl_any=flt.acl_any,
        resource_field=resource_field,
        tenant_field=tenant_field,
        acl_field=acl_field,
    )


class MilvusDenseIndex:
    """:class:`~hybridsag.vectors.contract.DenseIndex` over Milvus Lite, a Milvus server, or a
    team's collection (attach).

    Nothing connects until :meth:`ensure`. Thread-safe: the client is opened once under a lock;
    ``MilvusClient`` calls themselves may run concurrently.

    Example::

        index = MilvusDenseIndex(Settings(data_dir=Path("/tmp/x")), index_id="5f0c9a")
        index.ensure(384)
        index.upsert([VectorRow("c1", "r1", 1, "", (), vec)])
        index.search(query_vec, limit=10)
    """

    def __init__(self, settings: Settings, *, index_id: str | None = None) -> None:
        self._settings = settings
        self._cfg = settings.milvus
        self._attach = self._cfg.attach
        self._index_id = index_id
        if not self._attach and (index_id is None or not _INDEX_ID.match(index_id)):
            raise ConfigError(
                f"hybridsag's own collection needs the data dir's index id (1 to 64 letters, "
                f"digits or _), got {index_id!r}; build the dense index through Components"
            )
        if self._cfg.collection:
            self._collection = self._cfg.collection
        elif index_id is not None:
            self._collection = default_collection(index_id)
        else:  # pragma: no cover - the settings refuse attach mode without a collection
            raise ConfigError("milvus.attach=true needs milvus.collection")
        self._timeout = self._cfg.timeout_s
        self._lock = threading.Lock()
        self._client: MilvusClient | None = None
        self._dimension: int | None = None
        self._metric: str = self._cfg.metric
        self._index_type: str = "HNSW"
        # Field names in use (own schema, or the attach mapping after ensure()).
        self._f_id = F_ID
        self._f_resource = F_RESOURCE
        self._f_vector = F_VECTOR
        self._f_tenant: str | None = F_TENANT
        self._f_acl: str | None = F_ACL
        self._f_version: str | None = F_VERSION
        self._f_text: str | None = None
        self._f_title: str | None = None
        self._int_ids = False
        self._lite_key: str | None = None
        self._where = milvus_where(settings)

    def __repr__(self) -> str:
        mode = "attach" if self._attach else f"own, index {self._index_id!r}"
        return f"MilvusDenseIndex({self._where}, collection={self._collection!r}, mode={mode})"

    # -- plumbing ------------------------------------------------------------------------------

    @property
    def collection(self) -> str:
        """The collection name this index reads (``milvus.collection``, else
        :func:`default_collection` of the index id)."""
        return self._collection

    @property
    def index_id(self) -> str | None:
        """The index id whose rows this index reads and writes (None in attach mode)."""
        return self._index_id

    def _scoped(self, expr: str) -> str:
        """``expr`` restricted to this index's own rows (attach mode: unchanged)."""
        if self._attach or self._index_id is None:
            return expr
        own = f"{F_INDEX} == {quote_literal(self._index_id)}"
        return f"({own}) and ({expr})" if expr else own

    @property
    def metric(self) -> str:
        """The metric searches use (own: ``milvus.metric``; attach: the team index's metric)."""
        return self._metric

    def _call(self, action: str, fn: Callable[[], T]) -> T:
        where = f"{action} on collection {self._collection!r} ({self._where}) failed"
        return milvus_call(
            fn,
            ours=(ConfigError, InputError, DenseError),
            error=lambda msg, retriable: DenseError(f"{where}: {msg}", retriable=retriable),
        )

    def _open(self, *, create: bool = True) -> MilvusClient:
        if self._client is not None:
            return self._client
        with self._lock:
            if self._client is None:
                self._client, self._lite_key = connect_milvus(
                    self._settings, create=create, call=self._call, lost=self._lost
                )
            return self._client

    def _ready(self) -> MilvusClient:
        if self._client is None or self._dimension is None:
            raise DenseError(
                f"MilvusDenseIndex for {self._collection!r}: call ensure(dimension) first"
            )
        return self._client

    def _require_writes(self, action: str) -> None:
        if self._attach and not self._cfg.allow_writes:
            raise ConfigError(
                f"milvus.attach=true: refusing to {action} in the team collection "
                f"{self._collection!r}; set milvus.allow_writes=true to let hybridsag write there"
            )

    # -- ensure ----------------------------------------------------------------------------------

    def ensure(self, dimension: int, *, create: bool = True) -> None:
        """See :meth:`DenseIndex.ensure`. Own mode creates the collection when missing (and
        ``create``), then checks that it is hybridsag's schema and owned by this index id;
        attach mode never creates anything and checks the mapped fields instead."""
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
            raise InputError(f"ensure(dimension={dimension!r}): dimension must be an int >= 1")
        client = self._open(create=create or self._attach)
        if self._attach:
            self._ensure_attached(client, dimension)
        else:
            self._ensure_own(client, dimension, create=create)
        # Milvus Lite 3.x forgets the load state on reopen; a server keeps it. Loading an already
        # loaded collection is a no-op, and loading changes no data (attach mode does it too).
        self._call(
            "load_collection",
            lambda: client.load_collection(self._collection, timeout=self._timeout),
        )
        self._dimension = dimension

    def _describe(self, client: MilvusClient) -> dict[str, Any]:
        return self._call(
            "describe_collection",
            lambda: client.describe_collection(self._collection, timeout=self._timeout),
        )

    def _has(self, client: MilvusClient) -> bool:
        return self._call(
            "has_collection",
            lambda: client.has_collection(self._collection, timeout=self._timeout),
        )

    def _vector_index(self, client: MilvusClient, field: str) -> Mapping[str, Any] | None:
        names = self._call(
            "list_indexes",
            lambda: client.list_indexes(self._collection, field_name=field, timeout=self._timeout),
        )
        if not names:
            return None
        return self._call(
            "describe_index",
            lambda: client.describe_index(self._collection, names[0], timeout=self._timeout),
        )

    def _lost(self, what: str) -> DenseError:
        return DenseError(
            f"{what}, but this data dir recorded vectors in collection {self._collection!r} "
            f"({self._where}): it was deleted or dropped. Restore it, or run `hybridsag "
            "rebuild-vectors` to re-embed every chunk into a new one; nothing is recreated "
            "empty on its own",
            retriable=False,
        )

    def _ensure_own(self, client: MilvusClient, dimension: int, *, create: bool) -> None:
        if not self._has(client):
            if not create:
                raise self._lost(f"collection {self._collection!r} is missing")
            self._create(client, dimension)
        description = self._describe(client)
        fields = _fields_by_name(description)
        required = (F_ID, F_INDEX, F_RESOURCE, F_VERSION, F_TENANT, F_ACL, F_VECTOR)
        missing = [name for name in required if name not in fields]
        if missing == [F_INDEX]:
            raise IndexMismatchError(
                f"collection {self._collection!r} ({self._where}) was made by an older "
                f"hybridsag: its rows carry no index id, so they may belong to any data dir "
                "and are never written to nor deleted from. Unset milvus.collection (each data "
                "dir then gets its own) or pick a new name, and run `hybridsag rebuild-vectors`"
            )
        if missing:
            raise IndexMismatchError(
                f"collection {self._collection!r} ({self._where}) exists but is not a hybridsag "
                f"collection: missing field(s) {missing}; it has {sorted(fields)}. Use another "
                "milvus.collection, or milvus.attach=true with milvus.fields to search it"
            )
        owner = (description.get("properties") or {}).get(OWNER_PROPERTY)
        if owner != self._index_id:
            raise ConfigError(
                f"collection {self._collection!r} ({self._where}) belongs to hybridsag index "
                f"{owner!r}, not to this data dir's index {self._index_id!r}: two data dirs "
                "never share a collection. Unset milvus.collection (each data dir then gets "
                f"{default_collection('<index id>')!r}) or pick another name"
            )
        stored = _dim_of(fields[F_VECTOR])
        if stored != dimension:
            raise IndexMismatchError(
                f"collection {self._collection!r} holds {stored}-d vectors but the embedder makes "
                f"{dimension}-d vectors; rebuild the dense index or use the model it was built with"
            )
        index = self._vector_index(client, F_VECTOR)
        metric = str(index.get("metric_type", "")).upper() if index else ""
        if metric and metric != self._cfg.metric:
            raise IndexMismatchError(
                f"collection {self._collection!r} was built with metric {metric} but "
                f"milvus.metric={self._cfg.metric}; rebuild it or set milvus.metric={metric}"
            )
        if index:
            self._index_type = str(index.get("index_type", self._index_type)).upper()

    def _create(self, client: MilvusClient, dimension: int) -> None:
        from pymilvus import DataType, MilvusClient

        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field(F_ID, DataType.VARCHAR, is_primary=True, max_length=MAX_CHUNK_ID_BYTES)
        schema.add_field(F_INDEX, DataType.VARCHAR, max_length=MAX_INDEX_ID_BYTES)
        schema.add_field(F_RESOURCE, DataType.VARCHAR, max_length=RESOURCE_ID_FIELD_BYTES)
        schema.add_field(F_VERSION, DataType.INT64)
        schema.add_field(F_TENANT, DataType.VARCHAR, max_length=MAX_TENANT_BYTES)
        add_acl_field(schema)
        schema.add_field(F_VECTOR, DataType.FLOAT_VECTOR, dim=dimension)
        index_params = client.prepare_index_params()
        index_params.add_index(
            field_name=F_VECTOR,
            index_type="HNSW",
            metric_type=self._cfg.metric,
            params={"M": HNSW_M, "efConstruction": HNSW_EF_CONSTRUCTION},
        )
        # another process may create it first: _ensure_own then checks its schema and owner
        # like any existing collection's
        create_or_join(
            lambda: self._call(
                "create_collection",
                lambda: client.create_collection(
                    self._collection,
                    schema=schema,
                    index_params=index_params,
                    consistency_level=self._cfg.consistency_level,
                    properties={OWNER_PROPERTY: self._index_id},
                    timeout=self._timeout,
                ),
            ),
            lambda: self._has(client),
            DenseError,
        )
        self._index_type = "HNSW"

    def _ensure_attached(self, client: MilvusClient, dimension: int) -> None:
        if not self._has(client):
            existing = self._call(
                "list_collections", lambda: client.list_collections(timeout=self._timeout)
            )
            raise ConfigError(
                f"milvus.attach=true but collection {self._collection!r} does not exist at "
                f"{self._where}; milvus.collection must be one of {sorted(existing)}"
            )
        fmap = self._cfg.fields
        fields = _fields_by_name(self._describe(client))
        wanted: dict[str, str | None] = {
            "id": fmap.id,
            "vector": fmap.vector,
            "resource_id": fmap.resource_id,
            "text": fmap.text or None,  # "" means the collection has no such field
            "title": fmap.title or None,
            "tenant": fmap.tenant,
        }
        for key, name in wanted.items():
            if name is None:
                continue
            if not _FIELD_NAME.match(name):
                raise ConfigError(f"milvus.fields.{key}={name!r} is not a valid Milvus field name")
            if name not in fields:
                raise ConfigError(
                    f"milvus.fields.{key}={name!r}: collection {self._collection!r} has no such "
                    f"field; its fields are {sorted(fields)}"
                )
        from pymilvus import DataType

        id_field = fields[fmap.id]
        id_type = id_field.get("type")
        if id_type not in (DataType.VARCHAR, DataType.INT64):
            raise ConfigError(
                f"milvus.fields.id={fmap.id!r} has type {id_type}; it must be VARCHAR or INT64"
            )
        vec_field = fields[fmap.vector]
        if vec_field.get("type") != DataType.FLOAT_VECTOR:
            raise ConfigError(
                f"milvus.fields.vector={fmap.vector!r} has type {vec_field.get('type')}; it must "
                "be FLOAT_VECTOR"
            )
        stored = _dim_of(vec_field)
        if stored != dimension:
            raise IndexMismatchError(
                f"team collection {self._collection!r} field {fmap.vector!r} holds {stored}-d "
                f"vectors but embedding.model={self._settings.embedding.model!r} makes "
                f"{dimension}-d vectors; set embedding.model to the model the team used"
            )
        index = self._vector_index(client, fmap.vector)
        if not index:
            raise ConfigError(
                f"team collection {self._collection!r} has no index on {fmap.vector!r}; "
                "hybridsag does not create one in attach mode"
            )
        self._metric = str(index.get("metric_type", self._cfg.metric)).upper()
        self._index_type = str(index.get("index_type", "")).upper()
        self._f_id = fmap.id
        self._f_vector = fmap.vector
        self._f_resource = fmap.resource_id
        self._f_tenant = fmap.tenant
        self._f_acl = None
        self._f_version = None
        self._f_text = wanted["text"]
        self._f_title = wanted["title"]
        self._int_ids = id_type == DataType.INT64

    # -- writes ----------------------------------------------------------------------------------

    def flush(self) -> None:
        """See :meth:`DenseIndex.flush`; a no-op where writes are not allowed (attach mode)."""
        if self._cfg.attach and not self._cfg.allow_writes:
            return
        client = self._ready()
        self._call("flush", lambda: client.flush(collection_name=self._collection))

    def upsert(self, rows: Sequence[VectorRow]) -> None:
        """See :meth:`DenseIndex.upsert`. Rows with a repeated ``chunk_id`` keep the last one.
        Attach mode (with ``allow_writes``) writes id, resource id, tenant and vector only; a team
        schema with other required fields will reject the write (DenseError)."""
        client = self._ready()
        self._require_writes("upsert vectors")
        if not rows:
            return
        assert self._dimension is not None
        unique: dict[str, VectorRow] = {}
        for row in rows:
            unique[row.chunk_id] = row
        data = [self._row_dict(row) for row in unique.values()]
        per_batch = max(1, WRITE_BATCH_BYTES // (4 * self._dimension + 2048))
        for start in range(0, len(data), per_batch):
            batch = data[start : start + per_batch]
            self._call(
                "upsert",
                lambda batch=batch: client.upsert(self._collection, batch, timeout=self._timeout),
            )

    def _row_dict(self, row: VectorRow) -> dict[str, Any]:
        assert self._dimension is not None
        vector = _as_vector(row.vector, self._dimension, what=f"vector of chunk {row.chunk_id!r}")
        _check_bytes(row.chunk_id, MAX_CHUNK_ID_BYTES, "chunk_id", allow_empty=False)
        _check_bytes(row.resource_id, RESOURCE_ID_FIELD_BYTES, f"resource_id of {row.chunk_id!r}")
        _check_bytes(row.tenant, MAX_TENANT_BYTES, f"tenant of {row.chunk_id!r}")
        if isinstance(row.acl, str):
            raise InputError(f"acl of chunk {row.chunk_id!r} must be a tuple of tags, not a str")
        if self._attach:
            out: dict[str, Any] = {
                self._f_id: self._id_value(row.chunk_id),
                self._f_resource: row.resource_id,
                self._f_vector: vector,
            }
            if self._f_tenant is not None:
                out[self._f_tenant] = row.tenant
            return out
        if len(row.acl) > MAX_ACL_TAGS:
            raise InputError(
                f"chunk {row.chunk_id!r} has {len(row.acl)} ACL tags; at most {MAX_ACL_TAGS}"
            )
        for tag in row.acl:
            _check_bytes(tag, MAX_ACL_TAG_BYTES, f"ACL tag of {row.chunk_id!r}")
        return {
            F_ID: row.chunk_id,
            F_INDEX: self._index_id,
            F_RESOURCE: row.resource_id,
            F_VERSION: int(row.version),
            F_TENANT: row.tenant,
            F_ACL: list(row.acl),
            F_VECTOR: vector,
        }

    def _id_value(self, chunk_id: str) -> str | int:
        if not self._int_ids:
            return chunk_id
        try:
            return int(chunk_id)
        except ValueError:
            raise InputError(
                f"chunk id {chunk_id!r} is not an integer, but the team collection's id field "
                f"{self._f_id!r} is INT64"
            ) from None

    def delete_ids(self, chunk_ids: Sequence[str]) -> None:
        """See :meth:`DenseIndex.delete_ids`."""
        client = self._ready()
        self._require_writes("delete vectors")
        ids = list(dict.fromkeys(chunk_ids))
        for start in range(0, len(ids), DELETE_BATCH):
            batch = [self._id_value(i) for i in ids[start : start + DELETE_BATCH]]
            self._call(
                "delete by ids",
                lambda batch=batch: client.delete(self._collection, ids=batch, timeout=self._timeout),
            )

    def delete_resource(self, resource_id: str) -> None:
        """See :meth:`DenseIndex.delete_resource`."""
        self.delete_resources([resource_id])

    def delete_resources(self, resource_ids: Sequence[str]) -> None:
        """See :meth:`DenseIndex.delete_resources`: one filtered delete per batch of ids (on
        Milvus Lite each filtered delete scans the collection once)."""
        if not resource_ids:
            return
        client = self._ready()
        self._require_writes("delete resources' vectors")
        ids = list(dict.fromkeys(resource_ids))
        for start in range(0, len(ids), DELETE_BATCH):
            part = ids[start : start + DELETE_BATCH]
            matching = resources_expression(
                part, resource_field=self._f_resource, tenant_field=self._f_tenant
            )
            if not matching:
                continue  # no row can be of these (a team collection without a tenant field)
            expr = self._scoped(f"({matching})")
            self._call(
                "delete by resource",
                lambda expr=expr: client.delete(
                    self._collection, filter=expr, timeout=self._timeout
                ),
            )

    # -- reads -----------------------------------------------------------------------------------

    def search(
        self, vector: Sequence[float], *, limit: int, filter: DenseFilter | None = None
    ) -> list[Hit]:
        """See :meth:`DenseIndex.search`. In attach mode without ``milvus.fields.tenant`` the
        tenant part of ``filter`` is not applied here, and the ACL part never is (a team
        collection has no ACL field): the caller's post-filter enforces them."""
        client = self._ready()
        assert self._dimension is not None
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise InputError(f"search limit={limit!r} must be an int in 1..{MAX_LIMIT}")
        query = _as_vector(vector, self._dimension, what="query vector")
        if filter is not None and filter.resource_ids is not None and not filter.resource_ids:
            return []  # "only these resources" with none listed: nothing is visible
        expr = self._scoped(
            filter_expression(
                filter,
                resource_field=self._f_resource,
                tenant_field=self._f_tenant,
                acl_field=self._f_acl,
            )
        )
        params: dict[str, Any] = {"metric_type": self._metric}
        if self._index_type == "HNSW":
            params["params"] = {"ef": max(HNSW_MIN_EF, limit)}
        output = [self._f_resource]
        if self._f_version is not None:
            output.append(self._f_version)
        if self._f_text is not None:
            output.append(self._f_text)
        if self._f_title is not None:
            output.append(self._f_title)
        result = self._call(
            "search",
            lambda: client.search(
                self._collection,
                data=[query],
                filter=expr,
                limit=limit,
                output_fields=output,
                search_params=params,
                anns_field=self._f_vector,
                consistency_level=self._cfg.consistency_level,
                timeout=self._timeout,
            ),
        )
        hits: list[Hit] = []
        for rank, item in enumerate(result[0] if result else (), start=1):
            distance = float(item["distance"])
            entity = item.get("entity") or {}
            hits.append(
                Hit(
                    chunk_id=str(item.id),
                    path=PATH,
                    rank=rank,
                    raw_score=distance,
                    score=-distance if self._metric == "L2" else distance,
                    detail=self._detail(entity),
                )
            )
        return hits

    def _detail(self, entity: Mapping[str, Any]) -> dict[str, Any]:
        if not self._attach:
            return {"resource_id": entity.get(F_RESOURCE), "version": entity.get(F_VERSION)}
        detail: dict[str, Any] = {"resource_id": entity.get(self._f_resource)}
        if self._f_text is not None:
            detail["text"] = entity.get(self._f_text)
        if self._f_title is not None:
            detail["title"] = entity.get(self._f_title)
        return detail

    def iter_entries(self, batch_size: int = 1000) -> Iterator[tuple[str, str, int]]:
        """See :meth:`DenseIndex.iter_entries` (each resource named by its store key, made of
        the row's id and tenant). In attach mode the version is 0 (unknown)."""
        client = self._ready()
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"iter_entries batch_size={batch_size!r} must be an int >= 1")
        output = [self._f_resource] + [f for f in (self._f_version, self._f_tenant) if f]
        rows = iterate_rows(
            client, self._call, self._collection, self._scoped(""), output,
            batch_size=batch_size, timeout=self._timeout,
        )
        for row in rows:
            version = int(row[self._f_version]) if self._f_version else 0
            tenant = str(row[self._f_tenant] or "") if self._f_tenant else ""
            key = resource_key(str(row[self._f_resource]), tenant)
            yield str(row[self._f_id]), key, version

    def vector_rows(self, batch_size: int = 1000) -> Iterator[VectorRow]:
        """Every row of this index's own collection with its vector, read with Strong
        consistency (what :class:`~hybridsag.vectors.exact.ExactDenseIndex` loads when it is
        given no other source). ConfigError in attach mode: a team's rows are not VectorRows."""
        client = self._ready()
        if self._attach:
            raise ConfigError("vector_rows reads hybridsag's own collection, not a team's")
        output = [F_RESOURCE, F_VERSION, F_TENANT, F_ACL, F_VECTOR]
        for row in iterate_rows(
            client, self._call, self._collection, self._scoped(""), output,
            batch_size=batch_size, timeout=self._timeout,
        ):
            yield VectorRow(
                chunk_id=str(row[F_ID]),
                resource_id=str(row[F_RESOURCE]),
                version=int(row[F_VERSION]),
                tenant=str(row[F_TENANT] or ""),
                acl=tuple(row[F_ACL] or ()),
                vector=row[F_VECTOR],
            )

    def count(self) -> int:
        """See :meth:`DenseIndex.count`."""
        client = self._ready()
        result = self._call(
            "count",
            lambda: client.query(
                self._collection,
                filter=self._scoped(""),
                output_fields=["count(*)"],
                consistency_level="Strong",
                timeout=self._timeout,
            ),
        )
        return int(result[0]["count(*)"])

    def describe(self) -> str:
        """See :meth:`DenseIndex.describe`: ``collection hybridsag_5f0c9a, index 5f0c9a, 120
        vectors``; a team's collection (attach mode) is named as such."""
        owner = "attached (a team's)" if self._attach else f"index {self._index_id}"
        return f"collection {self._collection}, {owner}, {self.count()} vectors"

    def close(self) -> None:
        """See :meth:`DenseIndex.close`."""
        with self._lock:
            client, self._client = self._client, None
            self._dimension = None
            lite_key, self._lite_key = self._lite_key, None
        if client is not None:
            try:
                self._call("close", client.close)
            finally:
                if lite_key is not None:
                    release_lite(lite_key)


def _fields_by_name(description: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(f["name"]): dict(f) for f in description.get("fields", ())}


def _dim_of(field: Mapping[str, Any]) -> int | None:
    params = field.get("params") or {}
    dim = params.get("dim")
    return int(dim) if dim is not None else None


def _as_vector(vector: Sequence[float], dimension: int, *, what: str) -> list[float]:
    return check_vector(vector, dimension, what=what).tolist()


def _check_bytes(value: str, limit: int, what: str, *, allow_empty: bool = True) -> None:
    if not isinstance(value, str):
        raise InputError(f"{what} must be a str, got {type(value).__name__}")
    if not allow_empty and not value:
        raise InputError(f"{what} must not be empty")
    size = len(value.encode("utf-8"))
    if size > limit:
        raise InputError(f"{what} is {size} bytes in UTF-8; the dense index allows {limit}")
