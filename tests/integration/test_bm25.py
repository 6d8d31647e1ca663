"""The BM25 lexical path: quoted-OR terms, column weights, top K, title aliases, results, stale."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hybridsag.documents import make_document
from hybridsag.lexical.queries import build_match, quote_term
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from hybridsag.records.filters import Filters
from hybridsag.records.keys import split_key

FILLER = {
    "Rivers": "Rivers carry water from mountains to the sea.",
    "Libraries": "A library lends books to readers.",
    "Bread": "Bread is baked from flour and water.",
    "Trains": "Trains run on rails between cities.",
    "Moon": "The moon orbits the earth once a month.",
    "Bees": "Bees collect nectar from flowers.",
}


def _ids(hs: HybridSearch, query: str, **kwargs: Any) -> list[str]:
    """Resource ids of a bm25-only search (fusion rules included)."""
    kwargs.setdefault("paths", ["bm25"])
    return [r.resource_id for r in hs.search(query, top_k=20, **kwargs).results]


def _path_ids(hs: HybridSearch, query: str) -> list[str]:
    """The bm25 path's own ranking (no fusion rules), as resource ids."""
    hits = hs.run_path("bm25", query, limit=20, filters=Filters()).hits
    return [h.detail["resource_id"] for h in hits]


def _fill(hs: HybridSearch) -> None:
    """Documents without the test's words, so that its terms have a positive idf."""
    for title, text in FILLER.items():
        hs.ingest(f"filler-{title.lower()}", text, title=title)


# --------------------------------------------------------------------------- query terms


def test_query_terms_are_quoted_and_joined_with_or(hs: HybridSearch) -> None:
    terms = hs.components.lexical.query_terms('ReActAgent "AND" title:foo NEAR(a b) -x*')
    assert terms == [
        "reactagent", "title", "foo", "near", "b", "x", "re", "act", "agent", "react", "actagent",
    ]  # fmt: skip
    assert build_match(terms) == " OR ".join(f'"{t}"' for t in terms)
    assert build_match(["e-1234", "v2.3.1"]) == '"e-1234" OR "v2.3.1"'
    assert build_match(['say "hi"']) == '"say ""hi"""'
    assert quote_term('a"b') == '"a""b"'
    assert build_match(["a", "b"], must="c") == '"c" AND ("a" OR "b")'
    assert build_match([], must="c") == '"c"'
    assert build_match([]) == ""


def test_at_most_80_terms(hs: HybridSearch) -> None:
    query = " ".join(f"term{i}" for i in range(200))
    terms = hs.components.lexical.query_terms(query)
    assert terms == [f"term{i}" for i in range(80)]
    match = build_match(terms)
    assert match.count(" OR ") == 79
    assert re.fullmatch(r'"[^"]+"( OR "[^"]+")*', match)


def test_max_terms_is_a_setting(tmp_path: Path) -> None:
    s = Settings(data_dir=tmp_path / "d", embedding={"model": "none"}, query={"max_terms": 5})
    with HybridSearch(s) as hs:
        assert hs.components.lexical.query_terms(" ".join(f"w{i}" for i in range(50))) == [
            f"w{i}" for i in range(5)
        ]


def test_stop_words_are_not_searched(hs: HybridSearch) -> None:
    hs.ingest("doc", "The history of the walrus.", title="Walrus")
    _fill(hs)
    assert hs.components.lexical.query_terms("the history of the walrus") == ["history", "walrus"]
    assert hs.components.lexical.query_terms("the of and 的 了") == []
    resp = hs.search("the of and", paths=["bm25"])
    assert resp.results == () and not resp.degraded
    assert _ids(hs, "the walrus") == ["doc"]


# --------------------------------------------------------------------------- ranking


def test_title_beats_body(tmp_path: Path) -> None:
    def ranking(title_weight: float) -> list[str]:
        s = Settings(
            data_dir=tmp_path / f"w{title_weight}",
            embedding={"model": "none"},
            lexical={"title_weight": title_weight},
        )
        with HybridSearch(s) as hs:
            _fill(hs)
            hs.ingest("in-title", "An animal of South America near rivers.", title="Capybara")
            hs.ingest("in-body", "The capybara is an animal of South America.", title="Rodents")
            return _path_ids(hs, "capybara")

    assert ranking(2.0) == ["in-title", "in-body"]  # the default weights 2/2/1
    assert ranking(0.0) == ["in-body", "in-title"]  # the title weight made the difference


def test_heading_beats_body(tmp_path: Path) -> None:
    def ranking(heading_weight: float) -> list[str]:
        s = Settings(
            data_dir=tmp_path / f"h{heading_weight}",
            embedding={"model": "none"},
            lexical={"heading_weight": heading_weight},
        )
        with HybridSearch(s) as hs:
            _fill(hs)
            hs.ingest("in-heading", "# Tapir\n\nAn animal that lives in forests near rivers.")
            hs.ingest("in-body", "# Mammals\n\nThe tapir is an animal that lives in forests.")
            return _path_ids(hs, "tapir")

    assert ranking(2.0) == ["in-heading", "in-body"]
    assert ranking(0.0) == ["in-body", "in-heading"]


def test_identifiers_are_found_whole_and_by_parts(hs: HybridSearch) -> None:
    hs.ingest("agent", "Build a ReActAgent with care.", title="Agents")
    hs.ingest("naming", "Call snake_case_name for this.", title="Naming")
    hs.ingest("errors", "Error E-1234 means a timeout in v2.3.1.", title="Errors")
    _fill(hs)
    assert _ids(hs, "ReActAgent") == ["agent"]
    assert _ids(hs, "agent") == ["agent"]
    assert _ids(hs, "snake_case_name") == ["naming"]
    assert _ids(hs, "snake") == ["naming"]
    assert _ids(hs, "E-1234") == ["errors"]
    assert _ids(hs, "1234") == ["errors"]
    assert _ids(hs, "v2.3.1") == ["errors"]


def test_top_k_and_hit_shape(hs: HybridSearch) -> None:
    for i in range(12):
        hs.ingest(f"doc{i:02d}", f"Ocelot note {i}. " + "ocelot " * (i + 1), title=f"Note {i}")
    _fill(hs)
    resp = hs.search("ocelot", top_k=3, paths=["bm25"])
    assert [r.rank for r in resp.results] == [1, 2, 3]
    assert resp.paths == ("bm25",)
    result = hs.run_path("bm25", "ocelot", limit=5, filters=Filters())
    hits = list(result.hits)
    assert len(hits) == 5
    assert [h.rank for h in hits] == [1, 2, 3, 4, 5]
    assert all(h.path == "bm25" and h.score == -h.raw_score for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert hits[0].detail["resource_id"] == "doc11"  # most occurrences in a same-size doc
    assert len(hs.run_path("bm25", "ocelot", limit=50, filters=Filters()).hits) == 12


# --------------------------------------------------------------------------- title aliases


def test_title_alias_fix(hs: HybridSearch) -> None:
    hs.ingest("bridge", "A long link between Denmark and Sweden.", title="Øresund Bridge")
    hs.ingest("jose", "Biography of a footballer.", title="José")
    hs.ingest("aether", "An old idea of the upper sky.", title="Æther")
    _fill(hs)
    assert hs.components.lexical.query_terms("Oresund") == ["øresund"]
    assert _path_ids(hs, "Oresund") == ["bridge"]
    assert _ids(hs, "Oresund") == ["bridge"]
    assert _ids(hs, "Oresund bridge")[0] == "bridge"
    assert _path_ids(hs, "Jose") == ["jose"]
    assert _ids(hs, "Jose") == ["jose"]
    assert _ids(hs, "aether") == ["aether"]
    assert _ids(hs, "Øresund") == ["bridge"]
    # a term that has hits is left alone
    assert hs.components.lexical.query_terms("denmark") == ["denmark"]


# --------------------------------------------------------------------------- spelling fix


def test_a_typo_no_chunk_holds_is_searched_as_the_nearest_index_term(
    hs: HybridSearch, tmp_path: Path
) -> None:
    """"instalation on windos" finds the page that says "installation on windows"; a real
    word the index lacks ("helm") stays as typed; with ``lexical.spelling`` off nothing is
    respelled; the query facts the confidence reads count the respelled terms as held."""
    from hybridsag.paths.query_facts import query_facts

    hs.ingest("install", "Installation on Windows: run the installer.", title="Setup guide")
    hs.ingest("window", "A window of the app shows the log.", title="Log window")
    _fill(hs)
    lexical = hs.components.lexical
    assert lexical.query_terms("instalation on windos") == ["installation", "windows"]
    assert _path_ids(hs, "instalation on windos")[0] == "install"
    assert lexical.query_terms("helm installation") == ["helm", "installation"]
    # a piece of a compound word is code, not a typo: "windos" in GetWindos stays as it is
    assert "windos" in lexical.query_terms("GetWindos installation")
    facts = query_facts(hs.components, "instalation on windos", dense=False)
    assert facts.terms_in_index == 1.0
    off = Settings(data_dir=hs.settings.data_dir, embedding={"model": "none"},
                   lexical={"spelling": False})
    hs.close()
    with HybridSearch(off) as plain:
        assert plain.components.lexical.query_terms("instalation on windos") == [
            "instalation", "windos"]
        assert _path_ids(plain, "instalation on windos") == []
        assert query_facts(plain.components, "instalation on windos", dense=False
                           ).terms_in_index == 0.0


# --------------------------------------------------------------------------- results


DOC = """# Orrery Manual

Orrery moves planets.

## Install

Run the installer. It copies the gnomon binary.
Then restart.

## Usage

```bash
orrery --spin gnomon
```

Done.
"""


def test_results_carry_their_provenance(hs: HybridSearch, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    source = folder / "manual.md"
    source.write_text("Préface ünïcode line.\n\n" + DOC, "utf-8")
    hs.ingest_folder(folder)
    resp = hs.search("gnomon", top_k=5, paths=["bm25"])
    assert resp.results
    data = source.read_bytes()
    lines = data.decode("utf-8").splitlines(keepends=True)
    headings = set()
    for r in resp.results:
        assert r.resource_id == "manual.md"
        assert r.title == "Orrery Manual"
        assert r.source_uri == str(source)
        assert "gnomon" in r.text
        assert data[r.byte_start : r.byte_end].decode("utf-8") == r.text
        assert 1 <= r.start_line <= r.end_line <= len(lines)
        spanned = "".join(lines[r.start_line - 1 : r.end_line])
        assert r.text in spanned and spanned.strip().startswith(r.text.splitlines()[0])
        assert r.content_sha256 == hashlib.sha256(r.text.encode("utf-8")).hexdigest()
        assert r.paths["bm25"]["rank"] >= 1 and r.stale is False
        headings.add(r.heading_path)
        as_dict = r.as_dict()
        for key in ("text", "resource_id", "title", "heading_path", "start_line", "end_line",
                    "byte_start", "byte_end", "content_sha256"):  # fmt: skip
            assert key in as_dict
    assert headings <= {"Orrery Manual > Install", "Orrery Manual > Usage"}
    assert "Orrery Manual > Install" in headings


# --------------------------------------------------------------------------- stale


@pytest.fixture
def folder_index(hs: HybridSearch, tmp_path: Path) -> tuple[HybridSearch, Path]:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text("# Alpha\n\nThe quetzal flies high.\n", "utf-8")
    (folder / "b.md").write_text("# Beta\n\nAnother quetzal note.\n", "utf-8")
    report = hs.ingest_folder(folder)
    assert report.indexed == 2
    return hs, folder


def test_changed_file_is_stale_and_shown_marked_by_default(
    folder_index: tuple[HybridSearch, Path],
) -> None:
    hs, folder = folder_index
    assert sorted(_ids(hs, "quetzal")) == ["a.md", "b.md"]
    (folder / "a.md").write_text("# Alpha\n\nThe quetzal flies higher now.\n", "utf-8")
    assert _ids(hs, "quetzal", include_stale=False) == ["b.md"]
    resp = hs.search("quetzal", paths=["bm25"])
    flags = {r.resource_id: (r.stale, r.stale_reason) for r in resp.results}
    assert flags == {"a.md": (True, "changed on disk"), "b.md": (False, None)}
    stale = next(r for r in resp.results if r.resource_id == "a.md")
    assert any("stale" in why for why in stale.why)
    assert stale.text == "The quetzal flies high."  # what was indexed, flagged as such


def test_touched_file_is_stale_until_reindexed_which_only_refreshes_its_stat(
    folder_index: tuple[HybridSearch, Path],
) -> None:
    # the stale check reads nothing but stat: a new mtime is a change until the folder is
    # indexed again, which sees the same bytes and only records the new stat
    hs, folder = folder_index
    path = folder / "a.md"
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert _ids(hs, "quetzal", include_stale=False) == ["b.md"]
    again = hs.ingest_folder(folder)
    assert (again.indexed, again.unchanged) == (0, 2)
    record = hs.components.store.get_resource("a.md")
    assert record is not None and record.version == 1
    assert record.source_mtime_ns == st.st_mtime_ns + 5_000_000_000
    assert sorted(_ids(hs, "quetzal", include_stale=False)) == ["a.md", "b.md"]


def test_vanished_file_is_stale(folder_index: tuple[HybridSearch, Path]) -> None:
    hs, folder = folder_index
    (folder / "b.md").unlink()
    assert _ids(hs, "quetzal", include_stale=False) == ["a.md"]
    resp = hs.search("quetzal", paths=["bm25"])
    assert sorted((r.resource_id, r.stale, r.stale_reason) for r in resp.results) == [
        ("a.md", False, None),
        ("b.md", True, "deleted on disk"),
    ]


def test_include_stale_setting(folder_index: tuple[HybridSearch, Path]) -> None:
    hs, folder = folder_index
    (folder / "a.md").write_text("changed\n", "utf-8")
    s = hs.settings.model_copy(
        update={"search": hs.settings.search.model_copy(update={"include_stale": False})}
    )
    with HybridSearch(s) as again:  # a second reader of the same data dir
        resp = again.search("quetzal", paths=["bm25"])
        assert [r.resource_id for r in resp.results] == ["b.md"]
        assert resp.stale_hidden == 1


def test_stale_results_held_back_past_the_fused_window_are_replaced(
    hs: HybridSearch, tmp_path: Path
) -> None:
    """A search fuses only its first ``top_k`` hits; when stale files hold all of them back it
    fuses the rest and still returns ``top_k`` fresh results, in the fused order."""
    folder = tmp_path / "birds"
    folder.mkdir()
    for i in range(6):  # n0.md says quetzal most often: BM25 ranks n0 .. n5
        words = ["quetzal"] * (6 - i) + ["feather"] * i
        (folder / f"n{i}.md").write_text(f"# Note {i}\n\n{' '.join(words)}.\n", "utf-8")
    assert hs.ingest_folder(folder).indexed == 6
    assert _ids(hs, "quetzal") == [f"n{i}.md" for i in range(6)]
    for i in range(3):
        (folder / f"n{i}.md").write_text("# Note\n\nrewritten since.\n", "utf-8")
    resp = hs.search("quetzal", paths=["bm25"], top_k=2, include_stale=False)
    assert [r.resource_id for r in resp.results] == ["n3.md", "n4.md"]
    assert [r.rank for r in resp.results] == [1, 2]
    assert resp.stale_hidden == 3


def test_a_ranking_that_ended_early_is_not_asked_again(tmp_path: Path) -> None:
    """A search whose FTS5 ranking held fewer rows than it asked for is answered by that one
    statement: no deeper ranking can find more (counted on the real connection with SQLite's
    trace callback). A filter that hides part of a full ranking still refills it."""
    with HybridSearch(Settings(data_dir=tmp_path / "d", embedding={"model": "none"})) as hs:
        hs.ingest_documents(
            [make_document(f"filler-{i}", f"river stone lantern number {i}", title=f"F {i}")
             for i in range(150)]
            + [make_document(f"rare-{i}", f"the river quillon {i}", title=f"R {i}",
                             tenant="t1" if i else "")
               for i in range(3)],
            mode="passage",
        )
        lexical = hs.components.lexical
        conn = hs.components.store.connection()
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        try:
            few = lexical.search(["river", "quillon"], limit=10, filters=Filters(), must="quillon")
            hidden = lexical.search(["river", "stone"], limit=10, filters=Filters(tenant="t1"))
        finally:
            conn.set_trace_callback(None)
        matches = [s for s in seen if "chunks_fts MATCH" in s and not s.startswith("--")]
        assert sorted(split_key(h.detail["resource_id"])[1] for h in few) == [
            "rare-0", "rare-1", "rare-2"]
        # the must search ended at 3 rows of its 30: one statement; the tenant's search found
        # none of its 2 rows in a 30-row ranking of 153 (the 150 others are not the tenant's):
        # asked again, 120 rows, then 480 (past the index)
        assert sorted(split_key(h.detail["resource_id"])[1] for h in hidden) == [
            "rare-1", "rare-2"]
        assert len(matches) == 1 + 3
