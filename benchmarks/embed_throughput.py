#!/usr/bin/env python3
"""Dense embedding throughput of the configured embedder on passages of a BEIR corpus.

    python benchmarks/embed_throughput.py ../shared/data/2wiki/corpus.jsonl --n 512 --repeat 3

Prints JSON: passages per second (median of the repeats), mean characters per passage, and one
query's encoding time (median of 50).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from hybridsag.embedder import make_embedder
from hybridsag.settings import Settings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    texts = []
    with args.corpus.open(encoding="utf-8") as fh:
        for line in fh:
            obj = json.loads(line)
            texts.append(f"{obj.get('title', '')}\n{obj['text']}")
            if len(texts) >= args.n:
                break
    emb = make_embedder(Settings())
    assert emb is not None
    emb.encode(texts[:8])  # load the model outside the timing
    rates = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        emb.encode(texts, kind="passage")
        rates.append(len(texts) / (time.perf_counter() - t0))
    query_ms = []
    for i in range(50):
        t0 = time.perf_counter()
        emb.encode([texts[i % len(texts)][:80]], kind="query")
        query_ms.append((time.perf_counter() - t0) * 1000)
    print(json.dumps({
        "model": emb.name,
        "passages": len(texts),
        "mean_chars": round(sum(map(len, texts)) / len(texts), 1),
        "passages_per_s_median": round(statistics.median(rates), 1),
        "passages_per_s_runs": [round(r, 1) for r in rates],
        "query_ms_median": round(statistics.median(query_ms), 2),
    }, indent=2))


if __name__ == "__main__":
    main()
