"""The FastAPI app factory: ``create_app(settings, reconciler=...)``.

The app holds one warm :class:`~hybridsag.search.HybridSearch`. Its lifespan builds it on a
thread and runs one search (store, model, Milvus and judge loaded) while ``/healthz`` already
answers and ``/readyz`` says 503 "warming up"; after that ``/readyz`` checks the store, Milvus
and the model (one embedding), at most once per ``server.ready_cache_s``, and answers from the
last check in between. Without a token it says only ready or not; the per-component checks and
counts take what ``/metrics`` takes (an admin token, or none with ``server.public_metrics``).
On shutdown it stops the reconcile job, cancels the write in flight (a long ingest stops at its
next cancellation point and is undone), lets every admitted search finish, and closes the
search.

Before any route, :mod:`hybridsag.service.edge` gives the request an id, authenticates API
calls (before their body is read) and logs and counts every answer, and
:class:`~hybridsag.service.limits.BodyGuard` reads and checks the body (framing, content type:
JSON, or a file's raw bytes on the folder sync's upload route (:mod:`hybridsag.service.sync`);
size, stalls, nesting). There is no ``/docs`` nor ``/redoc`` (Swagger UI and ReDoc load
their code from a CDN): ``/openapi.json`` is the schema.

Handlers hold no logic of their own: they check the caller's scope
(:mod:`hybridsag.service.auth`), hand the call to a :class:`~hybridsag.service.limits.Gate`, which
runs it on the service's :class:`~hybridsag.backend.LocalBackend` (the same operations the CLI,
MCP and the framework adapters call in process), and turn the result into the response model.
One exception handler maps the ``HybridSagError`` tree to status codes (input 422, not found
404, auth 401/403, overload 429 with Retry-After, consistency refused 409, a backend or timeout
503, configuration 500, every 5xx logged with its traceback); every error body has FastAPI's
validation shape ``{"detail": [{"loc", "msg", "type"}]}``.

Watched folders (``[sources] watch``) are indexed and then followed by a
:class:`~hybridsag.service.watch.FolderWatcher` once the service is warm, through the same write
gate as every write; ``/readyz`` answers 503 until their first index is applied (a client that
waits for ready then searches them whole), and its detail says how it is doing (``sources``).

Reconcile and audit come from ``reconciler`` (a :class:`~hybridsag.backend.ReconcileHooks`),
which the caller passes in: this package (``hybridsag``) never imports ``hybridsag.consistency``;
the ``serve`` command, registered by that package, wires its implementation in. Without hooks
there is no ``/v1/reconcile`` nor ``/v1/audit/latest``.

``GET /v1/resources`` lists resources a page at a time (oldest first; ``next_cursor`` continues),
scoped as a search is: a tenant-scoped token lists its own tenant's resources that its ACL tags
reach, in the statuses it sees. ``GET /v1/whoami`` names the caller's token (name, role, tenant)
and the service's version, for ``hybridsag --server URL doctor``.
"""

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Literal

import anyio
from fastapi import APIRouter, Depends, FastAPI, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import TypeAdapter, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from hybridsag import __version__
from hybridsag.output.agent import agent_text
from hybridsag.ab.online import Experiments
from hybridsag.backend import PAGE_MAX, LocalBackend, ReconcileHooks, SearchOptions
from hybridsag.documents import Document
from hybridsag.errors import (
    AuthError,
    ConfigError,
    ConsistencyError,
    ForbiddenError,
    HybridSagError,
    IngestError,
    InputError,
    NotFoundError,
    OverloadError,
)
from hybridsag.paths import path_names
from hybridsag.paths.query import validate_query
from hybridsag.search import HybridSearch
from hybridsag.service import experiments, sync, ui
from hybridsag.service.board import FAILED, HEARTBEAT_S, READY, WorkerSeat
from hybridsag.service.auth import Principal, TokenBook
from hybridsag.service.edge import Edge, Gatekeeper, bearer_token
from hybridsag.service.limits import (
    NDJSON_TYPES,
    BodyBudget,
    BodyGuard,
    Gate,
    GateTimeout,
    media_type,
)
from hybridsag.service.metrics import CONTENT_TYPE, ServiceMetrics
from hybridsag.service.watch import FolderWatcher
from hybridsag.service.models import (
    ErrorOut,
    ExclusionOut,
    HealthOut,
    IngestOut,
    ReadyOut,
    ReconcileRequest,
    ResourceIn,
    ResourceOut,
    ResourcePageOut,
    SearchOut,
    SearchRequest,
    WhoAmIOut,
    WriteOut,
)
from hybridsag.settings import Settings
from hybridsag.records.schema import STATUSES

__all__ = ["API_PREFIX", "ServiceState", "create_app"]

API_PREFIX = "/v1"

logger = logging.getLogger(__name__)

#: How long /readyz's deep check waits for a remote embedding model's one answer (no retry).
READY_PROBE_S = 5.0

_RESOURCES = TypeAdapter(list[ResourceIn])
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 403, 404, 408, 413, 415, 422, 429, 500, 503)
}


def _detail(loc: list[str | int], msg: str, kind: str) -> dict[str, Any]:
    return {"detail": [{"loc": loc, "msg": msg, "type": kind}]}


class FieldError(InputError):
    """Bad input in a known field of the request (``loc`` as FastAPI writes it)."""

    def __init__(self, loc: list[str | int], message: str) -> None:
        super().__init__(message)
        self.loc = loc


class ServiceState:
    """Everything the handlers share: settings, tokens, gates, metrics, the warm search."""

    def __init__(
        self,
        settings: Settings,
        *,
        search: HybridSearch | None,
        reconciler: ReconcileHooks | None,
        seat: WorkerSeat | None = None,
    ) -> None:
        s = settings.server
        self.settings = settings
        self.tokens = TokenBook(s)
        self.reconciler = reconciler
        #: this worker's place among several (hybridsag.service.workers); None: one process
        self.seat = seat
        #: the reconcile schedule and the watched folders run here: in worker 0 of several
        self.runs_jobs = seat is None or seat.slot == 0
        self.metrics = ServiceMetrics(
            self.counts, multiprocess_dir=seat.metrics_dir if seat is not None else None
        )
        self._owns_search = search is None
        self.search: HybridSearch | None = search
        #: the A/B experiments and their event store (hybridsag.ab), opened by warm()
        self.experiments: Experiments | None = None
        #: the operations every handler calls, over the warm search (built by warm())
        self.backend: LocalBackend | None = None
        self.ready = False
        #: set by close(): writes in flight are cancelled (hybridsag.ingest.writer's cancel event)
        self.stopping = threading.Event()
        self.warm_error: str | None = None
        #: the last deep check of /readyz: (time.monotonic() when done, checks)
        self._checked: tuple[float, dict[str, str]] | None = None
        self._checking = asyncio.Lock()

        def gate(kind: str, workers: int, queue: int) -> Gate:
            return Gate(
                kind, workers=workers, queue=queue, retry_after_s=s.retry_after_s,
                on_change=lambda n: self.metrics.in_flight.labels(kind=kind).set(n),
            )  # fmt: skip

        self.searches = gate("search", s.search_concurrency, s.search_queue)
        # one writer thread: service writes are serialised, so a scope check and the write it
        # guards cannot interleave with another service write; tenants' writes take turns
        self.writes = gate("write", 1, s.max_pending_writes - 1)
        # what a write needs first and may take long, never on the writer: a folder sync's
        # manifest compared with the records (a read), an upload converted (in its sandbox)
        self.manifests = gate("manifest", 1, s.max_pending_writes - 1)
        self.conversions = gate("conversion", s.conversions, s.max_pending_writes - 1)
        #: keeps sources.watch in sync (hybridsag.service.watch), started once warm
        self.watcher: FolderWatcher | None = None
        if settings.sources.watch and self.runs_jobs:
            self.watcher = FolderWatcher(
                settings.sources,
                search=self.hs,
                writes=self.writes,
                cancel=self.stopping,
                metrics=self.metrics,
                retry_after_s=s.retry_after_s,
            )

    # -- lifecycle ------------------------------------------------------------------------------

    def warm(self) -> None:
        """Build the search (unless given) and load everything a search and a write use: one
        search runs every configured path (store, model, Milvus, judge); the claims of a dead
        process are released."""
        t0 = time.perf_counter()
        try:
            if self.search is None:
                self.search = HybridSearch(self.settings)
            if self.experiments is None:
                self.experiments = Experiments(self.settings)
            self.backend = LocalBackend(
                self.search, reconciler=self.reconciler, experiments=self.experiments
            )
            self.search.search("hybridsag warm-up", top_k=1)
            # jieba's dictionary (about 0.5 s, seconds on a loaded machine) loads on the first
            # Han text, which the warm-up query has none of: loaded here, not in a request
            self.search.components.tokenizer.warm()
            self.search.counts()
            # a process SIGKILLed mid-write (this service's last run, say) holds no id once
            # this one starts: its claims are released now, not at the next write
            released = self.search.components.writer().release_abandoned()
            if released:
                logger.info("released %d abandoned claim(s): %s", len(released), released[:10])
        except HybridSagError as exc:
            self.warm_error = f"{type(exc).__name__}: {exc}"
            logger.error("warm-up failed: %s", self.warm_error)
            if self.seat is not None:
                self.seat.mark(FAILED)
            return
        self.ready = True
        logger.info("warm in %.2f s; ready", time.perf_counter() - t0)

    def close(self) -> None:
        """Stop the schedule, cancel the write in flight (it stops at its next cancellation
        point, undone: :class:`~hybridsag.errors.WriteCancelledError`), finish admitted work,
        close the search (if the app built it)."""
        self.stopping.set()  # a long write stops at its next cancellation point, undone
        self.ready = False
        if self.reconciler is not None:
            self.reconciler.stop_schedule()
        self.conversions.close()
        self.manifests.close()
        self.writes.close()
        self.searches.close()
        if self.search is not None and self._owns_search:
            self.search.close()
        if self.experiments is not None:
            self.experiments.close()

    # -- shared reads ---------------------------------------------------------------------------

    def counts(self) -> dict[str, int] | None:
        if not self.ready or self.search is None:
            return None
        return self.search.counts()

    def hs(self) -> HybridSearch:
        """The warm search; 503 (retriable) while warming up."""
        if not self.ready or self.search is None:
            raise GateTimeout(
                "the service is warming up" if self.warm_error is None
                else f"the service failed to warm up: {self.warm_error}"
            )
        return self.search

    def ops(self) -> LocalBackend:
        """The backend every handler calls; 503 (retriable) while warming up."""
        self.hs()
        assert self.backend is not None  # built by warm() before ready
        return self.backend

    async def cached_checks(self) -> dict[str, str]:
        """:meth:`checks`, run on a thread at most once per ``server.ready_cache_s`` (callers
        that come while it runs wait for that run)."""
        ttl = self.settings.server.ready_cache_s
        async with self._checking:
            if self._checked is None or time.monotonic() - self._checked[0] >= ttl:
                checks = await anyio.to_thread.run_sync(self.checks)
                self._checked = (time.monotonic(), checks)
            return self._checked[1]

    def checks(self) -> dict[str, str]:
        """``/readyz``: the store, the Milvus lexical index (when it is on), Milvus and the model
        (one vector asked of it past every cache: :data:`READY_PROBE_S` for a remote one), each
        "ok ..." or the error."""
        hs = self.hs()
        out: dict[str, str] = {}
        try:
            c = hs.counts()
            out["store"] = f"ok: {c['resources']} resources, {c['chunks']} chunks"
        except HybridSagError as exc:
            out["store"] = f"failed: {exc}"
        if self.watcher is not None:
            out["sources"] = self.watcher.describe()
        parts = hs.components
        if self.settings.lexical.backend in ("milvus", "tantivy"):  # an engine outside the store
            try:
                out["lexical"] = f"ok: {parts.lexical.describe()}"
            except HybridSagError as exc:
                out["lexical"] = f"failed: {exc}"
        if not parts.dense_enabled:
            out["milvus"] = out["model"] = "off (embedding.model = 'none')"
            return out
        try:
            out["milvus"] = f"ok: {parts.dense_index().count()} vectors"
        except HybridSagError as exc:
            out["milvus"] = f"failed: {exc}"
        try:
            emb = parts.embedder()
            # asked now, past the query memo and any cache: a remote model answering 401 is
            # not "ok" because an earlier vector was remembered
            emb.probe(timeout_s=READY_PROBE_S)
            out["model"] = f"ok: {emb.name}"
        except HybridSagError as exc:
            out["model"] = f"failed: {exc}"
        return out


def _state(request: Request) -> ServiceState:
    return request.app.state.service


_bearer = HTTPBearer(auto_error=False, description="a token from server.token or server.tokens")


def _caller(role: str) -> Callable[..., Principal]:
    def caller(
        request: Request,
        credentials: HTTPAuthorizationCredentials | None = Security(_bearer),  # for the schema
    ) -> Principal:
        # the Gatekeeper authenticated every API request before its body was read
        principal: Principal | None = request.scope.get("state", {}).get("principal")
        if principal is None:
            token = credentials.credentials if credentials is not None else None
            principal = _state(request).tokens.principal(token)
        return principal.require(role)

    return caller


def _known_query(request: Request) -> None:
    """422 for a query parameter the endpoint does not take (unknown keys are errors here as
    in the settings and the bodies), or one given more than once."""
    allowed: set[str] = set()
    todo = [getattr(request.scope.get("route"), "dependant", None)]
    while todo:  # the route's dependency tree: its own query parameters and its dependencies'
        dependant = todo.pop()
        if dependant is not None:
            allowed.update(p.alias for p in dependant.query_params)
            todo.extend(dependant.dependencies)
    for name in request.query_params:
        if name not in allowed:
            raise FieldError(
                ["query", name],
                f"unknown query parameter {name!r}; valid: {sorted(allowed) or 'none'}",
            )
        given = len(request.query_params.getlist(name))
        if given > 1:  # each parameter is one value: a repeated one is not silently the last
            raise FieldError(
                ["query", name], f"query parameter {name!r} given {given} times; give it once"
            )


reader = Depends(_caller("read"))
writer = Depends(_caller("write"))
admin = Depends(_caller("admin"))

probes = APIRouter(tags=["probes"])
api = APIRouter(prefix=API_PREFIX, responses=_ERRORS, dependencies=[Depends(_known_query)])
ops = APIRouter(
    prefix=API_PREFIX,
    tags=["consistency"],
    responses=_ERRORS,
    dependencies=[Depends(_known_query)],
)


@probes.get("/healthz", response_model=HealthOut)
def healthz(request: Request) -> HealthOut:
    """The process answers (nothing else checked); it names itself: its pid and, in a service
    of several workers (``server.workers``), its worker slot."""
    seat = _state(request).seat
    return HealthOut(pid=os.getpid(), worker=seat.slot if seat is not None else None)


@api.get("/whoami", response_model=WhoAmIOut, tags=["probes"])
def whoami(caller: Principal = reader) -> WhoAmIOut:
    """The caller's token (its name, role, tenant: None for an admin's every tenant, ACL tags)
    and the service's version: what ``hybridsag --server URL doctor`` shows."""
    return WhoAmIOut(
        name=caller.name, role=caller.role, tenant=caller.tenant if caller.scoped else None,
        acl=list(caller.acl), version=__version__,
    )  # fmt: skip


def _metrics_rule(state: ServiceState, token: str | None) -> None:
    """What ``/metrics`` and the detail of ``/readyz`` need: an admin token, unless
    ``server.public_metrics``; AuthError or ForbiddenError otherwise."""
    if not state.settings.server.public_metrics:
        state.tokens.principal(token).require("admin")


_READY = {
    200: {"model": ReadyOut},
    503: {"model": ReadyOut},
    401: {"model": ErrorOut},
    403: {"model": ErrorOut},
}


@probes.get("/readyz", response_model=ReadyOut, response_model_exclude_none=True, responses=_READY)
async def readyz(request: Request) -> Response:
    """Warm, the watched folders' first index applied, and the store, Milvus and the model
    answer: 200 ``{"ready": true}``; else 503.
    Checked at most once per ``server.ready_cache_s``. With a token that may read ``/metrics``
    (or none needed: ``server.public_metrics``, ``server.auth = false``) the answer also has
    each check's result and the reconcile schedule; an unknown token or one without that right
    gets 401/403. (The token is optional, so the schema declares none.)"""
    state = _state(request)
    s = state.settings.server
    token = bearer_token(request.headers.get("authorization"))
    detailed = s.public_metrics or not state.tokens.enabled or token is not None
    if detailed:
        _metrics_rule(state, token)
    watcher = state.watcher
    workers_ready, workers = True, ""
    if state.seat is not None:  # several workers: ready when every one of them is
        workers_ready, workers = state.seat.board.describe()
    if not state.ready or (watcher is not None and not watcher.first_index_done) or not workers_ready:
        checks = {"warm": state.warm_error or "warming up"}
        if state.ready and watcher is not None and not watcher.first_index_done:
            checks = {"warm": f"sources: {watcher.describe()}"}
        elif state.ready:  # this worker is ready, another is not
            checks = {"workers": workers}
        body = ReadyOut(ready=False, checks=checks if detailed else None)
        return JSONResponse(
            body.model_dump(exclude_none=True),
            status_code=503,
            headers={"Retry-After": str(s.retry_after_s)},
        )
    checks = await state.cached_checks()
    ok = all(not v.startswith("failed") for v in checks.values())
    if workers:
        checks = {**checks, "workers": workers}
    body = ReadyOut(ready=ok)
    if detailed:
        schedule = None
        if state.reconciler is not None:
            schedule = {"scheduled": s.reconciler, "next_run": state.reconciler.next_run()}
        body = ReadyOut(ready=ok, checks=checks, reconciler=schedule)
    return JSONResponse(body.model_dump(exclude_none=True), status_code=200 if ok else 503)


@probes.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE: {}}}, 401: {"model": ErrorOut}, 403: {"model": ErrorOut}},
)
def metrics(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Security(_bearer),
) -> Response:
    """Prometheus text format; needs an admin token unless server.public_metrics."""
    state = _state(request)
    _metrics_rule(state, credentials.credentials if credentials is not None else None)
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)


_AGENT_TEXT = {200: {"content": {"text/plain": {"schema": {"type": "string"}}}}}


@api.post("/search", response_model=SearchOut, tags=["search"], responses=_AGENT_TEXT)
async def search(body: SearchRequest, request: Request, caller: Principal = reader) -> Any:
    """Search: the same result objects as ``hybridsag search --json``; with ``format: "agent"``
    the text ``hybridsag search --format agent`` prints (text/plain). A tenant-scoped token's
    tenant and ACL tags are forced into ``filters``."""
    state = _state(request)
    s = state.settings
    try:
        validate_query(body.query, max_chars=s.query.max_chars)
    except InputError as exc:
        raise FieldError(["body", "query"], str(exc)) from None
    if body.top_k is not None and body.top_k > s.server.max_top_k:
        raise FieldError(
            ["body", "top_k"], f"top_k={body.top_k} is over server.max_top_k={s.server.max_top_k}"
        )
    filters = caller.scope_filters(body.filters.as_mapping())
    backend = state.ops()
    if body.user is not None or body.experiment is not None:
        joined = await _experiment_search(state, body, caller, filters)
        if joined is not None:
            return joined
    options = SearchOptions(
        top_k=body.top_k,
        paths=tuple(body.paths) if body.paths is not None else None,
        filters=filters,
        include_stale=body.include_stale,
        judge_order=body.judge_order,
        weights=body.weights,
        explain=body.explain,
        min_confidence=body.min_confidence,
    )
    out = await state.searches.run(
        lambda: backend.search(body.query, options), timeout=s.server.search_timeout_s,
        lane=caller.lane,
    )
    state.metrics.observe_search(out)
    if body.format == "agent":
        return PlainTextResponse(agent_text(out, body.budget))
    return out


#: ``POST /v1/search``'s handler under a name no ``create_app`` argument shadows (the page's
#: own search runs it: :func:`hybridsag.service.ui.build_router`).
search_handler = search


async def _experiment_search(
    state: ServiceState, body: SearchRequest, caller: Principal, filters: dict[str, Any]
) -> dict[str, Any] | None:
    """A search under the experiment the request joins (hybridsag.ab), or None when it joins
    none. The arm decides paths, weights and judge order, so a request that joins an experiment
    may not set them."""
    backend = state.ops()
    joined = backend.applicable_experiment(body.experiment, body.user)
    if joined is None:
        return None
    if body.format == "agent":
        raise FieldError(
            ["body", "format"],
            f'format "agent" cannot join experiment {joined!r} (its feedback '
            "needs the JSON answer's query_id); ask for JSON, or leave out user and experiment",
        )
    if body.min_confidence is not None:
        raise FieldError(
            ["body", "min_confidence"],
            f"min_confidence does not apply to a search under experiment {joined!r} (its arms "
            "are compared on every answer); leave it out, or leave out user and experiment",
        )
    for field in ("paths", "weights", "judge_order"):
        if getattr(body, field) is not None:
            raise FieldError(
                ["body", field],
                f"{field} is set by the arm of experiment {joined!r}; leave it "
                "out (or leave out user and experiment for a search of your own)",
            )
    assert body.user is not None  # applicable() refuses an experiment without a user
    options = SearchOptions(
        top_k=body.top_k, filters=filters, include_stale=body.include_stale, explain=body.explain
    )

    def run() -> dict[str, Any]:
        return backend.experiment_search(
            body.query, options, unit=body.user, experiment=joined, tenant=caller.tenant
        )

    out = await state.searches.run(
        run, timeout=state.settings.server.search_timeout_s, lane=caller.lane
    )
    if out.get("teams") is None:
        state.metrics.observe_search(out)
    return out


async def _documents(
    request: Request, caller: Principal, backend: LocalBackend, max_batch: int
) -> list[Document]:
    """The request's resources (a JSON list, or JSONL for ``application/x-ndjson``: lines split
    on ``\\n`` only, as JSON strings may hold U+2028 or U+0085), checked against the caller's
    scope; FieldError naming the entry and field otherwise. (BodyGuard has already refused a
    body of another content type, too large or nested too deeply.)"""
    raw = await request.body()
    kind = media_type(request.headers.get("content-type")) or "application/json"
    try:
        if kind in NDJSON_TYPES:
            lines = raw.decode("utf-8").split("\n")
            items: Any = [json.loads(line) for line in lines if line.strip()]
        elif kind == "application/json":
            items = json.loads(raw.decode("utf-8"))
        else:
            raise FieldError(
                ["header", "content-type"],
                f"content type {kind!r} is not accepted; send application/json (a list of "
                "resources) or application/x-ndjson (one resource a line)",
            )
    except (UnicodeDecodeError, ValueError) as exc:
        raise FieldError(["body"], f"body is not valid JSON/JSONL: {exc}") from None
    try:
        resources = _RESOURCES.validate_python(items)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        ) from None
    if not resources:
        raise FieldError(["body"], "no resources given: send a non-empty list")
    if len(resources) > max_batch:
        raise FieldError(
            ["body"], f"{len(resources)} resources in one request; server.max_batch is {max_batch}"
        )
    checked = []
    for i, r in enumerate(resources):
        tenant = caller.check_tenant(r.tenant, where=f"body[{i}].tenant")
        caller.check_tags(r.acl, where=f"body[{i}].acl")
        checked.append({**r.model_dump(), "tenant": tenant})
    try:
        return backend.documents(checked)
    except IngestError as exc:
        raise FieldError(["body", getattr(exc, "index", 0)], str(exc.__cause__ or exc)) from None


_INGEST_BODY = {
    "requestBody": {
        "required": True,
        "description": "a JSON list of resources, or JSONL (application/x-ndjson), one a line",
        "content": {
            "application/json": {
                "schema": {"type": "array", "minItems": 1, "items": ResourceIn.model_json_schema()}
            }
        },
    }
}


@api.post(
    "/resources",
    response_model=IngestOut,
    tags=["resources"],
    openapi_extra=_INGEST_BODY,
)
async def ingest(
    request: Request, caller: Principal = writer, mode: Literal["sag", "passage"] | None = None
) -> IngestOut:
    """Ingest (or re-ingest) a batch; returns the ingest report. A batch is all or nothing at
    the door: one bad entry refuses the request (422 naming it) before anything is written."""
    state = _state(request)
    backend = state.ops()
    docs = await _documents(request, caller, backend, state.settings.server.max_batch)

    def run() -> IngestOut:
        # ids are per tenant: a document lands in the caller's own tenant, where another
        # tenant's ids do not exist; only a resource of its own tenant that its ACL tags do
        # not reach is refused (it may not overwrite what it cannot read)
        for i, doc in enumerate(docs):
            existing = backend.record(doc.resource_id, tenant=doc.tenant)
            if existing is not None and not caller.can_see(existing):
                error = ForbiddenError(
                    f"body[{i}]: resource id {doc.resource_id!r} is held by an ACL group "
                    f"token {caller.name!r} is not in"
                )
                error.loc = ["body", i, "_id"]  # type: ignore[attr-defined]
                raise error
        # the shutdown sets state.stopping: a long write stops at its next cancellation point
        report = backend.ingest_documents(docs, mode=mode, cancel=state.stopping)
        return IngestOut(**report)

    return await state.writes.run(run, lane=caller.lane)


#: The ``tenant`` query parameter of the ``/resources/{id}`` routes.
_TENANT = Query(
    None,
    max_length=256,
    description="the tenant whose resource `resource_id` is (a resource is (tenant, id): two "
    "tenants may each hold one id). An admin token names it (default \"\", the un-tenanted "
    "resources); a tenant-scoped token addresses its own tenant only (another is 403)",
)


def _tenant_of(caller: Principal, tenant: str | None) -> str:
    """The tenant a ``/resources/{id}`` call addresses (see :data:`_TENANT`)."""
    return caller.check_tenant(tenant, where="query.tenant")


def _visible(backend: LocalBackend, caller: Principal, resource_id: str, tenant: str) -> None:
    record = backend.record(resource_id, tenant=tenant)
    if record is None or not caller.can_see(record):
        raise NotFoundError(f"no resource {resource_id!r}")


@api.get("/resources", response_model=ResourcePageOut, tags=["resources"])
async def list_resources(
    request: Request,
    caller: Principal = reader,
    tenant: str | None = Query(
        None,
        max_length=256,
        description="only this tenant's resources (an admin's choice; default: every tenant's). "
        "A tenant-scoped token lists its own tenant only (another is 403)",
    ),
    status: Literal[STATUSES] | None = Query(  # type: ignore[valid-type]
        None, description="only resources in this status (a read token sees `ready` ones only)"
    ),
    prefix: str | None = Query(None, max_length=1024, description="only ids starting with this"),
    limit: int = Query(PAGE_MAX, ge=1, le=PAGE_MAX, description="at most this many on the page"),
    cursor: str | None = Query(
        None, pattern=r"^[0-9]{1,18}$", description="`next_cursor` of the previous page"
    ),
) -> Any:
    """Resources, oldest first, a page at a time, as ``hybridsag list --json`` shows them; a
    tenant-scoped token sees only its own tenant's, those its ACL tags reach, in the statuses
    its role sees (``next_cursor`` is None after the last page)."""
    state = _state(request)
    backend = state.ops()
    acl: tuple[str, ...] | None = None
    if caller.scoped:
        tenant = caller.check_tenant(tenant, where="query.tenant")
        acl = caller.acl
    if status is not None and not caller.sees_status(status):
        raise ForbiddenError(
            f"status={status!r}: token {caller.name!r} (role {caller.role!r}) cannot see "
            f"{status} resources"
        )
    statuses = (status,) if status else tuple(x for x in STATUSES if caller.sees_status(x))
    if statuses == STATUSES:
        statuses = ()

    def run() -> dict[str, Any]:
        try:
            return backend.list_page(
                tenant=tenant, statuses=statuses or None, prefix=prefix, acl=acl, limit=limit,
                cursor=cursor,
            )  # fmt: skip
        except InputError as exc:
            raise FieldError(["query", "cursor"], str(exc)) from None

    return await state.searches.run(
        run, timeout=state.settings.server.search_timeout_s, lane=caller.lane
    )


@api.get("/resources/{resource_id:path}", response_model=ResourceOut, tags=["resources"])
async def get_resource(
    resource_id: str, request: Request, caller: Principal = reader, tenant: str | None = _TENANT
) -> Any:
    """A resource's record, whether its source file is stale, and its current chunks (404 when
    missing or out of scope)."""
    state = _state(request)
    backend = state.ops()
    scope = _tenant_of(caller, tenant)

    def run() -> ResourceOut:
        _visible(backend, caller, resource_id, scope)
        detail = backend.show(resource_id, tenant=scope)
        if detail is None:
            raise NotFoundError(f"no resource {resource_id!r}")
        return ResourceOut.of(detail, backend.chunks(resource_id, tenant=scope))

    return await state.searches.run(
        run, timeout=state.settings.server.search_timeout_s, lane=caller.lane
    )


def _write_route(action: str, call: Callable[..., bool]) -> Callable[..., Any]:
    async def handler(
        resource_id: str, request: Request, caller: Principal = writer, tenant: str | None = _TENANT
    ) -> WriteOut:
        state = _state(request)
        backend = state.ops()
        scope = _tenant_of(caller, tenant)

        def run() -> WriteOut:
            _visible(backend, caller, resource_id, scope)
            if not call(backend, resource_id, tenant=scope):
                raise NotFoundError(f"no resource {resource_id!r}")
            return WriteOut(resource_id=resource_id, done=True, action=action)  # type: ignore[arg-type]

        return await state.writes.run(run, lane=caller.lane)

    return handler


def _disable(backend: LocalBackend, resource_id: str, *, tenant: str) -> bool:
    return backend.set_enabled(resource_id, False, tenant=tenant)


def _enable(backend: LocalBackend, resource_id: str, *, tenant: str) -> bool:
    return backend.set_enabled(resource_id, True, tenant=tenant)


for _suffix, _method, _action, _call, _summary in (
    ("/disable", "POST", "disabled", _disable, "Disable a resource (hidden, kept)"),
    ("/enable", "POST", "enabled", _enable, "Enable a disabled resource"),
    ("", "DELETE", "deleted", LocalBackend.delete, "Delete a resource on every path"),
):
    api.add_api_route(
        "/resources/{resource_id:path}" + _suffix,
        _write_route(_action, _call),
        methods=[_method],
        response_model=WriteOut,
        tags=["resources"],
        summary=_summary,
    )


@api.post("/resources/{resource_id:path}/include", response_model=IngestOut, tags=["resources"])
async def include(
    resource_id: str, request: Request, caller: Principal = writer, tenant: str | None = _TENANT
) -> IngestOut:
    """Lift the exclusion a delete left on a folder file that stayed on disk, and index the
    file again with the ACL it had (404 when that id is not excluded, or out of scope)."""
    state = _state(request)
    backend = state.ops()
    scope = _tenant_of(caller, tenant)

    def run() -> IngestOut:
        if not any(caller.can_see_tags(x["acl"]) for x in backend.exclusions(
            tenant=scope, resource_id=resource_id
        )):
            raise NotFoundError(f"no excluded file {resource_id!r}")
        return IngestOut(**backend.include(resource_id, tenant=scope))

    return await state.writes.run(run, lane=caller.lane)


@api.get("/exclusions", response_model=list[ExclusionOut], tags=["resources"])
async def exclusions(
    request: Request,
    caller: Principal = reader,
    tenant: str | None = Query(
        None,
        max_length=256,
        description="only this tenant's (an admin's choice; default: every tenant's). A "
        "tenant-scoped token lists its own tenant's only (another is 403)",
    ),
    resource_id: str | None = Query(None, max_length=1024, description="only this id"),
) -> Any:
    """The folder files deleted while they stayed on disk and kept out of their folder's
    index until ``hybridsag include`` (``POST /v1/resources/{id}/include``) lifts them; a
    tenant-scoped token sees its own tenant's, those its ACL tags reach."""
    state = _state(request)
    backend = state.ops()
    if caller.scoped:
        tenant = caller.check_tenant(tenant, where="query.tenant")

    def run() -> list[dict[str, Any]]:
        rows = backend.exclusions(tenant=tenant, resource_id=resource_id)
        return [x for x in rows if caller.can_see_tags(x["acl"])]

    return await state.searches.run(
        run, timeout=state.settings.server.search_timeout_s, lane=caller.lane
    )


@ops.post("/reconcile", responses={409: {"model": ErrorOut}})
async def reconcile(body: ReconcileRequest, request: Request, caller: Principal = admin) -> Any:
    """Plan (and with ``apply: true`` apply) a reconcile; returns the audit report. 409 when
    refused (another reconcile holds the lease, or the mass-delete guard without ``force``)."""
    state = _state(request)
    assert state.reconciler is not None  # the route exists only with hooks
    backend = state.ops()
    try:
        report = await anyio.to_thread.run_sync(
            lambda: backend.reconcile(dry_run=not body.apply, force=body.force)
        )
    except ConsistencyError:
        state.metrics.reconcile.labels(outcome="refused").inc()
        raise
    except HybridSagError:
        state.metrics.reconcile.labels(outcome="failed").inc()
        raise
    outcome = "dry_run" if not body.apply else ("ok" if report.get("ok") else "errors")
    state.metrics.reconcile.labels(outcome=outcome).inc()
    return report


@ops.get("/audit/latest")
async def audit_latest(request: Request, caller: Principal = admin) -> Any:
    """The newest reconcile audit report (404 when none was written yet: POST
    ``/v1/reconcile`` first)."""
    state = _state(request)
    assert state.reconciler is not None  # the route exists only with hooks
    backend = state.ops()
    return await anyio.to_thread.run_sync(backend.audit)


#: The HybridSagError tree as status codes, most specific first; anything else is a backend
#: failure (503).
STATUS_OF: tuple[tuple[type[HybridSagError], int], ...] = (
    (NotFoundError, 404),
    (InputError, 422),
    (ForbiddenError, 403),
    (AuthError, 401),
    (OverloadError, 429),
    (ConsistencyError, 409),
    (ConfigError, 500),
)


def _status_of(exc: HybridSagError) -> int:
    return next((code for kind, code in STATUS_OF if isinstance(exc, kind)), 503)


def _install_handlers(app: FastAPI) -> None:
    @app.exception_handler(HybridSagError)
    async def on_error(request: Request, exc: HybridSagError) -> JSONResponse:
        status = _status_of(exc)
        headers: dict[str, str] = {}
        loc: list[str | int] = getattr(exc, "loc", None) or ["body"]
        if status == 401:
            headers["WWW-Authenticate"] = "Bearer"
            loc = ["header", "authorization"]
        elif status == 403:
            loc = getattr(exc, "loc", None) or ["header", "authorization"]
        elif status == 404:
            loc = getattr(exc, "loc", None) or ["path", "resource_id"]
        elif status in (429, 503):
            retry = getattr(exc, "retry_after_s", _state(request).settings.server.retry_after_s)
            headers["Retry-After"] = str(max(1, round(retry)))
            _state(request).metrics.rejected.labels(status=str(status)).inc()
            loc = []
        if status >= 500:
            logger.error(
                "%s %s failed (request %s): %s: %s", request.method, request.url.path,
                request.scope.get("state", {}).get("request_id"), type(exc).__name__, exc,
                exc_info=exc,
            )
        kind = type(exc).__name__
        return JSONResponse(_detail(loc, str(exc), kind), status_code=status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        detail = [
            {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
            for e in exc.errors()
        ]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        loc: list[str | int] = ["path"] if exc.status_code in (404, 405) else ["body"]
        msg = str(exc.detail)
        if exc.status_code == 405:
            msg = f"method {request.method} is not allowed on {request.url.path}"
        elif exc.status_code == 404:
            msg = f"no endpoint {request.url.path}"
        return JSONResponse(
            _detail(loc, msg, "http_error"), status_code=exc.status_code, headers=exc.headers
        )


def _document_limits(app: FastAPI, settings: Settings) -> None:
    """Write this deployment's limits into the OpenAPI schema (``query.max_chars``,
    ``server.max_top_k``, ``server.max_batch``, the registered path names, no ``dense`` path
    when the embedder is off), so the schema admits exactly what the service accepts."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            props = schema["components"]["schemas"]["SearchRequest"]["properties"]
            props["query"]["maxLength"] = settings.query.max_chars
            for option in props["top_k"].get("anyOf", [props["top_k"]]):
                if option.get("type") == "integer":
                    option["maximum"] = settings.server.max_top_k
            names = list(path_names())
            for option in props["weights"].get("anyOf", [props["weights"]]):
                if option.get("type") == "object":
                    option["propertyNames"] = {"enum": list(names)}
            if settings.embedding.model == "none":  # the dense path is off here
                names.remove("dense")
            for option in props["paths"].get("anyOf", [props["paths"]]):
                if option.get("type") == "array":
                    option["items"] = {"enum": names, "type": "string"}
                    option["maxItems"] = len(names)
            body = schema["paths"][f"{API_PREFIX}/resources"]["post"]["requestBody"]
            body["content"]["application/json"]["schema"]["maxItems"] = settings.server.max_batch
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


async def _heartbeat(seat: WorkerSeat) -> None:
    """A worker's heartbeat on the board, every :data:`~hybridsag.service.board.HEARTBEAT_S`,
    from its event loop: if the loop stops turning (a handler blocks it, a deadlock), the beats
    stop and the supervisor's watchdog replaces the worker."""
    while True:
        seat.beat()
        await asyncio.sleep(HEARTBEAT_S)


async def _mark_ready(state: ServiceState, warming: asyncio.Future[Any]) -> None:
    """A worker's board entry: READY once it is warm and its watched folders' first index is
    applied (the worker that watches them); a failed warm-up has marked itself FAILED."""
    await asyncio.shield(warming)
    if not state.ready or state.seat is None:
        return
    while state.watcher is not None and not state.watcher.first_index_done:
        await asyncio.sleep(0.1)
    state.seat.mark(READY)


def create_app(
    settings: Settings,
    *,
    reconciler: ReconcileHooks | None = None,
    search: HybridSearch | None = None,
    seat: WorkerSeat | None = None,
) -> FastAPI:
    """The HTTP service over ``settings``.

    ``reconciler`` adds ``/v1/reconcile`` and ``/v1/audit/latest`` and, with
    ``server.reconciler``, the scheduled job. ``search`` lets a caller hand in a
    ``HybridSearch`` it owns (and closes); by default the app builds and closes its own.
    ``seat``: this app is one worker of several (:mod:`hybridsag.service.workers`): it marks
    itself on the board once warm, ``/readyz`` waits for every worker, ``/metrics`` sums them.

    Raises:
        ConfigError: ``server.auth`` is on and no token is configured; a watched folder
            (``sources.watch``) is not a folder, or watchfiles is missing.

    >>> app = create_app(Settings(server={"token": "x" * 32}))   # doctest: +SKIP
    """
    server = settings.server
    tokens = TokenBook(server)
    if server.auth and not len(tokens):
        raise ConfigError(
            "the service has no token: set server.token (HYBRIDSAG_SERVER__TOKEN) or "
            "server.tokens, or server.auth = false on 127.0.0.1"
        )
    state = ServiceState(settings, search=search, reconciler=reconciler, seat=seat)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if not server.auth:
            logger.warning(
                "AUTH IS OFF: every caller on %s is an admin (server.auth = false)", server.host
            )
        warming = asyncio.ensure_future(anyio.to_thread.run_sync(state.warm))

        def schedule(_: Any) -> None:
            if state.ready and reconciler is not None and server.reconciler and state.runs_jobs:
                reconciler.start_schedule(state.hs())
            if state.ready and state.watcher is not None:
                state.watcher.start()

        warming.add_done_callback(schedule)
        marking = asyncio.ensure_future(_mark_ready(state, warming)) if seat is not None else None
        beating = asyncio.ensure_future(_heartbeat(seat)) if seat is not None else None
        if seat is not None:
            # a worker of several takes no request before it is warm: its server reads the
            # connections handed to it only once the lifespan has started, and the parent
            # hands connections to ready workers first (hybridsag.service.workers)
            await asyncio.shield(warming)
        try:
            yield
        finally:
            if beating is not None:
                beating.cancel()
            if marking is not None:
                marking.cancel()
            await warming
            if state.watcher is not None:
                await state.watcher.stop()
            await anyio.to_thread.run_sync(state.close)

    app = FastAPI(
        title="hybridsag",
        version=__version__,
        description="Hybrid search (SAG2 lexical-judge, dense, title; merged by trust and convex "
        "fusion) over HTTP. Bearer tokens with roles read/write/admin; tenant-scoped tokens see only "
        "their tenant and ACL tags.",
        lifespan=lifespan,
        docs_url=None,  # Swagger UI and ReDoc load their code from a CDN; /openapi.json stays
        redoc_url=None,
    )
    app.state.service = state
    _document_limits(app, settings)
    routers = [
        probes,
        api,
        *([ops] if reconciler is not None else []),
        experiments.build_router(
            prefix=API_PREFIX, reader=reader, admin=admin, known_query=Depends(_known_query)
        ),
        sync.build_router(
            prefix=API_PREFIX, writer=writer, known_query=Depends(_known_query), responses=_ERRORS
        ),
        ui.build_router(prefix=API_PREFIX, reader=reader, search=search_handler),
    ]
    for router in routers:
        app.include_router(router)
    state.metrics.register(experiments.ReportCacheMetrics(lambda: state.experiments))
    _install_handlers(app)
    # the last added runs first: Edge, then Gatekeeper (no token: 401 before the body is read),
    # then BodyGuard (reads the body)
    app.add_middleware(
        BodyGuard,
        max_bytes=server.max_body_bytes,
        timeout_s=server.body_timeout_s,
        min_rate=server.min_body_bytes_per_s,
        budget=BodyBudget(server.max_body_memory_bytes, on_change=state.metrics.body_bytes.set),
        retry_after_s=server.retry_after_s,
        raw_routes=frozenset({("PUT", API_PREFIX + sync.UPLOAD_PATH)}),
        typed_posts=not server.auth,
    )
    app.add_middleware(Gatekeeper, tokens=state.tokens, api_prefix=API_PREFIX)
    routes = [route for router in routers for route in router.routes]
    app.add_middleware(Edge, metrics=state.metrics, routes=routes)
    if seat is not None:
        app.add_middleware(_WorkerHeader, slot=seat.slot)
    return app


class _WorkerHeader:
    """Pure ASGI middleware of a worker of several: every answer says which worker gave it
    (``x-hybridsag-worker: <slot>``), for a person or a test tracing a request."""

    def __init__(self, app: Any, *, slot: int) -> None:
        self.app = app
        self.header = (b"x-hybridsag-worker", str(slot).encode("ascii"))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def tagged(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self.header]}
            await send(message)

        await self.app(scope, receive, tagged)
