"""The service's A/B routes: experiments, feedback, reports and charts (``/v1/...``).

Handlers hold no logic of their own: they check the caller's role and hand the call to the
service's :class:`~hybridsag.ab.online.Experiments`. Reading experiments and their reports, and
sending feedback, need a ``read`` token; defining, starting and stopping one needs ``admin``. A
tenant-scoped token gives feedback only on its own tenant's searches (another tenant's query id
is as unknown as a made-up one: 422).
"""

from __future__ import annotations

from typing import Any

import anyio
from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import Response

from hybridsag.errors import InputError, NotFoundError
from hybridsag.service.auth import Principal
from hybridsag.service.models import ErrorOut, ExperimentOut, FeedbackIn, FeedbackOut
from hybridsag.settings import EXPERIMENT_NAME_PATTERN, ExperimentSettings

__all__ = ["build_router"]

_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 403, 404, 408, 413, 415, 422, 429, 500, 503)
}


def _no_unknown_query(request: Request) -> None:
    """None of these routes takes a query parameter."""
    for name in request.query_params:
        err = InputError(f"unknown query parameter {name!r}; valid: none")
        err.loc = ["query", name]  # type: ignore[attr-defined]
        raise err


Name = Path(..., pattern=EXPERIMENT_NAME_PATTERN, description="the experiment's name")


def _experiments(request: Request) -> Any:
    return request.app.state.service.ab()


def build_router(*, prefix: str, reader: Any, admin: Any) -> APIRouter:
    """The A/B routes under ``prefix``; ``reader`` and ``admin`` are the service's role
    dependencies (``Depends`` objects) that guard them."""
    router = APIRouter(
        prefix=prefix,
        tags=["experiments"],
        responses=_ERRORS,
        dependencies=[Depends(_no_unknown_query)],
    )

    @router.get("/experiments", response_model=list[ExperimentOut])
    async def list_experiments(request: Request, caller: Principal = reader) -> Any:
        """Every experiment: arms (paths, weights, shares), mode, whether it runs."""
        return [s.as_dict() for s in _experiments(request).list()]

    @router.post("/experiments", response_model=ExperimentOut, status_code=201)
    async def define_experiment(
        body: ExperimentSettings, request: Request, caller: Principal = admin
    ) -> Any:
        """Define an experiment (422 when the name is taken); it runs at once unless ``active`` is
        false. Kept in the event store: it survives a restart."""
        exps = _experiments(request)
        state = await anyio.to_thread.run_sync(lambda: exps.define(body))
        return state.as_dict()

    @router.get("/experiments/{name}", response_model=ExperimentOut)
    async def get_experiment(request: Request, name: str = Name, caller: Principal = reader) -> Any:
        """One experiment (404 when unknown)."""
        return _experiments(request).get(name).as_dict()

    def _switch(active: bool) -> Any:
        async def handler(request: Request, name: str = Name, caller: Principal = admin) -> Any:
            exps = _experiments(request)
            state = await anyio.to_thread.run_sync(lambda: exps.set_active(name, active))
            return state.as_dict()

        return handler

    router.add_api_route(
        "/experiments/{name}/start",
        _switch(True),
        methods=["POST"],
        response_model=ExperimentOut,
        summary="Start an experiment (it takes traffic)",
    )
    router.add_api_route(
        "/experiments/{name}/stop",
        _switch(False),
        methods=["POST"],
        response_model=ExperimentOut,
        summary="Stop an experiment (searches no longer join it; its events stay)",
    )

    @router.get("/experiments/{name}/report")
    async def experiment_report(request: Request, name: str = Name, caller: Principal = reader) -> Any:
        """The experiment's report, as ``hybridsag ab report NAME --json`` prints it; report.json
        and the chart are written under ``<data_dir>/ab/NAME/`` as the CLI writes them."""
        exps = _experiments(request)
        return await anyio.to_thread.run_sync(lambda: exps.report(name))

    @router.get(
        "/experiments/{name}/chart",
        response_class=Response,
        responses={200: {"content": {"image/png": {}}}},
    )
    async def experiment_chart(request: Request, name: str = Name, caller: Principal = reader) -> Response:
        """The chart of the experiment's latest report (written by a report request); 404 when no
        report was written yet."""
        exps = _experiments(request)
        exps.get(name)
        path = exps.settings.ab_dir / name / "report.png"
        if not path.is_file():
            err = NotFoundError(f"no chart for experiment {name!r} yet: GET its report first")
            err.loc = ["path", "name"]  # type: ignore[attr-defined]
            raise err
        data = await anyio.to_thread.run_sync(path.read_bytes)
        return Response(data, media_type="image/png")

    @router.post("/feedback", response_model=FeedbackOut, tags=["experiments"])
    async def feedback(body: FeedbackIn, request: Request, caller: Principal = reader) -> Any:
        """Record a click (or other feedback) on a result of a search answered under an experiment:
        ``query_id`` from that response, and the result's ``position`` or ``chunk_id``. 422 for an
        unknown query id or a result that was not shown."""
        exps = _experiments(request)
        return await anyio.to_thread.run_sync(
            lambda: exps.feedback(
                body.query_id,
                position=body.position,
                chunk_id=body.chunk_id,
                kind=body.kind,
                tenant=caller.tenant,
                scoped=caller.scoped,
            )
        )
    return router
