"""QueryMemo: one query is embedded once; passages and batches pass through."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np

from hybridsag.vectors.embed_cache import QueryMemo


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


class GatedEmbedder(CountingEmbedder):
    """Blocks in ``encode`` until ``gate`` is set, so that a second caller comes while the
    first is embedding; fails instead when ``fail`` is set."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.fail = fail

    def encode(self, texts: Sequence[str], *, kind: str = "passage") -> np.ndarray:
        self.calls.append((kind, tuple(texts)))
        self.entered.set()
        assert self.gate.wait(10), "never released"
        if self.fail:
            raise RuntimeError("model fell over")
        return np.array([[len(t), 1.0, 0.0] for t in texts], dtype=np.float32)


def _second_caller_while_first_embeds(memo: QueryMemo, inner: GatedEmbedder) -> list[object]:
    """Thread A embeds ``who?``; thread B asks for it while A is inside the model; A is let go
    a little after B started. Returns what A and B got (an array or the exception)."""
    got: list[object] = [None, None]

    def ask(i: int) -> None:
        try:
            got[i] = memo.encode(["who?"], kind="query")
        except RuntimeError as exc:
            got[i] = exc

    a = threading.Thread(target=ask, args=(0,))
    a.start()
    assert inner.entered.wait(10)
    b = threading.Thread(target=ask, args=(1,))
    b.start()
    time.sleep(0.05)  # B is waiting for A's vector by now (or, if slower, finds it memoised)
    inner.gate.set()
    a.join(10)
    b.join(10)
    return got


def test_a_query_asked_for_while_it_is_being_embedded_is_embedded_once() -> None:
    for _ in range(5):
        inner = GatedEmbedder()
        memo = QueryMemo(inner)
        got = _second_caller_while_first_embeds(memo, inner)
        assert inner.calls == [("query", ("who?",))]
        assert [g.tolist() for g in got] == [[[4.0, 1.0, 0.0]]] * 2  # type: ignore[union-attr]


def test_an_embedding_that_fails_fails_its_waiters_and_is_tried_again_next_time() -> None:
    inner = GatedEmbedder(fail=True)
    memo = QueryMemo(inner)
    got = _second_caller_while_first_embeds(memo, inner)
    assert all(isinstance(g, RuntimeError) for g in got), got
    tried = len(inner.calls)  # 1, unless B came after A had failed and tried on its own
    inner.fail = False
    assert memo.encode(["who?"], kind="query").tolist() == [[4.0, 1.0, 0.0]]
    assert len(inner.calls) == tried + 1  # the failure was not memoised
