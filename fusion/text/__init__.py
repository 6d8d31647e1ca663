"""The text helpers every side shares, in one package: what the write side (chunker, ingest),
the search side (paths, judge features) and the output read and cut text with.

- :mod:`~hybridsag.fusion.text.matching`: title normalisation, identifiers, literal phrases,
  versions and the dominant script (the fusion rules' and the title path's tests);
- :mod:`~hybridsag.fusion.text.markdown`: Markdown and reStructuredText line structure
  (headings, fences, front matter, markup-only text);
- :mod:`~hybridsag.fusion.text.sentences`: sentence splitting, English and Chinese, and name
  spans.

Pure functions over plain values: standard library only, no I/O, no state (it lives under
``fusion/``, whose modules import nothing else). The names of ``matching`` are exported here
too, where they were importable before the package was made.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

from hybridsag.fusion.text import matching
from hybridsag.fusion.text.matching import *  # noqa: F403 - the names of text.py, kept here

__all__ = [*matching.__all__, "moved_module", "moved_names"]


def moved_names(old: str, owner_of: Callable[[str], ModuleType | None]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of the old module ``old``, whose names moved out of it: a
    name read there is read from ``owner_of(name)``, the module that holds it now, with a
    :class:`DeprecationWarning` naming its new place (an old name stays importable for one
    release); a name ``owner_of`` gives no module for (None), or that module lacks, raises
    AttributeError as a plain module does. The one helper for moved names:
    :func:`moved_module` (a whole module moved) and :func:`hybridsag.lazy.moved_names` (names
    moved to modules loaded on first use) are built on it.

    Args:
        old: The old module's name (its ``__name__``).
        owner_of: The module a moved name lives in now, or None for a name that did not move.
    """

    def __getattr__(name: str) -> Any:
        owner = owner_of(name)
        try:
            if owner is None:
                raise AttributeError(name)
            value = getattr(owner, name)
        except AttributeError:
            raise AttributeError(f"module {old!r} has no attribute {name!r}") from None
        warnings.warn(
            f"{old}.{name} moved to {owner.__name__}.{name}; import it from there (the old "
            "name goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return value

    return __getattr__


def moved_module(old: str, module: ModuleType) -> Callable[[str], Any]:
    """A module ``__getattr__`` for the old module ``old`` whose names all moved to ``module``
    (:func:`moved_names` with that one owner).

    >>> import hybridsag.fusion.text.sentences as sentences
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as seen:
    ...     warnings.simplefilter("always")
    ...     split = moved_module("old.place", sentences)("split_sentences")
    >>> split is sentences.split_sentences, str(seen[0].message).split(";")[0]
    (True, 'old.place.split_sentences moved to hybridsag.fusion.text.sentences.split_sentences')
    """
    return moved_names(old, lambda name: module)
