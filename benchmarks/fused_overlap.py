#!/usr/bin/env python3
"""What a fused search costs over the SAG2 path alone, and where the difference goes.

Indexes a BEIR-style folder in passage mode into a temporary store (passage vectors through the
embedding cache ``hybridsag eval`` keeps under ``<data_dir>/cache``), then, per question, runs
SAG2 alone (``run_path``, as ``hybridsag eval --paths sag2`` does: its judge embeds the query)
and the fused search (``search`` over ``search.paths``, as ``--paths fused`` does), interleaved
so that the machine's load falls on both alike. The query memo is given a size of one and the
fused run takes the question before the one SAG2 just ran, so neither run is served the other's
query vector. Prints p50/p95 of both, the p50 difference, the median of the per-question
differences, and the medians of the fused search's stages (the dense path's embedding and
Milvus time, the time SAG2 waited for the dense hits, the title path, fusion). Each search's
CPU time (the process's, all threads) is reported beside its wall time: on a machine loaded
by other work the wall time mostly measures the queue for a core, while the CPU time of the
fused search bounds what its threads cost together on an idle machine.

    HYBRIDSAG_DATA_DIR=/tmp/eval python benchmarks/fused_overlap.py \\
        --data ../shared/data/2wiki --limit 300
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hybridsag.vectors.embed_cache import CachedEmbedder, QueryMemo
from hybridsag.vectors.embedder import make_embedder
from hybridsag.evaluation.harness import PASSAGE_MAX_CHARS, load_dataset
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from hybridsag.records.filters import Filters

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--limit", type=int, default=300)
    args = ap.parse_args(argv)
    base = Settings()
    ds = load_dataset(args.data, limit=args.limit)
    tmp = tempfile.TemporaryDirectory()
    settings = base.model_copy(
        update={
            "data_dir": Path(tmp.name),
            "chunking": base.chunking.model_copy(
                update={"mode": "passage", "max_chars": PASSAGE_MAX_CHARS}
            ),
        }
    )
    inner = make_embedder(settings)
    if inner is None:
        raise SystemExit("the dense path is off (embedding.model = 'none'): nothing to fuse")
    memo = QueryMemo(CachedEmbedder(inner, base.data_dir / "cache"), size=1)
    load = [os.getloadavg()[0]]
    hs = HybridSearch(settings, embedder=memo)
    try:
        hs.ingest_jsonl(ds.corpus_path, mode="passage")
        names = hs.resolve_paths(None)
        hs.warm(names, query=ds.queries[0][1])
        ms: dict[str, list[float]] = {"sag2": [], "fused": []}
        cpu: dict[str, list[float]] = {"sag2": [], "fused": []}
        stages: dict[str, list[float]] = {}
        texts = [text for _, text in ds.queries]
        for i, text in enumerate(texts):
            t0, c0 = time.perf_counter(), time.process_time()
            hs.run_path("sag2", text, limit=10, filters=Filters())
            ms["sag2"].append((time.perf_counter() - t0) * 1000.0)
            cpu["sag2"].append((time.process_time() - c0) * 1000.0)
            if i == 0:
                continue
            t0, c0 = time.perf_counter(), time.process_time()
            resp = hs.search(texts[i - 1], top_k=10, paths=names, explain=False)
            ms["fused"].append((time.perf_counter() - t0) * 1000.0)
            cpu["fused"].append((time.process_time() - c0) * 1000.0)
            for path, values in resp.stages.items():
                for key, value in values.items():
                    stages.setdefault(f"{path}.{key}", []).append(float(value))
            for key, value in resp.timings.items():
                stages.setdefault(key, []).append(float(value))
    finally:
        hs.close()
        tmp.cleanup()
    load.append(os.getloadavg()[0])
    pairs = [f - s for f, s in zip(ms["fused"], ms["sag2"][:-1])]
    report = {
        "dataset": ds.name,
        "questions": len(ds.queries),
        "backend": settings.embedding.backend,
        "paths": list(names),
        "load_avg_1min": [round(x, 2) for x in load],
        **{
            name: {
                "p50_ms": round(statistics.median(v), 1),
                "p95_ms": round(statistics.quantiles(v, n=20)[-1], 1),
            }
            for name, v in ms.items()
        },
        "p50_difference_ms": round(
            statistics.median(ms["fused"]) - statistics.median(ms["sag2"]), 1
        ),
        "median_paired_difference_ms": round(statistics.median(pairs), 1),
        "cpu_p50_ms": {name: round(statistics.median(v), 1) for name, v in cpu.items()},
        "cpu_p50_difference_ms": round(
            statistics.median(cpu["fused"]) - statistics.median(cpu["sag2"]), 1
        ),
        "fused_stage_medians_ms": {k: round(statistics.median(v), 2) for k, v in stages.items()},
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
