"""Folder ingest that stays in sync: pruning, stable ids, single files, progress (real SQLite)."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hybridsag.errors import IngestError
from hybridsag.ingest.progress import IngestProgress
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings

pytestmark = pytest.mark.timeout(30)


def _ids(hs: HybridSearch) -> list[str]:
    return sorted(hs.components.store.iter_resource_ids())


def _found(hs: HybridSearch, query: str) -> list[str]:
    return sorted(r.resource_id for r in hs.search(query, paths=["bm25"], top_k=20).results)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "kms").mkdir(parents=True)
    (root / "intro.md").write_text("# Intro\n\nThe okapi intro.\n", "utf-8")
    (root / "kms" / "encrypt.rst").write_text("Encrypt\n=======\n\nThe quetzal key.\n", "utf-8")
    (root / "kms" / "rotate.md").write_text("# Rotate\n\nThe narwhal rotation.\n", "utf-8")
    return root


# --------------------------------------------------------------------------- pruning


def test_reindex_prunes_resources_whose_files_are_gone(hs: HybridSearch, docs: Path) -> None:
    assert hs.ingest_folder(docs).indexed == 3
    (docs / "kms" / "rotate.md").unlink()
    report = hs.ingest_folder(docs)
    assert report.pruned == ["kms/rotate.md"]
    assert (report.indexed, report.unchanged) == (0, 2)
    assert _ids(hs) == ["intro.md", "kms/encrypt.rst"]
    assert _found(hs, "narwhal") == []
    conn = hs.components.store.connection()
    tomb = conn.execute("SELECT resource_id FROM tombstones").fetchall()
    assert [r[0] for r in tomb] == ["kms/rotate.md"]  # deleted through the write path
    left = conn.execute("SELECT count(*) FROM chunks WHERE resource_id = 'kms/rotate.md'")
    assert left.fetchone()[0] == 0


def test_no_prune_keeps_the_old_behaviour(hs: HybridSearch, docs: Path) -> None:
    hs.ingest_folder(docs)
    (docs / "intro.md").unlink()
    report = hs.ingest_folder(docs, prune=False)
    assert report.pruned == []
    assert "intro.md" in _ids(hs)
    resp = hs.search("okapi", paths=["bm25"], include_stale=True)
    assert [(r.resource_id, r.stale) for r in resp.results] == [("intro.md", True)]


def test_prune_never_touches_other_folders_jsonl_or_api_resources(
    hs: HybridSearch, docs: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.md").write_text("# Notes\n\nThe pangolin.\n", "utf-8")
    (other / "keep.md").write_text("# Keep\n\nKept.\n", "utf-8")
    hs.ingest_folder(docs)
    hs.ingest_folder(other)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "j1", "text": "jsonl walrus"}) + "\n", "utf-8")
    hs.ingest_jsonl(corpus)
    hs.ingest("api", "api axolotl", source_uri=str(docs / "api.md"))  # a path under docs
    (other / "notes.md").unlink()  # gone, but of another folder
    (docs / "intro.md").unlink()
    report = hs.ingest_folder(docs)
    assert report.pruned == ["intro.md"]
    assert _ids(hs) == ["api", "j1", "keep.md", "kms/encrypt.rst", "kms/rotate.md", "notes.md"]
    sub = hs.ingest_folder(docs / "kms")  # a subfolder prunes only under itself
    assert sub.pruned == []
    assert hs.ingest_folder(other).pruned == ["notes.md"]


def test_a_folder_that_holds_nothing_prunes_nothing(hs: HybridSearch, docs: Path) -> None:
    hs.ingest_folder(docs)
    for p in sorted(docs.rglob("*.*")):
        p.unlink()
    report = hs.ingest_folder(docs)
    assert report.pruned == []
    assert "nothing pruned, 3 resource(s) of it kept" in report.warnings[0]
    assert len(_ids(hs)) == 3


# --------------------------------------------------------------------------- ids


def test_indexing_a_subfolder_after_its_parent_keeps_one_id(hs: HybridSearch, docs: Path) -> None:
    hs.ingest_folder(docs)
    (docs / "kms" / "encrypt.rst").write_text("Encrypt\n=======\n\nThe new quetzal key.\n", "utf-8")
    report = hs.ingest_folder(docs / "kms")
    assert report.root == str(docs.resolve())
    assert report.notes == [
        f"{docs.resolve() / 'kms'} is inside {docs.resolve()}, indexed before: ids stay relative "
        "to it (kms/...)"
    ]
    assert (report.indexed, report.unchanged) == (1, 1)
    assert _ids(hs) == ["intro.md", "kms/encrypt.rst", "kms/rotate.md"]
    assert _found(hs, "quetzal") == ["kms/encrypt.rst"]


def test_indexing_a_parent_after_its_subfolder_keeps_the_subfolder_ids(
    hs: HybridSearch, docs: Path
) -> None:
    first = hs.ingest_folder(docs / "kms")
    assert first.root == str((docs / "kms").resolve()) and first.notes == []
    report = hs.ingest_folder(docs)
    assert report.notes == [
        f"files under {(docs / 'kms').resolve()}, indexed before, keep ids relative to it"
    ]
    assert (report.indexed, report.unchanged) == (1, 2)
    assert _ids(hs) == ["encrypt.rst", "intro.md", "rotate.md"]
    rec = hs.components.store.get_resource("encrypt.rst")
    assert rec is not None and rec.source_root == str((docs / "kms").resolve())
    again = hs.ingest_folder(docs / "kms")  # and the subfolder again: still the same ids
    assert (again.indexed, again.unchanged) == (0, 2)


def test_a_single_file_gets_the_id_its_folder_gives_it(hs: HybridSearch, docs: Path) -> None:
    alone = hs.ingest_folder(docs / "kms" / "rotate.md")
    assert alone.indexed == 1 and _ids(hs) == ["rotate.md"]
    hs.ingest_folder(docs / "kms")
    assert _ids(hs) == ["encrypt.rst", "rotate.md"]
    hs.ingest_folder(docs)
    (docs / "intro.md").write_text("# Intro\n\nThe changed okapi intro.\n", "utf-8")
    one = hs.ingest_folder(docs / "intro.md")
    assert (one.indexed, one.pruned) == (1, [])
    assert _ids(hs) == ["encrypt.rst", "intro.md", "rotate.md"]
    (docs / "image.png").write_bytes(b"\x89PNG")
    with pytest.raises(IngestError, match=r"image.png: \.png files are not indexed"):
        hs.ingest_folder(docs / "image.png")


def test_the_same_relative_path_in_two_folders_is_not_overwritten(
    hs: HybridSearch, docs: Path, tmp_path: Path
) -> None:
    twin = tmp_path / "twin"
    twin.mkdir()
    (twin / "intro.md").write_text("# Twin\n\nThe pangolin twin.\n", "utf-8")
    hs.ingest_folder(docs)
    report = hs.ingest_folder(twin)
    assert report.indexed == 0
    assert f"the id is taken by {docs.resolve() / 'intro.md'}" in report.errors["intro.md"]
    assert _found(hs, "okapi") == ["intro.md"] and _found(hs, "pangolin") == []
    # an API resource is not replaced either
    hs.ingest("notes.md", "api text")
    (twin / "notes.md").write_text("folder text\n", "utf-8")
    assert "ingested through the API or JSONL" in hs.ingest_folder(twin).errors["notes.md"]


def test_a_moved_folder_takes_over_its_ids(hs: HybridSearch, docs: Path, tmp_path: Path) -> None:
    hs.ingest_folder(docs)
    moved = tmp_path / "moved"
    shutil.move(docs, moved)
    report = hs.ingest_folder(moved)
    assert report.errors == {} and report.indexed == 3
    assert _ids(hs) == ["intro.md", "kms/encrypt.rst", "kms/rotate.md"]
    rec = hs.components.store.get_resource("intro.md")
    assert rec is not None and rec.source_uri == str(moved.resolve() / "intro.md")
    assert _found(hs, "okapi") == ["intro.md"]


def test_migration_gives_older_folder_resources_their_root(settings: Settings, docs: Path) -> None:
    with HybridSearch(settings) as hs:
        hs.ingest_folder(docs)
        hs.ingest("api", "text", source_uri="https://example.org/api")
    conn = sqlite3.connect(settings.sqlite_path)
    with conn:  # back to the schema before 0004: no source_root column
        conn.execute("DROP INDEX resources_source_root")
        conn.execute("ALTER TABLE resources DROP COLUMN source_root")
        conn.execute("DELETE FROM migrations WHERE name = '0004_source_root'")
    conn.close()
    with HybridSearch(settings) as hs:
        records = hs.components.store.resources(_ids(hs))
        roots = {rid: rec.source_root for rid, rec in records.items()}
        assert roots == {
            "api": None,
            "intro.md": str(docs.resolve()),
            "kms/encrypt.rst": str(docs.resolve()),
            "kms/rotate.md": str(docs.resolve()),
        }
        (docs / "intro.md").unlink()
        assert hs.ingest_folder(docs).pruned == ["intro.md"]


def test_the_hash_of_a_files_bytes_is_recorded_and_given_to_older_resources_unindexed(
    settings: Settings, docs: Path
) -> None:
    """Migration 0006: a resource indexed before it gets the SHA-256 of its file's bytes at
    the next index of its folder, with nothing re-indexed (a sync asks only for files whose
    bytes the service lacks)."""
    with HybridSearch(settings) as hs:
        hs.ingest_folder(docs)
    conn = sqlite3.connect(settings.sqlite_path)
    with conn:  # back to the schema before 0006
        conn.execute("ALTER TABLE resources DROP COLUMN source_sha256")
        conn.execute("DELETE FROM migrations WHERE name = '0007_source_sha256'")
    conn.close()
    with HybridSearch(settings) as hs:
        store = hs.components.store
        assert {r.source_sha256 for r in store.resources(_ids(hs)).values()} == {None}
        versions = {rid: r.version for rid, r in store.resources(_ids(hs)).items()}
        report = hs.ingest_folder(docs)
        assert report.indexed == 0 and report.unchanged == 3
        records = store.resources(_ids(hs))
        assert {rid: r.version for rid, r in records.items()} == versions
        assert {rid: r.source_sha256 for rid, r in records.items()} == {
            rid: hashlib.sha256((docs / rid).read_bytes()).hexdigest() for rid in versions
        }


# --------------------------------------------------------------------------- progress


class Recorder(IngestProgress):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def start(self, documents: int | None) -> None:
        self.events.append(("start", documents))

    def prepared(self, documents: int, chunks: int) -> None:
        self.events.append(("prepared", (documents, chunks)))

    def embedding(self, chunks: int) -> None:
        self.events.append(("embedding", chunks))

    def embedded(self, chunks: int) -> None:
        self.events.append(("embedded", chunks))


def test_progress_counts_every_file_and_chunk_against_a_total(hs: HybridSearch, docs: Path) -> None:
    (docs / "bad.md").write_bytes(b"\x00\x01" * 10)
    rec = Recorder()
    report = hs.ingest_folder(docs, progress=rec)
    assert rec.events[0] == ("start", 4)
    done = [v for k, v in rec.events if k == "prepared"]
    assert sum(d for d, _ in done) == 4  # indexed and skipped files alike
    assert sum(c for _, c in done) == report.chunks >= 3
    rec2 = Recorder()
    hs.ingest_folder(docs, progress=rec2)  # unchanged files count too
    assert rec2.events[0] == ("start", 4)
    assert sum(v[0] for k, v in rec2.events if k == "prepared") == 4


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_progress_shows_the_embedding_phase(tmp_path: Path, docs: Path) -> None:
    # the real packaged model (its load is the slow part) and Milvus Lite: every chunk is
    # announced, then embedded
    settings = Settings(data_dir=tmp_path / "dense")
    rec = Recorder()
    with HybridSearch(settings) as hs:
        report = hs.ingest_folder(docs, progress=rec)
    assert report.vectors == report.chunks >= 3
    kinds = [k for k, _ in rec.events]
    assert kinds.index("embedding") > max(i for i, k in enumerate(kinds) if k == "prepared")
    assert sum(v for k, v in rec.events if k == "embedding") == report.chunks
    assert sum(v for k, v in rec.events if k == "embedded") == report.chunks
