"""Bounded, named re-ranking rules applied after RRF.

Every rule only reorders or removes hits (scores are never changed) and is recorded by name in
``FusedHit.rules`` of each hit it moved or classified:

- ``drop_heading_only``: the chunk's text is empty or only Markdown headings; removed.
- ``exact_title``: the normalised query equals the normalised title; pinned first.
- ``identifier_definition``: identifier query, the text defines it; tier 0.
- ``identifier_whole``: identifier query, the text mentions it whole; tier 1.
- ``identifier_heading_only``: identifier query, only the heading path or title has it whole;
  tier 2.
- ``identifier_partial``: identifier query, the text has it only inside a longer token; tier 3.
- ``next_hop_slot``: a path found the chunk by its next-hop query (``Hit.next_hop``); the other
  paths never ran that query, so the chunk is moved back up to the slot that path ranked it at.
- ``judge_accepted``: not an identifier query, a judge's probability (``Hit.judge_p``) reached
  the threshold; placed after the exact-title pins, in the judging path's rank order.
- ``judge_order``: not an identifier query, a judge scored the chunk; the judged hits are
  put back into the judge's order over the slots they hold (recorded on the hits that moved).

Hits in tier 3 without even a partial match get no identifier rule name. A dropped hit is not
returned, so its rule name is not seen by the caller (compare lengths to count drops).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Mapping, Sequence

from hybridsag.fusion.text import (
    contains_whole_identifier,
    defines_identifier,
    is_heading_only,
    looks_like_identifier,
    normalize_title,
)
from hybridsag.fusion.types import ChunkView, FusedHit

__all__ = ["RULE_REASONS", "apply_rules"]

#: One line per rule name, for the explain block of a result.
RULE_REASONS: Mapping[str, str] = {
    "drop_heading_only": "the chunk is only a heading",
    "exact_title": "the query is this resource's title",
    "identifier_definition": "it defines the identifier the query names",
    "identifier_whole": "it mentions the query's identifier whole",
    "identifier_heading_only": "only its heading or title holds the query's identifier",
    "identifier_partial": "it holds the query's identifier only inside a longer name",
    "judge_accepted": "the judge said yes, so no other path's vote can push it down",
    "next_hop_slot": "a next-hop query the other paths never ran found it, so it keeps the rank "
    "that query gave it",
    "judge_order": "the judge scored it, so it takes the judge's order among the judged",
}

_TIER_DEFINITION = 0
_TIER_WHOLE = 1
_TIER_HEADING = 2
_TIER_REST = 3


def apply_rules(
    fused: Sequence[FusedHit],
    *,
    query: str,
    chunks: Mapping[str, ChunkView],
    pin_exact_titles: int = 3,
    strict_identifiers: bool = False,
    judge_accept: float | None = None,
    judge_order: bool = False,
    next_hop: bool = True,
) -> list[FusedHit]:
    """Re-rank fused hits with the bounded rules of the module docstring.

    In order:

    1. ``drop_heading_only``: hits whose chunk text ``is_heading_only`` are removed.
    2. ``exact_title``: when ``normalize_title(query)`` is not empty and equals
       ``normalize_title(chunk.title)``, the best-ranked remaining chunk of that resource is pinned
       to the front; at most ``pin_exact_titles`` resources are pinned, in their fused order.
       Other chunks of a pinned resource are not pinned.
    3. Identifier tiers, only when ``looks_like_identifier(query)`` returns an identifier: the
       hits not pinned are stably partitioned into tier 0 ``identifier_definition``
       (``defines_identifier`` on the text), tier 1 ``identifier_whole``
       (``contains_whole_identifier`` on the text), tier 2 ``identifier_heading_only`` (whole only
       in ``heading_path`` or ``title``), tier 3 the rest (``identifier_partial`` when the text
       holds the identifier as a case-sensitive substring). Fused order is kept within a tier.
    4. ``strict_identifiers``: for an identifier query, when no remaining hit is in tier 0 or 1
       and none has an exact title match (pinned or not), the whole result is ``[]``.
    5. ``judge_accepted`` (only when ``judge_accept`` is given and the query is not an identifier):
       hits a judge answered "yes" for (the judged contribution's ``judge_p >= judge_accept``, see
       :attr:`FusedHit.judged`) come next after the pins, in the judging path's rank order. The
       judge has already weighed the lexical, dense and bridge evidence of these passages; another
       path's rank must not push an accepted passage below one the judge rejected. Everything else
       keeps its fused order after them.
    6. ``next_hop_slot``: a hit that a path found by its next-hop query (``Hit.next_hop``: a
       SAG2 expansion round's query) is never left below that path's rank for it: with
       ``slot = next_hop_rank`` minus the hits put ahead by rules 2 and 5, a hit further down
       is moved up to that slot (after any such hit already holding it) and gets the rule name.
       RRF reads a path's silence as a vote against a chunk, but the other paths never ran the
       next-hop query: their votes may still lift such a chunk, their silence may not sink it.
       The other hits keep their fused order. For an identifier query it runs before the tiers
       (which then partition stably), otherwise after rule 5.
    7. ``judge_order`` (only when ``judge_order`` is true and the query is not an identifier): the
       hits a judge scored (a contribution with ``judge_p``) keep the slots they hold after rules 5
       and 6, but are put into the judging path's rank order over those slots; the hits no judge saw
       keep their own slots. The judge has weighed every passage it scored on the lexical, dense and
       title evidence the other paths vote with, so letting those paths re-rank what it judged
       counts their evidence twice; they still bring in what it never saw.

    A hit whose ``chunk_id`` is not in ``chunks`` cannot be judged: it is kept, never dropped or
    pinned, gets no rule name, and sorts with tier 3 for an identifier query (so without an
    identifier query or pins it keeps its exact place).

    Args:
        fused: hits in fused order (normally ``rrf()``'s output).
        query: the user's query.
        chunks: chunk_id -> what the rules may read of that chunk.
        pin_exact_titles: most resources to pin by exact title, ``>= 0`` (``0`` disables).
        strict_identifiers: return nothing for an identifier query without an exact match.
        judge_accept: the judge probability from which a judged hit counts as accepted (``None``
            disables rule 5).
        judge_order: rule 7 on or off.
        next_hop: rule 6 on or off (off when the trust step found the judge's order does not
            hold for this query).

    Returns:
        A new list: ranks renumbered ``1..n``, scores and contributions unchanged, each hit's
        ``rules`` extended with the names of the rules that fired for it.

    Raises:
        ValueError: ``pin_exact_titles`` below 0.

    Example:
        >>> from hybridsag.fusion.types import FusedHit, ChunkView
        >>> hits = [FusedHit("a", 1, 0.02, ()), FusedHit("b", 2, 0.01, ())]
        >>> views = {"a": ChunkView("a", "r1", "Notes", "", "x"),
        ...          "b": ChunkView("b", "r2", "我的喜好", "", "爱吃鱼")}
        >>> [h.chunk_id for h in apply_rules(hits, query="我的喜好", chunks=views)]
        ['b', 'a']
    """
    if pin_exact_titles < 0:
        raise ValueError(f"pin_exact_titles must be >= 0, got {pin_exact_titles!r}")

    kept: list[tuple[FusedHit, ChunkView | None]] = []
    for hit in fused:
        view = chunks.get(hit.chunk_id)
        if view is not None and is_heading_only(view.text):
            continue
        kept.append((hit, view))

    query_norm = normalize_title(query)
    title_matches = [
        view is not None and bool(query_norm) and normalize_title(view.title) == query_norm
        for _hit, view in kept
    ]

    pinned: list[FusedHit] = []
    pinned_resources: set[str] = set()
    rest: list[tuple[FusedHit, ChunkView | None]] = []
    for (hit, view), is_title_match in zip(kept, title_matches):
        if (
            is_title_match
            and view is not None
            and view.resource_id not in pinned_resources
            and len(pinned_resources) < pin_exact_titles
        ):
            pinned_resources.add(view.resource_id)
            pinned.append(_with_rules(hit, ("exact_title",)))
        else:
            rest.append((hit, view))

    ident = looks_like_identifier(query)
    if ident is None:
        accepted: list[FusedHit] = []
        others = [hit for hit, _view in rest]
        if judge_accept is not None:
            accepted, others = _judge_accepted(others, judge_accept)
        if next_hop:
            others = _next_hop_slots(others, offset=len(pinned) + len(accepted))
        ordered_rest = accepted + others
        if judge_order:
            ordered_rest = _judge_order(ordered_rest)
    else:
        views = {hit.chunk_id: view for hit, view in rest}
        slotted = [hit for hit, _view in rest]
        if next_hop:
            slotted = _next_hop_slots(slotted, offset=len(pinned))
        tiered = [_identifier_tier(hit, views[hit.chunk_id], ident) for hit in slotted]
        if (
            strict_identifiers
            and not any(title_matches)
            and all(tier > _TIER_WHOLE for tier, _hit in tiered)
        ):
            return []
        tiered.sort(key=lambda item: item[0])
        ordered_rest = [hit for _tier, hit in tiered]

    return [
        dataclasses.replace(hit, rank=position)
        for position, hit in enumerate(pinned + ordered_rest, start=1)
    ]


def _identifier_tier(
    hit: FusedHit, view: ChunkView | None, ident: str
) -> tuple[int, FusedHit]:
    """The hit's identifier tier and the hit with that tier's rule name appended."""
    if view is None:
        return _TIER_REST, hit
    if defines_identifier(view.text, ident):
        return _TIER_DEFINITION, _with_rules(hit, ("identifier_definition",))
    if contains_whole_identifier(view.text, ident):
        return _TIER_WHOLE, _with_rules(hit, ("identifier_whole",))
    if contains_whole_identifier(view.heading_path, ident) or contains_whole_identifier(
        view.title, ident
    ):
        return _TIER_HEADING, _with_rules(hit, ("identifier_heading_only",))
    if ident in view.text:
        return _TIER_REST, _with_rules(hit, ("identifier_partial",))
    return _TIER_REST, hit


def _next_hop_slots(hits: list[FusedHit], *, offset: int) -> list[FusedHit]:
    """Rule 6: each next-hop hit at ``min(its position, next_hop_rank - offset)``."""
    targets = []
    for i, hit in enumerate(hits):
        rank = hit.next_hop_rank
        if rank is not None:
            targets.append((min(i + 1, rank - offset), i))
    if not targets:
        return hits
    due = deque(sorted(targets))
    out: list[FusedHit] = []

    def place(*, all_left: bool = False) -> None:
        while due and (all_left or due[0][0] <= len(out) + 1):
            target, i = due.popleft()
            out.append(_with_rules(hits[i], ("next_hop_slot",)) if target < i + 1 else hits[i])

    for hit in hits:
        if hit.next_hop_rank is None:
            place()
            out.append(hit)
    place(all_left=True)
    return out


def _judge_p(hit: FusedHit) -> tuple[float, int] | None:
    """(judge probability, the judging path's rank) of a judged hit, else ``None``."""
    judged = hit.judged
    if judged is None or judged.judge_p is None:
        return None
    return judged.judge_p, judged.rank


def _judge_accepted(
    hits: list[FusedHit], threshold: float
) -> tuple[list[FusedHit], list[FusedHit]]:
    """Rule 5: (the accepted hits in the judging path's rank order, the others in order)."""
    accepted: list[tuple[int, FusedHit]] = []
    others: list[FusedHit] = []
    for hit in hits:
        judged = _judge_p(hit)
        if judged is not None and judged[0] >= threshold:
            accepted.append((judged[1], _with_rules(hit, ("judge_accepted",))))
        else:
            others.append(hit)
    accepted.sort(key=lambda item: item[0])
    return [hit for _rank, hit in accepted], others


def _judge_order(hits: list[FusedHit]) -> list[FusedHit]:
    """Rule 7: the judged hits, in the judging path's rank order, refill the slots they hold."""
    judged = sorted(
        (p_rank[1], i) for i, hit in enumerate(hits) if (p_rank := _judge_p(hit)) is not None
    )
    out = list(hits)
    slots = sorted(i for _rank, i in judged)
    for slot, (_rank, i) in zip(slots, judged):
        out[slot] = hits[i] if slot == i else _with_rules(hits[i], ("judge_order",))
    return out


def _with_rules(hit: FusedHit, names: tuple[str, ...]) -> FusedHit:
    return dataclasses.replace(hit, rules=hit.rules + names)
