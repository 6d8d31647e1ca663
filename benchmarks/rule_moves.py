#!/usr/bin/env python3
"""How far each fusion rule moves hits on a labelled set, before its bound (``RULE_BOUNDS``).

Indexes a BEIR-style folder the way ``hybridsag eval`` does (passage mode, dense vectors cached
under ``<data-dir>/cache``), runs the search paths for every question, fuses them with the
settings' weights and k, and records for every bounded rule the largest move up and down it
asked for, and how often its bound cut a move short. The bounds of the judge rules are set above
what this measures on musique100 (never on 2wiki, the headline set).

    python benchmarks/rule_moves.py --data ../shared/data/musique100 --data-dir /tmp/moves
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from hybridsag.config import load_settings
from hybridsag.evaluation.harness import open_eval_index, load_dataset
from hybridsag.fusion import FusedHit, rrf
from hybridsag.fusion.rules import RULE_BOUNDS, apply_rules
from hybridsag.records.filters import Filters


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="BEIR-style folder")
    ap.add_argument("--data-dir", help="where the index and the embedding cache go")
    ap.add_argument("--limit", type=int, help="first N questions only")
    ap.add_argument("--paths", default="", help="comma list (default: search.paths)")
    args = ap.parse_args(argv)
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="rule-moves-"))
    settings = load_settings({"data_dir": data_dir})
    paths = tuple(p for p in args.paths.split(",") if p) or settings.search.paths
    ds = load_dataset(Path(args.data), limit=args.limit)
    needs_dense = settings.embedding.model != "none" and "dense" in paths
    if not needs_dense:
        paths = tuple(p for p in paths if p != "dense")
    hs, _info = open_eval_index(
        settings, ds, data_dir / "moves", needs_dense=needs_dense, progress=None
    )
    ups: dict[str, list[int]] = defaultdict(list)
    downs: dict[str, list[int]] = defaultdict(list)
    cut: dict[str, int] = defaultdict(int)

    def trace(name: str, before: Sequence[FusedHit], desired: Sequence[FusedHit]) -> None:
        where = {h.chunk_id: i for i, h in enumerate(before)}
        up = max((where[h.chunk_id] - j for j, h in enumerate(desired)), default=0)
        down = max((j - where[h.chunk_id] for j, h in enumerate(desired)), default=0)
        ups[name].append(max(up, 0))
        downs[name].append(max(down, 0))
        bound = RULE_BOUNDS[name]
        too_far_up = bound.up is not None and up > bound.up
        if too_far_up or (bound.down is not None and down > bound.down):
            cut[name] += 1

    options = settings.fusion.options()
    try:
        for _qid, text in ds.queries:
            runs = hs.run_paths(paths, text, limit=settings.fusion.depth, filters=Filters()).runs
            views = hs.visible_chunks(runs, Filters())
            fused = rrf(runs, k=options["k"], depth=options["depth"], weights=options["weights"])
            apply_rules(
                [f for f in fused if f.chunk_id in views],
                query=text,
                chunks=views,
                pin_exact_titles=options["pin_exact_titles"],
                strict_identifiers=options["strict_identifiers"],
                judge_accept=options["judge_accept"],
                judge_order=options["judge_order"],
                trace=trace,
            )
    finally:
        hs.close()
    report = {
        "dataset": ds.name,
        "questions": len(ds.queries),
        "paths": list(paths),
        "rules": {
            name: {
                "bound": {"up": RULE_BOUNDS[name].up, "down": RULE_BOUNDS[name].down},
                "max_up": max(ups[name]),
                "max_down": max(downs[name]),
                "p99_up": sorted(ups[name])[int(0.99 * (len(ups[name]) - 1))],
                "p99_down": sorted(downs[name])[int(0.99 * (len(downs[name]) - 1))],
                "median_up": statistics.median(ups[name]),
                "queries_cut_short": cut[name],
            }
            for name in sorted(ups)
        },
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
