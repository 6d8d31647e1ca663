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

from hybridsag.fusion.markdown import HEADING_JOIN, atx_heading, atx_headings

__all__ = [
    "contains_whole_identifier",
    "defines_identifier",
    "heading_defines_identifier",
    "hyphenated_name",
    "is_heading_only",
    "looks_like_identifier",
    "normalize_title",
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
    lead = _HEADING_LEAD.match(heading)
    start = lead.end() if lead else 0
    if not heading.startswith(ident, start):
        return False
    rest = heading[start + len(ident) :].strip(" \t`'\"*_")
    return not rest or rest[0] in "([<:="


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
