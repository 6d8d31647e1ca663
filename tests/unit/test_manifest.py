"""The checks of a folder manifest (``hybridsag.ingest.manifest``) and the patterns the service's
schema carries for them: the two accept exactly the same roots and paths."""

from __future__ import annotations

import re

import pytest

from hybridsag.errors import InputError
from hybridsag.ingest.manifest import PATH_PATTERN, ROOT_PATTERN, check_rel, check_root

ROOTS = {
    "/home/me/docs": True,
    "/a": True,
    "/srv/.notes": True,  # a hidden folder named on purpose is indexed
    "/a/..b": True,
    "/": False,
    "docs": False,
    "/a/": False,
    "//a": False,
    "/a/./b": False,
    "/a/../b": False,
    "/a/\x1fb": False,
}
PATHS = {
    "a.md": True,
    "guide/Quick Start.MD": True,
    "zh/安装指南.md": True,
    "a/b/c.tar.rst": True,
    "page.HTM": True,
    "a..md": True,
    ".a.md": False,  # hidden: a folder scan never lists it
    "a/.git/x.md": False,
    "../a.md": False,
    "/a.md": False,
    "a//b.md": False,
    "a/./b.md": False,
    "a.py": False,
    "README": False,
    "a\tb.md": False,
}


@pytest.mark.parametrize(("root", "ok"), ROOTS.items())
def test_root_check_and_pattern_agree(root: str, ok: bool) -> None:
    assert bool(re.fullmatch(ROOT_PATTERN, root)) is ok
    if ok:
        assert check_root(root) == root
    else:
        with pytest.raises(InputError, match="root"):
            check_root(root)


@pytest.mark.parametrize(("path", "ok"), PATHS.items())
def test_path_check_and_pattern_agree(path: str, ok: bool) -> None:
    assert bool(re.fullmatch(PATH_PATTERN, path)) is ok
    if ok:
        assert check_rel(path) == path
    else:
        with pytest.raises(InputError, match="path"):
            check_rel(path)
