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
  never headings;
- a **list item** (:func:`list_item`) starts on a line of up to three spaces, a bullet (``*``,
  ``-``, ``+``) or an ordered marker (``1.``, ``1)``), a space or tab, then text; a line indented
  under it continues it. :func:`prose_blocks` splits a chunk's text where a snippet or a quote
  keeps it apart (each item, and the text between lists);
- **front matter** (:func:`front_matter`) is a block at the very top (after a BOM): a line
  ``---`` then YAML up to a line ``---`` or ``...``, or a line ``+++`` then TOML up to a line
  ``+++``, closed within :data:`MAX_FRONT_MATTER_CHARS` characters, whose first line that is
  neither blank nor a comment looks like a key (``title: x``; TOML ``title = "x"`` or
  ``[table]``) or that is empty. It is markup: no chunk holds it and no heading lies in it. A
  document that opens with a thematic break and a paragraph is not taken for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "HEADING_JOIN",
    "MAX_FRONT_MATTER_CHARS",
    "FrontMatter",
    "atx_heading",
    "atx_headings",
    "fence_closes",
    "fence_open",
    "first_h1",
    "front_matter",
    "list_item",
    "outside_fences",
    "prose_blocks",
]

#: How a chunk's open headings are joined into its heading path (``Agents > The loop``): the
#: chunker joins with it, the rules and the CLI's heading line split on it.
HEADING_JOIN = " > "

#: Front matter must close within this many characters from the top (64 Ki): a ``---`` line
#: further down is a thematic break, not the end of a metadata block, and a parser is never
#: handed more than this.
MAX_FRONT_MATTER_CHARS = 64 * 1024

_LIST_ITEM = re.compile(r" {0,3}(?:[*+-]|\d{1,9}[.)])[ \t]+\S")
_FENCE = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)$")
_NEWLINE = re.compile(r"\r\n|\r|\n")
_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_ATX_CLOSE = re.compile(r"(?:^|[ \t]+)#+$")
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n|$)")
#: The first key line of a front matter block: YAML ``key:`` (plain or quoted key), TOML
#: ``key =`` or a ``[table]``.
_YAML_KEY = re.compile(r"""(?:[^\s#:'"\[\]{},&*!|>%@`-][^:#]*|"[^"]*"|'[^']*'):(?:[ \t]|$)""")
_TOML_PART = r"""(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')"""
_TOML_KEY = re.compile(rf"{_TOML_PART}(?:[ \t]*\.[ \t]*{_TOML_PART})*[ \t]*=|\[")


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


def outside_fences(text: str) -> Iterator[str]:
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
    return [h for line in outside_fences(text) if (h := atx_heading(line)) is not None]


def first_h1(text: str) -> str | None:
    """The text of the first non-empty level-1 ATX heading outside code fences and front
    matter (a ``# comment`` of YAML is no heading), or None."""
    fm = front_matter(text)
    for level, title in atx_headings(text if fm is None else text[fm.end :]):
        if level == 1 and title:
            return title
    return None


@dataclass(frozen=True, slots=True)
class FrontMatter:
    """A front matter block (:func:`front_matter`): its ``kind``, the character range of its
    ``body`` (between the fence lines) and ``end``, where the document's text starts (after
    the closing fence line and its line break). Offsets index the text given, a BOM
    included."""

    kind: Literal["yaml", "toml"]
    body_start: int
    body_end: int
    end: int


def front_matter(text: str) -> FrontMatter | None:
    """The front matter block at the top of ``text`` (see the module docstring), or None.

    >>> front_matter("---\\ntitle: A\\n---\\n# Body")
    FrontMatter(kind='yaml', body_start=4, body_end=13, end=17)
    >>> front_matter("---\\nNot a key here.\\n---\\n") is None
    True
    """
    begin = 1 if text.startswith("\ufeff") else 0
    first = _LINE.match(text, begin)
    assert first is not None  # _LINE matches the empty string
    opener = first.group().rstrip()
    if opener == "---":
        kind: Literal["yaml", "toml"] = "yaml"
        closers: tuple[str, ...] = ("---", "...")
        key = _YAML_KEY
    elif opener == "+++":
        kind, closers, key = "toml", ("+++",), _TOML_KEY
    else:
        return None
    limit = begin + MAX_FRONT_MATTER_CHARS
    body_start = pos = first.end()
    keyed: bool | None = None  # whether the first content line is a key (None: none yet)
    while pos < len(text) and pos < limit:
        m = _LINE.match(text, pos)
        assert m is not None
        line = m.group()
        stripped = line.strip()
        if line.rstrip("\r\n").rstrip() in closers and line[:1] not in (" ", "\t"):
            if keyed is False:
                return None
            return FrontMatter(kind, body_start, pos, m.end())
        if keyed is None and stripped and not stripped.startswith("#"):
            keyed = key.match(stripped) is not None
        if m.end() == pos:  # the last line, without a break: the block never closed
            break
        pos = m.end()
    return None


def list_item(line: str) -> bool:
    """``line`` opens a Markdown list item (see the module docstring).

    >>> list_item("* Default: false"), list_item("12) twelve"), list_item("*emphasis*")
    (True, True, False)
    """
    return _LIST_ITEM.match(line) is not None


def prose_blocks(text: str) -> list[str]:
    r"""``text`` as the blocks a snippet or quote keeps apart, each on one line (whitespace
    runs made one space): every ATX heading and every Markdown list item (with the lines
    indented under it) is a block, and so is each run of other non-blank lines between them
    (its paragraphs joined).

    >>> prose_blocks("* Default: false\n* Type: Boolean\n\nIf set, saves\nexact versions.")
    ['* Default: false', '* Type: Boolean', 'If set, saves exact versions.']
    """
    blocks: list[list[str]] = []
    in_item = False  # the block open is a list item (its continuation lines join it)
    closed = False  # the block open is a heading: nothing joins it
    after_blank = False
    for line in text.splitlines():
        if not line.strip():
            after_blank = True
            continue
        item = list_item(line)
        heading = atx_heading(line) is not None
        if (
            item or heading or closed or not blocks
            or (in_item and (after_blank or not line[:1].isspace()))
        ):  # fmt: skip
            blocks.append([line])
            in_item, closed = item, heading
        else:
            blocks[-1].append(line)
        after_blank = False
    return [" ".join(" ".join(b).split()) for b in blocks]
