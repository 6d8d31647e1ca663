"""The ``hybridsag`` command line, run in-process through ``main(argv, out=...)``."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hybridsag.cli import main

from tests.cli_support import QUERIES, beir, lexical_only, run  # noqa: F401

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "corpus"

pytestmark = pytest.mark.usefixtures("lexical_only")


def test_eval_by_question_type_and_pool_per_round(tmp_path: Path, beir: Path) -> None:
    """Queries with a ``type`` field get metrics per type; SAG2 reports the share of gold in
    its pool after each round, a question whose loop stopped early counting its last pool."""
    typed = [{**q, "type": "multi" if q["_id"] == "q3" else "single"} for q in QUERIES]
    (beir / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in typed) + "\n", "utf-8")
    code, text = run("eval", "--data", str(beir), "--paths", "bm25,sag2", "--json",
                     "--out", str(tmp_path / "r"), "-q")  # fmt: skip
    assert code == 0, text
    paths = json.loads(text)["paths"]
    for name in ("bm25", "sag2"):
        by_type = paths[name]["by_type"]
        assert {t: m["questions"] for t, m in by_type.items()} == {"multi": 1, "single": 2}
        # the overall mean is the question-weighted mean of the types
        overall = (by_type["multi"]["recall@1"] + 2 * by_type["single"]["recall@1"]) / 3
        assert paths[name]["recall@1"] == pytest.approx(overall, abs=1e-4)
    assert paths["bm25"]["by_type"]["multi"]["recall@1"] == 0.5  # two gold, one at rank 1
    sag2 = paths["sag2"]
    rounds = sorted(k for k in sag2 if k.startswith("gold_in_pool_round"))
    assert rounds[0] == "gold_in_pool_round0_per_query"
    pool = [sag2[k] for k in rounds]
    assert pool == sorted(pool) and 0.0 <= pool[0] and pool[-1] <= 1.0  # pools only grow
    code, table = run("eval", "--data", str(beir), "--paths", "bm25", "--out",
                      str(tmp_path / "t"), "-q")  # fmt: skip
    assert code == 0 and "  multi (1)" in table and "  single (2)" in table


def test_index_folder_then_search_json(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(SAMPLES, corpus)
    code, text = run("index", str(corpus), "-q")
    assert code == 0
    assert text.startswith("indexed ") and "0 skipped" in text
    code, text = run("search", "ReActAgent", "-k", "3", "--json", "--paths", "bm25,title")
    assert code == 0
    data = json.loads(text)
    assert data["query"] == "ReActAgent"
    assert 1 <= len(data["results"]) <= 3
    top = data["results"][0]
    assert top["resource_id"] == "guide/agents.md" and "ReActAgent" in top["text"]
    for key in ("title", "heading_path", "start_line", "end_line", "byte_start", "byte_end",
                "content_sha256", "score", "paths", "why"):  # fmt: skip
        assert key in top
    assert (tmp_path / ".hybridsag" / "hybridsag.sqlite3").is_file()  # the default data dir


def test_search_text_output(tmp_path: Path, beir: Path) -> None:
    assert run("index", "--jsonl", str(beir / "corpus.jsonl"), "-q")[0] == 0
    code, text = run("search", "Turing machine", "--paths", "bm25")
    assert code == 0
    assert "1 result for 'Turing machine' via bm25" in text and "Alan Turing" in text


def test_search_judge_order_flag(tmp_path: Path, beir: Path) -> None:
    assert run("index", "--jsonl", str(beir / "corpus.jsonl"), "-q")[0] == 0
    for flag in ("--judge-order", "--no-judge-order"):
        code, text = run("search", "Who wrote the first program?", "--paths", "sag2,bm25", flag,
                         "--json")  # fmt: skip
        assert code == 0, text
        assert json.loads(text)["results"][0]["resource_id"] == "p1"


def test_index_jsonl_json_report(tmp_path: Path, beir: Path) -> None:
    code, text = run("--data-dir", str(tmp_path / "dd"), "index", "--jsonl",
                     str(beir / "corpus.jsonl"), "--json", "-q")  # fmt: skip
    assert code == 0
    report = json.loads(text)
    assert (report["indexed"], report["chunks"], report["errors"]) == (4, 4, {})
    code, text = run("--data-dir", str(tmp_path / "dd"), "search", "Babbage", "--json",
                     "--paths", "bm25")  # fmt: skip
    assert code == 0
    assert [r["resource_id"] for r in json.loads(text)["results"]] == ["p2"]


def test_empty_query_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, text = run("search", "")
    assert code == 2 and text == ""
    assert "empty" in capsys.readouterr().err


def test_bad_jsonl_path_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run("index", "--jsonl", str(tmp_path / "missing.jsonl"), "-q")
    assert code == 2
    assert "missing.jsonl" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ("search", "fox", "--paths", "bogus"),
        ("search", "fox", "-k", "0"),
        ("search", "fox", "--meta", "novalue"),
        ("search", "a\x00b"),
        ("index", "does-not-exist", "-q"),
        ("index", "-q"),
        ("search",),  # argparse: missing QUERY
        ("frobnicate",),
    ],
)
def test_bad_input_exits_2(argv: tuple[str, ...]) -> None:
    assert run(*argv)[0] == 2


def test_doctor_json(tmp_path: Path) -> None:
    code, text = run("doctor", "--json")
    assert code == 0
    data = json.loads(text)
    assert data["ok"] is True
    checks = {c["check"]: c for c in data["checks"]}
    assert {"settings", "store"} <= set(checks)
    assert all(c["ok"] for c in checks.values())
    assert "tokenizer" in checks["store"]["detail"]


def test_doctor_reports_a_bad_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDSAG_CHUNKING__TARGET_CHARS", "10")
    code, text = run("doctor", "--json")
    assert code == 1
    data = json.loads(text)
    assert data["ok"] is False and "target_chars" in data["checks"][0]["detail"]


def test_eval_json_object_and_reports(tmp_path: Path, beir: Path) -> None:
    out_dir = tmp_path / "report"
    code, text = run("eval", "--data", str(beir), "--paths", "bm25,title", "--json",
                     "--out", str(out_dir), "-q")  # fmt: skip
    assert code == 0
    summary = json.loads(text)
    assert summary["dataset"] == "tinybeir"
    assert summary["questions"] == 3  # the query without qrels is dropped
    assert {"build_s", "passages", "bytes"} <= set(summary["index"])
    assert summary["index"]["passages"] == 4 and summary["index"]["bytes"] > 0
    assert summary["index"]["build_s"] >= 0
    assert set(summary["paths"]) == {"bm25", "title"}
    keys = {"recall@1", "recall@2", "recall@5", "recall@10", "mrr@10", "ndcg@10", "p50_ms",
            "p95_ms"}  # fmt: skip
    for name, metrics in summary["paths"].items():
        assert keys <= set(metrics), name
        for k in keys - {"p50_ms", "p95_ms"}:
            assert 0.0 <= metrics[k] <= 1.0
        assert 0 <= metrics["p50_ms"] <= metrics["p95_ms"]
    bm25 = summary["paths"]["bm25"]
    assert bm25["recall@10"] == 1.0  # every gold passage shares a word with its question
    assert bm25["recall@1"] < 1.0  # q3 has two gold passages: one cannot be both at rank 1

    assert {p.name for p in out_dir.iterdir()} >= {"metrics.json", "details.jsonl", "config.json"}
    metrics = json.loads((out_dir / "metrics.json").read_text("utf-8"))
    assert metrics["paths"] == summary["paths"]
    details_text = (out_dir / "details.jsonl").read_text("utf-8")
    details = [json.loads(line) for line in details_text.splitlines()]
    assert len(details) == 6  # 3 questions x 2 paths
    q2 = next(d for d in details if d["path"] == "bm25" and d["query_id"] == "q2")
    assert q2["gold"] == ["p3"] and q2["returned"][0] == "p3" and q2["recall@10"] == 1.0
    config = json.loads((out_dir / "config.json").read_text("utf-8"))
    assert config["paths"] == ["bm25", "title"]
    assert len(config["data"]["sha256"]) == 64
    assert "hybridsag" in config["versions"]


def test_tune_weights_prints_settings_whose_recall_a_search_reproduces(
    tmp_path: Path, beir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, text = run(
        "eval", "--data", str(beir), "--tune-weights", "--fuse", "sag2,bm25,title",
        "--json", "-q", "--out", str(tmp_path / "tune"),
    )  # fmt: skip
    assert code == 0, text
    tuned = json.loads(text)
    chosen = tuned["chosen"]
    assert tuned["fused_paths"] == ["sag2", "bm25", "title"]
    assert set(chosen["weights"]) == {"sag2", "bm25", "title"}
    assert max(chosen["weights"].values()) == 1
    assert isinstance(chosen["judge_order"], bool)
    assert tuned["grid_points"] > 100
    assert chosen["recall@10"] >= max(m["recall@10"] for m in tuned["single_paths"].values())
    assert (tmp_path / "tune" / "tune.json").is_file()
    # the printed settings, given to a plain eval, measure the same recall
    for key, value in tuned["settings_env"].items():
        monkeypatch.setenv(key, value)
    code, text = run(
        "eval", "--data", str(beir), "--paths", "fused", "--fuse", "sag2,bm25,title",
        "--json", "-q", "--out", str(tmp_path / "check"),
    )  # fmt: skip
    assert code == 0, text
    fused = json.loads(text)["paths"]["fused"]
    for k in ("recall@2", "recall@5", "recall@10"):
        assert fused[k] == pytest.approx(chosen[k], abs=1e-4), k
    code, text = run("eval", "--data", str(beir), "--tune-weights", "-q")
    assert code == 0 and "settings to use (TOML):" in text and "judge_order = " in text


def test_eval_table_output(tmp_path: Path, beir: Path) -> None:
    code, text = run("eval", "--data", str(beir), "--out", str(tmp_path / "r"), "-q")
    assert code == 0
    assert "dataset tinybeir: 3 questions, 4 passages" in text
    assert "bm25" in text and "recall@10" in text


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("qrels.tsv", "q1\tp1\tnot-a-number\n"),
        ("qrels.tsv", "q1-only\n"),
        ("queries.jsonl", "{not json\n"),
    ],
)
def test_eval_bad_data_exits_2(
    tmp_path: Path, beir: Path, name: str, content: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (beir / name).write_text(content, "utf-8")
    code, _ = run("eval", "--data", str(beir), "--out", str(tmp_path / "r"), "-q")
    assert code == 2
    assert name in capsys.readouterr().err


def test_eval_missing_folder_and_bad_path_exit_2(tmp_path: Path, beir: Path) -> None:
    assert run("eval", "--data", str(tmp_path / "nowhere"), "-q")[0] == 2
    assert run("eval", "--data", str(beir), "--paths", "bm25,bogus", "-q")[0] == 2


def test_installed_console_script_runs() -> None:
    script = Path(sys.executable).parent / "hybridsag"
    assert script.is_file(), script
    proc = subprocess.run(
        [str(script), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    for command in ("index", "search", "eval", "doctor"):
        assert command in proc.stdout


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        ([b"search", b"fox\xff"], b"query holds a lone surrogate '\\udcff'"),
        ([b"search", b"fox", b"--tenant", b"t\xfe"], b"filters.tenant 't\\udcfe'"),
        ([b"search", b"fox", b"--acl", b"\xed\xa0\x80"], b"filters.acl tag"),
        ([b"search", b"\xff", b"--json"], b"lone surrogate"),
        ([b"index", b"DOCS", b"--tenant", b"t\xff"], b"index --tenant/--acl: filters.tenant"),
    ],
)
def test_text_that_is_not_utf8_exits_2_with_one_valid_utf8_line(
    tmp_path: Path, argv: list[bytes], named: bytes, lexical_only: None
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "fox.md").write_text("# Fox\n\nThe quick brown fox.\n")
    assert run("--data-dir", str(tmp_path / "d"), "index", str(tmp_path / "docs"), "-q")[0] == 0
    script = Path(sys.executable).parent / "hybridsag"
    env = {**os.environ, "HYBRIDSAG_DATA_DIR": str(tmp_path / "d"), "LC_ALL": "C.UTF-8"}
    argv = [bytes(tmp_path / "docs") if a == b"DOCS" else a for a in argv]
    proc = subprocess.run(
        [bytes(script), *argv], capture_output=True, timeout=120, check=False, env=env
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == b""
    proc.stderr.decode("utf-8")  # strict: raises on invalid UTF-8
    assert proc.stderr.count(b"\n") == 1 and named in proc.stderr, proc.stderr


def test_json_output_is_valid_utf8_whatever_the_index_holds(tmp_path: Path) -> None:
    from hybridsag.commands.common import utf8_safe

    assert utf8_safe("a\udcffb") == "a\\udcffb"
    assert json.loads('"' + utf8_safe("a\udcffb") + '"') == "a\udcffb"
    buffer = io.BytesIO()
    stream = io.TextIOWrapper(buffer, encoding="utf-8", errors="surrogateescape")
    code = main(["--data-dir", str(tmp_path / "d\udcff"), "doctor", "--json"], out=stream)
    stream.flush()
    assert code == 0
    data = json.loads(buffer.getvalue().decode("utf-8"))  # strict UTF-8, then JSON
    assert "d\udcff" in data["checks"][0]["detail"]
