"""How deeply a JSON text nests, found without parsing it and without recursion.

Python's JSON parser recurses once per array or object level and ends in RecursionError near
1,000 levels (pydantic and ``json.dumps`` likewise); a 100,000-deep ``[[[...]]]`` is a few
hundred kilobytes. The service refuses a body (an NDJSON line) deeper than
:data:`MAX_JSON_DEPTH` before any parser sees it, and the CLI's JSONL reader through the service
refuses such a line by its line number, with the same bound.
"""

from __future__ import annotations

import re
from itertools import accumulate

__all__ = ["MAX_JSON_DEPTH", "WINDOW_BYTES", "json_depth", "too_deep"]

#: How deeply a JSON body (or one NDJSON line) may nest arrays and objects. A resource's
#: metadata may nest ``hybridsag.documents.MAX_METADATA_DEPTH`` (32) levels inside the list and
#: the resource that hold it; 64 leaves room for that and stays far below what Python's JSON
#: parser and pydantic can recurse into.
MAX_JSON_DEPTH = 64

# A JSON string from its opening quote: runs of plain characters or escape pairs, then the
# closing quote if there is one. Possessive, and it cannot fail once it has started, so each
# byte is looked at once (an unterminated string ends at the end of the text).
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"?', re.DOTALL)
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_BACKSLASHES = re.compile(rb"\\*")
#: How much of a text :func:`json_depth` scans in one go.
WINDOW_BYTES = 256 * 1024
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


def json_depth(text: bytes, *, window: int = WINDOW_BYTES) -> int:
    """How deeply ``text`` (JSON, valid or not) nests arrays and objects: the most brackets
    open at once outside strings, which is as deep as a JSON parser would recurse before it
    stopped. Linear in the text, the scanning in C (``re`` and ``bytes.translate``), a
    ``window`` of bytes at a time: between windows a service's other threads run (one C call
    over megabytes would hold Python's lock for most of a second on a loaded machine). A window
    that starts inside a string is told by the parity of the unescaped quotes before it; a
    window never ends inside a run of backslashes, so no escape is split. (A backslash outside
    a string, which no JSON parser gets past, may change what is counted after it.)

    >>> json_depth(b'{"a": [1, {"b": "[[["}]}')
    3
    """
    if text.count(b"[") + text.count(b"{") == 0:
        return 0
    depth = best = 0
    in_string = False
    pos, end = 0, len(text)
    while pos < end:
        cut = min(end, pos + window)
        if cut < end and text[cut - 1] == 0x5C:  # a backslash run: cut before it, or after it
            head = text[pos:cut].rstrip(b"\\")
            # (a window of backslashes only: through the run and the character it may escape)
            cut = pos + len(head) if head else min(end, _BACKSLASHES.match(text, cut).end() + 1)
        part = text[pos:cut]
        scanned = b'"' + part if in_string else part
        brackets = _STRING.sub(b"", scanned).translate(None, _NOT_BRACKETS)
        if brackets:
            best = max(best, max(accumulate(map(_STEP.__getitem__, brackets), initial=depth)))
            depth += 2 * (brackets.count(b"[") + brackets.count(b"{")) - len(brackets)
        quotes = part.replace(b"\\\\", b"").replace(b'\\"', b"").count(b'"')
        in_string ^= quotes % 2 == 1
        pos = cut
    return best


def too_deep(text: bytes, *, lines: bool = False, max_depth: int = MAX_JSON_DEPTH) -> int | None:
    """The depth of ``text`` (with ``lines``: of its deepest ``\\n``-separated line, as NDJSON
    is read) when over ``max_depth``, else None. A text with at most ``max_depth`` opening
    brackets is not scanned.

    >>> too_deep(b"[" * 100), too_deep(b"[[]]")
    (100, None)
    """
    for part in text.split(b"\n") if lines else (text,):
        if part.count(b"[") + part.count(b"{") > max_depth:
            depth = json_depth(part)
            if depth > max_depth:
                return depth
    return None
