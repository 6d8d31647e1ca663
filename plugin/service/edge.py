"""The service's outer ASGI middleware: what every request goes through before any route.

From the outside in:

- :class:`Edge` gives each request an id (a sane incoming ``X-Request-ID``, else a new one; sent
  back in the same header), adds ``X-Content-Type-Options: nosniff``, ``X-Frame-Options: DENY``
  and, unless the route set its own, ``Content-Security-Policy: default-src 'none';
  frame-ancestors 'none'`` to every answer; counts every answer in ``/metrics`` by method,
  route template and status (401s, 413s and 500s included); writes one access-log line per
  request on the ``hybridsag.service.access`` logger (method, path, status, latency in ms, the
  caller's token name and tenant, request id; never a token, a query string or a body); and
  turns an exception no handler took into a logged traceback (``hybridsag.service``) and a 500
  in the service's error shape naming the request id; a request the server cancels when its
  graceful shutdown runs out of time gets a 503 in that shape (499 is left for a client that
  went away before any answer).
- :class:`Gatekeeper` authenticates: a request to the API (``/v1/...``) without a known bearer
  token gets 401 before a byte of its body is read, decided from the headers alone (a short
  declared body is then read and dropped, if it comes within a second, so that the connection
  closes cleanly; see :func:`~hybridsag.service.limits.refuse`;
  FastAPI reads a body before it runs a
  route's dependencies, so this cannot be one); the principal goes into the request's state,
  where the routes' role checks read it. With ``server.auth = false`` it refuses instead any
  request whose ``Host`` is not a loopback name (DNS rebinding) or whose ``Origin``, when
  present, is not a loopback origin (another site's page in the user's browser): 403.

Inside them :class:`~hybridsag.service.limits.BodyGuard` reads and checks the body.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from starlette.routing import BaseRoute, Match

from hybridsag.errors import AuthError
from hybridsag.service.auth import TokenBook
from hybridsag.service.limits import refuse, send_error
from hybridsag.service.metrics import ServiceMetrics

__all__ = ["DEFAULT_CSP", "Edge", "Gatekeeper", "bearer_token", "is_loopback_host"]

logger = logging.getLogger("hybridsag.service")
access_logger = logging.getLogger("hybridsag.service.access")

#: The policy of an answer whose route set none (JSON, text, the schema): load nothing.
DEFAULT_CSP = b"default-src 'none'; frame-ancestors 'none'"

#: An incoming request id is kept when it is this sane; otherwise a new one is made.
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
_LOOPBACK_HOST = re.compile(r"(?:localhost|127\.0\.0\.1|\[::1\])(?::[0-9]{1,5})?")


def is_loopback_host(host: str) -> bool:
    """Whether a ``Host`` value (``localhost``, ``127.0.0.1``, ``[::1]``, each with an optional
    port; case-insensitive) names this machine's loopback interface."""
    return _LOOPBACK_HOST.fullmatch(host.strip().lower()) is not None


def bearer_token(value: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value (scheme case-insensitive), or
    None."""
    if not value:
        return None
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def _headers(scope: Any) -> dict[bytes, str]:
    """The request's headers by lower-case name (the first of each)."""
    out: dict[bytes, str] = {}
    for name, value in scope.get("headers", []):
        out.setdefault(name, value.decode("latin-1"))
    return out




class Gatekeeper:
    """ASGI middleware: 401 for an API request without a known token, before its body is read;
    with auth off, 403 for a foreign ``Host`` or ``Origin`` (see the module docstring)."""

    def __init__(self, app: Any, *, tokens: TokenBook, api_prefix: str) -> None:
        self.app = app
        self.tokens = tokens
        self.api_prefix = api_prefix

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        if not self.tokens.enabled:
            refusal = self._foreign(headers)
            if refusal is not None:
                where, msg = refusal
                await refuse(scope, receive, send, 403, ["header", where], msg, "foreign_origin")
                return
        path = scope.get("path", "")
        if path == self.api_prefix or path.startswith(self.api_prefix + "/"):
            try:
                principal = self.tokens.principal(bearer_token(headers.get(b"authorization")))
            except AuthError as exc:
                await refuse(
                    scope, receive, send, 401, ["header", "authorization"], str(exc),
                    type(exc).__name__, headers=((b"www-authenticate", b"Bearer"),),
                )
                return
            scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)

    @staticmethod
    def _foreign(headers: dict[bytes, str]) -> tuple[str, str] | None:
        """(header, message) when auth is off and the request may come from a foreign page."""
        host = headers.get(b"host")
        if host is None or not is_loopback_host(host):
            return "host", (
                f"Host {host!r} is not a loopback name: with server.auth = false the service "
                "answers only requests addressed to localhost, 127.0.0.1 or [::1]"
            )
        origin = headers.get(b"origin")
        if origin is not None:
            parts = urlsplit(origin.strip())
            if parts.scheme not in ("http", "https") or not is_loopback_host(parts.netloc):
                return "origin", (
                    f"Origin {origin!r} is not a loopback origin: with server.auth = false "
                    "the service refuses requests from other sites' pages"
                )
        return None


class Edge:
    """ASGI middleware: request id, security headers, access log, metrics of every answer and
    the last-resort 500 (see the module docstring). ``routes`` (the app's routes, each with its
    full path) name the endpoint of a request answered before routing (a 401, a 413)."""

    def __init__(self, app: Any, *, metrics: ServiceMetrics, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes

    def _endpoint(self, scope: Any) -> str:
        route = scope.get("route")
        if route is None:
            for candidate in self.routes:
                match, _ = candidate.matches(scope)
                if match is not Match.NONE:
                    route = candidate
                    break
        return str(getattr(route, "path", "unmatched"))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        incoming = _headers(scope).get(b"x-request-id", "")
        request_id = incoming if _REQUEST_ID.fullmatch(incoming) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        status: int | None = None
        recorded = False

        def record() -> None:
            nonlocal recorded
            if not recorded:
                recorded = True
                self._record(scope, status, time.perf_counter() - t0, request_id)

        async def send_with_headers(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                headers += [
                    (b"x-request-id", request_id.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"x-frame-options", b"DENY"),
                ]
                if b"content-security-policy" not in names:
                    headers.append((b"content-security-policy", DEFAULT_CSP))
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                record()  # before the last byte goes out: a client that has the answer sees it
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except asyncio.CancelledError:
            # the server cut the request short: its graceful shutdown ran out of time
            # (server.shutdown_timeout_s). A client still there gets the service's 503, not the
            # server library's text 500; the cancellation ends here (the task is done either way)
            if status is None:
                logger.warning(
                    "%s %s cut by the shutdown (request %s)",
                    scope["method"], scope.get("path"), request_id,
                )
                await send_error(
                    send_with_headers, 503, [],
                    f"the service stopped before this request finished (request {request_id}; "
                    "server.shutdown_timeout_s); a write may have been undone: read it back "
                    "before sending it again",
                    "shutting_down",
                    headers=((b"retry-after", b"1"),),
                )
        except Exception:
            logger.exception(
                "%s %s failed (request %s)", scope["method"], scope.get("path"), request_id
            )
            if status is None:  # nothing sent yet: the answer is ours to give
                await send_error(
                    send_with_headers, 500, [],
                    f"internal error (request {request_id}); the service log has the details",
                    "internal_error",
                )
            else:
                status = 500
        finally:
            record()

    def _record(self, scope: Any, status: int | None, seconds: float, request_id: str) -> None:
        """Count the answer and write its access-log line (latency: until its last body part
        is handed to the server). 499: the client went away before any answer (nginx's
        convention)."""
        code = str(status) if status is not None else "499"
        method, endpoint = scope["method"], self._endpoint(scope)
        self.metrics.requests.labels(method, endpoint, code).inc()
        self.metrics.latency.labels(method, endpoint).observe(seconds)
        principal = scope.get("state", {}).get("principal")
        name = getattr(principal, "name", "-")
        tenant = getattr(principal, "tenant", None)
        access_logger.info(
            "%s %s %s %.1f ms principal=%s tenant=%s request_id=%s",
            method, scope.get("path"), code, seconds * 1000, name,
            "-" if tenant is None else repr(tenant), request_id,
            extra={
                "method": method, "path": scope.get("path"), "status": int(code),
                "latency_ms": round(seconds * 1000, 3), "principal": name, "tenant": tenant,
                "request_id": request_id,
            },
        )
