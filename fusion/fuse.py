"""``fuse()``: convex fusion (the default) or weighted RRF, then the bounded rules, then copies
of one text folded into one result: the one fusion step every caller shares."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hybridsag.fusion.convex import NORMALISERS, convex
from hybridsag.fusion.dedupe import collapse_duplicates, collapse_window
from hybridsag.fusion.rrf import rrf
from hybridsag.fusion.rules import rules_window
from hybridsag.fusion.trust import Trust
from hybridsag.fusion.types import ChunkView, FusedHit, Hit

__all__ = ["METHODS", "fuse"]

#: The fusion functions :func:`fuse` knows: weighted RRF and the convex score combination.
METHODS = ("rrf", "convex")


def fuse(
    runs: Mapping[str, Sequence[Hit]],
    *,
    query: str,
    chunks: Mapping[str, ChunkView],
    k: float = 60.0,
    depth: int | None = None,
    weights: Mapping[str, float] | None = None,
    pin_exact_titles: int = 3,
    strict_identifiers: bool = False,
    judge_accept: float | None = None,
    judge_order: bool = False,
    method: str = "rrf",
    normalisation: str = "minmax",
    trust: Trust | None = None,
    collapse: bool = True,
    limit: int | None = None,
) -> list[FusedHit]:
    """Fuse the paths' lists the way a search does: :func:`rrf` (``method="rrf"``) or
    :func:`~hybridsag.fusion.convex.convex` (``method="convex"``, scores normalised per query
    by ``normalisation``), then only the hits whose chunk is in ``chunks`` (the caller leaves
    out what is deleted or filtered away), then :func:`apply_rules`, then (with ``collapse``)
    :func:`~hybridsag.fusion.dedupe.collapse_duplicates`: each copy of a chunk's text is folded
    into its best-ranked copy's ``FusedHit.duplicates``. A search's fusion step
    (``hybridsag.search.fuse_step``) calls it, and so does every offline grid through that step,
    so the recall a grid prints is the recall a search with the chosen settings gets.

    ``trust`` (the per-query decision of :func:`hybridsag.fusion.trust.assess`) replaces
    ``weights`` with its own, and when the judge's order does not hold for this query it
    switches off the rules that impose it (``judge_accept``, ``judge_order`` and the next-hop
    slots: the paths' fused votes then order what the judge scored too).

    With ``limit``, only the first ``limit`` hits of that list are returned, the same hits with
    the same ranks, rules and duplicates, for less work: the rules that read a chunk's text run
    over the hits that can still reach the first ``limit`` (:func:`rules_window`: the first
    ``limit`` plus the places a rule may lift a hit), and the copies are folded over those
    (:func:`collapse_window`; a hit further down is only looked up among their buckets). When
    copies in that window leave fewer than ``limit`` distinct texts, the window doubles.

    Raises:
        ValueError: a bad ``k``, ``depth``, weight, ``method``, ``normalisation``,
            ``pin_exact_titles`` or ``limit`` (the message names it).

    Example:
        >>> from hybridsag.fusion.types import ChunkView, Hit
        >>> runs = {"bm25": [Hit("a", "bm25", 1, 2.0, 2.0), Hit("b", "bm25", 2, 1.0, 1.0)]}
        >>> views = {"a": ChunkView("a", "r1", "Notes", "", "text"),
        ...          "b": ChunkView("b", "r2", "Fish", "", "爱吃鱼")}
        >>> [h.chunk_id for h in fuse(runs, query="fish", chunks=views)]
        ['b', 'a']
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive integer or None, got {limit!r}")
    if method not in METHODS:
        raise ValueError(f"unknown fusion method {method!r}; valid: {', '.join(METHODS)}")
    if normalisation not in NORMALISERS:
        raise ValueError(
            f"unknown score normalisation {normalisation!r}; valid: {', '.join(NORMALISERS)}"
        )
    next_hop = True
    if trust is not None:
        weights = trust.weights
        if not trust.judge_holds:
            judge_accept, judge_order, next_hop = None, False, False
    if method == "rrf":
        fused = rrf(runs, k=k, depth=depth, weights=weights)
    else:
        fused = convex(runs, weights=weights, depth=depth, method=normalisation)
    visible = [f for f in fused if f.chunk_id in chunks]
    need = limit
    while True:
        exact, others = rules_window(
            visible,
            query=query,
            chunks=chunks,
            pin_exact_titles=pin_exact_titles,
            strict_identifiers=strict_identifiers,
            judge_accept=judge_accept,
            judge_order=judge_order,
            next_hop=next_hop,
            need=need,
        )
        if limit is None or not others:  # the whole ruled list
            out = collapse_duplicates(exact, chunks) if collapse else exact
            return out if limit is None else out[:limit]
        if not collapse:
            return exact[:limit]
        window = collapse_window(exact, others, chunks, limit)
        if window is not None:
            return window
        assert need is not None
        need = max(2 * need, len(exact) + 1)
