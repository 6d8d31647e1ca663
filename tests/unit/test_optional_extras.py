"""The framework integrations stay optional: the core never imports LangChain, LlamaIndex or the
MCP SDK, and an adapter whose extra is missing says which ``pip install`` to run.

A missing package is made real in a child interpreter: ``sys.modules[name] = None`` makes every
``import name`` there raise ImportError, as on a machine without the extra.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORKS = ("langchain_core", "langchain", "llama_index", "mcp", "mcp_types")


def child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
        check=False,
    )  # fmt: skip


def test_the_core_never_imports_a_framework() -> None:
    code = f"""
import json, sys
import hybridsag, hybridsag.search, hybridsag.client, hybridsag.output.agent, hybridsag.service
import hybridsag.integrations, hybridsag.backend
from hybridsag.cli import build_parser
build_parser().parse_args(["search", "x", "--format", "agent"])
build_parser().parse_args(["mcp", "--allow-writes"])
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {FRAMEWORKS!r})))
"""
    proc = child(code)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [
        ("hybridsag.integrations.langchain", "langchain_core", "langchain"),
        ("hybridsag.integrations.llamaindex", "llama_index", "llamaindex"),
        ("hybridsag.integrations.mcp_server", "mcp", "mcp"),
    ],
)
def test_a_missing_extra_names_the_pip_install(module: str, blocked: str, extra: str) -> None:
    code = f"""
import sys
sys.modules[{blocked!r}] = None
from hybridsag.errors import ConfigError
try:
    import {module}
except ImportError as exc:
    assert isinstance(exc, ConfigError), type(exc)
    print(exc)
else:
    raise SystemExit("imported without {blocked}")
"""
    proc = child(code)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert proc.stdout.strip() == (
        f"hybridsag.integrations.{extra} needs the {extra} extra ({blocked} is not installed): "
        f"pip install 'hybridsag[{extra}]'"
    )


def test_hybridsag_mcp_without_the_extra_exits_2_naming_it(tmp_path: Path) -> None:
    code = f"""
import sys
sys.modules["mcp"] = None
from hybridsag.cli import main
sys.exit(main(["--data-dir", {str(tmp_path / "data")!r}, "mcp"]))
"""
    proc = child(code)
    assert proc.returncode == 2
    assert "pip install 'hybridsag[mcp]'" in proc.stderr and proc.stdout == ""
