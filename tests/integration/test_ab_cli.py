"""``hybridsag eval --compare`` and ``eval --grid`` end to end through the CLI (in-process
``main``), on the CLI tests' tiny BEIR-style set indexed lexical-only: the JSON and the table,
the files written, TREC runs out and back in as an arm, and bad input (exit 2, the bad value
named)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_support import beir, lexical_only, run  # noqa: F401

pytest.importorskip("ranx", reason="eval --compare needs the ab extra (pip install -e '.[ab]')")

pytestmark = pytest.mark.usefixtures("lexical_only")


def test_compare_json_files_and_trec_round_trip(tmp_path: Path, beir: Path) -> None:
    out = tmp_path / "cmp"
    code, text = run("eval", "--data", str(beir), "--compare", "bm25,title,sag2", "--json",
                     "--out", str(out), "-q")  # fmt: skip
    assert code == 0, text
    s = json.loads(text)
    assert s["arms_order"] == ["bm25", "title", "sag2"] and s["questions"] == 3
    assert set(s["pairs"]) == {"bm25 vs title", "bm25 vs sag2", "title vs sag2"}
    assert s["bonferroni_tests"] == 9  # 3 pairs x 3 metrics
    for pair in s["pairs"].values():
        for m in ("recall@5", "recall@10", "ndcg@10"):
            cell = pair[m]
            assert cell["wins"] + cell["losses"] + cell["ties"] == 3
            low, high = cell["ci95"]
            assert low <= cell["mean_difference"] <= high
            if cell["p_value"] is not None:
                assert cell["p_value"] <= cell["p_bonferroni"] <= 1.0
    # ranx's recall is our (HippoRAG 2) recall: the cross-check finds no difference
    assert set(s["crosscheck"]["max_abs_difference_ranx_vs_ours"].values()) == {0.0}
    assert s["arms"]["bm25"]["recall@10"] == 1.0  # gold shares a word with its question
    written = {p.name for p in out.iterdir()}
    assert written >= {"compare.json", "details.jsonl", "config.json", "runs"}
    assert json.loads((out / "compare.json").read_text("utf-8"))["pairs"] == s["pairs"]
    details = [json.loads(line) for line in (out / "details.jsonl").read_text("utf-8").splitlines()]
    assert {d["query_id"] for d in details} <= {"q1", "q2", "q3"}
    bm25_run = Path(s["trec_runs"]["bm25"])
    first = bm25_run.read_text("utf-8").splitlines()[0].split()
    assert first[1] == "Q0" and first[3] == "1" and first[5] == "bm25"  # qid Q0 doc rank score tag

    # a TREC run is an arm: bm25's own run against bm25 differs by nothing
    code, text = run("eval", "--data", str(beir), "--compare", f"bm25,{bm25_run}", "--json",
                     "--out", str(tmp_path / "again"), "-q")  # fmt: skip
    assert code == 0, text
    again = json.loads(text)
    # the arms keep the order given: the TREC arm (read first) is not listed first
    assert again["arms_order"] == list(again["arms"]) == ["bm25", str(bm25_run)]
    assert again["verdict"] == "verdict: no difference: every arm has nDCG@10 " + (
        f"{again['arms']['bm25']['ndcg@10'] * 100:.2f}"
    )
    (pair,) = again["pairs"].values()
    for m in ("recall@5", "recall@10", "ndcg@10"):
        assert pair[m]["mean_difference"] == 0 and pair[m]["ties"] == 3
    assert list(again["arms"].values())[0]["recall@10"] == s["arms"]["bm25"]["recall@10"]


def test_compare_table_and_grid(tmp_path: Path, beir: Path) -> None:
    code, text = run("eval", "--data", str(beir), "--compare", "bm25,sag2",
                     "--stat-test", "fisher", "--out", str(tmp_path / "t"), "-q")  # fmt: skip
    assert code == 0, text
    assert "paired fisher test (ranx)" in text and "bm25 vs sag2" in text and "nDCG@10" in text
    code, text = run("eval", "--data", str(beir), "--grid", "--grid-method", "rrf",
                     "--fuse", "bm25,title", "--grid-k", "10,60", "--grid-weights", "0,1",
                     "--json", "--out", str(tmp_path / "g"), "-q")  # fmt: skip
    assert code == 0, text
    grid = json.loads(text)
    assert grid["fused_paths"] == ["bm25", "title"] and grid["points"] >= 2
    assert grid["method"] == "rrf" and {p["k"] for p in grid["table"]} == {10.0, 60.0}
    best = grid["table"][0]["recall@10"]
    assert all(p["recall@10"] <= best for p in grid["table"])
    assert (tmp_path / "g" / "grid.json").is_file()


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--compare", "bm25"], "bm25"),  # one arm compares with nothing
        (["--compare", "bm25,nopath"], "nopath"),
        (["--compare", "bm25,sag2", "--grid"], "--grid"),
        (["--compare", "bm25,sag2", "--alpha", "0.7"], "0.7"),
        (["--grid", "--grid-weights", "0,2"], "--grid-weights"),
        # k is RRF's: a convex grid (the default method) or arm cannot sweep it
        (["--grid", "--grid-k", "10,60"], "method here is convex"),
        (["--grid", "--grid-method", "convex", "--grid-k", "10"], "method here is convex"),
        (["--grid", "--grid-method", "rrf", "--grid-normalisation", "zscore"], "here is rrf"),
        (["--compare", "bm25,fused:k=30"], "method here is convex"),
    ],
)
def test_compare_bad_input_exits_2_naming_it(
    tmp_path: Path, beir: Path, capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    code, _ = run("eval", "--data", str(beir), "--out", str(tmp_path / "x"), "-q", *argv)
    assert code == 2
    assert named in capsys.readouterr().err
