"""``milvus_client.create_or_join``: a collection's create that loses the race to another process
(the service's workers opening a fresh data dir at once) uses the winner's collection once it
exists, and raises its own error when none appears; the dense and the lexical adapters both
create through it."""

from __future__ import annotations

import inspect

import pytest

from hybridsag.errors import ConfigError, DenseError, LexicalError
from hybridsag.lexical.milvus_fulltext import MilvusLexicalIndex
from hybridsag.milvus_client import create_or_join
from hybridsag.vectors.milvus_dense import MilvusDenseIndex


class _Rival:
    """A collection another process is creating: absent for ``absent_for`` reads, then there."""

    def __init__(self, absent_for: int | None) -> None:
        self.absent_for = absent_for
        self.reads = 0

    def exists(self) -> bool:
        self.reads += 1
        return self.absent_for is not None and self.reads > self.absent_for


def _lost(error: Exception):
    def create() -> None:
        raise error

    return create


def test_a_create_that_wins_never_asks_whether_the_collection_exists() -> None:
    made: list[str] = []
    rival = _Rival(absent_for=None)
    create_or_join(lambda: made.append("made"), rival.exists, LexicalError)
    assert made == ["made"] and rival.reads == 0


def test_the_loser_waits_for_the_winners_collection_while_it_is_still_absent() -> None:
    # Milvus Lite's "File exists" comes while the winner is still at it: absent for a moment
    rival = _Rival(absent_for=3)
    create_or_join(_lost(LexicalError("[Errno 17] File exists")), rival.exists, LexicalError)
    assert rival.reads == 4


def test_no_collection_after_the_wait_raises_the_creates_own_error() -> None:
    error = DenseError("create_collection failed: no space left on device")
    rival = _Rival(absent_for=None)
    with pytest.raises(DenseError) as caught:
        create_or_join(_lost(error), rival.exists, DenseError, wait_s=0.2)
    assert caught.value is error and rival.reads >= 2


def test_an_error_that_is_no_lost_race_is_raised_at_once() -> None:
    rival = _Rival(absent_for=0)
    with pytest.raises(ConfigError, match="bad schema"):
        create_or_join(_lost(ConfigError("bad schema")), rival.exists, LexicalError)
    assert rival.reads == 0


@pytest.mark.parametrize("adapter", [MilvusDenseIndex, MilvusLexicalIndex])
def test_both_milvus_adapters_create_their_collections_through_it(adapter: type) -> None:
    source = inspect.getsource(adapter._create)
    assert "create_or_join(" in source and source.count("create_collection(") == 1
