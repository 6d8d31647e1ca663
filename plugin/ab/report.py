"""The report of an online experiment, from its logged impressions and clicks.

Per arm: the queries it answered, its click-through rate (share of its queries with a click;
Wilson 95% interval, via ``scipy.stats.binomtest``) and the mean reciprocal rank of clicks
(1/position of the first click, 0 for a query without one; Student-t 95% interval, clipped to
[0, 1]).

- ``split``: the arm with the highest MRR of clicks leads; it is compared with every other arm
  by Welch's t-test on the per-query reciprocal ranks (``scipy.stats.ttest_ind``), p-values
  Bonferroni-corrected over those comparisons.
- ``interleave``: each query prefers the arm credited with more of its clicks (team-draft
  credit, :mod:`hybridsag.ab.interleave`); the preference share of the first arm over the
  deciding queries (a preference either way) has a Wilson 95% interval, and a two-sided sign
  test (``scipy.stats.binomtest`` against 1/2) gives the p-value.

The evidence is enough when the p-value is below ``alpha`` and every arm (for interleaving: the
deciding queries) has at least ``min_queries``. The report is a pure function of the events and
a tenant scope, so it reads the same through the CLI and the service: with a ``tenant`` it counts
only that tenant's traffic (:func:`tenant_events`: its impressions, the feedback on them, and the
experiment's own define/start/stop events); without one, every tenant's.

:func:`chart_png` draws the chart (matplotlib from the ``ab`` extra) of the per-question
differences, the running preference (or MRR difference) and the running p-value (``running_p``:
the sign test's, or Welch's uncorrected, after each query, thinned as ``running`` is); :func:`write_report` writes the
report as ``report.json`` beside it (``report.png``), which only the CLI does. A
:class:`ReportCache` keeps reports and charts while no event is logged: the service computes
each at most once per state of the log.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import tempfile
import textwrap
import threading
import warnings
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from hybridsag.ab.events import Event
from hybridsag.ab.interleave import credit
from hybridsag.settings import ExperimentSettings

__all__ = [
    "CHART_NAME",
    "REPORT_NAME",
    "ReportCache",
    "build_report",
    "chart_fields",
    "chart_png",
    "format_p",
    "format_report",
    "tenant_events",
    "write_report",
]

#: Below this a p-value is printed as a bound (``p < 0.0001``), never as ``p = 0``.
P_FLOOR = 1e-4


def format_p(p: float | None) -> str:
    """A p-value for people: ``p = 0.0312``, ``p < 0.0001`` below :data:`P_FLOOR` (a computed
    0 is a bound, not an exact value), ``p = n/a`` when there is none."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "p = n/a"
    if p < P_FLOOR:
        return f"p < {P_FLOOR}"
    return f"p = {p:.3g}"


REPORT_NAME = "report.json"
CHART_NAME = "report.png"
#: The most points of the running curve kept in the report (evenly thinned beyond).
RUNNING_POINTS = 400
#: Reports and charts a :class:`ReportCache` keeps by default: one report and one chart for
#: each of 32 (experiment, tenant scope) pairs; a chart is some 40 KB of PNG.
REPORT_CACHE_SIZE = 64

V = TypeVar("V")


def _r(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), 6)


def _proportion(k: int, n: int) -> dict[str, Any]:
    """k of n with the Wilson 95% interval."""
    from scipy.stats import binomtest

    if n == 0:
        return {"k": 0, "n": 0, "share": None, "ci95": None}
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return {"k": k, "n": n, "share": _r(k / n), "ci95": [_r(ci.low), _r(ci.high)]}


def _mean_ci(values: Sequence[float]) -> dict[str, Any]:
    """Mean with a Student-t 95% interval (a single value, or no spread: the mean itself)."""
    from scipy import stats

    n = len(values)
    if n == 0:
        return {"mean": None, "ci95": None}
    mean = sum(values) / n
    if n < 2:
        return {"mean": _r(mean), "ci95": None}
    sem = float(stats.sem(values))
    if sem == 0.0:
        return {"mean": _r(mean), "ci95": [_r(mean), _r(mean)]}
    low, high = stats.t.interval(0.95, df=n - 1, loc=mean, scale=sem)
    return {"mean": _r(mean), "ci95": [_r(low), _r(high)]}


def _welch(x: Sequence[float], y: Sequence[float]) -> dict[str, Any]:
    """Welch's t-test of mean(x) - mean(y), with the 95% interval of the difference; None
    where it cannot be computed (fewer than 2 values a side, or no spread on either)."""
    from scipy import stats

    diff = (sum(x) / len(x) - sum(y) / len(y)) if x and y else None
    if len(x) < 2 or len(y) < 2 or (float(stats.tstd(x)) == 0.0 and float(stats.tstd(y)) == 0.0):
        return {"difference": _r(diff), "ci95": None, "p_value": None}
    res = stats.ttest_ind(x, y, equal_var=False)
    ci = res.confidence_interval(0.95)
    return {"difference": _r(diff), "ci95": [_r(ci.low), _r(ci.high)], "p_value": _r(res.pvalue)}


def _thin(points: list[list[float]]) -> list[list[float]]:
    if len(points) <= RUNNING_POINTS:
        return points
    step = len(points) / RUNNING_POINTS
    kept = [points[int(i * step)] for i in range(RUNNING_POINTS)]
    if kept[-1] is not points[-1]:
        kept[-1] = points[-1]
    return kept


def _impressions(events: Iterable[Event]) -> tuple[list[Event], dict[str, set[int]], int]:
    """The impressions in log order, the clicked positions per query id, the last seq."""
    impressions: list[Event] = []
    clicks: dict[str, set[int]] = defaultdict(set)
    last = 0
    for e in events:
        last = max(last, e.seq)
        if e.kind == "impression":
            impressions.append(e)
        elif e.kind == "feedback" and e.body.get("kind") == "click" and e.query_id:
            clicks[e.query_id].add(int(e.body["position"]))
    return impressions, clicks, last


def tenant_events(events: Iterable[Event], tenant: str) -> list[Event]:
    """The events of ``tenant``'s traffic, in log order: its impressions (an impression records
    the tenant of the search), the feedback on them (feedback names its impression's query
    id), and every ``experiment`` event (the definition and its start/stop, no one's traffic).
    An admin's search records no tenant, so it is in no tenant's traffic."""
    mine: set[str] = set()
    out: list[Event] = []
    for e in events:
        if e.kind == "impression":
            if e.body.get("tenant") != tenant or e.query_id is None:
                continue
            mine.add(e.query_id)
        elif e.kind == "feedback" and e.query_id not in mine:
            continue  # an impression is logged before any feedback on it
        out.append(e)
    return out


def build_report(
    experiment: ExperimentSettings,
    events: Iterable[Event],
    *,
    tenant: str | None = None,
    alpha: float = 0.05,
    min_queries: int = 30,
) -> dict[str, Any]:
    """The report of ``experiment`` from its ``events`` (see the module docstring): of
    ``tenant``'s traffic only (:func:`tenant_events`), or with ``None`` of every tenant's."""
    if tenant is not None:
        events = tenant_events(events, tenant)
    impressions, clicks, last = _impressions(events)
    if tenant is not None:
        # how far into its own view of the log the report counts, not the log's last seq (the
        # log's seq grows with every tenant's traffic: a volume side channel)
        last = len(events)
    names = [a.name for a in experiment.arms]
    report: dict[str, Any] = {
        "experiment": experiment.name,
        "tenant": tenant,
        "mode": experiment.mode,
        "arms": names,
        "definition": experiment.model_dump(mode="json"),
        "as_of_seq": last,
        "queries": len(impressions),
        "clicks": sum(len(clicks.get(e.query_id or "", ())) for e in impressions),
        "alpha": alpha,
        "min_queries": min_queries,
    }
    traffic = _Traffic(names, impressions, clicks, alpha, min_queries)
    report.update(_split(traffic) if experiment.mode == "split" else _interleave(traffic))
    return report


class _Traffic(NamedTuple):
    """What either mode's statistics read: the arms' ``names`` (the definition's order), the
    ``impressions`` counted, the clicked positions by query id (``clicks``), and the ``alpha``
    and ``min_queries`` a winner must pass."""

    names: Sequence[str]
    impressions: Sequence[Event]
    clicks: Mapping[str, set[int]]
    alpha: float
    min_queries: int


def _arm_stats(rr: Sequence[float], credited: Sequence[int]) -> dict[str, Any]:
    clicked = sum(1 for c in credited if c > 0)
    mrr = _mean_ci(rr)
    if mrr["ci95"] is not None:  # a reciprocal rank lies in [0, 1]; so does its mean
        mrr["ci95"] = [max(0.0, mrr["ci95"][0]), min(1.0, mrr["ci95"][1])]
    return {
        "queries": len(rr),
        "clicks": sum(credited),
        "ctr": _proportion(clicked, len(rr)),
        "mrr": mrr,
    }


def _split(traffic: _Traffic) -> dict[str, Any]:
    names, impressions, clicks, alpha, min_queries = traffic
    rr: dict[str, list[float]] = {n: [] for n in names}
    counts: dict[str, list[int]] = {n: [] for n in names}
    by_question: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    order: list[tuple[str, float]] = []
    for e in impressions:
        arm = e.body["arm"]
        if arm not in rr:
            continue  # an arm no longer in the definition
        positions = clicks.get(e.query_id or "", set())
        value = 1.0 / min(positions) if positions else 0.0
        rr[arm].append(value)
        counts[arm].append(len(positions))
        by_question[e.body["query"]][arm].append(value)
        order.append((arm, value))
    stats = {n: _arm_stats(rr[n], counts[n]) for n in names}
    ranked = sorted(names, key=lambda n: (-(stats[n]["mrr"]["mean"] or 0.0), names.index(n)))
    leader, runner = ranked[0], ranked[1]
    comparisons = {}
    for other in ranked[1:]:
        test = _welch(rr[leader], rr[other])
        p = test["p_value"]
        test["p_bonferroni"] = _r(min(1.0, p * (len(names) - 1))) if p is not None else None
        comparisons[f"{leader} vs {other}"] = test
    enough = all(
        c["p_bonferroni"] is not None and c["p_bonferroni"] < alpha for c in comparisons.values()
    ) and all(len(rr[n]) >= min_queries for n in names)
    tied = stats[leader]["mrr"]["mean"] == stats[runner]["mrr"]["mean"]
    unseen = any(stats[n]["queries"] == 0 for n in names)
    winner = None if tied or unseen else leader
    per_question = []
    for question, arms in by_question.items():
        if arms.get(leader) and arms.get(runner):
            lead = sum(arms[leader]) / len(arms[leader])
            run = sum(arms[runner]) / len(arms[runner])
            per_question.append(
                {"query": question, "difference": _r(lead - run),
                 "n": len(arms[leader]) + len(arms[runner])}
            )
    per_question.sort(key=lambda q: (q["difference"], q["query"]))
    running: list[list[float]] = []
    sums = {leader: [0.0, 0], runner: [0.0, 0]}
    for i, (arm, value) in enumerate(order, start=1):
        if arm in sums:
            sums[arm][0] += value
            sums[arm][1] += 1
        if sums[leader][1] and sums[runner][1]:
            diff = sums[leader][0] / sums[leader][1] - sums[runner][0] / sums[runner][1]
            running.append([i, _r(diff) or 0.0])
    running_p = []
    with warnings.catch_warnings():
        # an early prefix where one arm's values are all equal: scipy warns of the moment's
        # precision, the test itself (the other arm's spread) is sound
        warnings.filterwarnings("ignore", "Precision loss", RuntimeWarning)
        for (i,) in _thin([[n] for n in range(1, len(order) + 1)]):  # Welch's p after i queries
            seen = order[:i]
            p_i = _welch([v for a, v in seen if a == leader], [v for a, v in seen if a == runner])
            if p_i["p_value"] is not None:
                running_p.append([i, p_i["p_value"]])
    best = comparisons[f"{leader} vs {runner}"]
    if winner is None:
        summary = (
            f"no arm leads yet over {len(impressions)} queries"
            + (" (an arm has none yet)" if unseen else "")
        )
    else:
        p = best["p_bonferroni"]
        summary = (
            f"{leader} leads on MRR of clicks ({stats[leader]['mrr']['mean']:.3f} vs "
            f"{runner} {stats[runner]['mrr']['mean']:.3f}, {format_p(p)} "
            f"over {len(impressions)} queries): "
            + ("the evidence is enough" if enough else "not enough evidence yet")
            + f" (alpha {alpha}, at least {min_queries} queries per arm)"
        )
    return {
        "per_arm": stats,
        "comparisons": comparisons,
        "winner": winner,
        "enough": bool(enough and winner is not None),
        "summary": summary,
        "per_question": per_question,
        "running": {"label": f"MRR of clicks, {leader} - {runner}", "null": 0.0,
                    "points": _thin(running)},
        "running_p": {"label": f"Welch's t-test p, {leader} vs {runner} (uncorrected)",
                      "alpha": alpha, "points": running_p},
    }


def _interleave(traffic: _Traffic) -> dict[str, Any]:
    from scipy.stats import binomtest

    names, impressions, clicks, alpha, min_queries = traffic
    a, b = names
    rr: dict[str, list[float]] = {a: [], b: []}
    counts: dict[str, list[int]] = {a: [], b: []}
    wins = {a: 0, b: 0}
    ties = no_clicks = 0
    by_question: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    running: list[list[float]] = []
    tally: list[list[int]] = []  # (deciding queries, of them preferring a) after each one
    for e in impressions:
        teams = [r["team"] for r in e.body["results"]]
        positions = clicks.get(e.query_id or "", set())
        got = credit(teams, positions)
        for arm in (a, b):
            mine = sorted(p for p in positions if teams[p - 1] == arm)
            rr[arm].append(1.0 / mine[0] if mine else 0.0)
            counts[arm].append(got.get(arm, 0))
        ca, cb = got.get(a, 0), got.get(b, 0)
        q = by_question[e.body["query"]]
        q[1] += 1
        if ca > cb:
            wins[a] += 1
            q[0] += 1
        elif cb > ca:
            wins[b] += 1
            q[0] -= 1
        elif positions:
            ties += 1
        else:
            no_clicks += 1
        deciding = wins[a] + wins[b]
        if ca != cb and deciding:
            running.append([deciding, _r(wins[a] / deciding) or 0.0])
            tally.append([deciding, wins[a]])
    deciding = wins[a] + wins[b]
    share = _proportion(wins[a], deciding)
    p = _r(binomtest(wins[a], deciding, 0.5).pvalue) if deciding else None
    winner = a if wins[a] > wins[b] else b if wins[b] > wins[a] else None
    enough = winner is not None and p is not None and p < alpha and deciding >= min_queries
    if winner is None:
        summary = (
            f"no preference yet: {a} and {b} each won {wins[a]} of {len(impressions)} "
            "interleaved queries"
        )
    else:
        won = wins[winner]
        low, high = share["ci95"] if winner == a else [1 - share["ci95"][1], 1 - share["ci95"][0]]
        summary = (
            f"{winner} is preferred in {won} of {deciding} deciding queries "
            f"({won / deciding:.1%}, 95% interval {low:.1%} to {high:.1%}), sign test "
            f"{format_p(p)} over {len(impressions)} interleaved queries: "
            + ("the evidence is enough" if enough else "not enough evidence yet")
            + f" (alpha {alpha}, at least {min_queries} deciding queries)"
        )
    per_question = sorted(
        ({"query": q, "difference": _r(v[0] / v[1]), "n": v[1]} for q, v in by_question.items()),
        key=lambda q: (q["difference"], q["query"]),
    )
    return {
        "per_arm": {n: _arm_stats(rr[n], counts[n]) for n in names},
        "interleaving": {
            "wins": wins,
            "ties": ties,
            "no_clicks": no_clicks,
            "deciding_queries": deciding,
            "preference": {a: share["share"], "ci95": share["ci95"]},
            "sign_test_p": p,
        },
        "winner": winner,
        "enough": bool(enough),
        "summary": summary,
        "per_question": per_question,
        "running": {"label": f"share of deciding queries preferring {a}", "null": 0.5,
                    "points": _thin(running)},
        "running_p": {
            "label": "sign test p over the deciding queries",
            "alpha": alpha,
            "points": [[n, _r(binomtest(k, n, 0.5).pvalue)] for n, k in _thin(tally)],
        },
    }


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def chart_png(report: Mapping[str, Any]) -> bytes:
    """The report's chart as PNG bytes: per-question differences (left), the running
    preference or MRR difference (middle) and the running p-value on a log scale with
    ``alpha`` dashed (right); every title wraps rather than being cut. Needs matplotlib (``pip install 'hybridsag[ab]'``);
    ImportError otherwise."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 3.8), dpi=100)
    FigureCanvasAgg(fig)
    left, middle, right = fig.subplots(1, 3)
    diffs = [q["difference"] or 0.0 for q in report["per_question"]]
    colors = ["#2b7bb9" if d > 0 else "#d95f02" if d < 0 else "#999999" for d in diffs]
    left.bar(range(len(diffs)), diffs, color=colors, width=1.0)
    left.axhline(0.0, color="black", linewidth=0.8)
    if report["mode"] == "interleave":
        a, b = report["arms"]
        left.set_title(_panel_title(f"per question: ({a} wins - {b} wins) / queries"), fontsize=9)
    else:
        left.set_title(_panel_title(f"per question: {report['running']['label']}"), fontsize=9)
    left.set_xlabel("questions, sorted")
    points = report["running"]["points"]
    if points:
        middle.plot([p[0] for p in points], [p[1] for p in points], color="#2b7bb9")
    middle.axhline(report["running"]["null"], color="black", linewidth=0.8, linestyle="--")
    middle.set_title(_panel_title(f"running: {report['running']['label']}"), fontsize=9)
    xlabel = "deciding queries" if report["mode"] == "interleave" else "queries"
    middle.set_xlabel(xlabel)
    running_p = report["running_p"]
    if running_p["points"]:
        right.plot(
            [p[0] for p in running_p["points"]],
            [max(p[1], P_FLOOR / 10) for p in running_p["points"]],
            color="#2b7bb9",
        )
    right.set_yscale("log")
    right.axhline(running_p["alpha"], color="#d95f02", linewidth=0.8, linestyle="--")
    right.set_title(
        _panel_title(f"running p-value: {running_p['label']} (alpha {running_p['alpha']} dashed)"),
        fontsize=9,
    )
    right.set_xlabel(xlabel)
    title = textwrap.fill(f"{report['experiment']}: {report['summary']}", width=190)
    fig.suptitle(title, fontsize=8)  # wrapped, never cut
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _panel_title(text: str) -> str:
    """A panel's title wrapped to its third of the figure (long arm names are not cut)."""
    return textwrap.fill(text, width=50)


def chart_fields() -> dict[str, Any]:
    """What a report says of its chart: ``chart`` is the chart's file name (``report.png``,
    written beside ``report.json`` by :func:`write_report`; the service draws the same chart at
    ``GET /v1/experiments/NAME/chart``), or None with a ``chart_note`` when matplotlib is
    missing. Looks for matplotlib without importing it."""
    if importlib.util.find_spec("matplotlib") is None:
        note = "no chart: matplotlib is missing; pip install 'hybridsag[ab]'"
        return {"chart": None, "chart_note": note}
    return {"chart": CHART_NAME}


def write_report(
    report: Mapping[str, Any], folder: Path, *, png: bytes | None = None
) -> dict[str, Any]:
    """Write ``report.json`` and the chart (``report.png``: ``png``, else drawn here) into
    ``folder``; returns the report with :func:`chart_fields` set (no chart without
    matplotlib)."""
    out = {**report, **chart_fields()}
    if out["chart"] is not None:
        _atomic_write(folder / CHART_NAME, png if png is not None else chart_png(report))
    text = json.dumps(out, indent=2, ensure_ascii=False, sort_keys=True) + "\n"
    _atomic_write(folder / REPORT_NAME, text.encode("utf-8"))
    return out


class ReportCache:
    """A thread-safe bounded LRU of reports and charts, each kept with the state of the event
    log it was computed at (its last seq).

    :meth:`get` returns the value kept for ``key`` when it was computed at ``state``, else
    computes it (replacing the older one); callers asking for the same key and state while it
    is being computed wait for that computation rather than start their own. At most ``size``
    keys are kept, the least recently used dropped first. :meth:`counts` says, per kind (the
    first item of a key) and outcome, how often a value was served from the cache (``hit``,
    also when another caller's computation was awaited) or computed (``miss``). Values are
    shared: callers must not change them.

    >>> cache = ReportCache(2)
    >>> cache.get(("report", "e", None), 7, lambda: {"queries": 1})
    {'queries': 1}
    >>> cache.get(("report", "e", None), 7, lambda: {"queries": 2}), cache.counts()
    ({'queries': 1}, {('report', 'miss'): 1, ('report', 'hit'): 1})
    """

    def __init__(self, size: int = REPORT_CACHE_SIZE) -> None:
        if size < 1:
            raise ValueError(f"a report cache keeps at least 1 entry, got size={size}")
        self.size = size
        self._lock = threading.Lock()
        self._kept: OrderedDict[Hashable, tuple[int, Any]] = OrderedDict()
        self._pending: dict[tuple[Hashable, int], Future[Any]] = {}
        self._counts: dict[tuple[str, str], int] = {}

    def counts(self) -> dict[tuple[str, str], int]:
        """``(kind, "hit" | "miss") -> `` calls of :meth:`get` so far (a copy)."""
        with self._lock:
            return dict(self._counts)

    def _count(self, key: tuple[Any, ...], outcome: str) -> None:
        name = (str(key[0]), outcome)
        self._counts[name] = self._counts.get(name, 0) + 1

    def get(self, key: tuple[Any, ...], state: int, compute: Callable[[], V]) -> V:
        """The value of ``key`` at log state ``state``: kept, awaited, or ``compute()``d (its
        error propagates to every caller waiting for it, and nothing is kept)."""
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None and kept[0] == state:
                self._kept.move_to_end(key)
                self._count(key, "hit")
                return kept[1]  # type: ignore[no-any-return]
            pending = self._pending.get((key, state))
            owner = pending is None
            if pending is None:
                pending = self._pending[(key, state)] = Future()
            self._count(key, "miss" if owner else "hit")
        if not owner:
            return pending.result()  # type: ignore[no-any-return]
        try:
            value = compute()
        except BaseException as exc:
            with self._lock:
                del self._pending[(key, state)]
            pending.set_exception(exc)
            raise
        with self._lock:
            kept = self._kept.get(key)
            if kept is None or kept[0] <= state:  # never replace a newer state with an older
                self._kept[key] = (state, value)
                self._kept.move_to_end(key)
                while len(self._kept) > self.size:
                    self._kept.popitem(last=False)
            del self._pending[(key, state)]
        pending.set_result(value)
        return value


def format_report(report: Mapping[str, Any]) -> str:
    """The report as ``hybridsag ab report`` prints it."""
    lines = [
        f"experiment {report['experiment']} ({report['mode']}, arms {', '.join(report['arms'])}): "
        f"{report['queries']} queries, {report['clicks']} clicks"
    ]
    header = f"  {'arm':<16}{'queries':>8}{'clicks':>8}   {'CTR (95% CI)':<24}{'MRR of clicks (95% CI)':<26}"
    lines.append(header)
    for name, s in report["per_arm"].items():
        ctr, mrr = s["ctr"], s["mrr"]

        def fmt(value: Any, ci: Any) -> str:
            if value is None:
                return "-"
            return f"{value:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")

        lines.append(
            f"  {name:<16}{s['queries']:>8}{s['clicks']:>8}   {fmt(ctr['share'], ctr['ci95']):<24}"
            f"{fmt(mrr['mean'], mrr['ci95']):<26}"
        )
    if report["mode"] == "interleave":
        il = report["interleaving"]
        a, b = report["arms"]
        lines.append(
            f"  interleaving: {a} won {il['wins'][a]}, {b} won {il['wins'][b]}, "
            f"{il['ties']} ties, {il['no_clicks']} without clicks; sign test "
            f"{format_p(il['sign_test_p'])}"
        )
    else:
        for pair, c in report["comparisons"].items():
            lines.append(
                f"  {pair}: difference {c['difference']} (95% CI {c['ci95']}), "
                f"{format_p(c['p_value'])}, Bonferroni {format_p(c['p_bonferroni'])}"
            )
    lines.append(report["summary"])
    return "\n".join(lines)
