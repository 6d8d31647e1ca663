"""The LangChain retriever through LangChain's own entry points (``invoke``, ``batch``,
``ainvoke``, an LCEL chain), in process and against a real ``hybridsag serve`` on 127.0.0.1."""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.runnables import RunnableLambda
from pydantic import ValidationError

from hybridsag.errors import AuthError, QueryError
from hybridsag.backend import QueryValueError
from hybridsag.documents import make_document
from hybridsag.integrations.langchain import HybridSagRetriever
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
    return HybridSagRetriever(hybrid_search=sample_hs, top_k=3)


@pytest.fixture(scope="module")
def remote(sample_service: str) -> HybridSagRetriever:
    return HybridSagRetriever(url=sample_service, token=READER, top_k=3)


def expected(hs: HybridSearch, query: str, side: str, **kwargs: Any) -> list[dict[str, Any]]:
    return hs.search(query, **scoped(side, **{"top_k": 3, **kwargs})).as_dict()["results"]


def check(docs: list[Document], results: list[dict[str, Any]]) -> None:
    assert docs and [d.id for d in docs] == [r["chunk_id"] for r in results]
    for doc, result in zip(docs, results, strict=True):
        assert_result_metadata(doc.metadata, doc.page_content, result)


@pytest.mark.parametrize("side", ["local", "remote"])
def test_invoke_gives_documents_with_the_explain_metadata(
    side: str, request: pytest.FixtureRequest, sample_hs: HybridSearch
) -> None:
    retriever = request.getfixturevalue(side)
    docs = retriever.invoke(QUERY)
    check(docs, expected(sample_hs, QUERY, side))
    top = docs[0].metadata
    assert top["resource_id"] == "guide/agents.md" and "ReActAgent" in docs[0].page_content
    assert top["heading_path"].startswith("Agents") and top["start_line"] <= top["end_line"]
    # the lexical paths of the defaults (no model in these settings, so no dense path)
    assert top["why"] and set(top["paths"]) <= {"sag2", "title", "bm25"}


@pytest.mark.parametrize("side", ["local", "remote"])
def test_batch_ainvoke_and_abatch_answer_as_invoke(
    side: str, request: pytest.FixtureRequest, sample_hs: HybridSearch
) -> None:
    retriever = request.getfixturevalue(side)
    queries = [QUERY, "how do I install it on Linux", "我的喜好"]
    batches = retriever.batch(queries)
    for query, docs in zip(queries, batches, strict=True):
        check(docs, expected(sample_hs, query, side))

    async def both() -> list[list[Document]]:
        return list(await asyncio.gather(*(retriever.ainvoke(q) for q in queries)))

    for query, docs in zip(queries, asyncio.run(both()), strict=True):
        check(docs, expected(sample_hs, query, side))
    for query, docs in zip(queries, asyncio.run(retriever.abatch(queries)), strict=True):
        check(docs, expected(sample_hs, query, side))


def test_remote_ainvoke_sends_its_request_on_the_event_loop(remote: HybridSagRetriever) -> None:
    """No thread is involved: with the loop's default executor shut (any ``to_thread`` or
    ``run_in_executor`` would raise), concurrent remote ``ainvoke`` calls still answer."""

    async def run() -> list[list[Document]]:
        refusing = ThreadPoolExecutor(max_workers=1)
        refusing.shutdown()
        asyncio.get_running_loop().set_default_executor(refusing)
        return list(await asyncio.gather(*(remote.ainvoke(QUERY) for _ in range(4))))

    answers = asyncio.run(run())
    assert len({tuple(d.id for d in docs) for docs in answers}) == 1 and answers[0]


def test_in_an_lcel_chain(local: HybridSagRetriever, remote: HybridSagRetriever) -> None:
    def cite(docs: list[Document]) -> str:
        return "\n".join(
            f"[{d.metadata['resource_id']}:{d.metadata['start_line']}-{d.metadata['end_line']}] "
            f"{d.page_content.splitlines()[0]}"
            for d in docs
        )

    for retriever in (local, remote):
        chain = retriever | RunnableLambda(cite)
        text = chain.invoke(QUERY)
        first = retriever.invoke(QUERY)[0].metadata
        assert text.splitlines()[0].startswith(
            f"[guide/agents.md:{first['start_line']}-{first['end_line']}] "
        )
        assert asyncio.run(chain.ainvoke(QUERY)) == text
        assert chain.batch([QUERY, QUERY]) == [text, text]


@pytest.mark.parametrize("side", ["local", "remote"])
def test_filters_and_paths_fields(
    side: str, request: pytest.FixtureRequest, sample_hs: HybridSearch, sample_service: str
) -> None:
    only = ["guide/naming.md", "reference/errors.md"]
    kwargs: dict[str, Any] = {"top_k": 10, "filters": {"resource_ids": only}, "paths": ["bm25"]}
    if side == "local":
        retriever = HybridSagRetriever(hybrid_search=sample_hs, **kwargs)
    else:
        retriever = HybridSagRetriever(url=sample_service, token=READER, **kwargs)
    docs = retriever.invoke("error identifier")
    assert docs and {d.metadata["resource_id"] for d in docs} <= set(only)
    assert all(set(d.metadata["paths"]) == {"bm25"} for d in docs)
    check(docs, expected(sample_hs, "error identifier", side, **kwargs))


def test_bad_fields_are_refused_at_construction(sample_hs: HybridSearch) -> None:
    cases = [
        ({"filters": {"colour": "red"}}, "unknown filter ['colour']"),
        ({"filters": {"statuses": ["deleting"]}}, "'deleting' is not searchable"),
        ({"paths": ["nope"]}, "unknown path 'nope'; valid: bm25, sag2, dense, title"),
        ({"top_k": 0}, "greater than or equal to 1"),
    ]
    for fields, message in cases:
        with pytest.raises(ValidationError, match=re.escape(message)):
            HybridSagRetriever(hybrid_search=sample_hs, **fields)
    with pytest.raises(ValueError, match="give either hybrid_search"):
        HybridSagRetriever()
    with pytest.raises(ValueError, match="url must be an http"):
        HybridSagRetriever(url="ftp://example")


@pytest.mark.parametrize("side", ["local", "remote"])
def test_bad_calls_raise_a_value_error_with_hybridsags_message(
    side: str, request: pytest.FixtureRequest, sample_service: str
) -> None:
    retriever = request.getfixturevalue(side)
    for call in (lambda: retriever.invoke("  "), lambda: asyncio.run(retriever.ainvoke("\t"))):
        with pytest.raises(QueryValueError, match="query is empty") as caught:
            call()
        assert isinstance(caught.value, ValueError) and isinstance(caught.value, QueryError)
    if side == "remote":  # the service refuses what the client could not check
        bad_path = HybridSagRetriever(url=sample_service, token=READER, paths=["nope"])
        with pytest.raises(QueryValueError, match="unknown path 'nope'"):
            bad_path.invoke(QUERY)
        with pytest.raises(QueryValueError, match="unknown path 'nope'"):
            asyncio.run(bad_path.ainvoke(QUERY))


def test_a_refused_token_is_not_a_value_error(sample_service: str) -> None:
    retriever = HybridSagRetriever(url=sample_service, token="not-a-token-0123456789")
    with pytest.raises(AuthError) as caught:
        retriever.invoke(QUERY)
    assert not isinstance(caught.value, ValueError)
    with pytest.raises(AuthError):
        asyncio.run(retriever.ainvoke(QUERY))


def test_the_token_is_kept_secret(remote: HybridSagRetriever) -> None:
    assert READER not in repr(remote) and READER not in str(remote.model_dump())


def test_a_refused_token_argument_is_named_as_that_argument(sample_service: str) -> None:
    """A bad ``token=`` is said to be that argument, not the CLI's setting (issue 28)."""
    retriever = HybridSagRetriever(url=sample_service, token="not-a-token-0123456789")
    for call in (lambda: retriever.invoke(QUERY), lambda: asyncio.run(retriever.ainvoke(QUERY))):
        with pytest.raises(AuthError) as caught:
            call()
        assert "check the token= argument" in str(caught.value)
        assert "HYBRIDSAG_SERVER__CLIENT_TOKEN" not in str(caught.value)


def test_why_is_the_results_own_and_query_facts_are_said_once(
    local: HybridSagRetriever, sample_hs: HybridSearch
) -> None:
    """``metadata["why"]`` is each result's own explanation; the trust step's lines, the same
    for every result of a query, are the first Document's ``query_facts`` (issue 28)."""
    response = sample_hs.search(QUERY, top_k=3).as_dict()
    trust_lines = [line for line in response["results"][0]["why"] if line.startswith("trust ")]
    assert trust_lines and all(  # what used to be repeated on every Document
        trust_lines == [w for w in r["why"] if w.startswith("trust ")] for r in response["results"]
    )
    docs = local.invoke(QUERY)
    assert len(docs) == 3 and len({tuple(d.metadata["why"]) for d in docs}) == 3
    first_path = next(iter(docs[0].metadata["paths"]))
    assert docs[0].metadata["why"][0].startswith(f"{first_path} #")  # the CLI's words
    facts = docs[0].metadata["query_facts"]
    assert facts["trust"] == response["trust"] and facts["query"] == QUERY
    assert facts["paths"] == response["paths"]
    assert all("query_facts" not in d.metadata for d in docs[1:])


def test_empty_fields_are_left_out_of_the_metadata(tmp_path: Path) -> None:
    """A resource ingested with no source file and text under no heading: no blank
    ``heading_path`` and no ``source_uri: None`` in its Document (issue 28)."""
    settings = clean_env_settings(data_dir=tmp_path / "data", embedding={"model": "none"})
    with HybridSearch(settings) as hs:
        hs.ingest_documents([make_document("plain", "The kestrel hovers over the field.")])
        (doc,) = HybridSagRetriever(hybrid_search=hs, top_k=1).invoke("kestrel hovers")
        (result,) = hs.search("kestrel hovers", top_k=1).as_dict()["results"]
    assert result["heading_path"] == "" and result["source_uri"] is None  # what was left out
    assert "heading_path" not in doc.metadata and "source_uri" not in doc.metadata
    assert doc.metadata["resource_id"] == "plain" and doc.metadata["start_line"] == 1


@pytest.mark.parametrize("side", ["local", "remote"])
def test_every_document_carries_confidence_no_good_match_and_stale(
    side: str, request: pytest.FixtureRequest, sample_hs: HybridSearch
) -> None:
    """A pipeline gates on any Document's metadata, not on ``query_facts`` nested in the first
    one (issue 38): the response's confidence and no_good_match, and the result's stale mark."""
    retriever = request.getfixturevalue(side)
    for query in (QUERY, "how do I install it on Linux"):
        response = sample_hs.search(query, **scoped(side, top_k=3))
        docs = retriever.invoke(query)
        assert docs
        for doc, result in zip(docs, response.results, strict=True):
            assert doc.metadata["confidence"] == response.confidence
            assert doc.metadata["no_good_match"] is response.no_good_match
            assert doc.metadata["stale"] is result.stale
    assert retriever.invoke(QUERY)[0].metadata["no_good_match"] is False
