"""The race: writers, a search loop and a reconcile loop on one data dir at once.

Four threads run 240 ingests, re-ingests and deletes over shared and private resource ids
(real SQLite, real Milvus Lite, the real packaged embedding model: texts are one short sentence,
so embedding is cheap), and keep going (up to 960) until every race window was hit often
enough (:data:`WINDOWS`, counted from the records, not timed). Beside them a search loop and a
reconciler that runs every 0.4 s. The dense index is wrapped so that every 23rd write to Milvus
fails (a retriable ``DenseError``): compensation, failed cleanups and half-done deletes happen,
and the reconciler has real work. The long run (10,000 operations) is part 2 of
benchmarks/reconcile_bench.py.

Checked: no search returns a resource deleted before it began; the mid-race reconciles never
removed a live vector or a live row (no missing vector, no lost resource); after one final
reconcile an oracle written apart from the reconciler finds no orphan of any kind and a new
plan is empty.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hybridsag.consistency import Reconciler

from tests.consistency_race import RaceResult, run_race, summarize
from tests.consistency_support import (
    FaultyDense,
    check_consistent,
    make_settings,
    open_search,
    own_dense_index,
)


#: Each race window (:meth:`RaceResult.windows`) and how often the race must have hit it.
WINDOWS = {
    "searches_during_deletes": 10,
    "overlapping_writes": 20,
    "reconciles_during_writes": 5,
    "failed_writes": 5,
}
OPERATIONS = 240
INJECTED_FAILURES = 10


@pytest.mark.slow
def test_race_never_shows_deleted_resources_and_reconcile_leaves_no_orphans(
    tmp_path: Path, index_backends: tuple[str | None, str]
) -> None:
    # Claims abandoned by a failed compensation belong to this (live) process, so they are only
    # "stuck" after indexing_timeout_s: 1 s here, so that the final reconcile may undo them.
    store_url, lexical = index_backends
    settings = make_settings(tmp_path / "data", store_url, lexical=lexical, indexing_timeout_s=1)
    inner = own_dense_index(settings)
    dense = FaultyDense(inner, fail_every=23)
    with open_search(settings, dense_index=dense) as hs:
        # force: the collection holds a few dozen vectors, so a handful of leftovers is over the
        # 20% share of the mass-delete guard (tested on its own in test_consistency.py)
        def enough(r: RaceResult) -> bool:
            hit = r.windows()
            return dense.failures >= INJECTED_FAILURES and all(
                hit[name] >= n for name, n in WINDOWS.items()
            )

        result = run_race(hs, operations=OPERATIONS, writers=4, reconcile_interval_s=0.4,
                          until=enough, max_operations=4 * OPERATIONS)
        summary = summarize(result, [("injected_failures", dense.failures)])
        print("race summary:", summary)  # shown with -rP
        assert result.thread_errors == [], "\n".join([str(summary), *result.thread_errors])
        assert len(result.ops) >= OPERATIONS, summary
        assert result.search_errors == [], (summary, result.search_errors[:3])
        assert result.reconcile_errors == [], (summary, result.reconcile_errors[:3])
        hit = result.windows()
        for name, n in WINDOWS.items():  # the race windows really were hit
            assert hit[name] >= n, (name, summary)
        assert dense.failures >= INJECTED_FAILURES, summary  # the faults really happened

        violations = result.visibility_violations()
        assert violations == [], "\n".join([str(summary), *violations[:10]])

        time.sleep(1.2)  # let this process's abandoned claims pass indexing_timeout_s
        rec = Reconciler(hs.components)
        plan = rec.plan()
        # the reconciles during the race never removed anything live
        live_lost = {
            "missing_vectors": plan.missing_vectors,
            "orphan_chunks": plan.orphan_chunks,
            "missing_fts_rows": plan.missing_fts_rows,
        }
        assert not any(live_lost.values()), (live_lost, plan.as_dict(), result.reconciles)
        found_work = any(any(r["before"].values()) for r in result.reconciles)
        assert found_work or not plan.is_empty, "the faults left nothing to reconcile"

        report = rec.run(force=True)
        assert report["ok"], report
        assert not any(report["counts_after"].values()), report
        after = rec.plan()
        assert after.is_empty, after.as_dict()
        inconsistencies = check_consistent(hs)
        assert inconsistencies == [], "\n".join(inconsistencies)

        problems, checked = result.final_state_problems(hs)
        assert problems == [], "\n".join([str(summary), *problems[:10]])
        assert checked >= 5, summary
