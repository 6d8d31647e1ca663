"""No value of a secret setting appears anywhere: sentinel secrets are set in the environment, a
TOML file and a ``.env`` file, then a battery of succeeding and failing commands runs (logging at
DEBUG, tracebacks on) and every output, log record and file written is searched for them."""

from __future__ import annotations

import io
import json
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from hybridsag.cli import main
from tests.jevserver import JevServer

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "corpus"

ENV_KEY = "sk-SENTINEL-ENV-1d2c"
TOML_TOKEN = "mv-SENTINEL-TOML-7a8b"
DOTENV_TOKEN = "srv-SENTINEL-DOTENV-3e4f"
TYPO_KEY = "sk-SENTINEL-TYPO-5g6h"
SENTINELS = (ENV_KEY, TOML_TOKEN, DOTENV_TOKEN, TYPO_KEY, "SENTINEL")

CORPUS = [
    {"_id": "p1", "title": "Ada Lovelace", "text": "Ada Lovelace wrote the first program."},
    {"_id": "p2", "title": "Alan Turing", "text": "Alan Turing described the Turing machine."},
]


class Battery:
    """Runs CLI commands in-process and keeps everything they printed."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.outputs: list[str] = []

    def run(self, *argv: str) -> int:
        out = io.StringIO()
        code = main(["-vvv", *argv], out=out)
        captured = self.capsys.readouterr()
        self.outputs += [out.getvalue(), captured.out, captured.err]
        return code


@pytest.fixture
def battery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> Iterator[Battery]:  # fmt: skip
    caplog.set_level(logging.DEBUG)
    (tmp_path / "c.toml").write_text(f'[milvus]\ntoken = "{TOML_TOKEN}"\n', "utf-8")
    (tmp_path / ".env").write_text(f"HYBRIDSAG_SERVER__TOKEN={DOTENV_TOKEN}\n", "utf-8")
    monkeypatch.setenv("HYBRIDSAG_CONFIG", str(tmp_path / "c.toml"))
    monkeypatch.setenv("HYBRIDSAG_JUDGE__JEV__API_KEY", ENV_KEY)
    monkeypatch.setenv("HYBRIDSAG_EMBEDDING__MODEL", "none")
    shutil.copytree(SAMPLES, tmp_path / "corpus")
    beir = tmp_path / "beir"
    beir.mkdir()
    (beir / "corpus.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CORPUS), "utf-8")
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "Turing machine"}\n', "utf-8")
    (beir / "qrels.tsv").write_text("q1\tp2\t1\n", "utf-8")
    b = Battery(capsys)
    yield b
    texts = [*b.outputs, caplog.text, *(repr(r.__dict__) for r in caplog.records)]
    for path in sorted(tmp_path.rglob("*")):
        if path.is_file() and path.name not in {"c.toml", ".env", "typo.toml", "list.toml"}:
            texts.append(path.read_bytes().decode("utf-8", "replace"))
    assert len(texts) > 40
    for text in texts:
        for secret in SENTINELS:
            assert secret not in text, text[max(0, text.find(secret) - 300) :][:600]


def test_succeeding_commands_never_show_a_secret(battery: Battery, tmp_path: Path) -> None:
    assert battery.run("index", str(tmp_path / "corpus"), "-q") == 0
    assert battery.run("index", str(tmp_path / "corpus"), "--json", "-q") == 0
    assert battery.run("search", "ReActAgent") == 0
    assert battery.run("search", "ReActAgent", "--json") == 0
    assert battery.run("search", "ReActAgent", "--brief") == 0
    assert battery.run("doctor") == 0
    assert battery.run("doctor", "--json") == 0
    assert battery.run("doctor", "--all-settings") == 0
    assert battery.run("eval", "--data", str(tmp_path / "beir"), "--paths", "bm25,fused",
                       "--fuse", "bm25,title", "--out", str(tmp_path / "ev"), "--json", "-q") == 0
    assert (tmp_path / "ev" / "config.json").is_file()
    assert battery.run("reconcile", "--json") == 0
    assert battery.run("audit", "--json") == 0


def test_failing_commands_never_show_a_secret(
    battery: Battery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert battery.run("index", str(tmp_path / "corpus"), "-q") == 0
    with JevServer(api_key="another-key") as server:  # answers 401 and echoes the header
        monkeypatch.setenv("HYBRIDSAG_JUDGE__NAME", "jev")
        monkeypatch.setenv("HYBRIDSAG_JUDGE__JEV__BASE_URL", server.url)
        monkeypatch.setenv("HYBRIDSAG_JUDGE__JEV__MAX_RETRIES", "0")
        assert battery.run("search", "ReActAgent", "--paths", "sag2") == 0  # degraded
        assert battery.run("search", "ReActAgent", "--paths", "sag2", "--json") == 0
        monkeypatch.setenv("HYBRIDSAG_JUDGE__ON_FAILURE", "raise")
        assert battery.run("search", "ReActAgent", "--paths", "sag2") == 1
        assert server.request_count >= 3
    monkeypatch.delenv("HYBRIDSAG_JUDGE__ON_FAILURE")
    monkeypatch.setenv("HYBRIDSAG_JUDGE__JEV__BASE_URL", "http://127.0.0.1:9")  # nothing there
    assert battery.run("search", "ReActAgent", "--paths", "sag2") == 0
    for command in (("search", "x"), ("doctor",), ("doctor", "--json")):
        with monkeypatch.context() as mp:  # a cross-field error beside the key
            mp.setenv("HYBRIDSAG_CHUNKING__OVERLAP_CHARS", "600")
            assert battery.run(*command) in (1, 2)
        with monkeypatch.context() as mp:  # a misspelled key holding a secret, in TOML
            (tmp_path / "typo.toml").write_text(f'[judge.jev]\napi_kye = "{TYPO_KEY}"\n', "utf-8")
            mp.setenv("HYBRIDSAG_CONFIG", str(tmp_path / "typo.toml"))
            assert battery.run(*command) in (1, 2)
        with monkeypatch.context() as mp:  # ... and in the environment
            mp.setenv("HYBRIDSAG_JUDGE__JEV__API_KYE", TYPO_KEY)
            mp.setenv("HYBRIDSAG_SERVER__TOKN", TYPO_KEY)
            assert battery.run(*command) in (1, 2)
        with monkeypatch.context() as mp:  # a secret of the wrong type
            (tmp_path / "list.toml").write_text(f'[milvus]\ntoken = ["{TYPO_KEY}"]\n', "utf-8")
            mp.setenv("HYBRIDSAG_CONFIG", str(tmp_path / "list.toml"))
            assert battery.run(*command) in (1, 2)
        with monkeypatch.context() as mp:  # a key that cannot go in a header
            mp.setenv("HYBRIDSAG_JUDGE__NAME", "jev")
            mp.setenv("HYBRIDSAG_JUDGE__JEV__API_KEY", f" {TYPO_KEY}\t")
            assert battery.run(*command) in (0, 1, 2)
