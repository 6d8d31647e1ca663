"""Pure text helpers shared by the fusion rules and the plugin.

Title normalisation (used for the exact-title rule and for the ``title_norm`` column) and the
identifier tests behind the identifier rules. Standard library only, no I/O, no state.

Identifier characters are ASCII ``[A-Za-z0-9_]``: an identifier is "whole" in a text when the
characters on either side of it are not identifier characters (a CJK character, a space, a
backtick or a bracket all count as a boundary).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from hybridsag.fusion.text.markdown import HEADING_JOIN, atx_heading, atx_headings, outside_fences

__all__ = [
    "contains_phrase",
    "contains_whole_identifier",
    "defines_identifier",
    "dominant_script",
    "heading_defines_identifier",
    "heading_names_version",
    "hyphenated_name",
    "is_heading_only",
    "literal_phrase",
    "looks_like_identifier",
    "normalize_title",
    "version_in",
]

# Unicode general categories removed by normalize_title: punctuation (P*), symbols (S*),
# separators (Z*), plus controls (Cc: tab, newline) and invisible format characters (Cf: soft
# hyphen, zero-width space) that would otherwise make equal-looking titles differ.
_DROPPED_MAJOR = frozenset("PSZ")
_DROPPED_MINOR = frozenset({"Cc", "Cf"})

_IDENT_CHAR = "A-Za-z0-9_"

_CAMEL = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_SNAKE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOTTED_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_CODE = re.compile(r"[A-Za-z0-9_]+(?:[-.][A-Za-z0-9_]+)+")

# Keywords that introduce a named definition in common languages, and the modifiers that may
# precede them on the same line (``export default class``, ``pub fn``, ``async def``).
_DEF_KEYWORDS = ("class", "def", "struct", "interface", "enum", "type", "fn", "func", "function")
_DEF_MODIFIERS = (
    "export",
    "default",
    "pub",
    "public",
    "private",
    "protected",
    "abstract",
    "static",
    "final",
    "async",
)



def normalize_title(s: str) -> str:
    """Normalise a title (or a query) for exact-title comparison.

    NFKC, then Unicode case folding, then NFKC again (case folding can leave text outside NFKC),
    then every whitespace, punctuation (``P*``), symbol (``S*``), separator (``Z*``), control
    (``Cc``) and format (``Cf``) character is removed. Letters, marks and digits of every script
    are kept, so Chinese titles survive unchanged.

    Args:
        s: any text.

    Returns:
        The normalised key; ``""`` when nothing but punctuation, symbols or spaces was given.

    Example:
        >>> normalize_title("ReAct Agent!")
        'reactagent'
    """
    if s.isascii():  # fast path: ASCII letters and digits are kept, everything else dropped
        return s.lower().translate(_ASCII_DROP)
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", s).casefold())
    return "".join(ch for ch in folded if not _is_dropped(ch))


_ASCII_DROP = {c: None for c in range(128) if not chr(c).isalnum()}


def _is_dropped(ch: str) -> bool:
    category = unicodedata.category(ch)
    return category[0] in _DROPPED_MAJOR or category in _DROPPED_MINOR or ch.isspace()


def looks_like_identifier(query: str) -> str | None:
    """Return the identifier when the whole query is one identifier-like token, else ``None``.

    The query is stripped of surrounding whitespace and of one pair of enclosing backticks
    (```ReActAgent``` is read as ``ReActAgent``); what remains must be a single ASCII token of
    one of these shapes:

    - CamelCase with an inner capital and at least one lower-case letter: ``ReActAgent``,
      ``getValue`` (not ``Python``, not ``NASA``);
    - snake case, i.e. containing ``_`` and a letter or digit: ``max_tokens``, ``MAX_SIZE``,
      ``__init__``;
    - a dotted name whose parts are identifiers and at least one part is two or more
      characters long: ``os.path.join`` (not ``i.e``);
    - dotted or hyphenated code with at least one letter and at least one digit: ``E-1234``,
      ``v2.3.1``, ``gpt-4o`` (not ``e-mail``, not ``2024-01-01``).

    Args:
        query: the user's query text.

    Returns:
        The identifier exactly as written (case kept), or ``None`` for anything else, including
        plain words such as ``agent`` or ``Python`` and any query with inner whitespace.

    Example:
        >>> looks_like_identifier("  ReActAgent ")
        'ReActAgent'
    """
    token = query.strip()
    if len(token) > 2 and token[0] == "`" and token[-1] == "`":
        token = token[1:-1]
    if not token.isascii():
        return None
    if (
        _CAMEL.fullmatch(token)
        and any(c.islower() for c in token)
        and any(c.isupper() for c in token[1:])
    ):
        return token
    if _SNAKE.fullmatch(token) and "_" in token and any(c.isalnum() for c in token):
        return token
    if _DOTTED_NAME.fullmatch(token) and any(len(part) > 1 for part in token.split(".")):
        return token
    if (
        _CODE.fullmatch(token)
        and any(c.isalpha() for c in token)
        and any(c.isdigit() for c in token)
    ):
        return token
    return None


_HYPHENATED = re.compile(r"-{0,2}([a-z][a-z0-9]*(?:-[a-z0-9]+)+)")


def hyphenated_name(query: str) -> str | None:
    """The name when the whole query is one lower-case hyphenated token, as command-line
    options and config keys are written (``legacy-peer-deps``, ``--save-exact``, in backticks or
    not), without its leading dashes; else ``None``.

    Unlike :func:`looks_like_identifier` such a token may be an English compound
    (``state-of-the-art``), so the identifier rules take it as an identifier only when a
    candidate's own section heading is that name (:func:`heading_defines_identifier`).

    >>> hyphenated_name("--legacy-peer-deps"), hyphenated_name("legacy peer deps")
    ('legacy-peer-deps', None)
    """
    token = query.strip()
    if len(token) > 2 and token[0] == "`" and token[-1] == "`":
        token = token[1:-1]
    m = _HYPHENATED.fullmatch(token)
    return m.group(1) if m else None


def _whole(ident: str) -> str:
    return rf"(?<![{_IDENT_CHAR}]){re.escape(ident)}(?![{_IDENT_CHAR}])"


def contains_whole_identifier(text: str, ident: str) -> bool:
    """Whether ``text`` contains ``ident`` as a whole token, case-sensitively.

    "Whole" means the characters just before and just after the match are not ASCII identifier
    characters ``[A-Za-z0-9_]`` (or are the start or end of the text).

    Args:
        text: the text to search.
        ident: the identifier; an empty identifier is never contained.

    Returns:
        ``True`` for ``"call ReActAgent("`` or ``"`ReActAgent`"``, ``False`` for
        ``"ReActAgentFactory"`` or ``"reactagent"``.

    Example:
        >>> contains_whole_identifier("use `ReActAgent` here", "ReActAgent")
        True
    """
    if not ident:
        return False
    return re.search(_whole(ident), text) is not None


def defines_identifier(text: str, ident: str) -> bool:
    """Whether ``text`` has a line that defines ``ident`` (a definition, not a mention).

    A definition is any of:

    - a line (indentation allowed) of the form ``[modifiers] KEYWORD ident`` where KEYWORD is one
      of ``class def struct interface enum type fn func function`` and the optional modifiers are
      ``export default pub public private protected abstract static final async``; e.g.
      ``class ReActAgent(Base):``, ``    async def run_agent(``, ``pub fn parse_e1234``;
    - an assignment at the very start of a line: ``ReActAgent = ...`` or
      ``MAX_SIZE: int = 3`` (``==`` is not an assignment);
    - a Markdown ATX heading line (outside fenced code) whose text contains ``ident`` whole.

    The heading check cannot tell a Markdown heading from a ``# comment`` in a source file that is
    not fenced; such a comment naming the identifier counts as a definition.

    Args:
        text: the chunk text.
        ident: the identifier; an empty identifier is never defined.

    Returns:
        ``True`` when one of the forms above is found.

    Example:
        >>> defines_identifier("class ReActAgent:\\n    pass", "ReActAgent")
        True
    """
    if not ident:
        return False
    name = re.escape(ident)
    keywords = "|".join(_DEF_KEYWORDS)
    modifiers = "|".join(_DEF_MODIFIERS)
    keyword_form = (
        rf"^[ \t]*(?:(?:{modifiers})[ \t]+)*(?:{keywords})[ \t]+{name}(?![{_IDENT_CHAR}])"
    )
    assignment_form = rf"^{name}[ \t]*(?::[^=\n]*)?=(?!=)"
    if re.search(keyword_form, text, re.MULTILINE) or re.search(
        assignment_form, text, re.MULTILINE
    ):
        return True
    return any(contains_whole_identifier(heading, ident) for _level, heading in atx_headings(text))


#: What may come before the name in a heading that defines it: markup, and a kind word
#: ("Class: `fs.Stats`", "function parse_e1234", "`ERR_X`").
_HEADING_LEAD = re.compile(
    r"[\s`'\"*_]*(?:(?:class|function|method|event|module|property|attribute|enum|interface|"
    r"type|struct|constant|error|def|fn|func)\b[:\s`'\"*]*)?",
    re.IGNORECASE,
)


def heading_defines_identifier(heading_path: str, ident: str) -> bool:
    """Whether the chunk's own section heading (the last heading of ``heading_path``, headings
    joined with ``" > "``) is the identifier: ``ident`` whole, after markup and an optional kind
    word, followed by nothing but markup or a signature (``(``, ``[``, ``<``, ``:``, ``=``).
    Such a section is the identifier's definition (``### `ERR_INVALID_ARG_TYPE```,
    ``## Class: `fs.Stats```, ``#### `fs.stat(path[, options], callback)```); a heading that
    goes on in words (``ReActAgent tips``) is about it, not its definition.

    >>> heading_defines_identifier("Errors > Node.js error codes > `ERR_INVALID_ARG_TYPE`",
    ...                            "ERR_INVALID_ARG_TYPE")
    True
    >>> heading_defines_identifier("ReActAgent tips", "ReActAgent")
    False
    """
    if not ident or not heading_path:
        return False
    heading = heading_path.rsplit(HEADING_JOIN, 1)[-1]
    return _heading_is(heading, _HEADING_LEAD, ident, markup=" \t`'\"*_", follow="([<:=")


def _heading_is(
    heading: str, lead: re.Pattern[str], name: str, *, markup: str, follow: str
) -> bool:
    """Whether ``heading`` is ``name`` after what ``lead`` matches at its start, followed by
    nothing but ``markup`` characters, or by them and then a character of ``follow``."""
    m = lead.match(heading)
    start = m.end() if m else 0
    if not heading.startswith(name, start):
        return False
    rest = heading[start + len(name) :].strip(markup)
    return not rest or rest[0] in follow


def is_heading_only(text: str) -> bool:
    """Whether ``text`` is empty or made only of Markdown ATX heading lines and blank lines.

    Such a chunk carries no body to answer from, so the rules drop it. Setext headings
    (a line underlined with ``===``) are not recognised and count as body text.

    Args:
        text: the chunk text.

    Returns:
        ``True`` for ``""``, ``"  \\n"`` or ``"# Title\\n\\n## Part"``; ``False`` as soon as one
        line is neither blank nor a heading (``"#hashtag"`` is not a heading).

    Example:
        >>> is_heading_only("# Setup\\n\\n## Install\\n")
        True
    """
    return all(not line.strip() or atx_heading(line) is not None for line in text.splitlines())


# -- a literal string the query asks for (an error line, a quoted phrase) ----------------------

#: A word of a phrase: a run of ASCII identifier characters, or of other letters and digits.
_PHRASE_WORD = re.compile(rf"[{_IDENT_CHAR}]+|[^\W{_IDENT_CHAR}]+")
#: A quoted span: straight or typographic double quotes, or backticks.
_QUOTED = re.compile(r'"([^"]+)"|\u201c([^\u201d]+)\u201d|`([^`]+)`')
#: A word as programs print it and people rarely write it: upper-case letters (``ERR``,
#: ``ENOENT``, ``HTTP``), or letters and digits mixed (``E404``, ``v2``, ``utf8``).
_CODE_WORD = re.compile(r"[A-Z][A-Z0-9]+|[A-Za-z]+[0-9][A-Za-z0-9]*")


def literal_phrase(query: str) -> tuple[str, ...] | None:
    """The words of the literal string ``query`` asks for, when it asks for one: the first
    quoted span (``"..."``, typographic quotes, backticks) of two or more words, else the whole
    query when it has two or more words and one is written as programs print words (upper
    case, ``ERR``; letters and digits mixed, ``E404``; a version such as ``v2.3.1`` does not
    count): an error or log line pasted whole (``npm ERR! code E404``). Words are lower-cased;
    ``None`` otherwise.

    >>> literal_phrase("npm ERR! code E404")
    ('npm', 'err', 'code', 'e404')
    >>> literal_phrase("how do I install it on Linux") is None
    True
    """
    for m in _QUOTED.finditer(query):
        words = _PHRASE_WORD.findall(next(g for g in m.groups() if g is not None))
        if len(words) >= 2:
            return tuple(w.lower() for w in words)
    words = _PHRASE_WORD.findall(query)
    # a version is a name, not output (``v2.3.1 release notes``: version_in's rule reads it)
    printed = _PHRASE_WORD.findall(_VERSION.sub(" ", query))
    if len(words) >= 2 and any(_CODE_WORD.fullmatch(w) for w in printed):
        return tuple(w.lower() for w in words)
    return None


def contains_phrase(text: str, words: tuple[str, ...]) -> bool:
    """Whether ``text`` holds ``words`` (:func:`literal_phrase`) contiguously, in order, case
    ignored, with only punctuation, spaces or line breaks between them (what an FTS5 phrase
    query matches); an ASCII word matches whole (``E404`` not inside ``E4040``).

    >>> contains_phrase("npm notice PING\\nnpm ERR! code E404", ("npm", "err", "code", "e404"))
    True
    """
    if not words:
        return False
    return _phrase_pattern(words).search(text) is not None


@lru_cache(maxsize=64)
def _phrase_pattern(words: tuple[str, ...]) -> re.Pattern[str]:
    parts = []
    for i, word in enumerate(words):
        ascii_word = word.isascii()
        if i:
            # CJK text runs words together: no separator is needed next to a non-ASCII word
            parts.append(r"\W+" if ascii_word and words[i - 1].isascii() else r"\W*")
        parts.append(_whole(word) if ascii_word else re.escape(word))
    return re.compile("".join(parts), re.IGNORECASE)


# -- a version the query names, and the section headed by it -----------------------------------

_VERSION = re.compile(r"(?<![\w.])[vV]?(\d+(?:\.\d+){1,3}(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?)(?![\w.-])")


def version_in(query: str) -> str | None:
    """The version a query of two or more words names (``v2.3.1``, ``2.3.1``, ``1.0.0-rc.1``),
    without its ``v``, when it names exactly one and it has at least two dots or is written with
    a ``v`` (``3.14`` alone is a number); else ``None``. A query that is only the version is an
    identifier query (:func:`looks_like_identifier`), ruled by the identifier tiers.

    >>> version_in("v2.3.1 release notes"), version_in("what changed in 3.14")
    ('2.3.1', None)
    """
    if len(query.split()) < 2:
        return None
    found = {
        m.group(1)
        for m in _VERSION.finditer(query)
        if m.group(0)[0] in "vV" or m.group(1).split("-", 1)[0].count(".") >= 2
    }
    return found.pop() if len(found) == 1 else None


#: What may come before the version in a heading that is its section: markup, brackets (Keep a
#: Changelog writes ``## [2.3.1] - 2024-05-01``) and the word version or release.
_VERSION_LEAD = re.compile(r"[\s`'\"*_\[]*(?:(?:version|release)\s+)?[vV]?", re.IGNORECASE)


def heading_names_version(heading_path: str, version: str) -> bool:
    """Whether the chunk lies in the section of ``version`` (:func:`version_in`, no ``v``): a
    heading of ``heading_path`` is the version after markup, a bracket, ``v`` or the word
    version or release, then nothing but markup or a date or note set off by ``(``, ``-``,
    ``:`` or ``,`` (``v2.3.1``, ``[2.3.1] - 2024-05-01``, ``Version 2.3.1 (LTS)``); the chunk may
    sit in a subsection (``Changelog > v2.3.1 > Fixed``). A heading that goes on in words
    (``Upgrading from 2.3.1 to 3.0``) is not the version's.

    >>> heading_names_version("Changelog > [2.3.1] - 2024-05-01 > Fixed", "2.3.1")
    True
    >>> heading_names_version("Changelog > Upgrading from v2.3.1", "2.3.1")
    False
    """
    if not version or not heading_path:
        return False
    return any(
        _heading_is(h, _VERSION_LEAD, version, markup=" \t`'\"*_]", follow="(-:,\u2013\u2014")
        for h in heading_path.split(HEADING_JOIN)
    )


# -- the script a text is written in --------------------------------------------------------

#: Scripts written without spaces between words: each character counts as a word.
_UNSPACED = frozenset({"CJK", "HIRAGANA", "KATAKANA"})


@lru_cache(maxsize=4096)
def _script(ch: str) -> str:
    """The script of the letter ``ch``, by the first word of its Unicode name (``LATIN``,
    ``CJK``, ``CYRILLIC``, ``ARABIC``, ...; ``""`` when it has none)."""
    return unicodedata.name(ch, "").split(" ", 1)[0]


def dominant_script(text: str, *, min_words: int = 2) -> str | None:
    """The script most of the prose of ``text`` is written in, or ``None`` when no script holds
    more than half of its words or it has fewer than ``min_words``.

    Words are counted outside code (fenced blocks and inline backtick spans: commands read the
    same in every language's page): a run of letters of one spaced script (Latin, Cyrillic,
    Arabic, ...) is one word, and each Han, Hiragana or Katakana character is one (those scripts
    put no space between words; a Chinese word is one or two characters). The script is the
    first word of the letters' Unicode names: ``LATIN``, ``CJK``, ``CYRILLIC``, ...

    >>> dominant_script("how do I install it on Linux"), dominant_script("在 Linux 上安装 `npm`")
    ('LATIN', 'CJK')
    """
    if text.isascii():  # fast path: only Latin letters can be there
        words = len(re.findall(r"[A-Za-z]+", re.sub(r"`[^`\n]*`", " ", "\n".join(outside_fences(text)))))
        return "LATIN" if words >= min_words else None
    counts: dict[str, int] = {}
    prose = "\n".join(outside_fences(text))
    prose = re.sub(r"`[^`\n]*`", " ", prose)
    previous = ""
    for ch in prose:
        if not ch.isalpha():
            previous = ""
            continue
        script = "LATIN" if ch.isascii() else _script(ch)
        if script in _UNSPACED or script != previous:
            counts[script] = counts.get(script, 0) + 1
        previous = script
    total = sum(counts.values())
    if total < min_words:
        return None
    script, words = max(counts.items(), key=lambda item: (item[1], item[0]))
    return script if words * 2 > total else None
