"""``metrics_for``: Recall@K (HippoRAG definition), MRR@10, graded and binary nDCG@10."""

from __future__ import annotations

import math

import pytest

from hybridsag.evaluation.measures import Gold, metrics_for


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
        "ndcg@10_binary": pytest.approx(1.0),
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


# numba warns of a uint64 cast when it compiles ranx's kernels for a fresh cache (not when a
# cached kernel loads), as hybridsag.ab.offline hides it where it calls ranx
@pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaTypeSafetyWarning")
def test_graded_ndcg_matches_ranx_and_trec_eval_reading() -> None:
    """On a graded set, nDCG@10 is ranx's (trec_eval's: gain = grade, the ideal ranking sorted
    by grade); the binary reading is reported beside it; recall counts every grade above 0."""
    import random

    from ranx import Qrels, Run, evaluate

    rng = random.Random(20261202)
    qrels, runs, ours_graded, ours_binary = {}, {}, [], []
    for q in range(60):
        # ids as wide as hybridsag.ab.offline's passage codes: ranx's kernels are compiled per
        # id width, so this test loads the ones eval --compare's tests compile (or compiles
        # them for those), not a set of its own (about 40 s in a fresh environment)
        docs = [f"d{i:011d}" for i in range(30)]
        grades = {d: rng.choice([0, 1, 1, 2, 3]) for d in rng.sample(docs, rng.randint(1, 12))}
        if not any(grades.values()):
            grades[docs[0]] = 2
        ranked = rng.sample(docs, 15)
        qrels[f"q{q:02d}"] = {d: g for d, g in grades.items() if g > 0}
        runs[f"q{q:02d}"] = {d: 1.0 / r for r, d in enumerate(ranked, start=1)}
        m = metrics_for(ranked, Gold(grades))
        ours_graded.append(m["ndcg@10"])
        ours_binary.append(m["ndcg@10_binary"])
        assert m["recall@10"] == len(set(ranked[:10]) & set(qrels[f"q{q:02d}"])) / len(qrels[f"q{q:02d}"])
    graded = evaluate(Qrels.from_dict(qrels), Run.from_dict(runs), "ndcg@10", return_mean=False)
    binary_qrels = {q: dict.fromkeys(g, 1) for q, g in qrels.items()}
    binary = evaluate(Qrels.from_dict(binary_qrels), Run.from_dict(runs), "ndcg@10", return_mean=False)
    assert [round(x, 9) for x in ours_graded] == [round(float(x), 9) for x in graded]
    assert [round(x, 9) for x in ours_binary] == [round(float(x), 9) for x in binary]
    assert ours_graded != ours_binary  # the set is graded: the readings differ


def test_gold_from_ids_is_binary() -> None:
    gold = Gold(["a", "b"])
    assert gold == frozenset({"a", "b"}) and not gold.graded and gold.grade("a") == 1.0
    m = metrics_for(["b", "a"], gold)
    assert m["ndcg@10"] == m["ndcg@10_binary"] == pytest.approx(1.0)
    assert Gold({"a": 3, "b": 0}) == frozenset({"a"})  # grade 0 is not gold


def test_a_result_with_copies_is_one_place_found_when_a_copy_is_gold() -> None:
    """A fused result that stands for copies of its text (``also_in``) is scored at its own
    place: its copies push nothing down, and it is found when one of them is gold."""
    from hybridsag.evaluation.measures import ranked_results

    gold = frozenset({"lzma.write", "r5"})
    results = [["r1"], ["bz2.write", "lzma.write"], ["r3", "r3-copy"], ["r4"], ["r5"]]
    ranked = ranked_results(results, gold)
    assert ranked == ["r1", "lzma.write", "r3", "r4", "r5"]
    assert metrics_for(ranked, gold)["recall@5"] == 1.0
    assert ranked_results([["a"], [], ["a", "b"]], frozenset()) == ["a"]
