"""The deepening rule every engine that filters its hits after ranking them follows
(:func:`hybridsag.lexical.queries.deepening`, the Milvus and tantivy title searches): how deep
a ranking is asked, when it is asked again, and where it stops."""

from __future__ import annotations

from collections.abc import Callable

from hybridsag.lexical.queries import deepening, first_depth

Read = Callable[[int], tuple[list[int], int]]


def _ranking(total: int, dropped: set[int]) -> tuple[Read, list[int]]:
    """A ranking of ``total`` rows (row i at rank i) whose ``dropped`` rows the filters drop,
    and the depths it was asked for."""
    asked: list[int] = []

    def read(depth: int) -> tuple[list[int], int]:
        asked.append(depth)
        ranked = range(min(depth, total))
        return [r for r in ranked if r not in dropped], len(ranked)

    return read, asked


def test_the_first_depth_leaves_room_for_filtered_rows() -> None:
    assert [first_depth(n) for n in (1, 10, 20, 50)] == [21, 30, 40, 100]


def test_a_ranking_with_enough_rows_is_read_once() -> None:
    read, asked = _ranking(1000, set())
    assert deepening(10, 10_000, read) == list(range(10))
    assert asked == [30]


def test_rows_the_filters_drop_deepen_the_ranking_four_times_a_round() -> None:
    read, asked = _ranking(1000, set(range(200)))
    assert deepening(10, 10_000, read) == list(range(200, 210))
    assert asked == [30, 120, 480]


def test_a_ranking_that_ended_is_not_asked_deeper() -> None:
    read, asked = _ranking(25, set(range(20)))
    assert deepening(10, 10_000, read) == [20, 21, 22, 23, 24]
    assert asked == [30]


def test_the_deepest_depth_bounds_the_rounds() -> None:
    read, asked = _ranking(10**6, set(range(10**5)))
    assert deepening(10, 500, read) == []
    assert asked == [30, 120, 480, 500]
