"""Prometheus metrics of the HTTP service (``prometheus-client``), in a registry of its own.

Requests and latency per endpoint (the route template, never a resource id or a token), each
path's latency and the judge's calls and failures from every search, degraded searches per path,
rejected (429) requests, reconcile outcomes, and the index size read from the store at scrape
time. Watched folders: file events, batches applied, the changes waiting, and the lag from a
change seen to its batch committed. Remote models (an HTTP embedder, a remote judge), from each search's ``usage["remote"]``:
calls (retries included), tokens, answers from a cache and the time each search spent in them,
labelled by remote (``judge/reranker``, ``embedder/tei``, ...), and the searches their remote
budget degraded.

Several worker processes (``server.workers``, :mod:`hybridsag.service.workers`): prometheus-client's
multiprocess mode. Each worker writes its samples to files in one folder (``multiprocess_dir``,
which the supervising parent makes, names in ``PROMETHEUS_MULTIPROC_DIR`` before it spawns the
workers, and removes), and :meth:`ServiceMetrics.render`, in whichever worker answers
``/metrics``, sums every worker's: counters and histograms of every worker that ever ran (a
restarted worker's counts stay), the in-flight and watch-queue gauges over the live workers
only (``livesum``; the parent marks a dead worker's gauges dead). The collectors read at scrape
time (the index size, the A/B report cache) are this worker's reads of the shared store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "ServiceMetrics"]

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE

# Latency buckets in seconds: 1 ms .. 30 s (a warm search is milliseconds; an ingest batch or a
# reconcile run can take seconds).
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# A watched change waits for its batch, which re-embeds what changed: a 500-file burst on the
# embedded default takes minutes on 2 loaded cores (benchmarks/live_index.py).
_WATCH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class _IndexSize(Collector):
    """Resources (per status), chunks and tombstones, read when Prometheus scrapes."""

    def __init__(self, counts: Callable[[], Mapping[str, int] | None]) -> None:
        self._counts = counts

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily("hybridsag_index_size", "Rows in the store by kind", labels=["kind"])

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield self._family()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self._family()
        for kind, n in sorted((self._counts() or {}).items()):
            family.add_metric([kind], float(n))
        yield family


class ServiceMetrics:
    """The service's metrics; :meth:`render` gives the Prometheus text format (of this process,
    or with ``multiprocess_dir`` of every worker: see the module docstring)."""

    def __init__(
        self,
        counts: Callable[[], Mapping[str, int] | None],
        *,
        multiprocess_dir: Path | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._multiprocess_dir = multiprocess_dir
        #: collectors read at scrape time, rendered beside the multiprocess samples too
        self._collectors: list[Collector] = []
        r = self.registry
        self.requests = Counter(
            "hybridsag_http_requests", "HTTP requests", ["method", "endpoint", "status"], registry=r
        )
        self.latency = Histogram(
            "hybridsag_http_request_seconds",
            "HTTP request latency",
            ["method", "endpoint"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.path_latency = Histogram(
            "hybridsag_search_path_seconds",
            "Latency of each retrieval path inside a search",
            ["path"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.degraded = Counter(
            "hybridsag_degraded_searches", "Searches that left a path out", ["path"], registry=r
        )
        self.judge_calls = Counter("hybridsag_judge_calls", "Judge calls made by searches", registry=r)
        self.judge_failures = Counter(
            "hybridsag_judge_failures", "Searches whose SAG2 judge failed", registry=r
        )
        self.rejected = Counter(
            "hybridsag_rejected_requests", "Requests refused: 429 overload, 503 timeout or warming up", ["status"], registry=r
        )
        self.in_flight = Gauge(
            "hybridsag_in_flight", "Searches and writes admitted and not yet done", ["kind"], registry=r,
            multiprocess_mode="livesum",
        )
        self.body_bytes = Gauge(
            "hybridsag_request_body_bytes_held", "Bytes of request bodies over 64 KiB held "
            "(server.max_body_memory_bytes bounds them)", registry=r, multiprocess_mode="livesum",
        )
        self.reconcile = Counter(
            "hybridsag_reconcile_runs", "Reconcile runs by outcome", ["outcome"], registry=r
        )
        # remote models (a small, separate addition: hybridsag.remote_calls's per-search meter)
        self.remote_calls = Counter(
            "hybridsag_remote_calls", "HTTP calls to remote models by searches, retries included",
            ["remote"], registry=r,
        )
        self.remote_tokens = Counter(
            "hybridsag_remote_tokens", "Tokens remote models reported for searches",
            ["remote", "kind"], registry=r,
        )
        self.remote_cached = Counter(
            "hybridsag_remote_cached", "Remote answers taken from a cache by searches",
            ["remote"], registry=r,
        )
        self.remote_latency = Histogram(
            "hybridsag_remote_seconds", "Time one search spent in calls to a remote model",
            ["remote"], buckets=_BUCKETS, registry=r,
        )
        self.budget_spent = Counter(
            "hybridsag_remote_budget_spent", "Searches degraded by their remote budget", registry=r
        )
        # watched sources (hybridsag.service.watch)
        self.watch_events = Counter(
            "hybridsag_watch_events", "File events of watched folders, kept for indexing",
            registry=r,
        )
        self.watch_batches = Counter(
            "hybridsag_watch_batches", "Batches of watched-folder changes applied, by kind "
            "(events, rescan) and outcome (ok, failed)", ["kind", "outcome"], registry=r,
        )
        self.watch_queue = Gauge(
            "hybridsag_watch_queue", "Changed paths of watched folders waiting or being applied",
            registry=r, multiprocess_mode="livesum",
        )
        self.watch_lag = Histogram(
            "hybridsag_watch_lag_seconds",
            "From the watcher seeing a file change to its batch committed (searchable)",
            buckets=_WATCH_BUCKETS,
            registry=r,
        )
        self.register(_IndexSize(counts))

    def register(self, collector: Collector) -> None:
        """Add a collector read at scrape time (it is rendered in multiprocess mode too)."""
        self.registry.register(collector)
        self._collectors.append(collector)

    def observe_search(self, response: Mapping[str, Any]) -> None:
        """Count one search's path timings, judge usage and degraded paths (its as_dict)."""
        for key, ms in response.get("timings", {}).items():
            name = key.removesuffix("_ms")
            if key.endswith("_ms") and name not in ("total", "fusion"):
                self.path_latency.labels(path=name).observe(ms / 1000.0)
        usage = response.get("usage", {}).get("sag2") or {}
        self.judge_calls.inc(int(usage.get("judge_calls", 0) or 0))
        for path, reason in response.get("reasons", {}).items():
            self.degraded.labels(path=path).inc()
            if path == "sag2" and "Judge" in reason:
                self.judge_failures.inc()
        self._observe_remote(response.get("usage", {}))

    def _observe_remote(self, usage: Mapping[str, Any]) -> None:
        """Count one search's remote calls, tokens, cache answers, time and spent budget."""
        for remote, entry in (usage.get("remote") or {}).items():
            self.remote_calls.labels(remote=remote).inc(int(entry.get("calls", 0) or 0))
            for kind in ("input", "output"):
                tokens = int(entry.get(f"{kind}_tokens", 0) or 0)
                self.remote_tokens.labels(remote=remote, kind=kind).inc(tokens)
            self.remote_cached.labels(remote=remote).inc(int(entry.get("cached", 0) or 0))
            self.remote_latency.labels(remote=remote).observe(float(entry.get("ms", 0.0)) / 1000)
        budget = usage.get("remote_budget") or {}
        if budget.get("spent"):
            self.budget_spent.inc()

    def render(self) -> bytes:
        """The Prometheus text format: this process's metrics, or in multiprocess mode every
        worker's summed (plus this worker's scrape-time collectors)."""
        if self._multiprocess_dir is None:
            return generate_latest(self.registry)
        from prometheus_client import multiprocess

        registry = CollectorRegistry(auto_describe=True)
        multiprocess.MultiProcessCollector(registry, path=str(self._multiprocess_dir))
        for collector in self._collectors:
            registry.register(collector)
        return generate_latest(registry)
