#!/usr/bin/env python3
"""Dense embedding throughput of each embedder backend on the same passages of a BEIR corpus.

    python benchmarks/embed_throughput.py /work/shared/data/2wiki/corpus.jsonl --n 512 --repeat 3

Every backend named by ``--backends`` is built from ``Settings()`` (so ``HYBRIDSAG_*`` variables
apply, e.g. ``HYBRIDSAG_EMBEDDING__ONNX_CACHE_DIR``) and loaded (the onnx backend exports on first
use) before any timing. The timed runs alternate between the backends (torch, onnx, torch,
onnx, ...), so a machine whose load changes during the run slows both alike. Prints JSON: per
backend, passages per second (median of the repeats and each run) and one query's encoding time
(median of 50); the speed ratio of each backend to the first; and the cosine between the first
backend's vector and each other backend's vector of the same passage (mean, 1st percentile, min).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from hybridsag.vectors.embedder import make_embedder
from hybridsag.settings import Settings


def read_passages(corpus: Path, n: int) -> list[str]:
    texts = []
    with corpus.open(encoding="utf-8") as fh:
        for line in fh:
            obj = json.loads(line)
            texts.append(f"{obj.get('title', '')}\n{obj['text']}")
            if len(texts) >= n:
                break
    return texts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backends", default="sentence-transformers,onnx",
                    help="comma-separated embedding.backend names; the first is the reference")
    args = ap.parse_args()
    texts = read_passages(args.corpus, args.n)
    settings = Settings()
    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    embedders = {}
    for name in names:
        emb = make_embedder(settings, backend=name)
        assert emb is not None, "embedding.model is 'none'"
        emb.encode(texts[:8])  # load (and for onnx: export) outside the timing
        embedders[name] = emb
    rates: dict[str, list[float]] = {name: [] for name in names}
    vectors: dict[str, np.ndarray] = {}
    for _ in range(args.repeat):
        for name, emb in embedders.items():
            t0 = time.perf_counter()
            vectors[name] = emb.encode(texts, kind="passage")
            rates[name].append(len(texts) / (time.perf_counter() - t0))
    report: dict[str, object] = {
        "passages": len(texts),
        "mean_chars": round(sum(map(len, texts)) / len(texts), 1),
        "backends": {},
    }
    ref = names[0]
    for name, emb in embedders.items():
        query_ms = []
        for i in range(50):
            t0 = time.perf_counter()
            emb.encode([texts[i % len(texts)][:80]], kind="query")
            query_ms.append((time.perf_counter() - t0) * 1000)
        entry: dict[str, object] = {
            "fingerprint": emb.fingerprint,
            "passages_per_s_median": round(statistics.median(rates[name]), 1),
            "passages_per_s_runs": [round(r, 1) for r in rates[name]],
            "query_ms_median": round(statistics.median(query_ms), 2),
            "speed_ratio_to_" + ref: round(
                statistics.median(rates[name]) / statistics.median(rates[ref]), 2
            ),
        }
        if name != ref:
            cosines = (vectors[name] * vectors[ref]).sum(axis=1)
            entry["cosine_to_" + ref] = {
                "mean": round(float(cosines.mean()), 5),
                "p1": round(float(np.percentile(cosines, 1)), 5),
                "min": round(float(cosines.min()), 5),
            }
        report["backends"][name] = entry  # type: ignore[index]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
