"""The one reader of Markdown structure: code fences and ATX headings, line by line.

The chunker (heading paths, code kept whole), the folder reader (a document's title) and the
identifier rules (a heading that names an identifier defines it) all read Markdown through these
functions, so they agree on what is a fence and what is a heading. Standard library only.

The rules (CommonMark, with one deliberate widening):

- a **fence** opens on a line of three or more backticks or tildes after any leading spaces or
  tabs (CommonMark allows at most three spaces; fences nested in list items are indented more,
  and are common in real documentation); a backtick fence's info string may not hold a backtick;
- it **closes** on a line that, stripped, is only the opener's character, at least as many as
  the opener (an info string on the closing line does not close it); an unclosed fence runs to
  the end of the text;
- an **ATX heading** is up to three spaces, one to six ``#``, then a space, a tab or the end of
  the line; its text has the closing ``#`` run (after a space) removed. Lines inside a fence are
  never headings.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["atx_heading", "atx_headings", "fence_closes", "fence_open", "first_h1"]

_FENCE = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)$")
_NEWLINE = re.compile(r"\r\n|\r|\n")
_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_ATX_CLOSE = re.compile(r"(?:^|[ \t]+)#+$")


def fence_open(line: str) -> str | None:
    """The fence marker (``"```"``, ``"~~~~"``) when ``line`` opens a code fence, else None.

    >>> fence_open("  ```python"), fence_open("``` a`b"), fence_open("text")
    ('```', None, None)
    """
    m = _FENCE.match(line)
    if m is None:
        return None
    marker, info = m.group(1), m.group(2)
    if marker[0] == "`" and "`" in info:
        return None
    return marker


def fence_closes(line: str, marker: str) -> bool:
    """Whether ``line`` closes the fence opened by ``marker``.

    >>> fence_closes("  ````", "```"), fence_closes("``` x", "```"), fence_closes("~~~", "```")
    (True, False, False)
    """
    stripped = line.strip()
    return len(stripped) >= len(marker) and stripped == marker[0] * len(stripped)


def atx_heading(line: str) -> tuple[int, str] | None:
    """``(level, text)`` when ``line`` is an ATX heading (outside a fence), else None.

    >>> atx_heading("## Install ##"), atx_heading("#hashtag"), atx_heading("#")
    ((2, 'Install'), None, (1, ''))
    """
    m = _ATX.match(line)
    if m is None:
        return None
    return len(m.group(1)), _ATX_CLOSE.sub("", m.group(2) or "").strip()


def _outside_fences(text: str) -> Iterator[str]:
    """The lines of ``text`` that are not inside a code fence (fence lines excluded)."""
    fence: str | None = None
    for line in _NEWLINE.split(text):
        if fence is not None:
            if fence_closes(line, fence):
                fence = None
            continue
        marker = fence_open(line)
        if marker is not None:
            fence = marker
            continue
        yield line


def atx_headings(text: str) -> list[tuple[int, str]]:
    """Every ATX heading of ``text`` outside code fences, in order.

    >>> atx_headings("# A\\n```sh\\n# not a heading\\n```\\n## B")
    [(1, 'A'), (2, 'B')]
    """
    return [h for line in _outside_fences(text) if (h := atx_heading(line)) is not None]


def first_h1(text: str) -> str | None:
    """The text of the first non-empty level-1 ATX heading outside code fences, or None."""
    for level, title in atx_headings(text):
        if level == 1 and title:
            return title
    return None
