"""One request from the edge to the core (issue 41): a search's options are one frozen
:class:`~hybridsag.request.SearchOptions`, checked once when built, that every face passes whole
to ``HybridSearch.search(query, options)``; the keyword form builds the same object."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from hybridsag import SearchOptions
from hybridsag.backend import LocalBackend
from hybridsag.errors import InputError, QueryError
from hybridsag.request import FolderOptions, ListingOptions, QueryValueError
from hybridsag.results import SearchResponse
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"top_k": 0}, "top_k must be an integer in 1..1000, got 0"),
        ({"top_k": "10"}, "top_k must be an integer in 1..1000, got '10'"),
        ({"weights": {"vector": 1.0}}, "unknown path 'vector' in weights"),
        ({"weights": {"bm25": -1}}, r"weights\['bm25'\]=-1 must be a number in 0..100"),
        ({"judge_order": "yes"}, "judge_order must be true or false, got 'yes'"),
        ({"min_confidence": 2}, "min_confidence must be a number in 0..1, got 2"),
        ({"filters": {"colour": "red"}}, r"unknown filter \['colour'\]"),
    ],
)
def test_bad_options_are_refused_where_they_are_built_naming_the_value(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(QueryValueError, match=message) as info:
        SearchOptions(**fields)  # type: ignore[arg-type]
    assert isinstance(info.value, QueryError) and isinstance(info.value, ValueError)


def test_options_are_frozen_and_keep_paths_as_a_tuple() -> None:
    options = SearchOptions(top_k=3, paths="bm25, title")
    assert options.paths == ("bm25", "title")
    assert SearchOptions(paths=["title"]).paths == ("title",)
    assert SearchOptions().top_k is None  # the searching side's search.top_k
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.top_k = 4  # type: ignore[misc]
    with pytest.raises(QueryValueError, match="top_k must be an integer"):
        dataclasses.replace(options, top_k=0)  # a copy is checked again


@pytest.fixture(scope="module")
def hs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HybridSearch]:
    data = tmp_path_factory.mktemp("options") / "d"
    settings = Settings(data_dir=Path(data), embedding={"model": "none"})
    with HybridSearch(settings) as search:
        search.ingest("faq", "Reset the device to clear E-1234.", title="FAQ")
        search.ingest("howto", "Pair the device over bluetooth, then reset it.", title="Howto")
        yield search


def _ids(resp: SearchResponse) -> list[str]:
    return [r.chunk_id for r in resp.results]


def test_the_search_takes_one_options_object_and_the_keywords_build_the_same(
    hs: HybridSearch,
) -> None:
    options = SearchOptions(top_k=1, paths=("bm25",), explain=False)
    by_options = hs.search("reset device", options)
    by_keywords = hs.search("reset device", top_k=1, paths=["bm25"], explain=False)
    assert _ids(by_options) == _ids(by_keywords) and len(by_options.results) == 1
    assert by_options.paths == by_keywords.paths == ("bm25",)
    assert by_options.results[0].why == ()
    # keywords given with options replace those fields of it
    assert len(hs.search("reset device", options, top_k=2).results) == 2


def test_a_keyword_that_is_no_option_is_a_type_error(hs: HybridSearch) -> None:
    with pytest.raises(TypeError, match="topk"):
        hs.search("reset", topk=3)


def test_the_local_backend_hands_the_typed_response_on(hs: HybridSearch) -> None:
    """No dict round trip in process: the face gets the response the search made."""
    backend = LocalBackend(hs)
    resp = backend.search("reset device", SearchOptions(top_k=2, paths=("bm25",)))
    assert isinstance(resp, SearchResponse)
    assert _ids(resp) == _ids(hs.search("reset device", top_k=2, paths=["bm25"]))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"status": "gone"}, "unknown status 'gone'; valid: indexing, ready"),
        ({"limit": 0}, "limit must be a positive integer, got 0"),
        ({"limit": True}, "limit must be a positive integer, got True"),
    ],
)
def test_a_listing_is_checked_where_it_is_built(fields: dict[str, object], message: str) -> None:
    """A listing's options are one checked object too (fails before: no ListingOptions)."""
    with pytest.raises(InputError, match=message):
        ListingOptions(**fields)  # type: ignore[arg-type]
    assert ListingOptions(status="ready").statuses == ("ready",)
    assert ListingOptions().statuses is None


def test_a_folder_s_options_are_checked_where_they_are_built() -> None:
    assert FolderOptions(acl=["staff", "ops"]).acl == ("staff", "ops")
    with pytest.raises(QueryError, match="filters.tenant 't\\\\x00' holds control character"):
        FolderOptions(tenant="t\x00")
    with pytest.raises(QueryError, match="filters.acl"):
        FolderOptions(acl=("ok", "\x01"))


def test_listing_takes_one_options_object_and_the_keywords_build_the_same(
    hs: HybridSearch,
) -> None:
    whole = [s.record.resource_id for s in hs.list_resources(ListingOptions(limit=1))]
    assert whole == [s.record.resource_id for s in hs.list_resources(limit=1)] == ["faq"]
    backend = LocalBackend(hs)
    rows = backend.list_resources(ListingOptions(prefix="how"))
    assert [r["resource_id"] for r in rows] == ["howto"]
    assert backend.list_resources(ListingOptions(prefix="how"), limit=1) == rows
    with pytest.raises(TypeError, match="stat"):
        hs.list_resources(stat="ready")


def test_the_client_sends_one_options_object_as_the_keywords_would() -> None:
    """ServiceClient/AsyncServiceClient take a SearchOptions (keywords kept) and build one body
    (fails before: the client took keywords only); a bad option never leaves the client."""
    import asyncio

    import httpx

    from hybridsag.client import AsyncServiceClient, ServiceClient, search_body

    sent: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return httpx.Response(200, json={"results": []}, text=None)

    options = SearchOptions(top_k=2, paths="bm25", filters={"acl": ("a",)}, explain=False)
    assert search_body("q", options) == search_body(
        "q", top_k=2, paths=["bm25"], filters={"acl": ["a"]}, explain=False
    ) == {"query": "q", "explain": False, "top_k": 2, "paths": ["bm25"], "filters": {"acl": ["a"]}}
    with ServiceClient("http://svc", transport=httpx.MockTransport(answer)) as c:
        c.search("q", options)
        c.search("q", top_k=2, paths=["bm25"], filters={"acl": ["a"]}, explain=False)
        with pytest.raises(QueryValueError, match="top_k must be an integer"):
            c.search("q", options, top_k=0)

    async def run() -> None:
        transport = httpx.MockTransport(answer)
        async with AsyncServiceClient("http://svc", transport=transport) as c:
            await c.search("q", options)

    asyncio.run(run())
    assert len(sent) == 3 and sent[0] == sent[1] == sent[2]
