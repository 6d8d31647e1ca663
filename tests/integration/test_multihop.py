"""Multi-hop precision at the top: the SAG2 path puts the complete evidence set first.

Constructed cases over real SQLite FTS5 and the offline ``features`` judge with its packaged
weights, lexical only (``embedding.model = "none"``), so every order here is deterministic:

- a comparison whose two films each need their own passage, beside an album of the same name
  that the judge prefers to the film;
- a bridge question whose film passage names the director the answer is about;
- a bridge-comparison that needs both films and both directors;
- a targeted second hop: with no expansion round, the director's passage shares no word with
  the question, and only the name in the film's passage leads to it.

Each case first shows that the judge's order alone (``set_k = 0``, no second hop) misses the
set, then that the defaults rank it first.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hybridsag.documents import make_document
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from hybridsag.records.filters import Filters

CORPUS: dict[str, tuple[str, str]] = {
    "amber-road": (
        "Amber Road",
        "Amber Road is a 1950 British drama film directed by Harold Penn. It was released in "
        "March 1950.",
    ),
    "amber-road-album": (
        "Amber Road (album)",
        "Amber Road is the second album by the band Glass Harbour, released in 1998. Amber Road "
        "came out first in Japan.",
    ),
    "amber-road-festival": (
        "Amber Road Festival",
        "The Amber Road Festival is held each summer. The film Amber Road came out first at the "
        "festival, which screens a film released each year.",
    ),
    "crimson-lake": (
        "Crimson Lake",
        "Crimson Lake is a 1962 mystery film directed by Vera Lindqvist, set on a frozen lake.",
    ),
    "crimson-tide": ("Crimson Tide (band)", "Crimson Tide is a rock band from Leeds."),
    "harold-penn": (
        "Harold Penn",
        "Harold Penn (4 May 1901 - 1977) was an English director born in Bristol.",
    ),
    "vera-lindqvist": (
        "Vera Lindqvist",
        "Vera Lindqvist (born 1925) is a Swedish screenwriter and director from Uppsala.",
    ),
    "penn-station": ("Penn Station", "Penn Station is a railway station where a film was shot in 1950."),
    "directors-guild": (
        "Directors Guild",
        "The Directors Guild lists where each director was born and which film came out first.",
    ),
}

COMPARISON = "Which film came out first, Amber Road or Crimson Lake?"
BRIDGE = "Where was the director of film Amber Road born?"
BRIDGE_COMPARISON = "Which film has the director born earlier, Amber Road or Crimson Lake?"

#: the judge's order alone: no evidence-set selection, no second hop
JUDGE_ORDER: dict[str, Any] = {"set_k": 0, "gap_lookups": 0}


def _search(
    tmp_path: Path, name: str, corpus: dict[str, tuple[str, str]] = CORPUS, **sag2: Any
) -> HybridSearch:
    # the selection is exercised on the probabilities of the judge its weights were set with
    # (the packaged musique fit); the default judge's effect is measured by eval, not here
    hs = HybridSearch(
        Settings(
            data_dir=tmp_path / name,
            embedding={"model": "none"},
            judge={"weights_file": "musique"},
            sag2=sag2,
        )
    )
    hs.ingest_documents(
        [make_document(rid, text, title=title) for rid, (title, text) in corpus.items()],
        mode="passage",
    )
    return hs


@pytest.fixture(scope="module")
def searches(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, HybridSearch]]:
    root = tmp_path_factory.mktemp("multihop")
    made = {"default": _search(root, "default"), "judge": _search(root, "judge", **JUDGE_ORDER)}
    try:
        yield made
    finally:
        for hs in made.values():
            hs.close()


def _ranked(hs: HybridSearch, question: str, **kw: Any) -> list[str]:
    hits = hs.run_path("sag2", question, limit=10, filters=Filters(), **kw).hits
    return [str(h.detail["resource_id"]) for h in hits]


def test_comparison_puts_both_films_first(searches: dict[str, HybridSearch]) -> None:
    want = {"amber-road", "crimson-lake"}
    assert set(_ranked(searches["judge"], COMPARISON)[:2]) != want  # the album of the same name
    assert set(_ranked(searches["default"], COMPARISON)[:2]) == want


def test_bridge_puts_the_film_then_its_director_first(searches: dict[str, HybridSearch]) -> None:
    assert _ranked(searches["judge"], BRIDGE)[:2] != ["amber-road", "harold-penn"]
    assert _ranked(searches["default"], BRIDGE)[:2] == ["amber-road", "harold-penn"]


def test_bridge_comparison_puts_both_films_and_both_directors_first(
    searches: dict[str, HybridSearch],
) -> None:
    want = {"amber-road", "crimson-lake", "harold-penn", "vera-lindqvist"}
    assert set(_ranked(searches["judge"], BRIDGE_COMPARISON)[:4]) != want
    assert set(_ranked(searches["default"], BRIDGE_COMPARISON)[:4]) == want


def test_hits_say_which_need_they_were_taken_for(searches: dict[str, HybridSearch]) -> None:
    result = searches["default"].run_path("sag2", BRIDGE, limit=10, filters=Filters())
    first, second = result.hits[:2]
    assert (first.detail["evidence"], second.detail["evidence"]) == ("entity", "bridge")
    assert result.usage["shape"] == "entity+bridge"
    # the judge's probability is kept; the score never rises down the list
    assert second.judge_p == round(second.raw_score, 4) and second.raw_score < 0.1
    scores = [h.score for h in result.hits]
    assert scores == sorted(scores, reverse=True)


def test_fused_search_keeps_the_set_first(searches: dict[str, HybridSearch]) -> None:
    resp = searches["default"].search(BRIDGE, paths=["sag2", "bm25", "title"], top_k=5)
    assert [r.resource_id for r in resp.results[:2]] == ["amber-road", "harold-penn"]


def test_second_hop_finds_the_named_director_without_an_expansion_round(tmp_path: Path) -> None:
    """Round 0 only, and the director's passage holds no word of the question, so BM25
    never reaches it; the film's passage names him on the relation ("directed by"), the
    second hop looks his title up and the judge scores him with the pool."""
    corpus = dict(CORPUS)
    corpus["harold-penn"] = ("Harold Penn", "Harold Penn (1901 - 1977) was an English stage actor.")
    without = _search(tmp_path, "off", corpus, rounds=0, gap_lookups=0)
    with_hop = _search(tmp_path, "on", corpus, rounds=0)
    try:
        question = "Where was the director of film Amber Road born?"
        off = without.run_path("sag2", question, limit=10, filters=Filters())
        on = with_hop.run_path("sag2", question, limit=10, filters=Filters())
        assert "harold-penn" not in [h.detail["resource_id"] for h in off.hits]
        ids = [str(h.detail["resource_id"]) for h in on.hits]
        assert on.usage["second_hop"] >= 1
        assert len(on.usage["pool_per_round"]) == len(off.usage["pool_per_round"]) + 1
        assert ids[:2] == ["amber-road", "harold-penn"]
        penn = on.hits[1]
        assert penn.next_hop and penn.detail["round"] == 1 and penn.detail["bm25_rank"] == 0
        assert on.usage["rounds"] == 0
    finally:
        without.close()
        with_hop.close()


def test_second_hop_stays_off_without_a_named_gap(searches: dict[str, HybridSearch]) -> None:
    result = searches["default"].run_path(
        "sag2", "which festival screens a film each summer", limit=10, filters=Filters()
    )
    assert result.usage["second_hop"] == 0
    assert len(result.usage["pool_per_round"]) == 2  # round 0 and the expansion round only
