"""The reconciler as the backends and the HTTP service need it (``hybridsag.backend.ReconcileHooks``).

``hybridsag`` (plugin/) never imports this package: :class:`ServiceReconciler` is published under
the ``hybridsag.reconciler`` entry point (pyproject.toml), which an in-process
``hybridsag.backend.LocalBackend`` loads for ``reconcile`` and ``audit``, and the ``serve``
command, which this package registers, builds one and hands it to ``create_app``. Every run uses the service's own open components (one Milvus Lite handle per
process) and takes the same store lease as ``hybridsag reconcile``, so a scheduled run, an
HTTP ``POST /v1/reconcile``, another replica and the CLI never mutate at once.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from hybridsag.consistency.reconciler import Reconciler
from hybridsag.consistency.reports import latest_report, scan_reports
from hybridsag.consistency.scheduler import JOB_ID, build_scheduler
from hybridsag.errors import NotFoundError

if TYPE_CHECKING:  # pragma: no cover - typing only
    from apscheduler.schedulers.base import BaseScheduler

    from hybridsag.search import HybridSearch
    from hybridsag.settings import Settings

__all__ = ["ServiceReconciler"]


class ServiceReconciler:
    """Reconcile runs, the latest audit report and the ``consistency.cron`` job of a service."""

    def __init__(self) -> None:
        self._scheduler: BaseScheduler | None = None
        self._lock = threading.Lock()

    def run(self, search: HybridSearch, *, dry_run: bool, force: bool) -> dict[str, Any]:
        """Plan (and unless ``dry_run`` apply) over ``search``; the audit report. Raises
        ConsistencyError when refused (lease held, mass-delete guard)."""
        return Reconciler(search.components).run(dry_run=dry_run, force=force)

    def latest(self, settings: Settings) -> dict[str, Any]:
        """The newest audit report under ``settings.reports_dir`` (with ``path`` and the
        ``skipped`` files); NotFoundError when there is none, naming the files skipped."""
        report = latest_report(settings.reports_dir)
        if report is not None:
            return report
        skipped = "; ".join(f"{path}: {why}" for path, why in scan_reports(settings.reports_dir).skipped)
        raise NotFoundError(
            f"no reconcile report under {settings.reports_dir} yet (run a reconcile, or a dry run, "
            "first)" + (f"; skipped what is not a report: {skipped}" if skipped else "")
        )

    def start_schedule(self, search: HybridSearch) -> None:
        """Start the background job on ``consistency.cron`` over ``search`` (once)."""
        with self._lock:
            if self._scheduler is None:
                self._scheduler = build_scheduler(search.settings, components=search.components)
                self._scheduler.start()

    def next_run(self) -> str | None:
        """When the scheduled job runs next (ISO 8601), or None when none is scheduled."""
        with self._lock:
            if self._scheduler is None:
                return None
            job = self._scheduler.get_job(JOB_ID)
            when = getattr(job, "next_run_time", None)
            return when.isoformat() if when is not None else None

    def stop_schedule(self) -> None:
        """Stop the job, waiting for a run in progress to finish."""
        with self._lock:
            if self._scheduler is not None and self._scheduler.running:
                self._scheduler.shutdown(wait=True)
            self._scheduler = None
