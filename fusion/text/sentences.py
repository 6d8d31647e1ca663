"""Sentence splitting, English and Chinese: one owner for the write side (the chunker packs
sentences into chunks) and the read side (SAG2's term expansion and the evidence set read
sentences of stored chunks), so that a search never loads the chunker.

Pure Python, standard library only, linear in the input: the regex engine skips terminator runs
that can end nothing, so text full of ``3.14`` or ``e.g. the`` costs no Python call per run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = [
    "ITEM_RE",
    "NEWLINE_RE",
    "Span",
    "has_name",
    "line_table",
    "name_spans",
    "paragraph_spans",
    "split_sentences",
    "trim_span",
]

_CLOSERS = "\"'”’»)]}）】」』》〉〕"
_OPENERS = "\"'“‘«([{（【「『《〈〔"
#: kana, CJK ideographs (extension A, unified, compatibility, extension B and on), hangul
_CJK_CLASS = (
    "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\U00020000-\U0002fa1f"
)
_CJK_RE = re.compile(f"[{_CJK_CLASS}]")
# A terminator run: terminators then closing quotes or brackets ("[.!?。！？；…]+[closers]*"),
# matched whole (possessive) and only where one starts. Only the runs that may end a sentence
# are found: two kinds _is_boundary always refuses are skipped by the regex engine, so that text
# full of them ("3.14", "e.g. the", a period before a lowercase word a million times) costs no
# Python call per run: a run without a Chinese terminator followed by a character that is
# neither whitespace nor CJK, and a run of only "." and "…" followed by whitespace and an ASCII
# lowercase letter.
_CANDIDATE_RE = re.compile(
    "[.!?。！？；…](?<![.!?。！？；…].)(?:"  # the first character of a run (never one inside it)
    "(?:(?<=[。！？；])|[.!?…]*+[。！？；])[.!?。！？；…]*+[{c}]*+"
    "|(?:(?<=[!?])|[.…]*+[!?])[.!?…]*+[{c}]*+(?![^\\s{k}])"
    "|(?<=[.…])[.…]*+[{c}]*+(?![^\\s{k}])(?!\\s++[a-z])"
    ")".format(c=re.escape(_CLOSERS), k=_CJK_CLASS)
)
_STRONG_TERMS = frozenset("。！？；")  # Chinese terminators end a sentence whatever follows
_NO_SPLIT_BEFORE = frozenset(",，、:：;；")
# Abbreviations that are followed by a capitalised name ("Dr. Smith"), and ones followed by a
# number ("Fig. 3", "No. 5"). Dotted initialisms (e.g., i.e., U.S., Ph.D.) are matched by
# _INITIALISM_RE; a lowercase next word ("etc. and") never starts a sentence anyway.
_ABBREV = frozenset(
    "mr mrs ms dr prof sr jr st mt vs cf al approx gen gov sen rep capt lt col sgt rev hon".split()
)
_NUM_ABBREV = frozenset("no nos fig figs eq eqs p pp vol ch sec art ref".split())
_INITIALISM_RE = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]|Ph\.D")
# A line that starts a new sentence group inside a paragraph: list item, table row.
ITEM_RE = re.compile(r"[ \t]*(?:[-*+][ \t]|\d{1,9}[.)](?:[ \t]|$)|\|)")
NEWLINE_RE = re.compile(r"\r\n|\r|\n")

Span = tuple[int, int]


def _is_cjk(ch: str) -> bool:
    return _CJK_RE.match(ch) is not None


def trim_span(text: str, start: int, end: int) -> Span:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _word_before(text: str, pos: int, lo: int) -> str:
    k = pos
    limit = max(lo, pos - 40)
    while k > limit:
        ch = text[k - 1]
        if ch.isspace() or ch in _OPENERS:
            break
        k -= 1
    return text[k:pos]


def _is_boundary(text: str, a: int, b: int, hi: int, lo: int) -> bool:
    """Whether the terminator run ``text[a:b]`` ends a sentence."""
    run = text[a:b]
    if not _STRONG_TERMS.isdisjoint(run):
        return True
    if b >= hi:
        return True
    follow = text[b]
    if not follow.isspace():
        if not _is_cjk(follow):
            return False  # 3.14, v2.3.1, e.g.x, file.py, "?)" mid-token
    else:
        k = b + 1
        while k < hi and text[k].isspace():
            k += 1
        if k >= hi:
            return True
        follow = text[k]
    if follow in _NO_SPLIT_BEFORE:
        return False
    core = run.rstrip(_CLOSERS)
    if core.strip(".…"):
        return True  # contains ! or ?
    if follow.islower():
        return False  # "e.g. the", "etc. and", "wait... what"
    if core == ".":
        word = _word_before(text, a, lo)
        low = word.lower()
        if low in _ABBREV:
            return False
        if follow.isdigit() and low in _NUM_ABBREV:
            return False
        if _INITIALISM_RE.fullmatch(word):
            return False
        if len(word) == 1 and "A" <= word <= "Z" and word != "I":
            return False  # an initial: "John F. Kennedy"
    return True


def _sentence_spans(text: str, lo: int, hi: int, out: list[Span]) -> None:
    """Append the trimmed sentence spans of the prose run ``text[lo:hi]`` to ``out``; ``lo``
    starts a line (the run pattern looks one character back, to find where a run starts)."""
    start = lo
    for m in _CANDIDATE_RE.finditer(text, lo, hi):
        a, b = m.span()
        if _is_boundary(text, a, b, hi, lo):
            s, e = trim_span(text, start, b)
            if s < e:
                out.append((s, e))
            start = b
    s, e = trim_span(text, start, hi)
    if s < e:
        out.append((s, e))


def paragraph_spans(
    text: str, lines: list[int], starts: list[int], ends: list[int], out: list[Span]
) -> None:
    """Sentence spans of a paragraph (consecutive non-blank lines, by index).

    A list item or table row starts a new group, and so does the first line of a block quote;
    sentences never run across groups.
    """
    group_start = -1
    group_end = -1
    prev_quote = False
    for i in lines:
        s, e = starts[i], ends[i]
        line_lead = text[s:e].lstrip()
        quote = line_lead.startswith(">")
        new_group = (quote and not prev_quote) or ITEM_RE.match(text, s, e) is not None
        prev_quote = quote
        if new_group and group_start >= 0:
            _sentence_spans(text, group_start, group_end, out)
            group_start = -1
        if group_start < 0:
            group_start = s
        group_end = e
    if group_start >= 0:
        _sentence_spans(text, group_start, group_end, out)


def line_table(text: str, begin: int) -> tuple[list[int], list[int]]:
    """Start offsets and content ends (before the line break) of the lines from ``begin``."""
    starts: list[int] = []
    ends: list[int] = []
    pos = begin
    for m in NEWLINE_RE.finditer(text, begin):
        starts.append(pos)
        ends.append(m.start())
        pos = m.end()
    if pos < len(text):
        starts.append(pos)
        ends.append(len(text))
    return starts, ends


def split_sentences(text: str) -> list[str]:
    """Split prose into trimmed sentences, English and Chinese.

    A sentence ends after ``.`` ``!`` ``?`` ``。`` ``！`` ``？`` ``；`` or ``…`` (and any closing
    quotes or brackets right after them). ASCII terminators need whitespace, the end, or a CJK
    character after them, so ``3.14``, ``v2.3.1`` and ``hybridsag.ingest.chunker`` stay whole; a period
    does not end a sentence before a lowercase word (``e.g. the``), after a dotted initialism
    (``U.S.``, ``e.g.``), a title (``Dr.``, ``Mr.``), an initial (``John F. Kennedy``) or before
    a number after ``No.``/``Fig.``. Blank lines, list items and table rows always start a new
    sentence. Headings and code fences are not recognised here (the chunker handles them).

    Returns the sentences in order; whitespace-only input gives ``[]``.

    Example: ``split_sentences("Use v2.3.1. 安装完成。然后重启！")``
    -> ``["Use v2.3.1.", "安装完成。", "然后重启！"]``
    """
    starts, ends = line_table(text, 0)
    spans: list[Span] = []
    para: list[int] = []
    for i in range(len(starts)):
        if text[starts[i] : ends[i]].strip():
            para.append(i)
        elif para:
            paragraph_spans(text, para, starts, ends, spans)
            para = []
    if para:
        paragraph_spans(text, para, starts, ends, spans)
    return [text[s:e] for s, e in spans]


def name_spans(name: str, text: str) -> Iterator[tuple[int, int]]:
    r"""The spans where ``name`` stands in ``text`` as a whole name (no word character, ``\w``,
    right before or after it; case as given), left to right and not overlapping: what
    ``re.finditer(r"(?<!\w)" + re.escape(name) + r"(?!\w)", text)`` finds, by ``str.find``,
    with no pattern compiled per name (SAG2's judge and evidence set ask it for thousands of
    titles a search; compiling each costs milliseconds, and searching a compiled one that starts
    with a look-behind tries a match at every position). An empty ``name`` has no span."""
    n = len(name)
    if not n:
        return
    size = len(text)
    start = text.find(name)
    while start >= 0:
        end = start + n
        if (start == 0 or not _word_char(text[start - 1])) and (
            end == size or not _word_char(text[end])
        ):
            yield start, end
            start = text.find(name, end)
        else:
            start = text.find(name, start + 1)


def has_name(name: str, text: str) -> bool:
    """Whether ``name`` stands in ``text`` as a whole name (:func:`name_spans`)."""
    return next(name_spans(name, text), None) is not None


def _word_char(ch: str) -> bool:
    r"""``\w`` of Python's ``re`` on str: alphanumeric (``str.isalnum``) or ``_``."""
    return ch.isalnum() or ch == "_"
