"""The ranking metrics eval and every offline run report.

Recall@K is the HippoRAG 2 / SAG definition: per question, the share of its gold passages found
in the top K passages returned (then the mean over questions). MRR@10 is the reciprocal rank of
the first gold passage in the top 10; nDCG@10 uses binary gains (Järvelin and Kekäläinen, 2002).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["KS", "NAMES", "metrics_for"]

#: The cut-offs of Recall@K.
KS = (1, 2, 5, 10)
#: The keys of :func:`metrics_for`, in order.
NAMES = (*(f"recall@{k}" for k in KS), "mrr@10", "ndcg@10")


def metrics_for(ranked: Sequence[str], gold: frozenset[str]) -> dict[str, float]:
    """Recall@1/2/5/10, MRR@10 and nDCG@10 of one ranked id list against its gold set."""
    out: dict[str, float] = {}
    for k in KS:
        out[f"recall@{k}"] = len(gold.intersection(ranked[:k])) / len(gold)
    rr = 0.0
    dcg = 0.0
    found: set[str] = set()
    for i, rid in enumerate(ranked[:10], start=1):
        if rid in gold and rid not in found:  # a repeated id gains once (nDCG stays <= 1)
            found.add(rid)
            if rr == 0.0:
                rr = 1.0 / i
            dcg += 1.0 / math.log2(i + 1)
    idcg = sum(1.0 / math.log2(i + 1) for i in range(1, min(len(gold), 10) + 1))
    out["mrr@10"] = rr
    out["ndcg@10"] = dcg / idcg if idcg else 0.0
    return out
