"""Every fusion rule is held to its bound (``RULE_BOUNDS``) over generated inputs; a section
whose heading is the identifier is its definition; an exact title pins the lead chunk."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from hybridsag.fusion import ChunkView, Contribution, FusedHit, apply_rules
from hybridsag.fusion.rules import RULE_BOUNDS, RuleBound, bounded

SEEDS = range(200)


def _moves(before: Sequence[FusedHit], after: Sequence[FusedHit]) -> tuple[int, int]:
    """(largest move up, largest move down) of the hits of ``after`` against ``before``."""
    where = {h.chunk_id: i for i, h in enumerate(before)}
    assert sorted(where) == sorted(h.chunk_id for h in after)  # a reordering, nothing lost
    up = max((where[h.chunk_id] - j for j, h in enumerate(after)), default=0)
    down = max((j - where[h.chunk_id] for j, h in enumerate(after)), default=0)
    return max(up, 0), max(down, 0)


def _plain(ids: Sequence[str]) -> list[FusedHit]:
    return [FusedHit(c, i, 1.0 / (10 + i), ()) for i, c in enumerate(ids, start=1)]


@pytest.mark.parametrize("seed", SEEDS)
def test_bounded_keeps_every_hit_within_its_bound_and_follows_the_wish(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(0, 40)
    before = _plain([f"c{i}" for i in range(n)])
    desired = list(before)
    rng.shuffle(desired)
    bound = RuleBound(up=rng.randint(0, 8), down=rng.randint(0, 8))
    out = bounded(before, desired, bound)
    up, down = _moves(before, out)
    assert up <= bound.up and down <= bound.down  # type: ignore[operator]
    assert bounded(before, desired, RuleBound(None, None)) == desired  # no bound: the wish
    assert bounded(before, before, bound) == before
    within = _moves(before, desired)
    if within[0] <= bound.up and within[1] <= bound.down:  # type: ignore[operator]
        assert out == desired


IDENT = "ReActAgent"
TEXTS = (
    (f"class {IDENT}(Base):\n    pass", "x"),  # a definition
    (f"use {IDENT} here", "x"),  # a whole mention
    (f"{IDENT}Factory builds it", "x"),  # partial
    ("nothing about it", "x"),
    ("nothing here", f"Guide > {IDENT}"),  # the section heading: a definition
    ("the loop", f"{IDENT} > Loop"),  # only an inherited heading
    ("# Only a heading", "x"),  # dropped
)


def _generated(rng: random.Random) -> tuple[list[FusedHit], dict[str, ChunkView]]:
    n = rng.randint(1, 60)
    hits, views = [], {}
    sag2_ranks = list(range(1, n + 1))
    rng.shuffle(sag2_ranks)
    for i in range(n):
        cid = f"c{i}"
        contribs = []
        if rng.random() < 0.7:
            p = rng.choice([None, round(rng.random(), 2)])
            contribs.append(Contribution("sag2", sag2_ranks[i], 0.0, 0.0, 0.01, {}, judge_p=p,
                                         next_hop=rng.random() < 0.2))  # fmt: skip
        if rng.random() < 0.5 or not contribs:
            contribs.append(Contribution("dense", rng.randint(1, 80), 0.0, 0.0, 0.01, {}))
        hits.append(FusedHit(cid, i + 1, 1.0 / (10 + i), tuple(contribs), rrf_rank=i + 1))
        text, heading = rng.choice(TEXTS)
        title = rng.choice(["Guide", "Release Notes", "Other"])
        resource = f"r{rng.randint(0, n // 3)}"
        views[cid] = ChunkView(cid, resource, title, heading, text, rng.randint(0, 9))
    return hits, views


@pytest.mark.parametrize("seed", SEEDS)
def test_each_rule_moves_no_hit_further_than_its_bound(seed: int) -> None:
    rng = random.Random(seed)
    fused, views = _generated(rng)
    query = rng.choice([IDENT, "who directed it", "release notes"])
    pins = rng.randint(0, 3)
    steps: list[tuple[str, list[FusedHit], list[FusedHit]]] = []
    out = apply_rules(
        fused, query=query, chunks=views, pin_exact_titles=pins,
        judge_accept=rng.choice([None, 0.5]), judge_order=rng.random() < 0.5,
        trace=lambda name, before, desired: steps.append((name, list(before), list(desired))),
    )  # fmt: skip
    kept = [h for h in fused if not views[h.chunk_id].text.startswith("# ")]
    pinned = [h for h in out if "exact_title" in h.rules]
    assert len(pinned) <= pins
    assert [h.rank for h in out] == list(range(1, len(out) + 1))
    # exact_title: the pins go first; the other hits keep their order, so each moves down by
    # at most the number of pins
    rest_before = steps[0][1] if steps else out[len(pinned) :]
    pinned_ids = {h.chunk_id for h in pinned}
    assert [h.chunk_id for h in rest_before] == [
        h.chunk_id for h in kept if h.chunk_id not in pinned_ids
    ]
    # every bounded step: its output is the next step's input, the last one's is the result
    outputs = [before for _name, before, _desired in steps[1:]] + [out[len(pinned) :]]
    for (name, before, _desired), after in zip(steps, outputs):
        up, down = _moves(before, after)
        bound = RULE_BOUNDS[name]
        assert up <= bound.up and down <= bound.down, (name, up, down)  # type: ignore[operator]


def _ident_list(n_mentions: int) -> tuple[list[FusedHit], dict[str, ChunkView]]:
    """The defining section first (BM25 rank 1), then sections that mention the identifier."""
    ident = "ERR_INVALID_ARG_TYPE"
    ids = ["defining", *(f"m{i}" for i in range(n_mentions))]
    views = {
        "defining": ChunkView(
            "defining", "errors.md", "Errors", f"Errors > Node.js error codes > `{ident}`",
            "An argument of the wrong type was passed to a Node.js API.", 40,
        ),
        **{
            f"m{i}": ChunkView(f"m{i}", f"api{i}.md", f"API {i}", f"API {i} > call",
                               f"Throws {ident} when the path is not a string.", 3)
            for i in range(n_mentions)
        },
    }  # fmt: skip
    return _plain(ids), views


def test_a_section_whose_heading_is_the_identifier_is_its_definition() -> None:
    fused, views = _ident_list(80)
    out = apply_rules(fused, query="ERR_INVALID_ARG_TYPE", chunks=views)
    assert out[0].chunk_id == "defining"
    assert out[0].rules == ("identifier_definition",)


def test_the_identifier_tiers_bury_nothing_further_than_their_bound() -> None:
    fused, views = _ident_list(80)
    views["defining"] = ChunkView("defining", "errors.md", "Errors", "Errors > Codes",
                                  "The codes below are listed alphabetically.", 40)  # fmt: skip
    out = apply_rules(fused, query="ERR_INVALID_ARG_TYPE", chunks=views)
    # it names the identifier nowhere, every other hit mentions it: it still stays near the top
    assert [h.chunk_id for h in out].index("defining") == RULE_BOUNDS["identifier_tiers"].down


def test_an_exact_title_pins_the_lead_chunk_of_its_resource() -> None:
    views = {
        "ino": ChunkView("ino", "fs.md", "File system", "File system > fs.Stats > stats.ino",
                         "The file system specific inode number for the file.", 212),
        "other": ChunkView("other", "x.md", "Streams", "Streams", "file system streams", 0),
        "intro": ChunkView("intro", "fs.md", "File system", "File system",
                           "The node:fs module enables interacting with the file system.", 0),
    }  # fmt: skip
    out = apply_rules(_plain(["ino", "other", "intro"]), query="File system", chunks=views)
    assert [(h.chunk_id, h.rules) for h in out] == [
        ("intro", ("exact_title",)), ("ino", ()), ("other", ())
    ]  # fmt: skip
    unknown = {k: ChunkView(v.chunk_id, v.resource_id, v.title, v.heading_path, v.text)
               for k, v in views.items()}  # fmt: skip
    out = apply_rules(_plain(["ino", "other", "intro"]), query="File system", chunks=unknown)
    assert out[0].chunk_id == "ino"  # without ordinals: the best-ranked chunk, as before
