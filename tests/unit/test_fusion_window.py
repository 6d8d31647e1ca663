"""Fusing only what can reach the top k (issue 39 item 2): ``fuse(..., limit=k)`` returns
exactly the first ``k`` hits of ``fuse(...)`` (the same hits, ranks, scores, rules and folded
copies), whatever the runs, the views and the rule inputs; and a view that carries its stored
facts fuses exactly as one that does not (fusion then reads them from the text)."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hybridsag.fusion import ChunkView, FusedHit, Hit, chunk_facts, fuse, normalize_title
from hybridsag.fusion.dedupe import collapse_duplicates, collapse_window
from hybridsag.fusion.rules import RULE_BOUNDS, apply_rules

STRICT = (
    "* Default: false\n* Type: Boolean\n\nIf set to `true`, and `--legacy-peer-deps` is not set, "
    "then _any_ conflicting `peerDependencies` will be treated as an install failure, even "
    "if npm could reasonably guess the appropriate resolution based on non-peer dependency "
    "relationships."
)
#: Texts that fire every rule: copies and near copies, other scripts, headings only, a
#: definition, a whole and a partial identifier, the literal error line, plain prose.
TEXTS = (
    STRICT,
    STRICT.upper(),
    STRICT.replace("reasonably", "sensibly"),
    STRICT.replace("conflicting", "matching").replace("install failure", "warning"),
    "在 Linux 上安装 npm 之前，需要先安装 Node.js。",
    "# Only a heading\n\n## And another",
    "",
    "class ReActAgent:\n    def run(self):\n        pass",
    "Call `ReActAgent` to loop over thought and action.",
    "The ReActAgentFactory builds agents.",
    "npm notice PING\nnpm ERR! code E404\nnpm ERR! 404 Not Found",
    "How do I install npm on Linux and set up the registry?",
    "Causes npm to completely ignore `peerDependencies` when building a package tree.",
    "Upgrading from v2.3.1 to 3.0 changes the lockfile.",
    "42 17 99",
)
HEADINGS = (
    "",
    "Configuration > `strict-peer-deps`",
    "Config > `legacy-peer-deps`",
    "Changelog > [2.3.1] - 2024-05-01 > Fixed",
    "API > `ReActAgent`",
    "安装",
)
TITLES = ("npm ci", "legacy-peer-deps", "Install", "ReActAgent", "Changelog", "安装")
QUERIES = (
    "ReActAgent",
    "legacy-peer-deps",
    "v2.3.1 release notes",
    "npm ERR! code E404",
    "how do I install npm on Linux",
    "安装 npm",
    "npm ci",
    "Install",
    '"peer dependency"',
    "strict peer deps",
)
PATHS = ("sag2", "dense", "title", "bm25")


def _views(rng: random.Random, n: int) -> dict[str, ChunkView]:
    views = {}
    for i in range(n):
        cid = f"c{i:03d}"
        text = rng.choice(TEXTS)
        title = rng.choice(TITLES)
        view = ChunkView(
            cid, f"r{rng.randrange(8)}", title, rng.choice(HEADINGS), text,
            rng.choice((None, rng.randrange(5))),
        )  # fmt: skip
        if rng.random() < 0.5:  # what a store reads: the stored title norm and facts
            view = dataclasses.replace(
                view, title_norm=normalize_title(title), facts=chunk_facts(text)
            )
        views[cid] = view
    return views


def _runs(rng: random.Random, ids: list[str]) -> dict[str, list[Hit]]:
    runs: dict[str, list[Hit]] = {}
    for path in rng.sample(PATHS, rng.randint(1, len(PATHS))):
        picked = rng.sample(ids, rng.randint(0, len(ids)))
        hits = []
        for rank, cid in enumerate(picked, start=1):
            score = 100.0 - rank + rng.random()
            judged = path == "sag2" and rng.random() < 0.7
            hits.append(
                Hit(cid, path, rank, score, score,
                    judge_p=round(rng.random(), 2) if judged else None,
                    next_hop=path == "sag2" and rng.random() < 0.2)
            )  # fmt: skip
        runs[path] = hits
    return runs


@st.composite
def fusion_cases(draw: st.DrawFn) -> tuple[dict, dict, dict, int]:
    seed = draw(st.integers(0, 2**32 - 1))
    n = draw(st.integers(1, 320))
    rng = random.Random(seed)
    views = _views(rng, n)
    ids = list(views) + [f"gone{i}" for i in range(rng.randint(0, 5))]  # some not visible
    runs = _runs(rng, ids)
    options = {
        "query": draw(st.sampled_from(QUERIES)),
        "method": draw(st.sampled_from(("rrf", "convex"))),
        "judge_accept": draw(st.sampled_from((None, 0.5, 0.9))),
        "judge_order": draw(st.booleans()),
        "pin_exact_titles": draw(st.integers(0, 3)),
        "strict_identifiers": draw(st.booleans()),
        "collapse": draw(st.booleans()),
        # issue 38's steps: the judge floor, the per-resource cap, neighbours merged (or not)
        "judge_floor": draw(st.sampled_from((0.0, 0.01, 0.5))),
        "max_per_resource": draw(st.sampled_from((0, 1, 2))),
        "off": draw(st.sampled_from(((), ("merge_adjacent",), ("duplicates",), ("drop_stub",)))),
    }
    limit = draw(st.integers(1, 40))
    return runs, views, options, limit


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fusion_cases())
def test_fusing_a_window_gives_the_first_hits_of_fusing_everything(case) -> None:
    runs, views, options, limit = case
    everything = fuse(runs, chunks=views, **options)
    assert fuse(runs, chunks=views, limit=limit, **options) == everything[:limit]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fusion_cases())
def test_stored_facts_fuse_as_facts_read_from_the_text(case) -> None:
    runs, views, options, _limit = case
    bare = {c: dataclasses.replace(v, title_norm=None, facts=None) for c, v in views.items()}
    stored = {
        c: dataclasses.replace(v, title_norm=normalize_title(v.title), facts=chunk_facts(v.text))
        for c, v in views.items()
    }
    assert fuse(runs, chunks=stored, **options) == fuse(runs, chunks=bare, **options)


def _hits(*ids: str) -> list[FusedHit]:
    return [FusedHit(c, i, 1.0 / (60 + i), ()) for i, c in enumerate(ids, start=1)]


def test_a_deep_hit_a_rule_may_lift_is_fused_with_the_window() -> None:
    """The literal error line sits 60 places down: the exact-phrase rule lifts it 50 places,
    so a top 12 fused over only the first 12 hits would miss it at rank 11; the window holds
    the first 12 plus the rule's bound and finds it there, as fusing everything does."""
    ids = [f"p{i:02d}" for i in range(70)]
    views = {c: ChunkView(c, c, "", "", f"plain prose number {c} about packages") for c in ids}
    views["p60"] = ChunkView("p60", "p60", "", "", "npm ERR! code E404 when installing")
    runs = {"bm25": [Hit(c, "bm25", i, 100.0 - i, 100.0 - i) for i, c in enumerate(ids, 1)]}
    everything = fuse(runs, query="npm ERR! code E404", chunks=views)
    assert everything[10].chunk_id == "p60"
    assert everything[10].rules == ("exact_phrase",)
    assert fuse(runs, query="npm ERR! code E404", chunks=views, limit=12) == everything[:12]
    assert RULE_BOUNDS["exact_phrase"].up == 50


def test_copies_inside_the_window_widen_it() -> None:
    """Ten copies of one text at the top leave one distinct result among them: the window
    doubles until the first three distinct texts (and every copy, in its order) are in it."""
    ids = [f"d{i:02d}" for i in range(12)] + [f"o{i:02d}" for i in range(80)]
    views = {c: ChunkView(c, c, "", "Opts", STRICT if c[0] == "d" else f"other text {c} here")
             for c in ids}  # fmt: skip
    runs = {"bm25": [Hit(c, "bm25", i, 100.0 - i, 100.0 - i) for i, c in enumerate(ids, 1)]}
    everything = fuse(runs, query="peer deps", chunks=views)
    top = fuse(runs, query="peer deps", chunks=views, limit=3)
    assert top == everything[:3]
    assert top[0].duplicates == tuple(ids[1:12])


def test_collapse_window_settles_only_what_it_can() -> None:
    hits = _hits("a", "b", "c", "d", "e")
    same = {c: ChunkView(c, c, "", "Opts", STRICT) for c in "ade"}
    views = {**same, "b": ChunkView("b", "b", "", "Opts", "b text"),
             "c": ChunkView("c", "c", "", "Opts", "c text")}  # fmt: skip
    whole = collapse_duplicates(hits, views)
    # one copy after the known part: it goes last among the copies
    assert collapse_window(hits[:3], hits[3:4], views, 2) == [
        dataclasses.replace(whole[0], duplicates=("d",)), whole[1]
    ]
    # two copies of one hit after the known part: their order is not known
    assert collapse_window(hits[:3], hits[3:], views, 2) is None
    # fewer distinct texts than wanted in the known part, more hits after it
    assert collapse_window(hits[:1], hits[1:], views, 2) is None
    assert collapse_window(hits, [], views, 3) == whole


@pytest.mark.parametrize("limit", [1, 2, 5])
def test_apply_rules_with_a_limit_is_the_first_hits(limit: int) -> None:
    ids = [f"h{i:03d}" for i in range(200)]
    views = {c: ChunkView(c, c, "", "", "在 Linux 上安装" if i % 3 else "install on Linux")
             for i, c in enumerate(ids)}  # fmt: skip
    hits = _hits(*ids)
    everything = apply_rules(hits, query="install on Linux", chunks=views)
    assert apply_rules(hits, query="install on Linux", chunks=views, limit=limit) == (
        everything[:limit]
    )
    assert "other_language" in everything[-1].rules


def test_a_bad_limit_is_named() -> None:
    with pytest.raises(ValueError, match="limit must be a positive integer or None, got 0"):
        fuse({}, query="x", chunks={}, limit=0)
