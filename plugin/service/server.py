"""Run the service on uvicorn: one process, one warm search, graceful on SIGTERM.

uvicorn handles SIGTERM and SIGINT: it stops accepting connections, waits for the requests in
flight (up to ``server.shutdown_timeout_s``), then runs the app's lifespan shutdown, which
cancels a write still running (it stops at its next cancellation point, undone) and waits for
it before closing the store and Milvus.
"""

from __future__ import annotations

import socket
from typing import Any

import uvicorn

from hybridsag.search import HybridSearch
from hybridsag.service.app import ReconcileHooks, create_app
from hybridsag.settings import Settings

__all__ = ["build_server", "serve"]


def build_server(
    settings: Settings,
    *,
    reconciler: ReconcileHooks | None = None,
    search: HybridSearch | None = None,
) -> uvicorn.Server:
    """A not-yet-started uvicorn server for ``create_app(settings, reconciler=..., search=...)``
    bound to ``server.host``/``server.port``."""
    s = settings.server
    config = uvicorn.Config(
        create_app(settings, reconciler=reconciler, search=search),
        host=s.host,
        port=s.port,
        lifespan="on",
        timeout_graceful_shutdown=int(s.shutdown_timeout_s),
        timeout_keep_alive=5,
        server_header=False,
        proxy_headers=False,
        log_config=None,  # the entry point configures logging
        access_log=False,
    )
    return uvicorn.Server(config)


def serve(
    settings: Settings,
    *,
    reconciler: ReconcileHooks | None = None,
    search: HybridSearch | None = None,
    sockets: list[socket.socket] | None = None,
) -> Any:
    """Serve until SIGTERM/SIGINT (or ``should_exit``); ``sockets``: already bound sockets;
    returns the stopped ``uvicorn.Server``."""
    server = build_server(settings, reconciler=reconciler, search=search)
    server.run(sockets=sockets)
    return server
