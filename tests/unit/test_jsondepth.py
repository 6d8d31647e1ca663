"""``json_depth`` scans a window at a time (issue 40: a service's other threads run between
windows): whatever the window, it finds the depth a one-pass scan finds, for valid JSON, for a
JSON text cut anywhere, and across escapes and strings that straddle a window's edge."""

from __future__ import annotations

import json
import random
from itertools import accumulate
from typing import Any

import pytest

from hybridsag.jsondepth import WINDOW_BYTES, json_depth, too_deep


def one_pass(text: bytes) -> int:
    """The depth as one regex pass over the whole text finds it (the scan before issue 40)."""
    import re

    if text.count(b"[") + text.count(b"{") == 0:
        return 0
    string = re.compile(rb'"(?:[^"\\]++|\\.)*+"?', re.DOTALL)
    step = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
    brackets = [step[c] for c in string.sub(b"", text) if c in step]
    return max(0, max(accumulate(brackets), default=0))


def _value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 7 or roll < 0.3:
        return rng.choice(['x"[y', "a\\", '\\"{', "plain [", '\\\\\\"[', 1, None, "é{"])
    if roll < 0.65:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {f'k{i}"[': _value(rng, depth + 1) for i in range(rng.randint(0, 4))}


@pytest.mark.parametrize("window", [1, 2, 3, 7, 64])
def test_any_window_finds_what_one_pass_finds(window: int) -> None:
    rng = random.Random(40 + window)
    for _ in range(400):
        text = json.dumps(_value(rng), ensure_ascii=rng.random() < 0.5).encode()
        assert json_depth(text, window=window) == one_pass(text), text
        cut = text[: rng.randint(0, len(text))]  # unterminated strings and escapes included
        assert json_depth(cut, window=window) == one_pass(cut), cut


def test_a_large_text_is_scanned_in_windows_to_the_same_depth() -> None:
    deep = b'{"a": "' + b"[" * WINDOW_BYTES + b'", "b": ' + b"[" * 100 + b"]" * 100 + b"}"
    assert json_depth(deep) == 101 == one_pass(deep)
    escaped = b'["' + b"\\\\" * WINDOW_BYTES + b'", [[[]]]]'  # a backslash run across windows
    assert json_depth(escaped) == 4 == one_pass(escaped)
    assert too_deep(b"[" * (3 * WINDOW_BYTES)) == 3 * WINDOW_BYTES
