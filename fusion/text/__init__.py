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

__all__ = [*matching.__all__, "moved_module"]


def moved_module(old: str, module: ModuleType) -> Callable[[str], Any]:
    """A module ``__getattr__`` for the old module ``old`` whose names moved to ``module``:
    each name read there is ``module``'s, with a DeprecationWarning naming its new place (the
    old names stay importable for one release).

    >>> import hybridsag.fusion.text.sentences as sentences
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as seen:
    ...     warnings.simplefilter("always")
    ...     split = moved_module("old.place", sentences)("split_sentences")
    >>> split is sentences.split_sentences, str(seen[0].message)
    (True, 'old.place.split_sentences moved to hybridsag.fusion.text.sentences.split_sentences')
    """

    def __getattr__(name: str) -> Any:
        value = getattr(module, name)
        warnings.warn(f"{old}.{name} moved to {module.__name__}.{name}", DeprecationWarning,
                      stacklevel=2)  # fmt: skip
        return value

    return __getattr__
