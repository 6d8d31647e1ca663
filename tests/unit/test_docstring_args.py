"""The public Python API documents what it takes, as the reference pages show it: every public
function and method of the listed surface that takes arguments has a Google ``Args:`` section
naming each of them (a class's constructor arguments in the class docstring, since the pages
leave ``__init__`` out), and every field of a settings section, a model-built retriever and a
frozen result type has words the page shows.

The code is read as mkdocstrings reads it: griffe, statically, over the package laid out as it
installs (``scripts/docs_reference.py``'s ``api_tree``), with the docstring style and the griffe
extensions ``mkdocs.yml`` configures.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import griffe
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]

#: Modules whose public functions are checked (their ``__all__`` where one is given).
FUNCTION_MODULES = (
    "client",
    "integrations",
    "integrations.langchain",
    "integrations.llamaindex",
    "integrations.mcp_server",
)
#: Classes whose constructor and public methods are checked.
CLASSES = (
    "search.HybridSearch",
    "client.ServiceClient",
    "client.AsyncServiceClient",
    "integrations.llamaindex.HybridSagRetriever",
)
#: Classes built from their fields (pydantic models, dataclasses): every field is described.
FIELD_CLASSES = ("integrations.langchain.HybridSagRetriever",)


def _handler_options() -> dict[str, Any]:
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda *_: None)
    config = yaml.load((ROOT / "mkdocs.yml").read_text("utf-8"), Loader=Loader)  # noqa: S506
    for plugin in config["plugins"]:
        if isinstance(plugin, dict) and "mkdocstrings" in plugin:
            options: dict[str, Any] = plugin["mkdocstrings"]["handlers"]["python"]["options"]
            return options
    raise AssertionError("mkdocs.yml configures no mkdocstrings python handler")


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> griffe.Module:
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "scripts" / "docs_reference.py")
    assert spec is not None and spec.loader is not None
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    tree = reference.api_tree(tmp_path_factory.mktemp("api") / "tree")
    options = _handler_options()
    assert options["docstring_style"] == "google"
    extensions = griffe.load_extensions(
        *(str(ROOT / e) if isinstance(e, str) and e.startswith("scripts/") else e
          for e in options.get("extensions", ()))
    )  # fmt: skip
    loaded = griffe.load(
        "hybridsag", search_paths=[str(tree)], docstring_parser="google",
        extensions=extensions, allow_inspection=False,
    )  # fmt: skip
    assert isinstance(loaded, griffe.Module)
    return loaded


def _exported() -> list[str]:
    """The classes and functions of the top-level ``__all__``, by their path under
    ``hybridsag`` (the names are imported lazily, so they are read at run time)."""
    import hybridsag

    out = []
    for name in hybridsag.__all__:
        obj = getattr(hybridsag, name)
        if isinstance(obj, type) or callable(obj):
            out.append(f"{obj.__module__}.{obj.__qualname__}".removeprefix("hybridsag."))
    return out


def documented(docstring: griffe.Docstring | None, kind: griffe.DocstringSectionKind) -> set[str]:
    """The names a docstring's sections of ``kind`` (``parameters``: ``Args:``; ``attributes``)
    list with words (a bare ``name:`` says nothing)."""
    if docstring is None:
        return set()
    return {
        item.name
        for section in docstring.parse("google", warnings=False)
        if section.kind is kind
        for item in section.value
        if item.description.strip()
    }


def arguments(function: griffe.Function) -> list[str]:
    """The names a call passes (``self`` and ``cls`` left out)."""
    names = [p.name for p in function.parameters]
    if names and names[0] in ("self", "cls") and function.parent is not None and function.parent.is_class:
        names = names[1:]
    return names


def _public_methods(cls: griffe.Class) -> Iterator[griffe.Function]:
    for name, member in cls.members.items():
        if name.startswith("_") or member.is_alias or not member.is_function:
            continue
        if "property" in member.labels:
            continue
        yield member  # type: ignore[misc]


def _is_dataclass(cls: griffe.Class) -> bool:
    return any(str(d.value).split("(")[0].endswith("dataclass") for d in cls.decorators)


def gaps(package: griffe.Module) -> list[str]:
    """Every argument or field of the checked surface whose docs the page would not show."""
    out: list[str] = []

    def check(function: griffe.Function, docstring: griffe.Docstring | None, where: str) -> None:
        missing = [a for a in arguments(function) if a not in documented(docstring, griffe.DocstringSectionKind.parameters)]
        out.extend(f"{where}({a})" for a in missing)

    def check_class(path: str) -> None:
        cls = package[path]
        assert cls.is_class, path
        init = cls.members.get("__init__")
        # a dataclass's ``__init__`` (griffe writes one) takes its fields: check_fields
        if init is not None and not init.is_alias and not _is_dataclass(cls):
            check(init, cls.docstring, path)
        for method in _public_methods(cls):
            check(method, method.docstring, f"{path}.{method.name}")

    def check_fields(path: str) -> None:
        cls = package[path]
        listed = documented(cls.docstring, griffe.DocstringSectionKind.attributes)
        for name, member in cls.members.items():
            if name.startswith("_") or member.is_alias or not member.is_attribute:
                continue
            if "instance-attribute" not in member.labels or name == "model_config":
                continue
            if name not in listed and not (member.docstring and member.docstring.value.strip()):
                out.append(f"{path}.{name}")

    for module_path in FUNCTION_MODULES:
        module = package[module_path]
        names = [str(n) for n in module.exports] if module.exports else list(module.members)
        for name in names:
            member = module.members.get(name)
            if member is None or member.is_alias or not member.is_function or name.startswith("_"):
                continue
            check(member, member.docstring, f"{module_path}.{name}")
    for path in CLASSES:
        check_class(path)
    for path in FIELD_CLASSES:
        check_fields(path)
    settings = package["settings"]
    for name in settings.exports or ():
        member = settings.members.get(str(name))
        if member is not None and member.is_alias and member.target_path.startswith("hybridsag.settings."):
            member = member.final_target  # a name the package re-exports from one of its modules
        if member is None or member.is_alias:
            continue
        where = member.path.removeprefix("hybridsag.")
        if member.is_class:
            check_class(where)
            if any(str(base) in ("BaseModel", "BaseSettings") or str(base).endswith(("Section", "Settings"))
                   for base in member.bases):  # fmt: skip
                check_fields(where)
        elif member.is_function:
            check(member, member.docstring, where)
    for path in _exported():
        if path in CLASSES or path.startswith("settings."):
            continue
        check_class(path)
        cls = package[path]
        if _is_dataclass(cls):
            check_fields(path)
    return sorted(set(out))


def test_the_public_api_documents_every_argument_and_field(package: griffe.Module) -> None:
    missing = gaps(package)
    assert missing == [], f"{len(missing)} arguments or fields without words on the reference pages:\n" + "\n".join(missing)


def test_the_check_reads_what_it_should(package: griffe.Module) -> None:
    """The walk reaches the surface it names (a typo in a path would make it check nothing)."""
    search = package["search.HybridSearch"]
    assert {"search", "ingest", "delete", "include", "sync_need"} <= {m.name for m in _public_methods(search)}
    assert arguments(search["search"]) == ["query", "options", "keywords"]
    assert {"SearchResponse", "Hit", "Filters", "HybridSagError"} <= {p.rsplit(".", 1)[-1] for p in _exported()}
    # an Args section is read as mkdocstrings reads it
    doc = griffe.Docstring("Do it.\n\nArgs:\n    x: the thing.\n    y:\n", parser="google")
    assert documented(doc, griffe.DocstringSectionKind.parameters) == {"x"}


def test_settings_fields_show_the_example_files_words(package: griffe.Module) -> None:
    """A section's field shows what config/hybridsag.example.toml says of it (its range left to
    the field's value), a ``#:`` comment where the example says nothing."""
    target = package["settings.ChunkingSettings.target_chars"]
    assert target.docstring is not None
    assert target.docstring.value == "characters a chunk aims for (whole sentences)"
    chunking = package["settings.Settings.chunking"]
    assert chunking.docstring is not None and "ChunkingSettings" in chunking.docstring.value
