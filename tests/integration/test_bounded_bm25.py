"""``lexical.prune`` changes the cost of a lexical search, never its answer: the same corpus
indexed twice, once with the bounded top k on every search (``prune_min_postings = 0``) and once
with it off, gives the same bm25 hits (ids, ranks, scores) under every filter, the same SAG2
results through the search façade, and keeps doing so after a delete and a re-ingest.

Real SQLite FTS5 stores under pytest's temporary folder; the dense path is off.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from hybridsag.records.filters import Filters
from hybridsag.records.keys import split_key

from tests.conformance.test_store_backends import WORDS, _corpus, indexed_twice


def _settings(data: Path, prune: bool) -> Settings:
    return Settings(
        data_dir=data,
        embedding={"model": "none"},
        lexical={"prune": prune, "prune_min_postings": 0},
    )


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HybridSearch, HybridSearch]]:
    root = tmp_path_factory.mktemp("bounded")
    docs = _corpus(240, seed=11)
    assert len(docs) == 240
    with indexed_twice(
        _settings(root / "bounded", True), _settings(root / "plain", False), docs
    ) as pair:
        yield pair


def _hits(search: HybridSearch, terms: list[str], limit: int, filters: Filters, must=None):
    return [
        (h.chunk_id, h.detail["resource_id"], h.rank, round(h.score, 9))
        for h in search.components.lexical.search(terms, limit=limit, filters=filters, must=must)
    ]


def _queries(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    common = WORDS[:5]  # the corpus draws words with weight 1/rank: these are in most chunks
    return [
        " ".join(rng.sample(common, rng.randint(1, 3)) + rng.sample(WORDS[8:], rng.randint(1, 2)))
        for _ in range(n)
    ]


def test_bm25_hits_are_the_same_with_and_without_the_bound(pair) -> None:
    bounded, plain = pair
    filters = [Filters(), Filters(tenant="red"), Filters(acl=("team-a",)),
               Filters(metadata={"kind": "x"})]
    compared = 0
    for query in _queries(30, seed=3):
        terms = bounded.components.lexical.query_terms(query)
        assert terms == plain.components.lexical.query_terms(query)
        for f in filters:
            for limit in (3, 10):
                assert _hits(bounded, terms, limit, f) == _hits(plain, terms, limit, f), (
                    query, f, limit)
                compared += 1
        must = terms[-1]
        assert _hits(bounded, terms, 5, Filters(), must) == _hits(plain, terms, 5, Filters(), must)
    assert compared == 30 * len(filters) * 2


def test_the_search_facade_answers_alike(pair) -> None:
    bounded, plain = pair
    for query in _queries(12, seed=9):
        a = bounded.search(query, top_k=10, paths=["bm25", "sag2"], explain=False)
        b = plain.search(query, top_k=10, paths=["bm25", "sag2"], explain=False)
        assert [r.chunk_id for r in a.results] == [r.chunk_id for r in b.results], query


def test_writes_are_seen_by_the_next_bounded_search(pair) -> None:
    """The kept document frequencies follow a delete and a re-ingest (their cache key is the
    FTS5 table's committed state)."""
    bounded, plain = pair
    terms = bounded.components.lexical.query_terms(f"{WORDS[0]} {WORDS[1]} {WORDS[9]}")
    before = _hits(bounded, terms, 10, Filters())
    assert before == _hits(plain, terms, 10, Filters())
    doomed = {key for _, key, _, _ in before[:3]}  # a lexical hit names its resource's key
    for search in (bounded, plain):
        for key in sorted(doomed):
            tenant, rid = split_key(key)
            assert search.delete(rid, tenant=tenant)
    after = _hits(bounded, terms, 10, Filters())
    assert after == _hits(plain, terms, 10, Filters())
    assert not {rid for _, rid, _, _ in after} & doomed
    again = [d for d in _corpus(240, seed=11) if d.key in doomed]
    for search in (bounded, plain):
        assert search.ingest_documents(again).indexed == len(again)
    assert _hits(bounded, terms, 10, Filters()) == _hits(plain, terms, 10, Filters())
