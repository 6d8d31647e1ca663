"""A click simulation over the real service picks the arm offline eval says is better, and
team-draft interleaving gets there on fewer queries than split traffic.

musique100 (shared data) is indexed lexical-only, so the suite needs no embedding: the pair is
sag2 vs bm25 (50 interleaved queries reach p < 0.05 with seed 16). The fused pairs (fused vs bm25
here took 130 interleaved queries and 130 split ones, most of the test's minute and a half; sag2
vs dense) run in benchmarks/ab_simulation.py over cached embeddings and several seeds. The
offline comparison's index is the one the service serves, so both see exactly the same
passages.

"Fewer queries" needs split traffic run only as far as interleaving went: the simulation is
deterministic (seeded questions, users, coin flips and clicks), so split traffic that is not
confident after the queries interleaving needed takes more than interleaving, which is what is
asserted. How many queries split traffic needs, over several seeds, is
benchmarks/ab_simulation.py's figure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hybridsag.ab.offline import compare_arms
from hybridsag.evaluation.harness import load_dataset
from hybridsag.settings import ExperimentSettings
from tests.absim import simulate
from tests.servicesupport import ADMIN, running_service
from tests.settings_support import clean_env_settings

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("HYBRIDSAG_SHARED_DATA", ROOT.parent / "shared" / "data"))
MUSIQUE = SHARED / "musique100"
if not MUSIQUE.is_dir():
    MUSIQUE = Path("/work/shared/data/musique100")

PAIRS = {
    "sag2-bm25": ({"name": "sag2", "paths": ["sag2"]}, {"name": "bm25", "paths": ["bm25"]}),
}
MAX_INTERLEAVED = 300
SEED = 16


def _experiments() -> list[ExperimentSettings]:
    """Per pair: its interleaved experiment, then its split-traffic one."""
    out = []
    for pair, (a, b) in PAIRS.items():
        for mode in ("interleave", "split"):
            out.append(
                ExperimentSettings.model_validate(
                    {"name": f"{pair}-{mode}", "mode": mode, "arms": [a, b]}
                )
            )
    return out


@pytest.mark.slow
@pytest.mark.skipif(not MUSIQUE.is_dir(), reason=f"no musique100 at {MUSIQUE}")
def test_simulated_clicks_pick_the_offline_winner(tmp_path: Path) -> None:
    base = clean_env_settings(data_dir=tmp_path / "data", embedding={"model": "none"})
    offline = compare_arms(base, MUSIQUE, "sag2,bm25", out=tmp_path / "offline", n_resamples=1000)
    ndcg = offline["pairs"]["sag2 vs bm25"]["ndcg@10"]["mean_difference"]
    better = {"sag2-bm25": "sag2" if ndcg > 0 else "bm25"}
    experiments = _experiments()
    served = clean_env_settings(
        data_dir=tmp_path / "offline" / "index",  # the index the offline comparison read
        embedding={"model": "none"},
        server={"token": ADMIN, "reconciler": False},
        ab={"experiments": [e.model_dump() for e in experiments], "min_queries": 20},
    )
    ds = load_dataset(MUSIQUE)
    with running_service(served, reconciler=False) as url:
        for interleave, split in zip(experiments[::2], experiments[1::2]):
            pair = interleave.name.rsplit("-", 1)[0]
            inter = simulate(url, ADMIN, interleave, ds.queries, ds.qrels, served.events_path,
                             max_queries=MAX_INTERLEAVED, seed=SEED)
            print(f"{interleave.name}: {inter.queries_to_confidence} queries to p < 0.05 "
                  f"(ran {inter.queries_run}); {inter.report['summary']}")
            reached = inter.queries_to_confidence
            assert reached is not None, f"{pair}: interleaving never reached p < 0.05"
            assert inter.report["winner"] == better[pair], (pair, inter.report["summary"])
            # split traffic on as many queries as interleaving needed: not confident yet
            sim = simulate(url, ADMIN, split, ds.queries, ds.qrels, served.events_path,
                           max_queries=reached, seed=SEED)
            print(f"{split.name}: {sim.queries_to_confidence} queries to p < 0.05 "
                  f"(ran {sim.queries_run}); {sim.report['summary']}")
            assert sim.queries_run == reached, (pair, sim.queries_run)
            assert sim.queries_to_confidence is None, (pair, reached, sim.report["summary"])
