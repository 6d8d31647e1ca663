"""A real local HTTP server with a script of faults, the base of the wire-format servers of the
tests (tests/jevserver.py, tests/modelserver.py).

It is ``http.server.ThreadingHTTPServer`` in a thread (HTTP/1.1 keep-alive) on 127.0.0.1 with an
ephemeral port (or a given one). Every POST is read, parsed as JSON (``body`` is None when it is
not JSON), numbered (``request_id``: ``req-0001`` by arrival), recorded in ``server.requests``
(path, headers, raw and parsed body, arrival/finish times, status) and answered by the
subclass's :meth:`ScriptedServer.respond`, which gets the next scripted :class:`Fault` (FIFO,
one per request in arrival order; ``Fault("ok")`` when the queue is empty). A GET is answered
by :meth:`ScriptedServer.respond_get` (405 unless a subclass serves the path). ``latency_s``
delays every reply, a ``delay`` fault one reply (both to make concurrency and timeouts
observable); ``server.max_concurrent`` is the most requests ever in progress at once.
"""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Fault", "RecordedRequest", "Reply", "ScriptedServer"]


@dataclass(frozen=True)
class Fault:
    """One scripted misbehaviour for one request: ``kind`` names it (``ok`` serves normally,
    ``delay`` sleeps ``delay_s`` first, ``status`` answers ``status`` with ``headers``; each
    server documents its other kinds)."""

    kind: str
    status: int = 200
    delay_s: float = 0.0
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def delay(cls, seconds: float) -> Fault:
        return cls("delay", delay_s=seconds)

    @classmethod
    def http(cls, status: int, **headers: str) -> Fault:
        """``Fault.http(429, retry_after="0.2")``: keyword names become header names."""
        return cls(
            "status", status=status, headers={k.replace("_", "-"): v for k, v in headers.items()}
        )


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any
    arrived: float
    request_id: str
    finished: float = math.nan
    status: int = 0


@dataclass
class Reply:
    """What :meth:`ScriptedServer.respond` answers: a status, the body bytes, extra headers."""

    status: int
    data: bytes
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, status: int, payload: Any, **headers: str) -> Reply:
        return cls(status, json.dumps(payload).encode("utf-8"), headers)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return

    def setup(self) -> None:
        super().setup()
        with self.server.owner._lock:
            self.server.owner._connections.add(self.connection)

    def finish(self) -> None:
        with self.server.owner._lock:
            self.server.owner._connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        headers = {k.lower(): v for k, v in self.headers.items()}
        self._send(self.server.owner.respond_get(self.path, headers), "req-get")

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        with owner._lock:
            owner._counter += 1
            record = owner.record_type(
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                raw=raw,
                body=body,
                arrived=time.monotonic(),
                request_id=f"req-{owner._counter:04d}",
            )
            fault = owner._faults.popleft() if owner._faults else Fault("ok")
            owner._requests.append(record)
            owner._in_flight += 1
            owner.max_concurrent = max(owner.max_concurrent, owner._in_flight)
        try:
            if fault.kind == "delay":
                owner._stop.wait(fault.delay_s)
            if owner.latency_s:
                owner._stop.wait(owner.latency_s)
            reply = owner.respond(record, fault)
            record.status = self._send(reply, record.request_id)
        except OSError:  # the client went away (e.g. it timed out first)
            self.close_connection = True
        finally:
            with owner._lock:
                owner._in_flight -= 1
                record.finished = time.monotonic()

    def _send(self, reply: Reply, request_id: str) -> int:
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply.data)))
        self.send_header(self.server.owner.request_id_header, request_id)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(reply.data)
        self.wfile.flush()
        return reply.status


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins the handler threads
    block_on_close = True
    owner: ScriptedServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # a dropped connection is expected in timeout tests; nothing to print


class ScriptedServer:
    """The server; ``start()`` binds 127.0.0.1 and serves in a thread, ``stop()`` ends it.
    Subclasses answer in :meth:`respond`."""

    #: the reply header that carries the request id
    request_id_header = "x-request-id"
    #: what a request is recorded as (a subclass may add properties)
    record_type: type[RecordedRequest] = RecordedRequest

    def __init__(self, *, latency_s: float = 0.0, port: int = 0) -> None:
        self.latency_s = latency_s
        self.port = port
        self.max_concurrent = 0
        self._lock = threading.Lock()
        self._faults: deque[Fault] = deque()
        self._requests: list[RecordedRequest] = []
        self._counter = 0
        self._in_flight = 0
        self._stop = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    def respond(self, record: RecordedRequest, fault: Fault) -> Reply:  # pragma: no cover
        raise NotImplementedError

    def respond_get(self, path: str, headers: Mapping[str, str]) -> Reply:
        """The answer to ``GET path`` (not recorded, no fault): 405 unless a subclass serves it."""
        return Reply.json(405, {"error": {"message": "use POST"}})

    def start(self) -> ScriptedServer:
        httpd = _HTTPServer(("127.0.0.1", self.port), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.01},
            name=type(self).__name__.lower(),
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._httpd is None:
            return
        self._httpd.shutdown()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._httpd = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (use as a base_url)."""
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def script(self, *faults: Fault | str) -> None:
        """Queue faults for the next requests, in arrival order (a str is a ``Fault(kind)``)."""
        with self._lock:
            self._faults.extend(Fault(f) if isinstance(f, str) else f for f in faults)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self._requests)
