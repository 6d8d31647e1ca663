"""The documentation site builds with ``mkdocs build --strict`` (a page left out of the nav, a link to
no page or anchor, a module mkdocstrings cannot collect: each fails the build), its generated
reference pages cover the code they are generated from, and the README stays a front page."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 300


def _reference() -> object:
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "scripts" / "docs_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_is_at_most_300_lines() -> None:
    lines = (ROOT / "README.md").read_text("utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    env = {**os.environ, "DISABLE_MKDOCS_2_WARNING": "true", "NO_MKDOCS_2_WARNING": "1"}
    env = {k: v for k, v in env.items() if not k.upper().startswith("HYBRIDSAG_")}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    site = tmp_path / "site"
    for page in ("reference/settings", "reference/cli", "reference/http-api", "reference/python",
                 "getting-started", "how-search-works", "benchmarks", "AGENTS"):  # fmt: skip
        assert (site / page / "index.html").is_file(), page
    # the first hour is the README's own text, included, not a copy
    assert "test_readme.py" in (site / "getting-started" / "index.html").read_text("utf-8")
    # a module's page holds its docstring
    fusion = (site / "reference" / "python" / "fusion" / "rrf" / "index.html").read_text("utf-8")
    assert "Cormack" in fusion


def test_the_settings_page_lists_every_setting_with_its_variable() -> None:
    from hybridsag.settings import Settings
    from pydantic import BaseModel

    page = _reference().settings_page()

    def leaves(model: type[BaseModel], prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
        out = []
        for name, field in model.model_fields.items():
            ann = field.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                out += leaves(ann, (*prefix, name))
            else:
                out.append((*prefix, name))
        return out

    keys = leaves(Settings, ())
    assert len(keys) > 100
    missing = [k for k in keys if f"| `{'.'.join(k)}` |" not in page
               or f"`HYBRIDSAG_{'__'.join(p.upper() for p in k)}`" not in page]  # fmt: skip
    assert missing == []
    row = "| `chunking.target_chars` | `int` | `512` | [400, 12000] | `HYBRIDSAG_CHUNKING__TARGET_CHARS` |"
    assert row in page


def test_the_cli_page_has_every_command() -> None:
    from hybridsag.cli import build_parser

    page = _reference().cli_page()
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            commands = list(action.choices)
    assert "search" in commands and "reconcile" in commands  # the entry-point commands too
    assert [c for c in commands if f"## `hybridsag {c}`" not in page] == []


def test_the_http_page_has_every_route_of_the_schema() -> None:
    reference = _reference()
    spec = reference.openapi_schema()
    page = reference.http_page()
    routes = [(m.upper(), p) for p, ops in spec["paths"].items() for m in ops]
    assert ("POST", "/v1/search") in routes and ("POST", "/v1/reconcile") in routes
    assert [r for r in routes if f"## `{r[0]} {r[1]}`" not in page] == []


def test_the_python_reference_walks_every_installed_package() -> None:
    modules = _reference().public_modules()
    for name in ("hybridsag", "hybridsag.search", "hybridsag.fusion.rrf", "hybridsag.consistency.plan",
                 "hybridsag.service.app", "hybridsag.integrations.langchain"):  # fmt: skip
        assert name in modules
    assert not [m for m in modules if any(part.startswith("_") for part in m.split("."))]
