"""Bad queries get a clear QueryError; FTS5 syntax in user text is searched as literal words."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hybridsag.errors import IngestError, QueryError
from hybridsag.paths.query import validate_query
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from hybridsag.records.filters import Filters

PATHS = ["bm25", "title"]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HybridSearch]:
    """One read-only index for the module (jieba's dictionary loads once, not per test)."""
    with pytest.MonkeyPatch.context() as mp:  # the same isolation as the autouse fixture
        for name in [n for n in os.environ if n.upper().startswith("HYBRIDSAG_")]:
            mp.delenv(name)
        mp.chdir(tmp_path_factory.mktemp("cwd"))
        settings = Settings(
            data_dir=tmp_path_factory.mktemp("bad-input"), embedding={"model": "none"}
        )
    hs = HybridSearch(settings)
    hs.ingest(
        "fox",
        "The quick brown fox: AND OR NOT NEAR title foo. Use E-1234 in v2.3.1 (see notes).",
        title="Foxes",
    )
    hs.ingest("dog", "A lazy dog sleeps all day.", title="Dogs")
    hs.ingest("zh", "我的喜好是爱吃鱼", title="我的喜好")
    try:
        yield hs
    finally:
        hs.close()


def _state(hs: HybridSearch) -> tuple[int, ...]:
    conn = hs.components.store.connection()
    return tuple(
        conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        for t in ("resources", "chunks", "chunks_fts", "titles_fts", "journal")
    )


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("\t\n\r ", "empty"),
        ("fox\x00dog", "NUL"),
        ("fox\x07dog", "'\\x07'"),
        ("\x1b[31mfox", "'\\x1b'"),
        ("fox\x7f", "'\\x7f'"),
        ("fox\x85", "'\\x85'"),
        (None, "string"),
        (42, "string"),
    ],
)
def test_bad_query_is_a_query_error_naming_the_problem(
    index: HybridSearch, query: object, named: str
) -> None:
    with pytest.raises(QueryError) as info:
        index.search(query, paths=PATHS)  # type: ignore[arg-type]
    assert named in str(info.value)


def test_over_long_query_default_limit(index: HybridSearch) -> None:
    assert index.settings.query.max_chars == 4096
    assert index.search("fox " * 1024, paths=PATHS).results  # 4,096 characters: fine
    with pytest.raises(QueryError) as info:
        index.search("fox " * 1024 + "x", paths=PATHS)
    assert "4097" in str(info.value) and "4096" in str(info.value)


def test_query_length_limit_is_a_setting(tmp_path: Path) -> None:
    s = Settings(data_dir=tmp_path / "d", embedding={"model": "none"}, query={"max_chars": 20})
    with HybridSearch(s) as hs:
        hs.ingest("doc", "fox text")
        assert hs.search("x" * 16 + " fox", paths=PATHS).results
        with pytest.raises(QueryError, match="21 characters, over the limit of 20"):
            hs.search("x" * 17 + " fox", paths=PATHS)


def test_tabs_and_newlines_are_whitespace_not_errors(index: HybridSearch) -> None:
    assert validate_query("\tquick\nfox\r\n", max_chars=100) == "quick\nfox"
    assert [r.resource_id for r in index.search("quick\tfox\n", paths=PATHS).results] == ["fox"]


@pytest.mark.parametrize(
    "query",
    [
        '"quick',
        'quick"',
        '"quick" "fox"',
        '""',
        "'",
        "quick AND fox",
        "quick OR",
        "NOT fox",
        "fox NOT",
        "AND",
        "OR",
        "NOT",
        "NEAR(a b)",
        "NEAR(quick fox, 2)",
        "quick NEAR/2 fox",
        "quick*",
        "*",
        "^quick",
        "^",
        "title:foo",
        "body:fox",
        "{title body}: fox",
        "a:b:c",
        ":",
        "-fox",
        "fox -dog",
        "-",
        "(quick",
        "quick)",
        "((fox",
        ")(",
        "fox + dog",
        '\\"',
        "e-1234",
        "-1234",
        "v2.3.1",
        ".fox.",
        "__init__",
        '我的"喜好',
        "喜好 OR 鱼*",
    ],
)
def test_fts5_syntax_is_searched_as_literal_words(index: HybridSearch, query: str) -> None:
    before = _state(index)
    resp = index.search(query, paths=PATHS)
    assert resp.degraded is False, resp.reasons  # no path failed on an FTS5 error
    assert resp.reasons == {}
    bm25 = index.run_path("bm25", query, limit=10, filters=Filters())
    assert all(h.rank == i for i, h in enumerate(bm25.hits, start=1))
    assert _state(index) == before


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("title:foo", "fox"),  # "title" and "foo" are words of the fox document
        ("NEAR(quick fox)", "fox"),
        ("quick*", "fox"),
        ("^quick", "fox"),
        ("-fox", "fox"),  # not a negation
        ("NOT fox", "fox"),
        ('"lazy', "dog"),
        ("(lazy", "dog"),
        ("lazy AND sleeps", "dog"),
        ("e-1234", "fox"),
        ('我的"喜好', "zh"),
    ],
)
def test_operators_do_not_change_what_is_found(
    index: HybridSearch, query: str, expected: str
) -> None:
    assert [r.resource_id for r in index.search(query, paths=["bm25"]).results][:1] == [expected]


def test_only_punctuation_or_operators_returns_an_empty_result(index: HybridSearch) -> None:
    for query in ("*", "^", ":", "-", ")(", '""', "AND", "NOT OR"):
        resp = index.search(query, paths=PATHS)
        assert resp.results == () and not resp.degraded, query


def test_index_stays_consistent_after_failures(index: HybridSearch) -> None:
    before = _state(index)
    for query in ("", "a\x00b", "x" * 5000, "\x07"):
        with pytest.raises(QueryError):
            index.search(query, paths=PATHS)
    for bad in ({"resource_id": ""}, {"resource_id": "x", "text": "a\x00b"}):
        with pytest.raises(IngestError):
            index.ingest(bad["resource_id"], bad.get("text", "text"))
    with pytest.raises(QueryError):
        index.search("fox", paths=["nope"])
    with pytest.raises(QueryError):
        index.search("fox", top_k=0, paths=PATHS)
    assert _state(index) == before
    conn = index.components.store.connection()
    conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
    assert [r.resource_id for r in index.search("lazy dog", paths=PATHS).results] == ["dog"]



@pytest.mark.parametrize(
    ("filters", "named"),
    [
        (["tenant"], "filters must be a mapping"),
        ("tenant", "filters must be a mapping"),
        ({"tenant": 5}, "filters.tenant must be a string"),
        ({"tenant": "t\udcff"}, "lone surrogate '\\udcff'"),
        ({"tenant": "t\x00"}, "control character '\\x00'"),
        ({"acl": 5}, "filters.acl must be a list"),
        ({"acl": ["ok", 7]}, "filters.acl tag must be a string"),
        ({"acl": ["\udc80"]}, "lone surrogate"),
        ({"acl": {"a": 1}}, "filters.acl must be a list"),
        ({"metadata": ["k"]}, "filters.metadata must be a mapping"),
        ({"metadata": {"k": [1]}}, "only str, int, float, bool"),
        ({"metadata": {"k": float("nan")}}, "finite"),
        ({"metadata": {"k": 2**64}}, "64-bit"),
        ({"metadata": {"k\udcff": 1}}, "is not allowed"),
        ({"metadata": {7: 1}}, "key 7 is not allowed"),
        ({"resource_ids": ["fox", None]}, "resource_ids entry must be a string"),
        ({"resource_ids": ["x" * 2000]}, "at most 1024"),
        ({"statuses": ["deleting"]}, "'deleting' is not searchable"),
        ({"statuses": [["ready"]]}, "is not searchable"),
        ({"tenant": "t", 3: "x"}, "unknown filter [3]"),
    ],
)
def test_every_malformed_filter_is_a_query_error_naming_it(
    index: HybridSearch, filters: object, named: str
) -> None:
    with pytest.raises(QueryError) as err:
        index.search("fox", paths=PATHS, filters=filters)  # type: ignore[arg-type]
    assert named in str(err.value)
    str(err.value).encode("utf-8")  # the message itself is valid UTF-8


def test_a_lone_surrogate_in_the_query_is_a_query_error(index: HybridSearch) -> None:
    with pytest.raises(QueryError, match=r"lone surrogate '\\udcff' at position 3"):
        index.search("fox\udcff", paths=PATHS)
