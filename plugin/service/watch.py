"""Watched sources: folders on the service's own disk that the running service keeps in sync
(``[sources] watch``, ``hybridsag serve --watch DIR``).

A :class:`FolderWatcher` runs inside the service's lifespan, in two asyncio tasks:

- the *collector* follows file events with watchfiles (``awatch``: inotify on Linux, through
  a Rust thread). watchfiles gathers events until none came for 50 ms, or at most
  ``sources.debounce_ms``; each event's path joins the *pending* changes of its folder (the
  folder of a ``.gitignore``, whose rules changed; nothing under a hidden folder such as
  ``.git``, which a folder index never reads), with the time the watcher saw it.
- the *applier* takes all pending changes of a folder at once, as one batch, and applies it
  through the service's write :class:`~hybridsag.service.limits.Gate` (one writer: batches are
  serialised with every other write of the service): the folder is scanned with the rules of a
  folder index (:func:`hybridsag.ingest.folders.ingest_path`), the files the batch names (or holds,
  for a folder) are read and indexed (unchanged content is not re-indexed), and the folder's
  resources whose files are gone are pruned. Changes that arrive meanwhile wait for the next
  batch, so a burst (a ``git checkout`` of 500 files) is a few batches, and since every batch
  re-reads what is on disk now, the last one leaves the index as the folder is.

At start, and every ``sources.rescan_s``, each folder is rescanned: the files whose size or mtime
differ from the recorded ones (or have no resource) are read, and gone files pruned. That is the
first index of a new folder, what a restart catches up on, and the safety net for events lost.
Watched resources are ordinary local folder resources (their stat recorded), so a search marks
them stale while a change waits, and the reconciler's source checks see them.

Metrics (``/metrics``): ``hybridsag_watch_events_total`` (file events kept),
``hybridsag_watch_batches_total{kind,outcome}`` (``events``/``rescan``, ``ok``/``failed``),
``hybridsag_watch_queue`` (changed paths waiting or being applied) and
``hybridsag_watch_lag_seconds`` (from the watcher seeing a change to its batch committed: a
change is searchable from then; watchfiles' gathering, up to ``debounce_ms``, comes before).
A batch that fails is logged and counted; a rescan of its folder follows after
``server.retry_after_s`` when the failure may pass (a busy store), else at the next periodic
rescan (the folder is gone); one refused because the write queue is full waits and is tried
again. ``/readyz`` says ``failed`` only if the watching itself stopped.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybridsag.errors import ConfigError, HybridSagError, OverloadError, WriteCancelledError
from hybridsag.search import HybridSearch
from hybridsag.service.limits import Gate
from hybridsag.service.metrics import ServiceMetrics
from hybridsag.settings import SourcesSettings, WatchedFolder

__all__ = ["STEP_MS", "FolderWatcher", "Watched"]

logger = logging.getLogger(__name__)

#: watchfiles' quiet time: a batch is yielded once no event came for this long (or at
#: ``sources.debounce_ms`` at most). watchfiles' own default.
STEP_MS = 50


@dataclass(frozen=True, slots=True)
class Watched:
    """A watched folder, resolved: its real ``path``, ``tenant`` and ``acl`` tags."""

    path: Path
    tenant: str
    acl: tuple[str, ...]

    @classmethod
    def resolve(cls, folder: WatchedFolder) -> Watched:
        """``folder`` with its path made absolute and real.

        Raises:
            ConfigError: the path is not a folder (naming it and the setting).
        """
        path = Path(os.path.abspath(folder.path))
        if not path.is_dir():
            raise ConfigError(
                f"sources.watch: {path} does not exist or is not a folder (serve --watch, "
                "[sources] watch)"
            )
        return cls(path.resolve(), folder.tenant, tuple(folder.acl))


class FolderWatcher:
    """Keeps the folders of ``sources.watch`` in sync (see the module docstring). ``search``
    gives the service's warm search; ``writes`` is its write gate; ``cancel`` (set at shutdown)
    stops a batch in flight at its next cancellation point."""

    def __init__(
        self,
        sources: SourcesSettings,
        *,
        search: Callable[[], HybridSearch],
        writes: Gate,
        cancel: threading.Event,
        metrics: ServiceMetrics,
        retry_after_s: float,
    ) -> None:
        """Resolve the watched folders (nothing starts before :meth:`start`).

        Raises:
            ConfigError: a watched path is not a folder; watchfiles is not installed.
        """
        try:
            import watchfiles  # noqa: F401
        except ImportError as exc:
            raise ConfigError(
                "watched folders need watchfiles: pip install 'hybridsag[service]'"
            ) from exc
        self.folders = tuple(Watched.resolve(w) for w in sources.watch)
        self.debounce_ms = sources.debounce_ms
        self.rescan_s = sources.rescan_s
        self._search = search
        self._writes = writes
        self._cancel = cancel
        self._metrics = metrics
        self._retry_after_s = retry_after_s
        #: per folder: changed path -> when the watcher first saw it (time.monotonic())
        self._pending: dict[Watched, dict[Path, float]] = {f: {} for f in self.folders}
        self._rescans: set[Watched] = set()
        self._in_flight = 0
        self._wake = asyncio.Event()
        self._stop = threading.Event()  # watchfiles reads it from its thread
        self._tasks: list[asyncio.Task[None]] = []
        self._failure: str | None = None
        self._started = False  # the first rescan of every folder is done

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start following events, then rescan every folder (its first index, or what changed
        while the service was down). Call on the service's event loop once it is warm."""
        self._rescans.update(self.folders)
        # the collector's first step registers the file watches; the applier, created after
        # it, runs its first batch (the start rescans) only after that step
        self._tasks = [
            asyncio.ensure_future(self._guard("collector", self._collect())),
            asyncio.ensure_future(self._guard("applier", self._apply_loop())),
            asyncio.ensure_future(self._guard("rescan timer", self._rescan_timer())),
        ]
        self._wake.set()

    async def stop(self) -> None:
        """Stop following events and applying batches (a batch on the write gate finishes,
        or is cancelled by the service's shutdown)."""
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass

    @property
    def first_index_done(self) -> bool:
        """Whether every folder's first rescan (its first index, or what changed while the
        service was down) has been applied: until then ``/readyz`` answers 503, so that a
        client that waits for ready does not search a folder still being indexed."""
        return self._started

    def describe(self) -> str:
        """One line for ``/readyz``: ``ok: ...`` or ``failed: ...``."""
        if self._failure is not None:
            return f"failed: {self._failure}"
        waiting = sum(len(p) for p in self._pending.values()) + self._in_flight
        first = "" if self._started else " (first index running)"
        return f"ok: watching {len(self.folders)} folder(s){first}, {waiting} change(s) pending"

    # -- tasks ----------------------------------------------------------------------------------

    async def _guard(self, name: str, work: Any) -> None:
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a dead task must be seen, not silently lost
            self._failure = f"the file watcher's {name} stopped: {type(exc).__name__}: {exc}"
            logger.exception("watched sources: %s", self._failure)

    def _folder_of(self, path: Path) -> Watched | None:
        for folder in self.folders:
            if path == folder.path or path.is_relative_to(folder.path):
                return folder
        return None

    def _keep(self, _change: Any, raw: str) -> bool:
        """watchfiles' filter: a path a folder index may read (nothing hidden but a
        ``.gitignore``)."""
        path = Path(raw)
        folder = self._folder_of(path)
        if folder is None:
            return False
        parts = path.relative_to(folder.path).parts
        return not any(p.startswith(".") for p in parts[:-1]) and (
            not parts or not parts[-1].startswith(".") or parts[-1] == ".gitignore"
        )

    async def _collect(self) -> None:
        from watchfiles import awatch

        async for changes in awatch(
            *(f.path for f in self.folders),
            watch_filter=self._keep,
            debounce=self.debounce_ms,
            step=STEP_MS,
            stop_event=self._stop,
            ignore_permission_denied=True,
        ):
            seen = time.monotonic()
            for _change, raw in changes:
                path = Path(raw)
                folder = self._folder_of(path)
                if folder is None:
                    continue
                self._metrics.watch_events.inc()
                if path.name == ".gitignore":
                    path = path.parent  # its folder's files may be in or out now
                self._pending[folder].setdefault(path, seen)
            self._gauge()
            self._wake.set()

    async def _rescan_timer(self) -> None:
        while True:
            await asyncio.sleep(self.rescan_s)
            self._rescans.update(self.folders)
            self._wake.set()

    async def _apply_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            for folder in self.folders:
                if folder in self._rescans:
                    self._rescans.discard(folder)
                    await self._apply(folder, None)
                if self._pending[folder]:
                    batch, self._pending[folder] = self._pending[folder], {}
                    await self._apply(folder, batch)
            self._started = True

    def _gauge(self) -> None:
        waiting = sum(len(p) for p in self._pending.values()) + self._in_flight
        self._metrics.watch_queue.set(waiting)

    async def _apply(self, folder: Watched, batch: dict[Path, float] | None) -> None:
        """Apply one batch (``None``: a rescan) through the write gate."""
        hs = self._search()
        kind = "rescan" if batch is None else "events"
        only = None if batch is None else list(batch)

        def run() -> Any:
            return hs.ingest_folder(
                folder.path, tenant=folder.tenant, acl=folder.acl, prune=True, only=only,
                changed_only=batch is None, cancel=self._cancel,
            )

        self._in_flight = len(batch or ())
        self._gauge()
        try:
            report = await self._writes.run(run)
        except OverloadError:  # the write queue is full: wait, then try again
            self._requeue(folder, batch)
            await asyncio.sleep(self._retry_after_s)
            self._wake.set()
            return
        except WriteCancelledError:
            return  # the service is stopping
        except Exception as exc:  # noqa: BLE001 - one failed batch must not stop the watching
            self._metrics.watch_batches.labels(kind=kind, outcome="failed").inc()
            retriable = isinstance(exc, HybridSagError) and exc.retriable
            logger.error(
                "watched sources: %s batch of %s failed (%s): %s: %s", kind, folder.path,
                f"rescan in {self._retry_after_s:g} s" if retriable else "the next rescan retries",
                type(exc).__name__, exc, exc_info=not isinstance(exc, HybridSagError),
            )
            if retriable:
                loop = asyncio.get_running_loop()
                loop.call_later(self._retry_after_s, self._rescan_later, folder)
            return
        finally:
            self._in_flight = 0
            self._gauge()
        done = time.monotonic()
        for first_seen in (batch or {}).values():
            self._metrics.watch_lag.observe(done - first_seen)
        self._metrics.watch_batches.labels(kind=kind, outcome="ok").inc()
        if report.indexed or report.pruned or report.errors:
            logger.info(
                "watched sources: %s: %s batch, %d indexed, %d pruned, %d skipped in %.2f s",
                folder.path, kind, report.indexed, len(report.pruned), len(report.errors),
                report.seconds,
            )

    def _requeue(self, folder: Watched, batch: dict[Path, float] | None) -> None:
        if batch is None:
            self._rescans.add(folder)
            return
        pending = self._pending[folder]
        for path, seen in batch.items():
            pending[path] = min(seen, pending.get(path, seen))

    def _rescan_later(self, folder: Watched) -> None:
        self._rescans.add(folder)
        self._wake.set()
