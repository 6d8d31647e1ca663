"""Eval that survives its data: bad questions and qrels are found before the first search,
reported and skipped; an interrupted run writes the metrics of what ran, marked partial."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from hybridsag.evaluation.harness import format_table, run_eval
from hybridsag.settings import Settings
from tests.cli_support import run

CORPUS = [
    {"_id": "p1", "title": "Ada Lovelace", "text": "Ada Lovelace wrote the first program."},
    {"_id": "p2", "title": "Alan Turing", "text": "Alan Turing described the Turing machine."},
    {"_id": "p3", "title": "Grace Hopper", "text": "Grace Hopper built the first compiler."},
]
QUERIES = [
    {"_id": "q1", "text": "Who wrote the first program?"},
    {"_id": "TRIAL_776_QUERY_4", "text": ""},  # cmrc2018 has two of these
    {"_id": "q2", "text": "Turing machine"},
    {"_id": "TRIAL_20_QUERY_0", "text": "   "},
    {"_id": "q3", "text": "the first compiler"},
    {"_id": "q-nul", "text": "bad\u0000query"},
    {"_id": "q2", "text": "Turing machine again"},  # a repeated id
    {"_id": "q-lost", "text": "a question whose gold passage is missing"},
]
QRELS = (
    "query-id\tcorpus-id\tscore\nq1\tp1\t1\nTRIAL_776_QUERY_4\tp1\t1\nq2\tp2\t1\n"
    "TRIAL_20_QUERY_0\tp2\t1\nq3\tp3\t1\nq-nul\tp3\t1\nq-lost\tp404\t1\n"
)


@pytest.fixture
def beir(tmp_path: Path) -> Path:
    folder = tmp_path / "bad-beir"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CORPUS), "utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUERIES), "utf-8")
    (folder / "qrels.tsv").write_text(QRELS, "utf-8")
    return folder


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", embedding={"model": "none"})


def test_bad_questions_and_qrels_are_reported_and_skipped(
    beir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYBRIDSAG_EMBEDDING__MODEL", "none")
    code, text = run("eval", "--data", str(beir), "--paths", "bm25", "--json", "-q",
                     "--out", str(tmp_path / "r"))  # fmt: skip
    assert code == 0, text
    summary = json.loads(text)
    assert summary["questions"] == 3
    skipped = summary["skipped"]
    assert skipped["count"] == 5
    assert skipped["ids"] == {
        "TRIAL_776_QUERY_4": "query is empty or whitespace only",
        "TRIAL_20_QUERY_0": "query is empty or whitespace only",
        "q-nul": "query holds a NUL character at position 3",
        "q2": "repeated question id (queries.jsonl:7)",
        "qrels.tsv:8": "gold passage 'p404' of 'q-lost' is not in the corpus",
    }
    assert summary["paths"]["bm25"]["recall@10"] == 1.0
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text("utf-8"))
    assert metrics["skipped"] == skipped
    code, text = run("eval", "--data", str(beir), "-q", "--out", str(tmp_path / "r2"))
    assert code == 0
    assert "skipped 5 before the first search (" in text
    assert "TRIAL_776_QUERY_4: query is empty or whitespace only" in text


def _interrupt_after(n: int) -> Callable[[str, int], Callable[[int], None]]:
    """A progress callback that raises KeyboardInterrupt (as Ctrl-C does) after ``n`` questions
    of the first path."""
    done = {"questions": 0}

    def factory(label: str, total: int) -> Callable[[int], None]:
        def tick(k: int) -> None:
            if label in ("index", "embed"):
                return
            done["questions"] += k
            if done["questions"] >= n:
                raise KeyboardInterrupt

        return tick

    return factory


def test_an_interrupted_eval_writes_partial_results(
    beir: Path, settings: Settings, tmp_path: Path
) -> None:
    out = tmp_path / "partial"
    summary = run_eval(settings, beir, paths=("bm25", "title"), out=out,
                       progress=_interrupt_after(2))  # fmt: skip
    assert summary["partial"] == {
        "interrupted_path": "bm25", "questions_done": 2, "questions": 3,
        "paths_not_run": ["title"],
    }  # fmt: skip
    assert set(summary["paths"]) == {"bm25"}
    metrics = json.loads((out / "metrics.json").read_text("utf-8"))
    assert metrics["partial"]["questions_done"] == 2
    details = (out / "details.jsonl").read_text("utf-8").splitlines()
    assert len(details) == 2
    assert "PARTIAL: interrupted in bm25 after 2 of 3 questions; not run: title" in (
        format_table(summary)
    )


def test_graded_qrels_give_graded_and_binary_ndcg(tmp_path: Path) -> None:
    """A qrels file with grades is read as ranx and trec_eval read it (gain = grade): eval
    reports graded nDCG@10 and the binary reading beside it, and the table shows both."""
    from hybridsag.evaluation.harness import load_dataset

    corpus = [{"_id": f"p{i}", "title": f"T{i}", "text": f"orbit number {i} of the lamp"}
              for i in range(6)]  # fmt: skip
    corpus[0]["text"] = "the lamp orbit lamp orbit lamp"  # bm25's first, graded 1
    folder = tmp_path / "graded"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text("".join(json.dumps(c) + "\n" for c in corpus), "utf-8")
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q", "text": "lamp orbit"}) + "\n")
    (folder / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq\tp0\t1\nq\tp3\t3\nq\tp5\t0\n")
    ds = load_dataset(folder)
    assert ds.qrels["q"] == frozenset({"p0", "p3"}) and ds.qrels["q"].grade("p3") == 3.0
    summary = run_eval(
        Settings(data_dir=tmp_path / "data", embedding={"model": "none"}),
        folder, paths=["bm25"], out=tmp_path / "r",
    )  # fmt: skip
    assert summary["graded"] is True
    bm25 = summary["paths"]["bm25"]
    assert bm25["recall@10"] == 1.0
    assert bm25["ndcg@10"] < bm25["ndcg@10_binary"]  # the grade-3 passage ranks below grade 1
    assert "bndcg@10" in format_table(summary).splitlines()[1]
