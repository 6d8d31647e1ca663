"""The probes: ``/healthz`` (the process answers), ``/readyz`` (warm, and its parts answer),
``/metrics`` (Prometheus) and ``/v1/whoami`` (the caller's token and the service's version)."""

from __future__ import annotations

import os

from fastapi import APIRouter, Depends, Request, Security
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials

from hybridsag import __version__
from hybridsag.service.auth import Principal
from hybridsag.service.edge import bearer_token
from hybridsag.service.metrics import CONTENT_TYPE
from hybridsag.service.models import ErrorOut, HealthOut, ReadyOut, WhoAmIOut
from hybridsag.service.routing import API_PREFIX, ERRORS, bearer, known_query, reader, state_of
from hybridsag.service.state import ServiceState

__all__ = ["api", "healthz", "metrics", "probes", "readyz", "whoami"]

#: The probes outside the API prefix (no token needed to reach them).
probes = APIRouter(tags=["probes"])
#: ``/v1/whoami``.
api = APIRouter(prefix=API_PREFIX, responses=ERRORS, dependencies=[Depends(known_query)])


@probes.get("/healthz", response_model=HealthOut)
def healthz(request: Request) -> HealthOut:
    """The process answers (nothing else checked); it names itself: its pid and, in a service
    of several workers (``server.workers``), its worker slot."""
    seat = state_of(request).seat
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
    state = state_of(request)
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
    credentials: HTTPAuthorizationCredentials | None = Security(bearer),
) -> Response:
    """Prometheus text format; needs an admin token unless server.public_metrics."""
    state = state_of(request)
    _metrics_rule(state, credentials.credentials if credentials is not None else None)
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)
