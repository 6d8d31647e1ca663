"""``fuse()``: convex fusion (the default) or weighted RRF, then the bounded rules, then copies
of one text folded into one result, neighbouring chunks of a section merged and a few results
per resource before the others: the one fusion step every caller shares."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from hybridsag.fusion.convex import NORMALISERS, convex
from hybridsag.fusion.dedupe import collapse_duplicates
from hybridsag.fusion.rrf import rrf
from hybridsag.fusion.results import cap_per_resource, merge_adjacent
from hybridsag.fusion.rules import RULE_SWITCHES, apply_rules
from hybridsag.fusion.trust import Trust
from hybridsag.fusion.types import ChunkView, FusedHit, Hit

__all__ = ["METHODS", "STEPS", "fuse"]

#: The fusion functions :func:`fuse` knows: weighted RRF and the convex score combination.
METHODS = ("rrf", "convex")
#: Every step of :func:`fuse` after the fusion function that ``off`` can switch off: the rules
#: (:data:`~hybridsag.fusion.rules.RULE_SWITCHES`), then ``duplicates``, ``merge_adjacent`` and
#: ``resource_cap``.
STEPS = (*RULE_SWITCHES, "duplicates", "merge_adjacent", "resource_cap")


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
    next_hop: bool = True,
    judge_floor: float = 0.0,
    max_per_resource: int = 0,
    off: Collection[str] = (),
) -> list[FusedHit]:
    """Fuse the paths' lists the way a search does: :func:`rrf` (``method="rrf"``) or
    :func:`~hybridsag.fusion.convex.convex` (``method="convex"``, scores normalised per query
    by ``normalisation``), then only the hits whose chunk is in ``chunks`` (the caller leaves
    out what is deleted or filtered away), then :func:`apply_rules` (``next_hop``,
    ``judge_floor``), then (with ``collapse``)
    :func:`~hybridsag.fusion.dedupe.collapse_duplicates`: each copy of a chunk's text is folded
    into its best-ranked copy's ``FusedHit.duplicates``; then
    :func:`~hybridsag.fusion.results.merge_adjacent` (neighbouring chunks of one section are
    one result) and, with ``max_per_resource`` above 0,
    :func:`~hybridsag.fusion.results.cap_per_resource`. ``off`` names steps of :data:`STEPS`
    to leave out (an ablation). A search's fusion step
    (``hybridsag.search.fuse_step``) calls it, and so does every offline grid through that step,
    so the recall a grid prints is the recall a search with the chosen settings gets.

    ``trust`` (the per-query decision of :func:`hybridsag.fusion.trust.assess`) replaces
    ``weights`` with its own, and when the judge's order does not hold for this query it
    switches off the rules that impose it (``judge_accept``, ``judge_order`` and the next-hop
    slots: the paths' fused votes then order what the judge scored too). ``next_hop`` false
    switches the next-hop slots off whatever the trust (the caller found the question is not
    multi-hop).

    Raises:
        ValueError: a bad ``k``, ``depth``, weight, ``method``, ``normalisation``,
            ``pin_exact_titles``, ``judge_floor`` or ``max_per_resource``, or a name in
            ``off`` that is not in :data:`STEPS` (the message names it).

    Example:
        >>> from hybridsag.fusion.types import ChunkView, Hit
        >>> runs = {"bm25": [Hit("a", "bm25", 1, 2.0, 2.0), Hit("b", "bm25", 2, 1.0, 1.0)]}
        >>> views = {"a": ChunkView("a", "r1", "Notes", "", "text"),
        ...          "b": ChunkView("b", "r2", "Fish", "", "爱吃鱼")}
        >>> [h.chunk_id for h in fuse(runs, query="fish", chunks=views)]
        ['b', 'a']
    """
    if method not in METHODS:
        raise ValueError(f"unknown fusion method {method!r}; valid: {', '.join(METHODS)}")
    if normalisation not in NORMALISERS:
        raise ValueError(
            f"unknown score normalisation {normalisation!r}; valid: {', '.join(NORMALISERS)}"
        )
    off = frozenset(off)
    if unknown := off - set(STEPS):
        raise ValueError(f"unknown fusion steps {sorted(unknown)}; valid: {', '.join(STEPS)}")
    if max_per_resource < 0:
        raise ValueError(f"max_per_resource must be >= 0, got {max_per_resource!r}")
    if trust is not None:
        weights = trust.weights
        if not trust.judge_holds:
            judge_accept, judge_order, next_hop = None, False, False
    if method == "rrf":
        fused = rrf(runs, k=k, depth=depth, weights=weights)
    else:
        fused = convex(runs, weights=weights, depth=depth, method=normalisation)
    ruled = apply_rules(
        [f for f in fused if f.chunk_id in chunks],
        query=query,
        chunks=chunks,
        pin_exact_titles=pin_exact_titles,
        strict_identifiers=strict_identifiers,
        judge_accept=judge_accept,
        judge_order=judge_order,
        next_hop=next_hop,
        judge_floor=judge_floor,
        off=off & set(RULE_SWITCHES),
    )
    if collapse and "duplicates" not in off:
        ruled = collapse_duplicates(ruled, chunks)
    if "merge_adjacent" not in off:
        ruled = merge_adjacent(ruled, chunks)
    if max_per_resource and "resource_cap" not in off:
        ruled = cap_per_resource(ruled, chunks, cap=max_per_resource)
    return ruled
