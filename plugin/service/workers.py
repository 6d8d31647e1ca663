"""Several worker processes serving one data dir: ``server.workers`` (``hybridsag serve --workers N``).

One process runs a search on one core at a time (the GIL); :func:`serve_workers` runs ``N``
worker processes, each a whole service (:func:`~hybridsag.service.server.build_server`: one warm
search, the header-timeout protocol, graceful SIGTERM). The parent binds the listening socket,
accepts every connection and hands it (the file descriptor, over a Unix socket pair per
worker) to the ready worker with the fewest open connections, which serves it to its end
(:class:`HandedServer`). Connections are kept alive, so where a connection lands decides
where its requests run: when the workers all accepted on the shared socket, the first one to
wake took every connection of a burst (8 kept-alive clients: 48 of 48 requests on worker 0,
the other idle; issue 39), and a second worker bought nothing.

The parent supervises and owns what there is one of:

- the service lock (:mod:`hybridsag.records.service_lock`), from the bind to the end, as a
  one-process service holds it: the CLI's commands on the data dir go through the service;
- with the embedded Milvus Lite store (``milvus.uri`` unset) and a path that uses Milvus (the
  dense path, or ``lexical.backend = "milvus"``), one ``milvus-lite server`` on a free
  127.0.0.1 port (:class:`~hybridsag.milvus_client.LiteServer`), since Milvus Lite opens a store
  in one process only: every worker connects to it by URI. With ``milvus.uri`` set the workers
  connect to that server as any client does;
- the connections: accepted by the parent and handed to the worker with the fewest open
  (those handed to it less those it reports closed on the board; ties to the lowest slot),
  ready workers before starting ones;
- the workers: spawned (a fresh interpreter each: no threads or locks forked half-held); a
  worker that exits while the service runs is restarted in its slot (after a back-off when it
  keeps dying young), and meanwhile its slot on the :class:`~hybridsag.service.board.WorkerBoard`
  says "starting", so ``/readyz`` answers 503 in every worker until it is warm again; a worker
  serves the connections handed to it only once it is warm (its lifespan waits for the
  warm-up), and ready workers are handed connections before starting ones; a worker whose
  warm-up fails ends (exit :data:`START_FAILED_EXIT`) and is started again the same way, its
  slot saying "failed to warm up" until then (a failure of one start, such as a race of two
  workers opening a fresh data dir, no longer leaves the service unready for good);
- the watchdog: each worker's event loop beats on the board every second; one silent for
  ``server.worker_timeout_s`` is hung (a blocked loop answers nothing) and is killed, then
  replaced as a dead one is; the shared Lite server, when it dies, is started again on its
  port (the workers' clients reconnect to the URI they hold);
- its log lines name the worker they come from (``[worker N]``);
- on SIGTERM or SIGINT: SIGTERM to every worker (each stops accepting, finishes the requests
  in flight, cancels its write in flight and closes, as one process does), up to
  ``server.shutdown_timeout_s`` plus :data:`CLOSE_GRACE_S`, then SIGKILL for a worker still
  there; then the Lite server is stopped, the lock removed and the signal raised again under
  the handler that was there before (as :func:`~hybridsag.service.server.serve` does).

What stays one across the workers:

- writes: every write takes the writer's lock (``flock`` on ``<data_dir>/write.lock``,
  :mod:`hybridsag.ingest.writer`), so writes through different workers take turns as threads in
  one process do, each claim, commit and compensation as before; a worker SIGKILLed mid-write
  leaves a claim whose owner is dead, released by the next write (or the restarted worker's
  warm-up);
- deletes: a delete commits its tombstone in SQLite (WAL) before it is acknowledged, and every
  search checks each hit's status in the store, so a search that starts after the
  acknowledgement, in any worker, never returns it;
- the reconcile schedule (APScheduler) and the watched folders (``sources.watch``) run in worker
  0 only (a restarted worker 0 takes them over); ``POST /v1/reconcile`` may reach any worker, and
  the store's reconcile lease keeps two runs apart as it does for replicas;
- metrics: prometheus-client's multiprocess mode, in a folder the parent makes
  (``PROMETHEUS_MULTIPROC_DIR``) and removes: ``/metrics`` in any worker sums them all
  (:mod:`hybridsag.service.metrics`); the parent marks a dead worker's live gauges dead.
- ``/healthz`` names the worker that answers (pid, slot), and every answer carries
  ``x-hybridsag-worker: <slot>``; ``/readyz`` is ready only when every worker is.

On Linux a worker (and the Lite server) is told to stop when the parent dies
(``PR_SET_PDEATHSIG``), so a SIGKILLed parent leaves no worker serving without the lock.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from hybridsag.backend import ReconcileHooks
from hybridsag.errors import DenseError
from hybridsag.milvus_client import LiteServer, lite_path
from hybridsag.records.service_lock import hold_service_lock, service_url
from hybridsag.service.board import FAILED, READY, STARTING, WorkerBoard, WorkerSeat
from hybridsag.settings import Settings

__all__ = [
    "CLOSE_GRACE_S",
    "MULTIPROC_ENV",
    "HandedServer",
    "needs_lite_server",
    "serve_workers",
    "worker_settings",
]

log = logging.getLogger(__name__)

#: prometheus-client reads its multiprocess folder from this variable when it is imported.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: Beyond ``server.shutdown_timeout_s`` (uvicorn's wait for requests in flight), how long a
#: stopping worker gets to close its search (its write's undo, the store, Milvus) before SIGKILL.
CLOSE_GRACE_S = 30.0
#: A worker that exits sooner than this after its start counts as dying young: its restarts
#: back off (0.5 s, doubling, at most :data:`MAX_BACKOFF_S`).
YOUNG_S = 10.0
MAX_BACKOFF_S = 30.0
#: A worker's exit code when its start failed (uvicorn's own for a failed start): its
#: warm-up failed, and it is started again like a worker that died
START_FAILED_EXIT = 3


def needs_lite_server(settings: Settings) -> bool:
    """Whether the workers need a shared ``milvus-lite server``: the embedded Lite store is in
    use (``milvus.uri`` unset) by the dense path or the Milvus lexical index."""
    uses_milvus = settings.embedding.model != "none" or settings.lexical.backend == "milvus"
    return settings.milvus.uri is None and uses_milvus


def worker_settings(settings: Settings, *, milvus_uri: str | None) -> Settings:
    """The settings of a worker: Milvus at ``milvus_uri`` when given (the parent's Lite
    server). (Which worker runs the reconcile schedule and the watched folders is the app's
    choice: worker 0, :class:`~hybridsag.service.app.ServiceState`'s ``runs_jobs``.)"""
    if milvus_uri is None:
        return settings
    milvus = settings.milvus.model_copy(update={"uri": milvus_uri, "token": None})
    return settings.model_copy(update={"milvus": milvus})


def _stop_with_parent(sig: int) -> None:
    """Have this process get ``sig`` when its parent dies (Linux; elsewhere nothing)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the parent died before the line above ran
            os.kill(os.getpid(), sig)


def _worker_main(
    settings: Settings,
    channel: socket.socket,
    seat: WorkerSeat,
    reconciler: Callable[[], ReconcileHooks] | None,
    setup: Callable[[], None] | None,
) -> None:
    """A worker process: one service on the connections the parent hands it over ``channel``
    until SIGTERM (uvicorn's graceful shutdown; the signal is then raised again, so the worker
    ends with -SIGTERM)."""
    _stop_with_parent(signal.SIGTERM)
    if setup is not None:
        setup()
    _name_log_lines(seat.slot)
    from hybridsag.service.server import build_server

    server = build_server(
        settings, reconciler=reconciler() if reconciler is not None else None, seat=seat
    )
    handed = HandedServer(server.config, channel=channel, seat=seat)
    handed.run()
    if not handed.started:  # its warm-up failed (logged): the parent starts it again
        sys.exit(START_FAILED_EXIT)


class HandedServer(uvicorn.Server):
    """A uvicorn server that serves the connections its parent hands it over ``channel`` (a
    Unix ``SOCK_SEQPACKET`` socket: one connection's file descriptor a message, SCM_RIGHTS)
    instead of accepting on a listening socket; everything else is uvicorn's (the protocol,
    keep-alive, graceful shutdown of the connections it holds). Every tick (0.1 s) and after
    each connection it writes on the board how many of the connections it was handed have
    closed, which the parent reads to pick the worker with the fewest open."""

    def __init__(self, config: Any, *, channel: socket.socket, seat: WorkerSeat) -> None:
        super().__init__(config)
        self.channel = channel
        self.seat = seat
        self.received = 0  # connections handed to this worker
        self.connecting = 0  # received, not yet made uvicorn connections
        self._protocol: Callable[[], Any] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        import asyncio
        import functools

        await super().startup(sockets=[])  # the lifespan; no listening socket of its own
        if not self.started:
            return
        self._protocol = functools.partial(
            self.config.http_protocol_class,
            config=self.config,
            server_state=self.server_state,
            app_state=self.lifespan.state,
        )
        self.channel.setblocking(False)
        asyncio.get_running_loop().add_reader(self.channel.fileno(), self._receive)

    def _receive(self) -> None:
        import asyncio

        loop = asyncio.get_running_loop()
        while True:
            try:
                message, fds, _flags, _addr = socket.recv_fds(self.channel, 16, 16)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                message, fds = b"", []
            if not message and not fds:  # the parent closed its end: nothing more comes
                loop.remove_reader(self.channel.fileno())
                return
            for fd in fds:
                conn = socket.socket(fileno=fd)
                conn.setblocking(False)
                self.received += 1
                self.connecting += 1
                task = loop.create_task(loop.connect_accepted_socket(self._protocol, conn))
                task.add_done_callback(self._connected)

    def _connected(self, task: Any) -> None:
        self.connecting -= 1
        if not task.cancelled() and task.exception() is not None:
            log.warning("a handed connection could not be served: %s", task.exception())
        self._publish()

    def _publish(self) -> None:
        open_now = len(self.server_state.connections) + self.connecting
        self.seat.board.set_closed(self.seat.slot, max(0, self.received - open_now))

    async def on_tick(self, counter: int) -> bool:
        self._publish()
        return bool(await super().on_tick(counter))

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        import asyncio

        with contextlib.suppress(ValueError, OSError):  # stop taking connections first
            asyncio.get_running_loop().remove_reader(self.channel.fileno())
        self.channel.close()
        await super().shutdown(sockets=sockets)


def _name_log_lines(slot: int) -> None:
    """Every log record of this worker process names its worker: its message starts
    ``[worker N]`` (whatever the format the entry point set up) and it carries ``worker=N``."""
    make = logging.getLogRecordFactory()

    def named(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        record.worker = slot
        record.msg = f"[worker {slot}] {record.msg}"
        return record

    logging.setLogRecordFactory(named)


@dataclass
class _Slot:
    """A worker slot: its process, when it started, how often in a row it died young, and
    when its restart is due (None: running)."""

    process: Any = None
    started: float = 0.0
    young_deaths: int = 0
    restart_at: float | None = None
    channel: socket.socket | None = None  # the parent's end of the hand-over pair
    handed: int = 0  # connections handed to the running process


class _StopSignal:
    """SIGTERM/SIGINT recorded (the first one) and written to a pipe the supervisor waits on."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)

    def handler(self, signum: int, frame: object) -> None:
        if self.signum is None:
            self.signum = signum
        with contextlib.suppress(OSError):
            os.write(self.write_fd, b"!")

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


@contextlib.contextmanager
def _stop_signals() -> Iterator[_StopSignal]:
    """While the block runs, SIGTERM and SIGINT are recorded (the block ends the service);
    the handlers that were there before are put back at its end."""
    stop = _StopSignal()
    signals = (signal.SIGTERM, signal.SIGINT)
    before = {sig: signal.signal(sig, stop.handler) for sig in signals}
    try:
        yield stop
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        stop.close()


class _Supervisor:
    def __init__(
        self,
        settings: Settings,
        sock: socket.socket,
        *,
        reconciler: Callable[[], ReconcileHooks] | None,
        setup: Callable[[], None] | None,
    ) -> None:
        self.settings = settings
        self.sock = sock
        self.reconciler = reconciler
        self.setup = setup
        self.ctx = multiprocessing.get_context("spawn")
        self.workers = settings.server.workers
        self.board = WorkerBoard(self.workers, self.ctx)
        self.slots = [_Slot() for _ in range(self.workers)]
        self.metrics_dir: Path | None = None
        self.milvus_uri: str | None = None

    def spawn(self, slot: int) -> None:
        assert self.metrics_dir is not None
        seat = WorkerSeat(board=self.board, slot=slot, metrics_dir=self.metrics_dir)
        settings = worker_settings(self.settings, milvus_uri=self.milvus_uri)
        self.board.set(slot, STARTING)
        self.board.set_closed(slot, 0)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        process = self.ctx.Process(
            target=_worker_main,
            args=(settings, theirs, seat, self.reconciler, self.setup),
            name=f"hybridsag-worker-{slot}",
        )
        self.board.forget_beat(slot)
        try:
            process.start()
        finally:
            theirs.close()
        ours.setblocking(False)
        state = self.slots[slot]
        state.process, state.started, state.restart_at = process, time.monotonic(), None
        state.channel, state.handed = ours, 0
        log.info("worker %d started (pid %d)", slot, process.pid)

    def died(self, slot: int) -> None:
        """Worker ``slot`` exited while the service runs: mark it, schedule its restart."""
        state = self.slots[slot]
        process = state.process
        process.join()
        # /readyz says why it is not ready until it is started again (spawn: STARTING)
        self.board.set(slot, FAILED if process.exitcode == START_FAILED_EXIT else STARTING)
        if state.channel is not None:  # connections it had not taken yet go with it
            state.channel.close()
            state.channel = None
        if self.metrics_dir is not None:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(process.pid, str(self.metrics_dir))
        lived = time.monotonic() - state.started
        state.young_deaths = state.young_deaths + 1 if lived < YOUNG_S else 0
        delay = min(MAX_BACKOFF_S, 0.5 * 2 ** (state.young_deaths - 1)) if state.young_deaths else 0
        state.restart_at = time.monotonic() + delay
        state.process = None
        log.error(
            "worker %d (pid %d) exited with %s after %.1f s; restarting it in %.1f s",
            slot, process.pid, process.exitcode, lived, delay,
        )  # fmt: skip

    def watch(self) -> None:
        """The watchdog: kill a worker whose heartbeat is older than
        ``server.worker_timeout_s`` (its event loop is stuck: it answers nothing); its exit is
        then seen as any other and it is replaced."""
        limit = self.settings.server.worker_timeout_s
        now = time.monotonic()
        for slot, state in enumerate(self.slots):
            beat = self.board.last_beat(slot)
            process = state.process
            if process is None or beat is None or now - beat <= limit or not process.is_alive():
                continue
            log.error(
                "worker %d (pid %d) is hung: no heartbeat for %.1f s (server.worker_timeout_s="
                "%g); killing it", slot, process.pid, now - beat, limit,
            )  # fmt: skip
            self.board.forget_beat(slot)
            process.kill()

    def keep_lite(self, lite: LiteServer | None) -> None:
        """Start the shared Milvus Lite server again, on its port, when it died, and load its
        collections (the workers reconnect to the URI they hold and find them loaded)."""
        if lite is None or lite.proc is None or lite.proc.poll() is None:
            return
        code = lite.proc.returncode
        port = int(str(lite.uri).rsplit(":", 1)[1])
        log.error("the Milvus Lite server (port %d) exited with %s; starting it again", port, code)
        try:
            lite.start(port=port)
            loaded = lite.load_collections()  # the workers' clients find them loaded
        except DenseError as exc:  # stopped: started (and loaded) again on the next turn
            log.error("the Milvus Lite server did not start again: %s", exc)
            lite.stop(timeout_s=5)
            return
        log.info("the Milvus Lite server is back on port %d; %d collection(s) loaded", port, len(loaded))

    def supervise(self, stop: _StopSignal, lite: LiteServer | None = None) -> None:
        """Until a stop signal: restart every worker that exits, kill one that hangs, start
        the shared Lite server again when it dies."""
        while stop.signum is None:
            self.watch()
            self.keep_lite(lite)
            now = time.monotonic()
            for slot, state in enumerate(self.slots):
                if state.process is None and state.restart_at is not None and state.restart_at <= now:
                    self.spawn(slot)
            running = {s.process.sentinel: i for i, s in enumerate(self.slots) if s.process}
            due = [s.restart_at for s in self.slots if s.restart_at is not None]
            # at most a second: the watchdog and the Lite server's check run every turn
            timeout = max(0.0, min([*due, now + 1.0]) - time.monotonic())
            ready = multiprocessing.connection.wait(
                [*running, stop.read_fd, self.sock], timeout=timeout
            )
            for handle in ready:
                if handle is self.sock:
                    if stop.signum is None:
                        self.hand_over()
                elif handle == stop.read_fd:
                    with contextlib.suppress(OSError):
                        os.read(stop.read_fd, 64)
                elif stop.signum is None:
                    self.died(running[handle])

    def hand_over(self) -> None:
        """Accept every connection waiting on the listening socket and hand each to the ready
        worker with the fewest open connections (:meth:`least_loaded`); one that no worker
        takes is closed (the client sees a reset, as from a full backlog)."""
        while True:
            try:
                conn, _addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. EMFILE: leave it in the backlog for the next round
                log.warning("accepting a connection failed: %s", exc)
                return
            with conn:
                for slot in self.least_loaded():
                    state = self.slots[slot]
                    assert state.channel is not None
                    try:
                        socket.send_fds(state.channel, [b"c"], [conn.fileno()])
                    except OSError:  # its end is gone or full: the next worker
                        continue
                    state.handed += 1
                    break
                else:
                    log.warning("no worker could take a connection; closed it")

    def least_loaded(self) -> list[int]:
        """The slots of running workers, best first: ready before starting, then fewest open
        connections (handed less closed, as the board says), then the lowest slot."""
        states, closed = self.board.states(), self.board.closed()
        live = [i for i, s in enumerate(self.slots) if s.process is not None and s.channel]
        return sorted(
            live,
            key=lambda i: (states[i] != READY, self.slots[i].handed - closed[i], i),
        )

    def stop_workers(self) -> None:
        """SIGTERM to every worker, then wait (up to ``shutdown_timeout_s`` + CLOSE_GRACE_S),
        then SIGKILL for any still running."""
        for state in self.slots:  # no connection is handed from here on
            if state.channel is not None:
                state.channel.close()
                state.channel = None
        running = [s.process for s in self.slots if s.process is not None]
        for process in running:
            if process.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.settings.server.shutdown_timeout_s + CLOSE_GRACE_S
        for process in running:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                log.error("worker pid %d did not stop in time; killing it", process.pid)
                process.kill()
                process.join()

    def run(self) -> int | None:
        """Serve until SIGTERM/SIGINT; the signal that stopped it."""
        s = self.settings
        lite: LiteServer | None = None
        self.sock.setblocking(False)  # hand_over accepts until the backlog is empty
        with _stop_signals() as stop, hold_service_lock(s.data_dir, service_url(self.sock)):
            self.metrics_dir = Path(tempfile.mkdtemp(prefix="hybridsag-metrics-"))
            env_before = os.environ.get(MULTIPROC_ENV)
            # prometheus-client reads it at import: set before the workers are spawned
            os.environ[MULTIPROC_ENV] = str(self.metrics_dir)
            try:
                if needs_lite_server(s):
                    lite = LiteServer(lite_path(s), log_path=s.data_dir / "milvus-lite.log")
                    self.milvus_uri = lite.start()
                for slot in range(self.workers):
                    if stop.signum is None:
                        self.spawn(slot)
                log.info("%d workers serving %s", self.workers, service_url(self.sock))
                self.supervise(stop, lite)
            finally:
                self.stop_workers()
                if lite is not None:
                    lite.stop()
                if env_before is None:
                    os.environ.pop(MULTIPROC_ENV, None)
                else:
                    os.environ[MULTIPROC_ENV] = env_before
                shutil.rmtree(self.metrics_dir, ignore_errors=True)
            return stop.signum


def serve_workers(
    settings: Settings,
    *,
    sockets: list[socket.socket],
    reconciler: Callable[[], ReconcileHooks] | None = None,
    setup: Callable[[], None] | None = None,
) -> None:
    """Serve with ``server.workers`` worker processes on the bound ``sockets`` (one) until
    SIGTERM/SIGINT, holding the data dir's service lock throughout; then the signal is raised
    again under the handler that was there before (SIGTERM ends the process, SIGINT raises
    KeyboardInterrupt), as :func:`~hybridsag.service.server.serve` does.

    ``reconciler`` builds each worker's reconcile hooks (a class or function importable by
    name: it is sent to a fresh interpreter); ``setup`` runs first in each worker (its logging).

    Raises:
        ServiceHoldsDataDir: another running service holds the data dir.
        DenseError: the Milvus Lite store is held by another process, or its server did not
            start.
        ValueError: not exactly one socket.
    """
    if len(sockets) != 1:
        raise ValueError(f"serve_workers takes one listening socket, got {len(sockets)}")
    signum = _Supervisor(settings, sockets[0], reconciler=reconciler, setup=setup).run()
    if signum is not None:
        signal.raise_signal(signum)
