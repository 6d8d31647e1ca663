#!/usr/bin/env python3
"""What the evidence-set selection and the targeted second hop cost the SAG2 path.

Indexes a BEIR-style folder in passage mode into a temporary store (passage vectors through
the embedding cache ``hybridsag eval`` keeps under ``<data_dir>/cache``), then runs the SAG2 path alone on each question twice,
interleaved so that the machine's load falls on both alike: with the defaults, and with the
judge's order alone (``set_k = 0``, ``gap_lookups = 0``). Prints p50/p95 of both, their ratio,
the medians of the stages the set adds (``rerank_ms`` holds the selection, ``second_hop_ms`` the
look-ups) and how often the second hop ran.

    HYBRIDSAG_DATA_DIR=/tmp/eval python benchmarks/sag2_set_latency.py \\
        --data ../shared/data/2wiki --limit 300
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hybridsag.vectors.embed_cache import CachedEmbedder
from hybridsag.vectors.embedder import make_embedder
from hybridsag.evaluation.harness import load_dataset
from hybridsag.paths.sag2 import Sag2Retriever
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from hybridsag.records.filters import Filters


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--limit", type=int, default=300)
    args = ap.parse_args(argv)
    cache = Settings().data_dir / "cache"
    ds = load_dataset(args.data, limit=args.limit)
    tmp = tempfile.TemporaryDirectory()
    settings = Settings(data_dir=Path(tmp.name), chunking={"mode": "passage"})
    inner = make_embedder(settings)
    hs = HybridSearch(settings, embedder=CachedEmbedder(inner, cache) if inner else None)
    try:
        hs.ingest_jsonl(ds.corpus_path, mode="passage")
        parts = hs.components
        judge = parts.judge()
        runs = {
            "set": Sag2Retriever(parts.store, parts.lexical, judge, settings.sag2, settings.judge),
            "judge_order": Sag2Retriever(
                parts.store,
                parts.lexical,
                judge,
                settings.sag2.model_copy(update={"set_k": 0, "gap_lookups": 0}),
                settings.judge,
            ),
        }
        ms: dict[str, list[float]] = {name: [] for name in runs}
        stages: dict[str, list[float]] = {"rerank_ms": [], "second_hop_ms": [], "judge_ms": []}
        hops = 0
        for _qid, text in ds.queries:
            for name, retriever in runs.items():
                t0 = time.perf_counter()
                result = retriever.retrieve(text, limit=10, filters=Filters())
                ms[name].append((time.perf_counter() - t0) * 1000.0)
                if name == "set":
                    for key in stages:
                        stages[key].append(float(result.timings.get(key, 0.0)))
                    hops += bool(result.usage.get("second_hop"))
    finally:
        hs.close()
        tmp.cleanup()
    report = {
        "dataset": ds.name,
        "questions": len(ds.queries),
        **{
            name: {"p50_ms": round(statistics.median(v), 1), "p95_ms": round(_pct(v, 0.95), 1)}
            for name, v in ms.items()
        },
        "p50_ratio": round(statistics.median(ms["set"]) / statistics.median(ms["judge_order"]), 3),
        "set_stage_medians_ms": {k: round(statistics.median(v), 2) for k, v in stages.items()},
        "second_hop_share": round(hops / max(len(ds.queries), 1), 3),
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
