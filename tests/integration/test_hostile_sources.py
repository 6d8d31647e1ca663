"""Hostile sources: what a folder, a JSONL file or a caller may hold never hangs, leaks or aborts.

Each test indexes and searches real files in a real SQLite store (lexical only) under a per-test
timeout: a FIFO, a symlink to ``/dev/zero`` or ``/etc/passwd``, a 300 MB (sparse) file, a
pathological ``.gitignore``, file names that are not UTF-8, ids longer than Milvus' primary key,
and documents whose fields break the stores' limits. Each bad entry is reported with its reason
and the rest of the batch is indexed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hybridsag.documents import (
    MAX_ACL_TAGS,
    MAX_CHUNK_ID_BYTES,
    MAX_METADATA_BYTES,
    MAX_METADATA_DEPTH,
    MAX_METADATA_KEYS,
    MAX_RESOURCE_ID_BYTES,
    MAX_TENANT_BYTES,
    Document,
    make_document,
)
from hybridsag.errors import IngestError
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from hybridsag.records.keys import chunk_id_for

# a hang is a failure, not a stuck suite
pytestmark = pytest.mark.timeout(20)

GOOD = "# Good\n\nThe okapi is a good animal.\n"


def _found(hs: HybridSearch, query: str, **kwargs: Any) -> list[str]:
    """The resources a search shows: each result's and those of the copies folded into it
    (``also_in``: a linked file has the text of its target)."""
    kwargs.setdefault("paths", ["bm25", "title"])
    results = hs.search(query, top_k=20, **kwargs).results
    copies = [a["resource_id"] for r in results for a in r.also_in]
    return sorted([r.resource_id for r in results] + copies)


def _stale(hs: HybridSearch, query: str) -> dict[str, bool]:
    resp = hs.search(query, paths=["bm25"], top_k=20, include_stale=True)
    return {r.resource_id: r.stale for r in resp.results}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "good.md").write_text(GOOD, "utf-8")
    (root / "victim.md").write_text("# Victim\n\nThe quetzal flies.\n", "utf-8")
    return root


# --------------------------------------------------------------------------- item 1: reading


def test_fifo_in_a_folder_is_skipped_and_never_blocks(hs: HybridSearch, folder: Path) -> None:
    os.mkfifo(folder / "pipe.md")  # nobody ever writes: opening it for reading would block
    report = hs.ingest_folder(folder)
    assert report.indexed == 2
    assert list(report.errors) == ["pipe.md"]
    assert "a FIFO, not a regular file" in report.errors["pipe.md"]
    assert _found(hs, "okapi") == ["good.md"]
    alone = hs.ingest_folder(folder / "pipe.md")  # named on its own: the same answer
    assert alone.indexed == 0 and "a FIFO" in alone.errors["pipe.md"]


def test_an_indexed_file_replaced_by_a_fifo_hangs_neither_search_nor_index(
    hs: HybridSearch, folder: Path
) -> None:
    hs.ingest_folder(folder)
    (folder / "victim.md").unlink()
    os.mkfifo(folder / "victim.md")
    assert _found(hs, "quetzal", include_stale=False) == []  # stale: hidden when asked
    assert _stale(hs, "quetzal") == {"victim.md": True}
    again = hs.ingest_folder(folder)
    assert "a FIFO" in again.errors["victim.md"]
    assert again.pruned == []  # the path still exists: kept, and still stale
    assert _stale(hs, "quetzal") == {"victim.md": True}


def test_symlink_to_dev_zero_is_never_read(hs: HybridSearch, folder: Path) -> None:
    (folder / "zero.md").symlink_to("/dev/zero")
    report = hs.ingest_folder(folder)
    assert report.indexed == 2
    assert "a symlink to /dev/zero, outside the indexed folder; not followed" == report.errors[
        "zero.md"
    ]
    # an indexed file swapped for the same link: search costs one stat, and says stale
    (folder / "victim.md").unlink()
    (folder / "victim.md").symlink_to("/dev/zero")
    assert _stale(hs, "quetzal") == {"victim.md": True}
    assert "not followed" in hs.ingest_folder(folder).errors["victim.md"]


def test_symlink_to_etc_passwd_is_not_indexed_but_links_inside_the_folder_are(
    hs: HybridSearch, folder: Path
) -> None:
    assert "root:" in Path("/etc/passwd").read_text("utf-8")
    (folder / "passwd.txt").symlink_to("/etc/passwd")
    (folder / "alias.md").symlink_to(folder / "good.md")
    (folder / "sub").mkdir()
    (folder / "sub" / "up.md").symlink_to("../victim.md")
    (folder / "outside").symlink_to("/etc", target_is_directory=True)
    (folder / "inside").symlink_to(folder / "sub", target_is_directory=True)
    report = hs.ingest_folder(folder)
    assert sorted(report.errors) == ["outside/", "passwd.txt"]
    assert "a symlink to /etc/passwd" in report.errors["passwd.txt"]
    assert "a symlink to /etc, outside the indexed folder" in report.errors["outside/"]
    assert _found(hs, "root") == [] and _found(hs, "nologin") == []
    # links that stay inside are followed; a linked folder is indexed where it really is
    assert _found(hs, "okapi") == ["alias.md", "good.md"]
    assert _found(hs, "quetzal") == ["sub/up.md", "victim.md"]
    assert sorted(hs.components.store.iter_resource_ids()) == [
        "alias.md",
        "good.md",
        "sub/up.md",
        "victim.md",
    ]
    assert "not followed" in hs.ingest_folder(folder / "passwd.txt").errors["passwd.txt"]
    hs.ingest("control", "root is the superuser.")  # positive control: the word is findable
    assert _found(hs, "root") == ["control"]


def test_a_300_mb_file_is_skipped_before_it_is_read(hs: HybridSearch, folder: Path) -> None:
    big = folder / "big.md"
    with big.open("wb") as fh:
        fh.truncate(300 * 1024 * 1024)  # sparse: costs no disk
    report = hs.ingest_folder(folder)
    assert report.indexed == 2
    assert report.errors == {
        "big.md": "the file is 300 MiB, over the 64 MiB limit (ingest.max_file_mb); skipped"
    }
    # an indexed file swapped for a 300 MB one is stale on stat alone
    os.truncate(folder / "victim.md", 300 * 1024 * 1024)
    assert _stale(hs, "quetzal") == {"victim.md": True}


def test_the_file_size_cap_is_a_setting(tmp_path: Path, folder: Path) -> None:
    (folder / "mid.md").write_text("# Mid\n\n" + "walrus " * 400, "utf-8")  # 2.8 KB
    settings = Settings(
        data_dir=tmp_path / "data", embedding={"model": "none"}, ingest={"max_file_mb": 0.002}
    )
    with HybridSearch(settings) as hs:
        report = hs.ingest_folder(folder)
        assert report.indexed == 2
        assert "over the 2,097 bytes limit (ingest.max_file_mb)" in report.errors["mid.md"]
        assert _found(hs, "walrus") == []


def test_jsonl_line_over_the_cap_is_skipped_and_a_fifo_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    lines = [
        {"_id": "a", "text": "The okapi line."},
        {"_id": "huge", "text": "walrus " * 2000},
        {"_id": "b", "text": "The quetzal line."},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), "utf-8")
    settings = Settings(
        data_dir=tmp_path / "data", embedding={"model": "none"}, ingest={"max_file_mb": 0.001}
    )
    with HybridSearch(settings) as hs:
        report = hs.ingest_jsonl(path)
        assert report.indexed == 2
        assert list(report.errors) == [f"{path}:2"]
        assert "ingest.max_file_mb" in report.errors[f"{path}:2"]
        assert _found(hs, "okapi") == ["a"] and _found(hs, "quetzal") == ["b"]
        os.mkfifo(tmp_path / "pipe.jsonl")
        with pytest.raises(IngestError, match="a FIFO, not a regular file"):
            hs.ingest_jsonl(tmp_path / "pipe.jsonl")


# --------------------------------------------------------------------------- item 6: .gitignore


def test_pathological_gitignore_pattern_matches_in_linear_time(
    hs: HybridSearch, folder: Path
) -> None:
    # with a backtracking matcher this line takes seconds against a 30-character name and
    # never ends against this 200-character one; RE2 matches it in linear time
    (folder / ".gitignore").write_text("x*x*x*x*x*x*x*x*x*x*x*x*x*x*x*y\ndrop.md\n", "utf-8")
    (folder / ("x" * 200 + ".md")).write_text("# X\n\nThe narwhal.\n", "utf-8")
    (folder / "drop.md").write_text("# Drop\n\nThe ignored pangolin.\n", "utf-8")
    report = hs.ingest_folder(folder)
    assert report.errors == {}
    assert report.indexed == 3
    assert _found(hs, "narwhal") == ["x" * 200 + ".md"]
    assert _found(hs, "pangolin") == []  # the other rules still apply


def test_gitignore_that_cannot_be_applied_skips_its_folder(hs: HybridSearch, folder: Path) -> None:
    (folder / "long").mkdir()
    (folder / "long" / ".gitignore").write_text("a" * 5000 + "\n", "utf-8")
    (folder / "long" / "in.md").write_text("The pangolin.\n", "utf-8")
    (folder / "pipe").mkdir()
    os.mkfifo(folder / "pipe" / ".gitignore")
    (folder / "pipe" / "in.md").write_text("The pangolin too.\n", "utf-8")
    report = hs.ingest_folder(folder)
    assert report.indexed == 2
    assert sorted(report.errors) == ["long/", "pipe/"]
    assert "line 1 is 5000 characters, over the 4096 limit" in report.errors["long/"]
    assert "the folder was skipped" in report.errors["long/"]
    assert "a FIFO" in report.errors["pipe/"]
    assert _found(hs, "pangolin") == []


# --------------------------------------------------------------------------- item 5: one bad item


def test_bad_file_names_and_long_ids_do_not_abort_a_folder(hs: HybridSearch, folder: Path) -> None:
    bad_name = os.fsencode(folder) + b"/caf\xe9-\xff.md"  # Latin-1 bytes: not UTF-8
    with open(bad_name, "wb") as fh:
        fh.write(b"# Bad\n\nThe pangolin.\n")
    deep = folder / ("加密" * 30) / ("密钥" * 30) / ("轮换" * 30)  # 180 bytes per folder
    deep.mkdir(parents=True)
    (deep / "encrypt.md").write_text("# Deep\n\nThe pangolin again.\n", "utf-8")
    long_id = (deep / "encrypt.md").relative_to(folder).as_posix()
    assert len(long_id.encode("utf-8")) > MAX_RESOURCE_ID_BYTES
    assert len(chunk_id_for(long_id, 1, 0).encode("utf-8")) > MAX_CHUNK_ID_BYTES
    report = hs.ingest_folder(folder)
    assert report.indexed == 2
    assert report.errors["caf\\xe9-\\xff.md"] == (
        "the file name is not valid UTF-8; rename it to index it"
    )
    assert f"bytes in UTF-8, the limit is {MAX_RESOURCE_ID_BYTES}" in report.errors[long_id]
    assert len(report.errors) == 2
    json.dumps(report.as_dict(), ensure_ascii=False).encode("utf-8")  # valid UTF-8 throughout
    assert _found(hs, "pangolin") == []
    assert _found(hs, "okapi") == ["good.md"]


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"k": value}
    return value


def test_bad_jsonl_documents_are_skipped_one_by_one(hs: HybridSearch, tmp_path: Path) -> None:
    deep = '{"k": ' * 3000 + "{}" + "}" * 3000
    bad = {
        2: {"_id": "acl", "text": "x", "acl": [f"tag{i}" for i in range(300)]},
        3: {"_id": "tenant", "text": "x", "tenant": "t" * 300},
        4: '{"_id": "meta-surrogate", "text": "x", "metadata": {"k": "\\ud800"}}',
        5: '{"_id": "title-surrogate", "text": "x", "title": "T\\udfff"}',
        6: '{"_id": "deep", "text": "x", "metadata": ' + deep + "}",
        7: {"_id": "big-meta", "text": "x", "metadata": {"blob": "m" * (MAX_METADATA_BYTES + 1)}},
        8: {"_id": "many-keys", "text": "x", "metadata": {f"k{i}": i for i in range(300)}},
        9: {"_id": "nested-33", "text": "x", "metadata": _nested(MAX_METADATA_DEPTH + 1)},
        10: {"_id": "ü" * 250, "text": "x"},  # 500 bytes
    }
    lines = [json.dumps({"_id": "first", "text": "The okapi."})]
    lines += [v if isinstance(v, str) else json.dumps(v) for _, v in sorted(bad.items())]
    lines.append(json.dumps({"_id": "last", "text": "The quetzal."}))
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(lines) + "\n", "utf-8")
    report = hs.ingest_jsonl(path)
    assert report.indexed == 2
    reasons = {int(k.rsplit(":", 1)[1]): v for k, v in report.errors.items()}
    assert sorted(reasons) == sorted(bad)
    assert f"has 300 tags, the limit is {MAX_ACL_TAGS}" in reasons[2]
    assert "tenant 'ttt" in reasons[3] and f"the limit is {MAX_TENANT_BYTES}" in reasons[3]
    assert "lone surrogate '\\ud800'" in reasons[4]
    assert "title 'T\\udfff' holds a lone surrogate" in reasons[5]
    assert "nests too deeply" in reasons[6]
    assert f"the limit is {MAX_METADATA_BYTES}" in reasons[7]
    assert f"has 300 keys, the limit is {MAX_METADATA_KEYS}" in reasons[8]
    assert f"nests deeper than {MAX_METADATA_DEPTH} levels" in reasons[9]
    assert "is 500 bytes in UTF-8" in reasons[10]
    json.dumps(report.as_dict(), ensure_ascii=False).encode("utf-8")
    assert _found(hs, "okapi") == ["first"] and _found(hs, "quetzal") == ["last"]
    assert sorted(hs.components.store.iter_resource_ids()) == ["first", "last"]


def test_ingest_documents_validates_each_item(hs: HybridSearch) -> None:
    good = make_document("good", "The okapi.")
    fields = {f: getattr(good, f) for f in ("title", "text", "metadata", "tenant", "source_uri")}
    bad_docs = [
        Document(resource_id="surrogate\udcff", acl=(), fmt="markdown", **fields),
        Document(
            resource_id="meta", acl=(), fmt="markdown", **{**fields, "metadata": _nested(3000)}
        ),
        Document(resource_id="acl", acl=("x" * 300,), fmt="markdown", **fields),
        Document(resource_id="text", acl=(), fmt="markdown", **{**fields, "text": "a\ud800b"}),
    ]
    items: list[Any] = [good, *bad_docs, "not a document", make_document("last", "The quetzal.")]
    report = hs.ingest_documents(items)
    assert report.indexed == 2
    assert sorted(report.errors) == ["#5", "acl", "meta", "surrogate\\xff", "text"]
    assert "not a Document" in report.errors["#5"]
    assert "lone surrogate" in report.errors["surrogate\\xff"]
    assert f"nests deeper than {MAX_METADATA_DEPTH}" in report.errors["meta"]
    assert "acl tag" in report.errors["acl"] and "300 bytes" in report.errors["acl"]
    assert "text of 'text': 'a\\ud800b' holds a lone surrogate" in report.errors["text"]
    assert _found(hs, "okapi") == ["good"] and _found(hs, "quetzal") == ["last"]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"metadata": _nested(3000)}, "nests deeper than 32 levels"),
        ({"metadata": {"v": "x" * (20 * 1024 * 1024)}}, "bytes as JSON, the limit is 65536"),
        ({"metadata": {f"k{i}": 1 for i in range(100_000)}}, "100000 keys, the limit is 256"),
        ({"title": "T\ud800"}, "holds a lone surrogate"),
        ({"tenant": "é" * 129}, "tenant 'ééé"),
        ({"acl": [str(i) for i in range(257)]}, "257 tags, the limit is 256"),
    ],
)
def test_single_ingest_names_the_broken_limit(
    hs: HybridSearch, kwargs: dict[str, Any], named: str
) -> None:
    with pytest.raises(IngestError) as info:
        hs.ingest("doc", "text", **kwargs)
    assert named in str(info.value)
    assert hs.components.store.counts()["resources"] == 0
