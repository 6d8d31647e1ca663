"""``fuse()``: convex fusion (the default) or weighted RRF, then the bounded rules, then copies
of one text folded into one result, neighbouring chunks of a section merged and a few results
per resource before the others: the one fusion step every caller shares."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from hybridsag.fusion.convex import NORMALISERS, convex
from hybridsag.fusion.dedupe import collapse_duplicates, collapse_window
from hybridsag.fusion.rrf import rrf
from hybridsag.fusion.results import cap_per_resource, merge_adjacent
from hybridsag.fusion.rules import RULE_SWITCHES, RuleSettings, rules_window
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
    limit: int | None = None,
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

    With ``limit``, only the first ``limit`` hits of that list are returned, the same hits with
    the same ranks, rules and duplicates, for less work: the rules that read a chunk's text run
    over the hits that can still reach the first ``limit`` (:func:`rules_window`: the first
    ``limit`` plus the places a rule may lift a hit), and the copies are folded over those
    (:func:`collapse_window`; a hit further down is only looked up among their buckets). When
    copies in that window leave fewer than ``limit`` distinct texts, the window doubles. The
    merging of neighbours and the per-resource cap can change a first result from any hit
    further down (a later neighbour joins it, a later hit of its resource is listed in its
    ``capped``): where no two visible hits are neighbours in a section and no resource has
    more visible hits than ``max_per_resource``, neither changes a hit and the window stands;
    where no neighbours are among fusion's first ``2 * limit`` hits, the window, merged and
    capped, stands when no later hit can change it (:func:`_window_holds`); else (a
    documentation folder's sections) the whole list is fused and its first ``limit`` returned.

    Raises:
        ValueError: a bad ``k``, ``depth``, weight, ``method``, ``normalisation``,
            ``pin_exact_titles``, ``judge_floor``, ``max_per_resource`` or ``limit``, or a
            name in ``off`` that is not in :data:`STEPS` (the message names it).

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
    off = frozenset(off)
    if unknown := off - set(STEPS):
        raise ValueError(f"unknown fusion steps {sorted(unknown)}; valid: {', '.join(STEPS)}")
    if max_per_resource < 0:
        raise ValueError(f"max_per_resource must be >= 0, got {max_per_resource!r}")
    if trust is not None:
        weights = trust.weights
        if not trust.judge_holds:
            judge_accept, judge_order, next_hop = None, False, False
    rules = RuleSettings(
        pin_exact_titles=pin_exact_titles, strict_identifiers=strict_identifiers,
        judge_accept=judge_accept, judge_order=judge_order, next_hop=next_hop,
        judge_floor=judge_floor, off=off & set(RULE_SWITCHES),
    )
    if method == "rrf":
        fused = rrf(runs, k=k, depth=depth, weights=weights)
    else:
        fused = convex(runs, weights=weights, depth=depth, method=normalisation)
    visible = [f for f in fused if f.chunk_id in chunks]
    folding = collapse and "duplicates" not in off
    merging = "merge_adjacent" not in off
    capping = bool(max_per_resource) and "resource_cap" not in off

    def ruled(want: int | None) -> tuple[list[FusedHit], bool]:
        """The ruled and folded list's first ``want`` hits or more (all: ``None``), and
        whether that is the whole list."""
        need = want
        while True:
            exact, others = rules_window(
                visible,
                query=query,
                chunks=chunks,
                rules=rules,
                need=need,
            )
            if want is None or not others:  # the whole ruled list
                return (collapse_duplicates(exact, chunks) if folding else exact), True
            if not folding:
                return exact, False
            window = collapse_window(exact, others, chunks, want)
            if window is not None:
                return window, False
            assert need is not None
            need = max(2 * need, len(exact) + 1)

    def regrouped(hits: list[FusedHit]) -> list[FusedHit]:
        if merging:
            hits = merge_adjacent(hits, chunks)
        if capping:
            hits = cap_per_resource(hits, chunks, cap=max_per_resource)
        return hits

    if limit is None:
        return regrouped(ruled(None)[0])
    paired = _neighbours(visible, chunks) if merging else set()
    if not paired and not (capping and _over_cap(visible, chunks, max_per_resource)):
        return ruled(limit)[0][:limit]  # neither step can change a hit: the window as it is
    if not any(f.chunk_id in paired for f in visible[: 2 * limit]):
        # no neighbours among the first hits fusion made (a passage set's long passages, not a
        # documentation folder's sections): the window mostly holds; it stands when it does
        hits, whole = ruled(limit)
        out = regrouped(hits)
        if whole or _window_holds(
            out, hits, visible, chunks, limit, merging, max_per_resource * capping
        ):
            return out[:limit]
    return regrouped(ruled(None)[0])[:limit]


def _neighbours(visible: Sequence[FusedHit], chunks: Mapping[str, ChunkView]) -> set[str]:
    """The chunk ids of the ``visible`` hits that have a neighbouring chunk of their section
    among them (what :func:`~hybridsag.fusion.results.merge_adjacent` may merge)."""
    at = {
        (v.resource_id, v.heading_path, v.ordinal): f.chunk_id
        for f in visible
        if (v := chunks[f.chunk_id]).ordinal is not None
    }
    return {
        c
        for (r, h, o), c in at.items()
        if (r, h, o - 1) in at or (r, h, o + 1) in at
    }


def _over_cap(visible: Sequence[FusedHit], chunks: Mapping[str, ChunkView], cap: int) -> bool:
    """Whether a resource has more than ``cap`` of the ``visible`` hits (what
    :func:`~hybridsag.fusion.results.cap_per_resource` may hold back)."""
    counts: dict[str, int] = {}
    for f in visible:
        rid = chunks[f.chunk_id].resource_id
        counts[rid] = counts.get(rid, 0) + 1
        if counts[rid] > cap:
            return True
    return False


def _window_holds(
    out: Sequence[FusedHit],
    window: Sequence[FusedHit],
    visible: Sequence[FusedHit],
    chunks: Mapping[str, ChunkView],
    limit: int,
    merging: bool,
    cap: int,
) -> bool:
    """Whether ``out``, the merged and capped ``window`` (the first hits of the ruled and
    folded list), begins with the first ``limit`` results the whole list would give: it has
    ``limit`` results none of which the cap moved down (a hit after the window may stand
    before those), no hit after the window (every ``visible`` hit not in it nor folded into
    it: a superset) neighbours a chunk of the window in its section (it would join that
    chunk's result, and may join two of them), and with ``cap`` above 0, no resource that
    has a result in ``out`` has more hits after the window than its ``cap`` leaves room for
    (they would be held back and listed on its best result, or take a place)."""
    if len(out) < limit or any("resource_cap" in h.rules for h in out[:limit]):
        return False
    inside = {c for h in window for c in (h.chunk_id, *h.duplicates)}
    later = [chunks[f.chunk_id] for f in visible if f.chunk_id not in inside]
    if merging:
        members = {
            (v.resource_id, v.heading_path, v.ordinal)
            for h in window
            if (v := chunks.get(h.chunk_id)) is not None and v.ordinal is not None
        }
        for v in later:
            if v.ordinal is not None and (
                (v.resource_id, v.heading_path, v.ordinal - 1) in members
                or (v.resource_id, v.heading_path, v.ordinal + 1) in members
            ):
                return False
    if cap:
        shown: dict[str, int] = {}
        for h in out:
            if (v := chunks.get(h.chunk_id)) is not None:
                shown[v.resource_id] = shown.get(v.resource_id, 0) + 1
        more: dict[str, int] = {}
        for v in later:
            if v.resource_id in shown:
                more[v.resource_id] = more.get(v.resource_id, 0) + 1
        if any(shown[r] + n > cap for r, n in more.items()):
            return False
    return True
