"""Unit tests for the trust step (hybridsag.fusion.trust) and the convex score fusion
(hybridsag.fusion.convex) on constructed hit lists: exact numbers, written out by hand."""

from __future__ import annotations

import math

import pytest
from hybridsag.fusion import (
    ChunkView,
    Hit,
    QueryFacts,
    TrustModel,
    assess,
    convex,
    fuse,
    list_stats,
    normalise,
    trust_signals,
)
from hybridsag.fusion.trust import flatness

KINDS = {"sag2": "judged", "dense": "embedding", "title": "title", "bm25": "lexical"}


def scored(path: str, *pairs: tuple[str, float], judged: bool = False) -> list[Hit]:
    """Hits in the given order (rank 1 first) with the given scores."""
    return [
        Hit(cid, path, rank, s, s, judge_p=s if judged else None)
        for rank, (cid, s) in enumerate(pairs, start=1)
    ]


def views(*ids: str) -> dict[str, ChunkView]:
    return {c: ChunkView(c, f"r-{c}", "", "", f"text of {c}") for c in ids}


# --------------------------------------------------------------------------------------------
# list statistics and signals


def test_list_stats_exact() -> None:
    hits = scored("dense", ("a", 0.9), ("b", 0.5), ("c", 0.4))
    top, margin, z = list_stats(hits)
    mean = (0.9 + 0.5 + 0.4) / 3
    std = math.sqrt(((0.9 - mean) ** 2 + (0.5 - mean) ** 2 + (0.4 - mean) ** 2) / 3)
    assert top == 0.9
    assert margin == pytest.approx(0.4)
    assert z == pytest.approx((0.9 - mean) / std)
    assert list_stats([]) == (0.0, 0.0, 0.0)
    assert list_stats(scored("dense", ("a", 0.7), ("b", 0.7))) == (0.7, 0.0, 0.0)


def test_signals_exact_values() -> None:
    runs = {
        "sag2": scored("sag2", ("a", 0.8), ("b", 0.6), ("c", 0.1), judged=True),
        "dense": scored("dense", ("b", 0.7), ("d", 0.6)),
    }
    facts = QueryFacts(embedder_reads=0.5, terms=3, terms_in_index=2 / 3, idf=0.4, words=6,
                       capitalised=0.2)
    sig = trust_signals(runs, KINDS, facts)
    assert sig["judge_top"] == 0.8
    assert sig["judge_margin"] == pytest.approx(0.2)
    assert sig["judge_yes"] == pytest.approx(0.2)  # 2 of the top ten at p >= 0.5
    assert sig["agreement"] == pytest.approx(0.1)  # "b" is in both top tens
    assert sig["dense_margin"] == pytest.approx(0.1)
    assert sig["dense_z"] == pytest.approx(1.0)  # two values: the top is one std above the mean
    assert sig["reads"] == 0.5
    assert sig["terms_in_index"] == pytest.approx(2 / 3)
    assert sig["words"] == pytest.approx(math.log(7))


def test_flatness_is_the_tenth_score_over_the_first() -> None:
    flat = scored("bm25", *((f"c{i}", 10.0 - 0.1 * i) for i in range(12)))
    assert flatness(flat) == pytest.approx(9.1 / 10.0)  # the tenth hit scores 9.1
    steep = scored("bm25", ("a", 8.0), ("b", 2.0), ("c", 1.0))
    assert flatness(steep) == pytest.approx(1.0 / 8.0)  # a short list: its last score
    assert flatness([]) == 0.0
    assert flatness(scored("bm25", ("a", 0.0), ("b", 0.0))) == 0.0  # no ratio to take


def test_weak_lexical_and_unsupported_dense_signals() -> None:
    # a keyword list of common words: BM25 flat, the judge unsure of everything; dense's top
    # ten holds two passages that BM25 also found
    runs = {
        "sag2": scored("sag2", *((f"j{i}", 0.3 - 0.01 * i) for i in range(10)), judged=True),
        "bm25": scored("bm25", *((f"l{i}", 5.0 - 0.05 * i) for i in range(20)), ("d1", 1.0)),
        "dense": scored("dense", ("d0", 0.9), ("d1", 0.8), ("l3", 0.7), ("d3", 0.6),
                        *((f"x{i}", 0.5) for i in range(6))),
    }
    sig = trust_signals(runs, KINDS, QueryFacts(embedder_reads=1.0))
    assert sig["lexical_flat"] == pytest.approx(4.55 / 5.0)
    assert sig["judge_mean"] == pytest.approx(math.fsum(0.3 - 0.01 * i for i in range(10)) / 10)
    assert sig["dense_support"] == pytest.approx(0.2)  # d1 and l3 are in BM25's list
    alone = trust_signals({"dense": runs["dense"], "sag2": runs["sag2"]}, KINDS, QueryFacts())
    assert alone["dense_support"] == 0.0 and alone["lexical_flat"] == 0.0  # no lexical path


def test_new_signals_move_the_shares_of_a_model_that_reads_them() -> None:
    runs = {
        "sag2": scored("sag2", ("a", 0.3), ("b", 0.2), judged=True),
        "bm25": scored("bm25", ("a", 5.0), ("b", 4.9), ("c", 4.8)),
        "dense": scored("dense", ("d", 0.9), ("e", 0.5)),
    }
    base = TrustModel(coefficients={}, bias=0.0)
    weak_lexical = TrustModel(coefficients={"lexical_flat": 2.0, "dense_support": -1.0},
                              bias=0.0)
    plain = assess(runs, KINDS, QueryFacts(embedder_reads=1.0), weights={}, model=base)
    moved = assess(runs, KINDS, QueryFacts(embedder_reads=1.0), weights={}, model=weak_lexical)
    assert plain.dense_share == pytest.approx(0.5)
    # flat BM25 (4.8 / 5.0) and no dense hit in BM25's list: z = 2 * 0.96 - 0
    assert moved.dense_share == pytest.approx(1 / (1 + math.exp(-2.0 * 0.96)))
    assert moved.weights["dense"] > plain.weights["dense"]


def test_unknown_reads_counts_as_readable() -> None:
    sig = trust_signals({}, KINDS, QueryFacts())
    assert sig["reads"] == 1.0 and sig["agreement"] == 0.0 and sig["judge_top"] == 0.0


# --------------------------------------------------------------------------------------------
# assess


MODEL = TrustModel(coefficients={"dense_z": 1.0, "judge_top": -4.0}, bias=0.0)


def test_assess_splits_the_weights_by_the_dense_share() -> None:
    runs = {
        "sag2": scored("sag2", ("a", 0.25), ("b", 0.2), judged=True),
        "dense": scored("dense", ("b", 0.9), ("c", 0.3), ("d", 0.3)),
        "title": scored("title", ("e", 1.0)),
    }
    t = assess(runs, KINDS, QueryFacts(embedder_reads=1.0), weights={"title": 0.25}, model=MODEL)
    z = list_stats(runs["dense"])[2] - 4.0 * 0.25
    share = 1 / (1 + math.exp(-z))
    assert t.dense_share == pytest.approx(share)
    assert t.weights["dense"] == pytest.approx(2 * share)
    assert t.weights["sag2"] == pytest.approx(2 * (1 - share))
    assert t.weights["title"] == 0.25  # neither embedding nor judged: as configured
    assert t.judge_holds is (share < 0.5)
    assert set(t.reasons) == {"sag2", "dense", "title"}
    assert t.reasons["title"] == "title path: its configured weight"
    assert "reads 1.00 of the query" in t.reasons["dense"]


def test_assess_gives_an_unreadable_query_no_dense_weight() -> None:
    runs = {
        "sag2": scored("sag2", ("a", 0.1), judged=True),
        "dense": scored("dense", ("b", 0.99), ("c", 0.1)),
    }
    confident = assess(runs, KINDS, QueryFacts(embedder_reads=1.0), weights={}, model=MODEL)
    assert confident.dense_share > 0.5 and not confident.judge_holds
    unreadable = assess(runs, KINDS, QueryFacts(embedder_reads=0.0), weights={}, model=MODEL)
    assert unreadable.dense_share == 0.0
    assert unreadable.weights == {"sag2": 2.0, "dense": 0.0}
    assert unreadable.judge_holds


def test_assess_without_both_kinds_keeps_the_weights() -> None:
    runs = {"dense": scored("dense", ("b", 0.9)), "title": scored("title", ("e", 1.0))}
    t = assess(runs, KINDS, QueryFacts(), weights={"dense": 0.5}, model=MODEL)
    assert t.weights == {"dense": 0.5, "title": 1.0}
    assert t.judge_holds and t.dense_share == 0.0 and t.reasons == {}


def test_a_judge_that_said_no_to_everything_loses_its_order_to_the_embedding_path() -> None:
    model = TrustModel(coefficients={}, bias=-50.0, judge_hold_below=0.7,
                       judge_unsure_below=0.1, unsure_dense_share=0.6)
    dense = scored("dense", ("b", 0.9), ("c", 0.3))
    unsure = {"sag2": scored("sag2", ("a", 0.09), ("b", 0.02), judged=True), "dense": dense}
    t = assess(unsure, KINDS, QueryFacts(embedder_reads=0.5), weights={}, model=model)
    assert not t.judge_holds
    assert t.dense_share == pytest.approx(0.6 * 0.5)  # the floor, times what the model reads
    assert t.weights == {"sag2": pytest.approx(2 * 0.7), "dense": pytest.approx(2 * 0.3)}
    assert "(no hit reached 0.10)" in t.reasons["sag2"]
    # one hit at the threshold: the judge said yes to something, its order holds as before
    sure = {"sag2": scored("sag2", ("a", 0.1), judged=True), "dense": dense}
    t = assess(sure, KINDS, QueryFacts(embedder_reads=0.5), weights={}, model=model)
    assert t.judge_holds and t.dense_share < 1e-20
    # a judged path with no probabilities at all (hidden scores) is not an unsure judge
    blind = {"sag2": scored("sag2", ("a", 0.05)), "dense": dense}
    assert assess(blind, KINDS, QueryFacts(), weights={}, model=model).judge_holds


def test_trust_model_checks_its_numbers() -> None:
    with pytest.raises(ValueError, match="unknown trust signals \\['magic'\\]"):
        TrustModel(coefficients={"magic": 1.0}, bias=0.0)
    with pytest.raises(ValueError, match="'bias' must be finite"):
        TrustModel(coefficients={}, bias=math.nan)
    with pytest.raises(ValueError, match="floor/ceiling"):
        TrustModel(coefficients={}, bias=0.0, floor=0.6, ceiling=0.5)
    with pytest.raises(ValueError, match="judge_unsure_below must be in \\[0, 1\\], got 1.5"):
        TrustModel(coefficients={}, bias=0.0, judge_unsure_below=1.5)
    clamped = TrustModel(coefficients={}, bias=10.0, ceiling=0.8)
    runs = {"sag2": scored("sag2", ("a", 0.5), judged=True), "dense": scored("dense", ("b", 1.0))}
    assert assess(runs, KINDS, QueryFacts(), weights={}, model=clamped).dense_share == 0.8


# --------------------------------------------------------------------------------------------
# convex


def test_normalise_minmax_and_zscore() -> None:
    hits = scored("dense", ("a", 0.9), ("b", 0.5), ("c", 0.1))
    assert normalise(hits) == pytest.approx({"a": 1.0, "b": 0.5, "c": 0.0})
    z = normalise(hits, method="zscore")
    std = math.sqrt((0.4**2 + 0 + 0.4**2) / 3)
    assert z == pytest.approx({"a": 0.4 / std, "b": 0.0, "c": -0.4 / std})
    assert normalise(scored("dense", ("a", 0.3), ("b", 0.3))) == {"a": 1.0, "b": 1.0}
    assert normalise([]) == {}
    with pytest.raises(ValueError, match="unknown score normalisation 'rank'"):
        normalise(hits, method="rank")


def test_convex_exact_scores_and_absent_floor() -> None:
    runs = {
        "bm25": scored("bm25", ("x", 9.0), ("y", 5.0), ("z", 1.0)),
        "dense": scored("dense", ("y", 0.8), ("w", 0.6), ("x", 0.4)),
    }
    fused = convex(runs, weights={"bm25": 0.3, "dense": 0.7})
    # minmax: bm25 x 1, y .5, z 0; dense y 1, w .5, x 0; absent counts the list's lowest (0)
    expected = {"y": 0.3 * 0.5 + 0.7 * 1.0, "x": 0.3, "w": 0.35, "z": 0.0}
    assert [h.chunk_id for h in fused] == ["y", "w", "x", "z"]
    assert {h.chunk_id: h.score for h in fused} == pytest.approx(expected)
    y = fused[0]
    assert [(c.path, c.rank, c.rrf_term) for c in y.contributions] == [
        ("bm25", 2, pytest.approx(0.15)),
        ("dense", 1, pytest.approx(0.7)),
    ]
    # zscore: an absent chunk gets the list's lowest z, not 0
    zf = {h.chunk_id: h.score for h in convex(runs, method="zscore")}
    zb, zd = normalise(runs["bm25"], method="zscore"), normalise(runs["dense"], method="zscore")
    assert zf["w"] == pytest.approx(min(zb.values()) + zd["w"])


def test_convex_weight_zero_depth_and_errors() -> None:
    runs = {
        "bm25": scored("bm25", ("x", 9.0), ("y", 5.0)),
        "dense": scored("dense", ("q", 0.8)),
    }
    assert [h.chunk_id for h in convex(runs, weights={"dense": 0.0})] == ["x", "y"]
    # one hit each: x 1 + absent 0, q 0 + 1: a tie, broken by chunk id
    assert [h.chunk_id for h in convex(runs, depth=1, limit=1)] == ["q"]
    with pytest.raises(ValueError, match="weight for path 'bm25'"):
        convex(runs, weights={"bm25": -1.0})
    with pytest.raises(ValueError, match="depth"):
        convex(runs, depth=0)
    with pytest.raises(ValueError, match="run keys must equal Hit.path"):
        convex({"bm25": scored("dense", ("x", 1.0))})


# --------------------------------------------------------------------------------------------
# fuse with trust


def test_fuse_lets_trusted_dense_reorder_what_the_judge_scored() -> None:
    runs = {
        "sag2": scored("sag2", ("a", 0.9), ("b", 0.6), ("c", 0.2), judged=True),
        "dense": scored("dense", ("c", 0.95), ("b", 0.3), ("a", 0.2)),
    }
    chunks = views("a", "b", "c")
    opts = dict(query="q", chunks=chunks, judge_accept=0.5, judge_order=True, method="convex")
    held = fuse(runs, weights={"sag2": 1.0, "dense": 1.0}, **opts)
    # the judge's yes (a, b) comes first and its order holds over what it scored
    assert [h.chunk_id for h in held] == ["a", "b", "c"]
    assert held[0].rules == ("judge_accepted",)
    from hybridsag.fusion import Trust

    trusted = Trust(weights={"sag2": 0.2, "dense": 1.8}, judge_holds=False, dense_share=0.9)
    fused = fuse(runs, trust=trusted, **opts)
    # minmax: sag2 a 1, b 4/7, c 0; dense c 1, b 2/15, a 0. c 1.8 > b 0.2*4/7 + 1.8*2/15 > a 0.2;
    # no judge rule fires
    assert [h.chunk_id for h in fused] == ["c", "b", "a"]
    assert {h.chunk_id: h.score for h in fused} == pytest.approx(
        {"c": 1.8, "b": 0.2 * 4 / 7 + 1.8 * 2 / 15, "a": 0.2}
    )
    assert all(h.rules == () for h in fused)
    with pytest.raises(ValueError, match="unknown fusion method 'sum'"):
        fuse(runs, query="q", chunks=chunks, method="sum")


def test_a_model_reading_flatness_and_support_trusts_dense_more_when_lexical_is_weak() -> None:
    """The candidate of issue 27 item 1 (``lexical_flat`` 5, ``dense_support`` -2, the
    coefficients of benchmarks/results/trust_model_entity_candidate.json beside main's): the
    same judged and embedding lists weigh the embedding path more when BM25's list is flat and
    holds none of the embedding path's finds than when BM25's first hit stands out and BM25
    also finds what the embedding path found."""
    model = TrustModel(coefficients={"lexical_flat": 5.0, "dense_support": -2.0}, bias=-1.5)
    judged = scored("sag2", *((f"j{i}", 0.2 - 0.01 * i) for i in range(10)), judged=True)
    dense = scored("dense", *((f"d{i}", 0.6 - 0.01 * i) for i in range(10)))
    flat = scored("bm25", *((f"j{i}", 5.0 - 0.02 * i) for i in range(20)))
    steep = scored("bm25", ("d0", 20.0), ("d1", 9.0), ("d2", 6.0), ("d3", 5.0), ("d4", 4.0),
                   *((f"d{i}", 3.0 - 0.1 * i) for i in range(5, 10)), ("j0", 1.0))
    facts = QueryFacts(embedder_reads=1.0, terms=3, terms_in_index=1.0, idf=0.5, words=3)
    weak = assess({"sag2": judged, "dense": dense, "bm25": flat}, KINDS, facts, weights={},
                  model=model)
    strong = assess({"sag2": judged, "dense": dense, "bm25": steep}, KINDS, facts, weights={},
                    model=model)
    assert weak.signals["lexical_flat"] > 0.9 and weak.signals["dense_support"] == 0.0
    assert strong.signals["lexical_flat"] < 0.2 and strong.signals["dense_support"] == 1.0
    z_weak = -1.5 + 5.0 * weak.signals["lexical_flat"]
    z_strong = -1.5 + 5.0 * strong.signals["lexical_flat"] - 2.0
    assert weak.dense_share == pytest.approx(1 / (1 + math.exp(-z_weak)))
    assert strong.dense_share == pytest.approx(1 / (1 + math.exp(-z_strong)))
    assert weak.weights["dense"] > strong.weights["dense"]
