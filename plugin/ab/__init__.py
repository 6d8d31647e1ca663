"""A/B testing of retrieval paths: offline paired comparisons, online experiments with split
traffic or team-draft interleaving, an append-only event log, and reports.

- :mod:`hybridsag.ab.arms`: what an arm of ``eval --compare`` is;
- :mod:`hybridsag.ab.offline`: ``eval --compare`` and ``--grid`` (needs the ``ab`` extra: ranx);
- :mod:`hybridsag.ab.online`: :class:`Experiments`, arm assignment, impressions and feedback;
- :mod:`hybridsag.ab.interleave`: team-draft interleaving;
- :mod:`hybridsag.ab.events`: the :class:`EventStore` protocol and its SQLite store;
- :mod:`hybridsag.ab.report`: an experiment's report (per tenant or across tenants), its chart, and
  the cache that keeps both until the next event.

The names below are imported on first use (PEP 562 module ``__getattr__``): the CLI loads
``hybridsag.ab.cli`` to register the ``ab`` commands, which runs this ``__init__``, without
importing the event store, the experiments or the reports (nor the settings models they need).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybridsag.lazy import lazy_names

if TYPE_CHECKING:
    from hybridsag.ab.arms import Arm, parse_arms
    from hybridsag.ab.events import EventStore, SqliteEventStore, make_event_store
    from hybridsag.ab.interleave import team_draft
    from hybridsag.ab.online import Experiments, assign_arm
    from hybridsag.ab.report import build_report

#: module -> the public names it defines
_PUBLIC: dict[str, tuple[str, ...]] = {
    "hybridsag.ab.arms": ("Arm", "parse_arms"),
    "hybridsag.ab.events": ("EventStore", "SqliteEventStore", "make_event_store"),
    "hybridsag.ab.interleave": ("team_draft",),
    "hybridsag.ab.online": ("Experiments", "assign_arm"),
    "hybridsag.ab.report": ("build_report",),
}

__all__ = [
    "Arm",
    "EventStore",
    "Experiments",
    "SqliteEventStore",
    "assign_arm",
    "build_report",
    "make_event_store",
    "parse_arms",
    "team_draft",
]

__getattr__, __dir__ = lazy_names(__name__, globals(), _PUBLIC)
