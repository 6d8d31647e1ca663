"""Run the service on uvicorn: one process, one warm search, graceful on SIGTERM.

uvicorn handles SIGTERM and SIGINT: it stops accepting connections, waits for the requests in
flight (up to ``server.shutdown_timeout_s``), then runs the app's lifespan shutdown, which
cancels a write still running (it stops at its next cancellation point, undone) and waits for
it before closing the store and Milvus.

Slow clients: uvicorn's h11 protocol has a keep-alive timeout but none for a request's headers,
so a client that opens a connection and sends half a request line holds it forever. The
protocol here (:func:`edge_protocol`) closes a connection whose request headers are
not complete ``server.header_timeout_s`` after they started (or after the connection opened),
answering 408 first; a request the HTTP parser refuses (two ``Content-Length`` headers, an
unknown ``Transfer-Encoding``) gets the service's JSON error shape, counted in ``/metrics``,
rather than the server library's text. The body has its own deadline (``server.body_timeout_s``
and ``server.min_body_bytes_per_s``, in :class:`~hybridsag.service.limits.BodyGuard`).

:func:`bind` binds the listening socket before anything says "serving", so a port in use is a
:class:`~hybridsag.errors.ConfigError` naming it (one line and exit 2 in the CLI).

:func:`serve` holds the data dir's service lock (:mod:`hybridsag.records.service_lock`) from the moment
its socket is bound until the server has stopped (the search closed): meanwhile a command on
that data dir that would open the index says, in one line, to go through this service
(``hybridsag --server URL ...``), and a second service on it is refused. uvicorn ends a
graceful SIGTERM/SIGINT shutdown by raising the signal again under the handler that was there
before it ran; :func:`serve` puts its own there, so the lock is removed first and the signal
then does what it did before (SIGTERM ends the process, SIGINT raises KeyboardInterrupt).
"""

from __future__ import annotations

import asyncio
import errno
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from http import HTTPStatus
from contextlib import contextmanager
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from hybridsag.errors import ConfigError
from hybridsag.search import HybridSearch
from hybridsag.backend import ReconcileHooks
from hybridsag.service.app import create_app
from hybridsag.service.board import WorkerSeat
from hybridsag.service.limits import error_body
from hybridsag.records.service_lock import hold_service_lock, service_url
from hybridsag.settings import Settings

__all__ = ["bind", "build_server", "edge_protocol", "serve"]


def edge_protocol(
    timeout_s: float, *, refused: Callable[[int, str], None] | None = None
) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a deadline on request headers, and the service's error shape
    for what the server refuses before the app runs.

    - ``timeout_s`` after a connection opens, or after the first byte of a request on a
      kept-alive connection, the headers must be complete, else the server answers 408 and
      closes the connection. Trickling bytes does not move the deadline.
    - A request h11 cannot take (two different ``Content-Length`` headers, a
      ``Transfer-Encoding`` other than chunked, headers too large, a malformed request line)
      gets the status h11 suggests (400, 501 for an unsupported transfer coding, 431) with
      a body ``{"detail": [{"loc": ["header"], "msg": <h11's reason>, "type":
      "malformed_request"}]}`` instead of the server library's text, and the connection is
      closed.

    ``refused(status, kind)`` is told of each such answer (the service counts it in
    ``/metrics`` under the endpoint ``unparsed``)."""
    told = refused or (lambda status, kind: None)

    class EdgeProtocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(timeout_s, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._arm()  # part of a request line or of headers: the clock runs
            else:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _answer(self, status: int, reason: bytes, body: bytes, kind: str) -> None:
            self.transport.write(
                b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\nconnection: close\r\n"
                b"content-length: %d\r\n\r\n%s" % (status, reason, len(body), body)
            )
            self.transport.close()
            told(status, kind)

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            if self.conn.our_state is h11.IDLE:  # nothing sent on this request yet
                body = error_body(
                    ["header"],
                    f"request headers not complete within {timeout_s:g} s "
                    "(server.header_timeout_s)",
                    "header_timeout",
                )
                self._answer(408, b"Request Timeout", body, "header_timeout")
                return
            self.transport.close()

        def send_400_response(self, msg: str) -> None:
            # uvicorn calls this inside its ``except h11.RemoteProtocolError``: the error at
            # hand says why, and the status h11 suggests
            error = sys.exc_info()[1]
            status = getattr(error, "error_status_hint", 400)
            reason = str(error) if isinstance(error, h11.RemoteProtocolError) and str(error) else msg
            body = error_body(
                ["header"], f"malformed request: {reason}", "malformed_request"
            )
            phrase = HTTPStatus(status).phrase.encode("ascii")
            self._disarm()
            self._answer(status, phrase, body, "malformed_request")

    return EdgeProtocol


def bind(settings: Settings) -> socket.socket:
    """A socket bound to ``server.host``/``server.port`` and listening (connections wait in
    its backlog until the server runs).

    Raises:
        ConfigError: the address cannot be bound (the port is in use, the host is not an
            address of this machine), naming the address and the settings.
    """
    s = settings.server
    family = socket.AF_INET6 if ":" in s.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((s.host, s.port))
        sock.listen(2048)  # uvicorn's backlog: from here on, connections wait to be accepted
    except OSError as exc:
        sock.close()
        why = "the port is in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        raise ConfigError(
            f"cannot listen on {s.host}:{s.port}: {why} (server.host, server.port, --port)"
        ) from None
    return sock


def build_server(
    settings: Settings,
    *,
    reconciler: ReconcileHooks | None = None,
    search: HybridSearch | None = None,
    seat: WorkerSeat | None = None,
) -> uvicorn.Server:
    """A not-yet-started uvicorn server for ``create_app(settings, reconciler=..., search=...,
    seat=...)`` bound to ``server.host``/``server.port``.

    Raises:
        ConfigError: from :func:`~hybridsag.service.app.create_app` (auth on, no token).
    """
    s = settings.server
    app = create_app(settings, reconciler=reconciler, search=search, seat=seat)
    metrics = app.state.service.metrics

    def refused(status: int, kind: str) -> None:  # answered before the app: counted here
        metrics.requests.labels("-", "unparsed", str(status)).inc()

    config = uvicorn.Config(
        app,
        host=s.host,
        port=s.port,
        http=edge_protocol(s.header_timeout_s, refused=refused),
        lifespan="on",
        timeout_graceful_shutdown=int(s.shutdown_timeout_s),
        timeout_keep_alive=5,
        server_header=False,
        proxy_headers=False,
        log_config=None,  # the entry point configures logging
        access_log=False,  # the app writes its own (hybridsag.service.access)
    )
    return uvicorn.Server(config)


def serve(
    settings: Settings,
    *,
    reconciler: ReconcileHooks | None = None,
    search: HybridSearch | None = None,
    sockets: list[socket.socket] | None = None,
    server: uvicorn.Server | None = None,
) -> Any:
    """Serve until SIGTERM/SIGINT (or ``should_exit``) and return the stopped
    ``uvicorn.Server``, holding the data dir's service lock throughout (see the module
    docstring). ``sockets``: already bound sockets (default: :func:`bind`); ``server``: one
    :func:`build_server` made (default: built here).

    Raises:
        ConfigError: no token with auth on, or the address cannot be bound.
        ServiceHoldsDataDir: another running service holds the data dir.
    """
    server = server or build_server(settings, reconciler=reconciler, search=search)
    sockets = sockets or [bind(settings)]
    with _signals_after_cleanup(), hold_service_lock(settings.data_dir, service_url(sockets[0])):
        server.run(sockets=sockets)
    return server


class _Stopped(BaseException):
    """A SIGTERM/SIGINT that uvicorn raised again after its graceful shutdown."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _signals_after_cleanup() -> Iterator[None]:
    """While the block runs, SIGTERM and SIGINT (outside uvicorn's own handling) unwind it as
    :class:`_Stopped`, so that the blocks inside it clean up; then the signal is raised again
    under the handler that was there before. Only on the main thread (the only one that can
    take signals); elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise _Stopped(signum)

    signals = (signal.SIGTERM, signal.SIGINT)
    before = {sig: signal.signal(sig, stop) for sig in signals}
    try:
        yield
    except _Stopped as stopped:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        signal.raise_signal(stopped.signum)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
