"""Request limits of the HTTP service: body size, and bounded work queues with 429s.

:class:`BodyLimit` is pure ASGI middleware: a declared ``Content-Length`` over the limit is
answered 413 before the body is read, and a body sent without a length (chunked) is read up to
the limit first (413 once it passes), so an oversized request never reaches a handler.

:class:`Gate` runs blocking work (a search, a write) on its own thread pool with a fixed number
of workers and a fixed queue: work beyond ``workers + queue`` is refused at once with
:class:`~hybridsag.errors.OverloadError` (429 with Retry-After), never queued without bound. A
``timeout`` stops waiting (the caller gets 503); work still queued is dropped, work already
running finishes and only then frees its place.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from hybridsag.errors import HybridSagError, OverloadError

__all__ = ["BodyLimit", "Gate", "GateTimeout"]

T = TypeVar("T")


class GateTimeout(HybridSagError):
    """Work admitted by a :class:`Gate` did not finish within its timeout (HTTP 503)."""

    default_retriable = True


class Gate:
    """A thread pool of ``workers`` that admits at most ``workers + queue`` calls at once."""

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
        self.capacity = workers + queue
        self.retry_after_s = retry_after_s
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"hybridsag-{name}")
        self._lock = threading.Lock()
        self._admitted = 0
        self._on_change = on_change or (lambda n: None)

    @property
    def admitted(self) -> int:
        """Calls admitted and not yet finished (running or queued)."""
        return self._admitted

    def _done(self, _: Future[Any]) -> None:
        with self._lock:
            self._admitted -= 1
            self._on_change(self._admitted)

    async def run(self, fn: Callable[..., T], *args: Any, timeout: float | None = None) -> T:
        """Run ``fn(*args)`` on the pool and return its result (or raise its error).

        Raises:
            OverloadError: ``workers + queue`` calls are already admitted.
            GateTimeout: ``timeout`` seconds passed first.
        """
        with self._lock:
            if self._admitted >= self.capacity:
                raise OverloadError(
                    f"too many {self.name} requests in flight ({self.capacity}); retry after "
                    f"{self.retry_after_s:g} s",
                    retry_after_s=self.retry_after_s,
                )
            self._admitted += 1
            self._on_change(self._admitted)
        try:
            future = self._pool.submit(fn, *args)
        except RuntimeError:  # the pool is shut down: the service is stopping
            self._done(Future())
            raise OverloadError(
                f"the service is stopping; {self.name} refused", retry_after_s=self.retry_after_s
            ) from None
        future.add_done_callback(self._done)
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
        """Finish everything admitted, then stop the workers."""
        self._pool.shutdown(wait=True)


class BodyLimit:
    """ASGI middleware: 413 for a request body over ``max_bytes``."""

    def __init__(self, app: Any, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self, size: str) -> bytes:
        return json.dumps(
            {
                "detail": [
                    {
                        "loc": ["body"],
                        "msg": f"request body is {size} bytes; the limit is {self.max_bytes} "
                        "(server.max_body_bytes)",
                        "type": "body_too_large",
                    }
                ]
            }
        ).encode()

    async def _send_413(self, send: Any, size: str) -> None:
        body = self._too_large(size)
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    await self._send_413(send, str(declared))
                    return
                await self.app(scope, receive, send)
                return
        # no Content-Length (chunked): read the body up to the limit first, then replay it
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([], message, receive), send)
                return
            body = message.get("body", b"")
            seen += len(body)
            if seen > self.max_bytes:
                await self._send_413(send, f"more than {self.max_bytes}")
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(chunks, None, receive), send)


def _replay(chunks: list[bytes], first: Any, receive: Any) -> Any:
    """A ``receive`` that gives the buffered body as one message, then defers to ``receive``."""
    pending: list[Any] = [first] if first is not None else [
        {"type": "http.request", "body": b"".join(chunks), "more_body": False}
    ]

    async def replay() -> Any:
        if pending:
            return pending.pop()
        return await receive()

    return replay
