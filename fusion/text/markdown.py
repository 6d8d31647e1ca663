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

reStructuredText's explicit markup is read here too, so that the chunker (what it indexes as
text), the stub test of the fusion rules and the snippets (which lines they keep) agree:

- an **explicit markup line** (:func:`rst_markup`) starts with ``..`` and a space: a directive
  (``.. name:: args``), a hyperlink target (``.. _label:``), a substitution definition, a
  footnote or citation (``.. [1]``), else a comment. A directive's content is code
  (:data:`RST_CODE_DIRECTIVES`: ``code-block``, ``literalinclude``, ...), prose
  (:data:`RST_TEXT_DIRECTIVES`: admonitions, tabs, cards, object descriptions, ...) or, for every
  other directive (``toctree``, ``image``, ``meta``, ``raw``, autodoc), markup;
- a **field line** (:func:`rst_field`) starts with a field marker ``:name:``: directive options
  (``:maxdepth: 1``) and Sphinx's file-wide metadata (``:orphan:``, ``:tocdepth: 2``);
- a **literal block** is the block indented under a paragraph that ends with ``::``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "HEADING_JOIN",
    "MAX_FRONT_MATTER_CHARS",
    "RST_CODE_DIRECTIVES",
    "RST_TEXT_DIRECTIVES",
    "FrontMatter",
    "atx_heading",
    "atx_headings",
    "fence_closes",
    "fence_open",
    "first_h1",
    "front_matter",
    "indent_of",
    "list_item",
    "markup_only",
    "outside_fences",
    "prose_blocks",
    "rst_field",
    "rst_markup",
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

#: reST directives whose content is code (``code-tab`` is sphinx-tabs' code tab).
RST_CODE_DIRECTIVES = frozenset(
    {"code", "code-block", "sourcecode", "parsed-literal", "doctest", "testcode", "testoutput",
     "ipython", "literalinclude", "productionlist", "code-tab"}
)  # fmt: skip
#: reST directives whose content is prose (admonitions, object descriptions, and the tabs,
#: cards and dropdowns of sphinx-tabs, sphinx-inline-tabs and sphinx-design, which hold the
#: text and code a reader switches between); every other directive's content is markup
#: (toctree entries, image options, raw HTML, autodoc, math) and is no text.
RST_TEXT_DIRECTIVES = frozenset(
    {"note", "warning", "tip", "hint", "important", "caution", "danger", "error", "attention",
     "admonition", "seealso", "versionadded", "versionchanged", "deprecated", "topic", "sidebar",
     "only", "container", "rubric", "epigraph", "highlights", "pull-quote", "compound",
     "figure", "table", "list-table", "csv-table", "glossary", "hlist", "centered", "line-block",
     "deprecated-removed", "versionremoved", "describe", "function", "class", "method",
     "attribute", "data", "exception", "module", "option", "envvar", "program", "signal",
     "variable", "command", "prop_tgt", "genex", "policy", "manual", "cmake-module",
     "tab", "tabs", "group-tab", "tab-set", "tab-item", "dropdown", "card", "grid", "grid-item",
     "grid-item-card"}
)  # fmt: skip
#: ``.. name:: args`` (a directive), ``.. |sub| name::`` (a substitution definition)
_RST_DIRECTIVE = re.compile(r"\.\.[ \t]+(?:\|[^|]+\|[ \t]+)?([A-Za-z0-9][\w:+.-]*)::(?:[ \t]|$)")
_RST_FOOTNOTE = re.compile(r"\.\.[ \t]+\[[^\]]+\]")
#: a field marker at the start of a line: ``:orphan:``, ``:maxdepth: 2``, ``:param x: ...``
_RST_FIELD = re.compile(r"[ \t]*:(?![ \t:])[^:`\r\n]*[^ \t:`\\\r\n]:(?:[ \t]|$)")
#: Markdown markup lines that hold no text: a line of HTML tags only, a link reference
#: definition
_TAGS_ONLY = re.compile(r"[ \t]*(?:<[^<>]+>[ \t]*)+")
_LINK_DEF = re.compile(r" {0,3}\[[^\]]+\]:[ \t]*\S+[ \t]*$")
_WORD_CHAR = re.compile(r"[^\W_]")


def indent_of(line: str) -> int:
    """The columns of ``line``'s leading whitespace (tabs to multiples of 8)."""
    expanded = line.expandtabs(8)
    return len(expanded) - len(expanded.lstrip())


def rst_markup(lead: str) -> str | None:
    """What the reST explicit-markup line ``lead`` (leading whitespace removed) starts:
    ``"code"`` (a code directive: its content is code), ``"text"`` (its content is prose),
    ``"skip"`` (a label, a substitution, any other directive, a comment: markup with its
    content), ``"footnote"``, or ``None`` when the line is not explicit markup.

    >>> rst_markup(".. code-block:: shell"), rst_markup(".. tab:: Linux"), rst_markup(".. toctree::")
    ('code', 'text', 'skip')
    >>> rst_markup(".. _label:"), rst_markup("..."), rst_markup("text")
    ('skip', None, None)
    """
    if not lead.startswith("..") or (len(lead) > 2 and lead[2] not in " \t"):
        return None
    m = _RST_DIRECTIVE.match(lead)
    if m is not None:
        name = m.group(1).lower().split(":")[-1]
        if name in RST_CODE_DIRECTIVES:
            return "code"
        return "text" if name in RST_TEXT_DIRECTIVES else "skip"
    if _RST_FOOTNOTE.match(lead):
        return "footnote"
    return "skip"  # a hyperlink target (.. _label:), an anonymous one, or a comment


def rst_field(line: str) -> int:
    """The length of the reST field marker ``line`` starts with (``:orphan:``, ``:maxdepth:``
    and the space after it), 0 when it starts with none.

    >>> rst_field(":orphan:"), rst_field("  :maxdepth: 2"), rst_field(":)"), rst_field("a: b")
    (8, 13, 0, 0)
    """
    m = _RST_FIELD.match(line)
    return m.end() if m else 0


def markup_only(text: str) -> bool:
    r"""Whether ``text`` holds no letter or digit outside markup: blank lines, ATX headings,
    front matter, HTML comments and tag-only lines, link reference definitions, reST field
    markers (``:orphan:``; a field's value is text), explicit markup lines (a directive's line,
    a label, a comment) and the content of the directives whose content is markup
    (``toctree``, ``meta``, ``image``; see :func:`rst_markup`). What a reader can read nothing
    in: a lone ``:orphan:``, a ``.. toctree::`` block, front matter alone.

    >>> markup_only(":orphan:\n\n.. toctree::\n   :maxdepth: 2\n\n   install\n   usage")
    True
    >>> markup_only(":orphan:\n\nSee the guide."), markup_only(".. note::\n\n   Read me.")
    (False, False)
    """
    lead = text.lstrip()
    if lead[:1].isalnum():  # a letter or digit first: prose from its first line
        return False
    lines = text.splitlines()
    fm = front_matter(text) if lead[:3] in ("---", "+++") else None
    start = text[: fm.end].count("\n") if fm is not None else 0
    skip_deeper = -1  # the indent of a markup directive or comment whose content is skipped
    in_comment = False
    for line in lines[start:]:
        stripped = line.strip()
        if not stripped:
            continue
        indent = indent_of(line)
        if skip_deeper >= 0 and indent > skip_deeper:
            continue
        skip_deeper = -1
        if in_comment:
            in_comment = "-->" not in stripped
            continue
        lead = line.lstrip()
        kind = rst_markup(lead)
        if kind is not None:
            if kind == "skip":
                skip_deeper = indent
            elif kind == "footnote" and _WORD_CHAR.search(lead[lead.index("]") + 1 :]):
                return False
            continue
        if (
            atx_heading(line) is not None
            or _TAGS_ONLY.fullmatch(line)
            or _LINK_DEF.match(line)
        ):
            continue
        if lead.startswith("<!--"):
            in_comment = "-->" not in lead
            continue
        if _WORD_CHAR.search(line[rst_field(line) :]):
            return False
    return True


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
    r"""``text`` as the blocks a snippet or quote keeps apart, each on one line: every ATX
    heading, every Markdown list item and every reST field (each with the lines indented under
    it) is a block, and so is each run of other non-blank prose lines between them (its
    paragraphs joined); whitespace runs are made one space. Lines that are not prose keep a
    line of their own, as they are (indentation kept, trailing whitespace dropped): a code
    fence and the lines inside it, a reST explicit-markup line (``.. tab:: Unix/macOS``,
    ``.. code-block:: shell``), and the lines of a literal block or of a code or markup
    directive's content (indented under a line ending in ``::`` or under the directive), so
    that reST never runs into one paragraph. A prose directive's content (a note, a tab) is
    prose again.

    >>> prose_blocks("* Default: false\n* Type: Boolean\n\nIf set, saves\nexact versions.")
    ['* Default: false', '* Type: Boolean', 'If set, saves exact versions.']
    >>> prose_blocks("To install:\n\n.. tab:: Unix\n\n   .. code-block:: shell\n\n"
    ...              "      python -m pip install x\n\n   It installs\n   x.")
    ['To install:', '.. tab:: Unix', '   .. code-block:: shell', '      python -m pip install x', 'It installs x.']
    """
    blocks: list[list[str]] = []
    kept: list[bool] = []  # the block is a line kept as it is
    in_item = False  # the block open is a list item (its continuation lines join it)
    closed = False  # the block open is a heading or a kept line: nothing joins it
    after_blank = False
    fence: str | None = None  # the marker of the code fence open
    literal = -1  # lines indented deeper than this are a literal block's or a directive's
    for line in text.splitlines():
        if fence is not None:
            blocks.append([line.rstrip()])
            kept.append(True)
            if fence_closes(line, fence):
                fence = None
            continue
        if not line.strip():
            after_blank = True
            continue
        indent = indent_of(line)
        if literal >= 0:
            if indent > literal:
                blocks.append([line.rstrip()])
                kept.append(True)
                continue
            literal = -1
        lead = line.lstrip()
        marker = fence_open(line)
        kind = rst_markup(lead) if lead.startswith("..") else None
        if marker is not None or kind is not None:
            blocks.append([line.rstrip()])
            kept.append(True)
            in_item, closed, after_blank, fence = False, True, False, marker
            if kind in ("code", "skip"):
                literal = indent
            continue
        item = list_item(line) or rst_field(line) > 0
        heading = atx_heading(line) is not None
        if (
            item or heading or closed or not blocks
            or (in_item and (after_blank or not line[:1].isspace()))
        ):  # fmt: skip
            blocks.append([line])
            kept.append(False)
            in_item, closed = item, heading
        else:
            blocks[-1].append(line)
        if line.rstrip().endswith("::"):  # a reST literal block follows
            literal = indent
        after_blank = False
    return [b[0] if as_is else " ".join(" ".join(b).split()) for b, as_is in zip(blocks, kept)]
