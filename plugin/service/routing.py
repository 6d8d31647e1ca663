"""What every route module shares: the API prefix, the error responses the schema declares,
the caller dependencies by role (``reader``, ``writer``, ``admin``), the unknown-query-parameter
check, :class:`FieldError` and the service state of a request.

The routes themselves, grouped by job: :mod:`~hybridsag.service.probe_routes` (``/healthz``,
``/readyz``, ``/metrics``, ``/v1/whoami``), :mod:`~hybridsag.service.search_routes`
(``/v1/search``), :mod:`~hybridsag.service.resource_routes` (``/v1/resources``,
``/v1/exclusions``) and :mod:`~hybridsag.service.reconcile_routes` (``/v1/reconcile``,
``/v1/audit/latest``); :mod:`~hybridsag.service.app` assembles them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from hybridsag.errors import InputError
from hybridsag.service.auth import Principal
from hybridsag.service.models import ErrorOut
from hybridsag.service.state import ServiceState

__all__ = [
    "API_PREFIX",
    "ERRORS",
    "FieldError",
    "admin",
    "bearer",
    "known_query",
    "reader",
    "state_of",
    "writer",
]

API_PREFIX = "/v1"

#: The error answers every API route declares in the schema (their body: ErrorOut).
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 403, 404, 408, 413, 415, 422, 429, 500, 503)
}


class FieldError(InputError):
    """Bad input in a known field of the request (``loc`` as FastAPI writes it)."""

    def __init__(self, loc: list[str | int], message: str) -> None:
        super().__init__(message, loc=loc)


def state_of(request: Request) -> ServiceState:
    """The service state of the app serving ``request``."""
    return request.app.state.service


bearer = HTTPBearer(auto_error=False, description="a token from server.token or server.tokens")


def _caller(role: str) -> Callable[..., Principal]:
    """The dependency that answers the caller's principal, refused below ``role``."""
    def caller(
        request: Request,
        credentials: HTTPAuthorizationCredentials | None = Security(bearer),  # for the schema
    ) -> Principal:
        # the Gatekeeper authenticated every API request before its body was read
        principal: Principal | None = request.scope.get("state", {}).get("principal")
        if principal is None:
            token = credentials.credentials if credentials is not None else None
            principal = state_of(request).tokens.principal(token)
        return principal.require(role)

    return caller


def known_query(request: Request) -> None:
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
