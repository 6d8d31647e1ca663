"""The offline-runs engine (:mod:`hybridsag.evaluation.offline_runs`) scores what a search returns.

A small real corpus (the SAG2 tests' film -> director -> mother chain beside the CLI tests'
computing pioneers, 18 passages, 6 questions) is indexed as eval indexes it, lexical-only
(sag2, bm25 and title; the trust step weighs the judged path against plain BM25). Every grid
point, for both fusion methods, is checked against a real ``HybridSearch.search`` with those
settings over the same index: the same ranked chunk ids and fused scores, trust step on. A
parameter the method does not read (``k`` for convex) is refused, and ``tune_weights``' chosen
settings measure, through real searches, the recall it reported. One case runs the dense path
on the packaged model (slow: it loads the model and Milvus Lite).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from hybridsag.ab.arms import parse_arms
from hybridsag.ab.offline import grid_search
from hybridsag.errors import InputError
from hybridsag.evaluation.harness import (
    load_dataset,
    open_eval_index,
    questions_of,
    tune_weights,
)
from hybridsag.evaluation.measures import metrics_for
from hybridsag.evaluation.offline_runs import Capture, capture, fused, grid, relative_weights, score
from hybridsag.search import HybridSearch
from hybridsag.settings import FusionSettings, Settings
from tests.cli_support import CORPUS as PIONEERS
from tests.integration.test_sag2 import CORPUS as FILMS
from tests.integration.test_sag2 import QUESTION
from tests.settings_support import clean_env_settings

LEXICAL = ("sag2", "bm25", "title")
PAIR = ("sag2", "bm25")
QUESTIONS = {
    "film": (QUESTION, ["moonlit-harbor", "elena-varga", "ilona-kertesz"]),
    "tide": ("Who directed Silent Tide, and who was his mother?", ["silent-tide", "marco-bellini"]),
    "painter": ("Hungarian painter of river landscapes", ["ilona-kertesz"]),
    "program": ("Who wrote the first program?", ["p1"]),
    "turing": ("Turing machine", ["p3"]),
    "engine": ("the first compiler and the Analytical Engine", ["p4", "p2"]),
}


def _write_set(folder: Path) -> Path:
    folder.mkdir(parents=True)
    passages = [{"_id": rid, "title": t, "text": x} for rid, (t, x) in FILMS.items()]
    passages += PIONEERS
    (folder / "corpus.jsonl").write_text("".join(json.dumps(p) + "\n" for p in passages), "utf-8")
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, (t, _) in QUESTIONS.items()),
        "utf-8",
    )
    qrels = "".join(f"{q}\t{g}\t1\n" for q, (_, gold) in QUESTIONS.items() for g in gold)
    (folder / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels, "utf-8")
    return folder


@pytest.fixture(scope="module")
def data_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_set(tmp_path_factory.mktemp("offline") / "films")


@pytest.fixture(scope="module")
def indexed(data_set: Path) -> Iterator[tuple[HybridSearch, Capture]]:
    """The set indexed as eval indexes it (lexical-only) and its lexical paths captured."""
    root = data_set.parent
    settings = clean_env_settings(data_dir=root / "data", embedding={"model": "none"})
    ds = load_dataset(data_set)
    hs, _info = open_eval_index(settings, ds, root / "eval", needs_dense=False)
    try:
        yield hs, capture(hs, questions_of(ds), LEXICAL)
    finally:
        hs.close()


def _searched(hs: HybridSearch, fusion: FusionSettings, cap: Capture) -> dict[str, list]:
    """Per question, (chunk id, fused score) of a real search under ``fusion``."""
    with HybridSearch(hs.settings.model_copy(update={"fusion": fusion})) as real:
        return {
            q.qid: [
                (r.chunk_id, r.fused_score)
                for r in real.search(q.fusion_in.query, top_k=10, paths=cap.paths).results
            ]
            for q in cap.questions
        }


def _offline(fusion: FusionSettings, cap: Capture) -> dict[str, list]:
    return {
        q.qid: [(h.chunk_id, h.score) for h in fused(q.fusion_in, fusion)] for q in cap.questions
    }


@pytest.mark.parametrize(
    ("method", "own"),
    [("convex", {"normalisations": ("minmax", "zscore")}), ("rrf", {"ks": (1.0, 10.0, 100.0)})],
)
def test_each_grid_point_is_what_a_search_with_its_settings_returns(
    indexed: tuple[HybridSearch, Capture], method: str, own: dict[str, Any]
) -> None:
    hs, cap = indexed
    base = hs.settings.fusion
    assert base.trust and cap.paths == LEXICAL
    weights = relative_weights(cap.paths, (0.25, 1.0))[::3]
    points = grid(base, method, weights, judge_orders=(True, False), **own)
    assert len(points) == len(weights) * 2 * len(next(iter(own.values())))
    seen = set()
    for point in points:
        assert point.method == method and point.trust
        searched = _searched(hs, point, cap)
        assert _offline(point, cap) == searched, point
        scored = score(cap, point)
        for q in cap.questions:
            resources = [q.fusion_in.views[c].resource_id for c, _ in searched[q.qid]]
            assert scored.ranked[q.qid] == list(dict.fromkeys(resources))
            assert scored.per_query[q.qid] == metrics_for(scored.ranked[q.qid], q.gold)
        seen.add(repr(sorted(searched.items())))
    # the method's own parameter moves what a search returns: the sweep is not of one point
    assert len(seen) == len(points)


def test_the_grid_reports_what_searches_with_each_point_measure(
    tmp_path: Path, data_set: Path
) -> None:
    settings = Settings(data_dir=tmp_path / "data", embedding={"model": "none"})
    for method, own in (("convex", {"normalisations": ("minmax", "zscore")}),
                        ("rrf", {"ks": (10.0, 60.0)})):  # fmt: skip
        out = tmp_path / method
        grid_search(settings, data_set, fuse=PAIR, method=method, weights=(0.25, 1.0),
                    rounds=(0, 1), out=out, **own)  # fmt: skip
        points = json.loads((out / "grid.json").read_text("utf-8"))["all_points"]
        assert len(points) == 2 * 2 * 3  # rounds x k or normalisation x weights (largest 1)
        index = settings.model_copy(update={"data_dir": out / "index"})
        for p in points:
            assert p["method"] == method
            own_value = {"k": p["k"]} if method == "rrf" else {"normalisation": p["normalisation"]}
            fusion = index.fusion.model_copy(
                update={"method": method, "weights": p["weights"], **own_value}
            )
            sag2 = index.sag2.model_copy(update={"rounds": p["rounds"]})
            with HybridSearch(index.model_copy(update={"fusion": fusion, "sag2": sag2})) as hs:
                measured = _recalls(hs, data_set, PAIR)
            for key in ("recall@5", "recall@10", "ndcg@10"):
                assert p[key] == pytest.approx(measured[key], abs=1e-6), (p, key)


def test_a_parameter_the_method_does_not_read_is_refused(
    tmp_path: Path, data_set: Path
) -> None:
    weights = relative_weights(LEXICAL, (0.5, 1.0))
    settings = Settings(data_dir=tmp_path / "data", embedding={"model": "none"})
    with pytest.raises(InputError, match="convex"):
        grid(settings.fusion, "convex", weights, ks=(10.0, 60.0))
    with pytest.raises(InputError, match="rrf"):
        grid(settings.fusion, "rrf", weights, normalisations=("zscore",))
    assert settings.fusion.method == "convex"
    with pytest.raises(InputError, match="convex"):
        grid_search(settings, data_set, fuse=LEXICAL, ks=(10.0, 60.0), out=tmp_path / "g")
    assert not (tmp_path / "g").exists()  # refused before anything was indexed
    for arm in ("fused:k=30", "bm25+title:k=30,title=0.5"):
        with pytest.raises(InputError, match="convex"):
            parse_arms(f"bm25,{arm}")[1].settings_for(settings)
    rrf_arm = parse_arms("bm25,fused:method=rrf,k=30")[1].settings_for(settings)
    assert rrf_arm.fusion.method == "rrf" and rrf_arm.fusion.k == 30.0


def _recalls(hs: HybridSearch, ds_folder: Path, paths: Sequence[str]) -> dict[str, float]:
    ds = load_dataset(ds_folder)
    per_query = []
    for qid, text in ds.queries:
        results = hs.search(text, top_k=10, paths=paths, explain=False).results
        ranked = list(dict.fromkeys(r.resource_id for r in results))
        per_query.append(metrics_for(ranked, ds.qrels[qid]))
    return {k: sum(m[k] for m in per_query) / len(per_query) for k in per_query[0]}


def test_tune_weights_chosen_settings_give_a_search_the_recall_it_reported(
    tmp_path: Path, data_set: Path
) -> None:
    settings = Settings(data_dir=tmp_path / "data", embedding={"model": "none"})
    tuned = tune_weights(settings, data_set, fuse=LEXICAL, out=tmp_path / "tune")
    chosen = tuned["chosen"]
    # the configured method and trust step are the ones tuned, not a forced RRF without trust
    assert chosen["method"] == "convex" and tuned["trust"] is True and "k" not in chosen
    assert tuned["settings_env"]["HYBRIDSAG_FUSION__TRUST"] == "true"
    assert "HYBRIDSAG_FUSION__K" not in tuned["settings_env"]
    fusion = settings.fusion.model_copy(
        update={
            "weights": chosen["weights"],
            "judge_order": chosen["judge_order"],
            "normalisation": chosen["normalisation"],
        }
    )
    index = settings.model_copy(
        update={"data_dir": tmp_path / "tune" / "index", "fusion": fusion}
    )
    with HybridSearch(index) as hs:
        measured = _recalls(hs, data_set, LEXICAL)
    for key in ("recall@2", "recall@5", "recall@10"):
        assert measured[key] == pytest.approx(chosen[key], abs=1e-4), key


def assert_same_ranking(
    got: Sequence[tuple[str, float]], want: Sequence[tuple[str, float]], *, rel: float = 1e-6
) -> None:
    """The same hits with the same scores, up to float32 noise of the query's embedding: on a
    loaded machine two encodes of one query can differ in the last bits (a full run of the
    suite saw 0.09787097 against 0.09787095 for one fused score, two float32 ulps), so the
    scores are compared to ``rel`` and two hits may trade places only where they tie within it."""
    assert len(got) == len(want), (got, want)
    for (gid, gs), (wid, ws) in zip(got, want):
        assert gs == pytest.approx(ws, rel=rel), (got, want)
    for i, ((gid, gs), (wid, _ws)) in enumerate(zip(got, want)):
        if gid != wid:
            tied = [c for c, s in want if s == pytest.approx(gs, rel=rel)]
            assert gid in tied, f"rank {i + 1}: {gid} where a search ranks {wid}: {got} != {want}"
    assert {c for c, _s in got} == {c for c, _s in want}, (got, want)


def test_assert_same_ranking_can_fail() -> None:
    assert_same_ranking([("a", 0.5), ("b", 0.25)], [("a", 0.5 + 1e-9), ("b", 0.25)])
    assert_same_ranking([("a", 0.5), ("b", 0.5 + 1e-9)], [("b", 0.5), ("a", 0.5)])
    for got in ([("b", 0.5), ("a", 0.25)], [("a", 0.5), ("b", 0.3)], [("a", 0.5)]):
        with pytest.raises(AssertionError):
            assert_same_ranking(got, [("a", 0.5), ("b", 0.25)])


@pytest.mark.slow
def test_grid_points_match_a_search_on_the_dense_path_too(tmp_path: Path, data_set: Path) -> None:
    settings = Settings(
        data_dir=tmp_path / "data", embedding={"backend": "sentence-transformers"}
    )
    ds = load_dataset(data_set)
    paths = ("sag2", "dense", "bm25", "title")
    hs, info = open_eval_index(settings, ds, tmp_path / "eval", needs_dense=True)
    try:
        assert info["vectors"] == len(FILMS) + len(PIONEERS)
        cap = capture(hs, questions_of(ds), paths)
        assert cap.paths == paths
        assert all(q.fusion_in.facts.embedder_reads is not None for q in cap.questions)
        for point in grid(hs.settings.fusion, "convex", relative_weights(paths, (0.5, 1.0))[:3]):
            with HybridSearch(
                hs.settings.model_copy(update={"fusion": point}),
                embedder=hs.components.embedder(),
                dense_index=hs.components.dense_index(),
            ) as real:
                for q in cap.questions:
                    want = real.search(q.fusion_in.query, top_k=10, paths=paths).results
                    got = fused(q.fusion_in, point)
                    assert_same_ranking(
                        [(h.chunk_id, h.score) for h in got], [(r.chunk_id, r.fused_score) for r in want]
                    )
    finally:
        hs.close()
