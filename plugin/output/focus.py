"""Where a snippet or a quote of a result starts: at the matching text.

A terminal snippet (:mod:`hybridsag.output.render`) and an agent's quote
(:mod:`hybridsag.output.agent`) show a window of a result's text. Both start it at the sentence
that holds the most distinct query terms (the first such), never a fixed number of characters
before it: a window that starts early cuts off the one sentence that matched (issue 38). The
lines just above that sentence (a heading, a list item: the blocks of
:func:`hybridsag.fusion.text.markdown.prose_blocks`, one a line) are shown too when the whole
sentence still fits after them; when the sentence began further back than the window can
afford, the window starts at the match itself.

A leaf: the standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = [
    "densest", "distinct", "focus_start", "sentence_end", "sentence_start", "terms_pattern",
]  # fmt: skip

#: A sentence ends at one of these followed by whitespace (or a CJK full stop on its own).
_SENTENCE_END = re.compile(r"[.!?][)\"'\]]*\s|[。！？]")


def terms_pattern(terms: Sequence[str]) -> re.Pattern[str] | None:
    """One case-insensitive pattern for the query terms, longest first; ASCII words match
    whole (``file`` not inside ``profile``); None for no term.

    >>> terms_pattern(["file"]).findall("profile file")
    ['file']
    """
    alternatives = []
    for term in sorted({t for t in terms if t.strip()}, key=len, reverse=True):
        escaped = re.escape(term)
        if term.isascii() and term[0].isalnum() and term[-1].isalnum():
            escaped = rf"(?<![A-Za-z0-9]){escaped}(?![A-Za-z0-9])"
        alternatives.append(escaped)
    if not alternatives:
        return None
    return re.compile("|".join(alternatives), re.IGNORECASE)


def distinct(pattern: re.Pattern[str], text: str) -> int:
    """How many distinct query terms ``text`` holds (case ignored)."""
    return len({m.group(0).casefold() for m in pattern.finditer(text)})


def densest(pattern: re.Pattern[str], text: str, span: int) -> re.Match[str] | None:
    """The match of ``pattern`` in ``text`` that starts the ``span`` characters holding the
    most distinct terms (the first such); ``None`` when nothing matches."""
    best: re.Match[str] | None = None
    most = 0
    for m in pattern.finditer(text):
        found = distinct(pattern, text[m.start() : m.start() + span])
        if found > most:
            best, most = m, found
    return best


def sentence_start(text: str, pos: int, reach: int) -> int:
    """Where the sentence holding ``text[pos]`` starts (after the previous sentence's end or a
    line break), when that is at most ``reach`` characters before ``pos``; else where the word
    at ``pos`` starts.

    >>> text = "Intro words here. The matching sentence is this one."
    >>> text[sentence_start(text, text.index("matching"), 40):]
    'The matching sentence is this one.'
    """
    low = max(0, pos - reach)
    start = low
    for m in _SENTENCE_END.finditer(text, low, pos):
        start = m.end()
    newline = text.rfind("\n", low, pos)
    if newline >= 0:
        start = max(start, newline + 1)
    if start == low and low > 0:  # no sentence boundary within reach: the match's own word
        start = pos
        while start > 0 and not text[start - 1].isspace():
            start -= 1
    while start < pos and text[start].isspace():
        start += 1
    return start


def sentence_end(text: str, pos: int) -> int:
    """Where the sentence holding ``text[pos]`` ends (after its full stop, or at the line break
    or the end of the text).

    >>> text = "The matching sentence. Another one."
    >>> text[: sentence_end(text, 4)]
    'The matching sentence.'
    """
    m = _SENTENCE_END.search(text, pos)
    stop = -1 if m is None else m.end() - (1 if text[m.end() - 1].isspace() else 0)
    newline = text.find("\n", pos)
    ends = [i for i in (stop, newline) if i >= 0]
    return min(ends) if ends else len(text)


def focus_start(
    text: str, pattern: re.Pattern[str] | None, span: int, reach: int, window: int
) -> int:
    r"""Where a window of ``window`` characters of ``text`` starts: at the sentence holding the
    densest run of query terms (:func:`densest` over ``span`` characters,
    :func:`sentence_start` within ``reach``), or at the first line that starts within
    ``reach`` above it when the whole sentence still fits in the window from there; 0 when
    nothing matches.

    >>> text = "# Options\nTo use one, pass --proxy with a proxy server."
    >>> text[focus_start(text, terms_pattern(["proxy", "server"]), 40, 20, 60):]
    '# Options\nTo use one, pass --proxy with a proxy server.'
    >>> text[focus_start(text, terms_pattern(["proxy", "server"]), 40, 20, 40):]
    'To use one, pass --proxy with a proxy server.'
    """
    if pattern is None:
        return 0
    m = densest(pattern, text, span)
    if m is None:
        return 0
    start = sentence_start(text, m.start(), reach)
    if start <= reach:
        above = 0
    else:
        newline = text.find("\n", start - reach, start)
        above = newline + 1 if newline >= 0 else start
    if above < start and sentence_end(text, m.end()) - above <= window:
        return above
    return start
