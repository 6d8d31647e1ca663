#!/usr/bin/env python3
"""Cold CLI operations: how long a fresh ``hybridsag`` process takes for a search, a delete and a
reconcile plan on an index with vectors (each command a new process, as a user runs them).

A delete or a plan needs no model: it should cost a small fraction of a search's cold start,
which imports torch and loads the embedding model. Reports the median of ``--runs`` runs of each.

    python benchmarks/cold_ops.py --hybridsag .venv/bin/hybridsag --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _run(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hybridsag", default=str(Path(sys.executable).parent / "hybridsag"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--docs", type=int, default=40, help="small documents in the index")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        corpus.mkdir()
        for i in range(args.docs):
            (corpus / f"doc{i:03d}.md").write_text(
                f"# Document {i}\n\nThe orrery service number {i} restarts the scheduler "
                f"when error E-{1000 + i} appears. Install it on Linux with one command.\n",
                "utf-8",
            )
        env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDSAG_")}
        env["HYBRIDSAG_DATA_DIR"] = str(Path(tmp) / "data")
        hs = args.hybridsag
        _run([hs, "index", str(corpus), "-q"], env)
        timings: dict[str, list[float]] = {"search": [], "delete": [], "reconcile_dry_run": []}
        for i in range(args.runs):
            timings["search"].append(_run([hs, "search", "restart the scheduler", "-k", "3"], env))
            timings["delete"].append(_run([hs, "delete", f"doc{i:03d}.md"], env))
            timings["reconcile_dry_run"].append(_run([hs, "reconcile", "--dry-run"], env))
    medians = {k: round(statistics.median(v), 3) for k, v in timings.items()}
    out = {
        "runs": args.runs,
        "median_s": medians,
        "delete_over_search": round(medians["delete"] / medians["search"], 3),
        "reconcile_over_search": round(medians["reconcile_dry_run"] / medians["search"], 3),
        "all_s": {k: [round(x, 3) for x in v] for k, v in timings.items()},
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
