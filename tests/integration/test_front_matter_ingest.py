"""Front matter in folder ingest (issue 24, item 6): it gives the title and metadata and is never
indexed as text, so the exact-title rule no longer pins the front matter at #1."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridsag.search import HybridSearch

pytestmark = pytest.mark.timeout(60)

LOCK = """---
title: package-lock.json
section: 5
description: A manifestation of the manifest
---

### Description

`package-lock.json` is automatically generated for any operations where npm
modifies either the `node_modules` tree, or `package.json`.

### package-lock.json vs npm-shrinkwrap.json

Both of these files have the same format and a similar function.
"""


def test_front_matter_gives_title_and_metadata_and_is_in_no_chunk(
    hs: HybridSearch, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "package-lock-json.md").write_text(LOCK, "utf-8")
    (docs / "hugo.md").write_text('+++\ntitle = "Hugo page"\nweight = 3\n+++\nThe okapi.\n', "utf-8")
    (docs / "broken.md").write_text("---\ntitle: [unclosed\n---\n# Broken\n\nThe okapi too.\n")
    report = hs.ingest_folder(docs)
    assert (report.indexed, report.errors) == (3, {})
    [warning] = report.warnings
    assert warning.startswith("broken.md: front matter not valid YAML (while parsing a flow")
    assert warning.endswith("): no title or metadata taken")
    lock = hs.resource("package-lock-json.md")
    assert lock is not None and lock.title == "package-lock.json"
    assert dict(lock.metadata) == {"section": 5, "description": "A manifestation of the manifest"}
    hugo, broken = hs.resource("hugo.md"), hs.resource("broken.md")
    assert hugo is not None and (hugo.title, dict(hugo.metadata)) == ("Hugo page", {"weight": 3})
    assert broken is not None and broken.title == "Broken"  # its H1, the block left out
    source = LOCK.encode("utf-8")
    for rid in ("package-lock-json.md", "hugo.md", "broken.md"):
        for chunk in hs.resource_chunks(rid):
            assert "title" not in chunk.text and "+++" not in chunk.text
            assert chunk.text.strip() and not chunk.text.startswith("---")
            if rid == "package-lock-json.md":
                assert source[chunk.byte_start : chunk.byte_end].decode("utf-8") == chunk.text

    resp = hs.search("package-lock.json", paths=["bm25", "title"], top_k=3)
    top = resp.results[0]
    assert top.resource_id == "package-lock-json.md" and "exact_title" in top.rules
    assert top.text.startswith("`package-lock.json` is automatically generated")
    assert [r.resource_id for r in hs.search("manifestation", paths=["bm25"]).results] == []
    found = hs.search("okapi", paths=["bm25"], filters={"metadata": {"weight": 3}}).results
    assert [r.resource_id for r in found] == ["hugo.md"]
