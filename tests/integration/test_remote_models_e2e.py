"""Every remote endpoint kind end to end, through ``HybridSearch.search()``, ``hybridsag eval``
and the HTTP service (a real uvicorn on 127.0.0.1), against a real local server that speaks
each wire format (tests/modelserver.py): what the remote models did is in the response's usage,
in eval's metrics and in /metrics; a spent remote budget degrades the search instead of failing
it; and attach mode: a team's own collection with its embedding endpoint, beside hybridsag's
lexical and title paths."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings

from tests.cli_support import run
from tests.modelserver import HashEncoder, ModelServer
from tests.servicesupport import ADMIN, running_service
from tests.settings_support import clean_env_settings
from tests.teamcollection import create_team_collection

DOCS = {
    "budapest": ("Budapest", "Budapest is the capital city of Hungary; the Danube flows through it."),
    "vienna": ("Vienna", "Vienna is the capital of Austria and home of the waltz."),
    "cats": ("Domestic cats", "Domestic cats sleep for most of the day and hunt at night."),
    "rrf": ("Reciprocal rank fusion", "Reciprocal rank fusion merges ranked lists by rank."),
    "tea": ("Green tea", "Green tea is brewed from unoxidised leaves of the tea plant."),
    "rust": ("Rust language", "Rust is a systems programming language with ownership rules."),
}
QUERIES = {
    "q1": ("Which river flows through the capital city of Hungary?", ["budapest"]),
    "q2": ("How does reciprocal rank fusion merge lists?", ["rrf"]),
    "q3": ("When do domestic cats hunt?", ["cats"]),
}
#: (embedding backend, judge name, reranker api): every endpoint kind in four runs
KINDS = [
    ("openai", "reranker", "tei"),
    ("tei", "reranker", "cohere"),
    ("ollama", "reranker", "vllm"),
    ("tei", "chat", None),
]
IDS = ["openai+tei-rerank", "tei+cohere-rerank", "ollama+vllm-score", "tei+chat"]


@pytest.fixture(scope="module")
def server() -> Iterator[ModelServer]:
    with ModelServer() as s:
        yield s


def remote_fields(url: str, backend: str, judge: str, api: str | None) -> dict[str, Any]:
    """The settings of one kind, as keyword arguments of ``Settings``."""
    judge_cfg: dict[str, Any] = {"name": judge}
    if judge == "reranker":
        judge_cfg["reranker"] = {"api": api, "base_url": url, "model": "rerank-test"}
    else:
        judge_cfg["chat"] = {"base_url": url, "model": "chat-test"}
    return {
        "embedding": {"backend": backend, "model": "hash-64", "http": {"base_url": url}},
        "judge": judge_cfg,
    }


def remote_names(backend: str, judge: str) -> tuple[str, str]:
    return f"embedder/{backend}", f"judge/{judge}"


def ingest_all(hs: HybridSearch) -> None:
    for rid, (title, text) in DOCS.items():
        hs.ingest(rid, text, title=title)


# -- search() -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("backend", "judge", "api"), KINDS, ids=IDS)
def test_search_reports_each_remote_model(
    server: ModelServer, tmp_path: Path, backend: str, judge: str, api: str | None
) -> None:
    settings = Settings(data_dir=tmp_path / "data", **remote_fields(server.url, backend, judge, api))
    embedder_name, judge_name = remote_names(backend, judge)
    with HybridSearch(settings) as hs:
        ingest_all(hs)
        response = hs.search(QUERIES["q1"][0], top_k=3)
    assert not response.degraded, response.reasons
    assert response.results[0].resource_id == "budapest"
    top = response.results[0].paths
    assert "dense" in top and top["sag2"]["judge_p"] is not None
    remote = response.usage["remote"]
    assert set(remote) == {embedder_name, judge_name}
    assert remote[embedder_name]["calls"] == 1  # the query's one embedding
    assert remote[embedder_name]["model"] == "hash-64"
    assert remote[judge_name]["calls"] >= 1 and remote[judge_name]["ms"] > 0
    assert remote[judge_name]["input_tokens"] > 0
    assert "remote_budget" not in response.usage  # no budget set
    assert response.as_dict()["usage"]["remote"] == remote


@pytest.mark.parametrize("budget", [{"remote_budget_calls": 1}, {"remote_budget_ms": 1.0}])
def test_a_spent_budget_degrades_even_when_failures_raise(
    server: ModelServer, tmp_path: Path, budget: dict[str, Any]
) -> None:
    fields = remote_fields(server.url, "tei", "reranker", "tei")
    fields["judge"]["on_failure"] = "raise"
    fields["embedding"]["http"]["dimensions"] = 64
    settings = Settings(data_dir=tmp_path / "data", search=budget, **fields)
    with HybridSearch(settings) as hs:
        ingest_all(hs)
        response = hs.search(QUERIES["q2"][0])
    assert response.degraded and response.results  # an answer, from what had no remote call
    assert response.results[0].resource_id == "rrf"  # BM25 order of the SAG2 path, and title
    spent = response.usage["remote_budget"]
    assert spent["spent"] and ("remote_budget_calls=1" in spent["spent"]
                               or "remote_budget_ms=1" in spent["spent"])
    assert any("remote budget" in reason for reason in response.reasons.values())


# -- hybridsag eval -----------------------------------------------------------------------------


def beir_folder(root: Path) -> Path:
    folder = root / "tinyremote"
    folder.mkdir(parents=True)
    corpus = [{"_id": rid, "title": t, "text": x} for rid, (t, x) in DOCS.items()]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(c) + "\n" for c in corpus), "utf-8")
    queries = [{"_id": qid, "text": q} for qid, (q, _) in QUERIES.items()]
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), "utf-8")
    qrels = "query-id\tcorpus-id\tscore\n" + "".join(
        f"{qid}\t{g}\t1\n" for qid, (_, gold) in QUERIES.items() for g in gold
    )
    (folder / "qrels.tsv").write_text(qrels, "utf-8")
    return folder


def as_environment(fields: dict[str, Any], prefix: str = "HYBRIDSAG") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in fields.items():
        name = f"{prefix}__{key.upper()}" if prefix != "HYBRIDSAG" else f"{prefix}_{key.upper()}"
        if isinstance(value, dict):
            out.update(as_environment(value, name))
        else:
            out[name] = str(value)
    return out


@pytest.mark.parametrize(("backend", "judge", "api"), KINDS, ids=IDS)
def test_eval_reports_remote_calls_per_query(
    server: ModelServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
    judge: str,
    api: str | None,
) -> None:
    for name, value in as_environment(remote_fields(server.url, backend, judge, api)).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HYBRIDSAG_DATA_DIR", str(tmp_path / "data"))
    data, out = beir_folder(tmp_path), tmp_path / "report"
    code, text = run("eval", "--data", str(data), "--paths", "dense,sag2", "--json", "-q",
                     "--out", str(out))  # fmt: skip
    assert code == 0, text
    paths = json.loads(text)["paths"]
    embedder_name, judge_name = remote_names(backend, judge)
    assert paths["dense"][f"{embedder_name}.calls_per_query"] == 1.0
    assert paths["dense"]["recall@10"] == 1.0
    assert paths["sag2"][f"{judge_name}.calls_per_query"] >= 1.0
    assert paths["sag2"][f"{judge_name}.ms_per_query"] > 0
    assert paths["sag2"]["remote_calls_per_query"] >= paths["sag2"][f"{judge_name}.calls_per_query"]
    assert json.loads((out / "metrics.json").read_text("utf-8"))["paths"] == paths
    code, table = run("eval", "--data", str(data), "--paths", "sag2", "-q",
                      "--out", str(tmp_path / "table"))  # fmt: skip
    assert code == 0 and f"  remote a query: {judge_name} " in table, table


# -- the service --------------------------------------------------------------------------------


@pytest.mark.parametrize(("backend", "judge", "api"), KINDS, ids=IDS)
def test_the_service_reports_remote_models_and_counts_them(
    server: ModelServer, tmp_path: Path, backend: str, judge: str, api: str | None
) -> None:
    settings = clean_env_settings(
        data_dir=tmp_path / "data",
        server={"token": ADMIN, "reconciler": False},
        **remote_fields(server.url, backend, judge, api),
    )
    with HybridSearch(settings) as hs:
        ingest_all(hs)
    embedder_name, judge_name = remote_names(backend, judge)
    headers = {"Authorization": f"Bearer {ADMIN}"}
    with running_service(settings) as url, httpx.Client(base_url=url, headers=headers,
                                                        timeout=60) as client:
        answer = client.post("/v1/search", json={"query": QUERIES["q3"][0], "top_k": 3})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["results"][0]["resource_id"] == "cats" and not body["degraded"]
        remote = body["usage"]["remote"]
        assert remote[judge_name]["calls"] >= 1 and remote[embedder_name]["calls"] == 1
        metrics = client.get("/metrics").text
    assert f'hybridsag_remote_calls_total{{remote="{judge_name}"}}' in metrics
    assert f'hybridsag_remote_calls_total{{remote="{embedder_name}"}} 1.0' in metrics
    assert f'hybridsag_remote_seconds_count{{remote="{judge_name}"}} 1.0' in metrics
    assert f'hybridsag_remote_tokens_total{{kind="input",remote="{judge_name}"}}' in metrics


# -- attach mode ---------------------------------------------------------------------------------


def team_collection(settings: Settings, docs: dict[str, tuple[str, str]]) -> None:
    """A team's own collection in the Milvus Lite of ``settings``: its ids, its fields, its
    vectors made by its embedding endpoint (the server's hash model)."""
    rows = list(docs.items())
    vectors = HashEncoder()([f"{t}\n{x}" for _, (t, x) in rows])
    create_team_collection(settings, [
        {"id": f"team-{i}", "resource_id": rid, "text": x, "title": t, "vector": vec.tolist()}
        for i, ((rid, (t, x)), vec) in enumerate(zip(rows, vectors))
    ], dim=64)  # fmt: skip


def test_attach_mode_end_to_end(server: ModelServer, tmp_path: Path) -> None:
    """The team's collection (its ids, its vectors) and its embedding endpoint for the dense
    path; the same documents indexed into hybridsag, under the same resource ids, for the
    lexical and title paths; one fused search over all of them."""
    fields = remote_fields(server.url, "tei", "reranker", "tei")
    settings = Settings(
        data_dir=tmp_path / "data",
        milvus={"attach": True, "collection": "team_docs"},
        **fields,
    )
    team_collection(settings, DOCS)
    with HybridSearch(settings) as hs:
        ingest_all(hs)  # lexical rows and titles only: attach mode writes no vector
        assert hs.components.dense_index().count() == len(DOCS)
        dense = hs.run_path("dense", QUERIES["q3"][0], limit=3, filters=_no_filters())
        response = hs.search(QUERIES["q3"][0], top_k=3)
        title = hs.search("Domestic cats", top_k=1)
    assert dense.hits and dense.hits[0].detail == {"resource_id": "cats", "team_id": "team-2"}
    assert dense.hits[0].chunk_id.startswith("cats@")  # the team row stands for this chunk
    assert not response.degraded, response.reasons
    first = response.results[0]
    assert first.resource_id == "cats" and first.paths["dense"]["team_id"] == "team-2"
    assert {"dense", "sag2"} <= set(first.paths)
    assert title.results[0].resource_id == "cats" and "title" in title.results[0].paths
    assert dense.usage["remote"]["embedder/tei"]["calls"] == 1  # the team's endpoint
    assert "embedder/tei" not in response.usage["remote"]  # the same query: the memo answers


def _no_filters() -> Any:
    from hybridsag.records.filters import Filters

    return Filters()
