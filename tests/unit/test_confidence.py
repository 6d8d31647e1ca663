"""The response confidence (issue 27 item 5): the model that ships, its features, the weights
file's checks, and ``min_confidence`` refused out of 0..1 wherever a search takes it."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from hybridsag.backend import QueryValueError, SearchOptions
from hybridsag.cli import main
from hybridsag.errors import ConfigError, QueryError
from hybridsag.fusion.confidence import (
    FEATURE_NAMES,
    MONOTONE_FEATURES,
    ConfidenceModel,
    confidence_features,
    coverage,
)
from hybridsag.fusion.trust import QueryFacts
from hybridsag.fusion.types import ChunkView, Contribution, FusedHit, Hit
from hybridsag.output.agent import agent_text
from hybridsag.output.render import render_response
from hybridsag.paths.query_facts import load_confidence_model
from hybridsag.results import SearchResponse, SearchResult
from hybridsag.lexical.tokenizer import Tokenizer
from hybridsag.search import FusionInput, HybridSearch, confidence_step
from hybridsag.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
WEIGHTS = ROOT / "fusion" / "confidence_weights.json"

#: A mid-range search: every feature at a value a real search gives.
BASE = {
    "judge_p": 0.5, "judge_best": 0.6, "judge_missing": 0.0, "margin": 0.3, "by_rank": 0.0,
    "agreement": 0.5, "title_hit": 0.0, "coverage": 0.5, "coverage_missing": 0.0,
    "dense_cos": 0.4, "dense_best": 0.5, "dense_missing": 0.0, "reads": 1.0,
    "terms_in_index": 0.8, "idf": 0.4, "facts_missing": 0.0, "script_match": 1.0,
    "dense_share": 0.4,
}  # fmt: skip


def test_the_shipped_weights_name_exactly_the_features() -> None:
    data = json.loads(WEIGHTS.read_text("utf-8"))
    assert list(data["coefficients"]) == list(FEATURE_NAMES)
    assert set(BASE) == set(FEATURE_NAMES)
    model = load_confidence_model()
    assert model.source.startswith("scripts/fit_confidence.py") and "never on 2wiki" in model.source
    # the setting's default is the threshold the fit chose
    assert Settings().search.no_match_below == model.no_match_below


@pytest.mark.parametrize("feature", MONOTONE_FEATURES)
def test_the_shipped_model_never_drops_as_a_monotone_feature_grows(feature: str) -> None:
    model = load_confidence_model()
    probs = [model.predict({**BASE, feature: v / 20}) for v in range(21)]
    assert probs == sorted(probs)
    if feature == "judge_p":  # the judge's yes is evidence: it moves the confidence
        assert probs[-1] > probs[0]


def test_the_confidence_is_a_probability_whatever_the_features() -> None:
    model = load_confidence_model()
    rng = random.Random(27)
    for _ in range(500):
        features = {n: rng.uniform(-50.0, 50.0) for n in FEATURE_NAMES}
        assert 0.0 <= model.predict(features) <= 1.0
    with pytest.raises(ValueError, match="missing.*judge_p"):
        model.predict({n: 0.0 for n in FEATURE_NAMES if n != "judge_p"})


def _write(tmp_path: Path, coefficients: dict[str, float]) -> Path:
    path = tmp_path / "weights.json"
    path.write_text(json.dumps({"coefficients": coefficients, "bias": -1.0}), "utf-8")
    return path


def test_a_weights_file_of_another_feature_list_is_refused(tmp_path: Path) -> None:
    unknown = {**dict.fromkeys(FEATURE_NAMES, 0.1), "bm25_top": 1.0}
    with pytest.raises(ConfigError, match="unknown confidence features.*bm25_top"):
        load_confidence_model(_write(tmp_path, unknown))
    missing = {n: 0.1 for n in FEATURE_NAMES if n != "coverage"}
    with pytest.raises(ConfigError, match="no weight to the features.*coverage"):
        load_confidence_model(_write(tmp_path, missing))
    with pytest.raises(ConfigError, match="does not exist"):
        load_confidence_model(tmp_path / "nowhere.json")


def test_a_model_that_would_lower_its_confidence_for_a_judge_yes_is_refused() -> None:
    with pytest.raises(ValueError, match="'judge_p' is -0.5"):
        ConfidenceModel({**dict.fromkeys(FEATURE_NAMES, 0.0), "judge_p": -0.5}, bias=0.0)
    with pytest.raises(ValueError, match="no_match_below must be in 0..1, got 1.5"):
        ConfidenceModel(dict.fromkeys(FEATURE_NAMES, 0.0), bias=0.0, no_match_below=1.5)


def _fused(chunk: str, score: float, *paths: tuple[str, int, float | None]) -> FusedHit:
    contributions = tuple(
        Contribution(p, rank, 0.0, 0.0, 0.0, judge_p=jp) for p, rank, jp in paths
    )
    return FusedHit(chunk, 1, score, contributions)


VIEWS = {
    "a": ChunkView("a", "r1", "Reset", "", "Run the reset command to clear E-1234."),
    "b": ChunkView("b", "r2", "FAQ", "", "Frequently asked questions about billing."),
}


def test_a_bm25_only_search_gets_neutral_values_and_its_missing_indicators() -> None:
    runs = {"bm25": [Hit("a", "bm25", 1, 3.0, 3.0), Hit("b", "bm25", 2, 1.0, 1.0)]}
    fused = [_fused("a", 1.0, ("bm25", 1, None)), _fused("b", 0.25, ("bm25", 2, None))]
    f = confidence_features("reset E-1234", fused, runs, {"bm25": "lexical"}, VIEWS,
                            facts=None, trust=None, term_coverage=1.0, by_rank=False)  # fmt: skip
    assert f is not None and list(f) == list(FEATURE_NAMES)
    assert (f["judge_missing"], f["dense_missing"], f["facts_missing"]) == (1.0, 1.0, 1.0)
    assert (f["judge_p"], f["judge_best"], f["dense_cos"], f["dense_best"]) == (0, 0, 0, 0)
    assert f["margin"] == 0.75 and f["agreement"] == 1.0 and f["coverage"] == 1.0
    assert f["reads"] == 1.0 and f["dense_share"] == 0.0
    assert 0.0 <= load_confidence_model().predict(f) <= 1.0


def test_the_features_read_the_judge_the_dense_cosine_and_the_scripts() -> None:
    runs = {
        "sag2": [Hit("b", "sag2", 1, 0.9, 0.9, judge_p=0.9), Hit("a", "sag2", 2, 0.2, 0.2,
                                                                 judge_p=0.2)],
        "dense": [Hit("b", "dense", 1, 0.61, 0.61), Hit("c", "dense", 2, 0.30, 0.30)],
        "title": [Hit("a", "title", 1, 1.0, 1.0)],
    }
    kinds = {"sag2": "judged", "dense": "embedding", "title": "title"}
    fused = [_fused("a", 0.8, ("sag2", 2, 0.2), ("title", 1, None)),
             _fused("b", 0.6, ("sag2", 1, 0.9), ("dense", 1, None))]  # fmt: skip
    facts = QueryFacts(embedder_reads=0.5, terms=2, terms_in_index=1.0, idf=0.3)
    f = confidence_features("如何重置设备", fused, runs, kinds, VIEWS, facts=facts, trust=None,
                            term_coverage=None, by_rank=True)  # fmt: skip
    assert f is not None
    assert f["judge_p"] == 0.2 and f["judge_best"] == 0.9 and f["judge_missing"] == 0.0
    # "a" is not in the dense list: its last hit's cosine bounds it; both times reads
    assert f["dense_cos"] == pytest.approx(0.15) and f["dense_best"] == pytest.approx(0.305)
    assert f["agreement"] == 0.5 and f["title_hit"] == 1.0  # sag2 yes, dense no
    assert f["script_match"] == 0.0  # a Han query, a Latin top result
    assert (f["coverage"], f["coverage_missing"], f["by_rank"]) == (0.0, 1.0, 1.0)
    assert f["margin"] == pytest.approx(0.25)
    assert confidence_features("q", [], runs, kinds, VIEWS, facts=facts, trust=None,
                               term_coverage=None, by_rank=False) is None  # fmt: skip


def test_coverage_is_the_share_of_distinct_query_terms_found() -> None:
    assert coverage(["reset", "e-1234", "reset"], {"reset", "device"}) == 0.5
    assert coverage([], {"reset"}) is None


@pytest.mark.parametrize("bad", [1.5, -1, "x", True, float("nan")])
def test_a_bad_min_confidence_is_refused_by_the_search_naming_it(bad: object) -> None:
    with pytest.raises(QueryValueError, match=f"min_confidence must be a number in 0..1, got {bad!r}"):
        SearchOptions(min_confidence=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [1.5, -1, "x"])
def test_a_bad_min_confidence_is_refused_by_hybrid_search(tmp_path: Path, bad: object) -> None:
    with HybridSearch(Settings(data_dir=tmp_path / "d", embedding={"model": "none"})) as hs:
        hs.ingest("faq", "Reset the device to clear E-1234.", title="FAQ")
        with pytest.raises(QueryError, match=f"min_confidence must be a number in 0..1, got {bad!r}"):
            hs.search("reset", min_confidence=bad)  # type: ignore[arg-type]
        assert hs.search("reset", min_confidence=0.0).results  # 0 withholds nothing


@pytest.mark.parametrize("bad", ["1.5", "-1", "x"])
def test_a_bad_min_confidence_is_refused_by_the_cli_naming_it(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["search", "reset", f"--min-confidence={bad}"]) == 2
    assert f"--min-confidence: must be a number in 0..1, got {bad!r}" in capsys.readouterr().err


def _response(**kwargs: object) -> SearchResponse:
    result = SearchResult(
        rank=1, chunk_id="c1", resource_id="notes.md", title="Notes", heading_path="",
        text="Nothing about the question here.", start_line=1, end_line=2, byte_start=0,
        byte_end=30, content_sha256="0" * 64, source_uri=None, score=0.5, paths={}, rules=(),
        why=(),
    )  # fmt: skip
    return SearchResponse(query="量子色动力学", results=(result,), timings={"total_ms": 5.0},
                          paths=("bm25",), **kwargs)  # type: ignore[arg-type]  # fmt: skip


def test_the_outputs_say_no_good_match_below_the_threshold_and_keep_the_confidence() -> None:
    weak = _response(confidence=0.03, no_good_match=True)
    assert SearchResponse.from_dict(weak.as_dict()) == weak
    text = render_response(weak)
    head, line, *_ = text.splitlines()
    assert head.endswith("confidence 0.03")
    assert line.strip().startswith("no good match: confidence 0.03")
    assert " 1. Notes  (weak)" in text
    agent = agent_text(weak.as_dict())
    assert "note: no good match: confidence 0.03" in agent.splitlines()[1]
    good = _response(confidence=0.91)
    assert "no good match" not in render_response(good) + agent_text(good.as_dict())
    assert "(weak)" not in render_response(good)
    held = SearchResponse(query="q", results=(), timings={}, paths=("bm25",), confidence=0.03,
                          no_good_match=True, withheld="confidence 0.0300 is below "
                          "min_confidence 0.5: 3 results withheld")  # fmt: skip
    assert "no good match: confidence 0.0300 is below min_confidence 0.5" in render_response(held)
    assert "note: no good match: confidence 0.0300" in agent_text(held.as_dict())


def test_the_framework_adapters_response_facts_carry_the_confidence() -> None:
    from hybridsag.integrations import query_facts

    weak = _response(confidence=0.03, no_good_match=True).as_dict()
    facts = query_facts(weak)
    assert facts["confidence"] == 0.03 and facts["no_good_match"] is True
    assert "withheld" not in facts  # None: left out, as every empty fact is


def test_the_match_decides_no_good_match_apart_from_the_confidence(tmp_path: Path) -> None:
    """A model file with a match head: the confidence and the match are two models over the
    same features (a low confidence need not mean nothing matches); without one the match is
    the confidence, as a file of the one-model form was read."""
    zero = dict.fromkeys(FEATURE_NAMES, 0.0)
    path = tmp_path / "weights.json"
    path.write_text(json.dumps({
        "coefficients": {**zero, "judge_p": 4.0}, "bias": -2.0, "no_match_below": 0.4,
        "match": {"coefficients": {**zero, "coverage": 4.0}, "bias": -2.0},
    }), "utf-8")  # fmt: skip
    model = load_confidence_model(path)
    wrong_passage_right_topic = {**zero, "judge_p": 0.0, "coverage": 1.0}
    assert model.predict(wrong_passage_right_topic) == pytest.approx(0.1192, abs=1e-4)
    assert model.predict_match(wrong_passage_right_topic) == pytest.approx(0.8808, abs=1e-4)
    one = _write(tmp_path, {**zero, "judge_p": 4.0})
    plain = load_confidence_model(one)
    assert plain.match_coefficients is None
    assert plain.predict_match(wrong_passage_right_topic) == plain.predict(wrong_passage_right_topic)
    shipped = load_confidence_model()
    assert shipped.match_coefficients is not None and shipped.match_bias != shipped.bias
    with pytest.raises(ValueError, match="the match model gives no weight.*coverage"):
        ConfidenceModel(zero, 0.0, match_coefficients={n: 0.0 for n in zero if n != "coverage"})
    with pytest.raises(ValueError, match="match weight 'judge_p' is -1.0"):
        ConfidenceModel(zero, 0.0, match_coefficients={**zero, "judge_p": -1.0})


def test_coverage_reads_the_terms_the_index_was_searched_for() -> None:
    """A misspelt query whose words the lexical index respelled ("instal" searched as
    "install") is covered by a result holding the respelled words: the query facts carry the
    searched terms, and the confidence's coverage reads them, not the typed ones."""
    views = {"a": ChunkView("a", "r1", "Installing", "", "To install a package from a "
                            "requirements file, run pip install -r requirements.txt.")}
    runs = {"bm25": [Hit("a", "bm25", 1, 3.0, 3.0)]}
    fused = [_fused("a", 1.0, ("bm25", 1, None))]
    query = "instal packges from a requirments file"
    searched = ("install", "package", "requirements", "file")
    facts = QueryFacts(terms=4, terms_in_index=1.0, idf=0.3, searched_terms=searched)
    settings = Settings()
    model = load_confidence_model()
    _p, f = confidence_step(FusionInput(query, runs, views, facts), fused, None, settings.fusion,
                            Tokenizer(), model)  # fmt: skip
    assert f is not None and f["coverage"] == 1.0
    # without measured facts the typed words are read: the misspelt ones are not in the text
    _p, typed = confidence_step(FusionInput(query, runs, views, None), fused, None,
                                settings.fusion, Tokenizer(), model)  # fmt: skip
    assert typed is not None and typed["coverage"] < 0.5
