"""Audits that see the sources (issue 24, item 5): the reconciler's plan holds the folder files
changed, deleted and added on disk since indexing; ``reconcile`` repairs them through the write
path under the same guards; ``reconcile --dry-run`` and ``audit`` exit 0 clean, 1 work, 2 error.

Before, with one file modified and one deleted on disk, ``reconcile --dry-run``, ``doctor`` and
``audit`` all said all was well.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import pytest

from hybridsag.cli import main
from hybridsag.consistency import Reconciler, build_plan
from hybridsag.consistency.reports import report_exit_code
from hybridsag.errors import ConsistencyError
from hybridsag.search import HybridSearch
from tests.consistency_support import check_consistent, make_settings, open_search

pytestmark = pytest.mark.timeout(180)

PAGES = {
    "install.md": "# Install\n\nRun npm install to fetch the packages.\n",
    "peers.md": "# Peers\n\nThe peerDependencies field names the plugins a package works with.\n",
    "scripts.md": "# Scripts\n\nThe scripts field holds lifecycle hooks such as prepare.\n",
    "cache.md": "# Cache\n\nThe npm cache keeps downloaded tarballs under the cache folder.\n",
    "config.md": "# Config\n\nThe npmrc file sets the registry and other options.\n",
    "audit.md": "# Audit\n\nnpm audit reports known vulnerabilities of dependencies.\n",
}


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def _write(folder: Path, pages: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in pages.items():
        (folder / name).write_text(text, "utf-8")


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    _write(tmp_path / "docs", PAGES)
    return tmp_path / "docs"


@pytest.fixture
def hs(tmp_path: Path, docs: Path) -> HybridSearch:
    search = HybridSearch(make_settings(tmp_path / "data", model="none"))
    assert search.ingest_folder(docs).indexed == len(PAGES)
    yield search
    search.close()


def _plan(hs: HybridSearch):  # type: ignore[no-untyped-def]
    c = hs.components
    return build_plan(c.store, c.lexical, None, hs.settings)


def _top(hs: HybridSearch, query: str, **kwargs: object) -> list[str]:
    resp = hs.search(query, paths=["bm25", "title"], top_k=3, **kwargs)  # type: ignore[arg-type]
    return [r.resource_id for r in resp.results]


def test_a_comment_line_appended_is_found_repaired_and_the_answer_is_back(
    hs: HybridSearch, docs: Path
) -> None:
    assert _top(hs, "peerDependencies")[0] == "peers.md"
    with open(docs / "peers.md", "a", encoding="utf-8") as fh:
        fh.write("<!-- reviewed 2024-05 -->\n")
    assert "peers.md" not in _top(hs, "peerDependencies", include_stale=False)  # stale: held
    plan = _plan(hs)
    assert [x.path for x in plan.sources.changed] == ["peers.md"]
    assert plan.counts()["source_changed"] == 1 and not plan.sources.deleted
    report = Reconciler(hs.components).run()
    assert report["apply"]["totals"] == {"reindexed_sources": 1}
    assert report["counts_after"]["source_changed"] == 0 and report_exit_code(report) == 0
    resp = hs.search("peerDependencies", paths=["bm25", "title"], top_k=3, include_stale=False)
    assert resp.results[0].resource_id == "peers.md" and not resp.results[0].stale
    record = hs.resource("peers.md")
    assert record is not None and record.version == 2


def test_modified_and_deleted_files_exit_1_then_repaired_then_clean(
    tmp_path: Path, docs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYBRIDSAG_EMBEDDING__MODEL", "none")
    data = ("--data-dir", str(tmp_path / "data"))
    assert _cli(*data, "index", str(docs), "-q")[0] == 0
    assert _cli(*data, "reconcile", "--dry-run")[0] == 0  # nothing on disk moved: clean
    (docs / "cache.md").write_text("# Cache\n\nnpm cache clean removes every tarball.\n", "utf-8")
    (docs / "audit.md").unlink()

    code, text = _cli(*data, "reconcile", "--dry-run")
    assert code == 1  # the plan has work: cron alerts
    head = text.splitlines()[0]
    assert head.endswith("to repair: 1 source_deleted, 1 source_changed")
    assert "  source_deleted               1       1  audit.md" in text
    assert "  source_changed               1       1  cache.md" in text
    assert _cli(*data, "audit")[0] == 1  # the latest report: the dry run's

    code, text = _cli(*data, "reconcile")
    assert code == 0, text
    assert "applied: deleted_sources 1, reindexed_sources 1" in text
    code, text = _cli(*data, "reconcile", "--dry-run", "--json")
    again = json.loads(text)
    assert code == 0 and not any(again["counts_before"].values())
    assert _cli(*data, "audit")[0] == 0
    ids = sorted(r["resource_id"] for r in json.loads(_cli(*data, "list", "--json")[1]))
    assert ids == sorted(set(PAGES) - {"audit.md"})
    found = _cli(*data, "search", "tarball", "--paths", "bm25", "--json")[1]
    assert [r["text"] for r in json.loads(found)["results"]][0] == (
        "npm cache clean removes every tarball."
    )


def test_a_new_file_under_an_indexed_root_is_indexed_with_the_roots_tenant_and_acl(
    tmp_path: Path, docs: Path
) -> None:
    with HybridSearch(make_settings(tmp_path / "data", model="none")) as hs:
        assert hs.ingest_folder(docs, tenant="acme", acl=("staff",)).indexed == len(PAGES)
        assert hs.delete("config.md", tenant="acme")  # its file stays: excluded, never "new"
        (docs / "guide").mkdir()
        (docs / "guide" / "publish.md").write_text("# Publish\n\nnpm publish uploads.\n", "utf-8")
        (docs / ".hidden.md").write_text("hidden files are not indexed\n", "utf-8")
        (docs / "notes.bin").write_bytes(b"not a suffix the folder rules index")
        plan = _plan(hs)
        assert [(x.tenant, x.path, x.acl) for x in plan.sources.new] == [
            ("acme", "guide/publish.md", ("staff",))
        ]
        assert plan.samples()["source_new"] == ["guide/publish.md (tenant 'acme')"]
        report = Reconciler(hs.components).run()
        assert report["apply"]["totals"] == {"indexed_sources": 1}
        record = hs.resource("guide/publish.md", tenant="acme")
        assert record is not None and (record.acl, record.source_root) == (
            ("staff",),
            str(docs.resolve()),
        )
        assert hs.resource("config.md", tenant="acme") is None
        assert not any(_plan(hs).counts().values())


def test_the_mass_delete_guard_refuses_a_folder_whose_files_vanished(
    hs: HybridSearch, docs: Path, tmp_path: Path
) -> None:
    # an unmounted disk: the mount point is there, empty
    shutil.move(str(docs), str(tmp_path / "elsewhere"))
    docs.mkdir()
    rec = Reconciler(hs.components)
    dry = rec.run(dry_run=True)
    assert dry["counts_before"]["source_deleted"] == len(PAGES)
    assert "mass-delete guard" in dry["would_refuse"] and "6 of the 6 files" in dry["would_refuse"]
    with pytest.raises(ConsistencyError, match="an unmounted disk or a moved folder"):
        rec.run()
    assert len(hs.list_resources()) == len(PAGES)  # nothing deleted
    code, _ = _cli("--data-dir", str(hs.settings.data_dir), "reconcile")
    assert code == 2
    forced = rec.run(force=True)
    assert forced["apply"]["totals"] == {"deleted_sources": len(PAGES)}
    assert hs.list_resources() == []


def test_one_deleted_file_of_a_folder_passes_the_guard(hs: HybridSearch, docs: Path) -> None:
    (docs / "audit.md").unlink()
    report = Reconciler(hs.components).run()
    assert report["apply"]["totals"] == {"deleted_sources": 1}
    assert hs.resource("audit.md") is None


def test_a_touched_file_is_no_finding_and_a_run_refreshes_its_stat(
    hs: HybridSearch, docs: Path
) -> None:
    for path in docs.iterdir():
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 3_000_000_000))
    dry = Reconciler(hs.components).run(dry_run=True)
    assert report_exit_code(dry) == 0 and dry["sources_before"]["touched"] == len(PAGES)
    assert all(r.stale for r in hs.search("npm", paths=["bm25"]).results)
    report = Reconciler(hs.components).run()
    assert report["apply"]["totals"] == {"refreshed_sources": len(PAGES)}
    assert [r.version for r in (s.record for s in hs.list_resources())] == [1] * len(PAGES)
    assert not any(r.stale for r in hs.search("npm", paths=["bm25"]).results)


def test_a_root_that_is_no_folder_here_is_not_checked(
    hs: HybridSearch, docs: Path, tmp_path: Path
) -> None:
    shutil.move(str(docs), str(tmp_path / "moved"))  # the root itself is gone
    (docs.parent / "docs").write_text("a file where the folder was\n", "utf-8")
    report = Reconciler(hs.components).run(dry_run=True)
    assert report_exit_code(report) == 0
    [skipped] = report["sources_before"]["not_checked"]
    assert skipped["root"] == str(docs.resolve()) and "not a folder on this host" in skipped["why"]
    code, text = _cli("--data-dir", str(hs.settings.data_dir), "reconcile", "--dry-run")
    assert code == 0 and f"  not checked: {docs.resolve()}: not a folder on this host" in text


def test_unreadable_and_ignored_files_are_said_not_repaired(hs: HybridSearch, docs: Path) -> None:
    (docs / "install.md").write_bytes(b"\xff\xfe\x00\x01" * 64 + bytes(range(256)))
    (docs / ".gitignore").write_text("scripts.md\n", "utf-8")
    (docs / "scripts.md").write_text("# Scripts\n\nChanged, but now ignored.\n", "utf-8")
    plan = _plan(hs)
    assert not any(plan.counts().values())
    skipped = dict(plan.sources.skipped)
    assert set(skipped) == {"install.md", "scripts.md"}
    assert "no longer indexed by its folder's rules" in skipped["scripts.md"]


@pytest.mark.slow
def test_vectors_follow_the_source_repairs(tmp_path: Path, docs: Path) -> None:
    """With Milvus Lite and the packaged model: a changed file is re-embedded, a deleted file's
    vectors go, a new file gets vectors; the index is consistent after (an oracle apart from the
    reconciler's plan says so)."""
    with open_search(make_settings(tmp_path / "data")) as hs:
        assert hs.ingest_folder(docs).indexed == len(PAGES)
        (docs / "peers.md").write_text("# Peers\n\nA walrus basks on the ice floe.\n", "utf-8")
        (docs / "audit.md").unlink()
        _write(docs, {"new.md": "# New\n\nThe okapi is a forest giraffe.\n"})
        report = Reconciler(hs.components).run()
        assert report["apply"]["totals"] == {
            "deleted_sources": 1,
            "indexed_sources": 1,
            "reindexed_sources": 1,
        }
        assert check_consistent(hs) == []
        dense = hs.search("a seal-like animal resting on sea ice", paths=["dense"], top_k=1)
        assert dense.results[0].resource_id == "peers.md"
        okapi = hs.search("forest giraffe", paths=["dense"], top_k=1)
        assert okapi.results[0].resource_id == "new.md"
        entries = {rid for _, rid, _ in hs.components.dense_index().iter_entries()}
        assert "audit.md" not in entries and {"new.md", "peers.md"} <= entries
