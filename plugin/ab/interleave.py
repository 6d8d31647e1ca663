"""Team-draft interleaving (Radlinski, Kurup and Joachims, "How does clickthrough data reflect
retrieval quality?", CIKM 2008, Algorithm 2), and its click credit.

Two rankings A and B are merged as two captains pick teams: in each round the team with fewer
picks so far (a coin flip when even) adds its highest-ranked result not yet in the list. A click
on a result credits the team that picked it; a query prefers the arm with more credited clicks
(equal counts: no preference).

One deviation from the paper: its loop stops as soon as either ranking has nothing left to add.
There both rankings are long lists over a web collection, so one running out is rare; here an
arm is a top-k of one retrieval path, which may return few results or none (a query no title
matches, say), and stopping would show fewer results than either arm alone, none at all when one
arm is empty. So once one ranking has nothing left the other fills the list, up to ``limit``.
Credit is still by the team that picked: a result the filling arm added credits that arm, which
is the preference the click shows (only it had a result to offer there). The teams' picks differ
by at most one only while both rankings have items left.
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
    ranking counts once) into at most ``limit`` items; ``seed`` drives the coin flips. When one
    ranking has nothing left to add, the other fills the list (the module docstring says why).

    >>> team_draft(["x", "y"], ["y", "z"], limit=4, seed=1)
    Interleaving(items=('x', 'y', 'z'), teams=('a', 'b', 'b'))
    >>> team_draft([], ["y", "z"], limit=4, seed=1).teams
    ('b', 'b')
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
        head_a, head_b = next_of("a"), next_of("b")
        if head_a is None and head_b is None:
            break
        if head_b is None:  # one ranking ran out: the other fills (see the module docstring)
            team: Team = "a"
        elif head_a is None:
            team = "b"
        elif picks["a"] < picks["b"] or (picks["a"] == picks["b"] and rng.random() < 0.5):
            team = "a"
        else:
            team = "b"
        item = head_a if team == "a" else head_b
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
