"""A secret removed from text in every form a server may echo it back (:class:`Scrubber`): what
every remote-model message (:class:`hybridsag.remote_calls.Endpoint`) passes through before it
is logged, raised or cut short.
"""

from __future__ import annotations

import base64
import re

__all__ = ["PARTIAL_KEY_CHARS", "Scrubber"]

#: A head or tail of a key at least this long at an end of an echoed text is scrubbed too (a
#: server that cut its echo short, or an echo cut before it reached us, leaves part of a key).
PARTIAL_KEY_CHARS = 4
#: A base64 form of a key shorter than this is not looked for (it would match ordinary text).
_MIN_BASE64_CHARS = 8


def _char_forms(c: str) -> str:
    """A regex matching the character ``c`` as a server may echo it: as is, JSON-escaped
    (``\\/``, ``\\u002f``, any number of backslashes: JSON inside JSON), URL-encoded (``%2F``,
    ``%252F``), or an HTML character reference (``&#47;``, ``&#x2F;``); hex digits in any case."""
    code = ord(c)

    def hexes(value: str) -> str:
        return "".join(f"[{d.lower()}{d.upper()}]" if d.isalpha() else d for d in value)

    forms = [re.escape(c), rf"\\+u0*{hexes(f'{code:x}')}", rf"%(?:25)*{hexes(f'{code:02x}')}",
             rf"&#0*{code};?", rf"&#[xX]0*{hexes(f'{code:x}')};?"]
    if c in '/"\\':
        forms.append(rf"\\+{re.escape(c)}")
    return "(?:" + "|".join(forms) + ")"


def _base64_cores(data: bytes) -> list[str]:
    """The base64 characters that encode only ``data``, wherever it sits in a longer encoded
    text: one run per alignment (``data`` starting at byte 0, 1 or 2 of a 3-byte group), in
    the standard and the URL-safe alphabet. A key inside ``Bearer <key>`` (base64 of the
    header) or ``user:<key>`` (Basic auth) is found by these."""
    cores: set[str] = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + data).decode("ascii")
        start = -(-8 * offset // 6)  # the first character with no bit of the padding
        end = 8 * (offset + len(data)) // 6  # past the last character made of data bits only
        core = encoded[start:end]
        if len(core) >= _MIN_BASE64_CHARS:
            cores.add(core)
            cores.add(core.replace("+", "-").replace("/", "_"))
    return sorted(cores)


class Scrubber:
    """Removes a secret from text in every form a server may echo it back: as is, JSON-escaped
    (``sk-test\\/KEY``, ``\\u`` escapes, JSON inside JSON), URL-encoded (once or twice), as HTML
    character references, any mix of these per character, and base64 (standard or URL-safe) of
    the secret or of any text holding it (the ``Authorization`` header it was sent in); and a
    head or tail of it (:data:`PARTIAL_KEY_CHARS` or more characters, in any of those forms but
    base64) at the start or end of the text, as a server that cut its echo leaves it. Each
    becomes ``***``. Scrub a text before cutting it short: a cut can split a secret's form.

    >>> Scrubber("sk-ab/cd")('{"error": "bad key sk-ab\\/cd"}')
    '{"error": "bad key ***"}'
    """

    def __init__(self, secret: str) -> None:
        self._patterns: list[re.Pattern[str]] = []
        if not secret:
            return
        forms = [_char_forms(c) for c in secret]
        whole = ["".join(forms)]
        whole += ["".join(_char_forms(c) for c in core) for core in _base64_cores(secret.encode())]
        n = min(PARTIAL_KEY_CHARS, len(secret))
        # a head of the secret ending the text: its first n characters and any that follow
        head = "".join(forms[:n])
        rest = ""
        for form in reversed(forms[n:]):
            rest = f"(?:{form}{rest})?"
        # a tail of the secret starting the text: its last n characters and any before them
        lead = ""
        for form in forms[: len(forms) - n]:
            lead = f"(?:{lead}{form})?"
        self._patterns = [
            re.compile("|".join(whole)),
            re.compile(f"{head}{rest}\\Z"),
            re.compile(f"\\A{lead}{''.join(forms[len(forms) - n :])}"),
        ]

    def __call__(self, text: str) -> str:
        for pattern in self._patterns:
            text = pattern.sub("***", text)
        return text
