"""The optional parts of the embedder and judge contracts are declared types, not attribute
probes: which of the shipped parts offer each, and what the readers do with a part that does
not."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from hybridsag.judges.base import Candidate, JudgeResult, StatesVerdicts, gives_verdicts
from hybridsag.judges.chat import ChatJudge
from hybridsag.judges.cross_encoder import CrossEncoderJudge
from hybridsag.judges.features import FeatureJudge
from hybridsag.judges.jev import JevJudge
from hybridsag.judges.simple import NoneJudge
from hybridsag.once import Closeable, close_part
from hybridsag.vectors.embed_cache import CachedEmbedder, QueryMemo
from hybridsag.vectors.embedder import ReadsVocabulary, SentenceTransformerEmbedder, vocabulary_share
from hybridsag.vectors.http_embedder import HttpEmbedder
from hybridsag.vectors.onnx_embedder import OnnxEmbedder


@pytest.mark.parametrize(
    ("cls", "reads"),
    [
        (SentenceTransformerEmbedder, True),
        (OnnxEmbedder, True),
        (CachedEmbedder, True),  # asks the embedder it wraps
        (QueryMemo, True),
        (HttpEmbedder, False),  # a remote model's vocabulary is not known here
    ],
)
def test_which_embedders_read_a_vocabulary(cls: type, reads: bool) -> None:
    assert issubclass(cls, ReadsVocabulary) is reads


@pytest.mark.parametrize(
    ("cls", "closes"),
    [
        (HttpEmbedder, True),
        (CachedEmbedder, True),
        (QueryMemo, True),
        (ChatJudge, True),
        (JevJudge, True),
        (FeatureJudge, False),
        (CrossEncoderJudge, False),
        (NoneJudge, False),
    ],
)
def test_which_parts_hold_something_to_close(cls: type, closes: bool) -> None:
    assert issubclass(cls, Closeable) is closes


class _PlainEmbedder:
    """An embedder that offers only the required part of the contract."""

    name = "plain"
    fingerprint = "plain|test"
    dimension = 2


class _Reader(_PlainEmbedder):
    def __init__(self, share: float | None) -> None:
        self.share = share

    def vocabulary_share(self, text: str) -> float | None:
        return self.share


def test_vocabulary_share_is_none_for_an_embedder_that_does_not_read_one() -> None:
    assert not isinstance(_PlainEmbedder(), ReadsVocabulary)
    assert vocabulary_share(_PlainEmbedder(), "anything") is None
    assert vocabulary_share(_Reader(None), "anything") is None
    assert vocabulary_share(_Reader(1), "anything") == 1.0
    assert isinstance(vocabulary_share(_Reader(1), "anything"), float)


class _PlainJudge:
    name = "plain"

    def judge(
        self, question: str, candidates: Sequence[Candidate], **_: object
    ) -> JudgeResult:
        return JudgeResult({c.chunk_id: 0.5 for c in candidates})


def test_a_judge_gives_verdicts_unless_it_declares_it_restates_an_order() -> None:
    assert not isinstance(_PlainJudge(), StatesVerdicts)
    assert gives_verdicts(_PlainJudge())
    assert isinstance(NoneJudge(), StatesVerdicts)
    assert not gives_verdicts(NoneJudge())


def test_close_part_closes_only_a_closeable_part() -> None:
    closed: list[str] = []

    class _Held:
        def close(self) -> None:
            closed.append("held")

    close_part(_Held())
    close_part(_PlainJudge())  # nothing to close: no error
    close_part(None)
    assert closed == ["held"]
