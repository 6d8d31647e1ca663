"""The write/search/reconcile race, shared by the race test and benchmarks/reconcile_bench.py.

Writer threads ingest, re-ingest and delete resources (some ids shared by every thread, some of
one thread only); a search thread searches beside them; a reconcile thread runs the reconciler
every ``reconcile_interval_s``. Every operation records its start and end (``perf_counter``).

:meth:`RaceResult.visibility_violations` checks the promise "a search never returns a resource
that was deleted before the search began": a result is a violation when a delete of its resource
finished before the search started and no ingest of that resource could have committed after the
delete began (no ingest that indexed it, or failed part-way, ended after the delete's start and
started before the search's end; an ingest skipped as unchanged never counts).
:meth:`RaceResult.final_state_problems` checks that a resource whose last operation overlapped no
other is in the state that operation left: ready with its text, or absent.

Every problem line carries the resource's operation history (:meth:`RaceResult.history`), and an
exception that is not a :class:`HybridSagError` in any thread is kept, with its traceback, in
``thread_errors`` (the thread then stops), so a failing run prints what diverged.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hybridsag.consistency import Reconciler
from hybridsag.errors import HybridSagError
from hybridsag.search import HybridSearch

__all__ = ["Op", "RaceResult", "SearchRecord", "run_race"]

QUERY = "apples orchard fruit"


@dataclass(frozen=True, slots=True)
class Op:
    kind: str  # "ingest" | "delete"
    resource_id: str
    t0: float
    t1: float
    ok: bool
    text: str | None = None
    error: str | None = None
    # may have committed new rows (indexed, or failed part-way); an "unchanged" skip never does
    revives: bool = False


@dataclass(frozen=True, slots=True)
class SearchRecord:
    t0: float
    t1: float
    resource_ids: frozenset[str]


@dataclass
class RaceResult:
    ops: list[Op] = field(default_factory=list)
    searches: list[SearchRecord] = field(default_factory=list)
    reconciles: list[dict[str, Any]] = field(default_factory=list)
    reconcile_errors: list[str] = field(default_factory=list)
    search_errors: list[str] = field(default_factory=list)
    # unexpected exceptions (not HybridSagError) of any thread, with their tracebacks
    thread_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def resource_ids(self) -> set[str]:
        return {o.resource_id for o in self.ops}

    def history(self, resource_id: str, *, limit: int = 12) -> str:
        """The last ``limit`` operations on ``resource_id``, one per line, in start order."""
        ops = sorted((o for o in self.ops if o.resource_id == resource_id), key=lambda o: o.t0)
        lines = [
            f"    {o.kind:<6} [{o.t0:.4f}, {o.t1:.4f}] ok={o.ok} revives={o.revives}"
            + (f" error={o.error!r}" if o.error else "")
            for o in ops[-limit:]
        ]
        return "\n".join(lines)

    def visibility_violations(self) -> list[str]:
        by_rid: dict[str, list[Op]] = {}
        for o in self.ops:
            by_rid.setdefault(o.resource_id, []).append(o)
        out = []
        for s in self.searches:
            for rid in s.resource_ids:
                ops = by_rid.get(rid, [])
                deletes = [o for o in ops if o.kind == "delete" and o.ok and o.t1 < s.t0]
                if not deletes:
                    continue
                d = max(deletes, key=lambda o: o.t1)
                revived = any(
                    o.revives and o.t1 > d.t0 and o.t0 < s.t1 for o in ops
                )
                if not revived:
                    out.append(
                        f"search [{s.t0:.4f}, {s.t1:.4f}] returned {rid!r}, deleted at "
                        f"[{d.t0:.4f}, {d.t1:.4f}] with no ingest after; its operations:\n"
                        + self.history(rid)
                    )
        return out

    def final_state_problems(self, hs: HybridSearch) -> tuple[list[str], int]:
        """(problems, number of resources checked)."""
        problems = []
        checked = 0
        by_rid: dict[str, list[Op]] = {}
        for o in self.ops:
            by_rid.setdefault(o.resource_id, []).append(o)
        for rid, ops in sorted(by_rid.items()):
            last = max(ops, key=lambda o: o.t1)
            if not last.ok or any(o is not last and o.t1 > last.t0 for o in ops):
                continue  # failed, or overlapped by another op: either order is possible
            checked += 1
            rec = hs.components.store.get_resource(rid)
            problem = None
            if last.kind == "delete":
                if rec is not None:
                    problem = f"{rid}: deleted last but is {rec.status}"
            elif rec is None or rec.status != "ready":
                problem = f"{rid}: ingested last but is {rec and rec.status}"
            elif rec.content_sha256 != hashlib.sha256(str(last.text).encode()).hexdigest():
                problem = f"{rid}: ready with another text than its last ingest"
            if problem is not None:
                problems.append(f"{problem}; its operations:\n{self.history(rid)}")
        return problems, checked


def run_race(
    hs: HybridSearch,
    *,
    operations: int = 1000,
    writers: int = 4,
    shared_ids: int = 6,
    own_ids: int = 4,
    delete_share: float = 0.35,
    seed: int = 7,
    reconcile_interval_s: float | None = 0.5,
    reconcile_force: bool = True,
) -> RaceResult:
    """Run ``operations`` writes over ``writers`` threads beside a search loop and (unless
    ``reconcile_interval_s`` is None) a reconcile loop; returns every record."""
    result = RaceResult()
    lock = threading.Lock()
    counter = itertools.count()
    done = threading.Event()
    shared = [f"s{i}" for i in range(shared_ids)]

    def writer(k: int, n_ops: int) -> None:
        rng = random.Random(seed * 1000 + k)
        ids = shared + [f"w{k}-{j}" for j in range(own_ids)]
        for _ in range(n_ops):
            rid = rng.choice(ids)
            if rng.random() < delete_share:
                t0 = time.perf_counter()
                try:
                    hs.delete(rid)
                    op = Op("delete", rid, t0, time.perf_counter(), True)
                except HybridSagError as exc:
                    op = Op("delete", rid, t0, time.perf_counter(), False, error=str(exc))
            else:
                n = next(counter)
                text = f"{rid} apples orchard note {n}: fruit number {n} grows near row {n % 7}."
                t0 = time.perf_counter()
                try:
                    rep = hs.ingest(rid, text, title=f"Orchard {rid}")
                    ok = rep.indexed + rep.unchanged == 1
                    op = Op("ingest", rid, t0, time.perf_counter(), ok, text=text,
                            revives=rep.indexed == 1)
                except HybridSagError as exc:
                    op = Op("ingest", rid, t0, time.perf_counter(), False, text, str(exc),
                            revives=True)
            with lock:
                result.ops.append(op)

    def searcher() -> None:
        while not done.is_set():
            t0 = time.perf_counter()
            try:
                resp = hs.search(QUERY, top_k=100)
            except HybridSagError as exc:
                result.search_errors.append(str(exc))
                continue
            rec = SearchRecord(t0, time.perf_counter(),
                               frozenset(r.resource_id for r in resp.results))
            with lock:
                result.searches.append(rec)

    def reconciler() -> None:
        assert reconcile_interval_s is not None
        rec = Reconciler(hs.components)
        while not done.wait(reconcile_interval_s):
            try:
                report = rec.run(force=reconcile_force)
            except HybridSagError as exc:
                result.reconcile_errors.append(f"{type(exc).__name__}: {exc}")
                continue
            result.reconciles.append(
                {"before": report["counts_before"], "after": report["counts_after"],
                 "errors": report["errors"]}
            )

    def guarded(body: Callable[..., None]) -> Callable[..., None]:
        # an unexpected exception stops its thread; keep it for the test to show
        def run(*args: Any) -> None:
            try:
                body(*args)
            except Exception:  # noqa: BLE001 - recorded and asserted on by the caller
                with lock:
                    result.thread_errors.append(f"{body.__name__}{args}: {traceback.format_exc()}")

        return run

    per = [operations // writers + (1 if k < operations % writers else 0) for k in range(writers)]
    threads = [
        threading.Thread(target=guarded(writer), args=(k, per[k])) for k in range(writers)
    ]
    helpers = [threading.Thread(target=guarded(searcher))]
    if reconcile_interval_s is not None:
        helpers.append(threading.Thread(target=guarded(reconciler)))
    started = time.perf_counter()
    for t in helpers + threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    for t in helpers:
        t.join()
    result.seconds = time.perf_counter() - started
    return result


def summarize(result: RaceResult, extra: Sequence[tuple[str, Any]] = ()) -> dict[str, Any]:
    """Counts for a report: operations by kind and outcome, searches, reconciles."""
    kinds: dict[str, int] = {}
    for o in result.ops:
        key = f"{o.kind}_{'ok' if o.ok else 'failed'}"
        kinds[key] = kinds.get(key, 0) + 1
    out: dict[str, Any] = {
        "operations": len(result.ops),
        "thread_errors": len(result.thread_errors),
        "by_kind": kinds,
        "searches": len(result.searches),
        "reconciles_during": len(result.reconciles),
        "seconds": round(result.seconds, 2),
    }
    out.update(extra)
    return out
