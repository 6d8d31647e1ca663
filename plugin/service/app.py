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

This module assembles the app; the routes live by job in :mod:`~hybridsag.service.probe_routes`,
:mod:`~hybridsag.service.search_routes`, :mod:`~hybridsag.service.resource_routes` and
:mod:`~hybridsag.service.reconcile_routes` (what they share: :mod:`~hybridsag.service.routing`;
the state they share: :mod:`~hybridsag.service.state`).

``GET /v1/resources`` lists resources a page at a time (oldest first; ``next_cursor`` continues),
scoped as a search is: a tenant-scoped token lists its own tenant's resources that its ACL tags
reach, in the statuses it sees. ``GET /v1/whoami`` names the caller's token (name, role, tenant)
and the service's version, for ``hybridsag --server URL doctor``.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from hybridsag import __version__
from hybridsag.backend import ReconcileHooks
from hybridsag.errors import (
    AuthError,
    ConfigError,
    ConsistencyError,
    ForbiddenError,
    HybridSagError,
    InputError,
    NotFoundError,
    OverloadError,
)
from hybridsag.paths import path_names
from hybridsag.search import HybridSearch
from hybridsag.service import experiments, sync, ui
from hybridsag.service.auth import TokenBook
from hybridsag.service.board import HEARTBEAT_S, READY, WorkerSeat
from hybridsag.service.edge import Edge, Gatekeeper
from hybridsag.service.limits import BodyBudget, BodyGuard
from hybridsag.service.probe_routes import api as probe_api
from hybridsag.service.probe_routes import probes
from hybridsag.service.reconcile_routes import ops
from hybridsag.service.resource_routes import api as resource_api
from hybridsag.service.routing import API_PREFIX, ERRORS, admin, known_query, reader, state_of, writer
from hybridsag.service.search_routes import api as search_api
from hybridsag.service.search_routes import search_handler
from hybridsag.service.state import ServiceState
from hybridsag.settings import Settings

# The names this module held before its routes were grouped by job stay importable from here.
from hybridsag.service.probe_routes import healthz, metrics, readyz, whoami  # noqa: F401
from hybridsag.service.reconcile_routes import audit_latest, reconcile  # noqa: F401
from hybridsag.service.resource_routes import (  # noqa: F401
    exclusions,
    get_resource,
    include,
    ingest,
    list_resources,
)
from hybridsag.service.routing import FieldError  # noqa: F401
from hybridsag.service.search_routes import search  # noqa: F401
from hybridsag.service.state import READY_PROBE_S  # noqa: F401

__all__ = ["API_PREFIX", "ServiceState", "create_app"]

logger = logging.getLogger(__name__)

#: The ``/v1`` routers every service has, in the order the schema lists their routes (the
#: reconcile routes, ``ops``, come after them when the app has the reconciler's hooks).
API_ROUTERS = (probe_api, search_api, resource_api)


def __getattr__(name: str) -> Any:
    """``api``, the one ``/v1`` router this module held before its routes were grouped by job:
    a router including :data:`API_ROUTERS`, with a DeprecationWarning."""
    if name == "api":
        warnings.warn(
            "hybridsag.service.app.api is deprecated: the /v1 routes are grouped by job in "
            "hybridsag.service.app.API_ROUTERS (probe_routes, search_routes, resource_routes)",
            DeprecationWarning,
            stacklevel=2,
        )
        router = APIRouter()
        for part in API_ROUTERS:
            router.include_router(part)
        return router
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _detail(loc: list[str | int], msg: str, kind: str) -> dict[str, Any]:
    return {"detail": [{"loc": loc, "msg": msg, "type": kind}]}


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
        loc: list[str | int] = exc.loc or ["body"]
        if status == 401:
            headers["WWW-Authenticate"] = "Bearer"
            loc = ["header", "authorization"]
        elif status == 403:
            loc = exc.loc or ["header", "authorization"]
        elif status == 404:
            loc = exc.loc or ["path", "resource_id"]
        elif status in (429, 503):
            retry = exc.retry_after_s
            if retry is None:
                retry = state_of(request).settings.server.retry_after_s
            headers["Retry-After"] = str(max(1, round(retry)))
            state_of(request).metrics.rejected.labels(status=str(status)).inc()
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
        try:
            if seat is not None:
                # a worker of several takes no request before it is warm: its server reads the
                # connections handed to it only once the lifespan has started, and the parent
                # hands connections to ready workers first (hybridsag.service.workers)
                await asyncio.shield(warming)
                if not state.ready:
                    # its start fails (uvicorn ends it): the parent starts it again, as a
                    # worker that died, instead of keeping a worker that is never ready
                    raise HybridSagError(
                        f"worker {seat.slot} failed to warm up: {state.warm_error}"
                    )
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
        *API_ROUTERS,
        *([ops] if reconciler is not None else []),
        experiments.build_router(
            prefix=API_PREFIX, reader=reader, admin=admin, known_query=Depends(known_query)
        ),
        sync.build_router(
            prefix=API_PREFIX, writer=writer, known_query=Depends(known_query), responses=ERRORS
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
