"""Online experiments: arms by a stable hash of the caller, interleaving, impressions, feedback.

:class:`Experiments` holds the experiments of one deployment: those in ``ab.experiments`` and
those defined later (:meth:`Experiments.define`), with their start/stop state. Definitions and
state changes are events in the :class:`~hybridsag.ab.events.EventStore`, replayed on start, so
they survive a restart; so do impressions and feedback. An experiment of the settings has its
definition logged too (on start, when the log lacks it or holds another one, marked ``source:
settings``), so every experiment's definition is kept with its events: ``hybridsag ab report
NAME`` in a shell without those settings still finds it (the settings' own definition wins
where they have one; otherwise the last one logged).

A search under an experiment (:meth:`Experiments.search`):

- ``split``: the caller's id (a user or session id) is hashed with the experiment's name
  (SHA-256, the same on every process) to a point in [0, 1) that picks the arm by the arms'
  traffic shares: one caller always sees one arm;
- ``interleave``: both arms run and their lists are merged by team-draft interleaving
  (:mod:`hybridsag.ab.interleave`), each result recording the arm that contributed it; the coin
  flips are seeded by (experiment, caller, query), so a caller who repeats a query sees the
  same list.

Each such search is logged as an impression (experiment, arm, a fresh query id, the results and
their positions) and answered with the query id, the experiment and the arm. Feedback
(:meth:`Experiments.feedback`) names a query id and a position or chunk shown; an unknown query
id, or a result that was not shown, is an :class:`~hybridsag.errors.InputError`.

Reports (:meth:`Experiments.report`, :meth:`Experiments.chart`) count one tenant's traffic or,
with no tenant, every tenant's; they write nothing, and are kept in a
:class:`~hybridsag.ab.report.ReportCache` until the next event is logged.
:meth:`Experiments.write_report` writes report.json and report.png (the CLI's ``ab report``).
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from hybridsag.ab.events import EventStore, make_event_store
from hybridsag.ab.interleave import coin_seed, team_draft
from hybridsag.ab.report import ReportCache
from hybridsag.errors import ConfigError, InputError, NotFoundError
from hybridsag.paths import check_path_names, check_weights
from hybridsag.settings import ArmSettings, ExperimentSettings, Settings

if TYPE_CHECKING:
    from hybridsag.request import FeedbackOptions, SearchOptions
    from hybridsag.search import HybridSearch

__all__ = [
    "ExperimentState",
    "Experiments",
    "FEEDBACK_KINDS",
    "assign_arm",
    "check_arms",
    "unit_point",
]

#: Feedback a caller may send; reports count ``click``.
FEEDBACK_KINDS = ("click", "skip", "like", "dislike")


class UnknownQueryError(InputError):
    """Feedback for a query id the service never answered (or another tenant's)."""

    default_loc = ("body", "query_id")


class FeedbackError(InputError):
    """Feedback naming a result that was not shown."""


def unit_point(experiment: str, unit: str) -> float:
    """Where caller ``unit`` falls in [0, 1) for ``experiment``: SHA-256 of both, stable
    across processes and machines."""
    digest = hashlib.sha256(f"{experiment}\x1f{unit}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def assign_arm(experiment: ExperimentSettings, unit: str) -> ArmSettings:
    """The arm ``unit`` sees in a split experiment: the arm whose slice of [0, 1) (slices in
    arm order, sized by share) holds :func:`unit_point`."""
    point = unit_point(experiment.name, unit)
    total = sum(a.share for a in experiment.arms)
    edge = 0.0
    for arm in experiment.arms:
        edge += arm.share / total
        if point < edge:
            return arm
    return experiment.arms[-1]


def check_arms(experiment: ExperimentSettings) -> None:
    """Every arm's paths and weights name registered paths (ValueError names the experiment,
    the arm and the bad name)."""
    for arm in experiment.arms:
        where = f"experiment {experiment.name!r}, arm {arm.name!r}"
        if arm.paths is not None:
            check_path_names(arm.paths, where=f"{where}: paths")
        if arm.weights is not None:
            check_weights(arm.weights, where=f"{where}: weights")


def _unit_hash(unit: str) -> str:
    """What the log keeps of a caller's id: a hash, never the id itself."""
    return hashlib.sha256(unit.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ExperimentState:
    """An experiment's definition, whether it takes traffic, and where it was defined."""

    definition: ExperimentSettings
    active: bool
    source: str  # "settings" | "service"

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.definition.model_dump(mode="json"),
            "active": self.active,
            "source": self.source,
        }


class Experiments:
    """The experiments of a deployment over an :class:`EventStore` (see the module docstring).

    Safe to share between threads. ``store`` defaults to the one ``ab.event_store`` names; a
    store given here is not closed by :meth:`close`. ConfigError when an experiment of the
    settings names an unknown path (:func:`check_arms`).
    """

    def __init__(self, settings: Settings, *, store: EventStore | None = None) -> None:
        for e in settings.ab.experiments:
            try:
                check_arms(e)
            except ValueError as exc:
                raise ConfigError(f"ab.experiments: {exc}") from None
        self.settings = settings
        self._owns_store = store is None
        self.store: EventStore = store if store is not None else make_event_store(settings)
        self._lock = threading.Lock()
        #: reports and charts computed since the last event (:meth:`report`, :meth:`chart`)
        self.report_cache = ReportCache()
        self._in_settings = frozenset(e.name for e in settings.ab.experiments)
        self._states: dict[str, ExperimentState] = {
            e.name: ExperimentState(e, e.active, "settings") for e in settings.ab.experiments
        }
        logged: dict[str, Any] = {}  # each name's last logged definition
        for event in self.store.events(kind="experiment"):
            if event.body.get("action") == "define":
                logged[event.experiment] = event.body["definition"]
            self._apply(event.experiment, event.body)
        for e in settings.ab.experiments:  # kept with the events, for a shell without them
            definition = e.model_dump(mode="json")
            if logged.get(e.name) != definition:
                self.store.append(
                    "experiment",
                    e.name,
                    {"action": "define", "definition": definition, "source": "settings"},
                )

    def close(self) -> None:
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> Experiments:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- definitions and state -------------------------------------------------------------------

    def _apply(self, name: str, body: Mapping[str, Any]) -> None:
        action = body.get("action")
        if action == "define":
            if name in self._in_settings:
                return  # an experiment of these settings wins over the log's
            definition = ExperimentSettings.model_validate(body["definition"])
            source = "settings" if body.get("source") == "settings" else "service"
            self._states[name] = ExperimentState(definition, definition.active, source)
        elif action in ("start", "stop") and name in self._states:
            state = self._states[name]
            self._states[name] = ExperimentState(state.definition, action == "start", state.source)

    def list(self) -> list[ExperimentState]:
        """Every experiment, settings ones first, then in the order they were defined."""
        with self._lock:
            return list(self._states.values())

    def get(self, name: str) -> ExperimentState:
        """The experiment ``name``; NotFoundError lists the known ones."""
        with self._lock:
            state = self._states.get(name)
        if state is None:
            known = ", ".join(self._states) or "none"
            raise NotFoundError(f"no experiment {name!r}; known: {known}", loc=("path", "name"))
        return state

    def define(self, definition: ExperimentSettings) -> ExperimentState:
        """Add an experiment (logged, so it survives a restart); InputError when the name is
        taken or an arm names an unknown path."""
        try:
            check_arms(definition)
        except ValueError as exc:
            raise InputError(str(exc), loc=("body", "arms")) from None
        with self._lock:
            if definition.name in self._states:
                raise InputError(
                    f"an experiment named {definition.name!r} already exists", loc=("body", "name")
                )
            self.store.append(
                "experiment",
                definition.name,
                {"action": "define", "definition": definition.model_dump(mode="json")},
            )
            state = ExperimentState(definition, definition.active, "service")
            self._states[definition.name] = state
            return state

    def set_active(self, name: str, active: bool) -> ExperimentState:
        """Start (``active``) or stop an experiment; logged, so it survives a restart."""
        self.get(name)
        with self._lock:
            self.store.append("experiment", name, {"action": "start" if active else "stop"})
            self._apply(name, {"action": "start" if active else "stop"})
            return self._states[name]

    def running(self) -> list[ExperimentState]:
        return [s for s in self.list() if s.active]

    def applicable(self, experiment: str | None, unit: str | None) -> ExperimentState | None:
        """The experiment a search joins: the one it names (InputError when it is unknown or
        stopped, or when no caller id comes with it), else, when a caller id is given, the
        first running one; None for a plain search."""
        if experiment is not None:
            try:
                state = self.get(experiment)
            except NotFoundError as exc:
                raise InputError(str(exc), loc=("body", "experiment")) from None
            if not state.active:
                raise InputError(
                    f"experiment {experiment!r} is stopped", loc=("body", "experiment")
                )
            if unit is None:
                raise InputError(
                    f"experiment {experiment!r} needs a user (or session) id to assign an arm",
                    loc=("body", "user"),
                )
            return state
        if unit is None:
            return None
        running = self.running()
        return running[0] if running else None

    # -- searching ---------------------------------------------------------------------------------

    def search(
        self,
        hs: HybridSearch,
        query: str,
        options: SearchOptions,
        *,
        unit: str,
        experiment: str | None = None,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """Search ``query`` for caller ``unit`` under an experiment (see the module docstring)
        and log the impression: ``options`` with the arm's paths, weights and judge order. Returns
        the search response (``SearchResponse.as_dict()``) with ``query_id``, ``experiment``,
        ``arm`` and, for interleaving, ``teams`` (the arm of each result). Raises InputError
        when no experiment applies, and what ``HybridSearch.search`` raises."""
        state = self.applicable(experiment, unit)
        if state is None:
            raise InputError("no experiment is running", retriable=False)
        exp = state.definition
        query_id = uuid.uuid4().hex
        if exp.mode == "split":
            arm = assign_arm(exp, unit)
            out = hs.search(query, _arm_options(options, arm)).as_dict()
            out["teams"] = None
            arm_name = arm.name
        else:
            a, b = exp.arms
            ra = hs.search(query, _arm_options(options, a)).as_dict()
            rb = hs.search(query, _arm_options(options, b)).as_dict()
            limit = hs.settings.search.top_k if options.top_k is None else options.top_k
            out = _interleaved(ra, rb, a.name, b.name, exp.name, unit, query, limit)
            arm_name = "interleaved"
        out.update(query_id=query_id, experiment=exp.name, arm=arm_name)
        self.store.append(
            "impression",
            exp.name,
            {
                "mode": exp.mode,
                "arm": arm_name,
                "arms": [a.name for a in exp.arms],
                "unit": _unit_hash(unit),
                "tenant": tenant,
                "query": out["query"],
                "results": [
                    {
                        "position": i,
                        "chunk_id": r["chunk_id"],
                        "resource_id": r["resource_id"],
                        "team": out["teams"][i - 1] if out["teams"] else arm_name,
                    }
                    for i, r in enumerate(out["results"], start=1)
                ],
            },
            query_id=query_id,
        )
        return out

    # -- feedback ----------------------------------------------------------------------------------

    def feedback(
        self, query_id: str, options: FeedbackOptions, *, tenant: str | None = None
    ) -> dict[str, Any]:
        """Log feedback on a result of impression ``query_id``, named by the ``options``' 1-based
        ``position`` or its ``chunk_id``. A caller scoped to a ``tenant`` (a tenant token's; None:
        an admin's, unscoped) may only give feedback on that tenant's impressions. Returns the
        recorded event. InputError for an unknown query id, a result not shown, or an unknown
        ``kind``. The event's ``seq`` is its place in the log, or for a scoped caller in the
        tenant's view of it (the ``as_of_seq`` its tenant's report counts to)."""
        position, chunk_id, kind = options.position, options.chunk_id, options.kind
        scoped = tenant is not None
        if kind not in FEEDBACK_KINDS:
            valid = ", ".join(FEEDBACK_KINDS)
            raise FeedbackError(
                f"unknown feedback kind {kind!r}; valid: {valid}", loc=("body", "kind")
            )
        impression = self.store.impression(query_id)
        if impression is None or (scoped and impression.body.get("tenant") != tenant):
            raise UnknownQueryError(
                f"unknown query id {query_id!r}: feedback names the query_id of a search "
                "answered under an experiment"
            )
        results = impression.body["results"]
        if (position is None) == (chunk_id is None):
            raise FeedbackError("give one of position or chunk_id", loc=("body", "position"))
        if position is not None:
            if not 1 <= position <= len(results):
                raise FeedbackError(
                    f"position {position} was not shown: query {query_id!r} showed "
                    f"{len(results)} results",
                    loc=("body", "position"),
                )
            shown = results[position - 1]
        else:
            match = [r for r in results if r["chunk_id"] == chunk_id]
            if not match:
                raise FeedbackError(
                    f"chunk {chunk_id!r} was not shown for query {query_id!r}",
                    loc=("body", "chunk_id"),
                )
            shown = match[0]
        event = self.store.append(
            "feedback",
            impression.experiment,
            {
                "kind": kind,
                "position": shown["position"],
                "chunk_id": shown["chunk_id"],
                "team": shown["team"],
            },
            query_id=query_id,
        )
        seq = event.seq
        if scoped:  # its place in the tenant's view of the log, not the log's: a global seq
            # would tell the tenant how many events other tenants' traffic logged meanwhile
            from hybridsag.ab.report import tenant_events

            seq = len(tenant_events(self.store.events(experiment=impression.experiment), tenant or ""))
        return {
            "query_id": query_id,
            "experiment": impression.experiment,
            "seq": seq,
            "kind": kind,
            "position": shown["position"],
            "chunk_id": shown["chunk_id"],
            "arm": shown["team"],
        }

    # -- reports -------------------------------------------------------------------------------

    def report(self, name: str, *, tenant: str | None = None) -> dict[str, Any]:
        """The report of experiment ``name`` (:func:`hybridsag.ab.report.build_report`) over
        ``tenant``'s traffic, or with ``None`` every tenant's, with :func:`chart_fields`. Kept in
        :attr:`report_cache` until the next event is logged (in any experiment: the key is the
        log's last seq; on a PostgreSQL log that replicas share, an event committed after one
        with a higher seq shows from the next event on); writes nothing. NotFoundError for an
        unknown experiment."""
        state = self.get(name)
        return dict(self._cached_report(state.definition, tenant, self.store.last_seq()))

    def chart(self, name: str, *, tenant: str | None = None) -> bytes:
        """The PNG chart of :meth:`report` (same scope, same cache). NotFoundError for an unknown
        experiment, or when matplotlib is missing (the report's ``chart_note`` says so)."""
        from hybridsag.ab.report import chart_png

        state = self.get(name)
        seq = self.store.last_seq()
        report = self._cached_report(state.definition, tenant, seq)
        if report["chart"] is None:
            raise NotFoundError(
                f"no chart for experiment {name!r}: {report['chart_note']}", loc=("path", "name")
            )
        return self.report_cache.get(("chart", name, tenant), seq, lambda: chart_png(report))

    def write_report(self, name: str) -> dict[str, Any]:
        """:meth:`report` of every tenant's traffic, written as report.json beside its chart
        under ``<data_dir>/ab/<name>/`` (what ``hybridsag ab report`` does)."""
        from hybridsag.ab.report import write_report

        report = self.report(name)
        png = self.chart(name) if report["chart"] is not None else None
        return write_report(report, self.settings.ab_dir / name, png=png)

    def _cached_report(
        self, definition: ExperimentSettings, tenant: str | None, seq: int
    ) -> dict[str, Any]:
        from hybridsag.ab.report import build_report, chart_fields

        def compute() -> dict[str, Any]:
            report = build_report(
                definition,
                self.store.events(experiment=definition.name),
                tenant=tenant,
                alpha=self.settings.ab.alpha,
                min_queries=self.settings.ab.min_queries,
            )
            return {**report, **chart_fields()}

        return self.report_cache.get(("report", definition.name, tenant), seq, compute)


def _arm_options(options: SearchOptions, arm: ArmSettings) -> SearchOptions:
    """``options`` with the paths, weights and judge order ``arm`` sets."""
    return replace(options, paths=arm.paths, weights=arm.weights, judge_order=arm.judge_order)


def _interleaved(
    ra: dict[str, Any],
    rb: dict[str, Any],
    a: str,
    b: str,
    experiment: str,
    unit: str,
    query: str,
    limit: int,
) -> dict[str, Any]:
    """Two arms' responses merged by team draft into one response (results renumbered; the
    timings, usage and degraded reasons of both arms kept under their names)."""
    by_id = {r["chunk_id"]: r for r in rb["results"]}
    by_id.update({r["chunk_id"]: r for r in ra["results"]})
    merged = team_draft(
        [r["chunk_id"] for r in ra["results"]],
        [r["chunk_id"] for r in rb["results"]],
        limit=limit,
        seed=coin_seed(experiment, unit, query),
    )
    results = [{**by_id[cid], "rank": i} for i, cid in enumerate(merged.items, start=1)]
    names = {"a": a, "b": b}
    return {
        "query": ra["query"],
        "stages": {f"{a}/{k}": v for k, v in ra["stages"].items()}
        | {f"{b}/{k}": v for k, v in rb["stages"].items()},
        "paths": list(dict.fromkeys([*ra["paths"], *rb["paths"]])),
        "degraded": ra["degraded"] or rb["degraded"],
        "reasons": {f"{a}/{k}": v for k, v in ra["reasons"].items()}
        | {f"{b}/{k}": v for k, v in rb["reasons"].items()},
        "timings": {f"{a}/{k}": v for k, v in ra["timings"].items()}
        | {f"{b}/{k}": v for k, v in rb["timings"].items()},
        "usage": {a: ra["usage"], b: rb["usage"]},
        "results": results,
        "teams": [names[t] for t in merged.teams],
    }


def arm_names(experiment: ExperimentSettings) -> Sequence[str]:
    return [a.name for a in experiment.arms]
