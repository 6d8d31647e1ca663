"""Validation of user queries at the edge (before any path sees them)."""

from __future__ import annotations

import unicodedata

from hybridsag.errors import QueryError

__all__ = ["validate_query"]

_ALLOWED_CONTROL = frozenset("\t\n\r")


def validate_query(query: object, *, max_chars: int) -> str:
    """Return the query stripped, or raise :class:`QueryError` naming the problem.

    Refused: a non-string, an empty or whitespace-only query, one longer than ``max_chars``,
    one holding NUL or another control character (tab and newlines are whitespace), and one
    holding a lone surrogate (text that cannot be UTF-8).

    >>> validate_query("  ReActAgent ", max_chars=4096)
    'ReActAgent'
    """
    if not isinstance(query, str):
        raise QueryError(f"query must be a string, got {type(query).__name__}")
    if len(query) > max_chars:
        raise QueryError(
            f"query is {len(query)} characters, over the limit of {max_chars} "
            "(setting query.max_chars)"
        )
    for pos, ch in enumerate(query):
        if ch == "\x00":
            raise QueryError(f"query holds a NUL character at position {pos}")
        kind = unicodedata.category(ch)
        if ch not in _ALLOWED_CONTROL and kind == "Cc":
            raise QueryError(f"query holds control character {ch!r} at position {pos}")
        if kind == "Cs":
            raise QueryError(
                f"query holds a lone surrogate {ch!r} at position {pos}: it is not valid "
                "UTF-8 (a byte that is not UTF-8 on the command line ends up as one)"
            )
    stripped = query.strip()
    if not stripped:
        raise QueryError("query is empty or whitespace only")
    return stripped
