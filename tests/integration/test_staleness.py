"""Staleness that is shown (issue 24, item 4): no search drops a result without a word.

After ``touch`` on every file of a folder (a ``git pull``, ``cp -r`` or a docs build does the
same) a search used to answer ``0 results``, ``degraded: false``, no reason. Now the default
shows the old text marked stale (``stale: true`` with ``stale_reason``), and a deployment that
hides stale results (``include_stale`` off) gets ``stale_hidden`` with the ids and the reason, in
JSON, in the CLI's text (in-process and through a service) and in the agent text.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hybridsag.cli import main
from hybridsag.output.render import render_response
from hybridsag.results import SearchResponse
from hybridsag.search import HybridSearch
from hybridsag.service.models import SearchOut
from tests.servicesupport import ADMIN, folder_service_settings, running_service
from tests.settings_support import clean_env_settings

pytestmark = pytest.mark.timeout(120)

HIDDEN_LINE = "3 results hidden: sources changed since indexing (re-index, or --include-stale)"


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def _touch_all(folder: Path) -> None:
    for path in folder.rglob("*.md"):
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 7_000_000_000))


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "npm-docs"
    root.mkdir()
    for name, body in (
        ("package-json.md", "The peerDependencies field names plugins a package works with."),
        ("install.md", "npm install warns when peerDependencies are missing."),
        ("config.md", "Set legacy-peer-deps to ignore peerDependencies entirely."),
    ):
        (root / name).write_text(f"# {name[:-3]}\n\n{body}\n", "utf-8")
    return root


@pytest.fixture
def indexed(tmp_path: Path, docs: Path) -> Iterator[HybridSearch]:
    settings = clean_env_settings(data_dir=tmp_path / "data", embedding={"model": "none"})
    with HybridSearch(settings) as hs:
        assert hs.ingest_folder(docs).indexed == 3
        yield hs


def test_touch_every_file_then_search_shows_the_results_marked_stale(
    indexed: HybridSearch, docs: Path
) -> None:
    _touch_all(docs)
    resp = indexed.search("peerDependencies", paths=["bm25", "title"])
    assert sorted(r.resource_id for r in resp.results) == [
        "config.md", "install.md", "package-json.md"
    ]
    assert {(r.stale, r.stale_reason) for r in resp.results} == {(True, "changed on disk")}
    assert (resp.degraded, resp.stale_hidden, resp.stale_hidden_ids) == (False, 0, ())
    text = render_response(resp)
    assert text.count("stale: the source file was changed on disk since it was indexed") == 3
    assert "results hidden" not in text


def test_hidden_stale_results_are_counted_with_ids_and_reason(
    indexed: HybridSearch, docs: Path
) -> None:
    _touch_all(docs)
    (docs / "config.md").unlink()
    resp = indexed.search("peerDependencies", paths=["bm25"], include_stale=False)
    assert resp.results == ()
    assert resp.stale_hidden == 3
    reasons = {h["resource_id"]: h["reason"] for h in resp.stale_hidden_ids}
    assert reasons == {
        "config.md": "deleted on disk",
        "install.md": "changed on disk",
        "package-json.md": "changed on disk",
    }
    assert all(h["chunk_id"].startswith(h["resource_id"] + "@") for h in resp.stale_hidden_ids)
    # the JSON round trip the CLI renders remote responses through, and the service's model
    data = resp.as_dict()
    again = SearchResponse.from_dict(json.loads(json.dumps(data)))
    assert (again.stale_hidden, again.stale_hidden_ids) == (3, resp.stale_hidden_ids)
    served = SearchOut.model_validate(data).model_dump(mode="json")
    assert (served["stale_hidden"], served["stale_hidden_ids"]) == (3, data["stale_hidden_ids"])
    assert HIDDEN_LINE in render_response(again)
    agent = resp.as_agent_text()
    assert "note: 3 results hidden because the source files changed on disk" in agent


def test_the_cli_says_how_many_results_it_hid(
    tmp_path: Path, docs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = ("--data-dir", str(tmp_path / "data"))
    monkeypatch.setenv("HYBRIDSAG_EMBEDDING__MODEL", "none")
    assert _run(*env, "index", str(docs), "-q")[0] == 0
    _touch_all(docs)
    code, text = _run(*env, "search", "peerDependencies", "--no-include-stale")
    assert code == 0
    assert text.splitlines()[1] == f"  {HIDDEN_LINE}"
    assert text.startswith("0 results for 'peerDependencies'")
    code, text = _run(*env, "search", "peerDependencies")
    assert code == 0 and text.startswith("3 results") and "results hidden" not in text
    code, text = _run(*env, "search", "peerDependencies", "--no-include-stale", "--json")
    assert json.loads(text)["stale_hidden"] == 3


def test_through_a_service_the_hidden_count_reaches_the_cli(
    tmp_path: Path, docs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = folder_service_settings(tmp_path / "data", docs)
    _touch_all(docs)
    monkeypatch.setenv("HYBRIDSAG_SERVER__CLIENT_TOKEN", ADMIN)
    with running_service(settings) as url:
        code, text = _run("--server", url, "search", "peerDependencies", "--no-include-stale")
        assert code == 0 and f"  {HIDDEN_LINE}" in text.splitlines()
        code, text = _run("--server", url, "search", "peerDependencies", "--json")
        results = json.loads(text)["results"]
        assert {(r["stale"], r["stale_reason"]) for r in results} == {(True, "changed on disk")}


def test_brief_output_keeps_the_stale_mark(
    tmp_path: Path, docs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--brief`` is one line per result, and that line says a result's file is gone or changed
    (issue 38: ``--brief`` dropped the stale mark a deleted file's result carries)."""
    env = ("--data-dir", str(tmp_path / "data"))
    monkeypatch.setenv("HYBRIDSAG_EMBEDDING__MODEL", "none")
    assert _run(*env, "index", str(docs), "-q")[0] == 0
    (docs / "config.md").unlink()
    code, text = _run(*env, "search", "peerDependencies", "--brief", "--paths", "bm25")
    assert code == 0
    lines = text.splitlines()
    assert len(lines) == 4  # the header and three results
    gone = [line for line in lines[1:] if "(config.md:" in line]
    assert len(gone) == 1
    assert gone[0].endswith("; stale: the source file was deleted on disk since it was indexed)")
    assert all("stale" not in line for line in lines[1:] if "(config.md:" not in line)
