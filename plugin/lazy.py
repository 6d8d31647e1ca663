"""Lazy public names for a package's ``__init__`` (PEP 562 module ``__getattr__``).

A package lists which module defines each public name; a name is imported on first use and kept
in the package's namespace after, so that importing the package (or any of its submodules, which
runs its ``__init__`` first) costs nothing until a name is used::

    __getattr__, __dir__ = lazy_names(__name__, globals(), {"hybridsag.errors": ("InputError",)})

A module split by job keeps the names that moved out of it importable for one release, each with
a :class:`DeprecationWarning` naming its new home (:func:`moved_names`)::

    __getattr__ = moved_names(__name__, {"LexicalIndex": "hybridsag.lexical.contract"})
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

__all__ = ["lazy_names", "moved_names"]


def lazy_names(
    package: str, namespace: dict[str, Any], modules: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` whose public names are ``modules``
    (module -> the names it defines); ``namespace`` is the package's ``globals()``. An unknown
    name raises AttributeError as a plain module does."""
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__


def moved_names(module: str, moved: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``module``, whose names ``moved`` (name -> the module that owns it
    now) moved out of it: each is still imported from ``module``, from its new owner (loaded on
    first use), with a :class:`DeprecationWarning` that names the new home (for one release). An
    unknown name raises AttributeError as a plain module does. Built on
    :func:`hybridsag.fusion.text.moved_names`, the one helper for moved names.

    Args:
        module: The old module's name (its ``__name__``).
        moved: Each moved name and the module that defines it now.
    """

    from hybridsag.fusion.text import moved_names as moved_from  # only where a name moved

    def owner_of(name: str) -> ModuleType | None:
        owner = moved.get(name)
        return None if owner is None else importlib.import_module(owner)

    return moved_from(module, owner_of)
