"""FTS5's ranking as a sum of per-phrase parts (``hybridsag.lexical.fts5_parts``) against FTS5's
own ``bm25()`` ranking, on real SQLite FTS5 tables made by the project's migration: the same
rows and the same scores bit for bit, for generated corpora and queries (common and rare words,
repeated terms, accents, a must term or phrase); and, through a real index, each phrase read
once per committed state of the table: a later search names no kept phrase to FTS5, and a
search after a write (an update, a delete) reads the phrases again and follows the write.

Hypothesis runs derandomized (the same examples every run) with a bounded example count.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from hybridsag.documents import make_document
from hybridsag.lexical.contract import LexicalQuery
from hybridsag.lexical.fts5 import FTS_MIGRATIONS
from hybridsag.lexical.fts5_parts import Fts5Parts, phrases_of, rank_by_parts
from hybridsag.lexical.fts5_topk import Fts5TopK
from hybridsag.lexical.queries import build_match
from hybridsag.records.filters import Filters
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings

from tests.unit.test_fts5_topk import COMMON, RARE, WEIGHTS, _SETTINGS, corpora

#: FTS5's whole ranking of a query, by score then row
FULL = (
    "SELECT rowid, bm25(chunks_fts, ?, ?, ?) AS s FROM chunks_fts WHERE chunks_fts MATCH ? "
    "ORDER BY s, rowid"
)


@st.composite
def queries(draw: st.DrawFn) -> tuple[list[str], str | None]:
    terms = draw(st.lists(st.sampled_from(COMMON + RARE + ["absent", "w1 w2"]), max_size=8))
    must = draw(st.one_of(st.none(), st.sampled_from(COMMON + RARE), st.just("w1 w2")))
    return terms, must


def _table(rows: list[tuple[str, str, str]]) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    for _, sql in FTS_MIGRATIONS:
        conn.executescript(sql)
    conn.executemany(
        "INSERT INTO chunks_fts(rowid, title, heading, body) VALUES (?, ?, ?, ?)",
        [(3 * i + 7, *row) for i, row in enumerate(rows)],  # rows with gaps, as after deletes
    )
    return conn


def _summed(parts: Fts5Parts, topk: Fts5TopK, conn, terms, must) -> list[tuple[int, float]]:
    conn.execute("BEGIN")
    try:
        stats = topk.stats(conn)
        phrases = phrases_of(terms, must)
        kept = parts.parts(conn, stats, phrases, WEIGHTS, build_match)
        rows, scores = rank_by_parts([kept[p] for p in phrases], must=bool(must))
    finally:
        conn.execute("COMMIT")
    return list(zip(rows.tolist(), scores.tolist()))


@_SETTINGS
@given(rows=corpora(), asked=st.lists(queries(), min_size=1, max_size=5))
def test_the_summed_parts_are_fts5s_ranking_bit_for_bit(rows, asked) -> None:
    conn = _table(rows)
    parts, topk = Fts5Parts("chunks_fts"), Fts5TopK("chunks_fts", "chunks_vocab")
    for terms, must in asked:
        match = build_match(terms, must=must)
        want = conn.execute(FULL, [*WEIGHTS, match]).fetchall() if match else []
        assert _summed(parts, topk, conn, terms, must) == want, (terms, must)


def test_kept_parts_follow_every_committed_write() -> None:
    """The parts are kept per state of the table: after an insert, an update and a delete the
    sums are FTS5's ranking of the new state (the row count and document frequencies moved)."""
    rows = [("", "", "film w1 " * (1 + i % 3) + f"w{i % 5 + 2}") for i in range(40)]
    conn = _table(rows)
    parts, topk = Fts5Parts("chunks_fts"), Fts5TopK("chunks_fts", "chunks_vocab")
    terms = ["film", "w1", "w3"]

    def same() -> None:
        want = conn.execute(FULL, [*WEIGHTS, build_match(terms)]).fetchall()
        assert _summed(parts, topk, conn, terms, None) == want

    same()
    conn.execute("INSERT INTO chunks_fts(rowid, title, heading, body) VALUES (1, '', '', 'w3 w3')")
    same()
    conn.execute("UPDATE chunks_fts SET body = 'film film film' WHERE rowid = 7")
    same()
    conn.execute("DELETE FROM chunks_fts WHERE rowid = 1")
    same()
    assert 1 not in {r for r, _ in _summed(parts, topk, conn, terms, None)}


def _lexical_only(data: Path) -> Settings:
    return Settings(data_dir=data, embedding={"model": "none"})


def _docs(n: int, extra: str = "") -> list:
    return [
        make_document(
            f"doc-{i}", f"the apple river {'lantern ' * (i % 3)}quillon {i} {extra}",
            title=f"Doc {i}",
        )
        for i in range(n)
    ]


def test_a_phrase_is_read_once_per_state_and_a_write_is_followed(tmp_path: Path) -> None:
    """A second ranking of the same terms (two queries at once, as SAG2's next-hop round asks)
    names none of them to FTS5 (their parts are kept), nor does one query of them alone then; a
    ranking after an update or a delete reads them again: the updated document ranks by its new
    text and the deleted one is never found. Statements counted on the real connection with
    SQLite's trace callback."""
    with HybridSearch(_lexical_only(tmp_path / "d")) as hs:
        assert hs.ingest_documents(_docs(12)).indexed == 12
        lexical, store = hs.components.lexical, hs.components.store
        terms = lexical.query_terms("lantern apple")

        def search(alone: bool = False) -> tuple[list[tuple[str, float]], list[str]]:
            seen: list[str] = []
            conn = store.connection()
            conn.set_trace_callback(seen.append)
            queries = [LexicalQuery(tuple(terms))]
            if not alone:
                queries.append(LexicalQuery(tuple(terms), must="apple"))
            try:
                hits = lexical.search_many(queries, limit=5, filters=Filters())[0]
            finally:
                conn.set_trace_callback(None)
            named = [s for s in seen if '"lantern"' in s]
            return [(h.chunk_id, h.raw_score) for h in hits], named

        first, named = search()
        assert named, "the first search reads the phrase's parts"
        again, named = search()
        assert again == first and not named, named
        alone, named = search(alone=True)
        assert alone == first and not named, named

        # an update: doc-1 (no lantern before) now says it six times and leads
        hs.ingest_documents([make_document("doc-1", "lantern " * 6 + "apple", title="Doc 1")])
        updated, named = search()
        assert named, "a write makes the kept parts stale: they are read again"
        leader = updated[0][0]
        assert store.chunks([leader])[leader].key.endswith("doc-1")
        assert updated != first

        # a delete: the leading document is gone from every later search
        assert hs.delete("doc-1")
        after, named = search()
        assert named
        assert leader not in {cid for cid, _ in after} and len(after) == 5
