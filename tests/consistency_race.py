"""The write/search/reconcile race, shared by the race test and benchmarks/reconcile_bench.py.

Writer threads ingest, re-ingest and delete resources (some ids shared by every thread, some of
one thread only); a search thread searches beside them; a reconcile thread runs the reconciler
every ``reconcile_interval_s``. Every operation records its start and end (``perf_counter``).

:meth:`RaceResult.windows` counts, from those records, how often each race window was hit
(a search beside a delete, two writes of one resource at once, a reconcile beside a write, a
failed write); ``run_race(until=...)`` keeps the writers going past ``operations`` until the
caller's counts are reached (or ``max_operations``), so a test asserts counts that do not hang
on how fast the machine is.

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

    def windows(self) -> dict[str, int]:
        """How often each race window was hit:

        - ``searches_during_deletes``: searches that overlapped a delete that succeeded;
        - ``overlapping_writes``: operations that overlapped another operation on the same
          resource (two writers on one id at once);
        - ``reconciles_during_writes``: reconciles that overlapped an operation;
        - ``failed_writes``: operations that failed (an injected fault, a lost race).
        """
        deletes = [o for o in self.ops if o.kind == "delete" and o.ok]
        by_rid: dict[str, list[Op]] = {}
        for o in self.ops:
            by_rid.setdefault(o.resource_id, []).append(o)
        overlapping = sum(
            1
            for ops in by_rid.values()
            for o in ops
            if any(p is not o and p.t0 < o.t1 and o.t0 < p.t1 for p in ops)
        )
        return {
            "searches_during_deletes": sum(
                1 for s in self.searches if any(d.t0 < s.t1 and s.t0 < d.t1 for d in deletes)
            ),
            "overlapping_writes": overlapping,
            "reconciles_during_writes": sum(
                1
                for r in self.reconciles
                if any(o.t0 < r["t1"] and r["t0"] < o.t1 for o in self.ops)
            ),
            "failed_writes": sum(1 for o in self.ops if not o.ok),
        }

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
    hs: HybridSearch | None,
    *,
    replicas: Sequence[Any] = (),
    reconcile: Callable[[], dict[str, Any]] | None = None,
    operations: int = 1000,
    writers: int = 4,
    shared_ids: int = 6,
    own_ids: int = 4,
    delete_share: float = 0.35,
    seed: int = 7,
    reconcile_interval_s: float | None = 0.5,
    reconcile_force: bool = True,
    until: Callable[[RaceResult], bool] | None = None,
    max_operations: int | None = None,
) -> RaceResult:
    """Run ``operations`` writes over ``writers`` threads beside a search loop and (unless
    ``reconcile_interval_s`` is None) a reconcile loop; returns every record.

    ``until``: after its share of ``operations``, each writer keeps writing until
    ``until(result)`` holds (called under the records' lock) or ``max_operations`` (default
    four times ``operations``) were done in all: the caller's counts of
    :meth:`RaceResult.windows` are then reached however fast the machine runs.

    ``replicas``: objects with ``ingest``/``delete``/``search`` as :class:`HybridSearch` has them
    (service clients of several replicas): writer ``k`` writes through replica ``k mod n`` and
    one search loop runs per replica; ``reconcile`` then runs the reconcile (default: a
    :class:`Reconciler` over ``hs``)."""
    targets = list(replicas) or [hs]
    result = RaceResult()
    lock = threading.Lock()
    counter = itertools.count()
    done = threading.Event()
    shared = [f"s{i}" for i in range(shared_ids)]
    cap = operations * 4 if max_operations is None else max_operations

    def covered() -> bool:
        with lock:
            return until is None or len(result.ops) >= cap or until(result)

    def writer(k: int, n_ops: int) -> None:
        hs = targets[k % len(targets)]
        rng = random.Random(seed * 1000 + k)
        ids = shared + [f"w{k}-{j}" for j in range(own_ids)]
        done_ops = 0
        while done_ops < n_ops or not covered():
            done_ops += 1
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

    def searcher(hs: Any) -> None:
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
        run = reconcile
        if run is None:
            assert hs is not None
            rec = Reconciler(hs.components)
            run = lambda: rec.run(force=reconcile_force)  # noqa: E731
        while not done.wait(reconcile_interval_s):
            t0 = time.perf_counter()
            try:
                report = run()
            except HybridSagError as exc:
                result.reconcile_errors.append(f"{type(exc).__name__}: {exc}")
                continue
            record = {"before": report["counts_before"], "after": report["counts_after"],
                      "errors": report["errors"], "t0": t0, "t1": time.perf_counter()}
            with lock:
                result.reconciles.append(record)

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
    helpers = [threading.Thread(target=guarded(searcher), args=(t,)) for t in targets]
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
        "windows": result.windows(),
        "seconds": round(result.seconds, 2),
    }
    out.update(extra)
    return out
