"""The rules after the judge's (issue 27 item 7): the section of the version a query names, the
query's language, an exact error line; and the text helpers they read."""

from __future__ import annotations

import pytest
from hybridsag.fusion import ChunkView, Contribution, FusedHit, apply_rules
from hybridsag.fusion.rules import RULE_BOUNDS
from hybridsag.fusion.text import (
    contains_phrase,
    dominant_script,
    heading_names_version,
    literal_phrase,
    version_in,
)

#: npm-ping.md's Description section as the chunker gives it (npm's own docs).
PING = (
    "Ping the configured or given npm registry and verify authentication.\n"
    "If it works it will output something like:\n\n```bash\nnpm notice PING "
    "https://registry.npmjs.org/\nnpm notice PONG 255ms\n```\notherwise you will get an error:\n"
    "```bash\nnpm notice PING http://foo.com/\nnpm ERR! code E404\n"
    "npm ERR! 404 Not Found - GET http://www.foo.com/-/ping?write=true\n```"
)
PARAPHRASE = (
    "If a package or version does not exist in the registry, npm stops with an error saying "
    "that the package was not found (HTTP status 404)."
)


def fused(*chunk_ids: str, dense_only: frozenset[str] = frozenset()) -> list[FusedHit]:
    out = []
    for i, c in enumerate(chunk_ids, start=1):
        path = "dense" if c in dense_only else "bm25"
        out.append(FusedHit(c, i, 1.0 / (60 + i), (Contribution(path, i, 1.0, 1.0, 0.0),)))
    return out


def view(chunk_id: str, text: str, heading_path: str = "") -> ChunkView:
    return ChunkView(chunk_id, f"r-{chunk_id}", "", heading_path, text)


def order(hits: list[FusedHit]) -> list[tuple[str, tuple[str, ...]]]:
    return [(h.chunk_id, h.rules) for h in hits]


def test_the_exact_error_line_outranks_a_dense_only_paraphrase() -> None:
    chunks = {
        "paraphrase": view("paraphrase", PARAPHRASE, "Troubleshooting > Package not found"),
        "ping": view("ping", PING, "Description"),
        "doctor": view("doctor", "npm doctor checks the npm registry and your npm cache."),
    }
    hits = fused("paraphrase", "doctor", "ping", dense_only=frozenset({"paraphrase"}))
    out = apply_rules(hits, query="npm ERR! code E404", chunks=chunks)
    assert order(out) == [("ping", ("exact_phrase",)), ("paraphrase", ()), ("doctor", ())]
    # a quoted string is literal too; the words must be contiguous and in order
    out = apply_rules(hits, query='what does "code E404" mean', chunks=chunks)
    assert out[0].chunk_id == "ping"
    assert apply_rules(hits, query='"E404 code" in the log', chunks=chunks) == hits


def test_the_section_of_the_named_version_comes_first() -> None:
    chunks = {
        "upgrading": view("upgrading", "Read the v2.3.1 release notes before upgrading to "
                          "v2.3.1; release notes of older versions are online.", "Changelog > Upgrading"),
        "fixed": view("fixed", "- Searches no longer time out.", "Changelog > v2.3.1 > Fixed"),
        "older": view("older", "- Folder sync.", "Changelog > v2.3.0 > Added"),
    }  # fmt: skip
    hits = fused("upgrading", "older", "fixed")
    out = apply_rules(hits, query="v2.3.1 release notes", chunks=chunks)
    assert order(out) == [
        ("fixed", ("version_heading",)), ("upgrading", ()), ("older", ())
    ]  # fmt: skip
    assert apply_rules(hits, query="v9.9.9 release notes", chunks=chunks) == hits


def test_hits_in_the_query_s_script_come_first_within_the_bound() -> None:
    zh = "在 Linux 上，运行下面的命令下载安装脚本并安装。"
    chunks = {
        "zh1": view("zh1", zh), "zh2": view("zh2", zh + "安装完成后检查版本。"),
        "en1": view("en1", "Download the release and put the binary on your PATH."),
        "en2": view("en2", "Index a folder and search it."),
        "code": view("code", "```bash\ncurl -fsSL https://x.example/install.sh | sh\n```"),
    }  # fmt: skip
    hits = fused("zh1", "zh2", "code", "en1", "en2")
    out = apply_rules(hits, query="how do I install it on Linux", chunks=chunks)
    assert order(out) == [
        ("code", ()), ("en1", ()), ("en2", ()),
        ("zh1", ("other_language",)), ("zh2", ("other_language",)),
    ]  # fmt: skip
    # a Chinese question over the same hits: the Chinese ones are already first
    assert apply_rules(hits, query="如何在 Linux 上安装", chunks=chunks)[0].chunk_id == "zh1"
    # with only English pages (a Chinese question over English docs) nothing moves
    english = {c: v for c, v in chunks.items() if not c.startswith("zh")}
    only = fused("code", "en2", "en1")
    assert apply_rules(only, query="如何在 Linux 上安装", chunks=english) == only
    # bounded: a page in another language moves down at most its bound
    many = {f"en{i}": view(f"en{i}", f"English page number {i}.") for i in range(12)}
    many["zh"] = view("zh", zh)
    out = apply_rules(fused("zh", *(f"en{i}" for i in range(12))), query="install on Linux",
                      chunks=many)  # fmt: skip
    assert [h.chunk_id for h in out].index("zh") == RULE_BOUNDS["query_language"].down


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("npm ERR! code E404", ("npm", "err", "code", "e404")),
        ('find "exact words" here', ("exact", "words")),
        ("\u201cNot Found\u201d errors", ("not", "found")),
        ("`npm ci --legacy` fails", ("npm", "ci", "legacy")),
        ("Error: ENOENT open", ("error", "enoent", "open")),
        ("how do I install it on Linux", None),  # one-letter "I" is no code word
        ("v2.3.1 release notes", None),  # a version is a name, read by version_in
        ('"single"', None),
        ("E404", None),  # one word: the identifier tiers' business
    ],
)
def test_literal_phrase(query: str, expected: tuple[str, ...] | None) -> None:
    assert literal_phrase(query) == expected


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("npm ERR! code E404\n", True),
        ("NPM err: Code e404", True),
        ("npm ERR! code E4040", False),
        ("npm ERR! the code E404", False),
        ("code E404 npm ERR!", False),
    ],
)
def test_contains_phrase(text: str, found: bool) -> None:
    assert contains_phrase(text, ("npm", "err", "code", "e404")) is found
    assert contains_phrase(text, ()) is False


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("v2.3.1 release notes", "2.3.1"),
        ("what changed in 2.3.1", "2.3.1"),
        ("release notes 1.0.0-rc.1", "1.0.0-rc.1"),
        ("upgrade v2.3 to v3.1", None),  # two versions
        ("what changed in 3.14", None),  # one dot, no v: a number
        ("v2.3.1", None),  # the whole query: an identifier query
        ("date 2024-05-01 notes", None),
    ],
)
def test_version_in(query: str, expected: str | None) -> None:
    assert version_in(query) == expected


@pytest.mark.parametrize(
    ("heading_path", "named"),
    [
        ("Changelog > v2.3.1", True),
        ("Changelog > v2.3.1 > Fixed", True),
        ("Changelog > [2.3.1] - 2024-05-01", True),
        ("Changelog > Version 2.3.1 (LTS)", True),
        ("Changelog > **2.3.1**", True),
        ("Changelog > Upgrading from v2.3.1", False),
        ("Changelog > v2.3.10", False),
        ("Changelog > 12.3.1", False),
        ("Changelog > 2.3.1 changes everything", False),
        ("", False),
    ],
)
def test_heading_names_version(heading_path: str, named: bool) -> None:
    assert heading_names_version(heading_path, "2.3.1") is named


@pytest.mark.parametrize(
    ("text", "script"),
    [
        ("how do I install it on Linux", "LATIN"),
        ("# 安装指南\n\n在 Linux 上安装，请运行：\n\n```bash\ncurl https://x/install.sh | sh\n```", "CJK"),
        ("Установка на Linux", "CYRILLIC"),
        ("Linux", None),  # too few words
        ("```\ncode only\n```", None),
        ("`npm install` 安装", "CJK"),  # inline code is not prose
        ("Orrery Linux 安装", None),  # no script holds more than half
    ],
)
def test_dominant_script(text: str, script: str | None) -> None:
    assert dominant_script(text) == script
