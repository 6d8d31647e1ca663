"""``POST /v1/search``: a search, or a search under an A/B experiment the request joins."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import PlainTextResponse

from hybridsag.backend import SearchOptions
from hybridsag.errors import InputError
from hybridsag.output.agent import agent_text
from hybridsag.paths.query import validate_query
from hybridsag.service.auth import Principal
from hybridsag.service.models import SearchOut, SearchRequest
from hybridsag.service.routing import API_PREFIX, ERRORS, FieldError, known_query, reader, state_of
from hybridsag.service.state import ServiceState

__all__ = ["api", "search", "search_handler"]

api = APIRouter(prefix=API_PREFIX, responses=ERRORS, dependencies=[Depends(known_query)])


_AGENT_TEXT = {200: {"content": {"text/plain": {"schema": {"type": "string"}}}}}


@api.post("/search", response_model=SearchOut, tags=["search"], responses=_AGENT_TEXT)
async def search(body: SearchRequest, request: Request, caller: Principal = reader) -> Any:
    """Search: the same result objects as ``hybridsag search --json``; with ``format: "agent"``
    the text ``hybridsag search --format agent`` prints (text/plain). A tenant-scoped token's
    tenant and ACL tags are forced into ``filters``."""
    state = state_of(request)
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
    response = await state.searches.run(
        lambda: backend.search(body.query, options), timeout=s.server.search_timeout_s,
        lane=caller.lane,
    )
    out = response.as_dict()  # the HTTP edge: JSON only here
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
