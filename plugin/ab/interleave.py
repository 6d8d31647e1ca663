"""Team-draft interleaving (Radlinski, Kurup and Joachims, "How does clickthrough data reflect
retrieval quality?", CIKM 2008, Algorithm 2), and its click credit.

Two rankings A and B are merged as two captains pick teams: in each round the team with fewer
picks so far (a coin flip when even) adds its highest-ranked result not yet in the list. The
merge stops, as in the paper, when either ranking has nothing left to add, or at ``limit``. A
click on a result credits the team that picked it; a query prefers the arm with more credited
clicks (equal counts: no preference).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

__all__ = ["Interleaving", "coin_seed", "credit", "team_draft"]

T = TypeVar("T", bound=Hashable)
Team = Literal["a", "b"]


@dataclass(frozen=True, slots=True)
class Interleaving:
    """The merged list and, position by position, the team (``"a"`` or ``"b"``) that picked
    each item."""

    items: tuple[Hashable, ...]
    teams: tuple[Team, ...]


def coin_seed(*parts: str) -> int:
    """A stable seed for the coin flips from text (the same on every process and machine,
    unlike ``hash()``)."""
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def team_draft(a: Sequence[T], b: Sequence[T], *, limit: int, seed: int) -> Interleaving:
    """Team-draft interleave rankings ``a`` and ``b`` (best first; an item repeated within a
    ranking counts once) into at most ``limit`` items; ``seed`` drives the coin flips.

    >>> r = team_draft(["x", "y"], ["y", "z"], limit=4, seed=1)
    >>> sorted(r.items) == ["x", "y", "z"] or sorted(r.items) == ["x", "y"]
    True
    """
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    rng = random.Random(seed)
    items: list[T] = []
    teams: list[Team] = []
    seen: set[T] = set()
    picks = {"a": 0, "b": 0}
    pos = {"a": 0, "b": 0}
    lists = {"a": a, "b": b}

    def next_of(team: Team) -> T | None:
        ranking = lists[team]
        while pos[team] < len(ranking) and ranking[pos[team]] in seen:
            pos[team] += 1
        return ranking[pos[team]] if pos[team] < len(ranking) else None

    while len(items) < limit:
        if next_of("a") is None or next_of("b") is None:
            break
        if picks["a"] < picks["b"] or (picks["a"] == picks["b"] and rng.random() < 0.5):
            team: Team = "a"
        else:
            team = "b"
        item = next_of(team)
        assert item is not None
        items.append(item)
        teams.append(team)
        seen.add(item)
        picks[team] += 1
    return Interleaving(tuple(items), tuple(teams))


def credit(teams: Sequence[str], clicked_positions: Iterable[int]) -> dict[str, int]:
    """Clicks credited to each team: ``clicked_positions`` are 1-based positions in the merged
    list (a position clicked twice counts once)."""
    out: dict[str, int] = {}
    for position in sorted(set(clicked_positions)):
        if not 1 <= position <= len(teams):
            raise ValueError(f"position {position} is outside the {len(teams)} results shown")
        team = teams[position - 1]
        out[team] = out.get(team, 0) + 1
    return out
