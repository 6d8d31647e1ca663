"""No path may raise anything outside the HybridSagError tree into ``run_paths``, and a resource
deleted while a path runs is simply not returned.

Real SQLite, real Milvus Lite and the real packaged model. The delete that races the dense path's
store read is made deterministic by a store that lets a real delete land right before it (the
dense path under test is the real one).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hybridsag.errors import JudgeError, QueryError
from hybridsag.paths import PathResult, PathSpec, Peers, register_path, unregister_path
from hybridsag.paths.dense import DenseRetriever
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from hybridsag.records.filters import Filters
from hybridsag.records.store import Store

from tests.consistency_support import make_settings, open_search

DOCS = {
    "apple": "Apples grow in the orchard behind the old mill.",
    "pear": "Pears ripen in the orchard after the apples.",
    "plum": "Plums are the last fruit of the orchard season.",
}


class _DeleteBeforeVisibilityRead:
    """A store that lets ``delete`` run after the dense index answered and before the path's
    one store read (:meth:`Store.visible_chunk_ids`): the vectors still name the victim's
    chunk, the store no longer holds it. (Two reads, chunks then resources, once let a delete
    land between them: a KeyError in 11 of 12,400 racing searches; the path reads once now.)"""

    def __init__(self, store: Store, delete: Any, victim: str) -> None:
        self._store = store
        self._delete = delete
        self.victim = victim
        self.deleted = False

    def visible_chunk_ids(self, chunk_ids: Iterable[str], filters: Filters) -> set[str]:
        ids = list(chunk_ids)
        if not self.deleted and any(cid.startswith(f"{self.victim}@") for cid in ids):
            self.deleted = self._delete(self.victim)
        return self._store.visible_chunk_ids(ids, filters)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@pytest.fixture
def dense_hs(tmp_path: Path) -> Iterator[HybridSearch]:
    with open_search(make_settings(tmp_path / "data")) as hs:
        for rid, text in DOCS.items():
            hs.ingest(rid, text, title=rid.title())
        yield hs


def test_a_resource_deleted_while_the_dense_path_runs_is_left_out(
    dense_hs: HybridSearch,
) -> None:
    parts = dense_hs.components
    store = _DeleteBeforeVisibilityRead(parts.store, dense_hs.delete, victim="pear")
    path = DenseRetriever(store, parts.embedder(), parts.dense_index())  # type: ignore[arg-type]
    result = path.retrieve("orchard fruit", limit=10, filters=Filters())
    assert store.deleted, "the delete did not land before the store read"
    found = [h.detail["resource_id"] for h in result.hits]
    assert sorted(found) == ["apple", "plum"]
    assert [h.rank for h in result.hits] == [1, 2]
    assert dense_hs.components.store.get_resource("pear") is None


class _Broken:
    """A recall path that raises ``raised[0]`` (set by the test) on every call."""

    name = "broken"

    def __init__(self, raised: list[BaseException]) -> None:
        self.raised = raised

    def retrieve(
        self, query: str, *, limit: int, filters: Filters, peers: Peers | None = None
    ) -> PathResult:
        raise self.raised[0]


@pytest.fixture
def broken_path() -> Iterator[list[BaseException]]:
    raised: list[BaseException] = [KeyError("pear")]
    register_path(PathSpec("broken", lambda parts: _Broken(raised), "raises on purpose"))
    try:
        yield raised
    finally:
        unregister_path("broken")


def test_an_unexpected_exception_degrades_only_its_path(
    tmp_path: Path, broken_path: list[BaseException], caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(data_dir=tmp_path / "d", embedding={"model": "none"})
    with HybridSearch(settings) as hs:
        for rid, text in DOCS.items():
            hs.ingest(rid, text, title=rid.title())
        with caplog.at_level(logging.ERROR, logger="hybridsag.search"):
            resp = hs.search("orchard", paths=["bm25", "broken"])
        assert resp.degraded
        assert resp.reasons == {"broken": "unexpected KeyError: 'pear'"}
        assert {r.resource_id for r in resp.results} == set(DOCS)
        logged = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(logged) == 1 and logged[0].exc_info is not None
        assert logged[0].exc_info[0] is KeyError  # the traceback is kept

        broken_path[0] = QueryError("bad query seen by a path")
        with pytest.raises(QueryError, match="bad query seen by a path"):
            hs.search("orchard", paths=["bm25", "broken"])


def test_a_judge_error_still_propagates_under_on_failure_raise(
    tmp_path: Path, broken_path: list[BaseException]
) -> None:
    broken_path[0] = JudgeError("judge down")
    raising = Settings(
        data_dir=tmp_path / "r", embedding={"model": "none"}, judge={"on_failure": "raise"}
    )
    with HybridSearch(raising) as hs:
        hs.ingest("apple", DOCS["apple"])
        with pytest.raises(JudgeError, match="judge down"):
            hs.search("orchard", paths=["bm25", "broken"])
    lenient = Settings(data_dir=tmp_path / "l", embedding={"model": "none"})
    with HybridSearch(lenient) as hs:
        hs.ingest("apple", DOCS["apple"])
        resp = hs.search("orchard", paths=["bm25", "broken"])
        assert resp.reasons == {"broken": "JudgeError: judge down"}
