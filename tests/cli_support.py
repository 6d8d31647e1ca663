"""Running the ``hybridsag`` CLI in-process, as the CLI tests do, and the fixtures they share
(import them into a test module to use them)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from hybridsag.cli import main

__all__ = ["CORPUS", "QRELS", "QUERIES", "SAMPLES", "beir", "lexical_only", "run", "sample_index"]

SAMPLES = Path(__file__).resolve().parents[1] / "samples" / "corpus"


#: A tiny BEIR-style set (the ``beir`` fixture writes it): 4 passages, 3 questions with gold
#: and one without (dropped).
CORPUS = [
    {"_id": "p1", "title": "Ada Lovelace", "text": "Ada Lovelace wrote the first program."},
    {"_id": "p2", "title": "Charles Babbage", "text": "Babbage designed the Analytical Engine."},
    {"_id": "p3", "title": "Alan Turing", "text": "Alan Turing described the Turing machine."},
    {"_id": "p4", "title": "Grace Hopper", "text": "Grace Hopper built the first compiler."},
]
QUERIES = [
    {"_id": "q1", "text": "Who wrote the first program?"},
    {"_id": "q2", "text": "Turing machine"},
    {"_id": "q3", "text": "the first compiler and the Analytical Engine"},
    {"_id": "q-no-gold", "text": "dropped: it has no qrels"},
]
QRELS = "query-id\tcorpus-id\tscore\nq1\tp1\t1\nq2\tp3\t1\nq3\tp4\t1\nq3\tp2\t1\n"


@pytest.fixture
def beir(tmp_path: Path) -> Path:
    """CORPUS, QUERIES and QRELS written as ``tmp_path/tinybeir``."""
    folder = tmp_path / "tinybeir"
    folder.mkdir()
    lines = [json.dumps(c) for c in CORPUS]
    (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n", "utf-8")
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in QUERIES) + "\n", "utf-8")
    (folder / "qrels.tsv").write_text(QRELS, "utf-8")
    return folder


@pytest.fixture
def lexical_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The dense path off (``HYBRIDSAG_EMBEDDING__MODEL=none``): no model loads."""
    monkeypatch.setenv("HYBRIDSAG_EMBEDDING__MODEL", "none")


@pytest.fixture
def sample_index(tmp_path: Path, lexical_only: None) -> Path:
    """``samples/corpus`` copied to ``tmp_path/corpus`` and indexed into ``tmp_path/.hybridsag``
    (the default data dir: the tests run in ``tmp_path``); returns ``tmp_path``."""
    corpus = tmp_path / "corpus"
    shutil.copytree(SAMPLES, corpus)
    assert run("index", str(corpus), "-q")[0] == 0
    return tmp_path


def run(*argv: str) -> tuple[int, str]:
    """``main(argv)`` with stdout captured: (exit code, what it printed)."""
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()
