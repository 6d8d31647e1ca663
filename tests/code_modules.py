"""The modules of the code folders, by import name, and importing them all.

:func:`code_modules` lists them from the tree (``tests/unit/test_packaging.py`` checks each);
:func:`import_every_module` imports them: Hypothesis draws some of its values from the
constants of the local modules imported in the process (``sys.modules``, test files left out),
so a property test's examples, even derandomized, depend on what else the process imported
before (under ``make test``, whichever test files xdist gave the same worker earlier). With
every module imported first the constants are the code base's, the same in every run.
"""

from __future__ import annotations

import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The code folders and the package each one is installed as (pyproject's ``package-dir``).
CODE_FOLDERS = (
    ("plugin", "hybridsag"),
    ("fusion", "hybridsag.fusion"),
    ("consistency", "hybridsag.consistency"),
    ("config/stopwords", "hybridsag.stopwords"),
)


def code_modules(folders: tuple[tuple[str, str], ...] = CODE_FOLDERS) -> list[str]:
    """Every module of ``folders`` (folder, package), by its import name, sorted."""
    names = []
    for folder, package in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            names.append(".".join([package, *parts]))
    return sorted(names)


def import_every_module() -> list[str]:
    """Import every module of the code folders; returns their import names, sorted."""
    names = code_modules()
    for name in names:
        importlib.import_module(name)
    return names
