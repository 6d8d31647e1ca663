#!/usr/bin/env python3
"""Latency of the fusion trust step per search (``timings["trust_ms"]``: the query facts from the
index and the embedder; :func:`hybridsag.fusion.assess`, pure arithmetic, is timed within
``fusion_ms``), on an index ``hybridsag eval`` built (``<out>/index``), over a set's questions.

    python benchmarks/trust_latency.py --index /tmp/x/eval/pycode/index \\
        --data SHARED/pycode --limit 200

Prints the median and p95 in ms, and the same for the fusion step and the whole search.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from hybridsag.evaluation.harness import load_dataset
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(0.95 * len(ordered)) - 1)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", required=True, type=Path, help="a data dir eval built")
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--limit", type=int, default=200)
    args = ap.parse_args(argv)
    ds = load_dataset(args.data, limit=args.limit)
    settings = Settings(data_dir=args.index, chunking={"mode": "passage"})
    timings: dict[str, list[float]] = {"trust_ms": [], "fusion_ms": [], "total_ms": []}
    with HybridSearch(settings) as hs:
        hs.search(ds.queries[0][1])  # warm: model, jieba, caches
        for _qid, text in ds.queries:
            resp = hs.search(text, explain=True)
            for key, values in timings.items():
                values.append(float(resp.timings[key]))
    out = {
        key: {"median": round(statistics.median(v), 3), "p95": round(_p95(v), 3), "n": len(v)}
        for key, v in timings.items()
    }
    sys.stdout.write(json.dumps({"dataset": ds.name, **out}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
