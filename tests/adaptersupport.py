"""What the adapter tests share: the sample corpus indexed lexical-only (no model loads), one
:class:`HybridSearch` over it, and a real ``hybridsag serve`` on 127.0.0.1 over that search.

The fixtures are module-scoped; a test module imports the ones it uses (as
``tests/integration/conftest.py`` imports ``milvus_server``). The service shares the in-process
search (``running_service(search=...)``), so both sides answer from the same index.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from hybridsag.output.render import explain_lines
from hybridsag.results import SearchResult
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from tests.servicesupport import ADMIN, running_service
from tests.settings_support import clean_env_settings

__all__ = [
    "ADMIN",
    "QUERY",
    "READER",
    "SAMPLES",
    "assert_result_metadata",
    "sample_hs",
    "sample_service",
    "sample_settings",
    "scoped",
]

SAMPLES = Path(__file__).resolve().parents[1] / "samples" / "corpus"
#: A read-only token of the test service.
READER = "adapter-reader-0123456789abcdef"
#: A query whose best answer is known: guide/agents.md defines the ReActAgent class.
QUERY = "ReActAgent"


def scoped(side: str, **kwargs: Any) -> dict[str, Any]:
    """Search arguments as a ``side`` ("local" or "remote") adapter's search runs them: the
    service forces the :data:`READER` token's tenant ("") into the filters (so bm25, sag2 and
    title show no corpus-wide scores, as for every tenant-scoped search)."""
    if side != "remote":
        return kwargs
    return {**kwargs, "filters": {**kwargs.get("filters", {}), "tenant": ""}}


@pytest.fixture(scope="module")
def sample_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Lexical-only settings of a fresh data dir holding the sample corpus."""
    settings = clean_env_settings(
        data_dir=tmp_path_factory.mktemp("adapters") / "data",
        embedding={"model": "none"},
        server={
            "token": ADMIN,
            "tokens": [{"token": READER, "role": "read", "tenant": "", "name": "reader"}],
            "reconciler": False,
        },
    )
    with HybridSearch(settings) as hs:
        report = hs.ingest_folder(SAMPLES)
    assert report.indexed > 5 and not report.errors
    return settings


@pytest.fixture(scope="module")
def sample_hs(sample_settings: Settings) -> Iterator[HybridSearch]:
    with HybridSearch(sample_settings) as hs:
        yield hs


@pytest.fixture(scope="module")
def sample_service(sample_settings: Settings, sample_hs: HybridSearch) -> Iterator[str]:
    """The base URL of a real ``hybridsag serve`` over ``sample_hs``."""
    with running_service(sample_settings, reconciler=False, search=sample_hs) as url:
        yield url


def assert_result_metadata(metadata: Mapping[str, Any], text: str, expected: Mapping[str, Any]) -> None:
    """An adapter's metadata of one result carries what the Python API's result says (a field
    without a value left out; ``why``: the result's own explanation in the CLI's words, no
    query-level trust line), and its byte range and content hash point at exactly ``text`` in
    the source file (a result of neighbouring chunks merged, at its first and last chunk's)."""
    for key in (
        "chunk_id", "resource_id", "title", "heading_path", "start_line", "end_line",
        "byte_start", "byte_end", "content_sha256", "source_uri", "rank", "score", "rules",
    ):  # fmt: skip
        if expected[key] is None or expected[key] == "":
            assert key not in metadata, key
        else:
            assert metadata[key] == (list(expected[key]) if key == "rules" else expected[key]), key
    assert metadata["why"] == explain_lines(SearchResult.from_dict(expected))
    assert not any(line.startswith("trust ") for line in metadata["why"])
    assert metadata["paths"] == expected["paths"]
    for facts in metadata["paths"].values():
        assert facts["rank"] >= 1
        assert isinstance(facts["score"], float) or facts["raw_score"] is facts["score"] is None
    assert text == expected["text"]
    source = Path(metadata["source_uri"]).read_bytes()
    sliced = source[metadata["byte_start"] : metadata["byte_end"]].decode("utf-8")
    if expected.get("merged"):  # neighbouring chunks joined: what lies between may be markup
        assert sliced.startswith(text.split("\n\n")[0]) and sliced.endswith(text.split("\n\n")[-1])
    else:
        assert sliced == text
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == metadata["content_sha256"]
