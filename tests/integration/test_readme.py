"""The README's walk-through runs as written on a fresh clone: every command of the shell block
under ``<!-- walkthrough -->`` (split as a shell splits it, run through the CLI's ``main`` from
the repository root, as ``hybridsag`` on PATH runs it; tests/integration/test_cli.py runs the
installed console script itself) and the Python snippet under ``<!-- snippet -->`` (in a new
process, from a copy of ``samples/``). The dense path is switched off through the environment
(``HYBRIDSAG_EMBEDDING__MODEL=none``) so that the test does not load the model; the text of both
blocks is run unchanged."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_support import run
from tests.servicesupport import free_socket

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text("utf-8")


def _block(marker: str, language: str) -> str:
    m = re.search(rf"<!-- {marker}:[^>]*-->\n```{language}\n(.*?)\n```", README, re.DOTALL)
    assert m is not None, f"no {language} block after <!-- {marker}: ... --> in README.md"
    return m.group(1)


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HYBRIDSAG_DATA_DIR": str(tmp_path / "data"),
        "HYBRIDSAG_EMBEDDING__MODEL": "none",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }


def test_the_walkthrough_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    block = _block("walkthrough", "sh")
    commands = [line for line in block.splitlines() if line.strip()]
    assert commands[0] == "hybridsag index samples/corpus" and len(commands) >= 6
    for key, value in _env(tmp_path).items():
        if key.startswith("HYBRIDSAG_"):
            monkeypatch.setenv(key, value)
    monkeypatch.chdir(ROOT)
    outputs = []
    for command in commands:
        program, *argv = shlex.split(command)
        assert program == "hybridsag", command
        code, text = run(*argv)
        err = capsys.readouterr().err
        assert code == 0, (command, text[-2000:], err[-2000:])
        assert err == "", (command, err)
        outputs.append(text)
    joined = "\n".join(outputs)
    assert "indexed 13 resources" in joined
    assert " 1. Agents › " in joined  # the ReActAgent search
    assert "deleted guide/agents.md" in joined
    assert "recall@10" in joined
    assert (tmp_path / "data" / "hybridsag.sqlite3").is_file()


def test_the_python_snippet_runs_as_written(tmp_path: Path) -> None:
    snippet = _block("snippet", "python")
    shutil.copytree(ROOT / "samples", tmp_path / "samples")
    proc = subprocess.run(
        [sys.executable, "-c", snippet], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = proc.stdout.splitlines()[0].split()
    assert first[:2] == ["1", "faq/reset"]  # the search printed its result
    assert (tmp_path / ".hybridsag" / "hybridsag.sqlite3").is_file()


def test_the_service_block_runs_as_written(tmp_path: Path) -> None:
    """The first hour's service block, run by bash as a user pastes it (its own port and HOME):
    the watched folder is indexed, the edit is found in its new form, the deleted file is gone
    from ``list``, the audit through the service is clean and the service stops."""
    block = _block("service", "sh")
    with free_socket() as sock:
        port = sock.getsockname()[1]
    env = {**_env(tmp_path), "HYBRIDSAG_SERVER__PORT": str(port)}
    del env["HYBRIDSAG_DATA_DIR"]  # the block sets its own
    script = "set -euo pipefail\n" + block + "\nwait\n"
    proc = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400,
        check=False,
    )  # fmt: skip
    log = (tmp_path / "notes-serve.log").read_text("utf-8", "replace")
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:], log[-3000:])
    out = proc.stdout
    assert " 1. Agents › " in out  # the first search, before the edit
    found = out.split("1 result for 'retries a failed tool call'", 1)[1]
    assert "guide/agents.md" in found.split("RESOURCE", 1)[0]  # the edit, in its new form
    assert "retries a failed tool call" in found
    listing = found.split("RESOURCE", 1)[1]
    assert "guide/agents.md" in listing and "notes/meeting-2024-05-20.txt" not in listing
    assert "clean" in out  # the audit's headline
    assert (tmp_path / "notes-index" / "hybridsag.sqlite3").is_file()
