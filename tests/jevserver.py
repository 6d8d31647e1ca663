"""A local HTTP server that speaks the Jev (TypeSafe System One) wire format, for tests.

It is a real server (``http.server.ThreadingHTTPServer`` in a thread, HTTP/1.1 keep-alive) on
127.0.0.1 with an ephemeral port. It serves both routes, ``POST /v1/systemone`` and
``POST /api/alpha/decisions``, checks ``Authorization: Bearer <api_key>`` (401 otherwise, with a
body that echoes the presented header, so tests can check that the client scrubs its key), checks
the request body's shape (422 otherwise) and answers every question.

Scoring rule (deterministic, :func:`score`): the question is ``state["question"]`` (or the whole
state when it is a string); the candidate text is what lies between ``<passage>`` and
``</passage>`` in the question's instructions (the whole instructions when there are no tags).
A candidate containing ``GOLD`` (upper case) scores 0.99; any other scores
``0.9 * share``, where ``share`` is the fraction of the question's distinct lowercase words
(``[a-z0-9]+``, length >= 3) that occur as words in the candidate text, rounded to 2 decimals.
So GOLD ranks strictly first and two candidates with the same words tie.

Replies carry ``usage`` (``input_tokens = ceil(len(body bytes) / 4)``, ``output_tokens = 8`` per
question) and the header ``x-typesafe-request-id: req-0001`` (numbered by arrival, also on errors).

Faults are scripted as a FIFO queue, one per request in arrival order (``server.script(...)``);
when the queue is empty a request is served normally. Everything is recorded in
``server.requests`` (path, headers, parsed body, arrival/finish times, status, request id), and
``server.max_concurrent`` is the most requests ever in progress at once. ``latency_s`` delays
every reply (to make concurrency observable).

Use the ``jev_server`` fixture (import its function into a test module:
``from tests.jevserver import jev_server_fixture  # noqa: F401``; the fixture is registered under
the name ``jev_server``) or ``with JevServer() as server:``.
"""

from __future__ import annotations

import json
import math
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

__all__ = [
    "DEFAULT_KEY",
    "OPENROUTER_PATH",
    "ROUTE_PATHS",
    "SYSTEMONE_PATH",
    "Fault",
    "JevServer",
    "RecordedRequest",
    "jev_server_fixture",
    "score",
]

DEFAULT_KEY = "sk-jev-test-9f8e7d6c5b4a"
SYSTEMONE_PATH = "/v1/systemone"
OPENROUTER_PATH = "/api/alpha/decisions"
ROUTE_PATHS = (SYSTEMONE_PATH, OPENROUTER_PATH)

_WORD = re.compile(r"[a-z0-9]+")
_PASSAGE = re.compile(r"<passage>(.*?)</passage>", re.DOTALL)


def score(question: str, passage: str) -> float:
    """The server's deterministic yes-probability (see the module docstring)."""
    if "GOLD" in passage:
        return 0.99
    qwords = {w for w in _WORD.findall(question.lower()) if len(w) >= 3}
    if not qwords:
        return 0.0
    pwords = set(_WORD.findall(passage.lower()))
    return round(0.9 * len(qwords & pwords) / len(qwords), 2)


@dataclass(frozen=True)
class Fault:
    """One scripted misbehaviour for one request.

    ``kind``: ``ok`` (serve normally), ``delay`` (sleep ``delay_s`` then serve normally),
    ``status`` (answer ``status`` with ``headers`` and a JSON error body), ``malformed`` (200
    with broken JSON), ``missing_answer``, ``extra_answer``, ``duplicate_answer`` (an id twice in
    the JSON text), ``out_of_range`` (1.5), ``wrong_type`` (type "bool"), ``string_value``
    ("0.9"), ``bool_value`` (true), ``nan_value`` (NaN), ``no_usage``.
    """

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

    @property
    def question_ids(self) -> list[str]:
        if isinstance(self.body, dict) and isinstance(self.body.get("questions"), dict):
            return list(self.body["questions"])
        return []

    @property
    def state(self) -> Any:
        return self.body.get("state") if isinstance(self.body, dict) else None


def _shape_error(body: Any) -> str | None:
    """Why a request body breaks the wire format, or None."""
    if not isinstance(body, dict):
        return "body is not a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model must be a non-empty string"
    if not isinstance(body.get("state"), (str, dict)):
        return "state must be a string or an object"
    questions = body.get("questions")
    if not isinstance(questions, dict) or not questions:
        return "questions must be a non-empty object"
    for qid, q in questions.items():
        if not isinstance(q, dict) or q.get("type") != "noul":
            return f"question {qid!r} must have type 'noul'"
        if not isinstance(q.get("instructions"), str):
            return f"question {qid!r} needs instructions"
        criteria = q.get("criteria")
        if not isinstance(criteria, dict) or not all(
            isinstance(criteria.get(k), str) for k in ("true", "false")
        ):
            return f"question {qid!r} needs criteria.true and criteria.false"
    return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return

    def setup(self) -> None:
        super().setup()
        with self.server.jev._lock:
            self.server.jev._connections.add(self.connection)

    def finish(self) -> None:
        with self.server.jev._lock:
            self.server.jev._connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._send_json(405, {"error": {"message": "use POST"}}, "req-get", {})

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        jev = self.server.jev
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        with jev._lock:
            jev._counter += 1
            request_id = f"req-{jev._counter:04d}"
            fault = jev._faults.popleft() if jev._faults else Fault("ok")
            record = RecordedRequest(
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                raw=raw,
                body=body,
                arrived=time.monotonic(),
                request_id=request_id,
            )
            jev._requests.append(record)
            jev._in_flight += 1
            jev.max_concurrent = max(jev.max_concurrent, jev._in_flight)
        try:
            record.status = self._respond(jev, record, body, fault)
        except OSError:  # the client went away (e.g. it timed out first)
            self.close_connection = True
        finally:
            with jev._lock:
                jev._in_flight -= 1
                record.finished = time.monotonic()

    def _respond(self, jev: JevServer, record: RecordedRequest, body: Any, fault: Fault) -> int:
        rid = record.request_id
        if fault.kind == "delay":
            jev._stop.wait(fault.delay_s)
        if jev.latency_s:
            jev._stop.wait(jev.latency_s)
        auth = self.headers.get("Authorization", "")
        if self.path not in ROUTE_PATHS:
            return self._send_json(404, {"error": {"message": f"no route {self.path}"}}, rid, {})
        if auth != f"Bearer {jev.api_key}":
            return self._send_json(
                401, {"error": {"message": f"invalid authorization header {auth!r}"}}, rid, {}
            )
        if fault.kind == "status":
            err = {"error": {"message": f"scripted {fault.status} for {auth!r}"}}
            return self._send_json(fault.status, err, rid, fault.headers)
        problem = _shape_error(body)
        if problem is not None:
            return self._send_json(422, {"error": {"message": problem}}, rid, {})
        if fault.kind == "malformed":
            return self._send_raw(200, b'{"model": "jev", "answers": {"x": {"type": "no', rid)

        state = body["state"]
        question = state if isinstance(state, str) else str(state.get("question", ""))
        answers: dict[str, Any] = {}
        for qid, q in body["questions"].items():
            found = _PASSAGE.search(q["instructions"])
            passage = found.group(1) if found else q["instructions"]
            answers[qid] = {"type": "noul", "noul": score(question, passage)}
        first = next(iter(answers))
        if fault.kind == "missing_answer":
            del answers[first]
        elif fault.kind == "extra_answer":
            answers["not-asked"] = {"type": "noul", "noul": 0.5}
        elif fault.kind == "out_of_range":
            answers[first]["noul"] = 1.5
        elif fault.kind == "wrong_type":
            answers[first]["type"] = "bool"
        elif fault.kind == "string_value":
            answers[first]["noul"] = "0.9"
        elif fault.kind == "bool_value":
            answers[first]["noul"] = True
        reply: dict[str, Any] = {
            "model": body["model"],
            "answers": answers,
            "usage": {
                "input_tokens": -(-len(record.raw) // 4),
                "output_tokens": 8 * len(body["questions"]),
            },
        }
        if fault.kind == "no_usage":
            del reply["usage"]
        text = json.dumps(reply)
        if fault.kind == "nan_value":
            text = text.replace(json.dumps(answers[first]), '{"type": "noul", "noul": NaN}', 1)
        elif fault.kind == "duplicate_answer":
            dup = f"{json.dumps(first)}: {json.dumps(answers[first])}"
            text = text.replace(dup, f"{dup}, {dup}", 1)
        return self._send_raw(200, text.encode("utf-8"), rid)

    def _send_json(
        self, status: int, payload: Any, rid: str, headers: Mapping[str, str]
    ) -> int:
        return self._send_raw(status, json.dumps(payload).encode("utf-8"), rid, headers)

    def _send_raw(
        self, status: int, data: bytes, rid: str, headers: Mapping[str, str] | None = None
    ) -> int:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-typesafe-request-id", rid)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        return status


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins the handler threads
    block_on_close = True
    jev: JevServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # a dropped connection is expected in timeout tests; nothing to print


class JevServer:
    """The server; ``start()`` binds 127.0.0.1:0 and serves in a thread, ``stop()`` ends it."""

    def __init__(self, api_key: str = DEFAULT_KEY, *, latency_s: float = 0.0) -> None:
        self.api_key = api_key
        self.latency_s = latency_s
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

    def start(self) -> JevServer:
        httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        httpd.jev = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, name="jevserver"
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

    def __enter__(self) -> JevServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (use as the judge's base_url)."""
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


@pytest.fixture(name="jev_server")
def jev_server_fixture() -> Iterator[JevServer]:
    """A started :class:`JevServer` with the default key; stopped after the test."""
    with JevServer() as server:
        yield server
