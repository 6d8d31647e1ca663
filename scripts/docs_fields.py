"""A griffe extension for the documentation site (mkdocs.yml names it): each field of the code
gets, as the docstring the reference pages show, the words already written for it, so that a
field's meaning is never written twice.

- A field preceded by ``#:`` comment lines (the Sphinx convention the code uses for dataclass and
  model fields, constants) takes those lines as its docstring; griffe itself reads only a string
  placed after the assignment.
- A field of a settings section (a model that :class:`hybridsag.settings.Settings` nests, such as
  ``ChunkingSettings.target_chars``) takes the comment ``config/hybridsag.example.toml`` gives its
  key, the words ``reference/settings.md`` shows (its leading range left out: the field's value,
  ``Field(512, ge=400, le=12000)``, shows it); a field that holds a section names that
  section's model. A ``#:`` comment stands where the example gives none.
"""

from __future__ import annotations

import ast
import importlib.util
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import griffe

_REFERENCE = Path(__file__).resolve().parent / "docs_reference.py"


def comment_lines(lines: list[str], lineno: int) -> str | None:
    """The text of the ``#:`` comment lines right above line ``lineno`` (1-based) of
    ``lines``, their marks and one space stripped, or ``None`` when there are none.

    >>> comment_lines(["#: the answer,", "#: always", "x = 42"], 3)
    'the answer,\\nalways'
    >>> comment_lines(["# a plain comment", "x = 42"], 2) is None
    True
    """
    found: list[str] = []
    i = lineno - 2
    while i >= 0 and lines[i].lstrip().startswith("#:"):
        text = lines[i].lstrip()[2:]
        found.append(text[1:] if text.startswith(" ") else text)
        i -= 1
    return "\n".join(reversed(found)) if found else None


@cache
def _reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference", _REFERENCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def settings_fields() -> dict[str, dict[str, str]]:
    """Model class name -> field name -> what the reference pages say of it: the example TOML's
    comment of the field's key (the first key a model is nested under: ``RerankerSettings`` at
    ``judge.reranker``, ``TokenSettings`` at each entry of ``server.tokens``), or, for a field
    that holds a section, a line naming that section's model."""
    from hybridsag.settings import Settings

    ref = _reference()
    comments = ref.example_comments()
    out: dict[str, dict[str, str]] = {}

    def walk(model: Any, path: tuple[str, ...]) -> None:
        if model.__name__ in out:
            return
        fields = out.setdefault(model.__name__, {})
        for name, field in model.model_fields.items():
            key = ".".join((*path, name))
            if (sub := ref._model_of(field.annotation)) is not None:
                fields[name] = f"The `[{key}]` section: [`{sub.__name__}`][{sub.__module__}.{sub.__qualname__}]."
                walk(sub, (*path, name))
                continue
            if (item := ref._item_model(field.annotation)) is not None:
                walk(item, (*path, name))
            if text := ref._LEADING_RANGE.sub("", comments.get(key, "")).strip():
                fields[name] = text

    walk(Settings, ())
    return out


class FieldDocstrings(griffe.Extension):
    """Fields without a docstring take their ``#:`` comment; the settings sections' fields take
    the example TOML's words (the module docstring says which wins)."""

    def on_attribute_instance(
        self, *, node: ast.AST | griffe.ObjectNode, attr: griffe.Attribute, agent: Any, **kwargs: Any
    ) -> None:
        if attr.docstring is not None or not isinstance(agent, griffe.Visitor):
            return
        text = comment_lines(agent.code.splitlines(), attr.lineno or 0)
        if text is not None:
            attr.docstring = griffe.Docstring(text, lineno=attr.lineno, parent=attr)

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name != "hybridsag" or "settings" not in pkg.members:
            return
        module = pkg["settings"]
        for class_name, fields in settings_fields().items():
            cls = module.members.get(class_name)
            if cls is not None and cls.is_alias:  # a section the package re-exports from its module
                cls = cls.final_target
            if cls is None:  # Settings' own stand-in, or a model defined elsewhere
                continue
            for name, text in fields.items():
                member = cls.members.get(name)
                if member is not None and not member.is_alias:
                    member.docstring = griffe.Docstring(text, lineno=member.lineno, parent=member)
