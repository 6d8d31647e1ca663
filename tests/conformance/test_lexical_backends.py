"""The lexical backends' conformance suite: FTS5 (the store's), Milvus full-text search
(``lexical.backend = "milvus"``, on Milvus Lite under the data dir) and tantivy
(``lexical.backend = "tantivy"``, indexes under the data dir) answer the same questions the same
way where the protocol promises it, and the engines outside the store keep deletes deleted when
their rows and the store disagree.

The filter, delete, re-ingest and disable cases run on every backend in
``test_store_backends.py`` (``index_backends``), the reconciler's in
``tests/integration/test_consistency.py``. Real parts only: SQLite files, Milvus Lite, and the
pip ``milvus`` 2.3.5 server for the version check.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from hybridsag.consistency import apply_plan, build_plan
from hybridsag.errors import ConfigError, LexicalError
from hybridsag.documents import make_document
from hybridsag.lexical.contract import LexicalIndex, LexicalQuery
from hybridsag.lexical.milvus_fulltext import (
    MilvusLexicalIndex,
    check_server_version,
    compose_text,
    lexical_collections,
)
from hybridsag.lexical.tantivy_index import TantivyLexicalIndex, chunk_hash, compose_tokens
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from hybridsag.records.filters import Filters
from hybridsag.records.keys import resource_key, split_key

from tests.conformance.test_store_backends import WORDS, _corpus, _settings, indexed_twice
from tests.milvusserver import milvus_server  # noqa: F401 - fixture

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(params=["milvus", "tantivy"])
def pair(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[HybridSearch, HybridSearch]]:
    """The same 60 documents indexed on FTS5 and on an engine outside the store (Milvus
    full-text search, then tantivy)."""
    docs = _corpus()
    assert len(docs) == 60
    other = request.param
    with indexed_twice(
        _settings(tmp_path / "fts5", None), _settings(tmp_path / other, None, other), docs
    ) as pair:
        yield pair


#: The complete lexical contract, pinned: reads, writes, the reconciler's audit, describe, close.
LEXICAL_CONTRACT = {
    "reads": {"tokenizer", "query_terms", "search", "search_many", "search_titles",
              "best_chunks", "doc_freqs", "total_chunks", "scoped_doc_freqs"},
    "writes": {"chunk_tokens", "title_tokens", "add_chunks", "remove_chunks",
               "remove_resource_chunks", "add_titles", "remove_titles", "remove_resource_title",
               "status_changed", "flush"},
    "audit": {"indexed_rowids", "has_chunk", "has_title", "remove_orphan_chunk",
              "remove_orphan_title"},
    "describe and close": {"describe", "close"},
}


def _contract_members(protocol: type) -> set[str]:
    """The public members a Protocol class declares (its methods and its annotated fields)."""
    names = {n for n in vars(protocol) if not n.startswith("_")}
    return names | set(getattr(protocol, "__annotations__", {}))


def test_the_lexical_contract_is_complete_and_pinned() -> None:
    assert _contract_members(LexicalIndex) == set().union(*LEXICAL_CONTRACT.values())


def test_every_lexical_backend_implements_the_whole_contract(
    tmp_path: Path, index_backends: tuple[str | None, str]
) -> None:
    """FTS5, PostgreSQL's rows and Milvus full-text search each answer every member of the
    contract: the write path and the reconciler need no backend's own names, nothing is
    probed for."""
    with HybridSearch(_settings(tmp_path / "d", *index_backends)) as hs:
        hs.ingest("keeper", "the lighthouse keeper logs every ship", title="Lighthouse")
        lexical = hs.components.lexical
        assert isinstance(lexical, LexicalIndex)
        # a contract, not a base class: no backend inherits another's behaviour
        assert type(lexical).__mro__ == (type(lexical), object)
        for name in set().union(*LEXICAL_CONTRACT.values()) - {"tokenizer"}:
            assert callable(getattr(lexical, name)), name
        conn = hs.components.store.connection()
        chunk_ids, title_ids = lexical.indexed_rowids(conn)
        assert len(chunk_ids) == len(title_ids) == 1
        assert lexical.has_chunk(conn, next(iter(chunk_ids)))
        assert lexical.has_title(conn, next(iter(title_ids)))
        assert lexical.remove_orphan_chunk(conn, next(iter(chunk_ids))) == 0  # not an orphan
        lexical.flush()
        line = lexical.describe()
        if index_backends[1] == "milvus":
            assert line.startswith("Milvus full-text search at Milvus Lite") and "(1 rows)" in line
        elif index_backends[1] == "tantivy":
            assert line == f"tantivy at {tmp_path / 'd' / 'tantivy'}: 1 chunks, 1 titles"
        else:
            kind = "FTS5" if index_backends[0] is None else "PostgreSQL tsvector rows"
            assert line == f"{kind} in the store, 1 chunks"
        lexical.close()
        lexical.close()  # twice is safe


def _resources(hits: list) -> set[str]:
    return {h.detail["resource_id"] for h in hits}


def test_both_backends_count_and_match_the_same_terms(pair) -> None:
    fts5, milvus = (s.components.lexical for s in pair)
    assert isinstance(milvus, MilvusLexicalIndex | TantivyLexicalIndex)
    assert fts5.total_chunks() == milvus.total_chunks()
    rng = random.Random(5)
    queries = [" ".join(rng.sample(WORDS, rng.randint(1, 4))) for _ in range(25)]
    queries += ["Zürich café", "北京 读书", "naïve"]
    red = Filters(tenant="red")
    overlap = []
    for query in queries:
        terms = fts5.query_terms(query)
        assert terms == milvus.query_terms(query)
        assert fts5.doc_freqs(terms) == milvus.doc_freqs(terms)
        assert fts5.scoped_doc_freqs(terms, red) == milvus.scoped_doc_freqs(terms, red)
        for term in terms:  # one term: both find every chunk that holds it
            a = fts5.search([term], limit=200, filters=Filters())
            b = milvus.search([term], limit=200, filters=Filters())
            assert _resources(a) == _resources(b), term
            assert {r for r, _ in fts5.search_titles([term], limit=100, filters=Filters())} == {
                r for r, _ in milvus.search_titles([term], limit=100, filters=Filters())
            }, term
        a = [h.chunk_id for h in fts5.search(terms, limit=5, filters=Filters())]
        b = [h.chunk_id for h in milvus.search(terms, limit=5, filters=Filters())]
        overlap.append(len(set(a) & set(b)) / max(1, len(a)))
    # the rankings are BM25 on both, over other analyzers: most of each top 5 is shared
    assert sum(overlap) / len(overlap) >= 0.6, overlap


def test_must_terms_best_chunks_and_ranks_follow_the_protocol(pair) -> None:
    _, hs = pair
    lexical = hs.components.lexical
    terms = lexical.query_terms("apple river lantern")
    hits = lexical.search(terms, limit=10, filters=Filters(), must="lantern")
    assert hits and [h.rank for h in hits] == list(range(1, len(hits) + 1))
    texts = {c.chunk_id: c.text for c in hs.components.store.chunks(h.chunk_id for h in hits).values()}
    assert all("lantern" in texts[h.chunk_id] for h in hits)
    assert all(h.score >= hits[i + 1].score for i, h in enumerate(hits[:-1]))
    # resources named by their store keys (the corpus's resources belong to red and blue)
    keys = [resource_key(f"doc-{i:03d}", ("red", "blue")[i % 2]) for i in range(0, 60, 5)]
    best = lexical.best_chunks(keys, terms)
    assert best and set(best) <= set(keys)
    for key, chunk_id in best.items():
        tenant, rid = split_key(key)
        assert chunk_id.startswith(f"{rid}@") and chunk_id.endswith(f"@{tenant}")


def _visible_holding(hs: HybridSearch, word: str, filters: Filters) -> set[str]:
    """The chunks a search under ``filters`` may show whose title, heading or text holds
    ``word`` as a token (read from the store, not from the lexical index)."""
    store = hs.components.store
    tokenize = hs.components.tokenizer.tokenize
    ids = [r[0] for r in store.connection().execute("SELECT chunk_id FROM chunks")]
    chunks = store.chunks(ids)
    resources = store.resources(c.key for c in chunks.values())
    return {
        cid for cid, c in chunks.items()
        if (res := resources.get(c.key)) is not None and res.version == c.version
        and filters.allows(res)
        and word in tokenize(f"{c.title} {c.heading_path} {c.text}")
    }


def _tie_groups(hits: list, limit: int) -> list[set[str]]:
    """The chunk ids of a ranking grouped by score (scores within 1e-9 of each other form one
    group), the last group left out when the ranking was cut at ``limit``: PostgreSQL sums a
    row's terms in the order its plan meets them, so two runs may break an exact tie apart in
    the last bit, and then order those rows (or cut among them) the other way."""
    groups: list[set[str]] = []
    last = None
    for h in hits:
        if last is None or abs(h.score - last) > 1e-9 * max(abs(last), 1e-300):
            groups.append(set())
        groups[-1].add(h.chunk_id)
        last = h.score
    return groups[:-1] if len(hits) >= limit else groups


def test_search_many_answers_each_query_as_search_does(
    tmp_path: Path, index_backends: tuple[str | None, str]
) -> None:
    """``search_many`` gives every query what ``search`` gives it (ids, ranks, scores); a query
    that must hold a term finds every visible chunk holding it, under filters that hide part of
    the ranking, and a short limit is the head of a long one."""
    docs = _corpus(120, seed=3) + [
        make_document(
            f"rare-{i}", f"a lantern named quillon {i} and the apple river", title=f"Rare {i}",
            tenant=("red", "blue")[i % 2], acl=("team-b",) if i == 2 else (),
        )
        for i in range(5)
    ]
    with HybridSearch(_settings(tmp_path / "d", *index_backends)) as hs:
        assert hs.ingest_documents(docs).indexed == len(docs)
        assert hs.delete("rare-4", tenant="red")  # deleted: never found again
        lexical = hs.components.lexical
        terms = tuple(lexical.query_terms("apple river lantern"))
        queries = [
            LexicalQuery(terms),
            LexicalQuery(terms, must="lantern"),
            LexicalQuery((*terms, "quillon"), must="quillon"),
            LexicalQuery(("nosuchword",)),
            LexicalQuery(()),
            LexicalQuery(terms, must="apple river"),  # a phrase
        ]
        for filters in (Filters(), Filters(tenant="red"), Filters(acl=("team-a",))):
            for limit in (3, 200):
                many = lexical.search_many(queries, limit=limit, filters=filters, path="sag2")
                one = [
                    lexical.search(q.terms, limit=limit, filters=filters, must=q.must,
                                   path="sag2")
                    for q in queries
                ]
                for a, b in zip(many, one, strict=True):
                    assert [(h.rank, h.path) for h in a] == [(h.rank, h.path) for h in b]
                    assert [h.score for h in a] == pytest.approx([h.score for h in b], rel=1e-9)
                    assert _tie_groups(a, limit) == _tie_groups(b, limit)
                assert many[3] == many[4] == []
            full = lexical.search_many(queries, limit=200, filters=filters)
            short = lexical.search_many(queries, limit=3, filters=filters)
            for word, hits in (("lantern", full[1]), ("quillon", full[2])):
                assert {h.chunk_id for h in hits} == _visible_holding(hs, word, filters), word
            assert {h.chunk_id for h in full[2]} <= {
                c for c in _visible_holding(hs, "quillon", Filters()) if not c.startswith("rare-4")
            }
            for long_hits, short_hits in zip(full, short, strict=True):
                assert [h.chunk_id for h in short_hits] == [h.chunk_id for h in long_hits][:3]


def test_the_query_script_picks_the_analyzer(tmp_path: Path) -> None:
    with HybridSearch(_settings(tmp_path / "d", None, "milvus")) as hs:
        hs.ingest("pku", "北京大学是中国的一所综合性大学。", title="北京大学")
        hs.ingest("harbor", "Copper Harbor is a small town on Lake Superior.", title="Copper Harbor")
        assert [r.resource_id for r in hs.search("北京", paths=["bm25"]).results] == ["pku"]
        assert [r.resource_id for r in hs.search("harbour town copper", paths=["bm25"]).results] == [
            "harbor"
        ]
        assert hs.search("北京大学", paths=["title"]).results[0].resource_id == "pku"
        assert hs.search("Copper Harbor", paths=["sag2"]).results[0].resource_id == "harbor"


def test_a_stale_row_under_a_live_id_is_never_shown_and_is_repaired(tmp_path: Path) -> None:
    """A write that reached Milvus and then rolled back in the store can leave, under a chunk
    id the store reuses, the text of a chunk that never committed: it is not shown, and the
    reconciler re-indexes the live chunk."""
    with HybridSearch(_settings(tmp_path / "d", None, "milvus")) as hs:
        hs.ingest("live", "the lighthouse keeper logs every ship", title="Lighthouse")
        lexical = hs.components.lexical
        rowid = hs.components.store.connection().execute("SELECT id FROM chunks").fetchone()[0]
        chunks_coll, _ = lexical_collections(hs.components.index_id)
        lexical.client().upsert(
            chunks_coll,
            [{"id": rowid, "chunk_id": "live@9#0", "resource_id": "live", "tenant": "",
              "acl": [], "status": "ready", "text": "sneakyword", "text_cjk": ""}],
        )
        assert not hs.search("sneakyword", paths=["bm25", "sag2"]).results
        assert not hs.search("lighthouse keeper", paths=["bm25"]).results  # its row is gone
        plan = build_plan(hs.components.store, lexical, None, hs.settings)
        assert plan.counts()["missing_fts_rows"] == 1
        report = apply_plan(plan, hs.components.store, None, hs.components.writer(), hs.settings)
        assert report.ok and report.totals == {"repaired_fts_rows": 1}
        assert hs.search("lighthouse keeper", paths=["bm25"]).results[0].resource_id == "live"
        assert build_plan(hs.components.store, lexical, None, hs.settings).is_empty


def test_a_failed_milvus_write_rolls_back_and_loses_nothing(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with HybridSearch(_settings(data, None, "milvus")) as hs:
        hs.ingest("keep", "the first version of this text", title="Keep")
    lite = Settings(data_dir=data, embedding={"model": "none"}, lexical={"backend": "milvus"})
    gone = lite.model_copy(
        update={"milvus": lite.milvus.model_copy(update={"uri": "http://127.0.0.1:9", "timeout_s": 2.0})}
    )
    with HybridSearch(gone) as hs:
        with pytest.raises(LexicalError, match="Milvus lexical index"):
            hs.ingest("keep", "a second version that never lands", title="Keep")
        record = hs.components.store.get_resource("keep")
        assert record.version == 1 and record.status == "ready" and record.pending_version is None
    with HybridSearch(lite) as hs:
        assert hs.search("first version", paths=["bm25"]).results[0].resource_id == "keep"
        assert not hs.search("never lands", paths=["bm25"]).results
        assert build_plan(hs.components.store, hs.components.lexical, None, hs.settings).is_empty


def test_milvus_versions_without_full_text_search_are_refused() -> None:
    for old in ("v2.3.5", "2.4.17"):
        with pytest.raises(ConfigError, match=r"needs Milvus 2\.5 or newer.*runs " + old):
            check_server_version(old, "Milvus at http://x:19530")
    for fine in ("v2.5.0", "2.6.1", "v3.0.0-beta", "unknown"):
        check_server_version(fine, "Milvus at http://x:19530")


@pytest.mark.milvus_server
def test_doctor_and_the_index_refuse_a_milvus_2_3_server(
    tmp_path: Path, milvus_server: str  # noqa: F811 - the fixture
) -> None:
    settings = Settings(
        data_dir=tmp_path / "d",
        embedding={"model": "none"},
        lexical={"backend": "milvus"},
        milvus={"uri": milvus_server},
    )
    with HybridSearch(settings) as hs:
        with pytest.raises(ConfigError, match=r"needs Milvus 2\.5 or newer.* runs v?2\.3"):
            hs.ingest("x", "some text", title="X")
        assert hs.components.store.get_resource("x") is None


def test_compose_text_weights_parts_and_cuts_to_the_varchar_limit() -> None:
    assert compose_text([("T", 2.0), ("", 2.0), ("body", 1.0)]) == "T\nT\nbody"
    assert compose_text([("T", 0.0), ("body", 1.4)]) == "body"
    long = compose_text([("北" * 30_000, 1.0)])
    assert len(long.encode("utf-8")) <= 65_535 and set(long) == {"北"}


def test_status_is_in_the_milvus_filter_and_a_lost_status_write_is_repaired(tmp_path: Path) -> None:
    with HybridSearch(_settings(tmp_path / "d", None, "milvus")) as hs:
        hs.ingest("a", "the copper lantern glows", title="Lantern")
        hs.ingest("b", "a copper kettle boils", title="Kettle")
        lexical = hs.components.lexical
        chunks_coll, titles_coll = lexical_collections(hs.components.index_id)
        client = lexical.client()

        def statuses(collection: str) -> dict[str, str]:
            rows = client.query(collection, filter="id >= 0", output_fields=["resource_id", "status"])
            return {r["resource_id"]: r["status"] for r in rows}

        assert hs.disable("a")
        assert statuses(chunks_coll) == statuses(titles_coll) == {"a": "disabled", "b": "ready"}
        assert [r.resource_id for r in hs.search("copper", paths=["bm25", "title"]).results] == ["b"]
        disabled = lexical.search(["copper"], limit=10, filters=Filters(statuses=("disabled",)))
        assert [h.detail["resource_id"] for h in disabled] == ["a"]
        assert hs.enable("a")
        assert statuses(chunks_coll) == {"a": "ready", "b": "ready"}
        # a status write that reached Milvus but not the store: the plan re-indexes the row
        rowid, chunk_id = hs.components.store.connection().execute(
            "SELECT id, chunk_id FROM chunks WHERE resource_id = 'a'"
        ).fetchone()
        client.upsert(
            chunks_coll,
            [{"id": rowid, "chunk_id": chunk_id, "resource_id": "a", "tenant": "", "acl": [],
              "status": "disabled", "text": "Lantern\nLantern\nthe copper lantern glows",
              "text_cjk": ""}],
        )
        plan = build_plan(hs.components.store, lexical, None, hs.settings)
        assert plan.counts()["missing_fts_rows"] == 1
        assert apply_plan(plan, hs.components.store, None, hs.components.writer(), hs.settings).ok
        assert statuses(chunks_coll) == {"a": "ready", "b": "ready"}
        assert build_plan(hs.components.store, lexical, None, hs.settings).is_empty


# -- tantivy -------------------------------------------------------------------------------------


def _tantivy_row(hs: HybridSearch, rowid: int, chunk_id: str, text: str) -> None:
    """Write one row into the tantivy chunk index behind the store's back (what a tantivy
    commit followed by a failed store commit leaves)."""
    lexical = hs.components.lexical
    side = lexical._chunks  # noqa: SLF001 - the test plays the crash the backend cannot see
    doc = side.t.Document
    side.write("test row", lambda w: (
        w.delete_documents_by_term("id", rowid),
        w.add_document(doc(id=rowid, chunk_hash=chunk_hash(chunk_id), resource="live",
                           tenant="", text=text)),
    ))


def test_tantivy_ranks_with_its_own_statistics_and_the_same_tokens(tmp_path: Path) -> None:
    with HybridSearch(_settings(tmp_path / "d", None, "tantivy")) as hs:
        hs.ingest("z", "Zürich has a café by the lake", title="Zürich")
        hs.ingest("b", "the lake is deep and the lake is cold", title="Lakes")
        lexical = hs.components.lexical
        assert lexical.doc_freqs(["zürich", "zurich", "lake", "absent"]) == {
            "zürich": 1, "zurich": 1, "lake": 2}
        assert lexical.total_chunks() == 2
        # a must term bounds the search natively: only rows holding it come back
        hits = lexical.search(["lake", "deep"], limit=10, filters=Filters(), must="café")
        assert [h.detail["resource_id"] for h in hits] == [resource_key("z", "")]
        # the title counts twice (the column weight 2): a word in one title and in the other's
        # body ranks the title first
        hs.ingest("t1", "tin and zinc and lead", title="Copper")
        hs.ingest("t2", "copper and zinc and lead", title="Tin")
        hits = lexical.search(["copper"], limit=2, filters=Filters())
        assert [h.detail["resource_id"] for h in hits] == [resource_key("t1", ""), resource_key("t2", "")]
        assert hits[0].score > hits[1].score > 0
    assert compose_tokens([("a b", 2.0), ("", 2.0), ("ç", 1.4)]) == "a b a b c"
    assert compose_tokens([("x", 0.4)]) == ""


def test_tantivy_refuses_other_column_weights(tmp_path: Path) -> None:
    with HybridSearch(_settings(tmp_path / "d", None, "tantivy")) as hs:
        hs.ingest("a", "some text", title="A")
    other = Settings(data_dir=tmp_path / "d", embedding={"model": "none"},
                     lexical={"backend": "tantivy", "title_weight": 3.0})
    with HybridSearch(other) as hs:
        with pytest.raises(ConfigError, match=r"title_weight': 2\.0.*title_weight': 3\.0"):
            hs.search("text", paths=["bm25"])


def test_a_stale_tantivy_row_under_a_live_id_is_never_shown_and_is_repaired(tmp_path: Path) -> None:
    with HybridSearch(_settings(tmp_path / "d", None, "tantivy")) as hs:
        hs.ingest("live", "the lighthouse keeper logs every ship", title="Lighthouse")
        lexical = hs.components.lexical
        rowid = hs.components.store.connection().execute("SELECT id FROM chunks").fetchone()[0]
        _tantivy_row(hs, rowid, "live@9#0", "sneakyword")
        _tantivy_row(hs, rowid + 50, "gone@1#0", "orphanword")  # a chunk that never committed
        assert not hs.search("sneakyword", paths=["bm25", "sag2"]).results
        assert not hs.search("orphanword", paths=["bm25", "sag2"]).results
        assert not hs.search("lighthouse keeper", paths=["bm25"]).results  # its row is gone
        plan = build_plan(hs.components.store, lexical, None, hs.settings)
        assert plan.counts()["missing_fts_rows"] == 1 and plan.counts()["orphan_fts_rows"] == 1
        report = apply_plan(plan, hs.components.store, None, hs.components.writer(), hs.settings)
        assert report.ok
        assert hs.search("lighthouse keeper", paths=["bm25"]).results[0].resource_id == "live"
        assert build_plan(hs.components.store, lexical, None, hs.settings).is_empty


def test_a_failed_tantivy_write_rolls_back_and_loses_nothing(tmp_path: Path) -> None:
    """A write whose tantivy commit cannot happen (another writer holds the index's lock)
    raises LexicalError and rolls the store back: the old version stays, whole."""
    import tantivy

    data = tmp_path / "d"
    with HybridSearch(_settings(data, None, "tantivy")) as hs:
        hs.ingest("keep", "the first version of this text", title="Keep")
        holder = tantivy.Index.open(str(data / "tantivy" / "chunks")).writer(15_000_000, 1)
        try:
            with pytest.raises(LexicalError, match="cannot open its writer"):
                hs.ingest("keep", "a second version that never lands", title="Keep")
        finally:
            holder.rollback()
            holder.wait_merging_threads()
        record = hs.components.store.get_resource("keep")
        assert record.version == 1 and record.status == "ready" and record.pending_version is None
        assert hs.search("first version", paths=["bm25"]).results[0].resource_id == "keep"
        assert not hs.search("never lands", paths=["bm25"]).results
        plan = build_plan(hs.components.store, hs.components.lexical, None, hs.settings)
        assert plan.is_empty, plan.counts()
