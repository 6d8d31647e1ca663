"""``hybridsag index`` (files, pruning, progress), ``list``, ``show`` and ``--version``."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hybridsag import __version__
from hybridsag.commands.common import IngestBars
from hybridsag.search import HybridSearch

# the CLI runner and the autouse lexical-only environment of the CLI tests
from tests.cli_support import lexical_only, run  # noqa: F401

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "kms").mkdir(parents=True)
    intro = "# Intro\n\nThe okapi intro.\n\n## More\n\nMore okapi.\n"
    (root / "intro.md").write_text(intro, "utf-8")
    (root / "kms" / "encrypt.rst").write_text("Encrypt\n=======\n\nThe quetzal key.\n", "utf-8")
    return root


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("--version")[0] == 0
    assert capsys.readouterr().out == f"hybridsag {__version__}\n"


def test_index_a_file_a_folder_then_prune_and_no_prune(docs: Path) -> None:
    code, text = run("index", str(docs / "kms" / "encrypt.rst"), "-q")
    assert code == 0 and text.startswith("indexed 1 resource (")
    assert f"ids are relative to {(docs / 'kms').resolve()}" in text
    code, text = run("index", str(docs), "-q")
    assert code == 0 and "indexed 1 resource (" in text and "1 unchanged" in text
    assert f"note: files under {(docs / 'kms').resolve()}, indexed before" in text
    (docs / "intro.md").unlink()
    code, text = run("index", str(docs), "-q", "--no-prune")
    assert code == 0 and "0 removed" in text
    assert json.loads(run("list", "--json")[1])[0]["resource_id"] == "encrypt.rst"
    code, text = run("index", str(docs), "-q")
    assert "1 removed" in text and "  removed intro.md: its file is gone" in text
    data = json.loads(run("index", str(docs), "-q", "--json")[1])
    assert data["pruned"] == [] and data["root"] == str(docs.resolve())


def test_list_with_filters_and_show(docs: Path, tmp_path: Path) -> None:
    assert run("index", str(docs), "-q", "--tenant", "acme")[0] == 0
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"_id": "j1", "text": "walrus"}) + "\n", "utf-8")
    assert run("index", "--jsonl", str(corpus), "-q")[0] == 0
    code, text = run("list")
    assert code == 0
    lines = text.splitlines()
    # a resource is (tenant, id): the tenant column is there because some resources have one
    assert lines[0].split() == ["TENANT", "RESOURCE", "STATUS", "VER", "CHUNKS", "SOURCE"]
    intro = ["acme", "intro.md", "ready", "1", "2", str(docs.resolve() / "intro.md")]
    assert lines[1].split() == intro
    assert lines[3].split() == ["-", "j1", "ready", "1", "1", "-"]
    assert lines[-1] == "3 resources"
    code, text = run("list", "--tenant", "")  # the un-tenanted ones only: no tenant column
    assert text.splitlines()[0].split() == ["RESOURCE", "STATUS", "VER", "CHUNKS", "SOURCE"]
    rows = json.loads(run("list", "--tenant", "acme", "--json")[1])
    assert [r["resource_id"] for r in rows] == ["intro.md", "kms/encrypt.rst"]
    assert rows[0] == {
        "resource_id": "intro.md",
        "status": "ready",
        "version": 1,
        "chunks": 2,
        "title": "Intro",
        "tenant": "acme",
        "source_uri": str(docs.resolve() / "intro.md"),
        "source_root": str(docs.resolve()),
    }
    assert [r["resource_id"] for r in json.loads(run("list", "--prefix", "kms/", "--json")[1])] == [
        "kms/encrypt.rst"
    ]
    assert json.loads(run("list", "--status", "disabled", "--json")[1]) == []
    assert run("list", "--status", "gone")[0] == 2  # argparse names the valid choices

    assert run("show", "intro.md")[0] == 2  # no un-tenanted intro.md: acme's is another resource
    code, text = run("show", "intro.md", "--tenant", "acme")
    assert code == 0
    assert "resource:  intro.md" in text and "status:    ready" in text
    assert f"root:      {docs.resolve()}" in text and "tenant:    acme" in text
    chunks = "  #0    lines 3-3, 16 chars  [Intro]\n  #1    lines 7-7, 11 chars  [Intro > More]\n"
    assert text.endswith(chunks)
    detail = json.loads(run("show", "kms/encrypt.rst", "--tenant", "acme", "--json")[1])
    assert (detail["resource_id"], detail["stale"], len(detail["chunks"])) == (
        "kms/encrypt.rst",
        False,
        1,
    )
    assert detail["chunks"][0]["chars"] == len("The quetzal key.")
    (docs / "kms" / "encrypt.rst").write_text("changed\n", "utf-8")
    shown = run("show", "kms/encrypt.rst", "--tenant", "acme")[1]
    assert "status:    ready (stale: the source file was changed on disk since it was indexed)" in shown
    (docs / "kms" / "encrypt.rst").unlink()
    shown = run("show", "kms/encrypt.rst", "--tenant", "acme")[1]
    assert "status:    ready (stale: the source file was deleted on disk since it was indexed)" in shown
    detail = json.loads(run("show", "kms/encrypt.rst", "--tenant", "acme", "--json")[1])
    assert (detail["stale"], detail["stale_reason"]) == (True, "deleted on disk")
    assert run("show", "nope")[0] == 2
    # delete names the tenant too: acme's intro.md goes, and only with its tenant named
    assert run("delete", "intro.md")[0] == 2
    code, text = run("delete", "intro.md", "--tenant", "acme")
    assert code == 0 and text == (
        "deleted intro.md (tenant 'acme')\n  its file is still on disk: it stays out of the "
        "index of its folder (run: hybridsag include intro.md --tenant acme to bring it back)\n"
    )
    assert [r["resource_id"] for r in json.loads(run("list", "--json")[1])] == [
        "kms/encrypt.rst",
        "j1",
    ]


def test_list_and_get_resource_api(hs: HybridSearch, docs: Path) -> None:
    hs.ingest_folder(docs)
    assert [s.record.resource_id for s in hs.list_resources(limit=1)] == ["intro.md"]
    assert hs.get_resource("missing") is None
    with pytest.raises(Exception, match="unknown status 'gone'; valid: indexing, ready"):
        hs.list_resources(status="gone")


def test_progress_bars_show_files_and_chunks_against_a_total(docs: Path, tmp_path: Path) -> None:
    from hybridsag.settings import Settings

    stream = io.StringIO()
    bars = IngestBars(file=stream, force=True)
    with HybridSearch(Settings(data_dir=tmp_path / "data", embedding={"model": "none"})) as hs:
        report = hs.ingest_folder(docs, progress=bars)
    assert bars.files.total == 2 and bars.files.n == 2
    assert bars.chunks == report.chunks == 3
    meter = str(bars.files)  # what the bar shows now: a share, a total, an ETA, the chunks
    assert meter.startswith("files: 100%") and "2/2 [" in meter and "chunks=3" in meter
    assert "files:   0%" in stream.getvalue()  # it was drawn as soon as the total was known
    bars.close()
