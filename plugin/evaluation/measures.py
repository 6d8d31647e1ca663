"""The ranking metrics eval and every offline run report.

Recall@K is the HippoRAG 2 / SAG definition: per question, the share of its gold passages found
in the top K passages returned (then the mean over questions). MRR@10 is the reciprocal rank of
the first gold passage in the top 10. nDCG@10 reads graded relevance as trec_eval and ranx do
(Järvelin and Kekäläinen, 2002): the gain of a passage is its grade in the qrels, the ideal
ranking sorts the question's grades, and a repeated id gains once; ``ndcg@10_binary`` is the
same with every gold passage's gain 1. On a set whose grades are all 1 the two are equal. Gold
(for recall and MRR) is every passage with a grade above 0, trec_eval's relevance threshold.

A fused result may stand for copies of its text found elsewhere (``SearchResult.also_in``) and
for the neighbouring chunks of its section merged into it (``SearchResult.merged``, of its own
resource): :func:`ranked_results` scores it as one place, the one the reader sees it at, found
when any of the resources it stands for is gold.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["KS", "NAMES", "Gold", "metrics_for", "ranked_results"]

#: The cut-offs of Recall@K.
KS = (1, 2, 5, 10)
#: The keys of :func:`metrics_for`, in order.
NAMES = (*(f"recall@{k}" for k in KS), "mrr@10", "ndcg@10", "ndcg@10_binary")


class Gold(frozenset[str]):
    """A question's gold passage ids (a frozenset, so every set operation works) with their
    grades: built from ``{id: grade}`` (ids graded 0 or below are left out) or from ids alone
    (each graded 1).

    >>> g = Gold({"a": 2, "b": 1, "c": 0})
    >>> sorted(g), g.grade("a"), g.graded
    (['a', 'b'], 2.0, True)
    """

    __slots__ = ("grades",)
    grades: Mapping[str, float]

    def __new__(cls, graded: Mapping[str, float] | Iterable[str]) -> Gold:
        if isinstance(graded, Mapping):
            grades = {str(k): float(v) for k, v in graded.items() if float(v) > 0}
        else:
            grades = dict.fromkeys(map(str, graded), 1.0)
        self = super().__new__(cls, grades)
        self.grades = grades
        return self

    def __reduce__(self) -> tuple[type[Gold], tuple[dict[str, float]]]:
        return Gold, (dict(self.grades),)

    def grade(self, rid: str) -> float:
        """The grade of ``rid`` (0 for an id that is not gold)."""
        return self.grades.get(rid, 0.0)

    @property
    def graded(self) -> bool:
        """Whether any grade is other than 1 (binary nDCG then differs from graded)."""
        return any(g != 1.0 for g in self.grades.values())


def _ndcg(ranked: Sequence[str], gains: Mapping[str, float]) -> float:
    dcg = 0.0
    seen: set[str] = set()
    for i, rid in enumerate(ranked[:10], start=1):
        if rid in gains and rid not in seen:  # a repeated id gains once (nDCG stays <= 1)
            seen.add(rid)
            dcg += gains[rid] / math.log2(i + 1)
    ideal = sorted(gains.values(), reverse=True)[:10]
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, start=1))
    return dcg / idcg if idcg else 0.0


def metrics_for(ranked: Sequence[str], gold: frozenset[str]) -> dict[str, float]:
    """Recall@1/2/5/10, MRR@10, nDCG@10 (graded, when ``gold`` is a :class:`Gold` with grades)
    and binary nDCG@10 of one ranked id list against its gold set."""
    out: dict[str, float] = {}
    for k in KS:
        out[f"recall@{k}"] = len(gold.intersection(ranked[:k])) / len(gold)
    out["mrr@10"] = next((1.0 / i for i, rid in enumerate(ranked[:10], 1) if rid in gold), 0.0)
    binary = dict.fromkeys(gold, 1.0)
    out["ndcg@10"] = _ndcg(ranked, gold.grades if isinstance(gold, Gold) else binary)
    out["ndcg@10_binary"] = _ndcg(ranked, binary)
    return out


def ranked_results(results: Iterable[Sequence[str]], gold: frozenset[str]) -> list[str]:
    """The ranked ids to score for results that each name a resource and then the resources of
    the copies of its text folded into it: one id per result, at the result's own place (the
    copies are shown with it and take no place of their own), the first of them that is gold
    when one is (the reader has that text and its place in front of them), else the result's
    own; each id once.

    >>> ranked_results([["a", "b"], ["c"], ["b"]], frozenset({"b"}))
    ['b', 'c']
    """
    ranked: list[str] = []
    for ids in results:
        if ids:
            ranked.append(next((rid for rid in ids if rid in gold), ids[0]))
    return list(dict.fromkeys(ranked))
