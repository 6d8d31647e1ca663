"""Index identity: data dirs sharing a Milvus server never see, plan over nor delete each other's
vectors; a data dir whose vectors an older build wrote gets a clear error and a way out
(``rebuild-vectors``); a lost Milvus Lite folder is reported, never recreated empty.

Real SQLite, real Milvus (Lite, and the standalone server tier for the shared-server case), the
real packaged model.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hybridsag.cli import main
from hybridsag.components import META_INDEX_ID, Components
from hybridsag.consistency import Reconciler
from hybridsag.vectors.contract import VectorRow
from hybridsag.vectors.milvus_dense import LEGACY_COLLECTION
from hybridsag.errors import ConfigError, DenseError, IndexMismatchError
from hybridsag.milvus_client import lite_path
from hybridsag.search import HybridSearch
from hybridsag.settings import MilvusSettings, Settings

from tests.consistency_support import (
    create_legacy_collection,
    make_settings,
    open_search,
    shared_embedder,
)
from tests.milvusserver import milvus_server  # noqa: F401 - the session's server fixture

DOCS = {
    "faq": "The faq says the orchard opens at nine.",
    "guide": "The guide explains how apples are picked.",
    "notes": "Notes on pears: they ripen after apples.",
}


def _vec(text: str) -> list[float]:
    return [float(x) for x in shared_embedder().encode([text])[0]]


def _server_settings(data_dir: Path, uri: str, **milvus: Any) -> Settings:
    base = make_settings(data_dir)
    return base.model_copy(update={"milvus": MilvusSettings(uri=uri, **milvus)})


def _drop(uri: str, names: list[str | None]) -> None:
    from pymilvus import MilvusClient

    client = MilvusClient(uri=uri)
    try:
        for name in names:
            if name and client.has_collection(name):
                client.drop_collection(name)
    finally:
        client.close()


@pytest.mark.milvus_server
def test_three_data_dirs_on_one_server_never_touch_each_others_vectors(
    tmp_path: Path, milvus_server: str  # noqa: F811
) -> None:
    searches = [open_search(_server_settings(tmp_path / n, milvus_server)) for n in "abc"]
    collections = [hs.components.collection for hs in searches]
    try:
        for hs in searches:  # the same resource ids, hence the same chunk ids, in all three
            for rid, text in DOCS.items():
                hs.ingest(rid, text, title=rid.title())
        a, b, c = searches
        assert len(set(collections)) == 3
        counts = [hs.components.dense_index().count() for hs in searches]
        assert counts == [3, 3, 3]

        # leftovers in a alone: an orphan vector, and a resource whose rows vanished
        a.components.dense_index().upsert([VectorRow("ghost@1#0", "ghost", 1, "", (), _vec("x"))])
        with a.components.store.atomic() as conn:
            conn.execute("DELETE FROM chunks WHERE resource_id = 'notes'")
            conn.execute("DELETE FROM resources WHERE resource_id = 'notes'")
        report = Reconciler(a.components).run(force=True)  # force: 2 of 4 is over the guard
        assert report["ok"], report["errors"]
        assert report["apply"]["totals"]["deleted_vectors"] == 2
        assert report["totals_before"]["collection_size"] == 4  # only a's own rows were read
        assert [hs.components.dense_index().count() for hs in searches] == [2, 3, 3]
        for hs in (b, c):
            plain = Reconciler(hs.components).run()
            assert plain["ok"] and not any(plain["counts_before"].values())
            found = hs.search("pears ripen after apples", paths=["dense"], top_k=3)
            assert "notes" in {r.resource_id for r in found.results}
        assert [hs.components.dense_index().count() for hs in searches] == [2, 3, 3]

        # a fourth data dir pointed at a's collection by name is refused, and deletes nothing
        fourth = _server_settings(tmp_path / "d", milvus_server, collection=collections[0])
        assert "never share a collection" in _refused(fourth)
        assert a.components.dense_index().count() == 2
    finally:
        for hs in searches:
            hs.close()
        _drop(milvus_server, collections)


def _refused(settings: Settings) -> str:
    """Open a search over ``settings`` whose dense index must be refused; every way in (search,
    reconcile, ingest) says why and nothing is deleted. Returns the reason."""
    with HybridSearch(settings, embedder=shared_embedder()) as hs:
        with pytest.raises(ConfigError) as info:
            hs.components.dense_index()
        resp = hs.search("orchard", paths=["bm25", "dense"])
        assert resp.degraded and str(info.value) in resp.reasons["dense"]
        with pytest.raises(ConfigError):
            hs.ingest("faq", DOCS["faq"])
    return str(info.value)


# -- an older build's data dir ------------------------------------------------------------------


def _make_legacy(settings: Settings, foreign_rows: int) -> int:
    """Turn a data dir made by this build into one an older build left: no index id in the
    meta, its vectors (plus ``foreign_rows`` of another data dir) in ``hybridsag_chunks``
    without an ``index_id`` field. Returns the rows in that collection."""
    from pymilvus import MilvusClient

    with open_search(settings) as hs:
        for rid, text in DOCS.items():
            hs.ingest(rid, text, title=rid.title())
        dense = hs.components.dense_index()
        own = sorted(dense.iter_entries())
        own_collection = hs.components.collection
        with hs.components.store.atomic() as conn:
            conn.execute("DELETE FROM meta WHERE key = ?", (META_INDEX_ID,))
    client = MilvusClient(uri=str(lite_path(settings)))
    try:
        client.drop_collection(own_collection)
        create_legacy_collection(client, LEGACY_COLLECTION, shared_embedder().dimension)
        rows = [
            {"chunk_id": cid, "resource_id": rid, "version": v, "tenant": "", "acl": [],
             "vector": _vec(rid)}
            for cid, rid, v in own
        ] + [
            {"chunk_id": f"other{i}@1#0", "resource_id": f"other{i}", "version": 1,
             "tenant": "", "acl": [], "vector": _vec(f"other {i}")}
            for i in range(foreign_rows)
        ]
        client.insert(LEGACY_COLLECTION, rows)
        return len(rows)
    finally:
        client.close()
        from milvus_lite.server_manager import server_manager_instance

        server_manager_instance.release_server(str(lite_path(settings).resolve()))


def _legacy_rows(settings: Settings) -> int:
    from pymilvus import MilvusClient

    client = MilvusClient(uri=str(lite_path(settings)))
    try:
        client.load_collection(LEGACY_COLLECTION)
        result = client.query(
            LEGACY_COLLECTION, filter="", output_fields=["count(*)"], consistency_level="Strong"
        )
        return int(result[0]["count(*)"])
    finally:
        client.close()
        from milvus_lite.server_manager import server_manager_instance

        server_manager_instance.release_server(str(lite_path(settings).resolve()))


@pytest.fixture
def legacy(tmp_path: Path) -> Iterator[tuple[Settings, int]]:
    settings = make_settings(tmp_path / "old")
    yield settings, _make_legacy(settings, foreign_rows=4)


def test_an_older_builds_data_dir_is_refused_until_rebuild_vectors(
    legacy: tuple[Settings, int], capsys: pytest.CaptureFixture[str]
) -> None:
    settings, rows = legacy
    with HybridSearch(settings, embedder=shared_embedder()) as hs:
        assert hs.components.index_id is None
        resp = hs.search("apples", paths=["bm25", "dense"])
        assert resp.degraded and {r.resource_id for r in resp.results} >= {"guide", "notes"}
        reason = resp.reasons["dense"]
        assert "older hybridsag" in reason and "rebuild-vectors" in reason
        assert f"'{LEGACY_COLLECTION}'" in reason
        with pytest.raises(IndexMismatchError, match="rebuild-vectors"):
            Reconciler(hs.components).run()
        with pytest.raises(IndexMismatchError, match="rebuild-vectors"):
            hs.delete("faq")  # the tombstone stands; no vector of anyone is touched
    assert _legacy_rows(settings) == rows

    out = io.StringIO()
    code = main(["--data-dir", str(settings.data_dir), "rebuild-vectors", "-q", "--json"], out=out)
    assert code == 0, capsys.readouterr().err
    with open_search(settings) as hs:
        parts = hs.components
        assert parts.index_id is not None and parts.collection == f"hybridsag_{parts.index_id}"
        assert parts.dense_index().count() == 2  # guide and notes (faq was being deleted)
        found = hs.search("pears ripen after apples", paths=["dense"], top_k=2)
        assert not found.degraded and found.results[0].resource_id == "notes"
        report = Reconciler(parts).run(force=True)  # faq's rows are 1 of 3: over the guard
        assert report["ok"] and report["apply"]["totals"] == {"purged_resources": 1}
    assert _legacy_rows(settings) == rows  # the old collection is never touched


# -- a lost Milvus Lite folder ------------------------------------------------------------------


def test_a_deleted_milvus_lite_folder_is_reported_never_recreated(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data")
    with open_search(settings) as hs:
        for rid, text in DOCS.items():
            hs.ingest(rid, text, title=rid.title())
    shutil.rmtree(lite_path(settings))

    out = io.StringIO()
    assert main(["--data-dir", str(settings.data_dir), "doctor"], out=out) == 1
    milvus_line = next(line for line in out.getvalue().splitlines() if "] milvus:" in line)
    assert milvus_line.startswith("[FAIL] milvus: DenseError") and "is missing" in milvus_line

    with HybridSearch(settings, embedder=shared_embedder()) as hs:
        resp = hs.search("apples", paths=["bm25", "dense"])
        assert resp.degraded and "rebuild-vectors" in resp.reasons["dense"]
        assert {r.resource_id for r in resp.results} >= {"guide", "notes"}  # lexical goes on
        with pytest.raises(DenseError, match="is missing"):
            Reconciler(hs.components).run()
        with pytest.raises(DenseError, match="is missing"):
            hs.ingest("new", "A new note about plums.")
    assert not lite_path(settings).exists()  # nothing recreated empty

    with Components(settings, embedder=shared_embedder()) as parts:
        assert parts.rebuild_vectors() == 3
    with open_search(settings) as hs:
        assert hs.components.dense_index().count() == 3
        assert not hs.search("apples", paths=["dense"]).degraded
