"""Search results as a person reads them at a terminal (``hybridsag search`` without ``--json``).

Each result shows its position, where it is (title, heading path, resource and lines), why it
is there in words, and a snippet:

- **Position and score apart.** Results are listed by their final position; the fused score
  (convex or RRF) is shown beside its own position ("fused 0.0845, #3 before the rules"),
  because the bounded rules reorder after fusion and a score column would go up and down.
- **Why, in words.** Each path's rank with what it means (``sag2 #1, judge 0.93, BM25 #4``;
  ``title #1, exact title``); the rules that fired with their reason. Path internals such as
  ``bm25_rank=0`` are said in words ("found by the dense path") or left to ``--json``.
- **Snippets that start at the matching text.** The window starts a few lines above the line
  (code) where the most distinct query terms occur, or (prose) at the start of the sentence
  that holds them (the first such place: :mod:`hybridsag.output.focus`), so an error line typed
  as the query is shown, not the first line that names one of its words, and the sentence that
  matched is shown from its start; code keeps its lines and indentation, prose is re-wrapped,
  but a Markdown list item keeps its own line (``* Default: false`` and
  ``* Type: Boolean`` are two lines, and the paragraph after them a third), and so do reST
  directives, code fences and literal blocks, as
  :func:`hybridsag.fusion.text.markdown.prose_blocks` splits them; ``…`` marks text left out.
  Terms are highlighted (bold) only when ``color`` is on (the CLI turns it on when stdout is
  a terminal).
- **Copies, said once.** A result whose text fusion found elsewhere too lists those places under
  its own ("also in: npm-ci.md:150-167, npm-install.md:301-318") instead of showing each copy.
- ``brief``: one line per result, no snippet and no why; where else its text is, how many more
  results of its file wait further down, and a stale mark are said on that line.
- **A few results per file, said.** A result whose file has more results that the per-resource
  cap moved below the other files' says so under it ("more in this file: 3 more results further
  down (lines 51-63, ...)").
- **No good match, said.** The header gives the response's confidence (the calibrated
  probability that the top result answers the query); when the index seems to hold no answer
  (``no_good_match``: the match below ``search.no_match_below``) a "no good match" line follows it and each result is marked weak; results
  withheld by ``--min-confidence`` are said in that line instead.
- **Stale, said.** A result whose source file changed on disk says so under it ("stale: the
  source file was deleted on disk since it was indexed"); results held back as stale
  (``include_stale`` off) are counted under the header: "N results hidden: sources changed since
  indexing (re-index, or --include-stale)".
"""

from __future__ import annotations

import re
import textwrap
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from hybridsag.fusion.text.markdown import HEADING_JOIN, fence_open, list_item, prose_blocks
from hybridsag.output.agent import copy_place, more_words
from hybridsag.output.focus import distinct, focus_start, terms_pattern
from hybridsag.fusion.rules import RULE_REASONS
from hybridsag.results import SearchResponse, SearchResult

__all__ = [
    "SNIPPET_CHARS",
    "SNIPPET_LINES",
    "counted",
    "describe_paths",
    "display_width",
    "explain_lines",
    "headings_below",
    "no_match_line",
    "pad",
    "render_response",
    "render_search",
    "snippet",
    "stale_hidden_line",
    "stale_words",
]

def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: ``counted(1, "result")`` is ``1 result``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def headings_below(title: str, heading_path: str) -> list[str]:
    """The headings of a chunk under its resource's title: the path split where the chunker
    joined it, without a leading heading that only repeats the title (a page's H1 is usually
    its title), so the line reads ``Agents › The loop``, not ``Agents › Agents > The loop``."""
    parts = [p for p in heading_path.split(HEADING_JOIN) if p] if heading_path else []
    if parts and parts[0].strip().casefold() == title.strip().casefold():
        parts = parts[1:]
    return parts


def display_width(text: str) -> int:
    """Columns ``text`` takes in a terminal: wide and full-width characters (CJK) take two,
    combining marks none (Unicode's East Asian Width property, as terminals apply it)."""
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
        for c in text
    )


def pad(text: str, width: int) -> str:
    """``text`` left-aligned in ``width`` terminal columns (see :func:`display_width`)."""
    return text + " " * max(0, width - display_width(text))


#: Most characters of a prose snippet.
SNIPPET_CHARS = 320
#: Most lines of a code snippet.
SNIPPET_LINES = 8

_BOLD, _RESET = "\x1b[1m", "\x1b[0m"
_INDENT = "    "


def render_search(data: Mapping[str, Any], **options: Any) -> str:
    """:func:`render_response` of a response as ``SearchResponse.as_dict()`` (or the service)
    gives it; ``options`` are :func:`render_response`'s."""
    return render_response(SearchResponse.from_dict(data), **options)


def render_response(
    resp: SearchResponse,
    *,
    terms: Sequence[str] = (),
    color: bool = False,
    brief: bool = False,
    width: int = 100,
    startup_ms: float | None = None,
) -> str:
    """The whole human output of one search (see the module docstring)."""
    took = f"in {resp.timings.get('total_ms', 0.0):.0f} ms"
    if startup_ms is not None:
        took += f" (+ {startup_ms / 1000:.1f} s start-up)"
    n = len(resp.results)
    sure = "" if resp.confidence is None else f", confidence {resp.confidence:.2f}"
    lines = [
        f"{counted(n, 'result')} for {resp.query!r} via {', '.join(resp.paths)} {took}{sure}"
    ]
    if line := no_match_line(resp):
        lines.append(f"  {line}")
    weak = "  (weak)" if resp.no_good_match else ""
    lines.extend(f"  degraded: {name}: {why}" for name, why in _reasons(resp.reasons))
    if resp.stale_hidden:
        lines.append(f"  {stale_hidden_line(resp.stale_hidden)}")
    pattern = terms_pattern(terms)
    for r in resp.results:
        name = r.title or r.resource_id
        head = f"{r.rank:>2}. {_bold(name, color)}"
        within = headings_below(name, r.heading_path)
        if within:
            head += " › " + " › ".join(within)
        head += weak
        where = f"{r.resource_id}:{r.start_line}-{r.end_line}"
        if brief:
            copies = f"; also in {counted(len(r.also_in), 'place')}" if r.also_in else ""
            more = (
                f"; {counted(len(r.more_in_resource), 'more result')} in this file"
                if r.more_in_resource
                else ""
            )
            stale = f"; stale: {stale_words(r.stale_reason)}" if r.stale else ""
            lines.append(f"{head}  ({where}{copies}{more}{stale})")
            continue
        lines.append("")
        lines.append(head)
        first, *more = explain_lines(r)
        lines.append(f"{_INDENT}{where} · {first}")
        lines.extend(_INDENT + line for line in more)
        for line in snippet(r.text, pattern, width=width - len(_INDENT)):
            lines.append(_INDENT + _highlight(line, pattern, color))
        if r.text_truncated:
            lines.append(f"{_INDENT}(text cut to search.max_text_chars)")
    return "\n".join(lines) + "\n"


def no_match_line(resp: SearchResponse) -> str | None:
    """What the CLI says of a response whose top result probably does not answer the query:
    the results ``min_confidence`` withheld, or ``no_good_match`` (the match below
    ``search.no_match_below``); None for a response with a good match."""
    if resp.withheld:
        return f"no good match: {resp.withheld}"
    if resp.no_good_match and resp.confidence is not None and resp.results:
        return (
            f"no good match: confidence {resp.confidence:.2f} that the top result answers the "
            "query; the results below are weak"
        )
    return None


def stale_hidden_line(n: int) -> str:
    """What the CLI says of ``n`` results held back as stale (``SearchResponse.stale_hidden``)."""
    return (
        f"{counted(n, 'result')} hidden: sources changed since indexing "
        "(re-index, or --include-stale)"
    )


def stale_words(reason: str | None) -> str:
    """A stale result's or resource's state in words, from its ``stale_reason``."""
    if reason is None:
        return "the source file changed since it was indexed"
    if reason.endswith(" on disk") and not reason.startswith(("no longer", "unreadable")):
        return f"the source file was {reason} since it was indexed"
    return f"the source file is {reason}"


def _reasons(reasons: Mapping[str, str]) -> list[tuple[str, str]]:
    """Each path's degraded reason once: a reason that repeats another path's (SAG2 saying the
    dense hits it joins are unavailable, with the dense path's own error) points to it instead,
    after it."""
    own: list[tuple[str, str]] = []
    echoes: list[tuple[str, str]] = []
    for name, why in reasons.items():
        other = next(
            (o for o, r in reasons.items() if o != name and r and r != why and r in why), None
        )
        if other is None:
            own.append((name, why))
        else:
            echoes.append((name, why.replace(reasons[other], f"see {other} above")))
    return own + echoes


def explain_lines(r: SearchResult) -> list[str]:
    """A result's own explanation as the CLI words it, one line each: its paths in words and
    its fused score (:func:`describe_paths`), where else its text is (``also_in``), every rule
    that fired with its reason, and, for a
    stale result, what changed. The query-level facts (the trust step's weights) are the
    response's, not a result's."""
    lines = [describe_paths(r)]
    if r.also_in:
        lines.append(f"also in: {', '.join(copy_place(a) for a in r.also_in)}")
    if r.more_in_resource:
        lines.append(f"more in this file: {more_words(r.more_in_resource)}")
    lines.extend(f"rule {rule}: {RULE_REASONS.get(rule, rule)}" for rule in r.rules)
    if r.stale:
        lines.append(f"stale: {stale_words(r.stale_reason)}")
    return lines


def describe_paths(r: SearchResult) -> str:
    """Each path's contribution in words, then the score, the fused score and its position
    before the rules ("fused 0.0845, #3 before the rules"; "score 1.3915 (fused 0.8743, #18
    before the rules)" where the result's score, which never rises down the list, differs)."""
    parts = [_describe_path(name, facts) for name, facts in r.paths.items()]
    fused = r.score if r.fused_score is None else r.fused_score
    rrf = f"fused {fused:.4f}"
    if r.rrf_rank:
        rrf += f", #{r.rrf_rank} before the rules"
    if f"{fused:.4f}" != f"{r.score:.4f}":
        rrf = f"score {r.score:.4f} ({rrf})"
    return " · ".join([*parts, rrf])


def _describe_path(name: str, facts: Mapping[str, Any]) -> str:
    text = f"{name} #{facts.get('rank', '?')}"
    extra: list[str] = []
    judge_p = facts.get("judge_p")
    if judge_p is not None:
        extra.append(f"judge {float(judge_p):.2f}")
    if "bm25_rank" in facts:
        bm25_rank = int(facts.get("bm25_rank") or 0)
        if int(facts.get("round") or 0) >= 1:
            extra.append(f"found by expansion round {int(facts['round'])}")
        elif bm25_rank:
            extra.append(f"BM25 #{bm25_rank}")
        else:
            extra.append("found by the dense path")
    rule = facts.get("rule")
    if rule == "exact_title":
        extra.append("exact title")
    elif rule == "title_fts":
        extra.append("title words")
    if facts.get("degraded"):
        extra.append("judge unavailable: BM25 order")
    return f"{text} ({', '.join(extra)})" if extra else text


def _is_code(lines: Sequence[str]) -> bool:
    body = [line for line in lines if line.strip()]
    if any(fence_open(line) for line in body):
        return True
    indented = sum(1 for line in body if line.startswith(("    ", "\t")))
    return len(body) > 1 and indented * 2 >= len(body)


def snippet(
    text: str,
    pattern: re.Pattern[str] | None,
    *,
    width: int = 96,
    max_chars: int = SNIPPET_CHARS,
    max_lines: int = SNIPPET_LINES,
) -> list[str]:
    """The lines to show of ``text``: from the sentence holding the densest run of
    ``pattern``'s terms (prose; :func:`~hybridsag.output.focus.focus_start`) or a few lines above
    the line holding the most of them (code), the start when nothing matches; code keeps its
    lines (each cut to ``width``), prose is re-wrapped to ``width`` (the lines
    :func:`~hybridsag.fusion.text.markdown.prose_blocks` keeps stay lines). ``…`` marks what is
    left out."""
    lines = text.splitlines()
    if _is_code(lines):
        return _code_snippet(lines, pattern, width, max_lines)
    flat = "\n".join(prose_blocks(text))
    start = focus_start(flat, pattern, max_chars * 2 // 3, max_chars // 3, max_chars)
    end = min(len(flat), start + max_chars)
    if end < len(flat):
        space = max(flat.rfind(" ", start, end), flat.rfind("\n", start, end))
        end = space if space > start else end
    # "…" before a cut: on a line of its own when the window starts at a line (a block)
    lead = "" if not start else "…\n" if flat[start - 1] == "\n" else "… "
    shown = lead + flat[start:end] + (" …" if end < len(flat) else "")
    out: list[str] = []
    for block in shown.split("\n"):
        indent = "  " if list_item(block) else ""
        out.extend(
            textwrap.wrap(
                block, width=max(width, 20), subsequent_indent=indent, break_long_words=True
            )
        )
    return out or [""]


def _code_snippet(
    lines: list[str], pattern: re.Pattern[str] | None, width: int, max_lines: int
) -> list[str]:
    best = 0
    if pattern is not None:
        # the line holding the most distinct terms (the first such): an error line pasted as
        # the query, not the first line that names one of its words
        scores = [distinct(pattern, line) for line in lines]
        best = scores.index(max(scores)) if scores else 0
    start = max(0, min(best - max_lines // 3, len(lines) - max_lines))
    shown = lines[start : start + max_lines]
    out = ["…"] if start else []
    for line in shown:
        line = line.rstrip().expandtabs(4)
        out.append(line if len(line) <= width else line[: width - 1] + "…")
    if start + max_lines < len(lines):
        out.append("…")
    return out


def _highlight(line: str, pattern: re.Pattern[str] | None, color: bool) -> str:
    if not color or pattern is None:
        return line
    return pattern.sub(lambda m: _BOLD + m.group(0) + _RESET, line)


def _bold(text: str, color: bool) -> str:
    return _BOLD + text + _RESET if color else text
