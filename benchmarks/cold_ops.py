#!/usr/bin/env python3
"""Cold CLI operations: how long a fresh ``hybridsag`` process takes for a search (bm25 alone,
title alone, the default fused paths), ``list``, ``show``, a delete and a reconcile plan on an
index with vectors (each command a new process, as a user runs them).

A bm25 or title search, list, show, a delete or a plan needs no model and (but the delete and the
plan) no Milvus: it should cost a small fraction of a fused search's cold start, which loads the
embedding model (torch for the sentence-transformers backend, onnxruntime for ``--backend onnx``)
and opens Milvus Lite. Reports, for each command, the median wall seconds and the median CPU
seconds (user + system of the child; on a machine loaded by other work the CPU time moves far
less than the wall time) of ``--runs`` runs, and the 1-minute load average before and after.

Several ``--hybridsag`` executables (say an old build's and this one's) are run interleaved,
command by command, so that they see the same load; each gets its own index.

    python benchmarks/cold_ops.py --hybridsag .venv/bin/hybridsag --runs 5
    python benchmarks/cold_ops.py --runs 5 --backend onnx --onnx-cache /tmp/onnx-cache
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Run ``cmd``: its wall seconds and its CPU seconds (the reaped children's rusage grows by
    exactly this child's: the commands run one at a time)."""
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return seconds, _children_cpu() - cpu0


def _commands(hs: str) -> dict[str, Callable[[int], list[str]]]:
    query = ["restart the scheduler", "-k", "3", "--brief"]
    return {
        "search_bm25": lambda i: [hs, "search", *query, "--paths", "bm25"],
        "search_title": lambda i: [hs, "search", f"Document {i}", "--paths", "title"],
        "search": lambda i: [hs, "search", *query],
        "list": lambda i: [hs, "list"],
        "show": lambda i: [hs, "show", f"doc{i + 20:03d}.md"],
        "delete": lambda i: [hs, "delete", f"doc{i:03d}.md"],
        "reconcile_dry_run": lambda i: [hs, "reconcile", "--dry-run"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--hybridsag",
        action="append",
        help="a hybridsag executable (repeat to compare builds; default: the one beside python)",
    )
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--docs", type=int, default=40, help="small documents in the index")
    ap.add_argument("--backend", default=None, help="embedding.backend (default: the settings')")
    ap.add_argument("--onnx-cache", default=None, help="embedding.onnx_cache_dir (onnx backend)")
    args = ap.parse_args(argv)
    executables = args.hybridsag or [str(Path(sys.executable).parent / "hybridsag")]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        corpus.mkdir()
        for i in range(args.docs):
            (corpus / f"doc{i:03d}.md").write_text(
                f"# Document {i}\n\nThe orrery service number {i} restarts the scheduler "
                f"when error E-{1000 + i} appears. Install it on Linux with one command.\n",
                "utf-8",
            )
        base = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDSAG_")}
        if args.backend:
            base["HYBRIDSAG_EMBEDDING__BACKEND"] = args.backend
        if args.onnx_cache:
            base["HYBRIDSAG_EMBEDDING__ONNX_CACHE_DIR"] = args.onnx_cache
        envs = []
        for n, hs in enumerate(executables):
            env = dict(base, HYBRIDSAG_DATA_DIR=str(Path(tmp) / f"data{n}"))
            _run([hs, "index", str(corpus), "-q"], env)
            envs.append(env)
        wall: list[dict[str, list[float]]] = [{} for _ in executables]
        cpu: list[dict[str, list[float]]] = [{} for _ in executables]
        for i in range(args.runs):
            for name in _commands(""):
                for n, hs in enumerate(executables):
                    w, c = _run(_commands(hs)[name](i), envs[n])
                    wall[n].setdefault(name, []).append(w)
                    cpu[n].setdefault(name, []).append(c)
    out: dict[str, object] = {
        "runs": args.runs,
        "backend": args.backend or "settings default",
        "load_avg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    for n, hs in enumerate(executables):
        medians = {k: round(statistics.median(v), 3) for k, v in wall[n].items()}
        out[hs] = {
            "median_wall_s": medians,
            "median_cpu_s": {k: round(statistics.median(v), 3) for k, v in cpu[n].items()},
            "delete_over_search": round(medians["delete"] / medians["search"], 3),
            "all_wall_s": {k: [round(x, 3) for x in v] for k, v in wall[n].items()},
        }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
