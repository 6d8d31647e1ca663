"""``Reconciler``: lease, plan, apply, re-plan, audit report.

Example::

    from hybridsag.consistency import Reconciler

    with Reconciler.from_settings(Settings()) as rec:
        report = rec.run(dry_run=True)      # the plan only, nothing changed
        report = rec.run()                  # lease -> plan -> apply -> plan again -> report
        report["counts_before"], report["counts_after"]
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from hybridsag.components import Components
from hybridsag.consistency.apply import ReconcileReport, apply_plan, check_apply_allowed
from hybridsag.consistency.lease import Lease, new_owner_id
from hybridsag.consistency.plan import ReconcilePlan, build_plan
from hybridsag.consistency.reports import REPORT_FORMAT, latest_report, write_report
from hybridsag.errors import ConsistencyError, HybridSagError
from hybridsag.settings import Settings

if TYPE_CHECKING:  # pragma: no cover - typing only
    from hybridsag.vectors.contract import DenseIndex
    from hybridsag.vectors.embedder import Embedder

__all__ = ["Reconciler"]


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="milliseconds")


def _plan_totals(plan: ReconcilePlan) -> dict[str, Any]:
    return {
        "collection": plan.collection,
        "collection_size": plan.collection_size,
        "resources": plan.resources,
        "chunks": plan.chunks,
        "tombstones": plan.tombstones,
        "store_empty": plan.store_empty,
        "vectors_to_delete": plan.vectors_to_delete,
        "pending_claims": len(plan.pending_claims),
        "dense_checked": plan.dense_checked,
    }


class Reconciler:
    """Finds and removes what the write path left behind, over one data dir's
    :class:`~hybridsag.components.Components` (its store, lexical index, write path and dense
    index; a running search or service hands its own).

    Build it over shared ``components`` (then :meth:`close` leaves them open) or with
    :meth:`from_settings`, which builds them and closes them in :meth:`close`. A plan never
    loads the embedding model; only re-embedding missing vectors does, outside the write lock.
    """

    def __init__(
        self, components: Components, *, owner: str | None = None, owns: bool = False
    ) -> None:
        self.components = components
        self._owns = owns
        self.owner = owner or new_owner_id()
        self.settings: Settings = components.settings

    @classmethod
    def from_settings(
        cls, settings: Settings, *, embedder: Embedder | None = None, owner: str | None = None
    ) -> Reconciler:
        """Build the components of ``settings`` for this reconciler (closed by :meth:`close`)."""
        return cls(Components(settings, embedder=embedder), owner=owner, owns=True)

    def close(self) -> None:
        """Close the components if this reconciler built them."""
        if self._owns:
            self.components.close()
            self._owns = False

    def __enter__(self) -> Reconciler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- parts ----------------------------------------------------------------------------------

    def _dense(self) -> DenseIndex | None:
        """The dense index when this data dir recorded vectors (never loads a model)."""
        return self.components.stored_dense_index()

    def lease(self) -> Lease:
        """This reconciler's lease (``consistency.lease_s``) in the store."""
        return Lease(
            self.components.store, ttl_s=self.settings.consistency.lease_s, owner=self.owner
        )

    def plan(self) -> ReconcilePlan:
        """Build a plan now (reads only). See :func:`hybridsag.consistency.build_plan`."""
        c = self.components
        return build_plan(c.store, c.lexical, self._dense(), self.settings)

    def latest_report(self) -> dict[str, Any] | None:
        """The newest audit report under ``settings.reports_dir``, or None."""
        return latest_report(self.settings.reports_dir)

    # -- the run ----------------------------------------------------------------------------

    def run(self, *, dry_run: bool = False, force: bool = False) -> dict[str, Any]:
        """Plan (and unless ``dry_run`` take the lease, apply, and plan again), then write and
        return the audit report.

        The report holds ``counts_before``/``counts_after`` by class (the source drift
        classes among them), ``samples_before``/``samples_after`` (first 10 ids per class),
        ``sources_before``/``sources_after`` (touched and skipped files, roots not checked),
        ``apply`` (batches, totals, errors),
        ``durations``, ``errors``, ``settings`` (secrets masked), ``dry_run``, ``ok`` and the
        file's ``path``. A dry run does not take the lease (it changes nothing) and reports the
        same plan before and after, with ``would_refuse``: why a run would be refused (the
        mass-delete guard, attach mode), or None.

        Raises:
            ConsistencyError: refused (lease held, attach mode, mass-delete guard); a report
                with ``refused`` set is still written.
            HybridSagError: the store or dense index failed while planning (report written).
        """
        t_start = time.perf_counter()
        started_at = time.time()
        durations: dict[str, float] = {}
        errors: list[str] = []
        refused: str | None = None
        before: ReconcilePlan | None = None
        after: ReconcilePlan | None = None
        applied: ReconcileReport | None = None
        failure: BaseException | None = None
        would_refuse: str | None = None

        def timed(name: str, fn: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn()
            finally:
                durations[name] = round(time.perf_counter() - t0, 4)

        try:
            if dry_run:
                before = after = timed("plan_s", self.plan)
                try:  # say what a run would refuse, so that cron hears of it from the dry run
                    check_apply_allowed(before, self.settings, force=force)
                except ConsistencyError as exc:
                    would_refuse = str(exc)
            else:
                with self.lease().held() as lease:
                    before = timed("plan_s", self.plan)
                    c = self.components
                    applied = timed(
                        "apply_s",
                        lambda: apply_plan(
                            before,  # type: ignore[arg-type]
                            c.store,
                            self._dense(),
                            c.writer(),
                            self.settings,
                            force=force,
                            lease=lease,
                        ),
                    )
                    errors.extend(applied.errors)
                    after = timed("replan_s", self.plan)
        except ConsistencyError as exc:
            refused = str(exc)
            errors.append(f"refused: {exc}")
            failure = exc
        except HybridSagError as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            failure = exc
        durations["total_s"] = round(time.perf_counter() - t_start, 4)
        report: dict[str, Any] = {
            "kind": "reconcile",
            "format": REPORT_FORMAT,
            "owner": self.owner,
            "data_dir": str(self.settings.data_dir),
            "dry_run": dry_run,
            "force": force,
            "ok": not errors,
            "refused": refused,
            "would_refuse": would_refuse,
            "started_at": _iso(started_at),
            "finished_at": _iso(time.time()),
            "counts_before": before.counts() if before else None,
            "counts_after": after.counts() if after else None,
            "samples_before": before.samples() if before else None,
            "samples_after": after.samples() if after else None,
            "totals_before": _plan_totals(before) if before else None,
            "totals_after": _plan_totals(after) if after else None,
            "pending_claims_after": (
                [c.resource_id for c in after.pending_claims[:10]] if after else None
            ),
            # source drift that is no work but is said: touched, skipped, roots not checked
            "sources_before": before.sources.summary() if before else None,
            "sources_after": after.sources.summary() if after else None,
            "apply": applied.as_dict() if applied else None,
            "durations": durations,
            "errors": errors,
            "settings": self.settings.public_dict(),
        }
        path = write_report(
            self.settings.reports_dir, report, keep=self.settings.consistency.keep_reports
        )
        report["path"] = str(path)
        if failure is not None:
            raise failure
        return report
