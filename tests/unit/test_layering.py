"""The layout is the architecture: import edges are read from the source and checked.

- ``fusion/`` (``hybridsag.fusion``) imports only the standard library and itself, and does no
  I/O (no file, network, process or database module, no ``open``/``print``/``input``).
- ``plugin/`` (``hybridsag``) never imports ``hybridsag.consistency``.
- ``consistency/`` may import ``plugin`` and ``fusion``: nothing to check.
- The web stack (FastAPI, Starlette, uvicorn, prometheus-client, watchfiles) is the ``service``
  extra's: only ``plugin/service/`` (``hybridsag.service``) imports it, so the core works
  without the extra.
- LangChain, LlamaIndex and the MCP SDK are each imported only by their adapter in
  ``plugin/integrations/``, so the core and the other adapters work without that extra.
- No import cycle among the modules of ``plugin/``, counting every import: at the top, inside a
  function, and under ``if TYPE_CHECKING:`` (a cycle of types is a cycle of design).
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# source folder -> import package it is mapped to (pyproject.toml [tool.setuptools] package-dir)
PACKAGE_OF_FOLDER = {
    "plugin": "hybridsag",
    "fusion": "hybridsag.fusion",
    "consistency": "hybridsag.consistency",
}

# Standard-library modules that do I/O or start work outside the process: fusion stays pure.
FUSION_FORBIDDEN_STDLIB = frozenset(
    {
        "asyncio",
        "http",
        "io",
        "logging",
        "multiprocessing",
        "os",
        "pathlib",
        "shutil",
        "socket",
        "sqlite3",
        "subprocess",
        "sys",
        "tempfile",
        "threading",
        "urllib",
    }
)
FUSION_FORBIDDEN_CALLS = frozenset({"open", "print", "input", "__import__", "exec", "eval"})


def module_name(path: Path, folder: str) -> str:
    """The dotted module name of a file under one of the mapped source folders."""
    relative = path.relative_to(ROOT / folder).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE_OF_FOLDER[folder], *parts])


def imported_modules(source: str, module: str, *, is_package: bool) -> Iterator[tuple[str, int]]:
    """Every absolute module name ``source`` imports, with its line number.

    Relative imports are resolved against ``module``. ``from pkg import name`` yields
    ``pkg.name`` (``name`` may be a submodule, as in ``from hybridsag import consistency``, or an
    attribute; either way its prefix is the package the edge points to); ``from pkg import *``
    yields ``pkg``.
    """
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                cut = node.level - 1
                base = ".".join(base_parts[: len(base_parts) - cut]) if cut else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            for alias in node.names:
                yield (target if alias.name == "*" else f"{target}.{alias.name}"), node.lineno


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted; a
    module importing itself counts too."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1 or v in graph.get(v, ()):
                out.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def python_files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def imports_of(folder: str) -> Iterator[tuple[Path, str, int]]:
    for path in python_files(folder):
        module = module_name(path, folder)
        source = path.read_text(encoding="utf-8")
        for name, line in imported_modules(source, module, is_package=path.name == "__init__.py"):
            yield path, name, line


def is_within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def fusion_violation(name: str) -> str | None:
    """Why fusion may not import ``name``, or ``None`` when it may."""
    if is_within(name, "hybridsag.fusion"):
        return None
    top = name.split(".")[0]
    if top == "hybridsag":
        return "imports hybridsag outside hybridsag.fusion"
    if top not in sys.stdlib_module_names:
        return "imports a third-party module"
    if top in FUSION_FORBIDDEN_STDLIB:
        return "imports an I/O module"
    return None


def test_folders_exist() -> None:
    assert python_files("fusion"), "fusion/ has no Python files"
    assert python_files("plugin"), "plugin/ has no Python files"


def test_fusion_imports_only_stdlib_and_itself() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {name} ({why})"
        for path, name, line in imports_of("fusion")
        if (why := fusion_violation(name)) is not None
    ]
    assert bad == []


def test_fusion_calls_no_io_builtins() -> None:
    bad = []
    for path in python_files("fusion"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in FUSION_FORBIDDEN_CALLS
            ):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.func.id}()")
    assert bad == []


def test_plugin_never_imports_consistency() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path, name, line in imports_of("plugin")
        if is_within(name, "hybridsag.consistency")
    ]
    assert bad == []


def test_a_package_is_either_a_plugin_or_an_import() -> None:
    """A package that the project's own entry points load (pyproject.toml) is a plugin: no
    module outside it imports it by name, so the core works without it and the dependency
    points from it to the core. A package the core imports is part of the core and adds its
    commands directly, never through an entry point as well (issue 41: ``ab`` was both)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    plugins = {
        target.split(":")[0].rsplit(".", 1)[0]
        for group, entries in project.get("entry-points", {}).items()
        if group.startswith("hybridsag.")
        for target in entries.values()
    }
    assert plugins, "no hybridsag.* entry point found in pyproject.toml"
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {name} (loaded as the plugin {plugin})"
        for folder in PACKAGE_OF_FOLDER
        for path, name, line in imports_of(folder)
        for plugin in plugins
        if is_within(name, plugin) and not is_within(module_name(path, folder), plugin)
    ]
    assert bad == []


def plugin_graph() -> dict[str, set[str]]:
    """plugin/'s modules and the plugin modules each imports (any import statement)."""
    files = {module_name(path, "plugin"): path for path in python_files("plugin")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        source = path.read_text(encoding="utf-8")
        for target, _line in imported_modules(source, name, is_package=path.name == "__init__.py"):
            if not is_within(target, "hybridsag") or any(
                is_within(target, other) for other in ("hybridsag.fusion", "hybridsag.consistency")
            ):
                continue
            # "from pkg import name": the edge points to pkg.name when that is a module
            while target not in files:
                target = target.rpartition(".")[0]
            graph[name].add(target)
    return graph


def test_plugin_has_no_import_cycle() -> None:
    assert import_cycles(plugin_graph()) == []


@pytest.mark.parametrize(
    ("graph", "cycles"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"a"}}, [["a"]]),
    ],
)
def test_import_cycles_finds_cycles(graph: dict[str, set[str]], cycles: list[list[str]]) -> None:
    assert import_cycles(graph) == cycles


# The checker itself must be able to fail: feed it sources with known back-edges.


@pytest.mark.parametrize(
    ("source", "module", "is_package", "expected"),
    [
        ("import os.path", "hybridsag.fusion.x", False, ["os.path"]),
        ("import hybridsag", "hybridsag.fusion.x", False, ["hybridsag"]),
        ("from hybridsag import consistency", "hybridsag.x", False, ["hybridsag.consistency"]),
        ("from . import rules", "hybridsag.fusion.x", False, ["hybridsag.fusion.rules"]),
        ("from .types import Hit", "hybridsag.fusion", True, ["hybridsag.fusion.types.Hit"]),
        (
            "from ..errors import InputError",
            "hybridsag.fusion.x",
            False,
            ["hybridsag.errors.InputError"],
        ),
        ("from .. import consistency", "hybridsag.judges.base", False, ["hybridsag.consistency"]),
        ("from m import *", "hybridsag.x", False, ["m"]),
        ("def f():\n    import json\n", "hybridsag.fusion.x", False, ["json"]),
    ],
)
def test_imported_modules_resolves_names(
    source: str, module: str, is_package: bool, expected: list[str]
) -> None:
    assert [name for name, _ in imported_modules(source, module, is_package=is_package)] == expected


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("hybridsag.fusion.types", None),
        ("hybridsag.fusion", None),
        ("math", None),
        ("unicodedata", None),
        ("collections.abc", None),
        ("__future__.annotations", None),
        ("hybridsag", "imports hybridsag outside hybridsag.fusion"),
        ("hybridsag.errors.InputError", "imports hybridsag outside hybridsag.fusion"),
        ("hybridsag.fusionx", "imports hybridsag outside hybridsag.fusion"),
        ("hybridsag.consistency", "imports hybridsag outside hybridsag.fusion"),
        ("pydantic", "imports a third-party module"),
        ("numpy.linalg", "imports a third-party module"),
        ("sqlite3", "imports an I/O module"),
        ("os.path", "imports an I/O module"),
    ],
)
def test_fusion_violation_classifies(name: str, why: str | None) -> None:
    assert fusion_violation(name) == why


WEB_STACK = frozenset({"fastapi", "starlette", "uvicorn", "prometheus_client", "watchfiles"})


def test_only_the_service_imports_the_web_stack() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for folder in ("plugin", "fusion", "consistency")
        for path, name, line in imports_of(folder)
        if name.split(".")[0] in WEB_STACK and "service" not in path.relative_to(ROOT / folder).parts
    ]
    assert bad == []


#: Each framework and the one module (of plugin/integrations/) allowed to import it: the core
#: and the other adapters work without that extra.
FRAMEWORK_ADAPTERS = {
    "langchain_core": "langchain.py",
    "langchain": "langchain.py",
    "llama_index": "llamaindex.py",
    "mcp": "mcp_server.py",
    "mcp_types": "mcp_server.py",
}


def test_only_an_adapter_imports_its_framework() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for folder in ("plugin", "fusion", "consistency")
        for path, name, line in imports_of(folder)
        if (adapter := FRAMEWORK_ADAPTERS.get(name.split(".")[0])) is not None
        and path != ROOT / "plugin" / "integrations" / adapter
    ]
    assert bad == []


# --------------------------------------------------------------------------- owners of concepts


@functools.cache  # one parse per module, not one per import of it
def defined_names(path: Path) -> frozenset[str]:
    """The names a module owns: what it defines at its top level (functions, classes,
    assignments), and a third-party name it renames and declares in ``__all__`` (the service's
    metrics module names Prometheus' content type); never a hybridsag name it imports."""
    names: set[str] = set()
    foreign: set[str] = set()
    declared: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                elts = target.elts if isinstance(target, ast.Tuple) else [target]
                names.update(t.id for t in elts if isinstance(t, ast.Name))
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and isinstance(
                node.value, ast.List | ast.Tuple
            ):
                declared.update(e.value for e in node.value.elts if isinstance(e, ast.Constant))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and not is_within(
            node.module or "", "hybridsag"
        ):
            foreign.update(alias.asname or alias.name for alias in node.names)
    return frozenset(names | (declared & foreign))


def plugin_files() -> dict[str, Path]:
    return {
        module_name(path, folder): path
        for folder in ("plugin", "fusion", "consistency")
        for path in python_files(folder)
    }


def test_a_name_is_imported_from_its_owner() -> None:
    """``from hybridsag.m import name`` names what ``m`` defines or one of its submodules, never
    a name ``m`` merely imports: each concept has one owner to import it from (``Document`` from
    :mod:`hybridsag.documents`, not from the write path that uses it). A package's
    ``__init__`` is exempt: re-exporting its modules' names is what it is for."""
    files = plugin_files()
    bad = []
    for folder in ("plugin", "fusion", "consistency", "tests", "benchmarks"):
        for path, name, line in imports_of_any(folder):
            module, _, attr = name.rpartition(".")
            if module not in files or name in files or files[module].name == "__init__.py":
                continue
            if attr not in defined_names(files[module]):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {attr} from {module}")
    assert bad == []


def imports_of_any(folder: str) -> Iterator[tuple[Path, str, int]]:
    """Like :func:`imports_of`, for folders outside the package mapping too (tests, benchmarks:
    their own modules resolve to their folder name)."""
    if folder in PACKAGE_OF_FOLDER:
        yield from imports_of(folder)
        return
    for path in python_files(folder):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        source = path.read_text(encoding="utf-8")
        for name, line in imported_modules(source, module, is_package=path.name == "__init__.py"):
            yield path, name, line


#: The write side: a search process never loads it (``search/`` imports it inside the methods
#: that ingest).
WRITE_SIDE = ("hybridsag.ingest",)
#: The read side and the stores under it: the recall paths, the judges, fusion, the query and
#: trust steps, output, the lexical and dense indexes, the records, and the leaves they share.
READ_SIDE = ("hybridsag.paths", "hybridsag.judges", "hybridsag.fusion", "hybridsag.output",
             "hybridsag.lexical", "hybridsag.vectors", "hybridsag.records", "hybridsag.documents",
             "hybridsag.milvus_client", "hybridsag.remote_calls")  # fmt: skip


def test_the_read_side_never_imports_the_write_side() -> None:
    """No read-side module imports a write-side one anywhere (the sentence splitter both use
    is :mod:`hybridsag.fusion.text.sentences`, a chunk is :class:`hybridsag.documents.Chunk`),
    and the ``search`` package only inside functions or for types."""
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for folder in ("plugin", "fusion")
        for path, name, line in imports_of(folder)
        if any(is_within(module_name(path, folder), side) for side in READ_SIDE)
        and any(is_within(name, side) for side in WRITE_SIDE)
    ]
    for search in sorted((ROOT / "plugin" / "search").glob("*.py")):  # the façade's package
        for node in ast.parse(search.read_text(encoding="utf-8")).body:  # the module's own level
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [
                    node.module or ""
                ]
                bad += [
                    f"{search.relative_to(ROOT)}:{node.lineno}: {n}"
                    for n in names
                    if any(is_within(n, side) for side in WRITE_SIDE)
                ]
    assert bad == []


#: Leaf modules and the only hybridsag modules each may import: the configuration never
#: imports an output or store module, and a document's validation never a store adapter or
#: the write path.
LEAVES = {
    # fusion's step names (a pure standard-library leaf), so an unknown name in
    # fusion.rules_off is refused when the configuration is read
    "hybridsag.settings": {"hybridsag.errors", "hybridsag.output.budget", "hybridsag.fusion.fuse"},
    "hybridsag.documents": {"hybridsag.errors", "hybridsag.records.keys", "hybridsag.records.rows"},
    "hybridsag.output.budget": set(),
    # a response and its agent text: the renderer and the pure helpers it reads
    "hybridsag.results": {"hybridsag.output.agent", "hybridsag.output.budget"},
    "hybridsag.output.agent": {"hybridsag.output.budget", "hybridsag.output.focus",
                               "hybridsag.fusion.text"},
    "hybridsag.output.focus": set(),
    # a search's options, checked once where they are built: the path registry's weight check,
    # the filters and the statuses a listing takes
    "hybridsag.request": {"hybridsag.errors", "hybridsag.paths", "hybridsag.records.filters",
                          "hybridsag.records.schema"},
}


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_a_leaf_imports_only_what_it_may(leaf: str) -> None:
    """Every module of the leaf (a package leaf's modules may import each other)."""
    files = plugin_files()
    allowed = LEAVES[leaf] | {leaf}
    bad = [
        f"{module}:{line}: {name}"
        for module, path in files.items()
        if is_within(module, leaf)
        for name, line in imported_modules(
            path.read_text(encoding="utf-8"), module, is_package=path.name == "__init__.py"
        )
        if is_within(name, "hybridsag") and not any(is_within(name, a) for a in allowed)
    ]
    assert bad == []


def test_the_stores_size_their_fields_from_the_bounds_table() -> None:
    """The byte bounds of ids, tenants and ACL tags are defined once, in
    :mod:`hybridsag.documents`, and nowhere else in the package."""
    bounds = ("MAX_CHUNK_ID_BYTES", "RESOURCE_ID_FIELD_BYTES", "MAX_TENANT_BYTES",
              "MAX_ACL_TAG_BYTES", "MAX_ACL_TAGS", "MAX_TITLE_CHARS", "MAX_SOURCE_URI_CHARS",
              "MAX_METADATA_BYTES", "MAX_RESOURCE_ID_BYTES")  # fmt: skip
    owners = {
        f"{path.relative_to(ROOT)}: {t.id}"
        for folder in ("plugin", "consistency")
        for path in python_files(folder)
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name) and t.id in bounds
    }
    assert owners == {f"plugin/documents.py: {name}" for name in bounds}


def test_the_milvus_plumbing_is_its_own_module_both_adapters_use() -> None:
    """Connecting, Lite sharing, quoting, expressions, row iteration and retries live in
    ``hybridsag.milvus_client``: both Milvus adapters import it, and the lexical one imports
    nothing from the dense adapter (its field bounds are the documents' table)."""
    imports: dict[str, set[str]] = {}
    for path, name, _line in imports_of("plugin"):
        imports.setdefault(module_name(path, "plugin"), set()).add(name)
    for adapter in ("hybridsag.vectors.milvus_dense", "hybridsag.lexical.milvus_fulltext"):
        assert any(is_within(n, "hybridsag.milvus_client") for n in imports[adapter]), adapter
    dense = ("hybridsag.vectors.milvus_dense", "hybridsag.vectors.index")
    for module in ("hybridsag.lexical.milvus_fulltext", "hybridsag.milvus_client"):
        assert not any(is_within(n, d) for n in imports[module] for d in dense), module


#: The folders of ``plugin/`` and the package's own modules: what each may import. A new edge
#: between two of them is a design change, made here on purpose::
#:
#:   faces       cli, commands/, backend/, client, service/, integrations/, ab/  (parse, call,
#:               render)
#:   façade      search, request (a search's options), components (the composition root), parts
#:   read side   paths/ (+ query, query_facts) -> judges/ -> lexical/, vectors/ -> records/
#:   write side  ingest/ (sources, formats, chunker, writer, folders, manifest) -> the stores
#:   offline     evaluation/ (harness, measures, offline_runs, tuning) -> the façade and paths
#:   leaves      documents, results, sentences, settings, config, errors, lazy, once,
#:               milvus_client, remote_calls, jsondepth; output/ (render, agent, budget); fusion
#:               (pure)
LEAVES_OF_ALL = {"errors", "settings", "documents", "results", "lazy", "once", "fusion"}
FOLDER_IMPORTS: dict[str, set[str]] = {
    "records": {"lexical"},  # for types only: the ledger names ChunkTokens and LexicalIndex
    "lexical": {"records", "milvus_client"},
    "vectors": {"records", "milvus_client", "remote_calls"},
    "judges": {"vectors", "parts", "remote_calls", "sentences"},  # whole-name spans (has_name)
    "paths": {"judges", "lexical", "vectors", "records", "parts", "sentences"},
    "output": set(),
    "ingest": {"lexical", "records", "vectors", "sentences"},
    "evaluation": {"judges", "paths", "records", "vectors", "remote_calls", "search"},
    "ab": {"evaluation", "lexical", "paths", "records", "cli", "commands", "search", "request"},
    # milvus_client: a service of several workers starts the Lite server they share
    "service": {"ab", "ingest", "output", "paths", "records", "backend", "jsondepth", "search",
                "milvus_client", "__version__"},
    # output: a result's explanation in the CLI's words (render.explain_lines)
    "integrations": {"backend", "output", "search", "__version__"},
}


def _group(module: str) -> str:
    """The folder (or top-level module) of a ``hybridsag`` module: ``hybridsag.ingest.writer`` is
    ``ingest``, ``hybridsag.search`` is ``search``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_each_folder_imports_only_the_folders_it_may() -> None:
    """Every import (top, function, ``TYPE_CHECKING``) from a folder of ``plugin/`` reaches only
    itself, a leaf every module may use, or what :data:`FOLDER_IMPORTS` allows it."""
    bad = sorted(
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path, name, line in imports_of("plugin")
        if is_within(name, "hybridsag")
        and (source := _group(module_name(path, "plugin"))) in FOLDER_IMPORTS
        and (target := _group(name)) != source
        and target not in LEAVES_OF_ALL | FOLDER_IMPORTS[source]
    )
    assert bad == []


def test_the_folder_rule_can_fail() -> None:
    """The rule sees a real cross-folder edge: ``paths`` reaching into ``ingest`` is caught."""
    assert _group("hybridsag.ingest.writer") == "ingest" not in FOLDER_IMPORTS["paths"]
    assert _group("hybridsag.search") == "search" not in FOLDER_IMPORTS["records"]


# --------------------------------------------------------------------------- the records' tables

#: The tables of the system of record: every statement on them lives under ``plugin/records/``
#: (the store, the ledger, the reads an index makes, the reconcile lease). A lexical engine's own
#: tables (``chunks_fts``, ``chunks_vocab``, ``mlex_*``, ``tlex_titles``) are the engine's.
RECORD_TABLES = ("resources", "chunks", "chunk_vectors", "tombstones", "journal", "reconcile_lease")
RECORD_SQL = re.compile(
    r"\b(?:FROM|JOIN|INTO|UPDATE|TABLE(?:\s+IF(?:\s+NOT)?\s+EXISTS)?)\s+"
    rf"({'|'.join(RECORD_TABLES)})\b",
    re.IGNORECASE,
)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants of ``tree`` that are docstrings (prose, not SQL)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def record_sql(source: str) -> list[tuple[int, str]]:
    """``(line, words)`` of each place a string constant of ``source`` (an f-string's literal
    parts too; docstrings aside) names a record table after ``FROM``, ``JOIN``, ``INTO``,
    ``UPDATE`` or ``TABLE``. The line is where the words stand in the source when they can be
    found there (a constant split over lines), else where the constant starts."""
    tree = ast.parse(source)
    prose = _docstrings(tree)
    lines = source.splitlines()
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        if id(node) in prose:
            continue
        start, end = node.lineno, node.end_lineno or node.lineno
        for match in RECORD_SQL.finditer(node.value):
            words = " ".join(match.group(0).split())
            pattern = re.compile(r"\s+".join(map(re.escape, words.split())), re.IGNORECASE)
            line = next(
                (n for n in range(start, end + 1) if pattern.search(lines[n - 1])), node.lineno
            )
            start = max(start, line)  # the next match of this constant stands at or after it
            found.append((line, words))
    return found


def test_only_the_records_hold_sql_on_the_record_tables() -> None:
    """No module of ``plugin/``, ``fusion/`` or ``consistency/`` outside ``plugin/records/``
    holds SQL naming ``resources``, ``chunks``, ``chunk_vectors``, ``tombstones``, ``journal``
    or ``reconcile_lease``: the engines and the reconciler call the records' named reads and
    writes (:mod:`hybridsag.records.index_reads`, :mod:`hybridsag.records.lease`)."""
    records = ROOT / "plugin" / "records"
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {words}"
        for folder in ("plugin", "fusion", "consistency")
        for path in python_files(folder)
        if records not in path.parents
        for line, words in record_sql(path.read_text(encoding="utf-8"))
    ]
    assert bad == [], f"{len(bad)} SQL on the record tables outside plugin/records/"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('x = "SELECT id FROM chunks WHERE resource_id = ?"', [(1, "FROM chunks")]),
        ('x = "DELETE FROM reconcile_lease WHERE name = ?"', [(1, "FROM reconcile_lease")]),
        ('x = "UPDATE tombstones SET version = ?"', [(1, "UPDATE tombstones")]),
        ('x = "INSERT INTO journal(op) VALUES (?)"', [(1, "INTO journal")]),
        ('x = "create table if not exists chunk_vectors(id)"',
         [(1, "table if not exists chunk_vectors")]),
        ('x = f"SELECT 1 FROM {t} JOIN resources r ON r.id = {t}.id"', [(1, "JOIN resources")]),
        ('x = (\n    "SELECT c.id "\n    "FROM chunks c"\n)', [(3, "FROM chunks")]),
        ('x = "SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ?"', []),
        ('x = "DELETE FROM mlex_titles WHERE id = ?"', []),
        ('x = "SELECT c.chunk_id FROM x JOIN y ON chunks.id = y.id"', []),
        ('def f():\n    """Split the text into chunks from resources."""\n', []),
        ('x = "the chunks of a resource"', []),
    ],
)
def test_the_record_sql_check_can_fail(source: str, expected: list[tuple[int, str]]) -> None:
    assert record_sql(source) == expected
