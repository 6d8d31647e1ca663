"""Replies that answer by index (the OpenAI embeddings' ``data``, the rerankers' scores) are read
by one rule, :func:`hybridsag.remote_calls.by_index`: every index a count below n, none twice,
each entry an object."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from hybridsag.errors import DenseError
from hybridsag.remote_calls import Reply, by_index
from hybridsag.vectors.http_embedder import WIRES


class Bad(Exception):
    pass


def _entry_value(item: dict[str, Any], index: int) -> Any:
    return item["s"]


def test_values_come_back_by_index_in_any_order() -> None:
    got = by_index([{"index": 1, "s": "b"}, {"index": 0, "s": "a"}], 2, _entry_value, Bad,
                   entry="a score entry")  # fmt: skip
    assert got == {1: "b", 0: "a"}


@pytest.mark.parametrize(
    ("entries", "words"),
    [
        ([{"index": 0, "s": 1}, {"index": 0, "s": 2}], "index 0 answered twice"),
        ([{"index": 2, "s": 1}], "index 2 is not one of 0..1"),
        ([{"index": -1, "s": 1}], "index -1 is not one of 0..1"),
        ([{"index": True, "s": 1}], "index True is not one of 0..1"),
        ([{"s": 1}], "index None is not one of 0..1"),
        ([[0, 1]], "a score entry is list, not an object"),
    ],
)
def test_a_bad_index_or_entry_is_named(entries: list[Any], words: str) -> None:
    with pytest.raises(Bad, match=words):
        by_index(entries, 2, _entry_value, Bad, entry="a score entry")


def _bad(problem: str) -> Exception:
    return DenseError(problem)


def test_openai_refuses_an_index_twice_even_after_an_entry_without_a_vector() -> None:
    """The first entry of index 0 has no ``embedding``; a second entry of index 0 is still an
    index answered twice (it used to take the second's vector and leave index 1 empty)."""
    data = {"data": [{"index": 0}, {"index": 0, "embedding": [1.0, 0.0]}]}
    reply = Reply(httpx.Response(200), None, 1)
    with pytest.raises(DenseError, match="index 0 answered twice"):
        WIRES["openai"].read(data, reply, 2, _bad)


def test_openai_vectors_come_back_in_text_order() -> None:
    data = {"data": [{"index": 1, "embedding": [0.0, 1.0]}, {"index": 0, "embedding": [1.0, 0.0]}],
            "usage": {"prompt_tokens": 4}}  # fmt: skip
    reply = Reply(httpx.Response(200), None, 1)
    assert WIRES["openai"].read(data, reply, 2, _bad) == ([[1.0, 0.0], [0.0, 1.0]], 4)
