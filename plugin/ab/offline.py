"""Paired offline comparison of arms on one labelled set: ``hybridsag eval --compare`` and
``--grid``.

Every arm (:mod:`hybridsag.ab.arms`) answers the same questions over one index; a fused arm
is scored on the paths' runs captured once per run-level settings, with the search's own
fusion step (:mod:`hybridsag.evaluation.offline_runs`), as the grid's points are. Per arm:
Recall@5, Recall@10 and nDCG@10. Per pair of arms (A vs B, in the order given): the mean
difference A - B of each metric with a paired bootstrap 95% interval (``scipy.stats.bootstrap``
over the per-question differences, percentile method, seeded), wins/losses/ties, and a paired
significance test from ranx (``ranx.compare``: two-sided paired Student's t-test by default, or
Fisher's randomization test) whose p-values are Bonferroni-corrected over every (pair, metric)
test reported. The metric definitions are ranx's; our own :func:`hybridsag.evaluation.measures.metrics_for`
(the HippoRAG 2 Recall@K: the share of a question's gold passages in the top K) is computed
beside them and the largest per-question difference is reported as ``crosscheck``. The questions
where the arms disagree most (the spread of nDCG@10 across arms) go to ``details.jsonl``; each
arm's run is written in TREC format under ``runs/`` and a TREC run file can itself be an arm.

ranx's kernels are numba functions compiled on first use for the types they are given, and a
passage id reaches them as a NumPy string array as wide as the longest id: every width
compiles them again (tens of seconds). :func:`compare_runs` therefore hands ranx each passage
id as a code of one width (:func:`_passage_codes`), so they compile once and numba's on-disk
cache serves every later data set; TREC files are read and written here, without ranx's data
structures, for the same reason.

Needs the ``ab`` extra (``pip install 'hybridsag[ab]'``: ranx).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hybridsag.ab.arms import Arm, parse_arms
from hybridsag.ab.report import format_p
from hybridsag.errors import ConfigError, InputError
from hybridsag.evaluation.harness import (
    Dataset,
    eval_versions,
    load_dataset,
    open_eval_index,
    questions_of,
    ranked_resources,
    skipped_line,
    uses_vectors,
)
from hybridsag.evaluation.measures import Gold, metrics_for
from hybridsag.evaluation.offline_runs import (
    DEPTH,
    GRID_KS,
    GRID_WEIGHTS,
    Captures,
    describe,
    grid,
    relative_weights,
    score,
)
from hybridsag.paths import PATHS
from hybridsag.settings import Settings
from hybridsag.records.filters import Filters

__all__ = [
    "METRICS",
    "STAT_TESTS",
    "compare_arms",
    "compare_runs",
    "compare_verdict",
    "format_compare",
    "format_grid",
    "grid_search",
    "points",
    "read_trec",
    "write_trec",
]

#: The metrics compared, as ranx names them.
METRICS = ("recall@5", "recall@10", "ndcg@10")
#: ranx's paired tests: "student" (paired t-test), "fisher" (randomization test).
STAT_TESTS = ("student", "fisher")
SHORT = {"recall@5": "R@5", "recall@10": "R@10", "ndcg@10": "nDCG@10"}
Progress = Callable[[str, int], Callable[[int], None]]


def _grade(gold: frozenset[str], rid: str) -> int:
    """``rid``'s grade as ranx reads qrels (an integer; 1 for a gold set without grades)."""
    return int(gold.grade(rid)) if isinstance(gold, Gold) else 1


def _ranx() -> Any:
    try:
        import ranx
    except ImportError as exc:
        raise ConfigError(
            f"eval --compare needs the ab extra ({exc.name} is missing): "
            "pip install 'hybridsag[ab]'"
        ) from exc
    return ranx


@contextmanager
def _quiet_numba() -> Iterator[None]:
    """ranx's numba kernels warn about an unsigned cast inside ranx itself; not ours to fix."""
    with warnings.catch_warnings():
        try:
            from numba.core.errors import NumbaTypeSafetyWarning

            warnings.simplefilter("ignore", NumbaTypeSafetyWarning)
        except ImportError:  # pragma: no cover - numba comes with ranx
            pass
        yield


# -- TREC run files ------------------------------------------------------------------------------


def write_trec(path: Path, run: Mapping[str, Sequence[str]], *, name: str) -> None:
    """Write ``run`` (question id -> ranked passage ids) as a TREC run file, one line per
    passage: ``qid Q0 docid rank score name`` (rank 1-based, score 1/rank; questions with no
    passage are left out), the format ranx and trec_eval read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        f"{q} Q0 {d} {r} {1.0 / r!r} {name}"
        for q, docs in run.items()
        for r, d in enumerate(docs, start=1)
    ]
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def read_trec(path: Path) -> dict[str, list[str]]:
    """A TREC run file (``qid Q0 docid rank score name``) as question id -> passage ids ranked
    by score, highest first (ties by passage id; the rank column is not read, as ranx and
    trec_eval do not; a passage listed twice keeps its last score). InputError names a missing
    file or a bad line."""
    if not Path(path).is_file():
        raise InputError(f"TREC run {path} does not exist")
    scores: dict[str, dict[str, float]] = {}
    for n, line in enumerate(Path(path).read_text("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split()
        try:
            if len(fields) != 6:
                raise ValueError(f"{len(fields)} fields, not 6")
            q, _, d, _, score, _ = fields
            scores.setdefault(q, {})[d] = float(score)
        except ValueError as exc:
            raise InputError(
                f"{path} is not a TREC run (qid Q0 docid rank score name): line {n}: {exc}"
            ) from None
    return {
        q: [d for d, _ in sorted(docs.items(), key=lambda kv: (-kv[1], kv[0]))]
        for q, docs in scores.items()
    }


def _passage_codes(
    qrels: Mapping[str, frozenset[str]], runs: Mapping[str, Mapping[str, Sequence[str]]]
) -> dict[str, str]:
    """Every passage id of ``qrels`` and ``runs`` -> a code of one width (``p`` and 11 digits,
    in sorted id order) for ranx: its compiled kernels are kept per id width (see the module
    docstring), and the metrics depend on which ids match, never on how they are spelt."""
    ids = {d for gold in qrels.values() for d in gold}
    ids.update(d for run in runs.values() for docs in run.values() for d in docs)
    return {d: f"p{i:011d}" for i, d in enumerate(sorted(ids))}


# -- running the arms ----------------------------------------------------------------------------


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+=-]+", "_", label)[:80] or "arm"


def _needs_dense(settings: Settings, arms: Sequence[Arm]) -> bool:
    if settings.embedding.model == "none":
        for arm in arms:
            if arm.alone and PATHS[arm.paths[0]].needs_dense:
                raise InputError(
                    f"arm {arm.label!r} needs the dense path, which is off here "
                    "(embedding.model = 'none')"
                )
        return False
    wanted = {p for arm in arms if arm.run_file is None for p in arm.all_paths(settings)}
    return uses_vectors(wanted)


def run_arms(
    settings: Settings,
    ds: Dataset,
    arms: Sequence[Arm],
    out: Path,
    *,
    progress: Progress | None = None,
) -> tuple[dict[str, dict[str, list[str]]], dict[str, list[float]], dict[str, Any]]:
    """Index ``ds`` once and answer every question with every arm: a path alone runs by
    itself; a fused arm is scored on a capture of its paths (:mod:`hybridsag.evaluation.offline_runs`:
    the paths run once per distinct run-level settings, and each arm's fusion is scored on
    them with the search's own fusion step). Returns each arm's ranked passage ids per
    question, its per-question latencies in ms (a fused arm's: its capture's paths plus its
    own fusion) and the index figures. InputError names an arm whose settings are refused (a
    ``k`` under convex fusion among them)."""
    noop = lambda n: None  # noqa: E731
    runs: dict[str, dict[str, list[str]]] = {}
    latencies: dict[str, list[float]] = {}
    for arm in arms:
        if arm.run_file is not None:
            imported = read_trec(arm.run_file)
            runs[arm.label] = {qid: imported.get(qid, [])[:DEPTH] for qid, _ in ds.queries}
            latencies[arm.label] = []
    live = [a for a in arms if a.run_file is None]
    if not live:
        return runs, latencies, {"passages": ds.passages, "imported_only": True}
    for arm in live:  # refused before anything is indexed
        arm.settings_for(settings)
    base, info = open_eval_index(
        settings, ds, out, needs_dense=_needs_dense(settings, live), progress=progress
    )
    captures = Captures(base, questions_of(ds))
    try:
        for arm in live:
            arm_settings = arm.settings_for(base.settings)
            tick = progress(arm.label, len(ds.queries)) if progress else noop
            if arm.alone:
                hs = captures.search_for(arm_settings)
                ranked: dict[str, list[str]] = {}
                ms: list[float] = []
                for qid, text in ds.queries:
                    t0 = time.perf_counter()
                    res = hs.run_path(arm.paths[0], text, limit=DEPTH, filters=Filters())
                    ranked[qid] = ranked_resources(res.hits)[:DEPTH]
                    ms.append((time.perf_counter() - t0) * 1000.0)
                    tick(1)
                runs[arm.label], latencies[arm.label] = ranked, ms
                continue
            cap = captures.get(arm_settings, arm.paths or None, progress=tick)
            scored = score(
                cap, arm_settings.fusion, weights=arm.weights, judge_order=arm.judge_order
            )
            runs[arm.label] = dict(scored.ranked)
            latencies[arm.label] = [q.ms + scored.fuse_ms[q.qid] for q in cap.questions]
    finally:
        captures.close()
    order = [a.label for a in arms]  # the order given: a TREC arm is read first, not listed first
    return (
        {label: runs[label] for label in order},
        {label: latencies[label] for label in order},
        info,
    )


# -- statistics -----------------------------------------------------------------------------------


def _bootstrap_ci(diffs: Sequence[float], *, seed: int, n_resamples: int) -> list[float]:
    """Paired bootstrap 95% interval of the mean of per-question differences."""
    import numpy as np
    from scipy.stats import bootstrap

    values = np.asarray(diffs, dtype=float)
    if len(values) < 2 or float(values.min()) == float(values.max()):
        mean = float(values.mean()) if len(values) else 0.0
        return [round(mean, 6), round(mean, 6)]
    res = bootstrap(
        (values,),
        np.mean,
        n_resamples=n_resamples,
        confidence_level=0.95,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return [round(float(res.confidence_interval.low), 6), round(float(res.confidence_interval.high), 6)]


def compare_runs(
    qrels: Mapping[str, Gold],
    runs: Mapping[str, Mapping[str, Sequence[str]]],
    *,
    stat_test: str = "student",
    alpha: float = 0.05,
    seed: int = 42,
    n_resamples: int = 10_000,
) -> dict[str, Any]:
    """Per-arm metrics and per-pair paired statistics of ``runs`` (arm label -> question id ->
    ranked passage ids) against ``qrels`` (see the module docstring). Questions an arm has no
    answer for score 0."""
    if stat_test not in STAT_TESTS:
        raise InputError(f"unknown --stat-test {stat_test!r}; valid: {', '.join(STAT_TESTS)}")
    ranx = _ranx()
    labels = list(runs)
    qids = sorted(qrels)
    code = _passage_codes(qrels, runs)
    # graded as the metrics read them (ranx's nDCG is trec_eval's: gain = grade)
    ranx_qrels = ranx.Qrels.from_dict(
        {q: {code[d]: _grade(qrels[q], d) for d in qrels[q]} for q in qids}
    )
    ranx_runs = []
    for label in labels:
        table = {
            q: {code[d]: 1.0 / r for r, d in enumerate(runs[label].get(q, []), start=1)}
            for q in qids
            if runs[label].get(q)
        }
        ranx_runs.append(ranx.Run.from_dict(table, name=label))
    with _quiet_numba():
        per_query = {
            label: ranx.evaluate(
                ranx_qrels, run, list(METRICS), return_mean=False, make_comparable=True
            )
            for label, run in zip(labels, ranx_runs)
        }
        report = ranx.compare(
            ranx_qrels,
            ranx_runs,
            list(METRICS),
            stat_test=stat_test,
            max_p=alpha,
            random_seed=seed,
            make_comparable=True,
        ).to_dict()
    # our own metrics (HippoRAG 2 Recall@K) beside ranx's
    ours = {
        label: {q: metrics_for(list(runs[label].get(q, [])), qrels[q]) for q in qids}
        for label in labels
    }
    crosscheck = {
        m: round(
            max(
                abs(float(per_query[label][m][i]) - ours[label][q][m])
                for label in labels
                for i, q in enumerate(qids)
            ),
            9,
        )
        for m in METRICS
    }
    arms_out = {
        label: {m: round(float(per_query[label][m].mean()), 6) for m in METRICS} for label in labels
    }
    pairs = list(itertools.combinations(labels, 2))
    tests = max(len(pairs) * len(METRICS), 1)
    pair_out: dict[str, Any] = {}
    for a, b in pairs:
        entry: dict[str, Any] = {"a": a, "b": b}
        for m in METRICS:
            diffs = [float(x - y) for x, y in zip(per_query[a][m], per_query[b][m])]
            p = float(report[a]["comparisons"][b][m])
            if math.isnan(p):  # no spread in the differences: identical, or a constant shift
                p = 1.0 if not any(diffs) else 0.0
            wtl = report[a]["win_tie_loss"][b][m]
            entry[m] = {
                "mean_difference": round(sum(diffs) / max(len(diffs), 1), 6),
                "ci95": _bootstrap_ci(diffs, seed=seed, n_resamples=n_resamples),
                "wins": int(wtl["W"]),
                "losses": int(wtl["L"]),
                "ties": int(wtl["T"]),
                "p_value": round(p, 6),
                "p_bonferroni": round(min(1.0, p * tests), 6),
                "significant": bool(min(1.0, p * tests) < alpha),
            }
        pair_out[f"{a} vs {b}"] = entry
    return {
        "metrics": list(METRICS),
        "stat_test": stat_test,
        "alpha": alpha,
        "bonferroni_tests": tests,
        "bootstrap": {"resamples": n_resamples, "seed": seed, "method": "percentile"},
        "arms": arms_out,
        "pairs": pair_out,
        "crosscheck": {
            "max_abs_difference_ranx_vs_ours": crosscheck,
            "note": "ranx's recall@k is |gold in top k| / |gold| per question: the HippoRAG 2 "
            "definition eval uses; nDCG@10 uses binary gains in both",
        },
        "per_query": {
            label: {q: {m: round(ours[label][q][m], 6) for m in METRICS} for q in qids}
            for label in labels
        },
    }


def _disagreements(
    ds: Dataset,
    runs: Mapping[str, Mapping[str, Sequence[str]]],
    per_query: Mapping[str, Mapping[str, Mapping[str, float]]],
    top: int,
) -> list[dict[str, Any]]:
    texts = dict(ds.queries)
    rows = []
    for qid in sorted(ds.qrels):
        scores = {label: per_query[label][qid]["ndcg@10"] for label in runs}
        spread = max(scores.values()) - min(scores.values())
        rows.append(
            {
                "query_id": qid,
                "question": texts.get(qid, ""),
                "spread_ndcg@10": round(spread, 6),
                "gold": sorted(ds.qrels[qid]),
                "arms": {
                    label: {**per_query[label][qid], "returned": list(runs[label].get(qid, []))}
                    for label in runs
                },
            }
        )
    rows.sort(key=lambda r: (-r["spread_ndcg@10"], r["query_id"]))
    return rows[:top]


def compare_arms(
    settings: Settings,
    data: Path,
    arms: str | Sequence[str],
    *,
    limit: int | None = None,
    out: Path | None = None,
    stat_test: str = "student",
    alpha: float = 0.05,
    seed: int = 42,
    n_resamples: int = 10_000,
    disagreements: int = 50,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run ``arms`` (``--compare`` text or a list of arm texts) on the questions of ``data``
    and compare them pairwise; writes ``compare.json``, ``details.jsonl`` (the ``disagreements``
    questions where the arms' nDCG@10 spreads most), ``config.json`` and each arm's TREC run
    under ``runs/`` into ``out`` (default ``<data_dir>/eval/<dataset>-compare``). Returns the
    summary (:func:`compare_runs` plus dataset, index figures and latencies)."""
    parsed = parse_arms(arms)
    if stat_test not in STAT_TESTS:
        raise InputError(f"unknown --stat-test {stat_test!r}; valid: {', '.join(STAT_TESTS)}")
    _ranx()  # fail before indexing when the extra is missing
    ds = load_dataset(data, limit=limit)
    out = Path(out) if out is not None else settings.data_dir / "eval" / f"{ds.name}-compare"
    out.mkdir(parents=True, exist_ok=True)
    runs, latencies, info = run_arms(settings, ds, parsed, out, progress=progress)
    stats = compare_runs(
        ds.qrels, runs, stat_test=stat_test, alpha=alpha, seed=seed, n_resamples=n_resamples
    )
    for label, ms in latencies.items():
        if ms:
            ordered = sorted(ms)
            stats["arms"][label]["p50_ms"] = round(ordered[len(ordered) // 2], 3)
    files = {}
    for i, label in enumerate(runs, start=1):
        path = out / "runs" / f"{i:02d}-{_safe(label)}.trec"
        write_trec(path, runs[label], name=_safe(label))
        files[label] = str(path)
    details = _disagreements(ds, runs, stats.pop("per_query"), disagreements)
    with (out / "details.jsonl").open("w", encoding="utf-8") as fh:
        for row in details:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    summary = {
        "dataset": ds.name,
        "questions": len(ds.queries),
        "skipped": {"count": len(ds.skipped), "ids": dict(ds.skipped)},
        "arms_order": list(runs),
        "index": info,
        **stats,
        "trec_runs": files,
        "out": str(out),
    }
    summary["verdict"] = compare_verdict(summary)
    (out / "compare.json").write_text(json.dumps(summary, indent=2) + "\n", "utf-8")
    config = {
        "settings": settings.public_dict(),
        "arms": [a.label for a in parsed],
        "limit": limit,
        "versions": eval_versions(),
        "data": {"folder": str(ds.folder), "sha256": ds.digest},
    }
    (out / "config.json").write_text(json.dumps(config, indent=2, default=str) + "\n", "utf-8")
    return summary


#: The widest arm (or pair) name the ``--compare`` table shows in full; a longer one (a TREC
#: run named by its path) keeps its end behind ``…`` and is given whole in a legend line.
ARM_COLUMN = 28
#: The metric the verdict line reads.
VERDICT_METRIC = "ndcg@10"


def points(fraction: float) -> str:
    """A difference of two shares in percentage points, signed, never ``-0.00``:
    ``points(0.0123)`` is ``+1.23``, ``points(-0.00001)`` is ``0.00``."""
    text = f"{fraction * 100:+.2f}"
    return "0.00" if float(text) == 0 else text


def _shown(label: str) -> str:
    return label if len(label) <= ARM_COLUMN else "…" + label[-(ARM_COLUMN - 1):]


def compare_verdict(summary: Mapping[str, Any]) -> str:
    """One line saying what the comparison found, as the online report's summary does: the arm
    with the best nDCG@10 and, for every other arm, by how many points it leads and whether
    that lead is significant after Bonferroni (at ``alpha``)."""
    m = VERDICT_METRIC
    arms = summary["arms"]
    order = list(summary.get("arms_order") or arms)
    best = max(order, key=lambda a: (arms[a][m], -order.index(a)))
    if all(arms[a][m] == arms[best][m] for a in order):
        return f"verdict: no difference: every arm has {SHORT[m]} {arms[best][m] * 100:.2f}"
    leads = []
    for other in (a for a in order if a != best):
        entry = summary["pairs"].get(f"{best} vs {other}")
        sign = 1
        if entry is None:
            entry, sign = summary["pairs"][f"{other} vs {best}"], -1
        e = entry[m]
        said = "significant" if e["significant"] else "not significant"
        leads.append(
            f"{points(sign * e['mean_difference'])} points over {_shown(other)} "
            f"({said}, Bonferroni {format_p(e['p_bonferroni'])})"
        )
    return (
        f"verdict: {best} leads on {SHORT[m]} ({arms[best][m] * 100:.2f}): "
        f"{'; '.join(leads)}; alpha {summary['alpha']}"
    )


def format_compare(summary: Mapping[str, Any]) -> str:
    """The plain table ``eval --compare`` prints: the arms in the order given (metrics in %),
    one block per pair (differences in percentage points), then the verdict line."""
    lines = [
        f"dataset {summary['dataset']}: {summary['questions']} questions; paired "
        f"{summary['stat_test']} test (ranx), Bonferroni over {summary['bonferroni_tests']} "
        f"tests, alpha {summary['alpha']}; paired bootstrap 95% CI "
        f"({summary['bootstrap']['resamples']} resamples)"
    ]
    if (line := skipped_line(summary)) is not None:
        lines.append(line)
    order = list(summary.get("arms_order") or summary["arms"])
    cut = [label for label in order if _shown(label) != label]
    width = max(12, *(len(_shown(a)) + 2 for a in order))
    head = f"{'arm':<{width}}" + "".join(f"{SHORT[m]:>10}" for m in METRICS) + f"{'p50 ms':>10}"
    lines += [head, "-" * len(head)]
    for label in order:
        m = summary["arms"][label]
        lines.append(
            f"{_shown(label):<{width}}"
            + "".join(f"{m[k] * 100:>9.2f}%" for k in METRICS)
            + (f"{m['p50_ms']:>10.1f}" if "p50_ms" in m else f"{'-':>10}")
        )
    lines.extend(f"  {_shown(label)} is {label}" for label in cut)
    lines.append("")
    shown_pairs = {
        pair: f"{_shown(e['a'])} vs {_shown(e['b'])}" for pair, e in summary["pairs"].items()
    }
    pw = max(16, *(len(p) + 2 for p in shown_pairs.values()))
    head = (
        f"{'pair (A - B)':<{pw}}{'metric':<9}{'points':>8}  {'95% CI':<18}"
        f"{'W/L/T':>12}{'p':>10}{'p Bonf.':>10}"
    )
    lines += [head, "-" * len(head)]
    for pair, entry in summary["pairs"].items():
        for m in METRICS:
            e = entry[m]
            ci = f"[{points(e['ci95'][0])}, {points(e['ci95'][1])}]"
            wlt = f"{e['wins']}/{e['losses']}/{e['ties']}"
            mark = " *" if e["significant"] else ""
            lines.append(
                f"{shown_pairs[pair]:<{pw}}{SHORT[m]:<9}{points(e['mean_difference']):>8}  "
                f"{ci:<18}{wlt:>12}{e['p_value']:>10.4f}{e['p_bonferroni']:>10.4f}{mark}"
            )
    cc = summary["crosscheck"]["max_abs_difference_ranx_vs_ours"]
    lines.append(
        "points: percentage points (A - B). * significant after Bonferroni. ranx vs our "
        "metrics, largest per-question difference: "
        + ", ".join(f"{SHORT[m]} {v:g}" for m, v in cc.items())
    )
    lines.append(compare_verdict(summary))
    return "\n".join(lines)


# -- grid ----------------------------------------------------------------------------------------


def grid_search(
    settings: Settings,
    data: Path,
    *,
    fuse: Sequence[str] | None = None,
    method: str | None = None,
    ks: Sequence[float] | None = None,
    normalisations: Sequence[str] | None = None,
    weights: Sequence[float] = GRID_WEIGHTS,
    rounds: Sequence[int] = (0, 1, 2),
    limit: int | None = None,
    out: Path | None = None,
    top: int = 20,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Sweep a fused search over ``fuse`` (default ``search.paths``) for one fusion ``method``
    (default ``fusion.method``): per-path ``weights`` (relative: the largest of a point is 1),
    SAG2 ``rounds``, and the method's own parameter: RRF ``ks`` (default
    :data:`~hybridsag.evaluation.offline_runs.GRID_KS`) for rrf, ``normalisations`` (default the
    configured one) for convex. The paths run once per question and rounds value, and every
    point is scored with the search's own fusion step, trust included
    (:mod:`hybridsag.evaluation.offline_runs`). Returns every point's
    R@5, R@10 and nDCG@10, best first (``top`` of them in ``table``), and writes ``grid.json``
    into ``out``. InputError, before anything is indexed, for ``ks`` under convex or
    ``normalisations`` under rrf (naming the method), an unknown path or a rounds value outside
    0..2."""
    method = settings.fusion.method if method is None else method
    if ks is None and method == "rrf":
        ks = GRID_KS
    if normalisations is None and method == "convex":
        normalisations = (settings.fusion.normalisation,)
    paths = tuple(fuse) if fuse else tuple(settings.search.paths)
    for p in paths:
        if p not in PATHS:
            raise InputError(f"unknown path {p!r} in --fuse; valid: {', '.join(PATHS)}")
    if settings.embedding.model == "none":
        paths = tuple(p for p in paths if not PATHS[p].needs_dense)
    candidates = grid(
        settings.fusion, method, relative_weights(paths, weights),
        ks=ks or (), normalisations=normalisations or (),
    )  # fmt: skip
    for r in rounds:
        if not 0 <= r <= 2:
            raise InputError(f"--grid-rounds {r} must be in 0..2")
    if "sag2" not in paths:
        rounds = (settings.sag2.rounds,)
    ds = load_dataset(data, limit=limit)
    out = Path(out) if out is not None else settings.data_dir / "eval" / f"{ds.name}-grid"
    out.mkdir(parents=True, exist_ok=True)
    needs_dense = settings.embedding.model != "none" and uses_vectors(paths)
    base, info = open_eval_index(settings, ds, out, needs_dense=needs_dense, progress=progress)
    captures = Captures(base, questions_of(ds))
    points: list[dict[str, Any]] = []
    try:
        for r in rounds:
            run_settings = base.settings.model_copy(
                update={"sag2": base.settings.sag2.model_copy(update={"rounds": r})}
            )
            tick = progress(f"rounds={r}", len(ds.queries)) if progress else None
            cap = captures.get(run_settings, paths, progress=tick)
            for point in candidates:
                m = score(cap, point).metrics
                points.append(
                    {"rounds": r, **describe(point), **{k: round(m[k], 6) for k in METRICS}}
                )
    finally:
        captures.close()
    points.sort(
        key=lambda p: (
            -p["recall@10"], -p["ndcg@10"], -p["recall@5"], p["rounds"], p.get("k", 0.0)
        )
    )
    axis = (
        {"k": list(ks or ())} if method == "rrf" else {"normalisation": list(normalisations or ())}
    )
    summary = {
        "dataset": ds.name,
        "questions": len(ds.queries),
        "fused_paths": list(paths),
        "method": method,
        "index": info,
        "grid": {"method": method, **axis, "weights": list(weights), "rounds": list(rounds)},
        "points": len(points),
        "table": points[:top],
        "out": str(out),
    }
    (out / "grid.json").write_text(
        json.dumps({**summary, "all_points": points}, indent=2) + "\n", "utf-8"
    )
    return summary


def format_grid(summary: Mapping[str, Any]) -> str:
    """The grid's best points as a plain table (the k column for rrf, the normalisation's for
    convex)."""
    paths = summary["fused_paths"]
    own = "k" if summary["method"] == "rrf" else "normalisation"
    lines = [
        f"grid on {summary['dataset']} ({summary['questions']} questions): {summary['method']} "
        f"fusion of {'+'.join(paths)}, {summary['points']} points; best {len(summary['table'])}:"
    ]
    head = (
        f"{'rounds':>6}{'k' if own == 'k' else 'norm':>8}  "
        + "".join(f"{p:>8}" for p in paths)
        + "".join(f"{SHORT[m]:>10}" for m in METRICS)
    )
    lines += [head, "-" * len(head)]
    for p in summary["table"]:
        value = f"{p[own]:g}" if own == "k" else p[own]
        lines.append(
            f"{p['rounds']:>6}{value:>8}  "
            + "".join(f"{p['weights'][name]:>8g}" for name in paths)
            + "".join(f"{p[m] * 100:>9.2f}%" for m in METRICS)
        )
    return "\n".join(lines)
