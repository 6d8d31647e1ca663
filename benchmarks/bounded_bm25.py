#!/usr/bin/env python3
"""The bounded BM25 top k (``lexical.prune``) against FTS5's full ranking, on an index already
built (not a test): the same questions through the bm25 and SAG2 paths with the bound on and
off, interleaved question by question, so both modes see the same machine load.

Reports per path and mode the p50/p95 wall milliseconds, the paired median ratio (off / on),
and how many answers differ (ids in order; there should be none but ties cut at the k-th
score). An index made by ``benchmarks/scale.py`` is under ``<work>/n<size>/eval/index``:

    .venv/bin/python benchmarks/bounded_bm25.py --index /tmp/perf-scale/n1000000/eval/index \\
        --queries /tmp/perf-scale/n1000000/queries.jsonl --limit 200

Prints one JSON object (also written to ``--out`` when given).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]


def _settings(index: Path, prune: bool, min_postings: int, dense: bool) -> Any:
    from hybridsag.evaluation.harness import PASSAGE_MAX_CHARS
    from hybridsag.settings import Settings

    return Settings(
        data_dir=index,
        embedding={} if dense else {"model": "none"},
        lexical={"prune": prune, "prune_min_postings": min_postings},
        chunking={"mode": "passage", "max_chars": PASSAGE_MAX_CHARS},
    )


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(int(len(ordered) * q), len(ordered) - 1)], 2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--index", required=True, help="the data dir of a built index")
    ap.add_argument("--queries", required=True, help="a queries.jsonl (BEIR: _id, text)")
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--paths", default="bm25,sag2")
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--min-postings", type=int, default=20_000)
    ap.add_argument("--dense", action="store_true", help="the index has vectors (default: none)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    from hybridsag.search import HybridSearch

    questions = [
        json.loads(line)["text"]
        for line in Path(args.queries).read_text(encoding="utf-8").splitlines()
        if line.strip()
    ][: args.limit]
    paths = [p for p in args.paths.split(",") if p]
    index = Path(args.index)
    times: dict[str, dict[str, list[float]]] = {p: {"on": [], "off": []} for p in paths}
    differ = dict.fromkeys(paths, 0)
    with HybridSearch(_settings(index, True, args.min_postings, args.dense)) as on, HybridSearch(
        _settings(index, False, args.min_postings, args.dense)
    ) as off:
        for search in (on, off):  # first-use costs (jieba, the judge) out of the timings
            search.search(questions[0], top_k=args.top_k, paths=paths, explain=False)
        for i, text in enumerate(questions):
            for path in paths:
                answers = {}
                # alternate which mode goes first, so neither always meets a warmer cache
                for mode, search in ((("on", on), ("off", off)) if i % 2 else
                                     (("off", off), ("on", on))):
                    t0 = time.perf_counter()
                    response = search.search(text, top_k=args.top_k, paths=[path], explain=False)
                    times[path][mode].append((time.perf_counter() - t0) * 1000)
                    answers[mode] = [r.chunk_id for r in response.results]
                differ[path] += answers["on"] != answers["off"]
    report: dict[str, Any] = {
        "index": str(index),
        "questions": len(questions),
        "min_postings": args.min_postings,
        "paths": {},
    }
    for path in paths:
        on_ms, off_ms = times[path]["on"], times[path]["off"]
        report["paths"][path] = {
            "on_p50_ms": _pct(on_ms, 0.5),
            "on_p95_ms": _pct(on_ms, 0.95),
            "off_p50_ms": _pct(off_ms, 0.5),
            "off_p95_ms": _pct(off_ms, 0.95),
            "paired_median_ratio_off_on": round(
                statistics.median(b / a for a, b in zip(on_ms, off_ms, strict=True) if a > 0), 2
            ),
            "answers_that_differ": differ[path],
        }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
