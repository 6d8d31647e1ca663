"""Deletes that stay (issue 24, item 6): ``delete`` of a folder file that still exists used to
be undone by the next ``index``. Now the file is excluded from its folder (a row the next index,
sync, watch and reconcile honour), ``list`` shows it, and ``hybridsag include`` lifts it."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from hybridsag.search import HybridSearch
from tests.cli_support import lexical_only, run  # noqa: F401
from tests.servicesupport import ADMIN, folder_service_settings, running_service

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("lexical_only")]


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "guide").mkdir(parents=True)
    (root / "intro.md").write_text("# Intro\n\nThe okapi intro.\n", "utf-8")
    (root / "guide" / "drafts.md").write_text("# Drafts\n\nThe okapi drafts.\n", "utf-8")
    (root / "gone.md").write_text("# Gone\n\nThe okapi that goes.\n", "utf-8")
    return root


def _ids() -> list[str]:
    return sorted(r["resource_id"] for r in json.loads(run("list", "--json")[1]))


def test_a_deleted_file_survives_the_next_index_is_listed_and_comes_back(docs: Path) -> None:
    assert run("index", str(docs), "-q")[0] == 0
    code, text = run("delete", "guide/drafts.md")
    assert code == 0
    assert "run: hybridsag include guide/drafts.md to bring it back" in text
    (docs / "gone.md").unlink()
    code, text = run("delete", "gone.md")  # its file is gone: nothing to exclude
    assert code == 0 and "include" not in text
    assert json.loads(run("delete", "intro.md", "--json")[1])["excluded"] is True
    assert run("include", "intro.md")[0] == 0

    code, text = run("index", str(docs), "-q")
    assert code == 0
    assert "  excluded guide/drafts.md: deleted by hand" in text
    assert _ids() == ["intro.md"]
    assert json.loads(run("index", str(docs), "-q", "--json")[1])["excluded"] == ["guide/drafts.md"]
    code, text = run("list")
    assert text.endswith("1 file deleted by hand and kept out of the index: hybridsag list --excluded\n")
    [row] = json.loads(run("list", "--excluded", "--json")[1])
    assert (row["resource_id"], row["status"], row["source_uri"]) == (
        "guide/drafts.md",
        "excluded",
        str(docs.resolve() / "guide" / "drafts.md"),
    )
    assert "guide/drafts.md  excluded" in run("list", "--excluded")[1]
    assert "okapi drafts" not in run("search", "okapi", "--paths", "bm25")[1]

    code, text = run("include", "guide/drafts.md")
    assert code == 0 and text.startswith("included guide/drafts.md again: indexed 1")
    assert _ids() == ["guide/drafts.md", "intro.md"]
    assert json.loads(run("list", "--excluded", "--json")[1]) == []
    assert "okapi drafts" in run("search", "okapi", "--paths", "bm25")[1]
    assert run("include", "guide/drafts.md")[0] == 2  # nothing excluded any more


def test_a_delete_through_the_service_stays_too(tmp_path: Path, docs: Path) -> None:
    settings = folder_service_settings(tmp_path / "data", docs)
    with running_service(settings) as url:
        r = httpx.delete(
            f"{url}/v1/resources/intro.md", headers={"Authorization": f"Bearer {ADMIN}"}
        )
        assert r.status_code == 200 and r.json()["done"] is True
    with HybridSearch(settings) as hs:
        assert [e.path for e in hs.exclusions()] == ["intro.md"]
        again = hs.ingest_folder(docs)
        assert (again.indexed, again.excluded) == (0, ["intro.md"])
        assert hs.resource("intro.md") is None


def test_through_the_service_sync_honours_exclusions_and_include_lifts_them(
    tmp_path: Path, docs: Path
) -> None:
    from hybridsag.client import ServiceClient

    settings = folder_service_settings(tmp_path / "data", docs)
    with running_service(settings) as url, ServiceClient(url, token=ADMIN) as client:
        assert client.delete("intro.md")["done"] is True
        [row] = client.exclusions()
        assert (row["resource_id"], row["status"]) == ("intro.md", "excluded")
        assert client.exclusions(resource_id="gone.md") == []

        synced = client.sync_folder(docs)  # the folder, sent through the service
        assert synced["excluded"] == ["intro.md"]
        assert synced["sync"]["uploaded"] == 0  # neither needed nor sent
        assert client.resource("guide/drafts.md")["status"] == "ready"
        with pytest.raises(Exception, match="no resource"):
            client.resource("intro.md")

        report = client.include("intro.md")
        assert report["indexed"] == 1
        assert client.resource("intro.md")["status"] == "ready"
        assert client.exclusions() == []
        with pytest.raises(Exception, match="no excluded file"):
            client.include("intro.md")
