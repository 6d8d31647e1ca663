"""The ``none`` judge (keep BM25 order: the plain lexical path inside the SAG2 loop), and the
stand-in for a judge that could not be built."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hybridsag.errors import JudgeError
from hybridsag.judges.base import Candidate, JudgeResult, JudgeUsage

__all__ = ["NoneJudge", "UnavailableJudge"]


class NoneJudge:
    """Probability ``1 / (1 + rank)`` from the candidate's BM25 (else expansion) rank: the
    judge's order is the lexical order, and a candidate with no rank scores lowest."""

    name = "none"
    verdicts = False  # StatesVerdicts: an order, not a judgement; fusion must not trust it as one

    def judge(
        self,
        question: str,
        candidates: Sequence[Candidate],
        *,
        evidence: Sequence[Candidate] = (),
        provisional: Mapping[str, float] | None = None,
    ) -> JudgeResult:
        out = {}
        for c in candidates:
            rank = c.signals.get("bm25_rank") or c.signals.get("expansion_rank") or 0.0
            out[c.chunk_id] = 1.0 / (1.0 + rank) if rank else 0.0
        return JudgeResult(out, JudgeUsage())


class UnavailableJudge:
    """A judge that could not be built (``judge.name = "jev"`` without a key): every call
    raises :class:`~hybridsag.errors.JudgeError` with the reason, so the SAG2 path answers in
    BM25 order marked degraded (or raises, under ``judge.on_failure = "raise"``), as it does for
    a judge that fails at run time."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason

    def judge(
        self,
        question: str,
        candidates: Sequence[Candidate],
        *,
        evidence: Sequence[Candidate] = (),
        provisional: Mapping[str, float] | None = None,
    ) -> JudgeResult:
        raise JudgeError(f"judge {self.name!r} is unavailable: {self.reason}")
