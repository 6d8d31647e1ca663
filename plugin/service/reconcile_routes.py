"""``POST /v1/reconcile`` and ``GET /v1/audit/latest`` (admin tokens), present only when the
app is given the reconciler's hooks."""

from __future__ import annotations

from typing import Any

import anyio
from fastapi import APIRouter, Depends, Request

from hybridsag.errors import ConsistencyError, HybridSagError
from hybridsag.service.auth import Principal
from hybridsag.service.models import ErrorOut, ReconcileRequest
from hybridsag.service.routing import API_PREFIX, ERRORS, admin, known_query, state_of

__all__ = ["audit_latest", "ops", "reconcile"]

ops = APIRouter(
    prefix=API_PREFIX,
    tags=["consistency"],
    responses=ERRORS,
    dependencies=[Depends(known_query)],
)


@ops.post("/reconcile", responses={409: {"model": ErrorOut}})
async def reconcile(body: ReconcileRequest, request: Request, caller: Principal = admin) -> Any:
    """Plan (and with ``apply: true`` apply) a reconcile; returns the audit report. 409 when
    refused (another reconcile holds the lease, or the mass-delete guard without ``force``)."""
    state = state_of(request)
    assert state.reconciler is not None  # the route exists only with hooks
    backend = state.ops()
    try:
        report = await anyio.to_thread.run_sync(
            lambda: backend.reconcile(dry_run=not body.apply, force=body.force)
        )
    except ConsistencyError:
        state.metrics.reconcile.labels(outcome="refused").inc()
        raise
    except HybridSagError:
        state.metrics.reconcile.labels(outcome="failed").inc()
        raise
    outcome = "dry_run" if not body.apply else ("ok" if report.get("ok") else "errors")
    state.metrics.reconcile.labels(outcome=outcome).inc()
    return report


@ops.get("/audit/latest")
async def audit_latest(request: Request, caller: Principal = admin) -> Any:
    """The newest reconcile audit report (404 when none was written yet: POST
    ``/v1/reconcile`` first)."""
    state = state_of(request)
    assert state.reconciler is not None  # the route exists only with hooks
    backend = state.ops()
    return await anyio.to_thread.run_sync(backend.audit)
