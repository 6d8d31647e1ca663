"""The bounded BM25 top k (``hybridsag.lexical.fts5_topk``) against FTS5's own full ranking, on real
SQLite FTS5 tables made by the project's migration: the same rows and the same scores, for
generated corpora and queries (common and rare words, repeated terms, accents, a must term or
phrase), and the document frequencies it keeps follow every committed write.

Hypothesis runs derandomized (the same examples every run) with a bounded example count.
"""

from __future__ import annotations

import math
import random
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridsag.lexical.fts5_topk import Fts5TopK, fts5_varints, term_bound
from hybridsag.lexical.fts5 import FTS_MIGRATIONS
from hybridsag.lexical.queries import build_match

WEIGHTS = (2.0, 2.0, 1.0)
#: a vocabulary with a Zipf-like shape: a few words in most rows, many in few
COMMON = ["film", "born", "first", "director", "the", "song"]
RARE = [f"w{i}" for i in range(40)] + ["café", "cafe", "naïve", "zürich", "x-ray", "3.5"]
PLAIN = (
    "SELECT rowid, bm25(chunks_fts, ?, ?, ?) AS s FROM chunks_fts WHERE chunks_fts MATCH ? "
    "ORDER BY s, rowid LIMIT ?"
)

_SETTINGS = settings(
    max_examples=60,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _table() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    for _, sql in FTS_MIGRATIONS:
        conn.executescript(sql)
    return conn


#: a word: common twice as often as rare
_WORD = st.one_of(st.sampled_from(COMMON), st.sampled_from(COMMON), st.sampled_from(RARE))
#: up to n words, per n a _words call asks for: built once (a strategy made afresh for every
#: field of every row cost hypothesis most of this module's time; the draws are the same)
_WORD_LISTS = {n: st.lists(_WORD, min_size=0, max_size=n) for n in (2, 3, 25)}


def _words(draw: st.DrawFn, n: int) -> str:
    return " ".join(draw(_WORD_LISTS[n]))


@st.composite
def corpora(draw: st.DrawFn) -> list[tuple[str, str, str]]:
    rows = draw(st.integers(min_value=30, max_value=120))
    return [(_words(draw, 3), _words(draw, 2), _words(draw, 25)) for _ in range(rows)]


@st.composite
def queries(draw: st.DrawFn) -> tuple[list[str], str | None]:
    terms = draw(
        st.lists(st.sampled_from(COMMON + RARE + ["absent"]), min_size=1, max_size=7)
    )
    must = draw(st.one_of(st.none(), st.sampled_from(COMMON + RARE), st.just("w1 w2")))
    return terms, must


def _fill(conn: sqlite3.Connection, rows: list[tuple[str, str, str]]) -> None:
    conn.executemany(
        "INSERT INTO chunks_fts(rowid, title, heading, body) VALUES (?, ?, ?, ?)",
        [(i + 1, *row) for i, row in enumerate(rows)],
    )


def _plain(conn: sqlite3.Connection, terms: list[str], must: str | None, k: int) -> list:
    return conn.execute(PLAIN, [*WEIGHTS, build_match(terms, must=must), k]).fetchall()


def _bounded(topk: Fts5TopK, conn: sqlite3.Connection, terms, must, k: int):
    conn.execute("BEGIN")
    try:
        return topk.top(
            conn, terms=terms, must=must, weights=WEIGHTS, k=k, min_postings=0,
            build_match=build_match,
        )
    finally:
        conn.execute("COMMIT")


def _assert_same_top(plain: list, bounded: list) -> None:
    """Same scores in order; the same rows wherever the score is not tied with the last."""
    assert len(bounded) == len(plain)
    for (_, a), (_, b) in zip(plain, bounded, strict=True):
        assert b == pytest.approx(a, rel=1e-9, abs=1e-12)
    if plain:
        last = plain[-1][1]
        above = {r for r, s in plain if s < last - 1e-9}
        assert above <= {r for r, _ in bounded}


@_SETTINGS
@given(
    rows=corpora(),
    asked=st.lists(queries(), min_size=1, max_size=4),
    k=st.sampled_from([1, 3, 10]),
)
def test_the_bounded_top_k_is_fts5s_top_k(rows, asked, k) -> None:
    conn = _table()
    _fill(conn, rows)
    topk = Fts5TopK("chunks_fts", "chunks_vocab")
    for terms, must in asked:
        bounded = _bounded(topk, conn, terms, must, k)
        if bounded is not None:  # None: the caller runs the plain statement
            _assert_same_top(_plain(conn, terms, must, k), bounded)


def test_a_common_word_is_left_out_and_the_answer_stays_exact() -> None:
    """Most rows hold "film"; few hold "w1": the bound answers (no fallback) with FTS5's rows."""
    conn = _table()
    rows = [("", "", "film " * (1 + i % 3) + ("w1 " if i % 25 == 0 else "") + f"w{i % 7 + 2}")
            for i in range(400)]
    _fill(conn, rows)
    topk = Fts5TopK("chunks_fts", "chunks_vocab")
    for terms, must in [(["film", "w1"], None), (["w1", "film", "film"], None),
                        (["film", "w1"], "film")]:
        bounded = _bounded(topk, conn, terms, must, 5)
        assert bounded is not None, terms
        _assert_same_top(_plain(conn, terms, must, 5), bounded)


def test_a_left_out_word_is_never_given_to_fts5() -> None:
    """The bound's statements never name a left-out word (``bm25()`` would walk its postings to
    count its rows); its part of each score comes from the rows' stored tokens. Counted on the
    real connection with SQLite's trace callback (which shows the bound parameters)."""
    conn = _table()
    rows = [("", "", "film " * (1 + i % 3) + ("w1 " if i % 25 == 0 else "") + f"w{i % 7 + 2}")
            for i in range(400)]
    _fill(conn, rows)
    topk = Fts5TopK("chunks_fts", "chunks_vocab")
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    try:
        bounded = _bounded(topk, conn, ["film", "w1", "w3"], None, 5)
    finally:
        conn.set_trace_callback(None)
    assert bounded is not None
    _assert_same_top(_plain(conn, ["film", "w1", "w3"], None, 5), bounded)
    matches = [q for q in seen if "MATCH" in q and not q.startswith("--")]
    assert matches and not any('"film"' in q for q in matches), matches


def test_a_row_whose_tokens_fts5_splits_otherwise_runs_the_plain_statement() -> None:
    """A stored token that FTS5's unicode61 splits in two (an apostrophe is a separator to it)
    cannot be counted from the row's text as FTS5 counted it: the bound declines."""
    conn = _table()
    rows = [("", "", "film " * (1 + i % 3) + f"w{i % 7 + 2}") for i in range(400)]
    rows[0] = ("", "", "film o'brien w1 w1 w1")  # the best row for w1: read for its film part
    _fill(conn, rows)
    topk = Fts5TopK("chunks_fts", "chunks_vocab")
    assert _bounded(topk, conn, ["film", "w1"], None, 1) is None
    rows[0] = ("", "", "film obrien w1 w1 w1")
    conn.execute("DELETE FROM chunks_fts")
    _fill(conn, rows)
    bounded = _bounded(topk, conn, ["film", "w1"], None, 1)
    assert bounded is not None and bounded[0][0] == 1
    _assert_same_top(_plain(conn, ["film", "w1"], None, 1), bounded)


def test_on_a_zipf_corpus_most_searches_are_bounded_and_all_are_exact() -> None:
    """A seeded corpus whose word frequencies fall as 1/rank, as text's do: most queries mix a
    few very common words with rarer ones, and the bound answers most of them exactly."""
    rng = random.Random(17)
    vocab = [f"t{i}" for i in range(300)]
    weights = [1.0 / (i + 1) for i in range(len(vocab))]
    conn = _table()
    _fill(conn, [(" ".join(rng.choices(vocab, weights, k=3)), "",
                  " ".join(rng.choices(vocab, weights, k=rng.randint(5, 60))))
                 for _ in range(1500)])
    topk = Fts5TopK("chunks_fts", "chunks_vocab")
    answered = asked = 0
    for _ in range(120):
        common = rng.choices(vocab[:8], k=rng.randint(1, 3))
        terms = common + rng.sample(vocab[20:], rng.randint(1, 3))
        must = rng.choice([None, None, rng.choice(vocab[20:])])
        k = rng.choice([5, 20, 60])
        bounded = _bounded(topk, conn, terms, must, k)
        asked += must is None
        if bounded is not None:
            answered += must is None
            _assert_same_top(_plain(conn, terms, must, k), bounded)
    assert answered >= asked * 0.6, (answered, asked)


def test_too_few_postings_or_no_common_term_runs_the_plain_statement() -> None:
    conn = _table()
    _fill(conn, [("", "", f"w{i % 30} w{(i * 7) % 30}") for i in range(200)])
    topk = Fts5TopK("chunks_fts", "chunks_vocab")
    conn.execute("BEGIN")
    try:
        assert topk.top(conn, terms=["w1", "w2"], must=None, weights=WEIGHTS, k=5,
                        min_postings=10_000, build_match=build_match) is None
        # one term alone has nothing to leave out
        assert topk.top(conn, terms=["w1"], must=None, weights=WEIGHTS, k=5,
                        min_postings=0, build_match=build_match) is None
    finally:
        conn.execute("COMMIT")


def test_document_frequencies_follow_every_committed_write() -> None:
    conn = _table()
    _fill(conn, [("", "", "film w1")] * 3)
    topk = Fts5TopK("chunks_fts", "chunks_vocab")
    assert topk.doc_freqs(conn, ["film", "w1", "w2"]) == {"film": 3, "w1": 3}
    assert topk.stats(conn).rows == 3
    conn.execute("INSERT INTO chunks_fts(rowid, title, heading, body) VALUES (9, '', '', 'w2')")
    assert topk.doc_freqs(conn, ["film", "w2"]) == {"film": 3, "w2": 1}
    assert topk.stats(conn).rows == 4
    conn.execute("DELETE FROM chunks_fts WHERE rowid IN (1, 9)")
    assert topk.doc_freqs(conn, ["film", "w1", "w2"]) == {"film": 2, "w1": 2}
    assert topk.stats(conn).rows == 2


def test_the_averages_record_is_read_as_fts5_writes_it() -> None:
    conn = _table()
    _fill(conn, [("a b", "", "c d e"), ("a", "x", "")])
    (block,) = conn.execute("SELECT block FROM chunks_fts_data WHERE id = 1").fetchone()
    assert fts5_varints(block) == [2, 3, 1, 3]  # rows, then each column's tokens
    assert fts5_varints(bytes([0x81, 0x00, 0x7F])) == [128, 127]


def test_a_bound_is_never_below_what_a_term_adds() -> None:
    """The most any weighted count can add (FTS5's formula at a huge count) stays under it."""
    for rows, hits in [(10, 1), (1000, 400), (1000, 900), (10**6, 3)]:
        bound = term_bound(rows, hits)
        idf = max(math.log((rows - hits + 0.5) / (hits + 0.5)), 0) or 1e-6
        for freq, length_ratio in [(1e9, 0.01), (50.0, 0.0), (1.0, 3.0)]:
            part = idf * freq * 2.2 / (freq + 1.2 * (0.25 + 0.75 * length_ratio))
            assert part <= bound
