"""QueryMemo: one query is embedded once; passages and batches pass through."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hybridsag.embed_cache import QueryMemo


class CountingEmbedder:
    """A stand-in embedder (QueryMemo is under test, not the model): counts what it encodes."""

    name = "counting"
    fingerprint = "counting|test"
    dimension = 3

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    def encode(self, texts: Sequence[str], *, kind: str = "passage") -> np.ndarray:
        self.calls.append((kind, tuple(texts)))
        return np.array([[len(t), 1.0, 0.0] for t in texts], dtype=np.float32)


def test_a_query_is_embedded_once_and_copies_are_returned() -> None:
    inner = CountingEmbedder()
    memo = QueryMemo(inner, size=2)
    first = memo.encode(["who?"], kind="query")
    first[0, 0] = 99.0  # a caller mutating its copy must not poison the memo
    again = memo.encode(["who?"], kind="query")
    assert inner.calls == [("query", ("who?",))]
    assert again.tolist() == [[4.0, 1.0, 0.0]]
    assert (memo.name, memo.fingerprint, memo.dimension) == ("counting", "counting|test", 3)


def test_passages_and_batches_pass_through_and_the_lru_is_bounded() -> None:
    inner = CountingEmbedder()
    memo = QueryMemo(inner, size=2)
    memo.encode(["a", "b"], kind="query")
    memo.encode(["p"], kind="passage")
    memo.encode(["p"], kind="passage")
    for q in ("q1", "q2", "q3", "q1"):  # q1 was evicted by q3
        memo.encode([q], kind="query")
    assert [c for c in inner.calls if c[0] == "passage"] == [("passage", ("p",))] * 2
    assert [c[1] for c in inner.calls if c[0] == "query"] == [
        ("a", "b"), ("q1",), ("q2",), ("q3",), ("q1",)
    ]
