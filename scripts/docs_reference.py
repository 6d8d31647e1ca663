"""The documentation site's reference pages, generated from the code at build time (mkdocs-gen-files
runs this file; ``mkdocs.yml`` names it). Nothing here is written twice:

- ``reference/settings.md``: every setting, walked from the pydantic ``Settings`` model (name,
  type, default, range, the environment variable ``HYBRIDSAG_SECTION__NAME``); each section's
  description is its model's docstring and each setting's line is the comment that
  ``config/hybridsag.example.toml`` gives it (a test holds that file to the model).
- ``reference/cli.md``: every command's ``--help``, from the parser the CLI itself builds.
- ``reference/http-api.md``: every route of the OpenAPI schema the app factory builds.
- ``reference/python/``: one mkdocstrings page per public module, found by walking the packages
  ``pyproject.toml`` installs (never a hand-kept list), with a ``SUMMARY.md`` for literate-nav.

Run as a script (``python scripts/docs_reference.py OUT``) it writes the same pages to OUT. The
same file is the build's hook that lays out the package tree mkdocstrings reads (:func:`api_tree`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import pkgutil
import re
import sys
import tempfile
import tomllib
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_TOML = ROOT / "config" / "hybridsag.example.toml"

Write = Callable[[str, str], None]


@contextlib.contextmanager
def _no_environment() -> Iterator[None]:
    """Build settings as the defaults make them: no ``HYBRIDSAG_*`` variable, no ``.env`` nor
    ``config/hybridsag.toml`` of the working directory."""
    saved = {k: v for k, v in os.environ.items() if k.upper().startswith("HYBRIDSAG_")}
    cwd = Path.cwd()
    for name in saved:
        del os.environ[name]
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            yield
        finally:
            os.chdir(cwd)
            os.environ.update(saved)


# ---- settings -------------------------------------------------------------------------------

_SECTION = re.compile(r"^\[([a-z0-9_.]+)\]\s*(?:#\s*(.*))?$")
_LINE = re.compile(r"^(?:#\s*)?([a-z0-9_]+)\s*=\s*(.*)$")
_LEADING_RANGE = re.compile(r"^(?:[\[(][^\])]*[\])]|one of [^;]*);\s*")


def example_comments() -> dict[str, str]:
    """Dotted key -> the comment config/hybridsag.example.toml gives it (a section's header
    comment for a table setting such as ``fusion.weights``)."""
    out: dict[str, str] = {}
    section = ""
    for raw in EXAMPLE_TOML.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if m := _SECTION.match(line):
            section = m.group(1)
            if m.group(2):
                out.setdefault(section, m.group(2).strip())
            continue
        if m := _LINE.match(line):
            key = f"{section}.{m.group(1)}" if section else m.group(1)
            _, _, comment = m.group(2).partition("  #")
            out.setdefault(key, comment.strip())
    return out


def _type_text(annotation: Any) -> str:
    text = repr(annotation) if not isinstance(annotation, type) else annotation.__name__
    # a section's type is named as the settings package exports it (its submodule left out)
    text = re.sub(
        r"\btyping\.|\bpathlib\.|\bpydantic\.types\.|\bhybridsag\.settings\.(?:[a-z_]+\.)?", "", text
    )
    return text.replace("NoneType", "None")


def _range_text(field: Any) -> str:
    lo = hi = None
    for m in field.metadata:
        for attr, side, bracket in (("ge", "lo", "["), ("gt", "lo", "("), ("le", "hi", "]"),
                                    ("lt", "hi", ")")):  # fmt: skip
            value = getattr(m, attr, None)
            if value is not None:
                shown = str(int(value)) if float(value).is_integer() else str(value)
                if side == "lo":
                    lo = f"{bracket}{shown}"
                else:
                    hi = f"{shown}{bracket}"
    if lo or hi:
        return f"{lo or '(-inf'}, {hi or 'inf)'}"
    return ""


def _default_text(field: Any) -> str:
    if field.is_required():
        return "(required)"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, BaseModel):
        return "(section)"
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, tuple):
        value = list(value)
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except TypeError:
        return repr(value)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _item_model(annotation: Any) -> type[BaseModel] | None:
    """The model of a list/tuple of models (``server.tokens``, ``sources.watch``, ...)."""
    for arg in typing.get_args(annotation):
        if (model := _model_of(arg)) is not None:
            return model
        if (model := _item_model(arg)) is not None:
            return model
    return None


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _doc(model: type[BaseModel]) -> str:
    doc = model.__doc__ or ""
    if doc == BaseModel.__doc__ or (model.__base__ and doc == model.__base__.__doc__ and
                                    model.__base__.__name__.startswith("_")):  # fmt: skip
        return ""
    import inspect

    return inspect.cleandoc(doc)


def settings_page() -> str:
    from hybridsag.settings import Settings

    comments = example_comments()
    prefix = Settings.model_config["env_prefix"]
    delim = Settings.model_config["env_nested_delimiter"]
    lines = [
        "# Settings",
        "",
        "Generated from the `Settings` model at build time: every setting, its type, default,",
        "range and environment variable. Set one in the environment, in a `.env` file or in a TOML",
        "file (`config/hybridsag.toml` in the working directory, or the file `HYBRIDSAG_CONFIG`",
        "names); `config/hybridsag.example.toml` and `config/example.env` list them all.",
        "",
    ]
    item_models: list[tuple[str, type[BaseModel]]] = []

    def table(model: type[BaseModel], path: tuple[str, ...], env: bool) -> list[str]:
        rows = ["| setting | type | default | range | environment | what |",
                "|---|---|---|---|---|---|"]  # fmt: skip
        nested = []
        for name, field in model.model_fields.items():
            key = ".".join((*path, name))
            sub = _model_of(field.annotation)
            if sub is not None:
                nested.append((key, sub))
                continue
            if (item := _item_model(field.annotation)) is not None:
                item_models.append((key, item))
            variable = f"`{prefix}{delim.join(p.upper() for p in (*path, name))}`" if env else ""
            what = _LEADING_RANGE.sub("", comments.get(key, ""))
            rows.append(
                f"| `{key}` | `{_cell(_type_text(field.annotation))}` | "
                f"`{_cell(_default_text(field))}` | {_cell(_range_text(field))} | {variable} | "
                f"{_cell(what)} |"
            )
        out = rows if len(rows) > 2 else []
        for key, sub in nested:
            out += ["", f"{'#' * min(len(key.split('.')) + 1, 4)} `[{key}]`", ""]
            if doc := _doc(sub):
                out += [doc, ""]
            out += table(sub, tuple(key.split(".")), env)
        return out

    top = [(n, f) for n, f in Settings.model_fields.items() if _model_of(f.annotation) is None]
    lines += ["## Top level", ""]
    lines += [line for line in table(_top_model(Settings, top), (), True)]
    for name, field in Settings.model_fields.items():
        sub = _model_of(field.annotation)
        if sub is None:
            continue
        lines += ["", f"## `[{name}]`", ""]
        if doc := _doc(sub):
            lines += [doc, ""]
        lines += table(sub, (name,), True)
    seen = set()
    for key, model in item_models:
        if key in seen:
            continue
        seen.add(key)
        lines += ["", f"## Each entry of `{key}`", "",
                  f"A JSON list in the environment (`{prefix}{delim.join(key.upper().split('.'))}`),"
                  " an array of tables in TOML; each entry has these keys.", ""]  # fmt: skip
        if doc := _doc(model):
            lines += [doc, ""]
        lines += table(model, (key,), False)
    return "\n".join(lines) + "\n"


def _top_model(settings: type[BaseModel], fields: list[tuple[str, Any]]) -> type[BaseModel]:
    """A stand-in model holding only the top-level, non-section settings (``data_dir``)."""

    class Top(BaseModel):
        pass

    Top.model_fields = dict(fields)  # type: ignore[misc]
    return Top


# ---- CLI ------------------------------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its sub-parsers only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def cli_page() -> str:
    from hybridsag.cli import build_parser

    with _no_environment():
        parser = build_parser()
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps to it: the page is the same on every terminal
    lines = [
        "# Command line",
        "",
        "Generated from the parser `hybridsag` builds (`hybridsag.cli.build_parser()`): each",
        "command's `--help`, as the terminal prints it.",
        "",
        "```text",
        parser.format_help().rstrip(),
        "```",
    ]

    def walk(prefix: str, p: argparse.ArgumentParser, depth: int) -> None:
        nonlocal lines
        for name, sub in _subcommands(p).items():
            lines += ["", f"{'#' * depth} `{prefix} {name}`", "", "```text",
                      sub.format_help().rstrip(), "```"]  # fmt: skip
            walk(f"{prefix} {name}", sub, min(depth + 1, 4))

    walk("hybridsag", parser, 2)
    if columns is None:
        del os.environ["COLUMNS"]
    else:
        os.environ["COLUMNS"] = columns
    return "\n".join(lines) + "\n"


# ---- HTTP API -------------------------------------------------------------------------------


def openapi_schema() -> dict[str, Any]:
    from hybridsag.consistency.service import ServiceReconciler
    from hybridsag.service.app import create_app
    from hybridsag.settings import Settings

    with _no_environment(), tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            data_dir=Path(tmp) / "data",
            embedding={"model": "none"},
            server={"token": "x" * 32, "reconciler": False},
        )
        return create_app(settings, reconciler=ServiceReconciler()).openapi()


def _ref_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](#{name.lower()})"
    if schema.get("type") == "array" and "items" in schema:
        return f"list of {_ref_name(schema['items'])}"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_ref_name(s) for s in schema[key])
    return f"`{schema.get('type', 'any')}`"


def http_page() -> str:
    spec = openapi_schema()
    info = spec["info"]
    lines = [
        "# HTTP API",
        "",
        "Generated from the OpenAPI schema the service's app factory builds",
        "(`create_app(settings).openapi()`, with the reconcile routes `serve` adds); a running",
        "service serves the same schema, with its own limits, at `GET /openapi.json`.",
        "",
        f"**{info['title']} {info['version']}**: {info.get('description', '')}",
    ]
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            lines += ["", f"## `{method.upper()} {path}`", ""]
            if op.get("summary"):
                lines += [f"**{op['summary']}**", ""]
            if op.get("description"):
                lines += [op["description"].strip(), ""]
            params = op.get("parameters", [])
            if params:
                lines += ["| parameter | in | type | required | what |", "|---|---|---|---|---|"]
                for p in params:
                    lines.append(
                        f"| `{p['name']}` | {p['in']} | {_cell(_ref_name(p.get('schema', {})))} "
                        f"| {'yes' if p.get('required') else 'no'} | "
                        f"{_cell(p.get('description', '') or p.get('schema', {}).get('description', ''))} |"
                    )
                lines.append("")
            body = op.get("requestBody", {}).get("content", {})
            for ctype, media in body.items():
                lines.append(f"Body (`{ctype}`): {_ref_name(media.get('schema', {}))}")
            if body:
                lines.append("")
            lines += ["| status | what | body |", "|---|---|---|"]
            for status, resp in op.get("responses", {}).items():
                content = resp.get("content", {})
                shown = ", ".join(f"`{c}` {_ref_name(m.get('schema', {}))}" for c, m in content.items())
                lines.append(f"| {status} | {_cell(resp.get('description', ''))} | {_cell(shown)} |")
    schemas = spec.get("components", {}).get("schemas", {})
    if schemas:
        lines += ["", "## Schemas"]
    for name, schema in schemas.items():
        lines += ["", f"### {name}", ""]
        if schema.get("description"):
            lines += [schema["description"].strip(), ""]
        props = schema.get("properties", {})
        if props:
            required = set(schema.get("required", []))
            lines += ["| field | type | required | default | what |", "|---|---|---|---|---|"]
            for field, sub in props.items():
                default = json.dumps(sub["default"]) if "default" in sub else ""
                lines.append(
                    f"| `{field}` | {_cell(_ref_name(sub))} | {'yes' if field in required else 'no'}"
                    f" | {_cell(f'`{default}`' if default else '')} | "
                    f"{_cell(sub.get('description', ''))} |"
                )
        elif "enum" in schema:
            lines.append("One of " + ", ".join(f"`{v}`" for v in schema["enum"]) + ".")
    return "\n".join(lines) + "\n"


# ---- Python API -----------------------------------------------------------------------------


def public_modules() -> list[str]:
    """Every module of the packages pyproject.toml installs whose dotted name has no part that
    starts with ``_`` (the stop-word data package holds no code)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]
    found = set()
    for package in setuptools["packages"]:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        if not any(Path(p).glob("*.py") for p in spec.submodule_search_locations):
            continue
        found.add(package)
        for info in pkgutil.iter_modules(spec.submodule_search_locations, f"{package}."):
            if not info.ispkg:
                found.add(info.name)
    return sorted(m for m in found if not any(p.startswith("_") for p in m.split(".")))


API_TREE = ROOT / "build" / "docs-api"


def api_tree(dest: Path = API_TREE) -> Path:
    """A folder laid out as the installed package is (``hybridsag/``, ``hybridsag/fusion/``, ...),
    made of links to the source folders ``pyproject.toml``'s package-dir maps them from, for
    mkdocstrings (griffe finds a package by its folder's name, and ``hybridsag`` lives in
    ``plugin/``). Rebuilt on every build, so a moved module is never stale."""
    import shutil

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]
    mapping: dict[str, str] = setuptools["package-dir"]
    shutil.rmtree(dest, ignore_errors=True)
    for package in sorted(mapping, key=lambda name: name.count(".")):
        target = dest.joinpath(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for child in sorted((ROOT / mapping[package]).iterdir()):
            if child.name == "__pycache__" or f"{package}.{child.name}" in mapping:
                continue
            (target / child.name).symlink_to(child)
    return dest


def python_pages(write: Write) -> None:
    """One page per public module (a package's page is its folder's ``index.md``) and the
    literate-nav ``SUMMARY.md`` that nests them as the packages nest."""
    import mkdocs_gen_files

    nav = mkdocs_gen_files.Nav()
    modules = public_modules()
    packages = {m.rsplit(".", 1)[0] for m in modules if "." in m}
    for module in modules:
        parts = tuple(module.split("."))
        page = "/".join((*parts[1:], "index") if module in packages else parts[1:]) + ".md"
        write(f"reference/python/{page}", f"# `{module}`\n\n::: {module}\n")
        nav[parts] = page
    write("reference/python/SUMMARY.md", "".join(nav.build_literate_nav()))


def generate(write: Write) -> None:
    write("reference/settings.md", settings_page())
    write("reference/cli.md", cli_page())
    write("reference/http-api.md", http_page())
    python_pages(write)


def _gen_files() -> None:
    import mkdocs_gen_files

    def write(path: str, text: str) -> None:
        with mkdocs_gen_files.open(path, "w") as f:
            f.write(text)

    generate(write)


def on_startup(*, command: str, dirty: bool) -> None:
    """The MkDocs hook (``hooks:`` in mkdocs.yml): lay out :data:`API_TREE` before mkdocstrings
    reads its search paths."""
    api_tree()


if __name__ == "<run_path>":  # mkdocs-gen-files runs the file with runpy.run_path
    _gen_files()
elif __name__ == "__main__":
    out = Path(sys.argv[1])

    def _write(path: str, text: str) -> None:
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_text(text, "utf-8")

    api_tree()
    generate(_write)
