#!/usr/bin/env python3
"""Check "fused never more than a point below the best single path" on captured sets, for the
shipped settings and one or more trust models (no path is run again).

Each set is captured once (:func:`hybridsag.evaluation.tuning.capture_set`, the cache
``benchmarks/fusion_loso.py`` and ``scripts/fit_judge.py`` share). The sag2 path's order is the
captured pool re-scored with the shipped judge weights (``judge.weights_file = "default"``;
exact in passage mode, the pool itself grown by the capture's judge); every path alone and the
fused search (the default ``[fusion]`` settings, the default paths sag2, dense, title and bm25)
are scored with :func:`hybridsag.evaluation.offline_runs.fused`, the search's own fusion step
(a fused hit found when any copy of its text folded into it is gold, as eval scores
``also_in``), once per trust model given (``--model NAME=FILE``; ``shipped`` is the one that ships, always
first). nDCG@10 is graded where the set's qrels are.

    python benchmarks/fusion_check.py --cache /tmp/trust-cache \\
        --set SHARED/2wiki --set benchmarks/devsets/entity-2wiki --model new=my_trust.json

Prints one markdown table: per set, R@1/2/5/10 and nDCG@10 of every path and every model's
fused search, and the fused gap to the best single path on R@10 and nDCG@10.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from hybridsag.evaluation.measures import ranked_results
from hybridsag.evaluation.offline_runs import fused
from hybridsag.evaluation.tuning import (
    capture_set,
    judge_fit_of,
    mean_metrics,
    resource_ranking,
    sag2_hits,
)
from hybridsag.fusion import DEFAULT_TRUST_MODEL, TrustModel
from hybridsag.judges.features import load_weights
from hybridsag.paths.query_facts import load_trust_model
from hybridsag.settings import FusionSettings

__all__ = ["check_set", "fused_ranking", "main"]

PATHS = ("sag2", "dense", "title", "bm25")
_COLS = ("recall@1", "recall@2", "recall@5", "recall@10", "ndcg@10")


def fused_ranking(hits: list, views: dict, gold: frozenset[str]) -> list[str]:
    """The resource ids to score for fused hits, each standing for the neighbours merged into
    it and the copies of its text it folded in (``FusedHit.merged``, ``.duplicates``), as eval
    scores a search's ``merged`` and ``also_in``
    (:func:`hybridsag.evaluation.measures.ranked_results`)."""
    return ranked_results(
        [
            [views[c].resource_id for c in (h.chunk_id, *h.merged, *h.duplicates) if c in views]
            for h in hits
        ],
        gold,
    )


def check_set(
    folder: Path, cache: Path, models: dict[str, TrustModel], limit: int | None = None
) -> tuple[str, dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """``(set name, each path alone's metrics, each model's fused metrics)`` of one set."""
    captured = capture_set(folder, cache=cache, limit=limit)
    judge = judge_fit_of(load_weights("default"))
    fusion = FusionSettings()
    singles: dict[str, list] = {p: [] for p in PATHS}
    fused_runs: dict[str, list] = {name: [] for name in models}
    for q in captured.queries:
        runs = {p: list(h) for p, h in q.question.fusion_in.runs.items() if p in PATHS}
        runs["sag2"] = sag2_hits(q, judge, views=captured.views)
        for p in PATHS:
            singles[p].append((resource_ranking(runs.get(p, []), captured.views)[:10], q.gold))
        fusion_in = replace(q.question.fusion_in, runs=runs)
        for name, model in models.items():
            hits = fused(fusion_in, fusion, model=model)
            fused_runs[name].append((fused_ranking(hits, captured.views, q.gold), q.gold))
    return (
        captured.name,
        {p: mean_metrics(v) for p, v in singles.items()},
        {n: mean_metrics(v) for n, v in fused_runs.items()},
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", type=str, default=[],
                    help="a BEIR folder, optionally FOLDER@LIMIT (its first LIMIT questions)")
    ap.add_argument("--model", action="append", default=[], help="NAME=FILE (a trust model JSON)")
    ap.add_argument("--cache", type=Path, default=Path(".hybridsag/cache"))
    args = ap.parse_args(argv)
    models = {"shipped": DEFAULT_TRUST_MODEL}
    for spec in args.model:
        name, _, file = spec.partition("=")
        models[name] = load_trust_model(Path(file))
    out = sys.stdout
    out.write("| set | run | R@1 | R@2 | R@5 | R@10 | nDCG@10 | gap R@10 | gap nDCG |\n")
    out.write("|---|---|---|---|---|---|---|---|---|\n")
    for spec in args.set:
        folder, _, lim = spec.partition("@")
        name, singles, fused_m = check_set(Path(folder), args.cache, models,
                                           int(lim) if lim else None)
        best10 = max(m["recall@10"] for m in singles.values())
        bestnd = max(m["ndcg@10"] for m in singles.values())
        for p, m in singles.items():
            cells = " | ".join(f"{100 * m[c]:.2f}" for c in _COLS)
            out.write(f"| {name} | {p} alone | {cells} | | |\n")
        for n, m in fused_m.items():
            cells = " | ".join(f"{100 * m[c]:.2f}" for c in _COLS)
            g10, gnd = 100 * (m["recall@10"] - best10), 100 * (m["ndcg@10"] - bestnd)
            out.write(f"| {name} | fused ({n} trust) | {cells} | {g10:+.2f} | {gnd:+.2f} |\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
