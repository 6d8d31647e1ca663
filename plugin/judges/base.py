"""The ``Judge`` extension point: one yes-probability per candidate passage.

A judge answers, for every candidate, "is this passage itself a necessary piece of a complete
answer to the question, given the evidence already accepted?" as a probability in 0..1.
Implementations are chosen by name through :data:`hybridsag.judges.JUDGES` (never guessed from a
model name).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["Candidate", "Judge", "JudgeResult", "JudgeUsage", "StatesVerdicts", "gives_verdicts"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A passage put before the judge.

    ``signals`` carries what the retrieval loop knows of it (``bm25_rank``, ``bm25_score``,
    ``round``, ``expansion_rank``, ...); a remote judge ignores them, the offline one uses them.
    """

    chunk_id: str
    title: str
    text: str
    signals: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JudgeUsage:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    cached: int = 0

    def __add__(self, other: JudgeUsage) -> JudgeUsage:
        return JudgeUsage(
            self.calls + other.calls,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.seconds + other.seconds,
            self.cached + other.cached,
        )


@dataclass(frozen=True, slots=True)
class JudgeResult:
    """``probabilities`` holds exactly one value in 0..1 per candidate chunk id. ``detail`` is
    the judge's own explanation; a ``"degraded"`` entry there says what the judge had to go
    without (SAG2 reports it in the search's reasons)."""

    probabilities: Mapping[str, float]
    usage: JudgeUsage = JudgeUsage()
    detail: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Judge(Protocol):
    """Contract: ``judge()`` returns a probability for every candidate (no more, no fewer) or
    raises :class:`hybridsag.errors.JudgeError`; it never invents a default for a bad answer.

    ``evidence`` is the shared state (passages already accepted); ``provisional`` holds last
    round's scores from round 2 on (new evidence may change them).

    A judge whose numbers only restate an order it was given (the ``none`` judge) declares it
    as :class:`StatesVerdicts` with ``verdicts = False``: SAG2 then reports them as
    ``order_score``, not as a ``judge_p`` that fusion would trust as a judgement
    (:func:`gives_verdicts`). A judge holding a resource (a remote one's HTTP client) is
    :class:`~hybridsag.once.Closeable`.
    """

    name: str

    def judge(
        self,
        question: str,
        candidates: Sequence[Candidate],
        *,
        evidence: Sequence[Candidate] = (),
        provisional: Mapping[str, float] | None = None,
    ) -> JudgeResult: ...


@runtime_checkable
class StatesVerdicts(Protocol):
    """The optional part of the :class:`Judge` contract that says whether a judge's numbers are
    verdicts (``True``) or only restate an order it was given (``False``, the ``none`` judge).
    A judge that does not declare it gives verdicts."""

    verdicts: bool


def gives_verdicts(judge: object) -> bool:
    """Whether ``judge``'s probabilities are judgements fusion may trust (see
    :class:`StatesVerdicts`)."""
    return judge.verdicts if isinstance(judge, StatesVerdicts) else True
