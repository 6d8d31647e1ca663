"""SAG-Wiki style chunking: whole sentences packed to a target size, whole-sentence overlap.

A resource's text is cut into :class:`Chunk` records, each an exact, trimmed slice of the source
(``source.encode("utf-8")[byte_start:byte_end].decode("utf-8") == chunk.text``) with its heading
path and 1-based line range. The rules:

- blocks split at blank lines, headings (Markdown ATX ``#``..``######`` and setext underlines;
  reStructuredText section titles, underlined or over- and underlined with one repeated
  punctuation character at least as long as the title, levels in the order their styles first
  appear; plain text has none) and code fences (````` ``` ````` or ``~~~``);
- a heading starts a new section: chunks never cross one, the heading line itself is not part of
  any chunk, and ``heading_path`` lists the open headings by level (``"Guide > Install"``);
  a section with no body produces no chunk;
- prose is split into sentences (:func:`hybridsag.fusion.text.sentences.split_sentences`); sentences are
  packed greedily while a chunk spans at most ``target_chars`` characters; a sentence is never cut below the hard cap, so
  a sentence longer than the target is a chunk of its own;
- neighbouring chunks of one section overlap by whole trailing sentences of the previous chunk
  whose lengths sum to at most ``overlap_chars`` (possibly none, never the whole previous chunk);
- a code block (fence lines included) that fits the target is one unit that may share a chunk with
  prose; a longer one is a chunk of its own, whole up to the hard cap; beyond it, it is cut at line
  ends into pieces of about equal size (so no piece is a short tail); nothing overlaps into or out
  of code. Code is: fenced blocks, and in reST the literal block after a paragraph ending in
  ``::``, doctest blocks (``>>>``) and the content of code directives;
- **hard caps**: no chunk is longer than ``max_chars`` (default ``4 * target_chars``) or spans
  more than ``max_lines`` lines (200): a longer run without a sentence end (a million short
  lines) is cut at line ends into target-sized pieces, a longer line at whitespace, a run with
  no whitespace anywhere;
- **tiny fragments**: a chunk shorter than ``min_chars`` (40, at most a tenth of the target;
  ``Output::``, a lone fence line) joins the next chunk of its section, else the previous one,
  within the hard caps; a section whose whole body is tiny keeps it; a sentence ending in ``:``
  just before a code block stays with that code;
- **markup is not text**: Markdown front matter (a YAML ``---`` or TOML ``+++`` block at the
  top, :func:`hybridsag.fusion.text.markdown.front_matter`; folder ingest takes the title and
  metadata from it, :mod:`hybridsag.ingest.front_matter`), HTML comments (``<!-- YAML ... -->``),
  lines made only of HTML tags (``<a id="x"></a>``) and link reference definitions
  (``[name]: url``); reST labels
  (``.. _name:``), comments, substitution definitions, directive lines and their options
  (``.. note::``, ``:maxdepth: 1``), the content of directives that is markup too
  (``toctree``, ``image``, ``raw``, ``meta``, autodoc, ...), Sphinx's file-wide metadata (a
  field list before anything else of the document: ``:orphan:``) and the bare ``::`` that
  announces a literal block; which directives hold code and which prose (admonitions, and the
  tabs, cards and dropdowns of the Sphinx tab and design extensions, whose code blocks are
  code) is :func:`hybridsag.fusion.text.markdown.rst_markup`'s. No chunk starts with them and no title is made of them (an admonition's content is
  prose; a code directive's content is code); one that lies between two pieces of one chunk
  stays in that chunk's text, which is always an exact slice of the source;
- lines end at ``\\n``, ``\\r\\n`` or a lone ``\\r`` (Python's universal newlines); a leading BOM
  is skipped; chunks never start or end with whitespace and whitespace-only chunks never appear.

Mode ``"passage"`` returns the whole trimmed text as one chunk (benchmark corpora whose passages
are given whole), cut at the hard caps. Everything here is pure Python and linear in the input
size, whatever its shape (one 10 MB line without a sentence end, a million short lines, CJK
without punctuation): a cut reads only its own window, the hard-cap check counts line breaks
from the line table, the sentence splitter lets the regex engine skip terminators that can end
nothing, and each line of a paragraph is looked at once (``benchmarks/chunk_scale.py``).
"""

from __future__ import annotations

import re
import string
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import Literal

from hybridsag.documents import FORMATS, Chunk, Format
from hybridsag.fusion.text.markdown import (
    HEADING_JOIN,
    atx_heading,
    fence_closes,
    fence_open,
    front_matter,
    indent_of,
    rst_field,
    rst_markup,
)
from hybridsag.fusion.text.sentences import (
    ITEM_RE,
    NEWLINE_RE,
    Span,
    line_table,
    paragraph_spans,
    trim_span,
)

__all__ = [
    "DEFAULT_MAX_LINES",
    "DEFAULT_MIN_CHARS",
    "MAX_CHARS_FACTOR",
    "chunk_text",
    "rst_adornment",
    "rst_title",
]

#: The hard cap on a chunk's characters is this many times the target, unless set.
MAX_CHARS_FACTOR = 4
#: The hard cap on the lines one chunk spans.
DEFAULT_MAX_LINES = 200
#: A chunk shorter than this (``Output::``, a lone ```````) joins a neighbour of its section.
DEFAULT_MIN_CHARS = 40

#: a reStructuredText adornment: one non-alphanumeric printable ASCII character, repeated
_RST_PUNCTUATION = frozenset(string.punctuation)
_RST_ADORN_RE = re.compile("([" + re.escape(string.punctuation) + r"])\1+[ \t]*")


def rst_adornment(line: str) -> str | None:
    """The character of a reStructuredText adornment line (``=====``), else ``None``."""
    m = _RST_ADORN_RE.fullmatch(line)
    return m.group(1) if m else None


# --------------------------------------------------------------------------- block parsing

_SETEXT_RE = re.compile(r" {0,3}(=+|-+)[ \t]*$")
_THEMATIC_RE = re.compile(r" {0,3}(?:(?:-[ \t]*){3,}|(?:\*[ \t]*){3,}|(?:_[ \t]*){3,})$")
#: a Markdown line made only of HTML tags (``<a id="x"></a>``, ``<br/>``): markup, no text
_TAGS_ONLY_RE = re.compile(r"(?:<[^<>]+>[ \t]*)+")
#: a Markdown link reference definition (``[fs.Stats]: #class-fsstats``): markup, no text
_LINK_DEF_RE = re.compile(r" {0,3}\[[^\]]+\]:[ \t]*\S+")
_SENTENCE, _CODE, _CODE_PIECE = 0, 1, 2
Unit = tuple[int, int, int]  # (start, end, kind)


@dataclass(frozen=True, slots=True)
class _Caps:
    """Sizes of one chunking run: target, overlap, hard caps, the tiny-fragment floor."""

    target: int
    overlap: int
    max_chars: int
    max_lines: int
    min_chars: int


def _cut(text: str, s: int, e: int, size: int, max_lines: int) -> list[Span]:
    """``text[s:e]`` in trimmed pieces of at most ``size`` characters and ``max_lines`` lines,
    cut at line ends, else at whitespace, else anywhere (a run with no space at all).

    Each piece reads only its own window (``size`` characters and one past): the work is
    linear in ``e - s`` whatever the text holds (no newline, no space)."""
    pieces: list[Span] = []
    while s < e:
        s, e = trim_span(text, s, e)
        if s >= e:
            break
        limit = min(e, s + size)
        # the line cap: the end of the max_lines-th line break, when it comes before the limit
        # (a break ending past the limit cannot lower it, so the search stops one past it)
        breaks = islice(NEWLINE_RE.finditer(text, s, min(e, limit + 1)), max_lines - 1, None)
        nth = next(breaks, None)
        if nth is not None:
            limit = min(limit, nth.end())
        if limit >= e:
            pieces.append((s, e))
            break
        cut = max(text.rfind("\n", s, limit + 1), text.rfind("\r", s, limit + 1))
        if cut <= s:
            cut = max((text.rfind(ch, s, limit + 1) for ch in " \t"), default=-1)
        if cut <= s:
            cut = limit
        ps, pe = trim_span(text, s, cut)
        if ps < pe:
            pieces.append((ps, pe))
        s = max(cut, s + 1)
    return pieces


def _code_units(
    text: str, first: int, last: int, starts: list[int], ends: list[int], caps: _Caps
) -> list[Unit]:
    """Units of the code block on lines ``first..last``: one packable unit when it fits the
    target, one whole chunk up to the hard caps, else pieces of about equal size cut at line
    ends (a line longer than ``max_chars`` is cut at spaces)."""
    s, e = trim_span(text, starts[first], ends[last])
    if s >= e:
        return []
    lines = last - first + 1
    if e - s <= caps.target and lines <= caps.max_lines:
        return [(s, e, _CODE)]
    if e - s <= caps.max_chars and lines <= caps.max_lines:
        return [(s, e, _CODE_PIECE)]
    count = max(-(-(e - s) // caps.max_chars), -(-lines // caps.max_lines))
    goal = (e - s) / count  # balanced: no 71-character tail after a 2,000-character piece
    pieces: list[Unit] = []
    ps = pe = -1
    piece_first = first
    for k in range(first, last + 1):
        ls, le = trim_span(text, starts[k], ends[k])
        if ls >= le:
            continue
        if le - ls > caps.max_chars:  # one line over the cap: cut at spaces
            if ps >= 0:
                pieces.append((ps, pe, _CODE_PIECE))
                ps = -1
            pieces.extend((a, b, _CODE_PIECE) for a, b in _cut(text, ls, le, caps.max_chars, 1))
            continue
        if ps >= 0 and (
            le - ps > caps.max_chars or k - piece_first >= caps.max_lines or pe - ps >= goal
        ):
            pieces.append((ps, pe, _CODE_PIECE))
            ps = -1
        if ps < 0:
            ps, piece_first = ls, k
        pe = le
    if ps >= 0:
        pieces.append((ps, pe, _CODE_PIECE))
    return pieces


def _pack(units: list[Unit], caps: _Caps, fits: Callable[[int, int], bool]) -> list[Span]:
    """Greedy packing of one section's units into chunk spans (see the module docstring)."""
    out: list[Span] = []
    cur: list[Unit] = []
    for unit in units:
        if unit[2] == _CODE_PIECE:
            if cur:
                out.append((cur[0][0], cur[-1][1]))
                cur = []
            out.append((unit[0], unit[1]))
            continue
        if not cur or (unit[1] - cur[0][0] <= caps.target and fits(cur[0][0], unit[1])):
            cur.append(unit)
            continue
        out.append((cur[0][0], cur[-1][1]))
        # whole trailing sentences, lengths summing to <= overlap, never the whole chunk
        take = 0
        total = 0
        for prev in reversed(cur):
            if prev[2] != _SENTENCE or take + 1 >= len(cur):
                break
            length = prev[1] - prev[0]
            if total + length > caps.overlap:
                break
            total += length
            take += 1
        kept = cur[len(cur) - take :] if take else []
        while kept and (unit[1] - kept[0][0] > caps.target or not fits(kept[0][0], unit[1])):
            kept.pop(0)
        cur = kept
        cur.append(unit)
    if cur:
        out.append((cur[0][0], cur[-1][1]))
    return _merge_tiny(out, caps.min_chars, fits)


def _merge_tiny(spans: list[Span], min_chars: int, fits: Callable[[int, int], bool]) -> list[Span]:
    """Each span shorter than ``min_chars`` joins the next span of its section (what it
    introduces: ``Output::`` before its code), else the previous one, when the union stays
    within the hard caps; a section with one tiny span keeps it. One pass: the span being
    looked at grows by the next ones while it is tiny, and is then kept or given to the one
    before it."""
    out: list[Span] = []
    n = len(spans)
    j = 1  # the next span not looked at yet
    cur: Span | None = spans[0] if spans else None
    while cur is not None:
        s, e = cur
        if e - s < min_chars and n - j + len(out) > 0:
            if j < n and fits(s, max(e, spans[j][1])):
                cur = (s, max(e, spans[j][1]))
                j += 1
                continue
            if out and fits(out[-1][0], max(e, out[-1][1])):
                out[-1] = (out[-1][0], max(e, out[-1][1]))
                cur = spans[j] if j < n else None
                j += 1
                continue
        out.append(cur)
        cur = spans[j] if j < n else None
        j += 1
    return out


def _markdown_spans(
    text: str,
    begin: int,
    fmt: str,
    caps: _Caps,
    headings: list[str] | None = None,
) -> list[tuple[int, int, str]]:
    """(start, end, heading_path) of every chunk, in order; each heading's title is appended
    to ``headings`` when given (a heading without a body opens no chunk but is listed)."""
    markdown = fmt == "markdown"
    rst = fmt == "rst"
    rst_styles: dict[tuple[str, bool], int] = {}  # (character, overlined) -> level
    starts, ends = line_table(text, begin)
    n = len(starts)
    out: list[tuple[int, int, str]] = []
    stack: list[tuple[int, str]] = []
    path = ""
    section: list[Unit] = []
    para: list[int] = []
    literal_indent = -1  # reST: the paragraph just flushed ended with "::" (at this indent)

    def line_of(k: int) -> str:
        return text[starts[k] : ends[k]]

    # whether the paragraph holds a list item or a quote line (then no setext underline makes
    # it a title): each line is looked at once per paragraph, however many "===" lines follow
    scan_para, scanned, marked = -1, 0, False  # the paragraph's first line, lines looked at

    def para_has_item_or_quote() -> bool:
        nonlocal scan_para, scanned, marked
        if scan_para != para[0]:  # another paragraph (line numbers only grow)
            scan_para, scanned, marked = para[0], 0, False
        while not marked and scanned < len(para):
            k = para[scanned]
            scanned += 1
            marked = ITEM_RE.match(text, starts[k], ends[k]) is not None
            marked = marked or line_of(k).lstrip().startswith(">")
        return marked

    def fits(s: int, e: int) -> bool:
        """Whether ``text[s:e]`` is within the hard caps; the line breaks it touches are
        counted from the line table (breaks starting before ``e`` minus those ending by
        ``s``), so a check costs a logarithm, not the span's length."""
        if e - s > caps.max_chars:
            return False
        return bisect_left(ends, e) - bisect_right(starts, s) + 1 < caps.max_lines

    def flush_para() -> None:
        nonlocal literal_indent
        if not para:
            return
        last = line_of(para[-1]).rstrip()
        if rst and last.endswith("::"):
            literal_indent = indent_of(line_of(para[0]))
            if last == "::" and len(para) == 1:  # the expanded form introduces, says nothing
                para.clear()
                return
        spans: list[Span] = []
        paragraph_spans(text, para, starts, ends, spans)
        for s, e in spans:
            if fits(s, e):
                section.append((s, e, _SENTENCE))
            else:  # a run with no sentence end over the hard caps: cut to the target
                cut = _cut(text, s, e, caps.target, caps.max_lines)
                section.extend((a, b, _SENTENCE) for a, b in cut)
        para.clear()

    def add_code(units: list[Unit]) -> None:
        """Code units into the section; a sentence ending in ":" just before ("Output::",
        "For example:") is glued to the code it introduces."""
        if units and section and section[-1][2] == _SENTENCE and text[section[-1][1] - 1] == ":":
            lead_in = section[-1][0]
            a, b, _kind = units[0]
            if fits(lead_in, b):
                section.pop()
                kind = _CODE if b - lead_in <= caps.target else _CODE_PIECE
                units = [(lead_in, b, kind), *units[1:]]
        section.extend(units)

    def flush_section() -> None:
        if section:
            out.extend((s, e, path) for s, e in _pack(section, caps, fits))
            section.clear()

    def open_heading(level: int, title: str) -> None:
        nonlocal path
        flush_section()
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        path = HEADING_JOIN.join(t for _, t in stack if t)
        if headings is not None:
            headings.append(title)

    def block_end(k: int, indent: int) -> int:
        """The line after the block that starts at ``k``: its lines are blank or indented
        deeper than ``indent`` (trailing blank lines excluded)."""
        while k < n and (not line_of(k).strip() or indent_of(line_of(k)) > indent):
            k += 1
        while k > 0 and not line_of(k - 1).strip():
            k -= 1
        return k

    fm = front_matter(text) if markdown else None
    i = 0
    while i < n:
        s, e = starts[i], ends[i]
        line = text[s:e]
        lead = line.lstrip()
        if not lead:
            flush_para()
            i += 1
            continue
        first = lead[0]
        if rst and not para:
            indent = indent_of(line)
            if literal_indent >= 0:
                if indent > literal_indent:  # the literal block a "::" paragraph announced
                    j = max(block_end(i, literal_indent), i + 1)
                    add_code(_code_units(text, i, j - 1, starts, ends, caps))
                    literal_indent = -1
                    i = j
                    continue
                literal_indent = -1
            if not (stack or section or out) and rst_field(line):
                # Sphinx's file-wide metadata (":orphan:", ":tocdepth: 2"): a field list before
                # anything else of the document is markup, never a chunk of its own
                while i < n and line_of(i).strip():
                    i += 1
                continue
            markup = rst_markup(lead) if first == "." else None
            if markup is not None and markup != "footnote":
                j = i + 1
                while j < n and line_of(j).strip().startswith(":") and indent_of(line_of(j)) > indent:
                    j += 1  # directive options (":maxdepth: 1") are markup too
                if markup == "text":
                    i = j  # the content is read as text, at its own indentation
                    continue
                k = max(block_end(j, indent), j)
                if markup == "code" and k > j:
                    add_code(_code_units(text, j, k - 1, starts, ends, caps))
                i = max(k, j)
                continue
            if lead.startswith(">>>"):  # a doctest block: code up to the next blank line
                j = i
                while j < n and line_of(j).strip():
                    j += 1
                add_code(_code_units(text, i, j - 1, starts, ends, caps))
                i = j
                continue
        # before fences: a reST title may be underlined with "~~~~~" or "`````"
        if rst and first in _RST_PUNCTUATION:
            taken = _rst_title(text, i, para, starts, ends)
            if taken is not None:
                title, style, used = taken
                if style is None:  # a transition
                    flush_para()
                else:
                    para.clear()
                    level = rst_styles.setdefault(style, len(rst_styles) + 1)
                    open_heading(level, title)
                i += used
                continue
        if first in "`~":
            fence = fence_open(line)
            if fence is not None:
                flush_para()
                j = i + 1
                while j < n and not fence_closes(line_of(j), fence):
                    j += 1
                last = min(j, n - 1)
                add_code(_code_units(text, i, last, starts, ends, caps))
                i = last + 1
                continue
        if markdown:
            if i == 0 and fm is not None:  # YAML/TOML front matter: markup, in no chunk
                i = bisect_left(starts, fm.end)
                continue
            if first == "<":
                if lead.startswith("<!--"):  # an HTML comment: markup (Node's <!-- YAML -->)
                    flush_para()
                    j = i
                    while j < n and "-->" not in line_of(j):
                        j += 1
                    i = j + 1
                    continue
                if _TAGS_ONLY_RE.fullmatch(lead.rstrip()):  # <a id="x"></a>: no text
                    flush_para()
                    i += 1
                    continue
            if first == "[" and not para and _LINK_DEF_RE.match(line):
                i += 1  # a link reference definition: markup, like the ones around it
                continue
            if first == "#":
                heading = atx_heading(line)
                if heading is not None:
                    flush_para()
                    open_heading(*heading)
                    i += 1
                    continue
            if first in "=-" and para and _SETEXT_RE.match(line):
                if not para_has_item_or_quote():
                    title = " ".join(line_of(k).strip() for k in para)
                    para.clear()
                    open_heading(1 if first == "=" else 2, title)
                    i += 1
                    continue
            if first in "-*_" and _THEMATIC_RE.match(line):
                flush_para()
                i += 1
                continue
        para.append(i)
        i += 1
    flush_para()
    flush_section()
    return out


def _rst_title(
    text: str, i: int, para: list[int], starts: list[int], ends: list[int]
) -> tuple[str, tuple[str, bool] | None, int] | None:
    """At line ``i``, a reST section title (title, style, lines used), a transition
    ``("", None, 1)``, or ``None`` when the line is ordinary text."""
    line = text[starts[i] : ends[i]]
    char = rst_adornment(line)
    if char is None:
        return None
    width = len(line.rstrip())
    if len(para) == 1 and para[0] == i - 1:  # underline of the one line above
        title = text[starts[i - 1] : ends[i - 1]].strip()
        if title and width >= len(title) and not text[starts[i - 1]].isspace():
            return title, (char, False), 1
        return None
    if para:
        return None
    n = len(starts)
    if i + 2 < n:  # overline, title, underline of the same character
        title = text[starts[i + 1] : ends[i + 1]].strip()
        under = text[starts[i + 2] : ends[i + 2]]
        if title and rst_adornment(under) == char and len(under.rstrip()) == width:
            if width >= len(title):
                return title, (char, True), 3
    if width >= 4 and (i + 1 >= n or not text[starts[i + 1] : ends[i + 1]].strip()):
        return "", None, 1
    return None


def rst_title(text: str) -> str | None:
    """The first reStructuredText section title of ``text`` (as :func:`chunk_text` reads it),
    or ``None``. Labels, directives and comments are markup, never a title."""
    headings: list[str] = []
    begin = 1 if text.startswith("\ufeff") else 0
    _markdown_spans(text, begin, "rst", _caps(512, 0, None, DEFAULT_MAX_LINES, 0), headings)
    return next((h for h in headings if h), None)


# --------------------------------------------------------------------------- public entry point


def _byte_offsets(text: str, positions: list[int]) -> dict[int, int]:
    """UTF-8 byte offset of each character position, in one linear pass."""
    if text.isascii():
        return {p: p for p in positions}
    result: dict[int, int] = {}
    prev_char = 0
    prev_byte = 0
    for p in sorted(set(positions)):
        prev_byte += len(text[prev_char:p].encode("utf-8"))
        prev_char = p
        result[p] = prev_byte
    return result


def _caps(
    target: int, overlap: int, max_chars: int | None, max_lines: int, min_chars: int
) -> _Caps:
    return _Caps(
        target=target,
        overlap=overlap,
        max_chars=MAX_CHARS_FACTOR * target if max_chars is None else max_chars,
        max_lines=max_lines,
        min_chars=min(min_chars, target // 10),
    )


def chunk_text(
    text: str,
    *,
    fmt: Format = "markdown",
    mode: Literal["sag", "passage"] = "sag",
    target_chars: int = 512,
    overlap_chars: int = 80,
    max_chars: int | None = None,
    max_lines: int = DEFAULT_MAX_LINES,
    min_chars: int = DEFAULT_MIN_CHARS,
) -> list[Chunk]:
    """Cut ``text`` into SAG-Wiki chunks (rules in the module docstring).

    Args:
        text: the whole resource, decoded from UTF-8.
        fmt: ``"markdown"`` recognises ATX and setext headings, thematic breaks, YAML and TOML
            front matter and HTML comments; ``"rst"`` reStructuredText section titles, transitions,
            explicit markup and literal blocks; ``"text"`` has no headings. All recognise blank
            lines and code fences.
        mode: ``"sag"`` packs sentences; ``"passage"`` returns the whole trimmed text as one
            chunk (cut at the hard caps).
        target_chars: most characters a chunk of prose spans, unless one sentence is longer
            (``Settings`` keeps it in 400..12,000; SAG-Wiki's default is 512).
        overlap_chars: most characters of whole trailing sentences repeated from the previous
            chunk of the same section.
        max_chars: the hard cap on a chunk's characters (None: ``4 * target_chars``); a code
            block stays whole up to it.
        max_lines: the hard cap on the lines a chunk spans.
        min_chars: a chunk shorter than this (at most a tenth of ``target_chars``) joins a
            neighbour of its section.

    Returns:
        Chunks in source order, ``ordinal`` 0, 1, ...; ``[]`` for whitespace-only text.

    Raises:
        ValueError: ``target_chars < 1``, ``overlap_chars < 0``, ``overlap_chars >=
            target_chars``, ``max_chars < target_chars``, ``max_lines < 1``, ``min_chars < 0``,
            or an unknown ``fmt``/``mode``.
        UnicodeEncodeError: ``text`` holds lone surrogates (it cannot be UTF-8 source).

    Example: ``chunk_text("# A\\n\\nOne. Two.")[0].heading_path == "A"``
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be 'markdown', 'rst' or 'text', got {fmt!r}")
    if mode not in ("sag", "passage"):
        raise ValueError(f"mode must be 'sag' or 'passage', got {mode!r}")
    if target_chars < 1:
        raise ValueError(f"target_chars must be >= 1, got {target_chars}")
    if overlap_chars < 0:
        raise ValueError(f"overlap_chars must be >= 0, got {overlap_chars}")
    if overlap_chars >= target_chars:
        raise ValueError(
            f"overlap_chars ({overlap_chars}) must be smaller than target_chars ({target_chars})"
        )
    if max_chars is not None and max_chars < target_chars:
        raise ValueError(f"max_chars ({max_chars}) must be at least target_chars ({target_chars})")
    if max_lines < 1:
        raise ValueError(f"max_lines must be >= 1, got {max_lines}")
    if min_chars < 0:
        raise ValueError(f"min_chars must be >= 0, got {min_chars}")
    caps = _caps(target_chars, overlap_chars, max_chars, max_lines, min_chars)
    begin = 1 if text.startswith("\ufeff") else 0
    if mode == "passage":
        spans = [(s, e, "") for s, e in _cut(text, begin, len(text), caps.max_chars, max_lines)]
    else:
        spans = _markdown_spans(text, begin, fmt, caps)
    if not spans:
        return []
    line_starts = [0]
    line_starts.extend(m.end() for m in NEWLINE_RE.finditer(text))
    offsets = _byte_offsets(text, [p for s, e, _ in spans for p in (s, e)])
    return [
        Chunk(
            ordinal=n,
            text=text[s:e],
            heading_path=path,
            start_line=bisect_right(line_starts, s),
            end_line=bisect_right(line_starts, e - 1),
            byte_start=offsets[s],
            byte_end=offsets[e],
        )
        for n, (s, e, path) in enumerate(spans)
    ]
