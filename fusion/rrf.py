"""Weighted Reciprocal Rank Fusion over the ranked lists of several retrieval paths."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from hybridsag.fusion.types import Contribution, FusedHit, Hit

__all__ = ["rrf"]


def rrf(
    runs: Mapping[str, Sequence[Hit]],
    *,
    k: float = 60.0,
    depth: int | None = None,
    limit: int | None = None,
    weights: Mapping[str, float] | None = None,
) -> list[FusedHit]:
    """Fuse ranked lists with weighted Reciprocal Rank Fusion.

    Each path's hit adds ``weight / (k + rank)`` to its chunk, with ``rank`` the hit's own 1-based
    ``Hit.rank``; a chunk found by several paths sums its terms (``math.fsum``, so the same terms
    give the same float whatever the path order). Method: G. V. Cormack, C. L. A. Clarke and
    S. Buettcher, "Reciprocal rank fusion outperforms Condorcet and individual rank learning
    methods", SIGIR 2009; ``k = 60`` is the constant used there.

    - ``depth`` keeps only hits with ``rank <= depth`` from each run.
    - If one run holds the same ``chunk_id`` more than once, only its best (lowest) rank counts;
      among equal ranks the first hit in the run is kept.
    - ``weights`` maps a path name to a weight ``>= 0``; a path missing from it weighs ``1.0``,
      names in it that are not runs are ignored. A path of weight ``0`` is left out entirely: it
      adds no term and no ``Contribution``, and a chunk that only it found does not appear.
    - Order: fused score descending, then best single-path rank ascending, then ``chunk_id``
      ascending (so the result is deterministic).

    Every ``FusedHit`` keeps one ``Contribution`` per contributing path, in the order of ``runs``,
    with the path's rank, raw score, normalised score, RRF term and detail. No ``Hit`` is mutated.

    Args:
        runs: path name -> that path's hits; every hit's ``path`` must equal its key.
        k: the RRF constant, finite and ``> 0``.
        depth: per-run rank cut-off, ``>= 1``, or ``None`` for no cut-off.
        limit: how many fused hits to return, ``>= 1``, or ``None`` for all.
        weights: per-path weights, finite and ``>= 0``; ``None`` means all ``1.0``.

    Returns:
        The fused hits, ranks ``1..n`` (``rrf_rank`` the same), ``rules`` empty.

    Raises:
        ValueError: a bad ``k``, ``depth``, ``limit`` or weight, or a hit whose ``path`` differs
            from its run's key; the message names the bad value.

    Example:
        >>> from hybridsag.fusion.types import Hit
        >>> fused = rrf({"dense": [Hit("c1", "dense", 1, 0.9, 0.9)]})
        >>> fused[0].score == 1 / 61
        True
    """
    _validate(runs, k=k, depth=depth, limit=limit, weights=weights)

    contributions: dict[str, list[Contribution]] = {}
    for path, hits in runs.items():
        weight = 1.0 if weights is None else float(weights.get(path, 1.0))
        if weight == 0.0:
            continue
        best: dict[str, Hit] = {}
        for hit in hits:
            if depth is not None and hit.rank > depth:
                continue
            kept = best.get(hit.chunk_id)
            if kept is None or hit.rank < kept.rank:
                best[hit.chunk_id] = hit
        for hit in best.values():
            contributions.setdefault(hit.chunk_id, []).append(
                Contribution(
                    path=path,
                    rank=hit.rank,
                    raw_score=hit.raw_score,
                    score=hit.score,
                    rrf_term=weight / (k + hit.rank),
                    detail=hit.detail,
                    judge_p=hit.judge_p,
                    next_hop=hit.next_hop,
                )
            )

    scored = [
        (math.fsum(c.rrf_term for c in contribs), min(c.rank for c in contribs), chunk_id)
        for chunk_id, contribs in contributions.items()
    ]
    scored.sort(key=lambda item: (-item[0], item[1], item[2]))
    if limit is not None:
        scored = scored[:limit]
    return [
        FusedHit(
            chunk_id=chunk_id,
            rank=position,
            score=score,
            contributions=tuple(contributions[chunk_id]),
            rrf_rank=position,
        )
        for position, (score, _best_rank, chunk_id) in enumerate(scored, start=1)
    ]


def _validate(
    runs: Mapping[str, Sequence[Hit]],
    *,
    k: float,
    depth: int | None,
    limit: int | None,
    weights: Mapping[str, float] | None,
) -> None:
    if not (math.isfinite(k) and k > 0):
        raise ValueError(f"rrf k must be a finite number > 0, got {k!r}")
    if depth is not None and depth < 1:
        raise ValueError(f"rrf depth must be >= 1 or None, got {depth!r}")
    if limit is not None and limit < 1:
        raise ValueError(f"rrf limit must be >= 1 or None, got {limit!r}")
    if weights is not None:
        for path, weight in weights.items():
            if not (math.isfinite(weight) and weight >= 0):
                raise ValueError(
                    f"rrf weight for path {path!r} must be a finite number >= 0, got {weight!r}"
                )
    for path, hits in runs.items():
        for hit in hits:
            if hit.path != path:
                raise ValueError(
                    f"rrf run {path!r} holds a hit of path {hit.path!r} "
                    f"(chunk_id {hit.chunk_id!r}); run keys must equal Hit.path"
                )
