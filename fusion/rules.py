"""Bounded, named re-ranking rules applied after RRF.

Every rule only reorders or removes hits (scores are never changed) and is recorded by name in
``FusedHit.rules`` of each hit it moved or classified. Every rule is **bounded**: it moves no
hit more than the places :data:`RULE_BOUNDS` states for it, up or down, from where the hit
stood before that rule ran (where a rule would move a hit further, the hit stops at its bound
and the others keep the rule's order as far as the bounds allow). The one promotion without an
upward bound is ``exact_title``: a title typed in full is pinned wherever fusion put it; what
it moves down, it moves by at most the number of pins.

- ``drop_heading_only``: the chunk's text is empty or only Markdown headings; removed.
- ``drop_stub``: the chunk's text holds nothing but markup (a lone ``:orphan:``, a
  ``.. toctree::`` block, front matter alone: :func:`~hybridsag.fusion.text.markdown.markup_only`);
  removed, as a heading-only chunk is (an index built before the chunker left such markup out
  still holds them).
- ``exact_title``: the normalised query equals the normalised title; pinned first.
- ``identifier_definition``: identifier query, the text defines it, or the chunk's own section
  heading (the last heading of its heading path) names it whole; tier 0.
- ``identifier_whole``: identifier query, the text mentions it whole; tier 1.
- ``identifier_heading_only``: identifier query, only the heading path or title has it whole;
  tier 2.
- ``identifier_partial``: identifier query, the text has it only inside a longer token; tier 3.
- ``next_hop_slot``: a path found the chunk by its next-hop query (``Hit.next_hop``); the other
  paths never ran that query, so the chunk is moved back up to the slot that path ranked it at.
- ``judge_accepted``: not an identifier query, a judge's probability (``Hit.judge_p``) reached
  the threshold; placed after the exact-title pins, in the judging path's rank order.
- ``judge_order``: not an identifier query, a judge scored the chunk; the judged hits are
  put back into the judge's order over the slots they hold (recorded on the hits that moved);
  a hit the judge rejected (its probability below the floor) is never moved up by it.
- ``version_heading``: the query names a version (``v2.3.1 release notes``) and the chunk lies
  in the section headed by that version; such chunks come first.
- ``other_language``: the chunk's prose is in another script than the query's while other hits
  are in the query's; it comes after them.
- ``exact_phrase``: the query asks for a literal string (a quoted phrase, or an error line such
  as ``npm ERR! code E404``) and the chunk holds it word for word; such chunks come first.

- ``duplicates``: not a re-ranking rule but a step of :func:`~hybridsag.fusion.fuse` after
  them (:func:`~hybridsag.fusion.dedupe.collapse_duplicates`): the hit's text is also elsewhere,
  and those copies are folded into it (``FusedHit.duplicates``).
- ``merge_adjacent``: the step after it (:func:`~hybridsag.fusion.results.merge_adjacent`):
  neighbouring chunks of the hit's section are hits too, and are merged into it
  (``FusedHit.merged``).
- ``resource_cap``: the last step (:func:`~hybridsag.fusion.results.cap_per_resource`): more
  hits of the hit's resource stood above it than ``max_per_resource``; it goes after the other
  resources' hits.

Hits in tier 3 without even a partial match get no identifier rule name. A dropped hit is not
returned, so its rule name is not seen by the caller (compare lengths to count drops).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from hybridsag.fusion.facts import facts_of
from hybridsag.fusion.text.markdown import markup_only
from hybridsag.fusion.text import (
    contains_phrase,
    contains_whole_identifier,
    defines_identifier,
    dominant_script,
    heading_defines_identifier,
    heading_names_version,
    hyphenated_name,
    literal_phrase,
    looks_like_identifier,
    normalize_title,
    version_in,
)
from hybridsag.fusion.types import ChunkView, FusedHit

__all__ = [
    "RULE_BOUNDS", "RULE_REASONS", "RULE_SWITCHES", "RuleBound", "RuleSettings", "apply_rules",
    "bounded", "rules_window",
]  # fmt: skip

#: One line per rule name, for the explain block of a result.
RULE_REASONS: Mapping[str, str] = {
    "drop_heading_only": "the chunk is only a heading",
    "drop_stub": "the chunk holds nothing but markup",
    "exact_title": "the query is this resource's title",
    "identifier_definition": "it defines the identifier the query names",
    "identifier_whole": "it mentions the query's identifier whole",
    "identifier_heading_only": "only its heading or title holds the query's identifier",
    "identifier_partial": "it holds the query's identifier only inside a longer name",
    "judge_accepted": "the judge said yes, so no other path's vote can push it down",
    "next_hop_slot": "a next-hop query the other paths never ran found it, so it keeps the rank "
    "that query gave it",
    "judge_order": "the judge scored it, so it takes the judge's order among the judged",
    "version_heading": "its section is headed by the version the query names",
    "other_language": "it is written in another script than the query, and other results are in "
    "the query's",
    "exact_phrase": "it holds the literal string the query asks for, word for word",
    "duplicates": "the same text is elsewhere too; those copies are listed with it, not as results",
    "merge_adjacent": "the neighbouring chunks of its section matched too; they are one result",
    "resource_cap": "more results of its file stood above it, so it waits after the other files'",
}

#: The steps of :func:`apply_rules` that ``off`` can switch off, by name: the two drops, the
#: exact-title pins, the identifier tiers (the four ``identifier_*`` rules, one step), the
#: judge rules, the next-hop slots and the three evidence partitions (``query_language`` is
#: the step whose rule name is ``other_language``). ``benchmarks/rule_ablation.py`` measures
#: each one's effect by switching it off.
RULE_SWITCHES = (
    "drop_heading_only", "drop_stub", "exact_title", "identifier_tiers", "judge_accepted",
    "next_hop_slot", "judge_order", "version_heading", "query_language", "exact_phrase",
)  # fmt: skip



@dataclass(frozen=True, slots=True)
class RuleBound:
    """How far one rule may move a hit from where it stood before the rule ran: at most ``up``
    places up and ``down`` places down. ``None`` is stated only for ``exact_title``: its pins
    go to the front however far down fusion put them (``up``), and the hits they pass move down
    by at most the number of pins (``pin_exact_titles``, ``down``)."""

    up: int | None
    down: int | None


#: The bound of every rule that moves hits (``drop_heading_only`` only removes; the hits after
#: a dropped one close the gap and keep their order; ``identifier_tiers`` is the four
#: ``identifier_*`` rules, one step). The judge rules and the next-hop slots are bounded above
#: the largest move ``benchmarks/rule_moves.py`` measured on musique100's default search
#: (judge_accepted 2 up and 3 down, next_hop_slot 33 and 44, judge_order 46 and 73 among the
#: judge's 50 to 100 candidates), so they keep the measured recall and stop only outliers. The
#: identifier tiers' bound binds: a hit BM25 put first, or a section headed by the identifier,
#: is never buried below a long list of mentions (a definition still rises 50 places). The
#: version heading and the exact phrase are evidence of the identifier tiers' kind and take
#: their bound; the query's language only prefers (5 places each way: a page in another
#: language that alone answers still shows on the first page).
RULE_BOUNDS: Mapping[str, RuleBound] = {
    "exact_title": RuleBound(up=None, down=None),
    "identifier_tiers": RuleBound(up=50, down=10),
    "judge_accepted": RuleBound(up=30, down=10),
    "next_hop_slot": RuleBound(up=50, down=60),
    "judge_order": RuleBound(up=60, down=100),
    "version_heading": RuleBound(up=50, down=10),
    "query_language": RuleBound(up=5, down=5),
    "exact_phrase": RuleBound(up=50, down=10),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleSettings:
    """The settings of one run of the rules (:func:`apply_rules` names each), checked once
    where built; :func:`rules_window` takes them whole.

    Raises:
        ValueError: ``pin_exact_titles`` below 0, ``judge_floor`` outside 0..1, or a name in
            ``off`` that is not in :data:`RULE_SWITCHES` (the message names it).
    """

    pin_exact_titles: int = 3
    strict_identifiers: bool = False
    judge_accept: float | None = None
    judge_order: bool = False
    next_hop: bool = True
    judge_floor: float = 0.0
    off: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.pin_exact_titles < 0:
            raise ValueError(f"pin_exact_titles must be >= 0, got {self.pin_exact_titles!r}")
        if not 0.0 <= self.judge_floor <= 1.0:
            raise ValueError(f"judge_floor must be in 0..1, got {self.judge_floor!r}")
        object.__setattr__(self, "off", frozenset(self.off))
        if unknown := self.off - set(RULE_SWITCHES):
            raise ValueError(
                f"unknown fusion rules {sorted(unknown)}; valid: {', '.join(RULE_SWITCHES)}"
            )


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
    judge_floor: float = 0.0,
    off: Collection[str] = (),
    trace: Callable[[str, Sequence[FusedHit], Sequence[FusedHit]], None] | None = None,
    limit: int | None = None,
) -> list[FusedHit]:
    """Re-rank fused hits with the bounded rules of the module docstring.

    Rules 3, 5, 6 and 7 each ask for an order and get it as far as their :data:`RULE_BOUNDS`
    allow (:func:`bounded`): no hit moves more places up or down than stated for that rule.
    In order:

    1. ``drop_heading_only``: hits whose chunk text ``is_heading_only`` are removed;
       ``drop_stub``: so are hits whose chunk text is otherwise ``markup_only``.
    2. ``exact_title``: when ``normalize_title(query)`` is not empty and equals
       ``normalize_title(chunk.title)``, the resource's lead chunk among the remaining hits (the
       lowest ``ChunkView.ordinal``: its introduction; the best-ranked one when ordinals are
       unknown) is pinned to the front; at most ``pin_exact_titles`` resources are pinned, in
       their fused order. Other chunks of a pinned resource are not pinned.
    3. Identifier tiers, only when ``looks_like_identifier(query)`` returns an identifier, or
       ``hyphenated_name(query)`` a name that a remaining hit's own heading defines (an
       option such as ``legacy-peer-deps``; ``state-of-the-art`` stays prose elsewhere): the
       hits not pinned are stably partitioned into tier 0 ``identifier_definition``
       (``defines_identifier`` on the text, or ``heading_defines_identifier`` on the heading
       path: the section headed by the identifier), tier 1 ``identifier_whole``
       (``contains_whole_identifier`` on the text), tier 2 ``identifier_heading_only`` (whole only
       in ``heading_path`` or ``title``), tier 3 the rest (``identifier_partial`` when the text
       holds the identifier as a case-sensitive substring). Fused order is kept within a tier;
       the partition is bounded (``RULE_BOUNDS["identifier_tiers"]``).
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
       counts their evidence twice; they still bring in what it never saw. A hit the judge
       rejected (``judge_p`` below ``judge_floor``) takes part only downwards: slot by slot,
       the best judge-ranked hit that may go there fills it, and a rejected hit may only go to
       its own slot or one below (issue 38: chunks the judge scored 0.03 were lifted from #12
       into the top 5 over hits no judge saw).

    Then, only when the query is not an identifier, three partitions of the kind the identifier
    tiers make, each stable and bounded (:data:`RULE_BOUNDS`), each only when both sides are
    non-empty:

    8. ``version_heading``: ``version_in(query)`` names a version; the hits in the section
       headed by it (``heading_names_version``) go first: that section is what the query asks
       for, however many other sections mention the version.
    9. ``query_language`` (rule name ``other_language``): ``dominant_script(query)`` is a script
       and at least one hit's text is in it; hits whose text is in another script go after the
       rest. An English question over a site that has English and Chinese pages wants the
       English one (issue 27 item 7); a page in another language still shows, at most 5 places
       down.
    10. ``exact_phrase``: ``literal_phrase(query)`` is a literal string (a quoted span, or an error
        line pasted whole); the hits whose text holds it word for word (``contains_phrase``, an
        FTS5 phrase match's reading) go first. Last, so that the exact error beats everything a
        paraphrase gained.

    A hit whose ``chunk_id`` is not in ``chunks`` cannot be judged: it is kept, never dropped or
    pinned, gets no rule name, sorts with tier 3 for an identifier query and goes after the
    hits rules 8 to 10 put first (so without such a rule firing, an identifier query or pins it
    keeps its exact place).

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
            hold for this query, or the question does not read as multi-hop).
        judge_floor: the judge probability below which rule 7 never moves a hit up (0: every
            judged hit takes part both ways).
        off: names of :data:`RULE_SWITCHES` to leave out (an ablation; none by default).
        trace: called with (bound name, hits before, the order the rule asked for) before each
            bounded step (``benchmarks/rule_moves.py`` measures the moves with it; with
            ``limit``, rules 8 to 10 and the identifier tiers show the window they ran over).
        limit: only the first ``limit`` hits of the result are wanted (:func:`rules_window`).

    Returns:
        A new list: ranks renumbered ``1..n``, scores and contributions unchanged, each hit's
        ``rules`` extended with the names of the rules that fired for it; with ``limit``, its
        first ``limit`` hits.

    Raises:
        ValueError: ``pin_exact_titles`` below 0, ``judge_floor`` outside 0..1, or a name in
            ``off`` that is not in :data:`RULE_SWITCHES`.

    Example:
        >>> from hybridsag.fusion.types import FusedHit, ChunkView
        >>> hits = [FusedHit("a", 1, 0.02, ()), FusedHit("b", 2, 0.01, ())]
        >>> views = {"a": ChunkView("a", "r1", "Notes", "", "x"),
        ...          "b": ChunkView("b", "r2", "我的喜好", "", "爱吃鱼")}
        >>> [h.chunk_id for h in apply_rules(hits, query="我的喜好", chunks=views)]
        ['b', 'a']
    """
    settings = RuleSettings(
        pin_exact_titles=pin_exact_titles, strict_identifiers=strict_identifiers,
        judge_accept=judge_accept, judge_order=judge_order, next_hop=next_hop,
        judge_floor=judge_floor, off=frozenset(off),
    )
    exact, _others = rules_window(
        fused, query=query, chunks=chunks, rules=settings, trace=trace, need=limit
    )
    return exact if limit is None else exact[:limit]


def rules_window(
    fused: Sequence[FusedHit],
    *,
    query: str,
    chunks: Mapping[str, ChunkView],
    rules: RuleSettings,
    trace: Callable[[str, Sequence[FusedHit], Sequence[FusedHit]], None] | None = None,
    need: int | None = None,
) -> tuple[list[FusedHit], list[FusedHit]]:
    """:func:`apply_rules` (its settings in ``rules``) for a caller that wants only the first
    ``need`` hits:
    ``(exact, others)``, where ``exact`` is the first ``min(need, n)`` hits of
    :func:`apply_rules`' result or more (the same hits, ranks ``1..len(exact)`` and rule
    names), and ``others`` every other hit it keeps, in no stated order, ranks and rule names
    not final; ``need=None``: ``(the whole result, [])``.

    Rules 1 to 7 (drops, pins, the judge and next-hop steps) read no text but the stored
    facts and the paths' ranks, and where a hit is wanted depends on every other hit's
    (a deep next-hop hit moves the slots of the hits above it), so they run over every hit.
    Rules 8 to 10 and the identifier tiers are stable partitions: whether one fires is read
    over every hit (stopping at the first hit of each side), but the order it asks for among
    the first ``w`` hits does not depend on the others, and a bounded step
    (:func:`bounded`) fills its first ``w - up`` slots from the first ``w`` hits alone. So they
    run over the first ``need`` hits plus the ``up`` bound of each step that fires (at most
    ``50 + 5 + 50`` more; the tiers' ``50``), and the first ``need`` of what they return is
    what every hit would have given.
    """
    if need is not None and need < 0:
        raise ValueError(f"need must be >= 0 or None, got {need!r}")
    off = rules.off

    kept = [hit for hit in fused if not _dropped(chunks.get(hit.chunk_id), off)]

    query_norm = normalize_title(query)
    title_match = {
        hit.chunk_id
        for hit in kept
        if (view := chunks.get(hit.chunk_id)) is not None
        and query_norm
        and _title_norm(view) == query_norm
    }
    pins = 0 if "exact_title" in off else rules.pin_exact_titles
    pinned, rest = _exact_title(kept, chunks, title_match, pins)
    want = None if need is None else max(0, need - len(pinned))

    def _step(name: str, before: list[FusedHit], desired: list[FusedHit]) -> list[FusedHit]:
        if name in off:
            return before
        if trace is not None:
            trace(name, before, desired)
        return bounded(before, desired, RULE_BOUNDS[name])

    others: list[FusedHit] = []
    ident = looks_like_identifier(query) or _defined_hyphenated(query, rest, chunks)
    if ident is None:
        offset = len(pinned)
        if rules.judge_accept is not None:
            rest = _step("judge_accepted", rest, _judge_accepted(rest, rules.judge_accept))
        if rules.next_hop:
            rest = _step("next_hop_slot", rest, _next_hop_others(rest, offset=offset))
        if rules.judge_order:
            rest = _step("judge_order", rest, _judge_order(rest, rules.judge_floor))
        rest, others = _evidence_steps(query, rest, chunks, _step, want)
    else:
        if rules.next_hop:
            rest = _step("next_hop_slot", rest, _next_hop_slots(rest, offset=len(pinned)))
        window = len(rest) if want is None else want + _up("identifier_tiers")
        tiered = [_identifier_tier(hit, chunks.get(hit.chunk_id), ident) for hit in rest[:window]]
        if (
            rules.strict_identifiers
            and not title_match
            and all(tier > _TIER_WHOLE for tier, _hit in tiered)
            and all(
                _identifier_tier(hit, chunks.get(hit.chunk_id), ident)[0] > _TIER_WHOLE
                for hit in rest[window:]
            )
        ):
            return [], []
        desired = [hit for _tier, hit in sorted(tiered, key=lambda item: item[0])]
        ruled = _step("identifier_tiers", rest[:window], desired)
        cut = len(ruled) if want is None or window >= len(rest) else want
        rest, others = ruled[:cut], ruled[cut:] + rest[window:]

    exact = [
        hit if hit.rank == position else dataclasses.replace(hit, rank=position)
        for position, hit in enumerate(pinned + rest, start=1)
    ]
    return exact, others


def _up(name: str) -> int:
    """The ``up`` bound of a partition step (each is bounded)."""
    up = RULE_BOUNDS[name].up
    assert up is not None
    return up


def bounded(
    before: Sequence[FusedHit], desired: Sequence[FusedHit], bound: RuleBound
) -> list[FusedHit]:
    """``desired`` (a reordering of ``before``, rule names added) as far as ``bound`` allows.

    Every hit ends at most ``bound.up`` places above and ``bound.down`` places below its place
    in ``before``; within that, the order closest to ``desired``: slot by slot, the hit whose
    last allowed slot this is, else the first hit of ``desired`` allowed this far up. Hits are
    matched by ``chunk_id`` (in order, for a repeated id). ``None`` bounds do not bind.

    >>> a, b, c = (FusedHit(x, i, 0.0, ()) for i, x in enumerate("abc", start=1))
    >>> [h.chunk_id for h in bounded([a, b, c], [c, a, b], RuleBound(up=1, down=1))]
    ['a', 'c', 'b']
    """
    n = len(before)
    if len(desired) != n:
        raise ValueError(f"bounded: {len(desired)} desired hits for {n} hits before")
    if all(a is b for a, b in zip(before, desired)):  # nothing asked to move
        return list(desired)
    up = n if bound.up is None else bound.up
    down = n if bound.down is None else bound.down
    places: dict[str, deque[int]] = {}
    for i, hit in enumerate(before):
        places.setdefault(hit.chunk_id, deque()).append(i)
    wish = [0] * n  # before-index -> desired index
    moved: list[FusedHit | None] = [None] * n
    for j, hit in enumerate(desired):
        queue = places.get(hit.chunk_id)
        if not queue:
            raise ValueError(f"bounded: {hit.chunk_id!r} is not among the hits before")
        i = queue.popleft()
        wish[i], moved[i] = j, hit
    out: list[FusedHit] = []
    heap: list[tuple[int, int]] = []
    placed = [False] * n
    released = 0
    for slot in range(n):
        while released < n and released <= slot + up:
            heapq.heappush(heap, (wish[released], released))
            released += 1
        due = slot - down
        if due >= 0 and not placed[due]:
            pick = due  # its last allowed slot
        else:
            while placed[heap[0][1]]:
                heapq.heappop(heap)
            pick = heapq.heappop(heap)[1]
        placed[pick] = True
        hit = moved[pick]
        assert hit is not None
        out.append(hit)
    return out


def _exact_title(
    hits: list[FusedHit],
    chunks: Mapping[str, ChunkView],
    title_match: set[str],
    limit: int,
) -> tuple[list[FusedHit], list[FusedHit]]:
    """Rule 2: (the pins, the rest in order). Each of the first ``limit`` resources whose title
    is the query gets its lead chunk pinned: the lowest ``ChunkView.ordinal`` among its hits
    (its introduction), or its best-ranked hit when ordinals are unknown."""
    lead: dict[str, FusedHit] = {}
    order: list[str] = []
    for hit in hits:
        if hit.chunk_id not in title_match:
            continue
        view = chunks[hit.chunk_id]
        rid = view.resource_id
        if rid not in lead:
            if len(order) >= limit:
                continue
            order.append(rid)
            lead[rid] = hit
        elif view.ordinal is not None:
            best = chunks[lead[rid].chunk_id].ordinal
            if best is None or view.ordinal < best:
                lead[rid] = hit
    pinned_ids = {lead[rid].chunk_id for rid in order}
    pinned = [_with_rules(lead[rid], ("exact_title",)) for rid in order]
    return pinned, [hit for hit in hits if hit.chunk_id not in pinned_ids]


def _next_hop_others(hits: list[FusedHit], *, offset: int) -> list[FusedHit]:
    """Rule 6 over the hits ``judge_accepted`` did not take (they keep their slots), with the
    accepted ones counted among the hits put ahead (``offset``)."""
    others = [i for i, hit in enumerate(hits) if "judge_accepted" not in hit.rules]
    if len(others) == len(hits):
        return _next_hop_slots(hits, offset=offset)
    slotted = _next_hop_slots(
        [hits[i] for i in others], offset=offset + len(hits) - len(others)
    )
    out = list(hits)
    for i, hit in zip(others, slotted):
        out[i] = hit
    return out


def _evidence_steps(
    query: str,
    hits: list[FusedHit],
    chunks: Mapping[str, ChunkView],
    step: Callable[[str, list[FusedHit], list[FusedHit]], list[FusedHit]],
    want: int | None = None,
) -> tuple[list[FusedHit], list[FusedHit]]:
    """Rules 8 to 10 for a query that is not an identifier, each one bounded step: the section
    of the version the query names first, then hits in the query's script before those in
    another, then the hits holding the query's literal string first (last, so that it wins).
    A step fires when both of its sides hold a hit (read over every hit); it runs over the
    first ``want`` hits and the ``up`` bounds of the steps that fire (:func:`rules_window`).
    Returns ``(the first hits, exactly; the others)``: every hit and none with ``want=None``."""
    version, script, phrase = version_in(query), dominant_script(query), literal_phrase(query)
    # (bound name, the test of the hits that go first, rule name of those, of the others)
    steps: list[tuple[str, Callable[[ChunkView], bool], str | None, str | None]] = []
    if version is not None:
        steps.append(("version_heading", lambda v: heading_names_version(v.heading_path, version),
                      "version_heading", None))  # fmt: skip
    if script is not None and any(
        (view := chunks.get(hit.chunk_id)) is not None and facts_of(view).script == script
        for hit in hits
    ):
        steps.append(("query_language", lambda v: facts_of(v).script in (None, script),
                      None, "other_language"))  # fmt: skip
    if phrase is not None:
        steps.append(("exact_phrase", lambda v: contains_phrase(v.text, phrase),
                      "exact_phrase", None))  # fmt: skip
    fired = [s for s in steps if _splits(hits, chunks, s[1])]
    window = len(hits) if want is None else want + sum(_up(name) for name, *_ in fired)
    ruled = hits[:window]
    for name, test, front_rule, back_rule in fired:
        ruled = step(
            name, ruled, _front(ruled, chunks, test, front_rule=front_rule, back_rule=back_rule)
        )
    if want is None or window >= len(hits):
        return ruled, []
    return ruled[:want], ruled[want:] + hits[window:]


def _splits(hits: list[FusedHit], chunks: Mapping[str, ChunkView],
            test: Callable[[ChunkView], bool]) -> bool:  # fmt: skip
    """Whether ``test`` puts some of ``hits`` first and leaves some after (a hit without a
    view goes after), read until one of each is seen."""
    front = back = False
    for hit in hits:
        view = chunks.get(hit.chunk_id)
        if view is not None and test(view):
            front = True
        else:
            back = True
        if front and back:
            return True
    return False


def _front(
    hits: list[FusedHit],
    chunks: Mapping[str, ChunkView],
    test: Callable[[ChunkView], bool],
    *,
    front_rule: str | None = None,
    back_rule: str | None = None,
) -> list[FusedHit]:
    """The hits whose chunk passes ``test`` first, the others after, each side in its order,
    named ``front_rule`` and ``back_rule`` (a hit without a view goes after). The caller has
    read that the step fires (:func:`_splits`, over every hit): a window of them may hold one
    side only, and is named all the same."""
    front: list[FusedHit] = []
    back: list[FusedHit] = []
    for hit in hits:
        view = chunks.get(hit.chunk_id)
        (front if view is not None and test(view) else back).append(hit)
    if front_rule is not None:
        front = [_with_rules(hit, (front_rule,)) for hit in front]
    if back_rule is not None:
        back = [_with_rules(hit, (back_rule,)) for hit in back]
    return front + back


def _defined_hyphenated(
    query: str, hits: list[FusedHit], chunks: Mapping[str, ChunkView]
) -> str | None:
    """The query's hyphenated name when one of ``hits`` is the section its heading defines."""
    name = hyphenated_name(query)
    if name is None:
        return None
    for hit in hits:
        view = chunks.get(hit.chunk_id)
        if view is not None and heading_defines_identifier(view.heading_path, name):
            return name
    return None


def _identifier_tier(
    hit: FusedHit, view: ChunkView | None, ident: str
) -> tuple[int, FusedHit]:
    """The hit's identifier tier and the hit with that tier's rule name appended."""
    if view is None:
        return _TIER_REST, hit
    if defines_identifier(view.text, ident) or heading_defines_identifier(
        view.heading_path, ident
    ):
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


def _judge_accepted(hits: list[FusedHit], threshold: float) -> list[FusedHit]:
    """Rule 5: the accepted hits in the judging path's rank order, then the others in order."""
    accepted: list[tuple[int, FusedHit]] = []
    others: list[FusedHit] = []
    for hit in hits:
        judged = _judge_p(hit)
        if judged is not None and judged[0] >= threshold:
            accepted.append((judged[1], _with_rules(hit, ("judge_accepted",))))
        else:
            others.append(hit)
    accepted.sort(key=lambda item: item[0])
    return [hit for _rank, hit in accepted] + others


def _judge_order(hits: list[FusedHit], floor: float = 0.0) -> list[FusedHit]:
    """Rule 7: the judged hits, in the judging path's rank order, refill the slots they hold;
    a hit judged below ``floor`` never goes to a slot above its own. Slot by slot, the best
    judge-ranked hit allowed there takes it: a hit at or above the floor always is, a rejected
    one from its own slot on (one of the hits whose own slot is this one or above is always
    left, so every slot is filled)."""
    judged = sorted(
        (p_rank[1], i, p_rank[0] >= floor)
        for i, hit in enumerate(hits)
        if (p_rank := _judge_p(hit)) is not None
    )
    out = list(hits)
    slots = sorted(i for _rank, i, _up in judged)
    waiting = list(judged)
    for slot in slots:
        pick = next(k for k, (_r, i, up) in enumerate(waiting) if up or i <= slot)
        _rank, i, _up = waiting.pop(pick)
        out[slot] = hits[i] if slot == i else _with_rules(hits[i], ("judge_order",))
    return out


def _dropped(view: ChunkView | None, off: frozenset[str]) -> bool:
    """Rule 1: the chunk is only headings (``drop_heading_only``: its stored facts) or only
    other markup (``drop_stub``: :func:`~hybridsag.fusion.text.markdown.markup_only`, which reads
    no further than the first letter or digit of a text that starts with one), and that drop
    is not switched off."""
    if view is None:
        return False
    if facts_of(view).heading_only:
        return "drop_heading_only" not in off
    return "drop_stub" not in off and markup_only(view.text)


def _title_norm(view: ChunkView) -> str:
    """The view's normalised title: the one its store keeps, else computed."""
    return view.title_norm if view.title_norm is not None else normalize_title(view.title)


def _with_rules(hit: FusedHit, names: tuple[str, ...]) -> FusedHit:
    return dataclasses.replace(hit, rules=hit.rules + names)
