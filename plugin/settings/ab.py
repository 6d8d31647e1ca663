"""The settings of A/B experiments (hybridsag.ab)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from hybridsag.settings.base import Section

__all__ = [
    "EXPERIMENT_NAME_PATTERN",
    "ABSettings",
    "ArmSettings",
    "ExperimentSettings",
]


#: An experiment's or an arm's name: it appears in URLs, file names and reports.
EXPERIMENT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class ArmSettings(Section):
    """One arm of an online experiment: what a search of this arm runs, as the per-call
    arguments of ``HybridSearch.search`` (``paths``: registered path names, None for
    ``search.paths``; ``weights``: fusion weights, None for ``fusion.weights``; ``judge_order``:
    None for ``fusion.judge_order``), and ``share``, its relative share of the traffic in a
    ``split`` experiment (shares are normalised; an interleaving experiment ignores them).
    Path and weight names are checked against the registries where the experiment is loaded
    (``hybridsag.ab.online.check_arms``)."""

    #: the arm's name, unique in its experiment
    name: str = Field(..., pattern=EXPERIMENT_NAME_PATTERN)
    #: registered path names; None: ``search.paths``
    paths: tuple[str, ...] | None = None
    #: fusion weights; None: ``fusion.weights``
    weights: dict[str, float] | None = None
    #: None: ``fusion.judge_order``
    judge_order: bool | None = None
    #: its relative share of a ``split`` experiment's traffic
    share: float = Field(1.0, gt=0.0, le=1000.0)

    @field_validator("paths")
    @classmethod
    def _check_paths(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and not value:
            raise ValueError("an arm's paths must name at least one path (or be left out)")
        return value


class ExperimentSettings(Section):
    """An online experiment (``hybridsag.ab``): its ``name``, its ``arms`` and its ``mode``.

    ``split``: each caller (a user or session id) is assigned one arm by a stable hash, in
    proportion to the arms' shares, and sees that arm's results. ``interleave``: exactly two
    arms; every caller sees one list merged from both by team-draft interleaving. ``active``:
    whether it takes traffic when the service starts (the service's start and stop calls
    override it and are remembered)."""

    #: the experiment's name, unique
    name: str = Field(..., pattern=EXPERIMENT_NAME_PATTERN)
    #: ``split`` (one arm per caller) or ``interleave`` (two arms merged)
    mode: Literal["split", "interleave"] = "split"
    #: 2 to 16 arms with distinct names
    arms: tuple[ArmSettings, ...] = Field(..., min_length=2, max_length=16)
    #: takes traffic when the service starts
    active: bool = True
    #: what it tests, for its reports
    description: str = Field("", max_length=2000)

    @model_validator(mode="after")
    def _check(self) -> ExperimentSettings:
        names = [a.name for a in self.arms]
        if len(set(names)) != len(names):
            raise ValueError(f"experiment {self.name!r}: arm names must differ, got {names}")
        if self.mode == "interleave" and len(self.arms) != 2:
            raise ValueError(
                f"experiment {self.name!r}: interleaving merges exactly 2 arms, got {len(names)}"
            )
        return self


class ABSettings(Section):
    """A/B testing (``hybridsag.ab``): experiments defined here (more can be defined through
    the service), the event store of impressions and feedback (``event_store``: ``auto``, the
    system of record when ``store.url`` is set (replicas share one log) and the SQLite file
    otherwise, or a name from ``hybridsag.ab.events.EVENT_STORES``: ``sqlite``, ``store``;
    ``events_path``: the SQLite file, default ``<data_dir>/events.sqlite3``), and what a report
    calls enough evidence: a p-value below
    ``alpha`` over at least ``min_queries`` deciding queries per arm."""

    experiments: tuple[ExperimentSettings, ...] = ()
    event_store: str = "auto"
    events_path: Path | None = None
    alpha: float = Field(0.05, gt=0.0, lt=0.5)
    min_queries: int = Field(30, ge=1, le=1_000_000)

    @field_validator("experiments")
    @classmethod
    def _unique(cls, value: tuple[ExperimentSettings, ...]) -> tuple[ExperimentSettings, ...]:
        names = [e.name for e in value]
        if len(set(names)) != len(names):
            raise ValueError(f"ab.experiments: names must differ, got {names}")
        return value
