"""One way in for every face (:mod:`hybridsag.backend`).

- ``reconcile --dry-run`` and ``audit`` exit 0 clean, 1 when the plan has work, 2 on error, so
  cron can alert on them (real SQLite; FTS rows deleted by hand).
- No command ignores ``--server``: pointed at a service that does not answer, every command
  either fails on it or says it runs in process only; none runs locally instead.
- In process and through a service the backend's operations answer the same (a running service
  over the very search the in-process backend uses).
- The faces reach the index only through the backend: the CLI modules and the MCP server import
  no search, write path, store parts nor service client, and the service's handlers call the
  backend the service holds, never the search itself (read from the source).
"""

from __future__ import annotations

import ast
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from hybridsag.errors import NotFoundError
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from tests.cli_support import lexical_only, run  # noqa: F401 - the lexical-only environment
from tests.servicesupport import ADMIN, running_service

if TYPE_CHECKING:
    from hybridsag.backend import LocalBackend, RemoteBackend

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    {"id": "heron", "title": "Heron", "text": "# Heron\n\nThe grey heron waits in the shallows."},
    {"id": "egret", "title": "Egret", "text": "# Egret\n\nThe little egret stirs the mud.", "tenant": "acme"},
    {"id": "stork", "title": "Stork", "text": "# Stork\n\nThe white stork nests on roofs.", "acl": ["birds"]},
]


# -- exit codes for cron ------------------------------------------------------------------------


@pytest.mark.usefixtures("lexical_only")
def test_reconcile_dry_run_and_audit_exit_0_clean_1_work_2_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "c.jsonl"
    lines = [json.dumps({"_id": f"doc{i}", "text": f"Passage {i} about kites."}) for i in range(5)]
    corpus.write_text("\n".join(lines) + "\n", "utf-8")
    assert run("index", "--jsonl", str(corpus), "-q")[0] == 0
    code, text = run("reconcile", "--dry-run")
    assert code == 0, text  # clean

    with sqlite3.connect(tmp_path / ".hybridsag" / "hybridsag.sqlite3") as conn:  # by hand
        conn.execute("DELETE FROM chunks_fts WHERE rowid IN (SELECT rowid FROM chunks_fts LIMIT 3)")
    code, text = run("reconcile", "--dry-run", "--json")
    assert code == 1  # the plan has work
    assert json.loads(text)["counts_before"]["missing_fts_rows"] == 3
    assert run("audit")[0] == 1  # the newest report is that dry run: work to do

    code, text = run("reconcile")
    assert code == 0, text  # repaired: nothing left
    assert run("audit")[0] == 0
    assert run("reconcile", "--dry-run")[0] == 0

    capsys.readouterr()
    for argv in (("reconcile", "--dry-run"), ("audit",)):  # an error: the service is not there
        assert run("--server", "http://127.0.0.1:9", *argv)[0] == 2
        assert "no answer from the service at http://127.0.0.1:9" in capsys.readouterr().err


# -- --server is never ignored ------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ("index", "docs"),
        ("index", "--jsonl", "c.jsonl"),
        ("search", "kites"),
        ("search", "kites", "--format", "agent"),
        ("list",),
        ("show", "doc1"),
        ("delete", "doc1"),
        ("enable", "doc1"),
        ("disable", "doc1"),
        ("reconcile", "--dry-run"),
        ("reconcile", "--schedule"),
        ("audit",),
        ("doctor",),
        ("rebuild-vectors",),
        ("eval", "--data", "beir"),
        ("ab", "list"),
        ("ab", "report", "exp"),
        ("ab", "start", "exp"),
    ],
    ids=lambda argv: "-".join(argv[:2]),
)
def test_no_command_ignores_server(
    argv: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nkites\n", "utf-8")
    (tmp_path / "c.jsonl").write_text(json.dumps({"_id": "d", "text": "kites"}) + "\n", "utf-8")
    url = "http://127.0.0.1:9"  # nothing answers there
    code, text = run("--server", url, *argv)
    said = text + capsys.readouterr().err
    assert code in (1, 2), said
    assert url in said, said  # it went to the service, or said why it cannot
    assert not (tmp_path / ".hybridsag").exists()  # nothing ran in process instead


# -- the same answers in process and through a service -------------------------------------------


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalBackend, RemoteBackend]]:
    from hybridsag.backend import LocalBackend, RemoteBackend

    data = tmp_path_factory.mktemp("faces") / "data"
    settings = Settings(data_dir=data, embedding={"model": "none"}, server={"token": ADMIN})
    with HybridSearch(settings) as hs:
        local = LocalBackend(hs)
        assert local.ingest(DOCS)["indexed"] == 3
        with running_service(settings, search=hs) as url:
            yield local, RemoteBackend(url, token=ADMIN)
        local.close()


def test_both_backends_answer_the_same(both: tuple[LocalBackend, RemoteBackend]) -> None:
    from hybridsag.backend import SearchOptions

    local, remote = both
    for kwargs in ({}, {"tenant": "acme"}, {"tenant": ""}, {"prefix": "st"}, {"limit": 1},
                   {"status": "disabled"}):  # fmt: skip
        assert remote.list_resources(**kwargs) == local.list_resources(**kwargs), kwargs
    assert [r["resource_id"] for r in local.list_resources()] == ["heron", "egret", "stork"]
    for rid, tenant in (("heron", None), ("egret", "acme"), ("stork", "")):
        assert remote.show(rid, tenant=tenant) == local.show(rid, tenant=tenant), rid
    assert local.show("egret") is None and remote.show("egret") is None  # acme's, not ""'s
    options = SearchOptions(top_k=5, paths=("bm25", "title"))
    here, there = local.search("heron shallows", options), remote.search("heron shallows", options)
    assert [(r.chunk_id, r.rank) for r in there.results] == [
        (r.chunk_id, r.rank) for r in here.results
    ]
    assert here.results[0].resource_id == "heron"
    assert remote.search_agent("heron", options) == local.search_agent("heron", options)
    for backend in (local, remote):
        assert backend.delete("nobody") is False
        assert backend.set_enabled("nobody", False) is False
        assert backend.set_enabled("stork", False, tenant="") is True
        assert [r["status"] for r in backend.list_resources(status="disabled")] == ["disabled"]
        assert backend.set_enabled("stork", True) is True
    assert remote.experiments() == local.experiments() == []
    for backend in (local, remote):
        with pytest.raises(NotFoundError, match="no reconcile report"):
            backend.audit()
    dry = local.reconcile(dry_run=True), remote.reconcile(dry_run=True)
    assert dry[0]["counts_before"] == dry[1]["counts_before"]
    assert remote.audit()["path"] == local.audit()["path"] == dry[1]["path"]
    assert local.health()["store"].startswith("ok: ") and remote.health()["store"].startswith("ok: ")


# -- the faces hold no logic of the index ---------------------------------------------------------

#: What a face reaches only through the backend (imported at module or function level).
BEHIND_THE_BACKEND = (
    "hybridsag.search",
    "hybridsag.components.Components",
    "hybridsag.ingest.writer",
    "hybridsag.ingest.folders",
    "hybridsag.vectors.index",
    "hybridsag.vectors.contract",
    "hybridsag.vectors.milvus_dense",
    "hybridsag.lexical.index",
    "hybridsag.lexical.contract",
    "hybridsag.lexical.queries",
    "hybridsag.lexical.fts5",
    "hybridsag.lexical.postgres",
    "hybridsag.client",
    "hybridsag.ab.online",
    "hybridsag.consistency.reconciler",
)
#: The command line's way to the backend (:func:`hybridsag.commands.common.backend_from_args`),
#: under its owner's name and the name :mod:`hybridsag.cli` re-exports it as.
BACKEND_OF_ARGS = ("hybridsag.commands.common.backend_from_args", "hybridsag.cli.backend_from_args")
#: The faces whose imports are read (the LangChain adapter's pydantic model needs the
#: ``HybridSearch`` type at run time, to check the one it is given: it never builds one).
FACES = (
    "plugin/cli.py",
    "plugin/ab/cli.py",
    "consistency/cli.py",
    "plugin/integrations/mcp_server.py",
    "plugin/integrations/llamaindex.py",
)


def _imports(path: Path) -> set[str]:
    """Every name ``path`` imports when it runs (``if TYPE_CHECKING:`` blocks left out)."""
    tree = ast.parse(path.read_text("utf-8"))
    typing_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for n in ast.walk(node)
    }
    out = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def _behind(imported: set[str]) -> list[str]:
    """The names of ``imported`` that only the backend may reach."""
    return sorted(
        name for name in imported
        if any(name == m or name.startswith(m + ".") for m in BEHIND_THE_BACKEND)
    )  # fmt: skip


@pytest.mark.parametrize("face", FACES)
def test_a_face_imports_the_backend_and_nothing_behind_it(face: str) -> None:
    imported = _imports(ROOT / face)
    behind = _behind(imported)
    assert behind == [], f"{face} reaches past the backend: {behind}"
    assert any(
        name.startswith("hybridsag.backend.") or name in BACKEND_OF_ARGS for name in imported
    ), f"{face} does not use hybridsag.backend"


#: The command line's own command modules (``hybridsag.cli`` builds its parser from them).
COMMAND_MODULES = tuple(
    str(p.relative_to(ROOT)) for p in sorted((ROOT / "plugin" / "commands").glob("*.py"))
)


@pytest.mark.parametrize("module", COMMAND_MODULES)
def test_a_command_module_imports_nothing_behind_the_backend(module: str) -> None:
    behind = _behind(_imports(ROOT / module))
    assert behind == [], f"{module} reaches past the backend: {behind}"


def _handlers(path: Path) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function of ``path`` outside the service's state and its app factory (which
    build and warm the search): the route handlers and their helpers."""
    tree = ast.parse(path.read_text("utf-8"))
    skip = {
        id(n)
        for top in tree.body
        if (isinstance(top, ast.ClassDef) and top.name == "ServiceState")
        or (isinstance(top, ast.FunctionDef) and top.name == "create_app")
        for n in ast.walk(top)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and id(node) not in skip:
            yield node


@pytest.mark.parametrize(
    "module",
    [
        "plugin/service/app.py",
        "plugin/service/probe_routes.py",
        "plugin/service/search_routes.py",
        "plugin/service/resource_routes.py",
        "plugin/service/reconcile_routes.py",
        "plugin/service/experiments.py",
    ],
)
def test_the_service_handlers_call_the_backend_not_the_search(module: str) -> None:
    bad = []
    for fn in _handlers(ROOT / module):
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and node.attr in ("hs", "search", "experiments", "ab"):
                owner = node.value
                if isinstance(owner, ast.Name) and owner.id in ("state", "service", "self"):
                    bad.append(f"{fn.name}:{node.lineno}: {owner.id}.{node.attr}")
            used = node.func if isinstance(node, ast.Call) else getattr(node, "value", None)
            if isinstance(used, ast.Name) and used.id in ("HybridSearch", "Experiments"):
                bad.append(f"{fn.name}:{node.lineno}: {used.id}")  # built or called here
    assert bad == []
