"""SAG-Wiki chunker: whole sentences, whole-sentence overlap, headings, lines, bytes, code."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridsag.ingest import chunker
from hybridsag.documents import Chunk
from hybridsag.ingest.chunker import chunk_text, rst_adornment, rst_title
from hybridsag.fusion.text.sentences import has_name, name_spans, split_sentences

CORPUS = Path(__file__).resolve().parents[2] / "samples" / "corpus"


def _check_invariants(source: str, chunks: list[Chunk]) -> None:
    """What must hold for every chunk of every input."""
    data = source.encode("utf-8")
    lines = source.splitlines(keepends=True)  # no \x0b etc. in our inputs
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        assert data[c.byte_start : c.byte_end].decode("utf-8") == c.text
        assert c.text and c.text.strip() == c.text
        first_line_prefix = "".join(lines[: c.start_line - 1])
        assert len(first_line_prefix.encode()) <= c.byte_start
        assert c.byte_start < len("".join(lines[: c.start_line]).encode())
        assert c.end_line - c.start_line == len(re.findall(r"\r\n|\r|\n", c.text))


def _spanned(chunks: list[Chunk]) -> list[str]:
    return [c.text for c in chunks]


# --------------------------------------------------------------------------- sentences


def test_english_sentences_never_cut_and_overlap_is_whole_trailing_sentences() -> None:
    # six sentences of 30 chars: 3 fit in 100 (92 chars), 4 do not (123)
    sents = [f"Sentence {w} is right here ok." for w in ("one", "two", "six", "ten", "ace", "duo")]
    assert {len(s) for s in sents} == {30}
    text = " ".join(sents)
    chunks = chunk_text(text, target_chars=100, overlap_chars=40)
    # overlap 40: the last sentence (30) fits, the last two (60) do not
    assert _spanned(chunks) == [
        " ".join(sents[0:3]),
        " ".join(sents[2:5]),
        " ".join(sents[4:6]),
    ]
    _check_invariants(text, chunks)


def test_overlap_zero_and_overlap_never_the_whole_previous_chunk() -> None:
    sents = [f"Short {n} here." for n in "abcdefgh"]  # 13 chars each
    text = " ".join(sents)
    no_overlap = chunk_text(text, target_chars=30, overlap_chars=0)
    assert _spanned(no_overlap) == [" ".join(sents[i : i + 2]) for i in range(0, 8, 2)]
    # overlap 29 could hold two sentences (26), but a chunk of two may only lend one
    wide = chunk_text(text, target_chars=30, overlap_chars=29)
    assert _spanned(wide) == [" ".join(sents[i : i + 2]) for i in range(0, 7)]


def test_chinese_sentences_never_cut_with_exact_overlap() -> None:
    sents = [
        "这是第一个测试句子。",
        "这是第二个测试句子！",
        "这是第三个测试句子？",
        "这是第四个测试句子；",
        "这是第五个测试句子…",
        "这是第六个测试句子。",
    ]
    assert {len(s) for s in sents} == {10}
    text = "".join(sents)
    chunks = chunk_text(text, target_chars=30, overlap_chars=10)
    assert _spanned(chunks) == ["".join(sents[0:3]), "".join(sents[2:5]), "".join(sents[4:6])]
    _check_invariants(text, chunks)


def test_every_sentence_whole_in_some_chunk_and_chunks_align_to_sentences() -> None:
    sents: list[str] = []
    for i in range(60):
        if i % 3 == 0:
            sents.append(f"第{i}条：版本 v2.3.{i} 修复了错误 E-{1000 + i}，请升级。")
        elif i % 3 == 1:
            pad = " and more" * (i % 7)
            sents.append(f"Step {i} uses e.g. the ReActAgent{pad} at 3.14 speed!")
        else:
            sents.append(f"Mr. Smith asked about item {i} in the U.S. Army manual?")
    paragraphs = [" ".join(sents[i : i + 5]) for i in range(0, 60, 5)]
    text = "\n\n".join(paragraphs) + "\n"
    chunks = chunk_text(text, target_chars=400, overlap_chars=80)
    _check_invariants(text, chunks)
    assert split_sentences(text) == sents
    for s in sents:
        assert any(s in c.text for c in chunks), s
    for c in chunks:
        inner = split_sentences(c.text)
        assert c.text.startswith(inner[0]) and inner[0] in sents
        assert c.text.endswith(inner[-1]) and inner[-1] in sents
        assert all(x in sents for x in inner)
        assert len(c.text) <= 400


def test_overlong_sentence_is_its_own_chunk_kept_whole_up_to_the_hard_cap() -> None:
    long_sentence = "The " + "very " * 150 + "long sentence ends here."
    assert 700 < len(long_sentence) < 1600
    before = "The first sentence is here. The second one follows it."
    after = "The third sentence comes next. The fourth one closes it."
    text = f"{before} {long_sentence} {after}"
    chunks = chunk_text(text, target_chars=400, overlap_chars=80)
    assert _spanned(chunks) == [before, long_sentence, after]
    _check_invariants(text, chunks)


def test_many_short_lines_without_sentence_ends_are_cut_at_the_hard_caps() -> None:
    text = "# Log\n\n" + "\n".join(f"entry {i} ok" for i in range(300_000))
    chunks = chunk_text(text, target_chars=512, overlap_chars=80)
    assert len(text) > 4_000_000  # one 4 MB chunk before the caps
    assert max(len(c.text) for c in chunks) <= 512  # cut to the target, at line ends
    assert max(c.end_line - c.start_line + 1 for c in chunks) <= 200
    assert all(c.text.startswith("entry ") and c.text.endswith(" ok") for c in chunks)
    assert sum(c.text.count("\n") + 1 for c in chunks) == 300_000  # every line, once
    assert chunks[-1].text.endswith("entry 299999 ok")


def test_the_hard_caps_are_settable_and_checked() -> None:
    text = "\n".join(f"line {i} has no end" for i in range(100))
    chunks = chunk_text(text, target_chars=400, overlap_chars=0, max_chars=500, max_lines=10)
    assert max(c.end_line - c.start_line + 1 for c in chunks) <= 10
    _check_invariants(text, chunks)
    one_line = "word " * 2000
    chunks = chunk_text(one_line, target_chars=400, overlap_chars=0)
    assert max(len(c.text) for c in chunks) <= 400 and len(chunks) >= 25
    assert "".join(c.text + " " for c in chunks).split() == one_line.split()
    nospace = "x" * 5000
    assert [len(c.text) for c in chunk_text(nospace, target_chars=400)] == [400] * 12 + [200]
    (whole,) = chunk_text(nospace, mode="passage", max_chars=12_000)
    assert whole.text == nospace
    assert [len(c.text) for c in chunk_text(nospace, mode="passage")] == [2048, 2048, 904]


# --------------------------------------------------------------------------- headings


NESTED = """# Guide

Intro.

## Install

### Linux

Linux steps.

### Windows

Windows steps.

## Usage

Usage text.

Setext title
------------

Setext body.

# Appendix

Appendix text.
"""


def test_heading_path_tracks_nested_levels_and_heading_lines_are_not_in_text() -> None:
    chunks = chunk_text(NESTED)
    assert [(c.heading_path, c.text, c.start_line, c.end_line) for c in chunks] == [
        ("Guide", "Intro.", 3, 3),
        ("Guide > Install > Linux", "Linux steps.", 9, 9),
        ("Guide > Install > Windows", "Windows steps.", 13, 13),
        ("Guide > Usage", "Usage text.", 17, 17),
        ("Guide > Setext title", "Setext body.", 22, 22),
        ("Appendix", "Appendix text.", 26, 26),
    ]
    _check_invariants(NESTED, chunks)


def test_chunks_never_cross_a_heading_even_when_small() -> None:
    text = "# A\nOne. Two.\n# B\nThree.\n## C ##\nFour."
    chunks = chunk_text(text)
    assert [(c.heading_path, c.text) for c in chunks] == [
        ("A", "One. Two."),
        ("B", "Three."),
        ("B > C", "Four."),
    ]


def test_heading_only_sections_produce_no_chunk() -> None:
    assert chunk_text("# A\n\n## B\n\n### C\n") == []
    assert chunk_text("# A\n\n   \n\t\n## B\n\n---\n\n### C\n") == []
    chunks = chunk_text("# A\n\n## B\n\nOnly body.\n\n## C\n")
    assert [(c.heading_path, c.text) for c in chunks] == [("A > B", "Only body.")]


def test_text_format_has_no_headings() -> None:
    text = "# Not a heading\n\nBody here.\nUnderlined\n-----\n"
    chunks = chunk_text(text, fmt="text")
    assert [(c.heading_path, c.text) for c in chunks] == [
        ("", "# Not a heading\n\nBody here.\nUnderlined\n-----")
    ]


def test_preamble_before_first_heading_has_empty_path_and_hash_without_space_is_text() -> None:
    chunks = chunk_text("Preamble. #hashtag stays.\n\n# Title\n\nBody.")
    assert [(c.heading_path, c.text) for c in chunks] == [
        ("", "Preamble. #hashtag stays."),
        ("Title", "Body."),
    ]


# --------------------------------------------------------------------------- lines and bytes


def test_lines_and_bytes_with_chinese_and_crlf() -> None:
    text = "\ufeff# 标题\r\n\r\n第一句。第二句！\r\nSecond line here.\r\n\r\n## 小节\r\n\r\n  正文 ü.  \r\n"
    data = text.encode("utf-8")
    chunks = chunk_text(text)
    assert [(c.heading_path, c.text, c.start_line, c.end_line) for c in chunks] == [
        ("标题", "第一句。第二句！\r\nSecond line here.", 3, 4),
        ("标题 > 小节", "正文 ü.", 8, 8),
    ]
    first, second = chunks
    assert first.byte_start == data.index("第一句".encode())
    assert first.byte_end == data.index(b".\r\n\r\n##") + 1
    assert second.byte_start == data.index("正文".encode())
    assert second.byte_end == second.byte_start + len("正文 ü.".encode())
    _check_invariants(text, chunks)


def test_lone_carriage_returns_count_as_line_breaks() -> None:
    text = "First.\r\rSecond.\rThird."
    chunks = chunk_text(text, target_chars=10, overlap_chars=0)
    assert [(c.text, c.start_line, c.end_line) for c in chunks] == [
        ("First.", 1, 1),
        ("Second.", 3, 3),
        ("Third.", 4, 4),
    ]


def test_multibyte_offsets_across_many_chunks() -> None:
    sents = [f"句子{i}包含汉字和 emoji 🐟 以及 ü。" for i in range(80)]
    text = "# 我的喜好\r\n\r\n" + "\r\n".join(sents) + "\r\n"
    chunks = chunk_text(text, target_chars=100, overlap_chars=30)
    assert len(chunks) > 10
    _check_invariants(text, chunks)
    assert {c.heading_path for c in chunks} == {"我的喜好"}


# --------------------------------------------------------------------------- code


def _code_text(n_lines: int) -> tuple[str, list[str]]:
    body = [f"    value_{i:02d} = compute_step_{i:02d}(state)  # step {i}" for i in range(n_lines)]
    lines = ["```python", "class ReActAgent:", *body, "```"]
    return "Intro sentence.\n\n" + "\n".join(lines) + f"\n\n{AFTER}\n", lines


AFTER = "After the code, the loop starts again from the top."


def test_a_code_block_stays_whole_up_to_the_hard_cap() -> None:
    text, code_lines = _code_text(30)  # about 1,600 characters: over the target, under 4x
    chunks = chunk_text(text, target_chars=400, overlap_chars=80)
    _check_invariants(text, chunks)
    # the tiny intro joins the code it introduces; the code is one chunk, fences and all
    assert [c.text for c in chunks] == [
        "Intro sentence.\n\n" + "\n".join(code_lines),
        AFTER,
    ]


def test_a_code_block_over_the_cap_is_cut_at_line_ends_into_even_pieces() -> None:
    text, code_lines = _code_text(80)  # about 4,300 characters: three pieces of the cap 1,600
    chunks = chunk_text(text, target_chars=400, overlap_chars=80)
    _check_invariants(text, chunks)
    assert chunks[-1].text == AFTER
    code_chunks = chunks[:-1]
    assert len(code_chunks) == 3
    assert code_chunks[0].text.startswith("Intro sentence.\n\n```python\nclass ReActAgent:\n")
    assert code_chunks[-1].text.endswith("\n```")
    sizes = [len(c.text) for c in code_chunks]
    assert max(sizes) <= 1600 and min(sizes) > 0.7 * max(sizes)  # no short tail
    stripped = ["Intro sentence.", *(line.strip() for line in code_lines)]
    seen: list[str] = []
    for c in code_chunks:
        pieces = [p for p in c.text.split("\n") if p.strip()]
        assert all(p.strip() in stripped for p in pieces)  # only whole lines
        assert text[text.index(c.text) + len(c.text)] == "\n"  # ends at the end of a line
        seen.extend(p.strip() for p in pieces)
    assert seen == stripped  # every line once, in order, no overlap in code


def test_code_line_longer_than_the_cap_is_cut_at_whitespace() -> None:
    long_line = "x = " + " + ".join(f"term_{i}" for i in range(100))
    assert 400 < len(long_line) < 1000
    text = "```\n" + long_line + "\nshort = 1\n```"
    chunks = chunk_text(text, target_chars=100, overlap_chars=0)  # the cap is 400
    _check_invariants(text, chunks)
    assert all(len(c.text) <= 400 for c in chunks)
    assert chunks[0].text.startswith("```\nx = term_0 + ")  # the lone fence line joined it
    assert chunks[-1].text.endswith("term_99\nshort = 1\n```") or chunks[-1].text == (
        "short = 1\n```"
    )
    assert " ".join(c.text for c in chunks).split() == text.split()


def test_small_code_block_is_one_unit_and_hash_inside_fence_is_not_a_heading() -> None:
    text = "# Top\n\nSee below.\n\n~~~\n# not a heading\nx = 1\n~~~\n\nDone."
    chunks = chunk_text(text)
    assert [(c.heading_path, c.text) for c in chunks] == [
        ("Top", "See below.\n\n~~~\n# not a heading\nx = 1\n~~~\n\nDone.")
    ]


def test_unclosed_fence_runs_to_the_end() -> None:
    text = "# H\n\n```python\ndef build_snake_case_name(name):\n    return name\n\n# not heading\n"
    chunks = chunk_text(text)
    assert [(c.heading_path, c.text) for c in chunks] == [
        ("H", "```python\ndef build_snake_case_name(name):\n    return name\n\n# not heading")
    ]


@pytest.mark.parametrize(
    "head",
    [
        "---\ntitle: Orrery\ntags: [a, b]\n# a comment, not a heading\n---\n",
        "\ufeff---\r\ntitle: Orrery\r\n...\r\n",  # a BOM, CRLF, YAML's "..." end
        '+++\ntitle = "Orrery"\n[params]\nx = 1\n+++\n',  # TOML (Hugo)
        "---\n---\n",  # empty
    ],
)
def test_front_matter_is_markup_no_chunk_holds(head: str) -> None:
    text = head + "\n# Intro\n\nBody of the intro, long enough to stand as a chunk.\n"
    chunks = chunk_text(text)
    assert [(c.heading_path, c.text) for c in chunks] == [
        ("Intro", "Body of the intro, long enough to stand as a chunk.")
    ]
    _check_invariants(text, chunks)


def test_front_matter_without_a_body_makes_no_chunk() -> None:
    assert chunk_text("---\ntitle: Only metadata\nsection: 5\n---\n") == []


@pytest.mark.parametrize(
    ("text", "first"),
    [
        # a thematic break, then prose: no key line, so no front matter
        ("---\nA paragraph after a thematic break.\n\n---\n", "A paragraph after"),
        ("---\ntitle: never closed\n\nSo this is the text.\n", "title: never closed"),
        ("Intro first, then a block.\n\n---\ntitle: not at the top\n\n---\n", "Intro first"),
        # a block that does not close within MAX_FRONT_MATTER_CHARS is text
        ("---\n" + "k: v\n" * 20_000 + "\n---\n", "k: v"),
    ],
)
def test_what_is_not_front_matter_stays_text(text: str, first: str) -> None:
    chunks = chunk_text(text, target_chars=12_000)
    assert chunks and chunks[0].text.startswith(first)
    _check_invariants(text, chunks)


# --------------------------------------------------------------------------- lists, passage mode


def test_list_items_are_separate_sentences() -> None:
    text = "- first item\n- second item\n  continues here\n1. numbered item"
    assert split_sentences(text) == [
        "- first item",
        "- second item\n  continues here",
        "1. numbered item",
    ]
    chunks = chunk_text(text, target_chars=30, overlap_chars=0)
    assert _spanned(chunks) == [
        "- first item",
        "- second item\n  continues here",
        "1. numbered item",
    ]


def test_passage_mode_returns_the_whole_trimmed_text() -> None:
    text = "  \r\n# Title\r\n\r\nBody 中文。" + " long" * 1000 + "\r\n\r\n"
    (chunk,) = chunk_text(text, mode="passage", target_chars=2048)
    assert chunk.heading_path == ""
    assert chunk.text == text.strip()
    assert (chunk.start_line, chunk.end_line) == (2, 4)
    assert chunk.byte_start == 4
    assert chunk.byte_end == len(text.rstrip().encode())
    assert chunk_text(" \n\t ", mode="passage") == []


def test_whitespace_only_input_gives_no_chunk() -> None:
    assert chunk_text("") == []
    assert chunk_text("  \r\n\r\n\t\u3000\n") == []


# --------------------------------------------------------------------------- split_sentences


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Use v2.3.1. 安装完成。然后重启！", ["Use v2.3.1.", "安装完成。", "然后重启！"]),
        ("Pi is 3.14 today. Next.", ["Pi is 3.14 today.", "Next."]),
        (
            "Tools, e.g. the parser, help. I.e. Python works.",
            ["Tools, e.g. the parser, help.", "I.e. Python works."],
        ),
        (
            "Mr. Smith met Dr. Who in the U.S. Army. Done.",
            ["Mr. Smith met Dr. Who in the U.S. Army.", "Done."],
        ),
        ("See Fig. 3 and No. 5 here. Then stop.", ["See Fig. 3 and No. 5 here.", "Then stop."]),
        (
            "John F. Kennedy spoke. So did I. Fine.",
            ["John F. Kennedy spoke.", "So did I.", "Fine."],
        ),
        ('He said "stop." Then left.', ['He said "stop."', "Then left."]),
        ("Really?! Yes. (Quoted.) Next", ["Really?!", "Yes.", "(Quoted.)", "Next"]),
        ("Wait... what now. OK", ["Wait... what now.", "OK"]),
        (
            "他说：“好。”然后走了……对吗？是的；好",
            ["他说：“好。”", "然后走了……", "对吗？", "是的；", "好"],
        ),
        ("混合 English. 中文句子。End", ["混合 English.", "中文句子。", "End"]),
        (
            "Call hybridsag.fusion.text.sentences.split_sentences() now.",
            ["Call hybridsag.fusion.text.sentences.split_sentences() now."],
        ),
        ("Error E-1234. Retry!", ["Error E-1234.", "Retry!"]),
        (
            "Line one\ncontinues. Two.\n\nNew paragraph",
            ["Line one\ncontinues.", "Two.", "New paragraph"],
        ),
        ("", []),
        ("  \n ", []),
    ],
)
def test_split_sentences(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


# --------------------------------------------------------------------------- arguments, API


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target_chars": 0, "overlap_chars": 0}, "target_chars"),
        ({"target_chars": 100, "overlap_chars": 100}, "overlap_chars"),
        ({"target_chars": 100, "overlap_chars": -1}, "overlap_chars"),
        ({"fmt": "html"}, "fmt"),
        ({"mode": "page"}, "mode"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        chunk_text("Some text.", **kwargs)  # type: ignore[arg-type]


def test_chunk_is_frozen_and_api_is_explicit() -> None:
    (chunk,) = chunk_text("One sentence.")
    assert chunk == Chunk(0, "One sentence.", "", 1, 1, 0, 13)
    with pytest.raises(dataclasses.FrozenInstanceError):
        chunk.text = "changed"  # type: ignore[misc]
    assert sorted(chunker.__all__) == [
        "DEFAULT_MAX_LINES", "DEFAULT_MIN_CHARS", "MAX_CHARS_FACTOR", "chunk_text",
        "rst_adornment", "rst_title",
    ]  # fmt: skip


# --------------------------------------------------------------------------- the sample corpus


def _corpus_files() -> list[Path]:
    """Indexable corpus files: not hidden, not under the ignored drafts/ folder."""
    found = []
    for path in CORPUS.rglob("*"):
        parts = path.relative_to(CORPUS).parts
        if any(part.startswith(".") or part == "drafts" for part in parts):
            continue
        if path.is_file() and path.suffix in {".md", ".txt", ".rst"}:
            found.append(path)
    return sorted(found)


def test_sample_corpus_chunks_hold_every_invariant() -> None:
    files = _corpus_files()
    assert len(files) >= 12
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert 1000 <= len(text.encode()) <= 4096, path
        fmt = {".md": "markdown", ".rst": "rst"}.get(path.suffix, "text")
        chunks = chunk_text(text, fmt=fmt, target_chars=400, overlap_chars=80)
        assert chunks, path
        _check_invariants(text, chunks)
        for c in chunks:
            # heading lines never appear in markdown chunks (outside code fences)
            if fmt == "markdown" and "```" not in c.text:
                assert not re.search(r"(?m)^#{1,6} ", c.text), (path, c.text)


def test_sample_corpus_code_keeps_identifiers_whole() -> None:
    text = (CORPUS / "guide" / "agents.md").read_text(encoding="utf-8")
    chunks = chunk_text(text, target_chars=400, overlap_chars=80)
    defs = [c for c in chunks if "class ReActAgent:" in c.text]
    assert [c.heading_path for c in defs] == [
        "Agents > The ReActAgent loop > Thought, action, observation"
    ]
    factory = [c for c in chunks if "class ReActAgentFactory:" in c.text]
    assert [c.heading_path for c in factory] == ["Agents > The ReActAgentFactory"]


# --------------------------------------------------------------------------- reStructuredText

RST = """\
=========
 Orrery
=========

Orrery models the planets.

Install
=======

Run pip install orrery.

On Linux
--------

Use a venv.

----

After a transition.

Usage
=====

Call orrery.run().

Too short
===

Not a title: the underline is shorter than the text above it.
"""


def test_rst_section_titles_levels_by_first_appearance() -> None:
    chunks = chunk_text(RST, fmt="rst")
    _check_invariants(RST, chunks)
    assert [(c.heading_path, c.start_line) for c in chunks] == [
        ("Orrery", 5),  # over- and underlined: the first style seen, level 1
        ("Orrery > Install", 10),  # '=' underline: level 2
        ("Orrery > Install > On Linux", 15),  # '-' underline: level 3
        ("Orrery > Usage", 24),  # back to level 2
    ]
    assert chunks[2].text == "Use a venv.\n\n----\n\nAfter a transition."  # a transition
    assert "Too short\n===" in chunks[3].text  # a short underline makes no title
    # a "~~~~~" or "`````" underline is a title, not a code fence
    for mark in ("~~~~~", "`````"):
        (chunk,) = chunk_text(f"Title\n{mark}\n\nBody.", fmt="rst")
        assert (chunk.heading_path, chunk.text) == ("Title", "Body.")
    assert not any(re.search(r"(?m)^(Install|Usage)$", c.text) for c in chunks)
    # the same text as markdown or plain text has no reST headings
    assert all(c.heading_path != "Orrery" for c in chunk_text(RST, fmt="text"))


def test_rst_title_and_adornment() -> None:
    assert rst_title(RST) == "Orrery"
    assert rst_title("Intro text.\n\nGuide\n-----\n\nBody.\n") == "Guide"
    assert rst_title("Manual\n======\n") == "Manual"
    assert rst_title("\ufeffTitle\n~~~~~\n") == "Title"
    assert rst_title("Two lines\nof text\n=========\n") is None  # an underline titles one line
    assert rst_title("No titles here.\n\n----\n\nAt all.\n") is None
    assert rst_title("") is None
    assert [rst_adornment(x) for x in ("=====", "~~  ", "=-=-", "ab", "=", "")] == [
        "=", "~", None, None, None, None
    ]


def test_rst_overline_must_match_its_underline() -> None:
    text = "=====\nTitle\n-----\n\nBody.\n"
    chunks = chunk_text(text, fmt="rst")
    _check_invariants(text, chunks)
    # "=====" over a "-----" underline is a mismatch (docutils rejects it): no title, and
    # every line stays text
    assert [(c.heading_path, c.text) for c in chunks] == [("", "=====\nTitle\n-----\n\nBody.")]


def test_unknown_fmt_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="'markdown', 'rst' or 'text'"):
        chunk_text("x", fmt="html")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- markup is not text

RST_DOC = """.. _iris_dataset:

Iris plants dataset
===================

.. only:: html

   .. contents::

.. toctree::
   :maxdepth: 1

   intro
   usage

The data set has 150 samples of three species, measured in centimetres by hand.

.. note::

   The petal width separates the species best of the four features measured here.

Load it like this, then look at the first rows of the frame it returns:

.. code-block:: python
   :linenos:

   from sklearn.datasets import load_iris
   data = load_iris(as_frame=True)

Output::

    sepal length (cm)  sepal width (cm)
    5.1                3.5

::

    a literal block after the expanded form

>>> load_iris().target[:3]
array([0, 0, 0])

.. |today| replace:: now
.. This is a comment that says nothing
   and goes on here.
"""


def test_rst_labels_directives_and_comments_are_markup_not_text() -> None:
    chunks = chunk_text(RST_DOC, fmt="rst")
    _check_invariants(RST_DOC, chunks)
    texts = [c.text for c in chunks]
    for markup in (".. _iris_dataset:", ".. only::", ".. contents::", ".. toctree::",
                   ":maxdepth:", "intro\n   usage", ".. |today|", "This is a comment"):  # fmt: skip
        assert not any(markup in t for t in texts), markup
    assert not any(t.lstrip().startswith("..") for t in texts)  # no chunk starts with markup
    assert rst_title(RST_DOC) == "Iris plants dataset"
    assert {c.heading_path for c in chunks} == {"Iris plants dataset"}
    joined = "\n".join(texts)
    assert "The data set has 150 samples" in joined
    assert "The petal width separates the species" in joined  # an admonition's content is prose
    code = next(t for t in texts if "from sklearn.datasets import load_iris" in t)
    assert "    data = load_iris(as_frame=True)" not in code  # the source slice, as indented
    assert "   data = load_iris(as_frame=True)" in code
    # "Output::" is never a chunk of its own: it stays with the literal block it introduces
    output = next(t for t in texts if "Output::" in t)
    assert "Output::\n\n    sepal length (cm)" in output
    assert any("a literal block after the expanded form" in t for t in texts)
    assert any(t.startswith(">>> load_iris().target[:3]\narray([0, 0, 0])") for t in texts)
    assert all(len(t) >= 40 for t in texts)
    # with a small target the code blocks are chunks of their own: still no tiny "Output::"
    small = [c.text for c in chunk_text(RST_DOC, fmt="rst", target_chars=100, overlap_chars=0)]
    assert "Output::" not in small and not any(t.startswith("..") for t in small)
    assert any(t.startswith("Output::\n\n    sepal length (cm)") for t in small)


def test_markdown_html_comments_tag_only_lines_and_link_definitions_are_markup() -> None:
    text = (
        "# Errors\n\nIntro to the errors this module raises and what they mean to callers.\n\n"
        '<a id="ERR_X"></a>\n\n### `ERR_X`\n\n<!-- YAML\nadded: v15.0.0\n-->\n\n'
        "An argument of the wrong type was passed to the function that raised it.\n\n"
        "[EOF character]: https://en.wikipedia.org/wiki/End-of-file\n[TTY]: tty.md\n"
        "  [`fs.ReadStream`]: #class-fsreadstream\n"
    )
    chunks = chunk_text(text)
    assert [(c.heading_path, c.text) for c in chunks] == [
        ("Errors", "Intro to the errors this module raises and what they mean to callers."),
        ("Errors > `ERR_X`",
         "An argument of the wrong type was passed to the function that raised it."),
    ]  # fmt: skip


def test_tiny_fragments_join_a_neighbour_of_their_section_only() -> None:
    text = (
        "# A\n\nOutput:\n\n```\nresult = compute(value) + other(value)\n```\n\n"
        "# B\n\nTiny.\n\n# C\n\n" + "Long enough sentence number one is here. " * 3
    )
    chunks = chunk_text(text, target_chars=400, overlap_chars=0)
    assert [(c.heading_path, c.text.split("\n")[0]) for c in chunks] == [
        ("A", "Output:"),  # joined the code below it
        ("B", "Tiny."),  # alone in its section: kept, never moved across a heading
        ("C", "Long enough sentence number one is here. " * 3),
    ][:2] + [("C", ("Long enough sentence number one is here. " * 3).strip())]


# --------------------------------------------------------------------------- scale (issue 23)


def _check_slices(text: str, chunks: list[Chunk]) -> None:
    """The invariants of :func:`_check_invariants` that cost time linear in the text."""
    data = text.encode("utf-8")
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    for a, b in zip(chunks, chunks[1:]):
        assert a.byte_start < b.byte_start and a.byte_end < b.byte_end
    for c in chunks:
        assert data[c.byte_start : c.byte_end].decode("utf-8") == c.text
        assert c.text and c.text.strip() == c.text
        assert c.end_line - c.start_line == len(re.findall(r"\r\n|\r|\n", c.text))


def _shape(name: str) -> tuple[str, str]:
    mb = 4_000_000
    if name == "no-break":  # a period before a lowercase word ends nothing: one sentence
        return "text", "lorem ipsum dolor sit amet. " * (mb // 28)
    if name == "no-spaces":
        return "text", "abcdefghijklmnopqrstuvwxyz" * (mb // 26)
    if name == "code-line":  # 8 MB in one line of code over the hard cap: cut at spaces
        return "markdown", "```\n" + "x = 1; y = 2; " * (2 * mb // 14) + "\n```\n"
    if name == "cjk":  # 8 MB of Chinese without punctuation
        return "text", "中文字符没有标点符号的长文本" * (2 * mb // 42)
    # a paragraph with a list item, then 20,000 setext-like underlines: never a title
    return "markdown", "word\n" * 20_000 + "- item\n" + "=\n" * 20_000


#: shape -> (chunks, the longest chunk, the first chunk's byte range, the last chunk's text
#: end). Before issue 23 these took 158 s, 218 s, 158 s, about 55 s and 121 s on a loaded
#: 2-core machine (every piece searched to the end of its block, every underline scanned the
#: whole paragraph); now a few tenths of a second each.
LINEAR = {
    "no-break": (7850, 509, (0, 509), "lorem ipsum dolor sit amet."),
    "no-spaces": (7813, 512, (0, 512), "ghijklmnopqrstuvwxyz"),
    "code-line": (3906, 2048, (0, 3), "x = 1; y = 2; \n```"),
    "cjk": (5209, 512, (0, 1536), "符号的长文本中文字符没有标点符号的长文本"),
    "setext": (297, 549, (0, 509), "="),
}


@pytest.mark.timeout(20)  # 30 to 1,000 times what it takes; a quadratic scan takes minutes
@pytest.mark.parametrize("shape", sorted(LINEAR))
def test_chunking_is_linear_in_the_text(shape: str) -> None:
    fmt, text = _shape(shape)
    chunks = chunk_text(text, fmt=fmt)
    count, longest, first, last_end = LINEAR[shape]
    assert len(chunks) == count
    assert max(len(c.text) for c in chunks) == longest <= 4 * 512
    assert (chunks[0].byte_start, chunks[0].byte_end) == first
    assert chunks[-1].text.endswith(last_end)
    assert {c.heading_path for c in chunks} == {""}
    _check_slices(text, chunks)
    if shape in ("no-break", "no-spaces", "cjk"):  # one sentence cut to the target, no overlap
        assert all(len(c.text) <= 512 for c in chunks)
        assert "".join("".join(c.text.split()) for c in chunks) == "".join(text.split())
        assert {(c.start_line, c.end_line) for c in chunks} == {(1, 1)}


@pytest.mark.parametrize(
    ("text", "kwargs", "expected"),
    [
        # the line cap counts CRLF as one break, and a cut lands at a line end
        ("a b\r\nc d\r\ne f\r\ng h", {"mode": "passage", "target_chars": 6, "max_lines": 2},
         ["a b\r\nc d", "e f\r\ng h"]),
        ("abcdefgh\r\nij", {"mode": "passage", "target_chars": 9, "max_lines": 1},
         ["abcdefgh", "ij"]),
        ("one\rtwo\rthree\rfour five six", {"fmt": "text", "target_chars": 10, "max_lines": 2},
         ["one\rtwo", "three", "four five", "six"]),
        # a code line over the hard cap is cut at spaces; the lone fences stay apart
        ("```\n" + "tok " * 30 + "\n```", {"target_chars": 20, "max_chars": 40},
         ["```", *["tok tok tok tok tok tok tok tok tok tok"] * 3, "```"]),
        # an underline after a list item is text; after plain lines it makes a (bodiless) title
        ("plain\nmore plain\n- item\n=\n=\n", {}, ["plain\nmore plain\n- item\n=\n="]),
        ("plain\nmore plain\n=\n", {}, []),
    ],
)
def test_cuts_at_the_caps(text: str, kwargs: dict[str, object], expected: list[str]) -> None:
    chunks = chunk_text(text, overlap_chars=0, **kwargs)  # type: ignore[arg-type]
    assert [c.text for c in chunks] == expected
    _check_invariants(text, chunks)


_PIECES = ["lorem", "ipsum.", "Dr.", "e.g.", "3.14", "中文", "安装完成。", "wait...", "what?!",
           "x" * 40, "```", "~~~", "- item.", "> quote.", "# Title", "=====", "\t", " ", "  "]
_ENDS = [" ", " ", "", "\n", "\r\n", "\r", "\n\n"]
_DOCS = st.lists(
    st.tuples(st.sampled_from(_PIECES), st.sampled_from(_ENDS)), max_size=60
).map(lambda xs: "".join(a + b for a, b in xs))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    text=_DOCS,
    fmt=st.sampled_from(["markdown", "rst", "text"]),
    target=st.integers(10, 200),
    max_lines=st.integers(1, 8),
    data=st.data(),
)
def test_every_chunk_keeps_the_caps_and_the_text(
    text: str, fmt: str, target: int, max_lines: int, data: st.DataObject
) -> None:
    max_chars = data.draw(st.integers(target, 3 * target))
    for mode, overlap in (("sag", 0), ("sag", target // 3), ("passage", 0)):
        chunks = chunk_text(
            text, fmt=fmt, mode=mode, target_chars=target,  # type: ignore[arg-type]
            overlap_chars=overlap, max_chars=max_chars, max_lines=max_lines,
        )
        _check_slices(text, chunks)
        for c in chunks:
            assert len(c.text) <= max_chars
            assert c.end_line - c.start_line + 1 <= max_lines
        if overlap == 0:
            for a, b in zip(chunks, chunks[1:]):
                assert a.byte_end <= b.byte_start
            if mode == "passage" or fmt == "text":  # nothing is markup: every character kept
                kept = "".join("".join(c.text.split()) for c in chunks)
                assert kept == "".join(text.split())


# -- whole names (hybridsag.fusion.text.sentences.name_spans) -----------------------------------------------

_NAME_ALPHABET = "ab _-.'é中1\n"


@settings(max_examples=400, deadline=None)
@given(
    name=st.text(alphabet=_NAME_ALPHABET, min_size=1, max_size=4),
    text=st.text(alphabet=_NAME_ALPHABET, max_size=30),
)
def test_name_spans_are_the_whole_word_pattern_matches(name: str, text: str) -> None:
    """``name_spans`` finds exactly the matches (same spans) of ``(?<!\\w)name(?!\\w)``, the
    pattern it replaces."""
    plain = re.compile(r"(?<!\w)" + re.escape(name) + r"(?!\w)")
    assert list(name_spans(name, text)) == [m.span() for m in plain.finditer(text)]
    assert has_name(name, text) == bool(plain.search(text))


def test_name_spans_cases() -> None:
    found = has_name
    assert found("abc", "abc") and found("abc", "x abc.") and found("a.b", "a.b!")
    assert not found("abc", "xabc") and not found("abc", "abcx") and not found("abc", "_abc")
    assert not found("abc", "éabc") and found("中文", "在 中文 里") and not found("中文", "中文字")
    assert found("new\nline", "a new\nline b") and not found("", "anything")
    assert list(name_spans("aa", "aa aaa aa")) == [(0, 2), (7, 9)]
