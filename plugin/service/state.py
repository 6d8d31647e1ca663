"""What the service's handlers share: :class:`ServiceState` (settings, tokens, gates, metrics,
the warm search and the backend over it), held by the app as ``app.state.service``.

Its lifecycle is the app's lifespan (:func:`hybridsag.service.app.create_app`): ``warm`` on a
thread at start-up, ``close`` at shutdown; ``checks`` is ``/readyz``'s deep check.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import anyio

from hybridsag.ab.online import Experiments
from hybridsag.backend import LocalBackend, ReconcileHooks
from hybridsag.errors import HybridSagError
from hybridsag.search import HybridSearch
from hybridsag.service.auth import TokenBook
from hybridsag.service.board import FAILED, WorkerSeat
from hybridsag.service.limits import Gate, GateTimeout
from hybridsag.service.metrics import ServiceMetrics
from hybridsag.service.watch import FolderWatcher
from hybridsag.settings import Settings

__all__ = ["READY_PROBE_S", "ServiceState"]

#: The service's records (warm-up, released claims) keep the logger they have always had.
logger = logging.getLogger("hybridsag.service.app")

#: How long /readyz's deep check waits for a remote embedding model's one answer (no retry).
READY_PROBE_S = 5.0


class ServiceState:
    """Everything the handlers share: settings, tokens, gates, metrics, the warm search."""

    def __init__(
        self,
        settings: Settings,
        *,
        search: HybridSearch | None,
        reconciler: ReconcileHooks | None,
        seat: WorkerSeat | None = None,
    ) -> None:
        s = settings.server
        self.settings = settings
        self.tokens = TokenBook(s)
        self.reconciler = reconciler
        #: this worker's place among several (hybridsag.service.workers); None: one process
        self.seat = seat
        #: the reconcile schedule and the watched folders run here: in worker 0 of several
        self.runs_jobs = seat is None or seat.slot == 0
        self.metrics = ServiceMetrics(
            self.counts, multiprocess_dir=seat.metrics_dir if seat is not None else None
        )
        self._owns_search = search is None
        self.search: HybridSearch | None = search
        #: the A/B experiments and their event store (hybridsag.ab), opened by warm()
        self.experiments: Experiments | None = None
        #: the operations every handler calls, over the warm search (built by warm())
        self.backend: LocalBackend | None = None
        self.ready = False
        #: set by close(): writes in flight are cancelled (hybridsag.ingest.writer's cancel event)
        self.stopping = threading.Event()
        self.warm_error: str | None = None
        #: the last deep check of /readyz: (time.monotonic() when done, checks)
        self._checked: tuple[float, dict[str, str]] | None = None
        self._checking = asyncio.Lock()

        def gate(kind: str, workers: int, queue: int) -> Gate:
            return Gate(
                kind, workers=workers, queue=queue, retry_after_s=s.retry_after_s,
                on_change=lambda n: self.metrics.in_flight.labels(kind=kind).set(n),
            )  # fmt: skip

        self.searches = gate("search", s.search_concurrency, s.search_queue)
        # one writer thread: service writes are serialised, so a scope check and the write it
        # guards cannot interleave with another service write; tenants' writes take turns
        self.writes = gate("write", 1, s.max_pending_writes - 1)
        # what a write needs first and may take long, never on the writer: a folder sync's
        # manifest compared with the records (a read), an upload converted (in its sandbox)
        self.manifests = gate("manifest", 1, s.max_pending_writes - 1)
        self.conversions = gate("conversion", s.conversions, s.max_pending_writes - 1)
        #: keeps sources.watch in sync (hybridsag.service.watch), started once warm
        self.watcher: FolderWatcher | None = None
        if settings.sources.watch and self.runs_jobs:
            self.watcher = FolderWatcher(
                settings.sources,
                search=self.hs,
                writes=self.writes,
                cancel=self.stopping,
                metrics=self.metrics,
                retry_after_s=s.retry_after_s,
            )

    # -- lifecycle ------------------------------------------------------------------------------

    def warm(self) -> None:
        """Build the search (unless given) and load everything a search and a write use: one
        search runs every configured path (store, model, Milvus, judge); the claims of a dead
        process are released."""
        t0 = time.perf_counter()
        try:
            if self.search is None:
                self.search = HybridSearch(self.settings)
            if self.experiments is None:
                self.experiments = Experiments(self.settings)
            self.backend = LocalBackend(
                self.search, reconciler=self.reconciler, experiments=self.experiments
            )
            self.search.search("hybridsag warm-up", top_k=1)
            # jieba's dictionary (about 0.5 s, seconds on a loaded machine) loads on the first
            # Han text, which the warm-up query has none of: loaded here, not in a request
            self.search.components.tokenizer.warm()
            self.search.counts()
            # a process SIGKILLed mid-write (this service's last run, say) holds no id once
            # this one starts: its claims are released now, not at the next write
            released = self.search.components.writer().release_abandoned()
            if released:
                logger.info("released %d abandoned claim(s): %s", len(released), released[:10])
        except HybridSagError as exc:
            self.warm_error = f"{type(exc).__name__}: {exc}"
            logger.error("warm-up failed: %s", self.warm_error)
            if self.seat is not None:
                self.seat.mark(FAILED)
            return
        self.ready = True
        logger.info("warm in %.2f s; ready", time.perf_counter() - t0)

    def close(self) -> None:
        """Stop the schedule, cancel the write in flight (it stops at its next cancellation
        point, undone: :class:`~hybridsag.errors.WriteCancelledError`), finish admitted work,
        close the search (if the app built it)."""
        self.stopping.set()  # a long write stops at its next cancellation point, undone
        self.ready = False
        if self.reconciler is not None:
            self.reconciler.stop_schedule()
        self.conversions.close()
        self.manifests.close()
        self.writes.close()
        self.searches.close()
        if self.search is not None and self._owns_search:
            self.search.close()
        if self.experiments is not None:
            self.experiments.close()

    # -- shared reads ---------------------------------------------------------------------------

    def counts(self) -> dict[str, int] | None:
        if not self.ready or self.search is None:
            return None
        return self.search.counts()

    def hs(self) -> HybridSearch:
        """The warm search; 503 (retriable) while warming up."""
        if not self.ready or self.search is None:
            raise GateTimeout(
                "the service is warming up" if self.warm_error is None
                else f"the service failed to warm up: {self.warm_error}"
            )
        return self.search

    def ops(self) -> LocalBackend:
        """The backend every handler calls; 503 (retriable) while warming up."""
        self.hs()
        assert self.backend is not None  # built by warm() before ready
        return self.backend

    async def cached_checks(self) -> dict[str, str]:
        """:meth:`checks`, run on a thread at most once per ``server.ready_cache_s`` (callers
        that come while it runs wait for that run)."""
        ttl = self.settings.server.ready_cache_s
        async with self._checking:
            if self._checked is None or time.monotonic() - self._checked[0] >= ttl:
                checks = await anyio.to_thread.run_sync(self.checks)
                self._checked = (time.monotonic(), checks)
            return self._checked[1]

    def checks(self) -> dict[str, str]:
        """``/readyz``: the store, the Milvus lexical index (when it is on), Milvus and the model
        (one vector asked of it past every cache: :data:`READY_PROBE_S` for a remote one), each
        "ok ..." or the error."""
        hs = self.hs()
        out: dict[str, str] = {}
        try:
            c = hs.counts()
            out["store"] = f"ok: {c['resources']} resources, {c['chunks']} chunks"
        except HybridSagError as exc:
            out["store"] = f"failed: {exc}"
        if self.watcher is not None:
            out["sources"] = self.watcher.describe()
        parts = hs.components
        if self.settings.lexical.backend in ("milvus", "tantivy"):  # an engine outside the store
            try:
                out["lexical"] = f"ok: {parts.lexical.describe()}"
            except HybridSagError as exc:
                out["lexical"] = f"failed: {exc}"
        if not parts.dense_enabled:
            out["milvus"] = out["model"] = "off (embedding.model = 'none')"
            return out
        try:
            out["milvus"] = f"ok: {parts.dense_index().count()} vectors"
        except HybridSagError as exc:
            out["milvus"] = f"failed: {exc}"
        try:
            emb = parts.embedder()
            # asked now, past the query memo and any cache: a remote model answering 401 is
            # not "ok" because an earlier vector was remembered
            emb.probe(timeout_s=READY_PROBE_S)
            out["model"] = f"ok: {emb.name}"
        except HybridSagError as exc:
            out["model"] = f"failed: {exc}"
        return out
