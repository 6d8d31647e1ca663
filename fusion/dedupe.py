"""Duplicate results collapse into one: the best-ranked copy stays, and lists the others.

Documentation repeats itself: an option's paragraph is pasted into every command page that takes
the option, a function is copied between two modules. Shown as results, the copies push the
passage that answers the query out of the first places (issue 27 item 6: three copies of
``strict-peer-deps``'s text from three pages stood above ``legacy-peer-deps``'s own section).

Two chunks are copies when their own section headings (the last heading of each heading path)
are the same as :func:`~hybridsag.fusion.text.normalize_title` compares titles, and their texts
are the same words in the same order (case, whitespace, punctuation and symbols dropped), or the
texts' word 3-shingles overlap by at least :data:`NEAR_DUPLICATE`
(Jaccard resemblance, Broder, "On the resemblance and containment of documents", 1997). The
heading takes part so that two options' identical bodies (``* Default: false``) under their own
headings, or two API pages that differ only in the function they document, stay apart.

The shingles are the chunk's stored facts (:class:`~hybridsag.fusion.types.ChunkFacts`, read
with its row; computed from the text when a view has none). Which pairs are compared is found
by prefix filtering (:func:`~hybridsag.fusion.facts.prefix_length`): each kept chunk's few
smallest shingle hashes go into buckets keyed by its section, and a chunk is compared only with
the kept chunks that share a bucket with its own prefix. That filter is exact (a pair above the
threshold always shares a bucket), so the decisions are those of comparing every pair; the
comparison itself is the exact resemblance of the two stored sets. Identical texts are one
case of it (the same set).

Standard library only, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from hybridsag.fusion.facts import SHINGLE, facts_of, prefix_length, shingles
from hybridsag.fusion.text.markdown import HEADING_JOIN
from hybridsag.fusion.text import normalize_title
from hybridsag.fusion.types import ChunkView, FusedHit

__all__ = ["NEAR_DUPLICATE", "SHINGLE", "collapse_duplicates", "collapse_window", "resemblance"]

#: The Jaccard resemblance of two chunks' shingle sets from which they are one result. About
#: three words changed in a hundred (each changed word alters up to :data:`SHINGLE` shingles);
#: neighbouring chunks of one page, which share only their overlap sentences, stay far below.
NEAR_DUPLICATE = 0.8


def _section(view: ChunkView) -> str:
    """The chunk's own section heading, normalised: copies must share it."""
    return normalize_title(view.heading_path.rsplit(HEADING_JOIN, 1)[-1])


def _jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    both = len(a & b)
    return both / (len(a) + len(b) - both)


def resemblance(a: str, b: str) -> float:
    """The Jaccard resemblance of the word :data:`SHINGLE`-shingle sets of ``a`` and ``b``
    (case and punctuation ignored), in 0..1.

    >>> resemblance("npm ERR! code E404", "NPM err code e404")
    1.0
    """
    return _jaccard(frozenset(shingles(a)), frozenset(shingles(b)))


def collapse_duplicates(
    fused: Sequence[FusedHit],
    chunks: Mapping[str, ChunkView],
    *,
    threshold: float = NEAR_DUPLICATE,
) -> list[FusedHit]:
    """``fused`` with each copy of a chunk folded into the best-ranked one: that hit keeps its
    place, gets the copies' chunk ids in :attr:`FusedHit.duplicates` (in their fused order) and
    the rule name ``duplicates``; the copies are no longer results, and the ranks are renumbered
    ``1..n`` (so a caller that takes ``k`` results gets ``k`` distinct ones). Copies: the same
    normalised section heading and shingle sets of a resemblance of at least ``threshold``
    (the same normalised text is resemblance 1). A hit whose chunk is not in ``chunks`` is
    never compared.

    Raises:
        ValueError: ``threshold`` outside ``(0, 1]``.

    Example:
        >>> hits = [FusedHit(c, i, 0.0, ()) for i, c in enumerate("abc", start=1)]
        >>> views = {"a": ChunkView("a", "r1", "", "Opts", "Use --force."),
        ...          "b": ChunkView("b", "r2", "", "Opts", "use --FORCE"),
        ...          "c": ChunkView("c", "r3", "", "Opts", "Other text.")}
        >>> [(h.chunk_id, h.rank, h.duplicates) for h in collapse_duplicates(hits, views)]
        [('a', 1, ('b',)), ('c', 2, ())]
    """
    folded = collapse_window(fused, (), chunks, len(fused), threshold=threshold)
    assert folded is not None  # the whole list is known
    return folded


def _folded(
    kept: Sequence[FusedHit], copies: Sequence[list[str]], late: Mapping[int, str]
) -> list[FusedHit]:
    """``kept`` ranked ``1..n``, each with its ``copies`` (and its ``late`` one) folded in."""
    out = []
    for i, hit in enumerate(kept):
        dup = tuple(copies[i]) + ((late[i],) if i in late else ())
        if dup:
            hit = dataclasses.replace(
                hit, rank=i + 1, duplicates=hit.duplicates + dup, rules=hit.rules + ("duplicates",)
            )
        elif hit.rank != i + 1:
            hit = dataclasses.replace(hit, rank=i + 1)
        out.append(hit)
    return out


class _Kept:
    """The distinct texts kept so far (by their index, in rank order) and the prefix buckets
    that find their copies: each kept text's :func:`~hybridsag.fusion.facts.prefix_length`
    smallest shingles, each mapped to the kept texts that have it there."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.buckets: dict[int, list[int]] = {}
        self.sets: list[frozenset[int]] = []
        self.sections: list[str | None] = []

    def _prefix(self, mine: tuple[int, ...]) -> tuple[int, ...]:
        return mine[: prefix_length(len(mine), self.threshold)]

    def owner(self, view: ChunkView) -> int | None:
        """The best-ranked kept text of ``view``'s section whose shingles resemble its own by
        at least the threshold; by the prefix filter no kept text outside its buckets can."""
        mine = facts_of(view).shingles
        prefix = self._prefix(mine)
        if self.buckets.keys().isdisjoint(prefix):
            return None
        found = sorted({i for s in prefix for i in self.buckets.get(s, ())})
        section = _section(view)
        mine_set = frozenset(mine)
        for i in found:
            theirs = self.sets[i]
            small, large = sorted((len(mine_set), len(theirs)))
            # the resemblance is at most small / large: a cheap refusal first
            if (
                self.sections[i] == section
                and small / large >= self.threshold
                and _jaccard(mine_set, theirs) >= self.threshold
            ):
                return i
        return None

    def add(self, view: ChunkView | None) -> None:
        """Keep the next text (``None``: a hit without a view, never compared)."""
        index = len(self.sets)
        if view is None:
            self.sets.append(frozenset())
            self.sections.append(None)
            return
        mine = facts_of(view).shingles
        for s in self._prefix(mine):
            self.buckets.setdefault(s, []).append(index)
        self.sets.append(frozenset(mine))
        self.sections.append(_section(view))


def collapse_window(
    exact: Sequence[FusedHit],
    others: Sequence[FusedHit],
    chunks: Mapping[str, ChunkView],
    limit: int,
    *,
    threshold: float = NEAR_DUPLICATE,
) -> list[FusedHit] | None:
    """The first ``limit`` hits of :func:`collapse_duplicates` over a list known only in part:
    its first hits ``exact`` in their order, and ``others``, every hit after them, in an order
    not known. The first ``limit`` distinct texts are found among ``exact``; each is listed with
    its copies: those in ``exact`` in their order, then at most one in ``others`` (all of them
    come after ``exact``; which of two comes first is not known). ``None`` when that does not
    settle it: fewer than ``limit`` distinct texts in ``exact`` while ``others`` holds more
    hits, or two copies of one kept hit in ``others`` (the caller then gives more of the list).

    Example:
        >>> hits = [FusedHit(c, i, 0.0, ()) for i, c in enumerate("abc", start=1)]
        >>> views = {c: ChunkView(c, c, "", "Opts", "Use --force.") for c in "ac"}
        >>> views["b"] = ChunkView("b", "b", "", "Opts", "Other text.")
        >>> [(h.chunk_id, h.duplicates) for h in collapse_window(hits[:2], hits[2:], views, 2)]
        [('a', ('c',)), ('b', ())]
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"duplicate threshold must be in (0, 1], got {threshold!r}")
    index = _Kept(threshold)
    kept: list[FusedHit] = []
    copies: list[list[str]] = []
    for hit in exact:
        view = chunks.get(hit.chunk_id)
        owner = index.owner(view) if view is not None else None
        if owner is not None:
            copies[owner].append(hit.chunk_id)
        elif len(kept) < limit:  # a new text among the first ``limit``: compared from now on
            index.add(view)
            kept.append(hit)
            copies.append([])
        # else: a text after the first ``limit``; a later copy of a kept one is still found
        # by it (its owner is the best-ranked resembling kept hit, and these are ranked first)
    if len(kept) < limit and others:
        return None
    late: dict[int, str] = {}
    for hit in others:
        view = chunks.get(hit.chunk_id)
        owner = index.owner(view) if view is not None else None
        if owner is not None:
            if owner in late:
                return None
            late[owner] = hit.chunk_id
    return _folded(kept, copies, late)
