"""``fuse()``: weighted RRF then the bounded rules, the one fusion step every caller shares."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hybridsag.fusion.rrf import rrf
from hybridsag.fusion.rules import apply_rules
from hybridsag.fusion.types import ChunkView, FusedHit, Hit

__all__ = ["fuse"]


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
) -> list[FusedHit]:
    """Fuse the paths' lists the way a search does: :func:`rrf`, then only the hits whose chunk
    is in ``chunks`` (the caller leaves out what is deleted or filtered away), then
    :func:`apply_rules`. ``hybridsag eval --tune-weights`` scores its grid with this function,
    so the recall it prints is the recall a search with the chosen settings gets.

    Raises:
        ValueError: a bad ``k``, ``depth``, weight or ``pin_exact_titles`` (the message names it).

    Example:
        >>> from hybridsag.fusion.types import ChunkView, Hit
        >>> runs = {"bm25": [Hit("a", "bm25", 1, 2.0, 2.0), Hit("b", "bm25", 2, 1.0, 1.0)]}
        >>> views = {"a": ChunkView("a", "r1", "Notes", "", "text"),
        ...          "b": ChunkView("b", "r2", "Fish", "", "爱吃鱼")}
        >>> [h.chunk_id for h in fuse(runs, query="fish", chunks=views)]
        ['b', 'a']
    """
    fused = rrf(runs, k=k, depth=depth, weights=weights)
    return apply_rules(
        [f for f in fused if f.chunk_id in chunks],
        query=query,
        chunks=chunks,
        pin_exact_titles=pin_exact_titles,
        strict_identifiers=strict_identifiers,
        judge_accept=judge_accept,
        judge_order=judge_order,
    )
