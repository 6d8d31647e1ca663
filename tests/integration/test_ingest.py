"""The write path through ``HybridSearch``: ingest, re-ingest, JSONL, folders, delete, disable."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hybridsag.errors import IngestError
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "corpus"


def _count(hs: HybridSearch, table: str) -> int:
    return int(hs.components.store.connection().execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def _found(hs: HybridSearch, query: str, **kwargs: Any) -> list[str]:
    """Resource ids found on the foundation's paths (bm25 and title unless ``paths`` given)."""
    kwargs.setdefault("paths", ["bm25", "title"])
    return [r.resource_id for r in hs.search(query, top_k=20, **kwargs).results]


def _assert_consistent(hs: HybridSearch) -> None:
    """Every chunk has its FTS row and nothing else does; every resource has one title row."""
    conn = hs.components.store.connection()
    assert _count(hs, "chunks_fts") == _count(hs, "chunks")
    orphans = conn.execute(
        "SELECT count(*) FROM chunks_fts WHERE rowid NOT IN (SELECT id FROM chunks)"
    ).fetchone()[0]
    assert orphans == 0
    assert _count(hs, "titles_fts") == _count(hs, "resources WHERE status != 'indexing'")
    conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
    conn.execute("INSERT INTO titles_fts(titles_fts) VALUES ('integrity-check')")


# --------------------------------------------------------------------------- Python API


def test_ingest_with_all_fields(hs: HybridSearch) -> None:
    report = hs.ingest(
        "kb/faq-7",
        "Reset the device.\n\nThen call support about E-1234.",
        title="Device FAQ",
        metadata={"lang": "en", "rev": 3, "draft": False},
        tenant="acme",
        acl=["support", "eng", "support"],
        source_uri="https://kb.example/faq-7",
        fmt="text",
    )
    assert (report.indexed, report.unchanged, report.errors) == (1, 0, {})
    store = hs.components.store
    assert report.chunks == len(store.resource_chunks("kb/faq-7", tenant="acme")) >= 1
    assert store.get_resource("kb/faq-7") is None  # acme's, not the un-tenanted one
    rec = store.get_resource("kb/faq-7", tenant="acme")
    assert rec is not None
    assert (rec.title, rec.tenant, rec.acl, rec.status, rec.version) == (
        "Device FAQ",
        "acme",
        ("eng", "support"),
        "ready",
        1,
    )
    assert dict(rec.metadata) == {"lang": "en", "rev": 3, "draft": False}
    assert rec.source_uri == "https://kb.example/faq-7"
    assert _found(hs, "E-1234", filters={"tenant": "acme", "acl": ["eng"]}) == ["kb/faq-7"]
    assert _found(hs, "E-1234", filters={"tenant": "acme", "acl": ["sales"]}) == []
    assert _found(hs, "E-1234", filters={"tenant": "other"}) == []
    _assert_consistent(hs)


def test_reingest_replaces_chunks_atomically(hs: HybridSearch) -> None:
    v1 = "\n\n".join(f"## Part {i}\n\nOld walrus paragraph number {i}." for i in range(5))
    hs.ingest("doc", v1, title="Animals")
    first = hs.components.store.resource_chunks("doc")
    assert len(first) == 5 and all(c.version == 1 for c in first)
    assert _found(hs, "walrus") == ["doc"] * 5

    report = hs.ingest("doc", "# Animals\n\nA single new narwhal paragraph.", title="Animals")
    assert report.indexed == 1
    second = hs.components.store.resource_chunks("doc")
    assert [c.text for c in second] == ["A single new narwhal paragraph."]
    rec = hs.components.store.get_resource("doc")
    assert rec is not None and rec.version == 2 and rec.pending_version is None
    assert all(c.version == 2 and c.chunk_id.startswith("doc@2#") for c in second)
    ids = [r[0] for r in hs.components.store.connection().execute("SELECT chunk_id FROM chunks")]
    assert len(ids) == len(set(ids)) == 1
    assert _count(hs, "chunks_fts") == _count(hs, "chunks") == 1
    assert _found(hs, "walrus") == []
    assert _found(hs, "narwhal") == ["doc"]
    _assert_consistent(hs)


def test_reingesting_unchanged_content_is_skipped(hs: HybridSearch) -> None:
    args: dict[str, Any] = {"title": "T", "metadata": {"k": 1}, "tenant": "x", "acl": ["a"]}
    hs.ingest("doc", "Same text.", **args)
    again = hs.ingest("doc", "Same text.", **args)
    assert (again.indexed, again.unchanged, again.chunks) == (0, 1, 0)
    rec = hs.components.store.get_resource("doc", tenant="x")
    assert rec is not None and rec.version == 1
    changed_meta = hs.ingest("doc", "Same text.", **{**args, "metadata": {"k": 2}})
    assert (changed_meta.indexed, changed_meta.unchanged) == (1, 0)
    rec = hs.components.store.get_resource("doc", tenant="x")
    assert rec is not None and rec.version == 2 and dict(rec.metadata) == {"k": 2}


def test_a_failed_commit_leaves_the_previous_version_searchable(settings: Settings) -> None:
    armed = {"on": False}
    seen: list[tuple[str, str]] = []

    def hook(step: str, resource_id: str) -> None:
        seen.append((step, resource_id))
        if armed["on"] and step == "commit":
            raise RuntimeError("injected failure at commit")

    with HybridSearch(settings, step_hook=hook) as hs:
        hs.ingest("doc", "The first walrus version.\n\nIt has two walrus paragraphs.", title="W")
        hs.ingest("other", "Unrelated text.", title="O")
        before = hs.components.store.resource_chunks("doc")
        counts = (_count(hs, "chunks"), _count(hs, "chunks_fts"), _count(hs, "titles_fts"))
        armed["on"] = True
        with pytest.raises(RuntimeError, match="injected"):
            hs.ingest("doc", "A replacement about narwhals.", title="N")
        with pytest.raises(RuntimeError, match="injected"):
            hs.ingest("brand-new", "Never committed narwhal text.", title="New")
        armed["on"] = False
        assert ("commit", "doc") in seen

        rec = hs.components.store.get_resource("doc")
        assert rec is not None
        assert (rec.version, rec.pending_version, rec.status, rec.title) == (1, None, "ready", "W")
        assert hs.components.store.resource_chunks("doc") == before
        assert hs.components.store.get_resource("brand-new") is None
        assert (_count(hs, "chunks"), _count(hs, "chunks_fts"), _count(hs, "titles_fts")) == counts
        assert _count(hs, "chunks WHERE version != 1") == 0
        assert _count(hs, "journal") == 0
        assert _found(hs, "walrus") == ["doc"] * len(before)
        assert _found(hs, "narwhals") == []
        _assert_consistent(hs)

        retry = hs.ingest("doc", "A replacement about narwhals.", title="N")
        assert retry.indexed == 1
        rec = hs.components.store.get_resource("doc")
        assert rec is not None and rec.version == 2
        assert _found(hs, "narwhals") == ["doc"]


# --------------------------------------------------------------------------- JSONL


def test_jsonl_beir_file_with_bad_lines(hs: HybridSearch, tmp_path: Path) -> None:
    good = [
        {"_id": "p1", "title": "Ada Lovelace", "text": "Ada wrote the first program."},
        {"_id": "p2", "title": "Charles Babbage", "text": "Babbage designed the engine."},
        {"_id": 3, "title": "Alan Turing", "text": "Turing defined the machine."},
    ]
    lines = [
        json.dumps(good[0]).encode(),  # 1
        b"{not json at all",  # 2
        b"[1, 2, 3]",  # 3
        json.dumps({"title": "No id", "text": "orphan quokka text"}).encode(),  # 4
        b'{"_id": "bad-utf8", "text": "caf\xe9 \xff"}',  # 5
        b"",  # 6: blank, ignored
        json.dumps(good[1]).encode(),  # 7
        json.dumps({"_id": "m", "text": "x", "metadata": "lang=en"}).encode(),  # 8
        json.dumps(good[2]).encode(),  # 9
    ]
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    report = hs.ingest_jsonl(path)
    assert report.indexed == 3
    assert sorted(report.errors) == [f"{path}:{n}" for n in (2, 3, 4, 5, 8)]
    assert "not JSON" in report.errors[f"{path}:2"]
    assert "object" in report.errors[f"{path}:3"]
    assert "resource_id" in report.errors[f"{path}:4"]
    assert "UTF-8" in report.errors[f"{path}:5"]
    assert "metadata" in report.errors[f"{path}:8"]
    assert sorted(hs.components.store.iter_resource_ids()) == ["3", "p1", "p2"]
    rec = hs.components.store.get_resource("p2")
    assert rec is not None and rec.title == "Charles Babbage"
    assert _found(hs, "Babbage engine") == ["p2"]
    assert _found(hs, "quokka") == []


def test_jsonl_repeated_id_keeps_the_last_line(hs: HybridSearch, tmp_path: Path) -> None:
    path = tmp_path / "dups.jsonl"
    rows = [{"_id": "d", "text": "first kiwi"}, {"_id": "e", "text": "other"},
            {"_id": "d", "text": "second mango"}]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    report = hs.ingest_jsonl(path)
    assert report.errors == {}
    assert [c.text for c in hs.components.store.resource_chunks("d")] == ["second mango"]
    assert _found(hs, "kiwi") == [] and _found(hs, "mango") == ["d"]
    assert _count(hs, "chunks") == _count(hs, "chunks_fts") == 2


def test_jsonl_missing_file_is_an_ingest_error(hs: HybridSearch, tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="nope.jsonl"):
        hs.ingest_jsonl(tmp_path / "nope.jsonl")


# --------------------------------------------------------------------------- folders


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    dest = tmp_path / "corpus"
    shutil.copytree(SAMPLES, dest)
    return dest


def test_folder_ingest_skips_hidden_and_ignored(hs: HybridSearch, corpus: Path) -> None:
    # the markers really are in the copied tree, so finding none of them means they were skipped
    assert "zanzibar-quokka" in (corpus / "drafts" / "secret.md").read_text("utf-8")
    assert any("hidden-pangolin" in p.read_text("utf-8") for p in (corpus / ".cache").iterdir())
    assert "drafts" in (corpus / ".gitignore").read_text("utf-8")
    report = hs.ingest_folder(corpus)
    rels = [p.relative_to(corpus) for p in corpus.rglob("*")]
    expected = sorted(
        rel.as_posix()
        for rel in rels
        if rel.suffix in {".md", ".txt", ".rst", ".markdown"}
        and not any(part.startswith(".") or part == "drafts" for part in rel.parts)
    )
    assert sorted(hs.components.store.iter_resource_ids()) == expected
    assert report.indexed == len(expected) >= 10 and report.errors == {}
    for marker in ("zanzibar-quokka", "hidden-pangolin", "zanzibar", "pangolin"):
        assert _found(hs, marker) == [], marker
    assert "zh/我的喜好.md" in _found(hs, "喜好")
    rec = hs.components.store.get_resource("guide/agents.md")
    assert rec is not None and rec.title == "Agents"
    assert rec.source_uri == str(corpus / "guide" / "agents.md")
    # positive control: the same marker text is found once it is indexed
    hs.ingest("control", "The marker word is zanzibar-quokka.")
    assert _found(hs, "zanzibar-quokka") == ["control"]


LATIN1 = (
    "Café crème brûlée, naïve façade, déjà vu. Ocelot prices: five euros for a piña colada "
    "in São Paulo. Über die Straße.\n"
)


def test_folder_latin1_file_is_decoded_and_binary_text_is_skipped(
    hs: HybridSearch, corpus: Path
) -> None:
    (corpus / "notes" / "latin1.txt").write_bytes(LATIN1.encode("latin-1"))
    (corpus / "notes" / "short.txt").write_bytes(b"Caf\xe9 menu with ocelot prices\n")
    (corpus / "notes" / "binary.txt").write_bytes(bytes(range(1, 256)) * 40)
    report = hs.ingest_folder(corpus)
    assert list(report.errors) == ["notes/binary.txt"]
    assert "not UTF-8" in report.errors["notes/binary.txt"]
    assert "no text encoding reads it" in report.errors["notes/binary.txt"]
    short = "Café menu with ocelot prices\n"
    for rid, text in (("notes/latin1.txt", LATIN1), ("notes/short.txt", short)):
        rec = hs.components.store.get_resource(rid)
        assert rec is not None and dict(rec.metadata) == {"encoding": "cp1252"}
        assert "".join(c.text for c in hs.components.store.resource_chunks(rid)) == text.strip()
    assert sorted(_found(hs, "ocelot")) == ["notes/latin1.txt", "notes/short.txt"]
    assert _found(hs, "brûlée") == ["notes/latin1.txt"]
    assert "guide/agents.md" in _found(hs, "ReActAgent")


def test_folder_titles_suffixes_and_nested_ignore_rules(hs: HybridSearch, tmp_path: Path) -> None:
    root = tmp_path / "tree"
    (root / "sub").mkdir(parents=True)
    files = {
        "fenced.md": "Intro.\n\n```bash\n# install deps\npip install x\n```\n\n# Real Title\n",
        "empty-h1.md": "#\n\nNot a title line.\n",
        "csharp.md": "# Learn C#\n\nText.\n",
        "closing.md": "# Closed ##\n\nText.\n",
        "UPPER.MD": "# Upper\n\nText.\n",
        "top.txt": "# not a markdown title\n",
        "manual.rst": "Manual\n======\n",
        "short.rst": "Too long a title\n===\n\nThe underline is shorter: no title.\n",
        "notes.markdown": "Plain.\n",
        "image.png": "not text at all",
        ".hidden.md": "# Hidden\n",
        "sub/.gitignore": "*.txt\n",
        "sub/drop.txt": "dropped by sub/.gitignore\n",
        "sub/keep.md": "# Kept\n",
    }
    for rel, text in files.items():
        (root / rel).write_text(text, "utf-8")
    report = hs.ingest_folder(root)
    assert report.errors == {}
    records = hs.components.store.resources(hs.components.store.iter_resource_ids())
    titles = {rid: rec.title for rid, rec in records.items()}
    assert titles == {
        "fenced.md": "Real Title",  # not the shell comment inside the fence
        "empty-h1.md": "empty-h1",  # an empty '#' line is no title
        "csharp.md": "Learn C#",  # '#' without a space before it is part of the title
        "closing.md": "Closed",
        "UPPER.MD": "Upper",
        "top.txt": "top",  # text files take the stem
        "manual.rst": "Manual",  # a reST section title
        "short.rst": "short",
        "notes.markdown": "notes",
        "sub/keep.md": "Kept",
    }


def test_folder_reindex_of_unchanged_files_is_skipped(hs: HybridSearch, corpus: Path) -> None:
    first = hs.ingest_folder(corpus)
    second = hs.ingest_folder(corpus)
    assert (second.indexed, second.unchanged) == (0, first.indexed)


def test_missing_folder_is_an_ingest_error(hs: HybridSearch, tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="no-such-dir"):
        hs.ingest_folder(tmp_path / "no-such-dir")


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("resource_id", "text", "kwargs", "named"),
    [
        ("", "text", {}, "resource_id"),
        ("   ", "text", {}, "resource_id"),
        (" padded", "text", {}, "' padded'"),
        ("bad\x01id", "text", {}, "'\\x01'"),
        ("tab\tid", "text", {}, "'\\t'"),
        ("doc", "text", {"title": "bell\x07title"}, "bell\\x07title"),
        ("doc", "before\x00after", {}, "NUL"),
        ("doc", "text", {"metadata": {"when": object()}}, "metadata of 'doc'"),
        ("doc", "text", {"metadata": {"x": float("nan")}}, "metadata of 'doc'"),
        ("doc", "text", {"tenant": "esc\x1bape"}, "tenant"),
        ("doc", "text", {"acl": ["ok", ""]}, "acl"),
        ("doc", "text", {"fmt": "html"}, "'html'"),
        ("doc", b"bytes", {}, "bytes"),
    ],
)
def test_invalid_input_raises_ingest_error_and_stores_nothing(
    hs: HybridSearch, resource_id: str, text: Any, kwargs: dict[str, Any], named: str
) -> None:
    with pytest.raises(IngestError) as info:
        hs.ingest(resource_id, text, **kwargs)
    assert named in str(info.value)
    assert hs.components.store.counts()["resources"] == 0
    assert _count(hs, "chunks") == _count(hs, "chunks_fts") == _count(hs, "titles_fts") == 0


def test_non_mapping_metadata_is_an_ingest_error(hs: HybridSearch) -> None:
    with pytest.raises(IngestError, match="metadata"):
        hs.ingest("doc", "text", metadata="lang=en")  # type: ignore[arg-type]


def test_non_string_metadata_keys_are_refused(hs: HybridSearch) -> None:
    # JSON would turn {1: "a"} into {"1": "a"}: refuse at the edge rather than store a key that
    # no longer equals what the caller gave (and would defeat the unchanged check)
    with pytest.raises(IngestError, match="keys"):
        hs.ingest("doc", "text", metadata={1: "a"})  # type: ignore[dict-item]
    assert hs.components.store.counts()["resources"] == 0


# --------------------------------------------------------------------------- delete, disable


def test_delete_removes_everything(hs: HybridSearch) -> None:
    hs.ingest("gone", "# Gone\n\nThe okapi lives here.\n\n## More\n\nOkapi facts.", title="Okapi")
    hs.ingest("kept", "A giraffe is a relative of the okapi.", title="Giraffe")
    assert set(_found(hs, "okapi")) == {"gone", "kept"}
    assert _found(hs, "Okapi", paths=["title"]) == ["gone"]
    assert hs.delete("gone") is True
    assert hs.components.store.get_resource("gone") is None
    assert hs.components.store.resource_chunks("gone") == []
    assert _count(hs, "chunks WHERE resource_id = 'gone'") == 0
    assert _count(hs, "chunks_fts") == _count(hs, "chunks") == 1
    assert _count(hs, "titles_fts") == 1
    assert _count(hs, "tombstones WHERE resource_id = 'gone'") == 1
    assert _found(hs, "okapi") == ["kept"]
    assert _found(hs, "Okapi", paths=["title"]) == []
    assert _found(hs, "okapi", filters={"statuses": ["ready", "disabled"]}) == ["kept"]
    assert hs.delete("gone") is False
    _assert_consistent(hs)
    # a later ingest under the same id starts above the tombstone's version
    hs.ingest("gone", "Back again, okapi.", title="Okapi")
    rec = hs.components.store.get_resource("gone")
    assert rec is not None and rec.version == 2 and rec.status == "ready"
    assert _count(hs, "tombstones") == 0


def test_disable_and_enable(hs: HybridSearch) -> None:
    hs.ingest("doc", "The axolotl regrows limbs.", title="Axolotl")
    assert hs.disable("doc") is True
    rec = hs.components.store.get_resource("doc")
    assert rec is not None and rec.status == "disabled"
    assert _found(hs, "axolotl") == []
    assert _found(hs, "axolotl", filters={"statuses": ["ready", "disabled"]}) == ["doc"]
    # re-ingesting a disabled resource keeps it disabled
    hs.ingest("doc", "The axolotl regrows limbs and gills.", title="Axolotl")
    assert _found(hs, "gills") == []
    assert hs.enable("doc") is True
    assert _found(hs, "gills") == ["doc"]
    assert hs.disable("missing") is False and hs.enable("missing") is False
