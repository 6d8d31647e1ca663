"""Unit tests for hybridsag.fusion: rrf(), the text helpers and the bounded rules.

Expected orders and scores are written out by hand from the RRF formula weight / (k + rank).
"""

from __future__ import annotations

import doctest
import importlib
import math
import re

import hybridsag.fusion as fusion
import pytest
from hybridsag.fusion import (
    ChunkView,
    Contribution,
    FusedHit,
    Hit,
    apply_rules,
    contains_whole_identifier,
    defines_identifier,
    fuse,
    is_heading_only,
    looks_like_identifier,
    normalize_title,
    rrf,
)
from hybridsag.fusion.text import hyphenated_name


def hit(chunk_id: str, path: str, rank: int, raw: float | None = None, **detail: object) -> Hit:
    """A hit whose raw score and score are derived from the rank, so they can be checked."""
    raw_score = float(-rank) if raw is None else raw
    return Hit(chunk_id, path, rank, raw_score, 1.0 / rank, dict(detail))


def ids(hits: list[FusedHit]) -> list[str]:
    return [h.chunk_id for h in hits]


# --------------------------------------------------------------------------------------------
# rrf


def test_rrf_exact_scores_order_and_contributions() -> None:
    runs = {
        "lexical": [hit("a", "lexical", 1, 7.5), hit("b", "lexical", 2, 6.0)],
        "dense": [hit("b", "dense", 1, 0.9, metric="cosine"), hit("c", "dense", 2, 0.8)],
    }
    fused = rrf(runs)

    assert ids(fused) == ["b", "a", "c"]
    assert [h.rank for h in fused] == [1, 2, 3]
    assert fused[0].score == 1 / 62 + 1 / 61
    assert fused[1].score == 1 / 61
    assert fused[2].score == 1 / 62
    assert all(h.rules == () for h in fused)

    b = fused[0]
    assert b.paths == ("lexical", "dense")
    assert b.best_rank == 1
    assert b.contributions == (
        Contribution("lexical", 2, 6.0, 0.5, 1 / 62, {}),
        Contribution("dense", 1, 0.9, 1.0, 1 / 61, {"metric": "cosine"}),
    )


def test_rrf_uses_the_hits_own_rank_not_list_position() -> None:
    fused = rrf({"p": [hit("x", "p", 5), hit("y", "p", 3)]})
    assert ids(fused) == ["y", "x"]
    assert fused[0].score == 1 / 63
    assert fused[1].score == 1 / 65
    assert fused[0].contributions[0].rank == 3


def test_rrf_custom_k() -> None:
    fused = rrf({"p": [hit("a", "p", 1), hit("b", "p", 2)]}, k=1)
    assert [h.score for h in fused] == [1 / 2, 1 / 3]


def test_rrf_three_paths_sum_is_order_independent() -> None:
    # c1 has ranks (1, 2, 3), c2 has (3, 2, 1): the same terms in a different path order.
    runs = {
        "p": [hit("c1", "p", 1), hit("c2", "p", 3)],
        "q": [hit("c1", "q", 2), hit("c2", "q", 2)],
        "r": [hit("c1", "r", 3), hit("c2", "r", 1)],
    }
    fused = rrf(runs)
    assert fused[0].score == fused[1].score
    assert fused[0].score == pytest.approx(1 / 61 + 1 / 62 + 1 / 63, rel=1e-15)
    # equal score and equal best rank: chunk_id decides
    assert ids(fused) == ["c1", "c2"]


def test_rrf_weights_scale_terms_and_default_to_one() -> None:
    runs = {
        "lexical": [hit("a", "lexical", 1)],
        "dense": [hit("b", "dense", 1)],
        "title": [hit("c", "title", 1)],
    }
    fused = rrf(runs, weights={"lexical": 0.5, "dense": 2.0, "unused": 9.0})
    assert ids(fused) == ["b", "c", "a"]
    assert fused[0].score == 2.0 / 61
    assert fused[1].score == 1.0 / 61  # title missing from weights -> 1.0
    assert fused[2].score == 0.5 / 61
    assert fused[0].contributions[0].rrf_term == 2.0 / 61


def test_rrf_weight_changes_the_winner() -> None:
    runs = {
        "lexical": [hit("a", "lexical", 1), hit("b", "lexical", 2)],
        "dense": [hit("b", "dense", 3), hit("a", "dense", 10)],
    }
    assert ids(rrf(runs)) == ["b", "a"]  # 1/62 + 1/63 > 1/61 + 1/70
    heavy = rrf(runs, weights={"lexical": 10.0})
    assert ids(heavy) == ["a", "b"]  # 10/61 + 1/70 > 10/62 + 1/63
    assert heavy[0].score == pytest.approx(10 / 61 + 1 / 70, rel=1e-15)
    assert heavy[1].score == pytest.approx(10 / 62 + 1 / 63, rel=1e-15)


def test_rrf_zero_weight_drops_path_terms_and_contributions() -> None:
    runs = {
        "lexical": [hit("a", "lexical", 1), hit("only_lexical", "lexical", 2)],
        "dense": [hit("a", "dense", 2), hit("b", "dense", 1)],
    }
    fused = rrf(runs, weights={"lexical": 0.0})
    assert ids(fused) == ["b", "a"]
    assert fused[0].score == 1 / 61
    assert fused[1].score == 1 / 62
    assert all(h.paths == ("dense",) for h in fused)


def test_rrf_depth_keeps_only_ranks_up_to_depth() -> None:
    runs = {
        "p": [hit("a", "p", 1), hit("b", "p", 2), hit("c", "p", 3)],
        "q": [hit("c", "q", 1), hit("d", "q", 4)],
    }
    fused = rrf(runs, depth=2)
    assert ids(fused) == ["a", "c", "b"]
    c = fused[1]
    assert c.paths == ("q",)  # c's rank 3 in p is beyond depth
    assert c.score == 1 / 61
    assert "d" not in ids(fused)
    assert ids(rrf(runs, depth=1)) == ["a", "c"]


def test_rrf_limit_cuts_after_sorting() -> None:
    runs = {"p": [hit("z", "p", 1), hit("y", "p", 2), hit("x", "p", 3)]}
    fused = rrf(runs, limit=2)
    assert ids(fused) == ["z", "y"]
    assert [h.rank for h in fused] == [1, 2]
    assert ids(rrf(runs, limit=10)) == ["z", "y", "x"]


def test_rrf_tie_broken_by_best_single_path_rank() -> None:
    # k = 1 makes the terms exact binary fractions, so the tie is exact:
    # "n" is found once at rank 1 -> 1/2; "m" twice at rank 3 -> 1/4 + 1/4 = 1/2.
    runs = {
        "p": [hit("n", "p", 1), hit("m", "p", 3)],
        "q": [hit("m", "q", 3)],
    }
    fused = rrf(runs, k=1)
    assert [h.score for h in fused] == [0.5, 0.5]
    assert ids(fused) == ["n", "m"]  # best single rank 1 beats 3, though "m" < "n"
    assert [h.best_rank for h in fused] == [1, 3]


def test_rrf_tie_broken_by_chunk_id_ascending() -> None:
    runs = {"p": [hit("b", "p", 1)], "q": [hit("a", "q", 1)], "r": [hit("c", "r", 1)]}
    fused = rrf(runs)
    assert ids(fused) == ["a", "b", "c"]
    assert {h.score for h in fused} == {1 / 61}


def test_rrf_duplicate_chunk_in_one_run_keeps_best_rank() -> None:
    runs = {
        "p": [
            hit("a", "p", 4, 1.0),
            hit("b", "p", 2),
            hit("a", "p", 1, 9.0),
            hit("a", "p", 1, 5.0),
        ]
    }
    fused = rrf(runs)
    assert ids(fused) == ["a", "b"]
    a = fused[0]
    assert len(a.contributions) == 1
    assert a.contributions[0].rank == 1
    assert a.contributions[0].raw_score == 9.0  # the first of the equal best ranks
    assert a.score == 1 / 61


def test_rrf_duplicate_beyond_depth_is_ignored() -> None:
    fused = rrf({"p": [hit("a", "p", 5), hit("a", "p", 2)]}, depth=3)
    assert fused[0].contributions[0].rank == 2
    assert fused[0].score == 1 / 62


def test_hit_rejects_zero_rank_and_empty_chunk_id() -> None:
    with pytest.raises(ValueError, match="Hit.rank is 1-based, got 0"):
        Hit("a", "p", 0, 1.0, 1.0)
    with pytest.raises(ValueError, match="chunk_id must not be empty"):
        Hit("", "p", 1, 1.0, 1.0)


def test_rrf_empty_inputs() -> None:
    assert rrf({}) == []
    assert rrf({"p": []}) == []
    assert rrf({"p": [hit("a", "p", 3)]}, depth=2) == []


def test_rrf_does_not_mutate_hits_and_keeps_detail() -> None:
    h = hit("a", "p", 1, judge_probability=0.83)
    fused = rrf({"p": [h]})
    assert fused[0].contributions[0].detail == {"judge_probability": 0.83}
    assert h.detail == {"judge_probability": 0.83}
    assert h.rank == 1


@pytest.mark.parametrize("bad_k", [0, -1.0, math.inf, math.nan])
def test_rrf_rejects_bad_k(bad_k: float) -> None:
    with pytest.raises(ValueError, match=r"rrf k must be a finite number > 0, got"):
        rrf({}, k=bad_k)


@pytest.mark.parametrize(("name", "value"), [("depth", 0), ("limit", 0), ("depth", -3)])
def test_rrf_rejects_bad_depth_and_limit(name: str, value: int) -> None:
    with pytest.raises(ValueError, match=rf"rrf {name} must be >= 1 or None, got {value}"):
        rrf({}, **{name: value})


@pytest.mark.parametrize("bad_weight", [-0.5, math.inf, math.nan])
def test_rrf_rejects_bad_weight(bad_weight: float) -> None:
    with pytest.raises(ValueError, match=r"rrf weight for path 'dense' must be"):
        rrf({"dense": []}, weights={"dense": bad_weight})


def test_rrf_rejects_hit_under_the_wrong_key() -> None:
    runs = {"lexical": [hit("a", "lexical", 1)], "dense": [hit("b", "title", 1)]}
    with pytest.raises(ValueError, match=r"run 'dense' holds a hit of path 'title'.*'b'"):
        rrf(runs)


def test_rrf_checks_paths_even_of_zero_weight_runs_and_beyond_depth() -> None:
    with pytest.raises(ValueError, match="holds a hit of path 'x'"):
        rrf({"p": [hit("a", "x", 9)]}, weights={"p": 0.0}, depth=1)


# --------------------------------------------------------------------------------------------
# text helpers


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("ReAct Agent!", "reactagent"),
        ("我的喜好", "我的喜好"),
        ("  我的 喜好。", "我的喜好"),
        ("《我的喜好》", "我的喜好"),
        # full-width letters and an ideographic space
        ("ＲｅＡｃｔ\u3000Ａｇｅｎｔ", "reactagent"),
        ("Straße", "strasse"),
        ("ﬁle\tname\n", "filename"),  # ligature, tab, newline
        ("Ünïcode — naïve", "ünïcodenaïve"),
        ("C++ & C#", "cc"),
        ("soft\u00adhyphen\u200bzero", "softhyphenzero"),  # Cf characters removed
        ("Привет, Мир", "приветмир"),
        ("हिन्दी", "हिन्दी"),  # combining marks kept
        ("v2.3.1", "v231"),
        ("!!! ???", ""),
        ("", ""),
    ],
)
def test_normalize_title(raw: str, expected: str) -> None:
    assert normalize_title(raw) == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("ReActAgent", "ReActAgent"),
        ("  ReActAgent \n", "ReActAgent"),
        ("`ReActAgent`", "ReActAgent"),
        ("getValue", "getValue"),
        ("HTTPServer", "HTTPServer"),
        ("snake_case_name", "snake_case_name"),
        ("MAX_SIZE", "MAX_SIZE"),
        ("__init__", "__init__"),
        ("_private", "_private"),
        ("os.path.join", "os.path.join"),
        ("hybridsag.fusion.rrf", "hybridsag.fusion.rrf"),
        ("E-1234", "E-1234"),
        ("v2.3.1", "v2.3.1"),
        ("gpt-4o", "gpt-4o"),
        ("agent", None),
        ("Python", None),
        ("NASA", None),
        ("e-mail", None),
        ("state-of-the-art", None),
        ("2024-01-01", None),
        ("3.14", None),
        ("i.e", None),
        ("e.g.", None),
        ("U.S.A", None),
        ("_", None),
        ("__", None),
        ("ReAct Agent", None),
        ("find ReActAgent", None),
        ("我的喜好", None),
        ("Café_au_lait", None),
        ("", None),
        ("   ", None),
        ("``", None),
        ("`", None),
        ("python3", None),
    ],
)
def test_looks_like_identifier(query: str, expected: str | None) -> None:
    assert looks_like_identifier(query) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ReActAgent", True),
        ("call ReActAgent(llm)", True),
        ("use `ReActAgent` here", True),
        ("agents.ReActAgent.run", True),
        ("调用ReActAgent的方法", True),
        ("ReActAgentFactory builds agents", False),
        ("MyReActAgent", False),
        ("ReActAgent_v2", False),
        ("ReActAgent2", False),
        ("reactagent", False),
        ("REACTAGENT", False),
        ("", False),
        ("first ReActAgentX then ReActAgent.", True),  # a later whole occurrence counts
    ],
)
def test_contains_whole_identifier(text: str, expected: bool) -> None:
    assert contains_whole_identifier(text, "ReActAgent") is expected


def test_contains_whole_identifier_special_characters_and_empty() -> None:
    assert contains_whole_identifier("see os.path.join(a, b)", "os.path.join")
    assert not contains_whole_identifier("see osxpathxjoin", "os.path.join")  # dots are literal
    assert contains_whole_identifier("error E-1234 raised", "E-1234")
    assert not contains_whole_identifier("error E-12345 raised", "E-1234")
    assert not contains_whole_identifier("anything", "")


@pytest.mark.parametrize(
    "text",
    [
        "class ReActAgent:\n    pass",
        "class ReActAgent(BaseAgent):",
        "import x\n\nclass ReActAgent(Base):\n    ...",
        "def ReActAgent(llm):",
        "    def ReActAgent(self):",
        "async def ReActAgent():",
        "export default class ReActAgent {",
        "pub struct ReActAgent {",
        "pub fn ReActAgent() {}",
        "func ReActAgent() {}",
        "type ReActAgent struct {",
        "interface ReActAgent {",
        "enum ReActAgent {",
        "function ReActAgent() {}",
        "ReActAgent = make_agent()",
        "ReActAgent: type[Agent] = make_agent()",
        "# ReActAgent",
        "intro\n## The `ReActAgent` class\nbody",
        "### ReActAgent ###",
        "```python\nx = 1\n```\n# ReActAgent",  # heading after a closed fence
    ],
)
def test_defines_identifier_true(text: str) -> None:
    assert defines_identifier(text, "ReActAgent")


@pytest.mark.parametrize(
    "text",
    [
        "agent = ReActAgent(llm)",
        "we use ReActAgent here",
        "class ReActAgentFactory:",
        "def ReActAgent_helper():",
        "classReActAgent",
        "ReActAgent == other",
        "x.ReActAgent = 1",
        "    ReActAgent = 1",  # not at line start
        "# ReActAgentFactory",
        "#ReActAgent",  # not a heading: no space
        "####### ReActAgent",  # seven hashes is not a heading
        "    # ReActAgent",  # four spaces: indented code, not a heading
        "```\n# ReActAgent\n```",  # a comment inside fenced code
        "~~~~\n# ReActAgent\n~~~\n# still inside\n",  # shorter closer does not close
        "```\n# ReActAgent\n~~~\n",  # other fence char does not close
        "",
    ],
)
def test_defines_identifier_false(text: str) -> None:
    assert not defines_identifier(text, "ReActAgent")


def test_defines_identifier_other_shapes_and_empty() -> None:
    assert defines_identifier("MAX_SIZE = 10", "MAX_SIZE")
    assert defines_identifier("def os.path.join", "os.path.join")
    assert not defines_identifier("class Anything:", "")
    assert defines_identifier("````\ncode\n````\n## E-1234 codes", "E-1234")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", True),
        ("   \n\t\n", True),
        ("# Title", True),
        ("# Title\n\n## Part\n", True),
        ("   ### Indented heading", True),
        ("#", True),
        ("## ", True),
        ("# Title\nbody", False),
        ("#hashtag", False),
        ("    # code comment", False),
        ("####### seven", False),
        ("Title\n=====", False),
        ("```\n```", False),
        ("我的喜好", False),
    ],
)
def test_is_heading_only(text: str, expected: bool) -> None:
    assert is_heading_only(text) is expected


# --------------------------------------------------------------------------------------------
# apply_rules


def fh(chunk_id: str, rank: int, score: float, rules: tuple[str, ...] = ()) -> FusedHit:
    contribution = Contribution("p", rank, float(rank), 1.0, score, {})
    return FusedHit(chunk_id, rank, score, (contribution,), rules)


def view(
    chunk_id: str,
    text: str,
    *,
    title: str = "Some notes",
    resource_id: str | None = None,
    heading_path: str = "",
) -> ChunkView:
    return ChunkView(chunk_id, resource_id or f"r-{chunk_id}", title, heading_path, text)


def fused_list(*chunk_ids: str) -> list[FusedHit]:
    return [fh(c, i, 1.0 / (60 + i)) for i, c in enumerate(chunk_ids, start=1)]


def summary(hits: list[FusedHit]) -> list[tuple[str, int, tuple[str, ...]]]:
    return [(h.chunk_id, h.rank, h.rules) for h in hits]


def plain_views(*chunk_ids: str) -> dict[str, ChunkView]:
    """Each chunk its own resource, untitled, with a plain body of its own: no rule reads
    anything in it (nor folds two into one as copies)."""
    return {c: ChunkView(c, c, "", "", f"text of {c}") for c in chunk_ids}


def test_rules_noop_for_plain_query() -> None:
    fused = fused_list("a", "b", "c")
    chunks = {c: view(c, f"text about agents {c}") for c in "abc"}
    out = apply_rules(fused, query="agents", chunks=chunks)
    assert out == fused
    assert out is not fused


def test_rules_drop_heading_only() -> None:
    fused = fused_list("a", "b", "c")
    chunks = {
        "a": view("a", "# Setup\n\n## Install"),
        "b": view("b", "pip install hybridsag"),
        "c": view("c", ""),
    }
    out = apply_rules(fused, query="setup", chunks=chunks)
    assert summary(out) == [("b", 1, ())]
    assert out[0].score == fused[1].score  # scores unchanged, rank renumbered


def test_rules_exact_title_pins_to_front_with_chinese_title() -> None:
    fused = fused_list("a", "b", "c")
    chunks = {
        "a": view("a", "鱼的做法", title="菜谱"),
        "b": view("b", "周末去爬山", title="日记"),
        "c": view("c", "爱吃鱼", title="我的喜好"),
    }
    out = apply_rules(fused, query=" 我的喜好？", chunks=chunks)
    assert summary(out) == [("c", 1, ("exact_title",)), ("a", 2, ()), ("b", 3, ())]
    assert [h.score for h in out] == [fused[2].score, fused[0].score, fused[1].score]


def test_rules_exact_title_pins_best_chunk_per_resource_only() -> None:
    fused = fused_list("x", "c1", "c2")
    chunks = {
        "x": view("x", "other"),
        "c1": view("c1", "first part", title="ReAct Agent", resource_id="doc"),
        "c2": view("c2", "second part", title="ReAct Agent", resource_id="doc"),
    }
    out = apply_rules(fused, query="react agent", chunks=chunks)
    assert summary(out) == [("c1", 1, ("exact_title",)), ("x", 2, ()), ("c2", 3, ())]


def test_rules_exact_title_pin_limit_and_relative_order() -> None:
    fused = fused_list("n", "t1", "t2", "t3", "t4")
    chunks = {"n": view("n", "no title match")}
    for c in ("t1", "t2", "t3", "t4"):
        chunks[c] = view(c, f"body {c}", title="Release Notes")
    out = apply_rules(fused, query="release notes", chunks=chunks, pin_exact_titles=2)
    assert summary(out) == [
        ("t1", 1, ("exact_title",)),
        ("t2", 2, ("exact_title",)),
        ("n", 3, ()),
        ("t3", 4, ()),
        ("t4", 5, ()),
    ]
    default = apply_rules(fused, query="release notes", chunks=chunks)
    assert ids(default) == ["t1", "t2", "t3", "n", "t4"]
    off = apply_rules(fused, query="release notes", chunks=chunks, pin_exact_titles=0)
    assert off == fused


def test_rules_exact_title_needs_full_match_and_nonempty_query() -> None:
    fused = fused_list("a", "b")
    chunks = {
        "a": view("a", "body", title="!!!"),
        "b": view("b", "body", title="我的喜好和习惯"),
    }
    assert apply_rules(fused, query="?!", chunks=chunks) == fused  # empty normalised query
    assert apply_rules(fused, query="我的喜好", chunks=chunks) == fused  # only a prefix


def test_rules_heading_only_dropped_before_title_pin() -> None:
    fused = fused_list("h", "x", "b")
    chunks = {
        "h": view("h", "# 我的喜好", title="我的喜好", resource_id="r"),
        "x": view("x", "无关"),
        "b": view("b", "爱吃鱼", title="我的喜好", resource_id="r"),
    }
    out = apply_rules(fused, query="我的喜好", chunks=chunks)
    assert summary(out) == [("b", 1, ("exact_title",)), ("x", 2, ())]


def test_rules_identifier_tiers() -> None:
    fused = fused_list("partial", "none", "heading", "mention", "definition", "title_only")
    chunks = {
        "partial": view("partial", "ReActAgentFactory builds agents"),
        "none": view("none", "nothing relevant"),
        "heading": view("heading", "the run loop", heading_path="ReActAgent > Run loop"),
        "mention": view("mention", "agent = ReActAgent(llm)"),
        "definition": view("definition", "class ReActAgent(BaseAgent):\n    ..."),
        "title_only": view("title_only", "see the docs", title="ReActAgent reference"),
    }
    out = apply_rules(fused, query="ReActAgent", chunks=chunks)
    assert summary(out) == [
        ("definition", 1, ("identifier_definition",)),
        ("mention", 2, ("identifier_whole",)),
        ("heading", 3, ("identifier_heading_only",)),
        ("title_only", 4, ("identifier_heading_only",)),
        ("partial", 5, ("identifier_partial",)),
        ("none", 6, ()),
    ]
    by_id = {h.chunk_id: h for h in fused}
    assert all(h.score == by_id[h.chunk_id].score for h in out)
    assert all(h.contributions == by_id[h.chunk_id].contributions for h in out)


def test_rules_identifier_tier_keeps_fused_order_within_tier() -> None:
    fused = fused_list("m1", "d1", "m2", "d2")
    chunks = {
        "m1": view("m1", "uses `max_tokens`"),
        "d1": view("d1", "max_tokens = 512"),
        "m2": view("m2", "pass max_tokens=100"),
        "d2": view("d2", "def max_tokens(cfg):"),
    }
    out = apply_rules(fused, query="max_tokens", chunks=chunks)
    assert ids(out) == ["d1", "d2", "m1", "m2"]


def test_rules_reactagent_vs_factory() -> None:
    fused = fused_list("factory", "agent")
    chunks = {
        "factory": view("factory", "class ReActAgentFactory:\n    def build(self): ..."),
        "agent": view("agent", "Wrap the tool list in a ReActAgent."),
    }
    out = apply_rules(fused, query="ReActAgent", chunks=chunks)
    assert summary(out) == [
        ("agent", 1, ("identifier_whole",)),
        ("factory", 2, ("identifier_partial",)),
    ]


def test_rules_exact_title_pin_comes_before_identifier_tiers() -> None:
    fused = fused_list("def", "titled")
    chunks = {
        "def": view("def", "class ReActAgent:"),
        "titled": view("titled", "overview", title="ReActAgent"),
    }
    out = apply_rules(fused, query="ReActAgent", chunks=chunks)
    assert summary(out) == [
        ("titled", 1, ("exact_title",)),
        ("def", 2, ("identifier_definition",)),
    ]


def test_rules_extend_existing_rules() -> None:
    fused = [fh("a", 1, 0.5, rules=("earlier",))]
    out = apply_rules(fused, query="E-1234", chunks={"a": view("a", "error E-1234")})
    assert out[0].rules == ("earlier", "identifier_whole")


def test_rules_strict_identifiers_returns_empty_without_exact_match() -> None:
    fused = fused_list("partial", "heading")
    chunks = {
        "partial": view("partial", "ReActAgentFactory"),
        "heading": view("heading", "body", heading_path="ReActAgent > Usage"),
    }
    assert apply_rules(fused, query="ReActAgent", chunks=chunks, strict_identifiers=True) == []
    lenient = apply_rules(fused, query="ReActAgent", chunks=chunks)
    assert ids(lenient) == ["heading", "partial"]


def test_rules_strict_identifiers_keeps_whole_result_when_one_exact_match() -> None:
    fused = fused_list("partial", "mention")
    chunks = {
        "partial": view("partial", "ReActAgentFactory"),
        "mention": view("mention", "a ReActAgent here"),
    }
    out = apply_rules(fused, query="ReActAgent", chunks=chunks, strict_identifiers=True)
    assert ids(out) == ["mention", "partial"]


def test_rules_strict_identifiers_kept_by_exact_title_even_unpinned() -> None:
    fused = fused_list("t")
    chunks = {"t": view("t", "overview only", title="ReActAgent")}
    pinned = apply_rules(fused, query="ReActAgent", chunks=chunks, strict_identifiers=True)
    assert summary(pinned) == [("t", 1, ("exact_title",))]
    unpinned = apply_rules(
        fused, query="ReActAgent", chunks=chunks, strict_identifiers=True, pin_exact_titles=0
    )
    assert summary(unpinned) == [("t", 1, ("identifier_heading_only",))]


def test_rules_strict_identifiers_ignored_for_non_identifier_query() -> None:
    fused = fused_list("a")
    chunks = {"a": view("a", "nothing")}
    assert apply_rules(fused, query="agent", chunks=chunks, strict_identifiers=True) == fused


def test_rules_strict_identifiers_with_no_hits() -> None:
    assert apply_rules([], query="ReActAgent", chunks={}, strict_identifiers=True) == []


def test_rules_missing_chunk_is_kept_without_rules() -> None:
    fused = fused_list("a", "ghost", "b")
    chunks = {"a": view("a", "text a"), "b": view("b", "text b")}
    assert apply_rules(fused, query="anything", chunks=chunks) == fused

    id_chunks = {"a": view("a", "no match"), "b": view("b", "class ReActAgent:")}
    out = apply_rules(fused, query="ReActAgent", chunks=id_chunks)
    assert summary(out) == [
        ("b", 1, ("identifier_definition",)),
        ("a", 2, ()),
        ("ghost", 3, ()),
    ]
    # a missing chunk is no exact match for strict mode
    only_ghost = apply_rules(
        fused_list("ghost"), query="ReActAgent", chunks={}, strict_identifiers=True
    )
    assert only_ghost == []


def test_rules_hyphenated_option_is_an_identifier_where_a_heading_defines_it() -> None:
    """``legacy-peer-deps``: the section headed by the option outranks three copies of another
    option's text that mention it; a hyphenated English compound with no such heading is left
    to the other rules."""
    fused = fused_list("copy1", "copy2", "copy3", "other", "defining")
    mention = "Like `legacy-peer-deps`, `strict-peer-deps` changes how peers are resolved."
    chunks = {
        **{c: view(c, mention, heading_path="Config > `strict-peer-deps`")
           for c in ("copy1", "copy2", "copy3")},
        "other": view("other", "unrelated"),
        "defining": view("defining", "* Default: false", heading_path="Config > `legacy-peer-deps`"),
    }  # fmt: skip
    for query in ("legacy-peer-deps", "--legacy-peer-deps", "`legacy-peer-deps`"):
        out = apply_rules(fused, query=query, chunks=chunks)
        assert summary(out)[0] == ("defining", 1, ("identifier_definition",)), query
    prose = {c: view(c, "a state-of-the-art method") for c in ("copy1", "copy2", "copy3", "other")}
    prose["defining"] = view("defining", "state-of-the-art results", heading_path="Results")
    assert apply_rules(fused, query="state-of-the-art", chunks=prose) == fused


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("legacy-peer-deps", "legacy-peer-deps"),
        ("--save-exact", "save-exact"),
        ("-x-y", "x-y"),
        (" `dry-run` ", "dry-run"),
        ("state-of-the-art", "state-of-the-art"),
        ("save", None),
        ("Legacy-Peer-Deps", None),
        ("legacy peer deps", None),
        ("---x-y", None),
        ("a--b", None),
        ("x-", None),
    ],
)
def test_hyphenated_name(query: str, expected: str | None) -> None:
    assert hyphenated_name(query) == expected


def test_rules_reject_negative_pin_limit() -> None:
    with pytest.raises(ValueError, match="pin_exact_titles must be >= 0, got -1"):
        apply_rules([], query="q", chunks={}, pin_exact_titles=-1)


def test_rrf_then_rules_end_to_end() -> None:
    runs = {
        "lexical": [hit("c-factory", "lexical", 1), hit("c-def", "lexical", 2)],
        "dense": [hit("c-head", "dense", 1), hit("c-def", "dense", 3)],
        "title": [hit("c-title", "title", 1)],
    }
    fused = rrf(runs, weights={"title": 0.5})
    assert ids(fused) == ["c-def", "c-factory", "c-head", "c-title"]
    chunks = {
        "c-factory": view("c-factory", "ReActAgentFactory()"),
        "c-def": view("c-def", "class ReActAgent:"),
        "c-head": view("c-head", "# ReActAgent"),
        "c-title": view("c-title", "see ReActAgent", title="ReAct agent"),
    }
    out = apply_rules(fused, query="ReActAgent", chunks=chunks)
    assert summary(out) == [
        ("c-title", 1, ("exact_title",)),
        ("c-def", 2, ("identifier_definition",)),
        ("c-factory", 3, ("identifier_partial",)),
    ]
    assert out[0].score == 0.5 / 61
    assert out[1].score == 1 / 62 + 1 / 63


# --------------------------------------------------------------------------------------------
# public surface


_SUBMODULES = {
    "confidence", "dedupe", "facts", "markdown", "results", "rules", "text", "trust", "types",
}  # fmt: skip


def test_fusion_all_is_accurate() -> None:
    assert sorted(fusion.__all__) == sorted(
        name for name in vars(fusion) if not name.startswith("_") and name not in _SUBMODULES
    )
    assert sorted(fusion.__all__) == [
        "ChunkFacts",
        "ChunkView",
        "Contribution",
        "DEFAULT_TRUST_MODEL",
        "FusedHit",
        "Hit",
        "KINDS",
        "METHODS",
        "NORMALISERS",
        "QueryFacts",
        "RULE_REASONS",
        "SIGNAL_NAMES",
        "STEPS",
        "Trust",
        "TrustModel",
        "apply_rules",
        "assess",
        "cap_per_resource",
        "chunk_facts",
        "contains_whole_identifier",
        "convex",
        "defines_identifier",
        "fuse",
        "is_heading_only",
        "list_stats",
        "looks_like_identifier",
        "markup_only",
        "merge_adjacent",
        "monotone_scores",
        "normalise",
        "normalize_title",
        "rrf",
        "trust_signals",
    ]
    for name in fusion.__all__:
        assert getattr(fusion, name) is not None
    public = {n for n in vars(fusion) if not n.startswith("_")}
    assert public - set(fusion.__all__) <= _SUBMODULES


@pytest.mark.parametrize(
    "module",
    [
        "convex", "dedupe", "facts", "fuse", "results", "rrf", "rules", "text.markdown",
        "text.matching", "trust", "types",
    ],  # fmt: skip
)
def test_submodule_all_lists_its_public_callables(module: str) -> None:
    mod = importlib.import_module(f"hybridsag.fusion.{module}")
    defined_here = {
        name
        for name, value in vars(mod).items()
        if not name.startswith("_")
        and callable(value)
        and getattr(value, "__module__", None) == mod.__name__
    }
    assert defined_here <= set(mod.__all__)
    # the rest of __all__ are constants defined there (RULE_REASONS)
    for name in set(mod.__all__) - defined_here:
        assert not callable(getattr(mod, name)) and name.isupper()


def test_every_rule_name_has_a_reason() -> None:
    import hybridsag.fusion.rules as rules_module

    named = set(re.findall(r"^- ``(\w+)``", rules_module.__doc__ or "", flags=re.M))
    assert named == set(fusion.RULE_REASONS)
    assert all(reason and not reason.endswith(".") for reason in fusion.RULE_REASONS.values())


@pytest.mark.parametrize(
    "module", ["confidence", "dedupe", "facts", "fuse", "rrf", "rules", "text.matching"]
)
def test_docstring_examples_run(module: str) -> None:
    mod = importlib.import_module(f"hybridsag.fusion.{module}")
    result = doctest.testmod(mod, raise_on_error=False)
    assert result.attempted > 0
    assert result.failed == 0


# --------------------------------------------------------------------------- judge_accepted


def _judged(chunk_id: str, fused_rank: int, sag2_rank: int | None, p: float | None) -> FusedHit:
    contribs = []
    if sag2_rank is not None:
        contribs.append(Contribution("sag2", sag2_rank, p or 0.0, p or 0.0, 0.01, {}, judge_p=p))
    contribs.append(Contribution("dense", fused_rank, 0.5, 0.5, 0.02, {}))
    return FusedHit(chunk_id, fused_rank, 1.0 / fused_rank, tuple(contribs))


def test_judge_accepted_hits_come_first_in_sag2_order() -> None:
    fused = [
        _judged("d1", 1, None, None),  # dense only
        _judged("s_low", 2, 1, 0.2),  # the judge said no
        _judged("s_b", 3, 3, 0.7),  # accepted, sag2 rank 3
        _judged("s_a", 4, 2, 0.9),  # accepted, sag2 rank 2
    ]
    views = plain_views(*(h.chunk_id for h in fused))
    out = apply_rules(fused, query="who directed it", chunks=views, judge_accept=0.5)
    assert [h.chunk_id for h in out] == ["s_a", "s_b", "d1", "s_low"]
    assert [h.rank for h in out] == [1, 2, 3, 4]
    assert out[0].rules == ("judge_accepted",) and out[2].rules == ()
    # off by default, and never for an identifier query
    assert [h.chunk_id for h in apply_rules(fused, query="who directed it", chunks=views)] == [
        "d1", "s_low", "s_b", "s_a"
    ]
    ident = apply_rules(fused, query="ReActAgent", chunks=views, judge_accept=0.5)
    assert all("judge_accepted" not in h.rules for h in ident)


# --------------------------------------------------------------------------- next_hop_slot


def _sag2(chunk_id: str, rank: int, p: float, *, next_hop: bool = False) -> Hit:
    return Hit(chunk_id, "sag2", rank, p, p, {}, judge_p=p, next_hop=next_hop)


def test_rrf_carries_next_hop_into_contributions() -> None:
    fused = rrf(
        {
            "sag2": [_sag2("a", 1, 0.9), _sag2("hop", 2, 0.4, next_hop=True)],
            "dense": [hit("a", "dense", 1), hit("both", "dense", 2)],
        },
        k=10,
    )
    by_id = {f.chunk_id: f for f in fused}
    assert by_id["hop"].next_hop_rank == 2
    assert [c.next_hop for c in by_id["hop"].contributions] == [True]
    assert by_id["a"].next_hop_rank is None
    assert by_id["both"].next_hop_rank is None
    assert by_id["hop"].score == 1 / 12  # RRF scores are untouched: the rule reorders only


def test_next_hop_hit_keeps_its_sag2_slot_against_other_paths_votes() -> None:
    # SAG2: s1, hop (found by an expansion query), s3. Dense never ran the next-hop query and
    # votes for d1 and s3, which plain RRF would put above hop.
    runs = {
        "sag2": [_sag2("s1", 1, 0.3), _sag2("hop", 2, 0.3, next_hop=True), _sag2("s3", 3, 0.2)],
        "dense": [hit("d1", "dense", 1), hit("s3", "dense", 2)],
    }
    plain = rrf(runs, k=10)
    assert ids(plain) == ["s3", "d1", "s1", "hop"]  # d1 ties s1 at 1/11; "d1" < "s1"
    views = plain_views("s1", "hop", "s3", "d1")
    out = apply_rules(plain, query="who directed it", chunks=views)
    assert ids(out) == ["s3", "hop", "d1", "s1"]
    assert [h.rank for h in out] == [1, 2, 3, 4]
    assert out[1].rules == ("next_hop_slot",)
    assert all(h.rules == () for i, h in enumerate(out) if i != 1)


def test_consecutive_next_hops_each_take_their_own_slot() -> None:
    # the three-hop chain: SAG2 ranks the film, then two next hops, then a lexical distractor
    # that BM25 also votes for; RRF puts the distractor above both next hops
    runs = {
        "sag2": [
            _sag2("film", 1, 0.6),
            _sag2("hop1", 2, 0.3, next_hop=True),
            _sag2("hop2", 3, 0.2, next_hop=True),
            _sag2("noise", 4, 0.1),
        ],
        "bm25": [hit("film", "bm25", 1), hit("noise", "bm25", 2)],
    }
    views = plain_views("film", "hop1", "hop2", "noise")
    assert ids(rrf(runs, k=10)) == ["film", "noise", "hop1", "hop2"]
    out = fuse(runs, query="who directed it", chunks=views, k=10)
    assert summary(out) == [
        ("film", 1, ()),
        ("hop1", 2, ("next_hop_slot",)),
        ("hop2", 3, ("next_hop_slot",)),
        ("noise", 4, ()),
    ]


def test_next_hop_slot_counts_after_pins_and_stacks_hits_of_one_slot() -> None:
    fused = [
        FusedHit("t", 1, 0.3, (Contribution("title", 1, 1.0, 1.0, 0.3),)),
        fh("x", 2, 0.2),
        fh("y", 3, 0.1),
        FusedHit("h1", 4, 0.05, (Contribution("sag2", 2, 0.4, 0.4, 0.05, {}, next_hop=True),)),
        FusedHit("h2", 5, 0.04, (Contribution("sag2", 2, 0.3, 0.3, 0.04, {}, next_hop=True),)),
        FusedHit("h3", 6, 0.03, (Contribution("sag2", 9, 0.2, 0.2, 0.03, {}, next_hop=True),)),
    ]
    views = {h.chunk_id: view(h.chunk_id, f"text of {h.chunk_id}") for h in fused}
    views["t"] = view("t", "text", title="Lothair II")
    out = apply_rules(fused, query="Lothair II", chunks=views)
    # t is pinned; h1 and h2 both claim SAG2 rank 2, which is slot 1 after the one pin;
    # h3's slot (8) lies below where RRF already has it, so it stays, without the rule name
    assert summary(out) == [
        ("t", 1, ("exact_title",)),
        ("h1", 2, ("next_hop_slot",)),
        ("h2", 3, ("next_hop_slot",)),
        ("x", 4, ()),
        ("y", 5, ()),
        ("h3", 6, ()),
    ]


def test_next_hop_hit_is_lifted_by_other_paths_never_sunk() -> None:
    # "hop" was found by SAG2's next-hop query at rank 3 and by dense at rank 3: RRF puts it
    # first, and the rule leaves it there. "deep" is SAG2's rank-4 next hop that dense saw
    # only at rank 90: that faint vote must not let d2 and s2 push it below slot 4.
    runs = {
        "sag2": [
            _sag2("s1", 1, 0.3),
            _sag2("s2", 2, 0.3),
            _sag2("hop", 3, 0.2, next_hop=True),
            _sag2("deep", 4, 0.2, next_hop=True),
        ],
        "dense": [
            hit("d1", "dense", 1),
            hit("d2", "dense", 2),
            hit("hop", "dense", 3),
            hit("deep", "dense", 90),
        ],
    }
    views = plain_views("s1", "s2", "hop", "deep", "d1", "d2")
    plain = rrf(runs, k=10)
    assert ids(plain) == ["hop", "d1", "s1", "d2", "s2", "deep"]
    out = fuse(runs, query="who directed it", chunks=views, k=10)
    assert summary(out) == [
        ("hop", 1, ()),
        ("d1", 2, ()),
        ("s1", 3, ()),
        ("deep", 4, ("next_hop_slot",)),
        ("d2", 5, ()),
        ("s2", 6, ()),
    ]


def test_judge_accepted_still_comes_before_next_hop_slots() -> None:
    runs = {
        "sag2": [_sag2("hop", 1, 0.4, next_hop=True), _sag2("yes", 2, 0.8)],
        "dense": [hit("d1", "dense", 1)],
    }
    views = plain_views("hop", "yes", "d1")
    out = fuse(runs, query="who directed it", chunks=views, k=10, judge_accept=0.5)
    assert summary(out) == [
        ("yes", 1, ("judge_accepted",)),
        ("hop", 2, ("next_hop_slot",)),
        ("d1", 3, ()),
    ]


def test_fuse_is_rrf_then_rules_over_the_given_chunks_only() -> None:
    runs = {
        "bm25": [hit("a", "bm25", 1), hit("gone", "bm25", 2), hit("b", "bm25", 3)],
        "title": [hit("b", "title", 1)],
    }
    views = {"a": view("a", "text a"), "b": view("b", "text b", title="Fish")}
    out = fuse(runs, query="fish", chunks=views, k=60, weights={"title": 0.5})
    assert summary(out) == [("b", 1, ("exact_title",)), ("a", 2, ())]
    assert out[0].score == 1 / 63 + 0.5 / 61
    with pytest.raises(ValueError, match="pin_exact_titles"):
        fuse(runs, query="fish", chunks=views, pin_exact_titles=-1)
    with pytest.raises(ValueError, match="rrf k"):
        fuse(runs, query="fish", chunks=views, k=0)


# --------------------------------------------------------------------------- judge_order


def test_judge_order_refills_the_judged_slots_in_sag2_order() -> None:
    fused = [
        _judged("d1", 1, None, None),  # dense only: no judge saw it, keeps slot 1
        _judged("s_low", 2, 3, 0.2),  # the judge put it third
        _judged("d2", 3, None, None),  # keeps slot 3
        _judged("s_mid", 4, 2, 0.3),
        _judged("s_top", 5, 1, 0.4),
    ]
    views = plain_views(*(h.chunk_id for h in fused))
    out = apply_rules(fused, query="who directed it", chunks=views, judge_order=True)
    assert summary(out) == [
        ("d1", 1, ()),
        ("s_top", 2, ("judge_order",)),
        ("d2", 3, ()),
        ("s_mid", 4, ()),
        ("s_low", 5, ("judge_order",)),
    ]
    # with judge_accept the judge's "yes" still comes first, then the order over the slots
    out = apply_rules(
        fused, query="who directed it", chunks=views, judge_accept=0.35, judge_order=True
    )
    assert [h.chunk_id for h in out] == ["s_top", "d1", "s_mid", "d2", "s_low"]
    # off by default, and never for an identifier query (identifier tiers decide there)
    assert [h.chunk_id for h in apply_rules(fused, query="who directed it", chunks=views)] == [
        "d1", "s_low", "d2", "s_mid", "s_top"
    ]
    ident = apply_rules(fused, query="ReActAgent", chunks=views, judge_order=True)
    assert all("judge_order" not in h.rules for h in ident)


def test_judge_order_through_fuse_gives_sag2_order_plus_unjudged_hits() -> None:
    runs = {
        "sag2": [_sag2("a", 1, 0.4), _sag2("b", 2, 0.3), _sag2("c", 3, 0.2)],
        "dense": [hit("c", "dense", 1), hit("x", "dense", 2), hit("b", "dense", 3)],
    }
    views = plain_views(*"abcx")
    plain = fuse(runs, query="who directed it", chunks=views, k=10)
    assert ids(plain) == ["c", "b", "a", "x"]
    judged = fuse(runs, query="who directed it", chunks=views, k=10, judge_order=True)
    assert ids(judged) == ["a", "b", "c", "x"]
    assert {h.chunk_id: h.score for h in judged} == {h.chunk_id: h.score for h in plain}


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [
        ("hybridsag.fusion.markdown", "hybridsag.fusion.text.markdown", "prose_blocks"),
        ("hybridsag.sentences", "hybridsag.fusion.text.sentences", "split_sentences"),
    ],
)
def test_a_moved_text_module_stays_importable_for_a_release_and_warns(
    old: str, new: str, name: str
) -> None:
    """The text helpers moved into one package (hybridsag.fusion.text): the old module names
    still give the same objects, with a DeprecationWarning that names the new place."""
    with pytest.warns(DeprecationWarning, match=f"moved to {new}.{name}"):
        value = getattr(importlib.import_module(old), name)
    assert value is getattr(importlib.import_module(new), name)
