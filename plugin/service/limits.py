"""Request limits of the HTTP service: the request body, and bounded work queues with 429s.

:class:`BodyGuard` is pure ASGI middleware that reads every request body before the app does:
it refuses a request with both ``Content-Length`` and ``Transfer-Encoding`` (400), a body that
is not JSON or NDJSON (415; the one route that takes a file's raw bytes, the folder sync's
upload, takes ``application/octet-stream`` and nothing else; with auth off a bodiless POST
needs the JSON type too), one over ``server.max_body_bytes`` (413: a declared length before
reading, and the bytes actually read whatever the framing), a large one that does not fit the
bytes of bodies the service holds at once (``server.max_body_memory_bytes``: 429), one that is
not whole by its deadline (``server.body_timeout_s`` plus its length over
``server.min_body_bytes_per_s``) or stops arriving for ``server.body_timeout_s`` (408), and
JSON nested deeper than :data:`~hybridsag.jsondepth.MAX_JSON_DEPTH` in any encoding (422), so
no handler and no JSON parser sees such a body. It sits inside the authentication middleware
(:mod:`hybridsag.service.edge`): a request without a valid token is refused before any of its
body is read.

:class:`Gate` runs blocking work (a search, a write) on its own thread pool with a fixed number
of workers and a fixed queue per lane (a tenant, an admin token): work beyond
``workers + queue`` of one lane is refused at once with
:class:`~hybridsag.errors.OverloadError` (429 with Retry-After), never queued without bound,
and the lanes' waiting work runs in turn, so one tenant's backlog never stands before another
tenant's call. A ``timeout`` stops waiting (the caller gets 503); work still queued is dropped,
work already running finishes and only then frees its place.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import KW_ONLY, dataclass
from typing import Any, TypeVar

from hybridsag.errors import HybridSagError, OverloadError
from hybridsag.jsondepth import MAX_JSON_DEPTH, too_deep

__all__ = [
    "BODY_TYPES",
    "DRAIN_BYTES",
    "DRAIN_S",
    "NDJSON_TYPES",
    "RAW_TYPE",
    "BodyBudget",
    "BodyGuard",
    "Gate",
    "GateTimeout",
    "as_utf8",
    "error_body",
    "media_type",
    "refuse",
    "send_error",
]

#: A refused request whose declared body is at most this long has it read (and dropped) before
#: the answer, so the connection closes cleanly: closing a socket with unread bytes in it makes
#: the kernel send a reset, and the client may then lose the answer. A longer or chunked body is
#: never read: its connection is closed (except a body refused for its size, 413, which is read
#: and dropped up to twice ``server.max_body_bytes``: :class:`BodyGuard`).
DRAIN_BYTES = 64 * 1024
#: How long, in all, such a short body of a refused request may take to arrive: a client that
#: trickles it gets its answer then, and its connection closed.
DRAIN_S = 1.0

T = TypeVar("T")


class GateTimeout(HybridSagError):
    """Work admitted by a :class:`Gate` did not finish within its timeout (HTTP 503)."""

    default_retriable = True


class Gate:
    """A thread pool of ``workers`` that admits at most ``workers + queue`` calls at once per
    lane, and runs the waiting calls of the lanes in turn.

    A lane is whose work it is (:attr:`~hybridsag.service.auth.Principal.lane`: a tenant, an
    admin token, the watched folders): each lane may have ``workers + queue`` calls admitted
    (running or waiting), and when a worker frees, the next call comes from the lane after the
    one served last that has one waiting (round-robin), so a call waits for those running and
    at most one call of each other lane, never for another lane's backlog.
    """

    def __init__(
        self,
        name: str,
        *,
        workers: int,
        queue: int,
        retry_after_s: float,
        on_change: Callable[[int], None] | None = None,
    ) -> None:
        self.name = name
        self.workers = workers
        self.capacity = workers + queue
        self.retry_after_s = retry_after_s
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"hybridsag-{name}")
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._admitted = 0
        self._per_lane: dict[str, int] = {}
        #: waiting calls per lane; ``_turns`` holds each lane with a waiting call once, in turn
        self._waiting: dict[str, deque[tuple[Callable[..., Any], tuple[Any, ...], Future[Any]]]] = {}
        self._turns: deque[str] = deque()
        self._running = 0
        self._closed = False
        self._on_change = on_change or (lambda n: None)

    @property
    def admitted(self) -> int:
        """Calls admitted and not yet finished (running or queued), every lane's."""
        return self._admitted

    def _release(self, lane: str) -> None:
        """A call of ``lane`` ended, or was dropped while waiting (under ``_lock``)."""
        self._admitted -= 1
        self._per_lane[lane] -= 1
        if not self._per_lane[lane]:
            del self._per_lane[lane]
        self._on_change(self._admitted)
        self._idle.notify_all()

    def _dropped(self, lane: str) -> Callable[[Future[Any]], None]:
        def done(future: Future[Any]) -> None:  # its caller stopped waiting before it started
            if future.cancelled():
                with self._lock:
                    self._release(lane)

        return done

    def _pump(self) -> None:
        """Start waiting calls, lanes in turn, while a worker is free (under ``_lock``)."""
        while self._running < self.workers and self._turns:
            lane = self._turns.popleft()
            waiting = self._waiting[lane]
            fn, args, future = waiting.popleft()
            if waiting:
                self._turns.append(lane)  # its next call waits for the other lanes' turns
            else:
                del self._waiting[lane]
            if not future.set_running_or_notify_cancel():
                continue  # its caller stopped waiting (timeout) before it started: dropped
            self._running += 1
            self._pool.submit(self._work, lane, fn, args, future)

    def _work(
        self, lane: str, fn: Callable[..., Any], args: tuple[Any, ...], future: Future[Any]
    ) -> None:
        outcome: tuple[bool, Any]
        try:
            outcome = (True, fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, as a pool does
            outcome = (False, exc)
        with self._lock:  # its place is free before its caller hears of it
            self._running -= 1
            self._release(lane)
            self._pump()
        if outcome[0]:
            future.set_result(outcome[1])
        else:
            future.set_exception(outcome[1])

    async def run(
        self, fn: Callable[..., T], *args: Any, timeout: float | None = None, lane: str = ""
    ) -> T:
        """Run ``fn(*args)`` on the pool, in ``lane``'s turn, and return its result (or raise
        its error).

        Raises:
            OverloadError: ``workers + queue`` calls of ``lane`` are already admitted, or the
                gate is closed (the service is stopping).
            GateTimeout: ``timeout`` seconds passed first (a call still waiting is dropped; a
                running one keeps its place until it ends).
        """
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise OverloadError(
                    f"the service is stopping; {self.name} refused", retry_after_s=self.retry_after_s
                )
            if self._per_lane.get(lane, 0) >= self.capacity:
                raise OverloadError(
                    f"too many {self.name} requests in flight ({self.capacity}"
                    f"{' of yours' if lane else ''}); retry after {self.retry_after_s:g} s",
                    retry_after_s=self.retry_after_s,
                )
            self._admitted += 1
            self._per_lane[lane] = self._per_lane.get(lane, 0) + 1
            self._on_change(self._admitted)
            future.add_done_callback(self._dropped(lane))
            if lane not in self._waiting:
                self._waiting[lane] = deque()
                self._turns.append(lane)
            self._waiting[lane].append((fn, args, future))
            self._pump()
        waiting = asyncio.wrap_future(future)
        if timeout is None:
            return await waiting
        try:
            return await asyncio.wait_for(waiting, timeout)
        except asyncio.TimeoutError:
            raise GateTimeout(
                f"the {self.name} did not finish within {timeout:g} s (server.search_timeout_s)"
            ) from None

    def close(self) -> None:
        """Refuse new calls, finish everything admitted, then stop the workers."""
        with self._lock:
            self._closed = True
            while self._admitted:
                self._idle.wait()
        self._pool.shutdown(wait=True)


#: Media types a request body may have (compared case-insensitively, parameters ignored): every
#: body is JSON, or NDJSON where the endpoint takes it (``POST /v1/resources``).
JSON_TYPES = frozenset({"application/json"})
NDJSON_TYPES = frozenset({"application/x-ndjson", "application/jsonl"})
BODY_TYPES = JSON_TYPES | NDJSON_TYPES
#: The media type of a raw upload, taken only by the routes a :class:`BodyGuard` is told of.
RAW_TYPE = "application/octet-stream"


def error_body(loc: list[str | int], msg: str, kind: str) -> bytes:
    """An error answer in the service's one shape, ``{"detail": [{"loc", "msg", "type"}]}``."""
    return json.dumps({"detail": [{"loc": loc, "msg": msg, "type": kind}]}).encode()


async def send_error(
    send: Any,
    status: int,
    loc: list[str | int],
    msg: str,
    kind: str,
    *,
    close: bool = True,
    headers: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    """Answer from ASGI middleware, before the app runs. ``close`` adds ``Connection: close``:
    whatever body the client is still sending is never read (uvicorn drops the connection once
    the answer is out)."""
    body = error_body(loc, msg, kind)
    out = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *headers,
    ]
    if close:
        out.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": body})


async def refuse(
    scope: Any,
    receive: Any,
    send: Any,
    status: int,
    loc: list[str | int],
    msg: str,
    kind: str,
    *,
    headers: tuple[tuple[bytes, bytes], ...] = (),
    drain: int = DRAIN_BYTES,
) -> None:
    """:func:`send_error` for a request refused before its body was looked at. A body declared
    with ``Content-Length`` of at most ``drain`` bytes (:data:`DRAIN_BYTES` unless the caller
    allows more) is read first and dropped (no byte of it is parsed or kept; the refusal was
    decided before), so the connection stays usable, when the whole of it arrives within
    :data:`DRAIN_S`; any other body is left unread and the answer closes the connection (a
    client that trickles its body holds the connection no longer)."""
    lengths = _header(scope, b"content-length")
    chunked = bool(_header(scope, b"transfer-encoding"))
    declared = int(lengths[0]) if lengths and lengths[0].isdigit() else None
    drained = not chunked and (declared or 0) == 0
    if not chunked and declared is not None and 0 < declared <= drain:
        drained = await _drain(receive, declared)
    await send_error(send, status, loc, msg, kind, close=not drained, headers=headers)


async def _drain(receive: Any, limit: int) -> bool:
    """Read and drop (without keeping) a body, or the rest of one, of at most ``limit`` bytes;
    False if it is longer, is not whole within :data:`DRAIN_S`, or the client goes away."""
    until = asyncio.get_running_loop().time() + DRAIN_S
    outcome = await _read_body(
        receive, limit, idle_s=DRAIN_S, until=lambda seen: until, keep=False
    )
    return outcome[0] == "whole"


async def _read_body(
    receive: Any,
    limit: int,
    *,
    idle_s: float,
    until: Callable[[int], float],
    admit: Callable[[int], bool] | None = None,
    keep: bool = True,
) -> tuple[str, list[bytes], int]:
    """Read a request body, counting the bytes as they come whatever the framing:
    ``(outcome, chunks, bytes seen)``, the outcome ``"whole"``, ``"over"`` (more than ``limit``
    bytes; reading stopped there), ``"idle"`` (no byte for ``idle_s``), ``"late"`` (not whole by
    the loop time ``until(bytes seen)``), ``"busy"`` (``admit(bytes seen)`` said no) or
    ``"gone"`` (the client disconnected); without ``keep`` the bytes are dropped as they come
    (no chunks)."""
    loop = asyncio.get_running_loop()
    chunks: list[bytes] = []
    seen = 0
    while True:
        left = until(seen) - loop.time()
        if left <= 0:
            return "late", chunks, seen
        try:
            message = await asyncio.wait_for(receive(), min(idle_s, left))
        except asyncio.TimeoutError:
            return ("late" if loop.time() >= until(seen) else "idle"), chunks, seen
        if message["type"] != "http.request":
            return "gone", chunks, seen
        body = message.get("body", b"")
        seen += len(body)
        if seen > limit:
            return "over", chunks, seen
        if admit is not None and not admit(seen):
            return "busy", chunks, seen
        if keep:
            chunks.append(body)
        if not message.get("more_body", False):
            return "whole", chunks, seen


def media_type(value: str | None) -> str | None:
    """``Content-Type`` without its parameters, lower-cased (``APPLICATION/JSON; charset=utf-8``
    is ``application/json``); None when the header is missing or blank."""
    if value is None:
        return None
    kind = value.split(";", 1)[0].strip().lower()
    return kind or None


def _header(scope: Any, name: bytes) -> list[bytes]:
    return [v for k, v in scope.get("headers", []) if k == name]


def as_utf8(body: bytes) -> bytes:
    """A JSON body in UTF-8: one in UTF-16 or UTF-32 (which JSON parsers take, telling the
    encoding from the first bytes as :func:`json.detect_encoding` does) re-encoded, so that a
    check that reads bytes (the nesting depth) sees the text the parser will see; UTF-8 (with
    or without a BOM), and bytes that do not decode (the parser refuses them), as they are."""
    encoding = json.detect_encoding(body)
    if encoding in ("utf-8", "utf-8-sig"):
        return body
    try:
        return body.decode(encoding).encode("utf-8")
    except UnicodeDecodeError:
        return body


class BodyBudget:
    """The bytes of request bodies the service holds at once, bounded: a body larger than
    :data:`DRAIN_BYTES` takes its length (declared, or as it arrives) from the budget until its
    request is answered; one that does not fit is refused (429). Smaller bodies are not counted
    (what they hold is bounded by the connections), so a tenant's one short write is never
    refused for another's large bodies."""

    def __init__(self, limit: int, *, on_change: Callable[[int], None] | None = None) -> None:
        self.limit = limit
        self.held = 0
        self._on_change = on_change or (lambda n: None)

    def take(self, n: int) -> bool:
        """Take ``n`` bytes; False (nothing taken) when they do not fit."""
        if self.held + n > self.limit:
            return False
        self.held += n
        self._on_change(self.held)
        return True

    def give(self, n: int) -> None:
        """Give back ``n`` bytes taken before."""
        if n:
            self.held -= n
            self._on_change(self.held)


class _Held:
    """What one request's body holds of a :class:`BodyBudget` (grown as a chunked body comes)."""

    def __init__(self, budget: BodyBudget) -> None:
        self.budget = budget
        self.bytes = 0

    def grow(self, total: int) -> bool:
        """Hold ``total`` bytes in all; False (nothing more taken) when they do not fit."""
        if total <= self.bytes:
            return True
        if not self.budget.take(total - self.bytes):
            return False
        self.bytes = total
        return True

    def release(self) -> None:
        self.budget.give(self.bytes)
        self.bytes = 0


@dataclass(frozen=True, slots=True, eq=False)
class BodyGuard:
    """ASGI middleware: every request body is read here, whole and bounded, before the app
    sees a byte of it.

    - ``Content-Length`` together with ``Transfer-Encoding``: 400, nothing read (the two
      framings disagree about where the body ends: request smuggling).
    - a body that is not JSON (no ``Content-Type``, or one outside :data:`BODY_TYPES`): 415.
      This holds with auth on or off: a browser's cross-origin ``no-cors`` request cannot send
      ``application/json``, so no page can post into the service. The ``raw_routes``
      (``(method, path)`` pairs: the folder sync's upload) take :data:`RAW_TYPE` instead, and
      only it; nor can a ``no-cors`` request send that type (it is not one of the three
      CORS-safelisted ones), so the rule's reason holds there too. With ``typed_posts`` (auth
      off, where any page in the user's browser could post) a ``POST`` without a body needs
      the type too: only a script that may set headers sends it.
    - a declared ``Content-Length`` over ``max_bytes``: 413, decided before reading; and
      whatever the framing, the bytes actually read are counted: 413 as soon as they pass
      ``max_bytes``. Either way the body (the rest of it) is first read and dropped, kept
      nowhere, if it ends within twice ``max_bytes`` and :data:`DRAIN_S`, so the client reads
      the 413 instead of a connection reset (a run of the suite saw one); a longer one is left
      unread and the answer closes the connection.
    - a body larger than :data:`DRAIN_BYTES` that does not fit the ``budget`` of body bytes
      held at once: 429 with ``Retry-After: retry_after_s``, before reading (a chunked one as
      soon as it does not fit).
    - a deadline on the whole body, not only an idle timer: it must be whole ``timeout_s`` plus
      its length (declared, or the bytes read so far) over ``min_rate`` bytes a second after
      its headers, and no byte may be ``timeout_s`` apart: else 408. Trickling bytes does not
      move the deadline.
    - JSON nested deeper than :data:`~hybridsag.jsondepth.MAX_JSON_DEPTH` (for NDJSON: a line),
      in whichever encoding JSON parsers take (:func:`as_utf8`): 422 (a raw body is not JSON:
      not checked).

    Each refusal has the service's error shape and ``Connection: close`` (a 415 of a short body
    reads it first and keeps the connection: see :func:`refuse`). The app then gets
    the body as one message.
    """

    app: Any
    _: KW_ONLY
    max_bytes: int
    timeout_s: float
    min_rate: float
    budget: BodyBudget
    retry_after_s: float
    max_depth: int = MAX_JSON_DEPTH
    raw_routes: frozenset[tuple[str, str]] = frozenset()
    typed_posts: bool = False

    @property
    def _drop_at_most(self) -> int:
        """The longest body over ``max_bytes`` that is read and dropped before its 413 (within
        :data:`DRAIN_S`), so the client reads the answer rather than a reset: twice the limit."""
        return 2 * self.max_bytes

    def _too_large(self, size: str) -> str:
        return (
            f"request body is {size} bytes; the limit is {self.max_bytes} (server.max_body_bytes)"
        )

    async def _busy(self, send: Any) -> None:
        await send_error(
            send, 429, ["body"],
            f"the service holds {self.budget.limit} bytes of request bodies at most "
            f"(server.max_body_memory_bytes) and they are taken; retry after "
            f"{self.retry_after_s:g} s",
            "bodies_busy",
            headers=((b"retry-after", str(max(1, round(self.retry_after_s))).encode()),),
        )

    async def _unsupported(self, scope: Any, receive: Any, send: Any, raw: bool, shown: str) -> None:
        if raw:
            msg = f"this route takes a file's raw bytes: {shown}; send {RAW_TYPE}"
        else:
            msg = (
                f"a request body must be JSON: {shown}; send application/json (POST "
                "/v1/resources also takes application/x-ndjson, one resource a line)"
            )
        await refuse(scope, receive, send, 415, ["header", "content-type"], msg, "unsupported_media_type")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        lengths = _header(scope, b"content-length")
        chunked = bool(_header(scope, b"transfer-encoding"))
        if lengths and chunked:
            await send_error(
                send, 400, ["header", "transfer-encoding"],
                "the request has both Content-Length and Transfer-Encoding; send one",
                "framing_conflict",
            )
            return
        declared = int(lengths[0]) if lengths else 0  # h11 has checked it is digits
        if declared > self.max_bytes:
            await refuse(
                scope, receive, send, 413, ["body"], self._too_large(str(declared)),
                "body_too_large", drain=self._drop_at_most,
            )
            return
        types = _header(scope, b"content-type")
        kind = media_type(types[0].decode("latin-1")) if types else None
        shown = "no Content-Type" if kind is None else f"Content-Type {kind!r}"
        raw = (scope.get("method"), scope.get("path")) in self.raw_routes
        if not chunked and declared == 0:  # no body: nothing to read or check
            if self.typed_posts and scope.get("method") == "POST" and kind not in BODY_TYPES:
                await self._unsupported(scope, receive, send, False, f"a POST with {shown}")
                return
            await self.app(scope, receive, send)
            return
        if (raw and kind != RAW_TYPE) or (not raw and kind not in BODY_TYPES):
            await self._unsupported(scope, receive, send, raw, shown)
            return
        held = _Held(self.budget)
        if declared > DRAIN_BYTES and not held.grow(declared):
            await self._busy(send)
            return
        try:
            await self._read_and_pass(scope, receive, send, declared, kind, raw, held)
        finally:
            held.release()

    async def _read_and_pass(
        self, scope: Any, receive: Any, send: Any, declared: int, kind: str | None, raw: bool,
        held: _Held,
    ) -> None:
        start = asyncio.get_running_loop().time()

        def until(seen: int) -> float:
            return start + self.timeout_s + max(declared, seen) / self.min_rate

        def admit(seen: int) -> bool:  # a chunked body takes its bytes as they come
            return seen <= DRAIN_BYTES or held.grow(seen)

        outcome, chunks, seen = await _read_body(
            receive, self.max_bytes, idle_s=self.timeout_s, until=until, admit=admit
        )
        if outcome == "gone":  # the client went away: nobody to answer
            return
        if outcome == "busy":
            await self._busy(send)
            return
        if outcome in ("idle", "late"):
            why = (
                f"no body byte for {self.timeout_s:g} s after {seen} bytes "
                "(server.body_timeout_s)"
                if outcome == "idle"
                else f"the body was not whole {until(seen) - start:.3g} s after its headers "
                f"({seen} of {declared or 'a chunked body of unknown'} bytes; "
                "server.body_timeout_s plus its length over server.min_body_bytes_per_s)"
            )
            await send_error(send, 408, ["body"], why, "body_timeout")
            return
        if outcome == "over":  # the rest is read and dropped, as far as a refused body is
            drained = await _drain(receive, self._drop_at_most - seen)
            await send_error(
                send, 413, ["body"], self._too_large(f"more than {self.max_bytes}"),
                "body_too_large", close=not drained,
            )
            return
        whole = b"".join(chunks)
        del chunks
        depth = None
        if not raw:
            text = whole if kind in NDJSON_TYPES else as_utf8(whole)
            check = functools.partial(
                too_deep, text, lines=kind in NDJSON_TYPES, max_depth=self.max_depth
            )
            # a large body's scan (a manifest of 50,000 entries: a large part of a second on
            # a loaded machine) runs beside the event loop, not on it
            depth = check() if len(text) <= DRAIN_BYTES else await asyncio.to_thread(check)
        if depth is not None:
            await send_error(
                send, 422, ["body"],
                f"the JSON nests {depth} levels deep; at most {self.max_depth} are accepted",
                "json_too_deep",
                close=False,
            )
            return
        await self.app(scope, _replay(whole, receive), send)


def _replay(body: bytes, receive: Any) -> Any:
    """A ``receive`` that gives the buffered body as one message, then defers to ``receive``
    (which reports the disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Any:
        if pending:
            return pending.pop()
        return await receive()

    return replay
