"""``metrics_for``: Recall@K (HippoRAG definition), MRR@10 and nDCG@10 with binary gains."""

from __future__ import annotations

import math

import pytest

from hybridsag.metrics import metrics_for


def _log2(n: int) -> float:
    return math.log2(n)


def test_single_gold_at_rank_two() -> None:
    m = metrics_for(["a", "b", "c"], frozenset({"b"}))
    assert m["recall@1"] == 0.0
    assert m["recall@2"] == m["recall@5"] == m["recall@10"] == 1.0
    assert m["mrr@10"] == 0.5
    assert m["ndcg@10"] == pytest.approx(1 / _log2(3))  # 0.6309...


def test_recall_is_the_share_of_gold_found() -> None:
    # HippoRAG: per question, |gold in top K| / |gold|
    ranked = ["a", "x", "y", "c", "z", "q", "r", "s", "t", "u", "e"]
    m = metrics_for(ranked, frozenset({"a", "c", "e"}))
    assert m["recall@1"] == pytest.approx(1 / 3)
    assert m["recall@2"] == pytest.approx(1 / 3)
    assert m["recall@5"] == pytest.approx(2 / 3)
    assert m["recall@10"] == pytest.approx(2 / 3)  # "e" is at rank 11
    assert m["mrr@10"] == 1.0
    dcg = 1 / _log2(2) + 1 / _log2(5)
    idcg = 1 / _log2(2) + 1 / _log2(3) + 1 / _log2(4)
    assert m["ndcg@10"] == pytest.approx(dcg / idcg)  # 0.6509...


def test_perfect_ranking_scores_one() -> None:
    m = metrics_for(["g1", "g2", "other"], frozenset({"g1", "g2"}))
    assert m == {
        "recall@1": 0.5,  # two gold passages cannot both be at rank 1
        "recall@2": 1.0,
        "recall@5": 1.0,
        "recall@10": 1.0,
        "mrr@10": 1.0,
        "ndcg@10": pytest.approx(1.0),
    }


def test_nothing_found() -> None:
    ranked = [f"n{i}" for i in range(10)] + ["gold"]
    m = metrics_for(ranked, frozenset({"gold"}))
    assert m == {k: 0.0 for k in m}
    assert metrics_for([], frozenset({"gold"}))["ndcg@10"] == 0.0


def test_mrr_uses_the_first_gold_only() -> None:
    m = metrics_for(["x", "x2", "g1", "g2"], frozenset({"g1", "g2"}))
    assert m["mrr@10"] == pytest.approx(1 / 3)
    assert m["ndcg@10"] == pytest.approx(
        (1 / _log2(4) + 1 / _log2(5)) / (1 / _log2(2) + 1 / _log2(3))
    )


def test_ideal_dcg_is_capped_at_ten_gold() -> None:
    gold = frozenset(f"g{i}" for i in range(12))
    ranked = [f"g{i}" for i in range(10)]
    m = metrics_for(ranked, gold)
    assert m["recall@10"] == pytest.approx(10 / 12)
    assert m["ndcg@10"] == pytest.approx(1.0)  # ten gold in the top ten is ideal


def test_a_repeated_id_counts_once() -> None:
    m = metrics_for(["g", "g", "g"], frozenset({"g"}))
    assert m["ndcg@10"] == pytest.approx(1.0)  # never above 1
    assert m["recall@10"] == 1.0 and m["mrr@10"] == 1.0
