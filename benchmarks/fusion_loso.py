#!/usr/bin/env python3
"""Choose the fusion defaults by leave-one-set-out, on captured runs (no path is run twice).

Every labelled dev set is captured once (``hybridsag.evaluation.tuning.capture_set``: each path's hits and
the SAG2 pool of every question, as a default search runs them). For each held-out set the judge
(``hybridsag.evaluation.tuning.fit_judge``) and the trust model (:func:`fit_trust`) are fitted on the other
sets only; the held-out set's sag2 order is re-scored with that judge, and each fusion choice (a
``[fusion]`` setting and a trust model) is scored on it with
:func:`hybridsag.evaluation.offline_runs.fused`, the search's own fusion step. 2wiki is only ever a check
set: scored with the models fitted on all dev sets, never fitted on.

The judge is fitted on the sets it ships fitted on (``scripts/fit_judge.py``'s ``DEFAULT_SETS``);
the trust model also on the dev sets of kinds those lack (:data:`TRUST_SETS`: entity keyword
lists, questions over code, a distractor haystack; benchmarks/devsets/README.md says how each is
built), each held out in turn like the others.

    python benchmarks/fusion_loso.py --report benchmarks/results/fusion_loso.md \\
        [--check SHARED/2wiki] [--write-model my_trust.json]

The table gives, per held-out set, R@1/2/5/10 and nDCG@10 of each path alone (sag2 with the
held-out judge) and of each fusion choice, and the gap of each choice to the best single path
on R@10 and nDCG@10; the summary line per choice is its worst gap over the held-out sets.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from hybridsag.fusion.trust import (
    DEFAULT_TRUST_MODEL,
    SIGNAL_NAMES,
    TrustModel,
    assess,
    trust_signals,
)
from hybridsag.judges.features import load_weights
from hybridsag.evaluation.measures import ranked_results
from hybridsag.evaluation.offline_runs import fused
from hybridsag.settings import FusionSettings
from hybridsag.evaluation.tuning import (
    CapturedQuery,
    CapturedSet,
    JudgeFit,
    capture_set,
    fit_judge,
    fit_logistic,
    judge_fit_of,
    mean_metrics,
    resource_ranking,
    sag2_hits,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from fit_judge import DEFAULT_SETS, SET_WEIGHTS, find_shared, resolve_set  # noqa: E402

#: Dev sets the trust model is fitted on beside the judge's (never the judge itself).
TRUST_SETS: tuple[tuple[str, int | None], ...] = (
    ("repo:benchmarks/devsets/entity-2wiki", None),
    ("repo:benchmarks/devsets/codeq", None),
    ("repo:benchmarks/devsets/musique-haystack", None),
)
KINDS = {"sag2": "judged", "dense": "embedding", "bm25": "lexical", "title": "title"}
OLD_WEIGHTS = {"bm25": 1.0, "sag2": 1.0, "dense": 0.5, "title": 0.25}
#: The trust model reads these signals (``reads`` is its gate, not a coefficient).
MODEL_SIGNALS = tuple(n for n in SIGNAL_NAMES if n != "reads")

Runs = dict[str, list]
#: The paths a default search runs.
SEARCH_PATHS = ("sag2", "dense", "title")


def only(runs: Runs, paths: Sequence[str]) -> Runs:
    return {p: h for p, h in runs.items() if p in paths}


def sim_runs(q: CapturedQuery, judge: JudgeFit, views: Mapping) -> Runs:
    runs: Runs = {"sag2": sag2_hits(q, judge, views=views)}
    captured = q.question.fusion_in.runs
    for name in ("dense", "title", "bm25"):
        if name in captured:
            runs[name] = list(captured[name])
    return runs


def per_query_ndcg(ranked: Sequence[str], gold: frozenset[str]) -> float:
    from hybridsag.evaluation.measures import metrics_for

    return metrics_for(list(ranked), gold)["ndcg@10"]


def _fit_pairwise(
    sets: Sequence[tuple[CapturedSet, JudgeFit]], other: str, *, l2: float, gate: bool,
    names: Sequence[str] = MODEL_SIGNALS,
) -> np.ndarray:
    """Logistic coefficients (bias last) of "path ``other``'s order beats the judged path's"
    per query, each query weighed by how much the two differ in nDCG@10 (and, with ``gate``,
    by the share of it the embedder reads), each set weighing the same."""
    xs, ys, ws = [], [], []
    for captured, judge in sets:
        rows, labels, weights = [], [], []
        for q in captured.queries:
            runs = sim_runs(q, judge, captured.views)
            if not runs.get(other):
                continue
            no = per_query_ndcg(resource_ranking(runs[other], captured.views), q.gold)
            ns = per_query_ndcg(resource_ranking(runs["sag2"], captured.views), q.gold)
            if abs(no - ns) < 1e-9:
                continue
            sig = trust_signals(only(runs, (*SEARCH_PATHS, "bm25")), KINDS, q.facts)
            rows.append([sig[n] for n in names])
            labels.append(1.0 if no > ns else 0.0)
            weights.append(abs(no - ns) * (sig["reads"] if gate else 1.0))
        if not rows or not sum(weights):
            continue
        w = np.asarray(weights)
        xs.append(np.asarray(rows))
        ys.append(np.asarray(labels))
        ws.append(w / w.sum())
    x, y = np.vstack(xs), np.concatenate(ys)
    sw = np.concatenate(ws) * len(y) / len(ws)
    return fit_logistic(x, y, l2=l2, sample_weight=sw)


def fit_trust(sets: Sequence[tuple[CapturedSet, JudgeFit]], *, l2: float = 1.0) -> TrustModel:
    """The trust model: "dense beats the judge" (queries weighed by the share the embedder
    reads, as the model's share is gated by it) and "plain BM25 beats the judge"."""
    dense = _fit_pairwise(sets, "dense", l2=l2, gate=True)
    lexical = _fit_pairwise(sets, "bm25", l2=l2, gate=False, names=SIGNAL_NAMES)
    return TrustModel(
        coefficients={n: round(float(c), 4) for n, c in zip(MODEL_SIGNALS, dense[:-1])},
        bias=round(float(dense[-1]), 4),
        lexical_coefficients={n: round(float(c), 4) for n, c in zip(SIGNAL_NAMES, lexical[:-1])},
        lexical_bias=round(float(lexical[-1]), 4),
        source="fitted",
        # the unsure-judge gate is not fitted here: the shipped one carries over
        judge_unsure_below=DEFAULT_TRUST_MODEL.judge_unsure_below,
        unsure_dense_share=DEFAULT_TRUST_MODEL.unsure_dense_share,
    )


#: A fusion choice: the ``[fusion]`` settings, the trust model and the paths fused.
Choice = tuple[FusionSettings, TrustModel, Sequence[str]]


def choices(model: TrustModel) -> dict[str, Choice]:
    """The fusion choices compared: name -> (settings, trust model, paths)."""

    def plain(method: str, norm: str = "minmax", *, judge_order: bool = False) -> Choice:
        fusion = FusionSettings(k=10.0, depth=100, weights=OLD_WEIGHTS, judge_accept=0.5,
                                judge_order=judge_order, method=method, normalisation=norm,
                                trust=False)
        return fusion, model, SEARCH_PATHS

    def trusted(method: str, norm: str = "minmax", hold: float = 0.5, k: float = 10.0,
                paths: Sequence[str] = SEARCH_PATHS) -> Choice:
        m = replace(model, judge_hold_below=hold)
        fusion = FusionSettings(k=k, depth=100, judge_accept=0.5, judge_order=True,
                                method=method, normalisation=norm, trust=True,
                                weights={"sag2": 1.0, "dense": 1.0, "title": 0.25, "bm25": 1.0})
        return fusion, m, paths

    with_bm25 = (*SEARCH_PATHS, "bm25")
    return {
        "old defaults (rrf, judge order)": plain("rrf", judge_order=True),
        "rrf, no judge order": plain("rrf"),
        "convex minmax, no judge order": plain("convex"),
        "trust + rrf k10": trusted("rrf"),
        "trust + convex minmax": trusted("convex"),
        "trust + convex zscore": trusted("convex", "zscore"),
        "trust + convex minmax, hold<0.3": trusted("convex", hold=0.3),
        "trust3 (+bm25) + rrf k10": trusted("rrf", paths=with_bm25),
        "trust3 (+bm25) + rrf k60": trusted("rrf", k=60.0, paths=with_bm25),
        "trust3 (+bm25) + convex minmax": trusted("convex", paths=with_bm25),
        "trust3 (+bm25) + convex zscore": trusted("convex", "zscore", paths=with_bm25),
        "trust3 (+bm25) + convex minmax, hold<0.3": trusted("convex", hold=0.3, paths=with_bm25),
        "trust3 (+bm25) + convex minmax, hold<0.7": trusted("convex", hold=0.7, paths=with_bm25),
    }


def score_set(
    captured: CapturedSet, judge: JudgeFit, model: TrustModel, old_judge: JudgeFit
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]], float]:
    """(single paths' metrics, each choice's metrics, trust step ms per query)."""
    views = captured.views
    singles: dict[str, list] = {"sag2": [], "dense": [], "title": [], "bm25": []}
    fused_runs: dict[str, list] = {}
    ch = choices(model)
    trust_ms = 0.0
    for q in captured.queries:
        runs = sim_runs(q, judge, views)
        for name in singles:
            hits = runs.get(name)
            singles[name].append((resource_ranking(hits or [], views)[:10], q.gold))
        t0 = time.perf_counter()
        assess(runs, KINDS, q.facts, weights={"sag2": 1.0, "dense": 1.0, "bm25": 1.0},
               model=model)
        trust_ms += (time.perf_counter() - t0) * 1000
        for name, (fusion, trust_model, paths) in ch.items():
            r = sim_runs(q, old_judge, views) if name.startswith("old") else runs
            fusion_in = replace(q.question.fusion_in, runs=only(r, paths))
            hits = fused(fusion_in, fusion, model=trust_model)
            # a fused hit stands for the copies of its text it folded in, as eval scores it
            ranked = ranked_results(
                [[views[c].resource_id for c in (h.chunk_id, *h.duplicates) if c in views]
                 for h in hits], q.gold)
            fused_runs.setdefault(name, []).append((ranked, q.gold))
    return (
        {k: mean_metrics(v) for k, v in singles.items()},
        {k: mean_metrics(v) for k, v in fused_runs.items()},
        trust_ms / max(len(captured.queries), 1),
    )


def model_json(model: TrustModel) -> dict:
    return {
        "coefficients": dict(model.coefficients),
        "bias": model.bias,
        "lexical_coefficients": dict(model.lexical_coefficients),
        "lexical_bias": model.lexical_bias,
        "judge_hold_below": model.judge_hold_below,
        "judge_unsure_below": model.judge_unsure_below,
        "unsure_dense_share": model.unsure_dense_share,
    }


def _fmt(m: Mapping[str, float]) -> str:
    return " | ".join(
        f"{100 * m[k]:.1f}" for k in ("recall@1", "recall@2", "recall@5", "recall@10", "ndcg@10")
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path)
    ap.add_argument("--check", action="append", type=Path, default=[])
    ap.add_argument("--cache", type=Path, default=Path(".hybridsag/cache"))
    ap.add_argument("--report", type=Path)
    ap.add_argument("--write-model", type=Path, help="write the trust model fitted on all sets")
    ap.add_argument("--skip", action="append", default=[], help="leave a dev set out entirely")
    args = ap.parse_args(argv)
    shared = find_shared(args.shared)
    dev = [
        capture_set(resolve_set(s, shared), cache=args.cache, limit=lim)
        for s, lim in (*DEFAULT_SETS, *TRUST_SETS)
        if s.split(":")[-1].split("/")[-1] not in args.skip
    ]
    judge_names = {s.split(":")[-1].split("/")[-1] for s, _lim in DEFAULT_SETS}
    checks = [capture_set(p, cache=args.cache) for p in args.check]
    old_judge = judge_fit_of(load_weights("musique"))
    lines = ["| held-out set | run | R@1 | R@2 | R@5 | R@10 | nDCG@10 | gap R@10 | gap nDCG |",
             "|---|---|---|---|---|---|---|---|---|"]
    worst: dict[str, float] = {}
    mean_gap: dict[str, float] = {}
    all_judge = fit_judge([s for s in dev if s.name in judge_names], set_weights=SET_WEIGHTS)
    folds: list[tuple[CapturedSet, JudgeFit, TrustModel]] = []
    for i, held in enumerate(dev):
        others = [s for j, s in enumerate(dev) if j != i]
        judge = fit_judge([s for s in others if s.name in judge_names], set_weights=SET_WEIGHTS)
        model = fit_trust([(s, judge) for s in others])
        folds.append((held, judge, model))
    all_model = fit_trust([(s, all_judge) for s in dev])
    folds += [(c, all_judge, all_model) for c in checks]
    timings = []
    for held, judge, model in folds:
        singles, fused, ms = score_set(held, judge, model, old_judge)
        timings.append(ms)
        best_r10 = max(m["recall@10"] for m in singles.values())
        best_nd = max(m["ndcg@10"] for m in singles.values())
        for name, m in singles.items():
            lines.append(f"| {held.name} | {name} alone | {_fmt(m)} | | |")
        for name, m in fused.items():
            g10 = 100 * (m["recall@10"] - best_r10)
            gnd = 100 * (m["ndcg@10"] - best_nd)
            lines.append(f"| {held.name} | {name} | {_fmt(m)} | {g10:+.1f} | {gnd:+.1f} |")
            worst[name] = min(worst.get(name, 0.0), g10, gnd)
            if held.name not in {c.name for c in checks}:
                mean_gap[name] = mean_gap.get(name, 0.0) + (g10 + gnd) / (2 * len(dev))
        sys.stdout.write("\n".join(lines[-(len(singles) + len(fused)):]) + "\n")
        sys.stdout.flush()
    summary = ["", "| choice | worst gap to the best single path (R@10 or nDCG@10, every "
               "held-out set and check) | mean gap over the held-out sets |", "|---|---|---|"]
    summary += [
        f"| {k} | {v:+.1f} | {mean_gap.get(k, 0.0):+.2f} |"
        for k, v in sorted(worst.items(), key=lambda kv: (-kv[1], -mean_gap.get(kv[0], 0.0)))
    ]
    summary.append("")
    summary.append(f"trust step: {np.median(timings):.3f} ms a query (median over sets)")
    summary.append("trust model fitted on all dev sets: " + json.dumps(model_json(all_model)))
    text = "\n".join(lines + summary) + "\n"
    sys.stdout.write("\n".join(summary) + "\n")
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text("Fusion choice, leave-one-set-out (benchmarks/fusion_loso.py):\n\n"
                               + text, "utf-8")
    if args.write_model:
        args.write_model.write_text(json.dumps(
            {**model_json(all_model), "fitted_on": [s.name for s in dev]}, indent=2) + "\n",
            "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
