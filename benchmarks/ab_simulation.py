"""Click simulation of online A/B experiments over the real service (not a test).

The pairs of issue 16 on musique100: sag2 against dense, and fused (sag2 + dense + title)
against bm25. First ``eval --compare`` (:func:`hybridsag.ab.offline.compare_arms`) indexes the set
with embeddings (cached under ``<work>/data/cache``, so a rerun embeds nothing) and says which arm
of each pair is better on nDCG@10. Then the same index is served by a real uvicorn on
127.0.0.1 and the simulated user of ``tests/absim.py`` (gold passages as the click model,
position-biased) runs each pair under team-draft interleaving and under split traffic, once per
seed, until the report's p-value falls below 0.05 (checked every 10 queries). Per pair and
mode: the queries each seed needed (null: not within the cap), their median, and whether
every seed's report picked the offline winner.

    python benchmarks/ab_simulation.py --work /tmp/ab-sim [--seeds 5] [--data DIR]

Writes ``<work>/ab_simulation.json`` and prints it. Deterministic for a given index (seeded
questions, users, coin flips and clicks); the timings are not reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hybridsag.ab.offline import compare_arms  # noqa: E402
from hybridsag.evaluation.harness import load_dataset  # noqa: E402
from hybridsag.settings import ExperimentSettings, Settings  # noqa: E402
from tests.absim import simulate  # noqa: E402
from tests.servicesupport import ADMIN, running_service  # noqa: E402

__all__ = ["PAIRS", "main"]

#: Each pair: the two arms (as experiment arms) and the offline --compare labels of both.
PAIRS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "sag2-dense": ({"name": "sag2", "paths": ["sag2"]}, {"name": "dense", "paths": ["dense"]}),
    "fused-bm25": ({"name": "fused"}, {"name": "bm25", "paths": ["bm25"]}),
}


def _offline_winner(offline: dict[str, Any], a: str, b: str) -> str:
    pairs = offline["pairs"]
    if f"{a} vs {b}" in pairs:
        return a if pairs[f"{a} vs {b}"]["ndcg@10"]["mean_difference"] > 0 else b
    return b if pairs[f"{b} vs {a}"]["ndcg@10"]["mean_difference"] > 0 else a


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data/musique100"))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--max-interleaved", type=int, default=400)
    ap.add_argument("--max-split", type=int, default=1000)
    args = ap.parse_args(argv)
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    base = Settings(data_dir=work / "data")
    offline = compare_arms(base, args.data, "sag2,dense,bm25,fused", out=work / "offline",
                           n_resamples=1000)
    seeds = list(range(1, args.seeds + 1))
    experiments = [
        ExperimentSettings.model_validate(
            {"name": f"{pair}-{mode}-s{seed}", "mode": mode, "arms": list(arms)}
        )
        for pair, arms in PAIRS.items()
        for mode in ("interleave", "split")
        for seed in seeds
    ]
    served = Settings(
        data_dir=work / "offline" / "index",
        server={"token": ADMIN, "reconciler": False},
        ab={"experiments": [e.model_dump() for e in experiments], "min_queries": 20},
    )
    served.events_path.unlink(missing_ok=True)  # a rerun starts from no events
    ds = load_dataset(args.data)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with running_service(served, reconciler=False) as url:
        for exp in experiments:
            pair, mode, seed = exp.name.rsplit("-", 2)
            cap = args.max_interleaved if mode == "interleave" else args.max_split
            sim = simulate(url, ADMIN, exp, ds.queries, ds.qrels, served.events_path,
                           max_queries=cap, seed=int(seed[1:]))
            runs.setdefault(pair, {}).setdefault(mode, []).append(
                {"seed": int(seed[1:]), "queries_to_p05": sim.queries_to_confidence,
                 "queries_run": sim.queries_run, "winner": sim.report["winner"],
                 "summary": sim.report["summary"]}
            )
            print(f"{exp.name}: {sim.queries_to_confidence} ({sim.report['summary']})",
                  file=sys.stderr, flush=True)
    result: dict[str, Any] = {
        "dataset": ds.name,
        "offline": {
            label: {m: offline["arms"][label][m] for m in ("recall@5", "recall@10", "ndcg@10")}
            for label in offline["arms_order"]
        },
        "caps": {"interleave": args.max_interleaved, "split": args.max_split},
        "pairs": {},
    }
    for pair, modes in runs.items():
        a, b = (arm["name"] for arm in PAIRS[pair])
        better = _offline_winner(offline, a, b)
        entry: dict[str, Any] = {"offline_winner": better}
        for mode, rows in modes.items():
            cap = args.max_interleaved if mode == "interleave" else args.max_split
            counts = [r["queries_to_p05"] for r in rows]
            entry[mode] = {
                "queries_to_p05": counts,
                # a seed that never got there counts as one past the cap
                "median": statistics.median(c if c is not None else cap + 1 for c in counts),
                "reached": sum(c is not None for c in counts),
                "picked_offline_winner": sum(r["winner"] == better for r in rows),
                "runs": rows,
            }
        result["pairs"][pair] = entry
    (work / "ab_simulation.json").write_text(json.dumps(result, indent=2) + "\n", "utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "pairs"} | {
        "pairs": {p: {k: ({kk: vv for kk, vv in v.items() if kk != "runs"}
                          if isinstance(v, dict) else v) for k, v in e.items()}
                  for p, e in result["pairs"].items()}}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
