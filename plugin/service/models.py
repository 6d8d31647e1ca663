"""Request and response bodies of the HTTP service (pydantic), reusing the library's result types.

Field checks that the library already makes are delegated to it (query text, weights, filters,
resource fields), so the service and the Python API refuse the same inputs with the same words;
a refusal becomes a 422 naming the field.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    field_validator,
    model_validator,
)

from hybridsag.output.budget import DEFAULT_BUDGET, MAX_BUDGET, MIN_BUDGET
from hybridsag.documents import MAX_SOURCE_URI_CHARS, Format, IngestReport
from hybridsag.errors import HybridSagError
from hybridsag.ingest.manifest import (
    MAX_MANIFEST_FILES,
    PATH_PATTERN,
    ROOT_PATTERN,
    check_rel,
    check_root,
)
from hybridsag.results import SearchResult
from hybridsag.paths import check_path_names, check_weights
from hybridsag.records.filters import Filters
from hybridsag.records.rows import ChunkRecord
from hybridsag.records.schema import SEARCHABLE_STATUSES
from hybridsag.settings import EXPERIMENT_NAME_PATTERN, ExperimentSettings

__all__ = [
    "ErrorDetail",
    "ErrorOut",
    "ExclusionOut",
    "ExperimentOut",
    "FeedbackIn",
    "FeedbackOut",
    "HealthOut",
    "IngestOut",
    "ManifestFileIn",
    "Sha256",
    "ReadyOut",
    "ReconcileRequest",
    "ResourceIn",
    "ResourceOut",
    "ResourcePageOut",
    "ResourceSummaryOut",
    "SearchFilters",
    "SearchOut",
    "SearchRequest",
    "SyncCommitIn",
    "SyncIn",
    "SyncOut",
    "SyncPath",
    "SyncRoot",
    "WhoAmIOut",
    "WriteOut",
    "inline_schema",
]

PathName = Annotated[str, StringConstraints(min_length=1, max_length=64)]
Status = Literal["ready", "disabled"]

assert set(Status.__args__) == set(SEARCHABLE_STATUSES)  # type: ignore[attr-defined]


#: A searchable query: something besides whitespace, and no control character but tab, CR, LF
#: (what ``hybridsag.paths.query.validate_query`` accepts, as a JSON-schema pattern).
_CONTROL = r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"
QUERY_PATTERN = rf"^[^{_CONTROL}]*[^\s{_CONTROL}][^{_CONTROL}]*$"
#: A metadata key a filter may name (``hybridsag.records.store.Filters``).
META_KEY_PATTERN = r"^[A-Za-z0-9_.\-]{1,128}$"

MetaKey = Annotated[str, StringConstraints(pattern=META_KEY_PATTERN)]
Tag = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=rf"^[^{_CONTROL}]+$")]


def _json_number(value: Any) -> Any:
    """Numbers stay numbers: JSON ``"5"`` or ``true`` is not taken for 5 or 1 (pydantic's lax
    mode would), so the schema's types are exactly what the service accepts."""
    if isinstance(value, str | bool):
        raise ValueError(f"must be a JSON number, got {type(value).__name__} {value!r:.40}")
    return value


ExperimentName = Annotated[str, StringConstraints(pattern=EXPERIMENT_NAME_PATTERN)]
UnitId = Annotated[
    str, StringConstraints(min_length=1, max_length=256, pattern=rf"^[^{_CONTROL}]+$")
]
TopK = Annotated[int, Field(ge=1, le=1000), BeforeValidator(_json_number)]
Weight = Annotated[
    float, Field(ge=0.0, le=100.0, allow_inf_nan=False), BeforeValidator(_json_number)
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SearchFilters(_Body):
    """Who may see what (``hybridsag.records.store.Filters``). A tenant-scoped token's own tenant and
    ACL tags are forced in; it may only narrow them."""

    tenant: str | None = Field(None, max_length=256)
    acl: list[Tag] | None = Field(None, max_length=256)
    metadata: dict[MetaKey, str | int | float | bool] = Field(
        default_factory=dict, max_length=64, json_schema_extra={"additionalProperties": False}
    )
    resource_ids: list[str] | None = Field(None, max_length=10_000)
    statuses: list[Status] = Field(default_factory=lambda: ["ready"], min_length=1)

    @model_validator(mode="after")
    def _check(self) -> SearchFilters:
        for key, value in self.metadata.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"metadata[{key!r}]={value!r} must be a finite number")
        try:
            Filters.from_mapping(self.as_mapping())
        except HybridSagError as exc:
            raise ValueError(str(exc)) from None
        return self

    def as_mapping(self) -> dict[str, Any]:
        """The fields that were set, as ``Filters.from_mapping`` takes them."""
        return self.model_dump(exclude_none=True)


class SearchRequest(_Body):
    """``POST /v1/search``: the arguments of ``HybridSearch.search``."""

    query: str = Field(
        ...,
        min_length=1,
        max_length=1_000_000,
        pattern=QUERY_PATTERN,
        description="the question: not blank, no control characters but tab and newlines, at "
        "most query.max_chars characters",
    )
    top_k: TopK | None = Field(None, description="at most server.max_top_k")
    paths: list[PathName] | None = Field(
        None, min_length=1, max_length=16, description="registered path names (the schema lists them)"
    )
    filters: SearchFilters = Field(default_factory=SearchFilters)
    weights: dict[PathName, Weight] | None = None
    judge_order: StrictBool | None = None
    explain: StrictBool = True
    include_stale: StrictBool | None = None
    min_confidence: (
        Annotated[
            float, Field(ge=0.0, le=1.0, allow_inf_nan=False), BeforeValidator(_json_number)
        ]
        | None
    ) = Field(
        None,
        description="0..1: a response whose confidence (the calibrated probability that its top "
        "result answers the query) is below it returns no results; confidence and withheld "
        "still say why",
    )
    format: Literal["json", "agent"] = Field(
        "json",
        description='"json": the result objects (application/json); "agent": the results grouped '
        "by file and heading with line numbers and short quotes (text/plain, at most `budget` "
        "characters), as `hybridsag search --format agent` prints them",
    )
    budget: Annotated[
        int, Field(ge=MIN_BUDGET, le=MAX_BUDGET), BeforeValidator(_json_number)
    ] = Field(DEFAULT_BUDGET, description='characters of the "agent" text')
    user: UnitId | None = Field(
        None,
        description="a user or session id: with an experiment running, it picks the caller's "
        "arm (a stable hash); the log keeps only a hash of it",
    )
    experiment: ExperimentName | None = Field(
        None, description="the experiment to join (default: the first one running, with a user)"
    )

    @field_validator("paths")
    @classmethod
    def _paths(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else list(check_path_names(value, where="paths"))

    @field_validator("weights")
    @classmethod
    def _weights(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        return None if value is None else check_weights(value)


class SearchOut(_Body):
    """The same object as ``hybridsag search --json``."""

    model_config = ConfigDict(frozen=True)

    query: str
    stages: dict[str, dict[str, float]]
    paths: list[str]
    degraded: bool
    reasons: dict[str, str]
    timings: dict[str, float]
    usage: dict[str, Any]
    #: the per-query trust step's decision (weights, judge_holds, dense_share, signals); empty
    #: when ``fusion.trust`` is off
    trust: dict[str, Any] = {}
    #: results held back because their source files changed since indexing (``include_stale``
    #: off): how many, and each one's chunk_id, resource_id, tenant and reason
    stale_hidden: int = 0
    stale_hidden_ids: list[dict[str, Any]] = []
    #: the calibrated probability (0..1) that the top result answers the query (0 when nothing
    #: was found)
    confidence: float | None = None
    #: the match (the probability that the index holds an answer) is below
    #: search.no_match_below: the results are weak ("no good match")
    no_good_match: bool = False
    #: why the results were withheld (min_confidence above the confidence); None when not
    withheld: str | None = None
    results: list[SearchResult]
    #: under an experiment: the id feedback names, the experiment, the arm ("interleaved" for
    #: an interleaving experiment) and, when interleaved, the arm of each result
    query_id: str | None = None
    experiment: str | None = None
    arm: str | None = None
    teams: list[str] | None = None


class FeedbackIn(_Body):
    """``POST /v1/feedback``: a click (or other feedback) on a result of a search answered
    under an experiment, named by its 1-based ``position`` or its ``chunk_id``."""

    query_id: str = Field(..., min_length=1, max_length=64)
    position: Annotated[int, Field(ge=1, le=1000), BeforeValidator(_json_number)] | None = None
    chunk_id: str | None = Field(None, min_length=1, max_length=1024)
    kind: Literal["click", "skip", "like", "dislike"] = "click"

    @model_validator(mode="after")
    def _one(self) -> FeedbackIn:
        if (self.position is None) == (self.chunk_id is None):
            raise ValueError("give one of position or chunk_id")
        return self


class FeedbackOut(_Body):
    """What was recorded: the result's position, chunk and the arm it came from."""

    model_config = ConfigDict(frozen=True)

    query_id: str
    experiment: str
    seq: int
    kind: str
    position: int
    chunk_id: str
    arm: str


class ExperimentOut(ExperimentSettings):
    """An experiment: its definition, whether it takes traffic, where it was defined."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Literal["settings", "service"]


class ResourceIn(_Body):
    """One resource of ``POST /v1/resources`` (a line of ``index --jsonl`` in JSON): ``_id`` or
    ``id``, ``text``, and optional ``title``, ``metadata``, ``tenant``, ``acl``, ``format``.
    A tenant-scoped token's tenant is the default; another tenant, or an ACL tag the token lacks,
    is refused."""

    id: str = Field(
        ...,
        min_length=1,
        max_length=512,
        validation_alias=AliasChoices("_id", "id", "resource_id"),
    )
    text: str
    title: str = Field("", max_length=2000)
    metadata: dict[str, Any] = Field(default_factory=dict)
    tenant: str | None = Field(None, max_length=256)
    acl: list[Tag] = Field(default_factory=list, max_length=256)
    format: Format = "markdown"


class IngestOut(_Body):
    """The ingest report (``IngestReport.as_dict()``)."""

    model_config = ConfigDict(frozen=True)

    indexed: int
    unchanged: int
    chunks: int
    vectors: int
    errors: dict[str, str]
    warnings: list[str] = Field(default_factory=list)
    seconds: float
    #: folder ingest and folder sync only: the root of the ids, the ids pruned, notes, and the
    #: files left out because they were deleted by hand (excluded until ``hybridsag include``)
    root: str | None = None
    pruned: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    excluded: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, report: IngestReport) -> IngestOut:
        return cls(**report.as_dict())


class ResourceOut(_Body):
    """``GET /v1/resources/{id}``: the record (as ``hybridsag show --json`` has it: status,
    version, source file, whether that file changed since it was indexed), and the current
    version's chunks with their text."""

    model_config = ConfigDict(frozen=True)

    resource_id: str
    title: str
    title_norm: str = ""
    status: str
    version: int
    pending_version: int | None = None
    tenant: str
    acl: list[str]
    metadata: dict[str, Any]
    content_sha256: str
    source_uri: str | None = None
    source_root: str | None = None
    source_mtime_ns: int | None = None
    source_size: int | None = None
    source_sha256: str | None = None
    created_at: float = 0.0
    updated_at: float
    error: str | None
    stale: bool = False
    #: why the source file is stale ("changed on disk", "deleted on disk", ...), else None
    stale_reason: str | None = None
    chunks: list[ChunkRecord]

    @classmethod
    def of(cls, detail: dict[str, Any], chunks: list[ChunkRecord]) -> ResourceOut:
        """From ``LocalBackend.show`` (its keys this model has) and the chunks."""
        fields = {k: v for k, v in detail.items() if k in cls.model_fields and k != "chunks"}
        return cls(**fields, chunks=chunks)


class ExclusionOut(_Body):
    """A folder file kept out of its folder's index (``Exclusion.as_dict()``): deleted by hand
    while it stayed on disk, until ``hybridsag include`` lifts it."""

    model_config = ConfigDict(frozen=True)

    resource_id: str
    tenant: str
    status: Literal["excluded"]
    source_root: str
    source_uri: str
    acl: list[str]
    excluded_at: float


class ResourceSummaryOut(_Body):
    """One resource of a listing (``hybridsag list --json``)."""

    model_config = ConfigDict(frozen=True)

    resource_id: str
    status: str
    version: int
    chunks: int
    title: str
    tenant: str
    source_uri: str | None
    source_root: str | None


class ResourcePageOut(_Body):
    """``GET /v1/resources``: one page of resources, oldest first; ``next_cursor`` (None after
    the last page) is the ``cursor`` of the next."""

    model_config = ConfigDict(frozen=True)

    resources: list[ResourceSummaryOut]
    next_cursor: str | None


class WhoAmIOut(_Body):
    """``GET /v1/whoami``: the caller's token and the service's version."""

    model_config = ConfigDict(frozen=True)

    name: str
    role: str
    tenant: str | None = Field(description="the token's tenant; None: every tenant (an admin)")
    acl: list[str]
    version: str


class WriteOut(_Body):
    """What a delete, disable or enable did."""

    model_config = ConfigDict(frozen=True)

    resource_id: str
    done: bool
    action: Literal["deleted", "disabled", "enabled"]


class ReconcileRequest(_Body):
    """``POST /v1/reconcile``: a dry run (the plan only) unless ``apply`` is true."""

    apply: StrictBool = False
    force: StrictBool = False


class HealthOut(_Body):
    """``/healthz``: the process answers; its pid, and its worker slot in a service of several
    workers (None: one process)."""

    status: Literal["ok"] = "ok"
    pid: int
    worker: int | None = None


class ReadyOut(_Body):
    """``/readyz``: ready or not; with a token that may read ``/metrics``, each check's result
    and the reconcile schedule too (left out otherwise)."""

    ready: bool
    checks: dict[str, str] | None = None
    reconciler: dict[str, Any] | None = None


class ErrorDetail(_Body):
    model_config = ConfigDict(frozen=True)

    loc: list[str | int]
    msg: str
    type: str


class ErrorOut(_Body):
    """Every error answer: FastAPI's validation shape, one entry per problem, ``loc`` naming the
    field (``["body", "top_k"]``, ``["header", "authorization"]``, ``["path", "resource_id"]``)."""

    model_config = ConfigDict(frozen=True)

    detail: list[ErrorDetail]


# --------------------------------------------------------------------------- folder sync


def _library_check(check: Any) -> Any:
    """A before-validator running ``check`` (a :mod:`hybridsag.ingest.manifest` check) on a string,
    so a refusal says what :mod:`hybridsag.ingest.manifest` says rather than quoting the pattern
    (which the schema still carries)."""

    def validate(value: Any) -> Any:
        if isinstance(value, str):
            try:
                check(value)
            except HybridSagError as exc:
                raise ValueError(str(exc)) from None
        return value

    return BeforeValidator(validate)


SyncRoot = Annotated[
    str,
    StringConstraints(min_length=2, max_length=MAX_SOURCE_URI_CHARS, pattern=ROOT_PATTERN),
    _library_check(check_root),
]
SyncPath = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_SOURCE_URI_CHARS, pattern=PATH_PATTERN),
    _library_check(check_rel),
]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
_SYNC_ROOT = Field(
    ...,
    description="the client's folder: an absolute, normalised path on the client's disk (a "
    "label here: the service never reads it); recorded as the resources' source_root",
)
_SYNC_TENANT = Field(
    None,
    max_length=256,
    pattern=r"^[^\x00-\x1f\x7f-\x9f]*$",
    description='the tenant the files land in (default: a tenant token\'s own, or "" for an '
    "admin); a tenant token may name only its own",
)


class ManifestFileIn(_Body):
    """One file of a folder's manifest: its path relative to the folder (as ``a/b.md``), its
    size and mtime (ns) on the client's disk, and the SHA-256 of its bytes."""

    path: SyncPath
    # neither is stored (the size is compared with the limits): no bound beyond that
    size: Annotated[int, Field(ge=0), BeforeValidator(_json_number)]
    mtime_ns: Annotated[int, BeforeValidator(_json_number)]
    sha256: Sha256


class SyncIn(_Body):
    """``POST /v1/sync``: a folder's manifest (every file a folder index of it would read)."""

    root: SyncRoot = _SYNC_ROOT
    tenant: str | None = _SYNC_TENANT
    acl: list[Tag] = Field(default_factory=list, max_length=256)
    prune: StrictBool = True
    files: list[ManifestFileIn] = Field(default_factory=list, max_length=MAX_MANIFEST_FILES)

    @model_validator(mode="after")
    def _unique(self) -> SyncIn:
        seen: set[str] = set()
        for i, f in enumerate(self.files):
            if f.path in seen:
                raise ValueError(f"files[{i}].path {f.path!r:.200} is listed twice")
            seen.add(f.path)
        return self


class SyncOut(_Body):
    """What the service needs of a manifest (``hybridsag.ingest.manifest.SyncNeed``): ``need``, the
    paths to upload; ``unchanged``; ``errors`` by id (files it will not take, and why);
    ``held``, the paths of resources under the folder that the manifest does not name (the
    commit prunes those the client's folder no longer holds); ``id_root``, the folder ids are
    relative to, and ``notes`` on why; ``max_upload_bytes``, the largest upload taken;
    ``excluded``, the ids of files deleted by hand while they stayed (not indexed until
    ``hybridsag include``)."""

    model_config = ConfigDict(frozen=True)

    root: str
    id_root: str
    need: list[str]
    unchanged: int
    errors: dict[str, str]
    held: list[str]
    notes: list[str]
    max_upload_bytes: int
    excluded: list[str] = Field(default_factory=list)


class SyncCommitIn(_Body):
    """``POST /v1/sync/commit``: every file the client's folder still holds (relative to
    ``root``: the manifest's, and those of ``held`` still on its disk); with ``prune``, the
    folder's other resources are deleted, unless ``paths`` is empty."""

    root: SyncRoot = _SYNC_ROOT
    tenant: str | None = _SYNC_TENANT
    prune: StrictBool = True
    paths: list[SyncPath] = Field(default_factory=list, max_length=MAX_MANIFEST_FILES)


def inline_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A model's JSON schema with its ``$defs`` put in place of their ``$ref`` entries, for a
    request body a handler parses itself (given to the OpenAPI document in ``openapi_extra``,
    where a ``#/$defs/...`` reference would point at the document's root)."""
    defs = schema.get("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve({**defs[ref.removeprefix("#/$defs/")], **{k: v for k, v in node.items() if k != "$ref"}})
            return {k: resolve(v) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    return resolve(schema)  # type: ignore[no-any-return]
