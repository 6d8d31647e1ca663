"""Score fusion: a convex combination of per-query normalised scores, beside RRF.

S. Bruch, S. Gai and A. Ingber, "An Analysis of Fusion Functions for Hybrid Retrieval", ACM
TOIS 42(1), 2023, found that a convex combination of normalised lexical and semantic scores beats
RRF in and out of domain, and that it needs only one parameter per path. Raw scores are never
added across paths (a BM25 score and a cosine live on different scales): each path's scores are
first normalised per query:

- ``minmax``: ``(s - min) / (max - min)`` over the path's list for this query (1 for the best,
  0 for the worst; all 1 when the list does not vary);
- ``zscore``: ``(s - mean) / std`` over the path's list, so a clear winner stands further out than
  the best of a flat list.

A chunk a path did not return gets that path's floor (:func:`absent_floor`): 0 for ``minmax``,
the list's lowest z for ``zscore`` (one below its members when they all tie): absence is never
stronger evidence than the weakest hit the list holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from hybridsag.fusion.types import Contribution, FusedHit, Hit

__all__ = ["NORMALISERS", "absent_floor", "convex", "normalise"]

#: The per-query normalisations :func:`normalise` knows.
NORMALISERS = ("minmax", "zscore")


def normalise(hits: Sequence[Hit], *, method: str = "minmax") -> dict[str, float]:
    """``chunk_id -> normalised score`` of one path's hits for one query (best rank of a
    repeated chunk kept). ValueError names an unknown ``method``."""
    if method not in NORMALISERS:
        raise ValueError(f"unknown score normalisation {method!r}; valid: {', '.join(NORMALISERS)}")
    best: dict[str, Hit] = {}
    for h in hits:
        kept = best.get(h.chunk_id)
        if kept is None or h.rank < kept.rank:
            best[h.chunk_id] = h
    if not best:
        return {}
    scores = {cid: h.score for cid, h in best.items()}
    values = list(scores.values())
    if method == "minmax":
        lo, hi = min(values), max(values)
        if hi - lo <= 1e-12:
            return dict.fromkeys(scores, 1.0)
        return {cid: (s - lo) / (hi - lo) for cid, s in scores.items()}
    mean = math.fsum(values) / len(values)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
    if std <= 1e-12:
        return dict.fromkeys(scores, 0.0)
    return {cid: (s - mean) / std for cid, s in scores.items()}


def absent_floor(normalised: Mapping[str, float], *, method: str = "minmax") -> float:
    """The normalised value of a chunk the path did not return (see the module docstring)."""
    if method == "minmax" or not normalised:
        return 0.0
    low = min(normalised.values())
    return low - 1.0 if max(normalised.values()) - low <= 1e-12 else low


def convex(
    runs: Mapping[str, Sequence[Hit]],
    *,
    weights: Mapping[str, float] | None = None,
    depth: int | None = None,
    limit: int | None = None,
    method: str = "minmax",
) -> list[FusedHit]:
    """Fuse ranked lists by a weighted sum of per-query normalised scores.

    ``score(chunk) = sum over paths of weight * normalised score`` (:func:`normalise`; a chunk
    a path did not return counts that path's :func:`absent_floor`). Weights are relative: a path
    missing from ``weights`` weighs 1.0, one of weight 0 is left out (it adds no contribution,
    and a chunk only it found does not appear). ``depth`` keeps hits with ``rank <= depth``.
    Order: fused score descending, then best single-path rank, then ``chunk_id``. Each
    contribution's ``rrf_term`` holds the term that path added (``weight * normalised``).

    Raises:
        ValueError: a weight that is negative or not finite, a bad ``depth``/``limit``, an
            unknown ``method``, or a hit whose ``path`` differs from its run's key.

    Example:
        >>> from hybridsag.fusion.types import Hit
        >>> runs = {"a": [Hit("x", "a", 1, 9.0, 9.0), Hit("y", "a", 2, 1.0, 1.0)],
        ...         "b": [Hit("y", "b", 1, .8, .8), Hit("x", "b", 2, .7, .7)]}
        >>> [h.chunk_id for h in convex(runs, weights={"a": 0.3, "b": 0.7})]
        ['y', 'x']
    """
    if depth is not None and depth < 1:
        raise ValueError(f"convex depth must be >= 1 or None, got {depth!r}")
    if limit is not None and limit < 1:
        raise ValueError(f"convex limit must be >= 1 or None, got {limit!r}")
    kept: dict[str, list[Hit]] = {}
    for path, hits in runs.items():
        w = 1.0 if weights is None else float(weights.get(path, 1.0))
        if not (math.isfinite(w) and w >= 0):
            raise ValueError(f"convex weight for path {path!r} must be a finite number >= 0, got {w!r}")
        for h in hits:
            if h.path != path:
                raise ValueError(
                    f"convex run {path!r} holds a hit of path {h.path!r} (chunk_id "
                    f"{h.chunk_id!r}); run keys must equal Hit.path"
                )
        if w == 0.0:
            continue
        kept[path] = [h for h in hits if depth is None or h.rank <= depth]
    contributions: dict[str, list[Contribution]] = {}
    floors: dict[str, float] = {}
    for path, hits in kept.items():
        w = 1.0 if weights is None else float(weights.get(path, 1.0))
        norm = normalise(hits, method=method)
        floors[path] = w * absent_floor(norm, method=method)
        best: dict[str, Hit] = {}
        for h in hits:
            if h.chunk_id not in best or h.rank < best[h.chunk_id].rank:
                best[h.chunk_id] = h
        for cid, h in best.items():
            contributions.setdefault(cid, []).append(
                Contribution(
                    path=path,
                    rank=h.rank,
                    raw_score=h.raw_score,
                    score=h.score,
                    rrf_term=w * norm[cid],
                    detail=h.detail,
                    judge_p=h.judge_p,
                    next_hop=h.next_hop,
                )
            )
    scored = []
    for cid, contribs in contributions.items():
        present = {c.path for c in contribs}
        total = math.fsum(
            [c.rrf_term for c in contribs] + [f for p, f in floors.items() if p not in present]
        )
        scored.append((total, min(c.rank for c in contribs), cid))
    scored.sort(key=lambda item: (-item[0], item[1], item[2]))
    if limit is not None:
        scored = scored[:limit]
    return [
        FusedHit(
            chunk_id=cid, rank=i, score=score, contributions=tuple(contributions[cid]), rrf_rank=i
        )
        for i, (score, _best, cid) in enumerate(scored, start=1)
    ]
