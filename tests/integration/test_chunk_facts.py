"""What fusion reads of a chunk's text is computed once, when it is written, and read with its
row (issue 39 item 1): a real index written before the facts were stored
(tests/data/index_0007, by the build of d65fb5f) gets them when it opens, and a search over it
returns what a search over a fresh index of the same documents returns."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from hybridsag.fusion import chunk_facts, normalize_title
from hybridsag.records.filters import Filters
from hybridsag.records.schema import BACKFILL_META
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings

OLD_INDEX = Path(__file__).resolve().parents[1] / "data" / "index_0007"
STORE_FILE = "hybridsag.sqlite3"
QUERIES = ("strict peer deps", "legacy-peer-deps", "ReActAgent", "安装 npm", "last words")


def _settings(data: Path) -> Settings:
    return Settings(data_dir=data, embedding={"model": "none"})


def _old_copy(tmp_path: Path) -> Path:
    data = tmp_path / "old"
    data.mkdir()
    shutil.copy(OLD_INDEX / STORE_FILE, data / STORE_FILE)
    return data


def _columns(store_file: Path) -> set[str]:
    with sqlite3.connect(store_file) as conn:
        return {row[1] for row in conn.execute("PRAGMA table_info(chunks)")}


def _shown(hs: HybridSearch, query: str) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    resp = hs.search(query, top_k=5, paths=["bm25", "title"])
    return [(r.chunk_id, r.rules, tuple(a["chunk_id"] for a in r.also_in)) for r in resp.results]


def test_an_index_written_before_the_facts_gets_them_when_it_opens(tmp_path: Path) -> None:
    data = _old_copy(tmp_path)
    assert "shingles" not in _columns(data / STORE_FILE)  # the old build's schema
    with HybridSearch(_settings(data)) as hs:
        store = hs.components.store
        assert store.get_meta("schema_version") == "0008_chunk_facts"
        assert store.get_meta(BACKFILL_META) is None
        ids = [r[0] for r in store.connection().execute("SELECT chunk_id FROM chunks")]
        assert len(ids) == 8
        views = store.chunk_views(ids, Filters())
        for view in views.values():
            assert view.facts == chunk_facts(view.text)
            assert view.title_norm == normalize_title(view.title)
        by_id = {cid: v.facts for cid, v in views.items()}
        assert by_id["install-zh.md@1#0"].script == "CJK"
        assert by_id["npm-ci.md@1#1"].shingles == by_id["npm-dedupe.md@1#1"].shingles
        old = {q: _shown(hs, q) for q in QUERIES}
    assert "shingles" in _columns(data / STORE_FILE)
    # the same documents indexed by this build: the same results, copies folded alike
    with HybridSearch(_settings(tmp_path / "new")) as fresh:
        assert fresh.ingest_jsonl(OLD_INDEX / "corpus.jsonl").indexed == 6
        assert {q: _shown(fresh, q) for q in QUERIES} == old
    copies = next(r for r in old["strict peer deps"] if r[2])
    assert {copies[0], *copies[2]} == {"npm-ci.md@1#1", "npm-dedupe.md@1#1"}


def test_a_reopened_index_reads_its_facts_without_filling_anything_in(tmp_path: Path) -> None:
    data = _old_copy(tmp_path)
    with HybridSearch(_settings(data)):
        pass
    with HybridSearch(_settings(data)) as hs:
        assert hs.components.store.backfill_chunk_facts() == 0
        with sqlite3.connect(data / STORE_FILE) as conn:
            missing = conn.execute("SELECT count(*) FROM chunks WHERE shingles IS NULL")
            assert missing.fetchone()[0] == 0
