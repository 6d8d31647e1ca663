"""A simulated user for A/B experiments over a running service, with a dataset's gold passages
as the click model (used by tests/integration/test_ab_simulation.py and
benchmarks/ab_simulation.py).

Each simulated query draws a question (seeded), searches it through ``POST /v1/search`` under an
experiment as a new user, and clicks the result at position r with probability
``examine(r) * attract``: ``examine(r) = 1 / r`` (a position-based model, Craswell et al., WSDM
2008), ``attract`` 0.9 for a gold passage and 0.05 for any other (noise clicks). Every
``check_every`` queries the experiment's report is rebuilt from the event store; the run stops
at the first check whose p-value (sign test for interleaving, Welch's t-test for split traffic)
is below ``alpha``, or after ``max_queries``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from hybridsag.ab.events import SqliteEventStore
from hybridsag.ab.report import build_report
from hybridsag.settings import ExperimentSettings

__all__ = ["GOLD_ATTRACT", "NOISE_ATTRACT", "Simulation", "simulate"]

GOLD_ATTRACT = 0.9
NOISE_ATTRACT = 0.05


@dataclass
class Simulation:
    """One simulated run of an experiment and the service's report at its end."""

    experiment: str
    mode: str
    #: queries until p < alpha (None: not within max_queries)
    queries_to_confidence: int | None
    queries_run: int
    p_value: float | None
    report: dict[str, Any]


def _p(report: Mapping[str, Any]) -> float | None:
    if report["mode"] == "interleave":
        return report["interleaving"]["sign_test_p"]
    tests = [c["p_value"] for c in report["comparisons"].values()]
    return tests[0] if tests else None


def simulate(
    url: str,
    token: str,
    definition: ExperimentSettings,
    questions: Sequence[tuple[str, str]],
    qrels: Mapping[str, frozenset[str]],
    events_path: Path,
    *,
    max_queries: int,
    seed: int,
    alpha: float = 0.05,
    check_every: int = 10,
) -> Simulation:
    """Run the simulated user against experiment ``definition`` (see the module docstring)."""
    rng = random.Random(seed)
    store = SqliteEventStore(events_path)
    reached: int | None = None
    p: float | None = None
    done = 0
    try:
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120
        ) as c:
            for i in range(1, max_queries + 1):
                qid, text = questions[rng.randrange(len(questions))]
                r = c.post(
                    "/v1/search",
                    json={
                        "query": text,
                        "user": f"{definition.name}-user-{seed}-{i}",
                        "experiment": definition.name,
                        "top_k": 10,
                        "explain": False,
                    },
                )
                r.raise_for_status()
                body = r.json()
                gold = qrels[qid]
                for position, result in enumerate(body["results"], start=1):
                    attract = GOLD_ATTRACT if result["resource_id"] in gold else NOISE_ATTRACT
                    if rng.random() < attract / position:
                        c.post(
                            "/v1/feedback",
                            json={"query_id": body["query_id"], "position": position},
                        ).raise_for_status()
                done = i
                if i % check_every == 0:
                    report = build_report(
                        definition, store.events(experiment=definition.name), min_queries=1
                    )
                    p = _p(report)
                    if p is not None and p < alpha and report["winner"] is not None:
                        reached = i
                        break
            final = c.get(f"/v1/experiments/{definition.name}/report")
            final.raise_for_status()
    finally:
        store.close()
    return Simulation(definition.name, definition.mode, reached, done, p, final.json())
