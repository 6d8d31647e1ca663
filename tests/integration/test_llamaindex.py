"""The LlamaIndex retriever through LlamaIndex's own entry points (``retrieve``, ``aretrieve``,
``RetrieverQueryEngine`` with LlamaIndex's ``MockLLM``: no network), in process and against a
real ``hybridsag serve`` on 127.0.0.1."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, NodeRelationship, NodeWithScore

from hybridsag.errors import ConfigError, QueryError
from hybridsag.backend import QueryValueError
from hybridsag.documents import make_document
from hybridsag.integrations.llamaindex import HybridSagRetriever
from hybridsag.search import HybridSearch
from tests.adaptersupport import (
    QUERY,
    READER,
    assert_result_metadata,
    sample_hs,
    sample_service,
    sample_settings,
    scoped,
)
from tests.settings_support import clean_env_settings

__all__ = ["sample_hs", "sample_service", "sample_settings"]


@pytest.fixture(scope="module")
def local(sample_hs: HybridSearch) -> HybridSagRetriever:
    return HybridSagRetriever(sample_hs, top_k=3)


@pytest.fixture(scope="module")
def remote(sample_service: str) -> HybridSagRetriever:
    return HybridSagRetriever(url=sample_service, token=READER, top_k=3)


def expected(hs: HybridSearch, query: str, side: str, **kwargs: Any) -> list[dict[str, Any]]:
    return hs.search(query, **scoped(side, **{"top_k": 3, **kwargs})).as_dict()["results"]


def check(nodes: list[NodeWithScore], results: list[dict[str, Any]]) -> None:
    assert nodes and [n.node.node_id for n in nodes] == [r["chunk_id"] for r in results]
    above = float("inf")
    for n, result in zip(nodes, results, strict=True):
        assert n.score == min(result["score"], above)  # the fused score, never above the last
        above = n.score
        assert_result_metadata(n.node.metadata, n.node.get_content(), result)
        assert n.node.relationships[NodeRelationship.SOURCE].node_id == result["resource_id"]


@pytest.mark.parametrize("side", ["local", "remote"])
def test_retrieve_and_aretrieve(
    side: str, request: pytest.FixtureRequest, sample_hs: HybridSearch
) -> None:
    retriever = request.getfixturevalue(side)
    for query in (QUERY, "how do I install it on Linux", "我的喜好"):
        check(retriever.retrieve(query), expected(sample_hs, query, side))
        check(asyncio.run(retriever.aretrieve(query)), expected(sample_hs, query, side))
    top = retriever.retrieve(QUERY)[0].node
    assert top.metadata["resource_id"] == "guide/agents.md"
    # what an LLM sees: what the chunk is and where, not how it was ranked
    seen = top.get_content(metadata_mode=MetadataMode.LLM)
    assert "resource_id: guide/agents.md" in seen and "heading_path: Agents" in seen
    assert "rrf_term" not in seen and "content_sha256" not in seen and "ReActAgent" in seen


def test_remote_aretrieve_sends_its_request_on_the_event_loop(remote: HybridSagRetriever) -> None:
    """With the loop's default executor shut, concurrent remote ``aretrieve`` calls answer."""

    async def run() -> list[list[NodeWithScore]]:
        refusing = ThreadPoolExecutor(max_workers=1)
        refusing.shutdown()
        asyncio.get_running_loop().set_default_executor(refusing)
        return list(await asyncio.gather(*(remote.aretrieve(QUERY) for _ in range(4))))

    answers = asyncio.run(run())
    assert answers[0] and len({tuple(n.node.node_id for n in a) for a in answers}) == 1


@pytest.mark.parametrize("side", ["local", "remote"])
def test_a_retriever_query_engine_with_the_mock_llm(
    side: str, request: pytest.FixtureRequest
) -> None:
    retriever = request.getfixturevalue(side)
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    nodes = retriever.retrieve(QUERY)
    for response in (engine.query(QUERY), asyncio.run(engine.aquery(QUERY))):
        assert [n.node.node_id for n in response.source_nodes] == [n.node.node_id for n in nodes]
        # MockLLM answers with the prompt: the retrieved text and its citation keys reached it
        answer = str(response)
        assert "class ReActAgent" in answer and "resource_id: guide/agents.md" in answer
        assert "rrf_term" not in answer


@pytest.mark.parametrize("side", ["local", "remote"])
def test_filters_and_paths(side: str, sample_hs: HybridSearch, sample_service: str) -> None:
    only = ["guide/naming.md", "reference/errors.md"]
    kwargs: dict[str, Any] = {"top_k": 10, "filters": {"resource_ids": only}, "paths": ["bm25"]}
    if side == "local":
        retriever = HybridSagRetriever(sample_hs, **kwargs)
    else:
        retriever = HybridSagRetriever(url=sample_service, token=READER, **kwargs)
    nodes = retriever.retrieve("error identifier")
    assert {n.node.metadata["resource_id"] for n in nodes} <= set(only)
    assert all(set(n.node.metadata["paths"]) == {"bm25"} for n in nodes)
    check(nodes, expected(sample_hs, "error identifier", side, **kwargs))


def test_bad_arguments_are_refused_at_construction(sample_hs: HybridSearch) -> None:
    cases = [
        ({"filters": {"colour": "red"}}, r"unknown filter \['colour'\]"),
        ({"filters": {"acl": "hr"}}, None),  # a lone tag is taken as a list of one: allowed
        ({"paths": ["nope"]}, "unknown path 'nope'; valid: bm25, sag2, dense, title"),
        ({"top_k": 0}, "top_k must be an integer in 1..1000, got 0"),
        ({"top_k": True}, "top_k must be an integer in 1..1000, got True"),
    ]
    for kwargs, message in cases:
        if message is None:
            HybridSagRetriever(sample_hs, **kwargs)
            continue
        with pytest.raises(QueryValueError, match=message) as caught:
            HybridSagRetriever(sample_hs, **kwargs)
        assert isinstance(caught.value, ValueError)
    with pytest.raises(ConfigError, match="give either hybrid_search"):
        HybridSagRetriever(sample_hs, url="http://127.0.0.1:9")


@pytest.mark.parametrize("side", ["local", "remote"])
def test_bad_calls_raise_a_value_error_with_hybridsags_message(
    side: str, request: pytest.FixtureRequest, sample_service: str
) -> None:
    retriever = request.getfixturevalue(side)
    for call in (lambda: retriever.retrieve(" "), lambda: asyncio.run(retriever.aretrieve(""))):
        with pytest.raises(QueryValueError, match="query is empty") as caught:
            call()
        assert isinstance(caught.value, ValueError) and isinstance(caught.value, QueryError)
    if side == "remote":
        bad_path = HybridSagRetriever(url=sample_service, token=READER, paths=["nope"])
        with pytest.raises(QueryValueError, match="unknown path 'nope'"):
            asyncio.run(bad_path.aretrieve(QUERY))


def test_node_scores_never_rise_down_the_list(sample_hs: HybridSearch) -> None:
    """A rule that lifts a result above one with a higher fused score (the 0.201 then 0.212
    of issue 28) leaves the nodes' scores non-increasing, so a score cutoff cuts the tail."""
    from llama_index.core.postprocessor import SimilarityPostprocessor

    from hybridsag.integrations.llamaindex import to_nodes

    results = [
        {**r, "score": score}
        for r, score in zip(sample_hs.search(QUERY, top_k=3).as_dict()["results"], (0.3, 0.201, 0.212))
    ]
    nodes = to_nodes(results)
    assert [n.score for n in nodes] == [0.3, 0.201, 0.201]
    assert [n.node.metadata["score"] for n in nodes] == [0.3, 0.201, 0.212]  # the fused ones
    kept = SimilarityPostprocessor(similarity_cutoff=0.205).postprocess_nodes(nodes)
    assert [n.node.node_id for n in kept] == [results[0]["chunk_id"]]  # a prefix, no hole


def test_empty_fields_are_left_out_of_what_the_llm_sees(tmp_path: Path) -> None:
    """No ``heading_path:`` line with nothing after it, no ``source_uri: None`` (issue 28)."""
    settings = clean_env_settings(data_dir=tmp_path / "data", embedding={"model": "none"})
    with HybridSearch(settings) as hs:
        hs.ingest_documents([make_document("plain", "The kestrel hovers over the field.")])
        (node,) = HybridSagRetriever(hs, top_k=1).retrieve("kestrel hovers")
    seen = node.node.get_content(metadata_mode=MetadataMode.LLM)
    assert "resource_id: plain" in seen and "kestrel" in seen
    assert "heading_path" not in seen and "source_uri" not in seen and "None" not in seen


@pytest.mark.parametrize("side", ["local", "remote"])
def test_every_node_carries_confidence_no_good_match_and_stale(
    side: str, request: pytest.FixtureRequest, sample_hs: HybridSearch
) -> None:
    """A pipeline gates on any node's metadata (issue 38: confidence and no_good_match were in
    no node); an LLM sees none of them."""
    retriever = request.getfixturevalue(side)
    response = sample_hs.search(QUERY, **scoped(side, top_k=3))
    nodes = retriever.retrieve(QUERY)
    assert nodes
    for n, result in zip(nodes, response.results, strict=True):
        assert n.node.metadata["confidence"] == response.confidence
        assert n.node.metadata["no_good_match"] is response.no_good_match is False
        assert n.node.metadata["stale"] is result.stale
        seen = n.node.get_content(metadata_mode=MetadataMode.LLM)
        assert "confidence" not in seen and "no_good_match" not in seen
