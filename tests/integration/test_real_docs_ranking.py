"""Ranking on real documentation (issue 27 items 6 and 7), through a real index of npm's own
pages (tests/data/npm_docs: their option sections repeat one another word for word)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hybridsag.render import render_response
from hybridsag.search import HybridSearch

from tests.cli_support import lexical_only, run  # noqa: F401 - fixture

NPM_DOCS = Path(__file__).resolve().parents[1] / "data" / "npm_docs"
#: The pages that paste ``strict-peer-deps``'s text into their own Configuration section.
STRICT_COPIES = ("npm-ci.md", "npm-dedupe.md", "npm-find-dupes.md", "npm-install-test.md")


@pytest.fixture
def npm_docs(tmp_path: Path) -> Path:
    docs = tmp_path / "npm_docs"
    shutil.copytree(NPM_DOCS, docs, ignore=shutil.ignore_patterns("README.txt"))
    return docs


def _texts(hs: HybridSearch, resource_id: str) -> dict[int, str]:
    return {c.start_line: c.text for c in hs.resource_chunks(resource_id)}


def test_copies_of_one_text_are_one_result_that_says_where_else(
    hs: HybridSearch, npm_docs: Path
) -> None:
    """``legacy-peer-deps``: the option's own section first, then ``strict-peer-deps``'s
    paragraph once (it stood there five times, from config.md and four command pages), naming
    the four other places with their lines; five results are five distinct texts."""
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
    for rid, start, _end in places:  # each place is a real chunk holding the same text
        assert _texts(hs, rid)[start] == shown.text
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
