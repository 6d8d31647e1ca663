"""``Scrubber`` (issue 40): a key echoed back by a server is removed in every form a server may
echo it, and a head or tail of it cut off at either end of the text."""

from __future__ import annotations

import base64
import json
import random
import urllib.parse

import pytest

from hybridsag.scrubbing import PARTIAL_KEY_CHARS, Scrubber

KEY = "sk-test/EMBEDKEY+a=b.9_~Zq"


def _leaks(text: str, key: str = KEY) -> list[str]:
    """Every run of PARTIAL_KEY_CHARS characters of ``key`` found in ``text``."""
    n = PARTIAL_KEY_CHARS
    return [key[i : i + n] for i in range(len(key) - n + 1) if key[i : i + n] in text]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


FORMS = {
    "plain": f"bad key {KEY} given",
    "json_slash": json.dumps({"error": f"bad key {KEY}"}).replace("/", "\\/"),
    "json_unicode": json.dumps({"e": KEY}).replace("/", "\\u002F").replace("+", "\\u002b"),
    "json_in_json": json.dumps({"e": json.dumps({"inner": KEY.replace("/", "\\/")})}),
    "url": "next=" + urllib.parse.quote(KEY, safe=""),
    "url_plus": "q=" + urllib.parse.quote_plus(KEY),
    "url_twice": "q=" + urllib.parse.quote(urllib.parse.quote(KEY, safe=""), safe=""),
    "html": "k=" + "".join(f"&#{ord(c)};" for c in KEY),
    "base64_header": "you sent " + _b64(f"Bearer {KEY}"),
    "base64_line": "raw " + _b64(f"Authorization: Bearer {KEY}\r\n"),
    "base64_urlsafe": base64.urlsafe_b64encode(f"u:{KEY}".encode()).decode(),
    "base64_alone": _b64(KEY),
    "head_cut": "the key was " + KEY[:10],
    "tail_cut": KEY[-9:] + " ... (truncated)",
    "head_cut_escaped": "the key was " + KEY[:12].replace("/", "\\/"),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_no_run_of_the_key_survives(form: str) -> None:
    out = Scrubber(KEY)(FORMS[form])
    assert _leaks(out) == [], out
    assert "***" in out


def test_text_around_the_key_stays() -> None:
    assert Scrubber(KEY)(f'{{"error":"bad key {KEY}","code":401}}') == '{"error":"bad key ***","code":401}'
    assert Scrubber(KEY)("nothing secret here") == "nothing secret here"
    assert Scrubber("")("text") == "text"


def test_random_keys_in_random_forms() -> None:
    rng = random.Random(40)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./+=~"
    for _ in range(50):
        key = "".join(rng.choice(alphabet) for _ in range(rng.randint(12, 64)))
        prefix = "".join(rng.choice("xyz ") for _ in range(rng.randint(0, 5)))
        for text in (
            json.dumps({"k": prefix + key}).replace("/", "\\/"),
            urllib.parse.quote(prefix + key, safe=""),
            _b64(prefix + key),
            _b64(f"Bearer {key}"),
        ):
            assert _leaks(Scrubber(key)(text), key) == [], (key, text)
