"""The fused list as a reader wants it: a section once, a few results per file, scores that fall.

Two steps run last in :func:`~hybridsag.fusion.fuse`, after the rules and the folding of
copies; each only regroups or reorders hits (never a fused score), and names what it did in the
hits it changed:

- ``merge_adjacent`` (:func:`merge_adjacent`): chunks that are neighbours in one section of one
  resource (consecutive :attr:`ChunkView.ordinal`, the same resource and heading path) are one
  result. The best-ranked of them keeps its place and lists the others in
  :attr:`FusedHit.merged`; the reader gets the section's text once with its whole line range,
  instead of its fragments filling the first places (issue 38: lines 51-52, 52-63 and 63-71 of
  one section stood at #1, #2 and #4 and pushed the second answer page to #15). A merged result
  holds at most :data:`MERGED_CHARS` characters of chunk text.
- ``resource_cap`` (:func:`cap_per_resource`): at most ``cap`` results of one resource stand
  among the others; its further results go after every other result, in their order, so the
  next resources fill the first places, and nothing vanishes: the resource's best result lists
  them in :attr:`FusedHit.capped` ("3 more from this file"), and a search with fewer other
  results still shows them. A hit pinned by its exact title, or one that defines the query's
  identifier or names it whole, is never held back and does not count.

:func:`monotone_scores` turns the fused scores of the final order into scores that never rise
down the list (the rules move hits past others fusion scored higher).

Standard library only, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from hybridsag.fusion.types import ChunkView, FusedHit

__all__ = [
    "CAP_EXEMPT",
    "MERGED_CHARS",
    "cap_per_resource",
    "merge_adjacent",
    "monotone_scores",
]

#: Most characters of chunk text one merged result holds: the default chunker's hard cap on a
#: chunk (4 x its 512-character target), so a merged result is never longer than the longest
#: chunk a default index holds.
MERGED_CHARS = 2048
#: Rules whose hits the per-resource cap never holds back nor counts: an exact title pinned, a
#: definition or a whole mention of the query's identifier (the identifier tiers put every
#: whole mention before a partial one; the cap must not undo that).
CAP_EXEMPT = frozenset({"exact_title", "identifier_definition", "identifier_whole"})


@dataclasses.dataclass
class _Run:
    """A kept hit and the chunks of its section merged into it so far."""

    hit: FusedHit
    members: list[tuple[int, str]]  # (ordinal, chunk_id), its own included
    chars: int
    duplicates: list[str]
    alive: bool = True

    @property
    def low(self) -> int:
        return min(o for o, _c in self.members)

    @property
    def high(self) -> int:
        return max(o for o, _c in self.members)

    def touches(self, other_low: int, other_high: int) -> bool:
        return other_low == self.high + 1 or other_high == self.low - 1


def merge_adjacent(
    fused: Sequence[FusedHit],
    chunks: Mapping[str, ChunkView],
    *,
    max_chars: int = MERGED_CHARS,
) -> list[FusedHit]:
    """``fused`` with the neighbouring chunks of each section merged into one result.

    Walking ``fused`` in order, a hit whose chunk is the next or the previous one
    (:attr:`ChunkView.ordinal` one apart) of a run already kept, in the same resource and under
    the same heading path, joins that run when the run's chunk texts stay within ``max_chars``;
    a run it joins that now touches another kept run of the section takes that one in too. The
    run's best-ranked hit keeps its place, with the others' chunk ids in
    :attr:`FusedHit.merged` (source order), their folded copies added to its ``duplicates``
    and the rule name ``merge_adjacent``; ranks are renumbered ``1..n`` (the hits come back as
    they were when none merges). A hit whose chunk is not in ``chunks`` or has no ordinal is
    kept as it is.

    Raises:
        ValueError: ``max_chars`` below 1.

    Example:
        >>> hits = [FusedHit(c, i, 0.0, ()) for i, c in enumerate("bxa", start=1)]
        >>> views = {"a": ChunkView("a", "r", "", "Install", "One.", 0),
        ...          "b": ChunkView("b", "r", "", "Install", "Two.", 1),
        ...          "x": ChunkView("x", "s", "", "Other", "Else.", 0)}
        >>> [(h.chunk_id, h.rank, h.merged) for h in merge_adjacent(hits, views)]
        [('b', 1, ('a',)), ('x', 2, ())]
    """
    if max_chars < 1:
        raise ValueError(f"merge max_chars must be >= 1, got {max_chars!r}")
    runs: list[_Run] = []
    by_section: dict[tuple[str, str], list[_Run]] = {}
    for hit in fused:
        view = chunks.get(hit.chunk_id)
        if view is None or view.ordinal is None:
            runs.append(_Run(hit, [], 0, list(hit.duplicates)))
            continue
        section = by_section.setdefault((view.resource_id, view.heading_path), [])
        size = len(view.text)
        into = next(
            (
                r
                for r in section
                if r.alive and r.touches(view.ordinal, view.ordinal) and r.chars + size <= max_chars
            ),
            None,
        )
        if into is None:
            run = _Run(hit, [(view.ordinal, hit.chunk_id)], size, list(hit.duplicates))
            runs.append(run)
            section.append(run)
            continue
        into.members.append((view.ordinal, hit.chunk_id))
        into.chars += size
        into.duplicates.extend(hit.duplicates)
        for other in section:  # the grown run may now close the gap to another one
            if (
                other is not into
                and other.alive
                and into.touches(other.low, other.high)
                and into.chars + other.chars <= max_chars
            ):
                other.alive = False
                into.members.extend(other.members)
                into.chars += other.chars
                into.duplicates.extend(other.duplicates)
    if len(runs) == len(fused) and all(len(r.members) <= 1 for r in runs):
        return list(fused)  # nothing merged: the hits as they were
    out: list[FusedHit] = []
    for run in runs:
        if not run.alive:
            continue
        hit = run.hit
        merged = tuple(c for _o, c in sorted(run.members) if c != hit.chunk_id)
        if merged:
            hit = dataclasses.replace(
                hit,
                merged=hit.merged + merged,
                duplicates=tuple(dict.fromkeys(run.duplicates)),
                rules=hit.rules + ("merge_adjacent",),
            )
        out.append(dataclasses.replace(hit, rank=len(out) + 1))
    return out


def cap_per_resource(
    fused: Sequence[FusedHit], chunks: Mapping[str, ChunkView], *, cap: int
) -> list[FusedHit]:
    """``fused`` with at most ``cap`` hits of one resource before the hits of the others.

    A resource's hits after its first ``cap`` ones (hits whose rules include one of
    :data:`CAP_EXEMPT`, and hits whose chunk is not in ``chunks``, are not counted and never
    held back) go after all the others, in their order, with the rule name ``resource_cap``;
    the resource's best-ranked hit lists their chunk ids in :attr:`FusedHit.capped`. Ranks are
    renumbered ``1..n``; ``cap`` 0, or no resource over it, returns the hits as they are.

    Raises:
        ValueError: ``cap`` below 0.

    Example:
        >>> hits = [FusedHit(c, i, 0.0, ()) for i, c in enumerate(["a1", "a2", "a3", "b"], 1)]
        >>> views = {c: ChunkView(c, c[0], "", "", "text") for c in ("a1", "a2", "a3", "b")}
        >>> [(h.chunk_id, h.capped) for h in cap_per_resource(hits, views, cap=2)]
        [('a1', ('a3',)), ('a2', ()), ('b', ()), ('a3', ())]
    """
    if cap < 0:
        raise ValueError(f"the per-resource cap must be >= 0, got {cap!r}")
    if cap == 0:
        return list(fused)
    front: list[FusedHit] = []
    back: list[FusedHit] = []
    counted: dict[str, int] = {}
    first: dict[str, int] = {}  # resource -> index in front of its best hit
    held: dict[str, list[str]] = {}
    for hit in fused:
        view = chunks.get(hit.chunk_id)
        if view is None:
            front.append(hit)
            continue
        rid = view.resource_id
        first.setdefault(rid, len(front))
        if CAP_EXEMPT.intersection(hit.rules):
            front.append(hit)
        elif counted.get(rid, 0) < cap:
            counted[rid] = counted.get(rid, 0) + 1
            front.append(hit)
        else:
            back.append(dataclasses.replace(hit, rules=hit.rules + ("resource_cap",)))
            held.setdefault(rid, []).append(hit.chunk_id)
    if not held:
        return list(fused)
    for rid, ids in held.items():
        best = front[first[rid]]
        front[first[rid]] = dataclasses.replace(best, capped=best.capped + tuple(ids))
    return [dataclasses.replace(h, rank=i) for i, h in enumerate(front + back, start=1)]


def monotone_scores(scores: Sequence[float]) -> list[float]:
    """The non-increasing sequence closest to ``scores`` (least squares): where a later score
    is higher than an earlier one, the run between them takes its mean (the pool adjacent
    violators algorithm of Ayer, Brunk, Ewing, Reid and Silverman, "An empirical distribution
    function for sampling with incomplete information", Ann. Math. Statist. 26(4), 1955).
    Scores already in order come back unchanged.

    >>> monotone_scores([0.8743, 1.9087, 0.5])
    [1.3915, 1.3915, 0.5]
    """
    blocks: list[list[float]] = []  # [sum, count] of each pooled run
    for s in scores:
        blocks.append([float(s), 1.0])
        while len(blocks) > 1 and blocks[-2][0] * blocks[-1][1] < blocks[-1][0] * blocks[-2][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    out: list[float] = []
    for total, count in blocks:
        mean = total / count
        out.extend([mean] * int(count))
    return out
