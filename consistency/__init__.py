"""Consistency: reconcile plan/apply, the single-flight lease, the scheduler and audit reports.

``build_plan`` diffs the dense index, the FTS tables and the chunk rows against the resource table,
and the folder resources against their files (``read_sources``; reads only); ``apply_plan`` runs a plan in bounded, retried, re-checked batches behind the
mass-delete guard; ``Reconciler`` puts lease, plan, apply, re-plan and the JSON audit report
together; ``run_scheduler`` runs it on a cron. This package imports ``hybridsag`` (plugin) and
``hybridsag.fusion``; they never import it.

The names below are imported on first use (PEP 562 module ``__getattr__``): the CLI loads
``hybridsag.consistency.cli`` to register its commands without importing the reconciler.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybridsag.lazy import lazy_names

if TYPE_CHECKING:
    from hybridsag.consistency.apply import (
        BatchResult,
        ReconcileReport,
        apply_plan,
        check_apply_allowed,
    )
    from hybridsag.consistency.lease import Lease
    from hybridsag.consistency.plan import (
        CLASSES,
        ChunkRow,
        FtsRow,
        MissingVectors,
        ReconcilePlan,
        StoreState,
        StuckClaim,
        TombstonedLeftover,
        VectorEntry,
        build_plan,
        diff,
        read_state,
    )
    from hybridsag.consistency.reconciler import Reconciler
    from hybridsag.consistency.reports import (
        latest_report,
        list_reports,
        report_exit_code,
        write_report,
    )
    from hybridsag.consistency.source_drift import SourceDrift, SourceItem, read_sources
    from hybridsag.consistency.scheduler import (
        build_scheduler,
        cron_trigger,
        reconcile_once,
        run_scheduler,
    )

#: module -> the public names it defines
_PUBLIC: dict[str, tuple[str, ...]] = {
    "hybridsag.consistency.apply": (
        "BatchResult",
        "ReconcileReport",
        "apply_plan",
        "check_apply_allowed",
    ),
    "hybridsag.consistency.lease": (
        "Lease",
    ),
    "hybridsag.consistency.plan": (
        "CLASSES",
        "ChunkRow",
        "FtsRow",
        "MissingVectors",
        "ReconcilePlan",
        "StoreState",
        "StuckClaim",
        "TombstonedLeftover",
        "VectorEntry",
        "build_plan",
        "diff",
        "read_state",
    ),
    "hybridsag.consistency.reconciler": (
        "Reconciler",
    ),
    "hybridsag.consistency.reports": (
        "latest_report",
        "list_reports",
        "report_exit_code",
        "write_report",
    ),
    "hybridsag.consistency.source_drift": (
        "SourceDrift",
        "SourceItem",
        "read_sources",
    ),
    "hybridsag.consistency.scheduler": (
        "build_scheduler",
        "cron_trigger",
        "reconcile_once",
        "run_scheduler",
    ),
}

__all__ = [
    "CLASSES",
    "BatchResult",
    "ChunkRow",
    "FtsRow",
    "Lease",
    "MissingVectors",
    "ReconcilePlan",
    "ReconcileReport",
    "Reconciler",
    "SourceDrift",
    "SourceItem",
    "StoreState",
    "StuckClaim",
    "TombstonedLeftover",
    "VectorEntry",
    "apply_plan",
    "build_plan",
    "build_scheduler",
    "check_apply_allowed",
    "cron_trigger",
    "diff",
    "latest_report",
    "list_reports",
    "read_sources",
    "read_state",
    "reconcile_once",
    "report_exit_code",
    "run_scheduler",
    "write_report",
]


__getattr__, __dir__ = lazy_names(__name__, globals(), _PUBLIC)
