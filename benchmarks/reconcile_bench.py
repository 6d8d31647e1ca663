"""Reconcile benchmark (not a test): plan and apply time over N vectors on Milvus Lite, and the
write/search/reconcile race at many operations with its orphan count after one reconcile.

    .venv/bin/python benchmarks/reconcile_bench.py                 # N = 100,000, race 10,000
    .venv/bin/python benchmarks/reconcile_bench.py --n 10000 --race-ops 1000

Part 1 writes N random unit vectors (384-d, the packaged model's size) straight through
``MilvusDenseIndex`` with matching store rows (resources, chunks, FTS rows) for most of them, and
leftovers for the rest: orphan vectors (no resource), stale versions (an older version of an
existing resource) and tombstoned resources (status ``deleting``). It closes the data dir, opens
it again (as the scheduled reconcile does), then times ``build_plan``, ``apply_plan`` and the plan
after it, and checks the second plan is empty.

Part 2 is ``tests/consistency_race.run_race`` at ``--race-ops`` operations (4 writer threads,
a search loop, a reconcile every 2 s, every 23rd Milvus write failing), then one reconcile, and
reports the orphans an independent check still finds (must be 0).

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hybridsag.vectors.contract import VectorRow  # noqa: E402
from hybridsag.records.keys import chunk_id_for

from hybridsag.consistency import Reconciler, apply_plan, build_plan  # noqa: E402
from tests.consistency_race import run_race, summarize  # noqa: E402
from tests.consistency_support import (  # noqa: E402
    FaultyDense,
    check_consistent,
    clear_env,
    make_settings,
    open_search,
    own_dense_index,
    shared_embedder,
)

DIM = 384
CHUNKS_PER_RESOURCE = 4
BATCH = 5_000


def _unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def plan_apply(n: int, data_dir: Path, *, orphan_share: float, stale_share: float,
               deleting_share: float, seed: int) -> dict[str, Any]:
    settings = make_settings(data_dir, max_delete_count=max(10_000, n))
    rng = np.random.default_rng(seed)
    n_orphan = int(n * orphan_share)
    n_stale = int(n * stale_share)
    n_live = n - n_orphan - n_stale
    n_res = max(1, n_live // CHUNKS_PER_RESOURCE)
    n_deleting = int(n_res * deleting_share)
    out: dict[str, Any] = {"n": n, "resources": n_res, "planted": {
        "orphan_vectors": n_orphan, "stale_versions": n_stale,
        "tombstoned_leftovers": n_deleting}}
    with open_search(settings) as hs:
        dense = hs.components.dense_index()
        now = time.time()
        t0 = time.perf_counter()
        # store rows: resources ready at version 1 with CHUNKS_PER_RESOURCE chunks each
        live: list[tuple[str, str, int]] = []
        with hs.components.store.atomic() as c:
            res_rows, chunk_rows, fts_rows, title_rows = [], [], [], []
            chunk_id = 0
            for r in range(n_res):
                rid = f"doc{r}"
                status = "deleting" if r < n_deleting else "ready"
                res_rows.append((r + 1, rid, f"Doc {r}", status, now, now))
                title_rows.append((r + 1, f"doc {r}"))
                per = CHUNKS_PER_RESOURCE if r < n_res - 1 else n_live - r * CHUNKS_PER_RESOURCE
                for k in range(per):
                    chunk_id += 1
                    cid = chunk_id_for(rid, 1, k)
                    chunk_rows.append((chunk_id, cid, rid, k, f"text of {cid}"))
                    fts_rows.append((chunk_id, f"doc {r}", "", f"word{r} part{k}"))
                    live.append((cid, rid, 1))
            c.executemany(
                "INSERT INTO resources(id, resource_id, title, status, version, created_at, "
                "updated_at) VALUES (?, ?, ?, ?, 1, ?, ?)",
                res_rows,
            )
            c.executemany("INSERT INTO titles_fts(rowid, title) VALUES (?, ?)", title_rows)
            c.executemany(
                "INSERT INTO chunks(id, chunk_id, resource_id, version, ordinal, text, "
                "start_line, end_line, byte_start, byte_end, content_sha256) "
                "VALUES (?, ?, ?, 1, ?, ?, 1, 1, 0, 10, '')",
                chunk_rows,
            )
            c.executemany(
                "INSERT INTO chunks_fts(rowid, title, heading, body) VALUES (?, ?, ?, ?)",
                fts_rows,
            )
            c.executemany(
                "INSERT INTO tombstones(resource_id, version, deleted_at) VALUES (?, 1, ?)",
                [(f"doc{r}", now) for r in range(n_deleting)],
            )
        out["store_rows_s"] = round(time.perf_counter() - t0, 2)
        entries = live
        entries += [(f"ghost{i}@1#0", f"ghost{i}", 1) for i in range(n_orphan)]
        entries += [
            (chunk_id_for(f"doc{n_deleting + i % max(1, n_res - n_deleting)}", 0, i), 
             f"doc{n_deleting + i % max(1, n_res - n_deleting)}", 0)
            for i in range(n_stale)
        ]
        t0 = time.perf_counter()
        for start in range(0, len(entries), BATCH):
            part = entries[start : start + BATCH]
            vecs = _unit_vectors(rng, len(part))
            dense.upsert([VectorRow(c, r, v, "", (), vec) for (c, r, v), vec in zip(part, vecs)])
        out["insert_vectors_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        dense.flush()  # as the write path does after a bulk ingest (sealed segments)
        out["flush_s"] = round(time.perf_counter() - t0, 2)
        out["collection_size"] = dense.count()
    # The nightly reconciler opens the data dir afresh (scheduler.reconcile_once); Milvus Lite
    # reads a reopened collection several times faster than one this process just wrote.
    t0 = time.perf_counter()
    with open_search(settings) as hs:
        dense = hs.components.dense_index()
        out["reopen_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        plan = build_plan(hs.components.store, hs.components.lexical, dense, settings)
        out["plan_s"] = round(time.perf_counter() - t0, 2)
        out["counts_before"] = plan.counts()
        out["vectors_to_delete"] = plan.vectors_to_delete
        t0 = time.perf_counter()
        report = apply_plan(plan, hs.components.store, dense, hs.components.writer(), settings)
        out["apply_s"] = round(time.perf_counter() - t0, 2)
        out["apply_totals"] = report.totals
        out["apply_batches"] = len(report.batches)
        per_kind: dict[str, float] = {}
        for b in report.batches:
            per_kind[b.kind] = round(per_kind.get(b.kind, 0.0) + b.seconds, 2)
        out["apply_seconds_by_class"] = per_kind
        out["apply_errors"] = list(report.errors)
        t0 = time.perf_counter()
        after = build_plan(hs.components.store, hs.components.lexical, dense, settings)
        out["replan_s"] = round(time.perf_counter() - t0, 2)
        out["counts_after"] = after.counts()
        out["empty_after"] = after.is_empty
        out["collection_size_after"] = dense.count()
    return out


def race(ops: int, data_dir: Path, *, seed: int) -> dict[str, Any]:
    settings = make_settings(data_dir, indexing_timeout_s=1)
    inner = own_dense_index(settings)
    dense = FaultyDense(inner, fail_every=23)
    with open_search(settings, dense_index=dense) as hs:
        result = run_race(hs, operations=ops, writers=4, seed=seed, reconcile_interval_s=2.0)
        out = summarize(result, [("injected_failures", dense.failures)])
        out["visibility_violations"] = len(result.visibility_violations())
        time.sleep(1.2)
        rec = Reconciler(hs.components)
        t0 = time.perf_counter()
        report = rec.run(force=True)
        out["final_reconcile_s"] = round(time.perf_counter() - t0, 2)
        out["final_counts_before"] = report["counts_before"]
        out["final_counts_after"] = report["counts_after"]
        problems = check_consistent(hs)
        out["orphans_after_reconcile"] = len(problems)
        out["orphan_examples"] = problems[:5]
        final, checked = result.final_state_problems(hs)
        out["final_state_problems"] = len(final)
        out["final_state_checked"] = checked
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="vectors in the collection")
    ap.add_argument("--orphan-share", type=float, default=0.01)
    ap.add_argument("--stale-share", type=float, default=0.005)
    ap.add_argument("--deleting-share", type=float, default=0.002,
                    help="share of resources left in status deleting")
    ap.add_argument("--race-ops", type=int, default=10_000, help="0 skips the race")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--data-dir", help="work folder (default: a new temp folder)")
    args = ap.parse_args(argv)
    clear_env()
    base = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="recbench-"))
    result: dict[str, Any] = {"work_dir": str(base)}
    t0 = time.perf_counter()
    shared_embedder()
    result["model_load_s"] = round(time.perf_counter() - t0, 2)
    if args.n:
        result["plan_apply"] = plan_apply(
            args.n, base / "plan", orphan_share=args.orphan_share, stale_share=args.stale_share,
            deleting_share=args.deleting_share, seed=args.seed,
        )
    if args.race_ops:
        result["race"] = race(args.race_ops, base / "race", seed=args.seed)
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
