"""Running the ``hybridsag`` CLI in-process, as the CLI tests do, and the fixtures they share
(import them into a test module to use them)."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from hybridsag.cli import main

__all__ = ["SAMPLES", "lexical_only", "run", "sample_index"]

SAMPLES = Path(__file__).resolve().parents[1] / "samples" / "corpus"


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
