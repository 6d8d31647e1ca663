"""Run one parser call in a bounded child process: a wall-time limit, a memory limit, cancellable.

A document parser fed a hostile file (a ZIP bomb inside a DOCX, a PDF whose one page makes the
parser loop) may take minutes and gigabytes, and a time budget checked between pages cannot stop
a call that never returns. :func:`run_bounded` runs ``fn(data)`` in a child process instead:

- the child is forked from a small server process (:func:`serve`: a fresh interpreter started
  once per process, on first use, with the parsers already imported, :data:`PRELOAD`; started
  again if it dies), so a conversion starts in milliseconds and no thread or lock of the caller
  (a service's event loop, its thread pools) is forked with it; the server ends when its
  starter does (it watches its stdin), and a starter that exits normally stops it and removes
  its socket's folder first (``atexit``; the folders were left in the temporary directory);
- in the child, before the data is read, ``RLIMIT_AS`` caps its address space at
  ``memory_bytes`` (an allocation past it raises MemoryError, or the parser dies) and
  ``RLIMIT_CPU`` its processor time a little past ``wall_s``; on Linux it is killed if the
  server dies (``PR_SET_PDEATHSIG``);
- the caller waits at most ``wall_s``, checking ``cancel`` every :data:`POLL_S`: past the time,
  or once ``cancel`` is set (the service is stopping), the child is killed (SIGKILL) and the
  call raises; a child that dies (out of memory, a crash in a C parser) raises too.

The call (``fn``, pickled: a module-level function or a partial of one), the data and the
result go over a UNIX socket of the server's, in a folder only this user may enter. Nothing of
the child survives the call.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar

from hybridsag.errors import IngestError, WriteCancelledError

__all__ = ["POLL_S", "PRELOAD", "SandboxDied", "run_bounded", "serve"]

T = TypeVar("T")

#: Modules the server imports once, so that each child starts with them loaded (a missing one
#: is skipped: its format then fails in the child as it would in process).
PRELOAD = (
    "hybridsag.ingest.formats",
    "pypdf",
    "docx",
    "lxml.etree",
    "bs4",
    "markdownify",
    "ebooklib.epub",
)
#: How often the caller looks at ``cancel`` and the clock while the child runs.
POLL_S = 0.05
#: How long the caller waits for the server to start (it imports the parsers first: seconds
#: on a loaded machine).
START_TIMEOUT_S = 120.0
#: Processor time the child may use beyond ``wall_s`` before the kernel stops it (a backstop:
#: the caller kills it at ``wall_s`` of wall time first).
_CPU_GRACE_S = 10


class SandboxDied(IngestError):
    """The child process ended without an answer: killed by its memory or processor limit, or
    by a crash in the parser."""


# -- the server (its own interpreter) ------------------------------------------------------------


def serve(listen_fd: int) -> None:
    """The server's loop: accept a connection on ``listen_fd``, fork a child for it
    (:func:`_child`), until stdin ends (the process that started it is gone)."""
    for module in PRELOAD:
        with contextlib.suppress(ImportError):
            __import__(module)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C stops the starter, which stops us
    listener = socket.socket(fileno=listen_fd)
    stdin = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([listener, stdin], [], [])
        if stdin in ready and not os.read(stdin, 4096):
            return
        if listener in ready:
            conn, _ = listener.accept()
            if os.fork() == 0:  # the child: one call, then exit
                code = 0
                try:
                    listener.close()
                    _child(conn)
                except BaseException:  # noqa: BLE001 - the caller sees the end of the connection
                    code = 1
                finally:
                    os._exit(code)
            conn.close()


def _child(sock: socket.socket) -> None:
    """One call: send the pid, read ``(fn, memory_bytes, cpu_s)``, limit this process, read
    the data, answer ``("ok", result)``, ``("memory", "")`` or ``("error", message)``."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    import resource

    conn = Connection(sock.detach())
    conn.send(os.getpid())
    fn, memory_bytes, cpu_s = conn.recv()
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    try:
        data = conn.recv_bytes()
        answer: tuple[Any, ...] = ("ok", fn(data))
    except MemoryError:
        answer = ("memory", "")
    except IngestError as exc:
        answer = ("error", str(exc))
    except BaseException as exc:  # noqa: BLE001 - a parser fed a hostile file may raise anything
        answer = ("error", f"{type(exc).__name__}: {exc}"[:500])
    data = b""
    try:
        conn.send(answer)
    except MemoryError:
        conn.send(("memory", ""))


# -- the caller's side ----------------------------------------------------------------------------


class _Server:
    """The server process of this process, started on first use and again when it died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._folder: Path | None = None
        self._pid = 0

    def address(self) -> str:
        """The server's socket path, starting the server if it is not running."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None or self._pid != os.getpid():
                self._start()
            assert self._folder is not None
            return str(self._folder / "sock")

    def _start(self) -> None:
        self._stop()
        self._folder = Path(tempfile.mkdtemp(prefix="hybridsag-sandbox-"))  # mode 0700
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(self._folder / "sock"))
            listener.listen(64)
            code = (
                f"import sys; sys.path[:0] = {sys.path!r}; "
                f"from hybridsag.ingest.sandbox import serve; serve({listener.fileno()})"
            )
            self._proc = subprocess.Popen(  # stdin: a pipe it watches, closed when we are gone
                [sys.executable, "-c", code], stdin=subprocess.PIPE, pass_fds=[listener.fileno()],
                close_fds=True,
            )  # fmt: skip
            self._pid = os.getpid()
        finally:
            listener.close()

    def close(self) -> None:
        """Stop this process's server and remove its folder (at exit); a server another
        process started (this one forked from it) is that process's to stop."""
        with self._lock:
            if self._pid == os.getpid():
                self._stop()

    def _stop(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            self._proc = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def connect(self) -> Connection:
        """A connection to a new child: the server (started first if it is not running)
        forks one when it accepts it (its socket listens before the server runs: a connection
        made while it starts waits in the backlog)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.address())
        except OSError as exc:
            sock.close()
            raise SandboxDied(f"cannot reach the conversion process server: {exc}") from None
        return Connection(sock.detach())


_SERVER = _Server()
atexit.register(_SERVER.close)


def run_bounded(
    fn: Callable[[bytes], T],
    data: bytes,
    *,
    wall_s: float,
    memory_bytes: int,
    cancel: threading.Event | None = None,
    what: str,
    setting: str,
) -> T:
    """``fn(data)`` computed in a bounded child process (see the module docstring). ``fn`` must
    pickle by reference (a module-level function, or a partial of one with picklable
    arguments); ``what`` names the work in messages (``"DOCX conversion"``) and ``setting`` the
    settings section of its limits (``formats``: ``timeout_s``, ``max_memory_mb``).

    Raises:
        IngestError: ``fn`` raised (its message; another exception as ``Type: message``), or it
            ran past ``wall_s``, or past ``memory_bytes``.
        SandboxDied: the child died without an answer (a crash, a kernel limit).
        WriteCancelledError: ``cancel`` was set first.
    """
    conn = _SERVER.connect()
    pid = 0
    answer: tuple[Any, ...] | None = None
    try:
        try:
            started = time.monotonic() + START_TIMEOUT_S  # the server may be importing still
            while not conn.poll(POLL_S):
                _check(cancel, what)
                if time.monotonic() > started:
                    raise IngestError(f"{what}: its process did not start within {START_TIMEOUT_S:g} s")
            pid = conn.recv()
            deadline = time.monotonic() + wall_s
            conn.send((fn, memory_bytes, int(math.ceil(wall_s)) + _CPU_GRACE_S))
            conn.send_bytes(data)
            while not conn.poll(POLL_S):
                _check(cancel, what)
                if time.monotonic() > deadline:
                    raise IngestError(
                        f"{what} ran past {wall_s:g} s ({setting}.timeout_s) and was stopped; "
                        "skipped"
                    )
            answer = conn.recv()
        except (EOFError, OSError):
            raise SandboxDied(_died(what, pid, memory_bytes, setting)) from None
    finally:
        conn.close()
        if answer is None and pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    if answer[0] == "ok":
        return answer[1]  # type: ignore[no-any-return]
    if answer[0] == "memory":
        raise IngestError(
            f"{what} needed more than {memory_bytes // (1024 * 1024)} MiB "
            f"({setting}.max_memory_mb) and was stopped; skipped"
        )
    raise IngestError(answer[1])


def _check(cancel: threading.Event | None, what: str) -> None:
    if cancel is not None and cancel.is_set():
        raise WriteCancelledError(f"{what} cancelled: the service is stopping")


def _died(what: str, pid: int, memory_bytes: int, setting: str) -> str:
    return (
        f"{what} died without an answer (process {pid or 'unknown'}: past its memory limit of "
        f"{memory_bytes // (1024 * 1024)} MiB, {setting}.max_memory_mb, its processor time, or "
        "a crash in the parser); skipped"
    )
