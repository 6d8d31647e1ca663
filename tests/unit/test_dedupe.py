"""Copies of one text fold into one result (issue 27 item 6): exact, near-identical (case,
whitespace, punctuation) and high shingle overlap; the best-ranked copy stays and lists the
others; two options' identical bodies under their own headings stay two results."""

from __future__ import annotations

import pytest
from hybridsag.fusion import ChunkView, FusedHit, Hit, fuse
from hybridsag.fusion.dedupe import NEAR_DUPLICATE, collapse_duplicates, resemblance

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
