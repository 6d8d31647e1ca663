"""The frozen result types that flow through every path and through fusion."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ChunkFacts", "ChunkView", "Contribution", "FusedHit", "Hit"]


@dataclass(frozen=True, slots=True)
class Hit:
    """One candidate from one retrieval path.

    ``rank`` is 1-based within the path's list; ``raw_score`` is the engine's own number (FTS5
    ``bm25()`` is lower-is-better, a Milvus distance depends on the metric); ``score`` is the same
    evidence turned higher-is-better. ``detail`` carries path-specific facts (judge probability,
    matched title rule, round found) and is never mutated after construction.

    Two typed facts that fusion rules read (never the path's name or a ``detail`` key):
    ``judge_p`` and ``next_hop``.

    Attributes:
        chunk_id: The chunk found (non-empty).
        path: The name of the path that found it.
        rank: Its 1-based place in the path's list.
        raw_score: The engine's own number, in the engine's direction.
        score: The same evidence, higher-is-better.
        detail: Path-specific facts (judge probability, matched title rule, round found).
        judge_p: The probability a judge gave this passage of being a necessary piece of the
            answer (the SAG2 path's judge), in 0..1; ``None`` when no judge scored it. A path
            whose numbers only restate an order it was given (the ``none`` judge) leaves it
            ``None``.
        next_hop: The hit was found only by a query the path derived from the user's (a SAG2
            expansion round's next-hop terms). The other paths never ran that query, so their
            silence is no vote against it: fusion's ``next_hop_slot`` rule never puts it below
            its own rank.

    Raises:
        ValueError: a rank below 1, an empty ``chunk_id``, or ``judge_p`` outside 0..1.
    """

    chunk_id: str
    path: str
    rank: int
    raw_score: float
    score: float
    detail: Mapping[str, Any] = field(default_factory=dict)
    judge_p: float | None = None
    next_hop: bool = False

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise ValueError(f"Hit.rank is 1-based, got {self.rank}")
        if not self.chunk_id:
            raise ValueError("Hit.chunk_id must not be empty")
        if self.judge_p is not None and not 0.0 <= self.judge_p <= 1.0:
            raise ValueError(f"Hit.judge_p must be in 0..1 or None, got {self.judge_p!r}")


@dataclass(frozen=True, slots=True)
class Contribution:
    """What one path gave a fused hit: its rank, raw and normalised score and its RRF term;
    ``judge_p`` and ``next_hop`` are the path's ``Hit.judge_p`` and ``Hit.next_hop``."""

    path: str
    rank: int
    raw_score: float
    score: float
    rrf_term: float
    detail: Mapping[str, Any] = field(default_factory=dict)
    judge_p: float | None = None
    next_hop: bool = False


@dataclass(frozen=True, slots=True)
class FusedHit:
    """One fused result: the fused score, every path's contribution, and the rules that fired.

    ``rank`` is the final position; ``rrf_rank`` the position fusion (:func:`~hybridsag.fusion.rrf`
    or :func:`~hybridsag.fusion.convex`) gave it before any rule moved it (0 when made by
    neither). ``score`` is that fusion's score: it follows ``rrf_rank``, not ``rank``.
    ``duplicates`` are the chunk ids of the copies of this chunk's text that fusion folded into
    it (:func:`~hybridsag.fusion.dedupe.collapse_duplicates`), in their fused order. ``merged``
    are the chunk ids of the neighbouring chunks of its section merged into this result
    (:func:`~hybridsag.fusion.results.merge_adjacent`), in source order: the result stands for
    them too. ``capped`` are the chunk ids of this resource's further hits that the
    per-resource cap moved below the other resources' hits
    (:func:`~hybridsag.fusion.results.cap_per_resource`), set on the resource's best hit.

    Attributes:
        chunk_id: The chunk.
        rank: Its final 1-based position.
        score: The fusion's score (it follows ``rrf_rank``).
        contributions: What each path that found it gave, in the order they contributed.
        rules: The names of the rules that fired on it
            (:data:`~hybridsag.fusion.RULE_REASONS`).
        rrf_rank: Its position before any rule moved it (0: made by no fusion).
        duplicates: The copies folded into it.
        merged: The neighbouring chunks merged into it, in source order.
        capped: Its resource's further hits the per-resource cap moved down.
    """

    chunk_id: str
    rank: int
    score: float
    contributions: tuple[Contribution, ...]
    rules: tuple[str, ...] = ()
    rrf_rank: int = 0
    duplicates: tuple[str, ...] = ()
    merged: tuple[str, ...] = ()
    capped: tuple[str, ...] = ()

    @property
    def paths(self) -> tuple[str, ...]:
        """Names of the paths that found this chunk, in the order they contributed."""
        return tuple(c.path for c in self.contributions)

    @property
    def next_hop_rank(self) -> int | None:
        """The best rank among the contributions a path found by its next-hop query
        (``Hit.next_hop``), or ``None`` when no path found it that way."""
        return min((c.rank for c in self.contributions if c.next_hop), default=None)

    @property
    def judged(self) -> Contribution | None:
        """The contribution whose path's judge scored this chunk (``judge_p`` set), or ``None``.
        When several paths judged it, the best-ranked one."""
        scored = [c for c in self.contributions if c.judge_p is not None]
        return min(scored, key=lambda c: c.rank) if scored else None

    @property
    def best_rank(self) -> int:
        """The best (lowest) single-path rank; the first tie-breaker of RRF."""
        return min(c.rank for c in self.contributions)


@dataclass(frozen=True, slots=True)
class ChunkFacts:
    """What fusion reads of a chunk's text, computed once when it is written
    (:func:`hybridsag.fusion.facts.chunk_facts`): ``script``, the script its prose is written
    in (:func:`~hybridsag.fusion.text.dominant_script`; ``None``: no dominant script);
    ``shingles``, the sorted distinct 32-bit hashes of its word 3-shingles
    (:func:`~hybridsag.fusion.facts.shingles`, at least one); ``heading_only``, it is empty or
    only Markdown headings (:func:`~hybridsag.fusion.text.is_heading_only`)."""

    script: str | None
    shingles: tuple[int, ...]
    heading_only: bool


@dataclass(frozen=True, slots=True)
class ChunkView:
    """What fusion rules may read of a chunk: no I/O, supplied by the caller. ``ordinal`` is the
    chunk's 0-based place in its resource (None when unknown): an exact title pins the
    resource's lead chunk, the one with the lowest ordinal.

    Two values a store keeps so that a search does not derive them again, each ``None`` when
    the caller has none (fusion then computes it from ``title`` or ``text``, the same way):
    ``title_norm``, :func:`~hybridsag.fusion.text.normalize_title` of ``title``; ``facts``,
    :func:`~hybridsag.fusion.facts.chunk_facts` of ``text``."""

    chunk_id: str
    resource_id: str
    title: str
    heading_path: str
    text: str
    ordinal: int | None = None
    title_norm: str | None = None
    facts: ChunkFacts | None = None
