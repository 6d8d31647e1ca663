"""Copies of one text fold into one result (issue 27 item 6): exact, near-identical (case,
whitespace, punctuation) and high shingle overlap; the best-ranked copy stays and lists the
others; two options' identical bodies under their own headings stay two results."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hybridsag.fusion import ChunkView, FusedHit, Hit, fuse, normalize_title
from hybridsag.fusion.dedupe import NEAR_DUPLICATE, collapse_duplicates, resemblance
from hybridsag.fusion.facts import shingles

#: The text of npm's ``strict-peer-deps`` option, which npm's docs paste into every command page
#: that takes it (npm-ci.md, npm-dedupe.md, npm-install-test.md, config.md).
STRICT = (
    "* Default: false\n* Type: Boolean\n\nIf set to `true`, and `--legacy-peer-deps` is not set, "
    "then _any_\nconflicting `peerDependencies` will be treated as an install failure, even\n"
    "if npm could reasonably guess the appropriate resolution based on non-peer\n"
    "dependency relationships."
)
#: The next paragraph of the same section, which the chunker starts with the overlap sentence.
STRICT_NEXT = (
    "dependency relationships.\n\nBy default, conflicting `peerDependencies` deep in the "
    "dependency graph will\nbe resolved using the nearest non-peer dependency specification, "
    "even if\ndoing so will result in some packages receiving a peer dependency outside\nthe "
    "range set in their package's `peerDependencies` object."
)
HEADING = "Configuration > `strict-peer-deps`"


def fused(*chunk_ids: str) -> list[FusedHit]:
    return [FusedHit(c, i, 1.0 / (60 + i), ()) for i, c in enumerate(chunk_ids, start=1)]


def view(chunk_id: str, text: str, heading_path: str = HEADING) -> ChunkView:
    return ChunkView(chunk_id, f"r-{chunk_id}", chunk_id, heading_path, text)


def summary(hits: list[FusedHit]) -> list[tuple[str, int, tuple[str, ...], tuple[str, ...]]]:
    return [(h.chunk_id, h.rank, h.duplicates, h.rules) for h in hits]


def test_identical_copies_fold_into_the_best_ranked_one() -> None:
    chunks = {
        "ci": view("ci", STRICT, "npm-ci > Configuration > `strict-peer-deps`"),
        "dedupe": view("dedupe", STRICT, "npm-dedupe > Configuration > `strict-peer-deps`"),
        "next": view("next", STRICT_NEXT),
        "test": view("test", STRICT, "npm-install-test > Configuration > `strict-peer-deps`"),
        "legacy": view("legacy", "* Default: false\n* Type: Boolean\n\nCauses npm to "
                       "completely ignore `peerDependencies`.", "Config > `legacy-peer-deps`"),
    }  # fmt: skip
    out = collapse_duplicates(fused("ci", "dedupe", "next", "test", "legacy"), chunks)
    assert summary(out) == [
        ("ci", 1, ("dedupe", "test"), ("duplicates",)),
        ("next", 2, (), ()),
        ("legacy", 3, (), ()),
    ]
    # scores, fused positions and contributions are the kept hit's own
    assert out[1].score == 1.0 / 63


@pytest.mark.parametrize(
    "copy",
    [
        STRICT.upper(),  # case
        " ".join(STRICT.split()),  # whitespace and line breaks
        STRICT.replace("`", "").replace("_", "").replace("*", "-"),  # markup and punctuation
        STRICT.replace("reasonably", "sensibly"),  # one word of 40 changed: shingle overlap
    ],
)
def test_near_identical_copies_fold_too(copy: str) -> None:
    chunks = {"a": view("a", STRICT), "b": view("b", "Another text."), "c": view("c", copy)}
    out = collapse_duplicates(fused("a", "b", "c"), chunks)
    assert summary(out) == [("a", 1, ("c",), ("duplicates",)), ("b", 2, (), ())]


def test_distinct_texts_stay_apart() -> None:
    chunks = {
        # the same body under two options' headings is two answers; so is a page per function
        "api1": view("api1", STRICT, "API > `api1.call(path)`"),
        "api2": view("api2", STRICT, "API > `api2.call(path)`"),
        "strict": view("strict", "* Default: false\n* Type: Boolean", "Config > `strict-ssl`"),
        "legacy": view("legacy", "* Default: false\n* Type: Boolean", "Config > `legacy-peer-deps`"),
        # neighbouring chunks share only the overlap sentence
        "first": view("first", STRICT),
        "second": view("second", STRICT_NEXT),
        # a quarter of the words changed is another text
        "edited": view("edited", STRICT.replace("conflicting", "matching").replace(
            "install failure", "warning").replace("reasonably guess", "never pick")),
    }  # fmt: skip
    hits = fused(*chunks)
    assert collapse_duplicates(hits, chunks) == hits
    assert resemblance(STRICT, chunks["edited"].text) < NEAR_DUPLICATE


def test_a_hit_without_a_view_is_kept_and_never_compared() -> None:
    chunks = {"a": view("a", STRICT), "c": view("c", STRICT)}
    out = collapse_duplicates(fused("a", "gone", "c"), chunks)
    assert summary(out) == [("a", 1, ("c",), ("duplicates",)), ("gone", 2, (), ())]


@pytest.mark.parametrize("threshold", [0.0, -0.5, 1.5])
def test_a_bad_threshold_is_named(threshold: float) -> None:
    with pytest.raises(ValueError, match=f"duplicate threshold must be in \\(0, 1\\], got {threshold}"):
        collapse_duplicates([], {}, threshold=threshold)


def test_fuse_collapses_after_the_rules_and_keeps_k_distinct_results() -> None:
    """Three copies above the option's own section: fused, the section is second behind one
    copy that names the other two, and the first three results are three distinct texts."""
    names = ["ci", "dedupe", "test", "legacy", "other", "more"]
    runs = {"bm25": [Hit(c, "bm25", i, 10.0 - i, 10.0 - i) for i, c in enumerate(names, 1)]}
    chunks = {
        **{c: view(c, STRICT) for c in ("ci", "dedupe", "test")},
        "legacy": view("legacy", "Causes npm to ignore `peerDependencies`.", "Config > `legacy`"),
        "other": view("other", STRICT_NEXT),
        "more": view("more", "Run all build scripts in the foreground.", "Config > `fg`"),
    }
    out = fuse(runs, query="peer dependencies", chunks=chunks)
    assert [(h.chunk_id, h.duplicates) for h in out[:3]] == [
        ("ci", ("dedupe", "test")), ("legacy", ()), ("other", ())
    ]  # fmt: skip
    kept = fuse(runs, query="peer dependencies", chunks=chunks, collapse=False)
    assert [h.chunk_id for h in kept] == names


def _all_pairs(hits: list[FusedHit], chunks: dict[str, ChunkView], threshold: float) -> list:
    """The collapse by comparing every pair (the reference the buckets must equal): each hit
    is a copy of the first kept hit of its section whose shingle set resembles its own."""
    kept: list[tuple[FusedHit, str, frozenset[int], list[str]]] = []
    for hit in hits:
        view = chunks[hit.chunk_id]
        section = normalize_title(view.heading_path.rsplit(" > ", 1)[-1])
        mine = frozenset(shingles(view.text))
        for _h, sec, theirs, copies in kept:
            both = len(mine & theirs)
            if sec == section and both / (len(mine) + len(theirs) - both) >= threshold:
                copies.append(hit.chunk_id)
                break
        else:
            kept.append((hit, section, mine, []))
    return [(h.chunk_id, i, tuple(c)) for i, (h, _s, _m, c) in enumerate(kept, start=1)]


#: Words to draw texts from: few, so that drawn texts share shingles by chance as well.
_VOCAB = "npm peer deps install failure default boolean true set guess tree ci".split()


@st.composite
def _copies(draw: st.DrawFn) -> tuple[list[FusedHit], dict[str, ChunkView], float]:
    bases = draw(st.lists(st.lists(st.sampled_from(_VOCAB), min_size=1, max_size=30),
                          min_size=1, max_size=4))  # fmt: skip
    chunks: dict[str, ChunkView] = {}
    for i in range(draw(st.integers(1, 40))):
        words = list(draw(st.sampled_from(bases)))
        for _ in range(draw(st.integers(0, 4))):  # a few words changed: near the threshold
            words[draw(st.integers(0, len(words) - 1))] = draw(st.sampled_from(_VOCAB))
        heading = draw(st.sampled_from(("Opts", "Config > `strict`", "Config > `legacy`")))
        chunks[f"c{i}"] = ChunkView(f"c{i}", f"r{i}", "", heading, " ".join(words))
    threshold = draw(st.sampled_from((NEAR_DUPLICATE, 0.5, 0.95, 1.0)))
    return fused(*chunks), chunks, threshold


@settings(max_examples=300, deadline=None)
@given(_copies())
def test_the_buckets_decide_as_comparing_every_pair_does(case) -> None:
    """Prefix filtering only skips pairs that cannot reach the threshold: the copies folded
    are exactly those a comparison of every pair finds, at any threshold."""
    hits, chunks, threshold = case
    out = collapse_duplicates(hits, chunks, threshold=threshold)
    assert [(h.chunk_id, h.rank, h.duplicates) for h in out] == _all_pairs(hits, chunks, threshold)


@pytest.mark.parametrize(
    "texts",
    [
        (STRICT, STRICT_NEXT, STRICT.upper(), STRICT.replace("reasonably", "sensibly")),
        (STRICT, STRICT.replace("conflicting", "matching").replace("install failure", "warning")
         .replace("reasonably guess", "never pick"), " ".join(STRICT.split())),
    ],
)
def test_the_buckets_decide_as_every_pair_on_npm_text(texts: tuple[str, ...]) -> None:
    chunks = {f"c{i}": view(f"c{i}", t) for i, t in enumerate(texts)}
    hits = fused(*chunks)
    out = collapse_duplicates(hits, chunks)
    assert [(h.chunk_id, h.rank, h.duplicates) for h in out] == _all_pairs(
        hits, chunks, NEAR_DUPLICATE
    )
