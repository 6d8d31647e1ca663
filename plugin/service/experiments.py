"""The service's A/B routes: experiments, feedback, reports and charts (``/v1/...``).

Handlers hold no logic of their own: they check the caller's role and scope and hand the call to
the service's :class:`~hybridsag.backend.LocalBackend` (over its
:class:`~hybridsag.ab.online.Experiments`), as ``hybridsag ab`` does in process. Reading experiments and their reports, and
sending feedback, need a ``read`` token; defining, starting and stopping one needs ``admin``. A
tenant-scoped token gives feedback only on its own tenant's searches (another tenant's query id
is as unknown as a made-up one: 422).

Reports and charts are per tenant: a tenant-scoped token's report counts only its tenant's
traffic (its searches' impressions and the feedback on them); the report across every tenant is
an admin's (an admin may also name one tenant with ``?tenant=``; a tenant token naming another
tenant gets 403). A report is computed on the search :class:`~hybridsag.service.limits.Gate`,
within ``server.search_timeout_s`` (429 and 503 as for a search), one report or chart at a time
(so clients fetching reports take at most one of the gate's places), writes no file (only the CLI's
``hybridsag ab report`` writes report.json and report.png), and is kept, with its chart, until
the next event is logged; ``hybridsag_ab_report_cache_total`` in ``/metrics`` counts the cache's
hits and misses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import anyio
from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from hybridsag.ab.online import Experiments
from hybridsag.backend import FeedbackOptions
from hybridsag.errors import ForbiddenError
from hybridsag.service.auth import Principal
from hybridsag.service.limits import GateTimeout
from hybridsag.service.models import ErrorOut, ExperimentOut, FeedbackIn, FeedbackOut
from hybridsag.settings import EXPERIMENT_NAME_PATTERN, ExperimentSettings

__all__ = ["ReportCacheMetrics", "build_router"]

T = TypeVar("T")

_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 403, 404, 408, 413, 415, 422, 429, 500, 503)
}


Name = Path(..., pattern=EXPERIMENT_NAME_PATTERN, description="the experiment's name")
Tenant = Query(
    None,
    description="count only this tenant's traffic; a tenant token may name only its own "
    "(403 otherwise). Default: the token's tenant, or every tenant for an admin",
)


def _backend(request: Request) -> Any:
    """The service's :class:`~hybridsag.backend.LocalBackend` (503 while warming up)."""
    return request.app.state.service.ops()


def _scope(caller: Principal, tenant: str | None) -> str | None:
    """The tenant whose traffic a report counts (None: every tenant's, for an admin only)."""
    if not caller.scoped:
        return tenant
    if tenant is not None and tenant != caller.tenant:
        raise ForbiddenError(
            f"tenant={tenant!r}: token {caller.name!r} holds tenant {caller.tenant!r} only; "
            "another tenant's report, or the report across tenants, needs an admin token",
            loc=["query", "tenant"],
        )
    return caller.tenant


async def _bounded(
    request: Request, turn: anyio.Lock, fn: Callable[[], T], *, caller: Principal
) -> T:
    """``fn()`` on the search gate, in the caller's lane, within ``server.search_timeout_s``,
    as searches run, once it has ``turn``: one report (or chart) at a time takes a place in the
    gate, however many clients ask, so the others stay free for searches. A caller that waits
    for its turn longer than the timeout gets 503
    (:class:`~hybridsag.service.limits.GateTimeout`)."""
    service = request.app.state.service
    timeout = service.settings.server.search_timeout_s
    try:
        with anyio.fail_after(timeout):
            await turn.acquire()
    except TimeoutError:
        raise GateTimeout(
            f"the report did not start within {timeout:g} s (server.search_timeout_s): "
            "other reports were being computed"
        ) from None
    try:
        return await service.searches.run(fn, timeout=timeout, lane=caller.lane)
    finally:
        turn.release()


class ReportCacheMetrics(Collector):
    """``hybridsag_ab_report_cache_total{what, outcome}``: reports and charts served from the
    cache (``hit``) or computed (``miss``), read from the experiments when Prometheus scrapes
    (``experiments`` returns None while the service warms up)."""

    def __init__(self, experiments: Callable[[], Experiments | None]) -> None:
        self._experiments = experiments

    @staticmethod
    def _family() -> CounterMetricFamily:
        return CounterMetricFamily(
            "hybridsag_ab_report_cache",
            "Experiment reports and charts served from the cache (hit) or computed (miss)",
            labels=["what", "outcome"],
        )

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield self._family()

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = self._family()
        exps = self._experiments()
        counts = exps.report_cache.counts() if exps is not None else {}
        for what in ("report", "chart"):
            for outcome in ("hit", "miss"):
                family.add_metric([what, outcome], float(counts.get((what, outcome), 0)))
        yield family


def build_router(*, prefix: str, reader: Any, admin: Any, known_query: Any) -> APIRouter:
    """The A/B routes under ``prefix``; ``reader`` and ``admin`` are the service's role
    dependencies (``Depends`` objects) that guard them, ``known_query`` the one that refuses a
    query parameter a route does not take."""
    router = APIRouter(
        prefix=prefix,
        tags=["experiments"],
        responses=_ERRORS,
        dependencies=[known_query],
    )
    turn = anyio.Lock()  # reports and charts, one at a time (see _bounded)

    @router.get("/experiments", response_model=list[ExperimentOut])
    async def list_experiments(request: Request, caller: Principal = reader) -> Any:
        """Every experiment: arms (paths, weights, shares), mode, whether it runs."""
        return _backend(request).experiments()

    @router.post("/experiments", response_model=ExperimentOut, status_code=201)
    async def define_experiment(
        body: ExperimentSettings, request: Request, caller: Principal = admin
    ) -> Any:
        """Define an experiment (422 when the name is taken); it runs at once unless ``active`` is
        false. Kept in the event store: it survives a restart."""
        backend = _backend(request)
        return await anyio.to_thread.run_sync(lambda: backend.define_experiment(body))

    @router.get("/experiments/{name}", response_model=ExperimentOut)
    async def get_experiment(request: Request, name: str = Name, caller: Principal = reader) -> Any:
        """One experiment (404 when unknown)."""
        return _backend(request).experiment(name)

    def _switch(active: bool) -> Any:
        async def handler(request: Request, name: str = Name, caller: Principal = admin) -> Any:
            backend = _backend(request)
            return await anyio.to_thread.run_sync(
                lambda: backend.set_experiment_active(name, active)
            )

        return handler

    for verb, active, summary in (
        ("start", True, "Start an experiment (it takes traffic)"),
        ("stop", False, "Stop an experiment (searches no longer join it; its events stay)"),
    ):
        router.add_api_route(
            f"/experiments/{{name}}/{verb}",
            _switch(active),
            methods=["POST"],
            response_model=ExperimentOut,
            summary=summary,
        )

    @router.get("/experiments/{name}/report")
    async def experiment_report(
        request: Request, name: str = Name, tenant: str | None = Tenant, caller: Principal = reader
    ) -> Any:
        """The experiment's report, as ``hybridsag ab report NAME --json`` prints it, of the
        traffic the caller may see: a tenant token's own tenant, every tenant for an admin (or
        the one named by ``tenant``). Writes no file; the same report is served from a cache
        until the next event. 404 for an unknown experiment."""
        backend = _backend(request)
        scope = _scope(caller, tenant)
        return await _bounded(
            request, turn, lambda: backend.experiment_report(name, tenant=scope), caller=caller
        )

    @router.get(
        "/experiments/{name}/chart",
        response_class=Response,
        responses={200: {"content": {"image/png": {}}}},
    )
    async def experiment_chart(
        request: Request, name: str = Name, tenant: str | None = Tenant, caller: Principal = reader
    ) -> Response:
        """The chart (PNG) of the report the same call to ``/report`` gives, drawn from the same
        cache; 404 for an unknown experiment or when matplotlib is missing."""
        backend = _backend(request)
        scope = _scope(caller, tenant)
        data = await _bounded(
            request, turn, lambda: backend.experiment_chart(name, tenant=scope), caller=caller
        )
        return Response(data, media_type="image/png")

    @router.post("/feedback", response_model=FeedbackOut, tags=["experiments"])
    async def feedback(body: FeedbackIn, request: Request, caller: Principal = reader) -> Any:
        """Record a click (or other feedback) on a result of a search answered under an experiment:
        ``query_id`` from that response, and the result's ``position`` or ``chunk_id``. 422 for an
        unknown query id or a result that was not shown."""
        backend = _backend(request)
        # a tenant token's feedback is scoped to its tenant's searches; an admin's to none
        scope = (caller.tenant or "") if caller.scoped else None
        return await anyio.to_thread.run_sync(
            lambda: backend.feedback(
                body.query_id,
                FeedbackOptions(position=body.position, chunk_id=body.chunk_id, kind=body.kind),
                tenant=scope,
            )
        )
    return router
