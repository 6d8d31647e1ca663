"""Every code block of the README and of every page under docs/ is run or checked, and says which.

The line above each fenced block is a marker comment, ``<!-- KIND: note -->``, as the README's
walk-through has always had (``<!-- walkthrough: run by tests/integration/test_readme.py -->``):

- ``walkthrough``, ``service``, ``snippet``: the README's first hour, run by test_readme.py;
- ``run``: run here, a page's Python blocks in order in one new process and its shell blocks in
  order in one bash (``set -euo pipefail``), from a copy of ``samples/`` with the dense path off
  (``HYBRIDSAG_EMBEDDING__MODEL=none``), so the blocks need neither the model nor the network;
- ``config``: a TOML block is loaded as settings (every key must exist and every value be valid),
  a JSON block is parsed;
- ``synopsis``: each ``hybridsag ...`` line's command and ``--flags`` must exist in the CLI's
  parser;
- ``benchmark``: each ``python SCRIPT`` named must exist and every ``--flag`` on its line must be
  in that script's source (benchmarks are not tests: they take minutes and the shared data sets);
- ``output``, ``diagram``: printed output, a Mermaid picture; nothing to run;
- ``not run``: a block that cannot run here (a crontab line, docker, a remote service), with the
  reason.

A block with no marker, an unknown kind, or code indented instead of fenced fails the test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.test_readme import _env  # the README blocks' environment

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
README_KINDS = {"walkthrough", "service", "snippet"}
KINDS = README_KINDS | {"run", "config", "synopsis", "benchmark", "output", "diagram", "not run"}
_FENCE = re.compile(r"^(\s*)(```|~~~)\s*([\w+-]*)")
_MARKER = re.compile(r"^\s*<!--\s*([a-z][a-z ]*?)\s*:\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based, the opening fence
    language: str
    kind: str | None
    note: str
    text: str

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of one Markdown file, each with the marker on the line above it."""
    lines = page.read_text("utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, language = m.groups()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        above = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = _MARKER.match(above)
        body = "\n".join(line[len(indent) :] for line in lines[i + 1 : end])
        out.append(
            Block(page, i + 1, language, marker.group(1) if marker else None,
                  marker.group(2) if marker else "", body)  # fmt: skip
        )
        i = end + 1
    return out


def indented_code(page: Path) -> list[int]:
    """Lines that Markdown would read as an indented code block (4 spaces after a blank line,
    outside fences and list items): every block must be fenced so that it carries a marker."""
    lines = page.read_text("utf-8").splitlines()
    found, in_fence, in_list = [], False, False
    for n, line in enumerate(lines):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        if re.match(r"^\s*([-*+]|\d+\.)\s", line):
            in_list = True
        elif line and not line.startswith(" "):
            in_list = False
        if line.startswith("    ") and n and not lines[n - 1].strip() and not in_list:
            found.append(n + 1)
    return found


ALL = [b for page in PAGES for b in blocks(page)]


def test_every_block_is_run_or_marked() -> None:
    assert len(ALL) > 20 and len(PAGES) > 10  # the pages are there and the parser found blocks
    problems = [f"{b.where()}: no marker comment above the block" for b in ALL if b.kind is None]
    problems += [f"{b.where()}: unknown kind {b.kind!r}" for b in ALL if b.kind and b.kind not in KINDS]
    problems += [f"{b.where()}: {b.kind} blocks live in README.md (test_readme.py runs them)"
                 for b in ALL if b.kind in README_KINDS and b.page.name != "README.md"]  # fmt: skip
    problems += [f"{b.where()}: 'not run' needs its reason" for b in ALL
                 if b.kind == "not run" and len(b.note) < 12]  # fmt: skip
    problems += [f"{page.relative_to(ROOT)}:{n}: indented code; fence it and mark it"
                 for page in PAGES for n in indented_code(page)]  # fmt: skip
    assert problems == [], "\n".join(problems)


def test_the_marker_check_fails_on_an_unmarked_block(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A\n\n<!-- run: x -->\n```sh\ntrue\n```\n\n```python\nprint(1)\n```\n\n"
                    "Text.\n\n    indented\n", "utf-8")  # fmt: skip
    found = blocks(page)
    assert [(b.kind, b.language, b.line) for b in found] == [("run", "sh", 4), (None, "python", 8)]
    assert indented_code(page) == [14]


# ---- run ------------------------------------------------------------------------------------


RUN_PAGES = sorted({b.page for b in ALL if b.kind == "run"})


@pytest.mark.parametrize("page", RUN_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_pages_run_blocks_run(page: Path, tmp_path: Path) -> None:
    shutil.copytree(ROOT / "samples", tmp_path / "samples")
    runs = [b for b in blocks(page) if b.kind == "run"]
    python = [b for b in runs if b.language == "python"]
    shell = [b for b in runs if b.language in {"sh", "bash", "shell"}]
    assert len(python) + len(shell) == len(runs), [b.where() for b in runs]
    for language, chosen in (("python", python), ("bash", shell)):
        if not chosen:
            continue
        source = "\n\n".join(b.text for b in chosen)
        command = [sys.executable, "-c", source] if language == "python" else [
            "bash", "-c", "set -euo pipefail\n" + source]  # fmt: skip
        proc = subprocess.run(
            command, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True,
            timeout=400, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, (
            [b.where() for b in chosen], proc.stdout[-2000:], proc.stderr[-3000:]
        )
        assert proc.stdout.strip(), f"{[b.where() for b in chosen]} printed nothing"


# ---- config, synopsis, benchmark ------------------------------------------------------------


def _configs() -> list[Block]:
    return [b for b in ALL if b.kind == "config"]


@pytest.mark.parametrize("block", _configs(), ids=Block.where)
def test_config_blocks_are_valid(block: Block, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if block.language == "json":
        json.loads(block.text)
        return
    assert block.language == "toml", block.where()
    from hybridsag.settings import Settings

    for name in list(os.environ):
        if name.upper().startswith("HYBRIDSAG_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    data = tomllib.loads(block.text)
    Settings(_env_file=None, **data)  # unknown keys and bad values raise


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its sub-parsers only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    found = {s for a in parser._actions for s in a.option_strings}
    for sub in _subparsers(parser).values():
        found |= _options(sub)
    return found


def synopsis_problems(text: str, parser: argparse.ArgumentParser) -> list[str]:
    """One line per command or flag of a synopsis that the parser does not have."""
    commands = _subparsers(parser)
    top = {s for a in parser._actions for s in a.option_strings}
    problems = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].replace("[", " ").replace("]", " ").replace("|", " ").split()
        if not words or words[0] != "hybridsag":
            continue
        rest = [w for w in words[1:] if w not in top and w not in {"URL", "..."}]
        name = rest[0] if rest else None
        if name is None or name.startswith("-"):
            continue  # a global flag alone (--version, -v ...)
        if name not in commands:
            problems.append(f"no command {name!r}: {line}")
            continue
        known = _options(commands[name]) | top
        problems += [f"{name} has no {flag}: {line}" for flag in rest
                     if flag.startswith("-") and flag.split("=")[0] not in known]  # fmt: skip
    return problems


def test_synopsis_blocks_name_real_commands_and_flags() -> None:
    from hybridsag.cli import build_parser

    parser = build_parser()
    chosen = [b for b in ALL if b.kind == "synopsis"]
    assert chosen
    problems = [f"{b.where()}: {p}" for b in chosen for p in synopsis_problems(b.text, parser)]
    assert problems == [], "\n".join(problems)
    assert synopsis_problems("hybridsag serach x\nhybridsag list --no-such-flag", parser) == [
        "no command 'serach': hybridsag serach x",
        "list has no --no-such-flag: hybridsag list --no-such-flag",
    ]


def test_benchmark_blocks_name_real_scripts_and_flags() -> None:
    chosen = [b for b in ALL if b.kind == "benchmark"]
    assert chosen
    problems = []
    for b in chosen:
        for line in b.text.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            scripts = [w for w in words if w.endswith(".py")]
            if not scripts:
                continue
            script = ROOT / scripts[0]
            if not script.is_file():
                problems.append(f"{b.where()}: no script {scripts[0]}")
                continue
            source = script.read_text("utf-8")
            after = words[words.index(scripts[0]) + 1 :]
            problems += [f"{b.where()}: {scripts[0]} has no {w}" for w in after
                         if w.startswith("--") and f'"{w.split("=")[0]}"' not in source]  # fmt: skip
    assert problems == [], "\n".join(problems)


# ---- names ----------------------------------------------------------------------------------

_DOTTED = re.compile(r"`(hybridsag(?:\.[A-Za-z_]\w*)+)")
# names in the pages that are no Python object: a logger, a file
NOT_OBJECTS = {"hybridsag.service.access", "hybridsag.sqlite3"}


def _resolves(name: str) -> bool:
    import importlib

    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_every_module_or_name_the_pages_give_exists() -> None:
    """A page that names ``hybridsag.x.y`` names a module or object that is there (modules move:
    a page left behind fails here, not in a reader's hands)."""
    named = {m for page in PAGES for m in _DOTTED.findall(page.read_text("utf-8"))} - NOT_OBJECTS
    assert "hybridsag.fusion.trust" in named
    assert [n for n in sorted(named) if not _resolves(n)] == []
    assert not _resolves("hybridsag.fusion.no_such_module")
