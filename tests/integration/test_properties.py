"""Property-based tests (hypothesis) of the edges hostile input reaches first.

For any generated input the query validator, the filters, document validation, the FTS5 query
builder and a whole lexical search end in a result or a :class:`HybridSagError`: never another
exception, never a hang (each example has a deadline), and what they return or say is valid
UTF-8. Example counts are bounded and the runs derandomized (the same examples every run).

Real SQLite (an in-memory FTS5 table and a real lexical-only index); the dense path is off.
"""

from __future__ import annotations

import io
import json
import math
import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridsag.cli import main
from hybridsag.vectors.contract import DenseFilter
from hybridsag.vectors.milvus_dense import filter_expression
from hybridsag.documents import make_document
from hybridsag.errors import HybridSagError, QueryError
from hybridsag.lexical.queries import build_match, quote_term
from hybridsag.paths.query import validate_query
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from hybridsag.records.filters import Filters
from hybridsag.records.rows import ResourceRecord
from hybridsag.lexical.tokenizer import FTS_TOKENIZE

#: derandomized (the same examples every run), no example database, a deadline per example
#: far above what any of these takes (so a slow machine is not a failure, a hang is)
BOUNDED = settings(
    derandomize=True,
    database=None,
    deadline=timedelta(seconds=5),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def bounded(examples: int) -> settings:
    """:data:`BOUNDED` with ``examples`` examples."""
    return settings(BOUNDED, max_examples=examples)

#: Any text, lone surrogates (what bytes that are not UTF-8 become) and control characters in.
ANY_TEXT = st.text(
    alphabet=st.characters(codec=None, categories=None), max_size=300
) | st.sampled_from(
    [
        "", " ", "\x00", "fox\udcff", "\ud800", '"', '""', "*", "a*", "NEAR(a b)", "a OR b",
        "-a", "^a", "title:x", "{title}: a", "(", ")", "AND", "\\", "\u202e", "\ufeff",
        "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "我的喜好", "x" * 5000, "💩" * 50, "\u0301" * 30,
    ]
)
#: JSON-like values of any shape, as a caller (HTTP, CLI, Python) may hand them in.
JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(ANY_TEXT | st.integers(), inner, max_size=4)
    | st.tuples(inner, inner)
    | st.frozensets(st.integers() | st.text(max_size=5), max_size=3),
    max_leaves=12,
)
FILTER_KEYS = st.sampled_from(["tenant", "acl", "metadata", "resource_ids", "statuses"])


def _utf8(text: str) -> str:
    text.encode("utf-8")  # strict: raises on a lone surrogate
    return text


# -- the query validator ---------------------------------------------------------------------


@bounded(400)
@given(query=ANY_TEXT | JSONISH, max_chars=st.integers(min_value=1, max_value=8192))
def test_validate_query_returns_utf8_text_or_a_query_error(query: Any, max_chars: int) -> None:
    try:
        out = validate_query(query, max_chars=max_chars)
    except QueryError as exc:
        _utf8(str(exc))
        return
    assert isinstance(out, str) and out and out == out.strip() and len(out) <= max_chars
    _utf8(out)


# -- filters -------------------------------------------------------------------------------------


RESOURCES = sqlite3.connect(":memory:", check_same_thread=False)
RESOURCES.execute(
    "CREATE TABLE resources(resource_id TEXT, tenant TEXT, acl TEXT, metadata TEXT, status TEXT)"
)
RESOURCES.execute(  # the key of acme's r1 (hybridsag.records.store.resource_key)
    """INSERT INTO resources VALUES ('acme' || char(31) || 'r1', 'acme', '["eng"]',
        '{"k": 1, "s": "x"}', 'ready')"""
)
RECORD = ResourceRecord(
    "r1", "T", "t", None, None, None, "", "acme", ("eng",), {"k": 1, "s": "x"}, "ready", 1,
    None, 0.0, 0.0, None,
)


@bounded(500)
@given(data=st.dictionaries(FILTER_KEYS | ANY_TEXT, JSONISH, max_size=5) | JSONISH)
def test_filters_build_or_raise_a_query_error_and_always_run(data: Any) -> None:
    try:
        flt = Filters.from_mapping(data)
    except QueryError as exc:
        _utf8(str(exc))
        return
    where, params = flt.sql("r")
    rows = RESOURCES.execute(f"SELECT resource_id FROM resources r WHERE {where}", params)
    found = [row[0] for row in rows]
    assert found == ([RECORD.key] if flt.allows(RECORD) else [])  # SQL and Python agree
    expr = filter_expression(
        DenseFilter(tenant=flt.tenant, resource_ids=flt.resource_ids, acl_any=flt.acl)
    )
    _utf8(expr)


# -- documents -----------------------------------------------------------------------------------


#: Text without lone surrogates (refused: see the test below).
STORABLE_TEXT = st.text(
    alphabet=st.characters(categories=None, exclude_categories=("Cs",)), max_size=300
) | st.sampled_from(["", " ", "\x00", "\x1b[31m", "x" * 5000, "\u202e", "我的喜好", "💩"])
META_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | STORABLE_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(STORABLE_TEXT, inner, max_size=3),
    max_leaves=10,
)


@bounded(400)
@given(
    resource_id=STORABLE_TEXT,
    text=STORABLE_TEXT,
    title=STORABLE_TEXT,
    metadata=st.none() | st.dictionaries(STORABLE_TEXT | st.integers(), META_VALUES, max_size=4),
    tenant=STORABLE_TEXT,
    acl=st.lists(STORABLE_TEXT | st.integers(), max_size=4) | STORABLE_TEXT,
)
def test_make_document_returns_a_document_or_a_hybridsag_error(
    resource_id: str, text: str, title: str, metadata: Any, tenant: str, acl: Any
) -> None:
    _check_make_document(resource_id, text, title, metadata, tenant, acl)


def _deep(levels: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cur = out
    for _ in range(levels):
        cur["a"] = {}
        cur = cur["a"]
    return out


@pytest.mark.parametrize(
    "field",
    [
        {"resource_id": "\ud800"},
        {"text": "a\udcff"},
        {"title": "\ud800"},
        {"tenant": "\ud800"},
        {"acl": ["\ud800"]},
        {"metadata": {"k": "\ud800"}},
        {"acl": None},
        {"acl": 5},
        {"metadata": _deep(3000)},
    ],
    ids=["resource_id", "text", "title", "tenant", "acl", "metadata", "acl-None", "acl-5", "deep"],
)
def test_make_document_refuses_what_it_cannot_store(field: dict[str, Any]) -> None:
    args: dict[str, Any] = {"resource_id": "r", "text": "t", "title": "", "metadata": None,
                            "tenant": "", "acl": []}
    args.update(field)
    resource_id, text = args.pop("resource_id"), args.pop("text")
    with pytest.raises(HybridSagError) as info:
        make_document(resource_id, text, **args)
    _utf8(str(info.value))


def _check_make_document(
    resource_id: Any, text: Any, title: Any, metadata: Any, tenant: Any, acl: Any
) -> None:
    try:
        doc = make_document(
            resource_id, text, title=title, metadata=metadata, tenant=tenant, acl=acl
        )
    except HybridSagError as exc:
        _utf8(str(exc))
        return
    for value in (doc.resource_id, doc.title, doc.text, doc.tenant, *doc.acl, doc.metadata_json):
        _utf8(value)  # what is stored is UTF-8
    assert json.loads(doc.metadata_json) == json.loads(json.dumps(doc.metadata))


# -- the FTS5 query builder ----------------------------------------------------------------------


FTS = sqlite3.connect(":memory:", check_same_thread=False)
FTS.execute(f"CREATE VIRTUAL TABLE t USING fts5(body, tokenize=\"{FTS_TOKENIZE}\")")
FTS.execute("INSERT INTO t VALUES ('near the quick fox or title and not zebra')")
#: What can reach the builder: tokenizer output of a validated query (no NUL, no surrogate).
TERM = st.text(
    alphabet=st.characters(categories=None, exclude_categories=("Cs",), exclude_characters="\x00"),
    min_size=1,
    max_size=40,
)


@bounded(400)
@given(terms=st.lists(TERM, max_size=8), must=st.none() | TERM)
def test_built_match_expressions_are_always_valid_fts5(terms: list[str], must: str | None) -> None:
    expr = build_match(terms, must=must)
    if not expr:
        assert not terms and not must
        return
    FTS.execute("SELECT rowid FROM t WHERE t MATCH ?", (expr,)).fetchall()  # never a syntax error
    for term in terms:
        assert quote_term(term) in expr


@bounded(300)
@given(term=TERM)
def test_a_quoted_term_matches_as_the_literal_words(term: str) -> None:
    """A quoted term never acts as an operator: it finds the row iff its words are in it."""
    hits = FTS.execute("SELECT rowid FROM t WHERE t MATCH ?", (quote_term(term),)).fetchall()
    assert len(hits) <= 1


# -- a whole search and the CLI ------------------------------------------------------------------


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HybridSearch]:
    settings_ = Settings(data_dir=tmp_path_factory.mktemp("props"), embedding={"model": "none"})
    with HybridSearch(settings_) as hs:
        hs.ingest("fox", "The quick brown fox: AND OR NOT NEAR title.", title="Foxes", tenant="a")
        hs.ingest("zh", "我的喜好是爱吃鱼", title="我的喜好", tenant="b", acl=["x"])
        yield hs


@bounded(150)
@given(
    query=ANY_TEXT,
    filters=st.none() | st.dictionaries(FILTER_KEYS, JSONISH, max_size=3),
)
def test_a_lexical_search_answers_or_raises_a_query_error(
    index: HybridSearch, query: str, filters: Any
) -> None:
    try:
        resp = index.search(query, paths=["bm25", "title", "sag2"], filters=filters)
    except QueryError as exc:
        _utf8(str(exc))
        return
    assert not resp.degraded, resp.reasons
    for result in resp.results:
        assert math.isfinite(result.score)
    _utf8(json.dumps(resp.as_dict(), ensure_ascii=False))


@bounded(25)
@given(query=ANY_TEXT, tenant=st.none() | ANY_TEXT)
def test_cli_output_is_valid_utf8_and_bad_text_exits_2(
    index: HybridSearch, query: str, tenant: str | None
) -> None:
    argv = ["--data-dir", str(index.settings.data_dir), "search", query, "--json"]
    argv += ["--paths", "bm25"]
    if tenant is not None:
        argv += ["--tenant", tenant]
    buffer = io.BytesIO()
    stream = io.TextIOWrapper(buffer, encoding="utf-8", errors="strict")
    code = main(argv, out=stream)
    stream.flush()
    assert code in (0, 2)
    text = buffer.getvalue().decode("utf-8")  # strict
    if code == 0:
        json.loads(text)
    else:
        assert text == ""
